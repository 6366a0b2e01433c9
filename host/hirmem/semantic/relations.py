"""The relations the vocabulary knows: an edge stating one of them is the typed claim.

Every entity-valued predicate declares the relations that state it subject-first
(``reports_to`` is ``person.manager``) and object-first (``manages`` is the same fact
from the other end). :func:`filed` turns an edge of such a relation into the claim the
right way round; any other relation stays an open edge (:mod:`.entities`): "not in the
vocabulary" is a true statement, not a loss. One stored fact answers both directions:
"manages" is never kept beside the "person.manager" it states.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hirmem.semantic.planner import EXTRACTED

__all__ = ["RELATIONS", "Relation", "filed"]


@dataclass(frozen=True, slots=True)
class Relation:
    predicate: str
    inverse: bool = False  # the relation states the fact object-first


RELATIONS: Mapping[str, Relation] = {
    **{rel: Relation(pred) for rel, pred in EXTRACTED.items() if rel != "manages"},
    "reports_to": Relation("person.manager"),
    "manages": Relation("person.manager", inverse=True),
}


def filed(subject: str, relation: str, obj: str) -> tuple[str, str, str] | None:
    """(subject, predicate, value) of the claim an edge states, or None when its relation
    is not in the vocabulary."""
    r = RELATIONS.get(relation)
    if r is None:
        return None
    return (obj, r.predicate, subject) if r.inverse else (subject, r.predicate, obj)
