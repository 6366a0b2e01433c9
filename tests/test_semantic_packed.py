"""Packed vectors (issue 16 §5): compact on disk, the same scores as float32.

The oracle is plain numpy over float32: a packed vector unpacks to the very vector that was
packed (sparse and float32 layouts) or to its float16 rounding; a matrix of packed rows
scores a query as ``M @ q`` does, over thousands of random rows and row subsets.
"""

from __future__ import annotations

import numpy as np
import pytest

from hirmem.semantic.errors import SemanticError
from hirmem.semantic.retrieve import Embedder
from hirmem.semantic.stores.base import as_unit
from hirmem.semantic.stores.packed import Rows, dim_of, pack, unpack


def _random_rows(rng: np.random.Generator, n: int, dim: int, density: float) -> np.ndarray:
    mat = rng.standard_normal((n, dim)).astype(np.float32)
    mat[rng.random((n, dim)) >= density] = 0.0
    return mat


@pytest.mark.parametrize("density", [0.0, 0.005, 0.05, 0.5, 1.0])
def test_pack_round_trips_exactly_and_rows_score_as_numpy(density: float) -> None:
    rng = np.random.default_rng(int(density * 1000) + 16)
    for dim in (1, 7, 384, 1024):
        mat = _random_rows(rng, 400, dim, density)
        blobs = [pack(v) for v in mat]
        for v, b in zip(mat, blobs, strict=True):
            assert dim_of(b) == dim
            assert np.array_equal(unpack(b), v)
            assert len(b) <= 4 * dim + 5  # never much larger than float32
        rows = Rows(blobs, dim)
        assert rows.n == 400
        for _ in range(20):
            q = rng.standard_normal(dim).astype(np.float32)
            exact = mat.astype(np.float64) @ q.astype(np.float64)  # the oracle, in float64
            assert np.allclose(rows.dot(q), exact, rtol=1e-5, atol=1e-3)
            pick = rng.choice(400, size=int(rng.integers(0, 60)), replace=False)
            assert np.allclose(rows.dot(q, pick), exact[pick], rtol=1e-5, atol=1e-3)
        assert np.allclose(rows.norms, np.linalg.norm(mat, axis=1), rtol=1e-5, atol=1e-6)


def test_a_hashed_embedding_packs_sparse_in_tens_of_bytes_not_4_kib() -> None:
    e = Embedder()
    v = e.embed("Heidi Jones works at Stark Industries.")
    b = pack(v)
    assert b[:1] == b"S" and len(b) < 64, len(b)
    assert np.array_equal(unpack(b), v)
    assert Rows([b], e.dim).sparse


def test_half_precision_is_float16_rounding_and_halves_the_bytes() -> None:
    rng = np.random.default_rng(3)
    v = rng.standard_normal(384).astype(np.float32)
    b = pack(v, half=True)
    assert len(b) == 1 + 2 * 384 and b[:1] == b"H"
    assert np.array_equal(unpack(b), v.astype(np.float16).astype(np.float32))
    assert len(pack(v)) == 4 * 384  # dense float32 when exactness is asked for


def test_a_blob_of_no_known_layout_is_refused_with_its_reason() -> None:
    with pytest.raises(SemanticError, match="no known layout"):
        dim_of(b"X" + b"\0" * 8)
    with pytest.raises(SemanticError, match="no known layout"):
        dim_of(b"\0" * 6)
    with pytest.raises(SemanticError, match="dimension"):
        Rows([pack(np.ones(4, dtype=np.float32)), pack(np.ones(5, dtype=np.float32))], 4)


def test_an_empty_matrix_scores_nothing() -> None:
    rows = Rows([], 8)
    q = np.ones(8, dtype=np.float32)
    assert rows.n == 0 and rows.dot(q).shape == (0,) and rows.norms.shape == (0,)
    assert rows.dot(q, np.zeros(0, dtype=np.intp)).shape == (0,)


@pytest.mark.parametrize("dim", [1, 2, 7, 384, 1024])
def test_int8_is_within_half_a_step_of_each_entry_and_a_quarter_of_the_bytes(dim: int) -> None:
    """The oracle is the definition: each entry is a signed byte times one scale (the
    largest magnitude / 127), so no entry is further than half a step from the original;
    the blob is one byte per dimension and a 9-byte head, and always of odd length (a bare
    float32 blob is even)."""
    rng = np.random.default_rng(dim)
    mat = _random_rows(rng, 500, dim, 0.9) * rng.uniform(1e-3, 1e3, (500, 1)).astype(np.float32)
    blobs = [pack(v, int8=True) for v in mat]
    for v, b in zip(mat, blobs, strict=True):
        assert dim_of(b) == dim and len(b) % 2 == 1
        back = unpack(b)
        step = float(np.max(np.abs(v))) / 127
        assert np.all(np.abs(back - v) <= step / 2 + 1e-6 * step), (v, back)
        if b[:1] == b"Q":
            assert len(b) in (9 + dim, 10 + dim)
        else:  # sparse only when that is smaller still
            assert b[:1] == b"S" and len(b) <= 10 + dim
    dense = next(b for b in blobs if b[:1] == b"Q") if dim >= 7 else None
    if dense is not None:
        assert len(dense) <= len(pack(mat[0])) // 4 + 10  # a quarter of float32
    rows = Rows(blobs, dim)
    q = rng.standard_normal(dim).astype(np.float32)
    want = np.stack([unpack(b) for b in blobs]).astype(np.float64) @ q.astype(np.float64)
    assert np.allclose(rows.dot(q), want, rtol=1e-4, atol=1e-5 * float(np.max(np.abs(want))))
    zero = pack(np.zeros(dim, dtype=np.float32), int8=True)
    assert np.array_equal(unpack(zero), np.zeros(dim, dtype=np.float32))


def test_int8_refuses_what_it_cannot_hold() -> None:
    with pytest.raises(SemanticError, match="infinite or NaN"):
        pack(np.array([1.0, np.nan, 2.0], dtype=np.float32), int8=True)
    good = pack(np.arange(1, 12, dtype=np.float32), int8=True)
    with pytest.raises(SemanticError, match="cannot hold"):
        unpack(good[:-2])  # cut short by two bytes: the length is still odd


@pytest.mark.parametrize("dim", [1, 7, 384, 1024, 70_000])
def test_sparse_int8_is_within_half_a_step_and_the_smallest_layout_asked_for(dim: int) -> None:
    """``sparse_int8``: the oracle is the definition again (each kept entry a signed byte
    times the largest magnitude / 127), the blob the smallest of ``B``, ``S`` and ``Q`` as
    written, and a matrix of such rows (CSR when all are sparse) scoring as numpy does over
    the unpacked rows. Without ``sparse_int8`` no ``B`` is ever written."""
    rng = np.random.default_rng(dim + 8)
    n = 60 if dim > 2000 else 400
    density = rng.choice([0.0, 2 / max(dim, 1), 0.01, 0.3, 1.0], size=n)
    mat = rng.standard_normal((n, dim)).astype(np.float32)
    mat[rng.random((n, dim)) >= density[:, None]] = 0.0
    mat *= rng.uniform(1e-3, 1e3, (n, 1)).astype(np.float32)
    width = 2 if dim <= 1 << 16 else 4
    blobs = [pack(v, int8=True, sparse_int8=True) for v in mat]
    for v, b in zip(mat, blobs, strict=True):
        assert dim_of(b) == dim and len(b) % 2 == 1
        top = float(np.max(np.abs(v)))
        back = unpack(b)
        assert np.all(np.abs(back - v) <= top / 254 + 1e-7 * top), (v, back)
        kept = int(np.count_nonzero(np.rint(v / (top / 127)))) if top else 0
        sizes = {b"B": (9 + kept * (width + 1)) | 1,
                 b"S": 5 + int(np.count_nonzero(v)) * (width + 4), b"Q": (9 + dim) | 1}
        assert len(b) == sizes[b[:1]] == min(sizes.values()), (b[:1], sizes)
        assert pack(v, int8=True)[:1] != b"B"
    rows = Rows(blobs, dim)
    q = rng.standard_normal(dim).astype(np.float32)
    want = np.stack([unpack(b) for b in blobs]).astype(np.float64) @ q.astype(np.float64)
    tol = 1e-5 * float(np.max(np.abs(want)))
    assert np.allclose(rows.dot(q), want, rtol=1e-4, atol=tol)
    pick = rng.choice(n, size=n // 3, replace=False)
    assert np.allclose(rows.dot(q, pick), want[pick], rtol=1e-4, atol=tol)
    sparse_only = [b for b in blobs if b[:1] in (b"B", b"S")]
    assert Rows(sparse_only, dim).sparse


def test_sparse_int8_refuses_what_it_cannot_hold() -> None:
    v = np.zeros(300, dtype=np.float32)
    v[[4, 90, 299]] = [2.0, -1.0, 0.25]
    b = pack(v, int8=True, sparse_int8=True)
    assert b[:1] == b"B" and len(b) == 19
    with pytest.raises(SemanticError, match="whole entries"):
        unpack(b[:-2])  # cut short by two bytes: still odd
    beyond = b[:9] + (300).to_bytes(2, "little") + b[11:]  # a position past the dimension
    with pytest.raises(SemanticError, match="position 300"):
        unpack(beyond)
    with pytest.raises(SemanticError, match="position 300"):
        Rows([beyond], 300)
    with pytest.raises(SemanticError, match="infinite or NaN"):
        pack(np.array([0.0, np.inf, 0.0], dtype=np.float32), sparse_int8=True)


def _palette_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    """Sparse rows whose entries take a few magnitudes (as a hashed embedding's do), with
    some rows of many magnitudes, all-zero rows and dense rows among them."""
    mat = np.zeros((n, dim), dtype=np.float32)
    for row in mat:
        kind = rng.random()
        nnz = dim if kind < 0.05 else int(rng.integers(0, min(dim, 40) + 1))
        where = rng.choice(dim, size=nnz, replace=False)
        mags = (rng.random(int(rng.integers(1, 300 if kind > 0.95 else 6))) + 0.01)
        row[where] = (mags[rng.integers(0, len(mags), nnz)].astype(np.float32)
                      * rng.choice([-1.0, 1.0], nnz).astype(np.float32))
    return mat


@pytest.mark.parametrize("dim", [1, 7, 255, 256, 257, 1024, 4096, 65_535, 70_000])
def test_palette_packing_holds_the_very_floats_the_sparse_packing_holds(dim: int) -> None:
    """Differential, against ``S`` (the exact sparse packing): a ``P`` blob unpacks to the
    same float32 bits, a matrix of ``P`` rows (alone or mixed with other layouts) holds the
    same entries and scores a query the same, and ``P`` is written only when smaller."""
    rng = np.random.default_rng(dim)
    n = 60 if dim > 4096 else 400
    mat = _palette_rows(rng, n, dim)
    e = Embedder()
    if dim == e.dim:  # real vectors: the hashed embedding of generated sentences
        words = ["alice", "bob", "works", "lives", "paris", "acme", "knows", "oslo", "cat"]
        real = [as_unit(e.embed(" ".join(rng.choice(words, int(rng.integers(1, 30))))))
                for _ in range(2_000)]  # fmt: skip
        mat = np.vstack([mat, np.stack(real)])
    plain = [pack(v) for v in mat]
    coded = [pack(v, palette=True) for v in mat]
    for v, s, p in zip(mat, plain, coded, strict=True):
        assert unpack(p).tobytes() == unpack(s).tobytes() == np.where(v == 0, 0, v).tobytes()
        # in place of a smaller ``S`` only, so a matrix is sparse exactly when it was
        assert dim_of(p) == dim and (p == s or (s[:1] == b"S" and p[:1] == b"P"
                                                and len(p) < len(s) and len(p) % 2))
    if dim == e.dim:
        assert sum(p[:1] == b"P" for p in coded) > 0.9 * len(coded)
    mixed = [p if i % 3 else s for i, (s, p) in enumerate(zip(plain, coded, strict=True))]
    ref = Rows(plain, dim)
    for blobs in (coded, mixed):
        rows = Rows(blobs, dim)
        assert rows.sparse == ref.sparse
        if rows.sparse:
            assert np.array_equal(rows._indptr, ref._indptr)
            assert np.array_equal(rows._indices, ref._indices)
            assert rows._data.tobytes() == ref._data.tobytes()
        for _ in range(5):
            q = rng.standard_normal(dim).astype(np.float32)
            assert rows.dot(q).tobytes() == ref.dot(q).tobytes()
            pick = rng.choice(len(blobs), size=int(rng.integers(0, 60)), replace=False)
            assert rows.dot(q, pick).tobytes() == ref.dot(q, pick).tobytes()


def test_a_hashed_paragraph_by_palette_costs_under_half_the_sparse_bytes() -> None:
    e = Embedder()
    v = as_unit(e.embed("Heidi Jones works at Stark Industries. Heidi Jones likes chess. "
                        "Omar Tal lives in Lagos. Heidi Jones knows Omar Tal."))  # fmt: skip
    s, p = pack(v), pack(v, palette=True)
    assert p[:1] == b"P" and 2 * len(p) < len(s), (len(p), len(s))
    assert unpack(p).tobytes() == unpack(s).tobytes()


def test_a_palette_blob_that_does_not_hold_what_it_says_is_refused() -> None:
    e = Embedder()
    p = pack(as_unit(e.embed("Heidi Jones works at Stark Industries.")), palette=True)
    assert p[:1] == b"P"
    for bad in (p[:3], p[:-2], p + b"\0\0", p[:3] + b"\0" + p[4:],  # no magnitude
                p[:1] + (2).to_bytes(2, "little") + p[3:]):  # a 2-dimensional vector?
        with pytest.raises(SemanticError):
            unpack(bad)
        with pytest.raises(SemanticError):
            Rows([p, bad], e.dim)
