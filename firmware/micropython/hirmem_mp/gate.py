"""The HIR gate (SPEC 9.2 - 9.5) in Q16.16 integers, and capture normalisation (9.3)."""

from micropython import const

from .fixed import mul, sqrt_mul

GREEN = const(0)
YELLOW = const(1)
RED = const(2)
CANDIDATE = const(1)
QUARANTINED = const(3)

HARD_DOMINATION = const(1)
HARD_INVARIANT = const(2)
HARD_CONSENT = const(4)
HARD_HONESTY_ZERO = const(8)

_QUARTER = const(0x4000)
_GREEN_AT = const(0xC000)
_YELLOW_AT = const(0x8000)

# passed bits in each nibble value (0..15)
_POP4 = b"\x00\x01\x01\x02\x01\x02\x02\x03\x01\x02\x02\x03\x02\x03\x03\x04"


class Result:
    """Gate outputs for one record; to_tuple() is (flags, h, i, r, f, c, rn, w,
    verdict, hard, state)."""

    __slots__ = ("flags", "h", "i", "r", "f", "c", "rn", "w", "verdict", "hard", "state")

    def __init__(self) -> None:
        self.flags = 0
        self.h = 0
        self.i = 0
        self.r = 0
        self.f = 0
        self.c = 0
        self.rn = 0
        self.w = 0
        self.verdict = RED
        self.hard = 0
        self.state = 0

    def to_tuple(self) -> tuple:
        return (self.flags, self.h, self.i, self.r, self.f, self.c, self.rn, self.w,
                self.verdict, self.hard, self.state)


def evaluate_into(res: Result, flags: int, q: int, p: int) -> Result:
    """SPEC 9.4 from normalised flags (<= 0x0fff), Q and P (<= 0x10000). No allocation
    on a 64-bit port (every intermediate is a small int)."""
    h = _QUARTER * _POP4[flags & 0xF]
    i = _QUARTER * _POP4[(flags >> 4) & 0xF]
    r = _QUARTER * _POP4[(flags >> 8) & 0xF]
    hard = 0
    if not flags & 0x0800:
        hard |= HARD_DOMINATION
        r = 0
    if not flags & 0x0040:
        hard |= HARD_INVARIANT
        i = 0
    if not flags & 0x0400:
        hard |= HARD_CONSENT
        r = 0
    if not flags & 0x000F:
        hard |= HARD_HONESTY_ZERO
    f = sqrt_mul(h, i)
    c = sqrt_mul(r, i)
    rn = sqrt_mul(f, c)
    if rn >= _GREEN_AT:
        verdict = GREEN
    elif rn >= _YELLOW_AT:
        verdict = YELLOW
    else:
        verdict = RED
    w = mul(mul(mul(mul(q, p), h), i), r)
    res.flags = flags
    res.h = h
    res.i = i
    res.r = r
    res.f = f
    res.c = c
    res.rn = rn
    res.w = w
    res.verdict = verdict
    res.hard = hard
    res.state = CANDIDATE if verdict != RED and hard == 0 else QUARANTINED
    return res


def evaluate(flags: int, q: int, p: int) -> Result:
    return evaluate_into(Result(), flags, q, p)


def normalise(flags: int, payload_len: int, source_ok: bool, source_len: int,
              timestamp: int, context_len: int) -> int:
    """SPEC 9.3: bit 2 = source not empty; bit 3 = payload 1..256 bytes, timestamp > 0,
    context 32 bytes, source <= 64 bytes of UTF-8. The other ten bits are kept."""
    flags &= ~0x000C
    if source_len > 0:
        flags |= 0x0004
    if (1 <= payload_len <= 256 and timestamp > 0 and context_len == 32
            and source_len <= 64 and source_ok):
        flags |= 0x0008
    return flags
