"""The fleet node's upload contract, on SQLite and on PostgreSQL.

Real keys, a real uvicorn serving the app, real HTTP from gateway threads: each upload is
judged against the tenant's device registry before it is stored, a repeat gets the
original answer, every refusal is answered with its status and reason and recorded, and
a gateway of one tenant cannot reach another's store however it names it.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import fleet_kit
from fleet_kit import BACKENDS, Gateway, ServedFleet, request
from hirmem.emulation import postgres
from hirmem.fleet.app import FleetConfig
from hirmem.fleet.registry import Registry
from hirmem.protocol.keys import derive_test_key
from test_store import Device

pg = fleet_kit.pg  # the PostgreSQL primary of the module (a fixture)


class Fleet:
    """A served fleet with two tenants, ``acme`` and ``brix``, each with gateways and
    devices registered."""

    def __init__(
        self,
        directory: Path,
        backend: str,
        pg: postgres.Primary | None,
        max_body: int = 65536,
        max_inflight: int = 64,
    ) -> None:
        self.directory = directory
        suffix = secrets.token_hex(4)
        reg = Registry(directory)
        self.gateways: dict[str, list[Gateway]] = {}
        self.devices: dict[str, list[Device]] = {}
        for t, tenant in enumerate(("acme", "brix")):
            if pg is None:
                reg.add_tenant(tenant)
            else:
                reg.add_tenant(tenant, pg.dsn, f"hirmem_{tenant}_{suffix}")
            self.gateways[tenant] = []
            for g in range(3):
                gw = Gateway(derive_test_key(f"fleet gateway {tenant} {g}"))
                reg.add_gateway(tenant, gw.key.public.raw)
                self.gateways[tenant].append(gw)
            self.devices[tenant] = []
            for d in range(4):
                dev_id = bytes([0xD0 + t, 0, 0, 0, 0, 0, 0, d + 1])
                dev = Device(dev_id, derive_test_key(f"fleet device {tenant} {d}"))
                reg.add_device(tenant, dev_id, dev.key.public.raw)
                self.devices[tenant].append(dev)
        self.backend = backend
        reg.close()
        self.served = ServedFleet(
            FleetConfig(directory, max_body=max_body, max_inflight=max_inflight)
        )
        self.port = self.served.port
        self.registry = self.served.app.state.node.registry

    def counts(self, tenant: str) -> dict[str, int]:
        counts: dict[str, int] = self.registry.store(tenant).counts()
        return counts


@pytest.fixture(params=BACKENDS)
def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Fleet]:
    pg = request.getfixturevalue("pg") if request.param == "postgres" else None
    f = Fleet(tmp_path / "fleet", request.param, pg)
    yield f
    f.served.stop()


def test_a_pack_is_stored_once_and_a_repeat_gets_the_original_answer(fleet: Fleet) -> None:
    gw, dev = fleet.gateways["acme"][0], fleet.devices["acme"][0]
    pack = dev.pack(8)
    first = gw.put(fleet.port, pack)
    assert first.status == 201, first.body
    assert first.body["pack_id"] == pack.pack_id.hex()
    assert first.body["device"] == dev.device_id.hex() and first.body["records"] == 8
    again = fleet.gateways["acme"][1].put(fleet.port, pack)  # another gateway, same pack
    assert again.status == 200 and again.body == first.body
    assert fleet.counts("acme")["packs"] == 1 and fleet.counts("acme")["records"] == 8
    assert fleet.counts("acme")["jobs"] == 1


def test_many_gateways_and_devices_upload_concurrently(fleet: Fleet) -> None:
    """Every device's chain through every gateway of its tenant, from 8 threads at once,
    each pack sent twice: every pack stored once, every answer 201 or the same 200."""
    answers: dict[str, list[dict[str, object]]] = {}
    errors: list[str] = []
    lock = threading.Lock()

    def run(tenant: str, d: int) -> None:
        dev = fleet.devices[tenant][d]
        for i in range(6):
            pack = dev.pack(8)
            for gw in (fleet.gateways[tenant][i % 3], fleet.gateways[tenant][(i + 1) % 3]):
                reply = gw.put(fleet.port, pack)
                with lock:
                    if reply.status not in (200, 201):
                        errors.append(f"{tenant} {d} {i}: {reply.status} {reply.body}")
                    answers.setdefault(pack.pack_id.hex(), []).append(reply.body)

    threads = [
        threading.Thread(target=run, args=(t, d)) for t in ("acme", "brix") for d in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(answers) == 2 * 4 * 6
    assert all(a[0] == a[1] for a in answers.values())
    for tenant in ("acme", "brix"):
        c = fleet.counts(tenant)
        assert (c["packs"], c["records"], c["jobs"]) == (24, 24 * 8, 24)
        assert fleet.registry.store(tenant).refusal_counts() == {}


def test_refusals_have_their_status_and_reason_and_are_recorded(fleet: Fleet) -> None:
    gw, dev = fleet.gateways["acme"][0], fleet.devices["acme"][1]
    p1, p2 = dev.pack(2), dev.pack(2)
    assert gw.put(fleet.port, p1).status == 201
    assert gw.put(fleet.port, p2).status == 201
    store = fleet.registry.store("acme")

    # an older pack of the same device, other contents, an old seq: rollback
    forged_old = Device(dev.device_id, dev.key)
    old = forged_old.pack(1)  # seq 1 again, another pack
    r = gw.put(fleet.port, old)
    assert (r.status, r.body["reason"]) == (409, "duplicate-seq-different-pack"), r.body
    assert r.headers["content-type"] == "application/problem+json"
    # the replayed older pack, the same bytes: the original answer, nothing stored again
    r = gw.put(fleet.port, p1)
    assert r.status == 200 and r.body["seq"] == p1.seq
    # a pack that skips a link
    dev.pack(1)
    r = gw.put(fleet.port, dev.pack(1))
    assert (r.status, r.body["reason"]) == (409, "broken-chain")
    # a forged pack signature: the pack signed by a key that is not the device's
    thief = Device(dev.device_id, derive_test_key("not the device"))
    thief.prev = p2.hash
    r = gw.put(fleet.port, thief.pack(1, seq=p2.seq + 1))
    assert (r.status, r.body["reason"]) == (403, "unknown-device")
    raw = bytearray(dev.pack(1, prev=p2.hash, seq=p2.seq + 1).encoded)
    raw[-3] ^= 1  # the signature's last bytes
    r = gw.put(fleet.port, bytes(raw), (dev.device_id + (p2.seq + 1).to_bytes(8, "big")).hex())
    assert (r.status, r.body["reason"]) == (403, "bad-pack-signature")
    # a pack whose address is another pack id
    r = gw.put(fleet.port, p2, p1.pack_id.hex())
    assert (r.status, r.body["reason"]) == (400, "pack-id-mismatch")
    r = gw.put(fleet.port, b"\xa0not cose", "00" * 16)
    assert (r.status, r.body["reason"]) == (400, "malformed")
    # a revoked device: its next pack is refused, what it sent before stays
    fleet.registry.revoke_device("acme", dev.device_id)
    r = gw.put(fleet.port, dev.pack(1, prev=p2.hash, seq=p2.seq + 1))
    assert (r.status, r.body["reason"]) == (403, "revoked")
    counts = store.refusal_counts()
    assert counts == {
        "revoked": 1,
        "duplicate-seq-different-pack": 1,
        "broken-chain": 1,
        "unknown-device": 1,
        "bad-pack-signature": 1,
        "pack-id-mismatch": 1,
        "malformed": 1,
    }
    assert fleet.counts("acme")["packs"] == 2


def test_gateway_signature_problems_are_401_and_recorded(fleet: Fleet) -> None:
    gw, dev = fleet.gateways["acme"][0], fleet.devices["acme"][2]
    pack = dev.pack(1)
    stranger = Gateway(derive_test_key("an unregistered gateway"))
    r = stranger.put(fleet.port, pack)
    assert (r.status, r.body["reason"]) == (401, "unknown-key")
    r = gw.put(fleet.port, pack, sign_path="/v1/packs/" + "ab" * 16)
    assert (r.status, r.body["reason"]) == (401, "bad-signature")
    r = gw.put(fleet.port, pack, created=1_000_000)
    assert (r.status, r.body["reason"]) == (401, "stale")
    fleet.registry.revoke_gateway(gw.keyid)
    r = gw.put(fleet.port, pack)
    assert (r.status, r.body["reason"]) == (401, "unknown-key")
    assert fleet.counts("acme")["packs"] == 0
    assert fleet.registry.refusal_counts() == {"unknown-key": 2, "bad-signature": 1, "stale": 1}


def test_a_tenant_cannot_name_another_in_any_place(fleet: Fleet) -> None:
    """A gateway of acme uploading brix's device pack, brix named in the path, the query,
    headers and a JSON body: refused as another tenant's device; brix's store untouched.
    Its own device's pack with brix named everywhere lands in acme."""
    acme_gw = fleet.gateways["acme"][0]
    brix_pack = fleet.devices["brix"][0].pack(2)
    naming = {
        "X-Tenant": "brix",
        "Tenant": "brix",
        "X-Hirmem-Tenant": "brix",
        "Forwarded": "for=brix",
    }
    r = acme_gw.put(fleet.port, brix_pack, query="tenant=brix", headers=naming)
    assert (r.status, r.body["reason"]) == (403, "device-of-another-tenant")
    r = request(
        fleet.port, "PUT", f"/v1/tenants/brix/packs/{brix_pack.pack_id.hex()}", brix_pack.encoded
    )
    assert r.status in (404, 405)
    body = json.dumps({"tenant": "brix", "pack": brix_pack.encoded.hex()}).encode()
    r = acme_gw.put(fleet.port, body, brix_pack.pack_id.hex(), headers=naming, query="tenant=brix")
    assert r.status == 400 and r.body["reason"] == "malformed"
    r = acme_gw.put(fleet.port, body, brix_pack.pack_id.hex(), content_type="application/json")
    assert r.status == 415
    own = fleet.devices["acme"][3].pack(2)
    r = acme_gw.put(fleet.port, own, query="tenant=brix", headers=naming)
    assert r.status == 201
    assert fleet.counts("brix")["packs"] == 0 and fleet.counts("acme")["packs"] == 1
    assert fleet.registry.store("brix").refusal_counts() == {}
    assert fleet.registry.store("acme").refusal_counts() == {
        "device-of-another-tenant": 1,
        "malformed": 1,
    }


def test_a_body_over_the_limit_is_refused_while_read(fleet: Fleet) -> None:
    gw = fleet.gateways["acme"][0]
    big = b"\x00" * 70_000
    r = gw.put(fleet.port, big, "00" * 16)
    assert (r.status, r.body["reason"]) == (413, "too-large")
    # no Content-Length to trust: chunked, the limit counted as it streams
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", fleet.port, timeout=30)
    conn.putrequest("PUT", "/v1/packs/" + "00" * 16)
    conn.putheader("Content-Type", 'application/cose; cose-type="cose-sign1"')
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    chunk = b"\x01" * 16384
    try:
        for _ in range(6):
            conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        conn.send(b"0\r\n\r\n")
    except OSError:
        pass  # the server may answer and close before the rest is sent
    resp = conn.getresponse()
    assert resp.status == 413
    conn.close()
    assert fleet.registry.refusal_counts()["too-large"] == 2


def test_racing_forks_of_one_chain_store_exactly_one(fleet: Fleet) -> None:
    """Eight different packs at the same seq (a forked chain) and the same pack eight
    times, all at once through three gateways: the head moves by compare-and-set, so one
    fork is stored and seven refused, the one pack stored once and answered alike."""
    dev = fleet.devices["acme"][0]
    gws = fleet.gateways["acme"]
    for rnd in range(3):
        race_round(fleet, dev, gws, rnd)
    assert fleet.counts("acme")["packs"] == 3 and fleet.counts("acme")["records"] == 6


def race_round(fleet: Fleet, dev: Device, gws: list[Gateway], rnd: int) -> None:
    forks = []
    for f in range(8):
        twin = Device(dev.device_id, dev.key)
        twin.prev, twin.capture_seq, twin.pack_n = dev.prev, 1000 * (f + 1) + rnd, dev.pack_n
        forks.append(twin.pack(2))
    same = forks[0]
    barrier = threading.Barrier(16)
    replies: list[tuple[int, dict[str, object]]] = []
    lock = threading.Lock()

    def send(i: int) -> None:
        pack = forks[i] if i < 8 else same
        barrier.wait()
        r = gws[i % 3].put(fleet.port, pack)
        with lock:
            replies.append((i, {"status": r.status, **r.body}))

    threads = [threading.Thread(target=send, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    statuses = sorted(int(str(r["status"])) for _, r in replies)
    assert statuses.count(201) == 1 and 500 not in statuses, replies
    winner = next(r for _, r in replies if r["status"] == 201)
    won_fork = next(
        p
        for p in forks
        if p.pack_id.hex() == winner["pack_id"]
        and p.hash == fleet.registry.store("acme").packs(dev.device_id)[-1].hash
    )
    assert all(
        r["reason"] == "duplicate-seq-different-pack" for _, r in replies if r["status"] == 409
    )
    # every request carrying the winning bytes got the winner's answer
    for i, r in replies:
        if (forks[i] if i < 8 else same).hash == won_fork.hash:
            assert {k: v for k, v in r.items()} == winner | {"status": r["status"]}
    dev.prev, dev.pack_n = won_fork.hash, dev.pack_n + 1


def test_past_the_in_flight_bound_the_answer_is_503_with_retry_after(tmp_path: Path) -> None:
    f = Fleet(tmp_path / "fleet", "sqlite", None, max_inflight=2)
    try:
        import http.client

        stuck = []
        for _ in range(2):  # two uploads whose bodies never finish arriving
            conn = http.client.HTTPConnection("127.0.0.1", f.port, timeout=30)
            conn.putrequest("PUT", "/v1/packs/" + "00" * 16)
            conn.putheader("Content-Type", 'application/cose; cose-type="cose-sign1"')
            conn.putheader("Content-Length", "1000")
            conn.endheaders()
            conn.send(b"\x00" * 10)
            stuck.append(conn)
        deadline = time.monotonic() + 10
        while request(f.port, "GET", "/v1/healthz").body["inflight"] < 2:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        pack = f.devices["acme"][0].pack(1)
        r = f.gateways["acme"][0].put(f.port, pack)
        assert (r.status, r.body["reason"]) == (503, "overloaded")
        assert r.headers["retry-after"] == "1"
        for conn in stuck:
            conn.close()
        deadline = time.monotonic() + 10
        while request(f.port, "GET", "/v1/healthz").body["inflight"] > 0:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert f.gateways["acme"][0].put(f.port, pack).status == 201
        deadline = time.monotonic() + 10  # the 503 reaches the registry's counts
        while f.registry.refusal_counts().get("overloaded") != 1:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        f.served.stop()


@fleet_kit.pg_skip()
def test_a_tenant_database_that_goes_away_is_503_and_nothing_is_acknowledged(
    tmp_path: Path,
) -> None:
    """The tenant's PostgreSQL killed: uploads are answered 503 storage-unavailable with
    Retry-After (recorded in the registry), none acknowledged; restarted, the same
    uploads are stored, each once."""
    with postgres.Primary("fleet-gone") as primary:
        f = Fleet(tmp_path / "fleet", "postgres", primary)
        try:
            gw, dev = f.gateways["acme"][0], f.devices["acme"][0]
            assert gw.put(f.port, dev.pack(2)).status == 201
            port = primary.port
            primary.kill()
            pending = [dev.pack(2) for _ in range(3)]
            r = gw.put(f.port, pending[0])
            assert (r.status, r.body["reason"]) == (503, "storage-unavailable")
            assert r.headers["retry-after"] == "1"
            assert f.registry.refusal_counts()["storage-unavailable"] >= 1
            primary.restart()  # on another port: the placement moves the tenant there
            tenant = f.registry.tenant("acme")
            assert tenant is not None
            location = tenant.location.replace(f"port={port}", "")
            f.registry.move_tenant("acme", f"{location} port={primary.port}")
            for pack in pending:
                for _ in range(20):  # the pool drops each broken connection it meets
                    r = gw.put(f.port, pack)
                    if r.status != 503:
                        break
                assert r.status == 201, r.body
            assert f.counts("acme")["packs"] == 4 and f.counts("acme")["records"] == 8
        finally:
            f.served.stop()
