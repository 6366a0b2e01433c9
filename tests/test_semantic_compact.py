"""The compact layouts of the SQLite substrate (issue 16 §5: the store under 10x its text).

Each compact layout is checked against an independent oracle over thousands of random
inputs (the in-memory object it persists, or the in-memory driver), against files of the
earlier layout (converted or read as they are), and against a bound on the bytes it keeps.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import sqlite3
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hirmem.semantic.assertions import Edge, Source, SourceKind
from hirmem.semantic.errors import ProvError
from hirmem.semantic.postings import PART_BYTES, Postings
from hirmem.semantic.prov import Log, SQLiteLog, pack_segment, unpack_segment
from hirmem.semantic.stores.base import Match
from hirmem.semantic.stores.memory import MemoryGraph, MemoryVectors
from hirmem.semantic.stores.sqlite import PLAIN, SQLiteDocs, SQLiteGraph, SQLiteVectors
from hirmem.semantic.values import Chunk, Doc, Origin, Span, Triple, with_origin
from semantic_backends import semantic_backend, semantic_server  # noqa: F401  (fixtures)

# every test on SQLite and on PostgreSQL, but those that write an earlier layout into the
# SQLite file themselves (a server schema is only made in the current layout)
pytestmark = pytest.mark.usefixtures("semantic_backend")
EARLIER = pytest.mark.sqlite_only("it writes an earlier layout into the SQLite file itself")


def _steps(n: int, request: pytest.FixtureRequest) -> int:
    """``n`` random steps on SQLite, a fifth on PostgreSQL (each statement a round trip to
    the server: the same oracle, fewer inputs, so the module stays a matter of seconds)."""
    return n if request.getfixturevalue("semantic_backend") == "sqlite" else n // 5

# ---- the ledger ---------------------------------------------------------------------------------


def _edge(rng: random.Random) -> Edge:
    def source() -> Source:
        kinds: list[SourceKind] = ["extracted", "supplied", "derived"]
        kind = rng.choice(kinds)
        ref = rng.choice(["d1#0", "d1#12", "ops", "rule:t", "#", "a#b#3"])
        return Source(kind, ref, rng.choice(["", "d1", "a#b", ref.rpartition("#")[0]]),
                      rng.choice([-1, 0, 7]), rng.choice([-1, 5, 38]),
                      rng.choice(["", "extract/rules-1"]),
                      tuple(rng.sample(["a1", "b2", "c3"], rng.randint(0, 2))),
                      rng.choice([None, 0.0, 0.2, 1.0]))  # fmt: skip

    rec = rng.choice([1, 1_700_000_000_000])
    vf, vu = rng.choice([0, 5]), rng.choice([0, 9])
    spans = rng.choice([((rec, vf, vu),), ((rec, 0, 0), (rec + 1, vf, vu)), ((rec, 3, 4),)])
    return Edge(rng.choice(["7a5cda536dcc8a2e", "x"]), rng.choice(["S", "Zoë \"q\""]), "p",
                rng.choice(["O", "", "[1]"]), rng.randint(0, 4), rng.choice([0.2, 1.0]),
                tuple(source() for _ in range(rng.randint(0, 3))), vf, vu, rec,
                rng.choice([0, rec + 5]), rng.choice(["", "withdrawn", "0"]), spans)  # fmt: skip


def test_a_compact_ledger_row_reads_back_as_the_same_edge_and_is_smaller() -> None:
    rng = random.Random(1605)
    for _ in range(4000):
        e = _edge(rng)
        row = e.to_compact()
        assert Edge.from_row(e.id, row) == e, row
        assert len(row) < len(e.to_row())
        # a row of the earlier layout still reads (as it did)
        assert Edge.from_row(e.id, e.to_row()) == Edge.from_json({"id": e.id,
                                                                  **json.loads(e.to_row())})


def _extracted(s: str, p: str, o: str) -> Triple:
    text = f"{s} {p} {o}."
    chunk = Chunk("0123456789abcdef", 0, text, 0, len(text))
    return Triple(s, p, o, chunk, 0.9, span=Span.locate(chunk, text), evidence=text,
                  extractor="extract/rules-1")  # fmt: skip


@EARLIER
def test_a_ledger_file_of_the_earlier_layout_opens_and_is_written_compact(tmp_path: Path) -> None:
    from hirmem.semantic.assertions import Ledger, SQLiteLedger
    from hirmem.semantic.values import Claim

    db = tmp_path / "l.db"
    ledger = Ledger(clock=lambda: 5)
    a = ledger.add(Claim("Alice", "knows", "Bob", "ops"))
    b = ledger.add(Claim("Bob", "knows", "Carol", "ops"))
    t = ledger.add(_extracted("Carol", "knows", "Dan"))
    con = sqlite3.connect(db)  # the earlier layouts: keyed by id text, rows of either form
    con.execute("CREATE TABLE ledger (id TEXT PRIMARY KEY, body TEXT NOT NULL)")
    con.executemany("INSERT INTO ledger VALUES (?, ?)",
                    [(a.id, a.to_row()), (b.id, b.to_compact()), (t.id, t.to_compact())])
    con.commit()
    con.close()
    again = SQLiteLedger(db, clock=lambda: 6)
    assert again.get(a.id) == a and again.get(b.id) == b and again.get(t.id) == t
    again.retract(a.id, "gone")
    again.close()
    con = sqlite3.connect(db)
    tables = {n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    rows = con.execute("SELECT key, name, body FROM ledger_edges").fetchall()
    agents = con.execute("SELECT code, name FROM ledger_agents").fetchall()
    con.close()
    assert "ledger" not in tables and len(rows) == 3
    # keyed by the id as an integer (no id text kept), the extractor's name by its code
    assert all(isinstance(k, int) and n is None and isinstance(body, bytes)
               for k, n, body in rows)  # (packed: Edge.to_packed)
    assert agents == [(1, "extract/rules-1")] and not any(b"rules" in r[2] for r in rows)
    reopened = SQLiteLedger(db)
    assert reopened.get(a.id) == again.get(a.id) and reopened.get(t.id) == t


# ---- PROV ---------------------------------------------------------------------------------------


def _random_log(rng: random.Random, logs: list[Log], steps: int) -> None:
    """The same random writes into every log in ``logs`` (refused ones refused by all)."""
    agents: list[str] = []
    acts: list[str] = []
    ents: list[str] = []
    kinds = ["doc", "chunk", "assertion", "source", "claim", "decision", "thing"]
    for step in range(steps):
        r = rng.random()
        if r < 0.1 or not agents:
            kind = rng.choice(["person", "software", "organization"])
            call: tuple[str, tuple[object, ...], dict[str, object]] = (
                "agent", (f"{kind}:{rng.randrange(5)}", kind), {})
        elif r < 0.3 or not ents:
            used = rng.sample(ents, min(len(ents), rng.randint(0, 2)))
            call = ("activity", (f"activity:x:{rng.randrange(40)}", rng.choice(["extract",
                    "rule:r1", "ingest"]), rng.choice(agents), step, step + rng.randint(0, 3),
                    used), {})  # fmt: skip
        else:
            kind = rng.choice(kinds)
            prefix = kind if rng.random() < 0.8 else "other"
            ante = rng.sample(ents, min(len(ents), rng.randint(0, 3)))
            if kind in ("doc", "chunk", "assertion") and not ante and ents:
                ante = [ents[0]]
            call = ("entity", (f"{prefix}:{rng.randrange(120)}~é", kind,
                               rng.choice(["", *acts[-3:]]), ante),
                    {"attributed_to": rng.choice(["", "", *agents[-2:]]),
                     "attrs": rng.choice([None, {"choice": "keep", "rule": "r"}])})
        outcomes = []
        for log in logs:
            try:
                getattr(log, call[0])(*call[1], **call[2])
                outcomes.append("ok")
            except Exception as exc:  # the same refusal from each
                outcomes.append(type(exc).__name__)
        assert len(set(outcomes)) == 1, (step, call, outcomes)
        if outcomes[0] == "ok":
            name = str(call[1][0])
            {"agent": agents, "activity": acts, "entity": ents}[call[0]].append(name)


def test_a_compact_prov_log_reopens_as_the_log_it_was_and_renders_the_same_prov(
    tmp_path: Path,
) -> None:
    rng = random.Random(526)
    db = tmp_path / "p.db"
    oracle, stored = Log(), SQLiteLog(db)
    for burst in range(6):  # flushed in bursts, so refs cross flushes and point within one
        _random_log(rng, [oracle, stored], 500)
        stored.flush()
        if burst % 2:
            stored.close()
            stored = SQLiteLog(db)
            assert stored.entities == oracle.entities
    stored.close()
    again = SQLiteLog(db)
    assert again.entities == oracle.entities
    assert again.activities == oracle.activities
    assert again.agents == oracle.agents
    assert again.to_provjson() == oracle.to_provjson()
    for e in list(oracle.entities)[:50]:
        assert again.trace(e) == oracle.trace(e)
    again.close()


@EARLIER
def test_a_prov_file_of_the_earlier_layout_opens_unchanged_and_gains_compact_rows(
    tmp_path: Path,
) -> None:
    db = tmp_path / "p.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE prov (seq INTEGER PRIMARY KEY, tbl TEXT NOT NULL, id TEXT NOT "
                "NULL, body TEXT NOT NULL)")
    old = [("agent", "software:x", {"kind": "software"}),
           ("entity", "source:s", {"kind": "source"}),
           ("activity", "activity:ingest:1", {"kind": "ingest", "agent": "software:x",
                                               "start": 1, "end": 2, "used": ["source:s"]}),
           ("entity", "doc:d", {"kind": "doc", "generated_by": ["activity:ingest:1"],
                                "derived_from": ["source:s"]})]  # fmt: skip
    con.executemany("INSERT INTO prov (tbl, id, body) VALUES (?, ?, ?)",
                    [(t, i, json.dumps(b)) for t, i, b in old])
    con.commit()
    con.close()
    log = SQLiteLog(db)
    oracle = Log()
    for lg in (log, oracle):
        lg.agent("software:x", "software")
        lg.entity("source:s", "source")
        lg.activity("activity:ingest:1", "ingest", "software:x", 1, 2, ["source:s"])
        lg.entity("doc:d", "doc", "activity:ingest:1", ["source:s"])
        lg.entity("chunk:d#0", "chunk", "", ["doc:d"])
        lg.entity("doc:d", "doc", "", ["chunk:d#0"])  # a later derivation of an old entity
    log.close()
    again = SQLiteLog(db)
    assert again.entities == oracle.entities and again.activities == oracle.activities
    assert again.to_provn() == oracle.to_provn()
    con = sqlite3.connect(db)
    rows = con.execute("SELECT tbl, id, body FROM prov ORDER BY seq").fetchall()
    segments = [json.loads(unpack_segment(b))
                for (b,) in con.execute("SELECT body FROM prov_segments ORDER BY seq")]
    con.close()
    assert [r[0] for r in rows] == ["agent", "entity", "activity", "entity"]  # as they were
    # the new writes, one segment: references are ordinals of records (the earlier rows
    # first), not ids again; doc:d was written before, so it is named by its ordinal too
    assert segments == [[["e", "chunk:d#0", [0, [], [4]]], ["e", 4, [0, [], [5]]]]]
    again.close()


# ---- documents ----------------------------------------------------------------------------------


def _chunks(rng: random.Random, doc: Doc) -> list[Chunk]:
    raw = doc.text.encode()
    cuts = sorted({0, len(raw), *(rng.randrange(len(raw) + 1) for _ in range(3))})
    out = []
    for i, (a, b) in enumerate(itertools.pairwise(cuts)):
        try:
            text = raw[a:b].decode()
        except UnicodeDecodeError:
            continue
        if rng.random() < 0.1:  # a chunk whose text is not its span: kept as given
            text = "x" * (b - a)
        out.append(Chunk(doc.id, i, text, a, b))
    return out


def test_chunks_are_kept_by_reference_and_read_back_as_they_were(tmp_path: Path) -> None:
    rng = random.Random(16)
    store = SQLiteDocs(tmp_path / "d.db")
    held: dict[str, tuple[Doc, list[Chunk]]] = {}
    for step in range(1500):
        d = f"d{rng.randrange(60)}"
        if rng.random() < 0.15 and d in held:
            assert store.delete(d)
            del held[d]
            assert store.chunks(d) == [] and store.chunk(f"{d}#0") is None
            continue
        text = "".join(rng.choice(["Alice ", "knows ", "Zoë. ", "日本 ", "\n"])
                       for _ in range(rng.randint(1, 30)))  # fmt: skip
        digest = rng.choice(["ab" * 32, hashlib.sha256(text.encode()).hexdigest()])
        org = Origin(rng.choice([f"mem://{d}", "file:/x"]), 0,
                     len(text.encode()) + rng.choice([0, 0, 1]), step, digest,
                     rng.choice(["text/plain", "text/plain", "text/markdown", "0"]))  # fmt: skip
        meta = rng.choice([{"n": step}, with_origin({"container": "c"}, org),
                           {"origin": [0, 1, 2, 3, 4, 5]}, {"origin": {"ref": 0}}])
        doc = Doc(d, f"mem://{d}", text, meta)
        chunks = _chunks(rng, doc)
        store.put(doc, chunks)
        held[d] = (doc, chunks)
    for d, (doc, chunks) in held.items():
        assert store.get(d) == doc
        assert store.chunks(d) == chunks
        for c in chunks:
            assert store.chunk(c.id) == c
    con = store._db  # the file's, or its PostgreSQL schema's
    rows = con.execute("SELECT meta, cuts FROM docs_compact").fetchall()
    metas = [m for m, _ in rows]
    # an origin packed: its size and digest left out when they are the text's ("^")
    assert any(m.startswith("~") for m in metas) and any(m.startswith("{") for m in metas)
    assert any(m.startswith("^[") for m in metas)  # and a usual record's fields by place
    assert not any("mem://" in m for m in metas if m[0] in "~^")  # the source, held once
    assert not any("text/plain" in m for m in metas if m[0] == "^")  # the usual type, as 0
    # a row written before the usual type was 0 reads as it did
    org = Origin("mem://old", 0, 5, 1, hashlib.sha256(b"hello").hexdigest(), "text/plain")
    old = Doc("0123456789abcdef", "mem://old", "hello", with_origin({"container": "c"}, org))
    con.execute("INSERT INTO docs_compact (key, name, source, text, meta, cuts) VALUES "
                "(?, NULL, ?, ?, ?, NULL)", (store._codes.code(0x0123456789ABCDEF), old.source,
                                             old.text, '^[0,0,1,"text/plain","c"]'))  # fmt: skip
    assert store.get(old.id) == old
    cuts = [c for _, cut in rows for c in ([] if cut is None else json.loads(cut))]
    own = sum(1 for c in cuts if len(c) == 4 and c[3] is not None)
    total = len(cuts) + sum(1 for _, cut in rows if cut is None)
    assert 0 < own < total / 4  # only the chunks that are not their span keep a text
    store.close()


def test_sources_and_containers_are_words_and_read_back_as_written(tmp_path: Path) -> None:
    """A source's directory and a usual record's container are words of ``docs_words``
    (the row holds their numbers), its all-zero origin fields the empty text; every
    document reads back as it was written (the oracle: the documents themselves)."""
    rng = random.Random(1616)
    store = SQLiteDocs(tmp_path / "d.db")
    held: dict[str, Doc] = {}
    for step in range(1200):
        d = f"{rng.getrandbits(64):016x}" if rng.random() < 0.5 else f"d{rng.randrange(80)}"
        if rng.random() < 0.1 and d in held:
            assert store.delete(d) and store.get(d) is None
            del held[d]
            continue
        source = rng.choice(["bench://para/", "file:/home/é/", "a/", "abc/", "", "/",
                             "mem://x/y//"]) + rng.choice(["", "0", str(step), "ö.md", "/"])
        text = "".join(rng.choice(["Alice ", "Zoë. ", "日本 ", "\n"])
                       for _ in range(rng.randint(1, 12)))  # fmt: skip
        raw = text.encode()
        org = Origin(rng.choice([source, "file:/x"]), rng.choice([0, 0, 7]),
                     len(raw) + rng.choice([0, 0, 0, 1]), rng.choice([0, 0, step]),
                     hashlib.sha256(raw).hexdigest(),
                     rng.choice(["text/plain", "text/plain", "text/markdown"]))  # fmt: skip
        meta = rng.choice([with_origin({"container": rng.choice(["bench", "c", "ß"])}, org),
                           with_origin({}, org), with_origin({"container": 3}, org),
                           with_origin({"container": "c", "n": 1}, org), {"n": step}])
        doc = Doc(d, source, text, meta)
        store.put(doc, [Chunk(d, 0, text, 0, len(raw))])
        held[d] = doc
    for d, doc in held.items():
        assert store.get(d) == doc
    con = store._db
    rows = con.execute("SELECT d.source, d.meta, d.dir, d.box, w.word FROM docs_compact d "
                       "LEFT JOIN docs_words w ON w.id = d.dir").fetchall()  # fmt: skip
    assert any(m == "" and b is not None for _, m, _, b, _ in rows)  # the usual record
    assert all(w is None or ("/" not in t and w.endswith("/")) for t, _, _, _, w in rows)
    assert not any("bench" in m for _, m, _, _, _ in rows if m[:1] in ("", "^"))
    words = [w for (w,) in con.execute("SELECT word FROM docs_words")]
    assert len(words) == len(set(words)) < 20  # each word once
    store.close()


@EARLIER
def test_docs_and_places_of_the_layout_before_the_words_read_as_they_did(
    tmp_path: Path,
) -> None:
    """A file of the layout before: ``docs_compact`` without ``dir`` and ``box`` (the
    source spelled out, the container in ``meta``), a place's version its 64-bit id. Opened,
    its rows are written again in the words and read as they did, the places' versions
    are coded, and new rows use the words."""
    db = tmp_path / "d.db"
    raw = b"Alice knows Bob."
    org = Origin("bench://para/0", 0, len(raw), 0, hashlib.sha256(raw).hexdigest(),
                 "text/plain")  # fmt: skip
    old = Doc("0123456789abcdef", "bench://para/0", raw.decode(),
              with_origin({"container": "bench"}, org))  # fmt: skip
    con = sqlite3.connect(db)
    con.executescript("""
        CREATE TABLE source_codes (id INTEGER PRIMARY KEY, key INTEGER UNIQUE NOT NULL);
        CREATE TABLE source_coded (col TEXT PRIMARY KEY);
        INSERT INTO source_coded VALUES ('docs_compact.key');
        INSERT INTO source_codes VALUES (1, 81985529216486895);
        CREATE TABLE docs_compact (key INTEGER PRIMARY KEY, name TEXT,
            source TEXT NOT NULL, text TEXT NOT NULL, meta TEXT NOT NULL, cuts TEXT);
        INSERT INTO docs_compact VALUES (1, NULL, 'bench://para/0', 'Alice knows Bob.',
            '^[0,0,0,0,"bench"]', NULL);
        CREATE TABLE docs_places (key INTEGER PRIMARY KEY, name TEXT, current INTEGER,
            props TEXT);
        INSERT INTO docs_places VALUES (-5, NULL, 81985529216486895, NULL);
        INSERT INTO docs_places VALUES (-6, NULL, NULL, '{"current":"x","versions":["x"]}');
        INSERT INTO docs_places VALUES (-7, NULL, -2, NULL);
    """)  # (0x0123456789abcdef is 81985529216486895; -2 a version never written)
    con.commit()
    con.close()
    store = SQLiteDocs(db)
    assert store.get(old.id) == old
    places = {k: store.place(k) for k in ("fffffffffffffffb", "fffffffffffffffa",
                                          "fffffffffffffff9")}  # fmt: skip
    assert places == {"fffffffffffffffb": {"current": old.id},
                      "fffffffffffffffa": {"current": "x", "versions": ["x"]},
                      "fffffffffffffff9": {"current": "fffffffffffffffe"}}  # fmt: skip
    new = Doc("00000000000000aa", "bench://para/1", "Zoë.", with_origin(
        {"container": "bench"}, Origin("bench://para/1", 0, 5, 0,
                                       hashlib.sha256("Zoë.".encode()).hexdigest(), PLAIN)))
    store.put(new, [Chunk(new.id, 0, "Zoë.", 0, 5)])
    store.set_place("00000000000000bb", {"current": new.id})
    store.close()
    again = SQLiteDocs(db)  # (converted once: a second open changes nothing)
    assert again.get(old.id) == old and again.get(new.id) == new
    assert again.place("00000000000000bb") == {"current": new.id}
    assert again.place("fffffffffffffffb") == {"current": old.id}
    again.close()
    con = sqlite3.connect(db)
    currents = {k: c for k, c in con.execute("SELECT key, current FROM docs_places")}
    row = con.execute("SELECT source, meta, dir, box FROM docs_compact WHERE key = "
                      "(SELECT id FROM source_codes WHERE key = 170)").fetchone()  # fmt: skip
    was = con.execute("SELECT source, meta, dir, box FROM docs_compact WHERE key = 1").fetchone()
    con.close()
    assert was == ("0", "", row[2], row[3])  # the same words as the new row's
    assert currents[-5] == 1 and currents[-6] is None and 0 < currents[-7] < 10
    assert 0 < currents[0xBB] < 10 and row[:2] == ("1", "") and None not in row


@EARLIER
def test_a_docs_file_of_the_earlier_layout_is_converted_when_opened(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    con = sqlite3.connect(db)
    con.executescript("""
        CREATE TABLE docs (id TEXT PRIMARY KEY, source TEXT NOT NULL, text TEXT NOT NULL,
            meta TEXT NOT NULL);
        CREATE TABLE chunks (doc_id TEXT NOT NULL, idx INTEGER NOT NULL, text TEXT NOT NULL,
            start INTEGER NOT NULL, end_ INTEGER NOT NULL, PRIMARY KEY (doc_id, idx))
            WITHOUT ROWID;
        INSERT INTO docs VALUES ('d', 'mem://d', 'Alice knows Bob. Zoë lives in Oslo.', '{}');
        INSERT INTO chunks VALUES ('d', 0, 'Alice knows Bob. ', 0, 17);
        INSERT INTO chunks VALUES ('d', 1, 'Zoë lives in Oslo.', 17, 36);
    """)
    con.close()
    store = SQLiteDocs(db)
    assert [c.text for c in store.chunks("d")] == ["Alice knows Bob. ", "Zoë lives in Oslo."]
    assert store.chunk("d#1") == Chunk("d", 1, "Zoë lives in Oslo.", 17, 36)
    store.close()
    con = sqlite3.connect(db)
    tables = {n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    cuts = con.execute("SELECT cuts FROM docs_compact").fetchall()
    con.close()
    assert not tables & {"chunks", "doc_chunks", "docs"} and cuts == [("[[0,17],[17,36]]",)]


# ---- the graph ----------------------------------------------------------------------------------


def test_the_integer_keyed_graph_answers_as_the_memory_graph(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    rng = random.Random(8)
    names = [f"n{i}" for i in range(25)] + ["doc:é", "a#1", "lineage:mem://x"]
    mine, oracle = SQLiteGraph(tmp_path / "g.db"), MemoryGraph()
    for step in range(_steps(3000, request)):
        r = rng.random()
        a, b = rng.choice(names), rng.choice(names)
        label = rng.choice(["has_chunk", "version", "superseded_by"])
        if r < 0.5:
            mine.edge(a, b, label)
            oracle.edge(a, b, label)
        elif r < 0.75:
            props = {rng.choice(["source", "current"]): rng.choice(["x", 1, None])}
            mine.node(a, props)
            oracle.node(a, props)
        elif r < 0.8:
            assert mine.delete(a) == oracle.delete(a), step
        assert mine.props(a) == oracle.props(a), step
        for lb in (None, label):
            assert mine.out(a, lb) == oracle.out(a, lb), (step, a, lb)
    mine.close()
    reopened = SQLiteGraph(tmp_path / "g.db")
    for n in names:
        assert reopened.out(n) == oracle.out(n) and reopened.props(n) == oracle.props(n)
    reopened.close()


@EARLIER
def test_a_graph_file_of_the_earlier_layout_is_converted_when_opened(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    con = sqlite3.connect(db)
    con.executescript("""
        CREATE TABLE nodes (id TEXT PRIMARY KEY, props TEXT NOT NULL);
        CREATE TABLE edges (src TEXT NOT NULL, dst TEXT NOT NULL, label TEXT NOT NULL,
            seq INTEGER PRIMARY KEY AUTOINCREMENT, UNIQUE (src, dst, label));
        INSERT INTO nodes VALUES ('lineage:x', '{"current":"d2"}'), ('d1', '{}'), ('d2', '{}');
        INSERT INTO edges (src, dst, label) VALUES ('lineage:x', 'd2', 'version');
        INSERT INTO edges (src, dst, label) VALUES ('lineage:x', 'd1', 'version');
    """)
    con.close()
    g = SQLiteGraph(db)
    assert g.out("lineage:x", "version") == ["d2", "d1"]  # first-linked order kept
    assert g.props("lineage:x") == {"current": "d2"}
    g.close()
    con = sqlite3.connect(db)
    tables = {n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    con.close()
    assert not {"nodes", "edges"} & tables


# ---- the vector filter index --------------------------------------------------------------------


@pytest.mark.parametrize("indexed", [None, ("subject", "container")])
def test_the_dictionary_encoded_filter_index_answers_as_the_memory_driver(
    indexed: tuple[str, ...] | None, request: pytest.FixtureRequest
) -> None:
    rng = random.Random(99)
    mine, oracle = SQLiteVectors(), MemoryVectors()
    if indexed is not None:
        mine.index_only(indexed)
    ids = [f"v{i}" for i in range(80)]
    for step in range(_steps(1500, request)):
        i = rng.choice(ids)
        if rng.random() < 0.2:
            assert mine.delete(i) == oracle.delete(i)
        else:
            vec = [rng.random() + 0.01 for _ in range(4)]
            meta = {"subject": rng.choice(["a", "b", "c"]), "container": rng.choice(["x", "y"]),
                    "n": rng.choice([1, 1.0, 2, True]), "tags": rng.sample(["p", "q", "r"], 2)}
            mine.put(i, vec, meta)
            oracle.put(i, vec, meta)
        flt: dict[str, Any] = rng.choice([
            {"subject": "a"}, {"container": {"in": ["x"]}, "subject": "b"}, {"n": 1},
            {"tags": "q", "container": "y"}, {"n": {"ge": 2}}, {"subject": {"gt": "a"}}])
        q = [rng.random() for _ in range(4)]
        got = [(m.id, round(m.score, 5)) for m in mine.near(q, 100, flt)]
        want = [(m.id, round(m.score, 5)) for m in oracle.near(q, 100, flt)]
        assert sorted(got) == sorted(want), (step, flt)
    for i in ids:  # every term leaves with its last vector: the term table is bounded
        mine.delete(i)
    assert mine._db.execute("SELECT count(*) FROM vector_terms").fetchone()[0] == 0
    assert mine._db.execute("SELECT count(*) FROM vector_posts").fetchone()[0] == 0


def test_postings_hold_the_sets_a_dict_of_sets_holds(tmp_path: Path) -> None:
    """:class:`Postings` as the vector store uses it (one id at a time, row 0 allowed,
    :meth:`~Postings.held` and :meth:`~Postings.clear`) against a dict of sets over random
    adds and removes: rows mostly rising (appended), some anywhere (put in place, parts
    split), sets of thousands of rows (many parts)."""
    rng = random.Random(1717)
    con = sqlite3.connect(tmp_path / "p.db", isolation_level=None)
    posts = Postings(con, "posts", flagged=False)
    posts.create()
    oracle: dict[int, set[int]] = {}
    top = 0
    for step in range(6000):
        term = rng.choice([1, 1, 1, 2, 3, 300])
        if rng.random() < 0.7:
            top += rng.choice([1, 1, 2, 200])
            row = top if rng.random() < 0.8 else rng.randrange(top + 1)
            posts.add([(term, row, 0)])
            oracle.setdefault(term, set()).add(row)
        else:
            held = sorted(oracle.get(term, ())) or [rng.randrange(10)]
            row = rng.choice(held)
            posts.remove([(term, row)])
            oracle.get(term, set()).discard(row)
        if step % 500 == 0 or step > 5990:
            for t in (1, 2, 3, 300, 9):
                assert set(posts.ids([t]).tolist()) == oracle.get(t, set()), (step, t)
                assert posts.held(t) == bool(oracle.get(t))
            assert set(posts.ids([1, 3]).tolist()) == oracle.get(1, set()) | oracle.get(3, set())
    parts = con.execute("SELECT key, last, ids FROM posts").fetchall()
    assert all(len(g) <= PART_BYTES for _, _, g in parts)
    assert sum(1 for t, _, _ in parts if t == 1) > 2  # a large set in many parts
    assert all(last in oracle[t] for t, last, _ in parts)  # each part ends at a row it holds
    with pytest.raises(ValueError, match="out of range"):
        posts.add([(1, -1, 0)])
    posts.clear()
    assert posts.ids([1, 2, 3, 300]).tolist() == []
    con.close()


@EARLIER
def test_a_vector_file_with_a_row_per_term_is_converted_when_opened(tmp_path: Path) -> None:
    """A file of the layout before the postings (``vector_meta``, a row of (term code, row
    number) per term of a vector) opens with its index as postings, answering every filter
    as before."""
    rng = random.Random(6)
    db = tmp_path / "v.db"
    store, oracle = SQLiteVectors(db), MemoryVectors()
    for i in range(200):
        vec = [rng.random() + 0.1, rng.random(), rng.random()]
        meta = {"subject": rng.choice(["a", "b", "c"]), "container": rng.choice(["x", "y"])}
        store.put(f"d{i}#0", vec, meta)
        oracle.put(f"d{i}#0", vec, meta)
    def posted(s: SQLiteVectors) -> set[tuple[str, str, int]]:  # (key, term, row)
        return {(k, v, r) for c, k, v in s._db.execute("SELECT code, key, value FROM "
                                                       "vector_terms").fetchall()
                for r in s._posts.ids([c]).tolist()}  # fmt: skip

    held = posted(store)
    assert len(held) == 400
    rows = {(c, r) for (c,) in store._db.execute("SELECT code FROM vector_terms").fetchall()
            for r in store._posts.ids([c]).tolist()}  # fmt: skip
    store.close()
    con = sqlite3.connect(db)
    con.executescript("""
        CREATE TABLE vector_meta (term INTEGER NOT NULL, id INTEGER NOT NULL,
            PRIMARY KEY (term, id)) WITHOUT ROWID;
        DROP TABLE vector_posts;
    """)
    con.executemany("INSERT INTO vector_meta VALUES (?, ?)", sorted(rows))
    con.commit()
    con.close()
    again = SQLiteVectors(db)
    q = [1.0, 0.2, 0.1]
    for flt in (None, {"subject": "a"}, {"container": {"in": ["y"]}, "subject": "b"}):
        assert ([(m.id, m.meta) for m in again.near(q, 300, flt)]
                == [(m.id, m.meta) for m in oracle.near(q, 300, flt)]), flt  # fmt: skip
    tables = {n for (n,) in again._db.execute("SELECT name FROM sqlite_master")}
    assert "vector_meta" not in tables and posted(again) == held  # (terms coded again)
    again.close()


# ---- triples and entity tables ------------------------------------------------------------------


def test_the_dictionary_encoded_triples_answer_as_the_memory_driver(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from hirmem.semantic.stores.memory import MemoryTriples
    from hirmem.semantic.stores.sqlite import SQLiteTriples

    rng = random.Random(4)
    terms = ["Alice", "alice", "ALICE", "Bob", "knows", "KNOWS", "lives in", "Oslo",
             "Zoë", "zoë", "İstanbul", "a\u00a0b", "a b"]  # fmt: skip
    mine, oracle = SQLiteTriples(tmp_path / "t.db"), MemoryTriples()
    for step in range(_steps(3000, request)):
        s, p, o = (rng.choice(terms) for _ in range(3))
        r = rng.random()
        if r < 0.5:
            assert mine.assert_triple(s, p, o) == oracle.assert_triple(s, p, o)
        elif r < 0.6:
            n = mine.assert_many([(s, p, o), (o, p, s)])
            assert n == oracle.assert_many([(s, p, o), (o, p, s)]), step
        elif r < 0.8:
            assert mine.delete(s, p, o) == oracle.delete(s, p, o), step
        q = [rng.choice([None, *terms]) for _ in range(3)]
        assert sorted(mine.match(*q)) == sorted(oracle.match(*q)), (step, q)
        assert len(mine) == len(oracle)
    mine.close()
    again = SQLiteTriples(tmp_path / "t.db")
    assert sorted(again.match()) == sorted(oracle.match())
    for s, p, o in oracle.match():
        again.delete(s, p, o)
    assert again._db.execute("SELECT count(*) FROM triple_terms").fetchone()[0] == 0
    again.close()


@EARLIER
def test_a_triples_file_of_the_earlier_layout_is_converted_when_opened(tmp_path: Path) -> None:
    from hirmem.protocol.identity import triple_id
    from hirmem.semantic.stores.sqlite import SQLiteTriples

    db = tmp_path / "t.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE triples (id TEXT PRIMARY KEY, s TEXT NOT NULL, p TEXT NOT NULL, "
                "o TEXT NOT NULL, fs TEXT NOT NULL, fp TEXT NOT NULL, fo TEXT NOT NULL) "
                "WITHOUT ROWID")
    con.execute("INSERT INTO triples VALUES (?, 'Alice', 'knows', 'Bob', 'alice', 'knows', "
                "'bob')", (triple_id("Alice", "knows", "Bob"),))
    con.commit()
    con.close()
    store = SQLiteTriples(db)
    assert store.match("ALICE") == [("Alice", "knows", "Bob")] and len(store) == 1
    store.close()
    con = sqlite3.connect(db)
    tables = {n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    con.close()
    assert "triples" not in tables


def test_the_substrates_triples_are_its_ledgers_edges_and_answer_as_the_memory_driver(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Claims, retractions and erasures at random: the substrate's triple store (a view of
    its ledger, nothing kept twice) answers every pattern as a memory triple store given
    the same writes, before and after the file is opened again."""
    from hirmem.semantic.errors import Erased
    from hirmem.semantic.stores.memory import MemoryTriples
    from hirmem.semantic.substrate import Substrate
    from hirmem.semantic.values import Claim

    rng = random.Random(1616)
    terms = ["Alice", "alice", "ALICE", "Bob", "knows", "KNOWS", "lives in", "Oslo", "Zoë",
             "zoë", "İstanbul", "a\u00a0b", "a b"]  # fmt: skip
    db = tmp_path / "s.db"
    sub, oracle = Substrate.open(db), MemoryTriples()
    for step in range(_steps(1500, request)):
        s, p, o = (rng.choice(terms) for _ in range(3))
        r = rng.random()
        held = list(sub.ledger)
        if r < 0.6:
            try:
                sub.claim(Claim(s, p, o, "tester"))
                oracle.assert_triple(s, p, o)
            except Erased:
                pass
        elif r < 0.75 and held:
            sub.retract(rng.choice(held).id, "withdrawn")  # kept: still a triple
        elif held:
            e = rng.choice(held)
            sub.erase(e.id, "request")
            oracle.delete(e.subject, e.predicate, e.object)
        q = [rng.choice([None, *terms]) for _ in range(3)]
        assert sorted(sub.triples.match(*q)) == sorted(oracle.match(*q)), (step, q)
        assert len(sub.triples) == len(oracle)
    sub.close()
    again = Substrate.open(db)
    assert sorted(again.triples.match()) == sorted(oracle.match())
    again.close()
    if request.getfixturevalue("semantic_backend") == "sqlite":  # and nothing kept twice
        con = sqlite3.connect(db)
        tables = {n for (n,) in con.execute("SELECT name FROM sqlite_master")}
        con.close()
        assert not {t for t in tables if t.startswith("triple")}, tables


@EARLIER
def test_the_triple_tables_of_the_earlier_layout_are_dropped_when_a_substrate_opens(
    tmp_path: Path,
) -> None:
    from hirmem.semantic.stores.sqlite import SQLiteTriples
    from hirmem.semantic.substrate import Substrate
    from hirmem.semantic.values import Claim

    db = tmp_path / "s.db"
    sub = Substrate.open(db)
    sub.claim(Claim("Alice", "knows", "Bob", "tester"))
    sub.close()
    earlier = SQLiteTriples(db)  # the triples as the earlier layout kept them, beside
    earlier.assert_triple("Alice", "knows", "Bob")
    earlier.close()
    again = Substrate.open(db)
    assert again.triples.match("ALICE") == [("Alice", "knows", "Bob")]
    again.close()
    con = sqlite3.connect(db)
    tables = {n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    con.close()
    assert not tables & {"triple_rows", "triple_terms", "triples"}


@EARLIER
def test_the_entities_table_of_the_earlier_rowid_layout_is_rebuilt_without_rowid(
    tmp_path: Path,
) -> None:
    from hirmem.semantic.entities import EntityIndex

    db = tmp_path / "e.db"
    con = sqlite3.connect(db)
    con.executescript("""
        CREATE TABLE entities (id TEXT PRIMARY KEY, name TEXT NOT NULL);
        CREATE TABLE entity_aliases (alias TEXT NOT NULL, entity TEXT NOT NULL,
            container TEXT NOT NULL, source TEXT NOT NULL,
            PRIMARY KEY (alias, entity, container, source));
        INSERT INTO entities VALUES ('e1', 'bob');
        INSERT INTO entity_aliases VALUES ('bob', 'e1', 'c', 'd1'), ('robert', 'e1', 'c', 'd1');
    """)
    con.close()
    index = EntityIndex(str(db))
    assert index.names("Bob", {"c"}) == {"bob", "robert"}
    index.close()
    con = sqlite3.connect(db)
    ddl = {n: sql for n, sql in con.execute("SELECT name, sql FROM sqlite_master")}
    rows = con.execute("SELECT * FROM entities").fetchall()
    con.close()
    assert "WITHOUT ROWID" in ddl["entities"] and rows == [("e1", "bob")]
    assert not any(n.endswith("_earlier") for n in ddl)


# ---- dense assertion vectors --------------------------------------------------------------------


class _DenseEmbedder:
    """A dense embedding (as MiniLM's is): a fixed random projection of the hashed one."""

    name = "dense-test"
    dim = 96

    def __init__(self) -> None:
        import numpy as np

        from hirmem.semantic.retrieve import Embedder

        self._hashed = Embedder(512)
        self._proj = np.random.default_rng(5).standard_normal((512, self.dim)).astype("float32")

    def embed(self, text: str) -> Any:
        import numpy as np

        v = self._hashed.embed(text) @ self._proj
        n = float(np.linalg.norm(v))
        return v / n if n else v


def test_dense_assertion_vectors_are_kept_in_int8_steps_and_still_answer(tmp_path: Path) -> None:
    from hirmem.semantic.extract import RuleExtractor
    from hirmem.semantic.ingest import MemoryIngester
    from hirmem.semantic.stages import Pipeline
    from hirmem.semantic.substrate import Substrate

    people = ["Alice Smith", "Bob Jones", "Carol Novak", "Dora Silva"]
    cities = ["Paris", "Lagos", "Osaka", "Lima", "Oslo"]
    texts = {f"n{i}": f"{people[i % 4]} lives in {cities[i % 5]}." for i in range(40)}
    db = tmp_path / "dense.db"
    sub = Substrate.open(db, passage_embedder=_DenseEmbedder())
    pipeline = Pipeline(MemoryIngester(texts), extractor=RuleExtractor())
    for key in texts:
        sub.ingest(pipeline, key)
    hits = sub.ask("Where does Carol Novak live?", 3).hits
    assert hits and all(h.evidence.startswith("Carol Novak lives in") for h in hits)
    assert isinstance(sub.vectors, SQLiteVectors)
    sizes = [len(b) for (b,) in sub.vectors._db.execute("SELECT vec FROM vectors")]
    sub.close()
    assert sizes and max(sizes) <= _DenseEmbedder.dim + 10  # not 4 bytes per entry


def test_vector_metadata_rows_name_their_shape_and_read_back_as_written(tmp_path: Path) -> None:
    rng = random.Random(12)
    db = tmp_path / "v.db"
    store = SQLiteVectors(db)
    held: dict[str, dict[str, Any]] = {}
    keys = ["subject", "container", "n", "tags", "é", "[", "{"]
    for i in range(600):
        meta = {k: rng.choice(["a", 1, 2.5, None, True, ["x", "y"], "[{"])
                for k in rng.sample(keys, rng.randint(0, 4))}  # fmt: skip
        store.put(f"v{i}", [rng.random() + 0.1, rng.random()], meta)
        held[f"v{i}"] = meta
    store.close()
    again = SQLiteVectors(db)
    got = {m.id: m.meta for m in again.near([1.0, 0.0], 10_000)}
    assert got == held
    assert all(list(got[i]) == list(held[i]) for i in held)  # key order kept too
    texts = [t for (t,) in again._db.execute("SELECT meta FROM vectors")]
    assert not any('"subject"' in t for t in texts)  # the key names are in the shapes
    again.close()


def test_ids_by_prefix_are_the_ids_that_begin_with_it() -> None:
    rng = random.Random(3)
    store = SQLiteVectors()
    alphabet = ["a", "b", "@", "#", "é", "\U0010ffff", "0"]
    ids = {"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 5))) for _ in range(400)}
    # chunk ids of one-chunk documents (held as their document's integer, no text), on both
    # sides of 0x8000000000000000, and their neighbours that are kept by name
    hexes = ["0123456789abcdef", "8000000000000000", "7fffffffffffffff", "ffffffffffffffff",
             "0000000000000000", "a0a0a0a0a0a0a0a0", "abab000000000000"]
    ids |= {f"{h}#{n}" for h in hexes for n in ("0", "1", "00")} | {"0123456789ABCDEF#0"}
    for i in ids:
        store.put(i, [1.0, 0.5], {"k": i})
    prefixes = [h[:n] + t for h in hexes for n in (1, 2, 8, 15, 16) for t in ("",)]
    prefixes += [f"{h}{t}" for h in hexes for t in ("#", "#0", "#1", "#00", "g")]
    for at in range(500 + len(prefixes)):
        prefix = (prefixes[at - 500] if at >= 500 else
                  "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 3))))
        got = {m.id for m in store.with_prefix(prefix)}
        assert got == {i for i in ids if i.startswith(prefix)}, prefix
        assert all(m.meta == {"k": m.id} for m in store.with_prefix(prefix))


def test_erasure_finds_an_assertions_vectors_by_their_ids_not_a_filter_term(
    tmp_path: Path,
) -> None:
    from hirmem.semantic.extract import RuleExtractor
    from hirmem.semantic.ingest import MemoryIngester
    from hirmem.semantic.stages import Pipeline
    from hirmem.semantic.substrate import Substrate

    texts = {f"n{i}": f"Alice Smith lives in City{i}. Bob Jones knows Alice Smith."
             for i in range(6)}  # fmt: skip
    sub = Substrate.open(tmp_path / "s.db")
    pipeline = Pipeline(MemoryIngester(texts), extractor=RuleExtractor())
    for key in texts:
        sub.ingest(pipeline, key)
    store = sub.vectors
    assert isinstance(store, SQLiteVectors)
    keys = {k for (k,) in store._db.execute("SELECT DISTINCT key FROM vector_terms")}
    assert keys == {"subject", "container"}  # no term per assertion, none per document

    def listing(tid: str) -> list[str]:  # the entries that list assertion ``tid``
        return [m.id for m in store.near([1.0] * 1024, 1000)
                if any(a[0] == tid for a in sub.retriever.assertions(m.id, m.meta))]

    lives = next(e for e in sub.ledger if e.predicate == "lives_in")
    knows = next(e for e in sub.ledger if e.predicate == "knows")
    before = len(store)
    held = len(listing(knows.id))
    assert held == 6 and len(listing(lives.id)) == 1
    scans: list[object] = []  # every near() erasure makes (a pass over the entries)
    near = store.near

    def counted(*a: Any, **kw: Any) -> list[Any]:
        scans.append(a)
        return near(*a, **kw)

    store.near = counted  # type: ignore[method-assign]
    sub.erase(knows.id, "request")
    store.near = near  # type: ignore[method-assign]
    assert listing(knows.id) == []
    # one vector per chunk: the chunks still hold their other assertion, so they stay
    assert len(store) == before
    assert len(listing(lives.id)) == 1
    assert scans == []  # its chunks found by id (the ledger's sources), not by a scan
    sub.erase(lives.id, "request")
    assert len(store) == before - 1  # the chunk left listing nothing is gone
    sub.close()


@EARLIER
def test_a_vector_file_keyed_by_id_text_is_converted_when_opened(tmp_path: Path) -> None:
    """A file of the earlier layout (``vectors`` keyed by id text, its filter index naming
    rowids) opens with every entry as it was, keyed by integers, and answers every filter
    as before; a one-chunk document's entry keeps no id text."""
    rng = random.Random(5)
    db = tmp_path / "v.db"
    con = sqlite3.connect(db)
    con.executescript("""
        CREATE TABLE vectors (id TEXT PRIMARY KEY, vec BLOB NOT NULL, meta TEXT NOT NULL);
        CREATE TABLE vector_meta (term INTEGER NOT NULL, id INTEGER NOT NULL,
            PRIMARY KEY (term, id)) WITHOUT ROWID;
        CREATE TABLE vector_terms (term INTEGER PRIMARY KEY, key TEXT NOT NULL,
            value TEXT NOT NULL);
        INSERT INTO vector_terms VALUES (123456789, 'subject', '["s","a"]');
        INSERT INTO vector_meta VALUES (123456789, 1);
    """)
    from hirmem.semantic.stores.packed import pack

    oracle = MemoryVectors()
    ids = [f"{rng.getrandbits(64):016x}#0" for _ in range(60)] + [f"d{i}#3" for i in range(20)]
    for i in ids:
        vec = np.asarray([rng.random() + 0.1, rng.random(), rng.random()], dtype=np.float32)
        vec /= np.linalg.norm(vec)
        meta = {"subject": rng.choice(["a", "b", "c"]), "container": rng.choice(["x", "y"])}
        con.execute("INSERT INTO vectors VALUES (?, ?, ?)",
                    (i, pack(vec), json.dumps(meta, separators=(",", ":"))))  # fmt: skip
        oracle.put(i, vec, meta)
    con.commit()
    con.close()
    again = SQLiteVectors(db)
    q = [1.0, 0.2, 0.1]
    for flt in (None, {"subject": "a"}, {"container": {"in": ["y"]}, "subject": "b"}):
        assert ([(m.id, m.meta) for m in again.near(q, 100, flt)]
                == [(m.id, m.meta) for m in oracle.near(q, 100, flt)]), flt  # fmt: skip
    assert again.get(ids[0]) is not None and again.get(ids[-1]) is not None
    names = [n for (n,) in again._db.execute("SELECT name FROM vectors")]
    assert names.count(None) == 60 and sorted(n for n in names if n) == sorted(ids[60:])
    assert [m.id for m in again.with_prefix(ids[0][:17])] == [ids[0]]
    # the filter index of the layout keyed by a hash of each term is built again, with codes
    codes = [c for (c,) in again._db.execute("SELECT code FROM vector_terms")]
    assert sorted(codes) == list(range(1, len(codes) + 1)) and len(codes) == 5
    again.close()


def _tricky_meta(rng: random.Random) -> dict[str, Any]:
    """Metadata a vector entry may hold: some of it codable (indexed keys whose values are
    their terms' own values), some not (a whole float, a nested list, a key not indexed)."""
    choices: dict[str, list[Any]] = {
        "subject": [rng.sample(["ann lee", "bo", "Zoë", "", "[1]"], n) for n in range(4)],
        "container": ["x", "y", "bench"],
        "n": [0, 7, -3, 2**63 + 5, 2.5, 1.0, -0.0, True, False, None],
        "text": ["Ann lives in Oslo.", "é\u0000?"],
        "tags": [["p", "q"], [], [["nested"]], ("t", 1), "p"],
    }
    keys = rng.sample(list(choices), rng.randint(0, len(choices)))
    return {k: rng.choice(choices[k]) for k in keys}


def _codable(meta: dict[str, Any], indexed: set[str]) -> bool:
    """Whether ``meta`` reads back exactly from its terms' codes (the oracle's rule)."""
    def own(v: Any) -> bool:
        return v is None or type(v) in (str, bool, int) or (
            type(v) is float and not v.is_integer())  # fmt: skip
    return set(meta) <= indexed and all(
        all(own(x) for x in v) if isinstance(v, list | tuple) else own(v)
        for v in meta.values())  # fmt: skip


def test_vectors_of_the_seq_numbered_text_layout_are_keyed_and_coded_when_opened(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A store of the layout before (rows numbered by ``seq``, a unique index on ``key``,
    every row's metadata as text, no ``codes`` column; made here by writing the text the
    earlier writer wrote into that table) opens keyed by ``key``, numbers kept, with
    each entry's metadata as the codes of its filter terms where they give back the very
    dict (key order, list or scalar, int or float), as text otherwise, and reads and
    filters as the in-memory driver; so it does after the indexed keys change (the codes
    are written again) and after reopening."""
    from hirmem.semantic.stores.sqlite import _vector_key

    rng = random.Random(16)
    path = tmp_path / "v.db"
    store, oracle = SQLiteVectors(path), MemoryVectors()
    store.index_only(["subject", "container", "n", "tags"])
    metas: dict[str, dict[str, Any]] = {}
    for i in range(_steps(400, request)):
        id = rng.choice([f"{rng.getrandbits(64):016x}#0", f"v{i}"])
        vec = [rng.random() + 0.1, rng.random(), rng.random()]
        metas[id] = _tricky_meta(rng)
        store.put(id, vec, metas[id])
        oracle.put(id, vec, metas[id])
    order = store._loaded()[0]  # the ids in the order first written
    for id, meta in metas.items():  # the earlier writer's rows
        store._db.execute("UPDATE vectors SET meta = ?, codes = NULL WHERE key = ?",
                          (store._meta_text(meta), _vector_key(id)[0]))  # fmt: skip
    for sql in ("ALTER TABLE vectors RENAME TO vectors_now", "DROP INDEX vectors_name",
                "CREATE TABLE vectors (seq INTEGER PRIMARY KEY, key INTEGER NOT NULL UNIQUE, "
                "name TEXT, vec BLOB NOT NULL, meta TEXT NOT NULL)",
                "CREATE INDEX vectors_name ON vectors(name) WHERE name IS NOT NULL",
                "INSERT INTO vectors (seq, key, name, vec, meta) SELECT seq, key, name, vec, "
                "meta FROM vectors_now", "DROP TABLE vectors_now", "DROP TABLE vector_next"):
        store._db.execute(sql)  # the layout numbered by seq, its metadata text, no codes
    store.close()

    # what a row gives back: the metadata as JSON holds it (a tuple read as a list)
    read = {i: json.loads(json.dumps(m)) for i, m in metas.items()}

    def check(again: SQLiteVectors, indexed: set[str]) -> None:
        q = [1.0, 0.3, 0.2]
        got = {m.id: m.meta for m in again.near(q, 10_000)}
        assert got == read and all(list(got[i]) == list(read[i]) for i in read)
        assert all(type(got[i].get("n")) is type(read[i].get("n")) for i in read)
        assert all(again.get(i) == Match(i, 0.0, read[i]) for i in list(read)[:20])
        for flt in ({"subject": "Zoë"}, {"container": {"in": ["y", "bench"]}, "n": 7},
                    {"tags": "p"}, {"n": {"gt": 0}}, {"text": "Ann lives in Oslo."}):
            assert ([(m.id, m.meta) for m in again.near(q, 10_000, flt)]
                    == [(m.id, read[m.id]) for m in oracle.near(q, 10_000, flt)]), flt
        rows = dict(again._db.execute("SELECT key, codes IS NOT NULL FROM vectors").fetchall())
        for id, meta in metas.items():
            assert bool(rows[_vector_key(id)[0]]) == _codable(meta, indexed), meta
        assert again._db.execute("SELECT count(*) FROM vectors WHERE codes IS NOT NULL AND "
                                 "meta <> ''").fetchone()[0] == 0  # coded: no text beside

    again = SQLiteVectors(path)
    columns = {str(r[1]): int(r[5]) for r in again._db.execute("PRAGMA table_info(vectors)")}
    assert "codes" in columns and columns["key"] == 1 and columns["seq"] == 0  # keyed by key
    assert again._loaded()[0] == order  # the rows' numbers kept
    check(again, {"subject", "container", "n", "tags"})
    again.put("fresh", [0.0, 0.0, 1.0], {"subject": ["Zoë"]})  # numbered after every row
    read["fresh"] = metas["fresh"] = {"subject": ["Zoë"]}
    oracle.put("fresh", [0.0, 0.0, 1.0], {"subject": ["Zoë"]})
    assert again._loaded()[0] == [*order, "fresh"]
    again.index_only(["subject", "container", "n", "tags", "text"])  # every key: more coded
    check(again, {"subject", "container", "n", "tags", "text"})
    again.index_only(["subject"])  # fewer: the rest as text again
    check(again, {"subject"})
    again.close()
    again = SQLiteVectors(path)
    check(again, {"subject"})
    again.close()


def test_a_chunk_entrys_metadata_is_a_few_bytes_of_codes(tmp_path: Path) -> None:
    """What the retriever writes for a chunk (its container and its assertions' subjects)
    is held as a few varints, not as JSON text (52 bytes for this one before)."""
    store = SQLiteVectors(tmp_path / "v.db")
    store.index_only(["subject", "container"])
    meta = {"container": "bench", "subject": ["amara garcia", "rupert haddad"]}
    store.put("0123456789abcdef#0", [1.0, 0.0], meta)
    [(text, codes)] = store._db.execute("SELECT meta, codes FROM vectors").fetchall()
    assert text == "" and len(codes) <= 6, codes
    assert store.get("0123456789abcdef#0") == Match("0123456789abcdef#0", 0.0, meta)
    store.close()


def test_a_code_read_in_a_rolled_back_write_is_not_taken_for_a_later_term() -> None:
    """A write that fails part-way (here: an id whose key is another's) rolls back, and
    the terms it coded are forgotten with it: SQLite gives their codes out again, and a
    later entry's metadata reads back as written, not as the rolled-back term."""
    from hirmem.semantic.errors import SemanticError
    from hirmem.semantic.stores.sqlite import _h63

    store = SQLiteVectors()
    twin = f"{_h63('named'):016x}#0"  # a one-chunk id whose key is the id 'named''s
    store.put("named", [1.0, 0.0], {"subject": "kept"})
    with pytest.raises(SemanticError, match="share a key"):
        store.put_many([("a", [1.0, 0.0], {"subject": "gone"}),
                        ("a", [0.0, 1.0], {"subject": "gone too"}),  # reads a's codes
                        (twin, [1.0, 1.0], {"subject": "never"})])  # fmt: skip
    assert store.get("a") is None and len(store) == 1
    store.put("b", [1.0, 0.0], {"subject": "later"})
    assert store.get("b") == Match("b", 0.0, {"subject": "later"})
    assert {m.id: m.meta for m in store.near([1.0, 0.0], 10)} == {
        "named": {"subject": "kept"}, "b": {"subject": "later"}}
    store.close()


def test_replacing_every_vector_is_all_or_nothing() -> None:
    store = SQLiteVectors()
    store.put_many([("a", [1.0, 0.0], {"subject": "x"}), ("b", [0.0, 1.0], {"subject": "y"})])
    with pytest.raises(TypeError):  # the second item's metadata cannot be written
        store.replace_all([("a", [1.0, 0.0, 0.0], {"subject": "x"}),
                           ("b", [0.0, 1.0, 0.0], {"subject": object()})])
    assert store.dim == 2 and len(store) == 2
    assert [m.id for m in store.near([1.0, 0.1], 5, {"subject": "x"})] == ["a"]
    store.replace_all([("c", [0.0, 0.0, 1.0], {"subject": "z"})])  # another dimension
    assert store.dim == 3 and [m.id for m in store.near([0.0, 0.0, 1.0], 5)] == ["c"]
    assert store.near([0.0, 0.0, 1.0], 5, {"subject": "x"}) == []


@EARLIER
def test_a_store_with_a_vector_per_assertion_is_folded_into_one_per_chunk_when_opened(
    tmp_path: Path,
) -> None:
    """A file of the earlier layout (an entry per assertion: ``<triple>@<chunk>:<start>``
    holding one subject, triple and span) opens with one entry per chunk, listing each of
    its assertions once, and answers from the same spans."""
    from hirmem.semantic.extract import RuleExtractor
    from hirmem.semantic.ingest import MemoryIngester
    from hirmem.semantic.retrieve import Embedder
    from hirmem.semantic.split import SentenceSplitter
    from hirmem.semantic.stages import Pipeline
    from hirmem.semantic.substrate import ASSERTION_VECTORS, CHUNK_LAYOUT, Substrate

    texts = {f"n{i}": f"Alice Smith lives in City{i}. Bob Jones knows Alice Smith. "
                      f"Carol Novak works at Firm{i}." for i in range(5)}  # fmt: skip
    db = tmp_path / "earlier.db"
    sub = Substrate.open(db, passage_embedder=Embedder())
    pipeline = Pipeline(MemoryIngester(texts), splitter=SentenceSplitter(60),
                        extractor=RuleExtractor())  # fmt: skip
    for key in texts:
        sub.ingest(pipeline, key)
    want = sorted((m.id, a) for m in sub.vectors.near([0.0] * 1024, 1 << 30)
                  for a in sub.retriever.assertions(m.id, m.meta))  # fmt: skip
    chunks = len(sub.vectors)
    before = sorted((h.triple, h.evidence) for h in sub.ask("Where does Alice Smith live?", 9).hits)
    # the earlier layout: one entry per assertion, its vector that of its evidence
    e = Embedder()
    earlier = []
    for cid, (tid, subject, start, end) in want:
        chunk = sub.docs.chunk(cid)
        assert chunk is not None
        evidence = chunk.text.encode()[start:end].decode()
        earlier.append((f"{tid}@{cid}:{start}", e.embed(evidence),
                        {"subject": subject, "triple": tid, "chunk": cid,
                         "doc": cid.rpartition("#")[0], "start": start, "end": end,
                         "container": "default"}))  # fmt: skip
    assert isinstance(sub.vectors, SQLiteVectors)
    sub.vectors.replace_all(earlier)
    sub.graph._db.execute("UPDATE graph_nodes SET props = ? WHERE name = ?",  # type: ignore[attr-defined]
                          (json.dumps({"embedder": "Embedder/1024"}), ASSERTION_VECTORS))
    sub.close()
    assert len(want) > chunks  # more assertions than chunks: there is something to fold
    again = Substrate.open(db, passage_embedder=Embedder())
    assert again.reembedded == chunks and len(again.vectors) == chunks
    got = sorted((m.id, a) for m in again.vectors.near([0.0] * 1024, 1 << 30)
                 for a in again.retriever.assertions(m.id, m.meta))  # fmt: skip
    assert got == want
    assert sorted((h.triple, h.evidence) for h in again.ask("Where does Alice Smith live?", 9).hits
                  ) == before and len(before) == 5  # fmt: skip
    assert again.graph.props(ASSERTION_VECTORS) == {"embedder": "Embedder/1024",
                                                    "layout": CHUNK_LAYOUT}  # fmt: skip
    # the entries keep the container and the subjects the filter reads; the assertions
    # and their spans are the ledger's
    assert all(set(m.meta) == {"container", "subject"}
               for m in again.vectors.near([0.0] * 1024, 1 << 30))  # fmt: skip
    again.close()


def test_the_graph_keeps_only_the_versions_of_each_source_place(tmp_path: Path) -> None:
    """A document's source and chunks are the document store's: the graph keeps one node
    per source place (its current version) and lists the versions once there are two; an
    edited place supersedes, a reverted one is believed again."""
    from hirmem.semantic.extract import RuleExtractor
    from hirmem.semantic.ingest import MemoryIngester
    from hirmem.semantic.split import SentenceSplitter
    from hirmem.semantic.stages import Pipeline
    from hirmem.semantic.substrate import Substrate

    def read(sub: Substrate, texts: dict[str, str]) -> None:
        pipeline = Pipeline(MemoryIngester(texts), splitter=SentenceSplitter(40),
                            extractor=RuleExtractor())  # fmt: skip
        for key in texts:
            sub.ingest(pipeline, key)

    sub = Substrate.open(tmp_path / "g.db")
    texts = {f"n{i}": f"Alice Smith lives in City{i}. Bob Jones knows Alice Smith."
             for i in range(4)}  # fmt: skip
    read(sub, texts)
    assert isinstance(sub.graph, SQLiteGraph) and isinstance(sub.docs, SQLiteDocs)
    db = sub.graph._db
    # the places are rows of two integers beside the documents, not graph nodes (the graph
    # keeps only the embedder record)
    names = sorted(n for (n,) in db.execute("SELECT name FROM graph_nodes"))
    assert names == ["meta:assertion-vectors"], names
    assert db.execute("SELECT count(*) FROM graph_edges").fetchone()[0] == 0
    rows = sub.docs._db.execute("SELECT name, current, props FROM docs_places").fetchall()
    assert len(rows) == 4 and all(r[0] is None and r[1] is not None and r[2] is None
                                  for r in rows)  # fmt: skip
    read(sub, {"n0": "Alice Smith lives in Elsewhere."})
    believed = {(e.subject, e.object) for e in sub.ledger.edges()}
    assert ("Alice Smith", "City0") not in believed and ("Alice Smith", "Elsewhere") in believed
    read(sub, {"n0": texts["n0"]})  # reverted: the first version read again
    believed = {(e.subject, e.object) for e in sub.ledger.edges()}
    assert ("Alice Smith", "City0") in believed and ("Alice Smith", "Elsewhere") not in believed
    sub.close()


def test_the_ledger_and_documents_of_the_layout_before_are_converted_on_either_backend(
    tmp_path: Path,
) -> None:
    """A file, or a server schema, holding the ledger keyed by id text and the documents
    beside ``doc_chunks`` (the layout before this one) opens with every edge, document
    and chunk as it was, in the integer-keyed tables."""
    from hirmem.semantic.assertions import Ledger, SQLiteLedger
    from hirmem.semantic.stores.db import has_table
    from hirmem.semantic.values import Claim

    db = tmp_path / "s.db"
    ledger = Ledger(clock=lambda: 5)
    edges = [ledger.add(Claim("Alice", "knows", "Bob", "ops")),
             ledger.add(_extracted("Carol", "knows", "Dan"))]  # fmt: skip
    text = "Alice knows Bob. Zoë lives in Oslo."
    org = Origin.of_bytes("mem://d", text.encode(), "text/plain", 7)
    doc = Doc("0123456789abcdef", "mem://d", text, with_origin({"container": "c"}, org))
    chunks = [Chunk(doc.id, 0, "Alice knows Bob. ", 0, 17), Chunk(doc.id, 1, "Zoë lives in Oslo.",
                                                                  17, 36)]  # fmt: skip
    store = SQLiteDocs(db)  # the connection of either backend, to write the layout before
    con = store._db
    con.executescript("""
        CREATE TABLE ledger (id TEXT PRIMARY KEY, body TEXT NOT NULL);
        CREATE TABLE docs (id TEXT PRIMARY KEY, source TEXT NOT NULL, text TEXT NOT NULL,
            meta TEXT NOT NULL);
        CREATE TABLE doc_chunks (doc_id TEXT NOT NULL, idx INTEGER NOT NULL,
            start INTEGER NOT NULL, end_ INTEGER NOT NULL, text TEXT,
            PRIMARY KEY (doc_id, idx));
        CREATE TABLE vectors (id TEXT PRIMARY KEY, vec BLOB NOT NULL, meta TEXT NOT NULL);
    """)
    con.execute("BEGIN")
    con.executemany("INSERT INTO ledger VALUES (?, ?)", [(e.id, e.to_compact()) for e in edges])
    con.execute("INSERT INTO docs VALUES (?, ?, ?, ?)",
                (doc.id, doc.source, doc.text, json.dumps(doc.meta)))
    con.executemany("INSERT INTO doc_chunks VALUES (?, ?, ?, ?, ?)",
                    [(doc.id, c.index, c.start, c.end, None) for c in chunks])
    from hirmem.semantic.stores.packed import pack

    entries = {f"{doc.id}#0": {"container": "c", "subject": ["alice"]},
               f"{doc.id}#1": {"container": "c", "subject": ["zoë"]}}  # fmt: skip
    con.executemany("INSERT INTO vectors (id, vec, meta) VALUES (?, ?, ?)", [
        (i, pack(np.asarray([1.0, n], dtype=np.float32) / np.hypot(1.0, n)), json.dumps(m))
        for n, (i, m) in enumerate(entries.items())])  # fmt: skip
    con.execute("COMMIT")
    store.close()
    vectors = SQLiteVectors(db)
    assert {m.id: m.meta for m in vectors.near([1.0, 0.0], 10)} == entries
    assert [m.id for m in vectors.near([1.0, 0.0], 10, {"subject": "zoë"})] == [f"{doc.id}#1"]
    assert sorted(m.id for m in vectors.with_prefix(f"{doc.id}#")) == sorted(entries)
    vectors.close()
    docs, again = SQLiteDocs(db), SQLiteLedger(db)
    assert [again.get(e.id) for e in edges] == edges
    assert docs.get(doc.id) == doc and docs.chunks(doc.id) == chunks
    assert docs.chunk(f"{doc.id}#1") == chunks[1]
    assert not any(has_table(docs._db, t) for t in ("ledger", "docs", "doc_chunks"))
    again.close()
    docs.close()


def test_source_places_read_back_as_the_graph_held_them(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The document store's source places against a dict (the oracle): any key, the usual
    ``{"current": <hex id>}`` as two integers, anything else as it was written; reopened,
    the same."""
    rng = random.Random(21)
    keys = ["0123456789abcdef", "fedcba9876543210", "x", "é#1", "8000000000000000"]
    ids = ["00000000000000ff", "ffffffffffffffff", "d1", "Zoë"]
    mine, oracle = SQLiteDocs(tmp_path / "p.db"), dict[str, dict[str, Any]]()
    for step in range(_steps(2000, request)):
        key = rng.choice(keys)
        if rng.random() < 0.6:
            props: dict[str, Any] = {"current": rng.choice(ids)}
            if rng.random() < 0.3:
                props["versions"] = rng.sample(ids, rng.randint(1, 3))
            mine.set_place(key, props)
            oracle[key] = props
        assert mine.place(key) == oracle.get(key), step
    mine.close()
    again = SQLiteDocs(tmp_path / "p.db")
    assert all(again.place(k) == oracle.get(k) for k in keys)
    again.close()


@EARLIER
def test_source_places_kept_in_the_graph_by_an_earlier_layout_are_moved_when_opened(
    tmp_path: Path,
) -> None:
    """A file whose graph holds the source places (a node ``lineage:<key>`` each, and in
    the layout before that an edge labelled ``version`` per version) opens with them in
    the document store: an edit still supersedes, a revert still reinstates."""
    from hirmem.semantic.extract import RuleExtractor
    from hirmem.semantic.ingest import MemoryIngester
    from hirmem.semantic.stages import Pipeline
    from hirmem.semantic.substrate import Substrate
    from hirmem.semantic.values import lineage

    def read(sub: Substrate, texts: dict[str, str]) -> None:
        pipeline = Pipeline(MemoryIngester(texts), extractor=RuleExtractor())
        for key in texts:
            sub.ingest(pipeline, key)

    db = tmp_path / "s.db"
    sub = Substrate.open(db)
    first = {"n0": "Alice Smith lives in Oslo.", "n1": "Bob Jones lives in Lima."}
    read(sub, first)
    read(sub, {"n1": "Bob Jones lives in Quito."})
    assert isinstance(sub.docs, SQLiteDocs)
    held = {k: sub.docs.place(k) for (k,) in [
        (f"{x % (1 << 64):016x}",) for (x,) in sub.docs._db.execute("SELECT key FROM docs_places")]}
    assert len(held) == 2
    docs = {d.id: d for d in (sub.docs.get(p["current"]) for p in held.values() if p) if d}
    sub.close()
    # the earlier layout: the places as graph nodes, the edited one listing its versions by
    # edges (the layout before the "versions" list)
    con = sqlite3.connect(db)
    con.execute("DELETE FROM docs_places")
    con.commit()
    con.close()
    g = SQLiteGraph(db)
    for key, props in held.items():
        assert props is not None
        versions = props.get("versions")
        g.node(f"lineage:{key}", {"current": props["current"]})
        for v in reversed(versions or []):  # linked newest first: the list keeps link order
            g.edge(f"lineage:{key}", v, "version")
    g.close()
    again = Substrate.open(db)
    assert isinstance(again.docs, SQLiteDocs) and isinstance(again.graph, SQLiteGraph)
    for key, props in held.items():
        got = again.docs.place(key)
        assert got is not None and props is not None and got["current"] == props["current"]
        assert sorted(got.get("versions", [])) == sorted(props.get("versions", []))
    names = {n for (n,) in again.graph._db.execute("SELECT name FROM graph_nodes")}
    assert not any(n.startswith("lineage:") for n in names), names
    assert not again.graph._db.execute(
        "SELECT 1 FROM graph_edges WHERE label = 'version'").fetchone()
    assert all(lineage(d) in held for d in docs.values())
    read(again, {"n0": "Alice Smith lives in Paris."})  # an edit supersedes
    believed = {(e.subject, e.object) for e in again.ledger.edges()}
    assert ("Alice Smith", "Paris") in believed and ("Alice Smith", "Oslo") not in believed
    read(again, {"n1": "Bob Jones lives in Lima."})  # a revert reinstates
    believed = {(e.subject, e.object) for e in again.ledger.edges()}
    assert ("Bob Jones", "Lima") in believed and ("Bob Jones", "Quito") not in believed
    again.close()


@EARLIER
def test_the_lookups_a_question_and_an_erasure_make_stay_indexed(tmp_path: Path) -> None:
    """EXPLAIN QUERY PLAN of the lookups the substrate makes per question or erasure: each
    is a search by a key, never a scan of the table."""
    from hirmem.semantic.substrate import Substrate

    db = tmp_path / "s.db"
    Substrate.open(db).close()
    con = sqlite3.connect(db)
    lookups = {
        "document or chunk": ("SELECT name, source, text, meta, cuts FROM docs_compact "
                              "WHERE key = ?", (1,)),
        "a chunk's vector entry": ("SELECT seq, name, meta FROM vectors WHERE key = ?", (1,)),
        "a document's named vector entries": ("SELECT seq, key, name, meta FROM vectors "
                                              "WHERE name >= ? AND name < ?", ("a#", "a$")),
        "a document's one-chunk entry": ("SELECT seq, key, name, meta FROM vectors WHERE "
                                         "key >= ? AND key <= ? AND name IS NULL", (1, 1)),
        "a filter term's entries": ("SELECT key, ids FROM vector_posts WHERE key IN (?, ?) "
                                    "ORDER BY key, last", (1, 2)),
        "a filter term's part": ("SELECT last, ids FROM vector_posts WHERE key = ? AND "
                                 "last >= ? ORDER BY last LIMIT 1", (1, 2)),
        "a ledger row": ("SELECT name FROM ledger_edges WHERE key = ?", (1,)),
        "a source place": ("SELECT name, current, props FROM docs_places WHERE key = ?", (1,)),
        "a graph node": ("SELECT name, props FROM graph_nodes WHERE id = ?", (1,)),
    }  # fmt: skip
    for what, (sql, args) in lookups.items():
        plan = " ".join(str(r[-1]) for r in con.execute(f"EXPLAIN QUERY PLAN {sql}", args))
        assert plan.startswith("SEARCH") and "SCAN" not in plan, (what, plan)
    con.close()


@EARLIER
def test_prov_segments_round_trip_in_both_codings(tmp_path: Path) -> None:
    """A segment row is raw LZMA2 after ``L`` (or zlib when smaller); rows written as zlib
    before read back; a row that is neither is refused by name, not loaded half."""
    rng = random.Random(11)
    for _ in range(300):
        raw = json.dumps([["e", f"source:s/{rng.randrange(10**6)}", [0]]
                          for _ in range(rng.randrange(1, 400))]).encode()  # fmt: skip
        blob = pack_segment(raw)
        assert unpack_segment(blob) == raw
        assert unpack_segment(zlib.compress(raw, 9)) == raw  # an earlier file's row
        assert len(blob) <= len(zlib.compress(raw, 9))
    big = json.dumps([["a", f"activity:ingest:{rng.getrandbits(64):016x}", ["ingest", 1, 0, 0,
                                                                               [i]]]
                      for i in range(5000)]).encode()  # fmt: skip
    assert pack_segment(big)[:1] == b"L"
    with pytest.raises(ProvError, match="does not decompress"):
        unpack_segment(b"L" + b"\x07" * 40)
    # a file holding both kinds of row opens with every record
    db = tmp_path / "prov.db"
    log = SQLiteLog(db)
    log.agent("software:x", "software")
    log.flush()
    con = sqlite3.connect(db)
    (blob,) = con.execute("SELECT body FROM prov_segments").fetchone()
    con.execute("UPDATE prov_segments SET body = ?",
                (zlib.compress(unpack_segment(bytes(blob)), 9),))  # fmt: skip
    con.commit()
    con.close()
    log.close()
    again = SQLiteLog(db)
    for i in range(2000):
        again.entity(f"source:s{i}", "source")
    again.close()
    back = SQLiteLog(db)
    assert "software:x" in back.agents and len(back.entities) == 2000
    back.close()
