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
- ``P``: sparse by palette — ``P``, the dimension (uint16), the number of distinct
  magnitudes (uint8) and those magnitudes (float32, ascending), how many non-zero entries
  fall in each run of 256 positions (uint8 each), each entry's position within its run
  (uint8), then a sign bit and the magnitude's number (as few bits as the palette needs)
  per entry, packed, and a zero byte when needed to keep the length odd. Exact (it holds
  the very float32 values ``S`` holds) and written in place of ``S`` only, when the writer
  asks for it (``palette``) and it is smaller: a hashed embedding's entries take a few magnitudes
  (one per term frequency), so an entry costs a byte and a few bits instead of six.
- ``C``: int8 steps by palette — the layout of ``P`` holding the very float32 values a
  ``B`` blob decodes to (each step times the scale), tagged apart because those values are
  int8 steps: a matrix holding one is ``scaled`` as with ``B``, so every score stays bit for
  bit what ``B`` gives. Written in place of ``B`` only, when the writer asks for it
  (``step_palette``, or :func:`pack_steps`) and it is smaller: a hashed embedding's steps
  take a few magnitudes, so an entry costs a byte and a few bits instead of three.
- a bare float32 array (a length that is a multiple of 4): dense and exact, and what earlier
  versions always wrote. A tagged blob always has an odd length, so the two never look alike.

:class:`Rows` holds many blobs as one matrix — sparse rows (CSR) when the rows are sparse
(``S``, ``B``, ``P`` or ``C``), dense float32 otherwise — so a query costs its non-zero
entries per row, not the dimension.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from hirmem.semantic.errors import SemanticError

__all__ = ["INT8", "SPARSE_INT8", "STEP_PALETTE", "Rows", "Timed", "dim_of", "int8_blob", "pack",
           "pack_steps", "timed_rows", "unpack"]

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
SPARSE, HALF, INT8, SPARSE_INT8, PALETTE = b"S", b"H", b"Q", b"B", b"P"
STEP_PALETTE = b"C"  # the layout of P holding B's values (int8 steps times their scale)
PALETTES = (PALETTE, STEP_PALETTE)
SPARSE_TAGS = (SPARSE, SPARSE_INT8, *PALETTES)  # the layouts a matrix holds as CSR rows
SCALED_TAGS = (INT8, SPARSE_INT8, STEP_PALETTE)  # the layouts holding int8 steps
_HEAD = struct.Struct("<cI")
INT8_HEAD = struct.Struct("<cIf")  # tag, dimension, scale: the head of Q and B
PALETTE_HEAD = struct.Struct("<cHB")  # tag, dimension, number of magnitudes: the head of P
RUN = 256  # positions per run in ``P`` (an entry's position in its run is one byte)


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


def _palette_blob(v: F32, nz: npt.NDArray[np.intp]) -> bytes | None:
    """``v`` (its non-zero positions ``nz``) as a ``P`` blob, or None when it cannot be
    one (a dimension past uint16, 256 or more magnitudes, a run of 256 non-zero entries)."""
    dim = int(v.shape[0])
    if not 0 < dim < 1 << 16 or not len(nz):
        return None
    vals = v[nz]
    if not np.all(np.isfinite(vals)):
        raise SemanticError("a vector with an infinite or NaN entry cannot be packed")
    mags, which = np.unique(np.abs(vals), return_inverse=True)
    if len(mags) > 255:
        return None
    runs = np.bincount(nz // RUN, minlength=-(-dim // RUN))
    if int(runs.max()) > 255:
        return None
    width = (len(mags) - 1).bit_length()  # bits of a magnitude's number
    bits = np.zeros((len(nz), 1 + width), dtype=np.uint8)
    bits[:, 0] = np.signbit(vals)
    for b in range(width):  # most significant first
        bits[:, 1 + b] = (which >> (width - 1 - b)) & 1
    blob = (PALETTE_HEAD.pack(PALETTE, dim, len(mags)) + mags.astype("<f4").tobytes()
            + runs.astype(np.uint8).tobytes() + (nz % RUN).astype(np.uint8).tobytes()
            + np.packbits(bits.reshape(-1)).tobytes())  # fmt: skip
    return blob if len(blob) % 2 else blob + b"\0"


def _unpalette(blob: bytes) -> tuple[int, npt.NDArray[np.int64], F32]:
    """The dimension, positions and float32 values of a ``P`` (or ``C``) blob."""
    if len(blob) < PALETTE_HEAD.size:
        raise SemanticError(f"a palette vector blob of {len(blob)} bytes has no head")
    _, dim, m = PALETTE_HEAD.unpack_from(blob)
    nruns = -(-dim // RUN)
    at = PALETTE_HEAD.size + 4 * m
    if m == 0 or len(blob) < at + nruns:
        raise SemanticError(f"a palette vector blob of {len(blob)} bytes cannot hold its "
                            f"{m} magnitudes and {nruns} runs")  # fmt: skip
    mags = np.frombuffer(blob, dtype="<f4", count=m, offset=PALETTE_HEAD.size)
    runs = np.frombuffer(blob, dtype=np.uint8, count=nruns, offset=at)
    n = int(runs.sum(dtype=np.int64))
    width = (m - 1).bit_length()
    coded = at + nruns + n
    if len(blob) - coded - (-(-n * (1 + width) // 8)) not in (0, 1):
        raise SemanticError(f"a palette vector blob of {len(blob)} bytes cannot hold its "
                            f"{n} entries")  # fmt: skip
    low = np.frombuffer(blob, dtype=np.uint8, count=n, offset=at + nruns).astype(np.int64)
    where = np.repeat(np.arange(nruns, dtype=np.int64) * RUN, runs) + low
    bits = np.unpackbits(np.frombuffer(blob, dtype=np.uint8, offset=coded),
                         count=n * (1 + width)).reshape(n, 1 + width)  # fmt: skip
    which = np.zeros(n, dtype=np.int64)
    for b in range(1, 1 + width):
        which = (which << 1) | bits[:, b]
    if n and (int(which.max()) >= m or int(where.max()) >= dim):
        raise SemanticError("a palette vector blob names a magnitude or a position it "
                            "does not hold")  # fmt: skip
    vals = mags[which]
    return dim, where, np.where(bits[:, 0] == 1, -vals, vals).astype(np.float32)


def _palettes(blobs: Sequence[bytes], dim: int) -> tuple[I64, I64, F32]:
    """The entries per blob, positions and values of ``P`` blobs of dimension ``dim``, all
    decoded together (numpy passes over every blob at once, not a few per blob: a store
    of a hundred thousand vectors loads in a fraction of a second); the same entries as
    :func:`_unpalette` of each, refused alike."""
    k = len(blobs)
    nruns = -(-dim // RUN)
    heads = [PALETTE_HEAD.unpack_from(b) if len(b) >= PALETTE_HEAD.size else (b"", -1, 0)
             for b in blobs]  # fmt: skip
    for b, (_, d, m) in zip(blobs, heads, strict=True):
        if d != dim or m == 0 or len(b) < PALETTE_HEAD.size + 4 * m + nruns:
            got = _unpalette(b)[0]  # refuses a blob that holds no whole head
            raise SemanticError(f"vector of dimension {got}, the matrix holds {dim}")
    ms = np.fromiter((m for _, _, m in heads), dtype=np.int64, count=k)
    at = PALETTE_HEAD.size + 4 * ms  # where each blob's runs begin
    mags = np.frombuffer(b"".join(b[PALETTE_HEAD.size : a] for b, a in
                                  zip(blobs, at.tolist(), strict=True)), dtype="<f4")  # fmt: skip
    runs = np.frombuffer(b"".join(b[a : a + nruns] for b, a in zip(blobs, at.tolist(),
                                                                  strict=True)),
                         dtype=np.uint8).reshape(k, nruns)  # fmt: skip
    counts = runs.sum(axis=1, dtype=np.int64)
    coded = at + nruns + counts  # where each blob's packed bits begin
    widths = np.fromiter(((m - 1).bit_length() for _, _, m in heads), dtype=np.int64, count=k)
    held = np.fromiter((len(b) for b in blobs), dtype=np.int64, count=k) - coded
    bad = np.flatnonzero((held - (counts * (1 + widths) + 7) // 8) & ~1)  # neither 0 nor 1
    if len(bad):
        _unpalette(blobs[int(bad[0])])  # refuses it with its reason
        raise SemanticError("a palette vector blob cannot hold its entries")
    lows = np.frombuffer(b"".join(b[a + nruns : c] for b, a, c in zip(
        blobs, at.tolist(), coded.tolist(), strict=True)), dtype=np.uint8)  # fmt: skip
    bits = np.unpackbits(np.frombuffer(b"".join(b[c:] for b, c in zip(
        blobs, coded.tolist(), strict=True)), dtype=np.uint8))  # fmt: skip
    owner = np.repeat(np.arange(k, dtype=np.int64), counts)
    first = np.cumsum(counts) - counts
    starts = np.cumsum(held) - held  # each blob's first byte of packed bits
    local = np.arange(len(owner), dtype=np.int64) - first[owner]
    step = (1 + widths)[owner]
    at_bit = starts[owner] * 8 + local * step
    width = widths[owner]
    which = np.zeros(len(owner), dtype=np.int64)
    for bit in range(1, 1 + (int(widths.max()) if k else 0)):
        more = bit <= width
        which[more] = (which[more] << 1) | bits[at_bit[more] + bit]
    where = (np.repeat(np.tile(np.arange(nruns, dtype=np.int64) * RUN, k), runs.reshape(-1))
             + lows)  # fmt: skip
    if len(owner) and (np.any(which >= ms[owner]) or int(where.max()) >= dim):
        raise SemanticError("a palette vector blob names a magnitude or a position it "
                            "does not hold")  # fmt: skip
    vals = mags[(np.cumsum(ms) - ms)[owner] + which]
    vals = np.where(bits[at_bit] == 1, -vals, vals).astype(np.float32)
    return counts, where, vals


def _step_palette_blob(b: bytes) -> bytes | None:
    """The ``C`` blob of the very float32 values the ``B`` blob ``b`` decodes to, or None
    when it cannot be one (see :func:`_palette_blob`, or a step whose value underflows to
    zero, which ``C`` could not hold as an entry)."""
    dim, where, vals = _sparse(b)
    if not np.all(vals):
        return None
    v = np.zeros(dim, dtype=np.float32)
    v[where] = vals
    coded = _palette_blob(v, where.astype(np.intp))
    return None if coded is None else STEP_PALETTE + coded[1:]


def pack(vec: npt.ArrayLike, *, half: bool = False, int8: bool = False,
         sparse_int8: bool = False, palette: bool = False,
         step_palette: bool = False) -> bytes:  # fmt: skip
    """``vec`` sparse when that is smaller, else dense: int8 when ``int8``, float16 when
    ``half`` (smaller, not exact), bare float32 otherwise (exact). The sparse form is
    float32 (exact) unless ``sparse_int8`` asks for int8 steps there too (``B``, when that
    is smaller still); ``palette`` lets it be ``P`` (as exact) when that is smaller, and
    ``step_palette`` lets a ``B`` be ``C`` (the same values) when that is smaller."""
    v = np.asarray(vec, dtype=np.float32).reshape(-1)
    dim = int(v.shape[0])
    idx = _index_dtype(dim)
    width = np.dtype(idx).itemsize
    scale, steps = _steps(v) if int8 or sparse_int8 else (0.0, np.zeros(0, dtype=np.int8))
    nz = np.flatnonzero(v)
    sparse_size = _HEAD.size + len(nz) * (width + 4)
    dense_size = INT8_HEAD.size + dim if int8 else 1 + 2 * dim if half else 4 * dim
    if palette and sparse_size <= dense_size:  # in place of ``S`` only: a matrix of these
        coded = _palette_blob(v, nz)  # rows is sparse exactly when it would have been
        if coded is not None and len(coded) < sparse_size:
            return coded
    if sparse_int8:
        kept = np.flatnonzero(steps)
        dense_written = dense_size | 1 if int8 else dense_size  # Q is padded to odd
        if (INT8_HEAD.size + len(kept) * (width + 1)) | 1 < min(sparse_size, dense_written):
            out = int8_blob(SPARSE_INT8, dim, scale,
                            kept.astype(idx).tobytes() + steps[kept].tobytes())  # fmt: skip
            coded = _step_palette_blob(out) if step_palette else None
            return coded if coded is not None and len(coded) < len(out) else out
    if sparse_size <= dense_size:
        return _HEAD.pack(SPARSE, dim) + nz.astype(idx).tobytes() + v[nz].tobytes()
    if int8:
        return int8_blob(INT8, dim, scale, steps.tobytes())
    return HALF + v.astype(np.float16).tobytes() if half else v.tobytes()


def pack_steps(vec: npt.ArrayLike) -> bytes:
    """``vec`` as the passages and tier 1 keep it: int8 steps with one scale, sparse when
    smaller (``B``, or ``C`` holding the same values when that is smaller still)."""
    return pack(vec, int8=True, sparse_int8=True, step_palette=True)


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
    if blob[:1] in PALETTES and len(blob) >= PALETTE_HEAD.size:
        return int(PALETTE_HEAD.unpack_from(blob)[1])
    raise SemanticError(f"a vector blob starting {blob[:1]!r} is no known layout")


def _sparse(blob: bytes) -> tuple[int, npt.NDArray[np.int64], F32]:
    """The dimension, positions and float32 values of an ``S``, ``B``, ``P`` or ``C`` blob."""
    if blob[:1] in PALETTES:
        return _unpalette(blob)
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
    if blob[:1] in SPARSE_TAGS and len(blob) % 2:
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


def _csr(blobs: Sequence[bytes], dim: int) -> tuple[I64, I64, F32]:
    """The entries per row, positions and values of sparse blobs (``S``, ``B``, ``P``, ``C``)
    of dimension ``dim``, row after row; the ``P`` and ``C`` blobs decoded together
    (:func:`_palettes`)."""
    pal = [i for i, b in enumerate(blobs) if b[:1] in PALETTES]
    if len(pal) == len(blobs):
        return _palettes(blobs, dim)
    parts: list[tuple[npt.NDArray[np.int64], F32]] = []
    for b in blobs:
        d, where, vals = (dim, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)) if (
            b[:1] in PALETTES) else _sparse(b)  # fmt: skip
        if d != dim:
            raise SemanticError(f"vector of dimension {d}, the matrix holds {dim}")
        parts.append((where, vals))
    if pal:  # placed among the others, row by row
        counts, where, vals = _palettes([blobs[i] for i in pal], dim)
        cut = np.cumsum(counts)[:-1]
        for i, w, v in zip(pal, np.split(where, cut), np.split(vals, cut), strict=True):
            parts[i] = (w, v)
    return (np.fromiter((len(w) for w, _ in parts), dtype=np.int64, count=len(parts)),
            np.concatenate([w for w, _ in parts]).astype(np.int64),
            np.concatenate([v for _, v in parts]).astype(np.float32))  # fmt: skip


class Rows:
    """Vectors as the rows of one matrix, built from their blobs."""

    def __init__(self, blobs: Sequence[bytes], dim: int) -> None:
        self.dim = dim
        self.n = len(blobs)
        self._dense: F32 | None = None
        # rows held in int8 steps are not unit length any more: their cosine divides by norms
        self.scaled = any(b[:1] in SCALED_TAGS and len(b) % 2 for b in blobs)
        if all(b[:1] in SPARSE_TAGS and len(b) % 2 for b in blobs):
            counts, self._indices, self._data = _csr(blobs, dim)
            self._indptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
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


Timed = tuple[I64, I64, I64, Rows]


def timed_rows(rows: Sequence[Sequence[Any]], dim: int) -> Timed:
    """Query rows of (id, start, end, vector blob) as three int64 arrays (ids, starts,
    ends, in the rows' order) and the matrix of their vectors."""
    n = len(rows)
    return (np.fromiter((r[0] for r in rows), dtype=np.int64, count=n),
            np.fromiter((r[1] for r in rows), dtype=np.int64, count=n),
            np.fromiter((r[2] for r in rows), dtype=np.int64, count=n),
            Rows([r[3] for r in rows], dim))  # fmt: skip
