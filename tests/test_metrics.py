"""The daemon's /metrics and /healthz as an operator (and Prometheus) reads them.

The exposition is parsed with ``prometheus_client.parser`` and checked against the
store it describes; /healthz is driven healthy and unhealthy by real causes (a device
line that goes away, a disk that fills); the endpoint is held by hundreds of idle
connections without a thread each; bad addresses are configuration errors.
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from hirmem.daemon.config import ConfigError, build_config
from hirmem.daemon.metrics import (
    FIGURES_MAX_AGE_S,
    SESSION_HELP,
    LatencyHistogram,
    render_metrics,
)
from hirmem.daemon.service import Daemon
from hirmem.daemon.store import REFUSALS_PER_DEVICE, Store
from hirmem.emulation.rogue import RogueDevice
from hirmem.link.session import Counters
from hirmem.protocol.keys import derive_test_key
from hirmem.protocol.messages import PackStatus
from test_daemon_faults import (
    daemon_for,
    daemon_logs,
    fill,
    register,
    running,
    sim,
    small_disk,
    wait_until,
)

HOST = "a1a2a3a4a5a6a7a8"
ROOT = Path(__file__).resolve().parents[1]


# ---- reading the exposition ----------------------------------------------------------------


def families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(text: str, name: str, /, **labels: str) -> list[Sample]:
    """Samples called ``name`` whose labels include ``labels``."""
    return [
        s
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]


def value(text: str, name: str, /, **labels: str) -> float:
    found = samples(text, name, **labels)
    assert len(found) == 1, f"{name}{labels}: {len(found)} samples"
    return float(found[0].value)


def get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return int(r.status), bytes(r.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), bytes(exc.read())


def scrape(daemon: Daemon) -> str:
    assert daemon.endpoint is not None
    status, body = get(daemon.endpoint.port, "/metrics")
    assert status == 200
    return body.decode()


def health(daemon: Daemon) -> tuple[int, dict[str, Any]]:
    assert daemon.endpoint is not None
    status, body = get(daemon.endpoint.port, "/healthz")
    doc: dict[str, Any] = json.loads(body)
    return status, doc


# ---- the exposition --------------------------------------------------------------------------


def test_every_session_counter_has_help_text() -> None:
    assert set(SESSION_HELP) == {f.name for f in fields(Counters)}


def test_histogram_buckets_are_cumulative_against_a_sorted_oracle() -> None:
    rng = random.Random(6)
    hist = LatencyHistogram()
    seen = [rng.choice([rng.expovariate(300), rng.uniform(0, 20)]) for _ in range(5000)]
    for s in seen:
        hist.observe(s)
    buckets, total = hist.snapshot()
    assert total == pytest.approx(sum(seen))
    for le, count in buckets:
        bound = float("inf") if le == "+Inf" else float(le)
        assert count == sum(1 for s in seen if s <= bound), le


def test_the_exposition_describes_the_lines_and_the_store(tmp_path: Path) -> None:
    devices = [sim(1, packs_to_make=6), sim(2, packs_to_make=4)]
    rogue = RogueDevice(bytes.fromhex("ee00000000000bad"), derive_test_key("junk"),
                        max_frame=4096)  # fmt: skip
    db = tmp_path / "hirmem.db"
    register(db, devices)
    rng = random.Random(15)
    with Store(db) as store:  # refusals of an earlier run: the quota is full
        for _ in range(REFUSALS_PER_DEVICE):
            assert store.take_pack(rogue.device_id, rng.randbytes(300)).status == "refused"
    urls = [d.url for d in devices]
    with running(devices):
        daemon = daemon_for(tmp_path, db, [*devices, rogue], metrics="127.0.0.1:0",
                            max_frame=4096)  # fmt: skip
        daemon.start()
        try:
            wait_until(lambda: all(d.done for d in devices), 30, "every pack accepted")
            rogue.connect(timeout=20)
            live = 9  # offered over the line now: 9 older digests rotate out
            for _ in range(live):
                assert PackStatus(rogue.offer(rng.randbytes(300)).status) == PackStatus.REFUSED
            wait_until(lambda: all(w.device_status for w in daemon.workers[:2]), 10, "STATUS")
            text = scrape(daemon)
        finally:
            rogue.close()
            daemon.stop()
    fams = families(text)
    raw_types = [line.split()[2:4] for line in text.splitlines() if line.startswith("# TYPE")]
    assert raw_types and len(raw_types) == len(fams)
    for name, kind in raw_types:
        if kind == "counter":  # counters end in _total, and so do all their samples
            assert name.endswith("_total"), name
    for fam in fams.values():
        assert fam.documentation and fam.documentation != fam.name, fam.name
        if fam.type == "counter":
            assert all(s.name == fam.name + "_total" for s in fam.samples), fam.name
    assert fams["hirmem_intake_seconds"].type == "histogram"
    assert fams["hirmem_line_state"].type == "gauge"

    with Store(db) as store:
        for n, d in enumerate(devices):
            dev, line = d.device_id.hex(), {"name": f"sim{n}", "url": urls[n]}
            at = {"device": dev, **line}
            assert value(text, "hirmem_packs_accepted_total", **at) == len(d.accepted)
            assert value(text, "hirmem_store_packs", device=dev, name=f"sim{n}") == (
                store.count_packs(d.device_id)) == len(d.accepted)  # fmt: skip
            assert value(text, "hirmem_store_records", device=dev, name=f"sim{n}") == (
                store.count_records(d.device_id))  # fmt: skip
            # every accepted pack went through the intake's clock once
            assert value(text, "hirmem_intake_seconds_count", outcome="accepted", **at) == len(
                d.accepted
            )
            assert value(text, "hirmem_intake_seconds_bucket", outcome="accepted", le="+Inf",
                         **at) == len(d.accepted)  # fmt: skip
            assert value(text, "hirmem_line_state", state="open", **at) == 1
            assert value(text, "hirmem_line_state", state="reconnecting", **at) == 0
            assert value(text, "hirmem_session_open", **at) == 1
            heard = value(text, "hirmem_device_last_heard_timestamp_seconds", **at)
            assert time.time() - 60 < heard <= time.time()
            assert value(text, "hirmem_device_packs_acked_total", **at) >= 1
            assert value(text, "hirmem_device_ring_capacity", **at) > 0
        junk_dev = rogue.device_id.hex()
        kept = store.refusals(rogue.device_id)
        assert len(kept) == REFUSALS_PER_DEVICE
        reasons = {r.reason.name.lower().replace("_", "-") for r in kept}
        assert sum(
            value(text, "hirmem_store_refusals", device=junk_dev, reason=r) for r in reasons
        ) == len(kept)
        assert value(text, "hirmem_store_refusals_rotated_total", device=junk_dev,
                     name="sim2") == store.refusals_rotated()[rogue.device_id][0] == 9  # fmt: skip
        assert value(text, "hirmem_store_refused_offers_total", device=junk_dev) == (
            REFUSALS_PER_DEVICE + live)  # fmt: skip
        refused = samples(text, "hirmem_packs_refused_total", device=junk_dev, name="sim2")
        assert sum(s.value for s in refused) == live
        assert value(text, "hirmem_intake_seconds_count", device=junk_dev, outcome="refused") == (
            live)  # fmt: skip
        assert value(text, "hirmem_store_integrity_warnings") == len(store.integrity_warnings())
        assert value(text, "hirmem_store_devices") == len(store.devices())
        assert value(text, "hirmem_store_writable") == 1
    assert value(text, "hirmem_http_requests_total") >= 1


# ---- /healthz ---------------------------------------------------------------------------------


def test_healthz_is_200_while_every_line_is_open_and_503_when_one_is_gone(
    tmp_path: Path,
) -> None:
    devices = [sim(1, pack_every_s=0.05), sim(2, pack_every_s=0.05)]
    db = tmp_path / "hirmem.db"
    register(db, devices)
    with running(devices):
        daemon = daemon_for(tmp_path, db, devices, metrics="127.0.0.1:0")
        daemon.start()
        try:
            wait_until(lambda: health(daemon)[0] == 200, 20, "healthy")
            status, doc = health(daemon)
            assert status == 200 and doc["status"] == "ok" and doc["store"]["writable"] is True
            assert [w["name"] for w in doc["workers"]] == ["sim0", "sim1"]
            assert all(w["phase"] == "open" and w["alive"] for w in doc["workers"])
            wait_until(lambda: all((w["last_seen_s"] or 9) < 1.0
                                   for w in health(daemon)[1]["workers"]), 5, "seen")  # fmt: skip
            devices[1].close()  # the device goes away for good: its line is gone
            wait_until(lambda: health(daemon)[0] == 503, 10, "unhealthy")
            status, doc = health(daemon)
            assert status == 503
            gone = doc["workers"][1]
            assert doc["status"] == "unhealthy" and doc["workers"][0]["ok"] is True
            assert gone["ok"] is False and gone["phase"] in ("lost", "reconnecting", "connecting")
            assert gone["device"] == devices[1].device_id.hex() and gone["session_open"] is False
            text = scrape(daemon)
            assert value(text, "hirmem_line_state", name="sim1", state="open") == 0
        finally:
            daemon.stop()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs for the full disk needs root")
def test_healthz_is_503_while_the_store_cannot_write_and_200_after(tmp_path: Path) -> None:
    devices = [sim(1, pack_every_s=0.02)]
    with small_disk(tmp_path / "disk", "3m") as disk, daemon_logs():
        db = disk / "hirmem.db"
        register(db, devices)
        with running(devices):
            daemon = daemon_for(tmp_path, db, devices, metrics="127.0.0.1:0")
            daemon.start()
            try:
                wait_until(lambda: health(daemon)[0] == 200, 20, "healthy")
                filler = fill(disk)
                wait_until(lambda: health(daemon)[0] == 503, 30, "unhealthy on a full disk")
                status, doc = health(daemon)
                assert status == 503 and doc["store"]["writable"] is False
                assert "full" in doc["store"]["last_error"]
                assert all(w["ok"] for w in doc["workers"])  # the line itself is fine
                text = scrape(daemon)
                assert value(text, "hirmem_store_writable") == 0
                assert value(text, "hirmem_store_write_failures_total") >= 1
                assert value(text, "hirmem_intake_seconds_count", outcome="deferred") >= 1
                filler.unlink()
                wait_until(lambda: health(daemon)[0] == 200, 30, "healthy again")
                assert health(daemon)[1]["store"]["last_error"] is None
            finally:
                daemon.stop()


# ---- a bounded server ------------------------------------------------------------------------


def quiet_daemon(tmp_path: Path, **host: object) -> Daemon:
    settings: dict[str, object] = {"id": HOST, "database": "h.db", "memory_every": 0,
                                   "metrics": "127.0.0.1:0"}  # fmt: skip
    settings.update(host)
    return Daemon(build_config({"host": settings}, tmp_path, ["loop://"]))


def idle_connections(port: int, n: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(n)]


def test_500_idle_connections_add_no_thread(tmp_path: Path) -> None:
    daemon = quiet_daemon(tmp_path)
    daemon.start()
    conns: list[socket.socket] = []
    try:
        endpoint = daemon.endpoint
        assert endpoint is not None
        threads = threading.active_count()
        conns = idle_connections(endpoint.port, 500)
        wait_until(lambda: endpoint.open_connections == 500, 10, "500 connections held")
        assert threading.active_count() <= threads  # not one thread more
        text = scrape(daemon)  # and it still answers at once
        assert value(text, "hirmem_http_connections") >= 500
    finally:
        for c in conns:
            c.close()
        daemon.stop()


def test_at_the_connection_limit_the_longest_idle_one_is_closed(tmp_path: Path) -> None:
    daemon = quiet_daemon(tmp_path)
    daemon.start()
    conns: list[socket.socket] = []
    try:
        endpoint = daemon.endpoint
        assert endpoint is not None
        endpoint.max_connections = 8
        conns = idle_connections(endpoint.port, 20)
        wait_until(lambda: endpoint.counters.accepted == 20, 10, "20 accepted")
        assert endpoint.open_connections == 8
        assert endpoint.counters.closed["evicted"] == 12
        conns[0].settimeout(5)
        assert conns[0].recv(1) == b""  # the first one was closed: it had idled longest
        assert get(endpoint.port, "/healthz")[0] in (200, 503)  # a scrape still gets in
        text = scrape(daemon)
        assert value(text, "hirmem_http_connections_closed_total", why="evicted") >= 12
    finally:
        for c in conns:
            c.close()
        daemon.stop()


def test_a_silent_connection_is_closed_after_the_head_timeout(tmp_path: Path) -> None:
    daemon = quiet_daemon(tmp_path)
    daemon.start()
    try:
        endpoint = daemon.endpoint
        assert endpoint is not None
        endpoint.head_timeout = 0.3
        (conn,) = idle_connections(endpoint.port, 1)
        conn.sendall(b"GET /metr")  # half a request, then nothing
        conn.settimeout(5)
        assert conn.recv(1) == b""
        conn.close()
        assert endpoint.counters.closed["timeout"] == 1
        with socket.create_connection(("127.0.0.1", endpoint.port), timeout=5) as c:
            c.sendall(b"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            assert c.recv(100).startswith(b"HTTP/1.1 405")
        assert get(endpoint.port, "/nothing")[0] == 404
        with socket.create_connection(("127.0.0.1", endpoint.port), timeout=5) as c:
            c.sendall(b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"a" * 9000)  # no end in sight
            assert c.recv(100).startswith(b"HTTP/1.1 413")
        assert endpoint.counters.closed["bad-request"] == 1
        assert get(endpoint.port, "/healthz")[0] in (200, 503)  # still serving
    finally:
        daemon.stop()


# ---- addresses --------------------------------------------------------------------------------


def problems(tmp_path: Path, metrics: str, public: bool | None = None) -> str:
    host: dict[str, object] = {"id": HOST, "memory_every": 0, "metrics": metrics}
    if public is not None:
        host["metrics_public"] = public
    with pytest.raises(ConfigError) as err:
        build_config({"host": host}, tmp_path, ["loop://"])
    return str(err.value)


def test_an_address_beyond_loopback_needs_the_opt_in(tmp_path: Path) -> None:
    said = problems(tmp_path, "0.0.0.0:0")
    assert "not a loopback address" in said and "metrics_public = true" in said
    assert "not a loopback address" in problems(tmp_path, "[::]:0")
    cfg = build_config({"host": {"id": HOST, "memory_every": 0, "metrics": "0.0.0.0:0",
                                 "metrics_public": True}}, tmp_path, ["loop://"])  # fmt: skip
    assert cfg.metrics is not None and not cfg.metrics.loopback
    daemon = Daemon(cfg)
    with daemon_logs() as logs:
        daemon.start()
        try:
            assert daemon.endpoint is not None
            assert get(daemon.endpoint.port, "/metrics")[0] == 200
        finally:
            daemon.stop()
    assert "metrics endpoint listening" in logs.messages


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_the_log_says_the_endpoint_is_loopback_only(tmp_path: Path) -> None:
    daemon = quiet_daemon(tmp_path, metrics="localhost:0")
    logger, handler = logging.getLogger("hirmem"), Records()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        daemon.start()
        daemon.stop()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    said = [r for r in handler.records if r.getMessage() == "metrics endpoint listening"]
    assert said and "loopback only" in said[0].ctx["reach"]  # type: ignore[attr-defined]
    assert said[0].ctx["metrics"].startswith("http://127.0.0.1:")  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("metrics", "expected"),
    [
        ("9464", 'give "address:port"'),
        ("localhost", 'give "address:port"'),
        ("127.0.0.1:99999", 'give "address:port"'),
        ("::1:9464", "IPv6 address in brackets"),
        ("pump.local:9464", "is not an IP address"),
    ],
)
def test_an_unparseable_address_says_what_to_write(
    tmp_path: Path, metrics: str, expected: str
) -> None:
    assert expected in problems(tmp_path, metrics)


def test_an_address_this_host_does_not_have_is_a_configuration_error(tmp_path: Path) -> None:
    said = problems(tmp_path, "192.0.2.77:9464", public=True)  # TEST-NET-1: nobody's
    assert "not an address of this host" in said


def busy_port() -> socket.socket:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    return holder


def test_a_busy_port_is_a_configuration_error_not_a_traceback(tmp_path: Path) -> None:
    with busy_port() as holder:
        port = holder.getsockname()[1]
        said = problems(tmp_path, f"127.0.0.1:{port}")
        assert f"port {port} is already in use" in said and "choose another port" in said
        # the same from the command line, as an operator sees it
        config = tmp_path / "hirmem.toml"
        config.write_text(
            f'[host]\nid = "{HOST}"\ndatabase = "cli.db"\nmemory_every = 0\n'
            f'metrics = "127.0.0.1:{port}"\n[[device]]\nurl = "loop://"\n'
        )
        proc = subprocess.run(
            [sys.executable, "-m", "hirmem.cli", "daemon", "--config", str(config)],
            capture_output=True, text=True, timeout=60, cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT / "host")},
        )  # fmt: skip
    assert proc.returncode != 0
    assert "already in use" in proc.stderr and "Traceback" not in proc.stderr


def test_a_port_taken_after_the_check_is_a_configuration_error_at_start(tmp_path: Path) -> None:
    with busy_port() as probe:
        port = probe.getsockname()[1]
    daemon = quiet_daemon(tmp_path, metrics=f"127.0.0.1:{port}")  # the check found it free
    with busy_port() as taken:  # another program takes a port between check and start …
        taken.close()
    with socket.socket() as taken:  # … this very port
        taken.bind(("127.0.0.1", port))
        taken.listen(1)
        with pytest.raises(ConfigError, match="already in use"):
            daemon.run()
    assert not any(w.alive for w in daemon.workers)  # nothing started
    with pytest.raises(Exception, match="closed"):
        daemon.store.devices()


def test_render_metrics_is_the_text_the_endpoint_serves(tmp_path: Path) -> None:
    daemon = quiet_daemon(tmp_path)
    daemon.start()
    try:
        served = families(scrape(daemon))
        rendered = families(render_metrics(daemon))
        assert set(served) == set(rendered)
    finally:
        daemon.stop()


def test_counters_can_be_read_while_the_line_adds_kinds() -> None:
    """/metrics and housekeeping copy a line's counters while its thread counts: a new
    kind of bad frame or refusal (a dict growing) must not break the copy."""
    counters = Counters()
    stop = threading.Event()

    def count() -> None:
        n = 0
        while not stop.is_set():
            counters.frames_bad[f"kind{n % 64}"] = n
            n += 1
            if n % 64 == 0:
                counters.frames_bad.clear()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    counting = threading.Thread(target=count)
    counting.start()
    try:
        for _ in range(10000):  # the copy without a retry failed in about 1 of 700 here
            counters.snapshot()
    finally:
        stop.set()
        counting.join()
        sys.setswitchinterval(interval)


def test_scrapers_cost_the_store_one_read_per_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = quiet_daemon(tmp_path)
    reads: list[float] = []
    real = daemon.store.figures

    def counted() -> Any:
        reads.append(time.monotonic())
        return real()

    monkeypatch.setattr(daemon.store, "figures", counted)
    daemon.start()
    try:
        start = time.monotonic()
        for _ in range(60):
            assert value(scrape(daemon), "hirmem_store_devices") == 0
        elapsed = time.monotonic() - start
        assert 1 <= len(reads) <= 1 + int(elapsed / FIGURES_MAX_AGE_S)
        time.sleep(FIGURES_MAX_AGE_S)
        scrape(daemon)  # and a second later the figures are read again
        assert reads[-1] > start + FIGURES_MAX_AGE_S
    finally:
        daemon.stop()


def test_a_page_is_never_cut_when_the_connection_closes(tmp_path: Path) -> None:
    """HTTP/1.0 (and Connection: close) answers end the connection: the page must
    arrive whole, however slowly the client reads."""
    # many lines (to ports nobody listens on) make a page far larger than the kernel's
    # buffers and the endpoint's own
    holders = [busy_port() for _ in range(80)]
    urls = [f"socket://127.0.0.1:{h.getsockname()[1]}" for h in holders]
    for h in holders:
        h.close()
    settings = {"id": HOST, "database": "h.db", "memory_every": 0, "metrics": "127.0.0.1:0"}
    daemon = Daemon(build_config({"host": settings}, tmp_path, urls))
    daemon.start()
    try:
        assert daemon.endpoint is not None
        expected = len(render_metrics(daemon).encode())
        assert expected > 500_000
        with socket.socket() as c:
            c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a slow reader
            c.settimeout(10)
            c.connect(("127.0.0.1", daemon.endpoint.port))
            c.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            time.sleep(0.5)  # the server has written what the kernel took, and closed
            got = b""
            while chunk := c.recv(1024):
                got += chunk
        head, _, body = got.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and b"Connection: close" in head
        length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
        assert len(body) == length and abs(length - expected) < 0.01 * expected
    finally:
        daemon.stop()
