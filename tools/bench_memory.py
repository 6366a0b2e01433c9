"""Memory engine figures: admission, decay sweep, recall against a bare numpy baseline.

    .venv/bin/python tools/bench_memory.py              # 1,000,000 memories (a few minutes)
    .venv/bin/python tools/bench_memory.py --n 100000   # scaled down
    .venv/bin/python tools/bench_memory.py --e2e-only --admit 32768  # end to end alone

Prints:

* admission throughput — records/s through the whole engine (capture, normalise, fixed
  gate, weighting, consolidation, contradiction check, SHA-256 hash, embedding, two or
  more audit appends, SQLite WAL commit), one transaction per record; and device
  intake of packs of 32 records, one transaction per pack;
* end to end: 64 devices' signed packs of 8 records through the daemon's store (verify,
  store) and the memory engine (follow: the stored bytes checked against the hash
  recorded at verification, each pack admitted in one transaction), against a plain
  SQLite insert of the same records in the same run; ``--profile`` adds where its CPU
  goes (cProfile, top functions by own time);
* a decay sweep over N memories (columns loaded from SQLite, the strength equation
  vectorised in numpy, changed rows written back), its WAL bytes, and the idempotent
  repeat; below 1,000,000 the 1 M figures are extrapolated linearly and say so;
* ``hirmem memory stats``, ``review list`` and ``check`` (the integrity check) at N,
  each in its own process (time and peak RSS);
* recall over 100,000 and N memories, single query and batches of 64, with strength,
  recency, trust and the state filter folded in, and with an extra metadata filter,
  each against a bare ``E @ q`` + argpartition baseline timed in the same run;
* memory used per stored memory (index arrays in RAM, SQLite bytes on disk);
* distillation throughput — device readings of 8 sensors admitted in packs of 32 and
  distilled into one pattern per sensor, against the same records carrying no reading
  (plain statements, nothing to distil) in the same run (``--distil-only`` prints
  this figure alone).

The N memories for the sweep and recall are synthetic rows bulk-inserted into the
store (random unit embeddings, a mix of states, sources and ages): admitting a million
records one by one through the gate would only re-measure the admission figure.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from hirmem.memory.config import MemoryConfig
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.intake import intake_records
from hirmem.memory.model import Layer
from hirmem.memory.recall import RecallFilter, RecallIndex
from hirmem.memory.store import COLUMNS
from hirmem.protocol.gate import FLAGS_MASK
from hirmem.protocol.keys import derive_test_key
from hirmem.protocol.packs import Pack, PackKind, sign_pack
from hirmem.protocol.records import GENESIS, Record, record_hash, record_id

F32 = npt.NDArray[np.float32]
K = 10
BATCH = 64


def interleaved(fns: list[Callable[[], object]], repeat: int) -> list[float]:
    """Median seconds per function, calling them in turn ``repeat`` times (after a
    warm-up round), so that load from elsewhere on the machine hits all of them alike."""
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for j, fn in enumerate(fns):
            t = time.perf_counter()
            fn()
            times[j].append(time.perf_counter() - t)
    return [statistics.median(ts) for ts in times]


def bench_admission(path: Path, count: int, now: float) -> None:
    clock = [now]
    engine = MemoryEngine(path, clock=lambda: clock[0])
    rng = np.random.default_rng(1)
    flag_choices = [FLAGS_MASK, 0x0FFE, 0x0C7F, 0x0D4F, 0x07FF, 0x0C53]
    words = [
        "door",
        "window",
        "pump",
        "valve",
        "sensor",
        "lab",
        "field",
        "tank",
        "motor",
        "fan",
        "light",
        "alarm",
    ]
    t, cpu = time.perf_counter(), time.process_time()
    for n in range(count):
        clock[0] += 0.01
        text = " ".join(rng.choice(words, 6)) + f" reading {n}"
        engine.admit(text, f"s{n % 50}", flags=flag_choices[n % len(flag_choices)])
    dt, dcpu = time.perf_counter() - t, time.process_time() - cpu
    print(f"admission: {count / dt:,.0f} records/s, {dcpu / count * 1e6:,.0f} µs CPU per record "
          f"({count} records, one transaction each; gate, hash, embed, audit)")  # fmt: skip
    device = bytes.fromhex("0102030405060708")
    prev = GENESIS
    packs = []
    for p in range(count // 32):
        recs = []
        link = prev
        for j in range(32):
            seq = p * 32 + j + 1
            rid = device + (1).to_bytes(4, "big") + seq.to_bytes(4, "big")
            payload = json.dumps({"t": round(float(rng.normal(21, 2)), 2), "n": seq}).encode()
            rec = Record.capture(rid, payload, "temp0", 1_780_000_000_000 + seq, bytes(32),
                                 flag_choices[seq % 4], 0x10000, 0xE666, 0x8000, link)  # fmt: skip
            recs.append(rec)
            link = rec.hash
        packs.append((prev, recs))
        prev = link
    t, cpu = time.perf_counter(), time.process_time()
    for pack_prev, recs in packs:
        intake_records(engine, recs, device, b"kid-0001", pack_prev)
    dt, dcpu = time.perf_counter() - t, time.process_time() - cpu
    done = 32 * len(packs)
    print(
        f"device intake: {done / dt:,.0f} records/s, {dcpu / done * 1e6:,.0f} µs CPU per record "
        f"({done} records in packs of 32, re-checked on the host, one transaction per pack)"
    )
    print(f"audit chain after admission: {engine.verify_audit()}")
    engine.close()


def fleet_packs(devices: int, per_pack: int, packs_each: int) -> list[tuple[bytes, bytes, Pack]]:
    """Signed packs of ``devices`` devices, ``per_pack`` readings each, interleaved as
    the lines would deliver them: (device id, public key, pack)."""
    rng = np.random.default_rng(11)
    ids = [(0xF1EE7000 + d).to_bytes(8, "big") for d in range(devices)]
    keys = [derive_test_key(f"bench fleet {d}") for d in range(devices)]
    pack_prev = [GENESIS] * devices  # per device: its last pack's hash (a pack's first
    seq = [0] * devices  # record links to it) and its capture sequence number
    out = []
    for p in range(packs_each):
        for d, (dev, key) in enumerate(zip(ids, keys, strict=True)):
            recs = []
            link = pack_prev[d]
            for _ in range(per_pack):
                seq[d] += 1
                body = json.dumps({"t": round(float(rng.normal(21, 0.5)), 2)}).encode()
                rec = Record.capture(record_id(dev, 1, seq[d]), body, f"temp{seq[d] % 4}",
                                     1_780_000_000_000 + 1000 * seq[d], bytes(32), FLAGS_MASK,
                                     0x10000, 0xE666, 0x8000, link)  # fmt: skip
                recs.append(rec)
                link = rec.hash
            pack = sign_pack(key, PackKind.MEMORY, dev, (1 << 32) | (p + 1), pack_prev[d],
                             1_780_000_000_000 + p, recs)  # fmt: skip
            pack_prev[d] = pack.hash
            out.append((dev, key.public.raw, pack))
    return out


def profile_end_to_end(tmp: Path, devices: int, per_pack: int, packs_each: int,
                       now: float) -> None:  # fmt: skip
    """The end-to-end run again under cProfile (CPU time): the functions that cost the
    most CPU of their own, per record (the profiler's overhead inflates small calls)."""
    import cProfile
    import pstats

    packs = fleet_packs(devices, per_pack, packs_each)  # signing them is not profiled
    prof = cProfile.Profile(time.process_time)
    prof.enable()
    bench_end_to_end(tmp, devices, per_pack, packs_each, now, label="profiled run",
                     packs=packs)  # fmt: skip
    prof.disable()
    n = devices * per_pack * packs_each
    stats = pstats.Stats(prof)
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])  # type: ignore[attr-defined]
    print("  where the CPU goes (own time per record, top 15):")
    for (path, line, name), (_, calls, own, _cum, _) in rows[:15]:
        where = f"{Path(path).name}:{line}({name})" if line else name
        print(f"    {own / n * 1e6:7.1f} µs  {calls / n:6.2f} calls  {where}")


def bench_end_to_end(
    tmp: Path, devices: int, per_pack: int, packs_each: int, now: float, label: str = "",
    packs: list[tuple[bytes, bytes, Pack]] | None = None,
) -> None:  # fmt: skip
    """Signed packs of a fleet through the daemon's store (verify, store: each round of
    one pack per device group-committed, as ``take_packs`` does for the line threads)
    and the memory engine (follow: hash check, admit), against a plain SQLite insert of
    the same records in the same run."""
    from hirmem.daemon.store import Store as DaemonStore
    from hirmem.memory.follow import follow_intake

    if packs is None:
        packs = fleet_packs(devices, per_pack, packs_each)
    n = per_pack * len(packs)
    for stale in tmp.glob("e2e-*"):  # a second run (the profiled one) starts afresh
        stale.unlink()
    intake = DaemonStore(tmp / "e2e-intake.db")
    for dev, public, _ in packs[:devices]:
        intake.register_device(dev, public)
    engine = MemoryEngine(tmp / "e2e-memory.sqlite", clock=lambda: now)
    t, cpu = time.perf_counter(), time.process_time()
    # each round (one pack per device) offered together, as the daemon's line threads
    # do: one group commit per round
    for start in range(0, len(packs), devices):
        for took in intake.take_packs([(dev, pack.encoded)
                                       for dev, _, pack in packs[start:start + devices]]):
            if took.status != "accepted":
                raise SystemExit(f"bench pack refused by the daemon store: {took}")
    t_store, cpu_store = time.perf_counter() - t, time.process_time() - cpu
    report = follow_intake(engine, intake, limit=1000)
    total, cpu_total = time.perf_counter() - t, time.process_time() - cpu
    if report.admitted + report.quarantined != n:
        raise SystemExit(f"follow admitted {report.admitted} of {n} records")
    # the baseline: the same records' columns inserted into a plain table, one
    # transaction per pack, no verification, no engine
    plain = sqlite3.connect(tmp / "e2e-plain.sqlite", isolation_level=None)
    plain.execute("PRAGMA journal_mode=WAL")
    plain.execute("PRAGMA synchronous=NORMAL")
    plain.execute("CREATE TABLE r (id BLOB PRIMARY KEY, payload BLOB, source TEXT, ts INTEGER, "
                  "context BLOB, prev BLOB, hash BLOB, flags INTEGER)")  # fmt: skip
    t = time.perf_counter()
    for _, _, pack in packs:
        plain.execute("BEGIN")
        plain.executemany("INSERT INTO r VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [
            (r.id, r.payload, r.source, r.timestamp, r.context, r.prev_hash, r.hash, r.flags)
            for r in pack.items if isinstance(r, Record)])  # fmt: skip
        plain.execute("COMMIT")
    t_plain = time.perf_counter() - t
    plain.close()
    print(f"end to end{f' ({label})' if label else ''}, {devices} devices' signed packs of "
          f"{per_pack} records ({n:,} records): "
          f"{n / total:,.0f} records/s, {cpu_total / n * 1e6:,.0f} µs CPU per record "
          f"(daemon verify + store {t_store / n * 1e6:,.0f} µs, {cpu_store / n * 1e6:,.0f} µs CPU;"
          f" memory follow {(total - t_store) / n * 1e6:,.0f} µs, "
          f"{(cpu_total - cpu_store) / n * 1e6:,.0f} µs CPU per record); plain SQLite "
          f"insert of the same rows: {n / t_plain:,.0f} records/s ({t_plain / total:.1%} of "
          "the end-to-end time)")  # fmt: skip
    engine.close()
    intake.close()


def bench_daemon(tmp: Path, devices: int, per_pack: int, packs_each: int) -> None:
    """The daemon's half alone: signed packs to records committed in its store (verify,
    store; synchronous=FULL), CPU and wall per record, three ways: one transaction per
    pack (take_pack in a loop); the packs of a round, one per device, committed together
    (take_packs); one thread per device line calling take_pack (group commit)."""
    import threading

    from hirmem.daemon.store import Store as DaemonStore

    packs = fleet_packs(devices, per_pack, packs_each)
    n = per_pack * len(packs)

    def serial(store: DaemonStore) -> None:
        for dev, _, pack in packs:
            store.take_pack(dev, pack.encoded)

    def grouped(store: DaemonStore) -> None:
        for start in range(0, len(packs), devices):
            store.take_packs([(dev, pack.encoded) for dev, _, pack in packs[start:start + devices]])

    def threaded(store: DaemonStore) -> None:
        def line(d: int) -> None:
            for dev, _, pack in packs[d::devices]:
                store.take_pack(dev, pack.encoded)

        lines = [threading.Thread(target=line, args=(d,)) for d in range(devices)]
        for t in lines:
            t.start()
        for t in lines:
            t.join()

    for label, feed in (("one transaction per pack", serial),
                        (f"a round of {devices} packs per transaction", grouped),
                        (f"{devices} line threads, group commit", threaded)):  # fmt: skip
        for stale in tmp.glob("daemon-*"):
            stale.unlink()
        store = DaemonStore(tmp / "daemon-intake.db")
        for dev, public, _ in packs[:devices]:
            store.register_device(dev, public)
        t, cpu = time.perf_counter(), time.process_time()
        feed(store)
        dt, dcpu = time.perf_counter() - t, time.process_time() - cpu
        if store.count_records() != n:
            raise SystemExit(f"the daemon store holds {store.count_records()} of {n} records")
        print(f"daemon verify + store, {label}: {n / dt:,.0f} records/s, "
              f"{dcpu / n * 1e6:,.1f} µs CPU per record ({dcpu / len(packs) * 1e6:,.0f} µs "
              f"per pack of {per_pack}; {store.intake_commits:,} commits for {len(packs):,} "
              "packs)")  # fmt: skip
        store.close()


def _sensor_packs(count: int, readings: bool) -> list[tuple[bytes, list[Record]]]:
    device = bytes.fromhex("0102030405060709")
    rng = np.random.default_rng(5)
    prev, link = GENESIS, GENESIS
    packs = []
    for p in range(count // 32):
        recs = []
        for j in range(32):
            seq = p * 32 + j + 1
            value = round(float(rng.normal(21, 0.5)), 2)
            body = {"t": value, "n": seq} if readings else {"note": f"t was {value}"}
            rid = device + (1).to_bytes(4, "big") + seq.to_bytes(4, "big")
            rec = Record.capture(rid, json.dumps(body).encode(), f"sensor/temp{seq % 8}",
                                 1_780_000_000_000 + 50 * seq, bytes(32), FLAGS_MASK, 0x10000,
                                 0xE666, 0x8000, link)  # fmt: skip
            recs.append(rec)
            link = rec.hash
        packs.append((prev, recs))
        prev = link
    return packs


def bench_distillation(tmp: Path, count: int, now: float) -> None:
    from hirmem.memory import distill

    rates = {}
    for label, readings in (("plain", False), ("readings", True)):
        engine = MemoryEngine(tmp / f"distil-{label}.sqlite", clock=lambda: now)
        packs = _sensor_packs(count, readings)
        device = packs[0][1][0].id[:8]
        t = time.perf_counter()
        for pack_prev, recs in packs:
            intake_records(engine, recs, device, b"kid-0002", pack_prev)
        rates[label] = (32 * len(packs)) / (time.perf_counter() - t)
        found = distill.patterns(engine)
        if readings:
            print(f"distillation: {rates['readings']:,.0f} readings/s through intake into "
                  f"{len(found)} patterns ({sum(d.stats.n for d in found):,} episodes); the "
                  f"same records as plain statements: {rates['plain']:,.0f} records/s, so "
                  f"distilling costs {1e6 / rates['readings'] - 1e6 / rates['plain']:,.0f} µs "
                  "per reading")  # fmt: skip
        engine.close()


def bulk_insert(engine: MemoryEngine, rows: list[tuple[object, ...]]) -> None:
    """Rows of :func:`bulk_rows` into the store: the row, then its embedding."""
    names = ", ".join(COLUMNS)
    marks = ", ".join("?" * len(COLUMNS))
    with engine.store.transaction():
        db = engine.store.db
        first = int(db.execute("SELECT coalesce(max(rowid), 0) FROM memories").fetchone()[0])
        db.executemany(f"INSERT INTO memories ({names}) VALUES ({marks})",
                       (r[:-1] for r in rows))  # fmt: skip
        db.executemany("INSERT INTO embeddings(memory, vector) VALUES (?, ?)",
                       ((first + 1 + j, r[-1]) for j, r in enumerate(rows)))  # fmt: skip


def bulk_rows(n: int, dim: int, now: float, seed: int) -> list[tuple[object, ...]]:
    """Synthetic memories: each the row's values (in ``COLUMNS`` order) then its
    embedding."""
    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((n, dim), dtype=np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    state = rng.choice([1, 2, 2, 2, 3, 4], n)
    layer = np.where(state == 1, 1, 2)
    strength = rng.uniform(0.0, 1.5, n)
    age = rng.exponential(5 * 86400, n)
    trust = rng.choice([1.0, 0.75, 0.5625, 0.0], n, p=[0.6, 0.2, 0.15, 0.05])
    rows: list[tuple[object, ...]] = []
    zero32 = bytes(32)
    for j in range(n):
        la = now - float(age[j])
        mid = b"bench000" + j.to_bytes(8, "big")
        digest = record_hash(mid, b"x", f"s{j % 100}", int(la * 1000), zero32, zero32)
        values = {
            "id": mid.hex(), "payload": b"x",
            "source": f"s{j % 100}",
            "timestamp": int(la * 1000), "context": zero32, "flags": FLAGS_MASK,
            "h": 1.0, "i": 1.0, "r": 1.0, "f": 1.0, "c": 1.0, "rn": 1.0, "confidence": 1.0,
            "provenance": 1.0, "priority": 0.5, "w": 1.0, "verdict": 0, "hard": 0,
            "trust": float(trust[j]), "links": "[]", "access_count": j % 3, "access_seen": 0,
            "strength": float(strength[j]), "last_access": la, "decayed_at": la, "hash": digest,
            "prev_hash": zero32, "audit_seq": 0, "state": int(state[j]), "layer": int(layer[j]),
            "subject": f"subj{j % 1000}", "attribute": "", "value": "", "negated": 0,
            "kind": "fact", "device": f"{j % 16:016x}", "kid": "", "device_scores": "[]",
            "gate_mode": "fixed", "version": 1, "supersedes": "", "flagged": 0,
            "quarantine_reason": "", "permanent": 0, "created": la,
        }  # fmt: skip
        rows.append((*(values[c] for c in COLUMNS), emb[j].tobytes()))
    return rows


def sub_index(big: RecallIndex, n: int) -> RecallIndex:
    """An index over the first ``n`` rows of ``big`` (same columns, same codes)."""
    idx = RecallIndex(big.dim, big.recency_tau, big.t0)
    idx.n, idx.cap = n, n
    idx.emb = np.ascontiguousarray(big.emb[:n])
    idx.ids = big.ids[:n]
    for name, _ in RecallIndex._COLUMNS:
        setattr(idx, name, getattr(big, name)[:n].copy())
    idx.pos_of_rowid = big.pos_of_rowid
    idx._sources, idx._devices, idx._subjects = big._sources, big._devices, big._subjects
    return idx


def bench_recall(index: RecallIndex, label: str, now: float, rng: np.random.Generator) -> None:
    n = index.n
    emb = index.emb[:n]
    dim = index.dim
    q1 = rng.standard_normal(dim).astype(np.float32)
    q1 /= np.linalg.norm(q1)
    qb = rng.standard_normal((BATCH, dim)).astype(np.float32)
    qb /= np.linalg.norm(qb, axis=1, keepdims=True)

    def base_single() -> object:
        s = emb @ q1
        top = np.argpartition(s, n - K)[n - K :]
        return top[np.argsort(-s[top])]

    def base_batch() -> object:
        s = qb @ emb.T
        top = np.argpartition(s, n - K, axis=1)[:, n - K :]
        return np.take_along_axis(top, np.argsort(-np.take_along_axis(s, top, 1), 1), 1)

    default = RecallFilter()
    filtered = RecallFilter(layers=frozenset({Layer.SEMANTIC}),
                            sources=frozenset(f"s{j}" for j in range(0, 100, 2)))  # fmt: skip
    reps = 31 if n <= 200_000 else 15
    breps = 9 if n <= 200_000 else 5
    b1, r1, f1 = interleaved([
        base_single,
        lambda: index.search(q1, K, default, now),
        lambda: index.search(q1, K, filtered, now),
    ], reps)  # fmt: skip
    bb, rb, fb = interleaved([
        base_batch,
        lambda: index.search(qb, K, default, now),
        lambda: index.search(qb, K, filtered, now),
    ], breps)  # fmt: skip
    print(f"recall over {label} memories (k={K}, dim={dim}):")
    print(
        f"  single query   baseline {b1 * 1e3:8.2f} ms | recall {r1 * 1e3:8.2f} ms "
        f"({r1 / b1:.2f}x) | + layer/source filter {f1 * 1e3:8.2f} ms ({f1 / b1:.2f}x)"
    )
    print(
        f"  batch of {BATCH}    baseline {bb * 1e3:8.2f} ms | recall {rb * 1e3:8.2f} ms "
        f"({rb / bb:.2f}x) | + layer/source filter {fb * 1e3:8.2f} ms ({fb / bb:.2f}x)"
    )
    print(f"                 per query: baseline {bb / BATCH * 1e3:.2f} ms, "
          f"recall {rb / BATCH * 1e3:.2f} ms")  # fmt: skip


def wal_bytes(path: Path) -> int:
    wal = Path(str(path) + "-wal")
    return wal.stat().st_size if wal.exists() else 0


def cli_figure(path: Path, *argv: str) -> tuple[float, float, int]:
    """A ``hirmem memory`` command in its own process, as a user runs it: wall seconds,
    peak RSS in MiB and the lines it printed."""
    # VmHWM, not ru_maxrss: Linux carries a forked child's ru_maxrss over its exec
    code = (
        "import sys; from hirmem.cli.entry import main; rc = main(sys.argv[1:]); "
        "hwm = [x for x in open('/proc/self/status') if x.startswith('VmHWM')][0]; "
        "print(hwm.split()[1], file=sys.stderr); sys.exit(rc)"
    )
    t = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code, "memory", "--db", str(path), *argv],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode not in (0, 1):  # 1: `check` found corrupted rows, and said so
        raise SystemExit(f"hirmem memory {' '.join(argv)} failed: {done.stderr}")
    dt = time.perf_counter() - t
    rss_kib = int(done.stderr.strip().splitlines()[-1])
    return dt, rss_kib / 1024, len(done.stdout.splitlines())


def bench_commands(path: Path, n: int) -> None:
    """``stats``, ``review list`` and ``check`` (the integrity check) at N, each in its
    own process as a user runs them: time and peak RSS; then ``engine.stats()`` alone."""
    for argv in (("stats",), ("review", "list"), ("check",)):
        dt, rss, lines = cli_figure(path, *argv)
        print(f"CLI `hirmem memory {' '.join(argv)}` at {n:,}: {dt:.2f} s, peak RSS "
              f"{rss:,.0f} MiB ({lines} lines; own process, imports included)")  # fmt: skip
    engine = MemoryEngine(path, MemoryConfig(), clock=lambda: 1_780_000_000.0)
    t = time.perf_counter()
    engine.stats()
    took = time.perf_counter() - t
    print(f"  engine.stats() alone at {n:,}: {took * 1e3:,.1f} ms (the rest of the command is "
          "Python starting and importing)"
          + (f"; extrapolated to 1,000,000 (linear, one index scan; not measured): "
             f"{took * 1_000_000 / n * 1e3:,.0f} ms" if n < 1_000_000 else ""))  # fmt: skip
    engine.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="memories for sweep and recall")
    ap.add_argument("--admit", type=int, default=3000, help="records for the admission figure")
    ap.add_argument("--dir", help="where to put the SQLite files (default: a temp dir)")
    ap.add_argument("--distil-only", action="store_true", help="only the distillation figure")
    ap.add_argument("--e2e-only", action="store_true",
                    help="only the end-to-end figure (--admit records; --profile applies)")
    ap.add_argument("--daemon-only", action="store_true",
                    help="only the daemon's verify + store, three ways (--admit records)")
    ap.add_argument("--profile", action="store_true",
                    help="also profile the end-to-end run (where its CPU goes)")  # fmt: skip
    args = ap.parse_args(argv)
    now = 1_780_000_000.0
    cfg = MemoryConfig()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        if args.daemon_only:
            bench_daemon(Path(tmp), 64, 8, max(1, args.admit // (64 * 8)))
            return 0
        if not args.e2e_only:
            bench_distillation(Path(tmp), args.admit, now)
        if args.distil_only:
            return 0
        bench_end_to_end(Path(tmp), 64, 8, max(1, args.admit // (64 * 8)), now)
        if args.profile:
            profile_end_to_end(Path(tmp), 64, 8, max(1, args.admit // (64 * 8)), now)
        if args.e2e_only:
            return 0
        bench_admission(Path(tmp) / "admit.sqlite", args.admit, now)

        path = Path(tmp) / "bulk.sqlite"
        engine = MemoryEngine(path, cfg, clock=lambda: now)
        engine.close()
        t = time.perf_counter()
        rows = bulk_rows(args.n, cfg.embed_dim, now, seed=7)
        gen = time.perf_counter() - t
        engine = MemoryEngine(path, cfg, clock=lambda: now)
        t = time.perf_counter()
        bulk_insert(engine, rows)
        ins = time.perf_counter() - t
        del rows
        engine.close()
        print(f"bulk load: {args.n:,} synthetic memories generated in {gen:.1f} s, "
              f"inserted in {ins:.1f} s")  # fmt: skip

        t = time.perf_counter()
        engine = MemoryEngine(path, cfg, clock=lambda: now)
        opened = time.perf_counter() - t
        print(f"open + index load from SQLite: {opened:.1f} s ({engine.index.n:,} indexed)")

        engine.store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        t = time.perf_counter()
        report = engine.sweep(now + 86400)
        sw = time.perf_counter() - t
        wal1 = wal_bytes(path)
        engine.store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        t = time.perf_counter()
        again = engine.sweep(now + 86400)
        sw2 = time.perf_counter() - t
        wal2 = wal_bytes(path)
        print(f"decay sweep over {args.n:,} memories ({report.examined:,} live): {sw:.2f} s "
              f"({report.examined / sw:,.0f} memories/s); {report.changed:,} updated, "
              f"{report.archived:,} archived, {report.promoted:,} promoted; WAL "
              f"{wal1 / 2**20:,.1f} MiB ({wal1 / max(report.changed, 1):,.0f} B per changed "
              "row)")  # fmt: skip
        print(
            f"  repeated sweep at the same instant: {sw2:.2f} s, {again.changed} changed "
            f"(idempotent), WAL {wal2 / 2**20:,.2f} MiB"
        )
        engine.store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        t = time.perf_counter()
        hourly = engine.sweep(now + 86400 + 3600)
        sw3 = time.perf_counter() - t
        wal3 = wal_bytes(path)
        print(f"  the hourly sweep after it: {sw3:.2f} s, {hourly.changed:,} of "
              f"{hourly.examined:,} live rows written (the rest owe less than "
              f"sweep_settle_delta = {cfg.sweep_settle_delta}), WAL {wal3 / 2**20:,.1f} MiB "
              "(strength history included)")  # fmt: skip
        if args.n < 1_000_000:
            scale = 1_000_000 / args.n
            print(f"  extrapolated to 1,000,000 memories (x{scale:,.0f}, linear; not "
                  f"measured): the day's sweep {sw * scale:,.1f} s, WAL "
                  f"{wal1 * scale / 2**30:,.2f} GiB; the hourly sweep {sw3 * scale:,.1f} s, "
                  f"WAL {wal3 * scale / 2**30:,.2f} GiB")  # fmt: skip
        engine.close()
        bench_commands(path, args.n)
        engine = MemoryEngine(path, cfg, clock=lambda: now)

        rng = np.random.default_rng(3)
        later = now + 86400
        if args.n > 100_000:
            bench_recall(sub_index(engine.index, 100_000), "100,000", later, rng)
        bench_recall(engine.index, f"{args.n:,}", later, rng)

        engine.clock = lambda: later
        single_full, batch_full = interleaved([
            lambda: engine.recall("pump pressure alarm", K),
            lambda: engine.recall_batch([f"query {j}" for j in range(BATCH)], K),
        ], 5)  # fmt: skip
        print(f"engine.recall over {args.n:,} (embed the text, rank, count the access in "
              f"SQLite): single {single_full * 1e3:.1f} ms, batch of {BATCH} "
              f"{batch_full * 1e3:.0f} ms")  # fmt: skip

        per_ram = engine.index.nbytes() / engine.index.n
        db_bytes = sum(os.path.getsize(p) for p in Path(tmp).glob("bulk.sqlite*"))
        print(f"memory per stored memory: {per_ram:,.0f} B in RAM (recall index: "
              f"{cfg.embed_dim * 4} B embedding + columns), {db_bytes / args.n:,.0f} B in "
              "SQLite (row + embedding + indexes)")  # fmt: skip
        engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
