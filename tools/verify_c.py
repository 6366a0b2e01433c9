"""The C part of the verification (issue 20): EVA over the wire decoders, bounded
exploration of the ring. tools/verify.py calls these; run alone it runs both.

    python tools/verify_c.py                     # EVA over every decoder, ring to depth 8
    python tools/verify_c.py --ring-depth 9      # deeper (about 2 minutes alone)
    python tools/verify_c.py --plant-decoders oob --plant-ring lru   # the planted bugs

check_decoders: Frama-C EVA (Debian frama-c-base) analyses each entry point of
verify/framac/eva_decoders.c, i.e. hm_cbor (check, skip and every getter), the frame
receiver and hm_cobs_decode, hm_msg_decode (outer and inner) and the reassembler, each
over a buffer of any content and any length up to HM_MAX_FRAME, and the knowledge-pack
verifier hm_knowledge_accept over any pushed pack up to HM_MAX_MESSAGE bytes (with
verify/framac/eva_crypto.c: real SHA-256, Ed25519 replaced by a reader of its inputs).
Every alarm EVA leaves is compared with verify/framac/eva_reviewed.txt, the alarms
reviewed as imprecision (with the reason); any other alarm fails the check and is
printed with its place.
An entry point with no alarm at all is proved free of runtime errors for those inputs.

check_ring: build/verify/ring_explore (make -C firmware ring-explore) enumerates every
sequence of ring operations up to `depth` from an empty 3-slot ring and checks the
invariants of hm_ring.h after every step (tests/native/ring_check.c, hm_ring_validate,
and a model of recency, eviction and first fit); see verify/ring/ring_explore.c.

Planted bugs (built only here): decoders "oob" compiles hm_frame.c with HM_PLANT_OOB
(the receiver's buffer check off by one); ring "lru" uses the build with
HM_PLANT_RING_LRU (an access does not refresh recency). Both checks must fail on them.
"""

from __future__ import annotations

import argparse
import csv
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "firmware" / "core"
HARNESS = ROOT / "verify" / "framac" / "eva_decoders.c"
REVIEWED = ROOT / "verify" / "framac" / "eva_reviewed.txt"
RING_BUILD = ROOT / "build" / "verify"

# Entry point -> the files it needs besides the harness (core files by name).
EVA_ENTRIES: dict[str, tuple[str, ...]] = {
    "eva_cbor": ("hm_cbor.c",),
    "eva_frame": ("hm_frame.c", "hm_crc32.c"),
    "eva_msg": ("hm_msg.c", "hm_cbor.c"),
    "eva_frag": ("hm_frag.c", "hm_msg.c", "hm_cbor.c", "hm_crc32.c"),
    "eva_join": ("hm_frag.c", "hm_msg.c", "hm_cbor.c", "hm_crc32.c"),
    "eva_pack": ("hm_pack.c", "hm_cbor.c", "hm_sha2.c", "../../verify/framac/eva_crypto.c"),
}
DECODER_PLANTS = {"oob": "HM_PLANT_OOB"}
RING_PLANTS = {"lru": "ring_explore_planted"}
EVA_PRECISION = 1  # 4 and 7 leave the same alarms at 3x and 30x the time


@dataclass
class Report:
    """What one check did: ok, and lines saying what was checked, counts and time."""

    name: str
    ok: bool
    lines: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Alarm:
    file: str
    line: int
    function: str
    kind: str
    prop: str

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.file, self.function, self.kind, re.sub(r"\btmp_\d+\b", "tmp", self.prop))


def reviewed_alarms(path: Path = REVIEWED) -> dict[tuple[str, str, str, str], str]:
    """The reviewed alarms: key -> reason tag."""
    out: dict[tuple[str, str, str, str], str] = {}
    for raw in path.read_text().splitlines():
        if not raw.strip() or raw.startswith("#"):
            continue
        parts = [p.strip() for p in raw.split(" | ")]
        if len(parts) != 5:
            raise ValueError(f"{path.name}: not 'file | function | kind | property | reason': "
                             f"{raw}")
        out[(parts[0], parts[1], parts[2], parts[3])] = parts[4]
    return out


@dataclass
class EvaRun:
    entry: str
    alarms: list[Alarm]
    functions: str  # EVA's coverage line
    proved: list[str]  # functions EVA reached and left no alarm in
    seconds: float


_LIBC = {"memcmp", "memcpy", "memmove", "memset"}
_COVERAGE = re.compile(r"(\d+) functions analyzed \(out of \d+\).*?\n\s*In these functions, "
                       r"(\d+) statements reached \(out of (\d+)\)", re.S)


def run_eva(entry: str, defines: tuple[str, ...] = (), precision: int = EVA_PRECISION) -> EvaRun:
    """frama-c -eva on one entry point; the properties it could not prove valid."""
    with tempfile.TemporaryDirectory(prefix="hm-eva-") as tmp:
        report = Path(tmp) / "report.csv"
        cpp = " ".join([f"-I{CORE}", *(f"-D{d}" for d in defines)])
        sources = [str((CORE / f).resolve()) for f in EVA_ENTRIES[entry]]
        cmd = ["frama-c", f"-cpp-extra-args={cpp}", "-machdep", "x86_64", "-eva",
               "-eva-precision", str(precision), "-main", entry, "-eva-show-progress",
               "-eva-no-print", str(HARNESS), *sources,
               "-then", "-report-csv", str(report)]
        start = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=1800)
        seconds = time.monotonic() - start
        if proc.returncode != 0 or not report.exists():
            raise RuntimeError(f"frama-c failed on {entry} ({proc.returncode}):\n"
                               f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        alarms: list[Alarm] = []
        with report.open(newline="") as fh:
            for row in csv.DictReader(fh, delimiter="\t"):
                # the libc's own preconditions are reported again at each call site;
                # the harness's are not the core's
                if row["directory"].startswith("FRAMAC_SHARE") or row["function"].startswith(
                        "eva_"):
                    continue
                # Unknown: EVA could not prove it; Invalid: a definite error. Dead code
                # (unreached from the entry point) and Valid are not alarms.
                status = row["status"]
                if status == "Unknown" or (status.startswith("Invalid") and "dead" not in status):
                    alarms.append(Alarm(row["file"], int(row["line"]), row["function"],
                                        row["property kind"], row["property"]))
    m = _COVERAGE.search(proc.stdout)
    cov = (f"{m.group(1)} functions, {m.group(2)}/{m.group(3)} statements reached"
           if m else "coverage not reported")
    reached = set(re.findall(r"computing for function (\w+)", proc.stdout))
    proved = sorted(f for f in reached - {a.function for a in alarms}
                    if not f.startswith(("Frama_C", "eva_", "any_input")) and f not in _LIBC)
    return EvaRun(entry, alarms, cov, proved, seconds)


def check_decoders(planted: str | None = None, precision: int = EVA_PRECISION) -> Report:
    """EVA over every decoder entry point; ok if every alarm is a reviewed one."""
    defines: tuple[str, ...] = ()
    if planted is not None:
        if planted not in DECODER_PLANTS:
            raise ValueError(f"unknown planted bug {planted!r}: {sorted(DECODER_PLANTS)}")
        defines = (DECODER_PLANTS[planted], "HM_VERIFY_PLANTED")
    reviewed = reviewed_alarms()
    report = Report("decoders (Frama-C EVA)" + (f", planted {planted}" if planted else ""), True)
    seen: set[tuple[str, str, str, str]] = set()
    for entry in EVA_ENTRIES:
        run = run_eva(entry, defines, precision)
        new = [a for a in run.alarms if a.key not in reviewed]
        seen.update(a.key for a in run.alarms)
        files = " ".join(Path(f).name for f in EVA_ENTRIES[entry])
        verdict = ("no alarm: proved free of runtime errors" if not run.alarms
                   else f"{len(run.alarms)} alarms, {len(run.alarms) - len(new)} reviewed")
        report.lines.append(f"{entry} ({files}): {run.functions}; {verdict}; "
                            f"{run.seconds:.1f} s")
        if run.proved:
            report.lines.append(f"  no alarm in the body of: {', '.join(run.proved)}")
        for a in new:
            report.ok = False
            report.lines.append(f"  NEW ALARM {a.file}:{a.line} in {a.function}: {a.kind} {a.prop}")
    stale = sorted(set(reviewed) - seen)
    if stale and planted is None:
        report.lines.append(f"reviewed alarms no longer raised (the list may shrink): {len(stale)}")
        report.lines.extend(f"  {' | '.join(k)}" for k in stale)
    tags: dict[str, int] = {}
    for key in seen & set(reviewed):
        tags[reviewed[key]] = tags.get(reviewed[key], 0) + 1
    if tags:
        report.lines.append("reviewed alarms by reason: " +
                            ", ".join(f"{t} {n}" for t, n in sorted(tags.items())))
    return report


def build_ring_explorer() -> None:
    proc = subprocess.run(["make", "-s", "-C", str(ROOT / "firmware"), "ring-explore"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"ring explorer build failed:\n{proc.stdout}\n{proc.stderr}")


def check_ring(depth: int, planted: str | None = None) -> Report:
    """Every sequence of ring operations up to `depth`, invariants after every step."""
    program = "ring_explore"
    if planted is not None:
        if planted not in RING_PLANTS:
            raise ValueError(f"unknown planted bug {planted!r}: {sorted(RING_PLANTS)}")
        program = RING_PLANTS[planted]
    build_ring_explorer()
    start = time.monotonic()
    proc = subprocess.run([str(RING_BUILD / program), str(depth)], capture_output=True,
                          text=True, timeout=3600)
    seconds = time.monotonic() - start
    name = "ring I1-I8 (bounded exploration)" + (f", planted {planted}" if planted else "")
    report = Report(name, proc.returncode == 0)
    if proc.returncode == 0:
        report.lines.append(f"{proc.stdout.strip()}; {seconds:.1f} s")
    else:
        report.lines.append(f"violation (exit {proc.returncode}) after {seconds:.1f} s")
        # the search is depth-first: the shallowest depth that fails gives a shortest trail
        for shallow in range(1, depth + 1):
            short = subprocess.run([str(RING_BUILD / program), str(shallow)],
                                   capture_output=True, text=True, timeout=3600)
            if short.returncode != 0:
                report.lines.append(f"shortest trail ({shallow} operations):")
                report.lines.extend("  " + ln for ln in short.stderr.strip().splitlines()[-6:])
                break
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--ring-depth", type=int, default=8)
    ap.add_argument("--eva-precision", type=int, default=EVA_PRECISION)
    ap.add_argument("--plant-decoders", choices=sorted(DECODER_PLANTS))
    ap.add_argument("--plant-ring", choices=sorted(RING_PLANTS))
    args = ap.parse_args(argv)
    reports = [check_decoders(args.plant_decoders, args.eva_precision),
               check_ring(args.ring_depth, args.plant_ring)]
    for rep in reports:
        print(f"{'ok  ' if rep.ok else 'FAIL'} {rep.name}")
        for line in rep.lines:
            print(f"     {line}")
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
