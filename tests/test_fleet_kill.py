"""The fleet node killed with SIGKILL in the middle of an ingest, then restarted.

A real ``hirmem fleet serve`` process; eight devices' chains uploaded by four gateways
from eight threads, each gateway re-sending what got no answer (as an outbox does). The
node is killed once enough uploads are acknowledged, restarted, and the gateways finish.
Then: every acknowledged pack is stored with the answer it was given, every pack of
every chain is stored exactly once, and every refusal answered is recorded. On SQLite
and on PostgreSQL.
"""

from __future__ import annotations

import http.client
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import fleet_kit
from fleet_kit import BACKENDS, Gateway, free_port, wait_healthy
from hirmem.emulation import postgres
from hirmem.fleet.registry import Registry
from hirmem.protocol.keys import derive_test_key
from hirmem.protocol.packs import Pack
from test_store import Device

pg = fleet_kit.pg  # the PostgreSQL primary of the module (a fixture)

ROOT = Path(__file__).resolve().parents[1]
DEVICES, GATEWAYS, CHAIN = 8, 4, 24


class Node:
    """``hirmem fleet serve`` as a child process."""

    def __init__(self, directory: Path, port: int) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT / "host"))
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hirmem.cli",
                "fleet",
                "serve",
                "--database-dir",
                str(directory),
                "--port",
                str(port),
                "--consolidate-every",
                "0",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        wait_healthy(port)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sigkill_mid_ingest_loses_nothing_acknowledged_and_stores_nothing_twice(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    directory = tmp_path / "fleet"
    reg = Registry(directory)
    if backend == "postgres":
        cluster: postgres.Primary = request.getfixturevalue("pg")
        reg.add_tenant("acme", cluster.dsn, f"hirmem_kill_{secrets.token_hex(4)}")
    else:
        reg.add_tenant("acme")
    gateways = [Gateway(derive_test_key(f"kill gateway {g}")) for g in range(GATEWAYS)]
    for gw in gateways:
        reg.add_gateway("acme", gw.key.public.raw)
    chains: list[list[Pack]] = []
    for d in range(DEVICES):
        dev = Device(bytes([0xE0, 0, 0, 0, 0, 0, 0, d + 1]), derive_test_key(f"kill dev {d}"))
        reg.add_device("acme", dev.device_id, dev.key.public.raw)
        chains.append([dev.pack(8) for _ in range(CHAIN)])
    forger = Device(bytes([0xE0, 0, 0, 0, 0, 0, 0, 1]), derive_test_key("kill forger"))
    forged = [forger.pack(1) for _ in range(CHAIN)]  # device 1's id, a key it never had
    reg.close()

    port = free_port()
    node = Node(directory, port)
    acked: dict[str, dict[str, Any]] = {}  # pack id -> the answer the gateway got
    refused_answers: list[str] = []
    lock = threading.Lock()
    down = threading.Event()
    up = threading.Event()

    failures: list[BaseException] = []

    def gateway_outbox(d: int) -> None:
        try:
            send_chain(d)
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    def send_chain(d: int) -> None:
        gw = gateways[d % GATEWAYS]
        for i, pack in enumerate(chains[d]):
            while True:  # resend until answered: what the daemon's outbox does
                try:
                    reply = gw.put(port, pack)
                    if d == 0:
                        bad = gw.put(port, forged[i])
                        with lock:
                            refused_answers.append(bad.body.get("reason", "?"))
                except (OSError, http.client.HTTPException):  # as the daemon's outbox
                    up.wait(60)  # a reply cut short by the kill is no answer
                    continue
                if reply.status == 503:
                    time.sleep(0.05)
                    continue
                assert reply.status in (200, 201), reply.body
                with lock:
                    held = acked.setdefault(pack.pack_id.hex(), reply.body)
                    assert held == reply.body  # a repeat gets the original answer
                break

    threads = [threading.Thread(target=gateway_outbox, args=(d,)) for d in range(DEVICES)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while len(acked) < DEVICES * CHAIN // 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    node.kill()  # mid-ingest: uploads are in flight
    down.set()
    killed_with = len(acked)
    assert 0 < killed_with < DEVICES * CHAIN
    node = Node(directory, port)
    up.set()
    try:
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)
        assert failures == []
        # a second pass: every pack again, each answered with the original answer
        for d in range(DEVICES):
            for pack in chains[d][:3]:
                reply = gateways[(d + 1) % GATEWAYS].put(port, pack)
                assert reply.status == 200 and reply.body == acked[pack.pack_id.hex()]
    finally:
        node.stop()

    reg = Registry(directory)
    try:
        store = reg.store("acme")
        for chain in chains:
            stored = store.packs(chain[0].signer)
            assert [p.seq for p in stored] == [p.seq for p in chain]  # all, once, in order
            assert [p.hash for p in stored] == [p.hash for p in chain]
            for pack, row in zip(chain, stored, strict=True):
                answer = acked[pack.pack_id.hex()]
                assert answer["stored_at"] == row.received and answer["records"] == 8
        counts = store.counts()
        assert counts["packs"] == DEVICES * CHAIN and counts["records"] == DEVICES * CHAIN * 8
        assert counts["jobs"] == DEVICES * CHAIN
        # every refusal the forger was answered is recorded with its reason
        answered = [r for r in refused_answers if r != "?"]
        assert set(answered) == {"bad-pack-signature"} or set(answered) == {"unknown-device"}
        recorded = store.refusal_counts()
        assert sum(recorded.values()) >= len(answered) and set(recorded) == set(answered)
    finally:
        reg.close()
