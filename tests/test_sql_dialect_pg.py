"""What the dialect says from a table's shape, and the full-text interface, checked
against SQLite as the oracle: the same statements run on SQLite and through
:class:`~hirmem.sql.pgconn.PgConnection` on a real PostgreSQL server leave the same rows
and answer the same."""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterator

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hirmem.emulation import postgres
from hirmem.sql.dialect import DialectError, shape_of, to_postgres
from hirmem.sql.lexical import Fts5, Lexical, PgText
from hirmem.sql.pgconn import PgConnection
from memory_backends import pg_skip

pytestmark = pg_skip()
_tables = itertools.count(1)


@pytest.fixture(scope="module")
def pgconn() -> Iterator[PgConnection]:
    with postgres.Primary("dialect") as primary:
        primary.sql("ALTER SYSTEM SET synchronous_commit = off")
        primary.sql("SELECT pg_reload_conf()")
        db = PgConnection(primary.dsn, "dialect", writer_lock="hirmem.dialect.test")
        db.verbatim("CREATE SCHEMA dialect")
        yield db
        db.close()


def both(pgconn: PgConnection) -> tuple[sqlite3.Connection, PgConnection]:
    return sqlite3.connect(":memory:", isolation_level=None), pgconn


# (DDL with {t} for the table, the columns a row gives, the key columns)
SHAPES = [
    ("CREATE TABLE {t} (id TEXT PRIMARY KEY, text TEXT NOT NULL, n INTEGER NOT NULL)",
     ("id", "text", "n")),
    ("CREATE TABLE {t} (id INTEGER PRIMARY KEY, text TEXT NOT NULL, n INTEGER NOT NULL)",
     ("id", "text", "n")),
    ("CREATE TABLE {t} (a TEXT NOT NULL, b INTEGER NOT NULL, n INTEGER NOT NULL, "
     "PRIMARY KEY (a, b)) WITHOUT ROWID", ("a", "b", "n")),
    ("CREATE TABLE {t} (key TEXT NOT NULL UNIQUE, value TEXT NOT NULL, n INTEGER NOT NULL)",
     ("key", "value", "n")),
]  # fmt: skip
_KEY = st.sampled_from(["k1", "k2", "k3"])
_ROW = st.tuples(_KEY, st.sampled_from(["x", "y", "it's"]), st.integers(-5, 5))
_OP = st.tuples(st.sampled_from(["replace", "replace-cols", "ignore", "insert-null",
                                 "upsert-add"]), _ROW)  # fmt: skip


def _statement(op: str, t: str, cols: tuple[str, ...], shape: int) -> str:
    marks = ", ".join("?" * len(cols))
    if op == "replace":
        return f"INSERT OR REPLACE INTO {t} VALUES ({marks})"
    if op == "replace-cols":
        return f"INSERT OR REPLACE INTO {t} ({', '.join(cols)}) VALUES ({marks})"
    if op == "ignore":
        return f"INSERT OR IGNORE INTO {t} VALUES ({marks})"
    if op == "insert-null":  # the rowid alias given NULL takes the next value
        return f"INSERT OR IGNORE INTO {t} ({', '.join(cols)}) VALUES (NULL, ?, ?)"
    key = {0: "id", 1: "id", 2: "a, b", 3: "key"}[shape]
    # the stored row's n (a bare column) plus the new one
    return (f"INSERT INTO {t} VALUES ({marks}) ON CONFLICT({key}) DO UPDATE SET "
            f"n = n + excluded.n")


@settings(max_examples=150, deadline=None)
@given(st.integers(0, len(SHAPES) - 1), st.lists(_OP, min_size=1, max_size=8))
def test_writes_leave_the_same_rows_on_sqlite_and_postgres(
    pgconn: PgConnection, shape: int, ops: list[tuple[str, tuple[str, str, int]]]
) -> None:
    """Differential: INSERT OR REPLACE (with and without a column list), INSERT OR IGNORE
    without one, a NULL rowid alias, an upsert whose SET reads the stored row — on a
    random table shape — leave the same rows on both."""
    ddl, cols = SHAPES[shape]
    t = f"t{next(_tables)}"
    lite, pg = both(pgconn)
    for db in (lite, pg):
        db.execute(ddl.format(t=t))
    for op, (key, text, n) in ops:
        if op == "insert-null" and shape != 1:
            continue
        row: tuple[object, ...] = (key, text, n) if op != "insert-null" else (text, n)
        if shape in (1,) and op != "insert-null":
            row = (int(key[1]), text, n)
        if shape == 2:
            row = (text, int(key[1]), n)
        sql = _statement(op, t, cols, shape)
        lite.execute(sql, row)
        pg.execute(sql, row)
        order = ", ".join(cols)
        want = lite.execute(f"SELECT {order} FROM {t} ORDER BY {order}").fetchall()
        assert pg.execute(f"SELECT {order} FROM {t} ORDER BY {order}").fetchall() == want
        assert pg.execute(f"SELECT * FROM {t} ORDER BY {order}").fetchall() == want
    lite.close()


def test_what_the_dialect_reads_from_a_shape_and_what_it_refuses() -> None:
    to_postgres("CREATE TABLE IF NOT EXISTS shaped (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                "text TEXT, UNIQUE (text))")  # fmt: skip
    shape = shape_of("shaped")
    assert shape is not None and shape.columns == ("id", "text")
    assert shape.keys == (("id",), ("text",)) and shape.rowid_alias == "id"
    # a column named for a type keeps its name
    assert to_postgres("CREATE TABLE named (text TEXT, blob BLOB)") == (
        'CREATE TABLE named (rowid BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE, '
        'text TEXT COLLATE "C", blob BYTEA)'
    )
    with pytest.raises(DialectError, match="2 keys"):  # SQLite would delete on either
        to_postgres("INSERT OR REPLACE INTO shaped VALUES (?, ?)")
    with pytest.raises(DialectError, match="has not learned"):
        to_postgres("INSERT OR REPLACE INTO never_made VALUES (?, ?)")
    with pytest.raises(DialectError, match="virtual table"):
        to_postgres("CREATE VIRTUAL TABLE f USING fts5(text)")
    assert to_postgres("PRAGMA journal_mode=WAL") == "SELECT NULL WHERE false"
    with pytest.raises(DialectError, match="PRAGMA"):
        to_postgres("PRAGMA integrity_check")


_VALUE = st.one_of(st.none(), st.integers(-(2**62), 2**62), st.floats(allow_nan=False,
                   allow_infinity=False, width=64), st.text(st.characters(
                   blacklist_characters="\x00"), max_size=6), st.binary(max_size=6))  # fmt: skip


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(_VALUE, st.binary(max_size=4)), min_size=1, max_size=5))
def test_typeof_blob_literals_and_cross_join_answer_alike(
    pgconn: PgConnection, rows: list[tuple[object, bytes]]
) -> None:
    """Differential: typeof() of each column's values, X'..' literals compared with
    stored blobs, and a CROSS JOIN … ON read the same on both."""
    t, u = f"ty{next(_tables)}", f"tu{next(_tables)}"
    lite, pg = both(pgconn)
    for db in (lite, pg):
        db.execute(f"CREATE TABLE {t} (id INTEGER PRIMARY KEY, i INTEGER, r REAL, s TEXT, "
                   "b BLOB, tag BLOB NOT NULL)")  # fmt: skip
        db.execute(f"CREATE TABLE {u} (ref INTEGER NOT NULL, note TEXT NOT NULL)")
    for n, (value, tag) in enumerate(rows):
        # each column takes the value its type holds (PostgreSQL's columns are typed)
        i = value if isinstance(value, int) else None
        r = value if isinstance(value, float) else None
        s = value if isinstance(value, str) else None
        b = value if isinstance(value, bytes) else None
        for db in (lite, pg):
            db.execute(f"INSERT INTO {t} (i, r, s, b, tag) VALUES (?, ?, ?, ?, ?)",
                       (i, r, s, b, tag))  # fmt: skip
            db.execute(f"INSERT INTO {u} VALUES (?, ?)", (n + 1, f"note {n}"))
    queries = [
        f"SELECT id, typeof(i), typeof(r), typeof(s), typeof(b) FROM {t} ORDER BY id",
        f"SELECT id FROM {t} WHERE tag = X'{rows[0][1].hex()}' ORDER BY id",
        f"SELECT id FROM {t} WHERE substr(tag, 1, 1) IN (x'00', x'41') ORDER BY id",
        f"SELECT a.id, b.note FROM {t} a CROSS JOIN {u} b ON b.ref = a.id ORDER BY a.id",
    ]
    for sql in queries:
        assert pg.execute(sql).fetchall() == lite.execute(sql).fetchall(), sql
    lite.close()


def test_table_info_names_the_columns_as_sqlite_does(pgconn: PgConnection) -> None:
    t = f"ti{next(_tables)}"
    lite, pg = both(pgconn)
    for db in (lite, pg):
        db.execute(f"CREATE TABLE {t} (k TEXT PRIMARY KEY, v BLOB NOT NULL, n INTEGER)")
    # (cid, name, notnull, pk); PostgreSQL makes a key's column NOT NULL, SQLite not
    want = [(r[0], r[1], r[3] or r[5] > 0, r[5])
            for r in lite.execute(f"PRAGMA table_info({t})")]  # fmt: skip
    got = [(r[0], r[1], r[3], r[5]) for r in pg.execute(f"PRAGMA table_info({t})")]
    assert got == want == [(0, "k", 1, 1), (1, "v", 1, 0), (2, "n", 0, 0)]
    assert pg.execute("PRAGMA table_info(no_such_table)").fetchall() == []
    lite.close()


# words both stemmers (FTS5's Porter, PostgreSQL's English Snowball) keep as one stem
# each, none an English stop word
WORDS = ["pump", "pumps", "valve", "tank", "tanks", "pressure", "sensor", "alice", "berlin",
         "motor", "filter", "level", "drain", "flow", "alarm"]  # fmt: skip


def _index(lex: Lexical, db: sqlite3.Connection | PgConnection, name: str,
           docs: list[tuple[str, str]]) -> None:  # fmt: skip
    lex.create(name)
    for n, (text, subject) in enumerate(docs, 1):
        db.execute("INSERT INTO content (id, text, subject) VALUES (?, ?, ?)", (n, text, subject))
        lex.add(name, n, text, subject)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6),
                          st.sampled_from(["", "alice", "bob"])), min_size=1, max_size=12),
       st.lists(st.lists(st.sampled_from([*WORDS, "bob"]), min_size=1, max_size=3),
                min_size=1, max_size=4),
       st.data())  # fmt: skip
def test_the_lexical_index_matches_the_same_rows_on_both(
    pgconn: PgConnection, docs: list[tuple[list[str], str]], queries: list[list[str]],
    data: st.DataObject,
) -> None:  # fmt: skip
    """Differential: FTS5 and the tsvector index match the same rows for any OR of terms
    (the oracle: the rows holding a term or its plural), after some rows left the index,
    and score each the same: BM25 over the index's own statistics (lower is better)."""
    name = f"lx{next(_tables)}"
    lite, pg = both(pgconn)
    fts, pgt = Fts5(lite, "content", "id"), PgText(pg)
    pg.execute("DROP TABLE IF EXISTS content")
    for db in (lite, pg):
        db.execute("CREATE TABLE content (id INTEGER PRIMARY KEY, text TEXT, subject TEXT)")
    texts = [(" ".join(words), subject) for words, subject in docs]
    _index(fts, lite, name, texts)
    _index(pgt, pg, name, texts)
    gone = data.draw(st.sets(st.integers(1, len(texts))))
    for n in gone:
        fts.remove(name, n, *texts[n - 1])
        pgt.remove(name, n, *texts[n - 1])
    for terms in queries:
        found, ranks = {}, {}
        for lex, db in ((fts, lite), (pgt, pg)):
            r = lex.ranked(name, (1.0, 2.0))
            rows = db.execute(
                f"SELECT c.id, {r.rank} FROM {r.source} JOIN content c ON c.id = {r.key} "
                f"WHERE {r.match} ORDER BY {r.rank}, c.id", [lex.query(terms)]).fetchall()
            assert all(rank <= 0 for _, rank in rows)
            found[type(lex).__name__] = {i for i, _ in rows}
            ranks[type(lex).__name__] = {i: float(rank) for i, rank in rows}
        want = {n for n, (text, subject) in enumerate(texts, 1) if n not in gone
                and set(terms) & set((text + " " + subject).split())}  # fmt: skip
        stems = {t.rstrip("s") for t in terms}  # "pumps" finds "pump" and back
        want |= {n for n, (text, subject) in enumerate(texts, 1) if n not in gone
                 and stems & {w.rstrip("s") for w in (text + " " + subject).split()}}
        assert found["Fts5"] == found["PgText"] == want, terms
        # the same BM25: on words both tokenisers keep, the same score for every row
        assert ranks["PgText"] == pytest.approx(ranks["Fts5"], rel=1e-9, abs=1e-12), terms
    lite.close()


_KEY64 = st.one_of(st.sampled_from([-(2**63), -1, 0, 1, 2**63 - 1]),
                   st.integers(-(2**63), 2**63 - 1))  # fmt: skip
_NAME = st.text(st.sampled_from(["a", "b", "é", "日", "\U0010ffff", "#", "0"]), min_size=1,
                max_size=4)  # fmt: skip


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(_KEY64, _NAME), min_size=1, max_size=8),
       st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7), _NAME), max_size=10),
       _NAME)  # fmt: skip
@example(  # an ignored duplicate edge: PostgreSQL's identity skips a number there
    terms=[(-(2**63), "0"), (-1, "0")], links=[(0, 0, "0"), (0, 0, "0"), (0, 1, "0")], prefix="0"
)
def test_the_compact_layouts_statements_answer_alike(
    pgconn: PgConnection, terms: list[tuple[int, str]], links: list[tuple[int, int, str]],
    prefix: str,
) -> None:
    """Differential, the statements the compact semantic stores rely on: a dictionary of
    terms keyed by signed 64-bit integers (both ends of the range) written with INSERT OR
    IGNORE (its rowcount says new or held), rows of integers naming them, an upsert that
    returns the row's rowid (kept across the update), a neighbour query grouped by the
    integer and the name it selects, and an id range by prefix (byte order on both)."""
    d, e, v = f"cd{next(_tables)}", f"ce{next(_tables)}", f"cv{next(_tables)}"
    lite, pg = both(pgconn)
    for db in (lite, pg):
        db.execute(f"CREATE TABLE {d} (id INTEGER PRIMARY KEY, text TEXT NOT NULL)")
        db.execute(f"CREATE TABLE {e} (seq INTEGER PRIMARY KEY, src INTEGER NOT NULL, "
                   f"dst INTEGER NOT NULL, label TEXT NOT NULL, UNIQUE (src, label, dst))")
        db.execute(f"CREATE TABLE {v} (id TEXT PRIMARY KEY, n INTEGER NOT NULL)")
    for key, text in terms:
        counts = [db.execute(f"INSERT OR IGNORE INTO {d} VALUES (?, ?)", (key, text)).rowcount
                  for db in (lite, pg)]  # fmt: skip
        assert counts[0] == counts[1], (key, text)
    keys = [k for k, _ in terms]
    for a, b, label in links:
        row = (keys[a % len(keys)], keys[b % len(keys)], label)
        counts = [db.execute(f"INSERT OR IGNORE INTO {e} (src, dst, label) VALUES (?, ?, ?)",
                             row).rowcount for db in (lite, pg)]  # fmt: skip
        assert counts[0] == counts[1]
    for n, (_, name) in enumerate([*terms, (0, prefix)]):
        got = [db.execute(f"INSERT INTO {v} VALUES (?, ?) ON CONFLICT(id) DO UPDATE SET "
                          "n = excluded.n RETURNING rowid", (name, n)).fetchall()
               for db in (lite, pg)]  # fmt: skip
        assert len(got[0]) == len(got[1]) == 1
    queries = [
        (f"SELECT id, text FROM {d} ORDER BY id", ()),
        # the neighbours in the order of their first edge: PostgreSQL's identity draws a
        # number for an insert its conflict then ignores, so seq may skip there where
        # SQLite's does not; the graph reads seq only as an order (stores/sqlite.py)
        (f"SELECT n.text FROM {e} x JOIN {d} n ON n.id = x.dst WHERE x.src = ? "
         "GROUP BY x.dst, n.text ORDER BY min(x.seq)", (keys[0],)),
        (f"SELECT id, n FROM {v} WHERE id >= ? AND id < ? ORDER BY id",
         (prefix, prefix[:-1] + chr(min(ord(prefix[-1]) + 1, 0x10FFFF)))),
        (f"SELECT id FROM {v} ORDER BY id", ()),
    ]
    for sql, args in queries:
        assert pg.execute(sql, args).fetchall() == lite.execute(sql, args).fetchall(), sql
    # an upsert keeps the row (its rowid) on both: the rowids a second write returns
    rowids = f"SELECT rowid FROM {v} ORDER BY id"
    held = [[r[0] for r in lite.execute(rowids)], [r[0] for r in pg.execute(rowids)]]
    upsert = f"INSERT INTO {v} VALUES (?, 0) ON CONFLICT(id) DO UPDATE SET n = excluded.n"
    for name in sorted({t for _, t in terms}):
        lite.execute(upsert, (name,))
        pg.execute(upsert, (name,))
    assert [[r[0] for r in lite.execute(rowids)], [r[0] for r in pg.execute(rowids)]] == held
    lite.close()
