"""Tier 0: every admitted text kept verbatim as passages, found two ways, behind one fence.

Invariants:

- Every text handed in is kept, whether or not anything was extracted from it: a short text
  is one passage; a long one is cut on sentence boundaries near :data:`TARGET` characters,
  each passage after the first repeating the last sentence(s) of the one before (up to
  :data:`OVERLAP` characters), so a fact spanning a cut is whole in at least one passage.
- A text carrying prompt-injection markers (:func:`injection_marker`) is not indexed: it is
  recorded in ``passage_quarantine`` with the marker found, never returned as evidence.
- Every passage row carries its ``container`` (where it was said). Every query takes the
  reader's readable containers and applies them in the SQL ``WHERE`` of both legs, before
  any ``ORDER BY`` or ``LIMIT`` and before any vector is scored: a row outside the fence
  never enters a candidate set, never moves a rank. No readable containers, no rows.
- Valid time: ``valid_from``/``valid_until`` (ms, 0 open) are honoured on read at ``at``.
- Recall is hybrid: a lexical leg (SQLite FTS5, BM25, Porter stemming) and a vector leg
  (cosine over vectors stored once per passage, packed by :mod:`.stores.packed`: sparse
  when that is smaller, which is exact, else int8 with one scale), fused by reciprocal rank
  (:data:`RRF_K`). The lexical leg matches a question's content words, not its function
  words (:func:`query_terms`). A question asking for a figure adds a lexical leg over
  passages with a digit; one asking for the latest adds a leg ordered by time (the cue word
  dropped). A flat question naming a known entity adds a lexical and a vector leg over the
  passages naming it (ranked up, nothing filtered out). Then each of the best passages
  lends a share of its score to the passage beside it in its container (the next piece of
  its document, or a turn said in the same session): the reply to a question turn rarely
  repeats its words. Neighbours are reached through the same fence and filters.
- Subject scoping filters to passages that *name* the subject: the passage's own subject
  (for a conversation turn, its speaker) and every name written in it (runs of capitalised
  words, parenthetical and "aka" aliases) are its entities. A question is scoped to the
  longest known entity it names.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt

from hirmem.protocol.identity import fold
from hirmem.semantic.dictionary import Sources, Words, source_key
from hirmem.semantic.errors import SemanticError
from hirmem.semantic.names import NameIndex
from hirmem.semantic.postings import Postings
from hirmem.semantic.retrieve import (
    EMBEDDER_ENV,
    STOP,
    TextEmbedder,
    default_embedder,
    embedder_identity,
)
from hirmem.semantic.spans import span_text
from hirmem.semantic.stores.db import Where, has_table, in_ids, open_db
from hirmem.semantic.stores.packed import Rows, Timed, pack_steps, timed_rows
from hirmem.sql.lexical import lexical_of, members_of

__all__ = [
    "EMBEDDER_ENV",
    "OVERLAP",
    "PASSAGE_MENTIONS",
    "RRF_K",
    "TARGET",
    "PassageEmbedder",
    "PassageHit",
    "PassageIndex",
    "default_embedder",
    "embedder_identity",
    "entities_in",
    "injection_marker",
    "mentions_of",
    "passages_of",
    "query_terms",
]

PASSAGE_MENTIONS = "passage_mention_lists"  # the passages each name is mentioned in (Postings)
TARGET = 900  # characters a long text is cut near
OVERLAP = 150  # at most this many characters of whole sentences repeat across a cut
RRF_K = 60  # reciprocal rank fusion constant
CANDIDATES = 100  # per leg, before fusion
SUBJECT_WEIGHT = 1.0  # BM25 weight of a passage's subject (a speaker) against its words
VECTOR_WEIGHT = 1.0  # the vector legs' weight in the fusion, against a lexical leg's 1
NAMED_WEIGHT = 1.0  # the legs over passages naming the entity a flat question names
NEIGHBOUR_SHARE = 0.3  # of a passage's fused score lent to the passages beside it
NEIGHBOUR_SOURCES = 30  # the best passages that lend

F32 = npt.NDArray[np.float32]
PassageEmbedder = TextEmbedder  # what the vector leg needs (the name passages export)



# ---- cutting ----------------------------------------------------------------------------------

_SENTENCE = re.compile(r"[^.!?\n]*(?:[.!?]+[\"')\]]*|\n+|$)\s*")


def passages_of(text: str, target: int = TARGET, overlap: int = OVERLAP) -> list[str]:
    """``text`` whole when short; else pieces cut on sentence ends near ``target``
    characters, each repeating up to ``overlap`` characters of whole trailing sentences."""
    if len(text) <= target:
        return [text] if text.strip() else []
    sentences: list[str] = []
    for s in (s for s in _SENTENCE.findall(text) if s):
        while len(s) > target:  # a run-on sentence is cut at the last space before the target
            cut = s.rfind(" ", 0, target) + 1 or target
            sentences.append(s[:cut])
            s = s[cut:]
        sentences.append(s)
    out: list[str] = []
    current: list[str] = []
    fresh = 0  # sentences in ``current`` that no earlier passage holds
    for s in sentences:
        if fresh and sum(map(len, current)) + len(s) > target:
            out.append("".join(current))
            carry: list[str] = []
            for prev in reversed(current):
                if sum(map(len, carry)) + len(prev) > overlap:
                    break
                carry.insert(0, prev)
            current, fresh = carry, 0
        current.append(s)
        fresh += 1
    if fresh:
        out.append("".join(current))
    return [p for p in out if p.strip()]


# ---- what a passage names ---------------------------------------------------------------------

_NAME = re.compile(r"\b[A-Z][\w'\u2019-]*(?:\s+(?:of|de|van|von|da|del)?\s*[A-Z][\w'\u2019-]*)*")
_ALIAS = re.compile(r"(?P<a>[A-Z][\w-]*(?:\s+[A-Z][\w-]*)*)\s*(?:\((?P<b>[^)]{1,60})\)|"
                    r"\s+aka\s+(?P<c>[A-Z][\w-]*(?:\s+[A-Z][\w-]*)*)|"
                    r"\s+/\s+(?P<d>[A-Za-z][\w-]*(?:\s+[\w-]+)*))")  # fmt: skip
_NOT_NAMES = frozenset(
    re.findall(
        r"[\w']+",
        """i i'm i've i'll i'd a an the this that these those it its my your our their his her
        we you he she they what when where who why how yes no hey hi hello oh wow thanks thank
        and but or so if then also just well sure okay ok great good nice""",
    )
)


_SENTENCE_START = re.compile(r"(?:^|[.!?:;\n][\"')\]]*\s+)$")


# A name said to someone ("Thanks, Caroline!", "Hey Jon,", "..., Maya.") names the
# listener, not what the text is about: after a greeting or a reply word, or set off by a
# comma at a sentence's end, or opening a sentence before a comma.
_GREETING = (r"(?:hey|hi|hello|hiya|yo|dear|thanks|thank you|thx|congrats|congratulations|"
             r"sorry|welcome|bye|goodbye|wow|whoa|woah|oh|ah|aw+|ha(?:ha)+|lol|omg|yes|yeah|"
             r"yep|no|nope|sure|definitely|absolutely|totally|ok|okay|great|awesome|cool|nice|"
             r"good|right|exactly|true|morning|evening|night|cheers|man|glad)")
_VOCATIVE = re.compile(
    rf"(?i:\b{_GREETING})[,!.]?\s+(?P<a>[A-Z][\w'\u2019-]*)(?=\s*(?:[,!.?;:\n]|$))"
    r"|,\s*(?P<b>[A-Z][\w'\u2019-]*)(?=\s*(?:[!.?\n]|$))"
    r"|(?:^|[.!?\n]\s*)(?P<c>[A-Z][\w'\u2019-]*)(?=\s*,)"
)


def _vocatives(text: str) -> set[int]:
    """Start offsets of the names ``text`` addresses its listener by."""
    out: set[int] = set()
    for m in _VOCATIVE.finditer(text):
        for g in ("a", "b", "c"):
            if m.group(g) and fold(m.group(g)) not in _NOT_NAMES:
                out.add(m.start(g))
    return out


def entities_in(text: str) -> tuple[set[str], set[str]]:
    """The names ``text`` writes (folded), with the aliases it equates: (strong, weak). A
    capital that only starts a sentence is weak evidence of a name ("Pottery is fun"), so
    a name standing first in a sentence is weak; it counts once the name is known from a
    strong mention elsewhere. A name only said to the listener (:data:`_VOCATIVE`) is not
    a mention: the text is addressed to them, not about them."""
    strong: set[str] = set()
    weak: set[str] = set()
    addressed = _vocatives(text)
    for m in _NAME.finditer(text):
        words = m.group(0).split()
        first = bool(_SENTENCE_START.search(text[: m.start()]))
        while words and fold(words[0]) in _NOT_NAMES:
            words, first = words[1:], False
        if not words:
            continue
        if len(words) == 1 and m.start() + m.group(0).rfind(words[0]) in addressed:
            continue
        if first and len(words) == 1:
            weak.add(fold(words[0]))
        else:
            strong.add(fold(" ".join(words)))
            if first:  # "Maya Lind said": "maya lind" is a name; "maya" alone may be one
                weak.add(fold(words[0]))
    for m in _ALIAS.finditer(text):
        for g in ("a", "b", "c", "d"):
            if m.group(g):
                strong.add(fold(m.group(g).strip()))
    return strong, weak - strong


# ---- refusals ---------------------------------------------------------------------------------

_INJECTION = re.compile(
    r"ignore (?:all |any )?(?:the )?(?:previous|prior|above) instructions|"
    r"disregard (?:all |any )?(?:the )?(?:previous|prior|above)|"
    r"you are now (?:in )?(?:admin|developer|dan) mode|"
    r"<\s*/?\s*(?:system|assistant)\s*>|\[\s*/?\s*inst\s*\]|"
    r"(?:^|\n)\s*(?:system|assistant)\s*:\s",
    re.IGNORECASE,
)


def injection_marker(text: str) -> str | None:
    """The prompt-injection marker ``text`` carries, if any."""
    m = _INJECTION.search(text)
    return None if m is None else m.group(0).strip()


# ---- the index --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PassageHit:
    id: int
    doc: str
    container: str
    text: str
    subject: str
    said_at: int
    score: float  # the fused reciprocal-rank score
    similarity: float  # cosine of passage and question (the vector leg's measure)


_FIGURE = re.compile(r"\bhow (?:many|much|long|old|often|far)\b|\bwhat (?:number|amount|price)",
                     re.IGNORECASE)  # fmt: skip
_LATEST = re.compile(r"\b(?:latest|most recent(?:ly)?|recently|last time|newest|current(?:ly)?)\b",
                     re.IGNORECASE)  # fmt: skip
_TERM = re.compile(r"[^\W_]+", re.UNICODE)
# words that carry the shape of a question, not what it asks about: matched in the lexical
# leg, they rank the passages holding the most of them ("what did you do"), not the answer
QUESTION_STOP = STOP | frozenset(
    re.findall(
        r"\w+",
        """would could should can will shall may might must am being there here about after
        before into onto than then also other any some such very just only both each few more
        most own same too again once during while until since ever""",
    )
)


def query_terms(question: str) -> list[str]:
    """The words of ``question`` the lexical leg matches: lower-cased, longer than one
    letter, not a function word (:data:`QUESTION_STOP`); all of them when that leaves none."""
    words = [t for t in _TERM.findall(question.lower()) if len(t) > 1]
    return [t for t in words if t not in QUESTION_STOP] or words


_MONTHS = tuple(datetime(2000, m, 1).strftime("%B").lower() for m in range(1, 13))
_NAMED_DATE = re.compile(
    rf"\b(?:\d{{1,2}}(?:st|nd|rd|th)?,? )?({'|'.join(_MONTHS)})(?: \d{{1,2}}(?:st|nd|rd|th)?)?"
    r",? ((?:19|20)\d{2})\b",
    re.IGNORECASE,
)
DATE_SLACK_MS = 7 * 86_400_000  # a month named in a question also reaches a week either side


def _named_month(question: str) -> tuple[int, int, set[str]] | None:
    """The span of time (ms, half open) of the month a question names with its year, a
    week either side, and the words naming it; None when it names none."""
    m = _NAMED_DATE.search(question)
    if m is None:
        return None
    month, year = _MONTHS.index(m.group(1).lower()) + 1, int(m.group(2))
    lo = datetime(year, month, 1, tzinfo=UTC)
    hi = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
    return (int(lo.timestamp() * 1000) - DATE_SLACK_MS, int(hi.timestamp() * 1000) + DATE_SLACK_MS,
            set(_TERM.findall(m.group(0).lower())))  # fmt: skip


# A passage is the span [start, end_) of its document's text (``text`` NULL) when the store
# can read that text (``PassageIndex.texts``); its document, container and subject are
# integers (a document's code, the file's tiers share: :class:`~hirmem.semantic.dictionary.Codes`;
# ``passage_containers``, ``passage_names``), and so is every name it mentions: the
# passages naming a name are its posting list (:data:`PASSAGE_MENTIONS`), the strong bit
# folded in. A container's passages are found through its own full-text index, which lists
# exactly them (:meth:`PassageIndex._members`): no index by container (a file of before
# drops its on open).
_SCHEMA = """
CREATE TABLE IF NOT EXISTS passages (
    id INTEGER PRIMARY KEY, doc INTEGER NOT NULL, container INTEGER NOT NULL,
    subject INTEGER NOT NULL, text TEXT, start INTEGER NOT NULL, end_ INTEGER NOT NULL,
    said_at INTEGER NOT NULL, valid_from INTEGER NOT NULL, valid_until INTEGER NOT NULL,
    has_digit INTEGER NOT NULL, vec BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS passages_doc ON passages(doc);
CREATE TABLE IF NOT EXISTS passage_containers (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL);
CREATE TABLE IF NOT EXISTS passage_quarantine (
    doc TEXT PRIMARY KEY, container TEXT NOT NULL, marker TEXT NOT NULL, text TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS passage_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class PassageIndex:
    """Passages in SQLite (``path``, or in memory), found by BM25 and by cosine, fused."""

    def __init__(self, embedder: PassageEmbedder, path: Where = ":memory:",
                 texts: Callable[[str], str | None] | None = None) -> None:  # fmt: skip
        self.embedder = embedder
        # the text of a document, which its passages are spans of (the composing
        # substrate reads its document store); alone, passages keep their text
        self.texts = texts
        self._lock = threading.RLock()
        self._cache: dict[tuple[str, ...], Timed] = {}
        # per readable set: its entities indexed by their words, and its subjects; kept
        # until the next write, so naming a subject is a lookup, not a pass over mentions
        self._names: dict[tuple[str, ...], tuple[NameIndex, frozenset[str]]] = {}
        # per set of names (folded): the passages naming any, decoded; until the next write
        self._named_ids: dict[tuple[str, ...], npt.NDArray[np.int64]] = {}
        self._db = open_db(path, "passages")
        self._lex = lexical_of(self._db, "passages", "id")
        earlier = self._earlier_rows()
        self._db.executescript(_SCHEMA)
        self._db.execute("DROP INDEX IF EXISTS passages_container")
        self._names_of = Words(self._db, "passage_names")
        self._containers = Words(self._db, "passage_containers", "name")
        self._docs = Sources(self._db, "passage_docs", source_key)
        self._docs.codes.adopt("passages", "doc")
        self._mentions = Postings(self._db, PASSAGE_MENTIONS, flagged=True)
        self._mentions.create()
        if earlier is not None:
            self._rewrite(*earlier)
        self._list_mentions()
        self.reembedded = self._settle_embedder()

    def _earlier_rows(self) -> tuple[list[tuple[object, ...]], list[tuple[str, int, int]]] | None:
        """The passages and mentions of a file of the earlier layout (container, subject
        and mentioned names as text, the text copied), read out and their tables dropped;
        None for any other file."""
        cols = {r[1]: str(r[2]).upper() for r in self._db.execute("PRAGMA table_info(passages)")}
        if cols.get("container") != "TEXT":
            return None
        rows = [tuple(r) for r in self._db.execute(
            "SELECT id, doc, container, subject, text, said_at, valid_from, valid_until, "
            "has_digit, vec FROM passages ORDER BY id")]  # fmt: skip
        mentions = [(str(e), int(p), int(st)) for e, p, st in self._db.execute(
            "SELECT entity, passage, strong FROM passage_mentions")]  # fmt: skip
        self._db.execute("BEGIN")
        self._db.execute("DROP TABLE passages")
        self._db.execute("DROP TABLE passage_mentions")
        self._db.execute("COMMIT")
        return rows, mentions

    def _rewrite(self, rows: list[tuple[object, ...]],
                 mentions: list[tuple[str, int, int]]) -> None:  # fmt: skip
        """Write the earlier layout's rows again with their ids (the full-text indexes refer
        to them), their text kept (nothing tells where their documents are while opening)."""
        self._db.execute("BEGIN")
        for pid, doc, container, subject, text, said, vf, vu, digit, vec in rows:
            self._db.execute(
                "INSERT INTO passages VALUES (?, ?, ?, ?, ?, 0, 0, ?, ?, ?, ?, ?)",
                (pid, self._docs.code(str(doc)), self._container_id(str(container)),
                 self._name_id(str(subject)),
                 text, said, vf, vu, digit, vec))  # fmt: skip
        self._mentions.fill([(self._name_id(e), p, st) for e, p, st in mentions])
        self._db.execute("COMMIT")

    def _list_mentions(self) -> None:
        """Convert a store whose mentions are rows (``passage_mentions``: a name's integer,
        a passage, strong) into posting lists, once (the first process to open it)."""
        if not has_table(self._db, "passage_mentions"):
            return
        self._db.execute("BEGIN IMMEDIATE")
        try:
            if has_table(self._db, "passage_mentions"):  # not converted by another opener
                self._mentions.fill((int(e), int(p), int(st)) for e, p, st in self._db.execute(
                    "SELECT entity, passage, strong FROM passage_mentions").fetchall())
                self._db.execute("DROP TABLE passage_mentions")
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def _name_id(self, name: str) -> int:
        """The integer a subject or a mentioned name (folded) is kept as; 0 for none."""
        if not name:
            return 0
        wid = self._names_of.id(name)
        assert wid is not None
        return wid

    def _container_id(self, container: str) -> int:
        cid = self._containers.id(container)
        assert cid is not None
        return cid

    def _text(self, doc: str, text: object, start: int, end: int,
              seen: dict[str, str | None] | None = None) -> str:  # fmt: skip
        """A passage's text: its own, or the span of its document's text it is."""
        if text is not None:
            return str(text)
        return span_text(self.texts, {} if seen is None else seen, doc, start, end,
                         "a passage is")  # fmt: skip

    def _fence(self, readable: Collection[str]) -> tuple[str, list[object]]:
        """The container predicate every query starts from (over the containers' ids)."""
        ids = self._containers.ids(readable)
        if not ids:
            return "0 = 1", []
        return f"p.container IN ({','.join('?' * len(ids))})", list[object](ids)

    def _members(self, readable: Collection[str]) -> str:
        """A SELECT of the ids of the readable containers' passages: each container's
        full-text index holds exactly its passages (each indexed in its container's when
        kept, and out of it when dropped), keyed by id: the fence reads only the rows it
        returns, with no index by container."""
        tables = [self._terms_table(c, create=False) for c in sorted(readable)]
        return members_of(self._lex, [t for t in tables if t is not None])

    def _settle_embedder(self) -> int:
        """Vectors of one embedder only: a store written with another (MiniLM installed
        since, or removed) has every passage embedded again from its verbatim text, so no
        question is ever compared with a vector of another space. The passages redone."""
        me = embedder_identity(self.embedder)
        with self._lock:
            row = self._db.execute("SELECT value FROM passage_meta WHERE key = 'embedder'"
                                   ).fetchone()  # fmt: skip
            if row is not None and row[0] == me:
                return 0
            self._db.execute("BEGIN")
            try:
                rows = self._db.execute("SELECT p.id, dk.key, d.name, p.text, p.start, p.end_ "
                                        f"FROM passages p {self._docs.joined('p.doc', 'd')}"
                                        ).fetchall()  # fmt: skip
                seen: dict[str, str | None] = {}
                self._db.executemany("UPDATE passages SET vec = ? WHERE id = ?", [
                    (pack_steps(self.embedder.embed(self._text(Sources.spelled(k, d), t, a, b,
                                                               seen))), pid)
                    for pid, k, d, t, a, b in rows])  # fmt: skip
                self._db.execute("INSERT OR REPLACE INTO passage_meta VALUES ('embedder', ?)",
                                 (me,))  # fmt: skip
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._cache.clear()
        return len(rows)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ---- writing --------------------------------------------------------------------------

    def add(
        self,
        doc: str,
        text: str,
        container: str,
        *,
        subject: str = "",
        said_at: int = 0,
        valid_from: int = 0,
        valid_until: int = 0,
    ) -> list[int]:
        """Keep ``text`` (of document ``doc``) as passages; their row ids. A text with an
        injection marker is quarantined instead and gives none."""
        if not container:
            raise SemanticError(f"passage of {doc}: a row without a container has no fence")
        marker = injection_marker(text)
        with self._lock:
            self._forget_reads()
            self._db.execute("BEGIN IMMEDIATE")  # a posting list is read, then rewritten
            try:
                self._drop(doc)
                if marker is not None:
                    held = (doc, container, marker, text)
                    self._db.execute("INSERT OR REPLACE INTO passage_quarantine "
                                     "VALUES (?, ?, ?, ?)", held)  # fmt: skip
                    self._db.execute("COMMIT")
                    return []
                ids = []
                terms = self._terms_table(container, create=True)
                cid = self._container_id(container)
                did = self._docs.code(doc)
                sid = self._name_id(fold(subject))
                # a passage is a span of its document as stored, when the store can read it
                whole = self.texts(doc) if self.texts is not None else None
                at = 0
                for piece in passages_of(text):
                    at = -1 if whole is None else whole.find(piece, at)
                    span = (at, at + len(piece)) if at >= 0 else (0, 0)
                    vec = pack_steps(self.embedder.embed(piece))
                    cur = self._db.execute(
                        "INSERT INTO passages (doc, container, subject, text, start, end_, "
                        "said_at, valid_from, valid_until, has_digit, vec) "
                        "VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                        (did, cid, sid, None if at >= 0 else piece, *span, said_at,
                         valid_from, valid_until, int(any(c.isdigit() for c in piece)), vec),
                    )  # fmt: skip
                    at = max(at, 0)
                    pid = int(cur.lastrowid or 0)
                    self._lex.add(str(terms), pid, piece, fold(subject))
                    self._mentions.add([(self._name_id(e), pid, int(st))
                                        for e, st in mentions_of(piece, subject).items()])
                    ids.append(pid)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return ids

    def remove(self, doc: str) -> int:
        """Forget every passage of ``doc`` (a superseded or erased document)."""
        with self._lock:
            self._forget_reads()
            self._db.execute("BEGIN IMMEDIATE")
            try:
                n = self._drop(doc)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return n

    def _forget_reads(self) -> None:
        """What reads keep until the next write (the store's lock held)."""
        self._cache.clear()
        self._names.clear()
        self._named_ids.clear()

    def _drop(self, doc: str) -> int:
        """Take ``doc``'s passages out of every index: the full-text 'delete' with the text
        they were indexed with, the mentions computed from it again (found by their key)."""
        key = self._docs.code(doc, create=False)
        rows = self._db.execute(
            "SELECT p.id, p.text, p.start, p.end_, coalesce(n.word, ''), c.name FROM passages p "
            "JOIN passage_containers c ON c.id = p.container LEFT JOIN passage_names n ON "
            "n.id = p.subject WHERE p.doc = ?", (key,)).fetchall()  # fmt: skip
        seen: dict[str, str | None] = {}
        for pid, text, start, end, subject, container in rows:
            text = self._text(doc, text, start, end, seen)
            terms = self._terms_table(container, create=False)
            self._lex.remove(str(terms), pid, text, subject)
            named = self._names_of.ids(mentions_of(text, subject))
            self._mentions.remove([(e, pid) for e in named])
        self._db.execute("DELETE FROM passages WHERE doc = ?", (key,))
        self._docs.forget(doc)
        self._db.execute("DELETE FROM passage_quarantine WHERE doc = ?", (doc,))
        return len(rows)

    def quarantined(self) -> list[tuple[str, str]]:
        """(doc, marker) of every text kept out of the index."""
        with self._lock:
            rows = self._db.execute("SELECT doc, marker FROM passage_quarantine").fetchall()
        return [(d, m) for d, m in rows]

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM passages").fetchone()[0])

    # ---- reading --------------------------------------------------------------------------

    def entities(self, readable: Collection[str]) -> list[str]:
        """The entities named in passages the reader may read."""
        if not readable:
            return []
        with self._lock:
            fenced = self._fenced(readable)[0]
            keys, ids, strong = self._mentions.everything()
            held = np.unique(keys[(strong == 1) & np.isin(ids, fenced)])
            if not len(held):
                return []
            cond, arg = in_ids(self._db, "id", held)
            rows = self._db.execute(f"SELECT word FROM passage_names WHERE {cond}",
                                    [arg]).fetchall()  # fmt: skip
        return [r[0] for r in rows]

    def subject_named(self, question: str, readable: Collection[str]) -> str | None:
        """The entity (of the readable passages) the question names as whole words: one that
        is some passage's subject (a speaker) before any other, then the longest."""
        if not readable:
            return None
        key = tuple(sorted(readable))
        with self._lock:
            held = self._names.get(key)
            if held is None:
                if len(self._names) >= 8:
                    self._names.clear()
                held = self._names[key] = (NameIndex(self.entities(readable)),
                                           frozenset(self.subjects(readable)))  # fmt: skip
        names, subjects = held
        named = names.matches(question)
        if not named:
            return None
        return max(named, key=lambda e: (e in subjects, len(e), e))

    def subjects(self, readable: Collection[str]) -> list[str]:
        """The subjects of the readable passages."""
        if not readable:
            return []
        with self._lock:
            rows = self._db.execute(f"SELECT DISTINCT n.word FROM ({self._members(readable)}) "
                                    "f CROSS JOIN passages p JOIN passage_names n "
                                    "ON n.id = p.subject WHERE p.id = f.id").fetchall()  # fmt: skip
        return [r[0] for r in rows]

    def search(
        self,
        question: str,
        k: int,
        readable: Collection[str],
        *,
        subject: str | Collection[str] | None = None,
        named: str | None = None,
        at: int | None = None,
        candidates: int = CANDIDATES,
        qvec: F32 | None = None,
    ) -> list[PassageHit]:
        """The ``k`` best passages for ``question`` among those the reader may read, valid
        at ``at`` (when given), naming ``subject`` (when given: a filter; or any of several
        names, the aliases one entity is known by): fused lexical and vector ranks.
        ``named`` (when no subject filters) is an entity the question names: passages naming
        it get a lexical and a vector leg of their own (a boost, not a filter). Each passage
        then lends a share of its score to its neighbours. ``qvec``: the question's vector,
        when the caller has it already (fused recall embeds a question once for all tiers)."""
        names = None if subject is None else sorted(
            {fold(subject)} if isinstance(subject, str) else {fold(n) for n in subject})
        if not readable or k <= 0:
            return []
        with self._lock:
            where, args = self._fence(readable)
        if at is not None:
            where += (" AND (p.valid_from = 0 OR p.valid_from <= ?)"
                      " AND (p.valid_until = 0 OR ? < p.valid_until)")
            args += [at, at]
        if names is not None:
            cond, arg = self._naming_sql(readable, names)
            where += cond
            args.append(arg)
            named = None
        if qvec is None:
            qvec = np.asarray(self.embedder.embed(question), dtype=np.float32)
        terms = query_terms(question)
        entities = names if names is not None else ([fold(named)] if named is not None else [])
        if entities:  # the filter or the boost leg carries the name; its words would only
            # match themselves
            words = {t for e in entities for t in _TERM.findall(e)}
            terms = [t for t in terms if t not in words] or terms
        legs: list[tuple[float, list[int]]] = []
        with self._lock:
            legs.append((1.0, self._lexical(terms, readable, where, args, candidates)))
            vec_leg, sims, named_leg = self._vector(qvec, readable, at, names, candidates,
                                                    named)  # fmt: skip
            legs.append((VECTOR_WEIGHT, vec_leg))
            if named is not None:
                cond, arg = self._naming_sql(readable, [fold(named)])
                legs.append((NAMED_WEIGHT, self._lexical(terms, readable, where + cond,
                                                         [*args, arg], candidates)))
                legs.append((NAMED_WEIGHT * VECTOR_WEIGHT, named_leg))
            if _FIGURE.search(question):
                legs.append((1.0, self._lexical(terms, readable, where + " AND p.has_digit = 1",
                                                args, candidates)))  # fmt: skip
            window = _named_month(question)
            if window is not None:
                # "what did Maria do in May 2023": passages said in or near that month
                lo, hi, said = window
                dated = [t for t in terms if t not in said] or terms
                near = where + " AND p.said_at >= ? AND p.said_at < ?"
                legs.append((1.0, self._lexical(dated, readable, near, [*args, lo, hi],
                                                candidates)))  # fmt: skip
            if _LATEST.search(question):
                cue = {t.lower() for t in _TERM.findall(" ".join(_LATEST.findall(question)))}
                legs.append((1.0, self._lexical([t for t in terms if t not in cue], readable,
                                                where, args, candidates, by_time=True)))
            fused: dict[int, float] = {}
            for weight, leg in legs:
                for rank, pid in enumerate(leg):
                    fused[pid] = fused.get(pid, 0.0) + weight / (RRF_K + rank + 1)
            fused = self._with_neighbours(fused, where, args)
            best = sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
            return [self._hit(pid, score, sims.get(pid), qvec) for pid, score in best]

    def _with_neighbours(self, fused: dict[int, float], where: str,
                         args: list[object]) -> dict[int, float]:  # fmt: skip
        """Each of the best :data:`NEIGHBOUR_SOURCES` passages lends :data:`NEIGHBOUR_SHARE`
        of its score to the passage before and after it: the next piece of its document, or
        the turn said just before or after it in its container at the same time (a reply
        holds what a question turn asked for, and the reverse). A neighbour is only reached
        through ``where``: the fence, valid time and subject filter hold for it too."""
        if NEIGHBOUR_SHARE <= 0 or not fused:
            return fused
        top = sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:NEIGHBOUR_SOURCES]
        src = {r[0]: r[1:] for r in self._db.execute(
            f"SELECT p.id, p.container, p.doc, p.said_at FROM passages p WHERE p.id IN "
            f"({','.join('?' * len(top))})", [pid for pid, _ in top])}  # fmt: skip
        wanted: dict[int, list[tuple[int, float]]] = {}
        for pid, score in top:
            container, doc, said = src[pid]
            # the passages beside it in its container: beside it in the container's own
            # full-text index, which lists exactly the container's passages by id
            beside = self._lex.members(_terms_of(container))
            for op, agg in (("<", "max"), (">", "min")):
                row = self._db.execute(f"SELECT {agg}(b.id) FROM ({beside}) b WHERE b.id {op} ?",
                                       (pid,)).fetchone()  # fmt: skip
                if row[0] is not None:
                    wanted.setdefault(int(row[0]), []).append((pid, score))
        if not wanted:
            return fused
        marks = ",".join("?" * len(wanted))
        rows = self._db.execute(f"SELECT p.id, p.doc, p.said_at FROM passages p WHERE "
                                f"p.id IN ({marks}) AND {where}", [*wanted, *args]).fetchall()
        out = dict(fused)
        for nid, doc, said in rows:
            for pid, score in wanted[nid]:
                _, pdoc, psaid = src[pid]
                if doc == pdoc or (said == psaid and said != 0):
                    out[nid] = out.get(nid, 0.0) + NEIGHBOUR_SHARE * score
        return out

    def _terms_table(self, container: str, *, create: bool) -> str | None:
        """The container's own full-text index. Each container keeps its own, so the term
        statistics BM25 ranks by (how rare a word is, how long passages are) come from that
        container alone: rows a reader cannot read never weigh on a rank."""
        cid = self._containers.id(container, create=create)
        if cid is None:
            return None
        name = _terms_of(cid)
        if create:
            self._lex.create(name)
        return name

    def _lexical(self, terms: Sequence[str], readable: Collection[str], where: str,
                 args: list[object], limit: int, by_time: bool = False) -> list[int]:  # fmt: skip
        """BM25 over each readable container's own index, merged by score (or by time)."""
        if not terms:
            return []
        query = self._lex.query(terms)
        found: list[tuple[int, float, int]] = []
        for container in sorted(readable):
            table = self._terms_table(container, create=False)
            if table is None:
                continue
            r = self._lex.ranked(table, (1.0, SUBJECT_WEIGHT))
            order = f"p.said_at DESC, {r.rank}" if by_time else r.rank
            found += self._db.execute(
                f"SELECT -p.said_at, {r.rank}, p.id FROM {r.source} JOIN passages p "
                f"ON p.id = {r.key} WHERE {r.match} AND {where} "
                f"ORDER BY {order} LIMIT ?",
                [query, *args, limit],
            ).fetchall()  # fmt: skip
        found.sort(key=(lambda r: (r[0], r[1], r[2])) if by_time else (lambda r: (r[1], r[2])))
        return [r[2] for r in found[:limit]]

    def _vector(self, qvec: F32, readable: Collection[str], at: int | None,
                names: Sequence[str] | None, limit: int, named: str | None = None,
                ) -> tuple[list[int], dict[int, float], list[int]]:  # fmt: skip
        """Cosine over the fenced rows only: the matrix holds nothing else, and the time and
        subject filters mask it before any score is ranked. With ``named``, also the best
        of the passages naming it, from the same scores (none computed twice)."""
        ids, vf, vu, mat = self._fenced(readable)
        if not len(ids):
            return [], {}, []
        keep = np.ones(len(ids), dtype=bool)
        if at is not None:
            keep &= ((vf == 0) | (vf <= at)) & ((vu == 0) | (at < vu))
        if names is not None:
            keep &= self._naming(ids, names)
        rows = np.flatnonzero(keep)
        if not len(rows):
            return [], {}, []
        sims = _cosines(mat, qvec, rows)
        top = np.argsort(-sims, kind="stable")[:limit]
        picked = [int(ids[rows[i]]) for i in top]
        scores = {int(ids[rows[i]]): float(sims[i]) for i in top}
        if named is None:
            return picked, scores, []
        among = np.flatnonzero(self._naming(ids[rows], [fold(named)]))
        best = among[np.argsort(-sims[among], kind="stable")[:limit]]
        scores.update((int(ids[rows[i]]), float(sims[i])) for i in best)
        return picked, scores, [int(ids[rows[i]]) for i in best]

    def _naming(self, ids: npt.NDArray[np.int64],
                names: Sequence[str]) -> npt.NDArray[np.bool_]:  # fmt: skip
        """Which of ``ids`` are passages naming any of ``names`` (folded)."""
        return np.isin(ids, self._named(names))

    def _named(self, names: Sequence[str]) -> npt.NDArray[np.int64]:
        """The passages naming any of ``names`` (folded), sorted; kept until the next write
        (the store's lock held)."""
        key = tuple(sorted(set(names)))
        held = self._named_ids.get(key)
        if held is None:
            if len(self._named_ids) >= 64:
                self._named_ids.clear()
            held = self._named_ids[key] = self._mentions.ids(self._names_of.ids(key))
        return held

    def _naming_sql(self, readable: Collection[str], names: Sequence[str]) -> tuple[str, object]:
        """The condition that a passage names one of ``names`` (folded), with its one
        argument: the readable passages naming them, as a set the statement applies
        before its ORDER BY and LIMIT."""
        with self._lock:
            ids = np.intersect1d(self._named(names), self._fenced(readable)[0],
                                 assume_unique=True)
        cond, arg = in_ids(self._db, "p.id", ids)
        return f" AND {cond}", arg

    def _fenced(self, readable: Collection[str]) -> Timed:
        """The rows of the readable containers, as arrays; kept until the next write."""
        key = tuple(sorted(readable))
        held = self._cache.get(key)
        if held is not None:
            return held
        rows = self._db.execute(f"SELECT p.id, p.valid_from, p.valid_until, p.vec FROM "
                                f"({self._members(readable)}) f CROSS JOIN passages p "
                                "WHERE p.id = f.id ORDER BY f.id").fetchall()  # fmt: skip
        out = timed_rows(rows, self.embedder.dim)
        if len(self._cache) >= 8:
            self._cache.clear()
        self._cache[key] = out
        return out

    def _hit(self, pid: int, score: float, sim: float | None, qvec: F32) -> PassageHit:
        key, spelled, container, text, start, end, subject, said_at, vec = self._db.execute(
            "SELECT dk.key, d.name, c.name, p.text, p.start, p.end_, coalesce(n.word, ''), "
            "p.said_at, p.vec FROM passages p JOIN passage_containers c ON c.id = p.container "
            f"{self._docs.joined('p.doc', 'd')} LEFT JOIN passage_names n ON n.id = p.subject "
            "WHERE p.id = ?", (pid,)).fetchone()  # fmt: skip
        doc = Sources.spelled(int(key), spelled)
        text = self._text(doc, text, start, end)
        if sim is None:
            sim = float(_cosines(Rows([vec], self.embedder.dim), qvec)[0])
        return PassageHit(pid, doc, container, text, subject, said_at, score, sim)


def _terms_of(cid: int) -> str:
    """The full-text index of the container of id ``cid`` (its passages' words)."""
    return f"passage_terms_{cid}"


def mentions_of(piece: str, subject: str) -> dict[str, bool]:
    """The names a passage mentions (folded), each strong or weak: its subject's and
    those its text writes (:func:`entities_in`)."""
    strong, weak = entities_in(piece)
    named = {fold(subject)} | strong if subject else strong
    return {**{e: False for e in weak - named}, **{e: True for e in named}}


def _cosines(mat: Rows, q: F32, rows: npt.NDArray[np.intp] | None = None) -> F32:
    """Cosine of ``q`` with every row of ``mat`` (or with ``rows``, in that order)."""
    qn = float(np.linalg.norm(q))
    norms = mat.norms if rows is None else mat.norms[rows]
    with np.errstate(divide="ignore", invalid="ignore"):
        sims = mat.dot(q, rows) / (norms * (qn if qn > 0 else math.inf))
    out: npt.NDArray[np.float32] = np.nan_to_num(sims.astype(np.float32), nan=0.0)
    return out
