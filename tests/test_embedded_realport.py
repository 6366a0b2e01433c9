"""The real-board path of tests/test_embedded_boards.py, rehearsed without a board.

The board suites run as a user runs them against hardware — ``--port DEVICE -m
hifive1 --image ELF --flash-command HOOK`` — with tools/pty_board.py as the hook:
each test's provisioned image boots in QEMU behind a pseudo-terminal, so
pytest-embedded opens a device path (a serial port, not a socket URL) and knows
nothing of QEMU. What a real board cannot do must skip and say why; the rest
must pass; the stand-in board is gone afterwards.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from board_host import ROOT, image

PTY_BOARD = ROOT / "tools" / "pty_board.py"


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def test_board_suites_through_a_serial_device_and_a_flashing_hook(tmp_path: Path) -> None:
    link = tmp_path / "tty-hifive1"
    elf = image("hifive1")
    hook = f"{sys.executable} {PTY_BOARD} start {{board}} {{elf}} --link {link} --timeout 120"
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "pytest_embedded",
           "-rs", str(ROOT / "tests" / "test_embedded_boards.py"), "-m", "hifive1",
           "--port", str(link), "--image", str(elf), "--flash-command", hook,
           "--basetemp", str(tmp_path / "inner")]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT / "host"))
    pids: list[int] = []
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT,
                              timeout=400)  # fmt: skip
        pids_file = link.with_name(link.name + ".pids")
        pids = [int(p) for p in pids_file.read_text().split()] if pids_file.exists() else []
    finally:
        subprocess.run([sys.executable, str(PTY_BOARD), "stop", "--link", str(link)], check=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert re.search(r"^5 passed, 3 skipped, 16 deselected in ", out, re.MULTILINE), out[-2000:]
    reasons = re.findall(r"^SKIPPED \[1\] \S+: (.*)$", out, re.MULTILINE)
    assert sorted(reasons) == sorted([
        "a fresh knowledge head (a real board keeps it in flash) needs the emulator (QEMU); "
        "on a real board it is not done on command",
        "a warm reset of a real board needs --reset-command (e.g. \"openocd -f board/... "
        "-c 'init; reset run; exit'\")",
        "a power cut (QEMU killed mid-session) needs the emulator (QEMU); on a real board "
        "it is not done on command",
    ]), reasons  # fmt: skip
    assert len(pids) == 2 and not any(alive(p) for p in pids)  # the stand-in board is off
    assert not link.exists()
