"""A scripted device on a TCP socket: the device side of the protocol, written with the host codec.

For what real firmware never does on purpose: offering a tampered pack, a pack signed
with an unknown key, a replayed or a rolled-back one. It listens like QEMU's UART
socket (the daemon connects to ``socket://127.0.0.1:PORT``), sends HELLO, answers the
HELLO_ACK, then offers whatever packs the test gives it and collects the
PACK_RESULTs. Sequencing is the simplest correct one: one message in flight, resent
until acknowledged; every sequenced message from the host is acknowledged at once.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field

from hirmem.errors import FrameError
from hirmem.frames import FrameDecoder, encode_frame
from hirmem.keys import SigningKey
from hirmem.messages import (
    Ack,
    Hello,
    HelloAck,
    Message,
    PackOffer,
    PackResult,
    decode_message,
    encode_message,
)

MAX_FRAME = 512


@dataclass
class ScriptedDevice:
    device_id: bytes
    key: SigningKey
    boot: int = 1
    board: str = "scripted"
    sock: socket.socket = field(init=False)
    conn: socket.socket | None = None
    decoder: FrameDecoder = field(default_factory=lambda: FrameDecoder(MAX_FRAME))
    next_seq: int = 2
    expected: int = 1  # next host seq
    acked: int = 0  # highest of our seqs the host acknowledged
    hello_ack: HelloAck | None = None
    results: list[PackResult] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)

    @property
    def url(self) -> str:
        return f"socket://127.0.0.1:{self.sock.getsockname()[1]}"

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.sock.close()

    def _send(self, message: Message, seq: int) -> None:
        assert self.conn is not None
        body = encode_message(message, seq, self.expected - 1)
        self.conn.sendall(encode_frame(body, MAX_FRAME))

    def _pump(self, timeout: float) -> None:
        assert self.conn is not None
        self.conn.settimeout(timeout)
        try:
            data = self.conn.recv(4096)
        except TimeoutError:
            return
        if not data:
            raise ConnectionError("the host closed the line")
        for item in self.decoder.feed(data):
            if isinstance(item, FrameError):
                continue
            env = decode_message(item)
            if isinstance(env.message, HelloAck):
                self.hello_ack = env.message
                self.expected = 2
                self._send(Ack(), 0)
                continue
            if self.hello_ack is None:
                continue
            self.acked = max(self.acked, env.ack)
            if env.seq == 0:
                continue
            if env.seq == self.expected:
                self.expected += 1
                if isinstance(env.message, PackResult):
                    self.results.append(env.message)
            self._send(Ack(), 0)

    def connect(self, timeout: float = 10.0) -> HelloAck:
        """Wait for the host to connect, then handshake."""
        self.sock.settimeout(timeout)
        self.conn, _ = self.sock.accept()
        hello = Hello(self.device_id, self.board, "0.1.0", self.boot, 0x1F, MAX_FRAME, 4096, 1,
                      self.key.kid, b"")  # fmt: skip
        deadline = time.monotonic() + timeout
        while self.hello_ack is None:
            if time.monotonic() > deadline:
                raise TimeoutError("no HELLO_ACK")
            self.conn.sendall(b"\x00" + encode_frame(encode_message(hello, 1, 0), 128))
            end = time.monotonic() + 0.25
            while self.hello_ack is None and time.monotonic() < end:
                self._pump(0.05)
        return self.hello_ack

    def offer(self, pack: bytes, timeout: float = 10.0) -> PackResult:
        """Offer one pack (whole, in one frame) and wait for its PACK_RESULT."""
        seq = self.next_seq
        self.next_seq += 1
        want = len(self.results) + 1
        deadline = time.monotonic() + timeout
        while len(self.results) < want:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no PACK_RESULT for seq {seq}")
            if self.acked < seq:
                self._send(PackOffer(pack), seq)
            end = time.monotonic() + 0.25
            while len(self.results) < want and time.monotonic() < end:
                self._pump(0.05)
        return self.results[-1]
