"""Figures of the host daemon: four emulated devices into the durable store.

    python tools/bench_daemon.py [--seconds 20] [--sensor-ms 5] [--faults 0.01]

Boots four provisioned boards in QEMU (two mps2-an385, one HiFive1, one STM32F4)
with their synthetic sensors at full rate, serves them with one in-process daemon
and measures, over a window after a warm-up:

- records per second committed to the store (all devices together);
- host CPU time per record: this process's CPU time (the daemon's threads, the
  SQLite commits, pack verification) over the records committed; QEMU's own CPU is
  not counted (it is the devices' time);
- latency from capture on the device (the record's timestamp, the device's wall
  clock set by the host at the handshake) to durable commit (the pack's ``received``
  time, taken in the commit's transaction), p50 and p99.

Each at full load (``--sensor-ms``: the boards saturate, throughput) and at light
load (``--light-ms``: latency without queueing in the devices' rings), and each
also through fault-injection proxies at ``--faults`` (the share of frames
hit by a fault: dropped, duplicated, reordered or corrupted, split evenly, both
directions). Two more rows put a fifth line beside the four boards whose peer
stops reading (a simulated device in a child process that keeps sending what
draws answers): the boards' figures must match the rows without it. Emulator
speed bounds what a board produces; the figures are for this machine, in this run.

    python tools/bench_daemon.py --simulated [--seconds 10]

Rows with simulated devices instead (:class:`hirmem.emulation.simdevice.SimDevice`,
honest devices written with the host codec, each offering packs of 8 records as
fast as the host takes them): 1, 16 and 64 devices on ``socket://`` lines and on
ptys, and four devices on sockets with and without a fifth whose peer stops
reading (it keeps sending what draws answers, so the daemon's writes to it
block). The devices run in a child process, so the CPU figures are the daemon's
alone; CPU per MB is per MB read from the lines.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "host"))

from hirmem.daemon.config import build_config  # noqa: E402
from hirmem.daemon.service import Daemon  # noqa: E402
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

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

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


def run(
    workdir: Path, seconds: float, warmup: float, sensor_ms: int, faults: float, stalled: bool
) -> SimFigures:
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
        urls = []
        if stalled:  # a fifth line whose peer stops reading once its session is open
            child = subprocess.Popen(
                [sys.executable, __file__, "--serve-sims", "0", "--stalled", "1"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            stack.callback(child.wait, 30)
            assert child.stdin is not None and child.stdout is not None
            stack.callback(child.stdin.close)
            urls.extend(json.loads(child.stdout.readline()))
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
        config = build_config(
            {
                "host": {
                    "id": HOST_ID.hex(),
                    "database": db.name,
                    "status_every": 0,
                    "save_every": 1.0,
                    "write_timeout": 2.0,
                },
                "device": [{"url": u} for u in urls],
            },
            workdir,
            [],
        )
        daemon = Daemon(config)
        daemon.start()
        try:

            def read() -> int:
                return sum(w.session.counters.bytes_in for w in daemon.workers)

            time.sleep(warmup)
            count0, cpu0, t0 = daemon.store.count_records(), time.process_time(), time.monotonic()
            wall0, bytes0 = time.time() * 1000, read()
            time.sleep(seconds)
            count1, cpu1, t1 = daemon.store.count_records(), time.process_time(), time.monotonic()
            wall1, bytes1 = time.time() * 1000, read()
            reconnects = daemon.workers[0].reconnects if stalled else 0
        finally:
            daemon.stop()
    with Store(db) as store:
        received = {p.pack_id: p.received for p in store.packs()}
        latencies = []
        for rec, pack_id in store.iter_records(5000):
            at = received[pack_id]
            if wall0 <= at <= wall1:
                latencies.append(at - rec.timestamp)
    return SimFigures(count1 - count0, t1 - t0, cpu1 - cpu0, latencies, bytes1 - bytes0, reconnects)


# ---- simulated devices ------------------------------------------------------------------


def sim_key(n: int) -> SigningKey:
    return derive_test_key(f"bench simulated device {n}")


def sim_id(n: int) -> bytes:
    return bytes.fromhex(f"5d{n:014x}")


def serve_sims(count: int, stalled: int, on_pty: bool = False) -> int:
    """Child process: ``count`` honest devices and ``stalled`` ones that stall once open.

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
    hostile = sims[count:]
    while not select.select([sys.stdin], [], [], 0.1)[0]:
        for d in hostile:
            if d.sessions and not d.stall_writes:
                d.stall()
    for d in sims:
        d.close()
    return 0


@dataclass
class SimFigures(Figures):
    bytes_in: int = 0
    stalled_reconnects: int = 0


def run_simulated(
    workdir: Path, seconds: float, warmup: float, count: int, stalled: int, on_pty: bool
) -> SimFigures:
    pty = ["--pty"] if on_pty else []
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve-sims", str(count), "--stalled", str(stalled), *pty],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        urls = json.loads(child.stdout.readline())
        db = workdir / "sim.db"
        with Store(db) as store:
            for n in range(count + stalled):
                store.register_device(sim_id(n), sim_key(n).public.raw, "simulated")
        config = build_config(
            {
                "host": {
                    "id": HOST_ID.hex(),
                    "database": db.name,
                    "max_frame": 4096,
                    "status_every": 5.0,
                    "save_every": 1.0,
                    "write_timeout": 2.0,
                },
                "device": [{"url": u} for u in urls],
            },
            workdir,
            [],
        )
        daemon = Daemon(config)
        daemon.start()
        try:
            time.sleep(warmup)

            def read() -> int:
                return sum(w.session.counters.bytes_in for w in daemon.workers)

            count0, cpu0, t0 = daemon.store.count_records(), time.process_time(), time.monotonic()
            wall0, bytes0 = time.time() * 1000, read()
            time.sleep(seconds)
            count1, cpu1, t1 = daemon.store.count_records(), time.process_time(), time.monotonic()
            wall1, bytes1 = time.time() * 1000, read()
            reconnects = sum(w.reconnects for w in daemon.workers[count:])
        finally:
            daemon.stop()
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(30)
    with Store(db) as store:
        received = {p.pack_id: p.received for p in store.packs()}
        latencies = [
            received[pack_id] - rec.timestamp
            for rec, pack_id in store.iter_records(5000)
            if wall0 <= received[pack_id] <= wall1
        ]
    return SimFigures(count1 - count0, t1 - t0, cpu1 - cpu0, latencies, bytes1 - bytes0, reconnects)


def main_simulated(seconds: float, warmup: float) -> int:
    rows = []
    cases = [(on_pty, n, 0) for on_pty in (False, True) for n in (1, 16, 64)]
    cases += [(False, 4, 0), (False, 4, 1)]
    for on_pty, count, stalled in cases:
        with tempfile.TemporaryDirectory(prefix="hm-bench-sim-") as tmp:
            fig = run_simulated(Path(tmp), seconds, warmup, count, stalled, on_pty)
            rows.append((on_pty, count, stalled, fig))
    print(f"hirmem daemon: simulated devices, {seconds:.0f} s window after {warmup:.0f} s warm-up")
    print()
    print(
        f"{'line':>7} {'devices':>8} {'stalled':>7} {'records/s':>10} {'CPU ms/record':>14} "
        f"{'CPU s/MB read':>14} {'p50':>8} {'p99':>8} {'stalled reconnects':>19}"
    )
    for on_pty, count, stalled, f in rows:
        per = 1000 * f.cpu_s / f.records if f.records else float("nan")
        per_mb = f.cpu_s / (f.bytes_in / 1e6) if f.bytes_in else float("nan")
        print(
            f"{'pty' if on_pty else 'socket':>7} {count:>8} {stalled:>7} {f.rate:>10.1f} "
            f"{per:>14.3f} {per_mb:>14.3f} "
            f"{f.percentile(50):>5.0f} ms {f.percentile(99):>5.0f} ms {f.stalled_reconnects:>19}"
        )
    print()
    print("latency: record made on the simulated device (wall clock) to the commit of its")
    print("pack. A stalled line is closed at its 2 s write deadline and reopened.")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="measured window")
    ap.add_argument("--warmup", type=float, default=4.0)
    ap.add_argument("--sensor-ms", type=int, default=5, help="sensor period at full load")
    ap.add_argument("--light-ms", type=int, default=50, help="sensor period at light load")
    ap.add_argument("--faults", type=float, default=0.01, help="share of frames faulted")
    ap.add_argument("--simulated", action="store_true", help="simulated-device rows instead")
    ap.add_argument("--serve-sims", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--stalled", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--pty", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve_sims is not None:
        return serve_sims(args.serve_sims, args.stalled, args.pty)
    if args.simulated:
        return main_simulated(args.seconds, args.warmup)
    build()
    rows = []
    cases = [(ms, faults, False) for ms in (args.sensor_ms, args.light_ms)
             for faults in (0.0, args.faults)]  # fmt: skip
    cases += [(ms, 0.0, True) for ms in (args.sensor_ms, args.light_ms)]
    for sensor_ms, faults, stalled in cases:
        with tempfile.TemporaryDirectory(prefix="hm-bench-daemon-") as tmp:
            fig = run(Path(tmp), args.seconds, args.warmup, sensor_ms, faults, stalled)
            rows.append((sensor_ms, faults, stalled, fig))
    print(
        f"hirmem daemon: {len(DEVICES)} emulated devices (QEMU), "
        f"{args.seconds:.0f} s window after {args.warmup:.0f} s warm-up"
    )
    print()
    print(
        f"{'sensor':>7} {'faults':>7} {'stalled':>7} {'records/s':>10} {'records':>8} "
        f"{'CPU ms/record':>14} {'CPU s/MB read':>14} {'latency p50':>12} {'p99':>8}"
    )
    for sensor_ms, faults, stalled, f in rows:
        per = 1000 * f.cpu_s / f.records if f.records else float("nan")
        per_mb = f.cpu_s / (f.bytes_in / 1e6) if f.bytes_in else float("nan")
        print(
            f"{sensor_ms:>5}ms {faults * 100:>6.1f}% {'1 line' if stalled else '-':>7} "
            f"{f.rate:>10.1f} {f.records:>8} {per:>14.3f} {per_mb:>14.3f} "
            f"{f.percentile(50):>9.0f} ms {f.percentile(99):>5.0f} ms"
        )
    print()
    print("latency: capture on the device (record timestamp, device wall clock) to the")
    print("commit of its pack (store received time). It includes waiting for a pack of 8")
    print("records (500 ms at most) and any lag of the emulated millisecond tick behind")
    print("real time when QEMU is starved. CPU: this process only (not QEMU, not the")
    print("stalled peer's process). stalled: a fifth line whose peer stops reading and keeps")
    print("sending what draws answers; it is closed at its 2 s write deadline and reopened.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
