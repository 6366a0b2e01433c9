"""tools/mp_deploy.py with the key files `hirmem keys` writes (--dry-run: no board).

The keys are made by the real CLI; the deploy's config module is read back; the
`hirmem device add` line it prints is run against a real store; missing and
unsafe files end in one message and exit status 2, never a traceback (the tool
runs as a program here, as a user runs it).
"""

from __future__ import annotations

import ast
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from hirmem.cli.entry import main
from hirmem.protocol.keys import SigningKey, read_key_file

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "tools" / "mp_deploy.py"
DEVICE_ID = "0a0b0c0d0e0f1011"
HOST_ID = "a1a2a3a4a5a6a7a8"


def deploy(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "host"))
    return subprocess.run([sys.executable, str(DEPLOY), *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)  # fmt: skip


@pytest.fixture
def keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path]:
    device, host = tmp_path / "device.key", tmp_path / "host.key"
    for path in (device, host):
        assert main(["keys", "--out", str(path)]) == 0
    capsys.readouterr()
    return device, host


def config_values(out: Path) -> dict[str, object]:
    tree = ast.parse((out / "hirmem_config.py").read_text())
    return {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
    }


def test_key_files_from_hirmem_keys_deploy_and_the_device_is_trusted(
    tmp_path: Path, keys: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    device_key, host_key = keys
    out = tmp_path / "mp"
    proc = deploy("--dry-run", "--device-id", DEVICE_ID, "--seed-file", str(device_key),
                  "--host-key", str(host_key), "--host-id", HOST_ID, "--board", "pico",
                  "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    device, host = read_key_file(device_key), read_key_file(host_key)
    values = config_values(out)
    assert values["SEED"] == device.seed() and values["HOST_PUBLIC"] == host.public.raw
    assert values["DEVICE_ID"] == bytes.fromhex(DEVICE_ID)
    assert values["HOST_ID"] == bytes.fromhex(HOST_ID)
    assert (out / "hirmem_config.py").stat().st_mode & 0o077 == 0
    assert f"device public key: {device.public.raw.hex()}" in proc.stdout
    for secret in (device.seed().hex(), host.seed().hex()):
        assert secret not in proc.stdout + proc.stderr  # seeds are never printed
    # the printed line, run as printed, makes the host trust the device
    [line] = [x for x in proc.stdout.splitlines() if "hirmem device add" in x]
    argv = shlex.split(line.split(": ", 1)[1])[1:]
    db = str(tmp_path / "host.db")
    assert main([*argv, "--database", db]) == 0
    assert main(["device", "list", "--database", db]) == 0
    listing = capsys.readouterr().out
    assert DEVICE_ID in listing and "pico" in listing


def test_host_public_key_as_hex_still_works_but_not_together_with_a_key_file(
    tmp_path: Path, keys: tuple[Path, Path]
) -> None:
    device_key, host_key = keys
    public = read_key_file(host_key).public.raw.hex()
    base = ("--dry-run", "--device-id", DEVICE_ID, "--seed-file", str(device_key),
            "--out", str(tmp_path / "mp"))  # fmt: skip
    ok = deploy(*base, "--host-public", public)
    assert ok.returncode == 0, ok.stderr
    assert config_values(tmp_path / "mp")["HOST_PUBLIC"] == bytes.fromhex(public)
    both = deploy(*base, "--host-public", public, "--host-key", str(host_key))
    assert both.returncode == 2 and "not both" in both.stderr


@pytest.mark.parametrize("which", ["--seed-file", "--host-key"])
def test_a_missing_key_file_is_a_message_not_a_traceback(
    tmp_path: Path, keys: tuple[Path, Path], which: str
) -> None:
    device_key, host_key = keys
    missing = tmp_path / "nowhere" / "missing.key"
    files = {"--seed-file": device_key, "--host-key": host_key, which: missing}
    proc = deploy("--dry-run", "--device-id", DEVICE_ID, "--out", str(tmp_path / "mp"),
                  *(a for k, v in files.items() for a in (k, str(v))))  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"mp_deploy: {which} {missing}: no such file (create a key with "
        f"`hirmem keys --out {missing}`)"
    )
    assert "Traceback" not in proc.stderr and not (tmp_path / "mp").exists()


def test_unsafe_or_foreign_files_are_refused_with_the_reason(
    tmp_path: Path, keys: tuple[Path, Path]
) -> None:
    device_key, _ = keys
    base = ("--dry-run", "--device-id", DEVICE_ID, "--out", str(tmp_path / "mp"))
    device_key.chmod(0o640)
    shared = deploy(*base, "--seed-file", str(device_key))
    assert shared.returncode == 2 and "readable by others: chmod 600" in shared.stderr
    device_key.chmod(0o600)
    other = tmp_path / "notes.txt"
    other.write_text("not a key\n")
    other.chmod(0o600)
    foreign = deploy(*base, "--seed-file", str(other))
    assert foreign.returncode == 2 and "expected a `hirmem keys` key file" in foreign.stderr
    raw = tmp_path / "raw.seed"  # the older forms: 32 raw bytes or 64 hex digits
    raw.write_bytes(SigningKey.generate().seed())
    raw.chmod(0o600)
    assert deploy(*base, "--seed-file", str(raw)).returncode == 0
    bad_id = deploy("--dry-run", "--device-id", "xyz", "--seed-file", str(device_key))
    assert bad_id.returncode == 2 and "--device-id must be 16 hex digits" in bad_id.stderr
    for proc in (shared, foreign, bad_id):
        assert "Traceback" not in proc.stderr
