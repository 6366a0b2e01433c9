"""The ledger's rows packed (issue 16 §5: the store under 10x its text).

A row's body is :meth:`Edge.to_packed` (the compact array in :mod:`hirmem.semantic.binrow`'s
binary form) and a term is found in ``ledger_terms`` by its 64-bit hash. Checked against
the JSON body before it (the oracle: both read back as the same edge) over thousands of
random edges and values, against stores of the layout before (converted when opened, on
SQLite and on PostgreSQL, by one of two ledgers opening it), and against a bound on the
ledger's bytes a document.
"""

from __future__ import annotations

import json
import math
import random
import sqlite3
import struct
from pathlib import Path
from typing import Any

import pytest

from hirmem.semantic import binrow
from hirmem.semantic.assertions import Edge, Ledger, Source, SourceKind, SQLiteLedger, _term_hash
from hirmem.semantic.errors import LedgerError
from hirmem.semantic.stores.sqlite import SQLiteDocs
from hirmem.semantic.values import Chunk, Claim, Span, Triple
from semantic_backends import semantic_backend, semantic_server  # noqa: F401  (fixtures)
from test_semantic_tier_bytes import tier_bytes_per_document

pytestmark = pytest.mark.usefixtures("semantic_backend")

AGENTS = {"extract/rules-1": 1, "extract/model-2": 2}


def _float(rng: random.Random) -> float:
    raw: float = struct.unpack("<d", rng.randbytes(8))[0]  # any bits: NaNs, subnormals
    return rng.choice([0.8, 0.9, 1.0, 0.0, -0.0, 0.1 + 0.2, rng.random(), 1e-300, 5e-324,
                       math.inf, -math.inf, 1e22, 100.0, 123456.789, -2.5,
                       rng.uniform(-1e9, 1e9), raw])


def _text(rng: random.Random) -> str:
    return rng.choice(["", "e", "Zoë \"q\"", "ops", "rule:t", "#", "a#b#3", "x" * 300,
                       f"{rng.getrandbits(64):016x}#{rng.randrange(40)}",
                       f"{rng.getrandbits(64):016x}#0{rng.randrange(9)}",
                       f"{rng.getrandbits(64):016X}#1", "\u2028\x00\t",
                       "".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(rng.randrange(9)))])


def _edge(rng: random.Random) -> Edge:
    """A random edge, shaped as the ledger writes them and beyond (odd floats, unicode,
    chunk ids and ids that only look like them)."""
    def source() -> Source:
        kinds: list[SourceKind] = ["extracted", "supplied", "derived"]
        kind = rng.choice(kinds)
        doc = f"{rng.getrandbits(64):016x}"
        ref = rng.choice([f"{doc}#{rng.randrange(30)}", _text(rng)])
        start = rng.choice([-1, 0, rng.randrange(2000)])
        return Source(kind, ref, rng.choice([ref.rpartition("#")[0], "", doc, _text(rng)]),
                      start, rng.choice([-1, start + rng.randrange(300)]),
                      rng.choice(["", *AGENTS]),
                      tuple(_text(rng) for _ in range(rng.choice([0, 0, 1, 3]))),
                      rng.choice([None, score, score, _float(rng)]))  # fmt: skip

    score = _float(rng)
    rec = rng.choice([1, 1_796_229_093_403 + rng.randrange(10**7), rng.getrandbits(70)])
    vf = rng.choice([0, 1_500_000_000_000, -5])
    vu = rng.choice([0, vf + rng.randrange(1, 10**9)])
    spans = rng.choice([((rec, vf, vu),), ((rec, 0, 0), (rec + 1, vf, vu)),
                        ((rec, 3, 4), (rec + 9, 3, 4), (rec + 20, vf, vu))])  # fmt: skip
    return Edge(f"{rng.getrandbits(64):016x}", _text(rng), _text(rng), _text(rng),
                rng.randint(0, 300), score,
                tuple(source() for _ in range(rng.choice([0, 1, 1, 2, 5]))), vf, vu, rec,
                rng.choice([0, rec + 5]), rng.choice(["", "withdrawn", "0", _text(rng)]),
                spans)  # fmt: skip


def _identical(a: Any, b: Any) -> bool:
    """Equal, of the same types, floats to the bit (a NaN is itself)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_identical(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Edge | Source):
        return all(_identical(getattr(a, f), getattr(b, f)) for f in a.__slots__)
    return bool(a == b)


def test_a_packed_row_reads_back_as_the_json_row_did_and_is_smaller() -> None:
    """The differential: over thousands of random edges, the packed body and the JSON body
    before it read back as one and the same edge (the edge written), and the packed ones are
    the smaller; an edge as the rule extractor writes it takes under half the bytes."""
    rng = random.Random(1616)
    names = {v: k for k, v in AGENTS.items()}
    sizes = [0, 0]
    for _ in range(6000):
        e = _edge(rng)
        terms = (e.subject, e.predicate, e.object)
        old = Edge.from_compact(e.id, e.to_compact(AGENTS.__getitem__, terms=False),
                                names.__getitem__, terms)  # fmt: skip
        epoch = rng.choice([0, e.recorded_at - rng.randrange(10**7), rng.getrandbits(64)])
        packed = e.to_packed(AGENTS.__getitem__, epoch)
        new = Edge.from_row(e.id, packed, names.__getitem__, terms, epoch)
        assert _identical(new, e) and _identical(new, old), (e, packed)
        sizes[0] += len(e.to_compact(AGENTS.__getitem__, terms=False).encode())
        sizes[1] += len(packed)
    assert sizes[1] < 0.7 * sizes[0], sizes  # (an odd float alone may take 9 bytes, not 4)
    typical = Edge("90a8093ea5f99d2d", "Ada Reyes", "works_at", "Acme", 1, 0.8,
                   (Source("extracted", "1d0d6e3f4a6c9b20#0", "1d0d6e3f4a6c9b20", 130, 162,
                           "extract/rules-1", (), 0.8),), recorded_at=1_796_229_093_403,
                   spans=((1_796_229_093_403, 0, 0),))  # fmt: skip
    before = len(typical.to_compact(AGENTS.__getitem__, terms=False))
    assert before == 64 and len(typical.to_packed(AGENTS.__getitem__)) <= 28
    # recorded a minute after the store's first row, the instant takes 4 bytes, not 7
    assert len(typical.to_packed(AGENTS.__getitem__, 1_796_229_033_403)) <= 25


def _value(rng: random.Random, depth: int = 0) -> Any:
    r = rng.random()
    if r < 0.1:
        return rng.choice([None, True, False])
    if r < 0.3:
        return rng.choice([0, 27, 28, 155, -1, -28, -29, 2**63, -(2**64) - 1,
                           rng.randrange(-(10**30), 10**30)])
    if r < 0.5:
        return _float(rng)
    if r < 0.7 or depth > 3:
        return _text(rng)
    return [_value(rng, depth + 1) for _ in range(rng.randrange(40 if depth == 0 else 6))]


def test_binrow_reads_back_every_value_as_json_did_and_to_the_bit() -> None:
    """Over random JSON-shaped values (the markers of a repeated score among them): what
    :func:`binrow.unpack` reads is what ``json`` read back (the layout before), with the
    same types and the same floats to the bit; a truncated or extended form is refused."""
    rng = random.Random(526)
    for _ in range(8000):
        v, score = _value(rng), rng.choice([None, 0.8, 1, _float(rng)])
        data = binrow.pack_scored(score, v)
        got_score, got = binrow.unpack_scored(data)
        assert _identical(got, v) and _identical(got_score, score), (v, data.hex())
        if all(math.isfinite(x) for x in _floats(v)):
            assert _identical(got, json.loads(json.dumps(v)))
        alone = binrow.pack(v)
        with pytest.raises(ValueError):  # the form is self-delimiting: no prefix is a value
            binrow.unpack(alone[: rng.randrange(len(alone))])
        with pytest.raises(ValueError):
            binrow.unpack(alone + b"\x00")
    with pytest.raises(TypeError):
        binrow.pack({"a": 1})
    with pytest.raises(ValueError, match="unknown tag"):  # kind 7 is not written
        binrow.unpack(bytes([0xE0]))
    with pytest.raises(ValueError, match="no value given"):  # a marker, with no score
        binrow.unpack(binrow.pack([0.8], same=0.8))


def _floats(v: Any) -> list[float]:
    if isinstance(v, float):
        return [v]
    return [x for item in v for x in _floats(item)] if isinstance(v, list) else []


def _extracted(s: str, p: str, o: str, doc: str = "0123456789abcdef") -> Triple:
    text = f"{s} {p} {o}."
    chunk = Chunk(doc, 0, text, 0, len(text.encode()))
    return Triple(s, p, o, chunk, 0.9, span=Span.locate(chunk, text), evidence=text,
                  extractor="extract/rules-1")  # fmt: skip


def _key(tid: str) -> int:
    v = int(tid, 16)
    return v - (1 << 64) if v >= 1 << 63 else v


def test_a_ledger_with_json_bodies_is_packed_when_opened(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A store of the layout before (each row's body JSON text, its terms coded by a
    ``ledger_terms`` unique on the text) opens with every edge as it was, retracted and
    closed ones too; two ledgers open it (the second finds it converted), both write, and
    a third reads what both hold. No text is kept in an index any more."""
    rng = random.Random(7)
    db = tmp_path / "j.db"
    clock = iter(range(10, 10**6))
    ledger = Ledger(clock=lambda: next(clock))
    people = ["Ada", "Bo", "Zoë", "Cy Nair"]
    for i in range(300 if request.getfixturevalue("semantic_backend") == "sqlite" else 60):
        s, o = rng.sample(people, 2)
        if rng.random() < 0.6:
            e = ledger.add(_extracted(s, rng.choice(["knows", "likes"]), o,
                                      f"{rng.getrandbits(64):016x}"))  # fmt: skip
        else:
            e = ledger.add(Claim(s, "knows", o, f"ops{i % 3}"))
        if rng.random() < 0.1:
            ledger.retract(e.id, "withdrawn")
        elif rng.random() < 0.1:
            ledger.close_span(e.id, 50_000)
    edges = list(ledger)
    store = SQLiteDocs(db)  # a connection of either backend, to write the layout before
    con = store._db
    con.executescript("""
        CREATE TABLE ledger_edges (key INTEGER PRIMARY KEY, name TEXT, body TEXT NOT NULL,
                                   s INTEGER, p INTEGER, o INTEGER);
        CREATE TABLE ledger_terms (code INTEGER PRIMARY KEY AUTOINCREMENT,
                                   text TEXT NOT NULL UNIQUE);
        CREATE TABLE ledger_agents (code INTEGER PRIMARY KEY, name TEXT NOT NULL);
    """)
    con.execute("BEGIN")
    con.execute("INSERT INTO ledger_agents (code, name) VALUES (1, 'extract/rules-1')")
    texts = sorted({t for e in edges for t in (e.subject, e.predicate, e.object)})
    for t in texts:
        con.execute("INSERT INTO ledger_terms (text) VALUES (?)", (t,))
    codes = {str(t): int(c) for c, t in con.execute("SELECT code, text FROM ledger_terms")}
    for e in edges:
        con.execute("INSERT INTO ledger_edges (key, name, body, s, p, o) VALUES (?, NULL, ?, "
                    "?, ?, ?)", (_key(e.id), e.to_compact({"extract/rules-1": 1}.__getitem__,
                                                          terms=False),
                                 codes[e.subject], codes[e.predicate], codes[e.object]))
    con.execute("COMMIT")
    store.close()

    one, two = SQLiteLedger(db, clock=lambda: 7), SQLiteLedger(db, clock=lambda: 9)
    assert [one.get(e.id) for e in edges] == edges == [two.get(e.id) for e in edges]
    rows = one._db.execute("SELECT body FROM ledger_edges").fetchall()
    assert len(rows) == len(edges) and all(isinstance(b, bytes) for (b,) in rows)
    assert not any(t.encode() in b for (b,) in rows for t in ("Ada", "knows", "extract"))
    held = {str(t): h for h, t in one._db.execute("SELECT hash, text FROM ledger_terms")}
    assert held == {t: _term_hash(t) for t in texts}
    epoch = one._db.execute("SELECT value FROM ledger_meta WHERE name = 'epoch'").fetchone()
    assert epoch == (min(e.recorded_at for e in edges),)
    a = one.add(Claim("Ada", "met", "Eve", "ops"))
    b = two.add(_extracted("Eve", "knows", "Bo"))
    gone = edges[0]
    one.erase(gone.id, "request")
    one.close()
    two.close()
    three = SQLiteLedger(db)
    want = [e for e in edges[1:] if e.id != b.id] + [a, b]
    assert three.get(gone.id) is None and three.tombstone(gone.id) is not None
    assert sorted((e.id, e) for e in three) == sorted((e.id, e) for e in want)
    three.close()
    if request.getfixturevalue("semantic_backend") == "sqlite":
        con2 = sqlite3.connect(db)
        indexed = {r[0] for r in con2.execute(
            "SELECT name FROM pragma_index_list('ledger_terms')")}  # fmt: skip
        columns = {r[0] for name in indexed
                   for r in con2.execute("SELECT name FROM pragma_index_info(?)", (name,))}
        con2.close()
        assert columns == {"hash"}  # the texts are kept once, in the table


def test_terms_sharing_a_hash_are_refused_not_confused(tmp_path: Path) -> None:
    """A text whose hash another text holds (a collision, made here by writing the other
    text under that hash) is refused when written, not read back as the other."""
    db = tmp_path / "c.db"
    ledger = SQLiteLedger(db)
    ledger._db.execute("INSERT INTO ledger_terms (hash, text) VALUES (?, ?)",
                       (_term_hash("Mallory"), "Alice"))  # fmt: skip
    ledger.add(Claim("Mallory", "knows", "Bob", "ops"))
    with pytest.raises(LedgerError, match="share a hash"):
        ledger.flush()
    ledger._dirty.clear()
    ledger.close()


@pytest.mark.sqlite_only("the bytes are SQLite's dbstat pages")
def test_the_ledger_costs_under_a_hundred_bytes_a_short_document(tmp_path: Path) -> None:
    """Measured here at about 86 bytes a document (1,000 one-line documents through the
    rule extractor: ``ledger_edges``, ``ledger_terms``, ``ledger_agents`` and their
    indexes); 139 with the JSON bodies and the texts indexed."""
    per_doc = tier_bytes_per_document(tmp_path / "b.db", 1_000, ("ledger",))
    assert per_doc < 95, f"{per_doc:.0f} bytes a document"


def test_two_ledgers_on_one_new_store_agree_on_the_epoch(tmp_path: Path) -> None:
    """Two ledgers open an empty store; the one whose clock is later writes first and sets
    the epoch, the other's rows are recorded before it (a negative distance): a ledger
    opened afresh reads every edge of both exactly as they hold it."""
    db = tmp_path / "e.db"
    late = SQLiteLedger(db, clock=lambda: 1_796_229_093_403)
    early = SQLiteLedger(db, clock=lambda: 5)
    a = late.add(Claim("Ada", "knows", "Bo", "ops"))
    late.flush()
    b = early.add(_extracted("Bo", "knows", "Zoë"))
    c = early.add(Claim("Zoë", "likes", "chess", "ops"))
    early.close()
    d = late.retract(a.id, "withdrawn")
    late.close()
    fresh = SQLiteLedger(db)
    assert sorted((e.id, e) for e in fresh) == sorted((e.id, e) for e in (b, c, d))
    assert fresh._epoch == 1_796_229_093_403
    fresh.close()
