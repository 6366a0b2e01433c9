"""Contradiction and corruption detection (stage 7).

Three kinds of conflict are found:

* **value** — two live memories (candidate or consolidated) about the same subject and
  the same *single-valued* attribute that state different values *at the same time*
  (capture times within ``MemoryConfig.simultaneity_s``). Values that both read as
  numbers compare as numbers within the configured tolerance (``"21.8"`` equals
  ``"21.80"``), others after :func:`hirmem.protocol.identity.fold`. Attributes listed in
  ``MemoryConfig.multi_valued_attributes`` may hold several values and never conflict
  by value. Observations at different times do not conflict: the later one supersedes
  the earlier (:mod:`.revision`).
* **negation** — one memory asserts (subject, attribute, value) and another explicitly
  negates the same triple (``negated=True``) at the same time.

Only stated facts (``kind == "fact"``) conflict: a sensor reading is a sample of a
series, an action's outcome or an event's occurrence is not a claim another can
contradict.
* **corruption** — a memory's stored hash no longer matches the hash of its content
  (protocol §7.4): the content or the hash was altered after admission.

A memory's structured triple comes from the capture API, or from a JSON payload object
with ``subject``, ``attribute`` and ``value`` keys (and optionally ``negated``), which
is how device records carry one (read by :func:`hirmem.memory.observe.describe`).
Versions of one memory (a repair and what it supersedes) never conflict with each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from hirmem.memory.config import MemoryConfig
from hirmem.memory.model import Memory, State
from hirmem.memory.observe import number
from hirmem.memory.store import SUPERSEDED_BY, Store
from hirmem.protocol.identity import fold

__all__ = [
    "Conflict", "find_conflicts", "is_corrupted", "same_value", "single_valued",
]  # fmt: skip

_LIVE = (int(State.CANDIDATE), int(State.CONSOLIDATED))


@dataclass(frozen=True)
class Conflict:
    kind: str  # "value" or "negation"
    other: Memory


def _key(text: str) -> str:
    return fold(text)


def same_value(a: str, b: str, cfg: MemoryConfig) -> bool:
    """Equal as numbers within tolerance when both are numbers, else equal folded."""
    x, y = number(a), number(b)
    if x is not None and y is not None:
        tol = max(cfg.value_abs_tolerance, cfg.value_rel_tolerance * max(abs(x), abs(y)))
        return abs(x - y) <= tol
    return _key(a) == _key(b)


def single_valued(attribute: str, cfg: MemoryConfig) -> bool:
    return _key(attribute) not in {_key(a) for a in cfg.multi_valued_attributes}


def find_conflicts(store: Store, m: Memory, cfg: MemoryConfig) -> list[Conflict]:
    """Live memories that contradict ``m`` (empty when ``m`` has no structured triple)."""
    if not (m.subject and m.attribute) or m.kind != "fact":
        return []
    related = _versions(store, m)
    single = single_valued(m.attribute, cfg)
    out: list[Conflict] = []
    window = int(cfg.simultaneity_s * 1000)
    for other in store.select(
        "subject = ? AND attribute = ? AND kind = 'fact' AND state IN (?, ?) AND id != ? "
        "AND timestamp BETWEEN ? AND ?",
        (m.subject, m.attribute, *_LIVE, m.id, m.timestamp - window, m.timestamp + window),
    ):
        if other.id in related:
            continue
        same = same_value(other.value, m.value, cfg)
        if same and other.negated != m.negated:
            out.append(Conflict("negation", other))
        elif not same and single and not (other.negated or m.negated):
            out.append(Conflict("value", other))
    return out


def _versions(store: Store, m: Memory) -> set[str]:
    """Ids in ``m``'s version chain (what it supersedes, transitively, and its successors)."""
    seen = {m.id}
    todo = [m.id, m.supersedes] if m.supersedes else [m.id]
    while todo:
        current = todo.pop()
        if current and current not in seen:
            seen.add(current)
        row = store.get(current) if current else None
        if row is not None and row.supersedes and row.supersedes not in seen:
            todo.append(row.supersedes)
        for succ in store.select(SUPERSEDED_BY, (current,)):
            if succ.id not in seen:
                seen.add(succ.id)
                todo.append(succ.id)
    return seen


def is_corrupted(m: Memory) -> bool:
    """The stored hash does not match the content (the hash covers payload + provenance)."""
    return m.content_hash() != m.hash
