"""Figures of a PostgreSQL failover: how long writes stop, and that none is lost.

    python tools/bench_failover.py [--runs 3] [--writers 4] [--before 2.0]

Each run starts a primary and a synchronous standby (hirmem.emulation.postgres), lets
``--writers`` clients commit one row per transaction for ``--before`` seconds, then
SIGKILLs the primary's process group and promotes the standby (what a failover
manager does once it has declared the primary dead; detection time is the manager's
and is not counted). The writers reconnect to the promoted standby. Printed per run:
rows acknowledged before the kill, the commit rate with the synchronous standby, the
time from the SIGKILL to the promotion's end and to the first acknowledged write on
the new primary, and the acknowledged rows missing there (must be 0). The same rate
without a standby is printed once, as the synchronous standby's cost.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "host"))

import psycopg

from hirmem.emulation import postgres
from hirmem.emulation.postgres import Primary, Server, Standby


class Writers:
    """Clients committing one row per transaction into ``acked``, following ``target``."""

    def __init__(self, target: Server, count: int) -> None:
        self.target = target
        self.acked: list[tuple[int, float]] = []  # (row, when its COMMIT returned)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(w,)) for w in range(count)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)

    def _run(self, writer: int) -> None:
        n = writer << 32
        while not self.stop.is_set():
            try:
                with self.target.connect(timeout=2) as db:
                    while not self.stop.is_set():
                        n += 1
                        db.execute("INSERT INTO acked VALUES (%s)", (n,))
                        with self.lock:
                            self.acked.append((n, time.monotonic()))
            except psycopg.OperationalError:
                time.sleep(0.01)


def rate(server: Server, writers: int, seconds: float) -> float:
    server.sql("CREATE TABLE IF NOT EXISTS acked (n bigint PRIMARY KEY)")
    clients = Writers(server, writers)
    clients.start()
    time.sleep(seconds)
    clients.join()
    return len(clients.acked) / seconds


def one_run(writers: int, before: float) -> dict[str, float]:
    with Primary() as primary, Standby(primary) as standby:
        primary.sql("CREATE TABLE acked (n bigint PRIMARY KEY)")
        clients = Writers(primary, writers)
        clients.start()
        time.sleep(before)
        acked_before = len(clients.acked)
        killed = time.monotonic()
        primary.kill()
        standby.promote()
        promoted = time.monotonic()
        clients.target = standby
        while True:
            with clients.lock:
                after = [t for _, t in clients.acked if t > promoted]
            if after:
                break
            time.sleep(0.005)
        time.sleep(0.5)
        clients.join()
        present = {int(str(n)) for (n,) in standby.sql("SELECT n FROM acked")}
        missing = sum(1 for n, _ in clients.acked if n not in present)
        return {
            "acked_before": acked_before,
            "rate": acked_before / before,
            "promote_s": promoted - killed,
            "first_write_s": min(after) - killed,
            "missing": missing,
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--before", type=float, default=2.0, help="seconds of writes first")
    args = parser.parse_args()
    why_not = postgres.available()
    if why_not:
        print(f"bench_failover: {why_not}", file=sys.stderr)
        return 2
    with Primary("alone") as alone:
        solo = rate(alone, args.writers, args.before)
    print(f"{args.writers} writers, one row per commit, fsync on; primary alone: "
          f"{solo:,.0f} commits/s")  # fmt: skip
    print("run  acked-before  commits/s (sync standby)  promote s  first write s  missing")
    results = []
    for run in range(1, args.runs + 1):
        r = one_run(args.writers, args.before)
        results.append(r)
        print(f"{run:>3}  {r['acked_before']:>12,.0f}  {r['rate']:>24,.0f}  "
              f"{r['promote_s']:>9.2f}  {r['first_write_s']:>13.2f}  "
              f"{r['missing']:>7.0f}")  # fmt: skip
    firsts = [r["first_write_s"] for r in results]
    print(f"writes stopped for {statistics.median(firsts):.2f} s "
          f"(median; max {max(firsts):.2f} s) "
          f"from the SIGKILL to the first acknowledged write on the promoted standby; "
          f"acknowledged rows lost: {sum(int(r['missing']) for r in results)}")  # fmt: skip
    return 1 if any(r["missing"] for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
