"""Memory at fleet scale (issue 13, speed): what the commands read, what a pack writes.

Speed itself is measured by ``tools/bench_memory.py``; these tests pin the behaviour
that makes it possible and check it against independent oracles: ``stats`` and
``review list`` are answered in SQL without loading the recall index, the integrity
check streams its rows, and admission writes what it must and no more.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from hirmem.memory import cli, distill, review
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.intake import intake_records
from hirmem.memory.model import Layer, State
from hirmem.protocol.gate import FLAGS_MASK
from hirmem.protocol.records import GENESIS, Record

T0 = 1_780_000_000.0
FLAGS = [0x0FFF, 0x0FFE, 0x0C7F, 0x07FF, 0x0C53, 0x0D4F]


def _fill(path: Path, n: int) -> None:
    engine = MemoryEngine(path, clock=lambda: T0)
    for j in range(n):
        engine.admit(f"door {j % 7} is open at {j}", f"s{j % 5}", flags=FLAGS[j % len(FLAGS)])
    engine.close()


def run_cli(db: Path, *argv: str) -> int:
    parser = argparse.ArgumentParser(prog="hirmem")
    sub = parser.add_subparsers(dest="command", required=True)
    cli.add_parser(sub)
    return cli.run(parser.parse_args(["memory", "--db", str(db), *argv]))


def test_stats_and_review_list_never_load_the_recall_index(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite"
    _fill(path, 60)
    engine = MemoryEngine(path, clock=lambda: T0)
    stats = engine.stats()
    pending = review.pending(engine)
    assert engine._index is None  # neither read one embedding
    # the oracle: the rows themselves, counted in Python
    rows = sqlite3.connect(path).execute("SELECT state, layer FROM memories").fetchall()
    states, layers = Counter(r[0] for r in rows), Counter(r[1] for r in rows)
    assert stats["states"] == {s.name.lower(): states.get(int(s), 0) for s in State}
    assert {k: v for k, v in stats["layers"].items() if k != "provenance"} == {
        x.name.lower(): layers.get(int(x), 0) for x in Layer if x is not Layer.PROVENANCE
    }
    assert [m.id for m in pending] == [
        r[0] for r in sqlite3.connect(path).execute(
            "SELECT id FROM memories WHERE state = 3 ORDER BY rowid")
    ]  # fmt: skip
    assert len(pending) == review.pending_count(engine) > 3
    assert [m.id for m in review.pending(engine, 3)] == [m.id for m in pending[:3]]
    engine.close()


def test_stats_is_answered_from_an_index(tmp_path: Path) -> None:
    """At a million rows a table scan reads every 1 KiB embedding: the plan must use the
    (state, layer) index alone."""
    path = tmp_path / "m.sqlite"
    _fill(path, 5)
    db = sqlite3.connect(path)
    plan = " ".join(
        str(r[-1]) for r in db.execute(
            "EXPLAIN QUERY PLAN SELECT state, layer, count(*) FROM memories "
            "GROUP BY state, layer")
    )  # fmt: skip
    assert "COVERING INDEX memories_state_layer" in plan, plan


def test_cli_review_list_pages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.sqlite"
    _fill(path, 60)
    capsys.readouterr()
    assert run_cli(path, "review", "list", "--limit", "2") == 0
    out = capsys.readouterr().out
    total = sqlite3.connect(path).execute(
        "SELECT count(*) FROM memories WHERE state = 3").fetchone()[0]  # fmt: skip
    assert out.count("reason:") == 2
    assert f"(2 of {total} quarantined shown" in out
    assert run_cli(path, "review", "list", "--all") == 0
    assert capsys.readouterr().out.count("reason:") == total
    assert run_cli(path, "stats") == 0
    assert f"quarantined {total}" in capsys.readouterr().out


def test_stats_json_of_states_matches_after_reopen(tmp_path: Path) -> None:
    """The counts survive a reopen (they are the file's, not a cache's)."""
    path = tmp_path / "m.sqlite"
    _fill(path, 12)
    first = MemoryEngine(path, clock=lambda: T0)
    a = json.dumps(first.stats(), sort_keys=True)
    first.close()
    second = MemoryEngine(path, clock=lambda: T0)
    assert json.dumps(second.stats(), sort_keys=True) == a
    second.close()


def _bulk(path: Path, n: int) -> None:
    """``n`` gated memories written straight into the file (each with a 1 KiB embedding):
    admitting them one by one would only slow the test."""
    engine = MemoryEngine(path, clock=lambda: T0)
    proto = engine.admit("seed", "s")
    row = engine.store.db.execute(
        "SELECT * FROM memories WHERE id = ?", (proto.id,)).fetchone()  # fmt: skip
    names = [d[1] for d in engine.store.db.execute("PRAGMA table_info(memories)")]
    engine.close()
    db = sqlite3.connect(path)
    rows = []
    for j in range(n):
        values = dict(zip(names, row, strict=True))
        values.pop("rowid")
        values["id"] = (b"bulk" + j.to_bytes(12, "big")).hex()
        values["payload"] = f"bulk row {j}".encode()
        rows.append(values)
    cols = [c for c in names if c != "rowid"]
    for values in rows:
        cur = db.execute(
            f"INSERT INTO memories ({', '.join(cols)}) VALUES ({', '.join(':' + c for c in cols)})",
            values,
        )
        db.execute("INSERT INTO embeddings VALUES (?, ?)", (cur.lastrowid, bytes(1024)))
    db.commit()
    db.close()


def test_check_integrity_streams_and_agrees_with_the_model(tmp_path: Path) -> None:
    """Thousands of rows, some corrupted: the check names exactly the rows whose
    recomputed content hash (Memory.content_hash, the oracle) differs, and its peak
    memory stays far below the size of the rows it read."""
    import random
    import tracemalloc

    path = tmp_path / "m.sqlite"
    n = 6000
    _bulk(path, n)
    engine = MemoryEngine(path, clock=lambda: T0)
    rows = engine.store.select()
    engine.close()
    rng = random.Random(13)
    broken = sorted(m.id for m in rng.sample(rows, 25))
    db = sqlite3.connect(path)
    db.execute("DROP TRIGGER memories_content_fixed")  # a forger's first step
    # each row whole (its model hash), then a random few rewritten behind the hash
    db.executemany("UPDATE memories SET hash = ? WHERE id = ?",
                   [(m.content_hash(), m.id) for m in rows])  # fmt: skip
    db.executemany("UPDATE memories SET payload = x'00' || payload WHERE id = ?",
                   [(b,) for b in broken])  # fmt: skip
    db.commit()
    db.close()
    del rows
    engine = MemoryEngine(path, clock=lambda: T0)
    oracle = [
        m.id for m in engine.store.select(tail="ORDER BY rowid") if m.content_hash() != m.hash
    ]
    assert sorted(oracle) == broken
    tracemalloc.start()
    found = engine.check_integrity()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert found == oracle
    assert all(engine.require(b).state is State.QUARANTINED or engine.require(b).flagged
               for b in broken)  # fmt: skip
    # the rows hold n x (1 KiB embedding + payload): reading them all would take > 6 MB
    assert peak < 2_000_000, f"check_integrity peaked at {peak:,} B over {n} rows"
    engine.close()


def _readings(n: int, start: int = 0) -> tuple[bytes, list[Record]]:
    device = bytes.fromhex("0102030405060709")
    recs: list[Record] = []
    link = GENESIS
    for seq in range(start + 1, start + n + 1):
        rid = device + (1).to_bytes(4, "big") + seq.to_bytes(4, "big")
        body = json.dumps({"t": 21.0 + (seq % 7) / 10, "n": seq}).encode()
        rec = Record.capture(rid, body, f"sensor/temp{seq % 2}", 1_780_000_000_000 + 50 * seq,
                             bytes(32), FLAGS_MASK, 0x10000, 0xE666, 0x8000, link)  # fmt: skip
        recs.append(rec)
        link = rec.hash
    return device, recs


def test_a_pack_is_one_transaction_and_each_record_written_once(tmp_path: Path) -> None:
    """Admission of a pack of GREEN readings: one transaction, one INSERT per record,
    and (besides its one final write) no full-row rewrite of the record; the 1 KiB
    embedding is written once, in its own table, and never rewritten."""
    engine = MemoryEngine(tmp_path / "m.sqlite", clock=lambda: T0)
    device, recs = _readings(96)
    intake_records(engine, recs[:64], device, b"kid", GENESIS)  # the patterns exist now
    seen: list[str] = []
    engine.store.sqlite.set_trace_callback(seen.append)
    report = intake_records(engine, recs[64:], device, b"kid", recs[63].hash)
    engine.store.sqlite.set_trace_callback(None)
    assert len(report.admitted) == 32
    # a statement with RETURNING is traced at each step: one execution, however traced
    ran = [s for j, s in enumerate(seen) if j == 0 or s != seen[j - 1]]
    upper = [s.lstrip().upper() for s in ran if not s.lstrip().startswith("--")]
    assert sum(s.startswith("BEGIN") for s in upper) == 1
    assert sum(s.startswith("COMMIT") for s in upper) == 1
    assert sum(s.startswith("INSERT INTO MEMORIES") for s in upper) == 32
    assert sum(s.startswith("INSERT INTO EMBEDDINGS") for s in upper) == 32
    full_rows = [s for s in upper if s.startswith("UPDATE MEMORIES SET FLAGS")]
    # each record's row is inserted in its final state and never rewritten; each of the
    # two patterns (temp0, temp1) is written once for the whole pack (issue 13: one
    # write of the distilled row per pack, not per record), and only in the columns
    # its step changes (its episodes' links are in distill_links, never in its row)
    patterns = {p.memory_id for p in distill.patterns(engine)}
    assert len(patterns) == 2
    assert full_rows == []
    steps = [s for s in upper if s.startswith("UPDATE MEMORIES SET H = ")]
    assert len(steps) == 2, len(steps)
    rowids = {str(engine.store.rowid(p)) for p in patterns}
    assert {s.rsplit("WHERE ROWID = ", 1)[1].strip() for s in steps} == rowids
    assert not any("UPDATE MEMORIES SET STATE" in s for s in upper)
    assert not any("EMBEDDING" in s for s in upper if s.startswith("UPDATE"))
    assert engine.verify_audit().ok
    engine.close()


def test_an_hourly_sweep_writes_only_what_moved_and_agrees_with_settling_all(
    tmp_path: Path,
) -> None:
    """Two copies of one store, swept hourly for ten fake days: one settles every row
    whose strength moved (``sweep_settle_delta = 0``), the other only rows that moved by
    the default delta or changed state. At every sweep both agree on every memory's
    state and on its strength decayed to now (the oracle: the settle-all copy), and the
    second writes far fewer rows."""
    import shutil

    import numpy as np

    from hirmem.memory.config import MemoryConfig
    from hirmem.memory.dynamics import decayed_now

    src = tmp_path / "a.sqlite"
    engine = MemoryEngine(src, clock=lambda: T0)
    for j in range(240):
        body = (json.dumps({"t": 20 + j % 5, "n": j}) if j % 3 == 0
                else f"valve {j % 11} holds pressure {j}")  # fmt: skip
        engine.admit(body, f"s{j % 4}", flags=FLAGS[j % 3], confidence=0.6 + (j % 4) / 10)
    engine.close()
    shutil.copy(src, tmp_path / "b.sqlite")
    shutil.copy(str(src) + ".key", str(tmp_path / "b.sqlite") + ".key")
    clock = [T0]
    every = MemoryEngine(src, MemoryConfig(sweep_settle_delta=0.0), clock=lambda: clock[0])
    lazy = MemoryEngine(tmp_path / "b.sqlite", MemoryConfig(), clock=lambda: clock[0])
    written = {"every": 0, "lazy": 0}

    def effective(e: MemoryEngine) -> dict[str, tuple[int, float]]:
        rows = e.store.db.execute(
            "SELECT id, state, strength, last_access, decayed_at, layer FROM memories "
            "ORDER BY rowid").fetchall()  # fmt: skip
        m = decayed_now(clock[0], np.array([r[2] for r in rows]), np.array([r[3] for r in rows]),
                        np.array([r[4] for r in rows]), np.array([r[5] for r in rows], np.int8),
                        e.config)  # fmt: skip
        return {r[0]: (int(r[1]), float(x)) for r, x in zip(rows, m, strict=True)}

    for hour in range(1, 24 * 10 + 1):
        clock[0] = T0 + 3600.0 * hour
        if hour % 17 == 0:  # the same rehearsal in both
            for e in (every, lazy):
                e.recall(f"valve {hour % 11} pressure", k=3)
        written["every"] += every.sweep().changed
        written["lazy"] += lazy.sweep().changed
        a, b = effective(every), effective(lazy)
        assert a.keys() == b.keys()
        for mid, (state, strength) in a.items():
            assert b[mid][0] == state, (hour, mid)
            assert abs(b[mid][1] - strength) < 1e-9, (hour, mid, b[mid][1], strength)
    assert every.verify_audit().ok and lazy.verify_audit().ok
    assert written["lazy"] * 3 < written["every"], written
    every.close()
    lazy.close()


def test_list_filters_in_sql_as_the_recall_filter_does(tmp_path: Path) -> None:
    """Random filters: the SQL form selects exactly the memories ``matches`` accepts
    (the oracle, in Python over every row), and listing loads no recall index."""
    import random

    from hirmem.memory.recall import RecallFilter

    path = tmp_path / "m.sqlite"
    _fill(path, 60)
    engine = MemoryEngine(path, clock=lambda: T0)
    every = engine.store.select(tail="ORDER BY rowid")
    rng = random.Random(7)
    sources = [*sorted({m.source for m in every}), "nowhere"]
    subjects = [*sorted({m.subject for m in every}), "nothing"]
    for _ in range(300):
        flt = RecallFilter(
            layers=frozenset(rng.sample(list(Layer), rng.randint(0, 2))),
            states=frozenset(rng.sample(list(State), rng.randint(0, 3))),
            sources=frozenset(rng.sample(sources, rng.randint(0, 2))),
            devices=frozenset(rng.sample(["", "0102030405060708"], rng.randint(0, 1))),
            subjects=frozenset(rng.sample(subjects, rng.randint(0, 1))),
        )
        where, params = flt.sql()
        got = [m.id for m in engine.store.select(where, params, "ORDER BY rowid")]
        assert got == [m.id for m in every if flt.matches(m)], flt
    assert engine._index is None
    engine.close()


def test_cli_list_stops_at_its_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.sqlite"
    _fill(path, 30)
    capsys.readouterr()
    assert run_cli(path, "list", "--state", "quarantined", "--limit", "3") == 0
    lines = capsys.readouterr().out.splitlines()
    want = [r[0] for r in sqlite3.connect(path).execute(
        "SELECT id FROM memories WHERE state = 3 ORDER BY rowid LIMIT 3")]  # fmt: skip
    assert [line.split()[0] for line in lines] == want and len(want) == 3
