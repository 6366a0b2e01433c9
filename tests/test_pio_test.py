"""`pio test`: the C core's checks through PlatformIO's custom runner, offline.

`pio test -e native` runs the native test programs' selftests; `pio test -e
mps2-an385 -e hifive1` runs the core check image in QEMU for each CPU. Both in a
fresh PlatformIO core folder made by tools/pio_setup.py, with every proxy pointing
at a closed port (nothing is downloaded). The oracle is PlatformIO's own summary
line and exit status, against the case counts the suites should yield.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from board_host import ROOT
from pio_host import PIO, prepare_core

sys.path.insert(0, str(ROOT / "tools"))
import pio_checks

pytestmark = pytest.mark.skipif(
    any(shutil.which(c) is None for c in ("arm-none-eabi-gcc", "riscv64-unknown-elf-gcc")),
    reason="the Debian cross compilers are not installed",
)
SUMMARY = re.compile(r"^=+ (\d+) test cases: (?:(\d+) failed, )?(?:(\d+) skipped, )?"
                     r"(\d+) succeeded in [\d:.]+ =+$", re.MULTILINE)  # fmt: skip


def pio_test(env: dict[str, str], *envs: str) -> tuple[int, str, tuple[int, int, int, int]]:
    """Exit status, output and (cases, failed, skipped, succeeded) of `pio test`."""
    cmd = [str(PIO), "test", *(a for e in envs for a in ("-e", e))]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    output = proc.stdout + proc.stderr
    found = SUMMARY.findall(output)
    assert len(found) == 1, output[-3000:]
    counts = tuple(int(n or 0) for n in found[0])
    return proc.returncode, output, (counts[0], counts[1], counts[2], counts[3])


@pytest.fixture(scope="module")
def pio_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return prepare_core(tmp_path_factory.mktemp("pio-test"))


def test_pio_test_native_runs_every_selftest(pio_env: dict[str, str]) -> None:
    programs = pio_checks.selftest_programs()
    assert {"t_core", "t_wire", "t_pack", "t_crypto"} <= set(programs)
    code, output, counts = pio_test(pio_env, "native")
    assert code == 0, output[-3000:]
    assert counts == (len(programs), 0, 0, len(programs))
    for program in programs:
        assert re.search(rf"^{program}: ok\b.*\[PASSED\]$", output, re.MULTILINE), output


def test_pio_test_runs_the_core_image_in_qemu_for_each_cpu(pio_env: dict[str, str]) -> None:
    code, output, counts = pio_test(pio_env, "mps2-an385", "hifive1")
    assert code == 0, output[-3000:]
    cases, failed, skipped, succeeded = counts
    assert failed == skipped == 0 and cases == succeeded
    for env in ("mps2-an385", "hifive1"):
        groups = re.findall(rf"^{env}/(\S+): checked on the target\s+\[PASSED\]$", output,
                            re.MULTILINE)  # fmt: skip
        # the gate, the ring, frames, messages, records, SHA-256, Ed25519, persistence
        for group in ("gate.evaluate", "frame.decode", "msg.decode", "sha256.1k",
                      "ed25519.verify", "persist.mount"):  # fmt: skip
            assert group in groups, (env, groups)
    assert "Downloading" not in output and "Installing" not in output


def test_a_failing_image_or_selftest_fails_its_case() -> None:
    """The runner's reading of a failure (what PlatformIO then counts as failed)."""
    image = "region gate.evaluate/00 120 400\nFAIL gate.evaluate/3\n"
    [check] = pio_checks.read_image_output("hifive1", 1, image)
    assert (check.passed, check.message) == (False, "FAIL gate.evaluate/3")
    [silent] = pio_checks.read_image_output("hifive1", 0, "region a 1 2\n")  # no "done"
    assert not silent.passed and "no 'done'" in silent.message
    good = pio_checks.read_image_output("hifive1", 0, "region a/00 1 2\nregion a/01 1 2\ndone\n")
    assert [(c.name, c.passed) for c in good] == [("hifive1/a", True)]
    with pytest.raises(pio_checks.CheckError, match="no core check image"):
        pio_checks.build("stm32f4", "test_image")
