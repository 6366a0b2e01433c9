"""The memory state machine explored exhaustively (tools/verify_memory.py), a fast subset.

Every operation sequence up to depth 2 from two memories and the eight device packs
(admitted as packs, ``intake.admit_pack``) runs clean; each planted bug is caught within
depth 3 (and the same bound without it is clean, so the catch is the bug's), the pack
path's within depth 2 from the one pack that reaches it; and each invariant predicate
names a state doctored to break it. The tool runs deeper
(``python tools/verify_memory.py --depth 4``).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

import verify_memory as vm
from hirmem.memory.config import MemoryConfig
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.intake import IntakeReport
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
    # every pack in every state: each admits, quarantines, repeats a record, and a
    # pattern is born in a pack and stepped by a later one
    packs = pack_figures(report)
    level1 = int(re.findall(r"new per level: (\d+)", "\n".join(report.lines))[0])
    assert packs["pack admissions executed"] == len(vm.PACKS) * (1 + level1)  # root, level 1
    for label in ("admit-pack entries", "records admitted", "quarantined", "duplicates",
                  "conflicts", "patterns born", "pattern steps"):  # fmt: skip
        assert packs[label] > 0, (label, report.lines)


def pack_figures(report: vm.Report) -> dict[str, int]:
    line = next(x for x in report.lines if x.startswith("pack admissions executed: "))
    return {k.strip(): int(v) for k, v in re.findall(r"([a-z -]+?):? (\d+)", line)}


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
    outcomes = ("green", "amber", "red")  # and no packs (the pack path's plants: below)
    clean = vm.explore(3, 1, outcomes=outcomes, packs=())
    assert clean.ok, "\n".join(clean.lines)
    report = vm.explore(3, 1, planted, outcomes=outcomes, packs=())
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
    with pytest.raises(ValueError, match=r"unknown packs \['nope'\]"):
        vm.explore(1, 1, packs=("soft", "nope"))


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


# -- the pack path ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("planted", "caught"),
    [
        ("pack-rn-only", ["MEM-INV-7: 7e57ab1e000000010000000100000007 with Rn 1.000, W 0.000"]),
        ("pack-quarantined-distils",
         ["DISTILL: 7e57ab1e000000010000000100000007, admitted quarantined by this pack"]),
        ("pack-entry-link",
         ["MEM-INV-8: 7e57ab1e000000010000000100000001: the hash its pack", "VERIFY: verify"]),
    ],
)
def test_a_planted_bug_in_the_pack_path_is_caught_with_its_trail(
    planted: str, caught: list[str]
) -> None:
    packs = vm.PACK_PLANTS[planted]
    clean = vm.explore(2, 1, packs=packs)
    assert clean.ok, "\n".join(clean.lines)
    report = vm.explore(2, 1, planted, packs=packs)
    assert not report.ok
    found = [line for line in report.lines if line.startswith(f"VIOLATION after pack {packs[0]}")]
    assert found and all(c in found[0] for c in caught), "\n".join(report.lines)


def test_the_pack_plants_break_only_the_pack_path() -> None:
    """Without packs, each pack-path plant leaves the exploration clean: it is the pack
    path's rule it breaks."""
    for planted in vm.PACK_PLANTS:
        report = vm.explore(2, 1, planted, outcomes=("green", "w0"), packs=())
        assert report.ok, (planted, report.lines)


@pytest.fixture
def packed(tmp_path: Path) -> tuple[vm.View, vm.View, vm.Step, MemoryEngine]:
    """A real engine from empty through three packs, as one step: a pattern born
    (green-pair), mixed outcomes (soft), a pattern step (pattern)."""
    clock = vm.Clock()
    e = MemoryEngine(tmp_path / "m.db", CFG, clock=clock)
    before = vm.read_view(e, clock.t)
    whole = vm.Step(("pack", "green-pair+soft+pattern"), intake=IntakeReport())
    for name in ("green-pair", "soft", "pattern"):
        step = vm.Step(("pack", name))
        vm.apply(e, clock, vm.read_view(e, clock.t), step.op, vm.steps_for(CFG), step)
        assert step.intake is not None
        whole.pack += step.pack
        for part in ("admitted", "quarantined", "duplicates", "conflicts"):
            getattr(whole.intake, part).extend(getattr(step.intake, part))
    after = vm.read_view(e, clock.t)
    return before, after, whole, e


def entries(v: vm.View) -> list[dict[str, Any]]:
    return [x for x in v.records() if x["action"] == vm.PACK_ACTION]


DEVICE_RECORD = {name: rec for pack, names in vm.PACKS.items()
                 for name, rec in zip(names, vm.PACK_RECORDS[pack], strict=True)}  # fmt: skip


def admission(v: vm.View, name: str) -> list[Any]:
    """The admission of device record ``name`` in the entries of ``v`` (decoded, live:
    a test doctors it in place)."""
    rid = DEVICE_RECORD[name].id
    return next(a for x in entries(v) for a in x["detail"]["admissions"] if a[0] == rid)


def test_the_pack_predicates_hold_on_the_real_state(
    packed: tuple[vm.View, vm.View, vm.Step, MemoryEngine],
) -> None:
    before, after, step, e = packed
    assert e.verify_audit().ok
    for name, _ in vm.INVARIANTS:
        assert check(name, before, after, step) == [], name
    soft = admission(after, "flow-unsure")
    assert soft[4] == vm.QUARANTINED and soft[6] == -1  # W = 0: quarantined, feeds nothing
    steps = [x["detail"]["patterns"] for x in entries(after) if x["detail"]["patterns"]]
    assert len(steps) == 1  # the pattern pack's reading stepped the pattern green-pair bore
    e.store.close()


def test_the_predicates_name_each_broken_pack_rule(
    packed: tuple[vm.View, vm.View, vm.Step, MemoryEngine],
) -> None:
    before, after, step, e = packed
    e.store.close()
    w0 = admission(after, "flow-unsure")
    mid = w0[0].hex()

    w0[4] = vm.CANDIDATE
    assert any("admitted candidate by its pack, not quarantined" in p
               for p in check("MEM-INV-7", before, after, step))  # fmt: skip
    assert any("quarantined without an audited transition" in p
               for p in check("MEM-INV-3", before, after, step))  # fmt: skip
    w0[4] = vm.ARCHIVED
    assert any("admitted archived by its pack from volatile is not legal" in p
               for p in check("LIFECYCLE", before, after, step))  # fmt: skip
    w0[4] = vm.QUARANTINED

    w0[6] = 0
    assert any("fed pattern 0" in p for p in check("DISTILL", before, after, step))
    w0[6] = -1
    pattern_row = next(r for r in after.side if r[0] == "d")[1]
    after.side.append(("l", mid, pattern_row))
    problems = check("DISTILL", before, after, step)
    assert any("admitted quarantined by this pack, feeds" in p for p in problems)
    after.side.pop()
    valve = admission(after, "valve-sticks")[0].hex()
    after.side.append(("l", valve, pattern_row))
    assert any(f"rests on {valve} without citing it" in p
               for p in check("DISTILL", before, after, step))  # fmt: skip
    after.side.pop()
    pattern = next(r for r in after.rows.values() if r["kind"] == "pattern")
    pattern["h"] = 0.5
    assert any("not the means" in p for p in check("DISTILL", before, after, step))
    pattern["h"] = 1.0
    moved = next(x["detail"]["patterns"][0] for x in entries(after) if x["detail"]["patterns"])
    moved[2] = "0.125"
    assert any("pack step of" in p for p in check("DISTILL", before, after, step))
    moved[2] = repr(pattern["strength"])
    assert check("DISTILL", before, after, step) == []

    digest = w0[1]
    w0[1] = bytes(32)
    problems = check("MEM-INV-8", before, after, step)
    assert any("the hash its pack entry lists" in p for p in problems)
    w0[1] = digest
    w0[3] = 5
    assert any("lists scores None" in p for p in check("MEM-INV-8", before, after, step))
    w0[3] = 0
    entries(after)[0]["detail"]["heart_rate"] = 70
    assert any("not its fixed ones" in p for p in check("MEM-INV-8", before, after, step))
    del entries(after)[0]["detail"]["heart_rate"]

    seq, pos = after.admissions[mid]
    after.admissions[mid] = (seq, pos + 1)
    problems = check("PACK", before, after, step)
    assert any("the admissions index says" in p for p in problems)
    assert any("which does not list it" in p for p in problems)
    after.admissions[mid] = (seq, pos)
    held = after.rows.pop(mid)
    assert any(f"{mid} of the pack was silently lost" in p
               for p in check("PACK", before, after, step))  # fmt: skip
    after.rows[mid] = held

    after.rows[valve]["audit_seq"] = entries(after)[0]["seq"]  # green-pair's entry
    assert any(f"{valve} cites audit record" in p for p in check("MEM-INV-5", before, after, step))

    step.verified = ["memory x: its content does not match its hash"]
    assert check("VERIFY", before, after, step) == [
        "verify_audit: memory x: its content does not match its hash"]


def test_a_pattern_no_longer_live_taking_an_episode_is_named(tmp_path: Path) -> None:
    """closed_support names an episode linked, uncited, to an archived pattern's
    distillate in the step (a check of every step since the engine closes the windows
    of patterns no longer live)."""
    clock = vm.Clock()
    e = MemoryEngine(tmp_path / "m.db", CFG, clock=clock)
    for op in (("pack", "green-pair"), ("sweep", "20tau-procedural")):
        vm.apply(e, clock, vm.read_view(e, clock.t), op, vm.steps_for(CFG), vm.Step(op))
    before = vm.read_view(e, clock.t)
    e.store.close()
    pattern = next(r for r in before.rows.values() if r["kind"] == "pattern")
    assert pattern["state"] == vm.ARCHIVED
    after = vm.View(before.now, before.rows, before.audit, before.reviews, before.checkpoints,
                    [*before.side, ("l", "ab" * 16, 1)])  # fmt: skip
    assert vm.closed_support(before, before, vm.Step(("t",)), CFG) == []
    assert vm.closed_support(before, after, vm.Step(("t",)), CFG) == [
        f"archived pattern {pattern['id']} took episode {'ab' * 16} into its distillate "
        "without citing it"]


def test_findings_are_listed_and_fail_the_run_only_when_strict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def after_integrity(b: vm.View, a: vm.View, s: vm.Step, cfg: MemoryConfig) -> list[str]:
        return ["noted"] if s.op == ("integrity",) else []

    monkeypatch.setattr(vm, "FINDINGS", (("NOTE", after_integrity),))
    lenient = vm.explore(1, 1, packs=())
    assert lenient.ok, lenient.lines
    assert any(line.startswith("findings (NOTE, not failing") and line.endswith(": 1 transitions")
               for line in lenient.lines)  # fmt: skip
    assert "FINDING after integrity\n    NOTE: noted" in lenient.lines
    strict = vm.explore(1, 1, packs=(), strict=True)
    assert not strict.ok
    assert "VIOLATION after integrity\n    NOTE: noted" in strict.lines
