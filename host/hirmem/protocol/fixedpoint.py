"""Unsigned Q16.16 fixed-point arithmetic shared bit for bit with the device.

A Q16.16 value is a Python ``int`` in ``0..0xFFFFFFFF`` standing for ``value / 65536``.
Every operation here uses integer arithmetic only, with intermediates that fit in an
unsigned 64-bit word, so the C firmware and MicroPython can reproduce each result
exactly:

* :func:`q_mul` multiplies with round-half-up: ``(a*b + 0x8000) >> 16``.
* :func:`isqrt_round` is the integer square root rounded to nearest.
* :func:`q_sqrt` and :func:`q_sqrt_mul` build Q16.16 square roots on top of it.

Out-of-range inputs are programmer errors and raise :class:`ValueError`, as does a
result that would not fit in 32 bits.
"""

from __future__ import annotations

import math
from fractions import Fraction

__all__ = [
    "FRAC_BITS",
    "ONE",
    "Q_MAX",
    "from_q",
    "isqrt_round",
    "q_mul",
    "q_sqrt",
    "q_sqrt_mul",
    "to_q",
]

FRAC_BITS = 16
ONE = 0x10000
"""1.0 in Q16.16."""
Q_MAX = 0xFFFFFFFF
"""Largest Q16.16 value (just under 65536.0)."""

_HALF = 0x8000
_U64_LIMIT = 1 << 64


def _check_q(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {type(value).__name__}")
    if not 0 <= value <= Q_MAX:
        raise ValueError(f"{name} must be in 0..0xFFFFFFFF, got {value}")


def _check_result(op: str, value: int) -> int:
    if value > Q_MAX:
        raise ValueError(f"{op} result 0x{value:X} does not fit in 32 bits")
    return value


def q_mul(a: int, b: int) -> int:
    """Multiply two Q16.16 values, rounding half up: ``(a*b + 0x8000) >> 16``.

    The intermediate ``a*b + 0x8000`` is at most ``2**64 - 2**33 + 0x8001``, so it fits
    an unsigned 64-bit word. Raises :class:`ValueError` when the result exceeds 32 bits.
    """
    _check_q("a", a)
    _check_q("b", b)
    return _check_result("q_mul", (a * b + _HALF) >> FRAC_BITS)


def isqrt_round(n: int) -> int:
    """Square root of ``0 <= n < 2**64`` rounded to the nearest integer.

    ``r = floor(sqrt(n))``; the true root is nearer ``r + 1`` exactly when
    ``n >= (r + 0.5)**2 = r*r + r + 0.25``, i.e. (in integers) when ``n - r*r > r``.
    A tie would need ``n = r*r + r + 0.25``, which no integer is. Both ``n - r*r`` and
    ``r`` fit in 64 bits. The result is in ``0..2**32`` (``2**32`` only for
    ``n > 2**64 - 2**32``).
    """
    if isinstance(n, bool) or not isinstance(n, int):
        raise ValueError(f"n must be an int, got {type(n).__name__}")
    if not 0 <= n < _U64_LIMIT:
        raise ValueError(f"n must be in 0..2**64-1, got {n}")
    r = math.isqrt(n)
    if n - r * r > r:
        r += 1
    return r


def q_sqrt(a: int) -> int:
    """Square root of a Q16.16 value as Q16.16: ``isqrt_round(a << 16)``.

    ``a << 16`` is below ``2**48`` and the result at most ``2**24``, so it always fits.
    """
    _check_q("a", a)
    return isqrt_round(a << FRAC_BITS)


def q_sqrt_mul(a: int, b: int) -> int:
    """``sqrt(a*b)`` of two Q16.16 values as Q16.16, from the exact 64-bit product.

    There is no intermediate rounding: ``sqrt((a/2**16) * (b/2**16)) * 2**16`` is
    ``sqrt(a*b)``, which :func:`isqrt_round` rounds once. The result always fits in
    32 bits: ``a*b <= (2**32 - 1)**2``, a perfect square, and rounding is monotonic.
    """
    _check_q("a", a)
    _check_q("b", b)
    return isqrt_round(a * b)


def to_q(x: float) -> int:
    """Convert a float to Q16.16, rounding half up and clamping to ``0..0xFFFFFFFF``.

    The rounding is done on the exact rational value of ``x * 65536`` so that no float
    addition can disturb a tie. Infinities clamp; NaN raises :class:`ValueError`.
    """
    if math.isnan(x):
        raise ValueError("cannot convert NaN to Q16.16")
    if x == math.inf:
        return Q_MAX
    if x <= 0.0:
        return 0
    scaled = Fraction(x) * ONE
    q = math.floor(scaled + Fraction(1, 2))
    return min(q, Q_MAX)


def from_q(q: int) -> float:
    """The float value of a Q16.16 number (always exact: ``q`` has at most 32 bits)."""
    _check_q("q", q)
    return q / ONE
