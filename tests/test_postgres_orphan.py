"""A PostgreSQL server started by a test dies with the test's process: a child Python
process starts one and is SIGKILLed (no atexit, no finally, no context manager exit);
the server's watchdog stops it and removes its directory (and the process's initdb
template) within seconds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hirmem.emulation import postgres

pytestmark = pytest.mark.skipif(postgres.available() is not None,
                                reason=str(postgres.available()))  # fmt: skip

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, sys, time
from hirmem.emulation import postgres
primary = postgres.Primary("orphan")
print(json.dumps({"pid": primary.pid, "root": str(primary.root),
                  "template": str(postgres._template_root)}), flush=True)
time.sleep(600)
"""


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def test_a_server_dies_with_the_process_that_started_it() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "host")}
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, env=env)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line, "the child did not start its server"
        started = json.loads(line)
        pid, root = int(started["pid"]), Path(started["root"])
        template = Path(started["template"])  # the initdb copy made once per process
        assert not gone(pid) and root.is_dir() and template.is_dir()
        backends = _children(pid)
        assert len(backends) >= 3  # checkpointer, writers, launchers
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        killed = time.monotonic()
        while time.monotonic() - killed < 5 and not (
            gone(pid) and not root.exists() and not template.exists()
        ):
            time.sleep(0.05)
        took = time.monotonic() - killed
        assert gone(pid), "the server outlived the process that started it"
        assert all(gone(int(b)) for b in backends), "a backend outlived it"
        assert not root.exists(), "its directory was left behind"
        assert not template.exists(), "the process's initdb template was left behind"
        assert took < 5
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)


def _children(pid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        if name.isdigit() and int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(name))
    return found
