"""Running PlatformIO in the tests: the pio program, the set-up tool, an offline
environment and a fresh core folder prepared by tools/pio_setup.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PIO = Path(sys.executable).with_name("pio")
SETUP = ROOT / "tools" / "pio_setup.py"


@cache
def can_unshare_network() -> bool:
    if shutil.which("unshare") is None:
        return False
    proc = subprocess.run(["unshare", "-rn", "true"], capture_output=True)
    return proc.returncode == 0


def offline_env(core: Path, build: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLATFORMIO_")}
    dead = "http://127.0.0.1:9"  # discard port: nothing listens, a request fails at once
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        env[name] = dead
    env.update(PLATFORMIO_CORE_DIR=str(core), PLATFORMIO_BUILD_DIR=str(build))
    return env


def prepare_core(base: Path) -> dict[str, str]:
    """tools/pio_setup.py into base/core; the offline environment that uses it
    (builds in base/build)."""
    env = offline_env(base / "core", base / "build")
    setup = subprocess.run(
        [sys.executable, str(SETUP), "--core-dir", str(base / "core")],
        capture_output=True, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    assert setup.returncode == 0, setup.stderr
    assert "updated" in setup.stdout, setup.stdout
    return env
