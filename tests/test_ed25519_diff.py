"""Ed25519 right for every key: the C core and MicroPython against OpenSSL.

5,000 random seeds and messages on the C core (build/host/t_crypto, with sanitizers)
and 2,000 on MicroPython (the unix port): each must derive OpenSSL's public key and
signature, accept the signature and refuse one mutation of it. The cases come from
tools/ed25519_diff.py, which runs many more (``--count``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

import ed25519_diff
from mp_run import MICROPYTHON


def check(target: str, count: int, seed: int) -> None:
    cases = ed25519_diff.make_cases(count, seed)
    # About one clamped scalar in eight carries into the top radix-16 digit: the seeds
    # a recoding that drops that carry gets wrong must be among the cases.
    assert sum(ed25519_diff.top_digit_carries(c.seed) for c in cases) > count // 10
    # Every mutation is one OpenSSL refuses, so the implementation must refuse it too.
    assert not any(c.mutated_valid for c in cases)
    assert {c.mutation for c in cases} == set(ed25519_diff.MUTATIONS)
    answers = ed25519_diff.TARGETS[target](ed25519_diff.requests_of(cases))
    mismatches = ed25519_diff.compare(cases, answers)
    assert not mismatches, [m.describe() for m in mismatches[:5]]


def test_c_core_against_openssl() -> None:
    check("c", 5000, 0xED25519)


@pytest.mark.skipif(MICROPYTHON is None, reason="micropython not installed")
def test_micropython_against_openssl() -> None:
    check("mp", 2000, 0x25519ED)
