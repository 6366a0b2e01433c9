"""The memory state machine explored exhaustively (tools/verify_memory.py), a fast subset.

Every operation sequence up to depth 2 from two memories runs clean; each planted bug
is caught within depth 3 (and the same bound without it is clean, so the catch is the
bug's); and each invariant predicate names a state doctored to break it. The tool runs
deeper (``python tools/verify_memory.py --depth 4``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

import verify_memory as vm
from hirmem.memory.config import MemoryConfig
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.recall import RecallHit
from hirmem.protocol import cbor

CFG = MemoryConfig()


def figures(report: vm.Report) -> dict[str, int]:
    out = {}
    for line in report.lines:
        for label in ("transitions executed", "distinct states", "operation sequences covered"):
            if line.startswith(label + ": "):
                out[label] = int(line.split(": ")[1].split()[0])
    return out


def test_every_sequence_to_depth_2_keeps_every_invariant() -> None:
    report = vm.explore(2, 2)
    assert report.ok, "\n".join(report.lines)
    got = figures(report)
    # 2 slots x (9 outcomes + capture) + 6 sweeps + integrity from the empty store, and
    # every operation on each of the states they reach
    assert got["transitions executed"] > 400 and got["distinct states"] > 300
    assert got["operation sequences covered"] >= got["transitions executed"]
    assert "depth reached: 2 of 2" in report.lines


@pytest.mark.parametrize(
    ("planted", "caught"),
    [
        ("archived-recall", "LIFECYCLE: archived"),
        ("quarantine-recall", "LIFECYCLE: recall returned quarantined"),
        ("rn-threshold", "MEM-INV-7"),
        ("repair-unlinked", "MEM-INV-4"),
    ],
)
def test_a_planted_bug_is_caught_with_its_trail(planted: str, caught: str) -> None:
    outcomes = ("green", "amber", "red")
    clean = vm.explore(3, 1, outcomes=outcomes)
    assert clean.ok, "\n".join(clean.lines)
    report = vm.explore(3, 1, planted, outcomes=outcomes)
    assert not report.ok
    found = [line for line in report.lines if line.startswith("VIOLATION after admit door-open")]
    assert found and caught in found[0], "\n".join(report.lines)


def test_bad_arguments_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"memories must be in 1\.\.5"):
        vm.explore(1, 9)
    with pytest.raises(ValueError, match="unknown planted bug 'nope'"):
        vm.explore(1, 1, "nope")
    with pytest.raises(ValueError, match="unknown gate outcomes"):
        vm.explore(1, 1, outcomes=("blue",))


# -- each predicate fails on a state doctored to break its invariant --------------------
@pytest.fixture
def views(tmp_path: Path) -> tuple[vm.View, vm.View]:
    """A real engine's state before and after a few admissions."""
    clock = vm.Clock()
    e = MemoryEngine(tmp_path / "m.db", CFG, clock=clock)
    before = vm.read_view(e, clock.t)
    slot = vm.SLOTS[0]
    for name in ("green", "red", "domination", "honesty0"):
        o = vm.OUTCOMES[name]
        e.admit(b"" if o.empty else slot.payload, "" if o.empty else "verify", flags=o.flags,
                subject=slot.subject, attribute=slot.attribute, value=slot.value)  # fmt: skip
    after = vm.read_view(e, clock.t)
    e.store.close()
    return before, after


def row_where(v: vm.View, **match: Any) -> dict[str, Any]:
    return next(r for r in v.rows.values() if all(r[k] == x for k, x in match.items()))


def check(name: str, before: vm.View, after: vm.View, step: vm.Step | None = None) -> list[str]:
    predicate = dict(vm.INVARIANTS)[name]
    return predicate(before, after, step or vm.Step(("test",)), CFG)


def test_each_predicate_holds_on_the_real_state(views: tuple[vm.View, vm.View]) -> None:
    before, after = views
    for name, _ in vm.INVARIANTS:
        assert check(name, before, after) == [], name


def test_the_predicates_name_each_broken_invariant(views: tuple[vm.View, vm.View]) -> None:
    before, after = views
    honest0 = row_where(after, h=0.0)
    honest0["state"] = vm.CONSOLIDATED
    assert any("H = 0" in p for p in check("MEM-INV-1", before, after))
    honest0["state"] = vm.QUARANTINED

    dominated = row_where(after, permanent=1)
    dominated["permanent"] = 0
    assert any("R = 0" in p for p in check("MEM-INV-2", before, after))
    dominated["permanent"] = 1

    lost = vm.View(after.now, {k: r for k, r in after.rows.items() if k != dominated["id"]},
                   after.audit, after.reviews, after.checkpoints, [])  # fmt: skip
    assert any("was deleted" in p for p in check("MEM-INV-3", after, lost))

    green = row_where(after, state=vm.CONSOLIDATED)
    repaired = dict(green, id="ff" * 16, supersedes=green["id"], version=2,
                    links=json.dumps([]), audit_seq=green["audit_seq"])  # fmt: skip
    after.rows[repaired["id"]] = repaired
    assert any("not chained" in p for p in check("MEM-INV-4", before, after))
    del after.rows[repaired["id"]]

    rewritten = list(after.audit)
    rewritten[0] = (*rewritten[0][:4], "system", rewritten[0][5], rewritten[0][6], bytes(32))
    forged = vm.View(after.now, after.rows, rewritten, after.reviews, after.checkpoints, [])
    assert any("breaks the chain" in p for p in check("MEM-INV-5", before, forged))
    assert any("rewritten" in p for p in check("MEM-INV-5", after, forged))

    hit = RecallHit(dominated["id"], 1, 1.0, 1.0, 1.0, 1.0, 1.0)
    recalled = vm.Step(("t",), hits=[hit])
    assert any("Trust is 0" in p for p in check("MEM-INV-6", before, after, recalled))

    red = row_where(after, flags=vm.OUTCOMES["red"].flags | 0xC)
    red["rn"] = 0.9
    assert any("oracle" in p for p in check("MEM-INV-7", before, after))
    red["rn"] = vm.gate_oracle(red)[3]

    bad = list(after.audit)
    seq, ts, _, mid, _, _, prev, digest = bad[-1]
    bad[-1] = (seq, ts, "user_mood", mid, "alice", cbor.encode({"heart_rate": 70}), prev, digest)
    spied = vm.View(after.now, after.rows, bad, after.reviews, after.checkpoints, [])
    problems = check("MEM-INV-8", before, spied)
    assert any("no system action" in p for p in problems)
    assert any("heart_rate" in p for p in problems)

    archived_before = vm.View(before.now, {green["id"]: dict(green, state=vm.ARCHIVED)},
                              before.audit, [], [], [])  # fmt: skip
    assert any("archived" in p or "audited state" in p
               for p in check("LIFECYCLE", archived_before, after))  # fmt: skip

    refused = vm.Step(("t",), refused="no")
    assert any("left a trace" in p for p in check("REFUSAL", before, after, refused))
