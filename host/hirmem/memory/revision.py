"""Revision by time: a newer observation supersedes the older one; flags that clear.

Bi-temporal in the way of Graphiti's edges: every stated fact (``kind == "fact"`` with a
subject and a single-valued attribute) is valid from its capture time until a later
observation of the same (subject, attribute) says otherwise. Then the older one gets an
end of validity (``valid_to`` = the newer one's capture time, ``superseded_by`` = its id)
in the ``validity`` table, an audited ``supersede`` record, and nothing else: it stays
in its state as history, its strength untouched. An observation that arrives late (older
than one already held) is history at once when a later one disagrees with it. If the
newer claim is later quarantined, the supersession is revoked (:func:`revoke`, audited).

Agreeing observations continue one validity: each row says which later observation
continued it (``change = 0``), and the end of a run is the end of its last member;
only a change (``change = 1``) is a supersession. observations within
``simultaneity_s`` of each other that disagree are a contradiction
(:mod:`.contradiction`), never a supersession, and a claim so disputed (flagged) ends
nothing's validity. Readings are a series and are never
revised (their pattern is distilled, :mod:`.distill`).

Contradiction flags clear: :func:`settle_flags` unflags (audited) a flagged memory
once nothing live contradicts it any more — its opponent was quarantined, archived or
superseded — so a flagged winner is not stuck as a candidate; only then does it
revise older observations and feed its pattern (a disputed claim does neither).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hirmem.memory import distill
from hirmem.memory.contradiction import find_conflicts, same_value, single_valued
from hirmem.memory.model import Memory, State

if TYPE_CHECKING:  # the engine imports this module
    from hirmem.memory.engine import MemoryEngine

__all__ = ["SCHEMA", "Validity", "ensure_schema", "revise", "revoke", "settle_flags",
           "supersessions", "validity"]  # fmt: skip

SCHEMA = """
CREATE TABLE IF NOT EXISTS validity (
    memory_id TEXT PRIMARY KEY,
    valid_to INTEGER NOT NULL,
    superseded_by TEXT NOT NULL,
    change INTEGER NOT NULL
)
"""

_LIVE = (int(State.CANDIDATE), int(State.CONSOLIDATED))
_BASE = "subject = ? AND attribute = ? AND kind = 'fact' AND state IN (?, ?) AND id != ?"


@dataclass(frozen=True)
class Validity:
    valid_from: int  # ms, the capture time
    valid_to: int | None  # ms, None while current
    superseded_by: str


def ensure_schema(engine: MemoryEngine) -> None:
    engine.store.db.execute(SCHEMA)


def validity(engine: MemoryEngine, m: Memory) -> Validity:
    """When ``m`` stopped holding: the end of its run of agreeing observations."""
    row = engine.store.db.execute(
        "WITH RECURSIVE run(id, valid_to, by, change) AS ("
        " SELECT memory_id, valid_to, superseded_by, change FROM validity WHERE memory_id = ?"
        " UNION ALL SELECT v.memory_id, v.valid_to, v.superseded_by, v.change"
        " FROM validity v JOIN run ON v.memory_id = run.by WHERE run.change = 0)"
        " SELECT valid_to, by FROM run WHERE change = 1 LIMIT 1",
        (m.id,),
    ).fetchone()
    if row is None:
        return Validity(m.timestamp, None, "")
    return Validity(m.timestamp, int(row[0]), str(row[1]))


def supersessions(engine: MemoryEngine) -> int:
    """How many changes of value made older observations history (one per newer
    observation that brought a change, however many simultaneous ones it ended)."""
    row = engine.store.db.execute(
        "SELECT count(DISTINCT superseded_by) FROM validity WHERE change = 1"
    ).fetchone()
    return int(row[0])


def _revisable(m: Memory, engine: MemoryEngine) -> bool:
    return (
        m.kind == "fact"
        and bool(m.subject and m.attribute)
        and m.state in (State.CANDIDATE, State.CONSOLIDATED)
        and single_valued(m.attribute, engine.config)
    )


def _agree(a: Memory, b: Memory, engine: MemoryEngine) -> bool:
    return a.negated == b.negated and same_value(a.value, b.value, engine.config)


def _end(engine: MemoryEngine, older: Memory, newer: Memory, change: bool) -> None:
    """``older`` holds until ``newer``: continued by it (agreeing) or superseded (not).
    Idempotent: revising the same pair again writes nothing."""
    held = engine.store.db.execute(
        "SELECT superseded_by, change FROM validity WHERE memory_id = ?", (older.id,)
    ).fetchone()
    if held is not None and (str(held[0]), int(held[1])) == (newer.id, int(change)):
        return
    engine.store.db.execute(
        "INSERT INTO validity (memory_id, valid_to, superseded_by, change) VALUES (?, ?, ?, ?) "
        "ON CONFLICT(memory_id) DO UPDATE SET valid_to = excluded.valid_to, "
        "superseded_by = excluded.superseded_by, change = excluded.change",
        (older.id, newer.timestamp, newer.id, int(change)),
    )
    if not change:
        return
    seq = engine.audit.append(
        "supersede", older.id,
        {"superseded_by": newer.id, "valid_to": newer.timestamp, "value": older.value,
         "new_value": newer.value},
        ts=engine.clock(),
    )  # fmt: skip
    engine.store.db.execute("UPDATE memories SET audit_seq = ? WHERE id = ?", (seq, older.id))


def revise(engine: MemoryEngine, m: Memory) -> list[str]:
    """Place ``m`` in time among the observations of its attribute: the one current
    before it is continued (agreeing) or superseded (not) by it, and ``m`` itself is
    continued or superseded at once by a later one already held (a late arrival).
    Returns the ids that got an end of validity."""
    if not _revisable(m, engine) or m.flagged:
        return []  # a disputed claim (in an open contradiction) ends nothing's validity
    window = int(engine.config.simultaneity_s * 1000)
    key = (m.subject, m.attribute, *_LIVE, m.id)
    ended: list[str] = []
    # what held just before m: the latest earlier observation still valid at m, with
    # any agreeing one made at the same time (a bounded look-back)
    rows = engine.store.db.execute(
        "SELECT id, timestamp FROM memories LEFT JOIN validity "
        f"ON validity.memory_id = memories.id WHERE {_BASE} AND timestamp < ? "
        "AND (valid_to IS NULL OR valid_to > ?) ORDER BY timestamp DESC, id LIMIT 16",
        (*key, m.timestamp - window, m.timestamp),
    ).fetchall()
    for mid, ts in rows:
        if ts < rows[0][1] - window:
            break
        prior = engine.require(str(mid))
        change = not _agree(prior, m, engine)
        _end(engine, prior, m, change)
        if change:
            ended.append(prior.id)
    later = engine.store.select(
        _BASE + " AND timestamp > ?", (*key, m.timestamp + window),
        "ORDER BY timestamp, rowid LIMIT 1",  # ties by rowid, whatever the engine's plan
    )  # fmt: skip
    if later:
        change = not _agree(m, later[0], engine)
        _end(engine, m, later[0], change)
        if change:
            ended.append(m.id)
    return ended


def revoke(engine: MemoryEngine, m: Memory) -> int:
    """``m`` was quarantined: what it continued or superseded holds again (audited)."""
    rows = engine.store.db.execute(
        "SELECT memory_id, change FROM validity WHERE superseded_by = ?", (m.id,)
    ).fetchall()
    for older, change in rows:
        engine.store.db.execute("DELETE FROM validity WHERE memory_id = ?", (older,))
        if change:
            seq = engine.audit.append(
                "supersede", str(older),
                {"superseded_by": m.id, "reason": "revoked: the newer claim was quarantined"},
                ts=engine.clock(),
            )  # fmt: skip
            engine.store.db.execute(
                "UPDATE memories SET audit_seq = ? WHERE id = ?", (seq, str(older))
            )
    return len(rows)


def settle_flags(engine: MemoryEngine, ids: Iterable[str]) -> list[str]:
    """Unflag every flagged memory of ``ids`` that nothing live contradicts any more."""
    cleared: list[str] = []
    for mid in dict.fromkeys(ids):
        m = engine.get(mid)
        if m is None or not m.flagged or m.state not in (State.CANDIDATE, State.CONSOLIDATED):
            continue
        if find_conflicts(engine.store, m, engine.config):
            continue
        seq = engine.audit.append(
            "unflag", m.id, {"reason": "no live memory contradicts it any more"},
            ts=engine.clock(),
        )  # fmt: skip
        m = engine._save(m.replace(flagged=False, audit_seq=seq))
        cleared.append(m.id)
        # no longer disputed: it now revises and feeds its pattern like any observation
        revise(engine, m)
        distill.on_episode(engine, m)
    return cleared
