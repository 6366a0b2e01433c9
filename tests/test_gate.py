"""Tests for the Q16.16 arithmetic and the HIR admission gate."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hirmem.protocol.errors import HirmemError
from hirmem.protocol.fixedpoint import (
    ONE,
    Q_MAX,
    from_q,
    isqrt_round,
    q_mul,
    q_sqrt,
    q_sqrt_mul,
    to_q,
)
from hirmem.protocol.gate import (
    FLAGS_MASK,
    GREEN_THRESHOLD,
    HARD_MASK,
    HONESTY_MASK,
    INTEGRITY_MASK,
    RESERVED_MASK,
    RESPECT_MASK,
    TOLERANCE,
    YELLOW_THRESHOLD,
    Check,
    Disposition,
    GateResult,
    Hard,
    Verdict,
    evaluate,
    evaluate_float,
    gate_edge_cases,
)

HALF = Fraction(1, 2)
ALL_PASS = FLAGS_MASK
ALL_FLAGS = range(FLAGS_MASK + 1)

q32 = st.integers(min_value=0, max_value=Q_MAX)
unit_q = st.integers(min_value=0, max_value=ONE)
u64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
valid_flags = st.integers(min_value=0, max_value=FLAGS_MASK)


def round_half_up(x: Fraction) -> int:
    return math.floor(x + HALF)


def is_nearest_root(r: int, n: int) -> bool:
    """``r`` is the integer nearest ``sqrt(n)``: ``(r - 1/2)**2 <= n < (r + 1/2)**2``.

    (For ``r == 0`` the lower bound is read as 0: ``sqrt(n) >= 0`` always.)
    """
    return max(r - HALF, Fraction(0)) ** 2 <= n < (r + HALF) ** 2


# --------------------------------------------------------------------------- fixedpoint


@given(q32, q32)
def test_q_mul_matches_exact_round_half_up(a: int, b: int) -> None:
    expected = round_half_up(Fraction(a * b, ONE))
    if expected > Q_MAX:
        with pytest.raises(ValueError, match="32 bits"):
            q_mul(a, b)
    else:
        assert q_mul(a, b) == expected


@given(unit_q, unit_q)
def test_q_mul_in_unit_range_matches_exact(a: int, b: int) -> None:
    assert q_mul(a, b) == round_half_up(Fraction(a, ONE) * Fraction(b, ONE) * ONE)


def test_q_mul_known_values() -> None:
    assert q_mul(ONE, ONE) == ONE
    assert q_mul(0x8000, 0x8000) == 0x4000
    assert q_mul(0x8000, 1) == 1  # exactly half an ulp rounds up
    assert q_mul(0x7FFF, 1) == 0
    assert q_mul(Q_MAX, 1) == 0x10000  # 65535.99998 ulp-scaled rounds up
    assert q_mul(0xFFFF_FFFF, ONE) == 0xFFFF_FFFF
    with pytest.raises(ValueError, match="32 bits"):
        q_mul(Q_MAX, ONE + 1)


@pytest.mark.parametrize(("a", "b"), [(-1, 0), (0, -1), (Q_MAX + 1, 1), (1, 1 << 40)])
def test_q_mul_rejects_out_of_range(a: int, b: int) -> None:
    with pytest.raises(ValueError, match=r"0\.\.0xFFFFFFFF"):
        q_mul(a, b)


@given(u64)
def test_isqrt_round_is_nearest(n: int) -> None:
    assert is_nearest_root(isqrt_round(n), n)


@given(st.integers(min_value=0, max_value=(1 << 32) - 1))
def test_isqrt_round_around_squares_and_midpoints(k: int) -> None:
    # (k + 1/2)**2 = k*k + k + 1/4: k*k + k rounds down to k, k*k + k + 1 rounds up.
    square = k * k
    assert isqrt_round(square) == k
    assert isqrt_round(square + k) == k
    if square + k + 1 < 1 << 64:
        assert isqrt_round(square + k + 1) == k + 1
    if k > 1:  # sqrt(k*k - 1) > k - 1/2 once k >= 2
        assert isqrt_round(square - 1) == k


def test_isqrt_round_extremes() -> None:
    assert isqrt_round(0) == 0
    assert isqrt_round(1) == 1
    assert isqrt_round(2) == 1
    assert isqrt_round(3) == 2
    assert isqrt_round((1 << 64) - 1) == 1 << 32
    for bad in (-1, 1 << 64):
        with pytest.raises(ValueError, match="2\\*\\*64"):
            isqrt_round(bad)


@given(q32)
def test_q_sqrt_is_nearest(a: int) -> None:
    r = q_sqrt(a)
    assert is_nearest_root(r, a << 16)
    assert r <= 1 << 24


@given(q32, q32)
def test_q_sqrt_mul_is_nearest(a: int, b: int) -> None:
    r = q_sqrt_mul(a, b)
    assert 0 <= r <= Q_MAX
    assert is_nearest_root(r, a * b)


def test_sqrt_known_values() -> None:
    assert q_sqrt(0) == 0
    assert q_sqrt(ONE) == ONE
    assert q_sqrt(0x4000) == 0x8000
    assert q_sqrt(4 * ONE) == 2 * ONE
    assert q_sqrt_mul(0xC000, 0x10000) == round(math.sqrt(0.75) * 65536) == 56756
    assert q_sqrt_mul(ONE, ONE) == ONE
    assert q_sqrt_mul(0x4000, ONE) == 0x8000
    assert q_sqrt_mul(0xFFFF_0000, 0xFFFF_0000) == 0xFFFF_0000
    # The largest product is a perfect square, so q_sqrt_mul never leaves 32 bits.
    assert q_sqrt_mul(Q_MAX, Q_MAX) == Q_MAX
    # sqrt(M * (M - 1)) is just below M - 1/2, so it rounds down.
    assert q_sqrt_mul(Q_MAX, Q_MAX - 1) == Q_MAX - 1
    with pytest.raises(ValueError, match=r"0\.\.0xFFFFFFFF"):
        q_sqrt_mul(Q_MAX + 1, 1)


def test_to_q_and_from_q_known_values() -> None:
    assert to_q(0.0) == 0
    assert to_q(1.0) == ONE
    assert to_q(0.5) == 0x8000
    assert to_q(0.75) == 0xC000
    assert to_q(0.5 / ONE) == 1  # tie rounds up
    assert to_q(1.5 / ONE) == 2
    assert to_q(math.nextafter(0.5 / ONE, 0.0)) == 0
    assert to_q(-3.0) == 0
    assert to_q(-math.inf) == 0
    assert to_q(math.inf) == Q_MAX
    assert to_q(1e12) == Q_MAX
    assert to_q(65535.99999) == Q_MAX
    with pytest.raises(ValueError, match="NaN"):
        to_q(math.nan)
    assert from_q(0x8000) == 0.5
    assert from_q(Q_MAX) == Q_MAX / 65536
    with pytest.raises(ValueError):
        from_q(-1)


@given(st.floats(min_value=0.0, max_value=65535.0, allow_nan=False))
def test_to_q_matches_exact_round_half_up(x: float) -> None:
    assert to_q(x) == round_half_up(Fraction(x) * ONE)


@given(q32)
def test_from_q_round_trips(q: int) -> None:
    assert to_q(from_q(q)) == q
    assert Fraction(from_q(q)) == Fraction(q, ONE)


# ------------------------------------------------------------------------- gate layout


def test_check_bits_and_masks() -> None:
    names = [
        "UNCERTAINTY_DISCLOSED",
        "SIGNATURE_INTACT",
        "SOURCE_PRESENT",
        "SCHEMA_VALID",
        "BASELINE_ALIGNED",
        "REVERSIBLE_PREFERENCE",
        "NO_INVARIANT_VIOLATION",
        "STRUCTURALLY_CONSISTENT",
        "LIFE_FIRST_ALIGNED",
        "NO_COERCION",
        "CONSENT_ENFORCED",
        "NO_DOMINATION",
    ]
    assert [Check[name].value for name in names] == [1 << bit for bit in range(12)]
    assert (HONESTY_MASK, INTEGRITY_MASK, RESPECT_MASK) == (0x000F, 0x00F0, 0x0F00)
    assert HARD_MASK == 0x0C40
    assert RESERVED_MASK == 0xF000
    assert FLAGS_MASK == 0x0FFF
    assert (Hard.DOMINATION, Hard.INVARIANT, Hard.CONSENT, Hard.HONESTY_ZERO) == (1, 2, 4, 8)
    assert (Verdict.GREEN, Verdict.YELLOW, Verdict.RED) == (0, 1, 2)
    assert (Disposition.CANDIDATE, Disposition.QUARANTINED) == (1, 3)


# ------------------------------------------------------------------------ gate results


def axis_of(bit: int) -> str:
    return "hir"[bit // 4]


def test_all_pass() -> None:
    result = evaluate(ALL_PASS, ONE, ONE)
    assert (result.h, result.i, result.r) == (ONE, ONE, ONE)
    assert (result.f, result.c, result.rn, result.w) == (ONE, ONE, ONE, ONE)
    assert result.verdict is Verdict.GREEN
    assert result.hard == Hard(0)
    assert result.disposition is Disposition.CANDIDATE
    assert result.flags == ALL_PASS


def test_axis_scores_count_passed_checks() -> None:
    for flags in ALL_FLAGS:
        result = evaluate(flags, ONE, ONE)
        h = 0x4000 * (flags & HONESTY_MASK).bit_count()
        i = 0x4000 * (flags & INTEGRITY_MASK).bit_count()
        r = 0x4000 * (flags & RESPECT_MASK).bit_count()
        if not flags & Check.NO_INVARIANT_VIOLATION:
            i = 0
        if not flags & Check.NO_DOMINATION or not flags & Check.CONSENT_ENFORCED:
            r = 0
        assert (result.h, result.i, result.r) == (h, i, r)
        assert result.f == q_sqrt_mul(h, i)
        assert result.c == q_sqrt_mul(r, i)
        assert result.rn == q_sqrt_mul(result.f, result.c)


HARD_OF_BIT = {6: Hard.INVARIANT, 10: Hard.CONSENT, 11: Hard.DOMINATION}


@pytest.mark.parametrize("bit", range(12))
def test_single_check_failure(bit: int) -> None:
    flags = ALL_PASS & ~(1 << bit)
    result = evaluate(flags, ONE, ONE)
    axes = {"h": result.h, "i": result.i, "r": result.r}
    failed_axis = axis_of(bit)
    if bit in HARD_OF_BIT:
        assert result.hard == HARD_OF_BIT[bit]
        assert axes[failed_axis] == 0
        assert (result.rn, result.w) == (0, 0)
        assert result.verdict is Verdict.RED
        assert result.disposition is Disposition.QUARANTINED
    else:
        assert result.hard == Hard(0)
        assert axes[failed_axis] == 0xC000
        assert all(v == ONE for k, v in axes.items() if k != failed_axis)
        # Rn = (H * I**2 * R) ** (1/4): one axis at 0.75 gives 0.75**(1/4), or
        # 0.75**(1/2) when it is I (counted twice).
        exponent = 0.5 if failed_axis == "i" else 0.25
        assert result.rn == round(0.75**exponent * ONE)
        assert result.w == 0xC000
        assert result.verdict is Verdict.GREEN
        assert result.disposition is Disposition.CANDIDATE


def test_single_failures_known_rn() -> None:
    assert evaluate(ALL_PASS & ~Check.SCHEMA_VALID, ONE, ONE).rn == 0xEE3C
    assert evaluate(ALL_PASS & ~Check.BASELINE_ALIGNED, ONE, ONE).rn == 0xDDB4
    assert evaluate(ALL_PASS & ~Check.NO_COERCION, ONE, ONE).rn == 0xEE3C


@pytest.mark.parametrize(
    ("flags", "hard"),
    [
        (ALL_PASS & ~Check.NO_DOMINATION, Hard.DOMINATION),
        (ALL_PASS & ~Check.NO_INVARIANT_VIOLATION, Hard.INVARIANT),
        (ALL_PASS & ~Check.CONSENT_ENFORCED, Hard.CONSENT),
        (ALL_PASS & ~HONESTY_MASK, Hard.HONESTY_ZERO),
        (
            ALL_PASS & ~(Check.NO_DOMINATION | Check.CONSENT_ENFORCED),
            Hard.DOMINATION | Hard.CONSENT,
        ),
        (ALL_PASS & ~HARD_MASK, Hard.DOMINATION | Hard.INVARIANT | Hard.CONSENT),
        (0, Hard.DOMINATION | Hard.INVARIANT | Hard.CONSENT | Hard.HONESTY_ZERO),
    ],
)
def test_hard_fail_cases(flags: int, hard: Hard) -> None:
    result = evaluate(flags, ONE, ONE)
    assert result.hard == hard
    if hard & (Hard.DOMINATION | Hard.CONSENT):
        assert result.r == 0
    if hard & Hard.INVARIANT:
        assert result.i == 0
    if hard & Hard.HONESTY_ZERO:
        assert result.h == 0
    assert (result.f if hard & (Hard.INVARIANT | Hard.HONESTY_ZERO) else result.c) == 0
    assert (result.rn, result.w) == (0, 0)
    assert result.verdict is Verdict.RED
    assert result.disposition is Disposition.QUARANTINED


def test_hard_fail_always_quarantines() -> None:
    for flags in ALL_FLAGS:
        result = evaluate(flags, ONE, ONE)
        hard_expected = (
            (Hard.DOMINATION if not flags & Check.NO_DOMINATION else 0)
            | (Hard.INVARIANT if not flags & Check.NO_INVARIANT_VIOLATION else 0)
            | (Hard.CONSENT if not flags & Check.CONSENT_ENFORCED else 0)
            | (Hard.HONESTY_ZERO if not flags & HONESTY_MASK else 0)
        )
        assert result.hard == hard_expected
        if result.hard:
            assert result.rn == 0
            assert result.verdict is Verdict.RED
            assert result.disposition is Disposition.QUARANTINED
        else:
            # Without a hard fail every axis is at least 0.25 and Rn at least 0.25.
            assert min(result.h, result.i, result.r) >= 0x4000
            assert result.rn >= 0x4000
            expected = (
                Disposition.CANDIDATE
                if result.verdict is not Verdict.RED
                else Disposition.QUARANTINED
            )
            assert result.disposition is expected


@given(valid_flags, unit_q, unit_q)
def test_w_zero_when_any_axis_zero(flags: int, quality: int, provenance: int) -> None:
    result = evaluate(flags, quality, provenance)
    if 0 in (result.h, result.i, result.r, quality, provenance):
        assert result.w == 0
    if 0 in (result.h, result.i, result.r):
        assert result.rn == 0


def test_w_zero_for_every_zero_axis_flag_word() -> None:
    for flags in ALL_FLAGS:
        result = evaluate(flags, ONE, ONE)
        if 0 in (result.h, result.i, result.r):
            assert result.w == 0
        else:
            assert result.w == q_mul(q_mul(result.h, result.i), result.r) > 0


@given(valid_flags, unit_q, unit_q)
def test_w_is_left_to_right_chain(flags: int, quality: int, provenance: int) -> None:
    result = evaluate(flags, quality, provenance)
    w = q_mul(q_mul(q_mul(q_mul(quality, provenance), result.h), result.i), result.r)
    assert result.w == w
    assert 0 <= result.w <= ONE


def test_passing_more_checks_never_lowers_rn_or_w() -> None:
    results = [evaluate(flags, 0xABCD, 0x9876) for flags in ALL_FLAGS]
    for flags in ALL_FLAGS:
        for bit in range(12):
            if not flags & (1 << bit):
                lower, higher = results[flags], results[flags | (1 << bit)]
                assert higher.rn >= lower.rn
                assert higher.w >= lower.w
                assert higher.verdict <= lower.verdict


def test_threshold_verdicts() -> None:
    for flags in ALL_FLAGS:
        result = evaluate(flags, ONE, ONE)
        if result.rn >= GREEN_THRESHOLD:
            assert result.verdict is Verdict.GREEN
        elif result.rn >= YELLOW_THRESHOLD:
            assert result.verdict is Verdict.YELLOW
        else:
            assert result.verdict is Verdict.RED
    # H = I = R = 0.75 lands exactly on 0.75; H = I = R = 0.5 exactly on 0.50.
    on_green = Check.SOURCE_PRESENT | Check.SCHEMA_VALID | Check.SIGNATURE_INTACT
    on_green |= Check.BASELINE_ALIGNED | Check.NO_INVARIANT_VIOLATION | Check.REVERSIBLE_PREFERENCE
    on_green |= Check.NO_COERCION | Check.CONSENT_ENFORCED | Check.NO_DOMINATION
    result = evaluate(on_green, ONE, ONE)
    assert (result.rn, result.verdict) == (0xC000, Verdict.GREEN)
    on_yellow = Check.UNCERTAINTY_DISCLOSED | Check.SIGNATURE_INTACT
    on_yellow |= Check.BASELINE_ALIGNED | Check.NO_INVARIANT_VIOLATION
    on_yellow |= Check.CONSENT_ENFORCED | Check.NO_DOMINATION
    result = evaluate(on_yellow, ONE, ONE)
    assert (result.rn, result.verdict) == (0x8000, Verdict.YELLOW)
    assert result.disposition is Disposition.CANDIDATE
    # The largest Rn below each threshold takes the lower verdict.
    all_rn = {evaluate(flags, ONE, ONE).rn for flags in ALL_FLAGS}
    below_green = max(rn for rn in all_rn if rn < GREEN_THRESHOLD)
    below_yellow = max(rn for rn in all_rn if rn < YELLOW_THRESHOLD)
    assert (below_green, below_yellow) == (0xBA6E, 0x771E)


def test_result_is_frozen() -> None:
    result = evaluate(ALL_PASS, ONE, ONE)
    assert isinstance(result, GateResult)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.rn = 0  # type: ignore[misc]


@pytest.mark.parametrize(
    ("flags", "quality", "provenance", "message"),
    [
        (0x1000, ONE, ONE, "reserved"),
        (0x8FFF, ONE, ONE, "reserved"),
        (0x10000, ONE, ONE, "16 bits"),
        (-1, ONE, ONE, "16 bits"),
        (ALL_PASS, ONE + 1, ONE, "quality"),
        (ALL_PASS, -1, ONE, "quality"),
        (ALL_PASS, ONE, ONE + 1, "provenance"),
        (ALL_PASS, ONE, -5, "provenance"),
    ],
)
def test_evaluate_rejects_bad_input(
    flags: int, quality: int, provenance: int, message: str
) -> None:
    with pytest.raises(HirmemError, match=message):
        evaluate(flags, quality, provenance)


def test_remembered_results_are_the_computed_ones() -> None:
    """evaluate remembers its results: the same result as computing afresh, for values
    Python holds equal but the gate does not (True is not a flags word, 1.0 not a Q)."""
    import random

    from hirmem.protocol import gate

    rng = random.Random(9)
    for _ in range(3000):
        quality = rng.choice([0, 1, ONE // 2, ONE, rng.randrange(ONE)])
        args = (rng.randrange(FLAGS_MASK + 1), quality, rng.choice([ONE, rng.randrange(ONE + 1)]))
        assert evaluate(*args) == gate._evaluate(*args)
        assert evaluate(*args) == gate._evaluate(*args)  # the remembered one
    assert evaluate(1, ONE, ONE) == gate._evaluate(1, ONE, ONE)  # 1 remembered, then:
    for _ in range(2):
        with pytest.raises(HirmemError, match="int"):
            evaluate(True, ONE, ONE)
        with pytest.raises(HirmemError, match="quality"):
            evaluate(1, float(ONE), ONE)  # type: ignore[arg-type]
        with pytest.raises(HirmemError):
            evaluate([1], ONE, ONE)  # type: ignore[arg-type]  # unhashable: refused, not a TypeError


def test_evaluate_rejects_wrong_types() -> None:
    with pytest.raises(HirmemError, match="int"):
        evaluate(True, ONE, ONE)
    with pytest.raises(HirmemError, match="quality"):
        evaluate(ALL_PASS, 1.0, ONE)  # type: ignore[arg-type]
    with pytest.raises(HirmemError, match="provenance"):
        evaluate_float(ALL_PASS, 1.0, 1.5)
    with pytest.raises(HirmemError, match="quality"):
        evaluate_float(ALL_PASS, math.nan, 1.0)
    with pytest.raises(HirmemError, match="reserved"):
        evaluate_float(0xF000, 1.0, 1.0)


# ---------------------------------------------------------------- float reference mode

QP_GRID = [0, 1, 2, 181, 182, 0x7FFF, 0x8000, 0xABCD, 0xFFFF, ONE]


def near_threshold(rn: float) -> bool:
    return any(abs(rn - t) <= TOLERANCE for t in (0.75, 0.5))


def assert_agrees(flags: int, quality: int, provenance: int) -> None:
    fixed = evaluate(flags, quality, provenance)
    ref = evaluate_float(flags, from_q(quality), from_q(provenance))
    assert (from_q(fixed.h), from_q(fixed.i), from_q(fixed.r)) == (ref.h, ref.i, ref.r)
    for name in ("f", "c", "rn", "w"):
        got = from_q(getattr(fixed, name))
        want = getattr(ref, name)
        assert abs(got - want) <= TOLERANCE, (hex(flags), quality, provenance, name, got, want)
    assert fixed.hard == ref.hard
    if not near_threshold(ref.rn):
        assert fixed.verdict is ref.verdict, (hex(flags), fixed.rn, ref.rn)
        assert fixed.disposition is ref.disposition


def test_fixed_matches_float_for_all_flags() -> None:
    for flags in ALL_FLAGS:
        for quality in QP_GRID:
            for provenance in QP_GRID:
                assert_agrees(flags, quality, provenance)


@given(valid_flags, unit_q, unit_q)
def test_fixed_matches_float_random(flags: int, quality: int, provenance: int) -> None:
    assert_agrees(flags, quality, provenance)


def test_rn_error_is_well_inside_tolerance() -> None:
    worst = max(
        abs(from_q(evaluate(flags, ONE, ONE).rn) - evaluate_float(flags, 1.0, 1.0).rn)
        for flags in ALL_FLAGS
    )
    assert worst <= 1.125 / ONE  # the bound derived next to TOLERANCE


# ------------------------------------------------------------------------- edge cases


def test_edge_cases_are_valid_and_unique() -> None:
    cases = gate_edge_cases()
    assert len(cases) == len(set(cases))
    for flags, quality, provenance in cases:
        evaluate(flags, quality, provenance)  # does not raise


def test_edge_cases_cover_what_a_generator_needs() -> None:
    cases = gate_edge_cases()
    case_set = set(cases)
    assert (ALL_PASS, ONE, ONE) in case_set
    for bit in range(12):
        assert (ALL_PASS & ~(1 << bit), ONE, ONE) in case_set
    assert (ALL_PASS & ~HONESTY_MASK, ONE, ONE) in case_set
    assert any(q == 0 and p != 0 for _, q, p in cases)
    assert any(p == 0 and q != 0 for _, q, p in cases)
    results = [evaluate(*case) for case in cases]
    hards = {int(r.hard) for r in results}
    for hard in Hard:
        assert any(h & hard for h in hards)
    # Small nonzero Q and P that underflow W to 0 although every axis is nonzero.
    assert any(
        r.w == 0 and r.hard == 0 and q != 0 and p != 0
        for r, (_, q, p) in zip(results, cases, strict=True)
    )
    # For each threshold: Rn exactly on it, the nearest Rn above and the nearest below.
    all_rn = sorted({evaluate(flags, ONE, ONE).rn for flags in ALL_FLAGS})
    case_rn = {r.rn for r in results}
    for threshold in (GREEN_THRESHOLD, YELLOW_THRESHOLD):
        assert threshold in case_rn
        assert min(rn for rn in all_rn if rn > threshold) in case_rn
        assert max(rn for rn in all_rn if rn < threshold) in case_rn
    assert {r.verdict for r in results} == set(Verdict)
    assert {r.disposition for r in results} == set(Disposition)
