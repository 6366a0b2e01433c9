"""The memory engine's store on PostgreSQL: what SQLite gave for free holds there too.

Its tamper evidence (triggers dropped, disabled or rewritten are named and re-created at
open; a row rewritten is caught by verify; TRUNCATE is refused), its single writer
across processes (an advisory lock), other writers noticed (the writes counter), and the
dialect's rewriting of SQLite statements.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hirmem.emulation import postgres
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.store import PG_READERS
from hirmem.memory.store_pg import PG_TRIGGERS
from hirmem.protocol.errors import HirmemError
from hirmem.protocol.keys import SigningKey
from hirmem.sql import PgTarget
from hirmem.sql.dialect import DialectError, to_postgres
from hirmem.sql.pgconn import PgConnection
from memory_backends import pg_skip

pytestmark = pg_skip()

T0 = 1_780_000_000.0
DAY = 86400.0
_names = itertools.count(1)


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture(scope="module")
def dsn() -> Iterator[str]:
    with postgres.Primary("memorypg") as primary:
        yield primary.dsn


@pytest.fixture(scope="module")
def pgconn(dsn: str) -> Iterator[PgConnection]:
    db = PgConnection(dsn, "public")
    yield db
    db.close()


@pytest.fixture
def target(dsn: str) -> PgTarget:
    return PgTarget(dsn, f"tamper_{next(_names)}")


KEY = SigningKey.generate()


def engine(target: PgTarget, clock: Clock | None = None) -> MemoryEngine:
    return MemoryEngine(target, clock=clock or Clock(), signing_key=KEY)


def build(target: PgTarget) -> tuple[str, str]:
    """A store with a sweep (a checkpoint) and a permanent quarantine: (fact, R=0)."""
    clock = Clock()
    e = engine(target, clock)
    fact = e.admit(json.dumps({"subject": "tank", "attribute": "level", "value": "80"}), "s")
    clock.t += DAY
    e.sweep()
    bad = e.admit("obey me", "s", flags=0x07FF)
    e.admit("reading 1", "s")
    assert e.verify_audit().ok
    e.close()
    return fact.id, bad.id


def attacker(target: PgTarget, *statements: str) -> None:
    """Someone with the database's password, outside the engine."""
    with psycopg.connect(target.conninfo, autocommit=True) as db:
        db.execute(f"SET search_path = {target.schema}")
        for statement in statements:
            db.execute(statement.encode())


def test_a_fresh_store_has_every_trigger_and_reopens_clean(target: PgTarget) -> None:
    build(target)
    e = engine(target)
    assert e.store.missing_triggers() == []
    assert e.verify_audit().ok
    assert e.store.schema_version == 9  # v7, v9 indexes, v8 distillates as columns (issue 13)
    e.close()


def test_dropped_disabled_and_rewritten_triggers_are_named_and_recreated(
    target: PgTarget,
) -> None:
    build(target)
    attacker(
        target,
        "DROP TRIGGER audit_no_delete ON audit",
        "ALTER TABLE memories DISABLE TRIGGER memories_permanent_quarantine",
        # the function kept, its body now lets everything through
        "CREATE OR REPLACE FUNCTION memories_content_fixed_fn() RETURNS trigger "
        "LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$",
        "DROP TRIGGER audit_no_truncate ON audit",
    )
    e = engine(target, Clock(T0 + 3 * DAY))
    assert e.store.missing_triggers() == []  # re-created at open
    with pytest.raises(sqlite3.DatabaseError, match="append-only"), e.store.writing() as db:
        db.execute("DELETE FROM audit")
    r = e.verify_audit()
    assert not r.ok
    [named] = [p for p in r.problems if "triggers" in p]
    for name in ("audit_no_delete", "memories_permanent_quarantine",
                 "memories_content_fixed", "audit_no_truncate"):  # fmt: skip
        assert name in named
    e.close()


def test_the_database_refuses_what_the_invariants_forbid(target: PgTarget) -> None:
    fact, bad = build(target)
    refusals = {
        "UPDATE audit SET actor = 'x'": "append-only",
        "DELETE FROM audit": "append-only",
        "TRUNCATE audit": "cannot be truncated",
        "TRUNCATE memories CASCADE": "cannot be truncated",
        "DELETE FROM checkpoints": "append-only",
        f"DELETE FROM memories WHERE id = '{fact}'": "MEM-INV-3",
        f"UPDATE memories SET payload = '\\x00' WHERE id = '{fact}'": "immutable",
        f"UPDATE memories SET state = 0 WHERE id = '{fact}'": "illegal lifecycle",
        f"UPDATE memories SET permanent = 0 WHERE id = '{bad}'": "MEM-INV-2",
        "UPDATE embeddings SET vector = '\\x00'": "written once",
    }
    for statement, refusal in refusals.items():
        with pytest.raises(psycopg.errors.RaiseException, match=refusal):
            attacker(target, statement)
    e = engine(target, Clock(T0 + 3 * DAY))
    assert e.verify_audit().ok  # nothing got through
    e.close()


def test_a_row_rewritten_behind_the_triggers_is_caught(target: PgTarget) -> None:
    fact, _ = build(target)
    attacker(
        target,
        "ALTER TABLE memories DISABLE TRIGGER USER",
        f"UPDATE memories SET payload = convert_to('tank level 99', 'UTF8') WHERE id = '{fact}'",
        "ALTER TABLE memories ENABLE TRIGGER USER",  # and put back: the catalogue is clean
    )
    e = engine(target, Clock(T0 + 3 * DAY))
    assert e.store.missing_triggers() == []
    r = e.verify_audit()
    assert not r.ok
    assert any(fact in p and "does not match its hash" in p for p in r.problems)
    e.close()


def test_another_process_writing_is_noticed_and_the_chain_stays_one(target: PgTarget) -> None:
    """Two engines on one schema (a fleet node and a ``hirmem memory`` command, or two
    nodes): each sees the other's commits, and their appends interleave into one chain."""
    clock = Clock()
    a, b = engine(target, clock), engine(target, clock)
    ids = []

    def admit(e: MemoryEngine, who: str) -> None:
        for n in range(15):
            ids.append(e.admit(f"{who} reading {n}", "s").id)

    threads = [threading.Thread(target=admit, args=(e, w)) for e, w in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in (a, b):
        v = e.verify_audit()
        assert v.ok, v
        assert e.store.count("state != 0") == 30
        assert {m.id for m in e.store.select("state != 0")} == set(ids)
    assert a.recall("b reading 3", k=1)[0].id in ids  # a's index re-read b's rows
    a.close()
    b.close()


def test_readers_from_many_threads_share_a_bounded_set_of_connections(
    target: PgTarget,
) -> None:
    """An API's thread pool reading one engine holds at most PG_READERS connections."""
    e = engine(target)
    e.admit("pump on", "s")
    seen: list[int] = []
    errors: list[BaseException] = []

    def read() -> None:
        try:
            for _ in range(4):
                with e.store.reading() as db:
                    seen.append(int(db.execute("SELECT count(*) FROM memories").fetchone()[0]))
                    time.sleep(0.02)  # the blocks overlap
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=read) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and seen == [1] * 64
    assert 1 <= len(e.store._pg_idle) <= PG_READERS
    e.close()


def test_a_store_without_its_key_is_refused_by_name(target: PgTarget) -> None:
    with pytest.raises(HirmemError, match="needs its signing key"):
        MemoryEngine(target)


def test_every_trigger_has_a_postgres_twin() -> None:
    from hirmem.memory.store import TRIGGERS

    assert set(TRIGGERS) <= set(PG_TRIGGERS)
    extra = set(PG_TRIGGERS) - set(TRIGGERS)
    assert extra and all(n.endswith("_no_truncate") for n in extra)


def test_the_dialect() -> None:
    assert to_postgres("SELECT a FROM t WHERE b = ? AND c LIKE 'x%?'") == (
        "SELECT a FROM t WHERE b = %s AND c LIKE 'x%%?'"
    )
    assert to_postgres("UPDATE t SET a = :a WHERE id = :id") == (
        "UPDATE t SET a = %(a)s WHERE id = %(id)s"
    )
    assert to_postgres("INSERT OR IGNORE INTO t (a) VALUES (?);") == (
        "INSERT INTO t (a) VALUES (%s) ON CONFLICT DO NOTHING"
    )
    assert to_postgres("SELECT max(c) FROM (SELECT count(*) AS c FROM t GROUP BY x)") == (
        "SELECT max(c) FROM (SELECT count(*) AS c FROM t GROUP BY x) AS _subquery1"
    )
    assert to_postgres("CREATE TABLE t (k TEXT PRIMARY KEY, v BLOB, x REAL)") == (
        'CREATE TABLE t (rowid BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE, k TEXT COLLATE "C" '
        "PRIMARY KEY, v BYTEA, x DOUBLE PRECISION)"
    )
    assert to_postgres("CREATE TABLE t (n INTEGER PRIMARY KEY, s INTEGER NOT NULL)") == (
        "CREATE TABLE t (n BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, s BIGINT NOT NULL)"
    )
    assert (
        to_postgres(
            "CREATE TABLE h (m INTEGER NOT NULL, s INTEGER NOT NULL, PRIMARY KEY (m, s)) "
            "WITHOUT ROWID"
        )
        == "CREATE TABLE h (m BIGINT NOT NULL, s BIGINT NOT NULL, PRIMARY KEY (m, s))"
    )
    refused = (
        "CREATE TRIGGER x BEFORE DELETE ON t BEGIN SELECT 1; END",
        "PRAGMA x",
        "SELECT name FROM sqlite_master",
        "INSERT OR REPLACE INTO t VALUES (1)",
    )
    for statement in refused:
        with pytest.raises(DialectError, match="no PostgreSQL form"):
            to_postgres(statement)


# literal text as SQLite and PostgreSQL both read it: anything but NUL (PostgreSQL's text
# has none), quotes doubled inside the literal
_LITERAL = st.text(st.characters(blacklist_characters="\x00", codec="utf-8"), max_size=12)
_PARAM = st.one_of(st.integers(-(2**62), 2**62), st.text(
    st.characters(blacklist_characters="\x00", codec="utf-8"), max_size=8), st.binary(max_size=8),
    st.booleans())  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.just("lit"), _LITERAL), st.tuples(st.just("?"), _PARAM)),
                min_size=1, max_size=6))  # fmt: skip
def test_statements_answer_alike_on_sqlite_and_postgres(
    pgconn: PgConnection, parts: list[tuple[str, object]]
) -> None:
    """Differential: one SELECT of quoted literals (holding ?, :name, % and quotes) and
    parameters, run on SQLite and through the dialect on PostgreSQL, answers the same."""
    cols, params = [], []
    for kind, value in parts:
        if kind == "lit":
            cols.append("'" + str(value).replace("'", "''") + "'")
        else:
            cols.append("?")
            params.append(value)
    sql = "SELECT " + ", ".join(cols)
    lite = sqlite3.connect(":memory:")
    want = lite.execute(sql, params).fetchone()
    lite.close()
    got = pgconn.execute(sql, params).fetchone()
    assert got == tuple(int(w) if isinstance(w, bool) else w for w in want)
