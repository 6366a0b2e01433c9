"""tools/verify.py: the fast subset of the model checks and proofs (issue 20).

Every check runs the real checker (SPIN's generated verifier, Frama-C, the native ring
explorer, the memory engine) and must hold; every planted bug must be caught, with its
counterexample printed. The full runs are `python tools/verify.py`.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import verify  # noqa: E402

pytestmark = pytest.mark.skipif(
    shutil.which("spin") is None, reason="Debian spin is not installed (tools/run installs it)"
)

FAST = [c for c in verify.SPIN_CHECKS if c.fast]


@pytest.mark.parametrize("check", FAST, ids=[c.name for c in FAST])
def test_spin_check(check: verify.SpinCheck) -> None:
    report = verify.run_spin(check)
    text = "\n".join(report.lines)
    print(text)
    assert report.ok, text
    assert "states stored" in text
    if check.expect_violation:
        # the counterexample is printed: the failed assertion at least
        assert "violation:" in text and "assert" in text, text
    else:
        assert "holds" in text


def test_every_planted_bug_has_a_holding_twin() -> None:
    """A planted bug is only evidence if the same model without it holds: each planted
    check's model has a passing check in the fast subset."""
    holding = {c.model for c in FAST if not c.expect_violation}
    for c in FAST:
        if c.expect_violation:
            assert c.model in holding, c.name


def test_a_blind_check_fails() -> None:
    """The tool fails a planted check that is not caught: the correct model run as if it
    carried a bug must come out as a failure."""
    check = verify.SpinCheck(
        "blind", "acceptance.pml", verify.ACCEPT_SMALL, "no bug planted", expect_violation=True
    )
    report = verify.run_spin(check)
    assert not report.ok
    assert any("NOT caught" in line for line in report.lines)


def test_the_tool_runs_every_method_with_its_planted_bugs() -> None:
    """One tool: SPIN, the C checks and the memory explorer, each with planted bugs."""
    names = [name for name, _ in verify._other_methods(fast=True)]
    assert {"c-decoders", "c-decoders-planted", "c-decoders-planted-wp",
            "c-decoders-planted-join", "ring", "ring-planted",
            "ring-wp", "ring-wp-planted", "memory"} <= set(names)
    pack_path = [name for name in names if name.startswith("memory-planted-pack-")]
    assert sum(name.startswith("memory-planted-") for name in names) - len(pack_path) == 4
    assert len(pack_path) == 3  # the pack path's (intake.admit_pack) planted bugs


def test_a_planted_memory_bug_through_the_tool() -> None:
    reports = verify.run(fast=True, only="memory-planted-rn-threshold")
    assert len(reports) == 1
    assert reports[0].ok, "\n".join(reports[0].lines)
    assert any("planted bug caught" in line for line in reports[0].lines)


def test_a_planted_pack_path_bug_through_the_tool() -> None:
    reports = verify.run(fast=True, only="memory-planted-pack-entry-link")
    assert len(reports) == 1
    assert reports[0].ok, "\n".join(reports[0].lines)
    assert any("planted bug caught" in line for line in reports[0].lines)
