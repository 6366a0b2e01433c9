"""The daemon's HTTP endpoint: ``/metrics`` and ``/healthz`` on one thread, bounded.

One asyncio loop on one thread serves every connection, so idle connections cost a
socket each and no thread (``http.server``'s threading server spent a thread on each:
540 idle connections, 545 threads). What a client can hold is bounded:

- at most ``max_connections`` open at once; one more closes the connection idle the
  longest (or, if every one is mid-request, is closed itself), counted;
- a request head of at most ``HEAD_LIMIT`` bytes, arriving within ``head_timeout``
  seconds of the connection or of the previous answer (keep-alive), else closed;
- no request bodies; an answer the client does not read within ``write_timeout``
  closes the connection.

``GET /metrics`` answers the Prometheus text format (OpenMetrics when the scraper asks
for it), ``GET /healthz`` the JSON document of :mod:`hirmem.daemon.health` with 200
(healthy) or 503.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from hirmem.daemon.config import ConfigError, MetricsAddress, bind_problem, open_listener
from hirmem.daemon.health import health_report
from hirmem.protocol.errors import HirmemError

if TYPE_CHECKING:
    from hirmem.daemon.service import Daemon

log = logging.getLogger("hirmem.daemon")

MAX_CONNECTIONS = 512
HEAD_LIMIT = 8192
HEAD_TIMEOUT_S = 30.0
WRITE_TIMEOUT_S = 10.0
CLOSE_REASONS = ("evicted", "refused", "timeout", "bad-request", "client")

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            413: "Content Too Large", 500: "Internal Server Error",
            503: "Service Unavailable"}  # fmt: skip


@dataclass
class EndpointCounters:
    accepted: int = 0  # connections
    requests: int = 0
    closed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CLOSE_REASONS, 0))


@dataclass
class _Connection:
    writer: asyncio.StreamWriter
    last_active: float
    busy: bool = False


class Endpoint:
    """``/metrics`` and ``/healthz`` for one daemon; :meth:`start` binds, :meth:`stop` ends."""

    def __init__(
        self,
        daemon: Daemon,
        address: MetricsAddress,
        registry: CollectorRegistry,
        *,
        max_connections: int = MAX_CONNECTIONS,
        head_timeout: float = HEAD_TIMEOUT_S,
        write_timeout: float = WRITE_TIMEOUT_S,
    ) -> None:
        self.daemon = daemon
        self.address = address
        self.registry = registry
        self.max_connections = max_connections
        self.head_timeout = head_timeout
        self.write_timeout = write_timeout
        self.counters = EndpointCounters()
        self._connections: dict[asyncio.Task[None], _Connection] = {}
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def port(self) -> int:
        """The port listened on (the one chosen when the configuration said 0)."""
        assert self._sock is not None, "the endpoint is not started"
        return int(self._sock.getsockname()[1])

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    def start(self) -> None:
        """Bind (a :class:`ConfigError` saying what to change when it cannot) and serve."""
        try:
            self._sock = open_listener(self.address)
        except OSError as exc:
            raise ConfigError(
                "the configuration cannot be used:\n  - " + bind_problem(self.address, exc)
            ) from None
        self._sock.setblocking(False)
        self._thread = threading.Thread(target=self._serve, name="metrics", daemon=True)
        self._thread.start()
        if not self._ready.wait(10.0):
            self.stop()
            raise HirmemError(f"the metrics endpoint on {self.address} did not start")
        shown = MetricsAddress(self.address.host, self.port)
        reach = (
            "loopback only; set host.metrics_public = true and an address to expose it"
            if self.address.loopback
            else "reachable from other hosts (host.metrics_public = true), no authentication"
        )
        log.info(
            "metrics endpoint listening",
            extra={"ctx": {"metrics": f"http://{shown}/metrics",
                           "healthz": f"http://{shown}/healthz", "reach": reach}},
        )  # fmt: skip

    def stop(self) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join(5.0)
        if self._sock is not None:
            self._sock.close()

    # ---- the loop ------------------------------------------------------------------------

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        finally:
            loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        assert self._sock is not None
        server = await asyncio.start_server(self._accept, sock=self._sock, limit=HEAD_LIMIT)
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            server.close()
            for task, conn in list(self._connections.items()):
                conn.writer.transport.abort()
                task.cancel()
            if self._connections:
                await asyncio.gather(*self._connections, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.counters.accepted += 1
        if len(self._connections) >= self.max_connections and not self._evict_one():
            self.counters.closed["refused"] += 1
            writer.transport.abort()
            return
        # drain() returns only once the whole answer is with the kernel, so closing
        # never drops the end of a page, and a client that stops reading is timed out
        writer.transport.set_write_buffer_limits(high=0)
        conn = _Connection(writer, time.monotonic())
        self._connections[task] = conn
        try:
            await self._requests(reader, conn)
        except (ConnectionError, asyncio.IncompleteReadError):
            self.counters.closed["client"] += 1
        finally:
            self._connections.pop(task, None)
            writer.close()

    def _evict_one(self) -> bool:
        """Close the connection idle the longest; False when every one is busy."""
        idle = [(c.last_active, t) for t, c in self._connections.items() if not c.busy]
        if not idle:
            return False
        _, task = min(idle, key=lambda pair: pair[0])
        conn = self._connections.pop(task)
        conn.writer.transport.abort()
        task.cancel()
        self.counters.closed["evicted"] += 1
        return True

    async def _requests(self, reader: asyncio.StreamReader, conn: _Connection) -> None:
        while True:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.head_timeout)
            except TimeoutError:
                self.counters.closed["timeout"] += 1
                return
            except asyncio.LimitOverrunError:
                self.counters.closed["bad-request"] += 1
                await self._answer(conn, 413, "text/plain", b"request head too large\n", False)
                return
            except asyncio.IncompleteReadError as exc:
                if exc.partial:
                    raise
                self.counters.closed["client"] += 1  # closed between requests
                return
            conn.busy, conn.last_active = True, time.monotonic()
            self.counters.requests += 1
            if not await self._handle(head, conn):
                return
            conn.busy, conn.last_active = False, time.monotonic()

    async def _handle(self, head: bytes, conn: _Connection) -> bool:
        """Answer one request; whether the connection stays open."""
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            self.counters.closed["bad-request"] += 1
            await self._answer(conn, 400, "text/plain", b"not an HTTP/1.x request\n", False)
            return False
        method, target, version = parts
        if headers.get("content-length", "0") != "0" or "transfer-encoding" in headers:
            self.counters.closed["bad-request"] += 1
            await self._answer(conn, 413, "text/plain", b"no request bodies here\n", False)
            return False
        keep = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        path = target.split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            status, ctype, body = 405, "text/plain", b"only GET and HEAD\n"
        elif path == "/metrics":
            encoder, ctype = choose_encoder(headers.get("accept", ""))
            try:
                status, body = 200, encoder(self.registry)
            except Exception as exc:  # a bug in a collector: say so, keep serving
                log.exception("metrics could not be collected")
                status, ctype = 500, "text/plain"
                body = f"metrics could not be collected: {exc}\n".encode()
        elif path == "/healthz":
            healthy, doc = health_report(self.daemon)
            status, ctype = (200 if healthy else 503), "application/json"
            body = json.dumps(doc, indent=1).encode() + b"\n"
        else:
            status, ctype = 404, "text/plain"
            body = b"not found: try /metrics or /healthz\n"
        return await self._answer(conn, status, ctype, body, keep, head_only=method == "HEAD")

    async def _answer(
        self, conn: _Connection, status: int, ctype: str, body: bytes, keep: bool,
        *, head_only: bool = False,
    ) -> bool:  # fmt: skip
        head = (
            f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\n"
            f"Connection: {'keep-alive' if keep else 'close'}\r\n\r\n"
        ).encode("latin-1")
        conn.writer.write(head if head_only else head + body)
        try:
            await asyncio.wait_for(conn.writer.drain(), self.write_timeout)
        except TimeoutError:  # the client does not read: nothing more is written to it
            self.counters.closed["timeout"] += 1
            conn.writer.transport.abort()
            return False
        return keep
