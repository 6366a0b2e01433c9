"""Frame pieces: one message body carried by several frames (the cheap fragmentation).

Proposed replacement of the FRAGMENT message of SPEC.md §6.8 (see §6.10 there, a
draft; the live link still uses ``fragments``). A body too long for one frame is cut
below the session: the message keeps its own seq and ack (one seq for the whole
message), and each frame carries one *piece* of it behind a short head that no
message body can start with (a message is a CBOR array, first byte 0x84..0x97):

- first piece: ``f0``, the body's total length as 3 bytes big-endian, then bytes;
- continuation k (k = 1, 2, ...): one byte ``e0 | (k mod 16)``, then bytes.

Every piece is still a whole frame with its own CRC-32. The sender fills every frame
but the last to max_frame. The receiver joins the pieces of one body at a time, at
most ``limit`` bytes (its announced max_message), and refuses, counted by kind:

- ``too_large``: a first piece announcing more than the limit (answered by the
  caller with ERROR too-large, the only refusal a retransmission cannot cure);
- ``orphan``: a continuation with no body in progress;
- ``gap``: a continuation whose number is not the next one (a lost or repeated frame);
- ``overrun``: a piece that would pass the announced total, or a first piece that
  already holds all of it (a body that fits one frame is never cut);
- ``empty``: a piece without bytes;
- ``bad_head``: a head byte f1..ff, or a first piece shorter than its head;
- ``restart``: a first piece while a body was in progress (the partial is dropped and
  the new body starts: the normal outcome of a go-back-N retransmission after a lost
  piece, counted all the same).

A continuation that carries the previous one's number again (a line that duplicated a
frame) is no refusal: it is ignored, whatever its bytes (the first copy was taken), and
counted as ``duplicate``; the body goes on.
"""

from __future__ import annotations

from typing import NoReturn

from hirmem.protocol.errors import MessageError
from hirmem.protocol.frames import CRC_SIZE
from hirmem.protocol.messages import ErrorCode

FIRST = 0xF0
CONTINUATION = 0xE0
FIRST_HEAD = 4  # f0 + 3-byte total
CONTINUATION_HEAD = 1
MAX_TOTAL = 0xFFFFFF
REFUSALS = ("too_large", "orphan", "gap", "overrun", "empty", "bad_head", "restart", "duplicate")


def is_piece(body: bytes) -> bool:
    """Whether a frame body is a piece (first byte e0..ff) rather than a message."""
    return bool(body) and body[0] >= CONTINUATION


def first_seq(piece: bytes) -> int:
    """The seq in the envelope at the start of a first piece, which names the body in
    the ERROR too-large that refuses it: the piece has at least 12 bytes, f0 and the
    total, then an array head 84..97, version 01, a type 01..17 and the seq's head
    (00..17 itself; 18, 19 or 1a followed by 1, 2 or 4 bytes big-endian). 0 otherwise."""
    if len(piece) < 12 or piece[0] != FIRST or not 0x84 <= piece[4] <= 0x97:
        return 0
    if piece[5] != 1 or not 1 <= piece[6] <= 23 or piece[7] > 26:
        return 0
    if piece[7] < 24:
        return piece[7]
    return int.from_bytes(piece[8 : 8 + (1 << (piece[7] - 24))], "big")


def split(body: bytes, max_frame: int) -> list[bytes]:
    """The frame bodies that carry ``body`` at ``max_frame``: itself if it fits one frame."""
    room = max_frame - CRC_SIZE
    if len(body) <= room:
        return [body]
    if room <= FIRST_HEAD or len(body) > MAX_TOTAL:
        raise ValueError(f"a body of {len(body)} bytes cannot be cut at max_frame {max_frame}")
    first = room - FIRST_HEAD
    out = [bytes([FIRST]) + len(body).to_bytes(3, "big") + body[:first]]
    step = room - CONTINUATION_HEAD
    for k, at in enumerate(range(first, len(body), step), start=1):
        out.append(bytes([CONTINUATION | (k & 0x0F)]) + body[at : at + step])
    return out


class Joiner:
    """Joins the pieces of one body at a time, at most ``limit`` bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.refused: dict[str, int] = dict.fromkeys(REFUSALS, 0)
        self.joined = 0
        self._parts: list[bytes] = []
        self._total = 0
        self._have = 0
        self._next = 0  # number of the next continuation; 0 when idle

    @property
    def busy(self) -> bool:
        return self._next != 0

    def reset(self) -> None:
        self._parts, self._total, self._have, self._next = [], 0, 0, 0

    def _refuse(self, kind: str, detail: str, code: ErrorCode = ErrorCode.REASSEMBLY) -> NoReturn:
        self.refused[kind] += 1
        self.reset()
        raise MessageError(code, f"{kind}: {detail}")

    def take(self, body: bytes) -> bytes | None:
        """Feed one frame body. A message body passes through; a piece returns the
        joined body once complete, else None. Refusals raise MessageError (code
        TOO_LARGE for too_large, REASSEMBLY otherwise) after counting them."""
        if not is_piece(body):
            return body
        head = body[0]
        if head == FIRST:
            if len(body) < FIRST_HEAD:
                self._refuse("bad_head", f"first piece of {len(body)} bytes has no total")
            if self.busy:
                self.refused["restart"] += 1
                self.reset()
            total = int.from_bytes(body[1:FIRST_HEAD], "big")
            chunk = body[FIRST_HEAD:]
            if total > self.limit:
                self._refuse(
                    "too_large",
                    f"body of {total} bytes exceeds the limit {self.limit}",
                    ErrorCode.TOO_LARGE,
                )
            if not chunk:
                self._refuse("empty", "first piece without bytes")
            if len(chunk) >= total:
                self._refuse("overrun", f"first piece holds {len(chunk)} of {total} bytes")
            self._total, self._next = total, 1
        elif head > FIRST:
            self._refuse("bad_head", f"head byte {head:#04x}")
        else:
            chunk = body[CONTINUATION_HEAD:]
            number = head & 0x0F
            if not self.busy:
                self._refuse("orphan", f"continuation {number} with no body in progress")
            if self._next >= 2 and number == (self._next - 1) & 0x0F:
                self.refused["duplicate"] += 1
                return None
            if number != self._next & 0x0F:
                self._refuse("gap", f"continuation {number}, expected {self._next & 0x0F}")
            if not chunk:
                self._refuse("empty", f"continuation {number} without bytes")
            if self._have + len(chunk) > self._total:
                self._refuse("overrun", f"continuation {number} passes the total {self._total}")
            self._next += 1
        self._parts.append(chunk)
        self._have += len(chunk)
        if self._have < self._total:
            return None
        joined = b"".join(self._parts)
        self.joined += 1
        self.reset()
        return joined
