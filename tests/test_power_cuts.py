"""Power cuts during intake and knowledge pushes, on QEMU boards with non-volatile state.

A running daemon serves a board (its UART on a fixed TCP port, its non-volatile region
in a file: hirmem.emulation.qemu ``nv_file``). QEMU is killed at seeded random instants
while the sensor's packs flow and a knowledge version is pushed, and started again on
the same port and file: a power cycle. Afterwards:
 - every boot counter is new (the devices' records carry one boot per power-on, each
   above the previous), so no record id repeats and ``record_conflicts`` stays 0 (before
   non-volatile state, every cold boot restarted at the slot's base and the host parked
   the new records as conflicts);
 - every boot's stored records are capture seqs 1..n (a prefix: what the device had
   not yet released is lost with its RAM, nothing is stored twice) and the store
   verifies again;
 - the knowledge version is held by the device at the end and was never rolled back.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from board_host import provisioned
from hirmem.daemon.config import build_config
from hirmem.daemon.service import Daemon, sign_knowledge
from hirmem.daemon.store import Store
from hirmem.emulation.qemu import QemuBoard
from hirmem.protocol.clock import now_ms
from hirmem.protocol.keys import derive_test_key
from test_daemon import (
    BOARDS,
    HOST_ID,
    HOST_KEY,
    all_records,
    gapless,
    knowledge,
    needs_qemu,
    slot,
    wait_until,
)

CUTS = 12
DEVICES = {**BOARDS, "stm32f4": bytes.fromhex("f400000000000005")}


@needs_qemu
@pytest.mark.parametrize("board", ["mps2-an385", "hifive1", "stm32f4"])
def test_random_power_cuts_during_intake_and_pushes(board: str, tmp_path: Path) -> None:
    dev = DEVICES[board]
    elf = provisioned(board, tmp_path, slot(dev))
    nv = tmp_path / "nv.bin"
    db = tmp_path / "hirmem.db"
    with Store(db) as registry:
        key = derive_test_key(f"daemon test device {dev.hex()}")
        registry.register_device(dev, key.public.raw, board)
    rng = random.Random(f"power cuts {board}")
    qb = QemuBoard(board, elf, timeout=300, nv_file=nv).start()
    port = qb.port
    config = build_config(
        {"host": {"id": HOST_ID.hex(), "database": db.name, "save_every": 0.2,
                  "status_every": 0.3, "reconnect_max": 0.3},
         "device": [{"url": qb.url, "name": board}]},
        tmp_path, [],
    )  # fmt: skip
    daemon = Daemon(config)
    daemon.start()
    try:
        store = daemon.store
        pushed = 0
        session = daemon.workers[0].session
        for cut in range(CUTS):
            if cut == CUTS // 3:  # a version to deliver across the later cuts
                pushed = sign_knowledge(store, HOST_KEY, HOST_ID, knowledge(1), now_ms()).seq
            opened = cut  # sessions before this power-on's

            def powered_on(before: int = opened) -> bool:
                return session.counters.sessions_opened > before

            wait_until(powered_on, 30, "a session with this power-on")
            time.sleep(rng.uniform(0.3, 1.6))
            qb.close()  # the power goes: QEMU killed
            qb = QemuBoard(board, elf, timeout=300, nv_file=nv, port=port).start()
        wait_until(lambda: store.counters(dev).get("device.knowledge_seq") == pushed, 60,
                   "the device holding the pushed version")  # fmt: skip
        target = store.count_records(dev) + 4
        wait_until(lambda: store.count_records(dev) >= target, 60, "records after the cuts")
    finally:
        daemon.stop()
        qb.close()
    with Store(db) as store:
        assert store.count_record_conflicts() == 0
        assert store.check_integrity() == [] and store.integrity_warnings() == []
        runs = gapless(all_records(store))  # per boot: capture seqs 1..n, none twice
        boots = sorted(b for (_, b) in runs)
        assert len(boots) >= CUTS // 2 and boots[0] == 1  # many power-ons released records
        assert store.refusals() == []
