"""The metadata filter of a vector query (§4.1): one meaning, shared by every driver.

A filter maps a metadata key to a condition:

- a scalar (``str``, ``int``, ``float``, ``bool`` or ``None``): equality;
- ``{"in": [v, …]}``: equal to any of the listed scalars;
- ``{"gt" | "ge" | "lt" | "le": bound, …}``: a range; its bounds are all numbers or all
  strings (strings compare by code point, as SQLite's binary collation does on UTF-8).

Equality is JSON's: a bool equals only a bool (``True`` is not ``1``), numbers are equal when
their values are (``1 == 1.0``, and no float rounding makes ``2**53 + 1`` equal ``2**53``), a
string equals only the same string (exactly: metadata is not folded), ``None`` only ``None``.
A range admits only values of its bounds' kind (``{"ge": 0}`` never admits ``True``).
A metadata field holding a list matches when any member matches; a field holding a mapping
(or a NaN) matches nothing. What a filter may not say is refused with a
:class:`~hirmem.semantic.errors.StoreError` naming the key: a bare list or tuple (say
``{"in": [...]}``), a mapping condition with an unknown operator, a NaN, a non-scalar value.

Every driver finds candidates through the same terms (:func:`meta_terms`,
:func:`Cond.admits`), so every driver answers a filter identically.
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from hirmem.semantic.errors import StoreError

__all__ = ["Cond", "Term", "TermIndex", "matches", "meta_terms", "parse", "term_json"]

# A metadata value as the filter compares it: (kind, value), kind "b" bool, "n" number,
# "s" string, "z" null. Numbers that are whole are held as int, so 1 and 1.0 are one term.
Term = tuple[str, Any]

K = TypeVar("K", bound=Hashable)

_OPS = frozenset({"in", "gt", "ge", "lt", "le"})


def term(value: Any) -> Term | None:
    """The term a metadata value is compared as; ``None`` when it is not comparable."""
    if value is None:
        return ("z", None)
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int):
        return ("n", value)
    if isinstance(value, float):
        if math.isnan(value):
            return None
        return ("n", int(value)) if value.is_integer() else ("n", value)
    if isinstance(value, str):
        return ("s", value)
    return None


def term_json(t: Term) -> str:
    """A term as the text a SQL index holds (distinct terms give distinct texts)."""
    return json.dumps(list(t), ensure_ascii=False)


def term_from_json(text: str) -> Term:
    kind, value = json.loads(text)
    return (str(kind), value)


@dataclass(frozen=True, slots=True)
class Cond:
    """One key's condition: a set of terms (equality, ``in``) or a range."""

    key: str
    equal: frozenset[Term] | None = None
    lo: Term | None = None
    lo_open: bool = False
    hi: Term | None = None
    hi_open: bool = False

    def admits(self, t: Term) -> bool:
        if self.equal is not None:
            return t in self.equal
        kind = (self.lo or self.hi or ("", None))[0]
        if t[0] != kind:
            return False
        if self.lo is not None and (t[1] < self.lo[1] or (self.lo_open and t[1] == self.lo[1])):
            return False
        return not (self.hi is not None
                    and (t[1] > self.hi[1] or (self.hi_open and t[1] == self.hi[1])))  # fmt: skip


def _scalar(key: str, value: Any) -> Term:
    if isinstance(value, list | tuple):
        raise StoreError(f"filter on {key!r}: a list is not a condition; to match any of "
                         f"several values say {{'in': {list(value)!r}}}")  # fmt: skip
    t = term(value)
    if t is None:
        what = "NaN" if isinstance(value, float) else type(value).__name__
        raise StoreError(f"filter on {key!r}: {what} is not a value a filter can compare "
                         "(str, int, float, bool or None)")  # fmt: skip
    return t


def _cond(key: str, want: Any) -> Cond:
    if not isinstance(want, Mapping):
        return Cond(key, equal=frozenset({_scalar(key, want)}))
    ops = set(want)
    bad = sorted(map(str, ops - _OPS))
    if bad or not ops:
        raise StoreError(f"filter on {key!r}: operators {bad or '(none)'} are not known; a "
                         f"condition is a scalar, {{'in': [...]}} or a range of "
                         f"{sorted(_OPS - {'in'})}")  # fmt: skip
    if "in" in ops:
        if ops != {"in"}:
            raise StoreError(f"filter on {key!r}: 'in' cannot be combined with a range")
        members = want["in"]
        if not isinstance(members, list | tuple | set | frozenset):
            raise StoreError(f"filter on {key!r}: 'in' takes a list of values")
        return Cond(key, equal=frozenset(_scalar(key, v) for v in members))
    bounds = {op: _scalar(key, want[op]) for op in ops}
    kinds = {b[0] for b in bounds.values()}
    if not kinds <= {"n"} and not kinds <= {"s"}:
        raise StoreError(f"filter on {key!r}: range bounds must be all numbers or all strings, "
                         f"got {sorted(repr(want[op]) for op in sorted(ops))}")  # fmt: skip
    if ("gt" in ops and "ge" in ops) or ("lt" in ops and "le" in ops):
        raise StoreError(f"filter on {key!r}: two lower or two upper bounds")
    lo_op = "gt" if "gt" in ops else "ge"
    hi_op = "lt" if "lt" in ops else "le"
    return Cond(key, lo=bounds.get(lo_op), lo_open=lo_op == "gt", hi=bounds.get(hi_op),
                hi_open=hi_op == "lt")  # fmt: skip


def parse(filter: Mapping[str, Any] | None) -> tuple[Cond, ...]:
    """A filter's conditions in key order (empty: no filter); refuses what it cannot mean."""
    if not filter:
        return ()
    if not isinstance(filter, Mapping):
        raise StoreError(f"a filter is a mapping of metadata keys to conditions, not "
                         f"{type(filter).__name__}")  # fmt: skip
    return tuple(_cond(str(k), filter[k]) for k in sorted(filter, key=str))


def meta_terms(meta: Mapping[str, Any]) -> list[tuple[str, Term]]:
    """The (key, term) pairs a filter can match: each scalar, and each member of a list."""
    out: list[tuple[str, Term]] = []
    for key, value in meta.items():
        for v in value if isinstance(value, list | tuple) else (value,):
            t = term(v)
            if t is not None:
                out.append((str(key), t))
    return out


def matches(meta: Mapping[str, Any], conds: Iterable[Cond]) -> bool:
    """Whether ``meta`` satisfies every condition (the rule every driver answers by)."""
    terms = meta_terms(meta)
    return all(any(k == c.key and c.admits(t) for k, t in terms) for c in conds)


class TermIndex(Generic[K]):
    """An inverted index ``key -> term -> entries``: equality is a lookup, ``in`` a union,
    a range a scan over the distinct terms of one key (never over the entries)."""

    def __init__(self) -> None:
        self._by: dict[str, dict[Term, set[K]]] = {}

    def add(self, entry: K, meta: Mapping[str, Any]) -> None:
        for key, t in meta_terms(meta):
            self._by.setdefault(key, {}).setdefault(t, set()).add(entry)

    def remove(self, entry: K, meta: Mapping[str, Any]) -> None:
        for key, t in meta_terms(meta):
            terms = self._by.get(key)
            held = terms.get(t) if terms is not None else None
            if held is None or terms is None:
                continue
            held.discard(entry)
            if not held:
                del terms[t]
                if not terms:
                    del self._by[key]

    def select(self, conds: Iterable[Cond]) -> set[K]:
        """The entries satisfying every condition."""
        out: set[K] | None = None
        for c in conds:
            terms = self._by.get(c.key, {})
            if c.equal is not None:
                found = [terms[t] for t in c.equal if t in terms]
            else:
                found = [ids for t, ids in terms.items() if c.admits(t)]
            hit: set[K] = set().union(*found)
            out = hit if out is None else out & hit
            if not out:
                return set()
        return set() if out is None else out
