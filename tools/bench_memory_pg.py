"""The memory engine on its two stores, side by side: a SQLite file and a PostgreSQL
schema (a fresh local server with fsync on, as the fleet's tenants have it).

    .venv/bin/python tools/bench_memory_pg.py              # 1,000 records
    .venv/bin/python tools/bench_memory_pg.py --n 300      # scaled down

Prints, per store: admission (one transaction per record through the whole engine),
device intake (packs of 32, one transaction per pack), recall (k = 5, no touch) and the
full audit verification, each timed in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HIRMEM_EMBEDDER", "hash")

from hirmem.emulation import postgres
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.intake import intake_records
from hirmem.protocol.keys import SigningKey
from hirmem.protocol.records import GENESIS, Record
from hirmem.sql import PgTarget

WORDS = ["door", "pump", "valve", "tank", "motor", "fan", "light", "alarm"]
FLAGS = [0x0FFF, 0x0FFE, 0x0C7F, 0x0D4F, 0x07FF, 0x0C53]


def _packs(count: int) -> list[tuple[bytes, list[Record]]]:
    device, prev, out = bytes.fromhex("0102030405060708"), GENESIS, []
    for p in range(count // 32):
        recs, link = [], prev
        for j in range(32):
            seq = p * 32 + j + 1
            rid = device + (1).to_bytes(4, "big") + seq.to_bytes(4, "big")
            payload = json.dumps({"t": 20 + seq % 7, "n": seq}).encode()
            rec = Record.capture(rid, payload, "temp0", 1_780_000_000_000 + seq, bytes(32),
                                 FLAGS[seq % 4], 0x10000, 0xE666, 0x8000, link)  # fmt: skip
            recs.append(rec)
            link = rec.hash
        out.append((prev, recs))
        prev = link
    return out


def _timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def run(label: str, open_engine: Callable[[], MemoryEngine], n: int) -> dict[str, str]:
    clock = [1_780_000_000.0]
    engine = open_engine()
    engine.clock = lambda: clock[0]

    def admit() -> None:
        for k in range(n):
            clock[0] += 0.01
            engine.admit(f"{WORDS[k % 8]} {WORDS[(k * 3) % 8]} reading {k}", f"s{k % 20}",
                         flags=FLAGS[k % len(FLAGS)])  # fmt: skip

    packs = _packs(n)

    def intake() -> None:
        for prev, recs in packs:
            intake_records(engine, recs, bytes.fromhex("0102030405060708"), b"kid-1", prev)

    queries = 200

    def recall() -> None:
        for k in range(queries):
            engine.recall(f"{WORDS[k % 8]} reading", 5, touch=False)

    a, i, r = _timed(admit), _timed(intake), _timed(recall)
    verified = [engine.verify_audit()]
    v = _timed(lambda: verified.append(engine.verify_audit()))
    engine.close()
    return {
        "store": label,
        "admit rec/s": f"{n / a:,.0f}",
        "intake rec/s": f"{32 * len(packs) / i:,.0f}",
        "recall q/s": f"{queries / r:,.0f}",
        "verify s": f"{v:.2f}",
        "chain": f"{verified[-1].count} ok" if verified[-1].ok else "BROKEN",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="records admitted (and taken in)")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        rows.append(run("sqlite (WAL)", lambda: MemoryEngine(Path(tmp) / "m.sqlite"), args.n))
    reason = postgres.available()
    if reason is None:
        with postgres.Primary("bench-memory") as primary:
            key = SigningKey.generate()
            target = PgTarget(primary.dsn, "memory")
            rows.append(run("postgresql 15 (fsync)",
                            lambda: MemoryEngine(target, signing_key=key), args.n))  # fmt: skip
    else:
        print(f"postgresql: skipped ({reason})")
    cols = list(rows[0])
    width = {c: max(len(c), *(len(r[c]) for r in rows)) for c in cols}
    print("  ".join(c.ljust(width[c]) for c in cols))
    for row in rows:
        print("  ".join(row[c].ljust(width[c]) for c in cols))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
