"""The host's exact reproduction of the device's HIR admission gate.

The device scores a record on three axes from twelve pass/fail sub-checks carried in
the 16-bit ``ACTION_FLAGS`` word (bit set = the sub-check passed; bits 12..15 are
reserved and must be 0):

====  ==========================  =====  ======
bit   sub-check                   axis   hard
====  ==========================  =====  ======
0     uncertainty_disclosed       H
1     signature_intact            H
2     source_present              H
3     schema_valid                H
4     baseline_aligned            I
5     reversible_preference       I
6     no_invariant_violation      I      yes
7     structurally_consistent     I
8     life_first_aligned          R
9     no_coercion                 R
10    consent_enforced            R      yes
11    no_domination               R      yes
====  ==========================  =====  ======

All arithmetic is unsigned Q16.16 (:mod:`hirmem.protocol.fixedpoint`) so that the C firmware
and MicroPython compute the same bits:

* Axis score: ``0x4000`` per passed sub-check of that axis (0, 0.25, ..., 1.0).
* Hard fails: no_domination clear (MEM-INV-2) or consent_enforced clear forces R to 0;
  no_invariant_violation clear forces I to 0; H == 0 is flagged too (MEM-INV-1).
* ``F = sqrt(H*I)``, ``C = sqrt(R*I)``, ``Rn = sqrt(F*C)``, each via
  :func:`~hirmem.protocol.fixedpoint.q_sqrt_mul` (one rounding per square root).
* Verdict: GREEN if ``Rn >= 0xC000`` (0.75), YELLOW if ``Rn >= 0x8000`` (0.5), else RED.
* Write gate ``W = (((Q*P)*H)*I)*R`` with :func:`~hirmem.protocol.fixedpoint.q_mul`, left to
  right, where Q is the record's confidence and P the provenance confidence.
* Disposition: CANDIDATE when the verdict is GREEN or YELLOW and there is no hard
  fail, QUARANTINED otherwise.

:func:`evaluate_float` is a float reference of the same gate, used to show that the
fixed-point result never strays more than :data:`TOLERANCE` from the real numbers.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from enum import IntEnum, IntFlag

from hirmem.protocol.errors import HirmemError
from hirmem.protocol.fixedpoint import ONE, q_mul, q_sqrt_mul

__all__ = [
    "AXIS_STEP",
    "FLAGS_MASK",
    "GREEN_THRESHOLD",
    "HARD_MASK",
    "HONESTY_MASK",
    "INTEGRITY_MASK",
    "RESERVED_MASK",
    "RESPECT_MASK",
    "TOLERANCE",
    "YELLOW_THRESHOLD",
    "Check",
    "Disposition",
    "FloatGateResult",
    "GateResult",
    "Hard",
    "Verdict",
    "evaluate",
    "evaluate_float",
    "gate_edge_cases",
]


class Check(IntFlag):
    """One bit of ACTION_FLAGS per sub-check; a set bit means the sub-check passed."""

    UNCERTAINTY_DISCLOSED = 1 << 0
    SIGNATURE_INTACT = 1 << 1
    SOURCE_PRESENT = 1 << 2
    SCHEMA_VALID = 1 << 3
    BASELINE_ALIGNED = 1 << 4
    REVERSIBLE_PREFERENCE = 1 << 5
    NO_INVARIANT_VIOLATION = 1 << 6
    STRUCTURALLY_CONSISTENT = 1 << 7
    LIFE_FIRST_ALIGNED = 1 << 8
    NO_COERCION = 1 << 9
    CONSENT_ENFORCED = 1 << 10
    NO_DOMINATION = 1 << 11


HONESTY_MASK = 0x000F
"""Sub-checks of the H (honesty) axis, bits 0..3."""
INTEGRITY_MASK = 0x00F0
"""Sub-checks of the I (integrity) axis, bits 4..7."""
RESPECT_MASK = 0x0F00
"""Sub-checks of the R (relational) axis, bits 8..11."""
FLAGS_MASK = HONESTY_MASK | INTEGRITY_MASK | RESPECT_MASK
"""All twelve defined sub-check bits (0x0FFF)."""
RESERVED_MASK = 0xF000
"""Bits 12..15: reserved, must be 0."""
HARD_MASK = int(Check.NO_INVARIANT_VIOLATION | Check.CONSENT_ENFORCED | Check.NO_DOMINATION)
"""Sub-checks whose failure is a hard fail (0x0C40)."""

AXIS_STEP = 0x4000
"""Axis score per passed sub-check (0.25 in Q16.16)."""
GREEN_THRESHOLD = 0xC000
"""``Rn`` at or above this (0.75) is GREEN."""
YELLOW_THRESHOLD = 0x8000
"""``Rn`` at or above this (0.50) is YELLOW, unless GREEN."""

# How far (as a real number) the fixed-point F, C, Rn and W may stray from the exact
# real-number gate that evaluate_float approximates. One ulp is 2**-16.
#
# * H, I, R are exact (multiples of 0x4000), and so are Q and P when the float inputs
#   are from_q() of the fixed ones.
# * F and C: one rounding each of an exact square root, error <= 0.5 ulp.
# * Rn = round(sqrt(F' * C')): the final rounding adds <= 0.5 ulp, and the errors of F'
#   and C' reach Rn scaled by d sqrt(FC) / dF = sqrt(C/F) / 2 (and symmetrically for
#   C). A square root halves relative error; because nonzero F and C both lie in
#   [0.25, 1], sqrt(C/F) <= 2, so to first order the carried error is at most
#   (2 * 0.5 + 0.5 * 0.5) / 2 = 0.625 ulp and |Rn - exact| <= 1.125 ulp.
# * W: four q_mul roundings of <= 0.5 ulp each. Every factor is <= 1.0, so an earlier
#   error is never amplified by a later multiplication: |W - exact| <= 4 * 0.5 = 2 ulp.
#   (Exactly 2 is unreachable: an error only passes through undiminished when the
#   factor is 1.0, and multiplying by 1.0 does not round.)
# * The float reference itself is off by a few 2**-53 relative, far below one ulp.
# So 2 ulp bounds every output; the tests check this for all 4096 flag words.
TOLERANCE = 2 / ONE
"""Largest difference between a fixed-point output and the float reference (2 ulp)."""


class Hard(IntFlag):
    """Hard-fail bits reported by the gate."""

    DOMINATION = 1
    """no_domination failed: R forced to 0 (MEM-INV-2)."""
    INVARIANT = 2
    """no_invariant_violation failed: I forced to 0."""
    CONSENT = 4
    """consent_enforced failed: R forced to 0."""
    HONESTY_ZERO = 8
    """H == 0: every honesty sub-check failed (MEM-INV-1)."""


class Verdict(IntEnum):
    """Gate verdict from ``Rn``."""

    GREEN = 0
    YELLOW = 1
    RED = 2


class Disposition(IntEnum):
    """The record's next lifecycle state.

    Values are those of the wire state enum (0 volatile, 1 candidate, 2 consolidated,
    3 quarantined, 4 archived); the gate only ever yields these two.
    """

    CANDIDATE = 1
    QUARANTINED = 3


@dataclass(frozen=True)
class GateResult:
    """Everything the fixed-point gate computed; numeric fields are Q16.16 ints."""

    flags: int
    h: int
    i: int
    r: int
    f: int
    c: int
    rn: int
    w: int
    verdict: Verdict
    hard: Hard
    disposition: Disposition


@dataclass(frozen=True)
class FloatGateResult:
    """The float reference gate's results; numeric fields are reals in 0..1."""

    flags: int
    h: float
    i: float
    r: float
    f: float
    c: float
    rn: float
    w: float
    verdict: Verdict
    hard: Hard
    disposition: Disposition


def _check_flags(flags: int) -> None:
    if isinstance(flags, bool) or not isinstance(flags, int):
        raise HirmemError(f"action flags must be an int, got {type(flags).__name__}")
    if not 0 <= flags <= 0xFFFF:
        raise HirmemError(f"action flags must fit in 16 bits (0..0xFFFF), got {flags}")
    if flags & RESERVED_MASK:
        raise HirmemError(
            f"action flags 0x{flags:04X} set reserved bits 0x{flags & RESERVED_MASK:04X}"
            " (bits 12..15 must be 0)"
        )


def _passed(flags: int, mask: int) -> int:
    """How many of the sub-checks in ``mask`` passed."""
    return (flags & mask).bit_count()


_NO_DOMINATION = int(Check.NO_DOMINATION)
_NO_INVARIANT_VIOLATION = int(Check.NO_INVARIANT_VIOLATION)
_CONSENT_ENFORCED = int(Check.CONSENT_ENFORCED)
_HARD_DOMINATION = int(Hard.DOMINATION)
_HARD_INVARIANT = int(Hard.INVARIANT)
_HARD_CONSENT = int(Hard.CONSENT)
_HARD_HONESTY_ZERO = int(Hard.HONESTY_ZERO)
_R_FORCED_ZERO = _HARD_DOMINATION | _HARD_CONSENT
_I_FORCED_ZERO = _HARD_INVARIANT


def _hard_fails(flags: int) -> int:
    """Hard-fail bits (as :class:`Hard` values) that follow from the flags.

    H == 0 is decided by the flags too: it happens exactly when bits 0..3 are all clear.
    """
    hard = 0
    if not flags & _NO_DOMINATION:
        hard |= _HARD_DOMINATION
    if not flags & _NO_INVARIANT_VIOLATION:
        hard |= _HARD_INVARIANT
    if not flags & _CONSENT_ENFORCED:
        hard |= _HARD_CONSENT
    if not flags & HONESTY_MASK:
        hard |= _HARD_HONESTY_ZERO
    return hard


def _axes(flags: int) -> tuple[int, int, int, int]:
    """Hard-fail bits and the passed sub-checks per axis, with the forced zeros applied."""
    hard = _hard_fails(flags)
    h = _passed(flags, HONESTY_MASK)
    i = 0 if hard & _I_FORCED_ZERO else _passed(flags, INTEGRITY_MASK)
    r = 0 if hard & _R_FORCED_ZERO else _passed(flags, RESPECT_MASK)
    return hard, h, i, r


def verdict_of(rn: int) -> Verdict:
    """The verdict of a Q16.16 ``Rn`` (a record carries Rn, not its verdict)."""
    return _verdict(rn, GREEN_THRESHOLD, YELLOW_THRESHOLD)


def _verdict(rn: float, green: float, yellow: float) -> Verdict:
    if rn >= green:
        return Verdict.GREEN
    return Verdict.YELLOW if rn >= yellow else Verdict.RED


def _disposition(verdict: Verdict, hard: int) -> Disposition:
    if verdict != Verdict.RED and not hard:
        return Disposition.CANDIDATE
    return Disposition.QUARANTINED


def evaluate(flags: int, quality: int, provenance: int) -> GateResult:
    """Run the gate on ACTION_FLAGS and Q16.16 quality (Q) and provenance (P).

    Raises :class:`HirmemError` when ``flags`` is not a 16-bit word with the reserved
    bits clear, or Q or P is not an int in ``0..ONE``.

    A pure function of its three integers, so results are remembered (bounded; keyed by
    type too, so ``True`` is not taken for ``1``): a device sends the same flags, Q and
    P record after record, and both the daemon and the memory engine gate each one.
    """
    try:
        return _remembered(flags, quality, provenance)
    except TypeError:  # an unhashable argument: the gate itself says what is wrong
        return _evaluate(flags, quality, provenance)


def _evaluate(flags: int, quality: int, provenance: int) -> GateResult:
    _check_flags(flags)
    for name, value in (("quality", quality), ("provenance", provenance)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise HirmemError(f"{name} must be a Q16.16 int, got {type(value).__name__}")
        if not 0 <= value <= ONE:
            raise HirmemError(f"{name} must be in 0..0x10000 (0.0..1.0), got 0x{value:X}")

    hard, h_passed, i_passed, r_passed = _axes(flags)
    h, i, r = AXIS_STEP * h_passed, AXIS_STEP * i_passed, AXIS_STEP * r_passed
    f = q_sqrt_mul(h, i)
    c = q_sqrt_mul(r, i)
    rn = q_sqrt_mul(f, c)
    verdict = _verdict(rn, GREEN_THRESHOLD, YELLOW_THRESHOLD)

    w = q_mul(q_mul(q_mul(q_mul(quality, provenance), h), i), r)
    return GateResult(
        flags=flags,
        h=h,
        i=i,
        r=r,
        f=f,
        c=c,
        rn=rn,
        w=w,
        verdict=verdict,
        hard=Hard(hard),
        disposition=_disposition(verdict, hard),
    )


_remembered = functools.lru_cache(maxsize=4096, typed=True)(_evaluate)


def evaluate_float(flags: int, quality: float, provenance: float) -> FloatGateResult:
    """The same gate in floating point, as a reference for :func:`evaluate`.

    Raises :class:`HirmemError` for bad flags, or Q or P outside ``0.0..1.0``.
    """
    _check_flags(flags)
    for name, value in (("quality", quality), ("provenance", provenance)):
        if not (math.isfinite(value) and 0.0 <= value <= 1.0):
            raise HirmemError(f"{name} must be in 0.0..1.0, got {value!r}")

    hard, h_passed, i_passed, r_passed = _axes(flags)
    h, i, r = 0.25 * h_passed, 0.25 * i_passed, 0.25 * r_passed
    f = math.sqrt(h * i)
    c = math.sqrt(r * i)
    rn = math.sqrt(f * c)
    verdict = _verdict(rn, GREEN_THRESHOLD / ONE, YELLOW_THRESHOLD / ONE)

    w = quality * provenance * h * i * r
    return FloatGateResult(
        flags=flags,
        h=h,
        i=i,
        r=r,
        f=f,
        c=c,
        rn=rn,
        w=w,
        verdict=verdict,
        hard=Hard(hard),
        disposition=_disposition(verdict, hard),
    )


def _threshold_flags(threshold: int) -> list[int]:
    """Flag words whose Rn is nearest ``threshold``: on it, just above, just below.

    Searches all 4096 flag words; for each of the three positions (equal, smallest
    Rn above, largest Rn below) it takes the numerically smallest flag word.
    """
    results = [(evaluate(flags, ONE, ONE).rn, flags) for flags in range(FLAGS_MASK + 1)]
    on = [flags for rn, flags in results if rn == threshold]
    above = min((rn, flags) for rn, flags in results if rn > threshold)
    below = max((rn, -flags) for rn, flags in results if rn < threshold)
    return [*on[:1], above[1], -below[1]]


def gate_edge_cases() -> list[tuple[int, int, int]]:
    """``(flags, Q, P)`` inputs that a test-vector generator should cover.

    All pass; each single sub-check failing; each hard fail alone and all together; H
    == 0; the flag words whose Rn is nearest 0.75 and 0.50 from each side (and exactly
    on them where possible); Q = 0, P = 0, Q = P = ONE; and small Q, P where W
    underflows to 0 (and the first values where it does not), plus a round-half-up tie.
    Duplicates are removed; order is stable.
    """
    all_pass = FLAGS_MASK
    cases: list[tuple[int, int, int]] = [(all_pass, ONE, ONE)]
    cases += [(all_pass & ~(1 << bit), ONE, ONE) for bit in range(12)]

    # Hard fails: each alone, H == 0 alone, every hard fail at once, nothing passes.
    cases += [(all_pass & ~int(check), ONE, ONE) for check in Check if check & HARD_MASK]
    cases.append((all_pass & ~HONESTY_MASK, ONE, ONE))
    cases.append((all_pass & ~HARD_MASK, ONE, ONE))
    cases.append((all_pass & ~(HARD_MASK | HONESTY_MASK), ONE, ONE))
    cases.append((0, ONE, ONE))

    for threshold in (GREEN_THRESHOLD, YELLOW_THRESHOLD):
        cases += [(flags, ONE, ONE) for flags in _threshold_flags(threshold)]

    # Quality and provenance at their ends.
    cases += [(all_pass, 0, ONE), (all_pass, ONE, 0), (all_pass, 0, 0)]

    # W underflow: Q*P rounds to 0 once Q*P < 0x8000 (181**2 = 32761, 182**2 = 33124).
    cases += [(all_pass, 1, 1), (all_pass, 181, 181), (all_pass, 182, 182)]
    # Round half up: 0x8000 * 1 is exactly 0.5 ulp and rounds to 1; 0x7FFF * 1 to 0.
    cases += [(all_pass, 0x8000, 1), (all_pass, 0x7FFF, 1)]
    # Underflow later in the chain: Q*P = 1 ulp survives, then H = 0.75 rounds it up
    # (0.75 ulp -> 1) but I = 0.25 rounds it away (0.25 ulp -> 0); Q*P = 2 ulp times
    # I = 0.25 is a tie (0.5 ulp) that rounds up to 1.
    lowest_h = all_pass & ~int(Check.UNCERTAINTY_DISCLOSED)
    lowest_i = all_pass & ~int(
        Check.BASELINE_ALIGNED | Check.REVERSIBLE_PREFERENCE | Check.STRUCTURALLY_CONSISTENT
    )
    cases += [(lowest_h, 1, ONE), (lowest_i, 1, ONE), (lowest_i, ONE, 2)]

    return list(dict.fromkeys(cases))
