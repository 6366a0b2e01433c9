"""The C part of the verification (issue 20): EVA over the wire decoders, bounded
exploration of the ring. tools/verify.py calls these; run alone it runs both.

    python tools/verify_c.py                     # EVA+WP over the decoders, ring to depth 8
    python tools/verify_c.py --ring-depth 9      # deeper (about 2 minutes alone)
    python tools/verify_c.py --plant-decoders oob --plant-ring lru   # the planted bugs
    python tools/verify_c.py --plant-decoders cobs                   # (WP's)
    python tools/verify_c.py --only decoders --entries eva_pack      # one entry point
    python tools/verify_c.py --only ring-wp      # WP over the ring's reviewed functions
    python tools/verify_c.py --only ring-wp --reconcile  # rows wp_unproved.txt gains/loses
    python tools/verify_c.py --only ring-wp --plant-ring-wp eviction \
        --ring-wp-functions make_room            # its planted bug

check_decoders: Frama-C EVA (Debian frama-c-base) analyses each entry point of
verify/framac/eva_decoders.c, i.e. hm_cbor (check, skip and every getter), the frame
receiver and hm_cobs_decode, hm_msg_decode (outer and inner) and the frame-piece joiner, each
over a buffer of any content and any length up to HM_MAX_FRAME, and the knowledge-pack
verifier hm_knowledge_accept over any pushed pack up to HM_MAX_MESSAGE bytes (with
verify/framac/eva_crypto.c: real SHA-256, Ed25519 replaced by a reader of its inputs).
EVA runs with -eva-split-return auto (a getter's OK and error returns are kept apart,
so its out-parameters are known set on OK) and the partitions of EVA_PARTITIONS. For
the entries of WP_ENTRIES the same Frama-C session then runs WP (Z3 through Why3;
`why3 config detect` first on a fresh machine) on every function of the entry's
sources that carries an ACSL contract (hm_cbor.c's reader, hm_cobs_decode, hm_frag.c's
joiner with hm_crc32, hm_msg.c's str_ok), on the harness functions of WP_HARNESS
(eva_join, whose loop invariant carries the joiner's bound over the run of pieces) and,
in the callers of WP_CALLS, on the named preconditions at their calls only
(hm_msg_decode's call of str_ok, -wp-prop): WP proves the contracts,
the loop invariants and the alarms EVA left in those bodies, and Frama-C consolidates:
an alarm is closed when WP proved it under preconditions that EVA or WP proved at every
call. In these entries verify/framac/wp_env.h is forced into the files of WP_ENV_FILES:
memcpy and memcmp stated over uint8_t, which WP's typed model can follow. WP keeps its
results per goal in build/verify/wp-cache (a goal's text is its key: a changed goal is
proved again). The other entries analyse the same code with the annotations taken out
(EVA alone). eva_pack (the knowledge-pack verifier) is a WP entry too: WP proves the
contracts of hm_pack.c's verifier and helpers (put_be64, refuse, check_protected,
verify_in_place, read_item, hm_knowledge_accept) and of eva_crypto.c's Ed25519
stand-in, with Z3 configured as for the ring (RING_WP_PROVERS), memmove and memset
over uint8_t as well (WP_ENV_BYTES_FILES); the goals WP cannot prove are not given to
it (WP_EXCLUDE, each with its reason) and stay open and reviewed; hm_cbor_skip's and
SHA-256's assigns clauses are checked by From (-from-verify-assigns, WP_GIVEN).
Every alarm left open is compared with verify/framac/eva_reviewed.txt, the alarms
reviewed as imprecision (with the reason); any other alarm fails the check and is
printed with its place. Per entry it prints the alarms EVA left, how many of them WP
proved and how many stay reviewed.
An entry point with no open alarm is proved free of runtime errors for those inputs.

check_ring: build/verify/ring_explore (make -C firmware ring-explore) enumerates every
sequence of ring operations up to `depth` from an empty 3-slot ring and checks the
invariants of hm_ring.h after every step (tests/native/ring_check.c, hm_ring_validate,
and a model of recency, eviction and first fit); see verify/ring/ring_explore.c.

check_ring_wp: Frama-C WP (Z3 through Why3, -wp-rte, the typed+cast memory model so that
the libc's char* contracts of memcpy/memset apply to uint8_t buffers) proves the ACSL
contracts of hm_ring.c's functions against ring_ok, the part of hm_ring.h's
invariants that is a fact of each slot or pair of slots, with verify/ring/wp_env.c's
contracts of the two gate functions taken as given. Goals are split (-wp-split: one per
fact of ring_ok and per path) and each goes to Z3 with its automatic configuration off,
then, if that fails, on (RING_WP_PROVERS, a Why3 configuration of this tool's own).
Results are kept per goal in build/verify/wp-cache as for the decoders (a goal whose text
did not change is not sent to Z3 again, its failures included: delete the folder to
ask Z3 anew). Every goal WP does not close must be listed in verify/ring/wp_unproved.txt with the
reason and what checks it instead; any other fails. It prints the goals proved / total,
per function, and the time.

Planted bugs (built only here): decoders "oob" compiles hm_frame.c with HM_PLANT_OOB
(the receiver's buffer check off by one: EVA flags the write), "cobs" with HM_PLANT_COBS
(hm_cobs_decode's block-length check off by one: WP cannot prove the reads), "join"
with HM_PLANT_JOIN (hm_join_take's too-large check one byte loose: WP cannot prove
the copy inside buf), "pack" with HM_PLANT_PACK (verify_in_place copies the signature
one byte late: WP cannot prove the copy inside the pack); ring
"lru" uses the build with HM_PLANT_RING_LRU (an access does not refresh recency); ring-wp
"eviction" analyses hm_ring.c with HM_PLANT_RING (after the LRU record's eviction the run
search asks for one block too few: WP can no longer prove the run fits). Every check
must fail on its planted bug.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
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
    "eva_join": ("hm_frag.c", "hm_crc32.c"),
    "eva_pack": ("hm_pack.c", "hm_cbor.c", "hm_sha2.c", "../../verify/framac/eva_crypto.c",
                 "../../verify/framac/eva_pack_env.c"),
}
# The entries whose sources' ACSL contracts WP proves (in the same session as EVA), so
# the reader's proofs carry over to the decoders that call it: EVA checks the reader's
# preconditions at every call, WP the bodies under them. eva_pack: its readers run
# over sub-buffers (the protected header, the payload) that EVA bounds only as
# intervals; WP over hm_knowledge_accept and its helpers (hm_pack.c's contracts) proves
# the reader's preconditions there from the getters' postconditions.
# eva_join: hm_frag.c's contracts keep the joiner's bound (have <= limit + 4) over
# every take, and the harness's loop invariant carries it over the run of pieces.
WP_ENTRIES = {"eva_cbor", "eva_frame", "eva_msg", "eva_join", "eva_pack"}
# Harness functions WP proves as well (their loop invariants establish a core
# function's precondition at its call, which EVA's intervals cannot).
WP_HARNESS: dict[str, tuple[str, ...]] = {"eva_join": ("eva_join",)}
# Forced into these core files in the WP entries: memcmp and memcpy stated over
# uint8_t (verify/framac/wp_env.h says why).
WP_ENV = ROOT / "verify" / "framac" / "wp_env.h"
WP_ENV_FILES = ("hm_frag.c", "hm_pack.c")
# ... and memmove and memset over uint8_t as well (wp_env.h's HM_WP_ENV_BYTES)
WP_ENV_BYTES_FILES = ("hm_pack.c",)
# Functions with a contract that WP does not prove: their assigns clauses are checked by
# From over EVA's results (-from-verify-assigns, the entries of FROM_VERIFY): hm_cbor_skip
# (the frame verify/framac/eva_pack_env.c gives it) and eva_crypto.c's SHA-256 wrapper.
WP_GIVEN = {"hm_cbor_skip", "hm_hash_sha256"}
FROM_VERIFY = {"eva_pack"}
# Goals not given to WP, by function: ACSL names (or categories) for -wp-prop, each a
# property WP cannot prove for a reason of its own, left open and reviewed (reasons in
# verify/framac/eva_reviewed.txt).
WP_EXCLUDE: dict[str, tuple[str, ...]] = {
    # *kid and the getters' outputs whose results it ignores: validated (hm_cbor_check
    # accepted the header, so they cannot fail); WP has no model of validated CBOR, and
    # no definition of \pointer_comparable
    "check_protected": ("kid_in_header", "initialization", "ptr_comparison"),
    # the second pass's text copies (two-pass: it would need the reader as a function
    # of the bytes), and with them the clause that they stay inside *into; their
    # sources (z3-gives-up: each is readable by the loop invariant, which Z3 with or
    # without its automatic configuration does not instantiate through s[])
    "read_item": ("valid_dest", "@assigns", "valid_src"),
    # verify_in_place's room (cose-layout: Z3 does not close the arithmetic of the
    # parse), the kid's memcmp (validated), and the pack's bytes after the in-place
    # check (verify_in_place's contract does not say it restores them)
    "hm_knowledge_accept": ("pack_room", "pack_apart", "valid_s1", "valid_s2",
                            "ptr_comparison"),
}
# Entries whose WP goes to Z3 as the ring's does (RING_WP_PROVERS: automatic
# configuration off, then on): with it on, Z3 gives up on the reader's preconditions
# along hm_knowledge_accept's parse.
WP_Z3_RING = {"eva_pack"}
# Call sites whose preconditions WP proves in a caller that carries no contract of its
# own (-wp-fct caller -wp-prop name): hm_msg_decode passes str_ok a string a getter
# returned, which EVA holds as two unrelated intervals (pointer and length), while the
# getters' proved postconditions give WP the relation.
WP_CALLS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "eva_msg": (("hm_msg_decode", ("str_set", "str_readable")),),
}
# Proved with -wp-split (a goal per branch of each conditional): Z3 gives up on
# hm_join_take's postconditions taken whole, over all its exits at once. Not for every
# function: split, hm_cbor_skip's goals grow from about 100 to 1000.
WP_SPLIT = {"hm_join_take"}
# EVA partitioning per entry: hm_msg_decode keeps one state per message type (its
# `split t`) and per field, so each field's offset in the table is a constant;
# SHA-256's framing keeps its block loop and the wipes unrolled.
EVA_PARTITIONS: dict[str, tuple[str, ...]] = {
    "eva_msg": ("-eva-slevel-function", "hm_msg_decode:2000"),
    "eva_pack": ("-eva-slevel-function", "md_update:200,md_final:100,wipe:300"),
}
# WP's results per goal, keyed by the goal's text: an unchanged goal (the reader's
# contracts, met again in every entry that calls the reader) is not proved twice.
WP_CACHE = ROOT / "build" / "verify" / "wp-cache"
# planted bug -> (its macro, whether WP runs: "oob" is EVA's to find, "cobs" WP's)
DECODER_PLANTS = {"oob": ("HM_PLANT_OOB", False), "cobs": ("HM_PLANT_COBS", True),
                  "join": ("HM_PLANT_JOIN", True), "pack": ("HM_PLANT_PACK", True)}
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
    alarms: list[Alarm]  # left open after EVA and WP
    functions: str  # EVA's coverage line
    proved: list[str]  # functions EVA reached and left no open alarm in
    seconds: float
    eva_valid: int = 0  # properties of the core EVA proved valid by itself
    wp_proved: list[Alarm] = field(default_factory=list)  # EVA alarms WP then proved
    wp_goals: str = ""  # WP's summary line
    contract: int = 0  # properties of the ACSL annotations (contracts, loop invariants)
    # properties counted as proved (not open) whose proof rests on properties still open:
    # Frama-C's "valid under hypotheses"
    hypothetical: list[Alarm] = field(default_factory=list)


_LIBC = {"memcmp", "memcpy", "memmove", "memset", "hm_wp_memcmp", "hm_wp_memcpy"}
_COVERAGE = re.compile(r"(\d+) functions analyzed \(out of \d+\).*?\n\s*In these functions, "
                       r"(\d+) statements reached \(out of (\d+)\)", re.S)
_WP_SUMMARY = re.compile(r"\[wp\] Proved goals:\s+(\d+) / (\d+)")
_ACSL_FUNCTION = re.compile(r"/\*@(?:(?!\*/).)*\b(?:requires|assigns)\b(?:(?!\*/).)*\*/\s*"
                            r"(?:static\s+)?(?:const\s+)?\w+(?:\s+|\s*\*\s*)(\w+)\s*\(", re.S)
# the properties of the annotations written in the core (not alarms EVA emits)
_ACSL_KINDS = {"precondition", "postcondition", "loop invariant", "loop variant",
               "assigns clause", "from clause", "assertion", "behavior", "exits",
               "complete behaviors", "disjoint behaviors"}
WP_TIMEOUT = 20  # seconds per goal; Z3 needs well under 1 s alone, the margin is for load


def contracted_functions(paths: list[Path]) -> list[str]:
    """The functions that carry an ACSL contract in these files: WP
    proves their contracts, loop invariants and the EVA alarms in their bodies."""
    names: list[str] = []
    for path in paths:
        names.extend(_ACSL_FUNCTION.findall(path.read_text()))
    return sorted(set(names))


def ensure_why3() -> None:
    """WP reaches Z3 through Why3; a fresh machine has no Why3 configuration yet."""
    probe = subprocess.run(["why3", "config", "list-provers"], capture_output=True, text=True)
    if "Z3" not in probe.stdout:
        subprocess.run(["why3", "config", "detect"], capture_output=True, text=True, check=True)


# ACSL annotations, except EVA's partitioning directives (`//@ split e;`): no claims
_ANNOTATION = re.compile(r"/\*@.*?\*/|//@(?!\s*split\b)[^\n]*", re.S)


def strip_annotations(source: Path, into: Path) -> Path:
    """A copy of source without its ACSL annotations (each replaced by as many newlines,
    so the lines of the code, and of EVA's alarms, stay where they are); EVA's `split`
    directives stay."""
    text = _ANNOTATION.sub(lambda m: "\n" * m.group(0).count("\n"), source.read_text())
    out = into / source.name
    out.write_text(text)
    return out


def _read_report(path: Path, sources: list[Path]) -> list[dict[str, str]]:
    """The properties in the analysed sources: the libc's own preconditions are reported
    again at each call site, the harness's are not the core's, and a header's are the
    default specifications Frama-C makes up for the prototypes the harness declares."""
    names = {p.name for p in sources}

    def ours(row: dict[str, str]) -> bool:
        if row["file"] == HARNESS.name:  # the contracts of the core, where it is called
            callee = row["property kind"].removeprefix("precondition of ")
            return callee != row["property kind"] and callee not in _LIBC and \
                not callee.startswith("Frama_C")
        return row["file"] in names and not row["function"].startswith("eva_")

    with path.open(newline="") as fh:
        return [row for row in csv.DictReader(fh, delimiter="\t") if ours(row)]


def _open(row: dict[str, str]) -> bool:
    # Unknown: not proved; Invalid: a definite error. Dead code (unreached from the
    # entry point) and Valid are not open; neither is "Partially proven" (valid under
    # hypotheses: a proof resting on properties not proved), which :func:`_hypothetical`
    # counts apart (the properties it rests on are open themselves, so each is listed
    # or fails the check).
    status = row["status"]
    return status == "Unknown" or (status.startswith("Invalid") and "dead" not in status)


def _hypothetical(row: dict[str, str]) -> bool:
    # the report's consolidated status: proved by its emitter, resting on others not proved
    return row["status"] in ("Partially proven", "Valid_under_hyp")


def _alarm(row: dict[str, str]) -> Alarm:
    return Alarm(row["file"], int(row["line"]), row["function"], row["property kind"],
                 row["property"])


def run_eva(entry: str, defines: tuple[str, ...] = (), precision: int = EVA_PRECISION,
            wp: bool = True) -> EvaRun:
    """frama-c -eva on one entry point, then (entries of WP_ENTRIES, if wp) -wp on the
    functions with ACSL contracts in the same session: the properties neither could
    prove valid. Without WP the annotations are taken out (EVA alone, as the others)."""
    with tempfile.TemporaryDirectory(prefix="hm-eva-") as tmp:
        after_eva, after_wp = Path(tmp) / "eva.csv", Path(tmp) / "wp.csv"
        cpp = " ".join([f"-I{CORE}", *(f"-D{d}" for d in defines)])
        sources = [(CORE / f).resolve() for f in EVA_ENTRIES[entry]]
        with_wp = wp and entry in WP_ENTRIES
        contracted = contracted_functions(sources) if with_wp else []
        if not with_wp:
            sources = [strip_annotations(f, Path(tmp)) for f in sources]
        per_file = ",".join(
            f"{f}:-include {WP_ENV}" + (" -DHM_WP_ENV_BYTES" if f.name in WP_ENV_BYTES_FILES
                                        else "")
            for f in sources if with_wp and f.name in WP_ENV_FILES)
        cmd = ["frama-c", f"-cpp-extra-args={cpp}",
               *(["-cpp-extra-args-per-file", per_file] if per_file else []),
               "-machdep", "x86_64", "-eva",
               "-eva-precision", str(precision), "-eva-split-return", "auto",
               *EVA_PARTITIONS.get(entry, ()),
               *(["-from-verify-assigns"] if with_wp and entry in FROM_VERIFY else []),
               "-main", entry, "-eva-show-progress", "-eva-no-print", str(HARNESS),
               *map(str, sources), "-then", "-report-csv", str(after_eva)]
        if contracted:
            contracted += WP_HARNESS.get(entry, ())
            ensure_why3()
            WP_CACHE.mkdir(parents=True, exist_ok=True)
            contracted = [f for f in contracted if f not in WP_GIVEN]
            whole = [f for f in contracted if f not in WP_SPLIT and f not in WP_EXCLUDE]
            split = [f for f in contracted if f in WP_SPLIT]
            provers = ",".join(RING_WP_PROVERS) if entry in WP_Z3_RING else "z3"
            cmd += ["-then", "-wp", "-wp-fct", ",".join(whole), "-wp-prover", provers,
                    "-wp-timeout", str(WP_TIMEOUT), "-wp-cache", "update",
                    "-wp-cache-dir", str(WP_CACHE)]
            if split:
                cmd += ["-then", "-wp-split", "-wp-fct", ",".join(split)]
            for f in contracted:  # one pass each, without the goals it cannot prove
                if f in WP_EXCLUDE:
                    cmd += ["-then", "-wp-fct", f,
                            "-wp-prop=" + ",".join(f"-{p}" for p in WP_EXCLUDE[f])]
            for caller, props in WP_CALLS.get(entry, ()):
                cmd += ["-then", "-wp-no-split", "-wp-fct", caller, "-wp-prop", ",".join(props)]
            cmd += ["-then", "-report-csv", str(after_wp)]
        env = {**os.environ, "WHY3CONFIG": str(ring_why3_config())} \
            if contracted and entry in WP_Z3_RING else None
        start = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=3600,
                              env=env)
        seconds = time.monotonic() - start
        final = after_wp if contracted else after_eva
        if proc.returncode != 0 or not final.exists():
            raise RuntimeError(f"frama-c failed on {entry} ({proc.returncode}):\n"
                               f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        eva_rows = _read_report(after_eva, sources)
        eva_open = {(r["file"], r["line"], r["property kind"], r["property"])
                    for r in eva_rows if _open(r)}
        final_rows = _read_report(final, sources)
        alarms = [_alarm(r) for r in final_rows if _open(r)]
        wp_proved = [_alarm(r) for r in final_rows if not _open(r) and
                     r["property kind"] not in _ACSL_KINDS and
                     (r["file"], r["line"], r["property kind"], r["property"]) in eva_open]
        contract = sum(1 for r in final_rows if r["property kind"] in _ACSL_KINDS)
        hypothetical = [_alarm(r) for r in final_rows if _hypothetical(r)]
        eva_valid = sum(1 for r in eva_rows if r["status"] == "Valid")
    m = _COVERAGE.search(proc.stdout)
    cov = (f"{m.group(1)} functions, {m.group(2)}/{m.group(3)} statements reached"
           if m else "coverage not reported")
    passes = _WP_SUMMARY.findall(proc.stdout)  # one per WP pass (whole, split, calls)
    callers = [f"{c} (its calls' {', '.join(p)})" for c, p in WP_CALLS.get(entry, ())
               if contracted]
    wp_goals = (f"WP {sum(int(d) for d, _ in passes)}/{sum(int(n) for _, n in passes)} "
                f"goals in {', '.join(contracted + callers)}") if passes else ""
    reached = set(re.findall(r"computing for function (\w+)", proc.stdout))
    proved = sorted(f for f in reached - {a.function for a in alarms}
                    if not f.startswith(("Frama_C", "eva_", "any_input")) and f not in _LIBC)
    return EvaRun(entry, alarms, cov, proved, seconds, eva_valid, wp_proved, wp_goals,
                  contract, hypothetical)


def check_decoders(planted: str | None = None, precision: int = EVA_PRECISION,
                   entries: tuple[str, ...] = tuple(EVA_ENTRIES)) -> Report:
    """EVA (then WP) over the decoder entry points; ok if every alarm left open is a
    reviewed one."""
    defines: tuple[str, ...] = ()
    wp = True
    if planted is not None:
        if planted not in DECODER_PLANTS:
            raise ValueError(f"unknown planted bug {planted!r}: {sorted(DECODER_PLANTS)}")
        macro, wp = DECODER_PLANTS[planted]
        defines = (macro, "HM_VERIFY_PLANTED")
    reviewed = reviewed_alarms()
    report = Report("decoders (Frama-C EVA + WP)" + (f", planted {planted}" if planted else ""),
                    True)
    seen: set[tuple[str, str, str, str]] = set()
    totals = [0, 0, 0, 0]
    for entry in entries:
        run = run_eva(entry, defines, precision, wp=wp)
        new = [a for a in run.alarms if a.key not in reviewed]
        seen.update(a.key for a in run.alarms)
        files = " ".join(Path(f).name for f in EVA_ENTRIES[entry])
        eva_alarms = len(run.alarms) + len(run.wp_proved)
        counts = (f"{eva_alarms} alarms after EVA ({run.eva_valid} properties proved by EVA), "
                  f"{len(run.wp_proved)} proved by WP, "
                  f"{len(run.alarms) - len(new)} still reviewed")
        if new:
            counts += f", {len(new)} NEW"
        verdict = "proved free of runtime errors" if not run.alarms else counts
        if not run.alarms:
            verdict += f" ({counts})"
        report.lines.append(f"{entry} ({files}): {run.functions}; {verdict}; "
                            f"{run.seconds:.1f} s")
        for i, n in enumerate((eva_alarms, run.eva_valid, len(run.wp_proved),
                               len(run.alarms) - len(new))):
            totals[i] += n
        if run.proved:
            report.lines.append(f"  no alarm in the body of: {', '.join(run.proved)}")
        if run.wp_goals:
            report.lines.append(f"  {run.wp_goals} ({run.contract} contract properties)")
        if run.hypothetical:
            of_wp = len({a.key for a in run.hypothetical} & {a.key for a in run.wp_proved})
            report.lines.append(
                f"  {len(run.hypothetical)} properties proved only under hypotheses that are "
                f"open themselves ({of_wp} of the {len(run.wp_proved)} alarms proved by WP, the "
                f"rest contract properties), in " +
                ", ".join(sorted({a.function for a in run.hypothetical})))
        for a in new:
            report.ok = False
            report.lines.append(f"  NEW ALARM {a.file}:{a.line} in {a.function}: {a.kind} {a.prop}")
    report.lines.append(f"all entries: {totals[0]} alarms after EVA, {totals[2]} of them proved "
                        f"by WP, {totals[3]} still reviewed; {totals[1]} properties proved by EVA")
    stale = sorted(set(reviewed) - seen)
    if stale and planted is None and set(entries) == set(EVA_ENTRIES):
        report.lines.append(f"reviewed alarms no longer raised (the list may shrink): {len(stale)}")
        report.lines.extend(f"  {' | '.join(k)}" for k in stale)
    tags: dict[str, int] = {}
    for key in seen & set(reviewed):
        tags[reviewed[key]] = tags.get(reviewed[key], 0) + 1
    if tags:
        report.lines.append("reviewed alarms by reason: " +
                            ", ".join(f"{t} {n}" for t, n in sorted(tags.items())))
    return report


# How each invariant of hm_ring.h is established (protocol/SPEC.md §13 in full): all of
# each by the exploration; the part ring_ok and the postconditions state is WP's too,
# goal by goal, except what verify/ring/wp_unproved.txt lists (among it ring_ok kept by
# most stores into the ring, so WP does not yet replace the exploration for any of them).
RING_INVARIANTS = (
    ("I1 slots", "exploration: ring_check + hm_ring_validate after every step; "
                 "ACSL: live seqs distinct and <= seq, links in range"),
    ("I2 recency", "exploration: model of the access order, compared after every step"),
    ("I3 eviction", "exploration: model of the fewest-oldest victims per capture; "
                    "ACSL: no gated record leaves by a capture, a release needs a pin"),
    ("I4 backpressure", "exploration: a refused capture changes only its two counters; "
                        "ACSL: a refusal keeps seq and is counted"),
    ("I5 pins", "exploration: ring_check after every step; ACSL: pack != 0 only when gated"),
    ("I6 arena", "exploration: first fit per capture, bytes compared, disjoint block maps; "
                 "ACSL: each record's geometry, arena accesses in bounds (-wp-rte)"),
    ("I7 scores", "exploration: ring_check (structure) after every step; ACSL: VOLATILE "
                  "unscored, unpinned, unchained; gated EPISODIC"),
    ("I8 counters", "exploration: ring_check + model (one count per gating); ACSL: "
                    "captures = seq + refusals, one count per gating"),
)




# ---- The ring's ACSL contracts, proved by WP --------------------------------------
RING_WP_SOURCES = (CORE / "hm_ring.c", ROOT / "verify" / "ring" / "wp_env.c")
RING_WP_UNPROVED = ROOT / "verify" / "ring" / "wp_unproved.txt"
RING_WP_PLANTS = {"eviction": "HM_PLANT_RING"}
# The functions the fast subset proves: the capture path's helpers (make_room, where the
# planted bug is, runs in the planted check).
RING_WP_FAST = ("find_run", "evict_lru", "slot_take", "lru_push_front")
# The functions whose unproved goals are reviewed in RING_WP_UNPROVED: what the tool runs
# by default. The others carry contracts too, but their runs under the split goals were
# not finished and reviewed yet: run them with --ring-wp-functions and add what stays
# unproved, with its reason, to the list.
RING_WP_REVIEWED = (*RING_WP_FAST, "make_room", "ctz32", "blocks_mask", "rec_mask", "live",
                    "lru_unlink", "blocks_free", "slot_push_free", "bad_size", "hm_ring_init",
                    "hm_ring_get", "hm_ring_peek", "hm_ring_payload", "hm_ring_source",
                    "put_be32", "hm_ring_id", "hm_ring_pin", "hm_ring_unpin",
                    "hm_ring_set_chain", "hm_ring_next", "copy_context", "walk",
                    "hm_ring_validate", "hm_ring_set_state", "hm_ring_release",
                    "hm_ring_unpin_pack", "hm_ring_init_sized", "hm_ring_gate",
                    "hm_ring_release_pack", "hm_ring_capture")
# Functions with contracts whose run is not reviewed yet (none). hm_ring_capture alone is
# 7,337 goals under -wp-split (ring_ok per fact and per path through make_room, the
# copies and the list push): about two hours on two cores without the WP cache.
RING_WP_PENDING: tuple[str, ...] = ()
RING_WP_TIMEOUT = 30  # seconds per goal; most need well under 1 s alone, the rest is load
RING_WP_WALL = 4 * 3600  # seconds for one frama-c process (hm_ring_capture's is the longest)
# Goal counts under -wp-split (measured), to share the functions among processes: the
# capture is the one large contract; the others not named are 150 goals or fewer.
RING_WP_WEIGHT = {"hm_ring_capture": 7337, "make_room": 945, "hm_ring_set_state": 648,
                  "hm_ring_gate": 363}
RING_WP_WEIGHT_OTHER = 150
# hm_ring_capture's goals in two frama-c processes: its postconditions, and the rest (the
# assigns, the calls' preconditions, -wp-rte's assertions, the loop). In one process
# every ensures goal carries the whole body's conditions into Qed, which then takes
# 1.6 s a goal where the split run takes 0.5 s (measured on ensures_2..5): the capture
# alone took hours of one core. -wp-prop's categories partition the goals (tested).
RING_WP_SPLIT = {"hm_ring_capture": (("@ensures", 5406), ("-@ensures", 1931))}
# Z3 for the ring, twice: Why3's own Z3 entry (driver z3_471, the same seeds) first with
# Z3's automatic configuration off, then, for a goal that fails, with it on. With it on,
# Z3 chooses its settings from the query, and on the goals of ring_ok after a store into
# the ring (a quantified fact per slot, Why3's generic arithmetic and memory axioms beside
# it) it spends its budget on instances of those axioms, never reaching the one instance
# a goal needs; with it off the same queries close in well under a second. The goals of
# bit and modular arithmetic (the selector tests, put_be32, counters modulo 2^32) close
# with it on. A Why3 configuration of its own (build/verify, named by WHY3CONFIG for the
# WP run only): the user's is left as it is.
RING_WHY3_CONF = ROOT / "build" / "verify" / "why3-ring.conf"
_Z3_SEEDS = "sat.random_seed=42 nlsat.randomize=false smt.random_seed=42"
RING_WP_PROVERS = {"z3-ring": f"{_Z3_SEEDS} smt.auto_config=false", "z3-auto": _Z3_SEEDS}
# "[wp] [Z3 ...] Goal typed_cast_<goal> : Valid ..." or, when every prover failed,
# "[wp] [Failed] Goal typed_cast_<goal>" (or [Timeout], ...) with each prover's answer below
_WP_GOAL = re.compile(r"^\[wp\] \[([^\]]+)\] Goal typed_cast_(\w+)(?: : (\w+))?", re.M)
_WP_FUNCTION = re.compile(r"^\[rte:annot\] annotating function (\w+)", re.M)


@dataclass
class WpGoals:
    """One WP run: each goal's status ("Valid", "Failed", "Timeout", ...), by name."""

    goals: dict[str, str]
    functions: list[str]
    seconds: float
    summary: str

    def function_of(self, goal: str) -> str:
        return goal_owner(goal, self.functions)


def goal_owner(goal: str, functions: Iterable[str]) -> str:
    """The function a goal belongs to (goal names start with it; the longest such name)."""
    owners = [f for f in functions if goal.startswith(f + "_")]
    return max(owners, key=len) if owners else "?"


def unproved_listed(path: Path = RING_WP_UNPROVED) -> dict[str, str]:
    """The goals WP is known not to close: goal -> why, and how it is established."""
    out: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        if not raw.strip() or raw.startswith("#"):
            continue
        goal, sep, reason = (p.strip() for p in raw.partition(" | "))
        if not sep or not reason:
            raise ValueError(f"{path.name}: not 'goal | reason': {raw}")
        out[goal] = reason
    return out


def ring_why3_config() -> Path:
    """The Why3 configuration of the ring's WP runs: the provers of RING_WP_PROVERS."""
    z3 = shutil.which("z3")
    if z3 is None:
        raise RuntimeError("z3 is not installed (Debian package z3)")
    text = "[main]\nmagic = 14\nmemlimit = 1000\nrunning_provers_max = 2\ntimelimit = 5\n"
    for shortcut, settings in RING_WP_PROVERS.items():
        text += (f"\n[prover]\nalternative = \"{shortcut}\"\n"
                 f"command = \"{z3} -smt2 {settings} -st %f\"\n"
                 f"command_steps = \"{z3} -smt2 {settings} -st rlimit=%S %f\"\n"
                 f"driver = \"z3_471\"\neditor = \"\"\nin_place = false\n"
                 f"interactive = false\nname = \"Z3\"\nshortcut = \"{shortcut}\"\n"
                 f"version = \"4.8.12\"\n")
    RING_WHY3_CONF.parent.mkdir(parents=True, exist_ok=True)
    if not RING_WHY3_CONF.exists() or RING_WHY3_CONF.read_text() != text:
        RING_WHY3_CONF.write_text(text)
    return RING_WHY3_CONF


def wp_groups(functions: tuple[str, ...], jobs: int) -> list[tuple[str, ...]]:
    """The functions in at most `jobs` groups of about equal work, heaviest first into the
    lightest group (WP's own work, Qed, runs on one core per frama-c process)."""
    groups: list[list[str]] = [[] for _ in range(max(1, min(jobs, len(functions))))]
    loads = [0] * len(groups)
    for fn in sorted(functions, key=lambda f: -RING_WP_WEIGHT.get(f, RING_WP_WEIGHT_OTHER)):
        lightest = loads.index(min(loads))
        groups[lightest].append(fn)
        loads[lightest] += RING_WP_WEIGHT.get(fn, RING_WP_WEIGHT_OTHER)
    return [tuple(g) for g in groups if g]


WpRun = tuple[tuple[str, ...], tuple[str, ...]]  # one frama-c process: functions, properties


def wp_runs(functions: tuple[str, ...], jobs: int,
            properties: tuple[str, ...] = ()) -> list[WpRun]:
    """The frama-c processes of a ring WP run over `functions`, heaviest first: a function
    of RING_WP_SPLIT as one process per property selection (unless the caller selects
    the properties), the others in at most `jobs` groups (wp_groups)."""
    split = [] if properties else [f for f in functions if f in RING_WP_SPLIT]
    runs: list[tuple[int, WpRun]] = [(weight, ((fn,), (selection,)))
                                     for fn in split for selection, weight in RING_WP_SPLIT[fn]]
    rest = tuple(f for f in functions if f not in split)
    if rest:
        runs += [(sum(RING_WP_WEIGHT.get(f, RING_WP_WEIGHT_OTHER) for f in group),
                  (group, properties)) for group in wp_groups(rest, jobs)]
    return [run for _, run in sorted(runs, key=lambda r: -r[0])]


@dataclass(frozen=True)
class WpCache:
    """Where WP keeps its provers' answers and how a run uses them: "update" reads a
    goal's answer when there is one, "rebuild" asks the provers again and stores the new
    answer."""

    mode: str = "update"
    directory: Path = WP_CACHE


def run_ring_wp(defines: tuple[str, ...] = (), functions: tuple[str, ...] = (),
                timeout: int = RING_WP_TIMEOUT, properties: tuple[str, ...] = (),
                jobs: int = 0, cache: WpCache = WpCache(),
                why3_config: Path | None = None, par: int = 0) -> WpGoals:
    """frama-c -wp -wp-rte on hm_ring.c (ILP32, as on the boards): every contract, loop
    invariant and runtime-error assertion of the functions given (all if none; only the
    named ACSL properties if `properties` is given, e.g. find_run's run_length). With
    -wp-split a goal's conjuncts and the paths to it are goals of their own: Z3 closes
    ring_ok's facts (hm_ring.c's HM_ACSL_RING_FACTS) one path at a time. The functions
    are shared among frama-c processes (wp_runs), `jobs` at a time (one a core if 0),
    heaviest first, sharing the WP cache."""
    jobs = jobs or os.cpu_count() or 1
    plan = wp_runs(functions, jobs, properties) if functions else [((), properties)]
    if len(plan) == 1:
        return _run_ring_wp_once(defines, plan[0][0], timeout, plan[0][1], cache, why3_config,
                                 par)
    start = time.monotonic()
    with ThreadPoolExecutor(min(jobs, len(plan))) as pool:  # takes the runs in order
        runs = list(pool.map(lambda r: _run_ring_wp_once(defines, r[0], timeout, r[1], cache,
                                                         why3_config, par), plan))
    goals: dict[str, str] = {}
    for r in runs:
        twice = sorted(goals.keys() & r.goals.keys())
        if twice:  # two selections of one function overlap: its goals would count twice
            raise RuntimeError(f"WP goals reported by two processes: {twice[:5]}")
        goals.update(r.goals)
    proved = sum(int(r.summary.split("/")[0]) for r in runs)
    total = sum(int(r.summary.split("/")[1]) for r in runs)
    return WpGoals(goals, sorted({f for r in runs for f in r.functions}),
                   time.monotonic() - start, f"{proved}/{total}")


def _run_ring_wp_once(defines: tuple[str, ...], functions: tuple[str, ...], timeout: int,
                      properties: tuple[str, ...], cache: WpCache = WpCache(),
                      why3_config: Path | None = None, par: int = 0) -> WpGoals:
    """One frama-c process of run_ring_wp; `par` bounds the provers it runs at once (0:
    WP's default)."""
    cpp = " ".join([f"-I{CORE}", *(f"-D{d}" for d in defines)])
    cmd = ["frama-c", f"-cpp-extra-args={cpp}", "-machdep", "gcc_x86_32",
           *map(str, RING_WP_SOURCES), "-wp", "-wp-rte", "-wp-model", "typed+cast",
           "-wp-split", "-wp-prover", ",".join(RING_WP_PROVERS), "-wp-timeout", str(timeout),
           "-wp-cache", cache.mode, "-wp-cache-dir", str(cache.directory)]
    if par:
        cmd += ["-wp-par", str(par)]
    if functions:
        cmd += ["-wp-fct", ",".join(functions)]
    if properties:
        cmd += ["-wp-prop=" + ",".join(properties)]  # one word: it may start with "-"
    env = {**os.environ, "WHY3CONFIG": str(why3_config or ring_why3_config())}
    cache.directory.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    # WP's output goes to a file as it runs, so a long run can be followed (tail -f
    # build/verify/ring-wp.*.log); it is removed when the run has been read
    tag = "-".join([functions[0] if functions else "all", *defines,
                    *(p.replace("-@", "no-").lstrip("@") for p in properties)])
    log = WP_CACHE.parent / f"ring-wp.{tag}.{os.getpid()}.log"
    with log.open("w+") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                              timeout=RING_WP_WALL, env=env)
        out.seek(0)
        stdout = out.read()
    seconds = time.monotonic() - start
    summary = _WP_SUMMARY.search(stdout)
    if proc.returncode != 0 or summary is None:
        raise RuntimeError(f"frama-c -wp failed on the ring ({proc.returncode}), see {log}:\n"
                           f"{stdout[-3000:]}\n{proc.stderr[-3000:]}")
    log.unlink()
    goals = {goal: status or verdict for verdict, goal, status in _WP_GOAL.findall(stdout)}
    return WpGoals(goals, sorted(set(_WP_FUNCTION.findall(stdout))), seconds,
                   f"{summary.group(1)}/{summary.group(2)}")


def check_ring_wp(planted: str | None = None, functions: tuple[str, ...] = (),
                  properties: tuple[str, ...] = (), cache: WpCache = WpCache()) -> Report:
    """WP over the ring's contracts: ok if every goal it does not prove is one of
    verify/ring/wp_unproved.txt (each listed with the reason and what checks it).
    `properties` narrows the run to the named ACSL properties (a fast check of one)."""
    defines: tuple[str, ...] = ()
    if planted is not None:
        if planted not in RING_WP_PLANTS:
            raise ValueError(f"unknown planted bug {planted!r}: {sorted(RING_WP_PLANTS)}")
        defines = (RING_WP_PLANTS[planted], "HM_VERIFY_PLANTED")
    listed = unproved_listed()
    functions = functions or RING_WP_REVIEWED
    run = run_ring_wp(defines, functions, properties=properties, cache=cache)
    scope = (f"the {len(functions)} reviewed functions of hm_ring.c"
             if functions == RING_WP_REVIEWED else ", ".join(functions))
    name = "ring contracts (Frama-C WP, Z3)" + (f", planted {planted}" if planted else "")
    report = Report(name, True)
    first_open = sorted(g for g, status in run.goals.items() if status != "Valid")
    first_new = [g for g in first_open if g not in listed]
    # A goal left open and not listed gets a second try with the provers asked again: a
    # failure WP read from its cache may be a timeout of a loaded machine, kept there for
    # good (the cache keeps a failure whatever the timeout of a later run). One process,
    # one prover at a time, only the functions that own such goals.
    retry = run_ring_wp(defines, tuple(sorted({run.function_of(g) for g in first_new})),
                        properties=properties, jobs=1, cache=WpCache("rebuild", cache.directory),
                        par=1) \
        if first_new and planted is None else None  # a plant's goals are meant to fail
    again = {g: retry.goals.get(g, "not a goal") if retry else "not run" for g in first_new}
    goals = {**run.goals, **{g: "Valid" for g, status in again.items() if status == "Valid"}}
    open_goals = [g for g in first_open if goals[g] != "Valid"]
    new = [g for g in open_goals if g not in listed]
    proved, total = (int(n) for n in run.summary.split("/"))  # WP's own count
    second = (f" (second try: {len(first_new) - len(new)} of {len(first_new)} proved, "
              f"{retry.seconds:.1f} s)" if retry else "")
    report.lines.append(f"WP proved {proved + len(first_new) - len(new)}/{total} goals "
                        f"({scope}; contracts, loop invariants and variants, -wp-rte) in "
                        f"{run.seconds:.1f} s; "
                        f"{len(open_goals) - len(new)} not proved and listed, "
                        f"{len(new)} new{second}")
    per_function: dict[str, list[int]] = {}
    for goal, status in goals.items():
        counts = per_function.setdefault(run.function_of(goal), [0, 0])
        counts[0] += status == "Valid"
        counts[1] += 1
    report.lines.append("  by function: " + ", ".join(
        f"{f} {p}/{t}" for f, (p, t) in sorted(per_function.items())))
    for goal in open_goals:
        if goal in listed:
            report.lines.append(f"  listed {goal}: {listed[goal]}")
    for goal in first_new:
        if goal not in new:
            report.lines.append(f"  proved on a second try, the provers asked again: {goal} "
                                f"(first {run.goals[goal]})")
        else:
            report.ok = False
            report.lines.append(f"  NOT PROVED {goal} ({run.goals[goal]}; again {again[goal]})")
    if functions == RING_WP_REVIEWED and RING_WP_PENDING:
        report.lines.append("  with contracts, not yet run and reviewed: " +
                            ", ".join(RING_WP_PENDING))
    stale = sorted(g for g in listed if run.goals.get(g) == "Valid")
    if stale and planted is None:
        report.lines.append(f"  listed but now proved (the list may shrink): {', '.join(stale)}")
    return report


def unproved_diff(goals: dict[str, str], listed: dict[str, str],
                  functions: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """What a run over `functions` says of the list: the goals it left open that are not
    listed (to add), and the listed goals of those functions it proved or no longer has
    (to remove; a goal named after none of them is another run's business)."""
    open_goals = {g for g, status in goals.items() if status != "Valid"}
    add = sorted(open_goals - listed.keys())
    every = RING_WP_REVIEWED + RING_WP_PENDING
    remove = sorted(g for g in listed
                    if goal_owner(g, every) in functions and g not in open_goals)
    return add, remove


def reconcile_ring_wp(functions: tuple[str, ...] = ()) -> Report:
    """WP over `functions` (default: every function of hm_ring.c) against
    verify/ring/wp_unproved.txt: prints the rows to add (with their status, the reason
    to be written) and to remove; ok when there are none."""
    functions = functions or RING_WP_REVIEWED + RING_WP_PENDING
    listed = unproved_listed()
    run = run_ring_wp(functions=functions)
    add, remove = unproved_diff(run.goals, listed, functions)
    report = Report("ring contracts against wp_unproved.txt (Frama-C WP, Z3)",
                    not add and not remove)
    report.lines.append(f"WP proved {run.summary} goals of {len(functions)} functions in "
                        f"{run.seconds:.1f} s; {len(add)} rows to add, {len(remove)} to remove")
    report.lines.extend(f"+ {g} | [open] {run.goals[g]}" for g in add)
    report.lines.extend(f"- {g} | {listed[g]}" for g in remove)
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
        report.lines.extend(f"{name}: {how}" for name, how in RING_INVARIANTS)
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
    ap.add_argument("--plant-ring-wp", choices=sorted(RING_WP_PLANTS))
    ap.add_argument("--ring-wp-functions", default="",
                    help="comma-separated functions of hm_ring.c for WP (default: the "
                         "reviewed ones, RING_WP_REVIEWED)")
    ap.add_argument("--reconcile", action="store_true",
                    help="with --only ring-wp: the rows wp_unproved.txt should gain and lose "
                         "(default functions: every function of hm_ring.c)")
    ap.add_argument("--only", choices=("decoders", "ring", "ring-wp"),
                    help="run one check (default: all three)")
    ap.add_argument("--entries", default="",
                    help="comma-separated decoder entry points (default: all of EVA_ENTRIES)")
    args = ap.parse_args(argv)
    wp_functions = tuple(f for f in args.ring_wp_functions.split(",") if f)
    entries = tuple(e for e in args.entries.split(",") if e)
    unknown = sorted(set(entries) - set(EVA_ENTRIES))
    if unknown:
        ap.error(f"unknown entries {unknown}: {sorted(EVA_ENTRIES)}")
    checks: dict[str, Callable[[], Report]] = {
        "decoders": lambda: check_decoders(args.plant_decoders, args.eva_precision,
                                           entries or tuple(EVA_ENTRIES)),
        "ring": lambda: check_ring(args.ring_depth, args.plant_ring),
        "ring-wp": (lambda: reconcile_ring_wp(wp_functions)) if args.reconcile else
                   (lambda: check_ring_wp(args.plant_ring_wp, wp_functions)),
    }
    reports = [run() for name, run in checks.items() if args.only in (None, name)]
    for rep in reports:
        print(f"{'ok  ' if rep.ok else 'FAIL'} {rep.name}")
        for line in rep.lines:
            print(f"     {line}")
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
