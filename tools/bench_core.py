"""Exact instruction counts of the firmware core's operations on Cortex-M3 and rv32.

    python tools/bench_core.py [--machine mps2-an385|sifive_e] [--method plugin|trace]
                               [--cross-check] [--regions] [--no-build]

Builds the bare-metal benchmark images (``make -C firmware bench``: firmware/bench/
bench_main.c with a machine's startup.c and link.ld, against build/<arch>/libhmcore.a)
and runs each once in QEMU: Cortex-M3 on ``qemu-system-arm -M mps2-an385``, rv32imac
on ``qemu-system-riscv32 -M sifive_e`` (the FE310 of the HiFive1, 16 KB of RAM).

Counting. The image calls ``bench_mark()`` before and after each operation and prints
one ``region`` line per operation through semihosting. With ``--method plugin``
(default) the TCG plugin firmware/bench/hm_icount.c puts an inline counter increment
in front of every translated guest instruction and logs the counter each time
bench_mark's first instruction is about to run; instructions inside memcpy/memset
(address ranges from ``nm -S``) are also counted apart, call by call, so that a row can
leave out the payload copy of a capture. With ``--method trace`` QEMU
runs one instruction per translation block (``-singlestep``) and logs every block it
executes (``-d exec,nochain``), so each log line is one executed instruction; the
same counters are derived from the logged addresses. Both are exact (no sampling, no
timing) and agree to the instruction; ``--cross-check`` runs both and compares every
region. A region's count is the instructions from one mark to the next minus the
two of the marks themselves (measured by an empty region, ``calibrate``): it includes
the argument set-up of the call.

Each image checks every result against a known answer and exits non-zero on the first
mismatch, so broken code is never measured. Stack high-water marks come from the
image (stack painted before each operation, scanned after; bytes below the caller's
stack pointer). The FE310 lines add the working-memory ring, the deepest stack, the
frame buffers and the reassembly buffer of the default configuration against 16 KB;
the whole agent as the HiFive1 image configures and runs it (static RAM plus the
measured stack high-water mark) is tools/bench_boards.py's figure.
``--regions`` lists every measured region with its copy calls and stack.

Exit status: 0 every goal met, 1 a goal missed, 2 a build, run or self-check failed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "bench"
PLUGIN = BUILD / "hm_icount.so"
PLUGIN_TIMEOUT = 120.0  # seconds; a run takes well under one
TRACE_TIMEOUT = 900.0  # the trace streams about 20 M log lines through Python
COPY_FUNCTIONS = ("memcpy", "memmove", "memset")
FE310_RAM = 16 * 1024


class BenchError(Exception):
    """A build, a QEMU run or the image's own self-check failed."""


@dataclass(frozen=True)
class Machine:
    name: str  # QEMU machine, firmware/bench/<name>/, build/bench/<name>/
    label: str  # column title
    qemu: str
    binutils: str  # tool prefix
    thumb: bool  # ARM Thumb: function symbols carry bit 0

    @property
    def elf(self) -> Path:
        return BUILD / self.name / "bench.elf"


MACHINES = (
    Machine("mps2-an385", "Cortex-M3", "qemu-system-arm", "arm-none-eabi-", True),
    Machine("sifive_e", "rv32imac", "qemu-system-riscv32", "riscv64-unknown-elf-", False),
)
CORTEX_M3 = "mps2-an385"
FE310 = "sifive_e"


@dataclass(frozen=True)
class Mark:
    """Counters when bench_mark was entered: instructions executed so far, those inside
    copy functions, and the copy count at each copy-function entry since the last mark."""

    total: int
    copied: int
    copy_entries: tuple[int, ...]


@dataclass(frozen=True)
class Region:
    name: str  # "group" or "group/index"
    instructions: int  # between the marks, the marks' own instructions excluded
    copy_calls: tuple[int, ...]  # instructions of each memcpy/memset call, in order
    stack_used: int  # bytes below the caller's stack pointer
    stack_depth: int  # bytes below the top of the stack

    @property
    def group(self) -> str:
        return self.name.split("/", 1)[0]

    @property
    def copied(self) -> int:
        return sum(self.copy_calls)


@dataclass(frozen=True)
class BenchRun:
    machine: Machine
    method: str
    regions: tuple[Region, ...]
    sizes: dict[str, int]  # "size" lines: sizeof core structures and buffers
    ram: dict[str, int]  # "ram" lines: static, total

    def select(self, selector: str) -> list[Region]:
        """Regions named `selector` exactly, or all of the group `selector`."""
        return [r for r in self.regions if selector in (r.name, r.group)]


# ---- building and running ------------------------------------------------------------


def build() -> None:
    """``make -C firmware bench`` (the cross libraries, both images, the plugin)."""
    proc = subprocess.run(
        ["make", "-s", "-C", str(ROOT / "firmware"), "bench"], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise BenchError(f"make bench failed:\n{proc.stdout}{proc.stderr}")


def symbols(machine: Machine, elf: Path) -> dict[str, tuple[int, int]]:
    """Defined symbols with a size: name -> (address, size); Thumb bit cleared."""
    proc = subprocess.run(
        [machine.binutils + "nm", "-S", "--defined-only", str(elf)],
        capture_output=True,
        text=True,
        check=True,
    )
    table: dict[str, tuple[int, int]] = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 4:
            address = int(parts[0], 16)
            if machine.thumb and parts[2] in "Tt":
                address &= ~1
            table[parts[3]] = (address, int(parts[1], 16))
    return table


def counting_targets(machine: Machine) -> tuple[int, list[tuple[int, int]]]:
    """bench_mark's address and the [lo, hi) ranges of the copy functions."""
    table = symbols(machine, machine.elf)
    if "bench_mark" not in table:
        raise BenchError(f"{machine.elf}: no bench_mark symbol")
    ranges = sorted(
        {(table[n][0], table[n][0] + table[n][1]) for n in COPY_FUNCTIONS if n in table}
    )
    return table["bench_mark"][0], ranges


def qemu_command(machine: Machine) -> list[str]:
    return [
        machine.qemu,
        "-M",
        machine.name,
        "-nographic",
        "-monitor",
        "none",
        "-serial",
        "none",
        "-semihosting-config",
        "enable=on,target=native",
        "-kernel",
        str(machine.elf),
    ]


def parse_events(lines: Iterable[str]) -> list[Mark]:
    """The plugin's "mark TOTAL COPIED" and "copy COPIED" lines as marks."""
    marks: list[Mark] = []
    entries: list[int] = []
    for line in lines:
        fields = line.split()
        if fields[:1] == ["mark"]:
            marks.append(Mark(int(fields[1]), int(fields[2]), tuple(entries)))
            entries = []
        elif fields[:1] == ["copy"]:
            entries.append(int(fields[1]))
    return marks


def run_plugin(machine: Machine) -> tuple[int, str, list[Mark]]:
    """Run the image with hm_icount: (exit code, semihosting output, marks)."""
    mark, ranges = counting_targets(machine)
    with tempfile.TemporaryDirectory(prefix="hm-bench-") as tmp:
        log = Path(tmp) / "marks.txt"
        args = [f"out={log}", f"mark={mark:#x}"] + [f"copy={lo:#x}-{hi:#x}" for lo, hi in ranges]
        cmd = [*qemu_command(machine), "-plugin", ",".join([str(PLUGIN), *args])]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PLUGIN_TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            raise BenchError(
                f"{machine.name}: QEMU did not exit within {PLUGIN_TIMEOUT:.0f} s"
            ) from exc
        marks = parse_events(log.read_text().splitlines()) if log.exists() else []
    # The semihosting console is QEMU's stderr.
    return proc.returncode, proc.stderr, marks


def run_trace(machine: Machine) -> tuple[int, str, list[Mark]]:
    """Run the image single-stepped, QEMU's exec log streamed through a FIFO."""
    mark, ranges = counting_targets(machine)
    starts = {lo for lo, _ in ranges}
    with tempfile.TemporaryDirectory(prefix="hm-bench-") as tmp:
        fifo = Path(tmp) / "exec.log"
        os.mkfifo(fifo)
        cmd = [*qemu_command(machine), "-singlestep", "-d", "exec,nochain", "-D", str(fifo)]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        stderr: list[str] = []

        def drain() -> None:
            if proc.stderr is not None:
                stderr.append(proc.stderr.read())

        reader = threading.Thread(target=drain)
        reader.start()
        watchdog = threading.Timer(TRACE_TIMEOUT, proc.kill)
        watchdog.start()
        marks: list[Mark] = []
        entries: list[int] = []
        total = copied = 0
        try:
            with open(fifo, "rb") as log:
                for line in log:
                    # "Trace 0: 0x<host> [<cs_base>/<pc>/<flags>/<cflags>] <symbol>"
                    if not line.startswith(b"Trace"):
                        continue
                    pc = int(line[line.index(b"[") + 1 :].split(b"/", 2)[1], 16)
                    if pc == mark:
                        marks.append(Mark(total, copied, tuple(entries)))
                        entries = []
                    if pc in starts:
                        entries.append(copied)
                    total += 1
                    for lo, hi in ranges:
                        if lo <= pc < hi:
                            copied += 1
                            break
            code = proc.wait()
        finally:
            watchdog.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            reader.join()
    return code, "".join(stderr), marks


def copy_costs(before: Mark, after: Mark) -> tuple[int, ...]:
    """Instructions of each copy call between two marks (calls do not nest)."""
    bounds = [*after.copy_entries, after.copied]
    return tuple(bounds[i + 1] - bounds[i] for i in range(len(after.copy_entries)))


def run_image(machine: Machine, method: str = "plugin") -> BenchRun:
    """Run one image, require that it passed its own checks, pair marks with regions."""
    if method == "plugin":
        code, output, marks = run_plugin(machine)
    elif method == "trace":
        code, output, marks = run_trace(machine)
    else:
        raise ValueError(f"unknown counting method {method!r}")
    lines = output.splitlines()
    failures = [line for line in lines if line.startswith("FAIL")]
    if code != 0 or failures or "done" not in lines:
        detail = "\n".join(failures or lines[-5:])
        raise BenchError(f"{machine.name}: the image exited {code}\n{detail}")

    named: list[tuple[str, int, int]] = []
    sizes: dict[str, int] = {}
    ram: dict[str, int] = {}
    for line in lines:
        fields = line.split()
        if fields[:1] == ["region"] and len(fields) == 4:
            named.append((fields[1], int(fields[2]), int(fields[3])))
        elif fields[:1] == ["size"] and len(fields) == 3:
            sizes[fields[1]] = int(fields[2])
        elif fields[:1] == ["ram"] and len(fields) == 3:
            ram[fields[1]] = int(fields[2])
    if len(marks) != 2 * len(named):
        raise BenchError(
            f"{machine.name}: {len(marks)} marks counted for {len(named)} regions "
            "(expected two per region)"
        )
    pairs = [(marks[2 * k], marks[2 * k + 1]) for k in range(len(named))]
    overhead = [
        b.total - a.total
        for (name, _, _), (a, b) in zip(named, pairs, strict=True)
        if name == "calibrate"
    ]
    if len(overhead) != 1:
        raise BenchError(f"{machine.name}: expected one calibrate region")
    regions = tuple(
        Region(
            name, after.total - before.total - overhead[0], copy_costs(before, after), used, depth
        )
        for (name, used, depth), (before, after) in zip(named, pairs, strict=True)
    )
    return BenchRun(machine, method, regions, sizes, ram)


# ---- the report ------------------------------------------------------------------------


# What a row leaves out of each region's count.
ALL = "all"  # nothing: every instruction between the marks
NO_COPIES = "no-copies"  # every instruction inside memcpy/memset
NO_PAYLOAD_COPY = "no-payload-copy"  # the payload's memcpy: the region's costliest copy call


@dataclass(frozen=True)
class Row:
    label: str
    selectors: tuple[str, ...]  # regions summed; a group contributes its worst member
    goal: int | None = None
    goal_on: tuple[str, ...] = (CORTEX_M3, FE310)  # machines the goal applies to
    leave_out: str = ALL


ROWS = (
    Row("HIR gate evaluate, worst of 34 vectors", ("gate.evaluate",), 600),
    Row("HIR gate evaluate, all checks pass", ("gate.evaluate/00",), 600),
    Row(
        "ring capture, no eviction (excl. payload copy)",
        ("ring.capture",),
        300,
        leave_out=NO_PAYLOAD_COPY,
    ),
    Row(
        "ring capture, 1 eviction (excl. payload copy)",
        ("ring.capture_evict",),
        300,
        leave_out=NO_PAYLOAD_COPY,
    ),
    Row(
        "ring capture, 1 eviction, outside all copies", ("ring.capture_evict",), leave_out=NO_COPIES
    ),
    Row("ring capture, 1 eviction, everything", ("ring.capture_evict",)),
    Row("ring gate (normalise, gate, state)", ("ring.gate",)),
    Row("CRC-32 of 256 B", ("crc32.256",)),
    Row("frame encode, 256 B body", ("frame.encode",)),
    Row("frame decode, 256 B body (byte loop)", ("frame.decode",)),
    Row("frame encode + decode, 256 B body", ("frame.encode", "frame.decode")),
    Row("CBOR: CAPTURE_RESULT encode (hm_msg, 63 B)", ("msg.encode",)),
    Row("CBOR: CAPTURE_RESULT decode (hm_msg)", ("msg.decode",)),
    Row("CBOR: record, 20 fields (hm_cbor, 195 B)", ("record.encode",)),
    Row("record hash (CBOR + SHA-256)", ("record.hash",)),
    Row("SHA-256 of 1 KB", ("sha256.1k",)),
    Row("Ed25519 public key from seed", ("ed25519.public_key",)),
    Row("Ed25519 sign, 127 B", ("ed25519.sign",), 6_000_000, (CORTEX_M3,)),
    Row("Ed25519 verify, 127 B", ("ed25519.verify",), 12_000_000, (CORTEX_M3,)),
    Row("session PROOF: SHA-256 of HELLO + sign 91 B", ("session.proof",)),
    Row("HELLO_ACK echo: SHA-256 of HELLO + 16 B compare", ("session.echo_check",)),
    Row("Ed25519 verify, 127 B, rejected", ("ed25519.verify_reject",)),
    Row("NV store: mount, 2 pages of 256 B, erased", ("persist.mount_empty",)),
    Row("NV store: mount, 3 records", ("persist.mount",)),
    Row("NV store: boot counter saved (append)", ("persist.boot",)),
    Row("NV store: save a chain head (append)", ("persist.save",)),
    Row("NV store: save with a page erase", ("persist.save_erase",)),
)

STACK_ROWS = (
    ("Ed25519 sign", "ed25519.sign"),
    ("Ed25519 verify", "ed25519.verify"),
    ("Ed25519 public key", "ed25519.public_key"),
    ("SHA-256", "sha256.1k"),
    ("CAPTURE_RESULT decode", "msg.decode"),
    ("ring capture", "ring.capture_evict"),
    ("HIR gate evaluate", "gate.evaluate"),
)


def counted(region: Region, leave_out: str) -> int:
    if leave_out == NO_COPIES:
        return region.instructions - region.copied
    if leave_out == NO_PAYLOAD_COPY:
        if not region.copy_calls:
            raise BenchError(f"{region.name}: no copy call, so no payload copy to leave out")
        return region.instructions - max(region.copy_calls)
    return region.instructions


def row_value(run: BenchRun, row: Row) -> int | None:
    total = 0
    for selector in row.selectors:
        regions = run.select(selector)
        if not regions:
            return None
        total += max(counted(r, row.leave_out) for r in regions)
    return total


def verdict(value: int | None, goal: int | None) -> tuple[str, bool]:
    """("met (n left)" or "MISSED by n", missed?)."""
    if value is None or goal is None:
        return ("-" if goal is None or value is not None else "not measured"), False
    if value <= goal:
        return f"met ({goal - value:,} left)", False
    return f"MISSED by {value - goal:,}", True


def fmt(value: int | None) -> str:
    return "n/a" if value is None else f"{value:,}"


def instruction_table(runs: Sequence[BenchRun]) -> tuple[list[str], bool]:
    head = f"{'operation':<48}" + "".join(f"{r.machine.label:>12}" for r in runs)
    head += f"  {'goal':<15}" + "".join(f"{r.machine.label:<24}" for r in runs)
    lines = [head.rstrip(), "-" * len(head.rstrip())]
    missed = False
    for row in ROWS:
        values = [row_value(run, row) for run in runs]
        goal = f"<= {row.goal:,}" if row.goal is not None else ""
        line = f"{row.label:<48}" + "".join(f"{fmt(v):>12}" for v in values) + f"  {goal:<15}"
        for run, value in zip(runs, values, strict=True):
            applies = row.goal if run.machine.name in row.goal_on else None
            text, miss = verdict(value, applies)
            missed |= miss
            line += f"{text:<24}"
        lines.append(line.rstrip())
    return lines, missed


def copy_note(runs: Sequence[BenchRun]) -> list[str]:
    parts = []
    for run in runs:
        captures = run.select("ring.capture") + run.select("ring.capture_evict")
        if captures:
            payload = sorted({max(r.copy_calls) for r in captures if r.copy_calls})
            calls = sorted({len(r.copy_calls) for r in captures})
            parts.append(
                f"{run.machine.label} {'/'.join(map(str, calls))} copy call(s) per capture, "
                f"payload copy {'/'.join(map(str, payload))} instructions"
            )
    if not parts:
        return []
    return [
        "excl. payload copy: the memcpy call that copies the 64-byte payload into the arena "
        "(the costliest copy of a capture) is left out; the 5-byte source copy and the "
        "32-byte context copy are counted (" + "; ".join(parts) + ")."
    ]


def stack_table(runs: Sequence[BenchRun]) -> list[str]:
    head = f"{'stack high-water, bytes below the caller':<48}" + "".join(
        f"{r.machine.label:>12}" for r in runs
    )
    lines = [head, "-" * len(head)]
    for label, selector in STACK_ROWS:
        cells = []
        for run in runs:
            regions = run.select(selector)
            cells.append(fmt(max(r.stack_used for r in regions) if regions else None))
        lines.append(f"{label:<48}" + "".join(f"{c:>12}" for c in cells))
    deepest = []
    for run in runs:
        top = max(run.regions, key=lambda r: r.stack_used)
        deepest.append(f"{top.stack_used:,}")
    lines.append(f"{'deepest of all operations':<48}" + "".join(f"{c:>12}" for c in deepest))
    return lines


def ram_budget(run: BenchRun) -> tuple[list[str], bool]:
    """The FE310 budget: ring + deepest stack + link buffers <= 16 KB; and this image."""
    deepest = max(run.regions, key=lambda r: r.stack_used)
    items: list[tuple[str, int | None]] = [
        ("working-memory ring, 16 records (sizeof hm_ring)", run.sizes.get("ring")),
        (f"deepest stack ({deepest.name})", deepest.stack_used),
        ("frame receiver (sizeof hm_frame_rx)", run.sizes.get("frame_rx")),
        ("frame transmit buffer (HM_FRAME_WIRE_BOUND)", run.sizes.get("frame_tx")),
        ("message body buffer (HM_MAX_FRAME)", run.sizes.get("msg_body")),
        ("frame-piece joining (sizeof hm_join)", run.sizes.get("join")),
        ("NV store state (hm_persist, hm_nv, hm_nvram)", run.sizes.get("persist")),
        ("NV region (hifive1: the end of the DTIM)", run.sizes.get("nv_region")),
    ]
    lines = [
        f"FE310 RAM budget ({FE310_RAM:,} bytes): the core's buffers, default sizes",
        "(the whole agent on the HiFive1 board: tools/bench_boards.py)",
        "-" * 60,
    ]
    total = 0
    for label, value in items:
        lines.append(f"{label:<50}{fmt(value):>10}")
        total += value or 0
    text, missed = verdict(total, FE310_RAM)
    lines.append(f"{'total':<50}{total:>10,}  {text}")
    static, size = run.ram.get("static", 0), run.ram.get("total", FE310_RAM)
    depth = max(r.stack_depth for r in run.regions)
    image_text, image_missed = verdict(static + depth, size)
    lines.append(
        f"this image: static RAM {static:,} + deepest stack from the top {depth:,} = "
        f"{static + depth:,} of {size:,}: {image_text}"
    )
    return lines, missed or image_missed


def cross_check(plugin: BenchRun, trace: BenchRun) -> list[str]:
    """Differences between the two counting methods (empty: identical)."""
    problems = []
    if [r.name for r in plugin.regions] != [r.name for r in trace.regions]:
        return [f"{plugin.machine.name}: the two runs measured different regions"]
    for a, b in zip(plugin.regions, trace.regions, strict=True):
        if (a.instructions, a.copied, a.copy_calls) != (b.instructions, b.copied, b.copy_calls):
            problems.append(
                f"{plugin.machine.name} {a.name}: plugin {a.instructions}/{a.copied}/"
                f"{a.copy_calls}, trace {b.instructions}/{b.copied}/{b.copy_calls}"
            )
    return problems


def region_listing(runs: Sequence[BenchRun]) -> list[str]:
    """Every region as measured: instructions, those in copy calls, stack."""
    lines = []
    for run in runs:
        lines += ["", f"{run.machine.label} ({run.machine.name}): every region"]
        lines.append(
            f"{'region':<28}{'instructions':>13}{'in copies':>11}  "
            f"{'stack':>6}{'depth':>7}  copy calls"
        )
        for r in run.regions:
            calls = " ".join(map(str, r.copy_calls[:8])) + (" ..." if len(r.copy_calls) > 8 else "")
            lines.append(
                f"{r.name:<28}{r.instructions:>13,}{r.copied:>11,}  "
                f"{r.stack_used:>6}{r.stack_depth:>7}  {calls}"
            )
    return lines


def report(runs: Sequence[BenchRun]) -> tuple[str, bool]:
    method = runs[0].method
    how = (
        "TCG plugin, an inline counter per instruction"
        if method == "plugin"
        else "-singlestep -d exec,nochain trace, one line per instruction"
    )
    out = [
        f"hirmem core: instructions executed per operation in QEMU 7.2 ({how}); "
        "gcc 12 -Os -flto (the core; the bench caller without), picolibc",
        "",
    ]
    table, missed = instruction_table(runs)
    out += table
    note = copy_note(runs)
    if note:
        out += ["", *note]
    out += ["", *stack_table(runs)]
    for run in runs:
        if run.machine.name == FE310:
            budget, over = ram_budget(run)
            out += ["", *budget]
            missed |= over
    return "\n".join(out), missed


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--machine",
        choices=[m.name for m in MACHINES],
        action="append",
        help="run only this machine (repeatable; default: all)",
    )
    parser.add_argument(
        "--method",
        choices=("plugin", "trace"),
        default="plugin",
        help="how to count (default: plugin)",
    )
    parser.add_argument(
        "--cross-check",
        action="store_true",
        help="count with both methods and require identical counts",
    )
    parser.add_argument("--no-build", action="store_true", help="use the images as built")
    parser.add_argument("--regions", action="store_true", help="also list every region")
    args = parser.parse_args(None if argv is None else list(argv))
    machines = [m for m in MACHINES if args.machine is None or m.name in args.machine]
    try:
        if not args.no_build:
            build()
        runs = [run_image(m, args.method) for m in machines]
        problems: list[str] = []
        if args.cross_check:
            other = "trace" if args.method == "plugin" else "plugin"
            for run in runs:
                problems += cross_check(run, run_image(run.machine, other))
    except (BenchError, OSError, subprocess.CalledProcessError) as exc:
        print(f"bench_core: {exc}", file=sys.stderr)
        return 2
    text, missed = report(runs)
    print(text)
    if args.regions:
        print("\n".join(region_listing(runs)))
    if args.cross_check:
        print()
        if problems:
            print("cross-check: the plugin and the trace DISAGREE")
            print("\n".join(problems))
            return 2
        print(
            f"cross-check: plugin and trace counts identical for all "
            f"{sum(len(r.regions) for r in runs)} regions"
        )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
