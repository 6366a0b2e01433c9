"""In-memory drivers of all four stores: the default, so nothing needs a database."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from hirmem.protocol.identity import fold, triple_id
from hirmem.semantic.stores import filters
from hirmem.semantic.stores.base import Match, Vec, as_unit, check_terms, top_k, top_positions
from hirmem.semantic.values import Chunk, Doc

__all__ = ["MemoryDocs", "MemoryGraph", "MemoryTriples", "MemoryVectors"]


class MemoryTriples:
    """Triples by id, indexed by folded subject, predicate and object (insertion order)."""

    def __init__(self) -> None:
        self._t: dict[str, tuple[str, str, str]] = {}
        self._by: tuple[dict[str, dict[str, None]], ...] = ({}, {}, {})

    def __len__(self) -> int:
        return len(self._t)

    def assert_triple(self, s: str, p: str, o: str) -> str:
        check_terms(s, p, o)
        tid = triple_id(s, p, o)
        if tid not in self._t:
            self._t[tid] = (s, p, o)
            for idx, term in zip(self._by, (s, p, o), strict=True):
                idx.setdefault(fold(term), {})[tid] = None
        return tid

    def assert_many(self, triples: Iterable[tuple[str, str, str]]) -> int:
        batch = list(triples)
        for s, p, o in batch:  # all or nothing: check the batch before writing any of it
            check_terms(s, p, o)
        n = len(self._t)
        for s, p, o in batch:
            self.assert_triple(s, p, o)
        return len(self._t) - n

    def match(
        self, s: str | None = None, p: str | None = None, o: str | None = None
    ) -> list[tuple[str, str, str]]:
        check_terms(s, p, o)
        sets = []
        for idx, term in zip(self._by, (s, p, o), strict=True):
            if term is not None:
                hit = idx.get(fold(term))
                if not hit:
                    return []
                sets.append(hit)
        if not sets:
            return list(self._t.values())
        sets.sort(key=len)
        first, rest = sets[0], sets[1:]
        return [self._t[t] for t in first if all(t in r for r in rest)]

    def delete(self, s: str, p: str, o: str) -> bool:
        tid = triple_id(s, p, o)
        held = self._t.pop(tid, None)
        if held is None:
            return False
        for idx, term in zip(self._by, held, strict=True):
            bucket = idx.get(fold(term))
            if bucket is not None:
                bucket.pop(tid, None)
                if not bucket:
                    del idx[fold(term)]
        return True


class MemoryVectors:
    """Vectors in one growing float32 matrix; cosine by brute force; an inverted index over
    metadata makes a filtered query touch only the rows that match."""

    def __init__(self) -> None:
        self.dim: int | None = None
        self._mat: npt.NDArray[np.float32] = np.zeros((0, 0), dtype=np.float32)
        self._dead: npt.NDArray[np.bool_] = np.zeros(0, dtype=bool)
        self._n = 0
        self._ids: list[str] = []
        self._meta: list[dict[str, Any] | None] = []
        self._row: dict[str, int] = {}
        self._inv: filters.TermIndex[int] = filters.TermIndex()
        self._arrays: dict[tuple[filters.Cond, ...], npt.NDArray[np.intp]] = {}  # per filter

    def __len__(self) -> int:
        return len(self._row)

    def put(self, id: str, vec: Vec, meta: Mapping[str, Any]) -> None:
        v = as_unit(vec, self.dim)
        if self.dim is None:
            self.dim = int(v.shape[0])
            self._mat = np.zeros((1024, self.dim), dtype=np.float32)
            self._dead = np.zeros(1024, dtype=bool)
        row = self._row.get(id)
        if row is None:
            if self._n == self._mat.shape[0]:
                grown = np.zeros((self._n * 2, self.dim), dtype=np.float32)
                grown[: self._n] = self._mat[: self._n]
                self._mat = grown
                dead = np.zeros(self._n * 2, dtype=bool)
                dead[: self._n] = self._dead[: self._n]
                self._dead = dead
            row = self._n
            self._n += 1
            self._ids.append(id)
            self._meta.append(None)
            self._row[id] = row
        else:
            self._unindex(row)
        self._arrays.clear()
        self._mat[row] = v
        self._dead[row] = False
        held = dict(meta)
        self._meta[row] = held
        self._inv.add(row, held)

    def _unindex(self, row: int) -> None:
        old = self._meta[row]
        if old is not None:
            self._inv.remove(row, old)

    def delete(self, id: str) -> bool:
        row = self._row.pop(id, None)
        if row is None:
            return False
        self._arrays.clear()
        self._unindex(row)
        self._meta[row] = None
        self._mat[row] = 0.0
        self._dead[row] = True
        return True

    def get(self, id: str) -> Match | None:
        """The entry ``id`` (score 0), or None."""
        row = self._row.get(id)
        return None if row is None else Match(id, 0.0, dict(self._meta[row] or {}))

    def rows(self, filter: Mapping[str, Any] | None) -> npt.NDArray[np.intp] | None:
        """Row numbers matching ``filter`` (None: every row)."""
        conds = filters.parse(filter)
        if not conds:
            return None
        arr = self._arrays.get(conds)
        if arr is None:
            hit = sorted(self._inv.select(conds))
            arr = self._arrays[conds] = np.fromiter(hit, dtype=np.intp, count=len(hit))
        return arr

    def near(self, vec: Vec, k: int, filter: Mapping[str, Any] | None = None) -> list[Match]:
        rows = self.rows(filter)  # a filter it cannot mean is refused even when empty
        if self.dim is None or not self._row:
            return []
        q = as_unit(vec, self.dim)
        if rows is None:
            sims = self._mat[: self._n] @ q
            sims[self._dead[: self._n]] = -np.inf
            best = top_k(self._ids, sims, min(k, len(self._row)))
        else:
            sims = self._mat[rows] @ q
            best = [(self._ids[int(rows[i])], float(sims[i])) for i in top_positions(sims, k)]
        return [Match(i, s, dict(self._meta[self._row[i]] or {})) for i, s in best]


class MemoryGraph:
    def __init__(self) -> None:
        self._props: dict[str, dict[str, Any]] = {}
        self._out: dict[str, dict[tuple[str, str], None]] = {}

    def node(self, id: str, props: Mapping[str, Any]) -> None:
        self._props.setdefault(id, {}).update(props)

    def edge(self, src: str, dst: str, label: str) -> None:
        self._props.setdefault(src, {})
        self._props.setdefault(dst, {})
        self._out.setdefault(src, {})[(dst, label)] = None

    def out(self, id: str, label: str | None = None) -> list[str]:
        found = (d for d, lab in self._out.get(id, {}) if label is None or lab == label)
        return list(dict.fromkeys(found))  # each neighbour once, however many labels

    def props(self, id: str) -> dict[str, Any] | None:
        p = self._props.get(id)
        return None if p is None else dict(p)

    def delete(self, id: str) -> bool:
        if id not in self._props:
            return False
        del self._props[id]
        self._out.pop(id, None)
        for edges in self._out.values():
            for key in [k for k in edges if k[0] == id]:
                del edges[key]
        return True


class MemoryDocs:
    def __init__(self) -> None:
        self._docs: dict[str, Doc] = {}
        self._chunks: dict[str, list[Chunk]] = {}

    def __len__(self) -> int:
        return len(self._docs)

    def put(self, doc: Doc, chunks: Sequence[Chunk]) -> None:
        self._docs[doc.id] = doc.replace()
        self._chunks[doc.id] = list(chunks)

    def get(self, doc_id: str) -> Doc | None:
        d = self._docs.get(doc_id)
        return None if d is None else d.replace()

    def chunk(self, chunk_id: str) -> Chunk | None:
        doc, _, index = chunk_id.rpartition("#")
        chunks = self._chunks.get(doc, [])
        try:
            i = int(index)
        except ValueError:
            return None
        return chunks[i] if 0 <= i < len(chunks) else None

    def chunks(self, doc_id: str) -> list[Chunk]:
        return list(self._chunks.get(doc_id, []))

    def delete(self, doc_id: str) -> bool:
        self._chunks.pop(doc_id, None)
        return self._docs.pop(doc_id, None) is not None
