"""Claim attestations in fewer bytes (issue 16 §5): when each was recorded as an offset
from the store's one epoch, and each source's list holding (claim, container) only. Reads
are as before (ranks, histories, counts; ties broken as before), two writers share the
epoch, a withdrawal still takes every statement of its source, and a store of the layout
before converts on open. On SQLite and PostgreSQL."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from hirmem.semantic.claims import ClaimStore, Statement
from hirmem.semantic.dictionary import SourceRows, unpack_ints
from hirmem.sql import Connection
from semantic_backends import semantic_backend, semantic_server  # noqa: F401  (fixtures)
from test_semantic_tier_bytes import ONTOLOGY

pytestmark = pytest.mark.usefixtures("semantic_backend")

PEOPLE = ["Ada Reyes", "Bo Nair", "Heidi Jones", "Klaus Berg"]
ORGS = ["Acme", "Initech", "Stark Industries"]
HOBBIES = ["pottery", "rowing", "chess"]
T0 = 1_700_000_000_000


def _statement(rng: random.Random, said: int) -> Statement:
    p = rng.choice(PEOPLE)
    source = rng.choice([f"{rng.randrange(8):016x}", f"chat/{rng.randrange(3)}"])
    container = rng.choice("ab")
    if rng.random() < 0.5:
        org = rng.choice(ORGS)
        return Statement(p, "person.employer", org, f"{p} works at {org}.", source, container,
                         said_at=said)  # fmt: skip
    hobby = rng.choice(HOBBIES)
    return Statement(p, "person.hobby", hobby, f"{p} likes {hobby}.", source, container,
                     said_at=said, hedged=rng.random() < 0.2)  # fmt: skip


def _reads(store: ClaimStore) -> list[object]:
    out: list[object] = []
    for readable in ({"a"}, {"b"}, {"a", "b"}):
        for p in PEOPLE:
            out += [store.about(p, readable, at=T0 + 10**6),
                    store.history(p, "person.employer", readable),
                    store.current(p, "person.hobby", readable, at=T0 + 10**6)]  # fmt: skip
        out += [store.count("person.employer", readable, at=T0 + 10**6),
                store.count("person.employer", readable, "Acme", at=T0 + 10**6)]  # fmt: skip
    return out


class _Clock:
    """A clock a step on at each reading; ``at``: its last reading."""

    def __init__(self, start: int) -> None:
        self.at = start - 10

    def __call__(self) -> int:
        self.at += 10
        return self.at


def _store(path: Path, clock: itertools.count[int]) -> ClaimStore:
    return ClaimStore(ONTOLOGY, path, clock=lambda: next(clock))


def _per_source(db: Connection) -> dict[int, int]:
    return {int(s): int(n) for s, n in db.execute(
        "SELECT source, count(*) FROM claim_attestations GROUP BY source")}  # fmt: skip


def test_the_layout_of_recorded_instants_and_spans_listed_converts_on_open(
    tmp_path: Path,
) -> None:
    """A store whose attestations held their recorded instants whole (and whose sources'
    lists held each statement's span) reads the same once converted, holds offsets of a few
    bytes, and withdraws every statement of each source."""
    rng = random.Random(1616)
    path = tmp_path / "c.db"
    store = _store(path, itertools.count(T0, 7))
    for i in range(120):
        store.write(_statement(rng, T0 - 5_000 + i * 3))  # said at often the same instant
    before = _reads(store)
    db = store._db
    epoch = int(db.execute("SELECT value FROM claim_meta WHERE key = 'epoch'").fetchone()[0])
    assert epoch == T0
    db.execute("BEGIN")
    db.execute("ALTER TABLE claim_attestations RENAME COLUMN recorded TO recorded_at")
    db.execute("UPDATE claim_attestations SET recorded_at = recorded_at + ?", (epoch,))
    db.execute("DROP TABLE claim_attestations_by")
    SourceRows(db, "claim_attestations", 4).made("claim, container, start, end_")
    db.execute("DELETE FROM claim_meta WHERE key IN ('epoch', 'listed')")
    db.execute("COMMIT")
    held = _per_source(db)
    store.close()
    store = _store(path, itertools.count(T0 + 10_000, 7))
    db = store._db
    assert _reads(store) == before
    low, high = db.execute("SELECT min(recorded), max(recorded) FROM claim_attestations"
                           ).fetchone()  # fmt: skip
    assert 0 == low <= high < 1 << 16  # offsets from the first statement held
    for (blob,) in db.execute("SELECT rows FROM claim_attestations_by"):
        assert len(unpack_ints(bytes(blob))) % 2 == 0
    assert _per_source(db) == held
    codes = {s: store._sources.code(s, create=False)
             for s in [f"{i:016x}" for i in range(8)] + [f"chat/{i}" for i in range(3)]}
    for source, code in codes.items():
        assert store.withdraw(source) == held.get(code, 0)
    assert _per_source(db) == {}
    assert db.execute("SELECT count(*) FROM claims").fetchone()[0] == 0
    store.close()
    store = _store(path, itertools.count(T0 + 20_000, 7))  # opened again: as it is
    assert store._db.execute("SELECT count(*) FROM claim_meta WHERE key = 'listed'"
                             ).fetchone()[0] == 1  # fmt: skip
    store.close()


def test_two_writers_share_one_epoch_and_ties_in_time_keep_the_recorded_order(
    tmp_path: Path,
) -> None:
    """Two stores on one file with clocks apart (the second's behind the first's epoch:
    negative offsets) write statements said at one instant in a random interleaving; a
    store opened afresh lists each claim's statements in the order they were recorded,
    exactly as the whole instants order them."""
    rng = random.Random(7)
    path = tmp_path / "two.db"
    clocks = [_Clock(T0), _Clock(T0 - 3_000_000)]
    writers = [ClaimStore(ONTOLOGY, path, clock=c) for c in clocks]
    recorded: dict[tuple[str, str], int] = {}  # (container, source): its whole instant
    for i in range(60):
        w = rng.randrange(2) if i else 0  # the epoch set by the clock ahead
        source, container = f"writer{w}/{i}", rng.choice("ab")
        row = writers[w].write(Statement("Ada Reyes", "person.hobby", "rowing",
                                         "Ada Reyes likes rowing.", source, container,
                                         said_at=T0 - 10**7))  # fmt: skip
        assert row is not None
        recorded[(container, source)] = clocks[w].at
    fresh = _store(path, itertools.count(T0))
    [claim] = fresh.history("Ada Reyes", "person.hobby", {"a", "b"})
    got = [(a.container, a.source) for a in claim.attestations]
    assert got == sorted(recorded, key=recorded.__getitem__)
    db = fresh._db
    assert db.execute("SELECT count(*) FROM claim_meta WHERE key = 'epoch'").fetchone()[0] == 1
    assert int(db.execute("SELECT min(recorded) FROM claim_attestations").fetchone()[0]) < 0
    for writer in writers:
        writer.close()
    fresh.close()
