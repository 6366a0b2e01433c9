"""Tier 1: memories — self-contained facts in plain language, with no vocabulary at all.

A memory is one fact a text states, or one pattern the memory engine distilled from a
device's records: an optional subject, a certainty (``asserted`` or ``hedged``), a valid
from only when the source stated one, an invalid at (honoured on read), the container
and the source it came from, and a vector.

Invariants:

- Self-contained: a sentence is a memory only when it stands on its own. A question, a
  fragment (fewer than :data:`MIN_WORDS` words) or a sentence whose subject is a pronoun
  nobody resolves ("he", "they") is not one; a first-person sentence of a known speaker
  is kept with the speaker named ("Maya: I'm learning Japanese."), its subject the
  speaker. A hedge ("maybe", "I think", a modal, a condition) is kept as ``hedged``.
- Keyed: a memory's ``key`` names what it is a memory of (a sentence of a document, a
  distilled pattern); writing the same key again updates that row in place (its text, its
  vector, its times), so a reinforced pattern is one memory, never a copy.
- Never true for zero time: an end at or before the beginning is refused, kept open, and
  counted. Every refusal (no container, a certainty that is neither, an injection marker,
  such an end) is counted (:meth:`MemoryIndex.refused`) and the latest
  :data:`KEPT_REFUSALS` are listed with their reasons (:meth:`MemoryIndex.refusals`).
- The fence: every row carries its container; every query takes the readable containers
  and applies them in SQL (the lexical leg runs over each readable container's own
  full-text index, so unreadable rows never weigh on a BM25 statistic) and the vector
  leg scores only the fenced rows. No containers, no memories.
- Compact: a vector is int8 with one float32 scale per memory, sparse when that is smaller
  (:func:`~hirmem.semantic.stores.packed.pack_steps`, layouts ``B``, ``C`` and ``Q``), and
  none at all when the memory is the very span of a passage of its document in the same file (a
  one-sentence text): it shares the passage's (:data:`SHARED`), and so its mentions when
  they are the passage's (:data:`MENTIONS_SHARED`); a sentence's key is not stored (it is
  its source and the hash of its text: it is found among its source's rows), nor is its
  text when it is a span of its source document (``MemoryIndex.texts``); containers,
  subjects and mentioned names are held once and referred to by integer, a source by its
  64-bit key (a document id is its own number).
  Files of the first and of the hash-keyed layouts are rewritten into this one on open,
  and so are vectors of the int8 layouts tier 1 wrote before it used the packed ones.
- Recall is the fusion by reciprocal rank of a lexical (FTS5 BM25) and a vector (cosine)
  leg, filtered to ``at`` (valid from ≤ at < invalid at) and, when scoped, to memories
  whose subject is, or whose text names (:func:`~hirmem.semantic.passages.entities_in`,
  kept as posting lists in ``tier1_mention_lists``, or the passages' when shared), one of the
  subject's names.
"""

from __future__ import annotations

import re
import struct
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from hirmem.protocol.identity import fnv1a64, fold
from hirmem.semantic import refusals
from hirmem.semantic.dictionary import CODES, SourceRows, Sources, Words, unpack_ints
from hirmem.semantic.errors import SemanticError
from hirmem.semantic.extract import PRONOUNS, hedge, stated_interval
from hirmem.semantic.names import words_of
from hirmem.semantic.passages import (
    PASSAGE_MENTIONS,
    RRF_K,
    PassageEmbedder,
    embedder_identity,
    entities_in,
    injection_marker,
    mentions_of,
)
from hirmem.semantic.postings import Postings
from hirmem.semantic.retrieve import STOP
from hirmem.semantic.spans import span_text
from hirmem.semantic.stores.db import Where, has_table, in_ids, open_db
from hirmem.semantic.stores.packed import (
    INT8,
    SPARSE_INT8,
    Timed,
    int8_blob,
    pack_steps,
    timed_rows,
    unpack,
)
from hirmem.sql.lexical import lexical_of, members_of

__all__ = ["CERTAINTIES", "KEPT_REFUSALS", "MIN_WORDS", "MemoryHit", "MemoryIndex", "Note",
           "notes_of"]

CERTAINTIES = ("asserted", "hedged")
MIN_WORDS = 4  # fewer words are a fragment ("ok sure", "me too"), not a fact
CANDIDATES = 100  # per leg, before fusion
KEPT_REFUSALS = refusals.KEPT  # the latest refusals listed; every one is counted
MENTIONS = "tier1_mention_lists"  # the memories each name is mentioned in (Postings)
# the vector column of a memory that is the very span of one of its document's passages:
# it shares the passage's vector (the same text, the same embedder, the same packing)
# rather than holding a copy; an empty blob costs no byte and needs no change of schema
SHARED = b""
# bits of a memory's ``hedged`` column: stated with a hedge; and its mentions are its
# passage's (the very span of its passage, naming the very same names: tier 1 keeps no
# mention rows of its own for it, and a scoped read finds it through the passage's)
HEDGED, MENTIONS_SHARED = 1, 2

_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")
_TERM = re.compile(r"[^\W_]+", re.UNICODE)
_FIRST_PERSON = frozenset({"i", "i'm", "i've", "i'll", "i'd", "my", "we", "we're", "our", "me"})
_ASKING = re.compile(r"^(?:who|whom|whose|what|which|where|when|why|how|is|are|do|does|did|"
                     r"can|could|will|would|should|have|has)\b", re.IGNORECASE)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Note:
    """A memory as it is handed in."""

    text: str
    container: str
    source: str  # the document (or the distilled memory) it came from
    subject: str = ""
    certainty: str = "asserted"
    valid_from: int = 0  # ms; 0 unless the source states a beginning
    invalid_at: int = 0  # ms; 0: open
    said_at: int = 0
    key: str = ""  # what it is a memory of; "" is (source, text)

    def identity(self) -> str:
        return self.key or f"{self.source}#{fnv1a64(self.text.encode()):016x}"


@dataclass(frozen=True, slots=True)
class MemoryHit:
    id: int
    key: str
    text: str
    subject: str
    certainty: str
    container: str
    source: str
    valid_from: int
    invalid_at: int
    said_at: int
    score: float  # the fused reciprocal-rank score


def notes_of(text: str, container: str, source: str, *, speaker: str = "",
             said_at: int = 0) -> list[Note]:  # fmt: skip
    """The memories ``text`` states, one per self-contained sentence."""
    out: list[Note] = []
    for m in _SENTENCE.finditer(text):
        sentence = " ".join(m.group(0).split())
        words = _TERM.findall(sentence)
        if len(words) < MIN_WORDS or sentence.endswith("?") or _ASKING.match(sentence):
            continue
        first = sentence.split(" ", 1)[0].lower().rstrip(",")
        subject = ""
        if first in _FIRST_PERSON:
            if not speaker:
                continue  # "I" of nobody known
            subject, sentence = speaker, f"{speaker}: {sentence}"
        elif first in PRONOUNS:
            continue  # "he", "they", "this": nobody until resolved
        else:
            subject = _leading_name(sentence)
        start, end = stated_interval(sentence)
        certainty = "hedged" if hedge(sentence) is not None else "asserted"
        out.append(Note(sentence, container, source, subject, certainty, start, end, said_at))
    return out


_LEAD = re.compile(r"(?:[A-Z][\w\u2019'-]*[ \t]+)*[A-Z][\w\u2019'-]*")
_OPENER_WORDS = ("the a an and but so then also yes no yesterday today tomorrow tonight heads "
                 "well oh hey hi hello thanks sure okay ok actually honestly anyway still now")
_OPENERS = frozenset(_OPENER_WORDS.split(" "))


def _leading_name(sentence: str) -> str:
    """The name a sentence opens with, its subject ("Acme's team ..." → "Acme"): its
    leading capitalised words less openers and hedges ("Maybe", "Yesterday"); "" when it
    opens with none."""
    m = _LEAD.match(sentence)
    words = m.group(0).split() if m is not None else []
    while words and (words[0].lower() in _OPENERS or hedge(words[0]) is not None):
        words = words[1:]
    name = " ".join(words)
    return re.sub(r"['\u2019]s$", "", name)


# ``text`` is NULL when the memory is the span [start, end_) of its source's text (the
# store reads it through ``MemoryIndex.texts``); a memory is found by its source (a
# sentence: among its source's rows, by the hash of its text) or by its own ``key`` (a
# distilled pattern; the partial index holds only rows that have one). The subject is an
# integer of ``tier1_names``. Mentions are a posting list per name (``tier1_mention_lists``,
# :data:`MENTIONS`); a memory's own are computed from its text again when it goes. A
# source's rows are listed in ``tier1_memories_by``
# (:class:`~hirmem.semantic.dictionary.SourceRows`: a few bytes a row where an index by
# source held each row's source and id again); only the rows sharing their passage's
# mentions, which a scoped read joins to by source, keep a (partial) index by it. A
# container's rows are found through its own full-text index, which lists exactly them
# (:meth:`MemoryIndex._members`): no index by container (a file of before has its dropped
# on open).
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS tier1_memories (
    id INTEGER PRIMARY KEY, key TEXT, container INTEGER NOT NULL, source INTEGER NOT NULL,
    subject INTEGER NOT NULL, text TEXT, start INTEGER NOT NULL, end_ INTEGER NOT NULL,
    hedged INTEGER NOT NULL, valid_from INTEGER NOT NULL, invalid_at INTEGER NOT NULL,
    said_at INTEGER NOT NULL, vec BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS tier1_memories_shared ON tier1_memories(source)
    WHERE (hedged & {MENTIONS_SHARED}) != 0;
CREATE INDEX IF NOT EXISTS tier1_memories_key ON tier1_memories(key) WHERE key IS NOT NULL;
CREATE TABLE IF NOT EXISTS tier1_names (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL);
CREATE TABLE IF NOT EXISTS tier1_containers (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL);
-- a source is found by the hash of its name (most sources hold a memory or two: a unique
-- index on their names would cost more than the names it saves)
CREATE TABLE IF NOT EXISTS tier1_sources (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tier1_refusals (
    container TEXT NOT NULL, source TEXT NOT NULL, reason TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tier1_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
_SENTENCE_KEY = re.compile(r"^(?P<source>.*)#(?P<hash>[0-9a-f]{16})$", re.S)


def _hash(key: str) -> int:
    """A memory's key as the signed 64-bit integer its row is found by (a sentence's key is
    not stored: it is its source and the hash of its text)."""
    h = fnv1a64(key.encode())
    return h - (1 << 64) if h >= 1 << 63 else h


def _packed(vec: npt.ArrayLike) -> bytes:
    """A memory's vector as tier 1 keeps it: int8 with one scale, sparse when smaller (the
    passages' packing, so a memory sharing its passage's vector holds the same blob)."""
    return pack_steps(vec)


# The int8 layouts tier 1 wrote before it kept its vectors packed; a file that holds them
# is rewritten on open, the same steps and scale re-headed (nothing quantised again).
_OLD_SPARSE8 = struct.Struct("<cIf")  # b"s", dimension, scale; positions, steps
_OLD_DENSE8 = struct.Struct("<cf")  # b"q", scale; steps


def _from_old_int8(blob: bytes) -> bytes:
    """A vector of tier 1's earlier int8 layouts as the packed blob of the same steps and
    scale; a blob of neither layout, or one cut short, is refused."""
    if blob[:1] == b"s" and len(blob) >= _OLD_SPARSE8.size:
        _, dim, scale = _OLD_SPARSE8.unpack_from(blob)
        out = int8_blob(SPARSE_INT8, dim, scale, blob[_OLD_SPARSE8.size:])
    elif blob[:1] == b"q" and len(blob) >= _OLD_DENSE8.size:
        _, scale = _OLD_DENSE8.unpack_from(blob)
        out = int8_blob(INT8, len(blob) - _OLD_DENSE8.size, scale, blob[_OLD_DENSE8.size:])
    else:
        raise SemanticError(f"a tier-1 vector of {len(blob)} bytes starting {blob[:1]!r} is "
                            "no known layout")  # fmt: skip
    unpack(out)  # refuses one whose length does not fit its head
    return out


class MemoryIndex:
    """Memories in SQLite (``path``, or in memory), found by BM25 and by cosine, fused."""

    def __init__(self, embedder: PassageEmbedder, path: Where = ":memory:",
                 texts: Callable[[str], str | None] | None = None) -> None:  # fmt: skip
        self.embedder = embedder
        # the text of a source document, which a memory that is a sentence of it keeps as a
        # span (the composing substrate reads its document store); alone, memories keep text
        self.texts = texts
        self._lock = threading.RLock()
        self._cache: dict[tuple[str, ...], Timed] = {}
        self._beside_passages = False  # whether the passages share this file (once seen)
        self._db = open_db(path, "memories")
        self._lex = lexical_of(self._db, "tier1_memories", "id")
        legacy = self._legacy_rows()
        hashed = self._hashed_rows()
        self._db.executescript(_SCHEMA)
        self._db.execute("DROP INDEX IF EXISTS tier1_memories_container")
        self._sources = Sources(self._db, "tier1_sources", lambda name: _hash(name))
        self._sources.codes.adopt("tier1_memories", "source")
        self._names = Words(self._db, "tier1_names", "name")
        self._containers = Words(self._db, "tier1_containers", "name")
        self._mentions = Postings(self._db, MENTIONS, flagged=False)
        self._mentions.create()
        # the passages' lists, read for the memories that share their passage's mentions
        self._passage_mentions = Postings(self._db, PASSAGE_MENTIONS, flagged=True)
        if hashed:
            self._rewrite(hashed)
        # each source's row ids, packed: a file of before has them listed from its rows and
        # its index by source dropped (one transaction: two openers list them once)
        self._by_source = SourceRows(self._db, "tier1_memories", 1)
        self._db.execute("BEGIN IMMEDIATE")
        try:
            if self._by_source.made("id"):
                self._db.execute("DROP INDEX IF EXISTS tier1_memories_source")
                # listed as they were read; written again relative to each source's first
                for (code,) in self._db.execute("SELECT DISTINCT source FROM "
                                                "tier1_memories_by").fetchall():  # fmt: skip
                    for (mid,) in sorted(self._by_source.take(int(code))):
                        self._list(int(code), mid)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        self._list_mentions()
        self._repack_old_vectors()
        me = embedder_identity(embedder)
        held = self._db.execute("SELECT value FROM tier1_meta WHERE key = 'embedder'").fetchone()
        if held is not None and held[0] != me:  # vectors of one space only
            # (a vector shared with the passage of the same span follows the passage, which
            # embeds its own again)
            rows = self._db.execute("SELECT m.id, m.text, m.start, m.end_, sk.key, s.name "
                                    "FROM tier1_memories m "
                                    f"{self._sources.joined('m.source', 's')} "
                                    "WHERE length(m.vec) > 0").fetchall()  # fmt: skip
            seen: dict[str, str | None] = {}
            self._db.executemany("UPDATE tier1_memories SET vec = ? WHERE id = ?", [
                (_packed(embedder.embed(self._text(Sources.spelled(k, src), t, a, b, seen))), i)
                for i, t, a, b, k, src in rows])  # fmt: skip
        self._db.execute("INSERT OR REPLACE INTO tier1_meta VALUES ('embedder', ?)", (me,))
        if legacy:
            self.write_many(legacy)

    def _repack_old_vectors(self) -> None:
        """Rewrite, once per file, the vectors of tier 1's earlier int8 layouts packed."""
        if self._db.execute("SELECT 1 FROM tier1_meta WHERE key = 'vectors'").fetchone():
            return
        old = self._db.execute("SELECT id, vec FROM tier1_memories "
                               "WHERE substr(vec, 1, 1) IN (x'73', x'71')").fetchall()  # s, q
        self._db.execute("BEGIN")
        try:
            self._db.executemany("UPDATE tier1_memories SET vec = ? WHERE id = ?",
                                 [(_from_old_int8(v), i) for i, v in old])  # fmt: skip
            self._db.execute("INSERT INTO tier1_meta VALUES ('vectors', 'packed')")
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def _hashed_rows(self) -> list[tuple[object, ...]]:
        """The rows of a file of the second layout (every memory found by a 64-bit hash
        column with its own unique index, the subject as text, mentions indexed twice),
        read out and their table dropped, to be written again with the same ids (the
        full-text indexes and mentions refer to them)."""
        cols = {r[1] for r in self._db.execute("PRAGMA table_info(tier1_memories)")}
        if "hash" not in cols:
            return []
        rows = self._db.execute("SELECT id, key, container, source, subject, text, hedged, "
                                "valid_from, invalid_at, said_at, vec FROM tier1_memories "
                                "ORDER BY id").fetchall()  # fmt: skip
        self._db.execute("BEGIN")
        self._db.execute("DROP INDEX IF EXISTS tier1_mentions_memory")
        self._db.execute("DROP TABLE tier1_memories")
        self._db.execute("COMMIT")
        return [tuple(r) for r in rows]

    def _rewrite(self, rows: list[tuple[object, ...]]) -> None:
        """Write the hash-keyed layout's rows again: their ids kept, each source by its
        current key (a document id by its own number, its dictionary row dropped)."""
        names = {int(k): str(n) for k, n in self._db.execute("SELECT id, name FROM tier1_sources")}
        self._db.execute("BEGIN")
        self._db.execute("DELETE FROM tier1_sources")
        for mid, key, cont, src, subject, text, hedged, vf, ia, said, vec in rows:
            self._db.execute(
                "INSERT INTO tier1_memories VALUES (?, ?, ?, ?, ?, ?, 0, 0, ?, ?, ?, ?, ?)",
                (mid, key, cont, self._sources.code(names[int(str(src))]),
                 self._subject_id(str(subject)), text, hedged, vf, ia, said, vec))  # fmt: skip
        self._db.execute("COMMIT")

    def _list_mentions(self) -> None:
        """Convert a store whose mentions are rows (``tier1_mentions``: a name's integer, a
        memory) into posting lists, once (the first process to open it)."""
        if not has_table(self._db, "tier1_mentions"):
            return
        self._db.execute("BEGIN IMMEDIATE")
        try:
            if has_table(self._db, "tier1_mentions"):  # not converted by another opener
                self._mentions.fill((int(e), int(m), 0) for e, m in self._db.execute(
                    "SELECT entity, memory FROM tier1_mentions").fetchall())
                self._db.execute("DROP TABLE tier1_mentions")
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def _subject_id(self, subject: str) -> int:
        """The integer a memory's subject (folded) is kept as; 0 for none."""
        return self._word(self._names, subject) if subject else 0

    def _text(self, source: str, text: object, start: int, end: int,
              seen: dict[str, str | None]) -> str:  # fmt: skip
        """A memory's text: its own, or the span of its source's text it is."""
        if text is not None:
            return str(text)
        return span_text(self.texts, seen, source, start, end, "a memory is")

    def _legacy_rows(self) -> list[Note]:
        """The memories of a file written in the first layout (text keys and containers,
        float16 vectors), read out and their tables dropped, to be written again."""
        cols = {r[1] for r in self._db.execute("PRAGMA table_info(tier1_memories)")}
        if "certainty" not in cols:  # the first layout's text certainty
            return []
        rows = self._db.execute("SELECT key, container, source, subject, text, certainty, "
                                "valid_from, invalid_at, said_at FROM tier1_memories "
                                "ORDER BY id").fetchall()  # fmt: skip
        terms = [r[0] for r in self._db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB "
            "'tier1_terms_[0-9]*' AND name NOT GLOB '*_*_*_*'")]  # fmt: skip
        self._db.execute("BEGIN")
        for table in [*terms, "tier1_mentions", "tier1_memories", "tier1_containers"]:
            self._db.execute(f"DROP TABLE IF EXISTS {table}")
        self._db.execute("COMMIT")
        return [Note(text, container, source, subject, certainty, vf, ia, said,
                     "" if key == f"{source}#{fnv1a64(text.encode()):016x}" else key)
                for key, container, source, subject, text, certainty, vf, ia, said in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ---- writing --------------------------------------------------------------------------

    def write(self, note: Note) -> int | None:
        """Keep ``note`` (or update the memory of its key); its row id, None when refused
        (the refusal counted with its reason)."""
        return self.write_many([note])[0]

    def write_many(self, notes: Sequence[Note]) -> list[int | None]:
        """:meth:`write` for each of ``notes``, their vectors computed in one batch where
        the embedder has ``embed_many`` (MiniLM), in one transaction."""
        kept: list[tuple[int, Note, int]] = []  # (position, note, invalid at)
        refused: list[tuple[str, str, str]] = []
        for i, note in enumerate(notes):
            why = self._refusal(note)
            if why:
                refused.append((note.container, note.source, why))
                continue
            end = note.invalid_at
            if end and note.valid_from and end <= note.valid_from:
                refused.append((note.container, note.source,
                                "interval: the end is at or before the start; kept open"))
                end = 0
            kept.append((i, note, end))
        texts = [n.text for _, n, _ in kept]
        sources: dict[str, str | None] = {}
        if self.texts is not None:
            for _, n, _ in kept:
                if n.source not in sources:
                    sources[n.source] = self.texts(n.source)
        many = getattr(self.embedder, "embed_many", None)
        vectors = list(many(texts)) if many is not None and texts else [
            self.embedder.embed(t) for t in texts]  # fmt: skip
        out: list[int | None] = [None] * len(notes)
        with self._lock:
            self._cache.clear()
            self._db.execute("BEGIN IMMEDIATE")
            try:
                if refused:
                    self._refuse(refused)
                for (i, note, end), vec in zip(kept, vectors, strict=True):
                    out[i] = self._insert(note, end, _packed(vec), sources)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return out

    def _refuse(self, refused: Sequence[tuple[str, str, str]]) -> None:
        """Record refusals: every one counted, the latest :data:`KEPT_REFUSALS` kept."""
        refusals.keep(self._db, "tier1_refusals", "tier1_meta", refused, KEPT_REFUSALS)

    def refused(self) -> int:
        """How many memories were ever refused or kept open (beyond those still listed)."""
        with self._lock:
            return refusals.count(self._db, "tier1_meta")

    def _insert(self, note: Note, end: int, vec: bytes,
                sources: dict[str, str | None]) -> int:  # fmt: skip
        held = self._find(note.identity(), sources)
        source = self._source(note.source)
        listed = False  # whether the row's id is in its source's list already
        if held is not None:
            self._unterm(held, sources)
            was = self._db.execute("SELECT source FROM tier1_memories WHERE id = ?",
                                   (held,)).fetchone()  # fmt: skip
            listed = was is not None and int(was[0]) == source
            if not listed:
                self._unlist(held)
            self._db.execute("DELETE FROM tier1_memories WHERE id = ?", (held,))
        whole = sources.get(note.source)
        at = -1 if whole is None else whole.find(note.text)
        span = (at, at + len(note.text)) if at >= 0 else (0, 0)
        subject = " ".join(fold(note.subject).split())
        flags = HEDGED if note.certainty == "hedged" else 0
        named = _named(note.text, note.subject)
        passage = self._passage_of(source, *span) if at >= 0 else None
        if passage is not None:
            vec = SHARED  # the passage of this very span holds this very vector
            if _spelled_names(note.text, passage[1]) == named:
                flags, named = flags | MENTIONS_SHARED, set()
        cur = self._db.execute(
            "INSERT INTO tier1_memories (id, key, container, source, subject, text, start, "
            "end_, hedged, valid_from, invalid_at, said_at, vec) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (held, note.key or None, self._word(self._containers, note.container),
             source, self._subject_id(subject),
             None if at >= 0 else note.text, *span, flags,
             note.valid_from, end, note.said_at, vec),
        )  # fmt: skip
        mid = int(cur.lastrowid or 0)
        if not listed:
            self._list(source, mid)
        self._mentions.add([(self._word(self._names, n), mid, 0) for n in sorted(named)])
        terms = self._terms_table(note.container, create=True)
        self._lex.add(str(terms), mid, note.text, fold(note.subject))
        return mid

    def _find(self, key: str, seen: dict[str, str | None] | None = None) -> int | None:
        """The row of the memory of ``key``: by its own key, or (a sentence's key, its
        source and the hash of its text) among its source's rows."""
        row = self._db.execute("SELECT id FROM tier1_memories WHERE key = ?", (key,)).fetchone()
        if row is not None:
            return int(row[0])
        m = _SENTENCE_KEY.match(key)
        if m is None:
            return None
        source, want = m.group("source"), int(m.group("hash"), 16)
        seen = {} if seen is None else seen
        code = self._sources.code(source, create=False)
        for mid, text, start, end, key in self._of_source(code, "id, text, start, end_, key"):
            if key is None and fnv1a64(self._text(source, text, start, end, seen).encode()) == want:
                return int(mid)
        return None

    def _passage_of(self, source: int, start: int, end: int) -> tuple[int, str] | None:
        """The passage that is the span [start, end) of document ``source`` (its code, the
        passages' too: one code table per file) and its subject
        (folded), when the passages share this store's file (a composing substrate's) and
        hold one. One statement: on PostgreSQL each is a round trip."""
        if not self._passages_here():
            return None
        row = self._db.execute("SELECT p.id, coalesce(n.word, '') FROM passages p LEFT JOIN "
                               "passage_names n ON n.id = p.subject WHERE p.doc = ? AND "
                               "p.start = ? AND p.end_ = ? AND p.text IS NULL",
                               (source, start, end)).fetchone()  # fmt: skip
        return None if row is None else (int(row[0]), str(row[1]))

    def _naming(self, names: Sequence[str]) -> npt.NDArray[np.int64]:
        """The ids of the memories naming one of ``names`` (spelled by
        :func:`~hirmem.semantic.names.words_of`), sorted: through tier 1's own mentions, and
        through the passages' for memories that share them (:data:`MENTIONS_SHARED`)."""
        own = self._mentions.ids(self._names.ids(names))
        if not self._passages_here():
            return own
        marks = ",".join("?" * len(names))
        pids = self._passage_mentions.ids([int(r[0]) for r in self._db.execute(
            f"SELECT id FROM passage_names WHERE word IN ({marks})", list(names))])
        if not len(pids):
            return own
        cond, arg = in_ids(self._db, "p.id", pids)
        shared = [int(r[0]) for r in self._db.execute(SHARED_NAMING.format(cond), [arg])]
        return np.union1d(own, np.asarray(shared, dtype=np.int64))

    def _passages_here(self) -> bool:
        """Whether the passages share this store's file (a composing substrate's)."""
        if not self._beside_passages:
            self._beside_passages = has_table(self._db, "passages")
        return self._beside_passages

    def _source(self, name: str) -> int:
        """The code of source ``name`` (of a document id's own number, else of the hash of
        its name, kept in ``tier1_sources``); two names of one key refused."""
        return self._sources.code(name)

    @staticmethod
    def _word(words: Words, name: str) -> int:
        """The id of ``name`` in the dictionary ``words`` (containers and names: each
        string kept once, the rows that repeat it hold an integer), added when new."""
        wid = words.id(name)
        assert wid is not None
        return wid

    @staticmethod
    def _refusal(note: Note) -> str:
        if not note.container:
            return "no container: a memory without a container has no fence"
        if note.certainty not in CERTAINTIES:
            return f"certainty {note.certainty!r} is not one of {', '.join(CERTAINTIES)}"
        if not note.text.strip():
            return "empty: a memory states something"
        marker = injection_marker(note.text)
        if marker is not None:
            return f"quarantined: prompt-injection marker {marker!r}"
        return ""

    def invalidate(self, key: str, at: int) -> bool:
        """Mark the memory of ``key`` no longer true from ``at`` (kept, as history)."""
        with self._lock:
            self._cache.clear()
            mid = self._find(key)
            if mid is None:
                return False
            n = self._db.execute("UPDATE tier1_memories SET invalid_at = ? WHERE id = ? AND "
                                 "(invalid_at = 0 OR invalid_at > ?) AND valid_from < ?",
                                 (at, mid, at, at)).rowcount  # fmt: skip
        return n > 0

    def remove(self, source: str) -> int:
        """Forget every memory of ``source`` (a superseded, erased or withheld source)."""
        with self._lock:
            self._cache.clear()
            self._db.execute("BEGIN IMMEDIATE")
            code = self._sources.code(source, create=False)
            ids = [int(r[0]) for r in self._of_source(code, "id")]
            self._by_source.take(code)
            seen: dict[str, str | None] = {}
            for mid in ids:
                self._unterm(mid, seen)
                self._db.execute("DELETE FROM tier1_memories WHERE id = ?", (mid,))
            self._sources.forget(source)
            self._db.execute("COMMIT")
        return len(ids)

    def remove_key(self, key: str) -> bool:
        with self._lock:
            self._cache.clear()
            mid = self._find(key)
            if mid is None:
                return False
            self._db.execute("BEGIN IMMEDIATE")
            self._unterm(mid, {})
            self._unlist(mid)
            self._db.execute("DELETE FROM tier1_memories WHERE id = ?", (mid,))
            self._db.execute("COMMIT")
        return True

    def _of_source(self, code: int, columns: str) -> list[Any]:
        """``columns`` of the rows of the source of code ``code``, in id order: its listed
        ids, each row found by id (500 a statement)."""
        ids = sorted(set(self._listed(code)))
        out: list[Any] = []
        for at in range(0, len(ids), 500):
            chunk = ids[at : at + 500]
            out += self._db.execute(f"SELECT {columns} FROM tier1_memories WHERE id IN "
                                    f"({','.join('?' * len(chunk))}) AND source = ? ORDER BY id",
                                    [*chunk, code]).fetchall()  # fmt: skip
        return out

    def _unlist(self, mid: int) -> None:
        """Take memory ``mid`` out of its source's list (it goes, or moves to another
        source): the list written again without it (a rare step: a key updated so)."""
        row = self._db.execute("SELECT source FROM tier1_memories WHERE id = ?",
                               (mid,)).fetchone()  # fmt: skip
        if row is None:
            return
        code = int(row[0])
        kept = [held for held in self._listed(code) if held != mid]
        self._by_source.take(code)
        for held in kept:
            self._list(code, held)

    def _list(self, code: int, mid: int) -> None:
        """Add memory ``mid`` to the list of the source of code ``code``: the first id a
        list holds as it is, every later one as its difference from that first (zigzag:
        a row written again may be older), one byte where a source's rows were written
        together instead of three."""
        first = self._db.execute("SELECT rows FROM tier1_memories_by WHERE source = ? AND "
                                 "part = 0", (code,)).fetchone()  # fmt: skip
        if first is None:
            self._by_source.add(code, (mid,))
            return
        delta = mid - unpack_ints(bytes(first[0]))[0]
        self._by_source.add(code, (2 * delta if delta >= 0 else -2 * delta - 1,))

    def _listed(self, code: int) -> list[int]:
        """The ids the source of code ``code`` lists (:meth:`_list`)."""
        held = [int(r[0]) for r in self._by_source.rows(code)]
        return held[:1] + [held[0] + (v >> 1 if not v & 1 else -((v + 1) >> 1))
                           for v in held[1:]]  # fmt: skip

    def _unterm(self, mid: int, seen: dict[str, str | None]) -> None:
        """Take memory ``mid`` out of its full-text index and its mentions (computed from
        its text and subject, as they were written)."""
        container, key, spelled, text, start, end, subject = self._db.execute(
            "SELECT c.name, sk.key, s.name, m.text, m.start, m.end_, coalesce(n.name, '') "
            "FROM tier1_memories m JOIN tier1_containers c ON c.id = m.container "
            f"{self._sources.joined('m.source', 's')} LEFT JOIN tier1_names n "
            "ON n.id = m.subject WHERE m.id = ?", (mid,)).fetchone()  # fmt: skip
        text = self._text(Sources.spelled(key, spelled), text, start, end, seen)
        named = self._names.ids(_named(text, subject))
        self._mentions.remove([(n, mid) for n in named])
        terms = self._terms_table(container, create=False)
        if terms is not None:
            self._lex.remove(terms, mid, text, subject)

    def _terms_table(self, container: str, *, create: bool) -> str | None:
        """The container's own full-text index (BM25 statistics from that container only)."""
        cid = self._containers.id(container, create=create)
        if cid is None:
            return None
        name = f"tier1_terms_{cid}"
        if create:
            self._lex.create(name)
        return name

    # ---- reading ----------------------------------------------------------------------------

    def refusals(self) -> list[tuple[str, str]]:
        """(source, reason) of every memory refused or kept open, oldest first."""
        with self._lock:
            rows = self._db.execute("SELECT source, reason FROM tier1_refusals ORDER BY rowid")
            return [(s, r) for s, r in rows]

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM tier1_memories").fetchone()[0])

    def get(self, key: str) -> MemoryHit | None:
        with self._lock:
            mid = self._find(key)
            row = None if mid is None else self._db.execute(
                f"SELECT {_COLUMNS} FROM {_JOINED} WHERE m.id = ?", (mid,)).fetchone()
            return None if row is None else self._hit(row, 0.0, {})

    def search(
        self,
        question: str,
        k: int,
        readable: Collection[str],
        *,
        names: Collection[str] = (),
        at: int | None = None,
        candidates: int = CANDIDATES,
        qvec: npt.NDArray[np.float32] | None = None,
    ) -> list[MemoryHit]:
        """The ``k`` best memories for ``question`` the reader may read, valid at ``at``
        (when given), about one of ``names`` (when given: the subject's names, folded).
        ``qvec``: the question's vector, when the caller has it already."""
        if not readable or k <= 0:
            return []
        with self._lock:
            fenced = self._containers.ids(readable)
        if not fenced:
            return []
        where = f"m.container IN ({','.join('?' * len(fenced))})"
        args = list[object](fenced)
        if at is not None:
            where += (" AND (m.valid_from = 0 OR m.valid_from <= ?)"
                      " AND (m.invalid_at = 0 OR ? < m.invalid_at)")
            args += [at, at]
        scoped = sorted({words_of(n) for n in names} - {""})
        naming = None
        if scoped:
            with self._lock:
                naming = self._naming(scoped)
                cond, arg = in_ids(self._db, "m.id", np.intersect1d(
                    naming, self._fenced(readable)[0], assume_unique=True))  # fmt: skip
            where += f" AND {cond}"
            args.append(arg)
        asked = [t for t in _TERM.findall(question.lower()) if len(t) > 1]
        # function words match nearly every memory and rank none: the lexical leg reads
        # the question's content words (all of them when it has no other)
        terms = [t for t in asked if t not in STOP] or asked
        if scoped:
            named = {w for n in scoped for w in n.split()}
            terms = [t for t in terms if t not in named] or terms
        with self._lock:
            legs = [self._lexical(terms, readable, where, args, candidates),
                    self._vector(question, readable, at, naming, candidates, qvec)]
            fused: dict[int, float] = {}
            for leg in legs:
                for rank, mid in enumerate(leg):
                    fused[mid] = fused.get(mid, 0.0) + 1.0 / (RRF_K + rank + 1)
            best = sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
            out = []
            seen: dict[str, str | None] = {}
            for mid, score in best:
                row = self._db.execute(f"SELECT {_COLUMNS} FROM {_JOINED} WHERE m.id = ?",
                                       (mid,)).fetchone()  # fmt: skip
                out.append(self._hit(row, score, seen))
        return out

    def _hit(self, row: Sequence[object], score: float,
             seen: dict[str, str | None]) -> MemoryHit:  # fmt: skip
        """A hit from the columns of :data:`_COLUMNS`, in order."""
        mid, key, text, start, end, subject, hedged, container, skey, spelled, vf, ia, said = row
        source = Sources.spelled(int(str(skey)), None if spelled is None else str(spelled))
        text = self._text(source, text, int(str(start)), int(str(end)), seen)
        key = key or f"{source}#{fnv1a64(text.encode()):016x}"  # a sentence's own key
        return MemoryHit(int(str(mid)), str(key), text, str(subject),
                         CERTAINTIES[1] if int(str(hedged)) & HEDGED else CERTAINTIES[0],
                         str(container), str(source), int(str(vf)), int(str(ia)),
                         int(str(said)), score)  # fmt: skip

    def _lexical(self, terms: Sequence[str], readable: Collection[str], where: str,
                 args: list[object], limit: int) -> list[int]:  # fmt: skip
        """BM25 over each readable container's own index, the fence, the time and the
        subject in the same WHERE, before the LIMIT; merged by score."""
        if not terms:
            return []
        query = self._lex.query(terms)
        found: list[tuple[float, int]] = []
        for container in sorted(readable):
            table = self._terms_table(container, create=False)
            if table is None:
                continue
            r = self._lex.ranked(table)
            found += [(float(row[0]), int(row[1])) for row in self._db.execute(
                f"SELECT {r.rank}, m.id FROM {r.source} JOIN tier1_memories m "
                f"ON m.id = {r.key} WHERE {r.match} AND {where} "
                f"ORDER BY {r.rank} LIMIT ?", [query, *args, limit])]  # fmt: skip
        found.sort()
        return [mid for _, mid in found[:limit]]

    def _vector(self, question: str, readable: Collection[str], at: int | None,
                naming: npt.NDArray[np.int64] | None, limit: int,
                qvec: npt.NDArray[np.float32] | None = None) -> list[int]:  # fmt: skip
        """Cosine over the fenced rows only, masked by time and by ``naming`` (the memories
        naming the subject, when scoped) before ranking."""
        ids, vf, ia, mat = self._fenced(readable)
        if not len(ids):
            return []
        keep = np.ones(len(ids), dtype=bool)
        if at is not None:
            keep &= ((vf == 0) | (vf <= at)) & ((ia == 0) | (at < ia))
        if naming is not None:
            keep &= np.isin(ids, naming)
        rows = np.flatnonzero(keep)
        if not len(rows):
            return []
        q = np.asarray(self.embedder.embed(question) if qvec is None else qvec,
                       dtype=np.float32)
        qn = float(np.linalg.norm(q))
        with np.errstate(divide="ignore", invalid="ignore"):
            sims = mat.dot(q, rows) / (mat.norms[rows] * (qn if qn > 0 else np.inf))
        sims = np.nan_to_num(sims.astype(np.float32), nan=0.0)
        top = np.argsort(-sims, kind="stable")[:limit]
        return [int(ids[rows[i]]) for i in top if sims[i] > 0]

    def _fenced(self, readable: Collection[str]) -> Timed:
        """The readable rows as arrays (id, valid from, invalid at, vectors); kept until
        the next write."""
        key = tuple(sorted(readable))
        held = self._cache.get(key)
        if held is not None:
            return held
        rows = self._db.execute(f"SELECT m.id, m.valid_from, m.invalid_at, m.vec FROM "
                                f"({self._members(readable)}) f CROSS JOIN tier1_memories m "
                                "WHERE m.id = f.id ORDER BY f.id").fetchall()  # fmt: skip
        if any(not r[3] for r in rows):
            rows = self._with_shared(rows)
        out = timed_rows(rows, self.embedder.dim)
        if len(self._cache) >= 8:
            self._cache.clear()
        self._cache[key] = out
        return out

    def _members(self, readable: Collection[str]) -> str:
        """A SELECT of the ids of the rows of the readable containers: each container's
        full-text index holds exactly its rows (every row is indexed in its container's
        when written, and leaves it when it goes), keyed by id, so the fence reads only
        the rows it returns without an index by container."""
        tables = [self._terms_table(c, create=False) for c in sorted(readable)]
        return members_of(self._lex, [t for t in tables if t is not None])

    def _with_shared(self, rows: list[Any]) -> list[tuple[object, ...]]:
        """``rows`` with each vector shared with a passage read from that passage; one whose
        passage is gone (the file's passages rewritten apart from it) embedded again from
        its text, so no memory ever drops out of the vector leg."""
        shared = [int(r[0]) for r in rows if not r[3]]
        held: dict[int, bytes] = {}
        for at in range(0, len(shared), 500):
            chunk = shared[at : at + 500]
            held.update((int(i), bytes(v)) for i, v in self._db.execute(
                "SELECT m.id, p.vec FROM tier1_memories m JOIN passages p ON p.doc = m.source "
                "AND p.start = m.start AND p.end_ = m.end_ AND p.text IS NULL WHERE m.id IN "
                f"({','.join('?' * len(chunk))})", chunk))  # fmt: skip
        seen: dict[str, str | None] = {}
        for mid in shared:
            if mid not in held:
                _, _, text, start, end, _, _, _, skey, spelled, *_ = self._db.execute(
                    f"SELECT {_COLUMNS} FROM {_JOINED} WHERE m.id = ?", (mid,)).fetchone()
                source = Sources.spelled(int(skey), spelled)
                held[mid] = _packed(self.embedder.embed(
                    self._text(source, text, int(start), int(end), seen)))  # fmt: skip
        return [(r[0], r[1], r[2], r[3] or held[int(r[0])]) for r in rows]


# the memories sharing the mentions of the passages of a set (``{}``: its condition on p.id)
SHARED_NAMING = ("SELECT s.id FROM passages p JOIN tier1_memories s ON s.source = p.doc AND "
                 "s.start = p.start AND s.end_ = p.end_ AND "
                 f"(s.hedged & {MENTIONS_SHARED}) != 0 WHERE {{}}")  # fmt: skip

_COLUMNS = ("m.id, m.key, m.text, m.start, m.end_, coalesce(n.name, ''), m.hedged, c.name, "
            "sk.key, s.name, m.valid_from, m.invalid_at, m.said_at")  # fmt: skip
# the source's code spelled through the file's code table and tier 1's names of sources
_JOINED = ("tier1_memories m JOIN tier1_containers c ON c.id = m.container JOIN "
           f"{CODES} sk ON sk.id = m.source LEFT JOIN tier1_sources s ON s.id = sk.key "
           "LEFT JOIN tier1_names n ON n.id = m.subject")  # fmt: skip


def _spelled_names(text: str, subject: str) -> set[str] | None:
    """The names a passage of ``text`` with ``subject`` is found by (as it keeps them),
    when each is spelled as tier 1 spells a name (:func:`~hirmem.semantic.names.words_of`);
    else None (a name of other spelling, "o'neil": a memory keeps mention rows of its own)."""
    names = set(mentions_of(text, subject))
    return names if all(words_of(n) == n for n in names) else None


def _named(text: str, subject: str) -> set[str]:
    """The names a memory mentions (its subject's and those its text writes), as words."""
    strong, weak = entities_in(text)
    return {words_of(n) for n in (subject, *strong, *weak)} - {""}
