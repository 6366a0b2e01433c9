"""The relations the vocabulary knows: an edge stating one of them is the typed claim.

Every entity-valued predicate declares the relations that state it subject-first
(``reports_to`` is ``person.manager``) and object-first (``manages`` is the same fact
from the other end), together with the kinds each end of the claim may be
(:data:`ENTITY_KINDS`). :func:`filed` turns an edge of such a relation into the claim the
right way round; :func:`fits` says whether an end of known kinds may be filed there. Any
other edge stays an open edge (:mod:`.entities`): "not in the vocabulary" is a true
statement, not a loss. One stored fact answers both directions: "manages" is never kept
beside the "person.manager" it states.

Kinds are never guessed: an end whose kind nothing stated is filed only where the
predicate admits one kind for it (the template's kind types it); on a predicate that
admits several it stays an open edge, and so does an edge whose end is known to be a kind
the predicate does not take.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hirmem.semantic.planner import EXTRACTED

__all__ = ["ENTITY_KINDS", "RELATIONS", "Filing", "Relation", "filed", "fits"]

ENTITY_KINDS = ("person", "organisation", "place", "device", "thing")

_PERSON = frozenset({"person"})
_PLACE = frozenset({"place"})
_ORG = frozenset({"organisation"})
_LOCATED = frozenset({"place", "organisation", "device", "thing"})


@dataclass(frozen=True, slots=True)
class Relation:
    predicate: str
    inverse: bool = False  # the relation states the fact object-first
    # the kinds the claim's subject and value may be; None: any (a text value)
    subject: frozenset[str] | None = None
    value: frozenset[str] | None = None


# the kinds each predicate's ends take, in the claim's own direction
_KINDS: Mapping[str, tuple[frozenset[str] | None, frozenset[str] | None]] = {
    "person.residence": (_PERSON, _PLACE),
    "person.employer": (_PERSON, _ORG),
    "person.birthplace": (_PERSON, _PLACE),
    "place.location": (_LOCATED, _PLACE),
    "thing.part_of": (_LOCATED, _LOCATED),
    "person.likes": (_PERSON, None),
    "thing.kind": (None, None),
    "person.knows": (_PERSON, _PERSON),
    "person.manages": (_PERSON, _PERSON | _ORG | frozenset({"thing"})),
    "person.manager": (_PERSON, _PERSON),
}


def _relation(predicate: str, inverse: bool = False) -> Relation:
    subject, value = _KINDS.get(predicate, (None, None))
    return Relation(predicate, inverse, subject, value)


RELATIONS: Mapping[str, Relation] = {
    **{rel: _relation(pred) for rel, pred in EXTRACTED.items() if rel != "manages"},
    "reports_to": _relation("person.manager"),
    "manages": _relation("person.manager", inverse=True),
}


@dataclass(frozen=True, slots=True)
class Filing:
    """The claim an edge states, the right way round, and the kinds its ends may be."""

    subject: str
    predicate: str
    value: str
    subject_kinds: frozenset[str] | None
    value_kinds: frozenset[str] | None


def filed(subject: str, relation: str, obj: str) -> Filing | None:
    """The claim an edge of ``relation`` states, or None when the relation is not in the
    vocabulary."""
    r = RELATIONS.get(relation)
    if r is None:
        return None
    s, v = (obj, subject) if r.inverse else (subject, obj)
    return Filing(s, r.predicate, v, r.subject, r.value)


def fits(takes: frozenset[str] | None, known: frozenset[str]) -> tuple[str, str]:
    """(the kind an end is filed as, or "" when it stays untyped; why it may not be filed,
    or "" when it may) for an end whose sources stated the kinds ``known``, on a side of a
    predicate that takes the kinds ``takes`` (None: any)."""
    if takes is None:
        return (next(iter(known)) if len(known) == 1 else ""), ""
    if known:
        if not known <= takes:
            return "", (f"is {'/'.join(sorted(known))}; the predicate takes "
                        f"{'/'.join(sorted(takes))}")  # fmt: skip
        return (next(iter(known)) if len(known) == 1 else ""), ""
    if len(takes) == 1:
        return next(iter(takes)), ""  # the template's one kind types it
    return "", f"no kind stated; the predicate takes {'/'.join(sorted(takes))}"
