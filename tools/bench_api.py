"""HTTP API figures: requests/s and latency percentiles of recall and device listing.

    .venv/bin/python tools/bench_api.py            # 1,000,000 memories, 1,000 devices
    .venv/bin/python tools/bench_api.py --small    # 20,000 memories, 100 devices (quick)

The stores are built first: the devices registered in the daemon's store, each with a
signed pack of 4 records taken through ``Store.take_pack`` (verified, stored), saved
counters and a session; the memories are synthetic rows bulk-inserted into a memory
store (:func:`bench_memory.bulk_rows`: random unit embeddings, a mix of states, sources
and ages). The API (with the dashboard mounted, as the daemon serves it) runs in a
process of its own under uvicorn; the clients are threads of this process, each on a
keep-alive connection, with one admin token (its rate limit set out of the way).

Printed per route: requests, wall time, requests/s, p50, p99 and max latency, and
the first call (a recall's first call loads the recall index from SQLite). Recall is
measured as a look (``touch: false``, a read) and as a use (``touch: true``: each hit
a rehearsal, written in one transaction per batch); then how many recalls each
batch answered (concurrent recalls share one pass over the index).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from bench_memory import bulk_insert, bulk_rows  # noqa: E402
from hirmem.api.tokens import TokenStore  # noqa: E402
from hirmem.daemon.store import Store  # noqa: E402
from hirmem.memory.config import MemoryConfig  # noqa: E402
from hirmem.memory.engine import MemoryEngine  # noqa: E402
from hirmem.protocol.clock import now_ms  # noqa: E402
from hirmem.protocol.keys import derive_test_key  # noqa: E402
from hirmem.protocol.packs import PackKind, sign_pack  # noqa: E402
from hirmem.protocol.records import GENESIS, Record, record_id  # noqa: E402

WORDS = ("temp", "pump", "valve", "zone", "pressure", "reading", "sensor", "hall", "line",
         "fan", "motor", "alarm", "door", "level", "flow")  # fmt: skip


def build_intake(db: Path, devices: int) -> None:
    now = now_ms()
    with Store(db) as store:
        for n in range(devices):
            dev = bytes.fromhex(f"be{n:014x}")
            key = derive_test_key(f"bench api device {n}")
            store.register_device(dev, key.public.raw, "simulated")
            link, records = GENESIS, []
            for c in range(1, 5):
                rec = Record.capture(record_id(dev, 1, c), b'{"c":21.5}', "sensor/temp0",
                                     now + c, bytes(32), 0x0FFF, 0x10000, 0xE666, 0x8000,
                                     link)  # fmt: skip
                records.append(rec)
                link = rec.hash
            pack = sign_pack(key, PackKind.MEMORY, dev, (1 << 32) | 1, GENESIS, now, records)
            assert store.take_pack(dev, pack.encoded).status == "accepted"
            store.save_counters(dev, {"device.ring_used": n % 16, "device.ring_capacity": 16,
                                      "frames_good": 100 + n}, seen_at=now)  # fmt: skip
            store.set_session(dev, f"socket://127.0.0.1:{5000 + n}", "open", f"dev{n}")


def build_memory(path: Path, n: int) -> None:
    cfg = MemoryConfig()
    engine = MemoryEngine(path, cfg)
    try:
        step = 100_000
        for start in range(0, n, step):
            rows = bulk_rows(min(step, n - start), cfg.embed_dim, time.time(), seed=start)
            # ids must differ across chunks: bulk_rows numbers from 0 each call
            rows = [(str(r[0])[:16] + f"{start + j:016x}", *r[1:]) for j, r in enumerate(rows)]
            bulk_insert(engine, rows)
    finally:
        engine.close()


def serve(workdir: Path, port_file: Path) -> None:
    """The server process: the application over the workdir's stores, until SIGTERM."""
    from hirmem.api.dashboard import application
    from hirmem.api.server import ApiServer
    from hirmem.api.sources import LocalSources

    sources = LocalSources(workdir / "hirmem.db", workdir / "memory.db")
    tokens = TokenStore(workdir / "hirmem.db")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with ApiServer(application(sources, tokens, rate=1e6, burst=1_000_000)) as server:
        port_file.write_text(str(server.port))
        stop.wait()
    sources.close()
    tokens.close()


class Client:
    def __init__(self, port: int, token: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def call(self, method: str, path: str, body: Any = None) -> tuple[float, Any]:
        data = None if body is None else json.dumps(body)
        t = time.perf_counter()
        self.conn.request(method, path, body=data, headers=self.headers)
        resp = self.conn.getresponse()
        raw = resp.read()
        took = time.perf_counter() - t
        if resp.status != 200:
            raise RuntimeError(f"{method} {path}: {resp.status} {raw[:300]!r}")
        return took, json.loads(raw)


def measure(port: int, token: str, label: str, requests: int, clients: int,
            make: Any) -> None:  # fmt: skip
    """``requests`` calls of ``make(rng) -> (method, path, body)`` over ``clients``
    keep-alive connections; prints the figures."""
    latencies: list[float] = []
    lock = threading.Lock()
    per = requests // clients
    errors: list[BaseException] = []

    def run(seed: int) -> None:
        rng = random.Random(seed)
        client = Client(port, token)
        mine = []
        try:
            for _ in range(per):
                took, _ = client.call(*make(rng))
                mine.append(took)
        except BaseException as exc:
            errors.append(exc)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t
    if errors:
        raise errors[0]
    latencies.sort()
    p = statistics.quantiles(latencies, n=100)
    print(f"{label:<40} {len(latencies):>6} req in {wall:6.2f} s  {len(latencies) / wall:8.1f} "
          f"req/s  p50 {p[49] * 1000:7.1f} ms  p99 {p[98] * 1000:7.1f} ms  "
          f"max {latencies[-1] * 1000:7.1f} ms")  # fmt: skip


def recall_batches(port: int, token: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/v1/metrics", headers={"Authorization": f"Bearer {token}"})
    text = conn.getresponse().read().decode()
    line = next(x for x in text.splitlines() if x.startswith("hirmem_api_recall_batches_total"))
    return int(float(line.split()[-1]))


def query(rng: random.Random) -> str:
    return " ".join(rng.sample(WORDS, 3))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--memories", type=int, default=1_000_000)
    ap.add_argument("--devices", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=2000, help="per route")
    ap.add_argument("--clients", type=int, default=8, help="concurrent connections")
    ap.add_argument("--small", action="store_true", help="20,000 memories, 100 devices")
    ap.add_argument("--dir", help="where to build the stores (default: a temp dir)")
    ap.add_argument("--serve", nargs=2, metavar=("DIR", "PORT_FILE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve:
        serve(Path(args.serve[0]), Path(args.serve[1]))
        return 0
    if args.small:
        args.memories, args.devices, args.requests = 20_000, 100, min(args.requests, 400)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        work = Path(tmp)
        t = time.perf_counter()
        build_intake(work / "hirmem.db", args.devices)
        t_dev = time.perf_counter() - t
        t = time.perf_counter()
        build_memory(work / "memory.db", args.memories)
        t_mem = time.perf_counter() - t
        tokens = TokenStore(work / "hirmem.db")
        token, _ = tokens.create("bench", "admin")
        tokens.close()
        print(f"built {args.devices:,} devices (a signed pack each) in {t_dev:.1f} s and "
              f"{args.memories:,} memories in {t_mem:.1f} s; {os.cpu_count()} CPUs, "
              f"{args.clients} client connections")  # fmt: skip
        port_file = work / "port"
        env = dict(os.environ, PYTHONPATH=str(ROOT / "host"))
        server = subprocess.Popen([sys.executable, __file__, "--serve", tmp, str(port_file)],
                                  env=env)  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while not port_file.exists() or not port_file.read_text():
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the API server did not start")
                time.sleep(0.1)
            port = int(port_file.read_text())
            first, _ = Client(port, token).call("POST", "/v1/memories/recall",
                                                {"query": "temp pump", "touch": False})
            print(f"first recall (loads the index of {args.memories:,} memories): "
                  f"{first:.2f} s")  # fmt: skip
            first, page = Client(port, token).call("GET", "/v1/devices?limit=100")
            print(f"first device page: {first * 1000:.1f} ms ({len(page['items'])} rows)")
            n, c = args.requests, args.clients
            measure(port, token, f"GET /v1/devices?limit=100 ({args.devices:,} devices)",
                    n, c, lambda rng: ("GET", "/v1/devices?limit=100", None))  # fmt: skip
            measure(port, token, f"GET /v1/devices/{{id}} ({args.devices:,} devices)", n, c,
                    lambda rng: ("GET", f"/v1/devices/be{rng.randrange(args.devices):014x}",
                                 None))  # fmt: skip
            measure(port, token, f"POST recall k=10, look ({args.memories:,} mem)", n, c,
                    lambda rng: ("POST", "/v1/memories/recall",
                                 {"query": query(rng), "k": 10, "touch": False}))  # fmt: skip
            measure(port, token, f"POST recall k=10, use ({args.memories:,} mem)", n // 4, c,
                    lambda rng: ("POST", "/v1/memories/recall",
                                 {"query": query(rng), "k": 10, "touch": True}))  # fmt: skip
            batches = recall_batches(port, token)
            recalls = n // c * c + n // 4 // c * c + 1
            print(f"recalls answered in {batches:,} batches (one index pass each): "
                  f"{recalls / max(batches, 1):.1f} per batch")  # fmt: skip
        finally:
            server.terminate()
            server.wait(60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
