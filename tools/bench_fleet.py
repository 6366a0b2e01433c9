"""Figures of the fleet node: gateways uploading signed 8-record packs over HTTP.

    python tools/bench_fleet.py [--packs 1500] [--clients 2] [--concurrency 16]
                                [--processes 1,2,4] [--backends sqlite,postgres] [--no-clusters]
                                [--no-failover] [--only-recovery]

For each backend (a SQLite file per tenant; a PostgreSQL 15 database per tenant, the
server started here under a temp dir by :mod:`hirmem.emulation.postgres`, fsync on)
and each number of fleet-node processes (``hirmem fleet serve --workers N``), the same
pre-signed chains (``--devices`` devices, one tenant, ``--gateways`` gateways) are
uploaded by ``--clients`` client processes holding ``--concurrency`` keep-alive
connections in all, each device's chain in order, each request signed (RFC 9421) by
its gateway as it is sent. Printed: stored packs per second over the run, upload
latency p50 / p99 (request sent to answer read), 503s retried. The same run's ceilings:
Ed25519 verifications per second on one core (``cryptography``), and PostgreSQL's own
rate from the benchmark client for the rows one pack writes (one pack row, eight record
rows, one job row, a head update), one transaction per pack, 1 and 4 connections; the
uploads judged in one thread without HTTP. Then two tenants placed on one PostgreSQL
cluster against the same two placed on two clusters, and the time from a SIGKILL of a
node in mid-ingest to the restarted node's first stored upload, and from a SIGKILL of
the tenant's PostgreSQL primary (its synchronous standby promoted, ``hirmem fleet tenant
move`` run) to the first stored upload (``--only-recovery``: these two figures alone).

The backend ``postgres-registry`` (in the scaling table only) is ``postgres`` with the
fleet registry on PostgreSQL too (a database of the same server, ``--registry``), as a
fleet served from several machines runs: every upload reads its gateway and device there.

Everything shares this machine's cores: the clients, the fleet processes and the
database compete for them, so the figures are for this machine, in this run.
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing as mp
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "host"))

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402

from hirmem.fleet.app import MEDIA_TYPE  # noqa: E402
from hirmem.fleet.registry import Registry  # noqa: E402
from hirmem.protocol.httpsig import sign_request  # noqa: E402
from hirmem.protocol.keys import SigningKey, derive_test_key  # noqa: E402
from hirmem.protocol.packs import PackKind, sign_pack  # noqa: E402
from hirmem.protocol.records import GENESIS, Record, record_id  # noqa: E402

T0 = 1_780_000_000_000
Chain = list[tuple[str, bytes]]  # (pack id hex, COSE bytes), in seq order


def make_chain(device: bytes, key: SigningKey, packs: int, records: int = 8) -> Chain:
    prev, capture, out = GENESIS, 0, []
    for seq in range(1, packs + 1):
        recs, link = [], prev  # a pack's records chain on from the previous pack's hash
        for _ in range(records):
            capture += 1
            rec = Record.capture(
                record_id(device, 1, capture),
                b'{"t":%d}' % capture,
                "temp0",
                T0 + capture,
                bytes(32),
                0x0FFF,
                0x10000,
                0xE666,
                0x8000,
                link,
            )
            recs.append(rec)
            link = rec.hash
        pack = sign_pack(key, PackKind.MEMORY, device, seq, prev, T0 + seq, recs)
        out.append((pack.pack_id.hex(), pack.encoded))
        prev = pack.hash
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/v1/healthz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"the fleet node on port {port} did not start")


# ---- the client processes --------------------------------------------------------------


def client(
    port: int,
    chains: list[tuple[int, Chain]],
    seeds: list[bytes],
    threads: int,
    out: mp.Queue,  # type: ignore[type-arg]
) -> None:
    """Upload ``chains`` (each in order) over ``threads`` keep-alive connections. Chain i
    (its number in the whole run) is sent by gateway i mod ``len(seeds)``, as
    :func:`setup_fleet` registers its device: a client's share keeps the run's numbers."""
    keys = [(Ed25519PrivateKey.from_private_bytes(s), SigningKey(s).kid.hex()) for s in seeds]
    todo = list(chains)
    lock = threading.Lock()
    latencies: list[float] = []
    retried = [0]
    failures: list[str] = []
    authority = f"127.0.0.1:{port}"

    def worker() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while True:
            with lock:
                if not todo:
                    break
                n, chain = todo.pop()
            key, keyid = keys[n % len(keys)]
            for pid, body in chain:
                path = f"/v1/packs/{pid}"
                while True:
                    headers = {"Content-Type": MEDIA_TYPE}
                    headers |= sign_request(
                        "PUT",
                        authority,
                        path,
                        headers,
                        body,
                        key,
                        keyid,
                        int(time.time()),
                        secrets.token_hex(8),
                    )
                    start = time.perf_counter()
                    try:
                        conn.request("PUT", path, body, headers)
                        resp = conn.getresponse()
                        resp.read()
                    except (OSError, http.client.HTTPException):  # the node went away
                        conn.close()
                        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                        continue
                    took = time.perf_counter() - start
                    if resp.status == 503:
                        with lock:
                            retried[0] += 1
                        time.sleep(0.01)
                        continue
                    with lock:
                        if resp.status not in (200, 201):
                            failures.append(f"{resp.status} for {pid}")
                        latencies.append(took)
                    break
        conn.close()

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    out.put((latencies, retried[0], failures))


def run_one(
    backend: str,
    processes: int,
    args: argparse.Namespace,
    chains: list[Chain],
    gateways: list[SigningKey],
    devices: list[SigningKey],
    pg_dsn: str | None,
    placement: list[str] | None = None,
) -> dict[str, float]:
    registry = None
    if backend == "postgres-registry":  # the registry in a database beside the tenant's
        from hirmem.fleet.registry import create_database

        assert pg_dsn is not None
        backend = "postgres"
        registry = create_database(pg_dsn, f"hirmem_registry_{secrets.token_hex(4)}")
    with tempfile.TemporaryDirectory(prefix="hirmem-bench-fleet-") as tmp:
        directory = Path(tmp) / "fleet"
        names = setup_fleet(directory, backend, gateways, devices, pg_dsn, placement, registry)
        port = free_port()
        server = start_node(directory, port, processes, registry)
        try:
            wait_healthy(port)
            time.sleep(0.5 * processes)  # every worker process up
            queue: mp.Queue = mp.Queue()  # type: ignore[type-arg]
            per = args.concurrency // args.clients
            shares = [list(enumerate(chains))[c :: args.clients] for c in range(args.clients)]
            seeds = [g.seed() for g in gateways]
            cpu_before = group_cpu_seconds(server.pid)
            start = time.perf_counter()
            procs = [
                mp.Process(target=client, args=(port, share, seeds, per, queue)) for share in shares
            ]
            for p in procs:
                p.start()
            results = [queue.get() for _ in procs]
            wall = time.perf_counter() - start
            server_cpu = group_cpu_seconds(server.pid) - cpu_before
            for p in procs:
                p.join()
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(60)
        reg = Registry(directory, registry=registry)
        stored = sum(reg.store(name).counts()["packs"] for name in names)
        reg.close()
    latencies = sorted(x for r in results for x in r[0])
    failures = [f for r in results for f in r[2]]
    if failures:
        print(f"  {len(failures)} uploads refused, e.g. {failures[:3]}", file=sys.stderr)
    total = sum(len(c) for c in chains)
    if stored != total:
        print(f"  stored {stored} packs of {total}", file=sys.stderr)
    return {
        "packs_s": stored / wall,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))],
        "retried": float(sum(r[1] for r in results)),
        "wall_s": wall,
        "cpu_ms": 1000 * server_cpu / max(stored, 1),
    }


def start_node(
    directory: Path, port: int, processes: int, registry: str | None = None
) -> subprocess.Popen[bytes]:
    argv = [
        "fleet",
        "serve",
        "--database-dir",
        str(directory),
        "--port",
        str(port),
        "--workers",
        str(processes),
        "--consolidate-every",
        "0",
        "--max-inflight",
        "256",
        *(["--registry", registry] if registry else []),
    ]
    # its log to a file beside the fleet directory: a pipe nobody reads would stop the
    # node mid-run once a failover fills it with errors
    with (directory.parent / "node.log").open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "hirmem.cli", *argv],
            env=dict(os.environ, PYTHONPATH=str(ROOT / "host")),
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
        )


def setup_fleet(
    directory: Path,
    backend: str,
    gateways: list[SigningKey],
    devices: list[SigningKey],
    pg_dsn: str | None,
    placement: list[str] | None = None,
    registry: str | None = None,
) -> list[str]:
    """One tenant (or one per entry of ``placement``: the cluster each is placed on);
    gateway g and the devices it carries belong to tenant g mod the number of tenants.
    The tenants' names. ``registry``: the fleet registry's PostgreSQL database."""
    reg = Registry(directory, registry=registry)
    where: list[str | None] = list(placement) if placement else [pg_dsn]
    names = [f"bench{t}" for t in range(len(where))]
    for name, dsn in zip(names, where, strict=True):
        if backend == "postgres":
            assert dsn is not None
            reg.add_tenant(name, dsn, f"hirmem_{name}_{secrets.token_hex(4)}")
        else:
            reg.add_tenant(name)
    for g, gw in enumerate(gateways):
        reg.add_gateway(names[g % len(names)], gw.public.raw)
    for i, key in enumerate(devices):  # chain i is sent by gateway i mod len(gateways)
        reg.add_device(names[(i % len(gateways)) % len(names)], device_id(i), key.public.raw)
    reg.close()
    return names


def recovery_after_sigkill(
    backend: str,
    args: argparse.Namespace,
    chains: list[Chain],
    gateways: list[SigningKey],
    devices: list[SigningKey],
    pg_dsn: str | None,
) -> tuple[float, float]:
    """(seconds from SIGKILL to the restarted node's first stored upload, of which the
    process start), uploads running when the node is killed."""
    with tempfile.TemporaryDirectory(prefix="hirmem-bench-fleet-") as tmp:
        directory = Path(tmp) / "fleet"
        setup_fleet(directory, backend, gateways, devices, pg_dsn)
        port = free_port()
        server = start_node(directory, port, 1)
        wait_healthy(port)
        queue: mp.Queue = mp.Queue()  # type: ignore[type-arg]
        seeds = [g.seed() for g in gateways]
        load = mp.Process(target=client, args=(port, list(enumerate(chains))[1:], seeds, 4, queue))
        load.start()
        time.sleep(1.0)
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(30)
        killed = time.perf_counter()
        server = start_node(directory, port, 1)
        try:
            wait_healthy(port, 120)
            healthy = time.perf_counter()
            client(port, [(0, chains[0][:1])], seeds, 1, queue)  # one upload, answered
            queue.get()  # its own result; the load's comes after
            stored = time.perf_counter()
            queue.get()
            load.join(120)
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(60)
    return stored - killed, healthy - killed


def recovery_after_failover(
    args: argparse.Namespace,
    chains: list[Chain],
    gateways: list[SigningKey],
    devices: list[SigningKey],
) -> dict[str, float]:
    """A tenant on a PostgreSQL primary with a synchronous standby, uploads running: the
    primary SIGKILLed, the standby promoted, ``hirmem fleet tenant move`` run as an
    operator would, and a gateway that keeps sending one pack from the moment of the
    kill (retrying its 503s). Seconds from the kill to: the promotion done, the move
    written, that pack stored; and the packs stored in the end against those sent."""
    from hirmem.emulation import postgres

    with (
        tempfile.TemporaryDirectory(prefix="hirmem-bench-fleet-") as tmp,
        postgres.Primary("bench-failover") as primary,
        postgres.Standby(primary, "bench_failover_standby") as standby,
    ):
        directory = Path(tmp) / "fleet"
        [name] = setup_fleet(directory, "postgres", gateways, devices, primary.dsn)
        reg = Registry(directory)
        tenant = reg.tenant(name)
        reg.close()
        assert tenant is not None
        dbname = tenant.location.split("dbname=")[1].split()[0]
        port = free_port()
        server = start_node(directory, port, 1)
        try:
            wait_healthy(port)
            queue: mp.Queue = mp.Queue()  # type: ignore[type-arg]
            seeds = [g.seed() for g in gateways]
            rest = list(enumerate(chains))[1:]
            load = mp.Process(target=client, args=(port, rest, seeds, 4, queue))
            load.start()
            time.sleep(1.0)
            probe_queue: mp.Queue = mp.Queue()  # type: ignore[type-arg]
            probe = threading.Thread(
                target=client, args=(port, [(0, chains[0][:1])], seeds, 1, probe_queue)
            )
            primary.kill()
            killed = time.perf_counter()
            probe.start()  # the first upload after the kill: 503s until the move
            standby.promote()
            promoted = time.perf_counter()
            move = subprocess.run(
                [sys.executable, "-m", "hirmem.cli", "fleet", "tenant", "move", name,
                 "--postgres", f"host=127.0.0.1 port={standby.port} user=hirmem dbname={dbname}",
                 "--database-dir", str(directory)],
                env=dict(os.environ, PYTHONPATH=str(ROOT / "host")),
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            moved = time.perf_counter()
            if move.returncode != 0:
                raise SystemExit(f"tenant move failed: {move.stderr.strip()}")
            probe.join(300)
            stored_first = time.perf_counter()
            _, probe_retried, probe_failures = probe_queue.get()
            _, _, load_failures = queue.get()
            load.join(300)
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(60)
        reg = Registry(directory)
        stored = reg.store(name).counts()["packs"]
        reg.close()
    failures = probe_failures + load_failures
    if failures:
        print(f"  {len(failures)} uploads refused, e.g. {failures[:3]}", file=sys.stderr)
    return {
        "promoted_s": promoted - killed,
        "moved_s": moved - killed,
        "stored_s": stored_first - killed,
        "probe_503s": float(probe_retried),
        "stored": float(stored),
        "sent": float(1 + sum(len(c) for c in chains[1:])),
    }


def judge_rate(
    backend: str,
    chains: list[Chain],
    gateways: list[SigningKey],
    devices: list[SigningKey],
    pg_dsn: str | None,
) -> tuple[float, float]:
    """Uploads judged per second in one thread without HTTP (the signature checked, the
    pack verified and stored, as :meth:`FleetNode.judge` does behind the ASGI app), and
    the CPU ms of each."""
    from hirmem.fleet.app import FleetConfig, FleetNode

    with tempfile.TemporaryDirectory(prefix="hirmem-bench-fleet-") as tmp:
        directory = Path(tmp) / "fleet"
        setup_fleet(directory, backend, gateways, devices, pg_dsn)
        node = FleetNode(FleetConfig(directory))
        authority, requests = "fleet.example:8470", []
        for n, chain in enumerate(chains):
            key = Ed25519PrivateKey.from_private_bytes(gateways[n % len(gateways)].seed())
            keyid = gateways[n % len(gateways)].kid.hex()
            for pid, body in chain:
                headers = {"content-type": MEDIA_TYPE}
                headers |= {
                    k.lower(): v
                    for k, v in sign_request(
                        "PUT",
                        authority,
                        f"/v1/packs/{pid}",
                        headers,
                        body,
                        key,
                        keyid,
                        int(time.time()),
                        secrets.token_hex(8),
                    ).items()
                }
                requests.append((pid, body, headers))
        cpu, start = time.process_time(), time.perf_counter()
        for pid, body, headers in requests:
            answer = node.judge("PUT", authority, f"/v1/packs/{pid}", headers, pid, body)
            assert answer.status_code == 201, answer.body
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        node.registry.close()
    return len(requests) / wall, 1000 * cpu / len(requests)


def group_cpu_seconds(pgid: int) -> float:
    """CPU time (user + system) of the live processes in process group ``pgid``."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # pgrp; utime, stime are fields 14, 15 of stat
            total += int(fields[11]) + int(fields[12])
    return total / tick


def device_id(i: int) -> bytes:
    return bytes([0xBE]) + i.to_bytes(7, "big")


# ---- ceilings ---------------------------------------------------------------------------


def ed25519_verifies_per_second(seconds: float = 1.5) -> float:
    key = Ed25519PrivateKey.generate()
    message = os.urandom(200)
    signature, public = key.sign(message), key.public_key()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(200):
            public.verify(signature, message)
        n += 200
    return n / (time.perf_counter() - start)


def pg_insert_rate(dsn: str, connections: int, seconds: float = 2.0) -> float:
    """Packs' worth of rows per second (1 pack, 8 records, 1 job, 1 head update per
    transaction), ``connections`` clients at once, fsync on."""
    import psycopg

    db = f"hirmem_raw_{secrets.token_hex(4)}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {db}")
    target = psycopg.conninfo.make_conninfo(dsn, dbname=db)
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute("CREATE TABLE p (n BIGSERIAL PRIMARY KEY, id BYTEA UNIQUE, raw BYTEA)")
        conn.execute("CREATE TABLE r (n BIGSERIAL PRIMARY KEY, p BIGINT, idx INT, w BYTEA)")
        conn.execute("CREATE TABLE j (n BIGSERIAL PRIMARY KEY, p BIGINT UNIQUE)")
        conn.execute("CREATE TABLE h (d INT PRIMARY KEY, head BYTEA)")
        conn.execute("INSERT INTO h SELECT g, NULL FROM generate_series(0, 63) g")
    counts = [0] * connections
    stop = time.perf_counter() + seconds
    raw, wire = os.urandom(1400), os.urandom(120)

    def run(c: int) -> None:
        with psycopg.connect(target, autocommit=True) as conn:
            while time.perf_counter() < stop:
                with conn.transaction():
                    conn.execute("UPDATE h SET head = %s WHERE d = %s", (os.urandom(32), c))
                    n = conn.execute(
                        "INSERT INTO p (id, raw) VALUES (%s, %s) RETURNING n", (os.urandom(16), raw)
                    ).fetchone()[0]  # type: ignore[index]
                    for i in range(8):
                        conn.execute("INSERT INTO r (p, idx, w) VALUES (%s, %s, %s)", (n, i, wire))
                    conn.execute("INSERT INTO j (p) VALUES (%s)", (n,))
                counts[c] += 1

    threads = [threading.Thread(target=run, args=(c,)) for c in range(connections)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - start)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--packs", type=int, default=1500, help="packs per run (8 records each)")
    ap.add_argument("--devices", type=int, default=48)
    ap.add_argument("--gateways", type=int, default=8)
    ap.add_argument("--clients", type=int, default=2, help="client processes")
    ap.add_argument("--concurrency", type=int, default=16, help="connections in all")
    ap.add_argument("--processes", default="1,2,4", help="fleet-node processes to try")
    ap.add_argument(
        "--backends",
        default="sqlite,postgres",
        help="of sqlite, postgres, postgres-registry (the registry on PostgreSQL too)",
    )
    ap.add_argument(
        "--no-clusters",
        dest="clusters",
        action="store_false",
        help="skip two tenants on one PostgreSQL cluster against two clusters",
    )
    ap.add_argument(
        "--no-failover",
        dest="failover",
        action="store_false",
        help="skip the time to recover after the tenant's primary fails over",
    )
    ap.add_argument(
        "--only-recovery",
        action="store_true",
        help="only the recovery figures (after a SIGKILL of the node, after a failover)",
    )
    args = ap.parse_args()

    per_device = max(1, args.packs // args.devices)
    devices = [derive_test_key(f"bench fleet device {i}") for i in range(args.devices)]
    gateways = [derive_test_key(f"bench fleet gateway {g}") for g in range(args.gateways)]
    chains = [make_chain(device_id(i), k, per_device) for i, k in enumerate(devices)]
    total = per_device * args.devices
    print(
        f"fleet bench: {total} packs of 8 records, {args.devices} devices, "
        f"{args.gateways} gateways, {args.clients} client processes x "
        f"{args.concurrency // args.clients} connections; {os.cpu_count()} cores"
    )
    if not args.only_recovery:
        verify = ed25519_verifies_per_second()
        print(f"ceiling: Ed25519 verifications on one core: {verify:,.0f}/s")

    table_backends = args.backends.split(",")
    backends = [b for b in table_backends if b != "postgres-registry"]  # the other figures
    primary = None
    if {"postgres", "postgres-registry"} & set(table_backends):
        from hirmem.emulation import postgres

        why = postgres.available()
        if why is not None:
            print(f"postgres: skipped ({why})")
            backends = [b for b in backends if b != "postgres"]
            table_backends = [b for b in table_backends if not b.startswith("postgres")]
        else:
            primary = postgres.Primary("bench")
    try:
        if primary is not None and not args.only_recovery:
            for c in (1, 4):
                rate = pg_insert_rate(primary.dsn, c)
                print(
                    f"ceiling: PostgreSQL rows of one pack per transaction, {c} "
                    f"connection{'s' if c > 1 else ''}: {rate:,.0f} packs/s"
                )
        for backend in [] if args.only_recovery else backends:
            rate, ms = judge_rate(
                backend, chains, gateways, devices, primary.dsn if primary else None
            )
            print(
                f"ceiling: judged without HTTP, one thread, {backend}: {rate:,.0f} packs/s "
                f"({ms:.2f} ms CPU each)",
                flush=True,
            )
        if not args.only_recovery:
            print()
            print_scaling_table(args, table_backends, chains, gateways, devices, primary)
        if primary is not None and args.clusters and not args.only_recovery:
            from hirmem.emulation import postgres

            print()
            with postgres.Primary("bench-second") as second:
                for label, placement in (
                    ("one cluster", [primary.dsn, primary.dsn]),
                    ("two clusters", [primary.dsn, second.dsn]),
                ):
                    r = run_one("postgres", 2, args, chains, gateways, devices, None, placement)
                    print(
                        f"two tenants on {label:<12} (2 processes): {r['packs_s']:,.0f} "
                        f"packs/s, p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms",
                        flush=True,
                    )
        print()
        for backend in backends:
            total, start = recovery_after_sigkill(
                backend, args, chains, gateways, devices, primary.dsn if primary else None
            )
            print(
                f"recovery after SIGKILL mid-ingest, {backend}: {total:.2f} s to the first "
                f"stored upload ({start:.2f} s of it the process start)",
                flush=True,
            )
        if primary is not None and args.failover:
            r = recovery_after_failover(args, chains, gateways, devices)
            print(
                f"recovery after a failover mid-ingest, postgres: {r['stored_s']:.2f} s from the "
                f"primary's SIGKILL to the first stored upload (standby promoted at "
                f"{r['promoted_s']:.2f} s, tenant moved at {r['moved_s']:.2f} s; "
                f"{r['stored']:.0f} of {r['sent']:.0f} packs stored in the end)",
                flush=True,
            )
    finally:
        if primary is not None:
            primary.close()
    return 0


def print_scaling_table(
    args: argparse.Namespace,
    backends: list[str],
    chains: list[Chain],
    gateways: list[SigningKey],
    devices: list[SigningKey],
    primary: Any,
) -> None:
    """Packs/s, p50/p99 per backend and number of fleet-node processes."""
    print(
        f"{'backend':<17} {'processes':>9} {'packs/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'503s':>6} {'wall s':>7} {'node CPU ms/pack':>17}"
    )
    for backend in backends:
        for n in (int(x) for x in args.processes.split(",")):
            r = run_one(
                backend, n, args, chains, gateways, devices, primary.dsn if primary else None
            )
            print(
                f"{backend:<17} {n:>9} {r['packs_s']:>9,.0f} {r['p50_ms']:>8.1f} "
                f"{r['p99_ms']:>8.1f} {int(r['retried']):>6} {r['wall_s']:>7.1f} "
                f"{r['cpu_ms']:>17.2f}",
                flush=True,
            )


if __name__ == "__main__":
    sys.exit(main())
