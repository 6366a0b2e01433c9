"""``hirmem fleet``: the registry commands (with --json, errors as one line), and a
served fleet whose consolidation makes the uploads recallable with their trace."""

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

from fleet_kit import Gateway, free_port, request, wait_healthy
from hirmem.cli.entry import main
from hirmem.protocol.keys import derive_test_key, read_key_file
from test_store import Device

ROOT = Path(__file__).resolve().parents[1]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def as_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_registry_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = ["--database-dir", str(tmp_path / "fleet")]
    code, _, err = run(capsys, "fleet", "status", *d)
    assert code == 2 and "no fleet registry here" in err and "Traceback" not in err
    [t] = as_json(capsys, "fleet", "tenant", "add", "acme", *d)
    assert t == {
        "tenant": "acme",
        "backend": "sqlite",
        "location": str(tmp_path / "fleet" / "tenants" / "acme.db"),
    }
    code, _, err = run(capsys, "fleet", "tenant", "add", "acme", *d)
    assert code == 2 and "exists" in err
    code, _, err = run(capsys, "fleet", "tenant", "add", "Bad Name", *d)
    assert code == 2 and "tenant name" in err
    key = tmp_path / "gw.key"
    [gw] = as_json(
        capsys, "fleet", "gateway", "add", "--tenant", "acme", "--key", str(key), "--new-key", *d
    )
    assert gw["keyid"] == read_key_file(key).kid.hex() and gw["revoked"] is False
    assert (key.stat().st_mode & 0o777) == 0o600
    code, _, err = run(
        capsys, "fleet", "gateway", "add", "--tenant", "nobody", "--public-key", "11" * 32, *d
    )
    assert code == 2 and "no tenant nobody" in err
    code, _, err = run(
        capsys, "fleet", "gateway", "add", "--tenant", "acme", "--public-key", "11" * 31, *d
    )
    assert code == 2 and "64 hex digits" in err
    dev_key = derive_test_key("cli device")
    got = as_json(
        capsys,
        "fleet",
        "device",
        "add",
        "--tenant",
        "acme",
        "--device-id",
        "c1" * 8,
        "--public-key",
        dev_key.public.raw.hex(),
        *d,
    )
    assert got == {"tenant": "acme", "device": "c1" * 8}
    code, _, err = run(
        capsys,
        "fleet",
        "device",
        "add",
        "--tenant",
        "acme",
        "--device-id",
        "c1" * 7,
        "--public-key",
        dev_key.public.raw.hex(),
        *d,
    )
    assert code == 2 and "16 hex digits" in err
    assert run(capsys, "fleet", "gateway", "revoke", gw["keyid"], *d)[0] == 0
    [listed] = as_json(capsys, "fleet", "gateway", "list", *d)
    assert listed["revoked"] is True
    code, _, err = run(capsys, "fleet", "gateway", "revoke", gw["keyid"], *d)
    assert code == 2 and "no active gateway" in err
    status = as_json(capsys, "fleet", "status", *d)
    assert status["tenants"][0]["devices"] == 1 and status["tenants"][0]["packs"] == 0


def test_served_fleet_consolidates_and_recalls_with_the_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = ["--database-dir", str(tmp_path / "fleet")]
    as_json(capsys, "fleet", "tenant", "add", "acme", *d)
    key = tmp_path / "gw.key"
    as_json(
        capsys, "fleet", "gateway", "add", "--tenant", "acme", "--key", str(key), "--new-key", *d
    )
    devices = []
    for i in range(2):
        dev = Device(bytes([0xC2, 0, 0, 0, 0, 0, 0, i + 1]), derive_test_key(f"cli dev {i}"))
        as_json(
            capsys,
            "fleet",
            "device",
            "add",
            "--tenant",
            "acme",
            "--device-id",
            dev.device_id.hex(),
            "--public-key",
            dev.key.public.raw.hex(),
            *d,
        )
        devices.append(dev)
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hirmem.cli",
            "fleet",
            "serve",
            *d,
            "--port",
            str(port),
            "--consolidate-every",
            "0.2",
        ],
        env=dict(os.environ, PYTHONPATH=str(ROOT / "host")),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_healthy(port)
        gw = Gateway(read_key_file(key))
        for dev in devices:
            for _ in range(3):
                assert gw.put(port, dev.pack(4)).status == 201
        deadline = time.monotonic() + 60
        while as_json(capsys, "fleet", "status", *d)["tenants"][0]["open_jobs"]:
            assert time.monotonic() < deadline, "consolidation did not run"
            time.sleep(0.2)
        # the same process serves the HTTP API over the tenant, to a token of the tenant's
        code, token, err = run(capsys, "fleet", "token", "create", "--tenant", "acme", *d)
        assert code == 0, err
        auth = {"Authorization": f"Bearer {token.strip()}"}
        page = request(port, "GET", "/v1/devices", headers=auth)
        assert page.status == 200
        assert [i["device"] for i in page.body["items"]] == [d.device_id.hex() for d in devices]
        body = json.dumps({"query": "temp0", "k": 3}).encode()
        hits = request(port, "POST", "/v1/memories/recall", body,
                       {**auth, "Content-Type": "application/json"})  # fmt: skip
        assert hits.status == 200 and len(hits.body["items"]) == 3
        assert request(port, "GET", "/v1/devices").status == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    hits = as_json(capsys, "fleet", "recall", "--tenant", "acme", "temp0", "-k", "8", *d)
    assert len(hits) == 8
    kids = {dev.device_id.hex(): dev.key.kid.hex() for dev in devices}
    assert {h["device"] for h in hits} == set(kids)
    for h in hits:
        assert h["kid"] == kids[h["device"]] and h["record"].startswith(h["device"])
        assert h["pack"].startswith(h["device"])
    out = run(capsys, "fleet", "recall", "--tenant", "acme", "temp0", *d)[1]
    assert out.count(" key ") == 5
