"""What `pio test` runs: the C core's own checks, natively and on emulated boards.

PlatformIO's custom test runner (firmware/pio-tests/test_custom_runner.py) is a thin
adapter over this module; the suites are the folders of firmware/pio-tests:

- ``test_native`` (environment ``native``): ``make -C firmware host`` builds the
  native test programs (tests/native/t_*.c, with AddressSanitizer and UBSan); each
  program that has a ``selftest`` request (its C-only unit checks) runs it, one test
  case per program. The other requests of those programs are driven by pytest
  (tests/test_native_*.py) against the committed vectors.
- ``test_image`` (environments ``mps2-an385`` and ``hifive1``): the core check image
  of firmware/bench (every core operation against a known answer, on the target
  CPU: Cortex-M3 on QEMU's mps2-an385, rv32imac on QEMU's sifive_e, the HiFive1's
  FE310) is built with make and run in QEMU with semihosting; one test case per
  group of operations it reports, and the image's own verdict (exit status 0 and
  ``done``, or its ``FAIL <what>`` line).

No PlatformIO registry package is involved: make and the Debian cross compilers
build, QEMU runs.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import bench_core  # noqa: E402

NATIVE_SRC = ROOT / "tests" / "native"
NATIVE_BIN = ROOT / "build" / "host"
RUN_TIMEOUT = 120.0  # seconds for one program or image (sanitizers, a loaded machine)
# environment -> the bench machine whose QEMU model runs that board's CPU
IMAGE_MACHINES = {"mps2-an385": bench_core.CORTEX_M3, "hifive1": bench_core.FE310}


class CheckError(Exception):
    """A suite could not be built or run at all (not a failed check)."""


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    message: str = ""
    output: str = ""
    duration: float = 0.0


def _make(*targets: str) -> None:
    proc = subprocess.run(
        ["make", "-s", "-C", str(ROOT / "firmware"), *targets], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise CheckError(f"make {' '.join(targets)} failed:\n{proc.stdout}{proc.stderr}")


# ---- native --------------------------------------------------------------------------


def selftest_programs() -> list[str]:
    """The native test programs that answer ``selftest`` (their header says so)."""
    found = []
    for src in sorted(NATIVE_SRC.glob("t_*.c")):
        header = src.read_text(encoding="utf-8").split("*/", 1)[0]
        if re.search(r"^\s*\*\s+selftest\b", header, re.MULTILINE):
            found.append(src.stem)
    return found


def run_selftest(program: str) -> Check:
    start = time.monotonic()
    try:
        proc = subprocess.run(
            [str(NATIVE_BIN / program)], input="selftest\n", capture_output=True, text=True,
            timeout=RUN_TIMEOUT,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return Check(program, False, f"no answer within {RUN_TIMEOUT:.0f} s")
    took = time.monotonic() - start
    answer = proc.stdout.strip().splitlines()[:1]
    words = answer[0].split() if answer else []
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        return Check(program, False, f"exit status {proc.returncode}", output, took)
    if words[:1] == ["ok"]:
        return Check(program, True, " ".join(words), output, took)
    return Check(program, False, " ".join(words) or "no answer", output, took)


# ---- QEMU images -----------------------------------------------------------------------


def image_machine(env: str) -> bench_core.Machine:
    name = IMAGE_MACHINES.get(env)
    if name is None:
        raise CheckError(
            f"no core check image for environment {env!r} (images: {', '.join(IMAGE_MACHINES)})"
        )
    return next(m for m in bench_core.MACHINES if m.name == name)


def read_image_output(env: str, code: int, output: str) -> list[Check]:
    """Test cases from the image's semihosting lines and exit status."""
    lines = output.splitlines()
    groups: list[str] = []
    for line in lines:
        fields = line.split()
        if fields[:1] == ["region"] and len(fields) == 4:
            group = fields[1].split("/", 1)[0]
            if group not in groups:
                groups.append(group)
    failures = [line for line in lines if line.startswith("FAIL")]
    if code == 0 and not failures and "done" in lines:
        return [Check(f"{env}/{group}", True, "checked on the target") for group in groups]
    what = failures[0] if failures else f"exit status {code}, no 'done'"
    return [Check(f"{env}/image", False, what, output)]


def run_image(env: str) -> list[Check]:
    machine = image_machine(env)
    start = time.monotonic()
    try:
        proc = subprocess.run(
            bench_core.qemu_command(machine), capture_output=True, text=True,
            timeout=RUN_TIMEOUT,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return [Check(f"{env}/image", False, f"QEMU still ran after {RUN_TIMEOUT:.0f} s")]
    # the semihosting console is QEMU's stderr
    checks = read_image_output(env, proc.returncode, proc.stderr + proc.stdout)
    took = time.monotonic() - start
    return [Check(c.name, c.passed, c.message, c.output, took / len(checks)) for c in checks]


# ---- suites --------------------------------------------------------------------------


def build(env: str, test: str) -> None:
    if test == "test_native":
        if env != "native":
            raise CheckError(f"test_native runs on the native environment, not {env!r}")
        _make("host")
    elif test == "test_image":
        _make(str(image_machine(env).elf))
    else:
        raise CheckError(f"no suite {test!r} (firmware/pio-tests has test_native, test_image)")


def run(env: str, test: str) -> list[Check]:
    if test == "test_native":
        programs = selftest_programs()
        if not programs:
            raise CheckError(f"no native test program in {NATIVE_SRC} answers selftest")
        return [run_selftest(p) for p in programs]
    return run_image(env)
