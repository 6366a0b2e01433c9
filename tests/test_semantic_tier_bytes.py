"""What the text tiers cost per document, and that the compact layouts answer as before:
dictionary-encoded names, containers and sources; a claim's quote kept as a span of the
text it cites; the lookups a question makes served by an index (``EXPLAIN QUERY PLAN``);
files of the earlier layouts converted when opened."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from hirmem.semantic.claims import ClaimStore, Ontology, Statement, Template
from hirmem.semantic.entities import EntityIndex, entity_id
from hirmem.semantic.extract import RuleExtractor
from hirmem.semantic.retrieve import Embedder
from hirmem.semantic.split import SentenceSplitter
from hirmem.semantic.stages import Pipeline, Result, StageRun
from hirmem.semantic.stores.packed import Rows
from hirmem.semantic.substrate import Substrate
from hirmem.semantic.values import Doc, Origin, doc_id, with_origin
from hirmem.sql import Connection

ONTOLOGY = Ontology([
    Template("person.employer", True, "entity"),
    Template("person.hobby", False, "text"),
])  # fmt: skip


def _say(sub: Substrate, ref: str, text: str, container: str) -> str:
    """Absorb ``text`` as the document read from ``ref``; its id."""
    org = Origin.of_bytes(ref, text.encode(), "text/plain", 1_000)
    doc = Doc(doc_id(ref, 0, org.sha256), ref, text, with_origin({"container": container}, org))
    pipeline = Pipeline(None, splitter=SentenceSplitter(512), extractor=RuleExtractor())
    result = Result(runs=[StageRun("ingest", "test", 1_000, 1_000, (ref,), (doc.id,))])
    sub.absorb(pipeline.process([doc], result))
    return doc.id


def _plan(db: Connection, sql: str, args: tuple[object, ...]) -> str:
    return " | ".join(str(r[3]) for r in db.execute("EXPLAIN QUERY PLAN " + sql, args))


def _postings(db: Connection, table: str) -> list[tuple[int, int]]:
    """(name, row id) of every posting of the mention lists ``table``."""
    from hirmem.semantic.postings import Postings

    keys, ids, _ = Postings(db, table, flagged=table.startswith("passage")).everything()
    return list(zip(keys.tolist(), ids.tolist(), strict=True))


# ---- entities ---------------------------------------------------------------------------------


def test_an_entity_file_of_the_earlier_text_layout_is_converted_when_opened(
    tmp_path: Path,
) -> None:
    """Aliases and kinds written as text rows (the earlier layout) read back the same
    after the file is converted: names, kinds, resolution, the fence, and withdrawal."""
    db = tmp_path / "e.db"
    bob, ann = entity_id("robert smith"), entity_id("ann lee")
    con = sqlite3.connect(db)
    con.executescript(f"""
        CREATE TABLE entities (id TEXT PRIMARY KEY, name TEXT NOT NULL) WITHOUT ROWID;
        CREATE TABLE entity_aliases (alias TEXT NOT NULL, entity TEXT NOT NULL,
            container TEXT NOT NULL, source TEXT NOT NULL,
            PRIMARY KEY (alias, entity, container, source));
        CREATE TABLE entity_kinds (entity TEXT NOT NULL, kind TEXT NOT NULL,
            container TEXT NOT NULL, source TEXT NOT NULL,
            PRIMARY KEY (entity, kind, container, source)) WITHOUT ROWID;
        INSERT INTO entities VALUES ('{bob}', 'robert smith'), ('{ann}', 'ann lee');
        INSERT INTO entity_aliases VALUES ('robert smith', '{bob}', 'team', 'd1'),
            ('bob', '{bob}', 'team', 'd1'), ('ann lee', '{ann}', 'club', 'd2');
        INSERT INTO entity_kinds VALUES ('{bob}', 'person', 'team', 'd1'),
            ('{ann}', 'person', 'club', 'd2');
    """)
    con.close()
    index = EntityIndex(str(db))
    assert index.names("Bob", {"team"}) == {"bob", "robert smith"}
    assert index.resolve("Robert Smith", {"team"}) == [bob] == index.resolve("bob", {"team"})
    assert index.kinds("Bob", {"team"}) == {"person"} == index.kinds("Ann Lee", {"club"})
    assert index.names("Bob", {"club"}) == set() and index.kinds("Ann Lee", {"team"}) == set()
    index.withdraw("d1")
    assert index.names("Bob", {"team"}) == set() and index.resolve("Ann Lee", {"club"}) == [ann]
    index.close()
    con = sqlite3.connect(db)
    tables = {n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    types = {r[1]: r[2] for r in con.execute("PRAGMA table_info(entity_aliases)")}
    con.close()
    assert "entity_kinds" not in tables and types["alias"] == "INTEGER"


def test_a_name_said_by_a_document_costs_one_narrow_row_not_an_alias_and_a_kind(
    tmp_path: Path,
) -> None:
    """The entity's own name is implied by its said row: no alias row repeats it, and a
    kind stated with it is the same row; the documents that said it are counted in it (each
    listed once, in its own list), not a row each."""
    index = EntityIndex(str(tmp_path / "e.db"))
    for i in range(50):
        index.note("Heidi Jones", "bench", f"doc{i}", "person")
    index.note("Robert (Bob) Smith", "bench", "docb", "person")
    assert index.kinds("Heidi Jones", {"bench"}) == {"person"}
    assert index.names("Bob", {"bench"}) == {"bob", "robert smith", "robert (bob) smith"}
    db = index._db
    said = db.execute("SELECT count(*), sum(n) FROM entity_said").fetchone()
    aliases = db.execute("SELECT count(*) FROM entity_aliases").fetchone()[0]
    index.close()
    assert tuple(said) == (2, 51) and aliases == 2  # "bob" and the written form, no more


def test_entity_lookups_are_served_by_indexes(tmp_path: Path) -> None:
    index = EntityIndex(str(tmp_path / "e.db"))
    index.note("Heidi Jones", "bench", "doc1", "person")
    db = index._db
    for sql, args, used in (
        ("SELECT 1 FROM entity_said WHERE entity = ? AND container IN (?, ?)", (1, 2, 3),
         "PRIMARY KEY"),
        ("SELECT entity FROM entity_aliases WHERE alias = ? AND container IN (?)", (1, 2),
         "PRIMARY KEY"),
        ("SELECT alias FROM entity_aliases WHERE entity IN (?, ?) AND container IN (?)",
         (1, 2, 3), "entity_aliases_entity"),
        # a withdrawal reads what the source said, then counts each row down by its key
        ("SELECT rows FROM entity_said_by WHERE source = ? ORDER BY part", (5,),
         "PRIMARY KEY (source=?)"),
        ("UPDATE entity_said SET n = n - ? WHERE entity = ? AND container = ? AND kind = ?",
         (1, 1, 2, 4), "PRIMARY KEY"),
        ("DELETE FROM entity_said WHERE entity = ? AND container = ? AND kind = ? AND n <= 0",
         (1, 2, 4), "PRIMARY KEY"),
        ("DELETE FROM entity_aliases WHERE source = ?", (5,), "entity_aliases_source"),
    ):
        plan = _plan(db, sql, args)
        assert "SCAN" not in plan and used in plan, (sql, plan)
    index.close()


# ---- claims -----------------------------------------------------------------------------------

TEXTS = {
    "d1": "Minutes. Heidi Jones works at Stark Industries. Nothing else.",
    "d2": "Heidi Jones likes pottery.",
}


def _claims(path: Path) -> ClaimStore:
    store = ClaimStore(ONTOLOGY, str(path), clock=lambda: 1_000)
    store.texts = TEXTS.get
    return store


def test_a_claim_quote_is_kept_as_a_span_of_the_text_it_cites(tmp_path: Path) -> None:
    store = _claims(tmp_path / "c.db")
    quote = "Heidi Jones works at Stark Industries."
    row = store.write(Statement("Heidi Jones", "person.employer", "Stark Industries", quote,
                                "d1", "team"))  # fmt: skip
    assert row is not None
    # the same statement again is one attestation; a quote in no stored text is kept as text
    store.write(Statement("Heidi Jones", "person.employer", "Stark Industries", quote, "d1",
                          "team"))  # fmt: skip
    store.write(Statement("Heidi Jones", "person.hobby", "pottery",
                          "heidi jones: pottery", "d9", "team"))  # fmt: skip
    held = store._db.execute("SELECT quote, start, end_ FROM claim_attestations "
                             "ORDER BY quote").fetchall()  # fmt: skip
    # (a span's quote was NULL in a rowid table; the keyed table holds '')
    assert held == [("", 9, 9 + len(quote)), ("heidi jones: pottery", 0, 0)]
    [now] = store.current("Heidi Jones", "person.employer", {"team"})
    assert [a.quote for a in now.attestations] == [quote] and now.id == row.id
    assert store.sources(now) == [("team", "d1", quote)]
    assert {a.quote for c in store.about("Heidi Jones", {"team"}) for a in c.attestations} == {
        quote, "heidi jones: pottery"}
    # a statement held with its quote as text (its source's text unread then) is not
    # written again as a span once the text can be read
    store.texts = {**TEXTS, "d9": "Notes: heidi jones: pottery"}.get
    store.write(Statement("Heidi Jones", "person.hobby", "pottery",
                          "heidi jones: pottery", "d9", "team"))  # fmt: skip
    assert store._db.execute("SELECT count(*) FROM claim_attestations").fetchone()[0] == 2
    # a text that no longer holds what a span cites is an error, never a wrong quote
    store.texts = {"d1": "short"}.get
    with pytest.raises(Exception, match="can no longer be read"):
        store.current("Heidi Jones", "person.employer", {"team"})
    store.close()


def test_a_claim_file_of_the_earlier_text_layout_is_converted_when_opened(
    tmp_path: Path,
) -> None:
    db = tmp_path / "c.db"
    quote = "Heidi Jones works at Stark Industries."
    con = sqlite3.connect(db)
    con.executescript(f"""
        CREATE TABLE claims (id TEXT PRIMARY KEY, subject TEXT NOT NULL,
            predicate TEXT NOT NULL, value TEXT NOT NULL);
        CREATE TABLE claim_attestations (claim TEXT NOT NULL, container TEXT NOT NULL,
            source TEXT NOT NULL, quote TEXT NOT NULL, valid_from INTEGER NOT NULL,
            invalid_at INTEGER NOT NULL, said_at INTEGER NOT NULL,
            recorded_at INTEGER NOT NULL, PRIMARY KEY (claim, container, source, quote));
        INSERT INTO claims VALUES ('x1', 'heidi jones', 'person.employer', 'stark industries');
        INSERT INTO claim_attestations VALUES
            ('x1', 'team', 'd1', '{quote}', 5, 0, 5, 7),
            ('x1', 'club', 'd7', 'Heidi Jones (club) works at Stark Industries.', 5, 0, 5, 8);
    """)
    con.close()
    store = _claims(db)
    [row] = store.about("Heidi Jones", {"team", "club"}, at=10)
    assert (row.subject, row.predicate, row.value) == ("heidi jones", "person.employer",
                                                       "stark industries")  # fmt: skip
    assert sorted((a.container, a.source, a.quote, a.valid_from) for a in row.attestations) == [
        ("club", "d7", "Heidi Jones (club) works at Stark Industries.", 5),
        ("team", "d1", quote, 5)]  # fmt: skip
    assert store.about("Heidi Jones", {"team"}, at=10)[0].attestations[0].source == "d1"
    assert store.count("person.employer", {"club"}, at=10) == 1
    kept = store._db.execute("SELECT quote FROM claim_attestations ORDER BY said_at, quote"
                             ).fetchall()  # fmt: skip
    store.close()
    # converted while it opens, before it is told where its documents are: quotes as text
    # (the keyed table has no rowid: ordered here by what the rows hold)
    assert kept == [("Heidi Jones (club) works at Stark Industries.",), (quote,)]


def test_claim_lookups_are_served_by_indexes(tmp_path: Path) -> None:
    store = _claims(tmp_path / "c.db")
    db = store._db
    for sql, args, used in (
        ("SELECT a.quote FROM claims c CROSS JOIN claim_attestations a ON a.claim = c.id "
         "WHERE a.container IN (?, ?) AND c.subject IN (?, ?) AND c.predicate = ?",
         (1, 2, 3, 4, 5), "sqlite_autoindex_claims_1"),
        # a claim naming the subject as its value: by predicate and value, the predicates
        # held skipped through (no index by value alone holds every claim again)
        ("SELECT a.quote FROM claims c CROSS JOIN claim_attestations a ON a.claim = c.id "
         "WHERE a.container IN (?) AND (c.subject IN (?) OR (c.predicate IN (?, ?) AND "
         "c.value IN (?)))", (1, 2, 3, 4, 5), "claims_pv (predicate=? AND value=?)"),
        ("SELECT c.id FROM claims c WHERE c.predicate = ?", (1,), "claims_pv"),
        # a withdrawal reads what the source stated, then deletes by the attestations' key
        ("SELECT rows FROM claim_attestations_by WHERE source = ? ORDER BY part",
         (1,), "PRIMARY KEY (source=?)"),
        ("DELETE FROM claim_attestations WHERE claim = ? AND container = ? AND source = ?",
         (1, 2, 3), "PRIMARY KEY (claim=? AND container=? AND source=?)"),
    ):
        plan = _plan(db, sql, args)
        assert "SCAN" not in plan and used in plan, (sql, plan)
    # the predicates held, one seek each (the steps of its own recursion are all it scans)
    plan = _plan(db, "WITH RECURSIVE p(x) AS (SELECT (SELECT min(predicate) FROM claims) "
                 "UNION ALL SELECT (SELECT min(predicate) FROM claims WHERE predicate > p.x) "
                 "FROM p WHERE p.x IS NOT NULL) SELECT x FROM p WHERE x IS NOT NULL", ())
    assert "SCAN claims" not in plan and "claims_pv (predicate>?)" in plan, plan
    # the attestations' own key serves the join (no second index holds the claim again)
    assert "PRIMARY KEY (claim=? AND container=?)" in _plan(
        db, "SELECT a.quote FROM claims c CROSS JOIN claim_attestations a ON a.claim = c.id "
        "WHERE c.subject = ? AND a.container IN (?)", (1, 2))  # fmt: skip
    assert "attestations_claim" not in {r[0] for r in db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index'")}  # fmt: skip
    store.close()


# the claims' layout before attestations were keyed: a rowid table, a span's quote NULL
_ROWID_CLAIM_LAYOUT = """
CREATE TABLE claim_words (id INTEGER PRIMARY KEY, word TEXT UNIQUE NOT NULL);
CREATE TABLE claims (
    id INTEGER PRIMARY KEY, subject INTEGER NOT NULL, predicate INTEGER NOT NULL,
    value INTEGER NOT NULL, UNIQUE (subject, predicate, value));
CREATE INDEX claims_pv ON claims(predicate, value);
CREATE INDEX claims_value ON claims(value);
CREATE TABLE claim_attestations (
    claim INTEGER NOT NULL, container INTEGER NOT NULL, source INTEGER NOT NULL, quote TEXT,
    start INTEGER NOT NULL, end_ INTEGER NOT NULL, valid_from INTEGER NOT NULL,
    invalid_at INTEGER NOT NULL, said_at INTEGER NOT NULL, recorded_at INTEGER NOT NULL,
    hedged INTEGER NOT NULL);
CREATE INDEX attestations_claim ON claim_attestations(claim, container);
CREATE INDEX attestations_source ON claim_attestations(source);
CREATE TABLE claim_sources (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
"""


def test_a_claim_file_of_the_rowid_layout_is_converted_when_opened(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    quote = "Heidi Jones works at Stark Industries."
    con = sqlite3.connect(db)
    con.executescript(_ROWID_CLAIM_LAYOUT)
    con.executemany("INSERT INTO claim_words VALUES (?, ?)", list(enumerate(
        ("heidi jones", "person.employer", "stark industries", "team", "person.hobby",
         "pottery"), 1)))  # fmt: skip
    con.executemany("INSERT INTO claims VALUES (?, ?, ?, ?)", [(1, 1, 2, 3), (2, 1, 5, 6)])
    d1 = int("00000000000000d1", 16)
    con.executemany("INSERT INTO claim_attestations VALUES (?, 4, ?, ?, ?, ?, 5, 0, ?, 7, 0)", [
        (1, d1, None, 9, 9 + len(quote), 5),  # a span of d1's text
        (2, d1, "heidi jones: pottery", 0, 0, 6),  # a quote kept as text
    ])  # fmt: skip
    con.commit()
    con.close()
    store = ClaimStore(ONTOLOGY, str(db), clock=lambda: 1_000)
    store.texts = {"00000000000000d1": TEXTS["d1"]}.get
    [row] = store.current("Heidi Jones", "person.employer", {"team"}, at=10)
    assert [(a.source, a.quote, a.valid_from) for a in row.attestations] == [
        ("00000000000000d1", quote, 5)]  # fmt: skip
    assert {a.quote for c in store.about("Heidi Jones", {"team"}, at=10)
            for a in c.attestations} == {quote, "heidi jones: pottery"}  # fmt: skip
    # the same statements again are the key again: nothing added
    for stmt in (Statement("Heidi Jones", "person.employer", "Stark Industries", quote,
                           "00000000000000d1", "team", said_at=5),
                 Statement("Heidi Jones", "person.hobby", "pottery", "heidi jones: pottery",
                           "00000000000000d1", "team", said_at=6)):  # fmt: skip
        store.write(stmt)
    assert store._db.execute("SELECT count(*) FROM claim_attestations").fetchone()[0] == 2
    layout = store._db.execute("SELECT sql FROM sqlite_master WHERE name = "
                               "'claim_attestations'").fetchone()[0]  # fmt: skip
    indexes = {r[0] for r in store._db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = "
        "'claim_attestations'")}  # fmt: skip
    assert store.withdraw("00000000000000d1") == 2
    assert store.about("Heidi Jones", {"team"}, at=10) == []
    store.close()
    assert "WITHOUT ROWID" in layout.upper()
    assert not {"attestations_claim", "attestations_source"} & indexes


# ---- tier 1 -----------------------------------------------------------------------------------

_SECOND_TIER1_LAYOUT = """
CREATE TABLE tier1_memories (
    id INTEGER PRIMARY KEY, hash INTEGER UNIQUE NOT NULL, key TEXT, container INTEGER NOT NULL,
    source INTEGER NOT NULL, subject TEXT NOT NULL, text TEXT NOT NULL,
    hedged INTEGER NOT NULL, valid_from INTEGER NOT NULL, invalid_at INTEGER NOT NULL,
    said_at INTEGER NOT NULL, vec BLOB NOT NULL);
CREATE INDEX tier1_memories_source ON tier1_memories(source);
CREATE TABLE tier1_names (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL);
CREATE TABLE tier1_mentions (entity INTEGER NOT NULL, memory INTEGER NOT NULL,
    PRIMARY KEY (entity, memory)) WITHOUT ROWID;
CREATE INDEX tier1_mentions_memory ON tier1_mentions(memory);
CREATE TABLE tier1_containers (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL);
CREATE TABLE tier1_sources (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE tier1_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE VIRTUAL TABLE tier1_terms_1 USING fts5(text, subject, content='tier1_memories',
    content_rowid='id', tokenize='porter unicode61');
"""


def test_a_tier1_file_of_the_hash_keyed_layout_is_converted_when_opened(tmp_path: Path) -> None:
    """The layout before this one (a hash column with its own unique index, the subject as
    text, mentions indexed by memory too): its rows keep their ids, so its full-text index
    and mentions still find them; a sentence's key and a distilled key still read back."""
    from hirmem.protocol.identity import fnv1a64
    from hirmem.semantic.memories import MemoryIndex, _hash, _packed

    e = Embedder()
    path = tmp_path / "t1.db"
    db = sqlite3.connect(path)
    db.executescript(_SECOND_TIER1_LAYOUT)
    text, pattern = "Ada Reyes is rowing on weekends now.", "pump 3 runs hot at noon"
    key = f"doc-a#{fnv1a64(text.encode()):016x}"
    db.execute("INSERT INTO tier1_containers VALUES (1, 'team')")
    db.execute("INSERT INTO tier1_names VALUES (1, 'ada reyes')")
    for source in ("doc-a", "p"):
        db.execute("INSERT INTO tier1_sources VALUES (?, ?)", (_hash(source), source))
    db.execute("INSERT INTO tier1_memories VALUES (1, ?, NULL, 1, ?, 'ada reyes', ?, 0, 0, 0, "
               "5, ?)", (_hash(key), _hash("doc-a"), text, _packed(e.embed(text))))
    db.execute("INSERT INTO tier1_memories VALUES (2, ?, 'pattern:1', 1, ?, '', ?, 1, 0, 0, 6, "
               "?)", (_hash("pattern:1"), _hash("p"), pattern, _packed(e.embed(pattern))))
    db.execute("INSERT INTO tier1_mentions VALUES (1, 1)")
    for rid, t, subject in ((1, text, "ada reyes"), (2, pattern, "")):
        db.execute("INSERT INTO tier1_terms_1(rowid, text, subject) VALUES (?, ?, ?)",
                   (rid, t, subject))
    db.execute("INSERT INTO tier1_meta VALUES ('vectors', 'packed'), ('embedder', ?)",
               (f"{type(e).__module__}.{type(e).__name__}/{e.dim}",))
    db.commit()
    db.close()
    idx = MemoryIndex(e, str(path))
    hit = idx.get(key)
    assert hit is not None and hit.text == text and hit.subject == "ada reyes"
    held = idx.get("pattern:1")
    assert held is not None and held.certainty == "hedged" and held.said_at == 6
    assert [h.key for h in idx.search("rowing", 5, {"team"})] == [key]
    assert [h.key for h in idx.search("weekends", 5, {"team"}, names=["Ada Reyes"])] == [key]
    assert idx.remove("doc-a") == 1 and idx.search("rowing", 5, {"team"}) == []
    cols = {r[1] for r in idx._db.execute("PRAGMA table_info(tier1_memories)")}
    indexes = {r[0] for r in idx._db.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    idx.close()
    assert "hash" not in cols and "tier1_mentions_memory" not in indexes


def test_a_sentence_memory_is_a_span_of_its_document_and_leaves_every_index_with_it(
    tmp_path: Path,
) -> None:
    sub = Substrate.open(tmp_path / "s.db", passage_embedder=Embedder())
    text = "Minutes of Monday. Ada Reyes is rowing on weekends now. Bo Nair was away."
    doc = _say(sub, "mem://a", text, "team")
    db = sub.memories._db
    rows = db.execute("SELECT text, start, end_ FROM tier1_memories").fetchall()
    assert rows and all(t is None for t, _, _ in rows)
    assert {text[a:b] for _, a, b in rows} >= {"Ada Reyes is rowing on weekends now."}
    [hit] = sub.memories.search("rowing weekends", 1, {"team"}, names=["ada reyes"])
    assert hit.text == "Ada Reyes is rowing on weekends now." and hit.source == doc
    assert _postings(db, "tier1_mention_lists")
    sub.erase_source(doc, "test")
    assert sub.memories.search("rowing weekends", 5, {"team"}) == []
    assert _postings(db, "tier1_mention_lists") == []
    # the full-text index holds no term of it any more (the 'delete' had the old text)
    assert db.execute("SELECT count(*) FROM tier1_terms_1 WHERE tier1_terms_1 MATCH 'rowing'"
                      ).fetchone()[0] == 0  # fmt: skip
    sub.close()


def test_tier1_lookups_are_served_by_indexes() -> None:
    from hirmem.semantic.memories import MemoryIndex

    idx = MemoryIndex(Embedder())
    db = idx._db
    for sql, args, used in (
        ("SELECT id FROM tier1_memories WHERE key = ?", ("k",), "tier1_memories_key"),
        ("SELECT key, ids FROM tier1_mention_lists WHERE key IN (?, ?) ORDER BY key, last",
         (1, 2), "PRIMARY KEY"),
    ):
        plan = _plan(db, sql, args)
        assert "SCAN" not in plan and used in plan, (sql, plan)
    idx.close()


def test_tier1_source_lists_match_the_rows_over_random_writes(tmp_path: Path) -> None:
    """Each source's listed ids (``tier1_memories_by``) against the oracle of the table's
    own rows by source, after every step of random writes: new sentences, a key written
    again in its source or moved to another, keys and sources removed; and a file of the
    layout before (an index by source, no lists) has its lists made and the index dropped."""
    import random

    from hirmem.semantic.memories import MemoryIndex, Note

    rng = random.Random(7)
    path = tmp_path / "t1.db"
    idx = MemoryIndex(Embedder(), str(path))
    sources = [f"src-{i}" for i in range(6)]
    keys = [f"pattern:{i}" for i in range(5)]

    def check() -> None:
        by_table: dict[int, list[int]] = {}
        for mid, src in idx._db.execute("SELECT id, source FROM tier1_memories ORDER BY id"):
            by_table.setdefault(int(src), []).append(int(mid))
        listed = {int(src): sorted(idx._listed(int(src))) for (src,) in idx._db.execute(
            "SELECT DISTINCT source FROM tier1_memories_by")}  # fmt: skip
        assert listed == by_table

    for step in range(300):
        op = rng.random()
        src = rng.choice(sources)
        if op < 0.45:
            text = f"Ada Reyes rowed {rng.randrange(40)} km near Oslo today."
            idx.write(Note(text, rng.choice(["team", "club"]), src))
        elif op < 0.75:
            idx.write(Note(f"pump {rng.randrange(9)} runs hot at noon {step}", "team", src,
                           key=rng.choice(keys)))  # fmt: skip
        elif op < 0.88:
            idx.remove_key(rng.choice(keys))
        else:
            idx.remove(src)
        check()
    assert len(idx) > 10
    got = {k: idx.get(k) for k in keys}
    idx.close()
    db = sqlite3.connect(path)  # the layout of before: an index by source, no lists
    db.execute("DROP TABLE tier1_memories_by")
    db.execute("DROP INDEX tier1_memories_shared")
    db.execute("CREATE INDEX tier1_memories_source ON tier1_memories(source)")
    db.commit()
    db.close()
    idx = MemoryIndex(Embedder(), str(path))
    check()
    assert {k: idx.get(k) for k in keys} == got
    indexes = {r[0] for r in idx._db.execute("SELECT name FROM sqlite_master WHERE type = "
                                             "'index'")}  # fmt: skip
    assert "tier1_memories_source" not in indexes and "tier1_memories_shared" in indexes
    for src in sources:
        idx.remove(src)
    assert len(idx) == 0 and not idx._db.execute("SELECT count(*) FROM tier1_memories_by"
                                                 ).fetchone()[0]  # fmt: skip
    idx.close()


def _fenced_plan(db: Connection, members: str, table: str, alias: str) -> str:
    """The plan of a fenced load: the readable containers' ids, each row found by its id."""
    return _plan(db, f"SELECT {alias}.id FROM ({members}) f CROSS JOIN {table} {alias} "
                     f"WHERE {alias}.id = f.id ORDER BY f.id", ())  # fmt: skip


def test_a_fence_reads_its_containers_rows_through_their_full_text_indexes(
    tmp_path: Path,
) -> None:
    """No index by container: each container's full-text index lists exactly its rows, so a
    fenced load reads those ids and finds each row by its id (no scan of the table), and a
    file of before (with an index by container) has it dropped when opened, its reads the
    same."""
    from hirmem.semantic.memories import MemoryIndex, Note
    from hirmem.semantic.passages import PassageIndex

    e, path = Embedder(), tmp_path / "f.db"
    mem, pas = MemoryIndex(e, str(path)), PassageIndex(e, str(path))
    rooms = [f"room{i}" for i in range(6)]
    for i in range(60):
        room = rooms[i * 7 % 6]
        text = f"Ada Reyes rowed {i} km near Oslo with crew {i % 5} today."
        mem.write(Note(text, room, f"doc-{i}", "Ada Reyes"))
        pas.add(f"doc-{i}", text, room, said_at=1000 + i // 3)
    for alias, idx, table in (("m", mem, "tier1_memories"), ("p", pas, "passages")):
        plan = _fenced_plan(idx._db, idx._members(["room1", "room4"]), table, alias)
        steps = plan.split(" | ")  # the table itself is searched by id, never scanned
        assert f"SEARCH {alias} USING INTEGER PRIMARY KEY (rowid=?)" in steps, plan
        assert not [s for s in steps if s.split(" ")[:2] == ["SCAN", alias]], plan
    asks = ["rowed km", "crew 3", "Oslo today", "how many km did Ada row"]
    readers = [{"room1"}, {"room2", "room5"}, set(rooms), {"nowhere"}]

    def reads() -> list[object]:
        out: list[object] = []
        for readable in readers:
            out.append(sorted(pas.subjects(readable)))
            for q in asks:
                out.append([(h.key, round(h.score, 12)) for h in mem.search(q, 8, readable)])
                out.append([(h.id, round(h.score, 12)) for h in pas.search(q, 8, readable)])
        return out

    now = reads()
    assert sum(bool(r) for r in now) > 20
    mem.close()
    pas.close()
    db = sqlite3.connect(path)  # the layout of before: an index by container in each table
    db.execute("CREATE INDEX tier1_memories_container ON tier1_memories(container)")
    db.execute("CREATE INDEX passages_container ON passages(container)")
    db.commit()
    db.close()
    mem, pas = MemoryIndex(e, str(path)), PassageIndex(e, str(path))
    indexes = {r[0] for r in mem._db.execute("SELECT name FROM sqlite_master WHERE type = "
                                             "'index'")}  # fmt: skip
    assert not {"tier1_memories_container", "passages_container"} & indexes
    assert reads() == now
    mem.close()
    pas.close()


# ---- passages ---------------------------------------------------------------------------------

_EARLIER_PASSAGES = """
CREATE TABLE passages (
    id INTEGER PRIMARY KEY, doc TEXT NOT NULL, container TEXT NOT NULL,
    subject TEXT NOT NULL, text TEXT NOT NULL, said_at INTEGER NOT NULL,
    valid_from INTEGER NOT NULL, valid_until INTEGER NOT NULL,
    has_digit INTEGER NOT NULL, vec BLOB NOT NULL);
CREATE INDEX passages_doc ON passages(doc);
CREATE INDEX passages_container ON passages(container);
CREATE TABLE passage_containers (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL);
CREATE TABLE passage_mentions (
    entity TEXT NOT NULL, passage INTEGER NOT NULL, strong INTEGER NOT NULL,
    PRIMARY KEY (entity, passage)) WITHOUT ROWID;
CREATE TABLE passage_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE VIRTUAL TABLE passage_terms_1 USING fts5(text, subject, content='passages',
    content_rowid='id', tokenize='porter unicode61');
"""


def test_a_passage_file_of_the_earlier_text_layout_is_converted_when_opened(
    tmp_path: Path,
) -> None:
    from hirmem.semantic.passages import PassageIndex, embedder_identity
    from hirmem.semantic.stores.packed import pack

    e = Embedder()
    path = tmp_path / "p.db"
    db = sqlite3.connect(path)
    db.executescript(_EARLIER_PASSAGES)
    db.execute("INSERT INTO passage_containers VALUES (1, 'team')")
    db.execute("INSERT INTO passage_meta VALUES ('embedder', ?)", (embedder_identity(e),))
    said = [(1, "d1", "maya", "Maya: I am learning Japanese with Jonas."),
            (2, "d2", "", "Klaus repairs bicycles in Kreuzberg.")]
    for pid, doc, subject, text in said:
        db.execute("INSERT INTO passages VALUES (?, ?, 'team', ?, ?, 0, 0, 0, 0, ?)",
                   (pid, doc, subject, text, pack(e.embed(text), int8=True)))
        db.execute("INSERT INTO passage_terms_1(rowid, text, subject) VALUES (?, ?, ?)",
                   (pid, text, subject))
    db.executemany("INSERT INTO passage_mentions VALUES (?, ?, ?)",
                   [("maya", 1, 1), ("jonas", 1, 1), ("klaus", 2, 0), ("kreuzberg", 2, 1)])
    db.commit()
    db.close()
    idx = PassageIndex(e, str(path))
    [hit] = idx.search("Japanese", 1, {"team"})
    assert (hit.doc, hit.subject, hit.text, hit.container) == ("d1", "maya", said[0][3], "team")
    assert [h.doc for h in idx.search("learning", 5, {"team"}, subject="Jonas")] == ["d1"]
    assert idx.subject_named("What is Maya learning?", {"team"}) == "maya"
    assert idx.search("bicycles", 5, {"elsewhere"}) == []
    assert idx.remove("d2") == 1
    assert [h.doc for h in idx.search("bicycles", 5, {"team"})] == ["d1"]  # the vector leg
    assert len(_postings(idx._db, "passage_mention_lists")) == 2
    idx.close()


def test_a_passage_is_a_span_of_its_document_and_erasure_unindexes_it(tmp_path: Path) -> None:
    sub = Substrate.open(tmp_path / "s.db", passage_embedder=Embedder())
    long = " ".join(f"Sentence {i} tells of Ada Reyes rowing near Oslo." for i in range(60))
    short = "Bo Nair repairs bicycles in Kreuzberg."
    a, b = _say(sub, "mem://long", long, "team"), _say(sub, "mem://short", short, "team")
    db = sub.passages._db
    # a document id is kept as the small code of its own 64-bit number, spelled again from it
    rows = [(f"{d & 0xFFFFFFFFFFFFFFFF:016x}", t, s, e) for d, t, s, e in db.execute(
        "SELECT k.key, text, start, end_ FROM passages p JOIN source_codes k ON k.id = p.doc "
        "ORDER BY p.id")]  # fmt: skip
    assert {c for (c,) in db.execute("SELECT doc FROM passages")} <= {1, 2}
    assert not db.execute("SELECT count(*) FROM passage_docs").fetchone()[0]
    assert len(rows) > 2 and all(t is None for _, t, _, _ in rows)
    assert next(long[s:e] for d, _, s, e in rows if d == a).startswith("Sentence 0 ")
    assert [(s, e) for d, _, s, e in rows if d == b] == [(0, len(short))]
    [hit] = sub.passages.search("bicycles", 1, {"team"})
    assert hit.text == short and hit.doc == b
    sub.erase_source(b, "test")
    assert all(h.doc != b for h in sub.passages.search("bicycles Kreuzberg", 5, {"team"}))
    assert db.execute("SELECT count(*) FROM passage_terms_1 WHERE passage_terms_1 MATCH "
                      "'bicycles'").fetchone()[0] == 0  # fmt: skip
    kept = {rid for _, rid in _postings(db, "passage_mention_lists")}
    assert kept and kept <= {int(r[0]) for r in db.execute("SELECT id FROM passages")}
    sub.close()


def test_passage_lookups_are_served_by_indexes() -> None:
    from hirmem.semantic.passages import PassageIndex

    idx = PassageIndex(Embedder())
    db = idx._db
    idx.add("d", "Klaus repairs bicycles in Kreuzberg.", "team")
    beside = idx._lex.members("passage_terms_1")  # the passage beside one in its container
    for sql, args, used in (
        (f"SELECT max(b.id) FROM ({beside}) b WHERE b.id < ?", (9,), "INTEGER PRIMARY KEY"),
        ("SELECT id FROM passages WHERE doc = ?", ("d",), "passages_doc"),
        ("SELECT key, ids FROM passage_mention_lists WHERE key IN (?, ?) ORDER BY key, last",
         (1, 2), "PRIMARY KEY"),
        ("SELECT last, ids FROM passage_mention_lists WHERE key = ? AND last >= ? "
         "ORDER BY last LIMIT 1", (1, 2), "PRIMARY KEY"),
    ):
        plan = _plan(db, sql, args)
        assert "SCAN" not in plan and used in plan, (sql, plan)
    idx.close()


# ---- bytes per document -----------------------------------------------------------------------

_PEOPLE = [f"{a} {b}" for a in ("Ada", "Bo", "Cy", "Dee", "Eli", "Fay", "Gus", "Hal")
           for b in ("Reyes", "Nair", "Lind", "Moreau", "Tanaka")]
_CITIES = ("Oslo", "Tunis", "Lima", "Quito", "Hanoi", "Perth")
_ORGS = ("Acme Corp", "Stark Industries", "Vandelay Industries", "Initech")
TIERS = ("passage", "tier1", "claim", "entit", "source_cod")  # with the codes of their sources


def tier_bytes_per_document(path: Path, n: int, tiers: tuple[str, ...] = TIERS) -> float:
    """The pages of the four text tiers' tables and indexes (SQLite's ``dbstat``; or of
    the tables named by the prefixes ``tiers``), per document, after ``n`` one-line
    documents about people, places and employers."""
    import random

    rng = random.Random(16)
    sub = Substrate.open(path, passage_embedder=Embedder())
    docs = []
    for _ in range(n):
        a, b = rng.sample(_PEOPLE, 2)
        docs.append(rng.choice([f"{a} works at {rng.choice(_ORGS)}.",
                                f"{a} lives in {rng.choice(_CITIES)}. {b} knows {a}.",
                                f"{a.split()[0]}: I went to {rng.choice(_CITIES)} with {b}."]))
    pipeline = Pipeline(None, splitter=SentenceSplitter(512), extractor=RuleExtractor())
    batch = []
    for i, text in enumerate(docs):
        org = Origin.of_bytes(f"t://{i}", text.encode(), "text/plain", 1_000)
        batch.append(Doc(doc_id(f"t://{i}", 0, org.sha256), f"t://{i}", text,
                         with_origin({"container": "bench"}, org)))  # fmt: skip
    result = Result(runs=[StageRun("ingest", "t", 1_000, 1_000, (d.source,), (d.id,))
                          for d in batch])  # fmt: skip
    sub.absorb(pipeline.process(batch, result))
    sub.close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    owner = dict(db.execute("SELECT name, tbl_name FROM sqlite_master").fetchall())
    total = sum(int(size) for name, size in db.execute(
        "SELECT name, sum(pgsize) FROM dbstat GROUP BY name")
        if str(owner.get(name, name)).startswith(tiers))  # fmt: skip
    db.close()
    return total / n


def test_the_text_tiers_cost_a_few_hundred_bytes_a_short_document(tmp_path: Path) -> None:
    """Measured here at about 602 bytes a document (1,000 one-line documents: passages,
    memories, claims, entities with their indexes and the codes of their sources, a page or
    more for each of some forty small tables included); 643 before the entities' said rows
    were counted (not a row per source), claim attestations' recorded instants became
    offsets from the store's epoch and claims lost their index by value alone; 696 before
    the mentions of passages and of tier 1 were posting lists rather than a row each, 717
    before tier 1 and the passages found a container's rows through its full-text index and
    tier 1 listed a source's rows (no index by container, none by source), 721 before the
    passages' and tier 1's int8 vectors were packed by palette (``C``), 754 before the rows
    held a source's small code for its 64-bit key and no index by source repeated the
    attestations' and the said rows' keys, 770 before claim attestations were keyed (no
    rowid, no index by claim beside the table), 807 before a one-sentence memory shared its
    passage's vector and mentions, and the layouts before that held the text once per tier
    and cost about 1,670."""
    per_doc = tier_bytes_per_document(tmp_path / "b.db", 1_000)
    assert per_doc < 620, f"{per_doc:.0f} bytes a document"


# ---- dictionaries -------------------------------------------------------------------------------


def test_one_dictionary_class_serves_every_tier_and_two_writers_share_its_ids(
    tmp_path: Path,
) -> None:
    """``Words`` takes its column's name (tier 1 and the passages' containers say ``name``),
    and its ids come from the database: two connections to one file (two writers of one
    store) read one id per word, and a word the other added first is found, not refused."""
    from hirmem.semantic.dictionary import Words

    path = tmp_path / "w.db"
    one, two = sqlite3.connect(path, isolation_level=None), sqlite3.connect(
        path, isolation_level=None)  # fmt: skip
    a, b = Words(one, "tier1_names", "name"), Words(two, "tier1_names", "name")
    assert a.id("ada reyes") == b.id("ada reyes") == 1
    assert b.id("bo nair") == 2 and a.id("bo nair", create=False) == 2
    assert a.ids(["bo nair", "ada reyes", "nobody"]) == [1, 2] and a.word(2) == "bo nair"
    assert [r[1] for r in one.execute("PRAGMA table_info(tier1_names)")] == ["id", "name"]
    two.execute("BEGIN")
    two.execute("INSERT INTO tier1_names(name) VALUES ('cy lind')")
    two.execute("COMMIT")
    assert a.id("cy lind") == 3  # added by the other writer: found, never a second row
    with pytest.raises(ValueError, match="plain SQL name"):
        Words(one, "tier1_names", "name; DROP TABLE x")
    one.close()
    two.close()


def test_a_memory_that_is_its_passages_span_shares_the_passages_vector(tmp_path: Path) -> None:
    """A one-sentence text is one passage and one memory over the same span: the memory
    keeps no vector of its own (an empty blob) and its vector leg ranks it by the
    passage's, exactly as by its own; a sentence of a longer text keeps its own. A memory
    whose passage is gone is embedded again when read, never dropped from the leg."""
    from hirmem.semantic.memories import SHARED, _packed

    e = Embedder()
    sub = Substrate.open(tmp_path / "s.db", passage_embedder=e)
    one = "Ada Reyes repairs old bicycles in Kreuzberg."
    two = "Bo Nair sails on the fjord every weekend. Cy Lind bakes sourdough bread daily."
    a, b = _say(sub, "mem://one", one, "team"), _say(sub, "mem://two", two, "team")
    db = sub.memories._db
    vecs = [bytes(v) for (v,) in db.execute("SELECT vec FROM tier1_memories ORDER BY id")]
    assert len(vecs) == 3 and [v == SHARED for v in vecs] == [True, False, False]
    [(pvec,)] = db.execute("SELECT p.vec FROM passages p WHERE p.end_ = ?", (len(one),))
    assert bytes(pvec) == _packed(e.embed(one))  # the same vector it would have held
    ids, _, _, mat = sub.memories._fenced({"team"})
    row = int(np.flatnonzero(ids == sub.memories._find(f"{a}#{_fnv(one)}"))[0])
    q = e.embed(one)
    assert abs(float(mat.dot(q)[row]) - float(Rows([_packed(q)], e.dim).dot(q)[0])) < 1e-9
    # the vector leg alone (a question with no word of the text) still reaches it
    hits = sub.memories.search("fixing cycles", 3, {"team"}, qvec=np.asarray(q, np.float32))
    assert hits[0].text == one and hits[0].source == a
    # its passage rewritten apart from it: read again from its text, not lost
    db.execute("DELETE FROM passages WHERE doc = (SELECT source FROM tier1_memories WHERE "
               "length(vec) = 0)")  # fmt: skip
    sub.memories._cache.clear()
    hits = sub.memories.search("fixing cycles", 3, {"team"}, qvec=np.asarray(q, np.float32))
    assert hits[0].text == one
    assert b  # the two-sentence text's memories kept their own vectors (counted above)
    sub.close()


def _fnv(text: str) -> str:
    from hirmem.protocol.identity import fnv1a64

    return f"{fnv1a64(text.encode()):016x}"


def test_shared_vectors_and_mentions_rank_every_tier1_search_as_copies_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Differential: one store whose one-sentence memories share their passage's vector and
    mentions, one that keeps copies (sharing switched off); the same searches, flat and
    scoped to each name (and pairs of names), at two times, give the same memories in the
    same order with the same scores. The shared store holds fewer mention rows."""
    import random

    from hirmem.semantic.memories import MENTIONS_SHARED, MemoryIndex

    rng = random.Random(5)
    people = [*_PEOPLE, "Tom O'Neil", "Jean-Luc Picard"]
    texts = []
    for _ in range(120):
        a, b = rng.sample(people, 2)
        texts.append(rng.choice([
            f"{a} works at {rng.choice(_ORGS)}.", f"{a} lives in {rng.choice(_CITIES)}.",
            f"{a} knows {b} from {rng.choice(_CITIES)}. {b} sails often.",
            f"{a.split()[0]}: I went to {rng.choice(_CITIES)} with {b}.",
            f"Maybe {a} moved to {rng.choice(_CITIES)} (or near it) with {b}."]))  # fmt: skip
    where = [rng.choice(["team", "club"]) if i % 3 else "team" for i in range(len(texts))]
    stores = []
    for shared in (True, False):
        if not shared:
            monkeypatch.setattr(MemoryIndex, "_passage_of", lambda self, *a: None)
        sub = Substrate.open(tmp_path / f"{shared}.db", passage_embedder=Embedder())
        for i, text in enumerate(texts):
            _say(sub, f"t://{i}", text, where[i])
        stores.append(sub)
    on, off = stores
    flags = [int(f) for (f,) in on.memories._db.execute("SELECT hedged FROM tier1_memories")]
    assert sum(f & MENTIONS_SHARED != 0 for f in flags) > 40
    assert len(_postings(on.memories._db, "tier1_mention_lists")) < len(
        _postings(off.memories._db, "tier1_mention_lists"))  # fmt: skip
    names = sorted({n for p in people for n in (p.lower(), p.split()[0].lower())})
    asks = ["Where does she live?", "who works at Initech", "sails with friends", "went to Oslo"]
    checked = 0
    for readable in ({"team"}, {"team", "club"}, {"club"}):
        for q in asks:
            for scope in [(), *([n] for n in names), *(rng.sample(names, 2) for _ in range(10))]:
                for at in (None, 2_000):
                    got = [(h.key, h.text, round(h.score, 12)) for h in on.memories.search(
                        q, 8, readable, names=scope, at=at)]  # fmt: skip
                    want = [(h.key, h.text, round(h.score, 12)) for h in off.memories.search(
                        q, 8, readable, names=scope, at=at)]  # fmt: skip
                    assert got == want, (readable, q, scope)
                    checked += bool(got)
    assert checked > 200
    for sub in stores:
        sub.close()


def test_a_scoped_read_of_shared_mentions_is_served_by_indexes(tmp_path: Path) -> None:
    sub = Substrate.open(tmp_path / "s.db", passage_embedder=Embedder())
    _say(sub, "t://1", "Ada Reyes lives in Oslo.", "team")
    from hirmem.semantic.memories import SHARED_NAMING

    plan = _plan(sub.memories._db, SHARED_NAMING.format(
        "p.id IN (SELECT value FROM json_each(?))"), ("[1, 2]",))  # fmt: skip
    # the given passages by their ids, each one's memories by the source index: no table read
    # whole (the one scan is of the JSON array of ids)
    assert "SCAN p" not in plan and "SCAN s" not in plan and "tier1_memories_shared" in plan, plan
    assert sub.memories._naming(["ada reyes"]).tolist() == [1]
    sub.close()


def test_the_members_of_more_partitions_than_one_compound_select_takes_are_read() -> None:
    """SQLite takes at most 500 terms in one compound SELECT: a reader of 1,234 containers
    still reads every one's rows (grouped), in id order."""
    from hirmem.sql.lexical import Fts5, members_of

    db = sqlite3.connect(":memory:")
    lex = Fts5(db, "content", "id")
    names = [f"x{i}" for i in range(1234)]
    for i, name in enumerate(names):  # a partition's rows as FTS5 lists them: by id
        db.execute(f"CREATE TABLE {name}_docsize (id INTEGER PRIMARY KEY, sz BLOB)")
        db.executemany(f"INSERT INTO {name}_docsize VALUES (?, x'00')",
                       [(i,), (i + 5000,)])  # fmt: skip
    got = [r[0] for r in db.execute(f"SELECT f.id FROM ({members_of(lex, names)}) f "
                                    "ORDER BY f.id")]  # fmt: skip
    assert got == sorted([*range(1234), *range(5000, 6234)])
    assert [r[0] for r in db.execute(members_of(lex, []))] == []
