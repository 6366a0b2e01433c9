"""A small synchronous host session over a pty, for the MicroPython agent tests.

Modelled on the Host of tests/test_native_agent.py, but on a real byte stream: the
MicroPython agent runs in a `micropython` process on the slave side of os.openpty(),
this host reads and writes the master side with the host codec (hirmem.frames,
messages, fragments). It sequences, acknowledges and reassembles like a host and
keeps what arrived for the test to check.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
import tty
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hirmem.errors import FrameError
from hirmem.fragments import Reassembler, split
from hirmem.frames import FrameDecoder, encode_frame
from hirmem.messages import (
    Ack,
    Envelope,
    Error,
    Fragment,
    Hello,
    HelloAck,
    Message,
    decode_message,
    encode_message,
)
from hirmem.records import GENESIS
from mp_run import MICROPYTHON, MP_DIR, mp_env

AGENT = MP_DIR / "checks" / "agent_unix.py"


class MpDevice:
    """The agent in micropython on a pty slave; the master fd is ours."""

    def __init__(self, config: dict[str, Any], tmp: Path) -> None:
        assert MICROPYTHON is not None
        self.master, self.slave = os.openpty()
        tty.setraw(self.master)
        cfg = tmp / "agent.json"
        cfg.write_text(json.dumps(config))
        self.proc = subprocess.Popen(
            [MICROPYTHON, str(AGENT), os.ttyname(self.slave), str(cfg)],
            env=mp_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )

    def write(self, data: bytes) -> None:
        os.write(self.master, data)

    def read(self, timeout: float) -> bytes:
        r, _, _ = select.select([self.master], [], [], timeout)
        if not r:
            return b""
        return os.read(self.master, 4096)

    def close(self) -> str:
        self.proc.kill()
        _, err = self.proc.communicate(timeout=10)
        os.close(self.master)
        os.close(self.slave)
        return err.decode(errors="replace")


@dataclass
class MpHost:
    dev: MpDevice
    host_id: bytes
    max_frame: int = 512
    window: int = 4
    decoder: FrameDecoder = field(default_factory=lambda: FrameDecoder(512))
    reasm: Reassembler = field(default_factory=lambda: Reassembler(65536 + 64))
    next_seq: int = 1
    expected: int = 1
    delivered: list[tuple[int, Message]] = field(default_factory=list)
    unsequenced: list[Envelope] = field(default_factory=list)
    frame_errors: list[FrameError] = field(default_factory=list)
    duplicates: int = 0
    hello: Hello | None = None
    hellos: int = 0

    def feed(self, data: bytes) -> None:
        owed = False
        for item in self.decoder.feed(data):
            if isinstance(item, FrameError):
                self.frame_errors.append(item)
                continue
            env = decode_message(item)
            if isinstance(env.message, Ack | Error) or env.seq == 0:
                self.unsequenced.append(env)
            elif isinstance(env.message, Hello):
                self.hello = env.message
                self.hellos += 1
            elif env.seq == self.expected:
                owed = True
                self.expected += 1
                if isinstance(env.message, Fragment):
                    inner = self.reasm.add(env.message)
                    if inner is not None:
                        msg = decode_message(inner, inner=True).message
                        self.delivered.append((env.message.msg_id, msg))
                else:
                    self.delivered.append((env.seq, env.message))
            else:
                self.duplicates += 1
                owed = True
        if owed and self.expected > 1:
            self.ack()

    def pump(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            data = self.dev.read(left)
            if data:
                self.feed(data)

    def wait(self, kind: type[Message], n: int = 1, timeout: float = 10.0) -> list[Message]:
        """The first n delivered messages of a type (removed from `delivered`)."""
        end = time.monotonic() + timeout
        while True:
            got = [m for _, m in self.delivered if isinstance(m, kind)]
            if len(got) >= n:
                taken = got[:n]
                self.delivered = [(s, m) for s, m in self.delivered if m not in taken]
                return taken
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {kind.__name__} within {timeout} s: {self.delivered}")
            data = self.dev.read(min(left, 0.2))
            if data:
                self.feed(data)

    def wire(self, message: Message, seq: int) -> bytes:
        return encode_frame(encode_message(message, seq, self.expected - 1), self.max_frame)

    def send(self, message: Message) -> int:
        """Send a sequenced message (fragmented when it does not fit); its seq."""
        seq = self.next_seq
        body = encode_message(message, seq, self.expected - 1)
        if len(body) + 4 <= self.max_frame:
            self.next_seq += 1
            self.dev.write(encode_frame(body, self.max_frame))
            return seq
        inner = encode_message(message, inner=True)
        for fseq, frag in split(inner, self.max_frame, seq):
            self.next_seq = fseq + 1
            self.dev.write(
                encode_frame(encode_message(frag, fseq, self.expected - 1), self.max_frame)
            )
            self.pump(0.05)
        return seq

    def ack(self) -> None:
        self.dev.write(encode_frame(encode_message(Ack(), 0, self.expected - 1), self.max_frame))

    def handshake(self, time_ms: int, pack_seq: int = 0, pack_hash: bytes = GENESIS) -> HelloAck:
        end = time.monotonic() + 10
        while self.hello is None and time.monotonic() < end:
            self.feed(self.dev.read(0.2))
        assert self.hello is not None, "no HELLO from the agent"
        ack = HelloAck(
            self.host_id, min(self.max_frame, self.hello.max_frame), 65536,
            min(self.window, self.hello.window), time_ms, pack_seq, pack_hash,
        )  # fmt: skip
        self.max_frame, self.window = ack.max_frame, ack.window
        self.next_seq, self.expected = 2, 2
        self.dev.write(encode_frame(encode_message(ack, 1, 1), 128))
        return ack
