"""Retrieval (§7): cosine over weighted terms, scoped by the subject a question names.

Invariants:

- One vector per chunk, not per assertion: a chunk's entry (id: the chunk id) holds the
  vector of the chunk's text, its ``container`` and the folded ``subject`` of each
  assertion read from it (what the filter reads); the assertions themselves (id, span) are
  the ledger's to list (``listed``: each edge's sources name their chunk and span), so the
  entry holds no copy of them (an index without a ledger lists them in the entry:
  ``triple``, ``subject``, ``start``/``end``, parallel lists). No text is copied into the
  index: a hit's evidence is its span of the stored chunk
  (``chunk`` resolves a chunk id). A hit ranks by how many of the question's words its
  span holds, then by its chunk's cosine (its score). A store of the earlier layout (an
  entry per assertion) is folded into entries per chunk by :meth:`Retriever.reembed`.
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

import functools
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
from hirmem.semantic.values import Chunk, Triple

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


FILTERED = ("subject", "container")  # the metadata keys queries filter on (a chunk's entry
# is found by its id, a document's entries by their ids' prefix where the store can)
LISTED = ("subject", "triple", "start", "end")  # an entry's assertions, one list each
CANDIDATES = 64  # chunks ranked at least, before their assertions are ranked in them
_TERMS = Embedder()  # the words a span and a question are matched by (stemmed, no stop words)


@functools.lru_cache(maxsize=1 << 15)
def _words(text: str) -> frozenset[str]:
    """The matched words of ``text`` (a span read again by the next question is not
    stemmed again; the cache is bounded)."""
    return frozenset(_TERMS.terms(text))


def assertions_of(meta: Mapping[str, object]) -> list[tuple[str, str, int, int]]:
    """(triple id, folded subject, start, end) of each assertion a chunk's entry lists; an
    entry of the earlier layout (one assertion, scalars) lists its one."""
    held = [meta.get(k) for k in LISTED]
    if all(isinstance(v, list) for v in held):
        subjects, triples, starts, ends = (list(v) for v in held if isinstance(v, list))
        return [(str(t), str(s), int(a), int(b))
                for s, t, a, b in zip(subjects, triples, starts, ends, strict=True)]  # fmt: skip
    s, t, a, b = held
    if isinstance(a, int) and isinstance(b, int):
        return [(str(t), str(s), a, b)]
    return []


class Retriever:
    """One vector per chunk, not per assertion: a chunk's entry (its id is the chunk id) holds
    the chunk's vector and lists the assertions read from it (their ids, folded subjects and
    spans, as parallel lists under :data:`LISTED`), in the container the fence filters on.
    A question ranks chunks by their vectors (filtered to the subject it names, inside the
    query); the assertions of the best chunks are then ranked by how many of the question's
    words their span holds, then by their chunk's score, so that of a two-sentence chunk the
    sentence that answers comes first. A hit's score is its chunk's cosine."""

    def __init__(
        self,
        vectors: VectorStore,
        embedder: TextEmbedder | None = None,
        chunk: Callable[[str], Chunk | None] | None = None,
        listed: Callable[[str], list[tuple[str, str, int, int]]] | None = None,
    ) -> None:
        """``embedder``: :func:`default_embedder` when none is given (MiniLM where
        installed). ``chunk`` resolves a chunk id to the stored chunk (a chunk's text and a
        hit's evidence are read from it); without one, the chunk's text is kept in the index
        beside the vector. ``listed`` gives the assertions read from a chunk (id, folded
        subject, start, end: the ledger's :meth:`~hirmem.semantic.assertions.Ledger.read_from`);
        with it, an entry keeps only its container and its assertions' subjects (what the
        filter reads), not a copy of the list; without one, the entry lists them."""
        self.vectors = vectors
        self.listed = listed
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
        """The id of the entry an assertion is listed in: its chunk's."""
        return t.from_chunk.id

    def index(
        self, triples: Iterable[Triple], container: Callable[[Triple], str] | None = None
    ) -> int:
        """List each assertion in its chunk's entry (one vector per chunk), in the container
        ``container`` names for it (the fence reads filter on it); an assertion already
        listed there at the same span is listed once. Returns how many entries were written."""
        grouped: dict[str, list[Triple]] = {}
        for t in triples:
            grouped.setdefault(self.key(t), []).append(t)
        items = []
        olds = []
        for cid, ts in grouped.items():
            held = self._entry(cid)
            listed = [] if held is None else self.assertions(cid, held.meta)
            seen = {(t, a, b) for t, _, a, b in listed}
            for t in ts:
                if (t.id, t.span.start, t.span.end) not in seen:
                    seen.add((t.id, t.span.start, t.span.end))
                    listed.append((t.id, fold(t.subject), t.span.start, t.span.end))
            place = (container(ts[0]) if container is not None
                     else None if held is None else held.meta.get("container"))  # fmt: skip
            chunk = ts[0].from_chunk
            items.append((cid, self.embedder.embed(chunk.text),
                          self._meta(listed, place, chunk.text)))  # fmt: skip
            if held is not None:
                olds.append(held.meta)
        self._write(items)
        with self._lock:
            if self._subjects is not None:
                for meta in olds:
                    self._count(meta, -1)
                for _, _, meta in items:
                    self._count(meta, +1)
            self._names.clear()
        return len(items)

    def _meta(self, listed: list[tuple[str, str, int, int]], container: object,
              text: str) -> dict[str, object]:  # fmt: skip
        meta: dict[str, object] = {} if container is None else {"container": container}
        if self.listed is not None:  # the list is the ledger's: the subjects, each once
            meta["subject"] = list(dict.fromkeys(s for _, s, _, _ in listed))
        else:
            meta.update({"subject": [s for _, s, _, _ in listed],
                         "triple": [t for t, _, _, _ in listed],
                         "start": [a for _, _, a, _ in listed],
                         "end": [b for _, _, _, b in listed]})  # fmt: skip
        if self.chunk is None:
            meta["text"] = text
        return meta

    def _write(self, items: list[tuple[str, F32, dict[str, object]]]) -> None:
        put_many = getattr(self.vectors, "put_many", None)
        if put_many is not None:
            put_many(items)
        else:
            for id, vec, meta in items:
                self.vectors.put(id, vec, meta)

    def _entry(self, id: str) -> Match | None:
        """The entry ``id`` if the store holds it (a store that cannot say: None)."""
        get = getattr(self.vectors, "get", None)
        if get is None:
            return None
        found = get(id)
        return found if isinstance(found, Match) else None

    def chunk_text(self, id: str, meta: Mapping[str, object]) -> str | None:
        """The text of the chunk an entry stands for: kept in it (an index without a chunk
        resolver), else read from the stored chunk; None when that chunk is gone."""
        held = meta.get("text")
        if isinstance(held, str):
            return held
        if self.chunk is None:
            return None
        chunk = self.chunk(str(meta.get("chunk", id)))
        return None if chunk is None else chunk.text

    def reembed(self) -> int:
        """Embed every indexed chunk again with this retriever's embedder, from its text (the
        embedder changed: a store keeps vectors of one space only); an entry of the earlier
        layout (one per assertion) is folded into its chunk's entry on the way. Nothing is
        changed unless every chunk reads; raises
        :class:`~hirmem.semantic.errors.SemanticError` naming the first that does not.
        Returns how many entries were embedded again."""
        held = self.vectors.near(np.zeros(self._held_dim(), dtype=np.float32), 1 << 30)
        entries: dict[str, tuple[str, list[tuple[str, str, int, int]], object]] = {}
        for m in held:
            cid = str(m.meta.get("chunk", m.id))
            text = self.chunk_text(m.id, m.meta)
            if text is None:
                raise SemanticError(f"entry {m.id}: its chunk {cid} is no longer stored")
            had = entries.get(cid)
            listed = (had[1] if had else []) + self.assertions(cid, m.meta)
            entries[cid] = (text, listed, m.meta.get("container"))
        items = []
        for cid, (text, listed, place) in entries.items():
            once = list(dict.fromkeys(listed))
            items.append((cid, self.embedder.embed(text), self._meta(once, place, text)))
        with self._lock:
            replace_all = getattr(self.vectors, "replace_all", None)
            if replace_all is not None:  # in one transaction: all old or all new
                replace_all(items)
            else:
                for m in held:
                    self.vectors.delete(m.id)
                self._write(items)
            self._subjects = None
            self._names.clear()
        return len(items)

    def assertions(self, chunk_id: str, meta: Mapping[str, object]
                   ) -> list[tuple[str, str, int, int]]:  # fmt: skip
        """(triple id, folded subject, start, end) of each assertion the entry of chunk
        ``chunk_id`` stands for: the ledger's list when the entry keeps none (``listed``),
        else the entry's own (an entry of an earlier layout lists them)."""
        if self.listed is not None and "triple" not in meta:
            return self.listed(chunk_id)
        return assertions_of(meta)

    def _held_dim(self) -> int:
        """The dimension of the vectors the store holds (another embedder's, perhaps)."""
        dim = getattr(self.vectors, "dim", None)
        return int(dim) if isinstance(dim, int) else self.embedder.dim

    def forget(self, triple_id: str, chunks: Iterable[str] | None = None) -> int:
        """Take an assertion out of the entries of ``chunks`` (the chunks it was read from;
        None: every entry listing it, found by the filter); an entry left listing nothing
        is deleted. Returns how many entries changed."""
        if chunks is None:
            if self.listed is not None:
                raise SemanticError(f"forget({triple_id!r}) needs the chunks it was read from: "
                                    "the entries do not list their assertions (the ledger "
                                    "does: Edge.sources)")  # fmt: skip
            zero = np.zeros(self._held_dim(), dtype=np.float32)
            found = self.vectors.near(zero, 1 << 30, {"triple": triple_id})
        else:
            found = [m for c in dict.fromkeys(chunks) if (m := self._entry(c)) is not None]
        changed = 0
        with self._lock:
            for m in found:
                # (the ledger's list has lost the assertion already when it was erased)
                listed = self.assertions(m.id, m.meta)
                keep = [a for a in listed if a[0] != triple_id]
                if keep and (len(keep) == len(listed) if self.listed is None else
                             list(dict.fromkeys(s for _, s, _, _ in keep))
                             == m.meta.get("subject")):  # fmt: skip
                    continue  # the entry says what it said
                changed += 1
                text = self.chunk_text(m.id, m.meta) if keep else None
                if self._subjects is not None:
                    self._count(m.meta, -1)
                if text is None:
                    self.vectors.delete(m.id)
                    continue
                meta = self._meta(keep, m.meta.get("container"), text)
                self._write([(m.id, self.embedder.embed(text), meta)])
                if self._subjects is not None:
                    self._count(meta, +1)
            self._names.clear()
        return changed

    def forget_doc(self, doc_id: str) -> int:
        """Remove the entries of every chunk of document ``doc_id`` (superseded, re-read
        with another chunking, or erased): their ids begin with ``<doc_id>#``."""
        prefixed = getattr(self.vectors, "with_prefix", None)
        if prefixed is not None:
            found = [m for m in prefixed(f"{doc_id}#") if m.id.rpartition("#")[0] == doc_id]
        else:
            zero = np.zeros(self._held_dim(), dtype=np.float32)
            found = [m for m in self.vectors.near(zero, 1 << 30)
                     if m.id.rpartition("#")[0] == doc_id]  # fmt: skip
        with self._lock:
            return self._gone(found)

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
        named = meta.get("subject")
        for one in named if isinstance(named, list) else [] if named is None else [named]:
            subject = str(one)
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
                zero = np.zeros(self._held_dim(), dtype=np.float32)
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
        if k <= 0:
            return Answer(question, subject, ())
        found = self.vectors.near(self.query_vector(question, subject), max(CANDIDATES, 8 * k),
                                  flt or None)  # fmt: skip
        asked = _words(question) - (_words(subject) if subject else frozenset())
        ranked = self._ranked(found, subject, asked)
        return Answer(question, subject, tuple(r[4] for r in ranked[:k]))

    def _ranked(self, found: list[Match], subject: str | None,
                asked: frozenset[str]) -> list[tuple[int, float, int, int, Hit]]:  # fmt: skip
        """The assertions listed by the chunks ``found`` (of ``subject`` when scoped), best
        first: most words asked held by the span, then the chunk's score and place."""
        ranked: list[tuple[int, float, int, int, Hit]] = []
        for rank, m in enumerate(found):
            if m.score <= 0.0:
                continue
            text = self.chunk_text(m.id, m.meta)
            if text is None:
                continue
            cid = str(m.meta.get("chunk", m.id))
            raw = text.encode("utf-8")
            for tid, subj, start, end in self.assertions(cid, m.meta):
                if subject is not None and subj != subject:
                    continue
                evidence = _span_text(raw, start, end)
                if evidence is None:
                    continue
                said = len(asked & _words(evidence))
                ranked.append((-said, -m.score, rank, start, Hit(
                    tid, cid, cid.rpartition("#")[0], subj, evidence, m.score)))
        ranked.sort(key=lambda r: r[:4])
        return ranked

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

    def evidence(self, meta: Mapping[str, object], id: str = "") -> list[str] | None:
        """The spans an entry lists, read from its chunk's text (in the order listed); None
        when that chunk is gone or a span does not resolve there."""
        text = self.chunk_text(id, meta)
        if text is None:
            return None
        raw = text.encode("utf-8")
        spans = [_span_text(raw, a, b)
                 for _, _, a, b in self.assertions(str(meta.get("chunk", id)), meta)]  # fmt: skip
        return None if None in spans else [s for s in spans if s is not None]


def _span_text(raw: bytes, start: int, end: int) -> str | None:
    """Bytes ``[start, end)`` of a chunk's text, or None when the span overruns it or cuts
    a UTF-8 sequence."""
    if not 0 <= start <= end <= len(raw):
        return None
    try:
        return raw[start:end].decode("utf-8")
    except UnicodeDecodeError:
        return None
