"""The daemon re-pushes knowledge a device lost: it trusts the device's reported head.

A board without non-volatile state (stm32f4 in QEMU) accepts knowledge version 1, then
loses power (QEMU killed) and comes back on the same line (the same image on the same
TCP port). Its STATUS now says knowledge_seq 0 while the store remembers "accepted";
the daemon pushes the version again (before, it never did: _maybe_push looked only at
its own record of the answer) and the device holds it again.
"""

from __future__ import annotations

import logging
from pathlib import Path

from board_host import provisioned
from hirmem.daemon.config import build_config
from hirmem.daemon.service import Daemon, sign_knowledge
from hirmem.daemon.store import Store
from hirmem.emulation.qemu import QemuBoard
from hirmem.protocol.clock import now_ms
from hirmem.protocol.identity import triple_id
from hirmem.protocol.keys import derive_test_key
from hirmem.protocol.packs import KnowledgeItem
from test_daemon import HOST_ID, HOST_KEY, knowledge, needs_qemu, slot, wait_until

DEVICE = bytes.fromhex("f400000000000004")


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@needs_qemu
def test_knowledge_lost_in_a_power_cycle_is_pushed_again(tmp_path: Path) -> None:
    elf = provisioned("stm32f4", tmp_path, slot(DEVICE, sensor_ms=0))
    db = tmp_path / "hirmem.db"
    with Store(db) as store:
        key = derive_test_key(f"daemon test device {DEVICE.hex()}")
        store.register_device(DEVICE, key.public.raw, "stm32f4")
    collect = Collect()
    logging.getLogger("hirmem.daemon").addHandler(collect)
    first = QemuBoard("stm32f4", elf, timeout=120).start()
    port = first.port
    config = build_config(
        {"host": {"id": HOST_ID.hex(), "database": db.name, "save_every": 0.2,
                  "status_every": 0.3, "reconnect_max": 0.5},
         "device": [{"url": first.url, "name": "stm32f4"}]},
        tmp_path, [],
    )  # fmt: skip
    daemon = Daemon(config)
    daemon.start()
    second: QemuBoard | None = None
    try:
        store = daemon.store

        def device_holds(seq: int) -> bool:
            return store.counters(DEVICE).get("device.knowledge_seq") == seq

        pack = sign_knowledge(store, HOST_KEY, HOST_ID, knowledge(1), now_ms())
        wait_until(lambda: device_holds(pack.seq), 30, "the device holding version 1")
        assert [(s, st) for s, st, _, _ in store.device_knowledge(DEVICE)] == [(1, "accepted")]
        first.close()  # power off: the board keeps nothing
        wait_until(lambda: device_holds(0) or not daemon.workers[0].session.is_open, 10,
                   "the line dropped")  # fmt: skip
        second = QemuBoard("stm32f4", elf, timeout=120, port=port).start()  # power on
        wait_until(lambda: "device lost knowledge" in collect.messages, 30,
                   "the daemon noticing the lost version")  # fmt: skip
        wait_until(lambda: device_holds(pack.seq), 30, "the device holding version 1 again")
    finally:
        logging.getLogger("hirmem.daemon").removeHandler(collect)
        daemon.stop()
        first.close()
        if second is not None:
            second.close()
    assert collect.messages.count("device lost knowledge") == 1


def facts(version: int, n: int) -> list[KnowledgeItem]:
    triples = [("pump", "serves", f"zone {version}.{k}") for k in range(n)]
    return [KnowledgeItem(bytes.fromhex(triple_id(*t)), *t, 0xF000) for t in triples]


@needs_qemu
def test_nine_facts_on_an_eight_fact_board_are_refused_and_the_next_version_goes(
    tmp_path: Path,
) -> None:
    """Issue 15 §4 on the C core (mps2-an385, HM_KNOWLEDGE_CAPACITY 8; the 16 KB hifive1
    is built with 4): its HELLO states 8 facts; version 1 of 9 facts is recorded refused
    (storage) without being sent, and version 2 of 8 facts is pushed and accepted (the
    board's STATUS reports it held)."""
    board = bytes.fromhex("f400000000000008")
    elf = provisioned("mps2-an385", tmp_path, slot(board, sensor_ms=0))
    db = tmp_path / "hirmem.db"
    with Store(db) as store:
        key = derive_test_key(f"daemon test device {board.hex()}")
        store.register_device(board, key.public.raw, "mps2-an385")
    with QemuBoard("mps2-an385", elf, timeout=120) as qb:
        config = build_config(
            {"host": {"id": HOST_ID.hex(), "database": db.name, "save_every": 0.2,
                      "status_every": 0.3},
             "device": [{"url": qb.url, "name": "mps2-an385"}]},
            tmp_path, [],
        )  # fmt: skip
        daemon = Daemon(config)
        daemon.start()
        try:
            store = daemon.store
            wait_until(lambda: store.device_limits(board) is not None, 30, "the board's HELLO")
            limits = store.device_limits(board)
            assert limits is not None and (limits.knowledge_facts, limits.knowledge_text) == (
                8, 32)  # fmt: skip
            nine = sign_knowledge(store, HOST_KEY, HOST_ID, facts(1, 9), now_ms())
            wait_until(lambda: store.device_knowledge(board) == [(nine.seq, "refused", 11, 0)],
                       10, "version 1 refused")  # fmt: skip
            eight = sign_knowledge(store, HOST_KEY, HOST_ID, facts(2, 8), now_ms())
            wait_until(lambda: store.counters(board).get("device.knowledge_seq") == eight.seq,
                       30, "version 2 held by the board")  # fmt: skip
            answers = {s: st for s, st, _, _ in store.device_knowledge(board)}
            assert answers == {nine.seq: "refused", eight.seq: "accepted"}
            assert store.counters(board).get("knowledge_pushed") == 1  # only version 2
        finally:
            daemon.stop()
