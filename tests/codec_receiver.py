"""The receiving half of the tests' minimal synchronous hosts, on the host codec alone.

The native agent tests (``Host`` in test_native_agent.py), the QEMU board tests
(``BoardHost`` in board_host.py) and the MicroPython tests (``MpHost`` in mp_host.py)
each play a small host over their own line. What they do with received bytes is the
same and lives here: frames through :class:`FrameDecoder`, bodies through
:func:`decode_message`, sequenced messages delivered in order (bodies cut into
frame pieces joined first, SPEC §6.8), duplicates and messages from the future
re-acknowledged, unsequenced ones kept apart; a PROOF (the first message of a
session) is kept apart too, in ``proofs``, and :meth:`CodecReceiver.proof_verifies`
checks it against the HELLO it answered.
The real host session (hirmem.link.session) is not used on purpose: these tests
check the devices against an independent, minimal reading of SPEC §6.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from hirmem.protocol import pieces
from hirmem.protocol.errors import FrameError
from hirmem.protocol.frames import FrameDecoder
from hirmem.protocol.keys import PublicKey
from hirmem.protocol.messages import (
    Ack,
    Envelope,
    Error,
    Hello,
    Message,
    PackResult,
    Proof,
    decode_message,
)
from hirmem.protocol.proof import hello_echo, verify_proof

CHALLENGE = bytes(range(0x40, 0x50))  # the challenge these hosts' HELLO_ACKs carry


@dataclass(kw_only=True)
class CodecReceiver:
    decoder: FrameDecoder = field(default_factory=lambda: FrameDecoder(512))
    joiner: pieces.Joiner = field(default_factory=lambda: pieces.Joiner(65536 + 64))
    expected: int = 1  # next device seq to deliver
    delivered: list[tuple[int, Message]] = field(default_factory=list)  # (seq, message)
    unsequenced: list[Envelope] = field(default_factory=list)  # ACK, LOG, ERROR
    frame_errors: list[FrameError] = field(default_factory=list)
    frames: list[tuple[float, bytes, Envelope]] = field(default_factory=list)  # good frames
    hello: Hello | None = None
    hello_body: bytes = b""  # the last HELLO as received: what a PROOF covers
    hellos: int = 0
    proofs: list[tuple[int, Proof, bytes]] = field(default_factory=list)  # (seq, PROOF, HELLO)
    owed: bool = False  # a sequenced message arrived: an acknowledgement is owed
    duplicates: int = 0  # below expected
    out_of_order: int = 0  # above expected
    last_ack: int = 0  # highest ack the device sent (HELLO's excluded)
    wire_in: int = 0  # bytes received
    pieces_in: int = 0  # frames that were pieces of a longer body
    piece_bodies: list[bytes] = field(default_factory=list)  # the last 64 of them

    def receive(self, data: bytes) -> None:
        self.wire_in += len(data)
        for item in self.decoder.feed(data):
            if isinstance(item, FrameError):
                self.frame_errors.append(item)
                continue
            if pieces.is_piece(item):
                self.pieces_in += 1
                self.piece_bodies = [*self.piece_bodies[-63:], bytes(item)]
                joined = self.joiner.take(item)  # a refusal raises: the device broke §6.8
                if joined is None:
                    continue
                item = joined
            env = decode_message(item)
            self.frames.append((time.monotonic(), bytes(item), env))
            if not isinstance(env.message, Hello):
                self.last_ack = max(self.last_ack, env.ack)
            if isinstance(env.message, Ack | Error) or env.seq == 0:
                self.unsequenced.append(env)
            elif isinstance(env.message, Hello):
                self.hello = env.message
                self.hello_body = bytes(item)
                self.hellos += 1
            elif env.seq == self.expected:
                self.owed = True
                self.expected += 1
                if isinstance(env.message, Proof):
                    self.proofs.append((env.seq, env.message, self.hello_body))
                else:
                    self.delivered.append((env.seq, env.message))
            else:  # a duplicate or one from the future: re-acknowledge
                self.owed = True
                if env.seq < self.expected:
                    self.duplicates += 1
                else:
                    self.out_of_order += 1

    def proof_verifies(
        self, public_key: PublicKey, host_id: bytes, challenge: bytes = CHALLENGE
    ) -> bool:
        """The last PROOF arrived as seq 2 and signs ``challenge`` with ``public_key`` for
        the HELLO received before it (SPEC §6.5), checked with the host's verifier."""
        if not self.proofs or self.hello is None:
            return False
        seq, proof, hello_body = self.proofs[-1]
        hello = decode_message(hello_body).message
        assert isinstance(hello, Hello)
        return seq == 2 and verify_proof(
            public_key, proof.signature, host_id, challenge, hello.device_id, hello.boot,
            hello_body,
        )  # fmt: skip

    def pack_result(self, offer: int, status: int, reason: int) -> PackResult:
        """A PACK_RESULT for the offer of seq ``offer``, named relative to the ack this
        host sends now (SPEC §5.7)."""
        return PackResult(self.expected - 1 - offer, status, reason)

    @property
    def hello_echo(self) -> bytes:
        """What a HELLO_ACK answering the last HELLO carries as hello_hash (SPEC §5.3)."""
        return hello_echo(self.hello_body)

    @property
    def wire_bodies(self) -> list[bytes]:
        return [body for _, body, _ in self.frames]

    @property
    def acks_seen(self) -> list[int]:
        return [env.ack for _, _, env in self.frames]
