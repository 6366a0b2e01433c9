"""Text embedders for recall similarity.

The default, :class:`HashEmbedder`, needs no model and no network: it folds the text
(:func:`hirmem.identity.fold`), takes character 3-, 4- and 5-grams with word-boundary
markers, hashes each with CRC-32 into one of ``dim`` buckets with a ±1 sign from
another hash bit, and L2-normalises the counts. Same text, same vector, on every
machine. Cosine similarity of two such vectors measures shared character n-grams.

Extension point: any object with ``dim`` and ``embed(text) -> float32 vector`` (unit
length) can be passed to the engine — e.g. an all-MiniLM-L6-v2 embedder loaded with
``safetensors`` and ``tokenizers``. It is not shipped here (no model weights are
installed); a store must use one embedder for its whole life (the dimension is
recorded in the store and checked on open).
"""

from __future__ import annotations

import zlib
from typing import Protocol

import numpy as np
import numpy.typing as npt

from hirmem.identity import fold

__all__ = ["Embedder", "HashEmbedder"]

F32 = npt.NDArray[np.float32]


class Embedder(Protocol):
    dim: int
    name: str

    def embed(self, text: str) -> F32: ...


class HashEmbedder:
    """Hashed character n-grams → fixed-width float32 unit vector."""

    def __init__(self, dim: int = 256, ngrams: tuple[int, ...] = (3, 4, 5)) -> None:
        self.dim = dim
        self.ngrams = ngrams
        self.name = f"hash-ngram-{dim}"

    def embed(self, text: str) -> F32:
        vec = np.zeros(self.dim, dtype=np.float32)
        words = fold(text).split(" ")
        for word in words:
            if not word:
                continue
            marked = f"\x02{word}\x03".encode()
            for n in self.ngrams:
                for k in range(max(1, len(marked) - n + 1)):
                    hv = zlib.crc32(marked[k : k + n])
                    vec[hv % self.dim] += 1.0 if hv & 0x80000000 else -1.0
        norm = float(np.linalg.norm(vec))
        if norm > 0:
            vec /= norm
        return vec
