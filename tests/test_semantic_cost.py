"""The cost of storage (issue 16 §5): what the SQLite substrate keeps per assertion.

Before: a dense 4 KiB float32 vector per assertion, its evidence copied into the index's
metadata and again into the filter index, and the vector's text id repeated once per filter
term. These tests hold the index to its vector (packed), a few ids and integer references,
and check that what a hit shows still reads from the stored chunk.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from hirmem.protocol.identity import fold
from hirmem.semantic.extract import RuleExtractor
from hirmem.semantic.ingest import MemoryIngester
from hirmem.semantic.split import SentenceSplitter
from hirmem.semantic.stages import Pipeline
from hirmem.semantic.substrate import Substrate

PEOPLE = ["Alice Smith", "Bob Jones", "Carol Novak", "Dora Silva", "Emeka Haddad"]
CITIES = ["Paris", "Lagos", "Osaka", "Lima", "Oslo", "Porto"]


def _substrate(tmp_path: Path, n: int = 120) -> tuple[Substrate, Path, dict[str, str]]:
    texts = {f"note{i}": f"{PEOPLE[i % 5]} lives in {CITIES[i % 6]}. "
                         f"{PEOPLE[(i + 1) % 5]} works at Initech number {i}."
             for i in range(n)}  # fmt: skip
    db = tmp_path / "cost.db"
    sub = Substrate.open(db)
    pipeline = Pipeline(MemoryIngester(texts), splitter=SentenceSplitter(512),
                        extractor=RuleExtractor())  # fmt: skip
    for key in texts:
        sub.ingest(pipeline, key)
    sub.save()
    return sub, db, texts


def test_the_assertion_index_keeps_no_copy_of_the_text_and_hits_still_read_it(
    tmp_path: Path,
) -> None:
    sub, db, _ = _substrate(tmp_path)
    hits = sub.ask("Where does Dora Silva live?", 5).hits
    assert hits and all(h.subject == "dora silva" for h in hits)
    for h in hits:
        chunk = sub.docs.chunk(h.chunk)
        assert chunk is not None and h.evidence in chunk.text
        assert h.evidence.startswith("Dora Silva lives in")
    sub.close()
    con = sqlite3.connect(db)
    metas = [m for (m,) in con.execute("SELECT meta FROM vectors")]
    assert metas and not any("lives in" in m or "works at" in m for m in metas)
    kinds = {t for t in con.execute("SELECT DISTINCT typeof(key), typeof(last), "
                                    "typeof(ids) FROM vector_posts")}  # fmt: skip
    assert kinds == {("integer", "integer", "blob")}, kinds
    con.close()


def test_the_vector_index_costs_hundreds_of_bytes_per_assertion_not_kilobytes(
    tmp_path: Path,
) -> None:
    sub, db, texts = _substrate(tmp_path)
    entries = sub.vectors.near([0.0] * sub.retriever.embedder.dim, 1 << 30)
    n = sum(len(sub.retriever.assertions(m.id, m.meta)) for m in entries)  # assertions listed
    # one vector per chunk (each note here is one chunk), however many assertions it holds
    assert len(sub.vectors) == len(entries) == len(texts)
    sub.close()
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    owner = dict(con.execute("SELECT name, tbl_name FROM sqlite_master").fetchall())
    size = sum(int(b) for name, b in con.execute("SELECT name, sum(pgsize) FROM dbstat "
                                                 "GROUP BY name")
               if owner.get(name, name) in ("vectors", "vector_posts", "vector_terms"))  # fmt: skip
    blobs = [len(b) for (b,) in con.execute("SELECT vec FROM vectors")]
    con.close()
    assert n >= 200
    # a hashed sentence is sparse, its entries by palette: tens of bytes (25 here; 65 as
    # float32 with positions)
    assert max(blobs) < 40, max(blobs)
    # 119 here (seven pages, for the keyed rows, their metadata as codes and the vectors by
    # palette); 171 with the unique index on keys, metadata as text and float32 entries
    assert size / n < 150, f"{size / n:.0f} bytes per indexed assertion"


def test_a_ledger_row_leaves_defaults_out_and_reads_back_as_the_same_edge() -> None:
    """Thousands of random edges: the compact row reads back equal to the edge, and is
    smaller than its full JSON whenever a field stands at its default."""
    import json
    import random

    from hirmem.semantic.assertions import Edge, Source, SourceKind

    rng = random.Random(516)

    def source() -> Source:
        kinds: list[SourceKind] = ["extracted", "supplied", "derived"]
        kind = rng.choice(kinds)
        return Source(kind, rng.choice(["d#0", "ops", "rule:t"]),
                      rng.choice(["", "d"]), rng.choice([-1, 0, 7]), rng.choice([-1, 5, 38]),
                      rng.choice(["", "extract/rules-1"]),
                      tuple(rng.sample(["a1", "b2", "c3"], rng.randint(0, 2))),
                      rng.choice([None, 0.0, 0.2, 1.0]))  # fmt: skip

    for _ in range(3000):
        rec = rng.choice([1, 1_700_000_000_000])
        vf, vu = rng.choice([0, 5]), rng.choice([0, 9])
        spans = rng.choice([((rec, vf, vu),), ((rec, 0, 0), (rec + 1, vf, vu)), ()])
        e = Edge(rng.choice(["7a5cda536dcc8a2e", "x"]), "S", "p", "O", rng.randint(1, 4),
                 rng.choice([0.2, 1.0]), tuple(source() for _ in range(rng.randint(0, 3))),
                 vf, vu, rec, rng.choice([0, rec + 5]), rng.choice(["", "withdrawn"]),
                 spans)  # fmt: skip
        back = Edge.from_json({"id": e.id, **json.loads(e.to_row())})
        want = e if e.spans else Edge.from_json(e.to_json())  # no spans reads as its one span
        assert back == want
        assert len(e.to_row()) < len(json.dumps(e.to_json()))


def test_the_name_index_names_what_a_pass_over_every_name_names() -> None:
    """Differential: thousands of random questions against random, changing name sets
    (punctuation, case, Unicode spaces, names inside names); the index answers as the plain
    pass over every subject (:func:`~hirmem.semantic.retrieve.subject_named`) does."""
    import random

    from hirmem.semantic.names import NameIndex
    from hirmem.semantic.retrieve import subject_named

    rng = random.Random(20)
    parts = ["Alice", "alice", "Smith", "O'Brien", "Jean-Luc", "Ünal", "ßeta", "Bob",
             "Carol", "de", "von", "Maya", "Lind", "K2", "x"]  # fmt: skip
    spaces = [" ", "  ", "\t", "\u00a0", "\u3000"]
    index = NameIndex()
    held: list[str] = []
    for step in range(4000):
        if rng.random() < 0.3 or not held:
            name = rng.choice(spaces).join(rng.sample(parts, rng.randint(1, 3)))
            index.add(name)
            held.append(name)
        elif rng.random() < 0.3:
            name = held.pop(rng.randrange(len(held)))
            index.remove(name)
        words = [rng.choice([*parts, "where", "does", "live", "?", "—", "the"])
                 for _ in range(rng.randint(0, 12))]  # fmt: skip
        question = rng.choice(spaces).join(words)
        # the ledger's subjects, as it listed them: folded, in code-point order
        subjects = sorted({fold(n) for n in held})
        assert index.named(question) == subject_named(question, subjects), (step, question)


def _steps(store: object, call: Callable[[], object]) -> int:
    """SQLite virtual-machine steps (in hundreds) ``call`` makes on ``store``'s connection."""
    db = store._db  # type: ignore[attr-defined]
    counted = [0]

    def tick() -> int:
        counted[0] += 1
        return 0

    db.set_progress_handler(tick, 100)
    try:
        call()
    finally:
        db.set_progress_handler(None, 100)
    return counted[0]


def test_a_claim_lookup_by_subject_costs_the_same_at_any_corpus_size() -> None:
    """``current`` finds a subject's claims through the subject index: the work to answer
    does not grow with the claims about other people (it read every attestation of the
    container before)."""
    from hirmem.semantic.claims import ClaimRow, ClaimStore, Ontology, Statement, Template

    costs = []
    for n in (100, 3000):
        store = ClaimStore(Ontology([Template("person.residence", True, "entity")]),
                           clock=lambda: 10_000)  # fmt: skip
        for i in range(n):
            city = CITIES[i % 6]
            store.write(Statement(f"Person {i}", "person.residence", city,
                                  f"Person {i} lives in {city}.", f"doc{i}", "a",
                                  valid_from=1, said_at=1))  # fmt: skip
        got: list[ClaimRow] = []

        def lookup(s: ClaimStore = store, out: list[ClaimRow] = got) -> None:
            out.extend(s.current("Person 7", "person.residence", {"a"}))

        costs.append(_steps(store, lookup))
        assert [r.value for r in got] == [fold(CITIES[7 % 6])]
        store.close()
    assert costs[1] <= 2 * costs[0] + 2, costs
