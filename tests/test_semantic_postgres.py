"""The substrate on PostgreSQL: what SQLite's file gave it holds in a schema — one writer
per store across connections (an advisory lock after each BEGIN, as SQLite's file lock),
a bounded set of connections, and everything back on reopen."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator

import pytest

from hirmem.emulation import postgres
from hirmem.semantic.entities import EntityIndex
from hirmem.semantic.retrieve import Embedder
from hirmem.semantic.stores.db import open_db
from hirmem.semantic.substrate import Substrate
from hirmem.sql import PgTarget
from memory_backends import pg_skip

pytestmark = pg_skip()
_schemas = itertools.count(1)


@pytest.fixture(scope="module")
def primary() -> Iterator[postgres.Primary]:
    with postgres.Primary("semanticpg") as server:
        yield server


@pytest.fixture
def target(primary: postgres.Primary) -> PgTarget:
    return PgTarget(primary.dsn, f"sub_{next(_schemas)}")


def test_a_store_has_one_writer_across_connections(target: PgTarget) -> None:
    """While one connection's transaction on the entities store is open, another writer of
    the same store waits for it; a writer of another store does not."""
    holder = open_db(target, "entities")
    index = EntityIndex(target)  # its tables made before the holder takes the lock
    other = open_db(target, "claims")
    holder.execute("BEGIN")
    done = threading.Event()

    def write() -> None:
        index.note("Alice Smith", "team", "doc1")
        done.set()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        other.execute("BEGIN")  # another store's lock: free
        other.execute("COMMIT")
        assert not done.wait(1.0), "a second writer of the store ran beside the first"
    finally:
        holder.execute("COMMIT")
    assert done.wait(30.0)
    writer.join()
    assert index.resolve("Alice Smith", {"team"})
    for db in (holder, other):
        db.close()
    index.close()


def _connections(primary: postgres.Primary) -> int:
    rows = primary.sql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = "
                       "'client backend' AND datname = 'postgres'")  # fmt: skip
    return int(str(rows[0][0]))


def _connections_once_settled(primary: postgres.Primary, want: int) -> int:
    """The count of client backends once it is ``want``, or what it is after 30 s: a
    backend leaves pg_stat_activity only when its process has exited, a moment after
    the client closed its connection."""
    deadline = time.monotonic() + 30.0
    while (n := _connections(primary)) != want and time.monotonic() < deadline:
        time.sleep(0.05)
    return n


def test_a_substrate_holds_one_connection_per_store_and_reopens_whole(
    primary: postgres.Primary, target: PgTarget
) -> None:
    before = _connections(primary)
    sub = Substrate.open(target, clock=lambda: 1_700_000_000_000, passage_embedder=Embedder())
    # docs … entities: one each, no more (the triples are the ledger's view: none of theirs)
    assert _connections(primary) - before == 10
    sub.passages.add("doc1", "Alice moved the pump to Berlin in May.", "team", subject="Maya")
    hits = sub.passages.search("pump Berlin", 5, {"team"})
    assert [h.doc for h in hits] == ["doc1"]
    sub.close()
    assert _connections_once_settled(primary, before) == before
    again = Substrate.open(target, clock=lambda: 1_700_000_000_000, passage_embedder=Embedder())
    assert [h.doc for h in again.passages.search("pump Berlin", 5, {"team"})] == ["doc1"]
    assert again.passages.search("pump Berlin", 5, {"other"}) == []
    again.close()


def test_claims_of_the_rowid_layout_are_keyed_when_a_server_schema_is_opened(
    target: PgTarget,
) -> None:
    """A schema made before attestations were keyed (the dialect gave the table a rowid
    column; a span's quote NULL; an index by claim) is rebuilt into the keyed table."""
    from hirmem.semantic.claims import ClaimStore, Statement
    from test_semantic_tier_bytes import _ROWID_CLAIM_LAYOUT, ONTOLOGY, TEXTS

    quote = "Heidi Jones works at Stark Industries."
    d1 = "00000000000000d1"
    db = open_db(target, "claims")
    db.executescript(_ROWID_CLAIM_LAYOUT)
    for i, w in enumerate(("heidi jones", "person.employer", "stark industries", "team"), 1):
        db.execute("INSERT INTO claim_words VALUES (?, ?)", (i, w))
    db.execute("INSERT INTO claims VALUES (1, 1, 2, 3)")
    db.execute("INSERT INTO claim_attestations (claim, container, source, quote, start, end_, "
               "valid_from, invalid_at, said_at, recorded_at, hedged) VALUES "
               "(1, 4, ?, NULL, ?, ?, 5, 0, 5, 7, 0)", (int(d1, 16), 9,
                                                       9 + len(quote)))  # fmt: skip
    db.close()
    store = ClaimStore(ONTOLOGY, target, clock=lambda: 1_000)
    store.texts = {d1: TEXTS["d1"]}.get
    [row] = store.current("Heidi Jones", "person.employer", {"team"}, at=10)
    assert [(a.source, a.quote) for a in row.attestations] == [(d1, quote)]
    store.write(Statement("Heidi Jones", "person.employer", "Stark Industries", quote, d1,
                          "team", said_at=5))  # fmt: skip
    assert store._db.execute("SELECT count(*) FROM claim_attestations").fetchone()[0] == 1
    cols = {r[0] for r in store._db.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = "
        "current_schema() AND table_name = 'claim_attestations'")}  # fmt: skip
    indexes = {r[0] for r in store._db.execute(
        "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND "
        "tablename = 'claim_attestations'")}  # fmt: skip
    store.close()
    assert "quote" in cols and "rowid" not in cols
    assert not {"attestations_claim", "attestations_source"} & indexes
    store = ClaimStore(ONTOLOGY, target, clock=lambda: 1_000)  # opened again: as it is
    store.texts = {d1: TEXTS["d1"]}.get
    assert store.withdraw(d1) == 1
    store.close()


def test_tier1_and_passages_of_the_indexed_layout_convert_when_a_server_schema_is_opened(
    target: PgTarget,
) -> None:
    """A schema of before (tier 1 and the passages indexed by container, tier 1 by source,
    no lists of a source's rows): opened, the indexes are gone, each source's rows listed,
    and every read is the same."""
    from hirmem.semantic.memories import MemoryIndex, Note
    from hirmem.semantic.passages import PassageIndex

    e = Embedder()
    mem, pas = MemoryIndex(e, target), PassageIndex(e, target)
    for i in range(12):
        room = ("team", "club", "lab")[i % 3]
        text = f"Ada Reyes rowed {i} km near Oslo with crew {i % 4}."
        mem.write(Note(text, room, f"doc-{i}", "Ada Reyes"))
        pas.add(f"doc-{i}", text, room, said_at=1000 + i // 2)

    def reads() -> list[object]:
        out: list[object] = []
        for readable in ({"team"}, {"club", "lab"}):
            out.append(sorted(pas.subjects(readable)))
            for q in ("rowed km", "crew 3 Oslo"):
                out.append([(h.key, round(h.score, 12)) for h in mem.search(q, 5, readable)])
                out.append([(h.id, round(h.score, 12)) for h in pas.search(q, 5, readable)])
        return out

    now = reads()
    listed = mem._db.execute("SELECT count(*) FROM tier1_memories_by").fetchone()[0]
    mem.close()
    pas.close()
    db = open_db(target, "memories")
    for statement in ("DROP TABLE tier1_memories_by", "DROP INDEX tier1_memories_shared",
                      "CREATE INDEX tier1_memories_source ON tier1_memories(source)",
                      "CREATE INDEX tier1_memories_container ON tier1_memories(container)",
                      "CREATE INDEX passages_container ON passages(container)"):  # fmt: skip
        db.execute(statement)
    db.close()
    mem, pas = MemoryIndex(e, target), PassageIndex(e, target)
    indexes = {r[0] for r in mem._db.execute(
        "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()")}  # fmt: skip
    assert not {"tier1_memories_source", "tier1_memories_container",
                "passages_container"} & indexes  # fmt: skip
    assert mem._db.execute("SELECT count(*) FROM tier1_memories_by").fetchone()[0] == listed == 12
    assert reads() == now and any(now)
    assert mem.remove("doc-4") == 1 and len(mem) == 11
    mem.close()
    pas.close()
