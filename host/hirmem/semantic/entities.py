"""Entities, the aliases a source equated, and the relation edges between entities.

Invariants:

- An entity is a name as a source wrote it, folded (its id: FNV-1a of the fold). Two names
  are one entity only where a source equated them in writing: a parenthetical
  ("Robert (Bob) Smith": entity "robert smith", alias "bob"), an "aka" ("Robert aka Bob")
  or a spaced slash ("Bob / Robert"). Nothing is merged by similarity: "Scott" and
  "Scott Waddell" stay two entities, and so do "IBM" and "International Business
  Machines" unless some text wrote both as one.
- Every alias row and every edge carries the container it was said in and the document
  it was read from, and every read takes the reader's readable containers and applies them
  in SQL: an alias stated only where the reader cannot read never equates two names for
  them, an edge from there is never walked. No containers, nothing.
- An edge is (subject entity, relation, object entity), both ends resolved through the
  aliases of the container it was said in; it is kept only when no vocabulary predicate
  states its relation (the substrate files those as typed claims, the right way round).
  Edges are walked by entity id in both directions, never searched by similarity.
- An entity has a kind (:data:`~hirmem.semantic.relations.ENTITY_KINDS`) only where a
  source states it (:func:`kind_cue`: a device's own container name, an organisation's
  legal suffix, a title before a person's name, a place word, an apposition such as
  "Acme, a company"), or where a typed claim of a predicate that admits one kind for that
  end filed it. Each kind is kept with the container and document that stated it, read
  through the fence like an alias, and withdrawn with its document. An entity may be
  stated as two kinds; nothing picks one.
- Withdrawing a document (superseded, erased, withheld) takes its aliases, kinds and edges
  with it.
"""

from __future__ import annotations

import contextlib
import functools
import re
import threading
from collections import Counter
from collections.abc import Collection, Iterator
from dataclasses import dataclass

from hirmem.protocol.identity import fnv1a64, fold
from hirmem.semantic.dictionary import Codes, SourceRows, Words, source_key, source_number
from hirmem.semantic.stores.db import Where, open_db
from hirmem.semantic.stores.sqlite import earlier_table, rowless

__all__ = ["EdgeRow", "EntityIndex", "aliases_in", "entity_id", "implied", "kind_cue",
           "written"]

_CAP = r"[A-Z][\w'\u2019-]*"
_RUN = rf"{_CAP}(?:[ \t]+{_CAP})*"
# "Robert (Bob) Smith", "Ivosidenib (Tibsovo)", "Robert aka Bob", "Bob / Robert"
_PAREN = re.compile(rf"(?P<a>{_RUN})[ \t]*\((?P<b>{_RUN})\)(?:[ \t]+(?P<c>{_RUN}))?")
_AKA = re.compile(rf"(?P<a>{_RUN}),?[ \t]+(?:aka|a\.k\.a\.|also known as)[ \t]+(?P<b>{_RUN})")
_SLASH = re.compile(rf"(?P<a>{_RUN})[ \t]+/[ \t]+(?P<b>{_RUN})")


# What a source writes that states a name's kind. Deterministic and local: the name's own
# words or the words right around it in the text that says it, never a similarity.
_DEVICE = re.compile(r"[0-9a-f]{16}(?:/[\w.-]+)?")  # <device>/<source>, a device's container
_ORG_WORDS = ("inc inc. ltd ltd. llc plc gmbh ag sa s.a. bv corp corp. corporation company co "
              "co. group bank university foundation institute labs laboratories")
_ORG_SUFFIX = frozenset(_ORG_WORDS.split(" "))
_PLACE_WORDS = "city town village street road avenue square river lake mountain county province"
_PLACE_SUFFIX = frozenset([*_PLACE_WORDS.split(" "), "island", "bay", "valley"])
_TITLE = r"(?:Mr|Mrs|Ms|Mx|Dr|Prof|Sir|Dame|Mister|Madam)\.?"
_APPOSED = {"company": "organisation", "firm": "organisation", "startup": "organisation",
            "business": "organisation", "supplier": "organisation", "vendor": "organisation",
            "customer": "organisation", "bank": "organisation", "school": "organisation",
            "university": "organisation", "city": "place", "town": "place", "village": "place",
            "country": "place", "region": "place", "island": "place", "person": "person",
            "woman": "person", "man": "person", "colleague": "person", "engineer": "person",
            "manager": "person", "doctor": "person", "device": "device", "sensor": "device",
            "gateway": "device", "board": "device", "product": "thing", "tool": "thing",
            "machine": "thing", "pump": "thing", "part": "thing", "component": "thing",
            "vehicle": "thing", "car": "thing"}  # fmt: skip
_APPOSITION = (r"(?:,\s*|\s+is\s+)(?:a|an|the|our|my|their)\s+(?:[a-z-]+\s+)?"
               rf"({'|'.join(_APPOSED)})\b")


def kind_cue(name: str, text: str = "") -> str:
    """The kind ``text`` (or the name itself) states ``name`` is, or "" when it states
    none: "c0ffee00c0ffee00/temp0" is a device, "Acme Corp" an organisation, "Dr Lee" (or
    "Dr. Lee" in the text) a person, "Oslo City" a place, "Initech, a company" an
    organisation."""
    bare = " ".join(name.split())
    if not bare:
        return ""
    if _DEVICE.fullmatch(bare):
        return "device"
    words = bare.lower().split()
    if len(words) > 1 and words[-1] in _ORG_SUFFIX:
        return "organisation"
    if len(words) > 1 and words[-1] in _PLACE_SUFFIX:
        return "place"
    if _TITLED.match(bare):
        return "person"
    return _stated_kinds(text).get(bare, "") if text else ""


_NAME = r"[A-Z][\w'\u2019-]*(?:[ \t]+[A-Z][\w'\u2019-]*)*"
_TITLED = re.compile(rf"{_TITLE}\s")
_STATED = (
    (re.compile(rf"\b{_TITLE}\s+(?P<n>{_NAME})"), "person"),
    (re.compile(rf"\b(?:[Tt]he\s+)?(?:[Cc]ity|[Tt]own|[Vv]illage|[Cc]ountry)\s+of\s+(?P<n>{_NAME})"),
     "place"),
)  # fmt: skip
_APPOSED_NAME = re.compile(rf"(?P<n>{_NAME}){_APPOSITION}")


@functools.lru_cache(maxsize=256)
def _stated_kinds(text: str) -> dict[str, str]:
    """Every name ``text`` states the kind of (a title before it, "the city of" it, an
    apposition after it), read once per text; the first statement of a name holds. A name
    of several words also stands for its tail ("Mr Bo Nair" states Bo Nair and Nair)."""
    out: dict[str, str] = {}
    found = [(m.start(), m.group("n"), kind) for rx, kind in _STATED for m in rx.finditer(text)]
    found += [(m.start(), m.group("n"), _APPOSED[m.group(2).lower()])
              for m in _APPOSED_NAME.finditer(text)]  # fmt: skip
    for _, name, kind in sorted(found):
        words = name.split()
        for i in range(len(words)):
            out.setdefault(" ".join(words[i:]), kind)
    return out


def _name(text: str) -> str:
    return " ".join(fold(text).split())


def entity_id(name: str) -> str:
    return f"{fnv1a64(_name(name).encode()):016x}"


def implied(name: str) -> tuple[str, list[str]]:
    """The entity a written name stands for and the aliases it equates with it:
    "Robert (Bob) Smith" → ("robert smith", ["bob"]); a plain name has none."""
    m = _PAREN.fullmatch(name.strip())
    if m is not None:
        whole = " ".join(x for x in (m.group("a"), m.group("c")) if x)
        return _name(whole), [_name(m.group("b"))]
    for rx in (_AKA, _SLASH):
        m = rx.fullmatch(name.strip())
        if m is not None:
            return _name(m.group("a")), [_name(m.group("b"))]
    return _name(name), []


def aliases_in(text: str) -> list[tuple[str, str]]:
    """Every (entity name, alias) pair ``text`` equates, folded, in order."""
    out: list[tuple[str, str]] = []
    for rx in (_PAREN, _AKA, _SLASH):
        for m in rx.finditer(text):
            entity, aliases = implied(m.group(0))
            out += [(entity, a) for a in aliases if a and a != entity]
    return out


def written(name: str, text: str) -> str:
    """``name`` as ``text`` writes it in full: a name an extractor read as the head or the
    tail of an alias phrase ("Robert" or "Smith" of "Robert (Bob) Smith") is that phrase;
    else ``name`` itself."""
    bare = name.strip()
    for rx in (_PAREN, _AKA, _SLASH):
        for m in rx.finditer(text):
            phrase = m.group(0)
            head = phrase.startswith(bare) and not phrase[len(bare) : len(bare) + 1].isalnum()
            tail = phrase.endswith(bare) and not phrase[: -len(bare)][-1:].isalnum()
            if bare and (head or tail):
                return phrase
    return bare


@dataclass(frozen=True, slots=True)
class EdgeRow:
    subject: str  # entity id
    relation: str
    object: str  # entity id
    subject_name: str
    object_name: str
    container: str
    source: str
    quote: str
    hedged: bool


# ``entities`` has no index but its key, so as a WITHOUT ROWID table its key is the table:
# each id once, not twice (row and key index).
_ENTITIES = "CREATE TABLE entities (id TEXT PRIMARY KEY, name TEXT NOT NULL) WITHOUT ROWID"

# What the sources said, one row per (entity, container, kind) with ``n``, how many
# statements of it the sources' lists hold (``entity_said_by``,
# :class:`~hirmem.semantic.dictionary.SourceRows`: each source's (entity, container, kind)s
# packed): a read asks only whether a name was said in a container (and as what kind), so
# the source is kept once, in its list, not in a row beside it; a withdrawal takes its list
# and counts each row down, deleting it at 0. The entity's own name is implied (an entity's
# id is the id of its name); ``entity_aliases`` holds only names an entity is known by other
# than its own. Strings (entity ids, alias names, containers, kinds) are dictionary-encoded
# in ``entity_words``; sources are the small codes of their
# 64-bit keys (:func:`~hirmem.semantic.dictionary.source_number`), shared by the file's tiers
# (:class:`~hirmem.semantic.dictionary.Codes`). Both tables are WITHOUT ROWID (their
# keys are narrow integers: measured smaller than a rowid table with the same indexes).
_SAID = """CREATE TABLE IF NOT EXISTS entity_said (
    entity INTEGER NOT NULL, container INTEGER NOT NULL, kind INTEGER NOT NULL,
    n INTEGER NOT NULL, PRIMARY KEY (entity, container, kind)) WITHOUT ROWID"""
_SCHEMA = """
CREATE TABLE IF NOT EXISTS entity_aliases (
    alias INTEGER NOT NULL, entity INTEGER NOT NULL, container INTEGER NOT NULL,
    source INTEGER NOT NULL, PRIMARY KEY (alias, entity, container, source)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS entity_aliases_entity ON entity_aliases(entity, container);
CREATE INDEX IF NOT EXISTS entity_aliases_source ON entity_aliases(source);
CREATE TABLE IF NOT EXISTS entity_edges (
    subject TEXT NOT NULL, relation TEXT NOT NULL, object TEXT NOT NULL,
    container TEXT NOT NULL, source TEXT NOT NULL, quote TEXT NOT NULL,
    hedged INTEGER NOT NULL,
    PRIMARY KEY (subject, relation, object, container, source));
CREATE INDEX IF NOT EXISTS entity_edges_object ON entity_edges(object);
CREATE INDEX IF NOT EXISTS entity_edges_source ON entity_edges(source);
"""
NO_KIND = 0  # ``entity_said.kind`` of a name said with no kind (dictionary ids start at 1)


class EntityIndex:
    """Entities, aliases and open edges in SQLite (``path``, or in memory). A file of the
    earlier layout (aliases and kinds as text rows) is converted when opened."""

    def __init__(self, path: Where = ":memory:") -> None:
        self._lock = threading.RLock()
        self._db = open_db(path, "entities")
        rowless(self._db, "entities", _ENTITIES)
        earlier = self._earlier_rows()
        self._words = Words(self._db, "entity_words")
        # a said table of before holds a row per source (its ``source`` column)
        by_source = "source" in {str(r[1]) for r in self._db.execute(
            "PRAGMA table_info(entity_said)")}  # fmt: skip
        self._db.executescript(_SCHEMA)
        self._codes = Codes(self._db)
        for table in ("entity_said", "entity_aliases") if by_source else ("entity_aliases",):
            self._codes.adopt(table, "source", self._rekeyed)
        # what each source said, its (entity, container, kind)s packed: what a withdrawal
        # counts down
        self._said_by = SourceRows(self._db, "entity_said", 3)
        with self._writing():
            if self._said_by.made("entity, container, kind" if by_source else None):
                self._db.execute("DROP INDEX IF EXISTS entity_said_source")
            if by_source:
                self._count_said()
            else:
                self._db.execute(_SAID)
        if earlier is not None:
            self._convert(*earlier)

    def _count_said(self) -> None:
        """Rebuild a said table of before (a row per source; its lists made from those rows
        or kept as they were, one entry a row) into the counted one (the caller's
        transaction open)."""
        held = self._db.execute("SELECT entity, container, kind, count(*) FROM entity_said "
                                "GROUP BY entity, container, kind").fetchall()  # fmt: skip
        self._db.execute("DROP INDEX IF EXISTS entity_said_source")
        self._db.execute("DROP TABLE entity_said")
        self._db.execute(_SAID)
        self._db.executemany("INSERT INTO entity_said (entity, container, kind, n) VALUES "
                             "(?, ?, ?, ?)", held)  # fmt: skip

    def _earlier_rows(self) -> tuple[list[tuple[str, str, str, str]],
                                     list[tuple[str, str, str, str]]] | None:  # fmt: skip
        """The alias and kind rows of a file of the earlier layout (text columns), read out
        and their tables dropped; None for any other file."""
        held = earlier_table(self._db, "entity_aliases")
        if held is None or not re.search(r"\balias\s+TEXT\b", held, re.I):
            return None
        aliases = [tuple(map(str, r)) for r in self._db.execute(
            "SELECT alias, entity, container, source FROM entity_aliases")]  # fmt: skip
        kinds = [] if earlier_table(self._db, "entity_kinds") is None else [
            tuple(map(str, r)) for r in self._db.execute(
                "SELECT entity, kind, container, source FROM entity_kinds")]  # fmt: skip
        self._db.execute("BEGIN")
        self._db.execute("DROP TABLE entity_aliases")
        self._db.execute("DROP TABLE IF EXISTS entity_kinds")
        self._db.execute("COMMIT")
        return aliases, kinds  # type: ignore[return-value]

    def _convert(self, aliases: list[tuple[str, str, str, str]],
                 kinds: list[tuple[str, str, str, str]]) -> None:  # fmt: skip
        with self._writing():
            for alias, eid, container, source in aliases:
                self._say(alias, eid, container, source)
            for eid, kind, container, source in kinds:
                self._said(eid, container, source, kind)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ---- writing --------------------------------------------------------------------------

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """One transaction for what is written inside (joined when one is open): a name,
        its aliases and its kind are one commit, not one each."""
        with self._lock:
            if self._db.in_transaction:
                yield
                return
            self._db.execute("BEGIN")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _wid(self, word: str) -> int:
        wid = self._words.id(word)
        assert wid is not None
        return wid

    def _code(self, source: str) -> int:
        """The code of ``source`` (of its 64-bit key; never spelled back here)."""
        return self._codes.code(source_number(source))

    def _rekeyed(self) -> dict[int, int]:
        """The keys this file's entities held before their sources were coded (a document
        id's too was :func:`source_key` of its name) as the keys every tier codes them by
        now (its own number), for the document ids the file's other tiers hold; one of no
        other tier keeps its old key's code (:meth:`withdraw` finds it by that too)."""
        held = [int(r[0]) for r in self._db.execute("SELECT key FROM source_codes")]
        return {source_key(f"{k & 0xFFFFFFFFFFFFFFFF:016x}"): k for k in held}

    def _said(self, eid: str, container: str, source: str, kind: str = "") -> None:
        """``source`` said entity ``eid`` in ``container`` (stating ``kind``, when given)."""
        e, c, src = self._wid(eid), self._wid(container), self._code(source)
        k = self._wid(kind) if kind else NO_KIND
        if self._said_by.add(src, (e, c, k), once=True):
            self._db.execute("INSERT INTO entity_said (entity, container, kind, n) VALUES "
                             "(?, ?, ?, 1) ON CONFLICT (entity, container, kind) DO UPDATE "
                             "SET n = entity_said.n + 1", (e, c, k))  # fmt: skip

    def _say(self, alias: str, eid: str, container: str, source: str, kind: str = "") -> None:
        """``source`` wrote ``alias`` for entity ``eid`` in ``container`` (stating ``kind``,
        when given): its own name is a said row, another name an alias row (the entity said
        too). A name said with a kind is one row, not one with and one without."""
        self._said(eid, container, source, kind)
        if entity_id(alias) != eid:
            self._db.execute("INSERT OR IGNORE INTO entity_aliases VALUES (?, ?, ?, ?)",
                             (self._wid(alias), self._wid(eid), self._wid(container),
                              self._code(source)))  # fmt: skip

    def note(self, name: str, container: str, source: str, kind: str = "") -> str:
        """Record ``name`` as said in ``container`` by ``source``, with the aliases it
        implies (and, when given, the ``kind`` the source states it is); the id of the
        entity it resolves to there."""
        entity, aliases = implied(name)
        if not entity:
            return ""
        with self._writing():
            held = self._resolve_in(entity, container) if not aliases else None
            eid = held or entity_id(entity)
            self._db.execute("INSERT OR IGNORE INTO entities VALUES (?, ?)", (eid, entity))
            # the written form too ("robert (bob) smith"): a claim keeps its subject as written
            for a in sorted({entity, *aliases, _name(name)}):
                self._say(a, eid, container, source, kind)
        return eid

    def note_aliases(self, text: str, container: str, source: str) -> int:
        """Record every alias ``text`` equates; how many pairs."""
        pairs = aliases_in(text)
        if not pairs:
            return 0
        with self._writing():
            for entity, alias in pairs:
                eid = entity_id(entity)
                self._db.execute("INSERT OR IGNORE INTO entities VALUES (?, ?)", (eid, entity))
                self._say(entity, eid, container, source)
                self._say(alias, eid, container, source)
        return len(pairs)

    def edge(self, subject: str, relation: str, obj: str, container: str, source: str,
             quote: str, hedged: bool = False) -> EdgeRow:  # fmt: skip
        """Keep an open edge, both ends resolved to entities where it was said."""
        with self._writing():
            s = self.note(subject, container, source, kind_cue(subject, quote))
            o = self.note(obj, container, source, kind_cue(obj, quote))
            self._db.execute("INSERT OR IGNORE INTO entity_edges VALUES (?, ?, ?, ?, ?, ?, ?)",
                             (s, relation, o, container, source, quote, int(hedged)))  # fmt: skip
        return EdgeRow(s, relation, o, implied(subject)[0], implied(obj)[0], container, source,
                       quote, hedged)  # fmt: skip

    def _kinds_of(self, eids: Collection[str], containers: Collection[str]) -> frozenset[str]:
        """The kinds said of any of ``eids`` in any of ``containers``."""
        ents, fence = self._words.ids(eids), self._words.ids(containers)
        if not ents or not fence:
            return frozenset()
        rows = self._db.execute(
            f"SELECT DISTINCT w.word FROM entity_said s JOIN entity_words w ON w.id = s.kind "
            f"WHERE s.entity IN ({','.join('?' * len(ents))}) AND s.container IN "
            f"({','.join('?' * len(fence))})", [*ents, *fence]).fetchall()  # fmt: skip
        return frozenset(str(r[0]) for r in rows)

    def kinds_in(self, name: str, container: str, text: str = "") -> frozenset[str]:
        """The kinds ``name`` is stated to be where it is said: those recorded for the
        entity it resolves to in ``container``, and the one ``text`` (the sentence that
        names it) states."""
        cue = kind_cue(name, text)
        entity, aliases = implied(name)
        with self._lock:
            eid = self._resolve_in(entity, container) if entity else None
            if eid is None and entity and not aliases:
                eid = entity_id(entity)
            held = frozenset() if eid is None else self._kinds_of([eid], [container])
        return held | ({cue} if cue else frozenset())

    def kinds(self, name: str, readable: Collection[str]) -> frozenset[str]:
        """The kinds the reader's sources state ``name`` is (through its aliases)."""
        ids = self.resolve(name, readable)
        if not ids:
            return frozenset()
        with self._lock:
            return self._kinds_of(ids, readable)

    def withdraw(self, source: str) -> int:
        """Forget the aliases, kinds and edges read from ``source``."""
        with self._lock:
            self._db.execute("BEGIN")
            codes = {self._codes.code(k, create=False)
                     for k in (source_number(source), source_key(source))} - {0}  # fmt: skip
            n = self._db.execute("DELETE FROM entity_edges WHERE source = ?", (source,)).rowcount
            for code in codes:
                n += self._db.execute("DELETE FROM entity_aliases WHERE source = ?",
                                      (code,)).rowcount  # fmt: skip
                listed = Counter(self._said_by.take(code))
                for (e, c, k), times in sorted(listed.items()):
                    self._db.execute("UPDATE entity_said SET n = n - ? WHERE entity = ? AND "
                                     "container = ? AND kind = ?", (times, e, c, k))  # fmt: skip
                    self._db.execute("DELETE FROM entity_said WHERE entity = ? AND container "
                                     "= ? AND kind = ? AND n <= 0", (e, c, k))  # fmt: skip
                n += len(listed)  # the statements the source made, each once
            self._db.execute("COMMIT")
        return n

    # ---- reading ----------------------------------------------------------------------------

    def _resolving(self, name: str, containers: Collection[str]) -> list[str]:
        """The ids of the entities ``name`` (folded) stands for in ``containers``, in order:
        the entity of that name where it was said, and those it is an alias of there."""
        fence = self._words.ids(containers)
        if not fence:
            return []
        marks = ",".join("?" * len(fence))
        own, alias = self._words.id(entity_id(name), create=False), self._words.id(
            name, create=False)  # fmt: skip
        found: set[str] = set()
        if own is not None and self._db.execute(
            f"SELECT 1 FROM entity_said WHERE entity = ? AND container IN ({marks}) LIMIT 1",
            [own, *fence]).fetchone():  # fmt: skip
            found.add(entity_id(name))
        if alias is not None:
            found |= {str(r[0]) for r in self._db.execute(
                "SELECT DISTINCT w.word FROM entity_aliases a JOIN entity_words w ON "
                f"w.id = a.entity WHERE a.alias = ? AND a.container IN ({marks})",
                [alias, *fence])}  # fmt: skip
        return sorted(found)

    def _resolve_in(self, name: str, container: str) -> str | None:
        found = self._resolving(name, [container])
        return found[0] if found else None

    def resolve(self, name: str, readable: Collection[str]) -> list[str]:
        """The entities ``name`` stands for in what the reader may read (more than one
        when the readable sources equate it with two different entities)."""
        if not readable:
            return []
        with self._lock:
            return self._resolving(_name(name), readable)

    def names(self, name: str, readable: Collection[str]) -> set[str]:
        """Every name (folded) the reader's sources equate with ``name``, itself included;
        empty when it is known under no readable name."""
        ids = self.resolve(name, readable)
        if not ids:
            return set()
        with self._lock:
            ents, fence = self._words.ids(ids), self._words.ids(readable)
            e_marks, f_marks = ",".join("?" * len(ents)), ",".join("?" * len(fence))
            rows = self._db.execute(
                "SELECT DISTINCT w.word FROM entity_aliases a JOIN entity_words w ON "
                f"w.id = a.alias WHERE a.entity IN ({e_marks}) AND a.container IN ({f_marks})",
                [*ents, *fence]).fetchall()  # fmt: skip
            own = self._db.execute(
                "SELECT DISTINCT e.name FROM entity_said s JOIN entity_words w ON "
                "w.id = s.entity JOIN entities e ON e.id = w.word WHERE s.entity IN "
                f"({e_marks}) AND s.container IN ({f_marks})", [*ents, *fence]).fetchall()
        return {str(r[0]) for r in (*rows, *own)} | {_name(name)}

    def edges(self, entity: str, readable: Collection[str]) -> list[EdgeRow]:
        """The open edges of ``entity`` (an id) in both directions, readable ones only."""
        if not readable:
            return []
        fence = ",".join("?" * len(readable))
        with self._lock:
            rows = self._db.execute(
                "SELECT e.subject, e.relation, e.object, s.name, o.name, e.container, e.source, "
                "e.quote, e.hedged FROM entity_edges e JOIN entities s ON s.id = e.subject "
                f"JOIN entities o ON o.id = e.object WHERE e.container IN ({fence}) AND "
                "(e.subject = ? OR e.object = ?) ORDER BY e.relation, e.subject, e.object",
                [*sorted(readable), entity, entity]).fetchall()  # fmt: skip
        return [EdgeRow(str(s), str(rel), str(o), str(sn), str(on), str(c), str(src), str(q),
                        bool(h)) for s, rel, o, sn, on, c, src, q, h in rows]  # fmt: skip
