"""Vectors as compact blobs, and a matrix of them that scores a query without unpacking.

A blob is one of four layouts, told apart by its length and first byte:

- ``S``: sparse — ``S``, the dimension (uint32, little-endian), then the positions of the
  non-zero entries (uint16, or uint32 past 65,536 dimensions) and their float32 values. Exact:
  a hashed embedding of a sentence has a handful of non-zero entries out of a thousand, so it
  costs tens of bytes instead of 4 KiB, and no score changes.
- ``H``: dense float16 — ``H`` then the entries, when the writer asks for half precision
  and sparse would not be smaller; it halves float32 at a small cost in recall, measured
  against float32 by ``tools/bench_semantic.py``.
- ``Q``: dense int8 — ``Q``, the dimension (uint32), one float32 scale, then each entry
  as a signed byte (entry = byte times scale; the scale is the largest magnitude / 127), and
  a zero byte when needed to keep the length odd. A quarter of float32: one byte per
  dimension. The error is at most half a step per entry; what it costs in recall against
  float32 is measured by ``tools/bench_semantic.py``.
- ``B``: sparse int8 — ``B``, the dimension (uint32), one float32 scale (as ``Q``), the
  positions of the non-zero steps (as ``S``) and the steps as signed bytes, and a zero byte
  when needed to keep the length odd. Written only when the writer asks for it
  (``sparse_int8``): three bytes per entry instead of six, within half a step like ``Q``.
- a bare float32 array (a length that is a multiple of 4): dense and exact, and what earlier
  versions always wrote. A tagged blob always has an odd length, so the two never look alike.

:class:`Rows` holds many blobs as one matrix — sparse rows (CSR) when the rows are sparse
(``S`` or ``B``), dense float32 otherwise — so a query costs its non-zero entries per row,
not the dimension.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from hirmem.semantic.errors import SemanticError

__all__ = ["INT8", "SPARSE_INT8", "Rows", "Timed", "dim_of", "int8_blob", "pack", "timed_rows",
           "unpack"]

F32 = npt.NDArray[np.float32]
SPARSE, HALF, INT8, SPARSE_INT8 = b"S", b"H", b"Q", b"B"
_HEAD = struct.Struct("<cI")
INT8_HEAD = struct.Struct("<cIf")  # tag, dimension, scale: the head of Q and B


def _index_dtype(dim: int) -> type[np.unsignedinteger[Any]]:
    return np.uint16 if dim <= 1 << 16 else np.uint32


def int8_blob(tag: bytes, dim: int, scale: float, body: bytes) -> bytes:
    """A ``Q`` or ``B`` blob (``tag``) from its dimension, scale and the bytes after its
    head, with the zero byte that keeps its length odd when needed."""
    blob = INT8_HEAD.pack(tag, dim, scale) + body
    return blob if len(blob) % 2 else blob + b"\0"


def _steps(v: F32) -> tuple[float, npt.NDArray[np.int8]]:
    """``v`` as one scale (the largest magnitude / 127) and a signed byte per entry."""
    top = float(np.max(np.abs(v))) if len(v) else 0.0
    if not math.isfinite(top):
        raise SemanticError("a vector with an infinite or NaN entry cannot be packed")
    scale = top / 127.0
    if scale == 0.0:
        return scale, np.zeros(len(v), dtype=np.int8)
    return scale, np.clip(np.rint(v / scale), -127, 127).astype(np.int8)


def pack(vec: npt.ArrayLike, *, half: bool = False, int8: bool = False,
         sparse_int8: bool = False) -> bytes:  # fmt: skip
    """``vec`` sparse when that is smaller, else dense: int8 when ``int8``, float16 when
    ``half`` (smaller, not exact), bare float32 otherwise (exact). The sparse form is
    float32 (exact) unless ``sparse_int8`` asks for int8 steps there too (``B``, when that
    is smaller still)."""
    v = np.asarray(vec, dtype=np.float32).reshape(-1)
    dim = int(v.shape[0])
    idx = _index_dtype(dim)
    width = np.dtype(idx).itemsize
    scale, steps = _steps(v) if int8 or sparse_int8 else (0.0, np.zeros(0, dtype=np.int8))
    nz = np.flatnonzero(v)
    sparse_size = _HEAD.size + len(nz) * (width + 4)
    dense_size = INT8_HEAD.size + dim if int8 else 1 + 2 * dim if half else 4 * dim
    if sparse_int8:
        kept = np.flatnonzero(steps)
        dense_written = dense_size | 1 if int8 else dense_size  # Q is padded to odd
        if (INT8_HEAD.size + len(kept) * (width + 1)) | 1 < min(sparse_size, dense_written):
            return int8_blob(SPARSE_INT8, dim, scale,
                             kept.astype(idx).tobytes() + steps[kept].tobytes())  # fmt: skip
    if sparse_size <= dense_size:
        return _HEAD.pack(SPARSE, dim) + nz.astype(idx).tobytes() + v[nz].tobytes()
    if int8:
        return int8_blob(INT8, dim, scale, steps.tobytes())
    return HALF + v.astype(np.float16).tobytes() if half else v.tobytes()


def dim_of(blob: bytes) -> int:
    """The dimension of a packed (or bare float32) vector."""
    if len(blob) % 2 == 0:
        if len(blob) % 4:
            raise SemanticError(f"a vector blob of {len(blob)} bytes is no known layout")
        return len(blob) // 4
    if blob[:1] == SPARSE:
        return int(_HEAD.unpack_from(blob)[1])
    if blob[:1] == HALF:
        return (len(blob) - 1) // 2
    if blob[:1] in (INT8, SPARSE_INT8) and len(blob) >= INT8_HEAD.size:
        return int(INT8_HEAD.unpack_from(blob)[1])
    raise SemanticError(f"a vector blob starting {blob[:1]!r} is no known layout")


def _sparse(blob: bytes) -> tuple[int, npt.NDArray[np.int64], F32]:
    """The dimension, positions and float32 values of an ``S`` or ``B`` blob."""
    if blob[:1] == SPARSE_INT8:
        _, dim, scale = INT8_HEAD.unpack_from(blob)
        width = np.dtype(_index_dtype(dim)).itemsize
        n, spare = divmod(len(blob) - INT8_HEAD.size, width + 1)
        if spare > 1:  # at most the one byte that keeps the length odd
            raise SemanticError(f"a sparse int8 vector blob of {len(blob)} bytes cannot hold "
                                f"whole entries of {width + 1} bytes")  # fmt: skip
        where = np.frombuffer(blob, dtype=_index_dtype(dim), count=n,
                              offset=INT8_HEAD.size).astype(np.int64)  # fmt: skip
        steps = np.frombuffer(blob, dtype=np.int8, count=n, offset=INT8_HEAD.size + n * width)
        vals = np.asarray(steps.astype(np.float32) * np.float32(scale), dtype=np.float32)
    else:
        dim = int(_HEAD.unpack_from(blob)[1])
        idx = _index_dtype(dim)
        n = (len(blob) - _HEAD.size) // (np.dtype(idx).itemsize + 4)
        cut = _HEAD.size + n * np.dtype(idx).itemsize
        where = np.frombuffer(blob, dtype=idx, count=n, offset=_HEAD.size).astype(np.int64)
        vals = np.frombuffer(blob, dtype=np.float32, count=n, offset=cut)
    if n and int(where.max()) >= dim:
        raise SemanticError(f"a sparse vector blob names position {int(where.max())} of a "
                            f"{dim}-dimensional vector")  # fmt: skip
    return dim, where, vals


def unpack(blob: bytes) -> F32:
    """The float32 vector a blob holds."""
    dim = dim_of(blob)
    if blob[:1] in (SPARSE, SPARSE_INT8) and len(blob) % 2:
        _, where, vals = _sparse(blob)
        out = np.zeros(dim, dtype=np.float32)
        out[where] = vals
        return out
    if blob[:1] == HALF and len(blob) % 2:
        return np.frombuffer(blob, dtype=np.float16, offset=1).astype(np.float32)
    if blob[:1] == INT8 and len(blob) % 2:
        _, dim, scale = INT8_HEAD.unpack_from(blob)
        if len(blob) - INT8_HEAD.size not in (dim, dim + 1):
            raise SemanticError(f"an int8 vector blob of {len(blob)} bytes cannot hold {dim} "
                                "entries")  # fmt: skip
        steps = np.frombuffer(blob, dtype=np.int8, count=dim, offset=INT8_HEAD.size)
        return np.asarray(steps.astype(np.float32) * np.float32(scale), dtype=np.float32)
    return np.frombuffer(blob, dtype=np.float32).copy()


class Rows:
    """Vectors as the rows of one matrix, built from their blobs."""

    def __init__(self, blobs: Sequence[bytes], dim: int) -> None:
        self.dim = dim
        self.n = len(blobs)
        self._dense: F32 | None = None
        # rows held in int8 steps are not unit length any more: their cosine divides by norms
        self.scaled = any(b[:1] in (INT8, SPARSE_INT8) and len(b) % 2 for b in blobs)
        if all(b[:1] in (SPARSE, SPARSE_INT8) and len(b) % 2 for b in blobs):
            parts = [_sparse(b) for b in blobs]
            for d, _, _ in parts:
                if d != dim:
                    raise SemanticError(f"vector of dimension {d}, the matrix holds {dim}")
            counts = np.fromiter((len(w) for _, w, _ in parts), dtype=np.int64, count=self.n)
            self._indptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
            self._indices = (np.concatenate([w for _, w, _ in parts]) if parts
                             else np.zeros(0, dtype=np.int64))  # fmt: skip
            self._data = (np.concatenate([v for _, _, v in parts]) if parts
                          else np.zeros(0, dtype=np.float32))  # fmt: skip
            self._row_of = np.repeat(np.arange(self.n, dtype=np.int64), counts)
        else:
            mat = np.zeros((self.n, dim), dtype=np.float32)
            for i, b in enumerate(blobs):
                v = unpack(b)
                if v.shape[0] != dim:
                    raise SemanticError(f"vector of dimension {v.shape[0]}, the matrix holds {dim}")
                mat[i] = v
            self._dense = mat
        self.norms = self._norms()

    @property
    def sparse(self) -> bool:
        return self._dense is None

    def _norms(self) -> F32:
        if self._dense is not None:
            out: F32 = np.linalg.norm(self._dense, axis=1).astype(np.float32)
            return out
        sq = np.bincount(self._row_of, weights=self._data.astype(np.float64) ** 2,
                         minlength=self.n)  # fmt: skip
        return np.sqrt(sq).astype(np.float32)

    def cosine(self, q: F32, rows: npt.NDArray[np.intp] | None = None) -> F32:
        """:meth:`dot` of a unit ``q``, divided by the rows' norms when some row was held in
        int8 steps (stored unit vectors are read as they are: their dot is their cosine)."""
        sims = self.dot(q, rows)
        if not self.scaled:
            return sims
        norms = self.norms if rows is None else self.norms[rows]
        out: F32 = np.divide(sims, norms, out=np.zeros_like(sims), where=norms > 0)
        return out

    def dot(self, q: F32, rows: npt.NDArray[np.intp] | None = None) -> F32:
        """``M @ q`` (float32), for every row or for ``rows`` in that order."""
        q = np.asarray(q, dtype=np.float32).reshape(-1)
        if self._dense is not None:
            m = self._dense if rows is None else self._dense[rows]
            out: F32 = (m @ q).astype(np.float32)
            return out
        if rows is None:
            prod = self._data * q[self._indices]
            return np.bincount(self._row_of, weights=prod, minlength=self.n).astype(np.float32)
        rows = np.asarray(rows, dtype=np.intp)
        if not len(rows):
            return np.zeros(0, dtype=np.float32)
        starts, ends = self._indptr[rows], self._indptr[rows + 1]
        counts = ends - starts
        # positions of every stored entry of the chosen rows, row by row
        offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
        at = np.arange(int(counts.sum()), dtype=np.int64) + offsets
        which = np.repeat(np.arange(len(rows), dtype=np.int64), counts)
        prod = self._data[at] * q[self._indices[at]]
        return np.bincount(which, weights=prod, minlength=len(rows)).astype(np.float32)


I64 = npt.NDArray[np.int64]
Timed = tuple[I64, I64, I64, Rows]


def timed_rows(rows: Sequence[Sequence[Any]], dim: int) -> Timed:
    """Query rows of (id, start, end, vector blob) as three int64 arrays (ids, starts,
    ends, in the rows' order) and the matrix of their vectors."""
    n = len(rows)
    return (np.fromiter((r[0] for r in rows), dtype=np.int64, count=n),
            np.fromiter((r[1] for r in rows), dtype=np.int64, count=n),
            np.fromiter((r[2] for r in rows), dtype=np.int64, count=n),
            Rows([r[3] for r in rows], dim))  # fmt: skip
