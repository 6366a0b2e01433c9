"""Q16.16 fixed point (SPEC 9.1), integers only."""

from micropython import const

ONE = const(0x10000)


def mul(a: int, b: int) -> int:
    """Round half up: (a*b + 0x8000) >> 16."""
    return (a * b + 0x8000) >> 16


def isqrt_round(n: int) -> int:
    """The integer nearest to sqrt(n), 0 <= n < 2^64 (bit-by-bit, no division)."""
    rem = n
    r = 0
    # start at the largest power of 4 that may be needed; 1 << 32 keeps the gate's
    # products (<= 2^32) in small ints (1 << 62 is a heap int on a 64-bit port)
    bit = (1 << 32) if n < (1 << 34) else (1 << 62)
    while bit > rem:
        bit >>= 2
    while bit != 0:
        if rem >= r + bit:
            rem -= r + bit
            r = (r >> 1) + bit
        else:
            r >>= 1
        bit >>= 2
    return r + 1 if rem > r else r


def sqrt(a: int) -> int:
    return isqrt_round(a << 16)


def sqrt_mul(a: int, b: int) -> int:
    return isqrt_round(a * b)
