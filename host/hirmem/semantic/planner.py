"""The deterministic planner: typed questions answered from claims, in SQL, with no model.

A question that compiles to a plan — a lookup ("Where does Bob live?"), a point in time
("Where did Bob live in 2015?"), a history ("Where has Bob lived?"), a count ("How many
people live in Paris?") or a provenance question ("Who said Bob lives in Paris?") — is
answered from the claim rows the reader may read (:class:`~hirmem.semantic.claims.
ClaimStore`). A question that compiles to nothing is untyped and goes to hybrid recall.

The question forms come from the ontology: each :class:`Asking` names a predicate and the
words that ask for it, so adding a domain is adding templates and their askings. The
default ontology (:data:`DEFAULT_ONTOLOGY`) covers what the rule extractor reads from text
(residence, employer, birthplace, location, membership, likes, kinds, acquaintance).

A value is rendered with the quote that states it; a count is rendered as a number (a
count is correct by construction and appears in no message).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime

from hirmem.semantic.claims import (
    READING,
    ClaimRow,
    ClaimStore,
    Ontology,
    Template,
    reading_template,
)

__all__ = ["DEFAULT_ASKINGS", "DEFAULT_ONTOLOGY", "EXTRACTED", "Asking", "Plan", "Planner"]

# what the rule extractor's predicates become as claims
EXTRACTED = {
    "lives_in": "person.residence",
    "works_at": "person.employer",
    "born_in": "person.birthplace",
    "located_in": "place.location",
    "part_of": "thing.part_of",
    "likes": "person.likes",
    "is_a": "thing.kind",
    "knows": "person.knows",
    "manages": "person.manages",
}

DEFAULT_ONTOLOGY = Ontology([
    Template("person.residence", True, "entity"),
    Template("person.employer", True, "entity"),
    Template("person.birthplace", True, "entity"),
    Template("place.location", True, "entity"),
    Template("thing.part_of", False, "entity"),
    Template("person.likes", False, "text"),
    Template("thing.kind", False, "text"),
    Template("person.knows", False, "entity"),
    Template("person.manages", False, "entity"),
    Template("person.manager", True, "entity"),
], families={READING: reading_template})  # fmt: skip

_S = r"(?P<s>[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*)"
_V = r"(?P<v>[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*)"
_YEAR = r"(?:\s+in\s+(?P<year>(?:19|20)\d{2}))?"


@dataclass(frozen=True, slots=True)
class Asking:
    """The question forms of one predicate: each a regular expression with ``s`` (the
    subject) or ``v`` (the value, for counts and provenance)."""

    predicate: str
    lookup: tuple[str, ...] = ()
    history: tuple[str, ...] = ()
    count: tuple[str, ...] = ()
    said: tuple[str, ...] = ()
    holders: tuple[str, ...] = ()  # whose value is ``v`` ("who reports to Priya?")


DEFAULT_ASKINGS = (
    Asking("person.residence",
           lookup=(rf"^where (?:does|did) {_S} live{_YEAR}\??$",),
           history=(rf"^where (?:has|have) {_S} lived\??$",),
           count=(rf"^how many (?:people|persons) (?:live|lived) in {_V}\??$",),
           said=(rf"^who (?:said|told us) (?:that )?{_S} lives? in {_V}\??$",)),
    Asking("person.employer",
           lookup=(rf"^where (?:does|did) {_S} work{_YEAR}\??$",
                   rf"^who (?:does|did) {_S} work for{_YEAR}\??$"),
           history=(rf"^where (?:has|have) {_S} worked\??$",),
           count=(rf"^how many (?:people|persons) work (?:at|for) {_V}\??$",),
           said=(rf"^who (?:said|told us) (?:that )?{_S} works? (?:at|for) {_V}\??$",)),
    Asking("person.birthplace",
           lookup=(rf"^where was {_S} born\??$",)),
    Asking("person.manager",
           lookup=(rf"^who (?:does|did) {_S} report to{_YEAR}\??$",),
           holders=(rf"^who reports to {_V}\??$", rf"^who does {_V} manage\??$")),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Plan:
    kind: str  # lookup, history, count, said, holders
    predicate: str
    subject: str = ""
    value: str = ""
    at: int | None = None


@dataclass(frozen=True, slots=True)
class Planned:
    plan: Plan
    answer: str  # the rendered answer; empty when the plan found nothing
    rows: tuple[ClaimRow, ...] = ()


class Planner:
    def __init__(self, claims: ClaimStore, askings: tuple[Asking, ...] = DEFAULT_ASKINGS) -> None:
        self.claims = claims
        self._forms = [
            (kind, a.predicate, re.compile(rx, re.IGNORECASE))
            for a in askings
            for kind, forms in (("lookup", a.lookup), ("history", a.history),
                                ("count", a.count), ("said", a.said),
                                ("holders", a.holders))
            for rx in forms
            if a.predicate in claims.ontology
        ]  # fmt: skip

    def plan(self, question: str) -> Plan | None:
        """The typed plan ``question`` compiles to, or None (untyped)."""
        q = " ".join(question.split())
        for kind, predicate, rx in self._forms:
            m = rx.match(q)
            if m is None:
                continue
            groups = m.groupdict()
            at = None
            if groups.get("year"):
                at = int(datetime(int(groups["year"]), 7, 1, tzinfo=UTC).timestamp() * 1000)
            return Plan(kind, predicate, groups.get("s") or "", groups.get("v") or "", at)
        return None

    def answer(self, question: str, readable: Collection[str]) -> Planned | None:
        """The planned answer from the claims the reader may read; None when untyped."""
        plan = self.plan(question)
        if plan is None:
            return None
        c = self.claims
        if plan.kind == "holders":  # the same claims read from the other end
            rows = c.holders(plan.predicate, plan.value, readable)
            held = sorted({r.subject + (" (hedged)" if r.hedged else "") for r in rows})
            return Planned(plan, ", ".join(held), tuple(rows))
        if plan.kind == "count":
            n = c.count(plan.predicate, readable, plan.value)
            return Planned(plan, str(n))
        if plan.kind == "history":
            rows = c.history(plan.subject, plan.predicate, readable)
            return Planned(plan, ", then ".join(_value(r) for r in rows), tuple(rows))
        if plan.kind == "said":
            rows = [r for r in c.history(plan.subject, plan.predicate, readable)
                    if r.value == c.ontology.get(plan.predicate).value(plan.value)]  # fmt: skip
            who = sorted({src for r in rows for _, src, _ in c.sources(r)})
            return Planned(plan, "; ".join(who), tuple(rows))
        rows = c.current(plan.subject, plan.predicate, readable, plan.at)
        if not rows:
            return Planned(plan, "")
        quotes = rows[0].attestations[-1].quote
        return Planned(plan, f"{', '.join(_value(r) for r in rows)} (\u201c{quotes}\u201d)",
                       tuple(rows))  # fmt: skip


def _value(row: ClaimRow) -> str:
    """A claim's value as an answer states it: a hedged one says so."""
    return f"{row.value} (hedged)" if row.hedged else row.value
