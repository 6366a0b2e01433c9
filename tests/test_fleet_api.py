"""The HTTP API and dashboard on a fleet node: the daemon's application over the fleet's
tenants, tokens bound to one tenant each.

Two tenants, alpha and beta, each with two devices whose packs a gateway of the tenant
uploaded over HTTP (one forged pack of alpha's refused) and consolidated. A token of one
tenant reaches its tenant's data through every route family and never the other's, even
where the other tenant's ids are named outright.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from fleet_kit import Gateway, ServedFleet, pg_skip
from hirmem.api import views as api_views
from hirmem.emulation import postgres
from hirmem.fleet.app import FleetConfig
from hirmem.fleet.registry import Registry, RegistryError
from hirmem.fleet.serving import create_token, token_store
from hirmem.fleet.tenant import Accepted, Refused
from hirmem.fleet.view import TenantView
from hirmem.protocol.keys import SigningKey, derive_test_key
from hirmem.protocol.packs import Pack, PackKind, sign_pack
from hirmem.protocol.records import GENESIS, Record, record_id
from test_store import CONTEXT, T0

# what each tenant's devices report: the same people, different places; the last one
# fails an invariant check on the device (Trust = 0, quarantined for a steward)
SAYS = {
    "alpha": ["Ann works at Plant North.", "valve 3 is open at Plant North.", "valve 3 burns"],
    "beta": ["Ann works at Plant South.", "pump 9 is quiet at Plant South.", "pump 9 floods"],
}
PLACE = {"alpha": "Plant North", "beta": "Plant South"}
SUSPECT_FLAGS = 0x0FBF  # the invariant sub-check failed
DEVICES = {
    "alpha": [bytes.fromhex("a1a1a1a1a1a1a101"), bytes.fromhex("a1a1a1a1a1a1a102")],
    "beta": [bytes.fromhex("b2b2b2b2b2b2b201"), bytes.fromhex("b2b2b2b2b2b2b202")],
}


def _packs(
    device_id: bytes, key: SigningKey, texts: list[str], count: int, reboot_at: int = 0
) -> list[Pack]:
    """``count`` chained packs of one device, one record per text (boot 1), the last
    text's record a suspect one; from pack ``reboot_at`` on (if given), boot 2."""
    out, prev, n, boot = [], GENESIS, 0, 1
    for seq in range(1, count + 1):
        if seq == reboot_at:
            boot, n = 2, 0
        records, link = [], prev  # a pack's records chain from the pack before it
        for i, text in enumerate(texts):
            n += 1
            flags = SUSPECT_FLAGS if i == len(texts) - 1 else 0x0FFF
            rec = Record.capture(record_id(device_id, boot, n), f"{text} ({seq})".encode(),
                                 "report", T0 + n, CONTEXT, flags, 0x10000, 0xE666,
                                 0x8000, link)  # fmt: skip
            records.append(rec)
            link = rec.hash
        pack = sign_pack(key, PackKind.MEMORY, device_id, (boot << 32) | seq, prev, T0 + seq,
                         records)  # fmt: skip
        out.append(pack)
        prev = pack.hash
    return out


@dataclass
class Fleet:
    url: str
    tokens: dict[tuple[str, str], str] = field(default_factory=dict)  # (tenant, scope) → token

    def call(self, method: str, path: str, token: str | None, body: Any = None
             ) -> tuple[int, dict[str, str], bytes]:  # fmt: skip
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
        except urllib.error.HTTPError as err:
            return err.code, {k.lower(): v for k, v in err.headers.items()}, err.read()

    def json(self, method: str, path: str, tenant: str, scope: str = "read",
             body: Any = None) -> tuple[int, Any]:  # fmt: skip
        status, _, raw = self.call(method, path, self.tokens[(tenant, scope)], body)
        return status, json.loads(raw)


@contextmanager
def _served(where: Path) -> Iterator[tuple[Fleet, ServedFleet, dict[str, Gateway]]]:
    """Two tenants with tokens, devices and gateways; three packs per device uploaded
    over HTTP and consolidated; a forged upload refused."""
    reg, tokens = Registry(where), token_store(where)
    gateways, minted = {}, {}
    try:
        for tenant in ("alpha", "beta"):
            reg.add_tenant(tenant)
            gw = SigningKey.generate()
            reg.add_gateway(tenant, gw.public.raw)
            gateways[tenant] = Gateway(gw)
            for scope in ("read", "review"):
                minted[(tenant, scope)], _ = create_token(
                    reg, tokens, tenant, f"{tenant}-{scope}", scope
                )
            for device_id in DEVICES[tenant]:
                key = derive_test_key(f"fleet api {device_id.hex()}")
                reg.add_device(tenant, device_id, key.public.raw, f"{tenant} bench")
        with pytest.raises(RegistryError, match="no tenant gamma"):
            create_token(reg, tokens, "gamma", "x", "read")
    finally:
        tokens.close()
        reg.close()
    served = ServedFleet(FleetConfig(where))
    try:
        for tenant in ("alpha", "beta"):
            for device_id in DEVICES[tenant]:
                key = derive_test_key(f"fleet api {device_id.hex()}")
                for pack in _packs(device_id, key, SAYS[tenant], 3):
                    assert gateways[tenant].put(served.port, pack).status == 201
        # alpha's first device's id under a key nobody trusts: refused, kept by alpha
        forged = _packs(DEVICES["alpha"][0], derive_test_key("fleet api forger"), ["x"], 1)[0]
        assert gateways["alpha"].put(served.port, forged).status == 403
        served.app.state.node.consolidate()
        yield Fleet(f"http://127.0.0.1:{served.port}", minted), served, gateways
    finally:
        served.stop()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with _served(tmp_path_factory.mktemp("fleet-api") / "fleet") as (world, _, _):
        yield world


def _own(tenant: str, device_hex: str) -> bool:
    return bytes.fromhex(device_hex[:16]) in DEVICES[tenant]


TENANTS = [("alpha", "beta"), ("beta", "alpha")]


@pytest.mark.parametrize(("me", "other"), TENANTS)
def test_devices_and_intake_are_the_token_s_tenant_s_only(fleet: Fleet, me: str, other: str
                                                          ) -> None:  # fmt: skip
    assert fleet.json("GET", "/v1/fleet", me) == (
        200,
        {"devices": 2, "active": 2, "silent": 0, "never-seen": 0},
    )
    # a request naming the other tenant is answered for the token's tenant all the same
    for path in ("/v1/devices", f"/v1/devices?tenant={other}"):
        status, page = fleet.json("GET", path, me)
        assert status == 200
        assert [d["device"] for d in page["items"]] == [d.hex() for d in DEVICES[me]]
        assert all(d["board"] == f"{me} bench" and d["head_seq"] == (1 << 32) | 3
                   for d in page["items"])  # fmt: skip
    mine, theirs = DEVICES[me][0].hex(), DEVICES[other][0].hex()
    status, one = fleet.json("GET", f"/v1/devices/{mine}", me)
    assert status == 200 and (one["packs"], one["records"]) == (3, 9)
    status, packs = fleet.json("GET", f"/v1/devices/{mine}/packs", me)
    assert [p["seq"] & 0xFFFFFFFF for p in packs["items"]] == [1, 2, 3]
    status, timeline = fleet.json("GET", f"/v1/devices/{mine}/timeline", me)
    assert [e["kind"] for e in timeline["items"]].count("pack") == 3
    for sub in ("", "/packs", "/refusals", "/timeline"):
        status, problem = fleet.json("GET", f"/v1/devices/{theirs}{sub}", me)
        assert (status, problem["status"]) == (404, 404), (sub, problem)
    # intake, paged: every pack and record of the tenant's, once, nothing of the other's
    seen: list[str] = []
    cursor = ""
    while True:
        status, page = fleet.json("GET", f"/v1/intake/records?limit=5{cursor}", me)
        assert status == 200
        seen += [r["id"] for r in page["items"]]
        if page["next"] is None:
            break
        cursor = f"&cursor={page['next']}"
    assert len(seen) == len(set(seen)) == 18 and all(_own(me, r) for r in seen)
    status, packs = fleet.json("GET", "/v1/intake/packs?limit=100", me)
    assert len(packs["items"]) == 6 and all(_own(me, p["device"]) for p in packs["items"])
    # alpha's refused upload is alpha's: on its device, in its counts; beta has none
    status, refusals = fleet.json("GET", "/v1/intake/refusals", me)
    assert refusals["by_reason"] == ({"unknown_key": 1} if me == "alpha" else {})
    status, own = fleet.json("GET", f"/v1/devices/{mine}/refusals", me)
    if me == "alpha":
        (r,) = own["items"]
        assert r["device"] == mine and r["reason"] == "unknown_key" and r["offers"] == 1
    else:
        assert own["items"] == []


@pytest.mark.parametrize(("me", "other"), TENANTS)
def test_memory_recall_get_and_audit_are_the_token_s_tenant_s_only(
    fleet: Fleet, me: str, other: str
) -> None:
    status, hits = fleet.json(
        "POST",
        "/v1/memories/recall",
        me,
        body={"query": "where does Ann work", "k": 20, "touch": False},
    )
    assert status == 200 and hits["items"]
    for hit in hits["items"]:
        m = hit["memory"]
        assert _own(me, m["device"]) and PLACE[other] not in m["text"]
        assert {"sim", "strength", "recency", "trust"} <= hit.keys()
    top = hits["items"][0]["id"]
    assert fleet.json("GET", f"/v1/memories/{top}", me)[1]["id"] == top
    # the other tenant's memory ids, named outright: not found
    status, theirs = fleet.json(
        "POST", "/v1/memories/recall", other, body={"query": "where does Ann work", "touch": False}
    )
    foreign = theirs["items"][0]["id"]
    for sub in ("", "/history", "/strength", "/distilled"):
        status, problem = fleet.json("GET", f"/v1/memories/{foreign}{sub}", me)
        assert status == 404 and problem["status"] == 404, sub
    status, stats = fleet.json("GET", "/v1/memories/stats", me)
    assert stats["states"]["consolidated"] == 12 and stats["states"]["quarantined"] == 6
    status, history = fleet.json("GET", f"/v1/memories/{top}/history", me)
    assert status == 200 and history["versions"][0]["id"] == top
    status, verify = fleet.json("GET", "/v1/audit/verify", me)
    assert status == 200 and verify["ok"] is True and verify["records"] > 0


@pytest.mark.parametrize(("me", "other"), TENANTS)
def test_semantic_ask_and_trace_are_the_token_s_tenant_s_only(
    fleet: Fleet, me: str, other: str
) -> None:
    status, ask = fleet.json("GET", "/v1/semantic/ask?q=where%20does%20Ann%20work", me)
    assert status == 200 and ask["subject"] == "ann" and ask["items"]
    assert {h["object"] for h in ask["items"]} == {PLACE[me]}
    mine = ask["items"][0]["triple"]
    status, theirs = fleet.json("GET", "/v1/semantic/ask?q=where%20does%20Ann%20work", other)
    foreign = theirs["items"][0]["triple"]
    assert foreign != mine
    status, _, raw = fleet.call("GET", f"/v1/semantic/trace/{mine}",
                                      fleet.tokens[(me, "read")])  # fmt: skip
    assert status == 200 and "wasGeneratedBy" in json.loads(raw)
    # the trace runs back to the tenant's own device keys
    devices = set(re.findall(r"device:([0-9a-f]{16})", raw.decode()))
    assert devices and all(bytes.fromhex(d) in DEVICES[me] for d in devices)
    status, problem = fleet.json("GET", f"/v1/semantic/trace/{foreign}", me)
    assert status == 404 and problem["status"] == 404


def test_a_steward_reviews_the_own_tenant_s_queue_only(fleet: Fleet) -> None:
    queues = {}
    for tenant in ("alpha", "beta"):
        status, queue = fleet.json("GET", "/v1/review?limit=100", tenant)
        assert status == 200 and queue["pending"] == 6
        assert all(_own(tenant, m["device"]) and m["trust"] == 0 for m in queue["items"])
        queues[tenant] = [m["id"] for m in queue["items"]]
    decision = {"decision": "retire", "reason": "a burning valve is a sensor fault"}
    # a reader may not decide; beta's steward cannot reach alpha's memory
    status, _ = fleet.json("POST", f"/v1/review/{queues['alpha'][0]}", "alpha",
                                 body=decision)  # fmt: skip
    assert status == 403
    status, _ = fleet.json("POST", f"/v1/review/{queues['alpha'][0]}", "beta", "review",
                                 body=decision)  # fmt: skip
    assert status == 404
    status, done = fleet.json("POST", f"/v1/review/{queues['alpha'][0]}", "alpha", "review",
                              body=decision)  # fmt: skip
    assert status == 200 and done["steward"] == "alpha-review" and done["audit_seq"] > 0
    assert fleet.json("GET", "/v1/review", "alpha")[1]["pending"] == 5
    assert fleet.json("GET", "/v1/review", "beta")[1]["pending"] == 6
    status, history = fleet.json("GET", f"/v1/memories/{queues['alpha'][0]}/history", "alpha")
    review = [a for a in history["audit"] if a["action"] == "review"]
    assert review and review[-1]["actor"] == "steward:alpha-review"
    assert fleet.json("GET", "/v1/audit/verify", "alpha")[1]["ok"] is True
    # the consolidation round signed a checkpoint of each tenant's chain, with one key each
    kids = set()
    for tenant in ("alpha", "beta"):
        status, cp = fleet.json("GET", "/v1/audit/checkpoint", tenant)
        assert status == 200 and len(cp["signature"]) == 128
        kids.add(cp["kid"])
    assert len(kids) == 2


def test_the_dashboard_loads_for_the_token_s_tenant(fleet: Fleet) -> None:
    import http.cookiejar
    import urllib.parse

    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    page = opener.open(fleet.url + "/ui/login", data=urllib.parse.urlencode(
        {"token": fleet.tokens[("beta", "read")]}).encode())  # fmt: skip
    assert page.status == 200 and page.url.endswith("/ui/")
    for path in ("/ui/", "/ui/devices", "/ui/review", "/ui/audit", "/ui/memories"):
        with opener.open(fleet.url + path) as resp:
            html = resp.read().decode()
        assert resp.status == 200 and "<html" in html, path
        assert not any(d.hex() in html for d in DEVICES["alpha"]), path
    with opener.open(fleet.url + "/ui/devices") as resp:
        html = resp.read().decode()
    assert all(d.hex() in html for d in DEVICES["beta"])
    with opener.open(fleet.url + f"/ui/devices/{DEVICES['beta'][0].hex()}") as resp:
        assert resp.status == 200
    with pytest.raises(urllib.error.HTTPError) as err:
        opener.open(fleet.url + f"/ui/devices/{DEVICES['alpha'][0].hex()}")
    assert err.value.code == 404


def test_the_fleet_serves_the_committed_openapi_document(fleet: Fleet) -> None:
    """The fleet's API is the daemon's application: the same document, byte for byte of
    its JSON (the upload routes beside it are not in it: a gateway's signed protocol)."""
    committed = json.loads((ROOT / "docs" / "openapi.json").read_text(encoding="utf-8"))
    status, _, raw = fleet.call("GET", "/openapi.json", None)
    assert status == 200 and json.loads(raw) == committed


def test_tokens_are_bound_to_a_tenant_of_the_registry_and_can_be_revoked(
    fleet: Fleet, tmp_path: Path
) -> None:
    status, _, _ = fleet.call("GET", "/v1/devices", None)
    assert status == 401
    status, _, _ = fleet.call("GET", "/v1/devices", "hm_0123456789abcdef_" + "x" * 43)
    assert status == 401
    # the upload routes and the node's health answer beside the API
    status, _, raw = fleet.call("GET", "/v1/healthz", None)
    assert status == 200 and json.loads(raw)["ok"] is True
    status, health = fleet.json("GET", "/v1/health", "alpha")
    assert status == 200 and health["role"] == "fleet node"
    status, _, raw = fleet.call("GET", "/v1/metrics", fleet.tokens[("alpha", "read")])
    assert status == 200 and b"hirmem_fleet_inflight 0" in raw


def test_hirmem_fleet_token_creates_lists_and_revokes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from hirmem.api.tokens import TokenStore
    from hirmem.cli.entry import main

    d = ["--database-dir", str(tmp_path / "fleet")]
    assert main(["fleet", "tenant", "add", "acme", *d]) == 0
    capsys.readouterr()
    assert main(["fleet", "token", "create", "--tenant", "acme", "--scope", "review", *d]) == 0
    out = capsys.readouterr()
    token = out.out.strip()
    assert re.fullmatch(r"hm_[0-9a-f]{16}_[A-Za-z0-9_-]{43}", token)
    assert "tenant acme" in out.err and "shown once" in out.err
    assert main(["fleet", "token", "create", "--tenant", "nobody", *d]) == 2
    assert "no tenant nobody" in capsys.readouterr().err
    assert main(["fleet", "token", "list", "--json", *d]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert (row["tenant"], row["scope"], row["name"], row["revoked_ms"]) == (
        "acme",
        "review",
        "acme-review",
        None,
    )
    # kept hashed in the registry's file: the secret is nowhere in it
    assert token.encode() not in (tmp_path / "fleet" / "fleet.db").read_bytes()
    tokens = TokenStore(tmp_path / "fleet" / "fleet.db")
    try:
        who = tokens.authenticate(token)
        assert who is not None and (who.tenant, who.scope) == ("acme", "review")
        assert main(["fleet", "token", "revoke", row["id"], *d]) == 0
        assert tokens.authenticate(token) is None
    finally:
        tokens.close()
    assert main(["fleet", "token", "revoke", row["id"], *d]) == 2
    assert "already revoked" in capsys.readouterr().err


def test_the_api_answers_while_a_consolidation_round_runs(tmp_path: Path) -> None:
    """Requests of both tenants during a round (a thread of the node's): each answered,
    each its own tenant's; afterwards the new packs' memories are there."""
    with _served(tmp_path / "fleet") as (world, served, gateways):
        for tenant in ("alpha", "beta"):
            for device_id in DEVICES[tenant]:
                key = derive_test_key(f"fleet api {device_id.hex()}")
                for pack in _packs(device_id, key, SAYS[tenant], 6)[3:]:
                    assert gateways[tenant].put(served.port, pack).status == 201
        failures: list[BaseException] = []

        def round_() -> None:
            try:
                served.app.state.node.consolidate()
            except BaseException as exc:  # reported by the test, not lost in the thread
                failures.append(exc)

        thread = threading.Thread(target=round_)
        thread.start()
        answered = 0
        while thread.is_alive() or answered < 4:
            for tenant in ("alpha", "beta"):
                status, hits = world.json("POST", "/v1/memories/recall", tenant,
                                          body={"query": "Ann works", "touch": False})  # fmt: skip
                assert status == 200
                assert all(_own(tenant, h["memory"]["device"]) for h in hits["items"])
                status, ask = world.json("GET", "/v1/semantic/ask?q=where%20does%20Ann%20work",
                                         tenant)  # fmt: skip
                assert status == 200 and {h["object"] for h in ask["items"]} <= {PLACE[tenant]}
                answered += 1
        thread.join()
        assert not failures
        for tenant in ("alpha", "beta"):
            status, stats = world.json("GET", "/v1/memories/stats", tenant)
            assert stats["states"]["consolidated"] == 24 and stats["states"]["quarantined"] == 12


@pg_skip()
def test_a_tenant_reads_alike_on_sqlite_and_postgresql(tmp_path: Path) -> None:
    """The view's own SQL, differentially: the same uploads into a SQLite tenant and a
    PostgreSQL one read the same (arrival times aside), and the reboot is where the
    packs put it."""
    key = derive_test_key("fleet view device")
    device_id = DEVICES["alpha"][0]
    packs = _packs(device_id, key, SAYS["alpha"], 5, reboot_at=4)
    forged = _packs(device_id, derive_test_key("fleet view forger"), ["x"], 1)[0]
    reg = Registry(tmp_path / "fleet")
    try:
        with postgres.Primary("fleetview") as primary:
            reg.add_tenant("lite")
            reg.add_tenant("big", primary.dsn, "hirmem_fleetview")
            views = []
            for name in ("lite", "big"):
                store = reg.store(name)
                store.add_device(device_id, key.public.raw, "bench")
                for pack in packs:
                    assert isinstance(store.take(pack.pack_id.hex(), pack.encoded, "gw"), Accepted)
                assert isinstance(store.take(forged.pack_id.hex(), forged.encoded, "gw"), Refused)
                views.append(TenantView(store))

            def shape(v: TenantView) -> tuple[object, ...]:
                (d,) = v.devices()
                return (
                    (d.device_id, d.kid, d.head, d.first_seen is not None),
                    [(p.pack_id, p.seq, p.hash, p.nrecords) for p in v.packs(device_id)],
                    v.count_packs(), v.count_packs(device_id), v.count_records(device_id),
                    v.pack_boots(device_id), {k: s for k, (s, _) in v.last_packs().items()},
                    [(r.reason, r.detail, r.seq, r.offers) for r in v.refusals(device_id)],
                    len(v.received_since(0)), v.device(device_id) == d,
                )  # fmt: skip

            lite, big = views
            assert shape(lite) == shape(big)
            boots = lite.pack_boots(device_id)
            assert [boots[p.pack_id] for p in packs] == [(1, 1)] * 3 + [(2, 2)] * 2
            assert lite.count_records() == 15 and len(lite.refusals()) == 1
            kinds = [e["kind"] for e in api_views.timeline(big, device_id)]
            assert kinds.count("reboot") == 1 and kinds.count("refusal") == 1
    finally:
        reg.close()
