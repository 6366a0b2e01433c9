"""The HTTP API over real stores, served by uvicorn: tokens and scopes, problems, paging,
rate limits, every route family, and the committed OpenAPI document."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from openapi_spec_validator import validate

import api_world
from api_world import DEV_C, SUSPECT, World
from conftest import ROOT
from hirmem.api import spec
from hirmem.api.tokens import TokenStore
from test_store import DEV_A, DEV_B

PROBLEM = "application/problem+json"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("api")
    with api_world.serve(api_world.build(root)) as w:
        yield w


def _problem(world: World, method: str, path: str, status: int, **kw: object) -> dict[str, object]:
    got, headers, raw = world.call(method, path, **kw)  # type: ignore[arg-type]
    assert got == status, raw
    assert headers["content-type"] == PROBLEM
    doc: dict[str, object] = json.loads(raw)
    assert doc["status"] == status and doc["detail"] and str(doc["type"]).startswith("https://")
    return doc


def test_the_committed_openapi_document_is_what_the_service_serves(world: World) -> None:
    committed = json.loads((ROOT / "docs" / "openapi.json").read_text(encoding="utf-8"))
    status, served = world.json("GET", "/openapi.json", scope=None)
    assert status == 200
    assert served == committed, "docs/openapi.json is stale: run tools/openapi.py"
    validate(served)
    assert spec.text(spec.document()) == (ROOT / "docs" / "openapi.json").read_text("utf-8")
    paths = set(served["paths"])
    assert {"/v1/devices", "/v1/memories/recall", "/v1/review/{memory_id}",
            "/v1/audit/verify", "/v1/semantic/trace/{triple}"} <= paths  # fmt: skip


def test_no_token_a_bad_token_and_a_missing_scope_are_problems(world: World) -> None:
    doc = _problem(world, "GET", "/v1/devices", 401, scope=None)
    assert "bearer token" in str(doc["detail"])
    _problem(world, "GET", "/v1/devices", 401, token="hm_0000000000000000_" + "A" * 43)
    forged = world.tokens["read"][:-1] + ("B" if world.tokens["read"][-1] != "B" else "C")
    _problem(world, "GET", "/v1/devices", 401, token=forged)
    doc = _problem(world, "POST", f"/v1/review/{world.suspect_id}", 403, scope="read",
                   body={"decision": "keep", "reason": "looks fine"})  # fmt: skip
    assert "'review' scope" in str(doc["detail"])
    _problem(world, "POST", "/v1/memories", 403, scope="review", body={"text": "x"})
    _problem(world, "GET", "/v1/nowhere", 404)
    doc = _problem(world, "POST", "/v1/memories/recall", 422, body={"k": 3})
    assert "query" in str(doc["detail"])


def test_tokens_are_kept_hashed_and_a_revoked_one_is_refused(world: World) -> None:
    token = world.tokens["read"]
    with sqlite3.connect(world.root / "hirmem.db") as db:
        rows = db.execute("SELECT id, digest FROM api_tokens").fetchall()
    assert all(token.encode() not in bytes(d) for _, d in rows)
    assert (token.split("_")[1], hashlib.sha256(token.encode()).digest()) in [
        (i, bytes(d)) for i, d in rows
    ]
    store = TokenStore(world.root / "hirmem.db")
    try:
        spare, row = store.create("spare", "read")
        assert world.call("GET", "/v1/fleet", token=spare)[0] == 200
        store.revoke(row.id)
    finally:
        store.close()
    _problem(world, "GET", "/v1/fleet", 401, token=spare)


def test_the_tenant_is_the_principal_s(world: World) -> None:
    doc = _problem(world, "GET", "/v1/devices", 404, scope="other-tenant")
    assert "acme" in str(doc["detail"])


def test_devices_page_by_cursor_and_tell_their_state(world: World) -> None:
    seen: list[str] = []
    cursor = None
    for _ in range(5):
        path = "/v1/devices?limit=1" + (f"&cursor={cursor}" if cursor else "")
        status, page = world.json("GET", path)
        assert status == 200 and len(page["items"]) == 1
        seen += [d["device"] for d in page["items"]]
        cursor = page["next"]
        if cursor is None:
            break
    assert seen == sorted(d.hex() for d in (DEV_A, DEV_B, DEV_C))
    _problem(world, "GET", "/v1/devices?cursor=bm90LWEtY3Vyc29y", 400)
    status, fleet = world.json("GET", "/v1/fleet")
    assert fleet == {"devices": 3, "active": 1, "silent": 1, "never-seen": 1}
    status, a = world.json("GET", f"/v1/devices/{DEV_A.hex()}")
    assert (a["packs"], a["records"], a["ring_fill"], a["knowledge_version"]) == (4, 11, 6 / 16, 1)
    assert a["liveness"] == "active" and a["counters"]["frames_good"] == 40
    status, b = world.json("GET", f"/v1/devices/{DEV_B.hex()}")
    assert b["refusals"] == {"digests": 1, "offers": 1} and b["liveness"] == "silent"
    status, refusals = world.json("GET", f"/v1/devices/{DEV_B.hex()}/refusals")
    assert [r["reason"] for r in refusals["items"]] == ["bad_signature"]
    _problem(world, "GET", f"/v1/devices/{'ff' * 8}", 404)
    _problem(world, "GET", "/v1/devices/xyz", 422)


def test_a_device_timeline_shows_packs_the_reboot_and_refusals(world: World) -> None:
    _status, t = world.json("GET", f"/v1/devices/{DEV_A.hex()}/timeline")
    kinds = [e["kind"] for e in t["items"]]
    assert kinds.count("pack") == 4 and kinds.count("reboot") == 1
    assert "boot 1 → 2" in next(e["detail"] for e in t["items"] if e["kind"] == "reboot")
    _status, t = world.json("GET", f"/v1/devices/{DEV_B.hex()}/timeline")
    assert [e["kind"] for e in t["items"]].count("refusal") == 1


def test_intake_pages_walk_every_pack_and_record_once(world: World) -> None:
    for what, total in (("packs", 5), ("records", 13)):
        ids: list[str] = []
        cursor = None
        while True:
            path = f"/v1/intake/{what}?limit=2" + (f"&cursor={cursor}" if cursor else "")
            status, page = world.json("GET", path)
            assert status == 200 and len(page["items"]) <= 2
            ids += [x["pack" if what == "packs" else "id"] for x in page["items"]]
            cursor = page["next"]
            if cursor is None:
                break
        assert len(ids) == len(set(ids)) == total
    _problem(world, "GET", "/v1/intake/records?cursor=" + "cGFja3M6Mg", 400)  # a packs cursor


def test_admit_recall_with_factors_get_history_strength_and_distilled(world: World) -> None:
    status, m = world.json("POST", "/v1/memories", scope="admin",
                           body={"text": "the compressor on line 4 overheats at noon",
                                 "subject": "compressor 4", "attribute": "overheats",
                                 "value": "noon"})  # fmt: skip
    assert status == 201 and m["state"] == "consolidated"
    status, r = world.json("POST", "/v1/memories/recall",
                           body={"query": "compressor line 4 overheats", "k": 3})  # fmt: skip
    top = r["items"][0]
    assert top["id"] == m["id"]
    assert top["score"] == pytest.approx(top["sim"] * top["strength"] * top["recency"]
                                         * top["trust"], rel=1e-4)  # fmt: skip
    status, got = world.json("GET", f"/v1/memories/{m['id']}")
    assert got["text"] == "the compressor on line 4 overheats at noon"
    status, h = world.json("GET", f"/v1/memories/{m['id']}/history")
    assert [v["id"] for v in h["versions"]] == [m["id"]]
    assert {"capture", "admit"} & {a["action"] for a in h["audit"]}
    status, s = world.json("GET", f"/v1/memories/{m['id']}/strength")
    # one point per bucket (the last): the recall's rehearsal replaced the admission's
    assert s["points"] and s["points"][-1]["cause"] == "rehearsal"
    status, dl = world.json("GET", "/v1/distilled")
    pattern = next(d for d in dl["items"] if d["device"] == DEV_A.hex())
    status, d = world.json("GET", f"/v1/memories/{pattern['id']}/distilled")
    assert len(d["episodes"]) == pattern["episodes"] >= 2
    status, back = world.json("GET", f"/v1/memories/{d['episodes'][0]}/distilled")
    assert back["distilled_into"] == [pattern["id"]]
    _problem(world, "GET", f"/v1/memories/{'0' * 32}", 404)


def test_a_steward_decides_through_the_api_and_the_chain_says_so(world: World) -> None:
    status, q = world.json("GET", "/v1/review")
    assert world.suspect_id in [m["id"] for m in q["items"]] and q["pending"] >= 1
    _problem(world, "POST", f"/v1/review/{world.suspect_id}", 422, scope="review",
             body={"decision": "promote", "reason": ""})  # fmt: skip
    status, d = world.json("POST", f"/v1/review/{world.suspect_id}", scope="review",
                           body={"decision": "promote", "reason": "valve recalibrated"})
    assert status == 200 and d["steward"] == "steward-ann" and d["now"]["state"] == "candidate"
    doc = _problem(world, "POST", f"/v1/review/{world.suspect_id}", 409, scope="review",
                   body={"decision": "retire", "reason": "again"})  # fmt: skip
    assert "not quarantined" in str(doc["detail"])
    status, h = world.json("GET", f"/v1/memories/{world.suspect_id}/history")
    review = [a for a in h["audit"] if a["action"] == "review"]
    assert review and review[-1]["actor"] == "steward:steward-ann"
    assert review[-1]["detail"]["reason"] == "valve recalibrated"
    status, v = world.json("GET", "/v1/audit/verify")
    assert v["ok"] and v["records"] >= review[-1]["seq"]
    status, cp = world.json("GET", "/v1/audit/checkpoint")
    assert status == 200 and len(cp["signature"]) == 128
    # promoted, yet Trust = 0: reached by its id, never by a search
    status, r = world.json("POST", "/v1/memories/recall", body={"query": SUSPECT, "k": 50})
    assert world.suspect_id not in [x["id"] for x in r["items"]]
    status, got = world.json("GET", f"/v1/memories/{world.suspect_id}")
    assert status == 200 and got["trust"] == 0


def test_semantic_ask_with_evidence_and_trace_in_two_formats(world: World) -> None:
    status, a = world.json("GET", "/v1/semantic/ask?q=where%20does%20Bob%20work")
    assert status == 200 and a["subject"] == "bob"
    hit = a["items"][0]
    assert hit["evidence"] == "Bob works at Plant North." and hit["object"] == "Plant North"
    status, early = world.json("GET", "/v1/semantic/ask?q=where%20does%20Bob%20work&as_of=1")
    assert early["items"] == []  # nothing was believed at the start of time
    status, headers, raw = world.call("GET", f"/v1/semantic/trace/{hit['triple']}")
    assert status == 200 and headers["content-type"].startswith("application/json")
    assert "wasGeneratedBy" in json.loads(raw)
    status, headers, raw = world.call("GET", f"/v1/semantic/trace/{hit['triple']}?format=turtle")
    assert headers["content-type"].startswith("text/turtle") and b"prov:" in raw
    _problem(world, "GET", "/v1/semantic/trace/nothing-here", 404)


def test_health_and_metrics_without_a_daemon(world: World) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    assert world.json("GET", "/healthz", scope=None) == (200, {"status": "ok"})
    _problem(world, "GET", "/v1/nothing-here", 404)
    status, _, raw = world.call("GET", "/v1/metrics")
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(raw.decode())}
    refused = {(s.labels["status"], s.labels["kind"]): s.value
               for s in families["hirmem_api_problems"].samples}  # fmt: skip
    assert refused[("404", "not-found")] >= 1 and refused[("401", "no-token")] >= 1
    assert families["hirmem_api_recall_batches"].samples[0].value >= 1


def test_a_token_over_its_rate_is_told_when_to_come_back(tmp_path: Path) -> None:
    with api_world.serve(api_world.build(tmp_path), rate=0.5, burst=3) as w:
        answers = [w.call("GET", "/v1/fleet") for _ in range(4)]
        assert [a[0] for a in answers] == [200, 200, 200, 429]
        _status, headers, raw = answers[-1]
        assert headers["content-type"] == PROBLEM and int(headers["retry-after"]) >= 1
        assert "rate limit" in json.loads(raw)["detail"]
        # another token has a bucket of its own
        assert w.call("GET", "/v1/fleet", scope="review")[0] == 200


def test_hirmem_token_creates_lists_and_revokes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from hirmem.cli.entry import main

    db = str(tmp_path / "hirmem.db")
    assert main(["token", "create", "--database", db, "--name", "ann", "--scope", "review"]) == 0
    token = capsys.readouterr().out.strip()
    store = TokenStore(db)
    try:
        who = store.authenticate(token)
        assert who is not None and (who.name, who.scope, who.tenant) == ("ann", "review", "local")
    finally:
        store.close()
    assert main(["token", "list", "--database", db, "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["name"] == "ann" and token not in json.dumps(row)
    assert main(["token", "revoke", "--database", db, row["id"]]) == 0
    assert main(["token", "revoke", "--database", db, row["id"]]) == 2
    assert "already revoked" in capsys.readouterr().err
    assert main(["token", "create", "--database", db, "--name", "a b"]) == 2
    store = TokenStore(db)
    try:
        assert store.authenticate(token) is None
    finally:
        store.close()


def test_the_api_section_of_the_daemon_configuration_is_checked(tmp_path: Path) -> None:
    from hirmem.daemon.config import ConfigError, build_config

    base = {"host": {"id": "a1a2a3a4a5a6a7a8"}, "device": [{"url": "socket://127.0.0.1:9"}]}
    config = build_config({**base, "api": {"listen": "127.0.0.1:0"}}, tmp_path, [])
    assert config.api is not None and config.api.listen.loopback and config.api.burst == 100
    assert build_config(base, tmp_path, []).api is None
    with pytest.raises(ConfigError) as err:
        build_config({**base, "api": {"listen": "0.0.0.0:0", "rate": -1, "colour": 1}},
                     tmp_path, [])  # fmt: skip
    said = str(err.value)
    assert "api.listen" in said and "api.public = true" in said
    assert "api.rate" in said and "api.colour: unknown key" in said
    public = build_config({**base, "api": {"listen": "0.0.0.0:0", "public": True}}, tmp_path, [])
    assert public.api is not None and not public.api.listen.loopback


def test_the_demo_serves_its_stores_until_told_to_stop(tmp_path: Path) -> None:
    import threading

    from hirmem.cli.demo import serve_dashboard
    from hirmem.protocol.keys import write_key_file

    world = api_world.build(tmp_path)
    write_key_file(tmp_path / "memory.db.key", api_world.HOST_KEY)  # the demo's key file
    stop, ready = threading.Event(), threading.Event()
    seen: list[tuple[str, str]] = []

    def on_ready(url: str, token: str) -> None:
        seen.append((url, token))
        ready.set()

    thread = threading.Thread(target=serve_dashboard,
                              args=(tmp_path, "127.0.0.1:0", stop, on_ready))  # fmt: skip
    thread.start()
    try:
        assert ready.wait(30)
        world.url, token = seen[0]
        status, fleet = world.json("GET", "/v1/fleet", token=token)
        assert status == 200 and fleet["devices"] == 3
        status, _headers, page = world.call("GET", "/ui/login", scope=None)
        assert status == 200 and b'<label for="token">' in page
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()


def test_the_daemon_serves_the_api_from_its_configuration(tmp_path: Path) -> None:
    """``hirmem daemon`` with ``[api]``: the dashboard's address on stderr, the API up
    while the daemon runs (a token from ``hirmem token create``), gone after SIGTERM."""
    import re
    import signal
    import socket
    import subprocess
    import sys
    import time

    from test_cli_convention import cli_env

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    db = tmp_path / "hirmem.db"
    (tmp_path / "hirmem.toml").write_text(
        f'[host]\nid = "a1a2a3a4a5a6a7a8"\ndatabase = "hirmem.db"\nmemory_every = 0\n'
        f'[api]\nlisten = "127.0.0.1:{port}"\n[[device]]\nurl = "loop://"\n'
    )
    made = subprocess.run(
        [sys.executable, "-m", "hirmem.cli", "token", "create", "--database", str(db),
         "--name", "ops", "--scope", "read"],
        capture_output=True, text=True, env=cli_env(), check=True,
    )  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "hirmem.cli", "daemon", "--config",
         str(tmp_path / "hirmem.toml"), "--create"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=cli_env(),
    )  # fmt: skip
    world = World(tmp_path, url=f"http://127.0.0.1:{port}",
                  tokens={"read": made.stdout.strip()})  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                status, fleet = world.json("GET", "/v1/fleet")
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "no API"
                time.sleep(0.2)
        assert status == 200 and fleet["devices"] == 0
        assert world.call("GET", "/ui/login", scope=None)[0] == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert re.search(rf"dashboard at http://127\.0\.0\.1:{port}/ui/", out)


def test_the_device_table_reads_each_device_s_own_counters(world: World) -> None:
    """The page's counters come from one query for all its devices: each row still gets
    its own device's (a differential check against the one-device route)."""
    status, page = world.json("GET", "/v1/devices")
    assert status == 200 and len(page["items"]) == 3
    for row in page["items"]:
        status, one = world.json("GET", f"/v1/devices/{row['device']}")
        assert status == 200 and {k: one[k] for k in row} == row


def test_the_dashboard_signs_in_by_cookie_and_keeps_to_the_token_s_scope(world: World) -> None:
    """A read token sees the review queue with its buttons disabled and cannot decide; a
    review token's cookie cannot be used by another site's form."""
    import http.cookiejar
    import urllib.error
    import urllib.parse
    import urllib.request

    def signed_in(token: str) -> urllib.request.OpenerDirector:
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        page = opener.open(world.url + "/ui/login",
                           data=urllib.parse.urlencode({"token": token}).encode())  # fmt: skip
        assert page.url.endswith("/ui/")
        cookie = next(iter(jar))
        assert cookie.has_nonstandard_attr("HttpOnly") and cookie.value == token
        return opener

    status, made = world.json("POST", "/v1/memories", scope="admin",
                              body={"text": "door 4 open and shut at once", "flags": 0xFBF})
    assert status == 201 and made["state"] == "quarantined"
    target = made["id"]
    reader = signed_in(world.tokens["read"])
    page = reader.open(world.url + "/ui/review").read().decode()
    assert target in page and "deciding needs review" in page
    assert page.count(" disabled") >= 4  # the reason field and the three buttons
    form = urllib.parse.urlencode({"decision": "keep", "reason": "fine"}).encode()
    with pytest.raises(urllib.error.HTTPError) as refused:
        reader.open(world.url + f"/ui/review/{target}", data=form)
    assert refused.value.code == 403
    steward = signed_in(world.tokens["review"])
    forged = urllib.request.Request(world.url + f"/ui/review/{target}", data=form,
                                    headers={"Sec-Fetch-Site": "cross-site"})  # fmt: skip
    with pytest.raises(urllib.error.HTTPError) as refused:
        steward.open(forged)
    assert refused.value.code == 403 and b"this site's own pages" in refused.value.read()
    status, still = world.json("GET", f"/v1/memories/{target}")
    assert status == 200 and still["state"] == "quarantined"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(world.url + "/ui/login", timeout=10,
                               data=urllib.parse.urlencode({"token": "nope"}).encode())
    assert refused.value.code == 401 and b'role="alert"' in refused.value.read()
