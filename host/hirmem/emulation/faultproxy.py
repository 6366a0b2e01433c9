"""A seeded, reproducible fault-injection TCP proxy for serial lines carried over TCP.

    plan = FaultPlan(flip=0.001, drop_frame=0.01)
    with FaultProxy(("127.0.0.1", qemu_port), seed=7, to_client=plan) as proxy:
        link = serial.serial_for_url(proxy.url)      # socket://127.0.0.1:PORT
        ...
        print(proxy.stats().to_json())

The proxy listens on a local port and, for each accepted client, opens a fresh
connection to the upstream (an emulated board's UART socket). Bytes flow both
ways; each direction has its own :class:`FaultPlan`. With the daemon as the
client, ``to_upstream`` is host→device and ``to_client`` is device→host.

**Faults.** Frame-level faults find frames by their 0x00 delimiter (SPEC §2):
drop, duplicate, reorder (swap with the next frame), delay (pause the stream
``delay_ms`` before the frame), garbage burst (junk inserted before the frame)
and cut (close both sides, either after ``cut_after`` frames or at a per-frame
rate, in the middle of the frame). Byte-level faults are line noise applied to
what the frame stage emits: flip one bit, drop, duplicate, swap with the next
byte. Every fault that is applied is counted in :class:`FaultCounters` (per
direction) and, with ``record_events``, logged as a :class:`FaultEvent`.

**Delimiters.** With ``protect_delimiters`` (the default) noise never touches a
0x00 byte and never creates one, and a garbage burst is one self-delimited junk
frame. Then each emitted frame stays one frame at the receiver, and every
emitted frame carrying a byte fault, and every garbage burst, is exactly one
damaged frame for :class:`hirmem.protocol.frames.FrameDecoder` (up to a 2^-32 CRC
collision; a frame whose bytes are *all* dropped becomes an empty frame instead).
Without it noise may hit delimiters, so frames merge and split as on a real line.

**Reproducibility.** Decisions come from :class:`random.Random` streams seeded
by ``(seed, session, direction, stream)``: one stream draws a fixed number of
values per frame (so turning one frame fault on does not move the others), one
draws one value per byte considered by the noise stage, and one per stage
supplies the details (garbage bytes and cut position; bit index). Sessions are numbered in
accept order. Decisions depend only on the byte sequence of the session's
direction, never on how it was chunked by TCP. What timing can still change:
the order in which concurrent clients are accepted (session numbers); what the
peers send in reaction to delays and faults (retransmissions, timeouts); which
bytes of the *other* direction are in flight when a cut closes the connection
(they are lost); and a frame held for reordering or a partial frame at the end
of a connection (flushed at end of stream, lost at a cut in the other direction).

**Cuts and QEMU.** A cut closes the client and the upstream connection; when the
client reconnects a new upstream connection is made. QEMU's
``-serial tcp:...,server=on`` chardev (checked with QEMU 7.2) serves one client
at a time and accepts the next one after the previous one has closed; a second
connection made while the first is open is accepted by the kernel and served by
QEMU only once the first closes. (``reconnect=N`` is a client-mode option; QEMU
refuses it with ``server=on``.) Bytes the guest writes while no client is
connected are discarded by QEMU.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import json
import logging
import random
import selectors
import socket
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field, fields
from types import TracebackType
from typing import Any

from hirmem.protocol.errors import HirmemError

log = logging.getLogger("hirmem.faultproxy")

DEFAULT_MAX_SEGMENT = 8192
RECV_SIZE = 65536
BACKLOG_LIMIT = 1 << 20  # stop reading a source while this much waits for its destination


class FaultProxyError(HirmemError):
    """The proxy was misconfigured or could not start."""


class Direction(enum.StrEnum):
    TO_UPSTREAM = "to_upstream"  # client → upstream (daemon → device)
    TO_CLIENT = "to_client"  # upstream → client (device → daemon)


class FaultKind(enum.StrEnum):
    FLIP = "flip"
    DROP_BYTE = "drop_byte"
    DUP_BYTE = "dup_byte"
    SWAP_BYTE = "swap_byte"
    DROP_FRAME = "drop_frame"
    DUP_FRAME = "dup_frame"
    REORDER = "reorder"
    DELAY = "delay"
    GARBAGE = "garbage"
    CUT = "cut"


BYTE_KINDS = frozenset(
    {FaultKind.FLIP, FaultKind.DROP_BYTE, FaultKind.DUP_BYTE, FaultKind.SWAP_BYTE}
)


def _check_rate(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise FaultProxyError(f"{name} is a probability in [0, 1], got {value}")


@dataclass(frozen=True)
class FaultPlan:
    """What to do to one direction. Byte rates are per byte, frame rates per frame.

    ``flip + drop_byte + dup_byte + swap_byte`` must not exceed 1 (one draw per
    byte picks at most one of them). ``cut_after`` cuts after that many frames
    of this direction in each connection; ``cut`` cuts in the middle of a frame
    at a per-frame rate. ``max_segment`` bounds how many bytes without a 0x00
    the frame stage holds: a longer run is passed on as-is (noise only).
    """

    flip: float = 0.0
    drop_byte: float = 0.0
    dup_byte: float = 0.0
    swap_byte: float = 0.0
    drop_frame: float = 0.0
    dup_frame: float = 0.0
    reorder: float = 0.0
    delay: float = 0.0
    delay_ms: float = 20.0
    garbage: float = 0.0
    garbage_max: int = 16
    cut: float = 0.0
    cut_after: int | None = None
    protect_delimiters: bool = True
    max_segment: int = DEFAULT_MAX_SEGMENT

    def __post_init__(self) -> None:
        for name in (
            "flip",
            "drop_byte",
            "dup_byte",
            "swap_byte",
            "drop_frame",
            "dup_frame",
            "reorder",
            "delay",
            "garbage",
            "cut",
        ):
            _check_rate(name, getattr(self, name))
        total = self.flip + self.drop_byte + self.dup_byte + self.swap_byte
        if total > 1.0:
            raise FaultProxyError(
                f"byte rates flip + drop_byte + dup_byte + swap_byte = {total} exceed 1"
            )
        if self.delay_ms < 0:
            raise FaultProxyError(f"delay_ms must be >= 0, got {self.delay_ms}")
        if self.garbage_max < 1:
            raise FaultProxyError(f"garbage_max must be >= 1, got {self.garbage_max}")
        if self.cut_after is not None and self.cut_after < 1:
            raise FaultProxyError(f"cut_after must be >= 1 frame, got {self.cut_after}")
        if self.max_segment < 2:
            raise FaultProxyError(f"max_segment must be >= 2 bytes, got {self.max_segment}")

    @property
    def byte_faults(self) -> bool:
        return self.flip + self.drop_byte + self.dup_byte + self.swap_byte > 0.0

    @property
    def frame_faults(self) -> bool:
        rates = self.drop_frame + self.dup_frame + self.reorder + self.delay
        return rates + self.garbage + self.cut > 0.0 or self.cut_after is not None


@dataclass
class FaultCounters:
    """Traffic and applied faults of one direction (summed over sessions)."""

    bytes_in: int = 0
    bytes_out: int = 0
    frames_in: int = 0  # non-empty frames seen (by their 0x00)
    frames_out: int = 0  # non-empty frames emitted, garbage frames included
    flip: int = 0
    drop_byte: int = 0
    dup_byte: int = 0
    swap_byte: int = 0
    drop_frame: int = 0
    dup_frame: int = 0
    reorder: int = 0
    delay: int = 0
    delay_ms: float = 0.0
    garbage: int = 0
    garbage_bytes: int = 0
    cut: int = 0
    oversize_segments: int = 0  # runs longer than max_segment passed without frame faults

    @property
    def faults(self) -> int:
        """All applied faults of this direction."""
        return sum(getattr(self, kind.value) for kind in FaultKind)

    def copy(self) -> FaultCounters:
        return FaultCounters(**asdict(self))

    def add(self, other: FaultCounters) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["faults"] = self.faults
        return out


@dataclass
class ProxyStats:
    sessions: int = 0  # clients accepted
    active: int = 0  # sessions open now
    upstream_failures: int = 0  # clients closed because the upstream refused
    manual_cuts: int = 0  # sessions cut by cut_now()
    partition_refusals: int = 0  # clients closed at once while partitioned
    directions: dict[Direction, FaultCounters] = field(
        default_factory=lambda: {d: FaultCounters() for d in Direction}
    )

    @property
    def to_upstream(self) -> FaultCounters:
        return self.directions[Direction.TO_UPSTREAM]

    @property
    def to_client(self) -> FaultCounters:
        return self.directions[Direction.TO_CLIENT]

    def copy(self) -> ProxyStats:
        return ProxyStats(
            self.sessions,
            self.active,
            self.upstream_failures,
            self.manual_cuts,
            self.partition_refusals,
            {d: c.copy() for d, c in self.directions.items()},
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "sessions": self.sessions,
            "active": self.active,
            "upstream_failures": self.upstream_failures,
            "manual_cuts": self.manual_cuts,
            "partition_refusals": self.partition_refusals,
            **{d.value: c.to_dict() for d, c in self.directions.items()},
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


@dataclass(frozen=True)
class FaultEvent:
    """One applied fault.

    ``offset`` is a byte offset in the session's direction: in the *input*
    stream for frame faults (where the frame starts), in the *output* stream for
    byte faults and garbage. ``in_frame`` is the input frame index (non-empty
    frames of this direction and session, from 0; None for garbage and in
    pass-through mode); ``out_frame`` the index of the emitted frame the fault
    lands in (byte faults and garbage; None otherwise).
    """

    session: int
    direction: Direction
    kind: FaultKind
    offset: int
    in_frame: int | None = None
    out_frame: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "direction": self.direction.value,
            "kind": self.kind.value,
            "offset": self.offset,
            "in_frame": self.in_frame,
            "out_frame": self.out_frame,
        }


@dataclass(frozen=True)
class Piece:
    """A run of output bytes: pause ``hold_ms`` first; ``cut`` marks the cut point."""

    data: bytes
    hold_ms: float = 0.0
    cut: bool = False
    source: int | None = None  # input frame index the bytes came from
    garbage: bool = False


def _rng(seed: int | str, session: int, direction: Direction, stream: str) -> random.Random:
    return random.Random(f"hirmem-faultproxy/{seed}/{session}/{direction.value}/{stream}")


class FaultEngine:
    """The fault decisions of one direction of one session; pure, no I/O.

    ``feed`` takes the bytes as they arrive (any chunking) and returns the
    pieces to send; ``finish`` flushes at end of stream. After a cut piece the
    engine is spent: further input is ignored.
    """

    def __init__(
        self,
        plan: FaultPlan,
        seed: int | str,
        *,
        session: int = 0,
        direction: Direction = Direction.TO_CLIENT,
        counters: FaultCounters | None = None,
        events: list[FaultEvent] | None = None,
    ) -> None:
        self.plan = plan
        self.session = session
        self.direction = direction
        self.counters = counters if counters is not None else FaultCounters()
        self.events = events
        self._frame_rng = _rng(seed, session, direction, "frame")
        self._byte_rng = _rng(seed, session, direction, "byte")
        # details have one stream per stage: the stages interleave by chunk, so a
        # shared stream would make the faults depend on how TCP cut the bytes
        self._frame_detail = _rng(seed, session, direction, "frame-detail")
        self._byte_detail = _rng(seed, session, direction, "byte-detail")
        self._framed = plan.frame_faults
        self._buf = bytearray()
        self._scan = 0
        self._in_offset = 0
        self._in_frames = 0
        self._in_open = False  # pass-through: the current input frame has a byte
        self._held: list[bytes] | None = None  # frame copies waiting to be swapped
        self._held_index = 0
        self._held_offset = 0
        self._pending_hold = 0.0
        self._out: list[Piece] = []
        self.spent = False
        # noise stage
        self._out_offset = 0
        self._out_frames = 0
        self._out_open = False  # the current output frame has a non-zero byte
        self._swap: int | None = None  # a byte waiting to be swapped with the next one
        self._swap_meta: tuple[int, int | None, int] = (0, None, 0)

    # -- input side ---------------------------------------------------------

    def feed(self, data: bytes) -> list[Piece]:
        if self.spent or not data:
            return []
        self.counters.bytes_in += len(data)
        if not self._framed:
            self._count_input_frames(data)
            self._emit(bytes(data), source=None)
            return self._drain()
        buf = self._buf
        buf += data
        done: list[Piece] = []
        while not self.spent:
            zero = buf.find(0, self._scan)
            if zero < 0:
                if len(buf) > self.plan.max_segment:
                    self.counters.oversize_segments += 1
                    self._in_offset += len(buf)
                    self._emit(bytes(buf), source=None)
                    buf.clear()
                self._scan = len(buf)
                break
            segment = bytes(buf[: zero + 1])
            del buf[: zero + 1]
            self._scan = 0
            self._frame(segment)
            # noise each frame's pieces at once: the event log's order is then
            # the same however the bytes were chunked
            done += self._drain()
        return done + self._drain()

    def finish(self) -> list[Piece]:
        """End of stream: release a held frame and any bytes after the last 0x00."""
        if self.spent:
            return []
        self._release_held()
        if self._buf:
            self._in_offset += len(self._buf)
            self._emit(bytes(self._buf), source=None)
            self._buf.clear()
            self._scan = 0
        pieces = self._drain()
        if self._swap is not None:
            tail = bytearray()
            self._flush_swap(tail)
            self.counters.bytes_out += len(tail)
            pieces.append(Piece(bytes(tail)))
        return pieces

    def _count_input_frames(self, data: bytes) -> None:
        parts = data.split(b"\x00")
        for part in parts[:-1]:
            if part or self._in_open:
                self.counters.frames_in += 1
                self._in_frames += 1
            self._in_open = False
        if parts[-1]:
            self._in_open = True

    def _frame(self, segment: bytes) -> None:
        offset = self._in_offset
        self._in_offset += len(segment)
        if len(segment) == 1:  # an empty frame (flush marker): no decisions
            self._emit(segment, source=None)
            return
        plan, counters = self.plan, self.counters
        index = self._in_frames
        self._in_frames += 1
        counters.frames_in += 1
        rng = self._frame_rng
        u_drop, u_dup, u_reorder, u_delay, u_garbage, u_cut = (rng.random() for _ in range(6))
        if u_delay < plan.delay:
            counters.delay += 1
            counters.delay_ms += plan.delay_ms
            self._pending_hold += plan.delay_ms
            self._event(FaultKind.DELAY, offset, in_frame=index)
        if u_garbage < plan.garbage:
            self._garbage()
        if u_cut < plan.cut:
            self._release_held()
            cut_at = self._frame_detail.randrange(len(segment))
            if cut_at:
                self._emit(segment[:cut_at], source=index)
            self._cut(offset + cut_at, index)
            return
        if u_drop < plan.drop_frame:
            counters.drop_frame += 1
            self._event(FaultKind.DROP_FRAME, offset, in_frame=index)
        else:
            copies = [segment]
            if u_dup < plan.dup_frame:
                counters.dup_frame += 1
                self._event(FaultKind.DUP_FRAME, offset, in_frame=index)
                copies.append(segment)
            if self._held is not None:
                for copy in copies:
                    self._emit(copy, source=index)
                counters.reorder += 1
                self._event(FaultKind.REORDER, self._held_offset, in_frame=self._held_index)
                self._release_held()
            elif u_reorder < plan.reorder:
                self._held, self._held_index, self._held_offset = copies, index, offset
            else:
                for copy in copies:
                    self._emit(copy, source=index)
        if plan.cut_after is not None and self._in_frames >= plan.cut_after:
            self._release_held()
            self._cut(self._in_offset, index)

    def _release_held(self) -> None:
        if self._held is not None:
            for copy in self._held:
                self._emit(copy, source=self._held_index)
            self._held = None

    def _garbage(self) -> None:
        rng = self._frame_detail
        length = rng.randint(1, self.plan.garbage_max)
        if self.plan.protect_delimiters:
            junk = bytes(rng.randrange(1, 256) for _ in range(length)) + b"\x00"
        else:
            junk = rng.randbytes(length)
        self.counters.garbage += 1
        self.counters.garbage_bytes += len(junk)
        self._emit(junk, source=None, garbage=True)

    def _cut(self, offset: int, index: int) -> None:
        self.counters.cut += 1
        self._event(FaultKind.CUT, offset, in_frame=index)
        self._out.append(Piece(b"", cut=True))
        self.spent = True

    def _emit(self, data: bytes, *, source: int | None, garbage: bool = False) -> None:
        hold, self._pending_hold = self._pending_hold, 0.0
        self._out.append(Piece(data, hold, source=source, garbage=garbage))

    def _drain(self) -> list[Piece]:
        pieces, self._out = self._out, []
        return [self._noise(p) for p in pieces]

    # -- output side: line noise ---------------------------------------------

    def _noise(self, piece: Piece) -> Piece:
        if piece.cut:
            tail = bytearray()
            if self._swap is not None:
                self._flush_swap(tail)
            self.counters.bytes_out += len(tail)
            return Piece(bytes(tail), cut=True)
        plan = self.plan
        if piece.garbage:
            self._event(FaultKind.GARBAGE, self._out_offset, out_frame=self._out_frames)
        if not plan.byte_faults:
            out = piece.data
            self._track(out)
        else:
            out = self._noisy(piece.data, piece.source)
        self.counters.bytes_out += len(out)
        return Piece(out, piece.hold_ms, source=piece.source, garbage=piece.garbage)

    def _track(self, data: bytes) -> None:
        """Advance the output offset and frame count over ``data``."""
        self._out_offset += len(data)
        parts = data.split(b"\x00")
        for part in parts[:-1]:
            if part or self._out_open:
                self._out_frames += 1
                self.counters.frames_out += 1
            self._out_open = False
        if parts[-1]:
            self._out_open = True

    def _put(self, out: bytearray, byte: int) -> None:
        out.append(byte)
        self._out_offset += 1
        if byte:
            self._out_open = True
        elif self._out_open:
            self._out_open = False
            self._out_frames += 1
            self.counters.frames_out += 1

    def _noisy(self, data: bytes, source: int | None) -> bytes:
        plan, counters = self.plan, self.counters
        protect = plan.protect_delimiters
        t_flip = plan.flip
        t_drop = t_flip + plan.drop_byte
        t_dup = t_drop + plan.dup_byte
        t_swap = t_dup + plan.swap_byte
        rng, detail = self._byte_rng, self._byte_detail
        out = bytearray()
        for byte in data:
            if protect and byte == 0:
                if self._swap is not None:
                    self._flush_swap(out)
                self._put(out, 0)
                continue
            u = rng.random()  # one draw per byte considered, used or not
            if self._swap is not None:  # the partner of a swap is not faulted itself
                held, (offset, held_source, held_frame) = self._swap, self._swap_meta
                self._swap = None
                self._put(out, byte)
                self._put(out, held)
                if held != byte:
                    counters.swap_byte += 1
                    self._event(FaultKind.SWAP_BYTE, offset, held_source, held_frame)
                continue
            if u < t_flip:
                bit = detail.randrange(8)
                flipped = byte ^ (1 << bit)
                if protect and flipped == 0:
                    flipped = byte ^ (1 << ((bit + 1) % 8))
                counters.flip += 1
                self._event(FaultKind.FLIP, self._out_offset, source, self._out_frames)
                self._put(out, flipped)
            elif u < t_drop:
                counters.drop_byte += 1
                self._event(FaultKind.DROP_BYTE, self._out_offset, source, self._out_frames)
            elif u < t_dup:
                counters.dup_byte += 1
                self._event(FaultKind.DUP_BYTE, self._out_offset, source, self._out_frames)
                self._put(out, byte)
                self._put(out, byte)
            elif u < t_swap:
                self._swap = byte
                self._swap_meta = (self._out_offset, source, self._out_frames)
            else:
                self._put(out, byte)
        return bytes(out)

    def _flush_swap(self, out: bytearray) -> None:
        """A byte waiting for a swap partner that never came: send it unswapped."""
        held = self._swap
        assert held is not None
        self._swap = None
        self._put(out, held)

    def _event(
        self,
        kind: FaultKind,
        offset: int,
        in_frame: int | None = None,
        out_frame: int | None = None,
    ) -> None:
        if self.events is not None:
            self.events.append(
                FaultEvent(self.session, self.direction, kind, offset, in_frame, out_frame)
            )


# -- the proxy -----------------------------------------------------------------


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (or ``socket://HOST:PORT``) to a tuple, with a helpful error."""
    raw = text.removeprefix("socket://")
    host, sep, port = raw.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise FaultProxyError(f"address {text!r} is not HOST:PORT (e.g. 127.0.0.1:4321)")
    return host.strip("[]"), int(port)


@dataclass
class _Queued:
    ready_at: float
    data: memoryview
    cut: bool


class _Pipe:
    """One direction of a session: source socket → engine → queue → destination."""

    def __init__(self, src: socket.socket, dst: socket.socket, engine: FaultEngine) -> None:
        self.src = src
        self.dst = dst
        self.engine = engine
        self.queue: deque[_Queued] = deque()
        self.queued_bytes = 0
        self.last_ready = 0.0
        self.src_eof = False
        self.dst_shut = False

    def enqueue(self, pieces: list[Piece], now: float) -> None:
        for piece in pieces:
            # a hold pauses the stream after what is already queued: delays add up
            ready = max(self.last_ready, now) + piece.hold_ms / 1000.0
            self.last_ready = ready
            if piece.data or piece.cut:
                self.queue.append(_Queued(ready, memoryview(piece.data), piece.cut))
                self.queued_bytes += len(piece.data)

    @property
    def wants_read(self) -> bool:
        return not self.src_eof and not self.engine.spent and self.queued_bytes < BACKLOG_LIMIT


class _Session:
    def __init__(
        self,
        index: int,
        client: socket.socket,
        upstream: socket.socket,
        engines: dict[Direction, FaultEngine],
    ) -> None:
        self.index = index
        self.client = client
        self.upstream = upstream
        self.pipes = {
            Direction.TO_UPSTREAM: _Pipe(client, upstream, engines[Direction.TO_UPSTREAM]),
            Direction.TO_CLIENT: _Pipe(upstream, client, engines[Direction.TO_CLIENT]),
        }
        self.closed = False
        self.registered: dict[socket.socket, int] = {}

    @property
    def done(self) -> bool:
        return self.closed or all(p.dst_shut for p in self.pipes.values())


class FaultProxy:
    """A TCP proxy with seeded faults per direction, run in a background thread.

    ``listen=("127.0.0.1", 0)`` picks a free port (see :attr:`port`). ``stop``
    closes every connection and joins the thread; it is safe to call twice and
    from ``__exit__``. :meth:`stats` is a consistent copy of the live counters;
    :meth:`events` the applied faults when ``record_events`` is on.
    """

    def __init__(
        self,
        upstream: tuple[str, int] | str,
        *,
        listen: tuple[str, int] = ("127.0.0.1", 0),
        seed: int | str = 0,
        to_upstream: FaultPlan | None = None,
        to_client: FaultPlan | None = None,
        record_events: bool = False,
        connect_timeout: float = 2.0,
    ) -> None:
        self.upstream = parse_address(upstream) if isinstance(upstream, str) else upstream
        self.listen_address = listen
        self.seed = seed
        self.plans = {
            Direction.TO_UPSTREAM: to_upstream or FaultPlan(),
            Direction.TO_CLIENT: to_client or FaultPlan(),
        }
        self.connect_timeout = connect_timeout
        self._events: list[FaultEvent] | None = [] if record_events else None
        self._stats = ProxyStats()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._selector: selectors.BaseSelector | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._cut_request = threading.Event()
        self._partitioned = threading.Event()
        self._sessions: list[_Session] = []
        self._next_session = 0
        self.port = 0
        self.error: BaseException | None = None

    # -- public API ------------------------------------------------------------

    @property
    def url(self) -> str:
        """The pyserial URL a client (the daemon) opens."""
        return f"socket://{self.listen_address[0]}:{self.port}"

    def start(self) -> FaultProxy:
        if self._thread is not None:
            raise FaultProxyError("the proxy is already started")
        try:
            listener = socket.create_server(self.listen_address, backlog=16)
        except OSError as err:
            raise FaultProxyError(
                f"cannot listen on {self.listen_address[0]}:{self.listen_address[1]}: {err}; "
                "pick another port (0 picks a free one)"
            ) from err
        listener.setblocking(False)
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(listener, selectors.EVENT_READ, "listen")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread = threading.Thread(
            target=self._run, name=f"faultproxy:{self.port}", daemon=True
        )
        self._thread.start()
        log.info("fault proxy on 127.0.0.1:%d → %s:%d", self.port, *self.upstream)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        thread = self._thread
        if thread is None:
            return
        self._stopping.set()
        self._wake()
        thread.join(timeout)
        if thread.is_alive():
            raise FaultProxyError(f"the proxy thread did not stop within {timeout} s")
        self._thread = None

    def cut_now(self) -> None:
        """Cut every open session now (both sides), as a cable pull would."""
        self._cut_request.set()
        self._wake()

    def partition(self) -> None:
        """Cut every open session and close each new client at once, until
        :meth:`heal`: the network between the two sides is down."""
        self._partitioned.set()
        self.cut_now()

    def heal(self) -> None:
        """End a :meth:`partition`: new clients are served again."""
        self._partitioned.clear()

    @property
    def partitioned(self) -> bool:
        return self._partitioned.is_set()

    def stats(self) -> ProxyStats:
        with self._lock:
            return self._stats.copy()

    def events(self) -> list[FaultEvent]:
        with self._lock:
            return list(self._events or [])

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- the loop ---------------------------------------------------------------

    def _wake(self) -> None:
        if self._wake_w is not None:
            with contextlib.suppress(OSError):
                self._wake_w.send(b"x")

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as err:  # keep the message for the owner, then clean up
            self.error = err
            log.exception("fault proxy loop failed")
        finally:
            self._shutdown()

    def _loop(self) -> None:
        sel = self._selector
        assert sel is not None
        while not self._stopping.is_set():
            if self._cut_request.is_set():
                self._cut_request.clear()
                for session in self._sessions:
                    if not session.closed:
                        with self._lock:
                            self._stats.manual_cuts += 1
                        self._close_session(session, "cut on request")
            now = time.monotonic()
            self._pump_all(now)
            self._update_registrations()
            timeout = self._next_timeout(time.monotonic())
            for key, mask in sel.select(timeout):
                tag = key.data
                if tag == "listen":
                    self._accept()
                elif tag == "wake":
                    assert self._wake_r is not None
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(4096)
                else:
                    session, sock = tag
                    if not session.closed:
                        self._on_ready(session, sock, mask)

    def _next_timeout(self, now: float) -> float:
        timeout = 0.5
        for session in self._sessions:
            for pipe in session.pipes.values():
                # a ready head that is still queued waits for EVENT_WRITE, not a timer
                if pipe.queue and pipe.queue[0].ready_at > now:
                    timeout = min(timeout, pipe.queue[0].ready_at - now)
        return timeout

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                client, _addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            if self._partitioned.is_set():
                with self._lock:
                    self._stats.partition_refusals += 1
                client.close()
                continue
            index = self._next_session
            self._next_session += 1
            with self._lock:
                self._stats.sessions += 1
            try:
                upstream = socket.create_connection(self.upstream, timeout=self.connect_timeout)
            except OSError as err:
                log.warning(
                    "session %d: upstream %s:%d refused (%s); closing the client",
                    index,
                    *self.upstream,
                    err,
                )
                with self._lock:
                    self._stats.upstream_failures += 1
                client.close()
                continue
            for sock in (client, upstream):
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            engines = {  # they count straight into the shared stats, under the lock
                d: FaultEngine(
                    self.plans[d],
                    self.seed,
                    session=index,
                    direction=d,
                    counters=self._stats.directions[d],
                    events=self._events,
                )
                for d in Direction
            }
            session = _Session(index, client, upstream, engines)
            self._sessions.append(session)
            with self._lock:
                self._stats.active += 1
            log.info("session %d open", index)

    def _on_ready(self, session: _Session, sock: socket.socket, mask: int) -> None:
        if mask & selectors.EVENT_READ:
            for pipe in session.pipes.values():
                if pipe.src is sock and pipe.wants_read:
                    self._read(session, pipe)
        # writes are attempted by _pump_all on every turn

    def _read(self, session: _Session, pipe: _Pipe) -> None:
        try:
            data = pipe.src.recv(RECV_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as err:
            self._close_session(session, f"read failed: {err}")
            return
        now = time.monotonic()
        with self._lock:
            if data:
                pieces = pipe.engine.feed(data)
            else:
                pipe.src_eof = True
                pieces = pipe.engine.finish()
        pipe.enqueue(pieces, now)

    def _pump_all(self, now: float) -> None:
        for session in list(self._sessions):
            if not session.closed:
                self._pump(session, now)
            if session.done:
                self._close_session(session, "finished")
        self._sessions = [s for s in self._sessions if not s.closed]

    def _pump(self, session: _Session, now: float) -> None:
        for pipe in session.pipes.values():
            while pipe.queue and pipe.queue[0].ready_at <= now:
                head = pipe.queue[0]
                if head.data:
                    try:
                        sent = pipe.dst.send(head.data)
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError as err:
                        if err.errno not in (errno.EPIPE, errno.ECONNRESET):
                            log.warning("session %d: send failed: %s", session.index, err)
                        self._close_session(session, f"send failed: {err}")
                        return
                    head.data = head.data[sent:]
                    pipe.queued_bytes -= sent
                    if head.data:
                        break
                if head.cut:
                    self._close_session(session, "cut")
                    return
                pipe.queue.popleft()
            if pipe.src_eof and not pipe.queue and not pipe.dst_shut:
                with contextlib.suppress(OSError):
                    pipe.dst.shutdown(socket.SHUT_WR)
                pipe.dst_shut = True

    def _update_registrations(self) -> None:
        sel = self._selector
        assert sel is not None
        for session in self._sessions:
            if session.closed:
                continue
            for sock in (session.client, session.upstream):
                mask = 0
                for pipe in session.pipes.values():
                    if pipe.src is sock and pipe.wants_read:
                        mask |= selectors.EVENT_READ
                    if pipe.dst is sock and pipe.queue and pipe.queue[0].data:
                        mask |= selectors.EVENT_WRITE
                old = session.registered.get(sock, 0)
                if mask == old:
                    continue
                if old == 0:
                    sel.register(sock, mask, (session, sock))
                elif mask == 0:
                    sel.unregister(sock)
                else:
                    sel.modify(sock, mask, (session, sock))
                session.registered[sock] = mask

    def _close_session(self, session: _Session, why: str) -> None:
        if session.closed:
            return
        session.closed = True
        with self._lock:  # before the sockets close: a peer that sees EOF sees the stats
            self._stats.active -= 1
        sel = self._selector
        for sock in (session.client, session.upstream):
            if sel is not None and session.registered.get(sock):
                with contextlib.suppress(KeyError, ValueError):
                    sel.unregister(sock)
            with contextlib.suppress(OSError):
                sock.close()
        log.info("session %d closed: %s", session.index, why)

    def _shutdown(self) -> None:
        for session in self._sessions:
            self._close_session(session, "proxy stopped")
        self._sessions = []
        if self._selector is not None:
            self._selector.close()
        for sock in (self._listener, self._wake_r, self._wake_w):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.close()
        self._listener = self._wake_r = self._wake_w = None
