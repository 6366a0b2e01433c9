"""A scripted device on a TCP socket, for what real firmware never does on purpose.

It offers tampered packs, packs signed with an unknown key, replayed and rolled-back
ones: tests and the demo use it to show the host refusing them. It listens like
QEMU's UART socket (the daemon connects to ``socket://127.0.0.1:PORT``), sends HELLO,
answers the HELLO_ACK, then offers the packs it is given and collects the
PACK_RESULTs. Sequencing is the simplest correct one: one message in flight, resent
until acknowledged; every sequenced message from the host is acknowledged at once.
The device side is written with the host codec (an independent implementation of
the same contract as the firmware).
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field

from hirmem.protocol import pieces
from hirmem.protocol.errors import FrameError
from hirmem.protocol.frames import FrameDecoder, encode_frame
from hirmem.protocol.keys import SigningKey
from hirmem.protocol.messages import (
    Ack,
    Hello,
    HelloAck,
    Message,
    PackOffer,
    PackResult,
    Proof,
    decode_message,
    encode_message,
)
from hirmem.protocol.messages import Error as ErrorMsg
from hirmem.protocol.packs import Pack, PackKind, sign_pack
from hirmem.protocol.proof import hello_echo, sign_proof
from hirmem.protocol.records import GENESIS, Record, record_id

MAX_FRAME = 512


@dataclass
class RogueDevice:
    device_id: bytes
    key: SigningKey
    boot: int = 1
    board: str = "scripted"
    sock: socket.socket = field(init=False)
    conn: socket.socket | None = None
    max_frame: int = MAX_FRAME  # offered in HELLO; a pack must fit one frame
    decoder: FrameDecoder = field(init=False)
    next_seq: int = 3  # HELLO is 1, PROOF 2
    expected: int = 1  # next host seq
    acked: int = 0  # highest of our seqs the host acknowledged
    hello_ack: HelloAck | None = None
    results: list[PackResult] = field(default_factory=list)
    answered: list[int] = field(default_factory=list)  # the offer seq each result names
    # a PROOF to send instead of signing the challenge (a replay of an old session's)
    replay_proof: Proof | None = None
    proof: Proof = field(init=False)
    errors: list[ErrorMsg] = field(default_factory=list)
    stale_hello_acks: int = 0

    @property
    def hello_body(self) -> bytes:
        hello = Hello(self.device_id, self.board, "0.1.0", self.boot, 0x1F, self.max_frame,
                      4096, 1, self.key.kid, b"")  # fmt: skip
        return encode_message(hello, 1, 0)

    def __post_init__(self) -> None:
        self.decoder = FrameDecoder(self.max_frame)
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
        cut = pieces.split(body, self.max_frame)
        self.conn.sendall(b"".join(encode_frame(p, self.max_frame) for p in cut))

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
                if env.message.hello_hash != hello_echo(self.hello_body):
                    self.stale_hello_acks += 1  # it answers another HELLO (SPEC §6.5)
                    continue
                if self.hello_ack is None:  # prove the key: PROOF is seq 2 (SPEC §6.5)
                    self.proof = self._proof(env.message)
                    self.hello_ack = env.message
                    self.expected = 2
                self._send(self.proof, 2)
                continue
            if isinstance(env.message, ErrorMsg):
                self.errors.append(env.message)
            if self.hello_ack is None:
                continue
            self.acked = max(self.acked, env.ack)
            if env.seq == 0:
                continue
            if env.seq == self.expected:
                self.expected += 1
                if isinstance(env.message, PackResult):
                    self.results.append(env.message)
                    self.answered.append(env.ack - env.message.back)
            self._send(Ack(), 0)

    def _proof(self, ack: HelloAck) -> Proof:
        if self.replay_proof is not None:
            return self.replay_proof
        return Proof(sign_proof(self.key, ack.host_id, ack.challenge, self.device_id,
                                self.boot, self.hello_body))  # fmt: skip

    def connect(self, timeout: float = 10.0) -> HelloAck:
        """Wait for the host to connect, then handshake (HELLO, HELLO_ACK, PROOF)."""
        self.sock.settimeout(timeout)
        self.conn, _ = self.sock.accept()
        deadline = time.monotonic() + timeout
        while self.hello_ack is None or self.acked < 2:
            if time.monotonic() > deadline:
                raise TimeoutError("no HELLO_ACK" if self.hello_ack is None else "PROOF refused")
            if self.hello_ack is None:
                self.conn.sendall(b"\x00" + encode_frame(self.hello_body, 128))
            end = time.monotonic() + 0.25
            while (self.hello_ack is None or self.acked < 2) and time.monotonic() < end:
                self._pump(0.05)
        assert self.hello_ack is not None
        return self.hello_ack

    def offer(self, pack: bytes, timeout: float = 10.0) -> PackResult:
        """Offer one pack (one seq, in frame pieces if needed) and wait for its PACK_RESULT."""
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

    def pack(self, seq: int, prev: bytes, n: int = 1, *, first_capture: int = 1) -> Pack:
        """A well-formed pack of ``n`` readings, signed with this device's key."""
        records = []
        link = prev
        for k in range(first_capture, first_capture + n):
            rec = Record.capture(
                record_id(self.device_id, self.boot, k), b'{"c":21.5}', "sensor/temp0",
                1_780_000_000_000 + k, bytes(32), 0x0FFF, 0x10000, 0xE666, 0x8000, link,
            )  # fmt: skip
            records.append(rec)
            link = rec.hash
        return sign_pack(self.key, PackKind.MEMORY, self.device_id, seq, prev, 0, records)

    def run_in_background(self) -> threading.Thread:
        """Connect, offer one honest pack, then a tampered one and a rolled-back one."""

        def script() -> None:
            try:
                self.connect(timeout=30)
                honest = self.pack((self.boot << 32) | 5, GENESIS)
                self.offer(honest.encoded)
                tampered = bytearray(
                    self.pack((self.boot << 32) | 6, honest.hash, first_capture=2).encoded
                )
                tampered[-70] ^= 0x01  # a bit in the payload: the signature fails
                self.offer(bytes(tampered))
                self.offer(self.pack((self.boot << 32) | 3, GENESIS, first_capture=3).encoded)
            except (OSError, TimeoutError):
                pass  # the demo's summary shows what was refused; a lost line is not fatal

        thread = threading.Thread(target=script, name="rogue device", daemon=True)
        thread.start()
        return thread
