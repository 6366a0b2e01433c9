"""Decisions (§6): what an agent knew, what it chose, under which rule, and what followed.

``Record {ID, Agent, Choice, Because[], Rule, At}`` — here :class:`Decision` (``Record`` is
an alias), with the verdict (``allowed``) and the policy's ``reason``.

Invariants:

- A refusal is a decision: :meth:`Decider.decide` records a refused choice with the rule
  that refused it and the reason it gave, and returns it; it never raises it away.
- ``because`` names assertion, entity or decision ids, checked by ``known`` when given.
- There is no stored prose rationale: "why" is :meth:`Cause.chain`, the walk over the
  decisions a decision rests on.
- A decision id is computed (SHA-256 over the decision's fields, 16 hex digits).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from hirmem.semantic.assertions import now_ms
from hirmem.semantic.errors import SemanticError

__all__ = ["Cause", "Decider", "Decision", "Policy", "Record", "Recorder"]


@dataclass(frozen=True, slots=True)
class Decision:
    id: str
    agent: str
    choice: str
    because: tuple[str, ...]
    rule: str
    at: int  # ms since the epoch
    allowed: bool
    reason: str


Record = Decision


def decision_id(agent: str, choice: str, because: Sequence[str], rule: str, at: int,
                allowed: bool) -> str:  # fmt: skip
    body = json.dumps([agent, choice, list(because), rule, at, allowed], ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


@runtime_checkable
class Policy(Protocol):
    """Answers before the act: may ``agent`` make ``choice``? ``(allowed, reason)``."""

    name: str

    def allow(self, agent: str, choice: str) -> tuple[bool, str]: ...


class Recorder:
    """Decisions in the order they were made."""

    def __init__(self) -> None:
        self._all: dict[str, Decision] = {}

    def __len__(self) -> int:
        return len(self._all)

    def record(self, d: Decision) -> Decision:
        held = self._all.get(d.id)
        if held is not None and held != d:
            raise SemanticError(f"decision {d.id} is already recorded differently")
        self._all[d.id] = d
        return d

    def get(self, id: str) -> Decision | None:
        return self._all.get(id)

    def by(self, agent: str) -> list[Decision]:
        return [d for d in self._all.values() if d.agent == agent]


class Cause:
    """``Chain(id)``: the decision and the decisions it rests on, nearest first."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def chain(self, id: str) -> list[Decision]:
        start = self.recorder.get(id)
        if start is None:
            raise SemanticError(f"no decision {id}")
        out: dict[str, Decision] = {}
        queue = [start]
        while queue:
            d = queue.pop(0)
            if d.id in out:
                continue
            out[d.id] = d
            queue.extend(x for b in d.because if (x := self.recorder.get(b)) is not None)
        return list(out.values())


class Decider:
    """Ask each policy in turn; the first refusal decides. Every outcome is recorded."""

    def __init__(
        self,
        recorder: Recorder,
        policies: Iterable[Policy],
        known: Callable[[str], bool] | None = None,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.recorder = recorder
        self.policies = list(policies)
        self.known = known
        self.clock = clock

    def decide(self, agent: str, choice: str, because: Iterable[str] = ()) -> Decision:
        cites = tuple(because)
        if self.known is not None:
            unknown = [b for b in cites if not self.known(b) and self.recorder.get(b) is None]
            if unknown:
                raise SemanticError(
                    f"decision by {agent} cites ids nobody minted: {unknown}; cite assertion "
                    "ids (hirmem.identity.triple_id), entity ids or decision ids"
                )
        allowed, rule, reason = True, "allow", "no policy refused"
        for policy in self.policies:
            ok, why = policy.allow(agent, choice)
            if not ok:
                allowed, rule, reason = False, policy.name, why
                break
            rule, reason = policy.name, why
        at = self.clock()
        d = Decision(decision_id(agent, choice, cites, rule, at, allowed), agent, choice, cites,
                     rule, at, allowed, reason)  # fmt: skip
        return self.recorder.record(d)


class DenyChoices:
    """Refuse the listed choices (e.g. destructive ones) for every agent."""

    def __init__(self, name: str, choices: Iterable[str], reason: str) -> None:
        self.name = name
        self.choices = frozenset(choices)
        self.reason = reason

    def allow(self, agent: str, choice: str) -> tuple[bool, str]:
        if choice in self.choices:
            return False, self.reason
        return True, f"{choice!r} is not restricted by {self.name}"


class AllowAgents:
    """Only the listed agents may act."""

    def __init__(self, name: str, agents: Iterable[str]) -> None:
        self.name = name
        self.agents = frozenset(agents)

    def allow(self, agent: str, choice: str) -> tuple[bool, str]:
        if agent in self.agents:
            return True, f"{agent} is an allowed agent"
        return False, f"{agent} is not among the agents allowed to act"
