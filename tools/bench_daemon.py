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
directions). Emulator speed bounds what a board produces; the figures are for
this machine, in this run.
"""

from __future__ import annotations

import argparse
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
from hirmem.protocol.keys import SigningKey  # noqa: E402

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


def run(workdir: Path, seconds: float, warmup: float, sensor_ms: int, faults: float) -> Figures:
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
            count0, cpu0, t0 = daemon.store.count_records(), time.process_time(), time.monotonic()
            wall0 = time.time() * 1000
            time.sleep(seconds)
            count1, cpu1, t1 = daemon.store.count_records(), time.process_time(), time.monotonic()
            wall1 = time.time() * 1000
        finally:
            daemon.stop()
    with Store(db) as store:
        received = {p.pack_id: p.received for p in store.packs()}
        latencies = []
        for rec, pack_id in store.iter_records(5000):
            at = received[pack_id]
            if wall0 <= at <= wall1:
                latencies.append(at - rec.timestamp)
    return Figures(count1 - count0, t1 - t0, cpu1 - cpu0, latencies)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="measured window")
    ap.add_argument("--warmup", type=float, default=4.0)
    ap.add_argument("--sensor-ms", type=int, default=5, help="sensor period at full load")
    ap.add_argument("--light-ms", type=int, default=50, help="sensor period at light load")
    ap.add_argument("--faults", type=float, default=0.01, help="share of frames faulted")
    args = ap.parse_args(argv)
    build()
    rows = []
    for sensor_ms in (args.sensor_ms, args.light_ms):
        for faults in (0.0, args.faults):
            with tempfile.TemporaryDirectory(prefix="hm-bench-daemon-") as tmp:
                fig = run(Path(tmp), args.seconds, args.warmup, sensor_ms, faults)
                rows.append((sensor_ms, faults, fig))
    print(
        f"hirmem daemon: {len(DEVICES)} emulated devices (QEMU), "
        f"{args.seconds:.0f} s window after {args.warmup:.0f} s warm-up"
    )
    print()
    print(
        f"{'sensor':>7} {'faults':>7} {'records/s':>10} {'records':>8} {'CPU ms/record':>14} "
        f"{'latency p50':>12} {'p99':>8}"
    )
    for sensor_ms, faults, f in rows:
        per = 1000 * f.cpu_s / f.records if f.records else float("nan")
        print(
            f"{sensor_ms:>5}ms {faults * 100:>6.1f}% {f.rate:>10.1f} {f.records:>8} {per:>14.3f} "
            f"{f.percentile(50):>9.0f} ms {f.percentile(99):>5.0f} ms"
        )
    print()
    print("latency: capture on the device (record timestamp, device wall clock) to the")
    print("commit of its pack (store received time). It includes waiting for a pack of 8")
    print("records (500 ms at most) and any lag of the emulated millisecond tick behind")
    print("real time when QEMU is starved. CPU: this process only (not QEMU).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
