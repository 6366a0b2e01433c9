"""Strength points held back to their transaction's commit (issue 13, speed at fleet
scale): a follow batch writes its packs' admission points and their patterns' steps
with one statement; the points read back are those written one by one; a rollback
drops them; a read inside the transaction sees them."""

from __future__ import annotations

import random
import sqlite3
from typing import Any

import numpy as np
import pytest

from hirmem.memory.engine import HISTORY_ADMIT, HISTORY_PRESSURE, MemoryEngine
from hirmem.memory.intake import PackIn, admit_pack, admit_packs
from hirmem.protocol.records import GENESIS
from test_memory_admit_pack import DEV, KEY, T0, Clock, _records


def _packs(n: int) -> list[PackIn]:
    records = _records(random.Random(31), 8 * n, corrupt=False)
    out = []
    link = GENESIS
    for p in range(0, len(records), 8):
        out.append(PackIn(records[p : p + 8], DEV, KEY.kid, link))
        link = records[p + 7].hash
    return out


class _Counting:
    """The write connection, with the statements said through it noted."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.said: list[str] = []

    def execute(self, sql: str, *args: Any) -> Any:
        self.said.append(sql)
        return self.db.execute(sql, *args)

    def executemany(self, sql: str, *args: Any) -> Any:
        self.said.append(sql)
        return self.db.executemany(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


def _history(e: MemoryEngine) -> list[tuple[object, ...]]:
    with e.store.reading() as db:
        return [tuple(r) for r in db.execute(
            "SELECT memory, slot, ts, strength, cause FROM strength_history "
            "ORDER BY memory, slot")]  # fmt: skip


def test_a_batch_writes_its_strength_points_with_one_statement() -> None:
    packs = _packs(24)
    a = MemoryEngine(":memory:", clock=Clock())
    counted = _Counting(a.store.sqlite)
    a.store.db = counted
    admit_packs(a, packs)
    a.store.db = counted.db
    b = MemoryEngine(":memory:", clock=Clock())
    for p in packs:
        admit_pack(b, p.records, p.device_id, p.kid, p.prev)
    points = _history(a)
    assert points == _history(b)
    assert {r[4] for r in points} == {HISTORY_ADMIT, HISTORY_PRESSURE}  # admissions, steps
    written = [k for k, sql in enumerate(counted.said) if "strength_history" in sql]
    assert len(written) == 1 and counted.said[written[0] + 1 :] == ["COMMIT"]  # at commit
    assert len(counted.said) > 2 * len(packs)  # (the pack path's statements were counted)


def test_points_of_a_rolled_back_transaction_are_dropped_and_read_inside_it() -> None:
    e = MemoryEngine(":memory:", clock=Clock())
    packs = _packs(4)
    admit_packs(e, packs[:2])
    before = _history(e)
    m = e.admit("a note", "s")
    with pytest.raises(RuntimeError, match="undone"), e.store.transaction():
        admit_packs(e, packs[2:])
        e._record_history(np.array([e.store.rowid(m.id) or 0]), T0 + 10, np.array([0.25]),
                          HISTORY_PRESSURE)  # fmt: skip
        e._record_history(np.array([e.store.rowid(m.id) or 0]), T0 + 11, np.array([0.5]),
                          HISTORY_PRESSURE)  # fmt: skip
        # the writer reads its own points, the later of one bucket replacing the earlier
        assert e.strength_history(m.id)[-1] == (T0 + 11, 0.5, "pressure")
        assert len(_history(e)) > len(before)
        raise RuntimeError("undone")
    assert e.strength_history(m.id)[-1][1] != 0.5
    assert _history(e) == before + [r for r in _history(e) if r not in before]
    assert len(_history(e)) == len(before) + 1  # only the note's own admission point
    assert e.verify_audit().ok
