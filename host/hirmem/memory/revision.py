"""Revision by time: a newer observation supersedes the older one; flags that clear.

Bi-temporal in the way of Graphiti's edges: every stated fact (``kind == "fact"`` with a
subject and a single-valued attribute) is valid from its capture time until a later
observation of the same (subject, attribute) says otherwise. Then the older one gets an
end of validity (``valid_to`` = the newer one's capture time, ``superseded_by`` = its id)
in the ``validity`` table, an audited ``supersede`` record, and nothing else: it stays
in its state as history, its strength untouched. An observation that arrives late (older
than one already held) is history at once when a later one disagrees with it.

Agreeing observations continue one validity (no supersession); observations within
``simultaneity_s`` of each other that disagree are a contradiction
(:mod:`.contradiction`), never a supersession, and a claim so disputed (flagged) ends
nothing's validity. Readings are a series and are never
revised (their pattern is distilled, :mod:`.distill`).

Contradiction flags clear: :func:`settle_flags` unflags (audited) a flagged memory
once nothing live contradicts it any more — its opponent was quarantined, archived or
superseded — so a flagged winner is not stuck as a candidate.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hirmem.memory.contradiction import find_conflicts, same_value, single_valued
from hirmem.memory.model import Memory, State

if TYPE_CHECKING:  # the engine imports this module
    from hirmem.memory.engine import MemoryEngine

__all__ = ["SCHEMA", "Validity", "ensure_schema", "revise", "settle_flags", "supersessions",
           "validity"]  # fmt: skip

SCHEMA = """
CREATE TABLE IF NOT EXISTS validity (
    memory_id TEXT PRIMARY KEY,
    valid_to INTEGER NOT NULL,
    superseded_by TEXT NOT NULL
)
"""

_LIVE = (int(State.CANDIDATE), int(State.CONSOLIDATED))


@dataclass(frozen=True)
class Validity:
    valid_from: int  # ms, the capture time
    valid_to: int | None  # ms, None while current
    superseded_by: str


def ensure_schema(engine: MemoryEngine) -> None:
    engine.store.db.execute(SCHEMA)


def validity(engine: MemoryEngine, m: Memory) -> Validity:
    row = engine.store.db.execute(
        "SELECT valid_to, superseded_by FROM validity WHERE memory_id = ?", (m.id,)
    ).fetchone()
    if row is None:
        return Validity(m.timestamp, None, "")
    return Validity(m.timestamp, int(row[0]), str(row[1]))


def supersessions(engine: MemoryEngine) -> int:
    return int(engine.store.db.execute("SELECT count(*) FROM validity").fetchone()[0])


def _revisable(m: Memory, engine: MemoryEngine) -> bool:
    return (
        m.kind == "fact"
        and bool(m.subject and m.attribute)
        and m.state in (State.CANDIDATE, State.CONSOLIDATED)
        and single_valued(m.attribute, engine.config)
    )


def _agree(a: Memory, b: Memory, engine: MemoryEngine) -> bool:
    return a.negated == b.negated and same_value(a.value, b.value, engine.config)


def _end(engine: MemoryEngine, older: Memory, newer: Memory) -> None:
    engine.store.db.execute(
        "INSERT INTO validity (memory_id, valid_to, superseded_by) VALUES (?, ?, ?) "
        "ON CONFLICT(memory_id) DO UPDATE SET valid_to = excluded.valid_to, "
        "superseded_by = excluded.superseded_by",
        (older.id, newer.timestamp, newer.id),
    )
    seq = engine.audit.append(
        "supersede", older.id,
        {"superseded_by": newer.id, "valid_to": newer.timestamp, "value": older.value,
         "new_value": newer.value},
        ts=engine.clock(),
    )  # fmt: skip
    engine.store.db.execute("UPDATE memories SET audit_seq = ? WHERE id = ?", (seq, older.id))


def revise(engine: MemoryEngine, m: Memory) -> list[str]:
    """Supersede what ``m`` makes history (and make ``m`` history if a later observation
    already disagrees with it). Returns the ids that got an end of validity."""
    if not _revisable(m, engine) or m.flagged:
        return []  # a disputed claim (in an open contradiction) ends nothing's validity
    window = int(engine.config.simultaneity_s * 1000)
    base = "subject = ? AND attribute = ? AND kind = 'fact' AND state IN (?, ?) AND id != ?"
    key = (m.subject, m.attribute, *_LIVE, m.id)
    ended: list[str] = []
    # the observation current just before m: the latest earlier one still valid at m
    for prior in engine.store.select(
        base + " AND timestamp < ?", (*key, m.timestamp - window), "ORDER BY timestamp DESC"
    ):
        v = validity(engine, prior)
        if v.valid_to is not None and v.valid_to <= m.timestamp:
            continue  # already history before m
        if not _agree(prior, m, engine):
            _end(engine, prior, m)
            ended.append(prior.id)
        break
    # a later observation already held: m (arriving late) ends where it begins
    later = engine.store.select(
        base + " AND timestamp > ?", (*key, m.timestamp + window), "ORDER BY timestamp LIMIT 1"
    )
    if later and not _agree(m, later[0], engine):
        _end(engine, m, later[0])
        ended.append(m.id)
    return ended


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
        engine._save(m.replace(flagged=False, audit_seq=seq))
        cleared.append(m.id)
    return cleared
