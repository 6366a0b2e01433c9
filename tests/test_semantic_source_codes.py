"""Sources as small dense codes (issue 16 §5): the tiers' rows hold a source's code from the
file's one ``source_codes`` table where they held its 64-bit key.

A store of before (64-bit keys in the columns, no code table) converts when opened and
reads back exactly what it read before, scores included; erasing a source still takes every
row of it; two writers of one file share the codes the database allocates. On SQLite and
on PostgreSQL (the ``semantic_backend`` fixture runs each test on both).
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from hirmem.semantic.claims import Statement
from hirmem.semantic.dictionary import PART_BYTES, SourceRows, pack_ints, source_key, unpack_ints
from hirmem.semantic.memories import MemoryIndex, Note
from hirmem.semantic.retrieve import Embedder
from hirmem.semantic.substrate import Substrate
from hirmem.sql import Connection
from semantic_backends import semantic_backend, semantic_server  # noqa: F401  (fixtures)
from test_semantic_tier_bytes import _say

pytestmark = pytest.mark.usefixtures("semantic_backend")

# every (table, column) that holds a source's code
CODED = [("tier1_memories", "source"), ("passages", "doc"), ("claim_attestations", "source"),
         ("entity_said_by", "source"), ("entity_aliases", "source"), ("docs_compact", "key")]
PEOPLE = ["Ada Reyes", "Bo Nair", "Heidi Jones", "Klaus Berg", "Maya Lind", "Jonas Ek"]
ORGS = ["Acme Corp", "Stark Industries", "Initech"]
CITIES = ["Oslo", "Berlin", "Lisbon"]
HOBBIES = ["pottery", "rowing", "chess"]
QUESTIONS = ["Who works at Acme Corp?", "rowing on weekends", "Where does Bo Nair live?",
             "pottery", "Robert Smith", "Berlin"]  # fmt: skip


def _text(rng: random.Random) -> str:
    """A short document of two or three random statements."""
    said = []
    for _ in range(rng.randrange(2, 4)):
        p = rng.choice(PEOPLE)
        said.append(rng.choice([
            f"{p} works at {rng.choice(ORGS)}.", f"{p} lives in {rng.choice(CITIES)}.",
            f"{p} likes {rng.choice(HOBBIES)} on weekends.",
            f"Robert (Bob) Smith met {p} in {rng.choice(CITIES)}.",
        ]))  # fmt: skip
    return " ".join(said)


def _reads(sub: Substrate, docs: list[str]) -> list[object]:
    """What a reader of either container gets from every tier, scores and ranks included,
    and the documents."""
    out: list[object] = [(sub.docs.get(d), sub.docs.chunks(d)) for d in docs]
    for readable in ({"a"}, {"b"}, {"a", "b"}):
        for q in QUESTIONS:
            out.append([(h.doc, h.text, h.score, h.similarity)
                        for h in sub.passages.search(q, 6, readable)])  # fmt: skip
            out.append([(h.key, h.source, h.text, h.score)
                        for h in sub.memories.search(q, 6, readable)])  # fmt: skip
        for p in [*PEOPLE, "Bob"]:
            out.append(sub.claims.about(p, readable))
            out.append((sub.entities.resolve(p, readable), sorted(sub.entities.names(p, readable)),
                        sub.entities.kinds(p, readable)))  # fmt: skip
    return out


_KEYED_LAYOUT = """CREATE TABLE claim_attestations (
    claim INTEGER NOT NULL, container INTEGER NOT NULL, source INTEGER NOT NULL,
    quote TEXT NOT NULL, start INTEGER NOT NULL, end_ INTEGER NOT NULL,
    valid_from INTEGER NOT NULL, invalid_at INTEGER NOT NULL, said_at INTEGER NOT NULL,
    recorded_at INTEGER NOT NULL, hedged INTEGER NOT NULL,
    PRIMARY KEY (claim, container, source, start, end_, quote)) WITHOUT ROWID"""


_SAID_PER_SOURCE = """CREATE TABLE entity_said (
    entity INTEGER NOT NULL, container INTEGER NOT NULL, source INTEGER NOT NULL,
    kind INTEGER NOT NULL, PRIMARY KEY (entity, container, source, kind)) WITHOUT ROWID"""


def _said_per_source(db: Connection, key_of: Callable[[int], int]) -> None:
    """The entities' said rows as a store of before held them (inside the caller's
    transaction): a row per source (its key ``key_of`` its code), found by an index on
    their source, no lists."""
    rows = [(e, c, key_of(int(src)), k)
            for src, blob in db.execute("SELECT source, rows FROM entity_said_by").fetchall()
            for flat in [unpack_ints(bytes(blob))]
            for e, c, k in (flat[i : i + 3] for i in range(0, len(flat), 3))]  # fmt: skip
    db.execute("DROP TABLE entity_said")
    db.execute("DROP TABLE entity_said_by")
    db.execute(_SAID_PER_SOURCE)
    db.executemany("INSERT INTO entity_said (entity, container, source, kind) VALUES "
                   "(?, ?, ?, ?)", rows)  # fmt: skip
    db.execute("CREATE INDEX entity_said_source ON entity_said(source)")


def _to_keys(db: Connection) -> None:
    """Turn a store of this layout into one of before: every code replaced by the 64-bit
    key the table held (a document's own number; the entities' tables, :func:`source_key`
    of its name), the code tables dropped, each table in its layout of before."""
    keys = {int(c): int(k) for c, k in db.execute("SELECT id, key FROM source_codes")}
    db.execute("BEGIN")
    _said_per_source(db, lambda c: source_key(f"{keys[c] & 0xFFFFFFFFFFFFFFFF:016x}"))
    for table, column in CODED:
        if table == "entity_said_by":  # gone: the said rows of before hold their sources
            continue
        if table.startswith("entity_"):
            db.executemany(f"UPDATE {table} SET {column} = ? WHERE {column} = ?",
                           [(source_key(f"{k & 0xFFFFFFFFFFFFFFFF:016x}"), c)
                            for c, k in keys.items()])  # fmt: skip
            continue
        db.execute(f"UPDATE {table} SET {column} = (SELECT k.key FROM source_codes k "
                   f"WHERE k.id = {table}.{column})")  # fmt: skip
    # a source place's version was its document's id (a place is no row of a source's own:
    # not in CODED, which erasure empties)
    db.execute("UPDATE docs_places SET current = (SELECT k.key FROM source_codes k "
               "WHERE k.id = docs_places.current)")  # fmt: skip
    # the attestations' table held its valid-from and recorded times themselves (not as
    # offsets), and no epoch or mark of how its sources' lists are made
    db.execute("ALTER TABLE claim_attestations RENAME TO claim_attestations_now")
    db.execute(_KEYED_LAYOUT)
    db.execute("INSERT INTO claim_attestations SELECT claim, container, source, quote, start, "
               "end_, said_at + since, invalid_at, said_at, recorded + (SELECT CAST(value AS "
               "BIGINT) FROM claim_meta WHERE key = 'epoch'), hedged FROM "
               "claim_attestations_now")  # fmt: skip
    db.execute("DELETE FROM claim_meta WHERE key IN ('epoch', 'listed')")
    db.execute("DROP TABLE claim_attestations_now")
    db.execute("CREATE INDEX attestations_source ON claim_attestations(source)")
    db.execute("DROP TABLE claim_attestations_by")
    # and tier 1's rows by an index on theirs
    db.execute("DROP TABLE tier1_memories_by")
    db.execute("CREATE INDEX tier1_memories_source ON tier1_memories(source)")
    db.execute("DROP TABLE source_codes")
    db.execute("DROP TABLE source_coded")
    db.execute("COMMIT")


def _rows_of(db: Connection, doc: str) -> int:
    """The rows of every coded table that hold ``doc``'s code."""
    key = int(doc, 16) - (1 << 64) if int(doc, 16) >= 1 << 63 else int(doc, 16)
    return sum(int(db.execute(f"SELECT count(*) FROM {t} JOIN source_codes k ON k.id = {t}.{c} "
                              "WHERE k.key = ?", (key,)).fetchone()[0])
               for t, c in CODED)  # fmt: skip


def test_a_store_of_64_bit_keys_converts_on_open_and_reads_as_before(tmp_path: Path) -> None:
    rng = random.Random(1616)
    path = tmp_path / "s.db"
    sub = Substrate.open(path, clock=lambda: 1_700_000_000_000, passage_embedder=Embedder())
    docs = [_say(sub, f"mem://d{i}", _text(rng), rng.choice("ab")) for i in range(24)]
    sub.memories.write(Note("Ada Reyes rows on weekends.", "a", "device/pump-7", "Ada Reyes"))
    # a statement with a beginning of its own (its offset from when it was said not 0)
    assert sub.claims.write(Statement(
        "Maya Lind", "person.employer", "Initech", "Maya Lind works at Initech.", "device/pump-7",
        "a", said_at=1_650_000_000_000, valid_from=1_600_000_000_000)) is not None
    before = _reads(sub, docs)
    db = sub.passages._db
    held = {t: int(db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t, _ in CODED}
    assert all(held.values()), held
    codes = int(db.execute("SELECT count(*) FROM source_codes").fetchone()[0])
    assert codes == len(docs) + 1  # one code a source, whichever tiers hold it
    for t, c in CODED:  # a code, not a 64-bit key
        assert int(db.execute(f"SELECT min({c}) FROM {t}").fetchone()[0]) >= 1
        assert int(db.execute(f"SELECT max({c}) FROM {t}").fetchone()[0]) <= codes
    _to_keys(db)
    assert abs(int(db.execute("SELECT max(abs(doc)) FROM passages").fetchone()[0])) > 1 << 40
    sub.close()
    sub = Substrate.open(path, clock=lambda: 1_700_000_000_000, passage_embedder=Embedder())
    assert _reads(sub, docs) == before
    db = sub.passages._db
    assert {t: int(db.execute(f"SELECT count(*) FROM {t}").fetchone()[0])
            for t, _ in CODED} == held  # fmt: skip
    # the entities' keys of before (a hash of the name) found as the documents' numbers:
    # one code a source again, shared with the other tiers
    assert int(db.execute("SELECT count(*) FROM source_codes").fetchone()[0]) == codes
    assert int(db.execute("SELECT max(doc) FROM passages").fetchone()[0]) <= codes
    # erasure still takes every row of the source, in every tier
    for doc in rng.sample(docs, 6):
        assert _rows_of(db, doc) > 0
        sub.erase_source(doc, "test")
        assert _rows_of(db, doc) == 0
        assert all(h.doc != doc for q in QUESTIONS
                   for h in sub.passages.search(q, 20, {"a", "b"}))  # fmt: skip
    after = _reads(sub, docs)
    sub.close()
    sub = Substrate.open(path, clock=lambda: 1_700_000_000_000, passage_embedder=Embedder())
    assert _reads(sub, docs) == after  # opened again: converted once, not twice
    sub.close()


def test_two_writers_of_one_file_share_the_codes(tmp_path: Path) -> None:
    """Two memory stores on one file write and remove memories of overlapping sources in a
    random interleaving; a store opened afresh reads every memory left with its own source
    (an oracle of what was written), and the code table gives each source one code."""
    rng = random.Random(16)
    path = tmp_path / "m.db"
    e = Embedder()
    writers = [MemoryIndex(e, path), MemoryIndex(e, path)]
    sources = [f"{rng.getrandbits(64):016x}" for _ in range(6)] + ["chat/1", "chat/2"]
    want: dict[str, tuple[str, str]] = {}  # key: (source, text)
    for step in range(160):
        w = rng.choice(writers)
        source = rng.choice(sources)
        if rng.random() < 0.85:
            text = f"{rng.choice(PEOPLE)} likes {rng.choice(HOBBIES)} number {step}."
            note = Note(text, "a", source)
            assert w.write(note) is not None
            want[note.identity()] = (source, text)
        else:
            w.remove(source)
            want = {k: v for k, v in want.items() if v[0] != source}
    fresh = MemoryIndex(e, path)
    got = {}
    for key in want:
        hit = fresh.get(key)
        assert hit is not None, key
        got[key] = (hit.source, hit.text)
    assert got == want
    assert len(fresh) == len(want)
    db = fresh._db
    pairs = db.execute("SELECT id, key FROM source_codes").fetchall()
    assert len({k for _, k in pairs}) == len(pairs) <= len(sources)
    dangling = db.execute("SELECT count(*) FROM tier1_memories m WHERE NOT EXISTS "
                          "(SELECT 1 FROM source_codes k WHERE k.id = m.source)").fetchone()[0]
    assert dangling == 0
    for x in (*writers, fresh):
        x.close()


def test_packed_integer_lists_round_trip() -> None:
    rng = random.Random(5)
    for _ in range(500):
        values = [rng.choice([0, 1, 127, 128, 16_383, 16_384, rng.getrandbits(rng.randrange(64))])
                  for _ in range(rng.randrange(12))]  # fmt: skip
        blob = pack_ints(values)
        assert unpack_ints(blob) == values
        assert len(blob) == sum(max(1, -(-v.bit_length() // 7)) for v in values)
        if blob:
            with pytest.raises(ValueError):
                unpack_ints(blob[:-1] + bytes([blob[-1] | 0x80]))
    with pytest.raises(ValueError):
        pack_ints([-1])


def test_source_rows_split_into_bounded_parts_against_an_oracle() -> None:
    """SourceRows against a dict of lists: random adds and takes over a few sources, one of
    them writing thousands of rows; no blob ever exceeds PART_BYTES (so a source's next row
    costs the same however many it wrote), and a table made from rows already held splits
    them the same way."""
    db = sqlite3.connect(":memory:", isolation_level=None)
    db.execute("CREATE TABLE t (a INTEGER, b INTEGER, source INTEGER)")
    rows = SourceRows(db, "t", 2)
    assert rows.made("a, b")
    rng = random.Random(9)
    oracle: dict[int, list[tuple[int, int]]] = {}
    db.execute("BEGIN")
    for _ in range(6_000):
        src = 1 if rng.random() < 0.7 else rng.randrange(2, 6)
        if rng.random() < 0.01:
            assert rows.take(src) == oracle.pop(src, [])
            continue
        row = (rng.getrandbits(rng.choice([3, 20, 40])), rng.randrange(300))
        rows.add(src, row)
        db.execute("INSERT INTO t VALUES (?, ?, ?)", (*row, src))
        oracle.setdefault(src, []).append(row)
    sizes = [int(r[0]) for r in db.execute("SELECT length(rows) FROM t_by")]
    assert max(sizes) <= PART_BYTES and len(sizes) > len(oracle)
    with pytest.raises(ValueError):
        rows.add(1, (1, 2, 3))
    db.execute("COMMIT")
    # the same rows, the table made again from them (a store of before)
    db.execute("DROP TABLE t_by")
    for src in list(oracle):
        held = [(a, b) for a, b in db.execute("SELECT a, b FROM t WHERE source = ?", (src,))]
        oracle[src] = held
    assert rows.made("a, b") and not rows.made("a, b")
    assert max(int(r[0]) for r in db.execute("SELECT length(rows) FROM t_by")) <= PART_BYTES
    for src, want in oracle.items():
        assert sorted(rows.take(src)) == sorted(want)
    assert rows.take(1) == []


def test_an_entity_store_alone_of_before_converts_and_withdraws_by_either_key(
    tmp_path: Path,
) -> None:
    """An entity file of before with no other tier beside it: a document id's rows were
    keyed by the hash of its name, which no other tier's code tells back; they are coded as
    that key, and withdrawing the document still takes them (and its rows written since)."""
    from hirmem.semantic.entities import EntityIndex

    path, doc, name = tmp_path / "e.db", "00000000000000d1", "chat/7"
    index = EntityIndex(path)
    index.note("Robert (Bob) Smith", "team", doc, "person")
    index.note("Ada Reyes", "team", name)
    db = index._db
    keys = {int(c): k for c, k in db.execute("SELECT id, key FROM source_codes")}
    before = {src: source_key(src) for src in (doc, name)}
    db.execute("BEGIN")
    old = {c: before[doc] if k == int(doc, 16) else before[name] for c, k in keys.items()}
    _said_per_source(db, old.__getitem__)
    db.executemany("UPDATE entity_aliases SET source = ? WHERE source = ?",
                   [(k, c) for c, k in old.items()])  # fmt: skip
    db.execute("DROP TABLE source_codes")
    db.execute("DROP TABLE source_coded")
    db.execute("COMMIT")
    index.close()
    index = EntityIndex(path)
    assert index.names("Bob", {"team"}) == {"bob", "robert smith", "robert (bob) smith"}
    assert index.kinds("Bob", {"team"}) == {"person"}
    index.note("Robert (Bob) Smith", "club", doc)  # written since: under the number's code
    assert index.resolve("Bob", {"club"}) == index.resolve("Bob", {"team"})
    assert index.withdraw(doc) > 0
    assert index.names("Bob", {"team", "club"}) == set()
    db = index._db
    left = {int(s) for t in ("entity_said_by", "entity_aliases")
            for (s,) in db.execute(f"SELECT source FROM {t}")}  # fmt: skip
    assert left == {index._codes.code(before[name], create=False)} != {0}
    assert index.withdraw(name) == 1 and index.resolve("Ada Reyes", {"team"}) == []
    index.close()
