"""The daemon keeps the memory itself: follow and the decay scheduler on an interval."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hirmem.daemon.config import ConfigError, build_config
from hirmem.daemon.service import Daemon, render_metrics
from hirmem.memory import evidence
from hirmem.memory.config import MemoryConfig
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.keeper import MemoryKeeper
from hirmem.protocol.records import Record
from test_metrics import samples, value
from test_store import DEV_A, KEY_A, Device

HOST = "a1a2a3a4a5a6a7a8"


def test_memory_is_on_by_default_beside_the_intake_database(tmp_path: Path) -> None:
    cfg = build_config({"host": {"id": HOST, "database": "intake.db"}}, tmp_path, ["loop://"])
    assert cfg.memory == tmp_path / "hirmem-memory.sqlite"
    assert cfg.memory_every == 2.0 and cfg.memory_config is None
    off = build_config({"host": {"id": HOST, "memory_every": 0}}, tmp_path, ["loop://"])
    assert off.memory is None
    with pytest.raises(ConfigError, match="intake database itself"):
        build_config({"host": {"id": HOST, "memory": "hirmem.db"}}, tmp_path, ["loop://"])
    with pytest.raises(ConfigError, match=r"memory_config.*no such file"):
        build_config({"host": {"id": HOST, "memory_config": "nope.json"}}, tmp_path, ["loop://"])
    with pytest.raises(ConfigError, match="memory_every"):
        build_config({"host": {"id": HOST, "memory_every": -1}}, tmp_path, ["loop://"])


def test_the_running_daemon_follows_its_intake_and_sweeps(tmp_path: Path) -> None:
    cfg = build_config(
        {"host": {"id": HOST, "database": "intake.db", "memory_every": 0.05,
                  "save_every": 0.1, "status_every": 0}},
        tmp_path, ["loop://"],
    )  # fmt: skip
    assert cfg.memory is not None
    daemon = Daemon(cfg)
    keeper = MemoryKeeper.open(
        cfg.memory, cfg.database, cfg.memory_every, MemoryConfig(sweep_interval_s=0.2)
    )
    daemon.add_background(keeper)
    daemon.store.register_device(DEV_A, KEY_A.public.raw, "mps2-an385")
    dev = Device(DEV_A, KEY_A)
    packs = [dev.pack(3), dev.pack(2)]
    daemon.start()
    try:
        for p in packs:
            assert daemon.store.take_pack(DEV_A, p.encoded).status == "accepted"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (
            keeper.counters.admitted + keeper.counters.quarantined < 5 or keeper.counters.sweeps < 2
        ):
            time.sleep(0.05)
    finally:
        daemon.stop()
    assert daemon.background_failures == {"memory": 0}
    text = render_metrics(daemon)
    assert value(text, "hirmem_background_failures_total", job="memory") == 0
    # the keeper's own counters, and the memories by state (the quarantine among them)
    assert value(text, "hirmem_memory_admitted_total") == keeper.counters.admitted
    assert value(text, "hirmem_memory_quarantined_total") == keeper.counters.quarantined
    assert value(text, "hirmem_memory_sweeps_total") == keeper.counters.sweeps
    states = keeper.engine.stats()["states"]
    assert value(text, "hirmem_memory_memories", state="quarantined") == states["quarantined"]
    assert sum(s.value for s in samples(text, "hirmem_memory_memories")) == sum(states.values())
    assert (keeper.counters.packs, keeper.counters.admitted) == (2, 5)
    assert keeper.counters.sweeps >= 2
    engine = MemoryEngine(cfg.memory)
    ids = {r.id.hex() for p in packs for r in p.items if isinstance(r, Record)}
    # every device record is a memory (beside the patterns distilled from them)
    assert {m.id for m in engine.store.select("kind != 'pattern'")} == ids
    assert engine.verify_audit().ok
    assert engine.store.meta("last_sweep") is not None
    with engine.store.reading() as db:  # the stop signed the head the daemon left
        last = evidence.latest_checkpoint(db)
    assert last is not None and last.audit_seq == engine.audit.head_seq
    engine.close()


def test_a_failing_background_tick_is_counted_and_retried(tmp_path: Path) -> None:
    class Flaky:
        name = "memory"
        interval = 0.02

        def __init__(self) -> None:
            self.ticks = 0
            self.closed = False

        def tick(self) -> object:
            self.ticks += 1
            if self.ticks <= 2:
                raise OSError("intake database is locked")
            return None

        def close(self) -> None:
            self.closed = True

    cfg = build_config({"host": {"id": HOST, "database": "intake.db", "memory_every": 0}},
                       tmp_path, ["loop://"])  # fmt: skip
    job = Flaky()
    daemon = Daemon(cfg, background=[job])
    daemon.start()
    try:
        deadline = time.monotonic() + 10
        while job.ticks < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        daemon.stop()
    assert job.ticks >= 4 and job.closed
    assert daemon.background_failures == {"memory": 2}
    assert value(render_metrics(daemon), "hirmem_background_failures_total", job="memory") == 2
