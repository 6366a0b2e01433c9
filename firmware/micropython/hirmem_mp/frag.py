"""Frame pieces (SPEC 6.8): a body too long for one frame, cut below the session.

The stream body || CRC-32(body) (4 bytes little-endian, the body check) travels in
pieces, one per frame: the first is f0 then bytes; continuation k (1, 2, ...) is
e0 | last << 3 | (k mod 8) then bytes, `last` on the piece that ends the stream; every
frame but the last is full. The joiner takes one body at a time into a buffer
allocated once (limit + 4 bytes) and counts every frame it drops by kind, as
hirmem.protocol.pieces and hm_join (firmware/core/hm_frag.c) do.
"""

from binascii import crc32

from micropython import const

FIRST = const(0xF0)
CONTINUATION = const(0xE0)
LAST = const(0x08)
# kinds, the order of hm_join_kind
TOO_LARGE = const(0)
ORPHAN = const(1)
GAP = const(2)
EMPTY = const(3)
BAD_HEAD = const(4)
BAD_CHECK = const(5)
RESTART = const(6)
DUPLICATE = const(7)  # the previous continuation's number again: ignored


def is_piece(body) -> bool:
    return len(body) > 0 and body[0] >= CONTINUATION


def body_seq(b) -> int:
    """The seq at the start of a (possibly incomplete) body (the rule of hm_body_seq:
    84..97 01 type(01..17) and a seq head of at most 5 bytes), 0 if not of that form."""
    if len(b) < 8 or not 0x84 <= b[0] <= 0x97 or b[1] != 1:
        return 0
    if not 1 <= b[2] <= 23 or b[3] > 26:
        return 0
    if b[3] < 24:
        return b[3]
    return int.from_bytes(bytes(b[4 : 4 + (1 << (b[3] - 24))]), "big")


def split(body, max_frame: int) -> list:
    """The frame bodies carrying body: [body] if it fits one frame."""
    room = max_frame - 4
    if len(body) <= room:
        return [body]
    stream = bytes(body) + (crc32(body) & 0xFFFFFFFF).to_bytes(4, "little")
    step = room - 1
    out = [bytes((FIRST,)) + stream[0:step]]
    at = step
    k = 1
    while at < len(stream):
        last = LAST if at + step >= len(stream) else 0
        out.append(bytes((CONTINUATION | last | (k & 0x07),)) + stream[at : at + step])
        at += step
        k += 1
    return out


class Joiner:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.buf = bytearray(limit + 4)
        self.refused = [0] * 8
        self.joined = 0
        self.seq = 0  # body_seq of the last first piece: names a refused body
        self.reset()

    def reset(self) -> None:
        self.next = 0  # number of the next continuation, 0 when idle
        self.have = 0

    def _refuse(self, kind: int) -> int:
        self.refused[kind] += 1
        self.reset()
        return -1 - kind

    def take(self, piece) -> int:
        """0 while more is due; the joined body's length (bytes at buf); or -1 - kind of
        a refusal (counted; -1 is too-large, the one the caller answers)."""
        n = len(piece)
        head = piece[0]
        if head > FIRST:
            return self._refuse(BAD_HEAD)
        if head == FIRST:
            if self.next:
                self.refused[RESTART] += 1
                self.reset()
            self.seq = body_seq(memoryview(piece)[1:n])
            if n < 2:
                return self._refuse(EMPTY)
        else:
            if not self.next:
                return self._refuse(ORPHAN)
            if self.next >= 2 and head & 0x07 == (self.next - 1) & 0x07:
                self.refused[DUPLICATE] += 1
                return 0
            if head & 0x07 != self.next & 0x07:
                return self._refuse(GAP)
            if n < 2:
                return self._refuse(EMPTY)
        if n - 1 > self.limit + 4 - self.have:
            return self._refuse(TOO_LARGE)
        self.buf[self.have : self.have + n - 1] = piece[1:n]
        self.have += n - 1
        self.next += 1
        if head == FIRST or not head & LAST:
            return 0
        k = self.have - 4
        if k < 0 or (crc32(memoryview(self.buf)[0:k]) & 0xFFFFFFFF).to_bytes(4, "little") != bytes(
                self.buf[k : k + 4]):
            return self._refuse(BAD_CHECK)
        self.joined += 1
        self.reset()
        return k
