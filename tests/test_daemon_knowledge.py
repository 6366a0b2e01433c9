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
from hirmem.daemon.store import Store, now_ms
from hirmem.emulation.qemu import QemuBoard
from hirmem.protocol.keys import derive_test_key
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
