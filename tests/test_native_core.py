"""The C core's fixed point, HIR gate and working-memory ring (firmware/core/hm_fixed,
hm_gate, hm_ring).

Fixed point and gate are checked against protocol/vectors (fixed_point.json,
gate.json) and, differentially, against the host's reference (``hirmem.protocol.fixedpoint``,
``hirmem.protocol.gate``, ``hirmem.protocol.records.normalise``; ``math.isqrt`` behind isqrt_round).
The ring is checked by scenarios a device owner would notice (which record a full
ring evicts, when it refuses, what the ids and counters say) and by random operation
sequences run against a small Python model of the same rules (:class:`RingModel`),
comparing every answer and the whole ring after every operation.

Each test drives build/host/t_core once with a batch of requests (see
tests/native/t_core.c for the request notation). t_core also checks the ring's
invariants (hm_ring.h I1..I8) after every ring request and exits on a broken one.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import load_vectors
from hirmem.protocol.errors import HirmemError
from hirmem.protocol.fixedpoint import ONE, isqrt_round, q_mul, q_sqrt, q_sqrt_mul
from hirmem.protocol.gate import FLAGS_MASK, GateResult, evaluate
from hirmem.protocol.records import normalise
from native_harness import Arg, run

Request = tuple[str, Sequence[Arg]]
Answer = list[Arg | str]

DEVICE = bytes.fromhex("0102030405060708")
BOOT = 7
ZERO_CTX = bytes(32)
U64_MAX = (1 << 64) - 1
MAX_PAYLOAD = 256
MAX_SOURCE = 64
ARENA = 2048
CAPACITY = 16

VOLATILE, CANDIDATE, QUARANTINED = 0, 1, 3
ALL_PASS = FLAGS_MASK
DOMINATION = 0x07FF  # no_domination clear: a hard fail, quarantined


def core(requests: Sequence[Request]) -> list[Answer]:
    return run("t_core", requests)


def gate_answer(result: GateResult) -> Answer:
    return [
        result.h,
        result.i,
        result.r,
        result.f,
        result.c,
        result.rn,
        result.w,
        int(result.verdict),
        int(result.hard),
        int(result.disposition),
    ]


def record_id(seq: int, device: bytes = DEVICE, boot: int = BOOT) -> bytes:
    return device + boot.to_bytes(4, "big") + seq.to_bytes(4, "big")


# --------------------------------------------------------------------------------------
# Fixed point


def test_fixed_point_vectors() -> None:
    vectors = load_vectors("fixed_point")
    requests: list[Request] = []
    expected: list[Answer] = []
    for case in vectors["mul"]:
        requests.append(("mul", [case["a"], case["b"]]))
        expected.append([case["result"]])
    for case in vectors["isqrt_round"]:
        requests.append(("isqrt", [case["n"]]))
        expected.append([case["result"]])
    for case in vectors["sqrt"]:
        requests.append(("sqrt", [case["a"]]))
        expected.append([case["result"]])
    for case in vectors["sqrt_mul"]:
        requests.append(("sqrt_mul", [case["a"], case["b"]]))
        expected.append([case["result"]])
    assert len(requests) == 46
    assert core(requests) == expected


def isqrt_inputs(rng: random.Random) -> list[int]:
    edges = {0, 1, 2, 3, 4, U64_MAX, U64_MAX - 1, 1 << 62, 1 << 63, (1 << 32) - 1, 1 << 32}
    edges |= {(1 << 64) - (1 << 32) + d for d in (-1, 0, 1, 2)}  # where the result is 2^32
    for root in (1, 2, 3, 255, 256, 0xFFFF, 0x10000, 0xB504F333, 0xFFFFFFFE, 0xFFFFFFFF):
        # squares and their neighbours, and the half-way points r*r + r (+1)
        edges |= {root * root + d for d in (-1, 0, 1)} | {root * root + root + d for d in (0, 1)}
    values = [n for n in edges if 0 <= n <= U64_MAX]
    for _ in range(20000):
        bits = rng.randint(1, 64)  # every magnitude, not only the huge ones
        values.append(rng.getrandbits(bits))
    for _ in range(5000):
        root = rng.getrandbits(32)
        values.extend(n for n in (root * root - 1, root * root, root * root + root) if n >= 0)
    return values


def test_isqrt_round_matches_host() -> None:
    values = isqrt_inputs(random.Random(0x15C7))
    answers = core([("isqrt", [n]) for n in values])
    for n, answer in zip(values, answers, strict=True):
        assert answer == [isqrt_round(n)], f"isqrt_round({n})"
    # an independent check of the oracle: nearest integer, from math.isqrt
    assert isqrt_round(U64_MAX) == 1 << 32 == math.isqrt(U64_MAX) + 1


def test_selftest_of_the_c_core() -> None:
    """C-only checks: isqrt against the SPEC's bit-by-bit method over 1M + 4M inputs,
    mul overflow bounds, and ring invariants reachable only from C (NULL pointers,
    seq exhaustion, bytes staying put across evictions, LIFO slot reuse). A failure
    answers "fail" and the line of tests/native/t_core.c that failed."""
    assert core([("selftest", [])]) == [["ok"]]


def test_mul_matches_host_and_errors_on_overflow() -> None:
    rng = random.Random(0x3017)
    pairs = [(0xFFFFFFFF, ONE), (0xFFFFFFFF, ONE + 1), (0xFFFFFFFF, 0xFFFFFFFF), (0, 0xFFFFFFFF)]
    pairs += [(0x10000, 0xFFFF8000), (0x10001, 0xFFFF0000), (0x8000, 1), (0x7FFF, 1)]
    pairs += [(rng.getrandbits(32), rng.getrandbits(rng.randint(1, 32))) for _ in range(5000)]
    answers = core([("mul", [a, b]) for a, b in pairs])
    overflows = 0
    for (a, b), answer in zip(pairs, answers, strict=True):
        try:
            expected: Answer = [q_mul(a, b)]
        except ValueError:
            expected = ["overflow"]
            overflows += 1
        assert answer == expected, f"mul({a:#x}, {b:#x})"
    assert overflows > 100  # both outcomes are exercised


def test_sqrt_and_sqrt_mul_match_host() -> None:
    rng = random.Random(0x5027)
    singles = [0, 1, 0xFFFFFFFF, ONE, 0x8000, 0xC000] + [rng.getrandbits(32) for _ in range(3000)]
    pairs = [(0xFFFFFFFF, 0xFFFFFFFF), (ONE, ONE), (0, 5)]
    pairs += [(rng.getrandbits(32), rng.getrandbits(rng.randint(1, 32))) for _ in range(3000)]
    requests: list[Request] = [("sqrt", [a]) for a in singles]
    requests += [("sqrt_mul", [a, b]) for a, b in pairs]
    expected: list[Answer] = [[q_sqrt(a)] for a in singles]
    expected += [[q_sqrt_mul(a, b)] for a, b in pairs]
    assert core(requests) == expected


# --------------------------------------------------------------------------------------
# Gate


def test_gate_vectors() -> None:
    cases = load_vectors("gate")["cases"]
    answers = core([("gate", [c["flags"], c["quality"], c["provenance"]]) for c in cases])
    for case, answer in zip(cases, answers, strict=True):
        fields = ("h", "i", "r", "f", "c", "rn", "w", "verdict", "hard", "state")
        assert answer == [case[k] for k in fields], f"gate.json flags {case['flags']:#06x}"


Q_GRID = (0, 1, 181, 182, 0x7FFF, 0x8000, 0xE666, 0xFFFF, ONE)
P_GRID = (ONE, 0xB333, 0x8000, 2)


def test_gate_equals_host_for_every_flag_word() -> None:
    """All 4096 flag words x a Q/P grid (edges, ties, underflow) plus random Q/P."""
    rng = random.Random(0x6A7E)
    inputs = [(f, q, p) for f in range(FLAGS_MASK + 1) for q in Q_GRID for p in P_GRID]
    inputs += [(f, rng.randint(0, ONE), rng.randint(0, ONE)) for f in range(FLAGS_MASK + 1)]
    answers = core([("gate", list(x)) for x in inputs])
    for (flags, q, p), answer in zip(inputs, answers, strict=True):
        assert answer == gate_answer(evaluate(flags, q, p)), f"gate({flags:#06x}, {q:#x}, {p:#x})"


def test_gate_refuses_reserved_bits_and_scores_above_one() -> None:
    cases: list[tuple[int, int, int, str]] = [
        (ALL_PASS | 1 << bit, ONE, ONE, "reserved") for bit in range(12, 16)
    ]
    cases += [
        (0x10000, ONE, ONE, "reserved"),
        (0xFFFF, ONE + 1, ONE, "reserved"),  # flags are checked first, as on the host
        (ALL_PASS, ONE + 1, ONE, "range"),
        (ALL_PASS, ONE, ONE + 1, "range"),
        (0, 0xFFFFFFFF, 0, "range"),
    ]
    answers = core([("gate", [f, q, p]) for f, q, p, _ in cases])
    for (flags, q, p, word), answer in zip(cases, answers, strict=True):
        assert answer == [word]
        with pytest.raises(HirmemError):
            evaluate(flags, q, p)


def random_text(rng: random.Random, max_bytes: int) -> str:
    alphabet = "abcXYZ09 _-é€😀\u00a0ß"
    text = ""
    while True:
        ch = rng.choice(alphabet)
        if len((text + ch).encode()) > max_bytes or rng.random() < 0.08:
            return text
        text += ch


def test_normalise_matches_host() -> None:
    rng = random.Random(0x40AA)
    cases: list[tuple[int, bytes, str, int, bytes]] = []
    for _ in range(4000):
        payload = bytes(rng.choice((0, 1, 255, 256, 257, 300, rng.randint(0, 300))))
        source = random_text(rng, rng.choice((0, 10, 64, 70, 90)))
        if rng.random() < 0.1:
            source = "é" * 32 + rng.choice(("", "a"))  # exactly 64 bytes, or 65
        timestamp = rng.choice((0, 1, U64_MAX, rng.getrandbits(44)))
        context = bytes(rng.choice((32, 32, 0, 31, 33, 64)))
        cases.append((rng.getrandbits(16), payload, source, timestamp, context))
    requests: list[Request] = [
        ("normalise", [f, pl, src.encode(), ts, ctx]) for f, pl, src, ts, ctx in cases
    ]
    answers = core(requests)
    seen = set()
    for case, answer in zip(cases, answers, strict=True):
        expected = normalise(*case)
        assert answer == [expected], case
        seen.add(expected & 0x000C)
    assert seen == {0x0, 0x4, 0x8, 0xC}


# --------------------------------------------------------------------------------------
# Ring: requests


def init(capacity: int = CAPACITY, arena: int = ARENA, boot: int = BOOT) -> Request:
    return ("ring_init", [capacity, arena, DEVICE, boot])


def capture(
    payload: bytes = b"p", source: bytes = b"", timestamp: int = 1, context: bytes = ZERO_CTX
) -> Request:
    return ("ring_capture", [payload, source, timestamp, context])


def op(name: str, *args: Arg) -> Request:
    return ("ring_" + name, list(args))


COUNTERS = op("counters")
COUNTER_NAMES = (
    "captures",
    "evictions",
    "refusals",
    "quarantines",
    "candidates",
    "used",
    "volatiles",
    "pinned",
    "arena_used",
)


def counters(answer: Answer) -> dict[str, Arg | str]:
    return dict(zip(COUNTER_NAMES, answer, strict=True))


def live_seqs(answer: Answer) -> dict[int, Arg | str]:
    """ring_list answer -> {slot: seq}."""
    return {int(str(answer[k])): answer[k + 1] for k in range(0, len(answer), 4)}


# --------------------------------------------------------------------------------------
# Ring: behaviour a device owner notices


def test_ids_carry_device_boot_and_sequence() -> None:
    answers = core(
        [
            init(boot=0x01020304),
            capture(b"a"),
            capture(bytes(MAX_PAYLOAD + 1)),  # refused: uses no sequence number
            capture(b"b", b"temp0", 1_780_000_000_000, bytes(range(32))),
            op("get", 1),
        ]
    )
    boot = 0x01020304
    assert answers[1] == ["ok", 0, record_id(1, boot=boot)]
    assert answers[2] == ["refused_invalid"]
    assert answers[3] == ["ok", 1, record_id(2, boot=boot)]
    assert answers[4] == [
        "ok", record_id(2, boot=boot), VOLATILE, 0, 0, b"b", b"temp0",
        1_780_000_000_000, bytes(range(32)),
    ]  # fmt: skip


def test_full_ring_evicts_the_least_recently_accessed_volatile_record() -> None:
    answers = core(
        [
            init(capacity=4),
            *(capture(bytes([k])) for k in range(4)),  # seqs 1..4 in slots 0..3
            capture(b"e"),  # evicts seq 1 (slot 0), the oldest
            op("get", 1),  # seq 2 is now the most recently accessed ...
            op("peek", 2),  # ... and a peek is not an access
            capture(b"f"),  # so seq 3 (slot 2) goes, not seq 2
            op("list"),
            COUNTERS,
        ]
    )
    assert answers[5] == ["ok", 0, record_id(5)]
    assert answers[8] == ["ok", 2, record_id(6)]
    assert live_seqs(answers[9]) == {0: 5, 1: 2, 2: 6, 3: 4}
    assert counters(answers[10])["evictions"] == 2


def test_candidates_quarantined_and_pinned_are_never_evicted() -> None:
    answers = core(
        [
            init(capacity=3),
            capture(b"a", b"s", 5),
            capture(b"b", b"s", 5),
            capture(b"c", b"s", 5),
            op("gate", 0, ALL_PASS, ONE, ONE, 0),  # candidate
            op("gate", 1, DOMINATION, ONE, ONE, 0),  # quarantined (hard fail)
            op("pin", 1, 42),
            capture(b"d"),  # the only volatile record (slot 2) is evicted
            op("state", 2, CANDIDATE),
            capture(b"e"),  # nothing evictable left: backpressure
            capture(b""),  # not even an empty record
            op("list"),
            COUNTERS,
        ]
    )
    assert answers[4][:1] == ["ok"] and answers[4][-1] == CANDIDATE
    assert answers[5][:1] == ["ok"] and answers[5][-1] == QUARANTINED
    assert answers[7] == ["ok", 2, record_id(4)]
    assert answers[9] == ["refused_full"]
    assert answers[10] == ["refused_full"]
    assert answers[11] == [0, 1, CANDIDATE, 0, 1, 2, QUARANTINED, 42, 2, 4, CANDIDATE, 0]
    assert counters(answers[12]) == {
        "captures": 6,
        "evictions": 1,
        "refusals": 2,
        "quarantines": 1,
        "candidates": 2,
        "used": 3,
        "volatiles": 0,
        "pinned": 1,
        "arena_used": 3 * 64,  # three 64-byte blocks
    }


def test_arena_exhaustion_evicts_even_with_free_slots() -> None:
    big = [bytes([k]) * MAX_PAYLOAD for k in range(8)]  # 8 x 256 bytes fill 2048
    answers = core(
        [
            init(),
            *(capture(b) for b in big),
            capture(b""),  # 0 bytes: fits a full arena, no eviction
            COUNTERS,
            capture(b"x"),  # 8 slots free but no block: evicts seq 1
            COUNTERS,
            op("get", 1),  # the other records' bytes are untouched
            op("get", 7),
        ]
    )
    assert answers[9][:1] == ["ok"]
    assert counters(answers[10])["evictions"] == 0
    assert answers[11] == ["ok", 0, record_id(10)]  # slot 0 freed last, reused first
    c = counters(answers[12])
    assert (c["evictions"], c["used"], c["arena_used"]) == (1, 9, 7 * 256 + 64)
    assert answers[13][5] == big[1]
    assert answers[14][5] == big[7]


def test_arena_full_of_gated_records_refuses_and_counts() -> None:
    big = bytes(MAX_PAYLOAD)
    requests = [init()]
    for k in range(8):
        requests += [capture(big, b"", 9), op("gate", k, ALL_PASS, ONE, ONE, 0)]
    requests += [capture(b"x"), COUNTERS, op("list")]
    answers = core(requests)
    assert answers[-3] == ["refused_full"]
    c = counters(answers[-2])
    assert (c["refusals"], c["evictions"], c["used"], c["candidates"]) == (1, 0, 8, 8)
    assert len(answers[-1]) == 8 * 4


def test_a_record_needs_a_contiguous_run_of_blocks() -> None:
    """The arena is 32 blocks of 64 bytes; a record's bytes are one run of blocks.

    Volatile and candidate records alternate, 4 blocks each. A 4-block record
    evicts just the least recently accessed volatile one; a 5-block record fits
    nowhere, even with every volatile record gone, so it is refused at once and
    nothing is evicted (the host frees the candidates by acknowledging their packs).
    """
    quarter = bytes(MAX_PAYLOAD)  # 4 blocks
    requests = [init()]
    requests += [capture(quarter) for _ in range(8)]  # blocks 0-3, 4-7, ... 28-31
    requests += [op("gate", k, ALL_PASS, ONE, ONE, 0) for k in (1, 3, 5, 7)]
    requests += [
        op("get", 0),  # seq 1 is no longer the least recently accessed: seq 3 is
        capture(quarter, b"s"),  # 257 bytes, 5 blocks: no run of 5 can form
        COUNTERS,
        capture(quarter),  # evicts seq 3 (slot 2, blocks 8-11) and takes its run
        op("list"),
        COUNTERS,
    ]
    answers = core(requests)[14:]
    assert answers[0] == ["refused_full"]
    assert counters(answers[1])["evictions"] == 0
    assert answers[2] == ["ok", 2, record_id(9)]
    assert live_seqs(answers[3]) == {0: 1, 1: 2, 2: 9, 3: 4, 4: 5, 5: 6, 6: 7, 7: 8}
    c = counters(answers[4])
    assert (c["evictions"], c["refusals"], c["arena_used"]) == (1, 1, ARENA)


def test_refusal_evicts_nothing_when_evicting_everything_would_not_help() -> None:
    answers = core(
        [
            init(capacity=4, arena=400),  # 32 blocks of 12 bytes
            capture(bytes(200)),
            op("gate", 0, ALL_PASS, ONE, ONE, 0),  # a candidate holds 17 blocks
            capture(bytes(100)),  # volatile, 9 blocks
            capture(bytes(MAX_PAYLOAD)),  # needs 22 of the 15 left: evicting seq 2 won't do
            op("list"),
            COUNTERS,
        ]
    )
    assert answers[4] == ["refused_full"]
    assert live_seqs(answers[5]) == {0: 1, 1: 2}  # the volatile record is still there
    assert counters(answers[6])["evictions"] == 0


def test_invalid_captures_are_refused_and_counted() -> None:
    answers = core(
        [
            init(),
            capture(bytes(MAX_PAYLOAD + 1)),
            capture(b"a", bytes(MAX_SOURCE + 1)),
            capture(b"a", b"", 1, bytes(31)),  # no 32-byte context
            capture(bytes(MAX_PAYLOAD), bytes(MAX_SOURCE)),  # the largest valid record
            COUNTERS,
        ]
    )
    assert answers[1:4] == [["refused_invalid"]] * 3
    assert answers[4] == ["ok", 0, record_id(1)]
    c = counters(answers[5])
    assert (c["captures"], c["refusals"], c["used"], c["arena_used"]) == (4, 3, 1, 320)


def test_released_slots_are_reused_and_only_acknowledged_records_leave() -> None:
    requests = [init(capacity=4)]
    for k in range(4):
        requests += [capture(bytes([k])), op("gate", k, ALL_PASS, ONE, ONE, 0)]
    requests += [
        op("release", 2),  # not in a pack: the host does not hold it
        op("pin", 2, 7),
        op("pin", 3, 7),
        op("pin", 3, 8),  # already pinned
        capture(b"z"),  # full of candidates
        op("release", 2),
        capture(b"y"),  # takes the released slot, no eviction
        op("unpin", 3),  # the pack was refused: packable again, still held
        op("release", 3),
        op("list"),
        COUNTERS,
    ]
    answers = core(requests)[9:]
    assert answers[0] == ["bad_state"]
    assert answers[1:4] == [["ok"], ["ok"], ["bad_state"]]
    assert answers[4] == ["refused_full"]
    assert answers[5] == ["ok"]
    assert answers[6] == ["ok", 2, record_id(5)]
    assert answers[7:9] == [["ok"], ["bad_state"]]
    assert live_seqs(answers[9]) == {0: 1, 1: 2, 2: 5, 3: 4}
    c = counters(answers[10])
    assert (c["evictions"], c["refusals"], c["used"], c["pinned"]) == (0, 1, 4, 0)


def test_only_volatile_to_candidate_or_quarantined_transitions() -> None:
    answers = core(
        [
            init(capacity=4),
            capture(b"a"),
            capture(b"b"),
            op("state", 0, 2),  # consolidation is the host's
            op("state", 0, 4),
            op("state", 0, 0),
            op("state", 0, 5),
            op("state", 3, CANDIDATE),  # free slot
            op("state", 99, CANDIDATE),
            op("state", 0, CANDIDATE),
            op("state", 0, QUARANTINED),  # a device never re-judges a record
            op("state", 1, QUARANTINED),
            op("gate", 1, ALL_PASS, ONE, ONE, 0),
            op("pin", 0, 0),
            COUNTERS,
        ]
    )
    assert answers[3:6] == [["bad_state"]] * 3
    assert answers[6] == ["bad_arg"]
    assert answers[7:9] == [["no_record"]] * 2
    assert answers[9:12] == [["ok"], ["bad_state"], ["ok"]]
    assert answers[12] == ["bad_state"]
    assert answers[13] == ["bad_arg"]
    c = counters(answers[14])
    assert (c["candidates"], c["quarantines"], c["volatiles"]) == (1, 1, 0)


def test_ring_gate_normalises_against_the_record_like_the_host() -> None:
    """hm_ring_gate = records.normalise on the stored fields, then gate.evaluate."""
    rng = random.Random(0x9A7E)
    cases = []
    for _ in range(300):
        payload = bytes(rng.choice((0, 1, 10, 256)))
        source = random_text(rng, rng.choice((0, 8, 64)))
        timestamp = rng.choice((0, 1_780_000_000_000))
        flags = rng.getrandbits(12)
        q, p, prio = rng.randint(0, ONE), rng.randint(0, ONE), rng.randint(0, ONE)
        cases.append((payload, source, timestamp, flags, q, p, prio))
    requests = [init(capacity=1)]
    for payload, source, timestamp, flags, q, p, prio in cases:
        requests += [
            capture(payload, source.encode(), timestamp),
            op("gate", 0, flags, q, p, prio),
            op("pin", 0, 1),
            op("release", 0),
        ]
    answers = core(requests)[1:]
    for k, (payload, source, timestamp, flags, q, p, _prio) in enumerate(cases):
        normalised = normalise(flags, payload, source, timestamp, ZERO_CTX)
        assert answers[4 * k + 1] == ["ok", normalised, *gate_answer(evaluate(normalised, q, p))]


def test_pack_iteration_in_capture_order() -> None:
    packable = 0x100 | 1 << CANDIDATE | 1 << QUARANTINED
    requests = [init(capacity=4)]
    requests += [capture(bytes([k])) for k in range(4)]
    requests += [
        op("gate", 2, ALL_PASS, ONE, ONE, 0),
        op("gate", 0, DOMINATION, ONE, ONE, 0),
        op("release", 1),  # volatile: stays
        op("next", 0, packable),
        op("next", 1, packable),
        op("next", 3, packable),
        op("pin", 2, 5),
        op("next", 0, packable),
        op("next", 0, 0x200 | 1 << CANDIDATE),  # pinned candidates
        op("next", 0, 1 << VOLATILE),
    ]
    assert core(requests)[7:] == [["bad_state"], [0], [2], [-1], ["ok"], [0], [2], [1]]


def test_chain_fields_are_stored_for_the_pack_builder() -> None:
    h, prev = bytes(range(32)), bytes(range(32, 64))
    answers = core(
        [
            init(capacity=2),
            capture(),
            op("chain", 0, h, prev),  # volatile: not packable yet
            op("gate", 0, ALL_PASS, ONE, ONE, 0),
            op("hashes", 0),
            op("chain", 0, h, prev),
            op("hashes", 0),
            op("pin", 0, 3),
            op("chain", 0, prev, h),  # a pinned record's chain is fixed
            op("unpin", 0),
            op("hashes", 0),
        ]
    )
    assert answers[2] == ["bad_state"]
    assert answers[4] == [0, ZERO_CTX, ZERO_CTX]
    assert answers[5:7] == [["ok"], [1, h, prev]]
    assert answers[8] == ["bad_state"]
    assert answers[10] == [0, h, prev]  # unpinned: the next pack links it anew


# --------------------------------------------------------------------------------------
# Ring: model-based


BLOCKS = 32


@dataclass
class ModelRecord:
    seq: int
    payload: bytes
    source: bytes
    timestamp: int
    context: bytes
    block: int
    nblocks: int
    state: int = VOLATILE
    pack: int = 0

    @property
    def blocks(self) -> set[int]:
        return set(range(self.block, self.block + self.nblocks))


def first_fit(free: set[int], count: int) -> int | None:
    """Lowest start of ``count`` consecutive free blocks among the 32."""
    for start in range(BLOCKS - count + 1):
        if all(b in free for b in range(start, start + count)):
            return start
    return None


class RingModel:
    """The ring's rules in Python: hm_ring.h's contract, independent of the C code.

    Slots are taken from a LIFO free list (slot 0 first after init). The arena is 32
    blocks of arena // 32 bytes; a record takes the lowest run of free blocks that
    holds its payload and source. A capture evicts volatile records least recently
    accessed first until a slot and such a run are free, unless that is impossible
    even with every volatile record gone: then it refuses without evicting.
    """

    def __init__(self, capacity: int, arena: int, boot: int) -> None:
        self.block_size = arena // BLOCKS
        self.boot = boot
        self.slots: list[ModelRecord | None] = [None] * capacity
        self.free = list(range(capacity))  # head first
        self.recency: list[int] = []  # volatile slots, most recently accessed first
        self.seq = 0
        self.count = dict.fromkeys(COUNTER_NAMES[:5], 0)

    def live(self, index: int) -> ModelRecord | None:
        return self.slots[index] if 0 <= index < len(self.slots) else None

    def _free(self, index: int) -> None:
        assert self.slots[index] is not None
        self.slots[index] = None
        self.free.insert(0, index)

    def free_blocks(self, *, without_volatiles: bool = False) -> set[int]:
        held = set(range(BLOCKS))
        for rec in self.slots:
            if rec is not None and not (without_volatiles and rec.state == VOLATILE):
                held -= rec.blocks
        return held

    def capture(self, payload: bytes, source: bytes, timestamp: int, context: bytes) -> Answer:
        self.count["captures"] += 1
        if len(payload) > MAX_PAYLOAD or len(source) > MAX_SOURCE or len(context) != 32:
            self.count["refusals"] += 1
            return ["refused_invalid"]
        count = -(-(len(payload) + len(source)) // self.block_size)
        if (not self.free and not self.recency) or (
            count and first_fit(self.free_blocks(without_volatiles=True), count) is None
        ):
            self.count["refusals"] += 1
            return ["refused_full"]
        while True:
            block = first_fit(self.free_blocks(), count) if count else 0
            if self.free and block is not None:
                break
            self._free(self.recency.pop())
            self.count["evictions"] += 1
        index = self.free.pop(0)
        self.seq += 1
        self.slots[index] = ModelRecord(self.seq, payload, source, timestamp, context, block, count)
        self.recency.insert(0, index)
        return ["ok", index, record_id(self.seq, boot=self.boot)]

    def get(self, index: int, access: bool) -> Answer:
        rec = self.live(index)
        if rec is None:
            return ["none"]
        if access and rec.state == VOLATILE:
            self.recency.remove(index)
            self.recency.insert(0, index)
        layer = 0 if rec.state == VOLATILE else 1
        return [
            "ok", record_id(rec.seq, boot=self.boot), rec.state, layer, rec.pack,
            rec.payload, rec.source, rec.timestamp, rec.context,
        ]  # fmt: skip

    def set_state(self, index: int, state: int) -> Answer:
        rec = self.live(index)
        if rec is None:
            return ["no_record"]
        if state > 4:
            return ["bad_arg"]
        if rec.state != VOLATILE or state not in (CANDIDATE, QUARANTINED):
            return ["bad_state"]
        self.recency.remove(index)
        rec.state = state
        self.count["candidates" if state == CANDIDATE else "quarantines"] += 1
        return ["ok"]

    def gate(self, index: int, flags: int, q: int, p: int, priority: int) -> Answer:
        rec = self.live(index)
        if rec is None:
            return ["no_record"]
        if rec.state != VOLATILE:
            return ["bad_state"]
        if priority > ONE:
            return ["bad_arg"]
        flags = normalise(flags, rec.payload, rec.source.decode(), rec.timestamp, rec.context)
        try:
            result = evaluate(flags, q, p)
        except HirmemError:
            return ["bad_arg"]
        assert self.set_state(index, int(result.disposition)) == ["ok"]
        return ["ok", flags, *gate_answer(result)]

    def pin(self, index: int, pack: int) -> Answer:
        rec = self.live(index)
        if rec is None:
            return ["no_record"]
        if pack == 0:
            return ["bad_arg"]
        if rec.state == VOLATILE or rec.pack:
            return ["bad_state"]
        rec.pack = pack
        return ["ok"]

    def unpin(self, index: int) -> Answer:
        rec = self.live(index)
        if rec is None:
            return ["no_record"]
        if not rec.pack:
            return ["bad_state"]
        rec.pack = 0
        return ["ok"]

    def release(self, index: int) -> Answer:
        rec = self.live(index)
        if rec is None:
            return ["no_record"]
        if not rec.pack:
            return ["bad_state"]
        self._free(index)
        return ["ok"]

    def by_pack(self, pack: int) -> list[int]:
        return [i for i, r in enumerate(self.slots) if pack and r is not None and r.pack == pack]

    def next(self, after: int, select: int) -> Answer:
        best: tuple[int, int] | None = None
        for index, rec in enumerate(self.slots):
            if rec is None or rec.seq <= after or not select & 1 << rec.state:
                continue
            if (select & 0x100 and rec.pack) or (select & 0x200 and not rec.pack):
                continue
            if best is None or rec.seq < best[0]:
                best = (rec.seq, index)
        return [best[1] if best else -1]

    def counters(self) -> Answer:
        held = [r for r in self.slots if r is not None]
        volatiles = [r for r in held if r.state == VOLATILE]
        pinned = [r for r in held if r.pack]
        c = self.count
        return [
            c["captures"], c["evictions"], c["refusals"], c["quarantines"], c["candidates"],
            len(held), len(volatiles), len(pinned),
            sum(r.nblocks for r in held) * self.block_size,
        ]  # fmt: skip

    def listing(self) -> Answer:
        answer: Answer = []
        for index, rec in enumerate(self.slots):
            if rec is not None:
                answer += [index, rec.seq, rec.state, rec.pack]
        return answer


PAYLOAD_LENGTHS = (0, 1, 3, 7, 30, 64, 100, 200, 255, 256, 257)
SOURCE_LENGTHS = (0, 1, 5, 64, 65)
FLAG_CHOICES = (ALL_PASS, DOMINATION, 0x0F73, 0x0C7F, 0x0D4F)
SELECTORS = (0x1FF, 0x100 | 0b1010, 0x200 | 0b1010, 0b0001, 0b1000, 0x100 | 0b0010)

Op = tuple[int, int, int, int]
OP_KINDS = 13


def scenario(ops: Sequence[Op], capacity: int, arena: int) -> tuple[list[Request], list[Answer]]:
    """Requests for one random operation sequence and the model's expected answers.

    Each op is (kind, a, b, c) of small ints, mapped onto a ring request; indexes
    mostly name live records. After every op the whole ring is compared: the live
    slots with seq, state and pin, the counters and the recency order.
    """
    model = RingModel(capacity, arena, BOOT)
    requests: list[Request] = [init(capacity, arena)]
    expected: list[Answer] = [["ok"]]

    def pick(a: int) -> int:
        live = [i for i, r in enumerate(model.slots) if r is not None]
        if live and a % 4:
            return live[(a // 4) % len(live)]
        return a % (capacity + 1)  # sometimes a free slot or one past the end

    for kind, a, b, c in ops:
        request: Request
        answer: Answer
        if kind <= 3:
            payload = bytes((a + k) & 0xFF for k in range(PAYLOAD_LENGTHS[a % 11]))
            source = bytes(0x61 + (b + k) % 26 for k in range(SOURCE_LENGTHS[b % 5]))
            context = bytes([c & 0xFF]) * (31 if c % 17 == 0 else 32)
            request = capture(payload, source, c, context)
            answer = model.capture(payload, source, c, context)
        elif kind in (4, 5):
            index = pick(a)
            request = op("get" if kind == 4 else "peek", index)
            answer = model.get(index, access=kind == 4)
        elif kind == 6:
            index = pick(a)
            flags = FLAG_CHOICES[c % 5] if b % 3 else b & (0xFFFF if b % 7 == 0 else 0x0FFF)
            q = ONE + 1 if c % 23 == 0 else (b * 7919) % (ONE + 1)
            p = (c * 104729) % (ONE + 1)
            priority = ONE + 1 if c % 29 == 0 else c % (ONE + 1)
            request = op("gate", index, flags, q, p, priority)
            answer = model.gate(index, flags, q, p, priority)
        elif kind == 7:
            index, state = pick(a), b % 6
            request = op("state", index, state)
            answer = model.set_state(index, state)
        elif kind == 8:
            index, pack = pick(a), b % 4
            request = op("pin", index, pack)
            answer = model.pin(index, pack)
        elif kind == 9:
            index = pick(a)
            request = op("unpin", index)
            answer = model.unpin(index)
        elif kind == 10:
            index = pick(a)
            request = op("release", index)
            answer = model.release(index)
        elif kind == 11:
            pack = b % 4
            indexes = model.by_pack(pack)
            if a % 2:
                request = op("release_pack", pack)
                for index in indexes:
                    model.release(index)
            else:
                request = op("unpin_pack", pack)
                for index in indexes:
                    model.unpin(index)
            answer = [len(indexes)]
        else:
            after, select = a % (model.seq + 2), SELECTORS[b % len(SELECTORS)]
            request = op("next", after, select)
            answer = model.next(after, select)
        requests += [request, op("list"), COUNTERS, op("lru")]
        expected += [answer, model.listing(), model.counters(), list(model.recency)]
    return requests, expected


def assert_scenario(requests: list[Request], expected: list[Answer]) -> None:
    answers = core(requests)
    for k, (answer, want) in enumerate(zip(answers, expected, strict=True)):
        if answer != want:
            context = "\n".join(f"  {r[0]} {list(r[1])}" for r in requests[max(0, k - 12) : k + 1])
            raise AssertionError(
                f"request {k}: C answered {answer!r}, model expects {want!r}; "
                f"the requests up to it:\n{context}"
            )


def random_ops(rng: random.Random, count: int) -> list[Op]:
    ops: list[Op] = []
    for _ in range(count):
        kind = rng.randrange(OP_KINDS)
        ops.append((kind, rng.getrandbits(16), rng.getrandbits(16), rng.getrandbits(16)))
    return ops


def test_ring_against_model_random_sequences() -> None:
    """300 seeded random sequences of 60 operations, one batch, all compared."""
    rng = random.Random(0x41A6)
    requests: list[Request] = []
    expected: list[Answer] = []
    for _ in range(300):
        capacity = rng.choice((1, 2, 3, 4, 5, 8, CAPACITY))
        arena = rng.choice((320, 400, 512, 700, ARENA))
        reqs, exps = scenario(random_ops(rng, 60), capacity, arena)
        requests += reqs
        expected += exps
    assert_scenario(requests, expected)
    # the sequences reach the interesting cases
    words = {str(a[0]) for a in expected if a and isinstance(a[0], str)}
    assert {"refused_full", "refused_invalid", "bad_state", "bad_arg", "no_record"} <= words
    finals = [a for r, a in zip(requests, expected, strict=True) if r[0] == "ring_counters"]
    assert max(int(str(a[1])) for a in finals) > 10  # evictions happened


op_codes = st.tuples(
    st.integers(0, OP_KINDS - 1),
    st.integers(0, 0xFFFF),
    st.integers(0, 0xFFFF),
    st.integers(0, 0xFFFF),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(op_codes, max_size=50),
    capacity=st.integers(1, 5),
    arena=st.sampled_from((320, 400, 700)),
)
def test_ring_against_model_hypothesis(ops: list[Op], capacity: int, arena: int) -> None:
    """The same model check with shrinking: a failure reduces to a short sequence."""
    assert_scenario(*scenario(ops, capacity, arena))


def test_model_oracle_on_a_hand_checked_run() -> None:
    """Guard the oracle: the model's eviction matches a case worked out by hand."""
    model = RingModel(2, 320, BOOT)
    assert model.capture(b"a", b"", 1, ZERO_CTX) == ["ok", 0, record_id(1)]
    assert model.capture(b"b", b"", 1, ZERO_CTX) == ["ok", 1, record_id(2)]
    assert model.get(0, access=True)[0] == "ok"
    assert model.capture(b"c", b"", 1, ZERO_CTX) == ["ok", 1, record_id(3)]  # seq 2 evicted
    assert model.counters()[:3] == [3, 1, 0]
