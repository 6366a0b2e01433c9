"""The whole line, end to end: a real board in QEMU → a real ``hirmem daemon`` with a
``[fleet]`` table → a real ``hirmem fleet serve`` (SQLite) → consolidation at the fleet →
``hirmem fleet recall``, whose every answer is one of the board's records traced back to
the board's device id, the pack that carried it (as the daemon stored it) and the key
the board signed it with.

Every process is the one an operator runs: the fleet and the daemon are started as
``python -m hirmem.cli`` and set up with the ``hirmem fleet`` commands.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from board_host import provisioned
from fleet_kit import free_port, wait_healthy
from hirmem.cli.entry import main
from hirmem.daemon.store import Store
from hirmem.emulation.qemu import QemuBoard
from hirmem.fleet.consolidate import Consolidator
from hirmem.protocol.keys import derive_test_key, write_key_file
from test_daemon import BOARDS, HOST_ID, HOST_KEY, needs_qemu, register, slot, wait_until

ROOT = Path(__file__).resolve().parents[1]
BOARD = "mps2-an385"
DEVICE = BOARDS[BOARD]
DEVICE_KEY = derive_test_key(f"daemon test device {DEVICE.hex()}")  # as slot() provisions it


def hirmem(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    """One ``hirmem`` command in this process, its --json answer."""
    code = main([*argv, "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def spawn(*argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "hirmem.cli", *argv],
        env=dict(os.environ, PYTHONPATH=str(ROOT / "host")),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def stop(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    return out


@needs_qemu
def test_a_boards_records_are_recalled_at_the_fleet_traced_to_its_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet_dir = ["--database-dir", str(tmp_path / "fleet")]
    hirmem(capsys, "fleet", "tenant", "add", "acme", *fleet_dir)
    gw_key = tmp_path / "gateway.key"
    [gateway] = hirmem(
        capsys, "fleet", "gateway", "add", "--tenant", "acme", "--key", str(gw_key),
        "--new-key", *fleet_dir,
    )  # fmt: skip
    hirmem(
        capsys, "fleet", "device", "add", "--tenant", "acme", "--device-id", DEVICE.hex(),
        "--public-key", DEVICE_KEY.public.raw.hex(), *fleet_dir,
    )  # fmt: skip
    port = free_port()
    fleet = spawn("fleet", "serve", *fleet_dir, "--port", str(port), "--consolidate-every", "0.2")
    daemon: subprocess.Popen[str] | None = None
    db = tmp_path / "daemon.db"
    register(db, (BOARD,))
    write_key_file(tmp_path / "host.key", HOST_KEY)
    try:
        wait_healthy(port)
        elf = provisioned(BOARD, tmp_path, slot(DEVICE))
        with QemuBoard(BOARD, elf, timeout=60) as board:
            config = tmp_path / "hirmem.toml"
            config.write_text(
                f'[host]\nid = "{HOST_ID.hex()}"\ndatabase = "{db}"\nkey = "host.key"\n'
                "save_every = 0.2\nstatus_every = 0\nmemory_every = 0\n"
                f'[fleet]\nurl = "http://127.0.0.1:{port}"\nkey = "{gw_key}"\n'
                f'keyid = "{gateway["keyid"]}"\nbackoff_min = 0.05\nbackoff_max = 0.5\n'
                f'[[device]]\nurl = "{board.url}"\nname = "{BOARD}"\n'
            )
            daemon = spawn("daemon", "--config", str(config))

            def fleet_packs() -> int:
                [t] = hirmem(capsys, "fleet", "status", *fleet_dir)["tenants"]
                return int(t["packs"])

            wait_until(lambda: fleet_packs() >= 3, 30, "3 of the board's packs at the fleet")
        # the board is off: the daemon's outbox drains what it still holds, and empties
        # only on the fleet's acknowledgements
        with Store(db) as store:

            def drained() -> bool:
                status = store.outbox_status()
                return status is not None and status.depth == 0

            def drained_twice() -> bool:
                # a second apart: a pack the daemon read off the line as the board
                # stopped may still be on its way into the store
                if not drained():
                    return False
                time.sleep(1)
                return drained()

            wait_until(drained_twice, 30, "the daemon's outbox to drain")
        out = stop(daemon)
        assert daemon.returncode == 0, out
        # what the daemon stored is what the fleet stored, pack for pack
        with Store(db) as store:
            status = store.outbox_status()
            here = {p.pack_id.hex(): p for p in store.packs(DEVICE)}
            records = {r.id.hex(): pid.hex() for r, pid in store.iter_records()}
            assert store.fleet_refusals() == [] and store.refusals() == []
        assert status is not None and status.depth == 0 and status.acked == len(here) >= 3
        wait_until(
            lambda: hirmem(capsys, "fleet", "status", *fleet_dir)["tenants"][0]["open_jobs"] == 0,
            30,
            "consolidation at the fleet",
        )
        [tenant] = hirmem(capsys, "fleet", "status", *fleet_dir)["tenants"]
        assert (tenant["packs"], tenant["records"]) == (len(here), len(records))
    finally:
        if daemon is not None and daemon.poll() is None:
            stop(daemon)
        fleet_out = stop(fleet)
    # uvicorn shuts down cleanly on SIGTERM, then raises the signal again to exit with it
    assert fleet.returncode in (0, -signal.SIGTERM) and "Traceback" not in fleet_out, fleet_out
    # consolidation took in every record the board sent, each with its device's key
    worker = Consolidator(tmp_path / "fleet", "test")
    try:
        engine = worker.engine("acme")
        for rid in records:
            memory = engine.get(rid)
            assert memory is not None, f"record {rid} of the board is not in the fleet's memory"
            assert "temp0" in memory.text()
        entities = worker.substrate("acme").prov.entities
    finally:
        worker.close()
    hits = hirmem(capsys, "fleet", "recall", "--tenant", "acme", "temp0", "-k", "12", *fleet_dir)
    assert len(hits) >= 3
    for hit in hits:
        # the board's record, carried by the pack the daemon took it in, signed by its key
        assert hit["record"] in records, hit
        assert hit["pack"] == records[hit["record"]] and hit["pack"] in here
        assert hit["device"] == DEVICE.hex() and hit["kid"] == DEVICE_KEY.kid.hex()
        assert here[hit["pack"]].device_id == DEVICE
        assert "temp0" in hit["text"]
        # and the substrate's PROV log says the same: record → pack, key → device
        assert entities[f"record:{hit['record']}"].derived_from == (f"pack:{hit['pack']}",)
        assert entities[f"key:{hit['kid']}"].attributed_to == f"device:{hit['device']}"
