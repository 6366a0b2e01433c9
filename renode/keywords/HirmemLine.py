"""Robot Framework keywords: the host end of a hirmem board's UART, over a socket.

Whatever runs the board (QEMU through HirmemQemu.py, Renode through
renode.resource), its UART is a raw TCP socket (`socket://127.0.0.1:PORT`). These
keywords play the host with the real host codec (hirmem.protocol.frames, hirmem.protocol.messages):
every byte read is decoded, sequenced messages are delivered in order and
acknowledged (the device retransmits after 250 ms otherwise), and the expected
results come from independent oracles: hirmem.protocol.gate.evaluate for verdicts, the
provisioned settings for the HELLO.

Images are provisioned with test keys (hirmem.protocol.keys.derive_test_key: public labels,
for tests only).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import serial

from hirmem.emulation.provision import HostTrust, SlotSettings, provision_image
from hirmem.protocol.errors import FrameError
from hirmem.protocol.frames import FrameDecoder, encode_frame
from hirmem.protocol.gate import Verdict, evaluate
from hirmem.protocol.keys import derive_test_key
from hirmem.protocol.messages import (
    Ack,
    Capability,
    Capture,
    CaptureResult,
    Error,
    Hello,
    HelloAck,
    Log,
    Message,
    Status,
    StatusRequest,
    decode_message,
    encode_message,
)
from hirmem.protocol.proof import hello_echo
from hirmem.protocol.records import normalise, record_id

ROOT = Path(__file__).resolve().parents[2]
DEVICE_ID = bytes.fromhex("524f424f54000001")  # "ROBOT\0\0\1"
HOST_ID = bytes.fromhex("c1c2c3c4c5c6c7c8")
BOOT = 5
T0 = 1_780_000_000_000
CONTEXT = hashlib.sha256(b"robot").digest()
FIRMWARE = "0.1.0"
# what each board offers in HELLO: max_frame, max_message (BOARD_CFG_* in firmware/boards.mk)
OFFER = {"mps2-an385": (512, 4096), "hifive1": (256, 1024), "stm32f4": (512, 4096)}
# knowledge facts and text bytes each board keeps (HM_KNOWLEDGE_CAPACITY, _TEXT;
# firmware/boards.mk builds the 16 KB hifive1 with 4 facts), stated in its HELLO
KEEPS = {"mps2-an385": (8, 32), "hifive1": (4, 32), "stm32f4": (8, 32)}
ALL_CAPABILITIES = sum(int(c) for c in Capability)  # firmware/app: HM_CAP_ALL


def _int(value: str | int) -> int:
    return value if isinstance(value, int) else int(str(value), 0)


class HirmemLine:
    """The host side of one board's line; one per suite."""

    ROBOT_LIBRARY_SCOPE = "SUITE"

    def __init__(self) -> None:
        self.port: Any = None
        self.board = ""
        self._reset_session()
        self.settings = SlotSettings(
            DEVICE_ID,
            derive_test_key("device " + DEVICE_ID.hex()),
            HostTrust(derive_test_key("host " + HOST_ID.hex()).public, HOST_ID),
            boot_base=BOOT,
        )

    def _reset_session(self) -> None:
        self.decoder = FrameDecoder(512)
        self.hello: Hello | None = None
        self.delivered: list[Message] = []
        self.unsequenced: list[Message] = []
        self.frame_errors: list[FrameError] = []
        self.next_seq = 1
        self.expected = 1
        self.last_ack = 0
        self.max_frame = 128
        self.owed = False
        self.sent_captures: list[tuple[int, Capture]] = []
        self.captures = 0
        self.wire = bytearray()  # every byte received, for Expect Bytes On Line

    # ---- images ----------------------------------------------------------------

    def provision_board_image(self, board: str, out_dir: str = "") -> str:
        """Provision build/boards/<board>/hirmem.elf (make -C firmware boards) with the
        test keys; returns the provisioned ELF's path."""
        image = ROOT / "build" / "boards" / board / "hirmem.elf"
        if not image.is_file():
            raise AssertionError(f"{image}: no image; run make -C firmware boards")
        out = Path(out_dir or os.environ.get("TMPDIR", "/tmp")) / f"robot-{board}.elf"
        provision_image(image, self.settings, out)
        return str(out)

    def expected_hello_frame(self, board: str) -> str:
        """The HELLO frame the provisioned board sends, as spaced hex (for Renode's
        Wait For Bytes On Uart): deterministic CBOR, so it is known byte for byte."""
        max_frame, max_message = OFFER[board]
        hello = Hello(
            DEVICE_ID, board, FIRMWARE, BOOT, ALL_CAPABILITIES, max_frame, max_message, 4,
            self.settings.device_key.kid, derive_test_key("host " + HOST_ID.hex()).kid,
            *KEEPS[board],
        )  # fmt: skip
        return encode_frame(encode_message(hello, 1, 0), 128).hex(" ")

    # ---- the line ----------------------------------------------------------------

    def connect_line(self, url: str, board: str) -> None:
        """Open the UART socket (socket://127.0.0.1:PORT) of a board of boards/."""
        if board not in OFFER:
            raise AssertionError(f"unknown board {board!r}; known: {', '.join(OFFER)}")
        self._reset_session()
        self.board = board
        self.port = serial.serial_for_url(url, timeout=0.02)

    def close_line(self) -> None:
        if self.port is not None:
            self.port.close()
            self.port = None

    def _feed(self, data: bytes) -> None:
        for item in self.decoder.feed(data):
            if isinstance(item, FrameError):
                self.frame_errors.append(item)
                continue
            env = decode_message(item)
            if not isinstance(env.message, Hello):
                self.last_ack = max(self.last_ack, env.ack)
            if isinstance(env.message, Ack | Error | Log) or env.seq == 0:
                self.unsequenced.append(env.message)
            elif isinstance(env.message, Hello):
                self.hello = env.message
            elif env.seq == self.expected:
                self.owed = True
                self.expected += 1
                self.delivered.append(env.message)
            else:
                self.owed = True

    def _pump(self) -> None:
        if self.port is None:
            raise AssertionError("the line is not connected (Boot Board first)")
        data = self.port.read(4096)
        if data:
            self.wire += data
            self._feed(data)
        if self.owed and self.hello is not None and self.next_seq > 1:
            self.owed = False
            self._write(encode_frame(encode_message(Ack(), 0, self.expected - 1), self.max_frame))

    def _wait(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        while not done():
            if time.monotonic() > end:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}")
            self._pump()

    def _write(self, wire: bytes) -> None:
        self.port.write(wire)
        self.port.flush()

    def _send(self, message: Message) -> int:
        self._wait(lambda: self.next_seq - 1 - self.last_ack < 4, 5, "room in the window")
        seq = self.next_seq
        self.next_seq += 1
        self._write(encode_frame(encode_message(message, seq, self.expected - 1), self.max_frame))
        return seq

    def _take(self, kind: type[Message], timeout: float) -> Any:
        self._wait(lambda: any(isinstance(m, kind) for m in self.delivered), timeout, kind.__name__)
        found = next(m for m in self.delivered if isinstance(m, kind))
        self.delivered.remove(found)
        return found

    # ---- project keywords ----------------------------------------------------------

    def expect_hello(self, timeout: float = 5) -> None:
        """The board's HELLO: its name, the provisioned identity and keys, its offer."""
        self._wait(lambda: self.hello is not None, float(timeout), "HELLO")
        h = self.hello
        assert h is not None
        got = (h.board, h.firmware, h.device_id, h.boot, h.capabilities, h.max_frame,
               h.max_message, h.window, h.knowledge_facts, h.knowledge_text)  # fmt: skip
        want = (self.board, FIRMWARE, DEVICE_ID, BOOT, ALL_CAPABILITIES, *OFFER[self.board], 4,
                *KEEPS[self.board])  # fmt: skip
        if got != want:
            raise AssertionError(f"HELLO {got} != {want}")
        kids = (h.device_kid, h.host_kid)
        if kids != (self.settings.device_key.kid, derive_test_key("host " + HOST_ID.hex()).kid):
            raise AssertionError(f"HELLO names other keys: {kids}")

    def handshake(self, timeout: float = 5) -> None:
        """HELLO_ACK for the device's HELLO; the device must prove its key (PROOF, seq 2,
        which acknowledges it)."""
        self._wait(lambda: self.hello is not None, float(timeout), "HELLO")
        assert self.hello is not None
        ack = HelloAck(
            HOST_ID, min(512, self.hello.max_frame), 65536, min(4, self.hello.window), T0, 0,
            bytes(32), bytes(16),
            hello_echo(encode_message(self.hello, 1, 0)),  # HELLO is deterministic CBOR
        )  # fmt: skip
        self.max_frame = ack.max_frame
        self._write(encode_frame(encode_message(ack, 1, 1), 128))
        self.next_seq = self.expected = 2
        self._wait(lambda: self.last_ack >= 1, float(timeout), "the acknowledgement of HELLO_ACK")

    def send_capture(
        self,
        source: str,
        payload: str,
        flags: str | int,
        quality: str | int,
        provenance: str | int,
    ) -> None:
        """A host-injected capture (Q16.16 quality and provenance)."""
        cap = Capture(
            source, payload.encode(), CONTEXT, _int(flags), _int(quality), _int(provenance), 0x8000
        )
        self.sent_captures.append((self._send(cap), cap))

    def expect_verdict(self, verdict: str, timeout: float = 5) -> None:
        """The result of the oldest unanswered capture: the gate's result as
        hirmem.protocol.gate.evaluate computes it, with the given verdict (GREEN, YELLOW, RED)."""
        got: CaptureResult = self._take(CaptureResult, float(timeout))
        ref, cap = self.sent_captures.pop(0)
        self.captures += 1
        g = evaluate(
            normalise(cap.flags, cap.payload, cap.source, T0, CONTEXT),
            cap.confidence,
            cap.provenance,
        )
        want = CaptureResult(
            ref, 0, record_id(DEVICE_ID, BOOT, self.captures), g.flags, g.h, g.i, g.r, g.f, g.c,
            g.rn, g.w, int(g.verdict), int(g.hard), int(g.disposition),
        )  # fmt: skip
        if got != want:
            raise AssertionError(f"capture result {got} != the gate's {want}")
        if Verdict(got.verdict).name != verdict.upper():
            raise AssertionError(f"verdict {Verdict(got.verdict).name}, expected {verdict}")

    def send_frame(self, hex_bytes: str) -> None:
        """Raw bytes on the line (hex), e.g. a corrupted frame or garbage."""
        self._write(bytes.fromhex(hex_bytes.replace(" ", "")))

    def corrupted_capture_frame(self) -> str:
        """A capture frame with one flipped payload byte (its CRC no longer matches), hex."""
        cap = Capture("x", b"1", CONTEXT, 0x0FFF, 0x10000, 0x10000, 0)
        wire = bytearray(encode_frame(encode_message(cap, self.next_seq, 0), self.max_frame))
        wire[len(wire) // 2] ^= 0x01 if wire[len(wire) // 2] not in (0, 1) else 0x02
        return bytes(wire).hex()

    def expect_status(self, timeout: float = 5, **fields: str) -> None:
        """Ask for STATUS; each given field must have the given value."""
        self._send(StatusRequest())
        status: Status = self._take(Status, float(timeout))
        for name, value in fields.items():
            got = getattr(status, name)
            if got != _int(value):
                raise AssertionError(f"status {name} = {got}, expected {value} ({status})")

    def expect_bytes_on_line(self, hex_bytes: str, timeout: float = 10) -> None:
        """These exact bytes (hex) arrive on the line: what Renode's Wait For Bytes On
        Uart checks, so the QEMU runs check the same expectation."""
        want = bytes.fromhex(hex_bytes.replace(" ", ""))
        self._wait(lambda: want in self.wire, float(timeout), f"the bytes {want.hex(' ')}")

    def expect_no_frame_errors(self) -> None:
        if self.frame_errors:
            raise AssertionError(f"the host saw bad frames: {self.frame_errors}")
