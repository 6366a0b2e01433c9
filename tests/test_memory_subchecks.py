"""Sub-checks the host can evaluate, it evaluates (issue 13, §5): structural consistency
from the payload's own schema (bit 7), baseline alignment against the distilled pattern
of the reading's sensor (bit 4). Where the device asserted otherwise the host's finding
stands and the disagreement is an ``intake-mismatch`` record in the audit chain."""

from __future__ import annotations

import json
import random

import pytest

from hirmem.memory import distill
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.intake import intake_records
from hirmem.memory.model import State
from hirmem.protocol.gate import FLAGS_MASK, Check
from hirmem.protocol.records import (
    GENESIS,
    Record,
    host_flags,
    record_id,
    structurally_consistent,
    withheld,
)

DEV = bytes.fromhex("5b5b5b5b5b5b5b01")
T0 = 1_790_000_000_000
CONTEXT = bytes(range(32))
STRUCT = int(Check.STRUCTURALLY_CONSISTENT)
BASE = int(Check.BASELINE_ALIGNED)


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b'{"t": 21.5}', True),
        (b'  {"subject": "door", "attribute": "state", "value": "open"}', True),
        (b'{"action": ["reset", "wait"], "result": "up", "outcome": "success"}', True),
        (b"[1, 2, 3]", True),
        (b"door open", None),  # free text declares no schema: the device's word
        (b"\x00\x01binary", None),
        (b'{"t": 21.5', False),  # cut short
        (b'{"t": NaN}', False),
        (b'{"t": Infinity}', False),
        (b'{"t": 1, "t": 2}', False),  # which t?
        (b'{"subject": "door", "attribute": "state"}', False),  # a fact without its value
        (b'{"subject": "door", "attribute": "state", "value": {"x": 1}}', False),
        (b'{"subject": "door", "attribute": "state", "value": true}', False),
        (b'{"action": "reset"}', False),  # an action without its outcome
        (b'{"action": [], "outcome": "success"}', False),
        (b'{"outcome": "success"}', False),
        (b'{"t": "\xff"}', False),  # not UTF-8
    ],
)
def test_the_host_reads_structure_from_the_payloads_schema(
    payload: bytes, expected: bool | None
) -> None:
    assert structurally_consistent(payload) is expected


def _rec(seq: int, payload: bytes, flags: int, link: bytes, q: int = 0x10000) -> Record:
    return Record.capture(record_id(DEV, 1, seq), payload, "temp0", T0 + 1000 * seq, CONTEXT,
                          flags, q, 0xE666, 0x8000, link)  # fmt: skip


def _mismatches(engine: MemoryEngine, mid: str) -> list[str]:
    return [str(r.detail["reason"]) for r in engine.audit.records(mid)
            if r.action == "intake-mismatch"]  # fmt: skip


def test_a_device_overruled_on_structure_is_recorded_both_ways() -> None:
    engine = MemoryEngine(":memory:")
    garbled = _rec(1, b'{"subject": "door", "attribute": "state"}', FLAGS_MASK, GENESIS)
    honest = _rec(2, b'{"t": 21.5}', FLAGS_MASK & ~STRUCT, garbled.hash)
    text = _rec(3, b"door open", FLAGS_MASK & ~STRUCT, honest.hash)
    report = intake_records(engine, [garbled, honest, text], DEV, b"kid", GENESIS)
    g, h, t = (engine.require(r.id.hex()) for r in (garbled, honest, text))
    assert not g.flags & STRUCT and h.flags & STRUCT
    assert not t.flags & STRUCT  # free text: the device said failed, and that stands
    assert "structurally_consistent failed" in _mismatches(engine, g.id)[0]
    assert "structurally_consistent passed" in _mismatches(engine, h.id)[0]
    assert _mismatches(engine, t.id) == []
    assert set(report.disagreed) == {g.id, h.id}
    assert engine.verify_audit().ok


def test_the_record_guard_and_the_engine_agree_on_structure() -> None:
    """Differential over random flag words and payloads, broken ones included: the
    engine quarantines a record exactly when :func:`withheld` keeps it out (bit 7 is
    read from the payload by both)."""
    rng = random.Random(7)
    payloads = [b'{"t": 21.5}', b'{"t": NaN}', b'{"t": 1, "t": 2}', b"plain text",
                b'{"subject": "a", "attribute": "b"}', b'{"action": "x", "outcome": "ok"}',
                b'{"action": "x"}', b'{"t": 2']  # fmt: skip
    engine = MemoryEngine(":memory:")
    link, records = GENESIS, []
    for n in range(1, 801):
        rec = _rec(100 + n, rng.choice(payloads), rng.randrange(0x1000), link,
                   q=rng.choice([0x10000, 0x8000]))  # fmt: skip
        records.append(rec)
        link = rec.hash
    intake_records(engine, records, DEV, b"kid", GENESIS)
    disagree = [
        (r.payload, hex(r.flags)) for r in records
        if (engine.require(r.id.hex()).state is State.QUARANTINED) != bool(withheld(r))
    ]  # fmt: skip
    assert disagree == []
    # and the host's structural finding moved some gate: a flag word alone did not decide
    moved = [r for r in records if host_flags(r, True)[0] & STRUCT != r.flags & STRUCT]
    assert len(moved) > 100


def _readings(start: int, values: list[float], flags: list[int], link: bytes) -> list[Record]:
    out = []
    for j, (v, f) in enumerate(zip(values, flags, strict=True)):
        rec = _rec(start + j, json.dumps({"t": v}).encode(), f, link)
        out.append(rec)
        link = rec.hash
    return out


def test_a_reading_is_aligned_against_its_sensors_distilled_baseline() -> None:
    """Before the pattern rests on ``baseline_min_episodes`` readings the device's bit
    stands; after it, the host's: an outlier the device called aligned fails, a usual
    value the device called misaligned passes, and both disagreements are recorded."""
    engine = MemoryEngine(":memory:")
    need = engine.config.baseline_min_episodes
    rng = random.Random(3)
    usual = [round(21.0 + rng.uniform(-0.2, 0.2), 2) for _ in range(need)]
    # the first reading says misaligned: there is no baseline yet, so that stands
    first = _readings(1, usual, [FLAGS_MASK & ~BASE] + [FLAGS_MASK] * (need - 1), GENESIS)
    intake_records(engine, first, DEV, b"kid", GENESIS)
    m1 = engine.require(first[0].id.hex())
    assert not m1.flags & BASE and _mismatches(engine, m1.id) == []
    [pattern] = distill.patterns(engine)
    assert pattern.stats.n == need
    later = _readings(need + 1, [35.0, 21.05, 21.1], [FLAGS_MASK, FLAGS_MASK & ~BASE, FLAGS_MASK],
                      first[-1].hash)  # fmt: skip
    report = intake_records(engine, later, DEV, b"kid", first[-1].hash)
    out, usual_one, agreeing = (engine.require(r.id.hex()) for r in later)
    assert not out.flags & BASE and "baseline_aligned failed" in _mismatches(engine, out.id)[0]
    assert usual_one.flags & BASE
    assert "baseline_aligned passed" in _mismatches(engine, usual_one.id)[0]
    assert agreeing.flags & BASE and _mismatches(engine, agreeing.id) == []
    assert set(report.disagreed) == {out.id, usual_one.id}
    assert out.i < usual_one.i  # the host's finding is what the gate weighed
    assert engine.verify_audit().ok
