"""A simulated device on a TCP socket: honest, endless, and able to misbehave on cue.

:class:`SimDevice` listens like QEMU's UART socket (the daemon connects to
``socket://127.0.0.1:PORT``) and plays an honest device written with the host codec
(an implementation of the contract independent of the firmware): it sends HELLO,
makes signed, chained packs of ``records_per_pack`` readings, offers them one at a
time and keeps an offered pack until the host answers *accepted* or *duplicate*
(*deferred* is offered again after ``retry_s``), answers STATUS_REQUEST with STATUS
and KNOWLEDGE_PUSH with KNOWLEDGE_RESULT (a version with more facts than
``max_facts`` is answered *deferred*, storage, as the C agent answers one it has no
room for). When the host closes the line it listens
again and starts a new session with the same boot: nothing it made is forgotten.

Two faults on cue, for tests and benchmarks: :meth:`drop_line` closes the line from
the device's side, and :meth:`stall` makes the device stop reading for good while it
keeps writing messages of a type only a host sends (each one draws an ERROR from
the host that the device never takes), so the host's writes to it soon block.

With ``on_pty`` the device sits on the master side of a pseudo-terminal instead and
:attr:`url` is the slave's path (the daemon opens it like a serial port); the line
is always there, so :meth:`drop_line` only restarts the device's session.

Sequencing is the simplest correct one: one sequenced message in flight, resent
every ``resend_s`` until acknowledged; every sequenced message from the host is
acknowledged at once. Frames are at most ``max_frame`` bytes: the host is expected
to agree to that size, so nothing is fragmented.
"""

from __future__ import annotations

import fcntl
import os
import select
import socket
import threading
import time
import tty
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from hirmem.protocol import pieces
from hirmem.protocol.errors import HirmemError, PackError
from hirmem.protocol.frames import FrameDecoder, encode_frame
from hirmem.protocol.keys import PublicKey, SigningKey
from hirmem.protocol.messages import (
    Ack,
    Hello,
    HelloAck,
    KnowledgePush,
    KnowledgeResult,
    Message,
    PackOffer,
    PackResult,
    PackStatus,
    Proof,
    Status,
    StatusRequest,
    decode_message,
    encode_message,
)
from hirmem.protocol.packs import (
    Pack,
    PackKind,
    Reason,
    TrustedKey,
    read_unverified,
    sign_pack,
    verify_pack,
)
from hirmem.protocol.proof import hello_echo, sign_proof
from hirmem.protocol.records import GENESIS, Record, record_id

ALL_CAPS = 0x1F


class _Line(Protocol):
    """What the device needs of its line: the subset of a socket it uses."""

    def setsockopt(self, level: int, option: int, value: int) -> None: ...
    def setblocking(self, flag: bool) -> None: ...
    def settimeout(self, value: float | None) -> None: ...
    def recv(self, size: int) -> bytes: ...
    def send(self, data: bytes) -> int: ...
    def sendall(self, data: bytes) -> None: ...


class _PtyLine:
    """The master side of a pty, behaving like the socket subset in :class:`_Line`."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._timeout: float | None = 0.0

    def setsockopt(self, level: int, option: int, value: int) -> None:
        del level, option, value  # no socket options on a pty

    def setblocking(self, flag: bool) -> None:
        self._timeout = None if flag else 0.0

    def settimeout(self, value: float | None) -> None:
        self._timeout = value

    def recv(self, size: int) -> bytes:
        if self._timeout != 0.0 and not select.select([self.fd], [], [], self._timeout)[0]:
            raise TimeoutError("nothing to read")
        return os.read(self.fd, size)  # BlockingIOError when nothing waits (non-blocking)

    def send(self, data: bytes) -> int:
        if not select.select([], [self.fd], [], self._timeout)[1]:
            raise TimeoutError("the pty takes nothing")
        try:
            return os.write(self.fd, data)
        except BlockingIOError:
            return 0

    def sendall(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            select.select([], [self.fd], [])
            try:
                view = view[os.write(self.fd, view) :]
            except BlockingIOError:
                continue


@dataclass
class SimDevice:
    """One simulated device; :meth:`start` runs it in a thread, :meth:`close` ends it."""

    device_id: bytes
    key: SigningKey
    boot: int = 1
    board: str = "simulated"
    records_per_pack: int = 4
    pack_every_s: float = 0.0  # pause between packs (0: as fast as the host takes them)
    packs_to_make: int | None = None  # stop making packs after this many (None: endless)
    timestamp_base: int = 1_780_000_000_000  # record timestamps: base + capture seq …
    wall_timestamps: bool = False  # … or the wall clock in ms at capture (benchmarks)
    host_key: PublicKey | None = None  # the knowledge key it trusts (None: it takes none)
    max_facts: int = 8
    state_capacity: bool = True  # say max_facts in HELLO (False: the host learns by deferrals)
    max_frame: int = 1024
    retry_s: float = 0.2
    resend_s: float = 0.25
    # what happened, for the caller to check
    accepted: list[int] = field(default_factory=list)  # pack seqs, in order
    deferred: int = 0
    refused: list[tuple[int, int]] = field(default_factory=list)  # (pack seq, reason)
    status_answers: int = 0
    knowledge: list[tuple[int, int]] = field(default_factory=list)  # (seq, status)
    sessions: int = 0
    stale_hello_acks: int = 0  # HELLO_ACKs ignored: they answer another HELLO (SPEC §6.5)
    stall_writes: int = 0
    on_pty: bool = False

    def __post_init__(self) -> None:
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._pty: tuple[int, int] | None = None
        if self.on_pty:
            master, slave = os.openpty()  # the slave stays open: the line never hangs up
            tty.setraw(master)
            tty.setraw(slave)
            fcntl.fcntl(master, fcntl.F_SETFL, fcntl.fcntl(master, fcntl.F_GETFL) | os.O_NONBLOCK)
            self._pty = (master, slave)
            self._pty_path = os.ttyname(slave)
        else:
            self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._server.bind(("127.0.0.1", 0))
            self._server.listen(1)
        self._stop = threading.Event()
        self._drop = threading.Event()
        self._stalled = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"sim {self.device_id.hex()}")
        self._made = 0  # packs made so far
        self._head: tuple[int, bytes] | None = None  # last accepted (seq, hash)
        self._unanswered: Pack | None = None  # made, offered, not yet accepted
        self._offer_seq = 0  # the seq its PACK_OFFER was sent with
        self._offer_at = 0.0
        self._capture = 0
        self._knowledge_seq = 0
        self.error: BaseException | None = None

    @property
    def url(self) -> str:
        if self._pty is not None:
            return self._pty_path
        return f"socket://127.0.0.1:{self._server.getsockname()[1]}"

    @property
    def done(self) -> bool:
        """Every pack it was to make is accepted."""
        return self.packs_to_make is not None and len(self.accepted) >= self.packs_to_make

    def start(self) -> SimDevice:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._server.close()
        if self._pty is not None:
            for fd in self._pty:
                os.close(fd)

    def drop_line(self) -> None:
        """Close the current line from the device's side (it listens again at once)."""
        self._drop.set()

    def stall(self) -> None:
        """Stop reading for good (once a session is open); keep writing bait."""
        self._stalled.set()

    # ---- the line ------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            if self._pty is not None:
                line = _PtyLine(self._pty[0])
                while not self._stop.is_set():
                    self._serve(line)
                return
            self._server.settimeout(0.1)
            while not self._stop.is_set():
                try:
                    conn, _ = self._server.accept()
                except TimeoutError:
                    continue
                try:
                    self._serve(conn)
                except (OSError, ConnectionError):
                    pass  # the host closed the line: listen again
                finally:
                    conn.close()
        except BaseException as exc:  # kept for the test to raise
            self.error = exc

    def _serve(self, conn: _Line) -> None:
        self._drop.clear()
        decoder = FrameDecoder(self.max_frame)
        self._expected = 1  # next host seq
        self._next_seq = 2  # HELLO is 1
        self._acked = 0
        self._out: deque[tuple[int, bytes]] = deque()  # (seq, frame) awaiting an ACK
        self._sent_at = 0.0
        self._hello_ack: HelloAck | None = None
        self._offered = False  # a pack offered on the last line is offered again
        facts = self.max_facts if self.state_capacity else 0
        hello = Hello(self.device_id, self.board, "sim-0.1", self.boot, ALL_CAPS, self.max_frame,
                      4096, 1, self.key.kid, self.host_key.kid if self.host_key else b"",
                      facts, 240 if facts else 0)  # fmt: skip
        self._hello_body = encode_message(hello, 1, 0)
        hello_frame = b"\x00" + encode_frame(self._hello_body, self.max_frame)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # a UART does not wait
        conn.setblocking(False)
        next_hello = 0.0
        while not self._stop.is_set() and not self._drop.is_set():
            now = time.monotonic()
            if self._stalled.is_set() and self._hello_ack is not None:
                self._stall(conn)
                return
            if self._hello_ack is None and now >= next_hello:
                conn.sendall(hello_frame)
                next_hello = now + 0.25
            try:
                data = conn.recv(65536)
            except BlockingIOError:
                data = None
            if data == b"":
                return
            if data:
                for item in decoder.feed(data):
                    if isinstance(item, bytes):
                        self._on_body(conn, item)
            if self._hello_ack is not None:
                self._produce(now)
                self._send_head(conn, now)
            if not data:
                time.sleep(0.002)

    def _stall(self, conn: _Line) -> None:
        """Read nothing; write what draws answers, until told to stop or the host hangs up."""
        bait = encode_frame(encode_message(StatusRequest(), 1, 0), self.max_frame) * 16
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # no autotuning: fill soon
        conn.setblocking(True)
        conn.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn.send(bait)
                self.stall_writes += 1
            except TimeoutError:
                continue  # the host is not reading either: try again
            except OSError:
                return

    def _send(self, conn: _Line, message: Message, seq: int) -> None:
        body = encode_message(message, seq, self._expected - 1)
        conn.sendall(
            b"".join(encode_frame(p, self.max_frame) for p in pieces.split(body, self.max_frame))
        )

    def _queue(self, message: Message) -> int:
        seq = self._next_seq
        self._next_seq += 1
        self._out.append((seq, encode_message(message, seq, 0)))
        return seq

    def _send_head(self, conn: _Line, now: float) -> None:
        while self._out and self._out[0][0] <= self._acked:
            self._out.popleft()
        if not self._out:
            return
        seq, _ = self._out[0]
        if now - self._sent_at >= self.resend_s or self._sent_seq != seq:
            message = decode_message(self._out[0][1]).message
            self._send(conn, message, seq)  # with the current ack
            self._sent_at, self._sent_seq = now, seq

    _sent_seq = 0

    def _on_body(self, conn: _Line, body: bytes) -> None:
        try:
            env = decode_message(body)
        except HirmemError:
            return
        message = env.message
        if isinstance(message, HelloAck):
            if message.hello_hash != hello_echo(self._hello_body):
                self.stale_hello_acks += 1  # it answers another HELLO: ignored, counted
                return
            if self._hello_ack is None:
                self._hello_ack = message
                self.sessions += 1
                self._expected = 2
                if self._head is None and message.pack_seq:
                    self._head = (message.pack_seq, message.pack_hash)
                self._queue(self._proof(message))  # seq 2: the session's first message
                return
            self._send(conn, Ack(), 0)
            return
        if self._hello_ack is None:
            return
        self._acked = max(self._acked, env.ack)
        if env.seq == 0:
            return
        if env.seq == self._expected:
            self._expected += 1
            self._deliver(message, env.ack)
        self._send(conn, Ack(), 0)

    def _proof(self, ack: HelloAck) -> Proof:
        """PROOF for this session (SPEC §6.5): the device key over the host's challenge."""
        signature = sign_proof(self.key, ack.host_id, ack.challenge, self.device_id, self.boot,
                               self._hello_body)  # fmt: skip
        return Proof(signature)

    def _deliver(self, message: Message, ack: int) -> None:
        if isinstance(message, PackResult):
            self._on_result(message, ack)
        elif isinstance(message, StatusRequest):
            self.status_answers += 1
            self._queue(
                Status(int(time.monotonic() * 1000) & 0xFFFFFFFF, 0, 64, self._capture, 0, 0,
                       0, 0, self._made, len(self.accepted), 0, 0, 0, self._knowledge_seq)
            )  # fmt: skip
        elif isinstance(message, KnowledgePush):
            self._queue(self._on_knowledge(message.pack))

    def _on_knowledge(self, raw: bytes) -> KnowledgeResult:
        assert self._hello_ack is not None
        keys = {}
        if self.host_key is not None:
            keys[self.host_key.kid] = TrustedKey(
                self.host_key, self._hello_ack.host_id, PackKind.KNOWLEDGE
            )
        try:
            pack = verify_pack(raw, keys, None, PackKind.KNOWLEDGE, require_chain=False).pack
        except PackError as exc:
            try:
                pack_id = read_unverified(raw, PackKind.KNOWLEDGE).pack_id
            except PackError:
                pack_id = bytes(16)
            return KnowledgeResult(pack_id, int(PackStatus.REFUSED), int(exc.reason),
                                   self._knowledge_seq)  # fmt: skip
        if len(pack.items) > self.max_facts:
            status, reason = PackStatus.DEFERRED, Reason.STORAGE
        elif pack.seq <= self._knowledge_seq:
            status, reason = PackStatus.DUPLICATE, Reason.NONE
        else:
            status, reason = PackStatus.ACCEPTED, Reason.NONE
            self._knowledge_seq = pack.seq
        self.knowledge.append((pack.seq, int(status)))
        return KnowledgeResult(pack.pack_id, int(status), int(reason), self._knowledge_seq)

    def _on_result(self, result: PackResult, ack: int) -> None:
        pack = self._unanswered
        if pack is None or ack - result.back != self._offer_seq:  # not the offer in flight
            return
        status = PackStatus(result.status)
        if status in (PackStatus.ACCEPTED, PackStatus.DUPLICATE):
            self.accepted.append(pack.seq)
            self._head = (pack.seq, pack.hash)
            self._unanswered = None
            self._offer_at = time.monotonic() + self.pack_every_s
        elif status == PackStatus.DEFERRED:
            self.deferred += 1
            self._offer_at = time.monotonic() + self.retry_s
            self._offered = False
        else:
            self.refused.append((pack.seq, result.reason))
            self._unanswered = None  # a refused pack is not offered again

    _offered = False

    def _produce(self, now: float) -> None:
        """Make the next pack when the last one is answered; (re)offer it when due."""
        if self._out or now < self._offer_at:
            return
        if self._unanswered is None:
            if self.packs_to_make is not None and self._made >= self.packs_to_make:
                return
            self._unanswered = self._make_pack()
            self._offered = False
        if not self._offered:
            self._offer_seq = self._queue(PackOffer(self._unanswered.encoded))
            self._offered = True

    def _make_pack(self) -> Pack:
        self._made += 1
        prev_seq, prev = self._head if self._head is not None else (0, GENESIS)
        seq = max(prev_seq + 1, (self.boot << 32) | self._made)
        records = []
        link = prev
        for _ in range(self.records_per_pack):
            self._capture += 1
            rec = Record.capture(
                record_id(self.device_id, self.boot, self._capture), b'{"c":21.5}',
                "sensor/temp0",
                time.time_ns() // 1_000_000 if self.wall_timestamps
                else self.timestamp_base + self._capture,
                bytes(32), 0x0FFF,
                0x10000, 0xE666, 0x8000, link,
            )  # fmt: skip
            records.append(rec)
            link = rec.hash
        return sign_pack(self.key, PackKind.MEMORY, self.device_id, seq, prev, 0, records)
