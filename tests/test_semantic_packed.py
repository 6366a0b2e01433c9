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
