"""One byte-stream interface for every line a device sits on.

:class:`Transport` is what :mod:`hirmem.link.line` drives: open, read with a timeout, write,
close. :class:`SerialTransport` implements it over pyserial's ``serial_for_url``, which
covers a serial port (``/dev/ttyACM0``, ``COM3``), a pty path (``/dev/pts/5``), a TCP
socket (``socket://host:port``, e.g. QEMU's ``-serial tcp:…`` or a fault proxy) and RFC
2217 (``rfc2217://host:port``). Failures become :class:`TransportError` with a
message that names the port and says what to check.
"""

from __future__ import annotations

import contextlib
import errno
from typing import Any, Protocol

import serial

from hirmem.protocol.errors import HirmemError

DEFAULT_BAUDRATE = 115_200
_READ_CHUNK = 4096


class TransportError(HirmemError):
    """The line cannot be opened, or failed while in use."""


class TransportClosed(TransportError):
    """The other end went away (socket closed, device unplugged); reopen to go on."""


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
        """Write all of ``data``."""

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

    def __init__(self, url: str, *, baudrate: int = DEFAULT_BAUDRATE, **options: Any) -> None:
        if not url:
            raise TransportError("empty port: give a path (/dev/ttyACM0) or a URL (socket://…)")
        self._url = url
        self._baudrate = baudrate
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
                self._url, baudrate=self._baudrate, timeout=0, do_not_open=True, **self._options
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


def open_transport(url: str, *, baudrate: int = DEFAULT_BAUDRATE) -> SerialTransport:
    """A :class:`SerialTransport` for ``url``, opened."""
    transport = SerialTransport(url, baudrate=baudrate)
    transport.open()
    return transport
