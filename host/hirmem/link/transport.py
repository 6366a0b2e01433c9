"""One byte-stream interface for every line a device sits on.

:class:`Transport` is what :mod:`hirmem.link.line` drives: open, read with a timeout, write,
close. :class:`SerialTransport` implements it over pyserial's ``serial_for_url``, which
covers a serial port (``/dev/ttyACM0``, ``COM3``), a pty path (``/dev/pts/5``), a TCP
socket (``socket://host:port``, e.g. QEMU's ``-serial tcp:…`` or a fault proxy) and RFC
2217 (``rfc2217://host:port``). :class:`SocketTransport` serves ``socket://`` on the
socket itself: pyserial's socket backend reports at most one byte waiting (a read per
two bytes) and spins on a full send buffer. :func:`make_transport` picks the right one.

Every write has a deadline (``write_timeout_s``): a peer that stops reading makes the
write fail with :class:`TransportClosed` instead of blocking its thread for ever.
Failures become :class:`TransportError` with a message that names the port and says
what to check.
"""

from __future__ import annotations

import contextlib
import errno
import select
import socket
import time
from typing import Any, Protocol
from urllib.parse import urlsplit

import serial

from hirmem.protocol.errors import HirmemError

DEFAULT_BAUDRATE = 115_200
DEFAULT_WRITE_TIMEOUT_S = 5.0  # a peer that takes no byte for this long is not reading
_READ_CHUNK = 65536  # the most one read() returns


class TransportError(HirmemError):
    """The line cannot be opened, or failed while in use."""


class TransportClosed(TransportError):
    """The other end went away (socket closed, device unplugged); reopen to go on."""


class TransportStalled(TransportClosed):
    """A write did not finish by its deadline: the peer stopped reading. The line is closed."""


class Transport(Protocol):
    """A byte stream to one device."""

    @property
    def url(self) -> str: ...

    @property
    def is_open(self) -> bool: ...

    def open(self) -> None:
        """Open the line; raise TransportError saying what to fix when it cannot."""

    def read(self, timeout_s: float) -> bytes:
        """Bytes available within ``timeout_s`` seconds (b"" if none); never blocks longer."""

    def write(self, data: bytes) -> None:
        """Write all of ``data`` within the write deadline, or raise TransportClosed."""

    def close(self) -> None:
        """Close the line; closing a closed transport does nothing."""


def _hint(url: str, exc: BaseException) -> str:
    text = str(exc)
    code = getattr(exc, "errno", None)
    if url.startswith(("socket://", "rfc2217://")):
        if code == errno.ECONNREFUSED or "refused" in text.lower():
            return "connection refused: is the emulator or proxy running and listening there?"
        if "timed out" in text.lower():
            return "no answer: check the host name, the port and any firewall"
        return "check the host and port (socket://HOST:PORT)"
    if code == errno.ENOENT or "No such file" in text:
        return (
            "no such device: is the board plugged in and the path right? "
            "List ports with `python -m serial.tools.list_ports`"
        )
    if code == errno.EACCES or "Permission denied" in text:
        return "permission denied: add your user to the 'dialout' group (then log in again)"
    if code == errno.EBUSY or "busy" in text.lower():
        return "the port is busy: another program (a monitor, a second daemon) holds it"
    return "check the port name and that nothing else uses it"


class SerialTransport:
    """A :class:`Transport` over ``serial.serial_for_url``."""

    def __init__(
        self,
        url: str,
        *,
        baudrate: int = DEFAULT_BAUDRATE,
        write_timeout_s: float = DEFAULT_WRITE_TIMEOUT_S,
        **options: Any,
    ) -> None:
        if not url:
            raise TransportError("empty port: give a path (/dev/ttyACM0) or a URL (socket://…)")
        self._url = url
        self._baudrate = baudrate
        self._write_timeout_s = write_timeout_s
        self._options = options
        self._port: Any = None

    def __repr__(self) -> str:
        state = "open" if self.is_open else "closed"
        return f"SerialTransport({self._url!r}, {state})"

    @property
    def url(self) -> str:
        return self._url

    @property
    def is_open(self) -> bool:
        return self._port is not None and bool(self._port.is_open)

    def open(self) -> None:
        if self.is_open:
            return
        try:
            port = serial.serial_for_url(
                self._url,
                baudrate=self._baudrate,
                timeout=0,
                write_timeout=self._write_timeout_s,
                do_not_open=True,
                **self._options,
            )
            port.open()
        except (serial.SerialException, OSError, ValueError) as exc:
            raise TransportError(
                f"cannot open {self._url}: {exc} ({_hint(self._url, exc)})"
            ) from exc
        self._port = port

    def _need_port(self) -> Any:
        if not self.is_open:
            raise TransportError(f"{self._url} is not open: call open() first")
        return self._port

    def read(self, timeout_s: float) -> bytes:
        port = self._need_port()
        try:
            timeout = max(0.0, timeout_s)
            if port.timeout != timeout:
                port.timeout = timeout
            first = port.read(1)
            if not first:
                return b""
            waiting = port.in_waiting  # already there: this read does not wait
            rest = port.read(min(waiting, _READ_CHUNK)) if waiting else b""
        except serial.SerialException as exc:
            self.close()
            raise TransportClosed(f"{self._url}: the line went away while reading: {exc}") from exc
        except OSError as exc:
            self.close()
            raise TransportClosed(f"{self._url}: read failed: {exc}") from exc
        return bytes(first) + bytes(rest)

    def write(self, data: bytes) -> None:
        port = self._need_port()
        try:
            port.write(data)
            port.flush()
        except serial.SerialTimeoutException as exc:
            self.close()
            raise TransportStalled(
                f"{self._url}: the peer took no data for {self._write_timeout_s} s "
                f"(not reading?): {exc}"
            ) from exc
        except (serial.SerialException, OSError) as exc:
            self.close()
            raise TransportClosed(f"{self._url}: the line went away while writing: {exc}") from exc

    def close(self) -> None:
        port, self._port = self._port, None
        if port is not None:
            with contextlib.suppress(serial.SerialException, OSError):
                port.close()  # an error here means it is already gone

    def __enter__(self) -> SerialTransport:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SocketTransport:
    """A :class:`Transport` over a TCP socket (``socket://HOST:PORT``), non-blocking.

    A read returns everything the socket holds (up to 64 KiB) in one call; a write
    waits for room with ``select`` until its deadline.
    """

    def __init__(
        self,
        url: str,
        *,
        write_timeout_s: float = DEFAULT_WRITE_TIMEOUT_S,
        connect_timeout_s: float = 5.0,
    ) -> None:
        parts = urlsplit(url)
        try:
            port = parts.port
        except ValueError:
            port = None
        if parts.scheme != "socket" or not parts.hostname or port is None:
            raise TransportError(f"{url}: not a socket URL: give socket://HOST:PORT")
        if parts.query or (parts.path not in ("", "/")):
            raise TransportError(f"{url}: a socket URL takes no path or options")
        self._url = url
        self._address = (parts.hostname, port)
        self._write_timeout_s = write_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._sock: socket.socket | None = None

    def __repr__(self) -> str:
        return f"SocketTransport({self._url!r}, {'open' if self.is_open else 'closed'})"

    @property
    def url(self) -> str:
        return self._url

    @property
    def is_open(self) -> bool:
        return self._sock is not None

    def open(self) -> None:
        if self._sock is not None:
            return
        try:
            sock = socket.create_connection(self._address, timeout=self._connect_timeout_s)
        except OSError as exc:
            raise TransportError(
                f"cannot open {self._url}: {exc} ({_hint(self._url, exc)})"
            ) from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        self._sock = sock

    def _need_sock(self) -> socket.socket:
        if self._sock is None:
            raise TransportError(f"{self._url} is not open: call open() first")
        return self._sock

    def read(self, timeout_s: float) -> bytes:
        sock = self._need_sock()
        try:
            ready, _, _ = select.select([sock], [], [], max(0.0, timeout_s))
            if not ready:
                return b""
            data = sock.recv(_READ_CHUNK)
        except BlockingIOError:
            return b""
        except OSError as exc:
            self.close()
            raise TransportClosed(f"{self._url}: the line went away while reading: {exc}") from exc
        if not data:
            self.close()
            raise TransportClosed(f"{self._url}: the line went away (the peer closed it)")
        return data

    def write(self, data: bytes) -> None:
        sock = self._need_sock()
        view = memoryview(data)
        deadline = time.monotonic() + self._write_timeout_s
        try:
            while view:
                try:
                    sent = sock.send(view)
                except BlockingIOError:
                    sent = 0
                view = view[sent:]
                if not view:
                    break
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([], [sock], [], left)[1]:
                    self.close()
                    raise TransportStalled(
                        f"{self._url}: the peer took no data for {self._write_timeout_s} s "
                        f"({len(view)} of {len(data)} bytes unsent): is it reading?"
                    )
        except OSError as exc:
            self.close()
            raise TransportClosed(f"{self._url}: write failed: {exc}") from exc

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def __enter__(self) -> SocketTransport:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_transport(
    url: str,
    *,
    baudrate: int = DEFAULT_BAUDRATE,
    write_timeout_s: float = DEFAULT_WRITE_TIMEOUT_S,
) -> SocketTransport | SerialTransport:
    """The transport for ``url``: plain ``socket://`` on the socket, the rest through pyserial."""
    parts = urlsplit(url) if "://" in url else None
    if parts is not None and parts.scheme == "socket" and not parts.query:
        return SocketTransport(url, write_timeout_s=write_timeout_s)
    return SerialTransport(url, baudrate=baudrate, write_timeout_s=write_timeout_s)


def open_transport(
    url: str, *, baudrate: int = DEFAULT_BAUDRATE
) -> SocketTransport | SerialTransport:
    """The transport for ``url`` (:func:`make_transport`), opened."""
    transport = make_transport(url, baudrate=baudrate)
    transport.open()
    return transport
