"""SQLite persistence, migrations, restart, and the audit chain (provenance layer)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from hirmem.memory import review
from hirmem.memory.audit import AuditLog
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.model import State
from hirmem.memory.store import (
    MIGRATIONS,
    SCHEMA_VERSION,
    WRITE_CACHE_KIB,
    Store,
    _statements,
)
from hirmem.protocol.errors import HirmemError

T0 = 1_780_000_000.0


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def populate(e: MemoryEngine, clock: Clock) -> None:
    e.admit('{"subject": "door 4", "attribute": "state", "value": "open"}', "cam1")
    e.admit("pressure at pump 2 is 3.1 bar", "p2", flags=0x0C7F)
    e.admit("operator must obey", "x", flags=0x07FF)
    e.admit('{"subject": "door 4", "attribute": "state", "value": "closed"}', "cam2",
            confidence=0.5)  # fmt: skip
    clock.t += 86400
    e.recall("pressure pump", k=2)
    e.sweep()


def dump(e: MemoryEngine) -> list[object]:
    return [*e.store.select(tail="ORDER BY rowid"), *e.audit.records(), e.store.meta("host_head")]


def test_restart_resumes_exactly(tmp_path: Path) -> None:
    path = tmp_path / "mem.sqlite"
    clock = Clock()
    e = MemoryEngine(path, clock=clock)
    populate(e, clock)
    before = dump(e)
    hits = e.recall("door state", k=3, touch=False)
    e.close()

    e2 = MemoryEngine(path, clock=clock)
    assert dump(e2) == before
    assert e2.recall("door state", k=3, touch=False) == hits
    assert e2.verify_audit().ok
    # Carrying on after the restart continues the same chains and id sequence.
    m = e2.admit("new after restart", "s")
    assert int(m.id[16:], 16) == 5
    assert e2.audit.verify().ok and e2.audit.records()[-1].prev != bytes(32)
    e2.close()


def test_wal_mode(tmp_path: Path) -> None:
    s = Store(tmp_path / "w.sqlite")
    assert s.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    s.close()


def test_the_writers_page_cache_holds_a_follow_batch(tmp_path: Path) -> None:
    """A follow batch's pages stay in the write connection's cache until commit (not
    spilled to the WAL page by page as the batch grows: half the batch's system time)."""
    s = Store(tmp_path / "c.sqlite")
    assert s.db.execute("PRAGMA cache_size").fetchone()[0] == -WRITE_CACHE_KIB
    assert WRITE_CACHE_KIB * 1024 >= 1000 * 8 * 2048  # 1000 packs of 8 rows, ~2 KiB a row
    s.close()


def test_migrates_an_old_file_to_the_current_schema(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    assert isinstance(MIGRATIONS[0], str)
    for stmt in _statements(MIGRATIONS[0]):
        db.execute(stmt)
    db.execute("PRAGMA user_version=1")
    db.commit()
    db.close()
    s = Store(path)
    assert s.schema_version == SCHEMA_VERSION == 9  # v4-v9: issue 13's speed section
    names = {r[0] for r in s.db.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert "memories_facts" in names  # v7: memories_subject became this partial index
    s.close()


def test_refuses_a_newer_schema(tmp_path: Path) -> None:
    path = tmp_path / "new.sqlite"
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version=99")
    db.close()
    with pytest.raises(HirmemError, match="upgrade hirmem"):
        Store(path)


def test_database_refuses_audit_update_and_delete() -> None:
    e = MemoryEngine(":memory:", clock=Clock())
    e.admit("x", "s")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        e.store.db.execute("UPDATE audit SET action = 'admit' WHERE seq = 1")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        e.store.db.execute("DELETE FROM audit")


def test_database_refuses_deleting_gated_memories_and_editing_content() -> None:
    e = MemoryEngine(":memory:", clock=Clock())
    m = e.admit("x", "s")
    with pytest.raises(sqlite3.DatabaseError, match="MEM-INV-3"):
        e.store.db.execute("DELETE FROM memories WHERE id = ?", (m.id,))
    with pytest.raises(sqlite3.DatabaseError, match="immutable"):
        e.store.db.execute("UPDATE memories SET payload = x'00' WHERE id = ?", (m.id,))


def tampered(tmp_path: Path, sql: str, params: tuple[object, ...] = ()) -> MemoryEngine:
    path = tmp_path / "t.sqlite"
    clock = Clock()
    e = MemoryEngine(path, clock=clock)
    populate(e, clock)
    assert e.verify_audit().ok
    e.close()
    db = sqlite3.connect(path)  # someone with the file, bypassing the triggers
    db.execute("DROP TRIGGER audit_no_update")
    db.execute("DROP TRIGGER audit_no_delete")
    db.execute(sql, params)
    db.commit()
    db.close()
    return MemoryEngine(path, clock=clock)


def test_verify_names_an_edited_record(tmp_path: Path) -> None:
    e = tampered(tmp_path, "UPDATE audit SET actor = 'steward:mallory' WHERE seq = 7")
    r = e.verify_audit()
    assert not r.ok and r.first_bad == 7 and "hash" in r.reason and "seq 7" in str(r)


def test_verify_names_a_rehashed_edit_by_its_successor(tmp_path: Path) -> None:
    # Recomputing the edited record's own hash moves the break to the next link.
    from hirmem.memory.audit import record_hash

    path = tmp_path / "t.sqlite"
    e = tampered(tmp_path, "UPDATE audit SET action = 'admit' WHERE seq = 5")
    row = e.store.db.execute(
        "SELECT seq, ts, action, memory_id, actor, detail, prev FROM audit WHERE seq = 5"
    ).fetchone()
    e.close()
    db = sqlite3.connect(path)
    db.execute("DROP TRIGGER audit_no_update")  # re-created when the engine opened the file
    db.execute("UPDATE audit SET hash = ? WHERE seq = 5", (record_hash(*row),))
    db.commit()
    db.close()
    r = MemoryEngine(path, clock=Clock()).verify_audit()
    assert not r.ok and r.first_bad == 6 and "prev" in r.reason


def test_verify_names_a_deleted_record(tmp_path: Path) -> None:
    r = tampered(tmp_path, "DELETE FROM audit WHERE seq = 3").verify_audit()
    assert not r.ok and r.first_bad == 3 and "missing" in r.reason


def test_verify_notices_a_truncated_tail(tmp_path: Path) -> None:
    e = tampered(tmp_path, "DELETE FROM audit WHERE seq >= (SELECT max(seq) - 1 FROM audit)")
    r = e.verify_audit()
    assert not r.ok and "chain ends" in r.reason


def test_audit_records_every_kind_of_action() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    populate(e, clock)
    q = review.pending(e)[0]
    review.decide(e, q.id, "alice", "keep", "needs a second look")
    e.repair(e.store.select("state = 2")[0].id, "corrected", reason="typo")
    actions = {r.action for r in e.audit.records()}
    assert {"capture", "admit", "transition", "contradiction", "review", "repair"} <= actions


def test_audit_log_head_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "a.sqlite"
    s = Store(path)
    log = AuditLog(s)
    with s.transaction():
        log.append("sweep", "", {"count": 1}, ts=T0)
        log.append("sweep", "", {"count": 2}, ts=T0)
    s.close()
    s2 = Store(path)
    log2 = AuditLog(s2)
    assert log2.head_seq == 2
    with s2.transaction():
        log2.append("sweep", "", {"count": 3}, ts=T0)
    assert log2.verify().ok and log2.verify().count == 3


def test_quarantined_memories_survive_restart_with_their_trace(tmp_path: Path) -> None:
    path = tmp_path / "q.sqlite"
    e = MemoryEngine(path, clock=Clock())
    m = e.admit("do what I say", "x", flags=0x07FF)
    e.close()
    e2 = MemoryEngine(path, clock=Clock())
    got = e2.require(m.id)
    assert got.state is State.QUARANTINED and got.permanent
    assert [r.action for r in e2.audit.records(m.id)] == ["capture", "admit", "transition"]


def test_a_rolled_back_operation_leaves_chain_and_index_consistent() -> None:
    e = MemoryEngine(":memory:", clock=Clock())
    e.admit("pump 1 running", "s")
    head = e.audit.head_seq
    with pytest.raises(HirmemError), e.store.transaction():
        e.admit("pump 2 running", "s")  # appended and indexed inside the transaction
        raise HirmemError("something failed after the admit")
    assert e.audit.head_seq == head and e.store.count() == 1
    assert [h.id for h in e.recall("pump running", touch=False)] == [e.store.select()[0].id]
    e.admit("pump 3 running", "s")
    assert e.verify_audit().ok


def test_an_old_store_with_a_forked_repair_is_refused_with_a_reason(tmp_path: Path) -> None:
    from hirmem.memory.model import Memory
    from hirmem.memory.store import COLUMNS, to_row

    path = tmp_path / "forked.sqlite"
    db = sqlite3.connect(path)
    for version in (0, 1):
        script = MIGRATIONS[version]
        assert isinstance(script, str)
        for stmt in _statements(script):
            db.execute(stmt)
    db.execute("PRAGMA user_version=2")
    for n in (1, 2):  # two versions that both supersede the same prior: a forked chain
        row = to_row(Memory(f"{n:032x}", b"x", "s", 1, bytes(32), state=State.CANDIDATE,
                            supersedes="ab" * 16))  # fmt: skip
        row["embedding"] = b""  # schema 2 keeps the embedding in the row
        cols = (*COLUMNS, "embedding")
        db.execute(f"INSERT INTO memories ({', '.join(cols)}) "
                   f"VALUES ({', '.join(':' + c for c in cols)})", row)  # fmt: skip
    db.commit()
    db.close()
    with pytest.raises(HirmemError, match=r"cannot be upgraded to schema 3.*unchanged"):
        Store(path)
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 2
