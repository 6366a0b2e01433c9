"""Patterns' steps with the recall index loaded (issue 13, distillation on the pack path):
the index takes each step's strength, last access, settled decay and trust from the step
itself, not by reading the pattern back whole. The oracle is an index loaded afresh from
the rows. On SQLite and on PostgreSQL."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from hirmem.memory.engine import MemoryEngine
from hirmem.memory.intake import admit_pack
from hirmem.protocol.records import GENESIS, Record
from memory_backends import memory_backend, memory_server  # noqa: F401  (fixtures)
from record_chains import chained

pytestmark = pytest.mark.usefixtures("memory_backend")

DEV = bytes.fromhex("c1c1c1c1c1c1c101")
T0 = 1_790_000_000.0
COLUMNS = ("strength", "last_access", "decayed_at", "trust", "state", "layer")


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _body(k: int) -> dict[str, Any]:
    if k % 5 == 0:
        return {"action": ["close V3", "open V4"], "result": "flow restored",
                "outcome": "success" if k % 3 else "failure"}  # fmt: skip
    return {"sensor": f"temp{k % 3}", "t": round(21 + (k * 7 % 13) / 10, 2)}


def _pack(first: int, n: int, link: bytes) -> list[Record]:
    return chained(DEV, first, map(_body, range(first, first + n)), link)


def _columns(engine: MemoryEngine, rowids: list[int]) -> dict[str, list[float]]:
    index = engine.index
    at = [int(index.pos_of_rowid[r]) for r in rowids]
    assert min(at) >= 0
    return {c: getattr(index, c)[at].tolist() for c in COLUMNS}


def test_steps_with_the_index_loaded_leave_it_as_a_fresh_load_finds_the_rows() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    link = GENESIS
    for p in range(12):
        if p == 1:
            assert e.index.n > 0  # loaded once the first patterns are born
        clock.t = T0 + 3600 * p  # an hour between packs: decay is owed at each step
        recs = _pack(1 + 8 * p, 8, link)
        admit_pack(e, recs, DEV, b"kid-index", link)
        link = recs[-1].hash
    rowids = [int(r[0]) for r in e.store.db.execute(
        "SELECT rowid FROM memories WHERE kind IN ('pattern', 'procedure') ORDER BY rowid")]
    assert len(rowids) == 4  # three sensors and the action chain
    kept = _columns(e, rowids)
    index = e.index  # its ranking weight follows the columns (relative to its own t0)
    at = [int(index.pos_of_rowid[r]) for r in rowids]
    expect = (index.strength[at] * index.trust[at]
              * np.exp((index.last_access[at] - index.t0) / index.recency_tau))  # fmt: skip
    assert np.allclose(index.weight[at], expect, rtol=1e-6)
    e._reload_index()  # the oracle: the index read afresh from the rows
    fresh = _columns(e, rowids)
    for c in COLUMNS:
        assert np.allclose(kept[c], fresh[c], rtol=1e-6, atol=0), c
    assert kept["strength"] == fresh["strength"]  # written and indexed alike, exactly
    assert e.verify_audit().ok
    e.close()
