"""Retrieval (§7): cosine over weighted terms, scoped by the subject a question names.

Invariants:

- Each assertion is indexed by the span it was read from (its evidence), with metadata
  ``subject`` (the folded subject), ``triple``, ``chunk``, ``doc`` and the span's byte
  offsets ``start``/``end``. The evidence text is not copied into the index: a hit reads it
  from its chunk (``chunk`` resolves a chunk id), so the index costs a vector and a few ids,
  not the text again. An entry written before carries ``evidence`` and is read as it is.
- When the question names a known subject, the search is filtered to that subject through
  the vector store's metadata filter — no second index. With none named, the search is flat.
- The fence covers naming too: a reader with readable containers has the question's subject
  resolved only among the subjects indexed in those containers (kept per container as
  entries come and go), so a name known only behind the fence neither scopes the search
  nor tells the reader that it exists.
- A scoped search that finds nothing returns nothing: the memory declines rather than answer
  from turns about somebody else.
- The vectors come from :func:`default_embedder`: all-MiniLM-L6-v2 where it is installed,
  else the hashed embedding (``HIRMEM_EMBEDDER`` picks one), deterministic across
  processes either way (the hashed one by CRC-32 feature hashing, not ``hash()``).
"""

from __future__ import annotations

import math
import os
import re
import threading
import zlib
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from hirmem.protocol.identity import fold
from hirmem.semantic.errors import SemanticError
from hirmem.semantic.names import NameIndex
from hirmem.semantic.stores.base import Match, VectorStore
from hirmem.semantic.values import Chunk, Span, Triple

F32 = npt.NDArray[np.float32]

__all__ = [
    "EMBEDDER_ENV",
    "Answer",
    "Embedder",
    "Hit",
    "Retriever",
    "TextEmbedder",
    "default_embedder",
    "embedder_identity",
    "subject_named",
]

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


class TextEmbedder(Protocol):
    """What a vector index needs: a fixed dimension and a vector per text."""

    @property
    def dim(self) -> int: ...

    def embed(self, text: str) -> F32: ...


EMBEDDER_ENV = "HIRMEM_EMBEDDER"  # "minilm", "hash", or unset: MiniLM where installed


def default_embedder() -> TextEmbedder:
    """The substrate's embedder (passages and assertions) when none is handed in:
    all-MiniLM-L6-v2 where its packages and weights are installed, else the hashed-term
    :class:`Embedder` as the fallback. ``HIRMEM_EMBEDDER=hash`` asks for the fallback (a
    host without the CPU to spare); ``=minilm`` insists on MiniLM and fails with the
    install command when it is missing."""
    choice = os.environ.get(EMBEDDER_ENV, "").strip().lower()
    if choice not in ("", "minilm", "hash"):
        raise SemanticError(f"{EMBEDDER_ENV} is 'minilm' or 'hash', got {choice!r}")
    if choice != "hash":
        from hirmem.embed.minilm import MiniLMEmbedder, MiniLMUnavailable

        try:
            return MiniLMEmbedder()
        except MiniLMUnavailable:
            if choice == "minilm":
                raise
    return Embedder()


def embedder_identity(embedder: TextEmbedder) -> str:
    """What a store records of the embedder its vectors came from."""
    return f"{getattr(embedder, 'name', type(embedder).__qualname__)}/{embedder.dim}"


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


FILTERED = ("subject", "container", "doc")  # the metadata keys queries filter on (an
# assertion's entries are found by their ids' prefix where the store can, :meth:`forget`)


class Retriever:
    def __init__(
        self,
        vectors: VectorStore,
        embedder: TextEmbedder | None = None,
        chunk: Callable[[str], Chunk | None] | None = None,
    ) -> None:
        """``embedder``: :func:`default_embedder` when none is given (MiniLM where
        installed). ``chunk`` resolves a chunk id to the stored chunk (the evidence of a
        hit is read from it); without one, the evidence is kept in the index beside the
        vector."""
        self.vectors = vectors
        index_only = getattr(vectors, "index_only", None)
        if index_only is not None:  # the keys a query of this class filters on, no more
            index_only(FILTERED)
        quantize = getattr(vectors, "quantize", None)
        if quantize is not None:  # a dense embedding (MiniLM) in int8 steps, as passages are
            quantize()
        self.embedder = embedder if embedder is not None else default_embedder()
        self.chunk = chunk
        self._lock = threading.Lock()
        # container -> folded subject -> entries indexed; None until first needed, then
        # read once from the vector store and kept up to date by index and forget
        self._subjects: dict[str, Counter[str]] | None = None
        self._names: dict[tuple[str, ...], NameIndex] = {}  # per readable set, until a change

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
        with self._lock:
            if self._subjects is not None:
                for _, _, meta in items:
                    self._count(meta, +1)
                self._names.clear()
        return len(items)

    def reembed(self) -> int:
        """Embed every indexed entry again with this retriever's embedder, from the evidence
        its chunk holds (the embedder changed: a store keeps vectors of one space only).
        Nothing is changed unless every entry's evidence reads; raises
        :class:`~hirmem.semantic.errors.SemanticError` naming the first that does not.
        Returns how many entries were embedded again."""
        held = self.vectors.near(np.zeros(self._held_dim(), dtype=np.float32), 1 << 30)
        items = []
        for m in held:
            text = self.evidence(m.meta)
            if text is None:
                raise SemanticError(f"entry {m.id}: its evidence (chunk {m.meta.get('chunk')}) "
                                    "is no longer stored")  # fmt: skip
            items.append((m.id, self.embedder.embed(text), m.meta))
        with self._lock:
            replace_all = getattr(self.vectors, "replace_all", None)
            if replace_all is not None:  # in one transaction: all old or all new
                replace_all(items)
            else:
                for m in held:
                    self.vectors.delete(m.id)
                for id, vec, meta in items:
                    self.vectors.put(id, vec, meta)
            self._names.clear()
        return len(items)

    def _held_dim(self) -> int:
        """The dimension of the vectors the store holds (another embedder's, perhaps)."""
        dim = getattr(self.vectors, "dim", None)
        return int(dim) if isinstance(dim, int) else self.embedder.dim

    def forget(self, triple_id: str) -> int:
        """Remove every indexed span of an assertion (erasure). Its entries' ids begin with
        its id (:meth:`key`): a store that lists ids by prefix finds them by its key's index,
        so the filter index need not hold a term per assertion; another is filtered."""
        prefixed = getattr(self.vectors, "with_prefix", None)
        if prefixed is None:
            return self._drop({"triple": triple_id})
        with self._lock:
            return self._gone(prefixed(f"{triple_id}@"))

    def forget_doc(self, doc_id: str) -> int:
        """Remove every indexed span read from document ``doc_id`` (superseded, re-read
        with another chunking, or erased)."""
        return self._drop({"doc": doc_id})

    def _drop(self, flt: Mapping[str, object]) -> int:
        zero = np.zeros(self._held_dim(), dtype=np.float32)
        with self._lock:
            return self._gone(self.vectors.near(zero, 1 << 30, flt))

    def _gone(self, entries: Iterable[Match]) -> int:
        """Delete ``entries`` from the store and from the subjects counted; how many."""
        gone = 0
        for m in entries:
            if self.vectors.delete(m.id):
                gone += 1
                if self._subjects is not None:
                    self._count(m.meta, -1)
        self._names.clear()
        return gone

    def _count(self, meta: Mapping[str, object], step: int) -> None:
        assert self._subjects is not None
        held = self._subjects.setdefault(str(meta.get("container", "")), Counter())
        subject = str(meta.get("subject", ""))
        held[subject] += step
        if held[subject] <= 0:
            del held[subject]

    def subjects_in(self, readable: Collection[str]) -> NameIndex:
        """The subjects of the entries indexed in the ``readable`` containers, by their
        words; built once per readable set and kept until the index changes."""
        key = tuple(sorted(readable))
        with self._lock:
            if self._subjects is None:
                self._subjects = {}
                zero = np.zeros(self.embedder.dim, dtype=np.float32)
                for m in self.vectors.near(zero, 1 << 30):
                    self._count(m.meta, +1)
            held = self._names.get(key)
            if held is None:
                if len(self._names) >= 8:
                    self._names.clear()
                held = self._names[key] = NameIndex(
                    s for c in key for s in self._subjects.get(c, ()))
            return held

    def ask(
        self,
        question: str,
        subjects: Iterable[str] | NameIndex,
        k: int = 5,
        scoped: bool = True,
        readable: Collection[str] | None = None,
    ) -> Answer:
        """``readable``: the containers the reader may read, applied in the vector query's
        filter (so before the top k is taken) and to the subject the question is scoped to
        (resolved among those containers' subjects only); none gives nothing. ``None`` is
        the local operator reading the whole store, whose question is scoped among
        ``subjects``: the known subjects, or an index of them (a lookup by the question's
        words rather than a pass over every subject)."""
        if readable is not None and not readable:
            return Answer(question, None, ())
        if readable is not None:
            subjects = self.subjects_in(readable)
        subject = None
        if scoped:
            subject = (subjects.named(question) if isinstance(subjects, NameIndex)
                       else subject_named(question, subjects))  # fmt: skip
        flt: dict[str, object] = {}
        if subject is not None:
            flt["subject"] = subject
        if readable is not None:
            flt["container"] = {"in": sorted(readable)}
        found = self.vectors.near(self.query_vector(question, subject), k, flt or None)
        hits = tuple(
            Hit(str(m.meta["triple"]), str(m.meta["chunk"]), str(m.meta["doc"]),
                str(m.meta["subject"]), evidence, m.score)
            for m in found if m.score > 0.0 and (evidence := self.evidence(m.meta)) is not None
        )  # fmt: skip
        return Answer(question, subject, hits)

    def query_vector(self, question: str, subject: str | None) -> F32:
        """The question's vector without the subject's name: the filter carries the
        subject, and its name in the query would only match itself."""
        if subject is None:
            return np.asarray(self.embedder.embed(question), dtype=np.float32)
        if isinstance(self.embedder, Embedder):
            return self.embedder.embed(question, frozenset(self.embedder.terms(subject)))
        named = set(_WORD.findall(fold(subject)))
        rest = " ".join(w for w in question.split() if fold(w).strip(".,;:!?'\"") not in named)
        return np.asarray(self.embedder.embed(rest if rest.strip() else question),
                          dtype=np.float32)  # fmt: skip

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
