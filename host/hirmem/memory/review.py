"""Quarantine review: only a human steward re-promotes a quarantined memory.

Quarantined memories are preserved with their audit trace (MEM-INV-3). A steward
decides one of:

* ``promote`` — quarantined → candidate at no less than ``review_strength`` (audited),
  then the consolidation rule of stage 5 applies (Rn ≥ green consolidates).
* ``retire`` — quarantined → archived (read-only, preserved).

Permanent quarantine (R = 0: a domination pattern, or consent not enforced; MEM-INV-2)
admits only ``keep``: such a memory stays quarantined, preserved, forever.
* ``keep`` — stays quarantined; the decision is recorded all the same.

Every decision names the steward and the reason; both are stored in the append-only
``reviews`` table and in the audit chain (actor ``steward:<name>``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hirmem.memory.model import Memory, State
from hirmem.protocol.errors import HirmemError

if TYPE_CHECKING:
    from hirmem.memory.engine import MemoryEngine

__all__ = ["DECISIONS", "Decision", "decide", "decisions", "pending", "pending_count"]

DECISIONS = ("promote", "retire", "keep")


@dataclass(frozen=True)
class Decision:
    seq: int
    memory_id: str
    steward: str
    decision: str
    reason: str
    ts: float
    audit_seq: int


def pending(engine: MemoryEngine, limit: int | None = None, after: int = 0) -> list[Memory]:
    """Quarantined memories, oldest first (permanent ones included: they stay listed);
    at most ``limit`` of them, from the rowid after ``after`` (a page). Answered from
    the (state, layer) index: the recall index is not loaded."""
    tail = "ORDER BY rowid" + (f" LIMIT {int(limit)}" if limit is not None else "")
    return engine.store.select(
        "state = ? AND rowid > ?", (int(State.QUARANTINED), int(after)), tail=tail
    )


def pending_count(engine: MemoryEngine) -> int:
    return engine.store.count("state = ?", (int(State.QUARANTINED),))


def decide(
    engine: MemoryEngine, memory_id: str, steward: str, decision: str, reason: str
) -> Decision:
    """Record a steward's decision on a quarantined memory and carry it out."""
    if not steward.strip() or ":" in steward:
        raise HirmemError("a review needs the steward's name (non-empty, no ':')")
    if not reason.strip():
        raise HirmemError("a review needs a reason: say why the steward decided this")
    if decision not in DECISIONS:
        raise HirmemError(f"decision must be one of {DECISIONS}, got {decision!r}")
    with engine.store.transaction():  # read, check and decide as one step of the writer
        return _decide(engine, memory_id, steward, decision, reason)


def _decide(
    engine: MemoryEngine, memory_id: str, steward: str, decision: str, reason: str
) -> Decision:
    m = engine.require(memory_id)
    if m.state is not State.QUARANTINED:
        raise HirmemError(
            f"memory {memory_id} is {m.state.name.lower()}, not quarantined: nothing to review"
        )
    if decision != "keep" and m.permanent:
        raise HirmemError(
            f"memory {memory_id} is in permanent quarantine (R = 0: domination or no consent, "
            "MEM-INV-2); a steward may record a 'keep' decision, never promote or retire it"
        )
    actor = f"steward:{steward}"
    now = engine.clock()
    with engine.store.transaction():
        seq = engine.audit.append(
            "review", memory_id, {"decision": decision, "reason": reason}, actor=actor, ts=now
        )
        cur = engine.store.db.execute(  # the writer's connection: inside its transaction
            "INSERT INTO reviews(memory_id, steward, decision, reason, ts, audit_seq) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (memory_id, steward, decision, reason, now, seq),
        )
        if decision == "promote":
            y = engine.transition(m, State.CANDIDATE, f"steward review: {reason}", actor=actor)
            # the steward vouches for it: it does not come back at the strength the
            # pressure left it (0 would archive it at the next sweep)
            y = engine.restore_strength(
                y.id, engine.config.review_strength, "promoted by steward", actor
            )
            if y.rn >= engine.config.green and y.h > 0:
                engine.transition(y, State.CONSOLIDATED, "Rn ≥ green after review", actor=actor)
        elif decision == "retire":
            engine.transition(m, State.ARCHIVED, f"steward review: {reason}", actor=actor)
        else:
            engine.store.update(m.replace(audit_seq=seq))
    return Decision(int(cur.lastrowid or 0), memory_id, steward, decision, reason, now, seq)


def decisions(engine: MemoryEngine, memory_id: str | None = None) -> list[Decision]:
    sql = "SELECT seq, memory_id, steward, decision, reason, ts, audit_seq FROM reviews"
    params: tuple[str, ...] = ()
    if memory_id is not None:
        sql += " WHERE memory_id = ?"
        params = (memory_id,)
    with engine.store.reading() as db:
        return [Decision(*row) for row in db.execute(sql + " ORDER BY seq", params)]
