"""hirmem.link.transport and hirmem.link.line on real lines: a pty pair and a local TCP socket.

The byte tests check the transport alone. The link tests run a Session over the
transport in a thread with the real monotonic clock, and put the C device agent
(t_agent) at the other end of the line, its virtual clock driven by wall time.
"""

from __future__ import annotations

import hashlib
import os
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from conftest import DEVICE_ID, HOST_ID
from hirmem.link.line import Link
from hirmem.link.session import (
    CaptureDone,
    Event,
    MemoryIntake,
    PackReceived,
    Session,
    SessionConfig,
    SessionOpened,
)
from hirmem.link.transport import (
    SerialTransport,
    Transport,
    TransportClosed,
    TransportError,
    make_transport,
    open_transport,
)
from hirmem.protocol.gate import evaluate
from hirmem.protocol.records import normalise, record_id
from session_peer import MEMORY_KEYS, Agent

ONE = 0x10000
CONTEXT = hashlib.sha256(b"event frame").digest()


def read_until(transport: Transport, size: int, limit_s: float = 2.0) -> bytes:
    got = b""
    end = time.monotonic() + limit_s
    while len(got) < size and time.monotonic() < end:
        got += transport.read(0.05)
    return got


# ---- the lines -----------------------------------------------------------------------


@contextmanager
def pty_pair() -> Iterator[tuple[str, int]]:
    master, slave = os.openpty()
    try:
        yield os.ttyname(slave), master
    finally:
        os.close(master)
        os.close(slave)


def test_pty_bytes_both_ways() -> None:
    with pty_pair() as (path, master), SerialTransport(path) as transport:
        assert transport.is_open and transport.url == path
        assert transport.read(0.01) == b""  # nothing there: returns after the timeout
        os.write(master, b"\x00\x01\x02hello\x00" * 50)
        assert read_until(transport, 450) == b"\x00\x01\x02hello\x00" * 50
        payload = bytes(range(256)) * 4  # every byte value survives (raw mode)
        transport.write(payload)
        got = b""
        while len(got) < len(payload):
            ready, _, _ = select.select([master], [], [], 2)
            assert ready, "the pty delivered nothing"
            got += os.read(master, 4096)
        assert got == payload
    assert not transport.is_open


@contextmanager
def tcp_server() -> Iterator[tuple[int, Callable[[], socket.socket]]]:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(5)
    try:
        yield server.getsockname()[1], lambda: server.accept()[0]
    finally:
        server.close()


def test_socket_bytes_both_ways_and_close() -> None:
    with tcp_server() as (port, accept):
        transport = open_transport(f"socket://127.0.0.1:{port}")
        conn = accept()
        conn.sendall(b"\x00ping\x00")
        assert read_until(transport, 6) == b"\x00ping\x00"
        transport.write(b"pong\x00")
        conn.settimeout(2)
        assert conn.recv(16) == b"pong\x00"
        conn.close()  # the other end goes away
        with pytest.raises(TransportClosed, match="went away"):
            for _ in range(20):
                transport.read(0.05)
        assert not transport.is_open


def test_open_errors_say_what_to_fix() -> None:
    with pytest.raises(TransportError, match=r"/dev/ttyNOSUCH7.*no such device.*list_ports"):
        SerialTransport("/dev/ttyNOSUCH7").open()
    with tcp_server() as (port, _accept):
        pass  # closed again: nobody listens on that port now
    with pytest.raises(TransportError, match=rf"socket://127.0.0.1:{port}.*refused"):
        SerialTransport(f"socket://127.0.0.1:{port}").open()
    with pytest.raises(TransportError, match="empty port"):
        SerialTransport("")
    with pytest.raises(TransportError, match="not open"):
        SerialTransport("/dev/null").read(0)


# ---- a session over the line, the C agent at the far end -----------------------------


class AgentOnLine:
    """t_agent behind a file descriptor or socket; its clock follows wall time."""

    def __init__(
        self, agent: Agent, read: Callable[[], bytes], write: Callable[[bytes], None], fd: int
    ) -> None:
        self.agent, self._read, self._write, self._fd = agent, read, write, fd
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self.error: BaseException | None = None

    def start(self, **init: int) -> None:
        self._write(self.agent.init(**init))  # type: ignore[arg-type]
        self._thread.start()

    def _pump(self) -> None:
        start, clock = time.monotonic(), 0
        try:
            while not self._stop.is_set():
                ready, _, _ = select.select([self._fd], [], [], 0.002)
                if ready:
                    data = self._read()
                    if not data:
                        return
                    out = self.agent.out("input", data)
                    if out:
                        self._write(out)
                elapsed = int((time.monotonic() - start) * 1000)
                if elapsed > clock:
                    out = self.agent.out("advance", elapsed - clock)
                    clock = elapsed
                    if out:
                        self._write(out)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def wait_for(events: list[Event], kind: type, count: int = 1, limit_s: float = 5.0) -> None:
    end = time.monotonic() + limit_s
    while sum(isinstance(e, kind) for e in events) < count:
        assert time.monotonic() < end, f"no {kind.__name__} within {limit_s} s: {events}"
        time.sleep(0.01)


def run_link_against_agent(transport: SerialTransport, peer: AgentOnLine) -> None:
    events: list[Event] = []
    intake = MemoryIntake(MEMORY_KEYS)
    session = Session(SessionConfig(HOST_ID, max_frame=256), intake)
    link = Link(transport, session, on_event=events.append)
    thread = threading.Thread(target=link.run, daemon=True)
    peer.start(offer_n=2)
    thread.start()
    try:
        wait_for(events, SessionOpened)
        payload = b'{"t":21.5}'
        tokens = [
            link.call(lambda s: s.capture("temp0", payload, CONTEXT, 0x0FFF, ONE, 0xE666, 0)),
            link.call(lambda s: s.capture("temp1", payload, CONTEXT, 0x0BFF, ONE, ONE, 0)),
        ]
        wait_for(events, CaptureDone, 2)
        wait_for(events, PackReceived, 1)
        done = {e.token: e.result for e in events if isinstance(e, CaptureDone)}
        for token, flags, q, p in ((tokens[0], 0x0FFF, ONE, 0xE666), (tokens[1], 0x0BFF, ONE, ONE)):
            g = evaluate(normalise(flags, payload, "tempX", 1, CONTEXT), q, p)
            result = done[token]
            assert (result.status, result.flags, result.w, result.verdict, result.state) == (
                0,
                g.flags,
                g.w,
                int(g.verdict),
                int(g.disposition),
            )
        [pack] = intake.accepted
        assert [r.id for r in pack.items] == [record_id(DEVICE_ID, 7, n) for n in (1, 2)]  # type: ignore[union-attr]
        assert session.counters.frames_bad_total == 0
    finally:
        link.stop()
        thread.join(5)
        peer.stop()
    assert not thread.is_alive() and not transport.is_open
    assert peer.error is None


def test_link_over_pty_with_device_agent() -> None:
    agent = Agent()
    try:
        with pty_pair() as (path, master):
            peer = AgentOnLine(
                agent, lambda: os.read(master, 4096), lambda b: _write_all(master, b), master
            )
            run_link_against_agent(SerialTransport(path), peer)
    finally:
        agent.close()


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def test_link_over_socket_with_device_agent() -> None:
    agent = Agent()
    try:
        with tcp_server() as (port, accept):
            transport = SerialTransport(f"socket://127.0.0.1:{port}")
            transport.open()
            conn = accept()
            peer = AgentOnLine(agent, lambda: conn.recv(4096), conn.sendall, conn.fileno())
            run_link_against_agent(transport, peer)
            conn.close()
    finally:
        agent.close()


def test_link_reports_a_closed_line() -> None:
    events: list[Event] = []
    with tcp_server() as (port, accept):
        transport = SerialTransport(f"socket://127.0.0.1:{port}")
        session = Session(SessionConfig(HOST_ID), MemoryIntake(MEMORY_KEYS))
        link = Link(transport, session, on_event=events.append)
        link.open()
        conn = accept()
        conn.close()
        with pytest.raises(TransportClosed):
            link.run()
    assert not transport.is_open


def test_a_socket_line_is_read_in_blocks() -> None:
    """Issue #15: pyserial's socket backend reports at most one byte waiting, so 2,551
    waiting bytes took 1,276 reads. What is waiting now comes in one read."""
    with tcp_server() as (port, accept):
        transport = open_transport(f"socket://127.0.0.1:{port}")
        conn = accept()
        block = bytes(range(256)) * 9 + bytes(247)  # 2,551 bytes
        conn.sendall(block)
        time.sleep(0.2)  # all of it is waiting on the host's side now
        got = transport.read(1.0)
        assert got == block
        transport.close()
        conn.close()


def test_a_pty_line_is_read_in_blocks() -> None:
    with pty_pair() as (path, master), SerialTransport(path) as transport:
        block = bytes(range(1, 256)) * 10
        os.write(master, block)
        time.sleep(0.2)
        assert transport.read(1.0) == block


def test_a_write_to_a_peer_that_stops_reading_ends_at_its_deadline() -> None:
    with tcp_server() as (port, accept):
        transport = make_transport(f"socket://127.0.0.1:{port}", write_timeout_s=0.5)
        transport.open()
        conn = accept()
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        started = time.monotonic()
        with pytest.raises(TransportClosed, match=r"took no data for 0\.5 s"):
            for _ in range(10_000):  # far more than the buffers hold
                transport.write(bytes(4096))
        assert time.monotonic() - started < 5.0
        assert not transport.is_open
        conn.close()
