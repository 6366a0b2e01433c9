"""The audit chain's remembered detail encodings give exactly the fresh encoding.

:func:`hirmem.memory.audit._body` keeps the CBOR of recurring details (the gate's scores
of a device's readings, lifecycle steps) by the detail's repr. Values Python holds equal
but CBOR writes apart (1, 1.0, True; 0.0, -0.0; text and bytes) must never share an
entry, a refused detail must be refused every time, and the memory is bounded.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hirmem.memory import audit
from hirmem.protocol import cbor
from hirmem.protocol.errors import CborError, HirmemError

KEYS = sorted(audit.DETAIL_KEYS)


def fresh(detail: dict[str, Any]) -> bytes:
    """The encoding without any memory: checked, then encoded by the strict encoder."""
    return cbor.encode(audit._clean_detail(detail))


def test_values_equal_in_python_are_encoded_apart() -> None:
    lookalikes: list[object] = [1, 1.0, True, 0, 0.0, -0.0, False, None, "1", b"1", "1.0",
                                [1], (1,), [True and 1], 2**63, float(2**63), 1e300]  # fmt: skip
    rng = random.Random(3)
    for _ in range(2000):
        detail = {k: rng.choice(lookalikes) for k in rng.sample(KEYS[:6], rng.randrange(1, 4))}
        assert audit._body(detail) == fresh(detail), detail


values = st.one_of(
    st.integers(-(2**64), 2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.text(max_size=30),
    st.binary(max_size=40),
    st.lists(st.integers(-(2**63), 2**63), max_size=7),
)


@settings(max_examples=1500, deadline=None)
@given(st.dictionaries(st.sampled_from(KEYS), values, max_size=8), st.integers(1, 3))
def test_remembered_bodies_are_the_fresh_ones(detail: dict[str, Any], again: int) -> None:
    for _ in range(again):  # the first call may remember it, the next ones read it back
        assert audit._body(detail) == fresh(detail)


def test_refusals_are_never_remembered() -> None:
    for _ in range(3):
        with pytest.raises(HirmemError, match="MEM-INV-8"):
            audit._body({"biometric": 1})
        with pytest.raises(HirmemError, match="longer than"):
            audit._body({"reason": "x" * 600})
        with pytest.raises(HirmemError, match="not finite"):
            audit._body({"x": float("nan")})
        with pytest.raises(CborError, match="64 bits"):
            audit._body({"count": 2**64})


class _Key(str):
    """A str subclass equal to a detail key: the encoder refuses it as a map key, and a
    remembered body of the plain key must not answer for it."""


def test_a_key_that_only_looks_like_one_is_refused_every_time() -> None:
    plain = {"reason": "ok"}
    audit._body(plain)  # remembered
    for _ in range(2):
        with pytest.raises(CborError, match="keys are integers"):
            audit._body({_Key("reason"): "ok"})


def test_bounded() -> None:
    for n in range(audit._BODIES_MAX + 500):
        audit._body({"count": n, "reason": "bounded"})
        assert len(audit._BODIES) <= audit._BODIES_MAX
