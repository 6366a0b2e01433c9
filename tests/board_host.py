"""Host sides for board tests over a board's UART socket (QEMU).

- :class:`LinkHost`: the real host session (hirmem.link.session.Session driven by
  hirmem.link.line.Link over hirmem.link.transport.SerialTransport, its loop in a thread) with
  a pack intake; events are collected and waited for. What the daemon runs.
- :class:`LineTap`: a TCP relay between the host and QEMU's serial socket that
  records both directions (the benchmark's wire bytes) and can put bytes on the
  line towards the host (line noise, damaged frames).
- :class:`BoardHost`: a minimal synchronous host over the codec alone, for requests
  the real session refuses to send (a knowledge pack signed by a key the device
  does not trust).

BoardHost is the socket twin of ``Host`` in tests/test_native_agent.py, kept small so the real
host session module can replace it: every byte read goes through the host codec
(FrameDecoder, decode_message, pieces.Joiner); sequenced messages are delivered in
order and acknowledged promptly (the device retransmits after 250 ms otherwise);
unsequenced ones (LOG, ERROR, ACK) are kept apart.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

import serial

from codec_receiver import CHALLENGE, CodecReceiver
from hirmem.emulation.provision import SlotSettings, provision_image
from hirmem.link.line import Link
from hirmem.link.session import (
    Event,
    KnowledgeDone,
    PackIntake,
    RequestFailed,
    Session,
    SessionConfig,
    StatusReport,
)
from hirmem.link.transport import SerialTransport, TransportClosed
from hirmem.protocol import pieces
from hirmem.protocol.frames import encode_frame
from hirmem.protocol.messages import (
    Ack,
    HelloAck,
    Log,
    Message,
    Status,
    encode_message,
)
from hirmem.protocol.records import GENESIS

M = TypeVar("M", bound=Message)
E = TypeVar("E")


@dataclass
class BoardHost(CodecReceiver):
    port: Any  # a pyserial port (serial_for_url)
    host_id: bytes
    max_frame: int = 512
    window: int = 4
    next_seq: int = 1
    disconnected: bool = False  # QEMU closed the socket (the board exited)

    @classmethod
    def connect(cls, url: str, host_id: bytes) -> BoardHost:
        return cls(serial.serial_for_url(url, timeout=0.02), host_id)

    def close(self) -> None:
        self.port.close()

    # ---- receiving ---------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        self.receive(data)

    def pump(self, seconds: float = 0.0) -> None:
        """Read for ``seconds`` (at least one read), acknowledging as a host does."""
        end = time.monotonic() + seconds
        while not self.disconnected:
            try:
                data = self.port.read(4096)
            except serial.SerialException:
                self.disconnected = True
                return
            if data:
                self.feed(data)
            if self.owed:
                self.ack()
            if time.monotonic() >= end:
                return

    def wait_for(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        while not done():
            if self.disconnected:
                raise AssertionError(f"the board closed the line while waiting for {what}")
            if time.monotonic() > end:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}")
            self.pump()

    def take(self, kind: type[M]) -> list[tuple[int, M]]:
        got = [(s, m) for s, m in self.delivered if isinstance(m, kind)]
        self.delivered = [(s, m) for s, m in self.delivered if not isinstance(m, kind)]
        return got

    def wait_take(self, kind: type[M], count: int = 1, timeout: float = 5.0) -> list[tuple[int, M]]:
        """Wait until ``count`` messages of ``kind`` were delivered; take them."""
        self.wait_for(
            lambda: sum(isinstance(m, kind) for _, m in self.delivered) >= count,
            timeout,
            f"{count} x {kind.__name__}",
        )
        return self.take(kind)

    def logs(self) -> list[str]:
        return [e.message.text for e in self.unsequenced if isinstance(e.message, Log)]

    # ---- sending -----------------------------------------------------------------

    def write(self, wire: bytes) -> None:
        self.port.write(wire)
        self.port.flush()

    def ack(self) -> None:
        self.owed = False
        self.write(encode_frame(encode_message(Ack(), 0, self.expected - 1), self.max_frame))

    def send(self, message: Message) -> int:
        """Send a sequenced message (in frame pieces if needed) once the window has room
        (at most ``window`` of our seqs unacknowledged); returns its seq."""
        self.wait_for(
            lambda: self.next_seq - 1 - self.last_ack < self.window, 5, "room in the window"
        )
        seq = self.next_seq
        body = encode_message(message, seq, self.expected - 1)
        self.next_seq += 1
        for piece in pieces.split(body, self.max_frame):
            self.write(encode_frame(piece, self.max_frame))
        return seq

    def handshake(
        self,
        time_ms: int,
        *,
        pack_seq: int = 0,
        pack_hash: bytes = GENESIS,
        max_message: int = 65536,
        timeout: float = 5.0,
    ) -> HelloAck:
        self.wait_for(lambda: self.hello is not None, timeout, "HELLO")
        assert self.hello is not None
        ack = HelloAck(
            self.host_id,
            min(self.max_frame, self.hello.max_frame),
            max_message,
            min(self.window, self.hello.window),
            time_ms,
            pack_seq,
            pack_hash,
            CHALLENGE,
            self.hello_echo,
        )
        self.max_frame, self.window = ack.max_frame, ack.window
        self.next_seq, self.expected = 2, 2
        self.write(encode_frame(encode_message(ack, 1, 1), 128))
        # the device answers with its PROOF (seq 2), which acknowledges the HELLO_ACK
        proofs = len(self.proofs)
        self.wait_for(lambda: len(self.proofs) > proofs, timeout, "the PROOF")
        assert self.last_ack >= 1
        return ack


# ---- images ------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
BOARDS_OUT = ROOT / "build" / "boards"
BOARDS = ("mps2-an385", "hifive1", "stm32f4")
ARCH_PREFIX = {
    "mps2-an385": "arm-none-eabi-",
    "hifive1": "riscv64-unknown-elf-",
    "stm32f4": "arm-none-eabi-",
}


@cache
def build_boards() -> str:
    """``make -C firmware boards`` once per test session; its output."""
    proc = subprocess.run(
        ["make", "-C", str(ROOT / "firmware"), "-j4", "boards"], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"board build failed:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout + proc.stderr


def image(board: str) -> Path:
    build_boards()
    return BOARDS_OUT / board / "hirmem.elf"


def provisioned(board: str, out_dir: Path, settings: SlotSettings) -> Path:
    """A provisioned copy of the board's image in out_dir."""
    out = out_dir / f"{board}-{settings.device_id.hex()}.elf"
    provision_image(image(board), settings, out)
    return out


# ---- the real host session -----------------------------------------------------------


class LinkHost:
    """Session + Link over a SerialTransport on ``url``, the link loop in a thread.

    Every event the session reports is kept in order (``events``, never cleared);
    :meth:`wait` consumes matching events one by one, so a test sees each once.
    """

    def __init__(
        self, url: str, host_id: bytes, intake: PackIntake, *, max_wait_s: float = 0.01
    ) -> None:
        self.transport = SerialTransport(url)
        self.session = Session(SessionConfig(host_id), intake)
        self.intake = intake
        self.link = Link(
            self.transport, self.session, on_event=self._on_event, max_wait_s=max_wait_s
        )
        self.events: list[Event] = []
        self._unseen: list[Event] = []
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="link", daemon=True)
        self.closed = False
        self.failure: BaseException | None = None

    def start(self) -> LinkHost:
        self.link.open()
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            self.link.run()
        except TransportClosed:
            pass
        except BaseException as exc:  # reported by wait()
            self.failure = exc
        finally:
            with self._cond:
                self.closed = True
                self._cond.notify_all()

    def _on_event(self, event: Event) -> None:
        with self._cond:
            self.events.append(event)
            self._unseen.append(event)
            self._cond.notify_all()

    def close(self) -> None:
        self.link.stop()
        self._thread.join(5)

    def __enter__(self) -> LinkHost:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- events ----------------------------------------------------------------------

    def wait(
        self, kind: type[E], match: Callable[[E], bool] = lambda _: True, timeout: float = 5.0
    ) -> E:
        """The next unseen event of ``kind`` that ``match`` admits (consumed)."""
        end = time.monotonic() + timeout
        with self._cond:
            while True:
                for n, event in enumerate(self._unseen):
                    if isinstance(event, kind) and match(event):
                        del self._unseen[n]
                        return event
                if self.failure is not None:
                    raise AssertionError(f"the link loop failed: {self.failure!r}")
                if self.closed:
                    raise AssertionError(f"the line closed while waiting for {kind.__name__}")
                left = end - time.monotonic()
                if left <= 0:
                    seen = [type(e).__name__ for e in self._unseen]
                    raise AssertionError(
                        f"timed out after {timeout} s waiting for {kind.__name__} (unseen: {seen})"
                    )
                self._cond.wait(left)

    def wait_many(self, kind: type[E], count: int, timeout: float = 5.0) -> list[E]:
        end = time.monotonic() + timeout
        return [self.wait(kind, timeout=max(end - time.monotonic(), 0.0)) for _ in range(count)]

    def of(self, kind: type[E]) -> list[E]:
        """Every event of ``kind`` so far (seen or not)."""
        with self._cond:
            return [e for e in self.events if isinstance(e, kind)]

    # ---- requests --------------------------------------------------------------------

    def call(self, action: Callable[[Session], E]) -> E:
        """``action(session)`` under the loop's lock. Events the action itself raises
        (a request failed at once) are collected here: Link.call drops the events it
        takes after the action (hirmem/link/line.py: ``_flush``'s result is discarded)."""
        raised: list[Event] = []

        def act(session: Session) -> E:
            result = action(session)
            raised.extend(session.take_events())
            return result

        result = self.link.call(act)
        for event in raised:
            self._on_event(event)
        return result

    def status(self, timeout: float = 5.0) -> Status:
        token = self.call(lambda s: s.request_status())
        failed = self.of(RequestFailed)
        assert not [f for f in failed if f.token == token], failed
        report = self.wait(StatusReport, lambda r: r.token == token, timeout)
        return report.status

    def push(self, pack: bytes, timeout: float = 10.0) -> KnowledgeDone:
        token = self.call(lambda s: s.push_knowledge(pack))
        return self.wait(KnowledgeDone, lambda d: d.token == token, timeout)

    def inject(self, raw: bytes) -> None:
        """Raw bytes onto the line towards the device, between two of the session's
        frames (under the loop's lock, so no frame of the session is cut)."""
        self.link.call(lambda _s: self.transport.write(raw))


# ---- a recording relay ---------------------------------------------------------------


class LineTap:
    """A TCP relay host <-> QEMU serial socket that records both directions.

    ``url`` is where the host connects; the relay connects to QEMU (``upstream``, a
    socket:// URL) at once, so a guest started with wait=on runs from then on.
    """

    def __init__(self, upstream: str) -> None:
        target = urlparse(upstream)
        assert target.scheme == "socket" and target.hostname and target.port, upstream
        self._device = socket.create_connection((target.hostname, target.port), timeout=5)
        self._device.settimeout(None)
        self._listen = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listen.bind(("127.0.0.1", 0))
        self._listen.listen(1)
        self.url = f"socket://127.0.0.1:{self._listen.getsockname()[1]}"
        self.to_host = bytearray()  # everything the device sent
        self.to_device = bytearray()  # everything the host sent
        self.injected_to_host = 0
        self._host: socket.socket | None = None
        self._lock = threading.Lock()  # one writer at a time towards the host
        self._threads: list[threading.Thread] = []
        self._accepter = threading.Thread(target=self._accept, daemon=True)
        self._accepter.start()

    def _accept(self) -> None:
        try:
            host, _ = self._listen.accept()
        except OSError:
            return
        host.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._host = host
        for src, dst, log, lock in (
            (self._device, host, self.to_host, self._lock),
            (host, self._device, self.to_device, threading.Lock()),
        ):
            t = threading.Thread(target=self._relay, args=(src, dst, log, lock), daemon=True)
            t.start()
            self._threads.append(t)

    @staticmethod
    def _relay(
        src: socket.socket, dst: socket.socket, log: bytearray, lock: threading.Lock
    ) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                for s in (src, dst):
                    with contextlib.suppress(OSError):
                        s.shutdown(socket.SHUT_RDWR)
                return
            with lock:
                log += data
                try:
                    dst.sendall(data)
                except OSError:
                    return

    def inject_to_host(self, raw: bytes) -> None:
        """Bytes onto the line towards the host (between two relayed chunks)."""
        assert self._host is not None, "nobody connected to the tap yet"
        with self._lock:
            self.injected_to_host += len(raw)
            self._host.sendall(raw)

    def close(self) -> None:
        for s in (self._listen, self._device, self._host):
            if s is not None:
                with contextlib.suppress(OSError):
                    s.close()
