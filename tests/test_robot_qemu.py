"""The Robot Framework suites of renode/ pass on QEMU for every board.

The suites (renode/*.robot) use only project keywords; with --variable BACKEND:qemu
they take them from renode/keywords/qemu.resource (HirmemQemu.py on hirmem.emulation.qemu and
the host codec), the same suites that renode-test runs on Renode. One robot process
per board, run side by side; every suite's every test must pass, and the number of
tests run must be the number the suites hold (an empty or skipped run fails).
"""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from board_host import BOARDS, ROOT, image

SUITES = ROOT / "renode"


def suite_test_count() -> int:
    count = 0
    for suite in sorted(SUITES.glob("*.robot")):
        text = suite.read_text(encoding="utf-8")
        section = text.split("*** Test Cases ***", 1)[1].split("\n*** ", 1)[0]
        count += len(re.findall(r"^\S.*$", section, flags=re.MULTILINE))
    return count


def test_robot_suites_pass_on_qemu_for_every_board(tmp_path: Path) -> None:
    for board in BOARDS:
        image(board)  # make -C firmware boards, once per session
    expected = suite_test_count()
    assert expected >= 8
    runs: dict[str, tuple[subprocess.Popen[str], Path]] = {}
    for board in BOARDS:
        out = tmp_path / board
        cmd = [
            sys.executable, "-m", "robot", "--variable", "BACKEND:qemu",
            "--variable", f"BOARD:{board}", "--outputdir", str(out),
            "--log", "NONE", "--report", "NONE", "--console", "dotted", str(SUITES),
        ]  # fmt: skip
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT
        )
        runs[board] = (proc, out)
    failures = []
    for board, (proc, out) in runs.items():
        try:
            console, _ = proc.communicate(timeout=50)
        except subprocess.TimeoutExpired:
            proc.kill()
            console, _ = proc.communicate()
            failures.append(f"{board}: robot still running after 50 s\n{console[-2000:]}")
            continue
        stat = ET.parse(out / "output.xml").find("./statistics/total/stat")
        assert stat is not None, f"{board}: no statistics in output.xml"
        passed, failed, skipped = (int(stat.get(k, "0")) for k in ("pass", "fail", "skip"))
        if proc.returncode != 0 or (passed, failed, skipped) != (expected, 0, 0):
            failures.append(
                f"{board}: {passed} passed, {failed} failed, {skipped} skipped of {expected}"
                f"\n{console[-3000:]}"
            )
    assert not failures, "\n\n".join(failures)
