"""A minimal synchronous host session over a board's UART socket (QEMU).

The socket twin of ``Host`` in tests/test_native_agent.py, kept small so the real
host session module can replace it: every byte read goes through the host codec
(FrameDecoder, decode_message, Reassembler); sequenced messages are delivered in
order and acknowledged promptly (the device retransmits after 250 ms otherwise);
unsequenced ones (LOG, ERROR, ACK) are kept apart.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import serial

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
    Log,
    Message,
    decode_message,
    encode_message,
)
from hirmem.provision import SlotSettings, provision_image
from hirmem.records import GENESIS

M = TypeVar("M", bound=Message)


@dataclass
class BoardHost:
    port: Any  # a pyserial port (serial_for_url)
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
    hello: Hello | None = None
    owed: bool = False
    wire_in: int = 0  # bytes received
    last_ack: int = 0  # highest ack the device sent
    disconnected: bool = False  # QEMU closed the socket (the board exited)

    @classmethod
    def connect(cls, url: str, host_id: bytes) -> BoardHost:
        return cls(serial.serial_for_url(url, timeout=0.02), host_id)

    def close(self) -> None:
        self.port.close()

    # ---- receiving ---------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        self.wire_in += len(data)
        for item in self.decoder.feed(data):
            if isinstance(item, FrameError):
                self.frame_errors.append(item)
                continue
            env = decode_message(item)
            if not isinstance(env.message, Hello):
                self.last_ack = max(self.last_ack, env.ack)
            if isinstance(env.message, Ack | Error | Log) or env.seq == 0:
                self.unsequenced.append(env)
            elif isinstance(env.message, Hello):
                self.hello = env.message
            elif env.seq == self.expected:
                self.owed = True
                self.expected += 1
                if isinstance(env.message, Fragment):
                    inner = self.reasm.add(env.message)
                    if inner is not None:
                        msg = decode_message(inner, inner=True).message
                        self.delivered.append((env.message.msg_id, msg))
                else:
                    self.delivered.append((env.seq, env.message))
            else:  # duplicate or out of order: re-acknowledge
                self.owed = True

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
        """Send a sequenced message (fragmented if needed) once the window has room
        (at most ``window`` of our seqs unacknowledged); returns its first seq."""
        self.wait_for(
            lambda: self.next_seq - 1 - self.last_ack < self.window, 5, "room in the window"
        )
        first = self.next_seq
        body = encode_message(message, self.next_seq, self.expected - 1)
        if len(body) + 4 <= self.max_frame:
            self.next_seq += 1
            self.write(encode_frame(body, self.max_frame))
            return first
        inner = encode_message(message, inner=True)
        for seq, frag in split(inner, self.max_frame, self.next_seq):
            self.next_seq = seq + 1
            self.write(encode_frame(encode_message(frag, seq, self.expected - 1), self.max_frame))
        return first

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
        )
        self.max_frame, self.window = ack.max_frame, ack.window
        self.next_seq, self.expected = 2, 2
        self.write(encode_frame(encode_message(ack, 1, 1), 128))
        # the device acknowledges the HELLO_ACK (ack 1) within its delayed-ack time
        self.wait_for(lambda: self.last_ack >= 1, timeout, "the acknowledgement of HELLO_ACK")
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
