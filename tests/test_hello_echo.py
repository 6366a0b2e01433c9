"""HELLO_ACK names the HELLO it answers (SPEC §5.3 field 12, §6.5 device step 3).

The devices written with the host codec (SimDevice, RogueDevice) against a minimal host
on the socket: a HELLO_ACK whose echo is another HELLO's (the previous boot's, late on
the line) opens nothing and is counted; the HELLO_ACK of the current HELLO opens the
session. The C agent has the same test natively (test_native_agent.py) and on every
QEMU board (test_board_qemu.py); the host side's echo is checked in
test_session_timers.py and by the vectors.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import replace

from conftest import DEVICE_ID, DEVICE_KEY, HOST_ID
from hirmem.emulation.rogue import RogueDevice
from hirmem.emulation.simdevice import SimDevice
from hirmem.protocol.frames import FrameDecoder, encode_frame
from hirmem.protocol.messages import (
    Envelope,
    Hello,
    HelloAck,
    Proof,
    decode_message,
    encode_message,
)
from hirmem.protocol.proof import hello_echo, verify_proof
from hirmem.protocol.records import GENESIS

T0 = 1_780_000_000_000
CHALLENGE = bytes(range(0x60, 0x70))


class MiniHost:
    """The host end of one TCP line to a device: reads frames, writes HELLO_ACKs."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.settimeout(0.05)
        self.decoder = FrameDecoder(4096)
        self.got: list[tuple[bytes, Envelope]] = []

    def close(self) -> None:
        self.sock.close()

    def pump_until(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        while not done():
            if time.monotonic() > end:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}")
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            for item in self.decoder.feed(data):
                if isinstance(item, bytes):
                    self.got.append((bytes(item), decode_message(item)))

    def hellos(self) -> list[bytes]:
        return [body for body, env in self.got if isinstance(env.message, Hello)]

    def proofs(self) -> list[Proof]:
        return [env.message for _, env in self.got if isinstance(env.message, Proof)]

    def send(self, ack: HelloAck) -> None:
        self.sock.sendall(encode_frame(encode_message(ack, 1, 1), 128))


def answers(hello_body: bytes, echo: bytes | None = None) -> HelloAck:
    hello = decode_message(hello_body).message
    assert isinstance(hello, Hello)
    echo = hello_echo(hello_body) if echo is None else echo
    return HelloAck(HOST_ID, 128, 4096, 1, T0, 0, GENESIS, CHALLENGE, echo)


def previous_boot(hello_body: bytes) -> bytes:
    """The echo of the HELLO this device sent in its previous boot."""
    hello = decode_message(hello_body).message
    assert isinstance(hello, Hello)
    return hello_echo(encode_message(replace(hello, boot=hello.boot - 1), 1, 0))


def test_simdevice_ignores_and_counts_a_hello_ack_of_another_hello() -> None:
    device = SimDevice(DEVICE_ID, DEVICE_KEY, boot=5, max_frame=128, packs_to_make=0).start()
    port = int(device.url.rsplit(":", 1)[1])
    host = MiniHost(socket.create_connection(("127.0.0.1", port), timeout=5))
    try:
        host.pump_until(lambda: len(host.hellos()) >= 1, 5, "HELLO")
        body = host.hellos()[0]
        stale = answers(body, previous_boot(body))
        host.send(stale)
        host.send(replace(stale, hello_hash=bytes(16)))  # foreign as well
        seen = len(host.hellos())
        host.pump_until(lambda: len(host.hellos()) >= seen + 2, 5, "HELLO, still")
        assert host.proofs() == [] and device.sessions == 0
        assert device.stale_hello_acks == 2
        host.send(answers(body))  # the HELLO_ACK of this HELLO: the session opens
        host.pump_until(lambda: len(host.proofs()) == 1, 5, "the PROOF")
        [proof] = host.proofs()
        assert verify_proof(DEVICE_KEY.public, proof.signature, HOST_ID, CHALLENGE, DEVICE_ID,
                            5, body)  # fmt: skip
        assert device.sessions == 1 and device.stale_hello_acks == 2
    finally:
        host.close()
        device.close()
    assert device.error is None


def test_rogue_device_takes_only_the_hello_ack_of_its_hello() -> None:
    """The scripted device the host's refusal tests use follows the same rule."""
    rogue = RogueDevice(DEVICE_ID, DEVICE_KEY, boot=4)
    try:
        host = MiniHost(socket.create_connection(rogue.sock.getsockname(), timeout=5))
        rogue.conn, _ = rogue.sock.accept()
        # one read at a time (what RogueDevice.connect loops over), to look in between
        host.send(answers(rogue.hello_body, previous_boot(rogue.hello_body)))
        rogue._pump(1.0)
        assert rogue.hello_ack is None and rogue.stale_hello_acks == 1
        host.send(answers(rogue.hello_body))
        rogue._pump(1.0)
        assert rogue.hello_ack is not None and rogue.stale_hello_acks == 1
        host.pump_until(lambda: len(host.proofs()) == 1, 5, "the PROOF")
        host.close()
    finally:
        rogue.close()
