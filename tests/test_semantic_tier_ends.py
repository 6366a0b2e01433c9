"""The tiers' loose ends: bounded refusal lists in every semantic store, entity kinds and
the rule that files an edge as a typed claim only when its ends' kinds fit, hedged edges
and claims kept as hedged (never as asserted), and compact tier-1 rows."""

from __future__ import annotations

import sqlite3
import struct
from pathlib import Path

import numpy as np
import pytest

from hirmem.protocol.identity import fnv1a64
from hirmem.semantic import claims, devices, memories
from hirmem.semantic.claims import ClaimStore, Statement
from hirmem.semantic.devices import DeviceFeed
from hirmem.semantic.entities import entity_id, kind_cue
from hirmem.semantic.errors import SemanticError
from hirmem.semantic.extract import RuleExtractor
from hirmem.semantic.memories import MemoryIndex, Note
from hirmem.semantic.planner import DEFAULT_ONTOLOGY
from hirmem.semantic.relations import RELATIONS, fits
from hirmem.semantic.retrieve import Embedder
from hirmem.semantic.stores.packed import unpack
from hirmem.semantic.substrate import Substrate
from hirmem.semantic.values import Chunk
from test_semantic_devices import _store
from test_semantic_tiers import NOW, T0, _say, _substrate

DAY = 86_400_000


def test_claim_refusals_are_all_counted_and_the_latest_listed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(claims, "KEPT_REFUSALS", 5)
    store = ClaimStore(DEFAULT_ONTOLOGY)
    for i in range(12):  # no such predicate: each one refused
        assert store.write(Statement("Alice", f"person.nope{i}", "x", "Alice x", f"d{i}",
                                     "c")) is None  # fmt: skip
    assert store.refused() == 12
    listed = [d for _, d in store.refusals()]
    assert listed == [f"no template: predicate 'person.nope{i}' is in no template"
                      for i in range(7, 12)]  # fmt: skip


def test_claim_refusal_count_survives_reopening(tmp_path: Path) -> None:
    path = str(tmp_path / "c.db")
    store = ClaimStore(DEFAULT_ONTOLOGY, path)
    store.write(Statement("Alice", "person.residence", "Oslo", "Bob lives in Oslo", "d", "c"))
    store.close()
    again = ClaimStore(DEFAULT_ONTOLOGY, path)
    assert again.refused() == 1 and again.refusals()[0][0] == "subject not in source"
    again.close()


def test_a_device_feeds_skipped_records_are_all_counted_and_the_latest_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(devices, "KEPT_SKIPS", 1)
    store = _store(tmp_path / "host.db")
    feed = DeviceFeed(store, Substrate.in_memory())
    for _ in range(3):  # the same records again: the non-UTF-8 one is skipped each time
        feed.pull(0)
    assert feed.skips == 3 and len(feed.skipped) == 1
    assert "not UTF-8" in feed.skipped[0][1]


# ---- entity kinds -----------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "text", "kind"), [
    ("c0ffee00c0ffee00/temp0", "", "device"),
    ("Acme Corp", "", "organisation"),
    ("Initech", "Initech, a software company, hired Bob.", "organisation"),
    ("Lee", "Dr. Lee works at Acme.", "person"),
    ("Dr Lee", "", "person"),
    ("Oslo", "She moved to the city of Oslo.", "place"),
    ("Harbour Street", "", "place"),
    ("Rex", "Rex is a sensor on pump 3.", "device"),
    ("Widget Pro", "The Widget Pro is our best product.", "thing"),
    ("Mr Bo Nair", "", "person"),
    ("Nair", "Yesterday Mr Bo Nair called.", "person"),  # a title states the surname too
    ("Acme", "Acme works at Initech.", ""),  # nothing stated
    ("Corp", "", ""),  # a suffix alone is no name
])  # fmt: skip
def test_a_kind_is_what_the_source_states(name: str, text: str, kind: str) -> None:
    assert kind_cue(name, text) == kind


def test_fits_files_an_end_by_stated_kinds_or_the_one_kind_its_predicate_takes() -> None:
    employer = RELATIONS["works_at"]
    assert fits(employer.value, frozenset()) == ("organisation", "")  # the template types it
    assert fits(employer.value, frozenset({"organisation"})) == ("organisation", "")
    assert fits(employer.value, frozenset({"place"}))[1]  # known only for other kinds
    assert fits(employer.value, frozenset({"place", "organisation"}))[1]  # stated as both
    located = RELATIONS["located_in"]
    assert fits(located.subject, frozenset())[1]  # untyped, several kinds: stays open
    assert fits(located.subject, frozenset({"device"})) == ("device", "")
    assert fits(None, frozenset()) == ("", "")  # a text value takes anything


def test_an_edge_becomes_a_claim_only_when_its_ends_are_of_the_kinds_its_predicate_takes(
) -> None:
    sub = _substrate()
    _say(sub, "a", "Alice works at Acme Corp. Alice lives in Oslo. "
                   "Harbour Street is located in Oslo. The Depot is located in Oslo.")
    c, team = sub.claims, {"team"}
    assert [r.value for r in c.current("Alice", "person.employer", team)] == ["acme corp"]
    # typed by the templates that filed them: Alice a person, Oslo a place
    assert sub.entities.kinds("Alice", team) == {"person"}
    assert sub.entities.kinds("Oslo", team) == {"place"}
    assert sub.entities.kinds("Acme Corp", team) == {"organisation"}
    # a street is a place the text names as one; "The Depot" has no stated kind and
    # place.location takes several: it stays an open edge, not filed under the first
    assert [r.value for r in c.current("Harbour Street", "place.location", team)] == ["oslo"]
    assert c.current("The Depot", "place.location", team) == []
    [edge] = sub.entities.edges(entity_id("the depot"), team)
    assert (edge.relation, edge.object_name) == ("located_in", "oslo")
    # Alice is a person: "Bob knows Alice" files; Acme Corp is an organisation, so the
    # vocabulary knows "knows" only for other kinds and it stays open
    _say(sub, "b", "Bob knows Alice. Bob knows Acme Corp. Oslo works at Acme Corp.")
    assert [r.value for r in c.current("Bob", "person.knows", team)] == ["alice"]
    assert {e.relation for e in sub.entities.edges(entity_id("acme corp"), team)} == {"knows",
                                                                                      "works_at"}
    assert c.current("Oslo", "person.employer", team) == []  # a place employed by nobody
    # a kind is fenced like an alias: another container knows nothing of Alice's kind
    assert sub.entities.kinds("Alice", {"elsewhere"}) == frozenset()


# ---- hedged edges and claims ------------------------------------------------------------------


def test_the_rule_extractor_reads_what_a_hedged_sentence_would_assert_and_asserts_none() -> None:
    text = ("Alice may work at Acme. I think Bob lives in Oslo. He might live in Rome. "
            "If Carol works at Initech, fine. Dana works at Globex. Maybe Frank knows Grace. "
            "Zed might not live in Lima. Does Yan live in Kyiv?")
    chunk = Chunk("d", 0, text, 0, len(text.encode()))
    rules = RuleExtractor()
    assert [(t.subject, t.object) for t in rules.extract(chunk)] == [("Dana", "Globex")]
    assert [(t.subject, t.predicate, t.object, t.evidence) for t in rules.hedged(chunk)] == [
        ("Alice", "works_at", "Acme", "Alice may work at Acme."),
        ("Bob", "lives_in", "Oslo", "I think Bob lives in Oslo."),
        ("Frank", "knows", "Grace", "Maybe Frank knows Grace."),
    ]  # no pronoun, no condition, no denial, no question


def test_a_hedged_statement_is_kept_as_hedged_and_never_as_asserted() -> None:
    sub = _substrate()
    _say(sub, "a", "Alice may work at Acme. I think Bob lives in Oslo. "
                   "Perhaps The Depot is located in Oslo.")
    c, team = sub.claims, {"team"}
    [work] = c.current("Alice", "person.employer", team)
    assert work.value == "acme" and work.hedged
    assert [a.hedged for a in work.attestations] == [True]
    assert c.count("person.employer", team) == 0  # a hedge is not counted as a fact
    assert sub.answer("Where does Alice work?", team) == (
        "planned", "acme (hedged) (\u201cAlice may work at Acme.\u201d)")
    # the ledger never believed it: no assertion, nothing for ask to serve
    assert all(e.predicate != "works_at" for e in sub.ledger.edges())
    # an open edge keeps its hedge too
    [edge] = sub.entities.edges(entity_id("the depot"), team)
    assert edge.relation == "located_in" and edge.hedged
    # an asserted value is preferred to a hedged one, even an older one, and counts
    _say(sub, "b", "Bob lives in Paris.", at=T0 - DAY)
    assert [r.value for r in c.current("Bob", "person.residence", team)] == ["paris"]
    assert [(r.value, r.hedged) for r in c.history("Bob", "person.residence", team)] == [
        ("paris", False), ("oslo", True)]
    assert c.count("person.residence", team) == 1
    # a later assertion of the same value makes it asserted
    _say(sub, "c", "Alice works at Acme.", at=T0 + DAY)
    [work] = c.current("Alice", "person.employer", team, NOW)
    assert not work.hedged and c.count("person.employer", team) == 1


# ---- compact tier 1 ---------------------------------------------------------------------------


def test_quantised_vectors_keep_cosine_against_float32_over_thousands_of_vectors() -> None:
    """Differential: int8 with one scale (tier 1's packing) against the float32 original,
    dense (MiniLM-like) and sparse (hashed-like), cosine of each with a random query."""
    rng = np.random.default_rng(16)
    worst = 0.0
    for i in range(3000):
        dim = 384 if i % 2 else 1024
        v = rng.normal(size=dim).astype(np.float32)
        if dim == 1024:  # a handful of non-zero entries, as the hashed embedder makes
            v[rng.random(dim) > 0.01] = 0.0
            v[int(rng.integers(dim))] = float(rng.normal()) or 1.0
        q = rng.normal(size=dim).astype(np.float32)
        q[v != 0] += v[v != 0]  # related to v, so the cosine is not near zero
        blob = memories._packed(v)
        back = unpack(blob)
        step = float(np.abs(v).max()) / 127
        assert back.shape == v.shape and np.array_equal(back != 0, np.rint(v / step) != 0)
        # within half a step, give or take the float32 rounding of an entry
        assert np.all(np.abs(back - v) <= step / 2 + 1e-7 * 127 * step)
        cos = float(v @ q / (np.linalg.norm(v) * np.linalg.norm(q)))
        got = float(back @ q / (np.linalg.norm(back) * np.linalg.norm(q)))
        worst = max(worst, abs(cos - got))
        # one byte per entry (three per non-zero entry when sparse), a 9-byte head and the
        # byte that keeps a tagged blob's length odd: a quarter of float32
        assert len(blob) <= (10 + 3 * int(np.count_nonzero(v)) if dim == 1024 else 10 + dim)
        # sparse int8, but exact float32 for a single entry (11 bytes, not 13)
        n = int(np.count_nonzero(back))
        assert blob[:1] == (b"Q" if dim == 384 else b"B" if n > 1 else b"S")
    assert worst < 0.02
    assert unpack(memories._packed(np.zeros(8))).tolist() == [0.0] * 8
    sparse = np.zeros(1024, dtype=np.float32)
    sparse[[3, 500, 900]] = [1.0, -2.0, 0.5]
    with pytest.raises(SemanticError, match="whole entries"):
        unpack(memories._packed(sparse)[:-2])  # cut short by two bytes: still odd
    with pytest.raises(SemanticError, match="no known layout"):
        memories._from_old_int8(b"H\x00\x00")


def test_a_tier1_row_holds_no_key_text_container_name_or_float_vector() -> None:
    idx = MemoryIndex(Embedder())
    long_container = "tenant-with-a-long-name/" + "c" * 40
    for i in range(50):
        idx.write(Note(f"Ada Reyes is fixing boiler B{i:03d} today.", long_container,
                       "d" * 16 + str(i)))  # fmt: skip
    idx.write(Note("pump 3 pressure 2.1-2.4 bar over 4 readings", "plant", "p", key="pattern:7"))
    db = idx._db
    keys = [r[0] for r in db.execute("SELECT key FROM tier1_memories ORDER BY id")]
    assert keys == [None] * 50 + ["pattern:7"]  # a sentence's key is its source and text
    assert db.execute("SELECT count(*) FROM tier1_containers").fetchone()[0] == 2
    assert {type(r[0]) for r in db.execute("SELECT container FROM tier1_memories")} == {int}
    assert max(len(r[0]) for r in db.execute("SELECT vec FROM tier1_memories")) < 64
    # and every read still gives them back whole
    hit = idx.get(f"{'d' * 16}7#{fnv1a64(b'Ada Reyes is fixing boiler B007 today.'):016x}")
    assert hit is not None and hit.container == long_container and hit.text.endswith("B007 today.")
    assert idx.get("pattern:7") is not None and idx.invalidate("pattern:7", 5)
    [found] = idx.search("boiler B007", 1, {long_container}, names=["Ada Reyes"])
    assert found.text == "Ada Reyes is fixing boiler B007 today."
    assert idx.search("boiler", 5, {"plant"}) == []  # the fence, by container id
    assert idx.remove("d" * 16 + "7") == 1
    left = idx.search("boiler", 60, {long_container})
    assert len(left) == 49 and all("B007" not in h.text for h in left)


_FIRST_LAYOUT = """
CREATE TABLE tier1_memories (
    id INTEGER PRIMARY KEY, key TEXT UNIQUE NOT NULL, container TEXT NOT NULL,
    source TEXT NOT NULL, subject TEXT NOT NULL, text TEXT NOT NULL,
    certainty TEXT NOT NULL CHECK (certainty IN ('asserted', 'hedged')),
    valid_from INTEGER NOT NULL, invalid_at INTEGER NOT NULL,
    said_at INTEGER NOT NULL, vec BLOB NOT NULL);
CREATE TABLE tier1_mentions (entity TEXT NOT NULL, memory INTEGER NOT NULL,
    PRIMARY KEY (entity, memory)) WITHOUT ROWID;
CREATE TABLE tier1_containers (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL);
CREATE TABLE tier1_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE VIRTUAL TABLE tier1_terms_1 USING fts5(text, subject, content='tier1_memories',
    content_rowid='id', tokenize='porter unicode61');
INSERT INTO tier1_containers VALUES (1, 'team');
INSERT INTO tier1_memories VALUES (1, 'd#x', 'team', 'd', 'ada', 'Ada may be rowing today.',
    'hedged', 0, 0, 5, x'00');
INSERT INTO tier1_memories VALUES (2, 'pattern:1', 'team', 'p', '', 'pump 3 runs hot at noon',
    'asserted', 0, 0, 6, x'00');
"""


def test_a_file_of_the_first_tier1_layout_is_read_into_the_compact_one(tmp_path: Path) -> None:
    path = tmp_path / "t1.db"
    db = sqlite3.connect(path)
    db.executescript(_FIRST_LAYOUT)
    db.close()
    idx = MemoryIndex(Embedder(), str(path))
    assert len(idx) == 2
    hedged = idx.get("d#x")
    assert hedged is not None and hedged.certainty == "hedged" and hedged.said_at == 5
    assert idx.get("pattern:1") is not None
    assert [h.key for h in idx.search("rowing", 5, {"team"})] == ["d#x"]
    idx.close()


def test_two_sources_of_one_hash_are_refused_not_conflated(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:  # fmt: skip
    idx = MemoryIndex(Embedder())
    idx.write(Note("Ada Reyes is fixing the boiler today.", "team", "doc-a"))
    monkeypatch.setattr(memories, "_hash", lambda key: 7 if key == "doc-b" else hash(key))
    memories_before = len(idx)
    idx.write(Note("Bo Nair is rowing on weekends now.", "team", "doc-b"))  # hash 7: free
    with pytest.raises(SemanticError, match="share a 64-bit hash"):
        monkeypatch.setattr(memories, "_hash", lambda key: 7 if key in ("doc-b", "doc-c")
                            else hash(key))  # fmt: skip
        idx.write(Note("Cy Lind is learning Japanese this year.", "team", "doc-c"))
    assert len(idx) == memories_before + 1  # the refused write left nothing behind


def _old_int8(v: np.ndarray, *, dense: bool) -> tuple[bytes, np.ndarray]:
    """``v`` in one of the int8 layouts tier 1 wrote before it used the packed ones, built
    here from their definition (``s``: tag, uint32 dimension, float32 scale, uint16
    positions, int8 steps; ``q``: tag, float32 scale, int8 steps), and the float32 vector
    those bytes hold."""
    top = float(np.abs(v).max())
    scale = top / 127 if top > 0 else 1.0
    steps = np.clip(np.rint(v / scale), -127, 127).astype(np.int8)
    held = steps.astype(np.float32) * np.float32(scale)
    if dense:
        return struct.pack("<cf", b"q", scale) + steps.tobytes(), held
    nz = np.flatnonzero(steps)
    blob = struct.pack("<cIf", b"s", len(v), scale) + nz.astype(np.uint16).tobytes()
    return blob + steps[nz].tobytes(), held


def test_a_file_of_the_earlier_int8_layouts_is_repacked_on_open(tmp_path: Path) -> None:
    """A tier-1 file whose vectors are in the ``s``/``q`` layouts (written by the code
    before this one) is rewritten on open into the packed ``B``/``Q`` layouts holding the
    very same steps and scale, and recall over it works; a blob of neither is refused."""
    path = str(tmp_path / "t1.db")
    e = Embedder()
    idx = MemoryIndex(e, path)
    texts = [f"Ada Reyes is fixing boiler B{i:03d} today." for i in range(40)]
    texts.append("Bo Nair is rowing on weekends now.")
    idx.write_many([Note(t, "team", f"doc-{i}") for i, t in enumerate(texts)])
    idx.close()
    db = sqlite3.connect(path)
    want: dict[int, np.ndarray] = {}
    rows = db.execute("SELECT id, text FROM tier1_memories ORDER BY id").fetchall()
    for n, (rid, text) in enumerate(rows):  # odd rows dense (a MiniLM file), even sparse
        old, want[rid] = _old_int8(np.asarray(e.embed(text), dtype=np.float32), dense=n % 2 == 1)
        db.execute("UPDATE tier1_memories SET vec = ? WHERE id = ?", (old, rid))
    db.execute("DELETE FROM tier1_meta WHERE key = 'vectors'")  # as such a file has it
    db.commit()
    db.close()
    idx = MemoryIndex(e, path)
    got = dict(idx._db.execute("SELECT id, vec FROM tier1_memories").fetchall())
    assert {b[:1] for b in got.values()} == {b"B", b"Q"}
    for rid, blob in got.items():
        assert len(blob) % 2 == 1 and np.array_equal(unpack(blob), want[rid]), rid
    [hit] = idx.search("rowing weekends", 1, {"team"})
    assert hit.text == "Bo Nair is rowing on weekends now."
    [hit] = idx.search("boiler B017", 1, {"team"})
    assert hit.text == "Ada Reyes is fixing boiler B017 today."
    idx.close()
    assert dict(sqlite3.connect(path).execute("SELECT id, vec FROM tier1_memories")) == got
    # a vector of no layout tier 1 ever wrote is refused on open, the file left as it was
    db = sqlite3.connect(path)
    db.execute("UPDATE tier1_memories SET vec = x'71ff' WHERE id = ?", (rows[0][0],))
    db.execute("DELETE FROM tier1_meta WHERE key = 'vectors'")
    db.commit()
    db.close()
    with pytest.raises(SemanticError, match="no known layout"):
        MemoryIndex(e, path)
    assert sqlite3.connect(path).execute("SELECT count(*) FROM tier1_meta WHERE key = "
                                         "'vectors'").fetchone() == (0,)  # fmt: skip
