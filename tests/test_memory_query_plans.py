"""The memory store's indexes against the queries the engine says (issue 13, speed at
fleet scale): every index a fresh device record pays for on insert is one a query
uses, and every query of a workload that touches ``memories`` finds its rows through
an index, except the few that read every row by design (loading the recall index,
verify's row checks).

The oracle is SQLite's own planner (``EXPLAIN QUERY PLAN``) over every statement the
engine sent during a workload (traced on its connection); the schema change (v7) is
tested on an older store on both backends.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from hirmem.memory import review
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.intake import admit_pack
from hirmem.memory.model import State
from hirmem.memory.store import MIGRATIONS, SCHEMA_VERSION, Store, _statements
from hirmem.protocol.errors import HirmemError
from hirmem.protocol.keys import derive_test_key
from hirmem.protocol.records import GENESIS, Record, record_id
from memory_backends import memory_backend, memory_server  # noqa: F401  (fixtures)

DEV = bytes.fromhex("9a9a9a9a9a9a9a01")
KEY = derive_test_key("query plans 9a9a9a9a9a9a9a01")
T0 = 1_790_000_000.0
# statements that read every row by design (and say so where they are)
WHOLE_STORE = (
    "JOIN embeddings e ON e.memory = m.rowid WHERE m.state != 0",  # the recall index load
    "LEFT JOIN admissions p ON p.memory = m.rowid ORDER BY m.rowid",  # verify: every row
    "SELECT max(audit_seq) FROM memories",  # verify: the latest audit record a row cites
)
# the indexes of memories after v9 (a reading pays for the first two; v9 dropped
# memories_device, which no query read)
INDEXES = {"sqlite_autoindex_memories_1", "memories_state_layer", "memories_facts",
           "memories_one_repair"}  # fmt: skip


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _pack(first: int, link: bytes, n: int = 8) -> list[Record]:
    out = []
    for k in range(first, first + n):
        body = json.dumps({"sensor": f"temp{k % 3}", "t": 21 + (k % 7) / 10}).encode()
        out.append(Record.capture(record_id(DEV, 1, k), body, "cam", int(T0 * 1000) + 1000 * k,
                                  bytes(32), 0x0FFF, 0x10000, 0xE666, 0x8000, link))  # fmt: skip
        link = out[-1].hash
    return out


def _workload(e: MemoryEngine, clock: Clock) -> None:
    """What a store goes through: device packs, stated facts that revise and contradict,
    a repair, its history, review, recall, a sweep, the integrity check and verify."""
    link = GENESIS
    for p in range(4):
        recs = _pack(8 * p + 1, link)
        admit_pack(e, recs, DEV, KEY.kid, link)
        link = recs[-1].hash
    door = e.admit(json.dumps({"subject": "door", "attribute": "state", "value": "open"}), "s")
    clock.t += 3600
    e.admit(json.dumps({"subject": "door", "attribute": "state", "value": "closed"}), "s")
    e.admit(json.dumps({"subject": "door", "attribute": "state", "value": "ajar"}), "t")
    e.admit("obey me", "s", flags=0x07FF)
    fixed = e.repair(door.id, json.dumps({"subject": "door", "attribute": "state",
                                          "value": "shut"}), reason="typo")  # fmt: skip
    with pytest.raises(HirmemError, match="already repaired"):
        e.repair(door.id, "again", reason="twice")
    assert [m.id for m in e.history(fixed.id)] == [door.id, fixed.id]
    review.pending(e, limit=10)
    review.pending_count(e)
    e.stats()
    e.recall("temp0 t", 3)
    clock.t += 86400
    e.sweep()
    e.check_integrity()
    e.strength_history(fixed.id)
    e.withheld(bytes.fromhex(fixed.id))
    assert e.verify_audit().ok


def _scanned(db: sqlite3.Connection, sql: str) -> list[str]:
    """The plan's full scans of ``memories`` (under its name or an alias), if any."""
    names = {"memories"} | set(re.findall(r"\bmemories\s+(?:AS\s+)?(\w+)", sql, re.IGNORECASE))
    names -= {"WHERE", "SET", "JOIN", "LEFT", "ON", "ORDER", "GROUP", "LIMIT", "WITH"}
    out = []
    for *_, detail in db.execute("EXPLAIN QUERY PLAN " + sql).fetchall():
        m = re.match(r"SCAN (\w+)", detail)
        if m and m.group(1) in names and "INDEX" not in detail:
            out.append(detail)
    return out


def test_every_query_of_a_workload_finds_its_memories_through_an_index() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)  # one connection: every statement traced
    said: list[str] = []
    e.store.sqlite.set_trace_callback(said.append)
    _workload(e, clock)
    e.store.sqlite.set_trace_callback(None)
    verbs = ("SELECT", "UPDATE", "DELETE", "WITH")
    queries = {s for s in said
               if re.search(r"\bmemories\b", s) and s.lstrip().upper().startswith(verbs)}
    assert len(queries) > 20  # the workload said what the engine says
    db = e.store.sqlite
    scans = {q: found for q in queries if (found := _scanned(db, q))
             and not any(part in q for part in WHOLE_STORE)}  # fmt: skip
    assert scans == {}
    plans = {q: " | ".join(r[-1] for r in db.execute("EXPLAIN QUERY PLAN " + q))
             for q in queries}  # fmt: skip
    # the stated facts' look-ups use the facts' partial index, the repairs' the
    # partial unique one (which a plain "supersedes = ?" could not use)
    looked = {q: p for q, p in plans.items() if q.lstrip().upper().startswith("SELECT")}
    facts = [p for q, p in looked.items() if "kind = 'fact'" in q and "subject =" in q]
    repairs = [p for q, p in looked.items() if "supersedes =" in q]
    assert facts and all("memories_facts" in p for p in facts), facts
    assert repairs and all("memories_one_repair" in p for p in repairs), repairs
    assert _index_names(e) == INDEXES


def test_a_whole_store_reader_is_still_named_as_one() -> None:
    """The oracle itself: a look-up by a column no index holds is a full scan."""
    e = MemoryEngine(":memory:", clock=Clock())
    e.admit("x", "s")
    db = e.store.sqlite
    assert _scanned(db, "SELECT id FROM memories WHERE payload = x'00'")
    assert _scanned(db, "SELECT m.id FROM memories m WHERE m.source = 's'")
    assert not _scanned(db, "SELECT id FROM memories WHERE id = 'ab'")
    assert not _scanned(db, "SELECT count(*) FROM memories WHERE state = 3")


@pytest.mark.usefixtures("memory_backend")
def test_a_store_at_schema_6_is_migrated_and_answers_alike(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A store written before v7 (the full supersedes and subject indexes): opened by
    this version, migrated in place, its repairs, versions and contradictions read as
    before, and new ones are made; on SQLite and on PostgreSQL."""
    assert SCHEMA_VERSION == 9  # (v7 is what this test is about; v8 and v9 follow it)
    migrate = Store.migrate
    monkeypatch.setattr(Store, "migrate", lambda self, target=6: migrate(self, 6))
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    assert e.store.schema_version == 6
    door = e.admit(json.dumps({"subject": "door", "attribute": "state", "value": "open"}), "s")
    fixed = e.repair(door.id, json.dumps({"subject": "door", "attribute": "state",
                                          "value": "shut"}), reason="typo")  # fmt: skip
    monkeypatch.undo()
    e.store.migrate()
    assert e.store.schema_version == 9
    assert _index_names(e) >= {"memories_facts", "memories_one_repair"}
    assert not _index_names(e) & {"memories_subject", "memories_supersedes", "memories_device"}
    assert [m.id for m in e.history(door.id)] == [door.id, fixed.id]
    with pytest.raises(HirmemError, match=f"already repaired by {fixed.id}"):
        e.repair(door.id, "again", reason="twice")
    clock.t += 1
    a = e.admit(json.dumps({"subject": "pump", "attribute": "state", "value": "on"}), "s")
    b = e.admit(json.dumps({"subject": "pump", "attribute": "state", "value": "off"}), "t")
    assert e.require(a.id).flagged and e.require(b.id).flagged  # overlapping, disagreeing
    again = e.repair(fixed.id, json.dumps({"subject": "door", "attribute": "state",
                                           "value": "closed"}), reason="later")  # fmt: skip
    assert [m.id for m in e.history(door.id)] == [door.id, fixed.id, again.id]
    assert e.require(fixed.id).state is State.ARCHIVED
    assert e.verify_audit().ok


def _index_names(e: MemoryEngine) -> set[str]:
    if e.store.pg is None:
        sql = "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'memories'"
    else:
        sql = ("SELECT indexname FROM pg_indexes WHERE tablename = 'memories' "
               "AND schemaname = current_schema()")  # fmt: skip
    with e.store.writing() as db:
        return {str(r[0]) for r in db.execute(sql).fetchall()}


def test_an_old_file_migrates_on_open(tmp_path: Path) -> None:
    """The same on a file closed at v6 and opened again (the daemon's restart)."""
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    for script in MIGRATIONS[:6]:
        assert isinstance(script, str)  # v1-v6 are scripts
        for stmt in _statements(script):
            db.execute(stmt)
    db.execute("PRAGMA user_version=6")
    db.commit()
    db.close()
    e = MemoryEngine(path, clock=Clock())
    assert e.store.schema_version == 9
    assert _index_names(e) == INDEXES
    e.admit(json.dumps({"subject": "door", "attribute": "state", "value": "open"}), "s")
    assert e.verify_audit().ok
    e.close()
