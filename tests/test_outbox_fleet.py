"""The daemon's outbox against the real fleet node (hirmem.fleet, uvicorn), on SQLite and
on PostgreSQL: packs from two devices forwarded through the fault proxy while the network
is cut and restored; every pack stored once at the fleet under the gateway's tenant.

Skipped where the fleet package is not part of the tree (the outbox's own contract tests
run against tests/fleetstub.py in test_outbox.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hirmem.daemon.config import FleetConfig
from hirmem.daemon.outbox import Outbox
from hirmem.daemon.store import Store
from hirmem.emulation.faultproxy import FaultProxy
from hirmem.protocol.keys import derive_test_key, write_key_file
from test_store import Device

fleet_app: Any = pytest.importorskip("hirmem.fleet.app")
fleet_registry: Any = pytest.importorskip("hirmem.fleet.registry")
fleet_kit: Any = pytest.importorskip("fleet_kit")
pg = fleet_kit.pg  # the PostgreSQL primary of the module (a fixture)

GATEWAY = derive_test_key("outbox fleet gateway")
DEVICES = [(bytes([0xE0, 0, 0, 0, 0, 0, 0, n]), derive_test_key(f"outbox fleet device {n}"))
           for n in (1, 2)]  # fmt: skip


@pytest.fixture(params=fleet_kit.BACKENDS)
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    registry = fleet_registry.Registry(tmp_path / "fleet")
    if request.param == "postgres":
        primary = request.getfixturevalue("pg")
        registry.add_tenant("acme", primary.dsn, f"hirmem_outbox_{int(time.time() * 1e6)}")
    else:
        registry.add_tenant("acme")
    registry.add_gateway("acme", GATEWAY.public.raw)
    for device_id, key in DEVICES:
        registry.add_device("acme", device_id, key.public.raw)
    registry.close()
    fleet = fleet_kit.ServedFleet(fleet_app.FleetConfig(tmp_path / "fleet"))
    yield fleet
    fleet.stop()


def test_the_outbox_delivers_through_a_cut_to_the_real_fleet(
    tmp_path: Path, served: Any
) -> None:
    key_file = tmp_path / "gateway.key"
    write_key_file(key_file, GATEWAY)
    store = Store(tmp_path / "daemon.db")
    devices = []
    for device_id, key in DEVICES:
        store.register_device(device_id, key.public.raw)
        devices.append(Device(device_id, key))
    with FaultProxy(("127.0.0.1", served.port), seed=3) as proxy:
        # the fleet checks @authority against the Host it was sent: the proxy's address
        outbox = Outbox(store, FleetConfig(f"http://127.0.0.1:{proxy.port}", key_file,
                                           backoff_min=0.02, backoff_max=0.3))  # fmt: skip
        stop = threading.Event()

        def run() -> None:
            while not stop.wait(0.01):
                outbox.tick()

        sender = threading.Thread(target=run)
        sender.start()
        packs = []
        try:
            for n in range(60):
                dev = devices[n % 2]
                p = dev.pack(8)
                assert store.take_pack(dev.device_id, p.encoded).status == "accepted"
                packs.append(p)
                if n == 15:
                    proxy.partition()
                if n == 40:
                    proxy.heal()
                time.sleep(0.01)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                status = store.outbox_status()
                if status is not None and status.depth == 0:
                    break
                time.sleep(0.05)
        finally:
            stop.set()
            sender.join()
    status = store.outbox_status()
    assert status is not None and status.depth == 0 and status.acked == 60, status
    assert status.errors > 0 and store.fleet_refusals() == []
    tenant = served.app.state.node.registry.store("acme")
    stored = tenant.packs()
    assert sorted(p.pack_id for p in stored) == sorted(p.pack_id for p in packs)
    assert tenant.counts()["records"] == 60 * 8
