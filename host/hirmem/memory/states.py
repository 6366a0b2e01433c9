"""The lifecycle state machine: only these transitions are legal.

=============  ===============  ====================================================
from           to               why
=============  ===============  ====================================================
volatile       candidate        stage 3: the gate passes (GREEN or YELLOW, no hard fail)
volatile       quarantined      stage 3: RED, hard fail or W = 0
candidate      consolidated     stage 5: Rn ≥ 0.75 at the gate, or reinforced to the
                                promotion strength
candidate      quarantined      stage 7: contradiction or corruption
candidate      archived         strength fell below the archive threshold; superseded
consolidated   quarantined      stage 7: contradiction or corruption
consolidated   archived         strength fell below the archive threshold; superseded
quarantined    candidate        a human steward re-promotes it (never when R = 0)
quarantined    archived         a human steward retires it (preserved, read-only)
=============  ===============  ====================================================

Archived is terminal: read-only, chain preserved. Volatile memories may also be
*evicted* from the bounded working ring (the only removal the engine ever does, and
it is audited); no other state can be removed.
"""

from __future__ import annotations

from hirmem.memory.model import State
from hirmem.protocol.errors import HirmemError

__all__ = ["LEGAL", "IllegalTransition", "check_transition", "is_legal"]

LEGAL: frozenset[tuple[State, State]] = frozenset(
    {
        (State.VOLATILE, State.CANDIDATE),
        (State.VOLATILE, State.QUARANTINED),
        (State.CANDIDATE, State.CONSOLIDATED),
        (State.CANDIDATE, State.QUARANTINED),
        (State.CANDIDATE, State.ARCHIVED),
        (State.CONSOLIDATED, State.QUARANTINED),
        (State.CONSOLIDATED, State.ARCHIVED),
        (State.QUARANTINED, State.CANDIDATE),
        (State.QUARANTINED, State.ARCHIVED),
    }
)


class IllegalTransition(HirmemError):
    """A state change the lifecycle does not allow; names both states."""

    def __init__(self, memory_id: str, old: State, new: State) -> None:
        allowed = sorted(s.name.lower() for a, s in LEGAL if a is old)
        hint = ", ".join(allowed) if allowed else "nothing (terminal state)"
        super().__init__(
            f"memory {memory_id}: illegal transition {old.name.lower()} → {new.name.lower()}; "
            f"from {old.name.lower()} the lifecycle allows {hint}"
        )
        self.old = old
        self.new = new


def is_legal(old: State, new: State) -> bool:
    return (old, new) in LEGAL


def check_transition(memory_id: str, old: State, new: State) -> None:
    """Raise :class:`IllegalTransition` unless ``old → new`` is in :data:`LEGAL`."""
    if (old, new) not in LEGAL:
        raise IllegalTransition(memory_id, old, new)
