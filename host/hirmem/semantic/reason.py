"""Forward chaining over the ledger's current beliefs, to a fixpoint or a depth bound.

Rules are Horn clauses over triple patterns whose terms may be variables (``?x``). Helpers
build the usual ones: transitive, symmetric, inverse, subclass and subproperty.

Invariants: every derived fact names the rule that produced it and the ids of the facts it
was derived from (a derivation without antecedents cannot be produced); terms are compared
folded; a fact already believed is not derived again; at most ``max_depth`` rounds run, and
a run that stops there with facts still derivable says so (:attr:`Reasoner.last`).

Confidence: a derived fact is no surer than its weakest premise, scaled by how far the rule
itself is trusted: ``score = min(premise confidences) * rule.weight``. A chain of
derivations therefore never gains confidence, and a rule of weight 1 passes the weakest
premise's confidence on unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from hirmem.protocol.identity import fold, triple_id
from hirmem.semantic.assertions import Edge

__all__ = ["Chaining", "Derivation", "Reasoner", "Rule", "inverse", "subclass",
           "subproperty", "symmetric", "transitive"]  # fmt: skip

Pattern = tuple[str, str, str]
Fact = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    body: tuple[Pattern, ...]
    head: Pattern
    weight: float = 1.0  # how far the rule itself is trusted, in (0, 1]

    def __post_init__(self) -> None:
        bound = {t for pat in self.body for t in pat if t.startswith("?")}
        free = [t for t in self.head if t.startswith("?") and t not in bound]
        if not self.body or free:
            raise ValueError(f"rule {self.name}: the head uses unbound variables {free}")
        if not 0.0 < self.weight <= 1.0:
            raise ValueError(f"rule {self.name}: a weight is in (0, 1], got {self.weight}")


def transitive(p: str) -> Rule:
    return Rule(f"transitive({p})", (("?x", p, "?y"), ("?y", p, "?z")), ("?x", p, "?z"))


def symmetric(p: str) -> Rule:
    return Rule(f"symmetric({p})", (("?x", p, "?y"),), ("?y", p, "?x"))


def inverse(p: str, q: str) -> Rule:
    return Rule(f"inverse({p},{q})", (("?x", p, "?y"),), ("?y", q, "?x"))


def subclass(type_p: str = "is_a", sub_p: str = "subclass_of") -> Rule:
    return Rule(f"subclass({type_p},{sub_p})", (("?x", type_p, "?c"), ("?c", sub_p, "?d")),
                ("?x", type_p, "?d"))  # fmt: skip


def subproperty(sub_p: str = "subproperty_of") -> Rule:
    return Rule(f"subproperty({sub_p})", (("?p", sub_p, "?q"), ("?x", "?p", "?y")),
                ("?x", "?q", "?y"))  # fmt: skip


@dataclass(frozen=True, slots=True)
class Derivation:
    fact: Fact  # folded terms
    id: str
    rule: str
    antecedents: tuple[str, ...]
    depth: int
    score: float = 1.0  # min(premise confidences) * rule weight


@dataclass(frozen=True, slots=True)
class Chaining:
    """What one run did: its derivations, the rounds it ran, and whether it reached a
    fixpoint (``complete``) or stopped at the depth bound with facts still derivable."""

    derivations: list[Derivation] = field(default_factory=list)
    rounds: int = 0
    complete: bool = True
    max_depth: int = 0


class Reasoner:
    def __init__(self, rules: Iterable[Rule], max_depth: int = 8) -> None:
        self.rules = [Rule(r.name, tuple(_fold_pat(p) for p in r.body), _fold_pat(r.head),
                           r.weight) for r in rules]  # fmt: skip
        self.max_depth = max_depth
        self.last = Chaining(max_depth=max_depth)  # the report of the latest run

    def run(self, edges: Iterable[Edge]) -> list[Derivation]:
        """Derive to a fixpoint or ``max_depth`` rounds; :attr:`last` reports which."""
        facts: dict[Fact, tuple[str, float]] = {}
        for e in edges:
            facts[(fold(e.subject), fold(e.predicate), fold(e.object))] = (e.id, e.score)
        out: list[Derivation] = []
        rounds = 0
        complete = True
        for depth in range(1, self.max_depth + 2):
            new = self._round(facts, depth)
            if not new:
                break
            if depth > self.max_depth:  # one more round only to learn whether it was done
                complete = False
                break
            rounds = depth
            for fact, d in new.items():
                facts[fact] = (d.id, d.score)
                out.append(d)
        self.last = Chaining(out, rounds, complete, self.max_depth)
        return out

    def _round(self, facts: dict[Fact, tuple[str, float]], depth: int) -> dict[Fact, Derivation]:
        ids = {fact: fid for fact, (fid, _) in facts.items()}
        score = {fid: s for fid, s in facts.values()}
        new: dict[Fact, Derivation] = {}
        for rule in self.rules:
            for binding, used in _join(rule.body, ids):
                head = tuple(binding.get(t, t) for t in rule.head)
                fact: Fact = (head[0], head[1], head[2])
                conf = min(score[u] for u in used) * rule.weight
                held = new.get(fact)
                if fact in facts or (held is not None and held.score >= conf):
                    continue  # keep the best-supported derivation of a fact in one round
                new[fact] = Derivation(fact, triple_id(*fact), rule.name, used, depth, conf)
        return new


def _fold_pat(p: Pattern) -> Pattern:
    a, b, c = (t if t.startswith("?") else fold(t) for t in p)
    return (a, b, c)


def _join(
    body: tuple[Pattern, ...], facts: dict[Fact, str]
) -> Iterator[tuple[dict[str, str], tuple[str, ...]]]:
    by_pred: dict[str, list[tuple[Fact, str]]] = {}
    for fact, fid in facts.items():
        by_pred.setdefault(fact[1], []).append((fact, fid))
    every = list(facts.items())

    def walk(i: int, binding: dict[str, str], used: tuple[str, ...]) -> Iterator[
        tuple[dict[str, str], tuple[str, ...]]
    ]:
        if i == len(body):
            yield binding, used
            return
        pat = body[i]
        pred = binding.get(pat[1], pat[1])
        for fact, fid in every if pred.startswith("?") else by_pred.get(pred, []):
            b = dict(binding)
            ok = True
            for term, value in zip(pat, fact, strict=True):
                if term.startswith("?"):
                    if b.setdefault(term, value) != value:
                        ok = False
                        break
                elif term != value:
                    ok = False
                    break
            if ok:
                yield from walk(i + 1, b, (*used, fid))

    yield from walk(0, {}, ())
