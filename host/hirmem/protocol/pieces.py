"""Frame pieces: one message body carried by several frames (SPEC.md §6.8).

A body too long for one frame is cut below the session: the message keeps its own
envelope, seq and ack (one seq however many frames), and the stream ``body ||
CRC-32(body)`` (4 bytes little-endian, the *body check*) is carried in pieces, one per
frame, each behind a one-byte head that no message body starts with (a message is a
CBOR array, first byte 0x84..0x97):

- first piece: ``f0``, then the first bytes of the stream;
- continuation k (k = 1, 2, ...): ``e0 | last << 3 | (k mod 8)``, then the next bytes;
  ``last`` is set on the piece that ends the stream.

Every piece is still a whole frame with its own CRC-32; the body check binds the
pieces together, so no loss, repeat or mix of pieces on a bad line can join into a
wrong body. The sender fills every frame but the last. The receiver joins one body at
a time, at most ``limit`` bytes of body (its announced max_message), and counts every
frame it drops by kind:

- ``too_large``: the body passes the limit (answered by the caller with ERROR
  too-large, the only refusal a retransmission cannot cure);
- ``orphan``: a continuation with no body in progress;
- ``gap``: a continuation whose number is not the next one (a lost frame);
- ``empty``: a piece without bytes;
- ``bad_head``: a head byte f1..ff;
- ``bad_check``: the joined body does not match its body check (or the stream is
  shorter than the check);
- ``restart``: a first piece while a body was in progress (the partial is dropped and
  the new body starts: the normal outcome of a go-back-N retransmission after a lost
  piece, counted all the same);
- ``duplicate``: a continuation with the previous one's number (a line that repeated a
  frame): ignored, the body goes on.
"""

from __future__ import annotations

from typing import NoReturn

from hirmem.protocol.errors import MessageError
from hirmem.protocol.frames import CRC_SIZE, crc32
from hirmem.protocol.messages import ErrorCode

FIRST = 0xF0
CONTINUATION = 0xE0
LAST = 0x08
CHECK_SIZE = 4  # CRC-32 of the whole body, after it
KINDS = (
    "too_large", "orphan", "gap", "empty", "bad_head", "bad_check", "restart", "duplicate",
)  # fmt: skip


def is_piece(body: bytes) -> bool:
    """Whether a frame body is a piece (first byte e0..ff) rather than a message."""
    return bool(body) and body[0] >= CONTINUATION


def body_seq(body: bytes) -> int:
    """The seq in the envelope at the start of a body, read from its first bytes alone
    (the body may be incomplete), which names it in the ERROR too-large that refuses
    it: at least 8 bytes, an array head 84..97, version 01, a type 01..17 and the seq's
    head (00..17 itself; 18, 19 or 1a followed by 1, 2 or 4 bytes big-endian). 0
    otherwise."""
    if len(body) < 8 or not 0x84 <= body[0] <= 0x97 or body[1] != 1:
        return 0
    if not 1 <= body[2] <= 23 or body[3] > 26:
        return 0
    if body[3] < 24:
        return body[3]
    return int.from_bytes(body[4 : 4 + (1 << (body[3] - 24))], "big")


def split(body: bytes, max_frame: int) -> list[bytes]:
    """The frame bodies that carry ``body`` at ``max_frame``: itself if it fits one frame."""
    room = max_frame - CRC_SIZE
    if len(body) <= room:
        return [body]
    if room < 2:
        raise ValueError(f"max_frame {max_frame} leaves no room for a piece")
    stream = body + crc32(body).to_bytes(CHECK_SIZE, "little")
    step = room - 1
    out = [bytes([FIRST]) + stream[:step]]
    for k, at in enumerate(range(step, len(stream), step), start=1):
        last = LAST if at + step >= len(stream) else 0
        out.append(bytes([CONTINUATION | last | (k & 0x07)]) + stream[at : at + step])
    return out


class Joiner:
    """Joins the pieces of one body at a time, at most ``limit`` bytes of body."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.refused: dict[str, int] = dict.fromkeys(KINDS, 0)
        self.joined = 0
        self._stream = bytearray()
        self._next = 0  # number of the next continuation; 0 when idle
        self.seq = 0  # body_seq of the last first piece: names a refused body

    @property
    def busy(self) -> bool:
        return self._next != 0

    def reset(self) -> None:
        self._stream, self._next = bytearray(), 0

    def _refuse(self, kind: str, detail: str, code: ErrorCode = ErrorCode.REASSEMBLY) -> NoReturn:
        self.refused[kind] += 1
        self.reset()
        raise MessageError(code, f"{kind}: {detail}")

    def take(self, piece: bytes) -> bytes | None:
        """Feed one frame body. A message body passes through; a piece returns the
        joined body once complete, else None. Refusals raise MessageError (code
        TOO_LARGE for too_large, REASSEMBLY otherwise) after counting them; :attr:`seq`
        names the body a too_large refused."""
        if not is_piece(piece):
            return piece
        head, chunk = piece[0], piece[1:]
        if head > FIRST:
            self._refuse("bad_head", f"head byte {head:#04x}")
        if head == FIRST:
            if self.busy:
                self.refused["restart"] += 1
                self.reset()
            self.seq = body_seq(chunk)
            if not chunk:
                self._refuse("empty", "first piece without bytes")
            number = 0
        else:
            number = head & 0x07
            if not self.busy:
                self._refuse("orphan", f"continuation {number} with no body in progress")
            if self._next >= 2 and number == (self._next - 1) & 0x07:
                self.refused["duplicate"] += 1
                return None
            if number != self._next & 0x07:
                self._refuse("gap", f"continuation {number}, expected {self._next & 0x07}")
            if not chunk:
                self._refuse("empty", f"continuation {number} without bytes")
        if len(self._stream) + len(chunk) > self.limit + CHECK_SIZE:
            self._refuse("too_large", f"body above the limit {self.limit}", ErrorCode.TOO_LARGE)
        self._stream += chunk
        self._next += 1
        if head == FIRST or not head & LAST:
            return None
        body, check = bytes(self._stream[:-CHECK_SIZE]), self._stream[-CHECK_SIZE:]
        if crc32(body).to_bytes(CHECK_SIZE, "little") != check:
            self._refuse("bad_check", f"the {len(body)} bytes joined do not match their check")
        self.joined += 1
        self.reset()
        return body
