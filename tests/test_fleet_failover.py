"""The tenant's PostgreSQL primary killed mid-ingest, its synchronous standby promoted and
the tenant moved there: every upload acknowledged before the kill is on the new primary
with the answer it was given, every chain is stored once, in order."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from fleet_kit import pg_skip
from hirmem.emulation import postgres
from test_fleet_upload import Fleet


@pg_skip()
def test_primary_killed_standby_promoted_nothing_acknowledged_lost(tmp_path: Path) -> None:
    with (
        postgres.Primary("fo-primary") as primary,
        postgres.Standby(primary, "fo_standby") as standby,
    ):
        f = Fleet(tmp_path / "fleet", "postgres", primary)
        try:
            chains = {d.device_id: [d.pack(8) for _ in range(12)] for d in f.devices["acme"]}
            acked: dict[str, dict[str, Any]] = {}
            failures: list[BaseException] = []
            lock = threading.Lock()

            def outbox(n: int, device: bytes) -> None:
                gw = f.gateways["acme"][n % 3]
                try:
                    for pack in chains[device]:
                        for _ in range(600):  # resend until answered (503 meanwhile)
                            reply = gw.put(f.port, pack)
                            if reply.status != 503:
                                break
                            time.sleep(0.05)
                        assert reply.status in (200, 201), reply.body
                        with lock:
                            assert acked.setdefault(pack.pack_id.hex(), reply.body) == reply.body
                except BaseException as exc:
                    failures.append(exc)

            threads = [threading.Thread(target=outbox, args=(n, dev))
                       for n, dev in enumerate(chains)]  # fmt: skip
            for t in threads:
                t.start()
            deadline = time.monotonic() + 60
            while len(acked) < 16 and time.monotonic() < deadline:
                time.sleep(0.01)
            tenant = f.registry.tenant("acme")
            assert tenant is not None
            primary.kill()
            before = dict(acked)
            standby.promote()
            dbname = tenant.location.split("dbname=")[1].split()[0]
            f.registry.move_tenant(
                "acme", f"host=127.0.0.1 port={standby.port} user=hirmem dbname={dbname}"
            )
            for t in threads:
                t.join(120)
            assert not any(t.is_alive() for t in threads) and failures == []
            assert 0 < len(before) < 48
            store = f.registry.store("acme")
            for device, chain in chains.items():
                stored = store.packs(device)
                assert [p.hash for p in stored] == [p.hash for p in chain]
                for pack, row in zip(chain, stored, strict=True):
                    assert acked[pack.pack_id.hex()]["stored_at"] == row.received
            for pid, answer in before.items():  # acknowledged on the old primary, kept
                assert acked[pid] == answer
            assert store.counts()["packs"] == 48 and store.counts()["records"] == 48 * 8
        finally:
            f.served.stop()
