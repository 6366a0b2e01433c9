"""The store interfaces of §4 (vector, graph, triple) and the document store.

Invariants:

- A vector query admits a metadata filter: ``near(vec, k, filter)`` returns only entries
  whose metadata matches every ``key: value`` of the filter (a list-valued metadata field
  matches when it contains the value). Scores are cosine similarities.
- Triple terms are matched by their fold (:func:`hirmem.protocol.identity.fold`), so two spellings
  that fold alike are one term; ``None`` is a wildcard. ``assert_triple`` returns the triple's id.
- Every store can delete what it holds (``delete``), because erasure must remove the record
  from every place it was written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from hirmem.semantic.errors import SemanticError
from hirmem.semantic.values import Chunk, Doc

__all__ = ["DocStore", "GraphStore", "Match", "TripleStore", "VectorStore", "as_unit",
           "meta_matches"]  # fmt: skip

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
    for key, want in filter.items():
        have = meta.get(key)
        if isinstance(have, list | tuple):
            if want not in have:
                return False
        elif have != want:
            return False
    return True


def filter_keys(meta: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The (key, value) pairs a filter can match on: scalars, and each member of a list."""
    out: list[tuple[str, Any]] = []
    for key, value in meta.items():
        if isinstance(value, list | tuple):
            out.extend((key, v) for v in value if isinstance(v, str | int | float | bool))
        elif isinstance(value, str | int | float | bool) or value is None:
            out.append((key, value))
    return out


def top_positions(sims: npt.NDArray[np.float32], k: int) -> npt.NDArray[np.intp]:
    """Positions of the ``k`` largest similarities, best first."""
    n = sims.shape[0]
    if k <= 0 or n == 0:
        return np.zeros(0, dtype=np.intp)
    part = np.argpartition(-sims, k - 1)[:k] if k < n else np.arange(n)
    return part[np.argsort(-sims[part], kind="stable")]


def top_k(ids: Sequence[str], sims: npt.NDArray[np.float32], k: int) -> list[tuple[str, float]]:
    return [(ids[int(i)], float(sims[int(i)])) for i in top_positions(sims, k)]
