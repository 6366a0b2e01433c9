"""Stages 2-5 of the memory engine: normalise, HIR gate (fixed and float), weighting."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hirmem.memory.config import MemoryConfig
from hirmem.memory.engine import MemoryEngine, gate_scores
from hirmem.memory.model import Layer, State
from hirmem.protocol.fixedpoint import ONE
from hirmem.protocol.gate import FLAGS_MASK, TOLERANCE, Check

VECTORS = Path(__file__).resolve().parent.parent / "protocol" / "vectors" / "gate.json"
CASES: list[dict[str, Any]] = json.loads(VECTORS.read_text())["cases"]
T0 = 1_780_000_000.0


def engine(mode: str = "fixed") -> MemoryEngine:
    return MemoryEngine(":memory:", MemoryConfig(gate_mode=mode), clock=lambda: T0)


@pytest.mark.parametrize(
    "case", CASES, ids=[f"{c['flags']:04x}-{c['quality']:x}-{c['provenance']:x}" for c in CASES]
)
def test_fixed_mode_reproduces_gate_vectors_exactly(case: dict[str, Any]) -> None:
    g = gate_scores(case["flags"], case["quality"] / ONE, case["provenance"] / ONE, "fixed")
    assert g.q16 == tuple(case[k] for k in ("h", "i", "r", "f", "c", "rn", "w"))
    assert (int(g.verdict), int(g.hard)) == (case["verdict"], case["hard"])


@pytest.mark.parametrize(
    "case", CASES, ids=[f"{c['flags']:04x}-{c['quality']:x}-{c['provenance']:x}" for c in CASES]
)
def test_engine_stores_vector_scores_and_disposition(case: dict[str, Any]) -> None:
    """Through the whole engine: the stored scores are the vector's, and the state is the
    vector's disposition refined by stage 5 (GREEN consolidates) and W = 0 quarantine."""
    e = engine()
    # A record whose normalisation keeps the vector's flags: source present iff bit 2,
    # schema valid iff bit 3.
    flags = case["flags"]
    source = "s" if flags & Check.SOURCE_PRESENT else ""
    payload = b"reading" if flags & Check.SCHEMA_VALID else b""
    m = e.admit(payload, source, flags=flags, confidence=case["quality"] / ONE,
                provenance=case["provenance"] / ONE)  # fmt: skip
    assert m.flags == flags
    got = tuple(round(getattr(m, k) * ONE) for k in ("h", "i", "r", "f", "c", "rn", "w"))
    assert got == tuple(case[k] for k in ("h", "i", "r", "f", "c", "rn", "w"))
    assert m.trust == pytest.approx((case["h"] / ONE) * (case["i"] / ONE) * (case["r"] / ONE))
    if case["state"] == int(State.QUARANTINED) or case["w"] == 0:
        assert m.state is State.QUARANTINED
    elif case["verdict"] == 0 and m.w >= e.config.archive_strength:
        assert (m.state, m.layer) == (State.CONSOLIDATED, Layer.SEMANTIC)
    # issue 13: a GREEN record with W below archive_strength is held, never consolidated
    else:
        assert (m.state, m.layer) == (State.CANDIDATE, Layer.EPISODIC)
    assert m.strength == pytest.approx(case["w"] / ONE)  # stage 4: M starts at W


def test_float_and_fixed_agree_within_tolerance_for_all_flag_words() -> None:
    for flags in range(FLAGS_MASK + 1):
        fx = gate_scores(flags, 1.0, 0.9, "fixed")
        fl = gate_scores(flags, 1.0, 0.9, "float")
        for k in ("h", "i", "r"):
            assert getattr(fx, k) == getattr(fl, k)
        for k in ("f", "c", "rn"):
            assert abs(getattr(fx, k) - getattr(fl, k)) <= TOLERANCE, (flags, k)
        # Q = 1.0, P = 0.9 are not exact in Q16.16; compare with the quantised P.
        flq = gate_scores(flags, 1.0, round(0.9 * ONE) / ONE, "float")
        assert abs(fx.w - flq.w) <= TOLERANCE, flags
        assert fx.hard == fl.hard


@settings(max_examples=200, deadline=None)
@given(st.integers(0, FLAGS_MASK), st.integers(0, ONE), st.integers(0, ONE))
def test_float_and_fixed_w_agree_within_tolerance(flags: int, q: int, p: int) -> None:
    fx = gate_scores(flags, q / ONE, p / ONE, "fixed")
    fl = gate_scores(flags, q / ONE, p / ONE, "float")
    assert abs(fx.w - fl.w) <= TOLERANCE
    assert abs(fx.rn - fl.rn) <= TOLERANCE


def test_float_mode_engine_uses_the_float_reference() -> None:
    m = engine("float").admit("x reading", "s", flags=0x0C7F, confidence=0.3)
    assert m.gate_mode == "float"
    assert m.rn == pytest.approx((1.0 * 0.75) ** 0.25 * (0.5 * 0.75) ** 0.25)
    assert m.w == pytest.approx(0.3 * 1.0 * 0.75 * 0.5)


def test_normalise_missing_source_lowers_h_but_keeps_the_record() -> None:
    e = engine()
    m = e.admit("payload", "", flags=FLAGS_MASK)
    assert m.flags == FLAGS_MASK & ~Check.SOURCE_PRESENT
    assert m.h == 0.75
    assert e.get(m.id) is not None


def test_normalise_bad_schema_clears_schema_valid() -> None:
    m = engine().admit(b"", "s", flags=FLAGS_MASK)
    assert not m.flags & Check.SCHEMA_VALID and m.h == 0.75


@pytest.mark.parametrize(("flags", "reason"), [
    (0x07FF, "domination"), (0x0BFF, "consent"), (0x0FBF, "invariant"), (0x0FF0, "honesty"),
])  # fmt: skip
def test_hard_fails_quarantine_directly(flags: int, reason: str) -> None:
    e = engine()
    src = "s" if flags & Check.SOURCE_PRESENT else ""
    m = e.admit("payload" if flags & Check.SCHEMA_VALID else b"", src, flags=flags)
    assert m.state is State.QUARANTINED and reason in m.quarantine_reason
    assert m.permanent is (m.r == 0)


def test_zero_quality_zeroes_w_and_quarantines_even_when_green() -> None:
    m = engine().admit("payload", "s", confidence=0.0)
    assert m.rn == 1.0 and m.w == 0.0
    assert m.state is State.QUARANTINED and "W = 0" in m.quarantine_reason


def test_high_w_is_a_shorter_path_than_low_w() -> None:
    e = engine()
    strong = e.admit("yellow strong", "s", flags=0x0C7F, confidence=1.0)
    weak = e.admit("yellow weak", "s", flags=0x0C7F, confidence=0.2)
    assert strong.state is weak.state is State.CANDIDATE
    assert strong.strength > weak.strength
