"""The MicroPython package: mpy-cross compiles every module and the .mpy files import
on the unix port; pyright is clean against the MicroPython stubs; the hot paths do not
allocate per received byte or per gate evaluation."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from mp_run import MICROPYTHON, MP_DIR, run_mp, run_mp_json, tool

pytestmark = pytest.mark.skipif(MICROPYTHON is None, reason="micropython not installed")
PKG = MP_DIR / "hirmem_mp"
MODULES = sorted(p.stem for p in PKG.glob("*.py"))


def test_mpy_cross_and_import(tmp_path: Path) -> None:
    mpy_cross = tool("mpy-cross")
    assert mpy_cross is not None, "mpy-cross not installed"
    out = tmp_path / "hirmem_mp"
    out.mkdir()
    for name in MODULES:
        subprocess.run(
            [mpy_cross, "-o", str(out / f"{name}.mpy"), str(PKG / f"{name}.py")],
            check=True, capture_output=True,
        )
    assert sorted(p.stem for p in out.glob("*.mpy")) == MODULES
    assert not list(out.glob("*.py"))  # only compiled modules on the path
    script = tmp_path / "imp.py"
    script.write_text(
        "import hirmem_mp\n"
        + "".join(f"import hirmem_mp.{m}\n" for m in MODULES if m != "__init__")
        + "from hirmem_mp import ed25519\n"
        "print(ed25519.public_key(bytes(32)).hex())\n"
        "print(hirmem_mp.agent.__file__)\n"
    )
    lines = run_mp(script, path=tmp_path).split()
    # RFC 8032: the public key of the all-zero seed
    assert lines[0] == "3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29"
    assert lines[1].endswith(".mpy")


def test_pyright_against_micropython_stubs() -> None:
    pyright = tool("pyright")
    if pyright is None:
        pytest.skip("pyright not installed (pip install pyright)")
    proc = subprocess.run(
        [pyright, "--outputjson", "-p", str(MP_DIR / "pyrightconfig.json")],
        capture_output=True, text=True, cwd=MP_DIR, timeout=600, check=False,
    )
    if not proc.stdout.strip().startswith("{"):
        if shutil.which("node") is None and "node" in (proc.stderr + proc.stdout).lower():
            pytest.skip(f"pyright's node runtime unavailable: {proc.stderr[-300:]}")
        raise AssertionError(proc.stdout + proc.stderr)
    report = json.loads(proc.stdout)
    errors = [d for d in report["generalDiagnostics"] if d["severity"] == "error"]
    assert report["summary"]["filesAnalyzed"] >= len(MODULES)
    assert errors == [], errors


def test_hot_paths_do_not_allocate() -> None:
    got = run_mp_json(MP_DIR / "checks" / "alloc.py")
    assert got["frames_ok"] == got["frames"] == 20
    assert got["rx_bytes"] > 1000 and got["rx_bytes_alloc"] == 0  # no allocation per byte
    assert got["gate_evals"] > 500 and got["gate_alloc"] == 0
    assert got["frames_alloc"] <= 64 * got["frames"]  # one small view per frame at most
