"""The fault-injection proxy (hirmem.emulation.faultproxy) against local TCP upstreams.

The oracle for what the faults do is hirmem.protocol.frames: frames built with
encode_frame go through the proxy, FrameDecoder reads what comes out, and the
proxy's own counters and event log must explain every difference (each dropped
frame missing, each duplicated one twice, each reordered one after its
successor, each frame hit by line noise and each garbage burst one damaged
frame, and nothing else).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from hirmem.emulation.faultproxy import (
    BYTE_KINDS,
    Direction,
    FaultEngine,
    FaultEvent,
    FaultKind,
    FaultPlan,
    FaultProxy,
    FaultProxyError,
    parse_address,
)
from hirmem.protocol.errors import FrameError
from hirmem.protocol.frames import FrameDecoder, encode_frame

ROOT = Path(__file__).resolve().parent.parent
CLI = ROOT / "tools" / "fault_proxy.py"

BYTE_NOISE = FaultPlan(flip=0.002, drop_byte=0.001, dup_byte=0.001, swap_byte=0.002)
FRAME_FAULTS = FaultPlan(
    drop_frame=0.03, dup_frame=0.03, reorder=0.03, garbage=0.03, delay=0.002, delay_ms=5
)
MIXED = FaultPlan(
    flip=0.001,
    drop_byte=0.0005,
    dup_byte=0.0005,
    swap_byte=0.0005,
    drop_frame=0.02,
    dup_frame=0.02,
    reorder=0.02,
    garbage=0.02,
    delay=0.001,
    delay_ms=5,
)


def body(index: int) -> bytes:
    """A frame body that names its index, with zeros and a varying length."""
    return index.to_bytes(4, "big") + bytes(index % 7) + b"hirmem" * (1 + index % 5)


def index_of(data: bytes) -> int:
    return int.from_bytes(data[:4], "big")


def wire(count: int) -> bytes:
    return b"".join(encode_frame(body(i)) for i in range(count))


class Upstream:
    """A local TCP server standing in for a board's UART: records what each
    connection receives, echoes it back (``echo``) and/or sends ``greeting`` on
    connect; closes a connection when the peer half-closes it."""

    def __init__(self, *, echo: bool = False, greeting: bytes = b"") -> None:
        self.echo = echo
        self.greeting = greeting
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.server.getsockname()[1]
        self.received: list[bytearray] = []
        self.finished: list[threading.Event] = []
        self._threads: list[threading.Thread] = []
        self._accepter = threading.Thread(target=self._accept, daemon=True)
        self._accepter.start()

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            buf, done = bytearray(), threading.Event()
            self.received.append(buf)
            self.finished.append(done)
            worker = threading.Thread(target=self._serve, args=(conn, buf, done), daemon=True)
            self._threads.append(worker)
            worker.start()

    def _serve(self, conn: socket.socket, buf: bytearray, done: threading.Event) -> None:
        with conn:
            try:
                if self.greeting:
                    conn.sendall(self.greeting)
                while chunk := conn.recv(65536):
                    buf += chunk
                    if self.echo:
                        conn.sendall(chunk)
            except OSError:
                pass
            finally:
                done.set()

    def wait(self, connection: int, timeout: float = 10.0) -> bytes:
        """What connection ``connection`` received, once it has ended."""
        end = time.monotonic() + timeout
        while len(self.finished) <= connection:
            assert time.monotonic() < end, f"upstream connection {connection} never came"
            time.sleep(0.01)
        assert self.finished[connection].wait(max(0.0, end - time.monotonic()))
        return bytes(self.received[connection])

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.server.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self.server.close()
        self._accepter.join(2)


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    up = Upstream()
    yield up
    up.close()


def connect(proxy: FaultProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=10)


def read_all(sock: socket.socket) -> bytes:
    """Everything until the proxy closes the connection (EOF or reset)."""
    out = bytearray()
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except ConnectionResetError:
        pass
    return bytes(out)


def send_in_chunks(sock: socket.socket, data: bytes, size: int = 997) -> None:
    for start in range(0, len(data), size):
        sock.sendall(data[start : start + size])


def through_proxy(plan: FaultPlan, data: bytes, seed: int = 7) -> tuple[bytes, FaultProxy]:
    """Send ``data`` client → upstream through a proxy; what the upstream got."""
    up = Upstream()
    try:
        with FaultProxy(up.address, seed=seed, to_upstream=plan, record_events=True) as proxy:
            with connect(proxy) as sock:
                send_in_chunks(sock, data)
                sock.shutdown(socket.SHUT_WR)
                read_all(sock)
            got = up.wait(0)
        return got, proxy
    finally:
        up.close()


def decode(data: bytes) -> list[bytes | FrameError]:
    decoder = FrameDecoder()
    out = decoder.feed(data)
    assert decoder.stats.empty == 0
    return out


def by_kind(events: list[FaultEvent], kind: FaultKind) -> list[FaultEvent]:
    return [e for e in events if e.kind is kind]


# -- plans and addresses ---------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"flip": 1.5}, "flip is a probability"),
        ({"drop_frame": -0.1}, "drop_frame is a probability"),
        ({"flip": 0.6, "dup_byte": 0.6}, "exceed 1"),
        ({"cut_after": 0}, "cut_after must be >= 1"),
        ({"garbage_max": 0}, "garbage_max must be >= 1"),
    ],
)
def test_a_bad_plan_says_what_is_wrong(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(FaultProxyError, match=message):
        FaultPlan(**kwargs)  # type: ignore[arg-type]


def test_addresses() -> None:
    assert parse_address("127.0.0.1:4321") == ("127.0.0.1", 4321)
    assert parse_address("socket://localhost:5") == ("localhost", 5)
    with pytest.raises(FaultProxyError, match="not HOST:PORT"):
        parse_address("localhost")


# -- the engine: determinism -------------------------------------------------------


def run_engine(
    plan: FaultPlan,
    data: bytes,
    seed: int | str,
    chunk: int,
    events: list[FaultEvent] | None = None,
) -> bytes:
    engine = FaultEngine(plan, seed, direction=Direction.TO_UPSTREAM, events=events)
    out = bytearray()
    for start in range(0, len(data), chunk):
        out += b"".join(p.data for p in engine.feed(data[start : start + chunk]))
    out += b"".join(p.data for p in engine.finish())
    return bytes(out)


@pytest.mark.parametrize(
    "plan", [BYTE_NOISE, FRAME_FAULTS, MIXED], ids=["bytes", "frames", "mixed"]
)
def test_decisions_depend_on_the_bytes_not_on_chunking(plan: FaultPlan) -> None:
    data = wire(600)
    reference_events: list[FaultEvent] = []
    reference = run_engine(plan, data, 7, len(data), reference_events)
    assert reference != data
    for chunk in (1, 13, 4096):
        events: list[FaultEvent] = []
        assert run_engine(plan, data, 7, chunk, events) == reference
        assert events == reference_events
    assert run_engine(plan, data, 8, 4096) != reference


def test_one_fault_kind_does_not_move_the_others() -> None:
    data = wire(800)
    alone: list[FaultEvent] = []
    mixed: list[FaultEvent] = []
    FaultEngine(FaultPlan(drop_frame=0.05), 3, events=alone).feed(data)
    FaultEngine(FaultPlan(drop_frame=0.05, dup_frame=0.3, garbage=0.2), 3, events=mixed).feed(data)
    dropped = [e.in_frame for e in by_kind(alone, FaultKind.DROP_FRAME)]
    assert dropped
    assert dropped == [e.in_frame for e in by_kind(mixed, FaultKind.DROP_FRAME)]


# -- through the proxy --------------------------------------------------------------


def test_zero_rates_pass_every_byte_both_ways() -> None:
    data = os.urandom(300_000) + bytes(1000) + wire(200)
    up = Upstream(echo=True)
    try:
        with FaultProxy(up.address, seed=1) as proxy:
            with connect(proxy) as sock:
                sender = threading.Thread(target=send_in_chunks, args=(sock, data, 7919))
                sender.start()
                echoed = bytearray()
                while len(echoed) < len(data):
                    chunk = sock.recv(65536)
                    assert chunk, "the proxy closed before echoing everything"
                    echoed += chunk
                sender.join()
            assert up.wait(0) == data
            assert bytes(echoed) == data
            stats = proxy.stats()
        for counters in (stats.to_upstream, stats.to_client):
            assert counters.bytes_in == counters.bytes_out == len(data)
            assert counters.faults == 0
    finally:
        up.close()


def test_the_same_seed_gives_the_same_faulted_stream() -> None:
    data = wire(1500)
    first, p1 = through_proxy(MIXED, data, seed=11)
    second, p2 = through_proxy(MIXED, data, seed=11)
    other, _ = through_proxy(MIXED, data, seed=12)
    assert first == second
    assert p1.events() == p2.events()
    assert p1.stats().to_dict() == p2.stats().to_dict()
    assert first != other
    assert first == run_engine(MIXED, data, 11, 4096)  # the session-0 stream of seed 11


def test_frame_faults_are_explained_by_the_counters() -> None:
    count = 2000
    got, proxy = through_proxy(FRAME_FAULTS, wire(count))
    events, counters = proxy.events(), proxy.stats().to_upstream
    out = decode(got)
    good = [index_of(x) for x in out if isinstance(x, bytes)]
    errors = [x for x in out if isinstance(x, FrameError)]

    dropped = {e.in_frame for e in by_kind(events, FaultKind.DROP_FRAME)}
    doubled = {e.in_frame for e in by_kind(events, FaultKind.DUP_FRAME)}
    swapped = {e.in_frame for e in by_kind(events, FaultKind.REORDER)}
    seen = Counter(good)
    assert dropped and doubled and swapped and errors
    assert set(range(count)) - set(seen) == dropped
    assert {i for i, n in seen.items() if n == 2} == doubled
    assert max(seen.values()) == 2
    # a reordered frame comes right after the frame that overtook it
    assert {good[k + 1] for k in range(len(good) - 1) if good[k] > good[k + 1]} == swapped
    assert len(errors) == counters.garbage == len(by_kind(events, FaultKind.GARBAGE))
    assert counters.frames_in == count
    assert counters.frames_out == len(out)
    assert (counters.drop_frame, counters.dup_frame, counters.reorder) == (
        len(dropped),
        len(doubled),
        len(swapped),
    )
    assert counters.delay == len(by_kind(events, FaultKind.DELAY)) > 0


def test_each_frame_hit_by_line_noise_is_one_damaged_frame() -> None:
    count = 2000
    got, proxy = through_proxy(BYTE_NOISE, wire(count))
    events, counters = proxy.events(), proxy.stats().to_upstream
    damaged = {e.out_frame for e in events if e.kind in BYTE_KINDS}
    out = decode(got)
    assert len(out) == count
    for position, item in enumerate(out):
        if position in damaged:
            assert isinstance(item, FrameError), f"frame {position} was faulted but decoded"
        else:
            assert item == body(position)
    assert counters.flip == len(by_kind(events, FaultKind.FLIP)) > 0
    assert counters.drop_byte == len(by_kind(events, FaultKind.DROP_BYTE)) > 0
    assert counters.dup_byte == len(by_kind(events, FaultKind.DUP_BYTE)) > 0
    assert counters.swap_byte == len(by_kind(events, FaultKind.SWAP_BYTE)) > 0
    assert counters.bytes_out - counters.bytes_in == counters.dup_byte - counters.drop_byte


@pytest.mark.parametrize("direction", list(Direction))
def test_mixed_faults_every_fault_is_visible_nothing_corrupt_passes(
    direction: Direction,
) -> None:
    count = 3000
    data = wire(count)
    up = Upstream(greeting=data)
    plans = {direction: MIXED}
    try:
        with FaultProxy(
            up.address,
            seed=5,
            to_upstream=plans.get(Direction.TO_UPSTREAM),
            to_client=plans.get(Direction.TO_CLIENT),
            record_events=True,
        ) as proxy:
            with connect(proxy) as sock:
                send_in_chunks(sock, data)
                sock.shutdown(socket.SHUT_WR)
                to_client = read_all(sock)
            to_upstream = up.wait(0)
            events, stats = proxy.events(), proxy.stats()
    finally:
        up.close()
    faulted, clean = (
        (to_upstream, to_client) if direction is Direction.TO_UPSTREAM else (to_client, to_upstream)
    )
    assert clean == data
    assert stats.directions[direction].faults == len(events) > 100
    other = Direction.TO_CLIENT if direction is Direction.TO_UPSTREAM else Direction.TO_UPSTREAM
    assert stats.directions[other].faults == 0

    out = decode(faulted)
    errors = sum(isinstance(x, FrameError) for x in out)
    good = Counter(index_of(x) for x in out if isinstance(x, bytes))
    assert all(body(i) in (x for x in out if isinstance(x, bytes)) for i in good)
    # what the decoder must see, from the event log alone
    dropped = {e.in_frame for e in by_kind(events, FaultKind.DROP_FRAME)}
    doubled = {e.in_frame for e in by_kind(events, FaultKind.DUP_FRAME)}
    damaged_out = {
        e.out_frame for e in events if e.kind in BYTE_KINDS or e.kind is FaultKind.GARBAGE
    }
    damaged_copies = Counter(
        source
        for source, _ in {(e.in_frame, e.out_frame) for e in events if e.kind in BYTE_KINDS}
        if source is not None
    )
    assert errors == len(damaged_out)
    for i in range(count):
        copies = 0 if i in dropped else 1 + (i in doubled)
        assert good[i] == copies - damaged_copies[i], f"frame {i}"


def test_a_cut_closes_both_sides_and_a_reconnect_gets_a_fresh_upstream(
    upstream: Upstream,
) -> None:
    plan = FaultPlan(cut_after=5)
    with FaultProxy(upstream.address, seed=1, to_upstream=plan) as proxy:
        for attempt in range(3):
            with connect(proxy) as sock:
                sock.sendall(wire(20))
                assert read_all(sock) == b""  # the proxy closed us
            got = decode(upstream.wait(attempt))
            assert got == [body(i) for i in range(5)], f"connection {attempt}"
        stats = proxy.stats()
    assert len(upstream.received) == 3
    assert stats.sessions == 3
    assert stats.to_upstream.cut == 3
    assert stats.active == 0


def test_a_cut_at_a_rate_falls_inside_a_frame(upstream: Upstream) -> None:
    plan = FaultPlan(cut=0.05)
    with FaultProxy(upstream.address, seed=4, to_upstream=plan, record_events=True) as proxy:
        with connect(proxy) as sock:
            sock.sendall(wire(400))
            read_all(sock)
        got = upstream.wait(0)
        (cut,) = proxy.events()
    assert cut.kind is FaultKind.CUT and cut.in_frame is not None
    assert len(got) == cut.offset  # exactly the bytes before the cut point
    assert not got.endswith(b"\x00")  # a partial frame is left on the line
    assert decode(got) == [body(i) for i in range(cut.in_frame)]


def test_cut_now_and_the_client_reconnects(upstream: Upstream) -> None:
    with FaultProxy(upstream.address) as proxy:
        sock = connect(proxy)
        sock.sendall(b"before")
        end = time.monotonic() + 10
        while not (upstream.received and upstream.received[0] == b"before"):
            assert time.monotonic() < end, "the upstream never got the bytes"
            time.sleep(0.01)
        proxy.cut_now()
        assert read_all(sock) == b""
        sock.close()
        assert upstream.wait(0) == b"before"
        with connect(proxy) as again:
            again.sendall(b"after")
            again.shutdown(socket.SHUT_WR)
            read_all(again)
        assert upstream.wait(1) == b"after"
        assert proxy.stats().manual_cuts == 1


def test_a_partition_cuts_and_refuses_until_healed() -> None:
    up = Upstream(echo=True)
    try:
        with FaultProxy(up.address) as proxy:
            sock = connect(proxy)
            sock.sendall(b"ping")
            assert sock.recv(4) == b"ping"
            proxy.partition()
            assert read_all(sock) == b""  # the open session is cut
            sock.close()
            for _ in range(3):  # and every new client is closed at once, never served
                with connect(proxy) as refused:
                    assert read_all(refused) == b""
            assert len(up.received) == 1 and proxy.partitioned
            proxy.heal()
            with connect(proxy) as healed:
                healed.sendall(b"pong")
                assert healed.recv(4) == b"pong"
            stats = proxy.stats()
            assert (stats.partition_refusals, stats.manual_cuts, stats.sessions) == (3, 1, 2)
    finally:
        up.close()


def test_a_delay_holds_the_stream(upstream: Upstream) -> None:
    plan = FaultPlan(delay=1.0, delay_ms=100)
    with FaultProxy(upstream.address, to_upstream=plan) as proxy, connect(proxy) as sock:
        start = time.monotonic()
        sock.sendall(wire(3))
        sock.shutdown(socket.SHUT_WR)
        read_all(sock)
        assert decode(upstream.wait(0)) == [body(i) for i in range(3)]
        assert time.monotonic() - start >= 0.3
        assert proxy.stats().to_upstream.delay_ms == 300


def test_unprotected_noise_may_hit_delimiters() -> None:
    plan = FaultPlan(flip=0.01, drop_byte=0.01, protect_delimiters=False)
    data = wire(500)
    got, proxy = through_proxy(plan, data, seed=2)
    counters = proxy.stats().to_upstream
    assert counters.flip > 0 and counters.drop_byte > 0
    assert got == run_engine(plan, data, 2, 1)


def test_an_upstream_that_refuses_closes_the_client() -> None:
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        port = placeholder.getsockname()[1]
    with FaultProxy(("127.0.0.1", port)) as proxy, connect(proxy) as sock:
        assert read_all(sock) == b""
        assert proxy.stats().upstream_failures == 1


def test_stop_is_quick_and_leaves_nothing_behind(upstream: Upstream) -> None:
    proxy = FaultProxy(upstream.address, to_client=FaultPlan(delay=1.0, delay_ms=60_000))
    proxy.start()
    port = proxy.port
    sock = connect(proxy)
    sock.sendall(b"x")
    start = time.monotonic()
    proxy.stop()
    assert time.monotonic() - start < 1.0
    proxy.stop()  # twice is fine
    assert not proxy.running and proxy.error is None
    assert not [t for t in threading.enumerate() if t.name.startswith("faultproxy")]
    assert read_all(sock) == b""
    sock.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


# -- the CLI -------------------------------------------------------------------------


def test_cli_prints_the_port_runs_until_sigterm_and_prints_the_counters(
    upstream: Upstream, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(CLI),
            "--listen",
            "0",
            "--upstream",
            f"127.0.0.1:{upstream.port}",
            "--seed",
            "7",
            "--direction",
            "to_upstream",
            "--drop-frame",
            "0.1",
            "--events",
            str(events),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on 127.0.0.1:"), line
        port = int(line.split()[2].rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(wire(200))
            sock.shutdown(socket.SHUT_WR)
            read_all(sock)
        got = decode(upstream.wait(0))
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    stats = json.loads(out)
    assert stats["to_upstream"]["drop_frame"] == 200 - len(got) > 0
    assert stats["to_client"]["faults"] == 0
    logged = [json.loads(x) for x in events.read_text().splitlines()]
    assert [e["kind"] for e in logged] == ["drop_frame"] * (200 - len(got))


def test_cli_refuses_a_bad_rate() -> None:
    proc = subprocess.run(
        [sys.executable, str(CLI), "--upstream", "127.0.0.1:1", "--flip", "2"],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert proc.returncode == 2
    assert "flip is a probability in [0, 1], got 2.0" in proc.stderr


# -- QEMU's socket chardev as the upstream ------------------------------------------------


@pytest.mark.skipif(shutil.which("qemu-system-arm") is None, reason="qemu-system-arm missing")
def test_qemu_server_socket_takes_a_new_upstream_after_a_cut() -> None:
    """QEMU's ``server=on`` socket chardev (here carrying the HMP monitor, the same
    backend as ``-serial tcp:...,server=on``) serves one client at a time: after the
    proxy cuts, the client's reconnect opens a new upstream and QEMU answers it."""
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        port = placeholder.getsockname()[1]
    chardev = f"socket,id=line,host=127.0.0.1,port={port},server=on,wait=off"
    command = ["qemu-system-arm", "-M", "none", "-nographic", "-monitor", "none"]
    command += ["-chardev", chardev, "-mon", "chardev=line,mode=readline"]
    qemu = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )

    def ask_version(sock: socket.socket) -> bytes:
        """QEMU's answer to ``info version`` (the monitor echoes the command line)."""
        sock.sendall(b"info version\n")
        seen = bytearray()
        while not re.search(rb"info version.*\r\n(\d+\.\d+[^\r]*)\r\n", seen, re.S):
            chunk = sock.recv(4096)
            assert chunk, f"QEMU closed the line; it said {bytes(seen)!r}"
            seen += chunk
        found = re.search(rb"info version.*\r\n(\d+\.\d+[^\r]*)\r\n", seen, re.S)
        assert found is not None
        return found.group(1)

    try:
        end = time.monotonic() + 10
        while True:  # QEMU is listening once a plain connect succeeds
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert qemu.poll() is None and time.monotonic() < end, "QEMU did not listen"
                time.sleep(0.05)
        with FaultProxy(("127.0.0.1", port)) as proxy:
            for _ in range(3):
                with connect(proxy) as sock:
                    assert ask_version(sock)[:1].isdigit()
                    proxy.cut_now()
                    assert read_all(sock) == b""
            stats = proxy.stats()
        assert stats.sessions == 3 and stats.manual_cuts == 3
        assert stats.upstream_failures == 0
    finally:
        qemu.kill()
        qemu.wait(5)
