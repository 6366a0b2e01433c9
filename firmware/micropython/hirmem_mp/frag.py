"""Frame pieces (SPEC 6.8): a body too long for one frame, cut below the session.

First piece: f0, the total as 3 bytes big-endian, then bytes; continuation k (1, 2, ...):
one byte e0 | (k mod 16), then bytes; every frame but the last is full. The joiner
takes one body at a time into a buffer allocated once (limit bytes) and counts every
refusal by kind, as hirmem.protocol.pieces and hm_join (firmware/core/hm_frag.c) do.
"""

from micropython import const

FIRST = const(0xF0)
CONTINUATION = const(0xE0)
# refusal kinds, the order of hm_join_kind
TOO_LARGE = const(0)
ORPHAN = const(1)
GAP = const(2)
OVERRUN = const(3)
EMPTY = const(4)
BAD_HEAD = const(5)
RESTART = const(6)
DUPLICATE = const(7)  # the previous continuation's number again: ignored


def is_piece(body) -> bool:
    return len(body) > 0 and body[0] >= CONTINUATION


def first_seq(piece) -> int:
    """The seq at the start of a first piece (the rule of hm_piece_seq: 84..97 01
    type(01..17) and a seq head of at most 5 bytes), 0 if it is not of that form."""
    if len(piece) < 12 or piece[0] != FIRST or not 0x84 <= piece[4] <= 0x97:
        return 0
    if piece[5] != 1 or not 1 <= piece[6] <= 23 or piece[7] > 26:
        return 0
    if piece[7] < 24:
        return piece[7]
    return int.from_bytes(bytes(piece[8 : 8 + (1 << (piece[7] - 24))]), "big")


def split(body, max_frame: int) -> list:
    """The frame bodies carrying body: [body] if it fits one frame."""
    room = max_frame - 4
    n = len(body)
    if n <= room:
        return [body]
    out = [bytes((FIRST, n >> 16, (n >> 8) & 0xFF, n & 0xFF)) + bytes(body[0 : room - 4])]
    at = room - 4
    k = 1
    while at < n:
        out.append(bytes((CONTINUATION | (k & 0x0F),)) + bytes(body[at : at + room - 1]))
        at += room - 1
        k += 1
    return out


class Joiner:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.buf = bytearray(limit)
        self.refused = [0] * 8
        self.joined = 0
        self.reset()

    def reset(self) -> None:
        self.next = 0  # number of the next continuation, 0 when idle
        self.total = 0
        self.have = 0

    def _refuse(self, kind: int) -> int:
        self.refused[kind] += 1
        self.reset()
        return -1 - kind

    def take(self, body) -> int:
        """0 while more is due; the joined length (bytes at buf); or -1 - kind of a
        refusal (counted; -1 is too-large, the one the caller answers)."""
        n = len(body)
        head = body[0]
        if head > FIRST:
            return self._refuse(BAD_HEAD)
        if head == FIRST:
            if n < 4:
                return self._refuse(BAD_HEAD)
            if self.next:
                self.refused[RESTART] += 1
                self.next = 0
            total = (body[1] << 16) | (body[2] << 8) | body[3]
            if total > self.limit:
                return self._refuse(TOO_LARGE)
            if n == 4:
                return self._refuse(EMPTY)
            if n - 4 >= total:
                return self._refuse(OVERRUN)
            self.total = total
            self.have = 0
            start = 4
        else:
            if not self.next:
                return self._refuse(ORPHAN)
            if self.next >= 2 and head & 0x0F == (self.next - 1) & 0x0F:
                self.refused[DUPLICATE] += 1
                return 0
            if head & 0x0F != self.next & 0x0F:
                return self._refuse(GAP)
            if n == 1:
                return self._refuse(EMPTY)
            if n - 1 > self.total - self.have:
                return self._refuse(OVERRUN)
            start = 1
        self.buf[self.have : self.have + n - start] = body[start:n]
        self.have += n - start
        self.next += 1
        if self.have < self.total:
            return 0
        total = self.total
        self.joined += 1
        self.reset()
        return total
