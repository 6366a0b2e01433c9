"""A steward's review or repair path, recorded as an action episode.

Every decision a steward carries out on a quarantined memory (promote, retire) and every
repair a steward writes is an action taken with a result observed: it is admitted as an
``action`` episode (source ``steward:<name>``) whose steps are *why the memory was
quarantined* → *what the steward did*, result the state it reached, outcome
``success`` when the decision was carried out, and for a repair when its new version
was not quarantined again. :mod:`.distill` turns a path that succeeded
``procedure_min_successes`` times into a procedure in the procedural layer — how this
kind of quarantine is resolved — with its success rate.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from hirmem.memory.model import Memory, State

if TYPE_CHECKING:  # the engine imports this module
    from hirmem.memory.engine import MemoryEngine

__all__ = ["record_path"]


def _why(m: Memory) -> str:
    """Where the path starts: the quarantine's reason without a parenthesised detail."""
    if m.state is not State.QUARANTINED:
        return f"{m.state.name.lower()} memory"
    reason = m.quarantine_reason or "no reason recorded"
    return "quarantined for " + reason.split(" (", 1)[0][:120]


def record_path(
    engine: MemoryEngine, m: Memory, step: str, result: State, actor: str, ok: bool = True
) -> None:
    """Admit the path ``<where it started> → <step>`` as an action episode; ``ok`` is its
    outcome (a repair whose new version was quarantined again did not succeed)."""
    payload = json.dumps(
        {
            "action": [_why(m), step],
            "result": result.name.lower(),
            "outcome": "success" if ok else "failure",
            "memory": m.id,
        }
    )
    engine.admit(payload, actor)
