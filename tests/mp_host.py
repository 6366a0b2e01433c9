"""A small synchronous host session over a pty, for the MicroPython agent tests.

Modelled on the Host of tests/test_native_agent.py, but on a real byte stream: the
MicroPython agent runs in a `micropython` process on the slave side of os.openpty(),
this host reads and writes the master side with the host codec (hirmem.protocol.frames,
messages, pieces). It sequences, acknowledges and reassembles like a host and
keeps what arrived for the test to check.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import subprocess
import time
import tty
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codec_receiver import CHALLENGE, CodecReceiver
from hirmem.protocol import pieces
from hirmem.protocol.frames import encode_frame
from hirmem.protocol.messages import (
    Ack,
    Envelope,
    HelloAck,
    Message,
    encode_message,
)
from hirmem.protocol.records import GENESIS
from mp_run import MICROPYTHON, MP_DIR, mp_env

AGENT = MP_DIR / "checks" / "agent_unix.py"


class MpDevice:
    """The agent in micropython on one side of a pty.

    Default: the agent opens the slave path, the test reads and writes the master fd.
    ``on_master``: the agent gets the master fd (inherited), and ``port`` is the slave
    path for a host that opens the line itself (pyserial: hirmem.link.transport, the daemon);
    the test keeps the slave open so the line never hangs up between host opens.
    """

    def __init__(self, config: dict[str, Any], tmp: Path, *, on_master: bool = False) -> None:
        assert MICROPYTHON is not None
        self.master, self.slave = os.openpty()
        tty.setraw(self.master)
        self.port = os.ttyname(self.slave)
        self.on_master = on_master
        self.cfg = tmp / "agent.json"
        self.cfg.write_text(json.dumps(config))
        self.errors: list[str] = []
        self.proc = self._spawn()

    def _spawn(self) -> subprocess.Popen[bytes]:
        assert MICROPYTHON is not None
        where = str(self.master) if self.on_master else self.port
        return subprocess.Popen(
            [MICROPYTHON, str(AGENT), where, str(self.cfg)],
            env=mp_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=(self.master,) if self.on_master else (),
        )  # fmt: skip

    def restart(self, config: dict[str, Any] | None = None) -> None:
        """Kill the agent (a reset) and start it again on the same line."""
        self.errors.append(self._stop())
        if config is not None:
            self.cfg.write_text(json.dumps(config))
        self.proc = self._spawn()

    def _stop(self) -> str:
        self.proc.kill()
        _, err = self.proc.communicate(timeout=10)
        return err.decode(errors="replace")

    def write(self, data: bytes) -> None:
        os.write(self.master, data)

    def read(self, timeout: float) -> bytes:
        r, _, _ = select.select([self.master], [], [], timeout)
        if not r:
            return b""
        return os.read(self.master, 4096)

    def close(self) -> str:
        """Stop the agent and close the pty; the stderr of every run."""
        self.errors.append(self._stop())
        os.close(self.master)
        os.close(self.slave)
        return "".join(self.errors)


@dataclass
class MpHost(CodecReceiver):
    dev: MpDevice
    host_id: bytes
    max_frame: int = 512
    window: int = 4
    next_seq: int = 1
    deaf_ack: int | None = None  # set: every ack we send stays at this (see deafen)

    @property
    def log(self) -> list[tuple[float, bytes, Envelope]]:
        """Every good frame received, with its arrival time."""
        return self.frames

    def feed(self, data: bytes) -> None:
        self.owed = False
        self.receive(data)
        if self.owed and self.expected > 1 and self.deaf_ack is None:
            self.ack()

    def deafen(self) -> None:
        """Acknowledge nothing more (no ACK, piggybacked acks frozen): the device's timers run."""
        self.deaf_ack = self.expected - 1

    def hear(self) -> None:
        self.deaf_ack = None

    @property
    def ack_value(self) -> int:
        return self.expected - 1 if self.deaf_ack is None else self.deaf_ack

    def pump(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            data = self.dev.read(left)
            if data:
                self.feed(data)

    def wait(self, kind: type[Message], n: int = 1, timeout: float = 10.0) -> list[Message]:
        """The first n delivered messages of a type (removed from `delivered`)."""
        return [m for _, m in self.wait_seq(kind, n, timeout)]

    def wait_seq(
        self, kind: type[Message], n: int = 1, timeout: float = 10.0
    ) -> list[tuple[int, Message]]:
        """The first n delivered (seq, message) pairs of a type (removed from `delivered`)."""
        end = time.monotonic() + timeout
        while True:
            got = [(s, m) for s, m in self.delivered if isinstance(m, kind)]
            if len(got) >= n:
                taken = got[:n]
                self.delivered = [item for item in self.delivered if item not in taken]
                return taken
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {kind.__name__} within {timeout} s: {self.delivered}")
            data = self.dev.read(min(left, 0.2))
            if data:
                self.feed(data)

    def wire(self, message: Message, seq: int) -> bytes:
        return encode_frame(encode_message(message, seq, self.ack_value), self.max_frame)

    def send(self, message: Message) -> int:
        """Send a sequenced message (in frame pieces when it does not fit); its seq."""
        seq = self.next_seq
        body = encode_message(message, seq, self.ack_value)
        self.next_seq += 1
        for piece in pieces.split(body, self.max_frame):
            self.dev.write(encode_frame(piece, self.max_frame))
            self.pump(0.05)
        return seq

    def ack(self) -> None:
        self.dev.write(encode_frame(encode_message(Ack(), 0, self.ack_value), self.max_frame))

    def handshake(self, time_ms: int, pack_seq: int = 0, pack_hash: bytes = GENESIS) -> HelloAck:
        """Answer the next HELLO (one already received counts) with a HELLO_ACK."""
        end = time.monotonic() + 10
        while self.hello is None and time.monotonic() < end:
            self.feed(self.dev.read(0.2))
        assert self.hello is not None, "no HELLO from the agent"
        ack = HelloAck(
            self.host_id, min(self.max_frame, self.hello.max_frame), 65536,
            min(self.window, self.hello.window), time_ms, pack_seq, pack_hash, CHALLENGE,
            self.hello_echo,
        )  # fmt: skip
        self.max_frame, self.window = ack.max_frame, ack.window
        self.next_seq, self.expected = 2, 2
        self.joiner = pieces.Joiner(65536 + 64)
        self.dev.write(encode_frame(encode_message(ack, 1, 1), 128))
        return ack


# ---- the identities and defaults the MicroPython tests share -----------------------------

T0 = 1_780_000_000_000
ONE = 0x10000
DEVICE_ID = bytes.fromhex("0102030405060708")
HOST_ID = bytes.fromhex("a1a2a3a4a5a6a7a8")
DEVICE_SEED = hashlib.sha256(b"hirmem test key: device 0102030405060708").digest()
HOST_SEED = hashlib.sha256(b"hirmem test key: host a1a2a3a4a5a6a7a8").digest()
CONTEXT = hashlib.sha256(b"event frame").digest()
BOOT = 7


def device_config(**over: Any) -> dict[str, Any]:
    """agent_unix.py configuration: the test device trusting the test host key."""
    from hirmem.protocol.keys import SigningKey

    config: dict[str, Any] = {
        "device_id": DEVICE_ID.hex(), "seed": DEVICE_SEED.hex(),
        "host_public": SigningKey(HOST_SEED).public.raw.hex(), "host_id": HOST_ID.hex(),
        "board": "unix-pty", "boot": BOOT, "stop_after_ms": 90000,
    }  # fmt: skip
    config.update(over)
    return config


def until(host: MpHost, predicate: Callable[[], bool], timeout: float) -> float:
    """Read the line until predicate() holds; the monotonic time it did. Fails on timeout."""
    end = time.monotonic() + timeout
    while not predicate():
        left = end - time.monotonic()
        if left <= 0:
            raise AssertionError(f"condition not met within {timeout} s")
        data = host.dev.read(min(left, 0.05))
        if data:
            host.feed(data)
    return time.monotonic()
