"""One writer: admissions, sweeps, recalls, reviews, repairs, follow and the decay
scheduler from several threads at once, a fixed number of operations each. Afterwards:
no thread saw an error, the audit chain verifies, and the in-memory recall index agrees
with the stored rows."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from hirmem.daemon.store import Store as DaemonStore
from hirmem.memory import review
from hirmem.memory.config import MemoryConfig
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.follow import follow_intake
from hirmem.memory.model import State
from test_store import DEV_A, KEY_A, Device

T0 = 1_780_000_000.0


class SharedClock:
    """A fake clock several threads read: every reading is one second later."""

    def __init__(self) -> None:
        self._t = T0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            self._t += 1.0
            return self._t


def index_disagreements(engine: MemoryEngine) -> list[str]:
    """Where the recall index differs from the rows (empty when they agree)."""
    with engine.store.reading() as db:
        rows = db.execute(
            "SELECT rowid, id, strength, last_access, trust, state, layer FROM memories "
            "WHERE state != 0"
        ).fetchall()
    idx = engine.index
    out = [] if idx.n == len(rows) else [f"index holds {idx.n} rows, store {len(rows)}"]
    for rowid, mid, strength, last_access, trust, state, layer in rows:
        pos = int(idx.pos_of_rowid[rowid]) if rowid < len(idx.pos_of_rowid) else -1
        if pos < 0:
            out.append(f"{mid} missing from the index")
            continue
        got = (idx.ids[pos].tobytes().hex(), float(idx.strength[pos]),
               float(idx.last_access[pos]), float(idx.trust[pos]), int(idx.state[pos]),
               int(idx.layer[pos]))  # fmt: skip
        if got != (mid, strength, last_access, trust, state, layer):
            out.append(f"{mid}: index {got} != row {(mid, strength, last_access, trust)}")
    return out


def run_threads(jobs: list[Callable[[], None]]) -> list[BaseException]:
    errors: list[BaseException] = []
    start = threading.Barrier(len(jobs))

    def wrap(job: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            start.wait()
            try:
                job()
            except BaseException as exc:  # every error counts against the writer
                errors.append(exc)

        return run

    threads = [threading.Thread(target=wrap(j)) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a worker thread hung"
    return errors


@pytest.mark.parametrize("where", ["file", "memory"])
def test_admit_sweep_recall_review_and_scheduler_from_threads(where: str, tmp_path: Path) -> None:
    path = tmp_path / "mem.sqlite" if where == "file" else ":memory:"
    cfg = MemoryConfig(sweep_interval_s=1.0, audit_strength_delta=0.01, working_capacity=64)
    engine = MemoryEngine(path, cfg, clock=SharedClock())
    ops = 150
    # the scheduler's own thread sweeps as well, polling every millisecond
    engine.scheduler.start(poll=0.001)
    errors: list[BaseException] = []

    def admit() -> None:
        for n in range(ops):
            payload = json.dumps({"subject": f"room{n % 7}", "attribute": "temp",
                                  "value": str(n % 3)})  # fmt: skip
            engine.admit(payload, "sensor", confidence=0.5 + (n % 5) / 10)

    def admit_red() -> None:
        for n in range(ops):
            # flags 0x0F0F: H and R fail partly → YELLOW/RED mixes, quarantines to review
            engine.admit(f"doubtful reading {n}", "probe", flags=0x0F0F if n % 2 else 0x00FF)

    def sweep() -> None:
        for _ in range(ops):
            engine.sweep()

    def recall() -> None:
        for n in range(ops):
            engine.recall(f"room{n % 7} temp", k=5)
            engine.recall_batch(["doubtful reading", "sensor"], k=3, touch=False)

    def steward() -> None:
        done = 0
        while done < ops // 3:
            waiting = review.pending(engine)
            if not waiting:
                engine.admit(f"steward fodder {done}", "probe", flags=0x00FF)
                continue
            m = waiting[done % len(waiting)]
            decision = ("promote", "retire", "keep")[done % 3]
            if m.permanent:
                decision = "keep"
            try:
                review.decide(engine, m.id, "ana", decision, "checked by hand")
            except Exception as exc:
                # another decision may have moved it first: only that refusal is allowed
                if "not quarantined" not in str(exc):
                    raise
            done += 1

    def repair() -> None:
        done = 0
        while done < ops // 5:
            live = engine.store.select(
                "state IN (1, 2) AND id NOT IN (SELECT supersedes FROM memories)",
                tail="ORDER BY rowid DESC LIMIT 1",
            )
            if not live:
                continue
            engine.repair(live[0].id, f"corrected {done}", reason="re-read")
            done += 1

    intake = DaemonStore(tmp_path / "intake.db")
    intake.register_device(DEV_A, KEY_A.public.raw)
    device = Device(DEV_A, KEY_A)

    def follow() -> None:
        for _ in range(ops // 10):
            assert intake.take_pack(DEV_A, device.pack(3).encoded).status == "accepted"
            follow_intake(engine, intake)

    errors = run_threads([admit, admit_red, sweep, recall, steward, repair, follow])
    engine.scheduler.stop()
    assert errors == [], errors[:5]
    verdict = engine.verify_audit()
    assert verdict.ok, str(verdict)
    assert index_disagreements(engine) == []
    states = engine.stats()["states"]
    assert states["quarantined"] + states["consolidated"] + states["archived"] > ops
    assert engine.store.count("state != ?", (int(State.VOLATILE),)) >= 2 * ops
    assert engine.store.count("supersedes != ''") == ops // 5
    # every device record once (the patterns distilled from them are not records)
    assert engine.store.count("device != '' AND version = 1 AND kind != 'pattern'") == 3 * (
        ops // 10
    )
    intake.close()
    engine.close()


def test_readers_in_other_threads_see_only_committed_rows(tmp_path: Path) -> None:
    """A reader thread never shares the writer's transaction: rows written inside an open
    transaction are invisible to it until the commit."""
    engine = MemoryEngine(tmp_path / "mem.sqlite", clock=SharedClock())
    inside = threading.Event()
    release = threading.Event()
    seen: list[int] = []

    def writer() -> None:
        with engine.store.transaction():
            engine.admit("written in an open transaction", "w")
            inside.set()
            release.wait(10)

    t = threading.Thread(target=writer)
    t.start()
    assert inside.wait(10)
    seen.append(engine.store.count())  # from this (reader) thread, mid-transaction
    seen.append(len(engine.audit.records()))
    release.set()
    t.join()
    seen.append(engine.store.count())
    assert seen == [0, 0, 1]
    engine.close()


def test_two_engines_on_one_file_take_turns_without_breaking_anything(tmp_path: Path) -> None:
    """The daemon's engine and a `hirmem memory` command are two connections to one file:
    each notices the other's commits before writing (audit head, recall index)."""
    path = tmp_path / "mem.sqlite"
    clock = SharedClock()
    daemon = MemoryEngine(path, clock=clock)
    command = MemoryEngine(path, clock=clock)
    for n in range(20):
        daemon.admit(f"daemon reading {n}", "d")
        command.admit(f"command note {n}", "c")
        if n % 5 == 0:
            command.sweep()
            daemon.sweep()
    command.admit("command note 20", "c")
    for touch in (False, True):  # admitted by the other connection, found either way
        hits = daemon.recall("command note 20", k=1, touch=touch)
        assert hits and daemon.require(hits[0].id).payload == b"command note 20"
    for engine in (daemon, command):  # each index catches up at its next use
        engine.recall("anything", k=1, touch=False)
        assert index_disagreements(engine) == []
    assert daemon.verify_audit().ok and command.verify_audit().ok
    command.close()
    daemon.close()
