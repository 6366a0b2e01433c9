"""A record conflict reaches the daemon's log and metrics as it happens.

A scripted device (hirmem.emulation.rogue, a real socket line into a running daemon)
offers a pack, then, as a device that lost its boot counter would, a pack whose records
reuse the first pack's ids with other contents. The daemon accepts it (it is signed and
chained), parks the reused records in ``record_conflicts``, logs a warning naming them
and counts them in ``hirmem_record_conflicts``. (The operator's commands: test_commands.)
"""

from __future__ import annotations

import logging
from pathlib import Path

from hirmem.daemon.config import build_config
from hirmem.daemon.service import Daemon, render_metrics
from hirmem.daemon.store import Store
from hirmem.emulation.rogue import RogueDevice
from hirmem.protocol.keys import derive_test_key
from hirmem.protocol.messages import PackStatus
from hirmem.protocol.records import Record
from test_daemon import wait_until
from test_metrics import value
from test_store import Device

HOST_ID = bytes.fromhex("a1a2a3a4a5a6a7a8")


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_the_daemon_logs_and_counts_record_conflicts(tmp_path: Path) -> None:
    dev_id = bytes.fromhex("5c0000000000c0f1")
    key = derive_test_key("conflicting device")
    db = tmp_path / "c.db"
    with Store(db) as store:
        store.register_device(dev_id, key.public.raw, "scripted")
    device = RogueDevice(dev_id, key)
    config = build_config(
        {"host": {"id": HOST_ID.hex(), "database": db.name, "save_every": 0.1,
                  "status_every": 0},
         "device": [{"url": device.url}]},
        tmp_path, [],
    )  # fmt: skip
    collect = Collect()
    intake_log = logging.getLogger("hirmem.daemon.intake")
    intake_log.addHandler(collect)
    daemon = Daemon(config)
    daemon.start()
    try:
        device.connect()
        # the scripted line does not fragment: packs of one record each
        before = Device(dev_id, key)
        sent = [before.pack(1), before.pack(1)]
        after = Device(dev_id, key)  # capture seqs start again at 1: ids 1 and 2 are reused
        after.pack_n = 2
        after.prev = sent[-1].hash
        sent += [after.pack(1), after.pack(1), after.pack(1)]
        answers = [device.offer(p.encoded).status for p in sent]
        assert answers == [PackStatus.ACCEPTED] * 5
        reused = [r.id.hex() for p in sent[2:4] for r in p.items if isinstance(r, Record)]
        warnings = [r for r in collect.records if "record conflicts" in r.getMessage()]
        got = [getattr(w, "ctx", {}) for w in warnings]
        assert [(c["device"], c["count"], c["ids"]) for c in got] == [
            (dev_id.hex(), 1, rid) for rid in reused
        ]
        metrics = render_metrics(daemon)
        assert "# TYPE hirmem_record_conflicts_total counter" in metrics
        assert value(metrics, "hirmem_record_conflicts_total", device=dev_id.hex(),
                     url=device.url) == 2  # fmt: skip
        assert value(metrics, "hirmem_store_record_conflicts", device=dev_id.hex()) == 2
        assert value(metrics, "hirmem_store_integrity_warnings") == 1
        wait_until(lambda: daemon.store.counters(dev_id).get("record_conflicts") == 2, 5,
                   "counters saved")  # fmt: skip
    finally:
        intake_log.removeHandler(collect)
        daemon.stop()
        device.close()
    with Store(db) as store:
        assert store.count_record_conflicts(dev_id) == 2 and store.count_records(dev_id) == 3
