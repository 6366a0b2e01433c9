"""Terms as codes of a dictionary the database keeps (issue 16 §5): the ledger's terms and
the vector filter index's.

Two writers of one store (two fleet nodes on one tenant's substrate) share the codes:
each is allocated by the database inside the write that first needs it, and a term left
unnamed is deleted only when no row names its code. Checked against an oracle over random
interleavings of the two writers, on SQLite and on PostgreSQL, and against stores of the
layouts before.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from hirmem.semantic.assertions import Edge, SQLiteLedger
from hirmem.semantic.stores.memory import MemoryVectors
from hirmem.semantic.stores.sqlite import SQLiteDocs, SQLiteVectors
from hirmem.semantic.values import Chunk, Claim, Span, Triple
from semantic_backends import semantic_backend, semantic_server  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("semantic_backend")

NAMES = ["Alice", "Bob", "Carol", "Oslo", "Zoë", "Acme Corp", "x"]
PREDICATES = ["knows", "lives_in", "works_at"]


def _steps(n: int, request: pytest.FixtureRequest) -> int:
    return n if request.getfixturevalue("semantic_backend") == "sqlite" else n // 4


def _state(ledger: SQLiteLedger) -> dict[str, tuple[str, str, str, int]]:
    return {e.id: (e.subject, e.predicate, e.object, e.retracted_at) for e in ledger}


def _check(db: Path, writers: list[SQLiteLedger]) -> None:
    """A ledger opened afresh reads what the two writers hold between them; the dictionary
    holds exactly the texts their rows name, and every code a row names is in it."""
    want: dict[str, tuple[str, str, str, int]] = {}
    for w in writers:
        want.update(_state(w))
    fresh = SQLiteLedger(db)
    try:
        assert _state(fresh) == want
        con = fresh._db
        texts = {t for (t,) in con.execute("SELECT text FROM ledger_terms")}
        assert texts == {t for s, p, o, _ in want.values() for t in (s, p, o)}
        dangling = con.execute(
            "SELECT count(*) FROM ledger_edges e WHERE NOT EXISTS (SELECT 1 FROM ledger_terms "
            "t WHERE t.code = e.s) OR NOT EXISTS (SELECT 1 FROM ledger_terms t WHERE "
            "t.code = e.p) OR NOT EXISTS (SELECT 1 FROM ledger_terms t WHERE t.code = e.o)"
        ).fetchone()[0]
        assert dangling == 0
    finally:
        fresh.close()


def test_two_ledgers_on_one_store_share_the_codes_the_database_allocates(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    rng = random.Random(16)
    db = tmp_path / "l.db"
    writers = [SQLiteLedger(db, clock=lambda: 7), SQLiteLedger(db, clock=lambda: 9)]
    erased: set[str] = set()
    for step in range(_steps(800, request)):
        me = rng.randrange(2)
        w = writers[me]
        s, o = rng.sample(NAMES, 2)
        if (s < o) != (me == 0):  # each writer its own triples, over the same texts
            s, o = o, s
        r = rng.random()
        held = [e for e in w if e.subject != "" and e.id not in erased]
        if r < 0.5:
            c = Claim(s, rng.choice(PREDICATES), o, f"w{me}")
            if c.id not in erased:
                w.add(c)
        elif r < 0.6 and held:
            w.retract(rng.choice(held).id, "withdrawn")
        elif r < 0.8 and held:
            victim = rng.choice(held)
            w.erase(victim.id, "request")
            erased.add(victim.id)
        if rng.random() < 0.3:
            w.flush()
        if step % 100 == 99:
            for x in writers:
                x.flush()
            _check(db, writers)
    for x in writers:
        x.flush()
    _check(db, writers)
    # every name erased from both writers' edges is gone from the dictionary
    for x in writers:
        for e in list(x):
            x.erase(e.id, "the end")
        x.flush()
    _check(db, writers)
    for x in writers:
        x.close()


def _extracted(s: str, p: str, o: str) -> Triple:
    text = f"{s} {p} {o}."
    chunk = Chunk("0123456789abcdef", 0, text, 0, len(text.encode()))
    return Triple(s, p, o, chunk, 0.9, span=Span.locate(chunk, text), evidence=text,
                  extractor="extract/rules-1")  # fmt: skip


def test_a_ledger_with_its_terms_in_each_row_is_converted_when_opened(tmp_path: Path) -> None:
    """A store of the layout before (each row holding its subject, predicate and object
    as text) opens with every edge as it was; its rows then name the terms by code."""
    from hirmem.semantic.assertions import Ledger

    db = tmp_path / "s.db"
    ledger = Ledger(clock=lambda: 5)
    edges: list[Edge] = [ledger.add(Claim("Alice", "knows", "Bob", "ops")),
                         ledger.add(_extracted("Zoë", "lives_in", "Oslo")),
                         ledger.add(Claim("Bob", "knows", "Alice", "ops"))]  # fmt: skip
    store = SQLiteDocs(db)  # a connection of either backend, to write the layout before
    con = store._db
    con.executescript("""
        CREATE TABLE ledger_edges (key INTEGER PRIMARY KEY, name TEXT, body TEXT NOT NULL);
        CREATE TABLE ledger_agents (code INTEGER PRIMARY KEY, name TEXT NOT NULL);
    """)
    con.execute("BEGIN")
    con.execute("INSERT INTO ledger_agents (code, name) VALUES (1, 'extract/rules-1')")
    for e in edges:
        v = int(e.id, 16)
        con.execute("INSERT INTO ledger_edges (key, name, body) VALUES (?, NULL, ?)",
                    (v - (1 << 64) if v >= 1 << 63 else v,
                     e.to_compact({"extract/rules-1": 1}.__getitem__)))  # fmt: skip
    con.execute("COMMIT")
    store.close()
    again = SQLiteLedger(db)
    assert [again.get(e.id) for e in edges] == edges
    rows = again._db.execute("SELECT body, s, p, o FROM ledger_edges").fetchall()
    assert len(rows) == 3 and all(None not in r[1:] for r in rows)
    assert not any(name.encode() in r[0] for r in rows
                   for name in ("Alice", "Zoë", "knows", "Oslo"))  # fmt: skip
    again.close()
    reopened = SQLiteLedger(db)
    assert [reopened.get(e.id) for e in edges] == edges
    reopened.close()


def test_two_vector_stores_on_one_store_share_the_codes_of_the_filter_index(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Two vector stores writing one store in turn: a store opened afresh answers every
    filter as the in-memory driver given the same writes does; the terms held are those
    the rows name, and no index row names a code that is not held."""
    rng = random.Random(5)
    db = tmp_path / "v.db"
    writers = [SQLiteVectors(db), SQLiteVectors(db)]
    oracle = MemoryVectors()
    ids = [f"v{i}" for i in range(40)]

    def check() -> None:
        fresh = SQLiteVectors(db)
        try:
            for flt in ({"subject": "a"}, {"subject": {"in": ["b", "c"]}},
                        {"container": "x", "subject": "c"}, {"n": {"ge": 2}}, None):
                assert ({m.id for m in fresh.near([1.0, 0.5], 100, flt)}
                        == {m.id for m in oracle.near([1.0, 0.5], 100, flt)}), flt
            con = fresh._db
            held = {(k, v) for k, v in con.execute("SELECT key, value FROM vector_terms")}
            named = {t for m in oracle.near([1.0, 0.5], 100) for t in fresh._terms(m.meta)}
            assert held == named
            assert con.execute("SELECT count(*) FROM vector_posts m WHERE NOT EXISTS (SELECT 1 "
                               "FROM vector_terms t WHERE t.code = m.key)").fetchone()[0] == 0
        finally:
            fresh.close()

    for step in range(_steps(600, request)):
        w = writers[rng.randrange(2)]
        i = rng.choice(ids)
        if rng.random() < 0.7:
            meta = {"subject": rng.sample(["a", "b", "c", "Zoë"], rng.randint(1, 2)),
                    "container": rng.choice(["x", "y"]), "n": rng.randint(0, 3)}
            vec = [rng.random() + 0.1, rng.random()]
            w.put(i, vec, meta)
            oracle.put(i, vec, meta)
        else:
            w.delete(i)
            oracle.delete(i)
        if step % 100 == 99:
            check()
    check()
    for w in writers:
        w.close()
