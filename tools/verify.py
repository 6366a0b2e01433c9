#!/usr/bin/env python3
"""Model checks and proofs of the invariants that must never break (issue 20).

One tool runs them all and prints, for each check, what was checked, the state counts
and the time; it exits 1 if any check fails. A check fails when a property is violated,
when a search is incomplete (out of memory or depth), or when a planted bug is *not*
caught.

  python tools/verify.py            the full runs
  python tools/verify.py --fast     the subset the test command runs (tests/test_verify.py)
  python tools/verify.py --list     the checks and what each shows

The methods:
  * SPIN (Debian ``spin``) over ``verify/session.pml`` (SPEC §5-§8: go-back-N, acks,
    the handshake with its session proof, HELLO_ACK's echo of the HELLO and the HELLO
    retransmission rule, resets, the pack chain), ``verify/fragments.pml`` (§6.8
    joining frame pieces: any piece sequence, and an honest sender over a line that
    drops and repeats frames) and ``verify/acceptance.pml`` (pack and knowledge
    acceptance across power cuts over hm_persist's NV store). Safety by exhaustive
    search (assertions, with state compression), liveness as an LTL property under
    weak fairness.
  * Frama-C EVA over the C decoders and bounded exploration of the ring's invariants
    (``tools/verify_c.py``).
  * Exhaustive exploration of the memory engine's state machine and MEM-INV-1..8
    (``tools/verify_memory.py``).
Each method has planted bugs (``-D`` flags in the models, build flags or patched rules
elsewhere) that the tool shows are caught.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "verify"
sys.path.insert(0, str(ROOT / "tools"))  # tools/ is not a package: its modules by path

from verify_c import Report  # noqa: E402 - one Report for every method of the tool


@dataclass(frozen=True)
class SpinCheck:
    """One SPIN run: a model, its parameters, safety or liveness, and what to expect."""

    name: str
    model: str
    defines: tuple[str, ...]
    what: str
    liveness: bool = False
    expect_violation: bool = False  # a planted bug (or a documented gap): must be caught
    fast: bool = True

    def describe(self) -> str:
        mode = "liveness (LTL, weak fairness)" if self.liveness else "safety (exhaustive)"
        flags = " ".join(self.defines) or "defaults"
        return f"{self.name}: {self.model} [{flags}] {mode}: {self.what}"


# Bounds: the session model's state space grows fast with line faults and resets; the
# fast subset keeps what finishes in seconds on a shared 2-core machine, the full runs
# take minutes each.
SESSION_SMALL = ("-DNPACK=2", "-DNCAP=1", "-DWIN=2", "-DFAULTS=1", "-DRESETS=0", "-DEARLY=0")
# three faults on the line, one timeout before a session is dead: sessions die with
# deliveries and acknowledgements lost on both sides
SESSION_LOSSY = ("-DNPACK=1", "-DNCAP=1", "-DWIN=2", "-DFAULTS=3", "-DRESETS=0", "-DEARLY=0",
                 "-DTRIES=1")
SESSION_FULL = ("-DNPACK=2", "-DNCAP=1", "-DWIN=2", "-DFAULTS=1", "-DRESETS=1", "-DEARLY=1")
# two resets, host frames reordered as well: HELLO_ACKs of two older boots on the line
SESSION_RESETS = ("-DNPACK=2", "-DNCAP=1", "-DWIN=2", "-DFAULTS=1", "-DRESETS=2", "-DEARLY=1",
                  "-DREORDER_H2D")
SESSION_TWO_RESETS = ("-DNPACK=2", "-DNCAP=1", "-DWIN=2", "-DFAULTS=1", "-DRESETS=2",
                      "-DEARLY=1")
SESSION_RESET_FAULTS = ("-DNPACK=2", "-DNCAP=1", "-DWIN=2", "-DFAULTS=2", "-DRESETS=1",
                        "-DEARLY=1")
# the smallest bounds where a HELLO_ACK can outlive a reset: one pack, one capture
SESSION_ECHO_BUG = ("-DNPACK=1", "-DNCAP=1", "-DWIN=2", "-DFAULTS=1", "-DRESETS=1", "-DEARLY=1",
                    "-DREORDER_H2D", "-DBUG_NO_ECHO")
SESSION_WIDE = ("-DNPACK=3", "-DNCAP=2", "-DWIN=2", "-DFAULTS=2", "-DRESETS=0", "-DEARLY=0")
ACCEPT_SMALL = ("-DSLOTS=2", "-DCUTS=2", "-DKVERSIONS=3", "-DOFFERS=3")
ACCEPT_FULL = ("-DSLOTS=2", "-DCUTS=3", "-DKVERSIONS=3", "-DOFFERS=4")
SAFE = ("no capture takes effect twice, no pack stored twice or out of order, none "
        "forgotten by the device before the host stored it")

SPIN_CHECKS: tuple[SpinCheck, ...] = (
    SpinCheck("session-safety", "session.pml", SESSION_SMALL, SAFE),
    SpinCheck("session-safety-lossy", "session.pml", SESSION_LOSSY, SAFE),
    SpinCheck(
        "session-liveness", "session.pml", SESSION_SMALL,
        "every pack the device releases is eventually stored", liveness=True,
    ),
    SpinCheck(
        "session-bug-hello-fresh", "session.pml", (*SESSION_LOSSY, "-DBUG_HELLO_FRESH"),
        "planted: every HELLO of the session's boot taken for a retransmission",
        expect_violation=True,
    ),
    SpinCheck(
        "session-bug-dup-deliver", "session.pml", (*SESSION_SMALL, "-DBUG_DUP_DELIVER"),
        "planted: the device lets a duplicate CAPTURE take effect",
        expect_violation=True,
    ),
    SpinCheck(
        "session-hello-fresh-half", "session.pml", (*SESSION_LOSSY, "-DHELLO_FRESH_HALF"),
        "the freshness test without 'sent nothing after HELLO_ACK' is still safe: with the "
        "session proof the host sends nothing before the PROOF, so the condition is implied",
    ),
    SpinCheck(
        "session-bug-no-echo", "session.pml", SESSION_ECHO_BUG,
        "planted: the device takes a HELLO_ACK without checking its echo of the HELLO",
        expect_violation=True,
    ),
    SpinCheck(
        "acceptance-safety", "acceptance.pml", ACCEPT_SMALL,
        "no pack seq signed twice, the host chain only extends, no knowledge version "
        "accepted that is older than or forks from an accepted one, nothing reported "
        "accepted lost at a cut",
    ),
    SpinCheck(
        "acceptance-bug-boot-after-use", "acceptance.pml",
        (*ACCEPT_SMALL, "-DBUG_BOOT_AFTER_USE"),
        "planted: the boot counter saved after the boot signs a pack", expect_violation=True,
    ),
    SpinCheck(
        "acceptance-bug-answer-before-save", "acceptance.pml",
        (*ACCEPT_SMALL, "-DBUG_ANSWER_BEFORE_SAVE"),
        "planted: KNOWLEDGE_RESULT sent before the head is saved", expect_violation=True,
    ),
    SpinCheck(
        "acceptance-bug-mount-first", "acceptance.pml", (*ACCEPT_SMALL, "-DBUG_MOUNT_FIRST"),
        "planted: mount takes the first valid record, not the newest",
        expect_violation=True,
    ),
    SpinCheck(
        "fragments-safety", "fragments.pml", ("-DPIECES=5",),
        "any sequence of frame pieces (every head, number, last flag and length the "
        "peer's choice): never more than the limit held, idle after every refusal",
    ),
    SpinCheck(
        "fragments-honest", "fragments.pml", ("-DHONEST",),
        "an honest sender's bodies, retransmitted whole, over a line that drops and "
        "repeats frames, with piece numbers that wrap: only sent bodies are delivered",
    ),
    SpinCheck(
        "fragments-bug-no-check", "fragments.pml", ("-DHONEST", "-DBUG_NO_CHECK"),
        "planted: the body check not compared (a wrong body is joined after losses)",
        expect_violation=True,
    ),
    SpinCheck(
        "fragments-bug-no-limit", "fragments.pml", ("-DPIECES=5", "-DBUG_NO_LIMIT"),
        "planted: the body not checked against max_message", expect_violation=True,
    ),
    # full runs
    SpinCheck(
        "fragments-safety-long", "fragments.pml", ("-DPIECES=7",),
        "the joining properties over seven hostile pieces", fast=False,
    ),
    SpinCheck(
        "fragments-honest-long", "fragments.pml",
        ("-DHONEST", "-DBODY=7", "-DSENDS=3", "-DBODIES=2"),
        "the honest sender with three copies of each body", fast=False,
    ),
    SpinCheck(
        "session-safety-resets", "session.pml", SESSION_FULL,
        SAFE + "; with a device reset and early retransmissions", fast=False,
    ),
    SpinCheck(
        "session-liveness-resets", "session.pml", SESSION_TWO_RESETS,
        "every released pack is eventually stored with two device resets, a line fault (a "
        "duplicated frame, say) and early retransmissions: a device that restarts its "
        "handshake on ERROR no-session never takes the HELLO_ACK of an older HELLO "
        "(HELLO_ACK echoes the HELLO it answers)",
        liveness=True, fast=False,
    ),
    SpinCheck(
        "session-liveness-resets-faults", "session.pml", SESSION_RESET_FAULTS,
        "every released pack is eventually stored with a device reset, two line faults and "
        "early retransmissions",
        liveness=True, fast=False,
    ),
    SpinCheck(
        "session-liveness-lossy", "session.pml", SESSION_LOSSY,
        "liveness with three faults and sessions that die", liveness=True, fast=False,
    ),
    SpinCheck(
        "session-safety-wide", "session.pml", SESSION_WIDE,
        SAFE + "; three packs and two captures, two faults", fast=False,
    ),
    SpinCheck(
        "session-safety-reorder", "session.pml", (*SESSION_FULL, "-DREORDER_H2D"),
        SAFE + "; host frames reordered too, past a device reset: a HELLO_ACK of the old boot "
        "opens nothing on the new one (it echoes the HELLO it answers)",
        fast=False,
    ),
    SpinCheck(
        "session-safety-reorder-resets", "session.pml", SESSION_RESETS,
        SAFE + "; host frames reordered, two device resets", fast=False,
    ),
    SpinCheck(
        "acceptance-safety-full", "acceptance.pml", ACCEPT_FULL,
        "the acceptance properties with three cuts and four offers", fast=False,
    ),
)

_NUMBER = r"([0-9.e+]+)"


def _spin_stats(out: str) -> dict[str, str]:
    stats: dict[str, str] = {}
    for key, pattern in (
        ("errors", r"errors: (\d+)"),
        ("states", _NUMBER + r" states, stored"),
        ("transitions", _NUMBER + r" transitions"),
        ("depth", r"depth reached (\d+)"),
        ("vector", r"State-vector (\d+) byte"),
        ("memory", r"([0-9.]+)\s+total actual memory usage"),
    ):
        m = re.search(pattern, out)
        if m:
            stats[key] = m.group(1)
    return stats


def _trail(work: Path, model: str, defines: Sequence[str], limit: int = 40) -> list[str]:
    """The counterexample as the messages sent and received, then the failed check."""
    run = subprocess.run(
        ["spin", "-t", "-s", "-r", *defines, model],
        cwd=work, capture_output=True, text=True, timeout=300,
    )
    keep = []
    for line in run.stdout.splitlines():
        if any(k in line for k in ("Send", "Recv", "assert", "CYCLE", "Error")):
            keep.append("    " + re.sub(r"\s+", " ", line.strip()))
    if len(keep) > limit:
        keep = [*keep[: limit // 4], "    ...", *keep[-(limit - limit // 4):]]
    return keep


def run_spin(check: SpinCheck, memory_mb: int = 6144) -> Report:
    """Generate, compile and run the verifier of one check; read its verdict."""
    if shutil.which("spin") is None or shutil.which("gcc") is None:
        return Report(check.name, False, ["spin or gcc is not installed (Debian: spin, gcc)"])
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hirmem-spin-") as tmp:
        work = Path(tmp)
        shutil.copy(MODELS / check.model, work / check.model)
        gen = subprocess.run(
            ["spin", "-a", *check.defines, check.model],
            cwd=work, capture_output=True, text=True, timeout=120,
        )
        if gen.returncode != 0:
            return Report(check.name, False, ["spin -a failed:", gen.stdout + gen.stderr])
        cflags = ["-O2", "-w", "-DCOLLAPSE", f"-DMEMLIM={memory_mb}"]
        if not check.liveness:
            cflags += ["-DSAFETY", "-DNOCLAIM"]
        cc = subprocess.run(
            ["gcc", *cflags, "-o", "pan", "pan.c"], cwd=work, capture_output=True, text=True,
            timeout=300,
        )
        if cc.returncode != 0:
            return Report(check.name, False, ["compiling pan failed:", cc.stderr[-2000:]])
        pan_args = ["./pan", "-m1000000"] + (["-a", "-f"] if check.liveness else [])
        pan = subprocess.run(pan_args, cwd=work, capture_output=True, text=True, timeout=3600)
        out = pan.stdout + pan.stderr
        stats = _spin_stats(out)
        seconds = time.monotonic() - started
        errors = int(stats.get("errors", "-1"))
        incomplete = "Search not completed" in out or "out of memory" in out or (
            "max search depth too small" in out
        )
        lines = [check.describe()]
        lines.append(
            f"  states stored {stats.get('states', '?')}, transitions "
            f"{stats.get('transitions', '?')}, depth {stats.get('depth', '?')}, state vector "
            f"{stats.get('vector', '?')} B, memory {stats.get('memory', '?')} MB, "
            f"{seconds:.1f} s"
        )
        violated = errors > 0
        if violated:
            what = re.search(r"pan:1: (.*)", out)
            lines.append(f"  violation: {what.group(1) if what else 'see trail'}")
            lines += _trail(work, check.model, check.defines)
        if errors < 0:
            lines.append("  no verdict from pan:\n" + out[-2000:])
            return Report(check.name, False, lines)
        if check.expect_violation:
            ok = violated
            lines.append("  caught, as it must be" if ok else "  NOT caught: the check is blind")
        else:
            ok = not violated and not incomplete
            if incomplete and not violated:
                lines.append("  the search did not complete")
            lines.append("  holds" if ok else "  FAILS")
        return Report(check.name, ok, lines)


Runner = Callable[[], Report]


def _other_methods(fast: bool) -> list[tuple[str, Runner]]:
    """The C and memory methods, from their own tools."""
    import verify_c
    import verify_memory

    ring_depth = 5 if fast else 8
    # the memory engine: every operation sequence to this depth from this many memories
    mem_depth, mem_slots = (2, 2) if fast else (3, 3)
    plant_outcomes = ("green", "amber", "red")  # enough to reach each planted bug
    runners: list[tuple[str, Runner]] = [
        ("c-decoders", lambda: verify_c.check_decoders()),
        ("c-decoders-planted", lambda: _planted(verify_c.check_decoders(planted="oob"))),
        ("c-decoders-planted-wp", lambda: _planted(verify_c.check_decoders(
            planted="cobs", entries=("eva_frame",)))),
        ("c-decoders-planted-join", lambda: _planted(verify_c.check_decoders(
            planted="join", entries=("eva_join",)))),
        ("ring", lambda: verify_c.check_ring(ring_depth)),
        ("ring-planted", lambda: _planted(verify_c.check_ring(ring_depth, planted="lru"))),
        # WP over the ring's contracts: the capture path in the fast subset, all in the tool
        ("ring-wp", lambda: verify_c.check_ring_wp(
            functions=verify_c.RING_WP_FAST if fast else ())),
        ("ring-wp-planted", lambda: _planted(verify_c.check_ring_wp(
            planted="eviction", functions=("make_room",)))),
        ("memory", lambda: verify_memory.explore(mem_depth, mem_slots)),
    ]
    if not fast:  # tests/test_verify_c.py runs it in the test command
        runners.insert(4, ("c-decoders-planted-pack", lambda: _planted(verify_c.check_decoders(
            planted="pack", entries=("eva_pack",)))))

    def planted_memory(plant: str) -> Runner:
        return lambda: _planted(verify_memory.explore(3, 1, plant, outcomes=plant_outcomes))

    for plant in ("archived-recall", "quarantine-recall", "rn-threshold", "repair-unlinked"):
        runners.append((f"memory-planted-{plant}", planted_memory(plant)))

    def planted_pack(plant: str) -> Runner:  # from the one pack that reaches it
        packs = verify_memory.PACK_PLANTS[plant]
        return lambda: _planted(verify_memory.explore(2, 1, plant, packs=packs))

    for plant in verify_memory.PACK_PLANTS:
        runners.append((f"memory-planted-{plant}", planted_pack(plant)))
    return runners


def _planted(rep: Report) -> Report:
    """A planted bug's run passes when the method catches it (its own check fails)."""
    caught = not rep.ok
    rep.lines.append("  planted bug caught" if caught else "  planted bug NOT caught")
    return Report(rep.name + " (planted)", caught, rep.lines)


def run(fast: bool, only: str | None = None, spin_only: bool = False) -> list[Report]:
    reports: list[Report] = []
    for check in SPIN_CHECKS:
        if fast and not check.fast:
            continue
        if only and only not in check.name:
            continue
        rep = run_spin(check)
        reports.append(rep)
        print("\n".join(rep.lines), flush=True)
    if spin_only:
        return reports
    for name, runner in _other_methods(fast):
        if only and only not in name:
            continue
        started = time.monotonic()
        rep = runner()
        rep.lines.append(f"  {time.monotonic() - started:.1f} s")
        reports.append(rep)
        print(f"{rep.name}: {'ok' if rep.ok else 'FAILED'}")
        print("\n".join("  " + ln for ln in rep.lines), flush=True)
    return reports


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true", help="the subset the tests run")
    ap.add_argument("--only", help="run the checks whose name contains this")
    ap.add_argument("--spin-only", action="store_true", help="only the SPIN models")
    ap.add_argument("--list", action="store_true", help="list the SPIN checks")
    args = ap.parse_args(argv)
    if args.list:
        for check in SPIN_CHECKS:
            print(("fast  " if check.fast else "full  ") + check.describe())
        return 0
    started = time.monotonic()
    reports = run(args.fast, args.only, args.spin_only)
    failed = [r.name for r in reports if not r.ok]
    print(
        f"\n{len(reports)} checks, {len(reports) - len(failed)} ok, {len(failed)} failed "
        f"in {time.monotonic() - started:.0f} s" + (f": {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
