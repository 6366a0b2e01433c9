"""The store interfaces of §4 (vector, graph, triple) and the document store.

Invariants:

- A vector query admits a metadata filter: ``near(vec, k, filter)`` returns only entries
  whose metadata satisfies every condition of the filter — equality, ``in`` and ranges, with
  one meaning of equality for every driver (:mod:`hirmem.semantic.stores.filters`).
  Scores are cosine similarities.
- Triple terms are matched by their fold (:func:`hirmem.protocol.identity.fold`), so two spellings
  that fold alike are one term; ``None`` is a wildcard. ``assert_triple`` returns the triple's id.
  A blank term (one that folds to nothing) is refused, in writes and in patterns.
- ``GraphStore.out`` lists each neighbour once (in the order first linked), whatever the
  number of labels linking to it.
- Every store can delete what it holds (``delete``), because erasure must remove the record
  from every place it was written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from hirmem.protocol.identity import fold
from hirmem.semantic.errors import SemanticError, StoreError
from hirmem.semantic.stores import filters
from hirmem.semantic.values import Chunk, Doc

__all__ = ["DocStore", "GraphStore", "Match", "TripleStore", "VectorStore", "as_unit",
           "check_terms", "meta_matches"]  # fmt: skip

Vec = Sequence[float] | npt.NDArray[np.floating[Any]]


@dataclass(frozen=True, slots=True)
class Match:
    id: str
    score: float
    meta: dict[str, Any]


@runtime_checkable
class VectorStore(Protocol):
    def put(self, id: str, vec: Vec, meta: Mapping[str, Any]) -> None: ...
    def near(self, vec: Vec, k: int, filter: Mapping[str, Any] | None = None) -> list[Match]: ...
    def delete(self, id: str) -> bool: ...
    def __len__(self) -> int: ...


@runtime_checkable
class GraphStore(Protocol):
    def node(self, id: str, props: Mapping[str, Any]) -> None: ...
    def edge(self, src: str, dst: str, label: str) -> None: ...
    def out(self, id: str, label: str | None = None) -> list[str]: ...
    def props(self, id: str) -> dict[str, Any] | None: ...
    def delete(self, id: str) -> bool: ...


@runtime_checkable
class TripleStore(Protocol):
    def assert_triple(self, s: str, p: str, o: str) -> str: ...
    def assert_many(self, triples: Iterable[tuple[str, str, str]]) -> int: ...
    def match(
        self, s: str | None = None, p: str | None = None, o: str | None = None
    ) -> list[tuple[str, str, str]]: ...
    def delete(self, s: str, p: str, o: str) -> bool: ...
    def __len__(self) -> int: ...


@runtime_checkable
class DocStore(Protocol):
    def put(self, doc: Doc, chunks: Sequence[Chunk]) -> None: ...
    def get(self, doc_id: str) -> Doc | None: ...
    def chunk(self, chunk_id: str) -> Chunk | None: ...
    def chunks(self, doc_id: str) -> list[Chunk]: ...
    def delete(self, doc_id: str) -> bool: ...
    def __len__(self) -> int: ...


def as_unit(vec: Vec, dim: int | None = None) -> npt.NDArray[np.float32]:
    """``vec`` as a float32 unit vector (a zero vector stays zero)."""
    v = np.asarray(vec, dtype=np.float32).reshape(-1)
    if dim is not None and v.shape[0] != dim:
        raise SemanticError(f"vector of dimension {v.shape[0]}, the store holds {dim}")
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else v


def meta_matches(meta: Mapping[str, Any], filter: Mapping[str, Any]) -> bool:
    """Whether ``meta`` passes ``filter`` (the rule of :mod:`.filters`)."""
    return filters.matches(meta, filters.parse(filter))


def check_terms(*terms: str | None) -> None:
    """Refuse a blank term (one that folds to nothing): it names nothing, and as a pattern
    it would match nothing (``None`` is the wildcard)."""
    for t in terms:
        if t is not None and (not isinstance(t, str) or not fold(t)):
            raise StoreError(f"term {t!r} is blank or not a string: a triple's subject, "
                             "predicate and object must each name something (None is the "
                             "wildcard of a match)")  # fmt: skip


def top_positions(sims: npt.NDArray[np.float32], k: int) -> npt.NDArray[np.intp]:
    """Positions of the ``k`` largest similarities, best first."""
    n = sims.shape[0]
    if k <= 0 or n == 0:
        return np.zeros(0, dtype=np.intp)
    part = np.argpartition(-sims, k - 1)[:k] if k < n else np.arange(n)
    return part[np.argsort(-sims[part], kind="stable")]


def top_k(ids: Sequence[str], sims: npt.NDArray[np.float32], k: int) -> list[tuple[str, float]]:
    return [(ids[int(i)], float(sims[int(i)])) for i in top_positions(sims, k)]
