"""Frames: COBS-encoded, CRC-32 checked, each ended by one 0x00 byte.

On the wire a frame is ``COBS(body || crc32(body) as 4 bytes little-endian) || 0x00``
(CRC-32 is the IEEE/zlib polynomial, as :func:`binascii.crc32`). ``max_frame``
bounds the decoded size (body plus CRC), the buffer a receiver must hold:
512 bytes by default, 128 at the floor.

:class:`FrameDecoder` takes arbitrary chunks of a byte stream and resynchronises
on the next 0x00 after any damage; every damaged frame comes back as a
:class:`~hirmem.protocol.errors.FrameError` in the output (in stream order) and is
counted, so nothing is dropped silently.
"""

from __future__ import annotations

import binascii
from dataclasses import dataclass, field

from hirmem.protocol.errors import FrameError

DEFAULT_MAX_FRAME = 512
MIN_MAX_FRAME = 128
CRC_SIZE = 4
MIN_FRAME = CRC_SIZE + 1  # a frame carries at least one body byte

# FrameError kinds
TOO_SHORT = "too-short"
TOO_LONG = "too-long"
BAD_COBS = "bad-cobs"
BAD_CRC = "bad-crc"


def crc32(data: bytes) -> int:
    return binascii.crc32(data) & 0xFFFFFFFF


def cobs_encode(data: bytes) -> bytes:
    """Consistent Overhead Byte Stuffing: the output contains no 0x00 byte."""
    out = bytearray()
    blocks = data.split(b"\x00")
    last = len(blocks) - 1
    for index, block in enumerate(blocks):
        # a zero-free run of 254 bytes or more is cut into 0xFF-coded blocks
        full = False
        while len(block) >= 254:
            out.append(0xFF)
            out += block[:254]
            block = block[254:]
            full = True
        if full and not block and index == last:
            break  # data ends on a full block: no empty block after it (standard COBS)
        out.append(len(block) + 1)
        out += block
    return bytes(out)


def cobs_decode(data: bytes) -> bytes:
    """Invert :func:`cobs_encode`; raise FrameError(bad-cobs) on a malformed block."""
    out = bytearray()
    pos, end = 0, len(data)
    while pos < end:
        code = data[pos]
        if code == 0:
            raise FrameError(BAD_COBS, f"zero byte inside the frame at offset {pos}")
        stop = pos + code
        if stop > end:
            raise FrameError(
                BAD_COBS,
                f"block at offset {pos} claims {code - 1} bytes but only {end - pos - 1} remain",
            )
        block = data[pos + 1 : stop]
        if 0 in block:
            raise FrameError(BAD_COBS, f"zero byte inside the block at offset {pos}")
        out += block
        pos = stop
        if code != 0xFF and pos < end:
            out.append(0)
    return bytes(out)


def encode_frame(body: bytes, max_frame: int = DEFAULT_MAX_FRAME) -> bytes:
    """Frame one message body for the wire (including the 0x00 delimiter)."""
    size = len(body) + CRC_SIZE
    if not body:
        raise FrameError(TOO_SHORT, "a frame body cannot be empty")
    if size > max_frame:
        raise FrameError(
            TOO_LONG, f"body of {len(body)} bytes + CRC exceeds max_frame {max_frame}; fragment it"
        )
    raw = body + crc32(body).to_bytes(4, "little")
    return cobs_encode(raw) + b"\x00"


def max_wire_size(max_frame: int) -> int:
    """Longest encoded frame (with delimiter) for a decoded size of ``max_frame``."""
    return max_frame + (max_frame + 253) // 254 + 1


def decode_frame(wire: bytes, max_frame: int = DEFAULT_MAX_FRAME) -> bytes:
    """Decode one frame's COBS bytes (with or without the trailing 0x00) to its body."""
    wire = bytes(wire)
    if wire.endswith(b"\x00"):
        wire = wire[:-1]
    if len(wire) > max_wire_size(max_frame) - 1:
        raise FrameError(TOO_LONG, f"{len(wire)} encoded bytes exceed max_frame {max_frame}")
    raw = cobs_decode(wire)
    if len(raw) < MIN_FRAME:
        raise FrameError(TOO_SHORT, f"{len(raw)} decoded bytes; a frame needs at least {MIN_FRAME}")
    if len(raw) > max_frame:
        raise FrameError(TOO_LONG, f"{len(raw)} decoded bytes exceed max_frame {max_frame}")
    body, tail = raw[:-CRC_SIZE], raw[-CRC_SIZE:]
    got = int.from_bytes(tail, "little")
    want = crc32(body)
    if got != want:
        raise FrameError(BAD_CRC, f"CRC-32 expected 0x{want:08x}, frame carries 0x{got:08x}")
    return body


@dataclass
class FrameStats:
    frames: int = 0
    empty: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    bytes_in: int = 0

    @property
    def bad(self) -> int:
        return sum(self.errors.values())


class FrameDecoder:
    """Streaming decoder with a bounded buffer; resynchronises on 0x00.

    ``feed`` returns, in stream order, the good bodies (``bytes``) and the damaged
    frames (:class:`FrameError` values, not raised). A frame that outgrows the
    buffer is discarded up to the next delimiter and reported once as too-long.
    Empty frames (0x00 0x00) are a legal way to flush a receiver and are only
    counted.
    """

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        if max_frame < MIN_MAX_FRAME:
            raise ValueError(f"max_frame {max_frame} is below the floor {MIN_MAX_FRAME}")
        self.max_frame = max_frame
        self._limit = max_wire_size(max_frame) - 1
        self._buf = bytearray()
        self._overflow = False
        self.stats = FrameStats()

    def feed(self, chunk: bytes) -> list[bytes | FrameError]:
        out: list[bytes | FrameError] = []
        self.stats.bytes_in += len(chunk)
        start = 0
        while True:
            zero = chunk.find(b"\x00", start)
            piece = chunk[start:] if zero < 0 else chunk[start:zero]
            if not self._overflow:
                if len(self._buf) + len(piece) > self._limit:
                    self._overflow = True
                    self._buf.clear()
                else:
                    self._buf += piece
            if zero < 0:
                return out
            result = self._finish()
            if result is not None:
                out.append(result)
            start = zero + 1

    def _finish(self) -> bytes | FrameError | None:
        if self._overflow:
            self._overflow = False
            err = FrameError(TOO_LONG, f"frame longer than max_frame {self.max_frame}; skipped")
            self._count(err)
            return err
        if not self._buf:
            self.stats.empty += 1
            return None
        wire = bytes(self._buf)
        self._buf.clear()
        try:
            body = decode_frame(wire, self.max_frame)
        except FrameError as err:
            self._count(err)
            return err
        self.stats.frames += 1
        return body

    def _count(self, err: FrameError) -> None:
        self.stats.errors[err.kind] = self.stats.errors.get(err.kind, 0) + 1
