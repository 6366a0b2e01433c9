"""Figures of the host daemon: four emulated devices into the durable store.

    python tools/bench_daemon.py [--seconds 20] [--sensor-ms 5] [--faults 0.01]
                                 [--repeat 3] [--stall-only]

Boots four provisioned boards in QEMU (two mps2-an385, one HiFive1, one STM32F4)
with their synthetic sensors at full rate, serves them with one in-process daemon
and measures, over a window after a warm-up:

- records per second committed to the store (all devices together);
- host CPU time per record and per MB read from the lines: this process's CPU time
  (the daemon's threads, the SQLite commits, pack verification); QEMU's own CPU is
  not counted (it is the devices' time);
- latency from capture on the device (the record's timestamp, the device's wall
  clock set by the host at the handshake) to durable commit (the pack's ``received``
  time, taken in the commit's transaction), p50 and p99.

Each at full load (``--sensor-ms``: the boards saturate, throughput) and at light
load (``--light-ms``: latency without queueing in the devices' rings), and each
also through fault-injection proxies at ``--faults`` (the share of frames
hit by a fault: dropped, duplicated, reordered or corrupted, split evenly, both
directions). Then, at each load, the stall comparison: the four boards without and
with a fifth line whose peer stops reading (a simulated device in a child process
that keeps sending what draws answers), ``--repeat`` runs of each, alternated so
that a change in the machine's load meets both rows alike. Both rows are printed as
mean ± standard deviation, and each figure's difference against its noise (twice
the larger of the two rows' run-to-run standard deviations): the boards' records/s,
p50 and p99 must match within noise (exit status 1 if not). Emulator speed bounds
what a board produces; the figures are for this machine, in this run.

    python tools/bench_daemon.py --simulated [--seconds 10] [--repeat 3] [--stall-only]

Rows with simulated devices instead (:class:`hirmem.emulation.simdevice.SimDevice`,
honest devices written with the host codec, each offering packs of 8 records as
fast as the host takes them): 1, 16 and 64 devices on ``socket://`` lines and on
ptys, and the stall comparison with four devices on sockets. The devices run in a
child process, so the CPU figures are the daemon's alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "host"))

from hirmem.daemon.config import DaemonConfig, build_config  # noqa: E402
from hirmem.daemon.service import Daemon, DeviceWorker  # noqa: E402
from hirmem.daemon.store import Store  # noqa: E402
from hirmem.emulation.faultproxy import FaultPlan, FaultProxy  # noqa: E402
from hirmem.emulation.provision import SlotSettings, provision_image  # noqa: E402
from hirmem.emulation.qemu import QemuBoard  # noqa: E402
from hirmem.emulation.simdevice import SimDevice  # noqa: E402
from hirmem.protocol.keys import SigningKey, derive_test_key  # noqa: E402

HOST_ID = bytes.fromhex("b0b1b2b3b4b5b6b7")
DEVICES = [  # (board, device id)
    ("mps2-an385", bytes.fromhex("be00000000000001")),
    ("mps2-an385", bytes.fromhex("be00000000000002")),
    ("hifive1", bytes.fromhex("be00000000000003")),
    ("stm32f4", bytes.fromhex("be00000000000004")),
]


@dataclass
class Figures:
    records: int
    seconds: float
    cpu_s: float
    latencies_ms: list[int]
    bytes_in: int = 0  # read from every line in the window
    stalled_bytes_in: int = 0  # of it, from the stalled line
    stalled_reconnects: int = 0
    stalled_cpu_s: float = 0.0  # CPU time of the stalled line's worker thread

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    @property
    def cpu_ms_per_record(self) -> float:
        return 1000 * self.cpu_s / self.records if self.records else float("nan")

    @property
    def cpu_s_per_mb(self) -> float:
        return self.cpu_s / (self.bytes_in / 1e6) if self.bytes_in else float("nan")

    def percentile(self, p: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        xs = sorted(self.latencies_ms)
        return float(xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))])


def build() -> None:
    proc = subprocess.run(
        ["make", "-C", str(ROOT / "firmware"), "-j2", "boards"], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"board build failed:\n{proc.stderr[-2000:]}")


def daemon_config(workdir: Path, db: Path, urls: list[str], **host: object) -> DaemonConfig:
    """The daemon both kinds of row run: one line per URL, the store at ``db``."""
    settings: dict[str, object] = {
        "id": HOST_ID.hex(),
        "database": db.name,
        "save_every": 1.0,
        "write_timeout": 2.0,
        **host,
    }
    return build_config({"host": settings, "device": [{"url": u} for u in urls]}, workdir, [])


def measure(daemon: Daemon, db: Path, warmup: float, seconds: float, stalled: int) -> Figures:
    """Serve for ``warmup`` seconds, then measure a window of ``seconds``; the stalled
    lines are the daemon's first ``stalled`` workers. Stops the daemon."""
    daemon.start()
    try:

        def read() -> tuple[int, int]:
            counts = [w.session.counters.bytes_in for w in daemon.workers]
            return sum(counts), sum(counts[:stalled])

        def stalled_cpu() -> float:  # the stalled lines' own threads: no other load in it
            return sum(thread_cpu_s(w) for w in daemon.workers[:stalled])

        time.sleep(warmup)
        count0, cpu0, t0 = daemon.store.count_records(), time.process_time(), time.monotonic()
        wall0, (bytes0, hostile0), hcpu0 = time.time() * 1000, read(), stalled_cpu()
        time.sleep(seconds)
        count1, cpu1, t1 = daemon.store.count_records(), time.process_time(), time.monotonic()
        wall1, (bytes1, hostile1), hcpu1 = time.time() * 1000, read(), stalled_cpu()
        reconnects = sum(w.reconnects for w in daemon.workers[:stalled])
    finally:
        daemon.stop()
    with Store(db) as store:
        received = {p.pack_id: p.received for p in store.packs()}
        latencies = [
            received[pack_id] - rec.timestamp
            for rec, pack_id in store.iter_records(5000)
            if wall0 <= received[pack_id] <= wall1
        ]
    return Figures(count1 - count0, t1 - t0, cpu1 - cpu0, latencies, bytes1 - bytes0,
                   hostile1 - hostile0, reconnects, hcpu1 - hcpu0)  # fmt: skip


def thread_cpu_s(worker: DeviceWorker) -> float:
    """CPU seconds a worker's thread has used (0 once it ended)."""
    ident = worker._thread.ident
    if ident is None or not worker.alive:
        return 0.0
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(ident))
    except OSError:
        return 0.0


@contextmanager
def simulated_devices(count: int, stalled: int, on_pty: bool = False) -> Iterator[list[str]]:
    """A child process serving ``stalled`` devices that stall once open, then ``count``
    honest ones; yields their URLs in that order."""
    pty = ["--pty"] if on_pty else []
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve-sims", str(count), "--stalled", str(stalled), *pty],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        yield json.loads(child.stdout.readline())
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(30)


def run(
    workdir: Path, seconds: float, warmup: float, sensor_ms: int, faults: float, stalled: bool
) -> Figures:
    db = workdir / "bench.db"
    images = []
    with Store(db) as store:
        for board, device_id in DEVICES:
            key = SigningKey.generate()
            store.register_device(device_id, key.public.raw, board)
            settings = SlotSettings(
                device_id,
                key,
                None,
                boot_base=1,
                sensor_period_ms=sensor_ms,
                offer_threshold=8,
                offer_period_ms=500,
            )
            out = workdir / f"{board}-{device_id.hex()}.elf"
            provision_image(ROOT / "build" / "boards" / board / "hirmem.elf", settings, out)
            images.append((board, out))
    share = faults / 4
    plan = FaultPlan(drop_frame=share, dup_frame=share, reorder=share, flip=share / 200)
    with ExitStack() as stack:
        urls: list[str] = []
        if stalled:  # a first line whose peer stops reading once its session is open
            urls.extend(stack.enter_context(simulated_devices(0, 1)))
            with Store(db) as store:
                store.register_device(sim_id(0), sim_key(0).public.raw, "simulated")
        for n, (board, image) in enumerate(images):
            qb = stack.enter_context(QemuBoard(board, image, timeout=seconds + warmup + 120))
            if faults:
                px = stack.enter_context(
                    FaultProxy(
                        qb.url.removeprefix("socket://"),
                        seed=n + 1,
                        to_upstream=plan,
                        to_client=plan,
                    )
                )
                urls.append(px.url)
            else:
                urls.append(qb.url)
        daemon = Daemon(daemon_config(workdir, db, urls, status_every=0))
        return measure(daemon, db, warmup, seconds, int(stalled))


# ---- simulated devices ------------------------------------------------------------------


def sim_key(n: int) -> SigningKey:
    return derive_test_key(f"bench simulated device {n}")


def sim_id(n: int) -> bytes:
    return bytes.fromhex(f"5d{n:014x}")


def serve_sims(count: int, stalled: int, on_pty: bool = False) -> int:
    """Child process: ``stalled`` devices that stall once open, then ``count`` honest ones.

    Prints their URLs as one JSON line, serves until stdin closes.
    """
    import select

    sims = [
        SimDevice(
            sim_id(n),
            sim_key(n),
            records_per_pack=8,
            max_frame=4096,
            wall_timestamps=True,
            on_pty=on_pty,
        ).start()
        for n in range(count + stalled)
    ]
    print(json.dumps([d.url for d in sims]), flush=True)
    hostile = sims[:stalled]
    while not select.select([sys.stdin], [], [], 0.1)[0]:
        for d in hostile:
            if d.sessions and not d.stall_writes:
                d.stall()
    for d in sims:
        d.close()
    return 0


def run_simulated(
    workdir: Path, seconds: float, warmup: float, count: int, stalled: int, on_pty: bool
) -> Figures:
    with simulated_devices(count, stalled, on_pty) as urls:
        db = workdir / "sim.db"
        with Store(db) as store:
            for n in range(count + stalled):
                store.register_device(sim_id(n), sim_key(n).public.raw, "simulated")
        config = daemon_config(workdir, db, urls, max_frame=4096, status_every=5.0)
        return measure(Daemon(config), db, warmup, seconds, stalled)


# ---- the stalled-line comparison --------------------------------------------------------

# (label, value of a run) of the figures compared with and without the stalled line
# (label, digits after the point, value of a run) of the figures compared with and
# without the stalled line
COMPARED: list[tuple[str, int, Callable[[Figures], float]]] = [
    ("records/s", 1, lambda f: f.rate),
    ("CPU ms/record", 3, lambda f: f.cpu_ms_per_record),
    ("CPU s/MB read", 3, lambda f: f.cpu_s_per_mb),
    ("p50 ms", 0, lambda f: f.percentile(50)),
    ("p99 ms", 0, lambda f: f.percentile(99)),
]


def compare_stalled(
    label: str, repeat: int, one_run: Callable[[bool], Figures]
) -> tuple[list[str], bool]:
    """Runs without and with the stalled line, alternated ``repeat`` times (so a change
    of the machine's load meets both alike); the lines to print, and whether every
    throughput and latency figure matched within noise. Noise: twice the larger
    run-to-run standard deviation of the two rows."""
    runs: dict[bool, list[Figures]] = {False: [], True: []}
    for _ in range(repeat):
        for stalled in (False, True):
            runs[stalled].append(one_run(stalled))
    width = 18
    lines = [
        f"{label}: {repeat} runs of each, alternated; mean ± standard deviation",
        f"{'stalled':>8} " + " ".join(f"{name:>{width}}" for name, _, _ in COMPARED)
        + f" {'stalled MB read':>16} {'stalled CPU s':>14} {'reconnects':>10}",
    ]  # fmt: skip
    stats: dict[bool, list[tuple[float, float]]] = {}
    for stalled in (False, True):
        cells, stats[stalled] = [], []
        for _, digits, value in COMPARED:
            xs = [value(f) for f in runs[stalled]]
            mean = statistics.fmean(xs)
            sd = statistics.stdev(xs) if len(xs) > 1 else float("nan")
            stats[stalled].append((mean, sd))
            cells.append(f"{mean:.{digits}f} ± {sd:.{digits}f}".rjust(width))
        mb = statistics.fmean(f.stalled_bytes_in / 1e6 for f in runs[stalled])
        reconnects = statistics.fmean(f.stalled_reconnects for f in runs[stalled])
        hcpu = statistics.fmean(f.stalled_cpu_s for f in runs[stalled])
        lines.append(
            f"{'1 line' if stalled else '-':>8} "
            + " ".join(cells)
            + f" {mb:>16.3f} {hcpu:>14.2f} {reconnects:>10.1f}"
        )
    verdicts, matched = [], True
    for (name, digits, _), (base, base_sd), (hostile, hostile_sd) in zip(
        COMPARED, stats[False], stats[True], strict=True
    ):
        noise = 2 * max(base_sd, hostile_sd)
        ok = abs(hostile - base) <= noise
        if name in ("records/s", "p50 ms", "p99 ms"):
            matched &= ok
        delta = 100 * (hostile - base) / base if base else float("nan")
        verdicts.append(
            f"  {name}: {delta:+.1f} % ({hostile - base:+.{digits}f} against a noise of "
            f"±{noise:.{digits}f}): " + ("within noise" if ok else "NOT within noise")
        )
    return lines + verdicts, matched


def main_simulated(seconds: float, warmup: float, repeat: int, stall_only: bool) -> int:
    rows = []
    cases = [(on_pty, n, 0) for on_pty in (False, True) for n in (1, 16, 64)]
    for on_pty, count, stalled in [] if stall_only else cases:
        with tempfile.TemporaryDirectory(prefix="hm-bench-sim-") as tmp:
            fig = run_simulated(Path(tmp), seconds, warmup, count, stalled, on_pty)
            rows.append((on_pty, count, stalled, fig))

    def one_run(stalled: bool) -> Figures:
        with tempfile.TemporaryDirectory(prefix="hm-bench-sim-") as tmp:
            return run_simulated(Path(tmp), seconds, warmup, 4, int(stalled), False)

    comparison, matched = compare_stalled(
        "four simulated devices on sockets, with and without a stalled fifth", repeat, one_run
    )
    print(f"hirmem daemon: simulated devices, {seconds:.0f} s window after {warmup:.0f} s warm-up")
    print()
    if rows:
        print(
            f"{'line':>7} {'devices':>8} {'records/s':>10} {'CPU ms/record':>14} "
            f"{'CPU s/MB read':>14} {'p50':>8} {'p99':>8}"
        )
        for on_pty, count, _, f in rows:
            print(
                f"{'pty' if on_pty else 'socket':>7} {count:>8} {f.rate:>10.1f} "
                f"{f.cpu_ms_per_record:>14.3f} {f.cpu_s_per_mb:>14.3f} "
                f"{f.percentile(50):>5.0f} ms {f.percentile(99):>5.0f} ms"
            )
        print()
    print("\n".join(comparison))
    print()
    print("latency: record made on the simulated device (wall clock) to the commit of its")
    print("pack. CPU: the daemon's process (the devices run in a child). A stalled line is")
    print("closed at its 2 s write deadline and reopened; its floods are paused.")
    return 0 if matched else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="measured window")
    ap.add_argument("--warmup", type=float, default=4.0)
    ap.add_argument("--sensor-ms", type=int, default=5, help="sensor period at full load")
    ap.add_argument("--light-ms", type=int, default=50, help="sensor period at light load")
    ap.add_argument("--faults", type=float, default=0.01, help="share of frames faulted")
    ap.add_argument("--repeat", type=int, default=3, help="runs per row of the stall comparison")
    ap.add_argument("--stall-only", action="store_true", help="only the stall comparison")
    ap.add_argument("--simulated", action="store_true", help="simulated-device rows instead")
    ap.add_argument("--serve-sims", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--stalled", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--pty", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve_sims is not None:
        return serve_sims(args.serve_sims, args.stalled, args.pty)
    if args.repeat < 2:
        ap.error("--repeat must be at least 2 (the noise is the runs' spread)")
    if args.simulated:
        return main_simulated(args.seconds, args.warmup, args.repeat, args.stall_only)
    build()
    rows = []
    cases = [(ms, faults) for ms in (args.sensor_ms, args.light_ms)
             for faults in (0.0, args.faults)]  # fmt: skip
    for sensor_ms, faults in [] if args.stall_only else cases:
        with tempfile.TemporaryDirectory(prefix="hm-bench-daemon-") as tmp:
            fig = run(Path(tmp), args.seconds, args.warmup, sensor_ms, faults, False)
            rows.append((sensor_ms, faults, fig))
    comparisons, matched = [], True
    for sensor_ms in (args.sensor_ms, args.light_ms):

        def one_run(stalled: bool, sensor_ms: int = sensor_ms) -> Figures:
            with tempfile.TemporaryDirectory(prefix="hm-bench-daemon-") as tmp:
                return run(Path(tmp), args.seconds, args.warmup, sensor_ms, 0.0, stalled)

        lines, ok = compare_stalled(
            f"four boards, sensor every {sensor_ms} ms, with and without a stalled fifth line",
            args.repeat,
            one_run,
        )
        comparisons += [*lines, ""]
        matched &= ok
    print(
        f"hirmem daemon: {len(DEVICES)} emulated devices (QEMU), "
        f"{args.seconds:.0f} s window after {args.warmup:.0f} s warm-up"
    )
    print()
    if rows:
        print(
            f"{'sensor':>7} {'faults':>7} {'records/s':>10} {'records':>8} "
            f"{'CPU ms/record':>14} {'CPU s/MB read':>14} {'latency p50':>12} {'p99':>8}"
        )
        for sensor_ms, faults, f in rows:
            print(
                f"{sensor_ms:>5}ms {faults * 100:>6.1f}% {f.rate:>10.1f} {f.records:>8} "
                f"{f.cpu_ms_per_record:>14.3f} {f.cpu_s_per_mb:>14.3f} "
                f"{f.percentile(50):>9.0f} ms {f.percentile(99):>5.0f} ms"
            )
        print()
    print("\n".join(comparisons))
    print("latency: capture on the device (record timestamp, device wall clock) to the")
    print("commit of its pack (store received time). It includes waiting for a pack of 8")
    print("records (500 ms at most) and any lag of the emulated millisecond tick behind")
    print("real time when QEMU is starved. CPU: this process only (not QEMU, not the")
    print("stalled peer's process). stalled: a fifth line whose peer stops reading and keeps")
    print("sending what draws answers; its floods are paused, and it is closed at its 2 s")
    print("write deadline and reopened. Exit status 1: a stalled row not within noise.")
    return 0 if matched else 1


if __name__ == "__main__":
    sys.exit(main())
