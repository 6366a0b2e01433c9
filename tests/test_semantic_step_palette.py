"""``C``: int8 steps by palette, the passages' and tier 1's vectors. A ``C`` blob holds the
very float32 values the ``B`` blob it replaces decodes to, is counted as int8 steps (a
matrix holding one is ``scaled``), and is written only when smaller; so every score, rank
and hit stays what ``B`` gave. Stores holding ``B`` rows (earlier files) read them as before:
no conversion is needed, and none is made."""

from __future__ import annotations

import shutil
import sqlite3
import struct
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from hirmem.semantic.errors import SemanticError
from hirmem.semantic.memories import MemoryIndex, Note
from hirmem.semantic.passages import PassageIndex
from hirmem.semantic.retrieve import Embedder
from hirmem.semantic.stores.packed import (
    SPARSE_INT8,
    STEP_PALETTE,
    Rows,
    dim_of,
    int8_blob,
    pack,
    pack_steps,
    unpack,
)

F32 = npt.NDArray[np.float32]
_WORDS = ["ada", "bo", "cy", "dee", "boiler", "pump", "valve", "oslo", "lima", "acme", "initech",
          "rowing", "chess", "fixing", "the", "a", "of", "works", "lives", "knows", "went",
          "with", "today", "weekends", "red", "blue", "cycle", "kreuzberg", "cat"]


def _as_b(v: npt.ArrayLike) -> bytes:
    """The oracle: the blob the passages and tier 1 wrote before ``C`` (``B`` when sparse)."""
    return pack(v, int8=True, sparse_int8=True)


def _hashed(rng: np.random.Generator, e: Embedder, n: int) -> list[F32]:
    out = []
    for _ in range(n):
        words = rng.choice(_WORDS, size=int(rng.integers(1, 60)))
        out.append(np.asarray(e.embed(" ".join(f"{w}{rng.integers(0, 9)}" if rng.random() < .3
                                                else str(w) for w in words)), dtype=np.float32))
    return out


def _random(rng: np.random.Generator, dim: int, n: int) -> list[F32]:
    """Sparse vectors of ``dim`` entries, some taking few magnitudes, some many."""
    out = []
    for _ in range(n):
        v = np.zeros(dim, dtype=np.float32)
        k = int(rng.integers(0, min(dim, 300) + 1))
        where = rng.choice(dim, size=k, replace=False)
        pal = rng.uniform(1e-3, 1e3, size=int(rng.integers(1, 6)))
        vals = (rng.choice(pal, size=k) if rng.random() < .6
                else rng.standard_normal(k) * rng.uniform(1e-3, 1e3))  # fmt: skip
        v[where] = vals * rng.choice([-1.0, 1.0], size=k)
        out.append(v)
    return out


def _decoded(blob: bytes) -> tuple[bytes, bytes]:
    """A blob's vector as bytes, so equality is bit for bit (signed zeros, NaN patterns)."""
    v = unpack(blob)
    return v.tobytes(), np.flatnonzero(v).tobytes()


def test_a_step_palette_holds_the_very_values_of_the_int8_blob_it_replaces() -> None:
    """Thousands of hashed and random vectors: ``pack_steps`` gives ``C`` exactly when it is
    smaller than ``B`` (and otherwise the very blob ``B``'s packing gave), decoding to the
    same float32 bits, of the same dimension."""
    rng = np.random.default_rng(16)
    vecs = _hashed(rng, Embedder(), 2_000)
    for dim in (7, 255, 256, 300, 1024, 4096, 70_000):
        vecs += _random(rng, dim, 40 if dim > 5_000 else 300)
    vecs.append(np.zeros(1024, dtype=np.float32))
    seen = {b"B": 0, b"C": 0}
    for v in vecs:
        old, new = _as_b(v), pack_steps(v)
        assert len(new) % 2 == 1 and dim_of(new) == dim_of(old) == len(v)
        assert _decoded(new) == _decoded(old)
        if new[:1] == STEP_PALETTE:
            assert old[:1] == SPARSE_INT8 and len(new) < len(old)
        else:
            assert new == old
        seen[old[:1]] = seen.get(old[:1], 0) + 1
        seen[new[:1]] = seen.get(new[:1], 0) + 1
    # both layouts occur, and a hashed vector is almost always smaller by palette
    assert seen[b"C"] > 2_000 and seen[b"B"] > 2_000 + 50
    hashed = [(len(_as_b(v)), len(pack_steps(v))) for v in vecs[:2_000]]
    old_total, new_total = (sum(x) for x in zip(*hashed, strict=True))
    assert new_total < 0.7 * old_total, (old_total, new_total)


@pytest.mark.parametrize("dim", [300, 1024, 4096])
def test_a_matrix_of_step_palettes_scores_bit_for_bit_as_the_int8_blobs(dim: int) -> None:
    """Rows of ``C`` blobs, of ``B`` blobs and of a mix (with ``S``, ``P`` and dense ``Q``
    rows too): the same ``scaled`` flag, the same norms, dot products and cosines, for
    every row and for a subset, bit for bit."""
    rng = np.random.default_rng(dim)
    vecs = (_hashed(rng, Embedder(dim), 300) if dim == 1024 else []) + _random(rng, dim, 300)
    olds = [_as_b(v) for v in vecs]
    news = [pack_steps(v) for v in vecs]
    assert any(b[:1] == STEP_PALETTE for b in news)
    mix = [n if i % 2 else o for i, (o, n) in enumerate(zip(olds, news, strict=True))]
    others = [pack(v, palette=True) for v in vecs[:20]] + [pack(rng.standard_normal(dim),
                                                                int8=True)]  # fmt: skip
    q = rng.standard_normal(dim).astype(np.float32)
    q /= np.linalg.norm(q)
    pick = rng.choice(len(vecs), size=len(vecs) // 3, replace=False)
    for extra in ([], others[:-1], others):  # all sparse; sparse with P and S; one dense
        want = Rows(olds + extra, dim)
        for blobs in (news + extra, mix + extra):
            got = Rows(blobs, dim)
            assert got.scaled is want.scaled is True and got.sparse is want.sparse
            assert got.norms.tobytes() == want.norms.tobytes()
            assert got.dot(q).tobytes() == want.dot(q).tobytes()
            assert got.cosine(q).tobytes() == want.cosine(q).tobytes()
            assert got.cosine(q, pick).tobytes() == want.cosine(q, pick).tobytes()
    # a matrix of exact palettes (P) alone is not scaled; one C among them makes it so
    exact = [b for b in others if b[:1] == b"P"]
    assert exact and not Rows(exact, dim).scaled
    assert Rows([*exact, next(b for b in news if b[:1] == STEP_PALETTE)], dim).scaled


def test_a_malformed_step_palette_is_refused_by_name() -> None:
    v = np.asarray(Embedder().embed("Ada Reyes is fixing boiler B017 today, Ada said."),
                   dtype=np.float32)  # fmt: skip
    c = pack_steps(v)
    assert c[:1] == STEP_PALETTE
    runs_at = 4 + 4 * c[3]
    with pytest.raises(SemanticError, match="no known layout"):
        unpack(c[:3])  # no whole head
    with pytest.raises(SemanticError, match="cannot hold its"):
        unpack(c[:runs_at - 1])  # cut inside its magnitudes (odd length kept)
    with pytest.raises(SemanticError, match=r"cannot hold its \d+ entries"):
        unpack(c[:-2])
    for bad in (c[:1] + struct.pack("<H", 300) + c[3:],  # a dimension its runs do not fit
                c[:3] + b"\0" + c[4:]):  # no magnitudes
        with pytest.raises(SemanticError):
            unpack(bad)
    with pytest.raises(SemanticError, match="dimension 1024, the matrix holds 512"):
        Rows([c, c], 512)
    with pytest.raises(SemanticError, match="dimension 1024, the matrix holds 512"):
        Rows([c, _as_b(v)], 512)
    with pytest.raises(SemanticError, match="no known layout"):
        dim_of(b"C\0")


# ---- the stores ------------------------------------------------------------------------------


def _b_of(blob: bytes) -> bytes:
    """The ``B`` blob a ``C`` blob replaced (its scale found back from its values: the
    largest step is 127), checked to decode to the very same values; others unchanged."""
    if blob[:1] != STEP_PALETTE:
        return blob
    v = unpack(blob)
    where = np.flatnonzero(v)
    vals = v[where]
    guess = np.float32(np.max(np.abs(vals)) / np.float32(127))
    toward = np.asarray([0.0, np.inf], dtype=np.float32)
    for scale in (guess, *np.nextafter(np.full(2, guess, dtype=np.float32), toward)):
        steps = np.rint(vals / scale).astype(np.int8)
        if (steps.astype(np.float32) * np.float32(scale)).tobytes() == vals.tobytes():
            width = "<u2" if len(v) <= 1 << 16 else "<u4"
            out = int8_blob(SPARSE_INT8, len(v), float(scale),
                            where.astype(width).tobytes() + steps.tobytes())  # fmt: skip
            assert unpack(out).tobytes() == v.tobytes()
            return out
    raise AssertionError("no scale reproduces the palette's values")


def _to_b(path: Path, table: str) -> int:
    """Rewrite a store file's ``C`` vectors as the ``B`` blobs they replaced; how many."""
    db = sqlite3.connect(path)
    rows = db.execute(f"SELECT id, vec FROM {table} WHERE substr(vec, 1, 1) = x'43'").fetchall()
    db.executemany(f"UPDATE {table} SET vec = ? WHERE id = ?", [(_b_of(v), i) for i, v in rows])
    db.commit()
    db.close()
    return len(rows)


_QUESTIONS = ["who is fixing the boiler", "boiler B017", "rowing on weekends", "Ada in Oslo",
              "what does Bo do", "chess club", "red valve pump", "kreuzberg cat", "Acme"]


def _texts(n: int) -> list[str]:
    rng = np.random.default_rng(7)
    people = ("Ada Reyes", "Bo Nair", "Cy Lind", "Dee Moreau")
    out = []
    for i in range(n):
        a = people[int(rng.integers(len(people)))]
        words = " ".join(rng.choice(_WORDS, size=int(rng.integers(3, 40))))
        out.append(f"{a} is fixing boiler B{i:03d} today. {a} said {words}." if i % 3 else
                   f"{a} went rowing on weekends with {words} in Oslo.")  # fmt: skip
    return out


def test_passages_and_memories_written_by_palette_answer_as_those_written_as_int8(
    tmp_path: Path,
) -> None:
    """A passage file and a tier-1 file written now (mostly ``C``), and copies whose every
    ``C`` vector is put back as the ``B`` blob it replaced (the files earlier versions wrote):
    the same hits, in the same ranks, with the same scores and similarities, for every
    question, fenced alike; and the vector legs' cosines over every row bit for bit."""
    e = Embedder()
    texts = _texts(120)
    p_new, m_new = tmp_path / "p.db", tmp_path / "m.db"
    passages = PassageIndex(e, p_new)
    for i, t in enumerate(texts):
        passages.add(f"doc-{i}", t, "team" if i % 4 else "other")
    passages.close()
    memories = MemoryIndex(e, m_new)
    memories.write_many([Note(t, "team" if i % 4 else "other", f"doc-{i}")
                         for i, t in enumerate(texts)])  # fmt: skip
    memories.close()
    p_old, m_old = tmp_path / "p_old.db", tmp_path / "m_old.db"
    shutil.copy(p_new, p_old)
    shutil.copy(m_new, m_old)
    assert _to_b(p_old, "passages") > 60 and _to_b(m_old, "tier1_memories") > 60
    new_p, old_p = PassageIndex(e, p_new), PassageIndex(e, p_old)
    new_m, old_m = MemoryIndex(e, m_new), MemoryIndex(e, m_old)
    for readable in ({"team"}, {"team", "other"}, {"other"}):
        for question in _QUESTIONS:
            got, want = new_p.search(question, 10, readable), old_p.search(question, 10, readable)
            assert got == want and got, (question, readable)
            got_m = new_m.search(question, 10, readable)
            assert got_m == old_m.search(question, 10, readable) and got_m, question
        q = np.asarray(e.embed("boiler rowing Oslo"), dtype=np.float32)
        for new, old in ((new_p, old_p), (new_m, old_m)):
            a, b = new._fenced(readable)[3], old._fenced(readable)[3]
            assert a.scaled is b.scaled is True
            assert a.dot(q).tobytes() == b.dot(q).tobytes()
            assert a.norms.tobytes() == b.norms.tobytes()
    # the old files' B rows are read as they are: opening converts nothing
    for idx in (new_p, old_p, new_m, old_m):
        idx.close()
    for path, table in ((p_old, "passages"), (m_old, "tier1_memories")):
        db = sqlite3.connect(path)
        assert db.execute(f"SELECT count(*) FROM {table} WHERE substr(vec, 1, 1) = x'43'"
                          ).fetchone() == (0,)  # fmt: skip
        db.close()
