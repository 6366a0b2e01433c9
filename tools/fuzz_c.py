"""Fuzz the C firmware core with libFuzzer: build, seed, run, report.

    python tools/fuzz_c.py                    # every target, 10 s each
    python tools/fuzz_c.py --seconds 60 --target fuzz_frame
    python tools/fuzz_c.py --long             # the longer run: 600 s per target

Steps:
1. ``make -C firmware fuzz`` builds build/fuzz/<target> for every
   firmware/fuzz/fuzz_*.c (clang with -fsanitize=fuzzer,address,undefined; the compiler
   is ``--cc``, else $FUZZ_CC, else ``clang``).
2. tools/fuzz_corpus.py writes the seeds, derived from protocol/vectors, into
   build/fuzz/corpus/<target>/.
3. Inputs that crashed before (build/fuzz/crashes/<target>/) are replayed first: a
   fixed crash stays as a regression input, one that still crashes is reported again.
4. Each target runs for ``--seconds`` (``-max_total_time``), ``--jobs`` at a time, on
   its growing corpus build/fuzz/work/<target>/ (kept between runs; ``--work`` puts
   it elsewhere, ``--fresh`` empties it) plus the seeds. Logs go to build/fuzz/logs/<target>.log.

For each target the report gives executions, exec/s, coverage (libFuzzer's ``cov``:
edges, and ``ft``: features), corpus size and crashes. A crash is anything libFuzzer or a
sanitizer reports (ASan, UBSan, LeakSanitizer, a broken FUZZ_CHECK invariant, a timeout,
out-of-memory): its first report line, the first stack frame in the project
(file:line), the input in hex and the command that reproduces it are printed, and the
input is kept in build/fuzz/crashes/<target>/. The exit status is 1 if anything
crashed, 2 if the build failed or clang is missing, else 0.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import fuzz_corpus

ROOT = Path(__file__).resolve().parent.parent
FUZZ_SRC = ROOT / "firmware" / "fuzz"
BUILD = ROOT / "build" / "fuzz"
CORPUS = BUILD / "corpus"
WORK = BUILD / "work"
CRASHES = BUILD / "crashes"
LOGS = BUILD / "logs"

DEFAULT_SECONDS = 10
LONG_SECONDS = 600
MAX_LEN = 4096  # bytes per input: room for a pack offer's frames, a 4 KB reassembly
UNIT_TIMEOUT = 25  # seconds for one input before libFuzzer calls it a hang
DEBIAN_PACKAGES = "clang libclang-rt-14-dev (and llvm for file:line in reports)"

STATUS = re.compile(
    r"^#(?P<n>\d+)\s+(?P<kind>INITED|NEW|REDUCE|pulse|DONE|RELOAD)\s+"
    r"cov: (?P<cov>\d+) ft: (?P<ft>\d+) corp: (?P<corp>\d+)/\S+"
    r".*?exec/s: (?P<eps>\d+)",
    re.MULTILINE,
)
STAT = re.compile(r"^stat::(?P<name>\w+):\s+(?P<value>\d+)", re.MULTILINE)
ARTIFACT = re.compile(r"Test unit written to (?P<path>\S+)")
REPORT = re.compile(
    r"^(?:==\d+==\s*ERROR: .*"
    r"|.*runtime error: .*"
    r"|.*invariant broken: .*"
    r"|SUMMARY: .*"
    r"|ALARM: working on the last Unit.*"
    r"|==\d+== ERROR: libFuzzer: .*)$",
    re.MULTILINE,
)
FRAME = re.compile(
    r"^\s+#\d+ 0x[0-9a-f]+ in (?P<func>\S+) (?P<where>\S*firmware/\S+)", re.MULTILINE
)

CORE_LOCATION = re.compile(r"\S*firmware/core/[\w.]+:\d+(?::\d+)?")


@dataclass
class Result:
    """What one target's run gave."""

    target: str
    seconds: float = 0.0
    executions: int = 0
    exec_per_sec: int = 0
    cov: int = 0
    ft: int = 0
    corpus: int = 0
    new_units: int = 0
    peak_rss_mb: int = 0
    returncode: int = 0
    reports: list[str] = field(default_factory=list)  # first lines of each report
    frames: list[str] = field(default_factory=list)  # project stack frames (func file:line)
    core_location: str = ""  # the first firmware/core file:line in the report, if any
    crashes: list[str] = field(default_factory=list)  # inputs kept in the crash directory
    regressions: list[str] = field(default_factory=list)  # old crash inputs crashing again
    log: str = ""

    @property
    def failed(self) -> bool:
        return bool(self.returncode or self.reports or self.crashes or self.regressions)


def parse_output(target: str, text: str) -> Result:
    """Read libFuzzer's output (stderr and stdout together) into a Result."""
    result = Result(target)
    statuses = list(STATUS.finditer(text))
    if statuses:
        last = statuses[-1]
        result.executions = int(last["n"])
        result.cov = int(last["cov"])
        result.ft = int(last["ft"])
        result.corpus = int(last["corp"])
        result.exec_per_sec = int(last["eps"])
    stats = {m["name"]: int(m["value"]) for m in STAT.finditer(text)}
    result.executions = stats.get("number_of_executed_units", result.executions)
    result.exec_per_sec = stats.get("average_exec_per_sec", result.exec_per_sec)
    result.new_units = stats.get("new_units_added", 0)
    result.peak_rss_mb = stats.get("peak_rss_mb", 0)
    result.reports = list(dict.fromkeys(m.group(0).strip() for m in REPORT.finditer(text)))
    frames = (f"{m['func']} {m['where']}" for m in FRAME.finditer(text))
    result.frames = list(dict.fromkeys(frames))[:4]
    core = CORE_LOCATION.search("\n".join([*result.reports, *result.frames]))
    result.core_location = core.group(0) if core else ""
    result.crashes = [m["path"] for m in ARTIFACT.finditer(text)]
    return result


def find_cc(requested: str | None) -> str | None:
    cc = requested or os.environ.get("FUZZ_CC") or "clang"
    return cc if shutil.which(cc) else None


def sanitizer_env() -> dict[str, str]:
    """Environment for the targets: stop at the first report, symbolize if possible."""
    env = dict(os.environ)
    symbolizer = shutil.which("llvm-symbolizer") or shutil.which("llvm-symbolizer-14")
    if symbolizer is None and Path("/usr/lib/llvm-14/bin/llvm-symbolizer").exists():
        symbolizer = "/usr/lib/llvm-14/bin/llvm-symbolizer"
    sym = f"external_symbolizer_path={symbolizer}" if symbolizer else "allow_addr2line=1"
    env["ASAN_OPTIONS"] = f"detect_leaks=1:symbolize=1:{sym}"
    env["UBSAN_OPTIONS"] = f"print_stacktrace=1:halt_on_error=1:symbolize=1:{sym}"
    return env


def build(cc: str, jobs: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "-s", f"-j{jobs}", "-C", str(ROOT / "firmware"), "fuzz", f"FUZZ_CC={cc}"],
        capture_output=True,
        text=True,
    )


def all_targets() -> list[str]:
    return sorted(p.stem for p in FUZZ_SRC.glob("fuzz_*.c"))


def replay_crashes(target: str, env: dict[str, str]) -> tuple[list[str], str]:
    """Run the kept crash inputs of a target once each; return those that still fail."""
    binary = BUILD / target
    failing: list[str] = []
    logs: list[str] = []
    directory = CRASHES / target
    for path in sorted(p for p in directory.glob("*") if p.is_file()) if directory.is_dir() else []:
        proc = subprocess.run(
            [str(binary), f"-timeout={UNIT_TIMEOUT}", str(path)],
            capture_output=True,
            text=True,
            env=env,
            timeout=UNIT_TIMEOUT + 60,
        )
        if proc.returncode != 0:
            failing.append(str(path))
            logs.append(f"---- replay of {path}\n{proc.stderr}{proc.stdout}")
    return failing, "".join(logs)


def run_target(
    target: str,
    seconds: int,
    env: dict[str, str],
    fresh: bool,
    work_root: Path = WORK,
    runs: int | None = None,
) -> Result:
    binary = BUILD / target
    work = work_root / target
    crashes = CRASHES / target
    if fresh and work.exists():
        shutil.rmtree(work)
    for d in (work, crashes, LOGS):
        d.mkdir(parents=True, exist_ok=True)
    regressions, replay_log = replay_crashes(target, env)
    seeds = CORPUS / target
    cmd = [
        str(binary),
        f"-max_total_time={seconds}",
        *([f"-runs={runs}"] if runs is not None else []),
        f"-max_len={MAX_LEN}",
        f"-timeout={UNIT_TIMEOUT}",
        "-rss_limit_mb=2048",
        "-print_final_stats=1",
        f"-artifact_prefix={crashes}/",
        str(work),
        *([str(seeds)] if seeds.is_dir() else []),
    ]
    started = time.monotonic()
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            errors="replace",
            env=env,
            timeout=seconds + 300,
        )
        text, code = proc.stderr + proc.stdout, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stderr or b""
        text = (out.decode(errors="replace") if isinstance(out, bytes) else out) + (
            f"\nfuzz_c.py: {target} still running after {seconds + 300} s: killed\n"
        )
        code = -9
    log = LOGS / f"{target}.log"
    log.write_text(replay_log + "$ " + " ".join(cmd) + "\n" + text, encoding="utf-8")
    result = parse_output(target, text)
    result.seconds = round(time.monotonic() - started, 1)
    result.returncode = code
    result.regressions = regressions
    result.log = str(log)
    if code == -9:
        result.reports.append(f"killed after {seconds + 300} s")
    return result


def describe_input(path: Path, limit: int = 256) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return f"{path} (unreadable)"
    shown = data[:limit].hex()
    more = f"... ({len(data)} bytes in all)" if len(data) > limit else f" ({len(data)} bytes)"
    return shown + more


def print_report(results: Sequence[Result], size: str) -> None:
    print(f"\nlibFuzzer, {size}")
    header = (
        f"{'target':<12} {'executions':>11} {'exec/s':>8} {'cov':>6} {'ft':>7}"
        f" {'corpus':>7} {'crashes':>8}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        crashes = len(r.crashes) + len(r.regressions) or int(r.failed)
        print(
            f"{r.target:<12} {r.executions:>11} {r.exec_per_sec:>8} {r.cov:>6} {r.ft:>7}"
            f" {r.corpus:>7} {crashes:>8}"
        )
    for r in results:
        if not r.failed:
            continue
        print(f"\n{r.target}: FAILED (exit {r.returncode}); log: {r.log}")
        for line in r.reports[:6]:
            print(f"  {line}")
        for frame in r.frames:
            print(f"  at {frame}")
        if r.core_location:
            print(f"  core: {r.core_location}")
        for path in [*r.crashes, *r.regressions]:
            print(f"  input: {path}")
            print(f"    hex: {describe_input(Path(path))}")
            print(f"    reproduce: {BUILD / r.target} {path}")
        if r.regressions:
            print(f"  {len(r.regressions)} kept crash input(s) still crash")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Build, seed and run the libFuzzer targets of firmware/fuzz.",
        epilog="--long is the longer run (600 s per target), e.g. before a release.",
    )
    time_group = parser.add_mutually_exclusive_group()
    time_group.add_argument(
        "--seconds", type=int, default=DEFAULT_SECONDS, help="per target (default %(default)s)"
    )
    time_group.add_argument("--long", action="store_true", help=f"{LONG_SECONDS} s per target")
    parser.add_argument(
        "--runs",
        type=int,
        help="stop each target after this many inputs, --seconds being then only the"
        " ceiling: a run of a known size however loaded the machine is",
    )
    parser.add_argument("--target", action="append", help="only this target (repeatable)")
    parser.add_argument(
        "--jobs",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="targets run at once (default %(default)s)",
    )
    parser.add_argument("--cc", help="clang to build with (default $FUZZ_CC or clang)")
    parser.add_argument(
        "--work",
        type=Path,
        default=WORK,
        help="growing corpora, one folder per target (%(default)s)",
    )
    parser.add_argument("--fresh", action="store_true", help="empty the --work corpora first")
    parser.add_argument(
        "--no-build", action="store_true", help="run the binaries in build/fuzz as they are"
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    seconds = LONG_SECONDS if args.long else args.seconds
    if seconds < 1 or args.jobs < 1 or (args.runs is not None and args.runs < 1):
        parser.error("--seconds, --runs and --jobs must be at least 1")

    cc = find_cc(args.cc)
    if cc is None:
        print(
            f"fuzz_c.py: no clang ({args.cc or os.environ.get('FUZZ_CC') or 'clang'}) on PATH;"
            f" install the Debian packages {DEBIAN_PACKAGES}",
            file=sys.stderr,
        )
        return 2
    targets = all_targets()
    if args.target:
        unknown = sorted(set(args.target) - set(targets))
        if unknown:
            parser.error(f"unknown target(s) {', '.join(unknown)}; known: {', '.join(targets)}")
        targets = [t for t in targets if t in args.target]

    if not args.no_build:
        print(f"building the fuzz targets with {cc} ...", flush=True)
        made = build(cc, args.jobs)
        if made.returncode != 0:
            print(made.stdout + made.stderr, file=sys.stderr)
            hint = ""
            if "fuzzer" in made.stderr:
                hint = f" (is the libFuzzer runtime installed? Debian: {DEBIAN_PACKAGES})"
            print(f"fuzz_c.py: make fuzz failed{hint}", file=sys.stderr)
            return 2
    missing = [t for t in targets if not (BUILD / t).is_file()]
    if missing:
        print(f"fuzz_c.py: not built: {', '.join(missing)}", file=sys.stderr)
        return 2
    counts = fuzz_corpus.write(CORPUS, fuzz_corpus.seeds())
    print("seeds: " + ", ".join(f"{t} {counts.get(t, 0)}" for t in targets), flush=True)

    env = sanitizer_env()
    size = f"{seconds} s per target"
    if args.runs:
        size = f"{args.runs} inputs per target (at most {seconds} s)"
    print(f"running {len(targets)} targets, {size}, {args.jobs} at a time", flush=True)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(
            pool.map(
                lambda t: run_target(t, seconds, env, args.fresh, args.work, args.runs), targets
            )
        )
    print_report(results, size)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "seconds": seconds,
                    "results": [asdict(r) | {"failed": r.failed} for r in results],
                },
                indent=2,
            ),
            encoding="utf-8",
        )
    failed = [r.target for r in results if r.failed]
    if failed:
        print(f"\nFAILED: {', '.join(failed)}")
        return 1
    print("\nno crash, no sanitizer report")
    return 0


if __name__ == "__main__":
    sys.exit(main())
