"""Forward chaining over the ledger's current beliefs, to a fixpoint or a depth bound.

Rules are Horn clauses over triple patterns whose terms may be variables (``?x``). Helpers
build the usual ones: transitive, symmetric, inverse, subclass and subproperty.

Invariants: every derived fact names the rule that produced it and the ids of the facts it
was derived from (a derivation without antecedents cannot be produced); terms are compared
folded; a fact already believed is not derived again; at most ``max_depth`` rounds run.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from hirmem.protocol.identity import fold, triple_id
from hirmem.semantic.assertions import Edge

__all__ = ["Derivation", "Reasoner", "Rule", "inverse", "subclass", "subproperty",
           "symmetric", "transitive"]  # fmt: skip

Pattern = tuple[str, str, str]
Fact = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    body: tuple[Pattern, ...]
    head: Pattern

    def __post_init__(self) -> None:
        bound = {t for pat in self.body for t in pat if t.startswith("?")}
        free = [t for t in self.head if t.startswith("?") and t not in bound]
        if not self.body or free:
            raise ValueError(f"rule {self.name}: the head uses unbound variables {free}")


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


class Reasoner:
    def __init__(self, rules: Iterable[Rule], max_depth: int = 8) -> None:
        self.rules = [Rule(r.name, tuple(_fold_pat(p) for p in r.body), _fold_pat(r.head))
                      for r in rules]  # fmt: skip
        self.max_depth = max_depth

    def run(self, edges: Iterable[Edge]) -> list[Derivation]:
        facts: dict[Fact, str] = {}
        for e in edges:
            facts[(fold(e.subject), fold(e.predicate), fold(e.object))] = e.id
        out: list[Derivation] = []
        for depth in range(1, self.max_depth + 1):
            new: dict[Fact, Derivation] = {}
            for rule in self.rules:
                for binding, used in _join(rule.body, facts):
                    head = tuple(binding.get(t, t) for t in rule.head)
                    fact: Fact = (head[0], head[1], head[2])
                    if fact in facts or fact in new:
                        continue
                    new[fact] = Derivation(fact, triple_id(*fact), rule.name, used, depth)
            if not new:
                break
            for fact, d in new.items():
                facts[fact] = d.id
                out.append(d)
        return out


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
