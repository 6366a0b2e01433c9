"""Retrieval (§7): cosine over weighted terms, scoped by the subject a question names.

Invariants:

- Each assertion is indexed by the span it was read from (its evidence), with metadata
  ``subject`` (the folded subject), ``triple``, ``chunk``, ``doc`` and the span's byte
  offsets ``start``/``end``. The evidence text is not copied into the index: a hit reads it
  from its chunk (``chunk`` resolves a chunk id), so the index costs a vector and a few ids,
  not the text again. An entry written before carries ``evidence`` and is read as it is.
- When the question names a known subject, the search is filtered to that subject through
  the vector store's metadata filter — no second index. With none named, the search is flat.
- A scoped search that finds nothing returns nothing: the memory declines rather than answer
  from turns about somebody else.
- The embedding is deterministic across processes (CRC-32 feature hashing, not ``hash()``).
"""

from __future__ import annotations

import math
import re
import zlib
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hirmem.protocol.identity import fold
from hirmem.semantic.names import NameIndex
from hirmem.semantic.stores.base import VectorStore
from hirmem.semantic.values import Chunk, Span, Triple

__all__ = ["Answer", "Embedder", "Hit", "Retriever", "subject_named"]

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_STOP_WORDS = (
    "a an the and or of to in on at for with is are was were be been it its this that what "
    "when where who whom which how why do does did has have had i you he she they we me my "
    "your his her their our from by as not no yes so"
)
STOP = frozenset(_STOP_WORDS.split(" "))


def _stem(w: str) -> str:
    """A light suffix strip, so "lives", "lived" and "living" meet "live"."""
    for suffix in ("ing", "ed", "es", "s"):
        if len(w) > len(suffix) + 2 and w.endswith(suffix) and not w.endswith("ss"):
            w = w[: -len(suffix)]
            break
    return w[:-1] if len(w) > 3 and w.endswith("e") else w


class Embedder:
    """Sublinear term frequency, signed feature hashing into ``dim`` dimensions."""

    def __init__(self, dim: int = 1024) -> None:
        self.dim = dim

    def terms(self, text: str) -> Counter[str]:
        return Counter(_stem(w) for w in _WORD.findall(text.lower()) if w not in STOP)

    def embed(self, text: str, drop: frozenset[str] = frozenset()) -> npt.NDArray[np.float32]:
        """The unit vector of ``text``; terms in ``drop`` (already stemmed) are left out."""
        v = np.zeros(self.dim, dtype=np.float32)
        for term, tf in self.terms(text).items():
            if term in drop:
                continue
            h = zlib.crc32(term.encode("utf-8"))
            v[h % self.dim] += (1.0 if h & 0x80000000 else -1.0) * (1.0 + math.log(tf))
        n = float(np.linalg.norm(v))
        return v / n if n > 0 else v


@dataclass(frozen=True, slots=True)
class Hit:
    triple: str
    chunk: str
    doc: str
    subject: str
    evidence: str
    score: float


@dataclass(frozen=True, slots=True)
class Answer:
    question: str
    subject: str | None  # the subject the question named (folded), None when flat
    hits: tuple[Hit, ...]


def subject_named(question: str, subjects: Iterable[str]) -> str | None:
    """The longest known subject (folded) that the question names as whole words."""
    q = f" {' '.join(_WORD.findall(fold(question)))} "
    best: str | None = None
    for s in subjects:
        words = " ".join(_WORD.findall(fold(s)))
        if words and f" {words} " in q and (best is None or len(words) > len(best)):
            best = fold(s)
    return best


class Retriever:
    def __init__(
        self,
        vectors: VectorStore,
        embedder: Embedder | None = None,
        chunk: Callable[[str], Chunk | None] | None = None,
    ) -> None:
        """``chunk`` resolves a chunk id to the stored chunk (the evidence of a hit is read
        from it); without one, the evidence is kept in the index beside the vector."""
        self.vectors = vectors
        self.embedder = embedder or Embedder()
        self.chunk = chunk

    @staticmethod
    def key(t: Triple) -> str:
        return f"{t.id}@{t.from_chunk.id}:{t.span.start}"

    def index(
        self, triples: Iterable[Triple], container: Callable[[Triple], str] | None = None
    ) -> int:
        """Index each assertion by its evidence span, in the container ``container`` names
        for it (the fence reads filter on it)."""
        items = [
            (self.key(t), self.embedder.embed(t.evidence),
             {"subject": fold(t.subject), "triple": t.id, "chunk": t.from_chunk.id,
              "doc": t.from_chunk.doc_id, "start": t.span.start, "end": t.span.end,
              **({"evidence": t.evidence} if self.chunk is None else {}),
              **({"container": container(t)} if container is not None else {})})
            for t in triples
        ]  # fmt: skip
        put_many = getattr(self.vectors, "put_many", None)
        if put_many is not None:
            put_many(items)
        else:
            for id, vec, meta in items:
                self.vectors.put(id, vec, meta)
        return len(items)

    def forget(self, triple_id: str) -> int:
        """Remove every indexed span of an assertion (erasure)."""
        zero = np.zeros(self.embedder.dim, dtype=np.float32)
        gone = 0
        for m in self.vectors.near(zero, 1 << 30, {"triple": triple_id}):
            gone += self.vectors.delete(m.id)
        return gone

    def ask(
        self,
        question: str,
        subjects: Iterable[str] | NameIndex,
        k: int = 5,
        scoped: bool = True,
        readable: Collection[str] | None = None,
    ) -> Answer:
        """``readable``: the containers the reader may read, applied in the vector query's
        filter (so before the top k is taken); none gives nothing. ``None`` is the local
        operator reading the whole store. ``subjects``: the known subjects, or an index of
        them (a lookup by the question's words rather than a pass over every subject)."""
        if readable is not None and not readable:
            return Answer(question, None, ())
        subject = None
        if scoped:
            subject = (subjects.named(question) if isinstance(subjects, NameIndex)
                       else subject_named(question, subjects))  # fmt: skip
        flt: dict[str, object] = {}
        if subject is not None:
            flt["subject"] = subject
        if readable is not None:
            flt["container"] = {"in": sorted(readable)}
        # the filter carries the subject; its name in the query would only match itself
        drop = frozenset(self.embedder.terms(subject)) if subject is not None else frozenset()
        found = self.vectors.near(self.embedder.embed(question, drop), k, flt or None)
        hits = tuple(
            Hit(str(m.meta["triple"]), str(m.meta["chunk"]), str(m.meta["doc"]),
                str(m.meta["subject"]), evidence, m.score)
            for m in found if m.score > 0.0 and (evidence := self.evidence(m.meta)) is not None
        )  # fmt: skip
        return Answer(question, subject, hits)

    def evidence(self, meta: Mapping[str, object]) -> str | None:
        """The text an entry was read from: kept in it (an entry written without a chunk
        resolver, or by an earlier version), else its span of the stored chunk; None when
        that chunk is gone."""
        held = meta.get("evidence")
        if isinstance(held, str):
            return held
        chunk = None if self.chunk is None else self.chunk(str(meta["chunk"]))
        start, end = meta.get("start"), meta.get("end")
        if chunk is None or not isinstance(start, int) or not isinstance(end, int):
            return None
        return Span(start, end).resolve(chunk)
