"""The ``usearch`` vector store: an HNSW index (cosine) with the metadata filter of §4.1.

``open_store("vector", "usearch:")`` holds the index in memory;
``"usearch:/var/lib/hirmem/vectors.usearch"`` loads the index there (and its metadata from
``<path>.meta.json``) and writes both back on :meth:`UsearchVectors.flush` and ``close``
(atomically: a temporary file, ``fsync``, rename).

Invariants:

- A query without a filter is answered by the HNSW graph: approximate, as an ANN index is.
- A query with a filter is exact: the entries matching the filter are found from an inverted
  index over the metadata and ranked by brute force over their vectors (read back from the
  index once per filter and cached until the next write). Over-fetching from the graph and
  dropping what fails the filter cannot promise the true top-k (the neighbours that match
  may lie past any fixed over-fetch), so it is not used.
- Each ``put`` gives the entry a fresh integer key; an overwrite or a delete removes the old
  key from the graph, so a deleted vector is never returned.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from usearch.index import Index

from hirmem.semantic.stores import filters
from hirmem.semantic.stores.base import Match, Vec, as_unit, top_positions

__all__ = ["UsearchVectors"]

U64 = np.uint64
_Subset = tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]  # keys, vectors


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class UsearchVectors:
    def __init__(self, path: str | Path | None = None, expansion_search: int = 128) -> None:
        self.path = None if path is None else Path(path)
        self.expansion_search = expansion_search
        self.dim: int | None = None
        self.index: Index | None = None
        self._key: dict[str, int] = {}
        self._id: dict[int, str] = {}
        self._meta: dict[int, dict[str, Any]] = {}
        self._inv: filters.TermIndex[int] = filters.TermIndex()
        self._subsets: dict[tuple[filters.Cond, ...], _Subset] = {}
        self._next = 1
        if self.path is not None and self.path.exists():
            self._load(self.path)

    def __len__(self) -> int:
        return len(self._key)

    def _meta_path(self, path: Path) -> Path:
        return path.with_name(path.name + ".meta.json")

    def _load(self, path: Path) -> None:
        held = json.loads(self._meta_path(path).read_text(encoding="utf-8"))
        self.dim, self._next = held["dim"], held["next"]
        self.index = self._new_index(int(held["dim"]))
        self.index.load(str(path))
        for id, key, meta in held["entries"]:
            self._remember(id, key, meta)

    def _new_index(self, dim: int) -> Index:
        return Index(ndim=dim, metric="cos", dtype="f32", expansion_search=self.expansion_search)

    def _remember(self, id: str, key: int, meta: dict[str, Any]) -> None:
        self._key[id], self._id[key], self._meta[key] = key, id, meta
        self._inv.add(key, meta)

    def _forget(self, id: str) -> int | None:
        key = self._key.pop(id, None)
        if key is None:
            return None
        del self._id[key]
        self._inv.remove(key, self._meta.pop(key))
        return key

    def put(self, id: str, vec: Vec, meta: Mapping[str, Any]) -> None:
        self.put_many([(id, vec, meta)])

    def put_many(self, items: Iterable[tuple[str, Vec, Mapping[str, Any]]]) -> None:
        rows: dict[str, tuple[npt.NDArray[np.float32], dict[str, Any]]] = {}
        dim = self.dim
        for id, vec, meta in items:
            v = as_unit(vec, dim)
            dim = int(v.shape[0])
            rows[id] = (v, dict(meta))
        if not rows or dim is None:
            return
        if self.index is None:
            self.dim, self.index = dim, self._new_index(dim)
        stale = [k for i in rows if (k := self._forget(i)) is not None]
        if stale:
            self.index.remove(np.asarray(stale, dtype=U64))
        keys = np.arange(self._next, self._next + len(rows), dtype=U64)
        self._next += len(rows)
        self.index.add(keys, np.stack([v for v, _ in rows.values()]))
        for key, (id, (_, meta)) in zip(keys.tolist(), rows.items(), strict=True):
            self._remember(id, key, meta)
        self._subsets.clear()

    def get(self, id: str) -> Match | None:
        """The entry ``id`` (score 0), or None."""
        key = self._key.get(id)
        return None if key is None else Match(id, 0.0, dict(self._meta[key]))

    def delete(self, id: str) -> bool:
        key = self._forget(id)
        if key is None:
            return False
        assert self.index is not None
        self.index.remove(key)
        self._subsets.clear()
        return True

    def _subset(self, conds: tuple[filters.Cond, ...]) -> _Subset:
        held = self._subsets.get(conds)
        if held is None:
            hit = self._inv.select(conds)
            keys = np.fromiter(sorted(hit), dtype=U64, count=len(hit))
            assert self.index is not None and self.dim is not None
            got = self.index.get(keys) if len(keys) else None
            vecs = [v for v in got if v is not None] if isinstance(got, tuple) else []
            mat = (np.stack(vecs).astype(np.float32, copy=False) if vecs
                   else np.zeros((0, self.dim), dtype=np.float32))  # fmt: skip
            held = self._subsets[conds] = (keys, mat)
        return held

    def near(self, vec: Vec, k: int, filter: Mapping[str, Any] | None = None) -> list[Match]:
        conds = filters.parse(filter)
        if self.index is None or not self._key or k <= 0:
            return []
        q = as_unit(vec, self.dim)
        if conds:
            keys, mat = self._subset(conds)
            sims = mat @ q
            best = [(int(keys[i]), float(sims[i])) for i in top_positions(sims, k)]
        else:
            found = self.index.search(q, min(k, len(self._key)))
            best = [(int(key), 1.0 - float(d))
                    for key, d in zip(found.keys, found.distances, strict=True)]  # fmt: skip
        return [Match(self._id[key], s, dict(self._meta[key])) for key, s in best
                if key in self._id]  # fmt: skip

    def flush(self) -> None:
        if self.path is None or self.index is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".idx.tmp")
        self.index.save(str(tmp))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        entries = [[id, key, self._meta[key]] for id, key in self._key.items()]
        body = {"dim": self.dim, "next": self._next, "entries": entries}
        _atomic_write(self._meta_path(self.path), json.dumps(body).encode())

    def close(self) -> None:
        self.flush()
