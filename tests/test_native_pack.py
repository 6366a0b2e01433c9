"""The C core's records and packs (firmware/core/hm_record, hm_pack).

Checked against protocol/vectors (records.json, packs.json) rebuilt from the inputs
tools/gen_vectors.py used, and differentially against the host reference:

- packs the C packer builds for random capture sequences are accepted by
  ``hirmem.protocol.packs.verify_pack`` with the host's chain head, and carry exactly the
  records ``Record.capture`` computes from the same captures;
- knowledge packs the host signs, intact and mutated, get the same status and reason
  from the C verifier as from ``verify_pack(kind=KNOWLEDGE, require_chain=False)``;
- PACK_RESULT and HELLO_ACK handling: accepted packs free their records, refused ones
  put them back into the ring for the next pack, no record is lost, no seq reused.

Each test drives build/host/t_pack (see tests/native/t_pack.c for the requests); the
program checks the packer invariants of hm_pack.h after every request.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any

import pytest

from conftest import DEVICE_ID, DEVICE_KEY, HOST_ID, HOST_KEY, OTHER_ID, OTHER_KEY, load_vectors
from hirmem.protocol import cbor, identity
from hirmem.protocol.errors import PackError
from hirmem.protocol.keys import PublicKey, SigningKey
from hirmem.protocol.packs import (
    ChainHead,
    KnowledgeItem,
    Pack,
    PackKind,
    Reason,
    TrustedKey,
    pack_id,
    protected_header,
    sig_structure,
    sign_pack,
    verify_pack,
)
from hirmem.protocol.records import GENESIS, Record, record_id
from native_harness import Arg, run

Request = tuple[str, Sequence[Arg]]
Answer = list[Arg | str]

T0 = 1_780_000_000_000
ONE = 0x10000
ACCEPTED, DUPLICATE, REFUSED, DEFERRED = 0, 1, 2, 3
STATUS_NAMES = ("accepted", "duplicate", "refused", "deferred")

MEMORY_KEYS = {DEVICE_KEY.kid: TrustedKey(DEVICE_KEY.public, DEVICE_ID, PackKind.MEMORY)}
# what a device trusts: the host key, for knowledge packs only
DEVICE_TRUST = {HOST_KEY.kid: TrustedKey(HOST_KEY.public, HOST_ID, PackKind.KNOWLEDGE)}


def pack_prog(requests: Sequence[Request]) -> list[Answer]:
    return run("t_pack", requests)


def as_int(field: Arg | str) -> int:
    assert isinstance(field, int), field
    return field


def as_bytes(field: Arg | str) -> bytes:
    assert isinstance(field, bytes), field
    return field


@dataclass(frozen=True)
class Limits:
    pending: int
    knowledge_capacity: int
    knowledge_text: int
    min_cap: int
    record_max: int
    ring_capacity: int


@cache
def limits() -> Limits:
    (answer,) = pack_prog([("limits", [])])
    return Limits(*(as_int(x) for x in answer))


def init(boot: int, key: SigningKey = DEVICE_KEY, device: bytes = DEVICE_ID) -> Request:
    return ("init", [device, boot, key.seed(), key.kid])


def reason_word(reason: int) -> str:
    return Reason(reason).name.lower().replace("_", "-")


# --------------------------------------------------------------------------------------
# Captures, the inputs of records


@dataclass(frozen=True)
class Capture:
    payload: bytes
    source: str
    timestamp: int
    context: bytes
    flags: int
    quality: int
    provenance: int
    priority: int

    def request(self) -> Request:
        return (
            "capture",
            [
                self.payload,
                self.source.encode(),
                self.timestamp,
                self.context,
                self.flags,
                self.quality,
                self.provenance,
                self.priority,
            ],
        )

    def record(self, rid: bytes, prev_hash: bytes) -> Record:
        return Record.capture(
            rid,
            self.payload,
            self.source,
            self.timestamp,
            self.context,
            self.flags,
            self.quality,
            self.provenance,
            self.priority,
            prev_hash,
        )

    @classmethod
    def of(cls, rec: Record) -> Capture:
        return cls(
            rec.payload,
            rec.source,
            rec.timestamp,
            rec.context,
            rec.flags,
            rec.confidence,
            rec.provenance,
            rec.priority,
        )


SOURCE_CHARS = "abcxyz_-0123 .:/äéßİΩжд中文🙂\t"


def random_text(rng: random.Random, max_bytes: int) -> str:
    out = ""
    for _ in range(rng.randint(0, max_bytes)):
        ch = rng.choice(SOURCE_CHARS)
        if len((out + ch).encode()) > max_bytes:
            break
        out += ch
    return out


def random_q(rng: random.Random) -> int:
    return rng.choice([0, 1, 0x8000, 0xC000, 0xFFFF, ONE, rng.randint(0, ONE), rng.randint(0, ONE)])


def random_capture(rng: random.Random) -> Capture:
    size = rng.choice([0, 1, 10, rng.randint(0, 256), rng.randint(0, 64), 256])
    return Capture(
        rng.randbytes(size),
        random_text(rng, rng.choice([0, 8, 64])),
        rng.choice([0, T0 + rng.randint(0, 10**6), rng.randint(1, (1 << 64) - 1)]),
        rng.randbytes(32),
        rng.choice([0x0FFF, 0x0F3F, 0x07FF, rng.randint(0, 0x0FFF)]),
        random_q(rng),
        random_q(rng),
        random_q(rng),
    )


# --------------------------------------------------------------------------------------
# Records: records.json bit for bit


def test_selftest_of_records_and_packs() -> None:
    """C-only checks: the largest record and HM_PACK_MIN_CAP, seq exhaustion, writer
    overflow and aliasing, non-UTF-8 sources, the pending table, wipe, too-large."""
    assert pack_prog([("selftest", [])]) == [["ok"]]


def test_records_vector_bit_for_bit(gen_vectors: ModuleType) -> None:
    """records.json from the generator's own inputs (record_chain: device 01..08, boot 7,
    genesis prev): wire bytes, hash input, hash and prev_hash of each record."""
    chain: list[Record] = gen_vectors.record_chain()
    vector = load_vectors("records")["chain"]
    assert len(chain) == len(vector) == 3
    requests: list[Request] = [init(7)]
    requests += [Capture.of(rec).request() for rec in chain]
    prev = GENESIS
    for index, rec in enumerate(chain):
        requests.append(("record", [index, prev]))
        prev = rec.hash
    answers = pack_prog(requests)
    for n, (rec, case) in enumerate(zip(chain, vector, strict=True)):
        assert answers[1 + n] == ["ok", n, n + 1, rec.state]
        wire, digest, hash_input = answers[4 + n]
        assert as_bytes(wire).hex() == case["wire"]
        assert as_bytes(hash_input).hex() == case["hash_input"]
        assert as_bytes(digest).hex() == case["hash"] == rec.hash.hex()
        assert hashlib.sha256(as_bytes(hash_input)).digest() == digest
        assert cbor.decode(as_bytes(wire))[19].hex() == case["prev_hash"]


def test_random_records_equal_host_records() -> None:
    """Record wire bytes and hashes for random captures equal Record.capture's."""
    rng = random.Random(0x2EC0)
    captures = [random_capture(rng) for _ in range(200)]
    prevs = [rng.randbytes(32) for _ in captures]
    requests: list[Request] = []
    for cap, prev in zip(captures, prevs, strict=True):
        # one record at a time: a fresh ring, so the id is boot 3, seq 1
        requests += [init(3), cap.request(), ("record", [0, prev])]
    answers = pack_prog(requests)
    for k, (cap, prev) in enumerate(zip(captures, prevs, strict=True)):
        expected = cap.record(record_id(DEVICE_ID, 3, 1), prev)
        wire, digest, hash_input = answers[3 * k + 2]
        assert wire == cbor.encode(expected.to_wire()), cap
        assert digest == expected.hash
        assert hash_input == cbor.encode(
            [expected.id, cap.payload, cap.source, cap.timestamp, cap.context, prev]
        )


# --------------------------------------------------------------------------------------
# Memory packs: packs.json bit for bit


def vector_case(name: str) -> dict[str, Any]:
    cases: list[dict[str, Any]] = load_vectors("packs")["cases"]
    return next(c for c in cases if c["name"] == name)


@pytest.mark.parametrize("report_first", [False, True], ids=["pipelined", "after-accept"])
def test_vector_packs_bit_for_bit(gen_vectors: ModuleType, report_first: bool) -> None:
    """The first two packs of packs.json from the same records, seed, seq, prev and
    created time (Ed25519 is deterministic): once with the second pack built while
    the first awaits its result, once after the host accepted the first."""
    first: Pack
    second: Pack
    first, second, _ = gen_vectors.sample_packs()
    boot = 7
    requests: list[Request] = [init(boot)]
    requests += [Capture.of(r).request() for r in first.items if isinstance(r, Record)]
    requests.append(("build", [first.created, 4096]))
    if report_first:
        requests.append(("result", [first.seq, ACCEPTED, 0]))
    requests += [Capture.of(r).request() for r in second.items if isinstance(r, Record)]
    requests += [("build", [second.created, 4096]), ("packer", [])]
    answers = pack_prog(requests)
    built = [a for a in answers if a and a[0] == "ok" and len(a) == 4 and isinstance(a[2], bytes)]
    assert len(built) == 2
    for answer, pack, name in (
        (built[0], first, "first pack of a device (genesis)"),
        (built[1], second, "second pack chained to the first"),
    ):
        case = vector_case(name)
        assert answer[1] == pack.seq == (boot << 32) | int(case["expect"]["pack_id"][-8:], 16)
        assert as_bytes(answer[2]).hex() == case["pack"]
        assert as_bytes(answer[3]).hex() == case["expect"]["hash"]
    last_seq, host_seq, host_hash, prev, next_seq, npending, *pending = answers[-1]
    assert (last_seq, prev, next_seq) == (second.seq, second.hash, second.seq + 1)
    if report_first:
        assert (host_seq, host_hash, npending, pending) == (first.seq, first.hash, 1, [second.seq])
    else:
        assert (host_seq, host_hash, npending, pending) == (0, GENESIS, 2, [first.seq, second.seq])


# --------------------------------------------------------------------------------------
# PACK_RESULT and HELLO_ACK handling


@dataclass
class Counters:
    built: int
    acked: int
    duplicates: int
    refused: int
    deferred: int
    abandoned: int
    head_acked: int
    records_sent: int
    records_released: int
    records_returned: int
    unsendable: int
    last_reason: int

    @classmethod
    def parse(cls, answer: Answer) -> Counters:
        return cls(*(as_int(x) for x in answer))


@dataclass
class RingState:
    used: int
    pinned: int
    volatiles: int
    captures: int
    refusals: int

    @classmethod
    def parse(cls, answer: Answer) -> RingState:
        return cls(*(as_int(x) for x in answer))


def built_pack(answer: Answer) -> tuple[int, bytes, bytes]:
    assert answer[0] == "ok", answer
    return as_int(answer[1]), as_bytes(answer[2]), as_bytes(answer[3])


def record_ids(pack: bytes) -> list[bytes]:
    """The record ids a pack carries (read without verifying)."""
    payload = cbor.decode(cbor.decode(pack).value[2])
    return [rec[0] for rec in payload[6]]


def simple_capture(n: int) -> Capture:
    return Capture(f"reading {n}".encode(), f"s{n}", T0 + n, bytes([n]) * 32, 0x0FFF, ONE, ONE, ONE)


def rids(boot: int, *seqs: int) -> list[bytes]:
    return [record_id(DEVICE_ID, boot, s) for s in seqs]


def test_accepted_pack_releases_its_records() -> None:
    boot = 2
    answers = pack_prog(
        [
            init(boot),
            *(simple_capture(n).request() for n in range(3)),
            ("build", [T0, 2048]),
            ("ring", []),
            ("result", [(boot << 32) | 1, ACCEPTED, 0]),
            ("ring", []),
            ("counters", []),
            ("build", [T0, 2048]),
            ("packer", []),
        ]
    )
    seq, pack, digest = built_pack(answers[4])
    verified = verify_pack(pack, MEMORY_KEYS, None, PackKind.MEMORY)
    assert not verified.duplicate and verified.pack.hash == digest
    assert RingState.parse(answers[5]) == RingState(3, 3, 0, 3, 0)  # pinned, not freed
    assert answers[6] == ["ok"]
    assert RingState.parse(answers[7]) == RingState(0, 0, 0, 3, 0)
    assert Counters.parse(answers[8]) == Counters(1, 1, 0, 0, 0, 0, 0, 3, 3, 0, 0, 0)
    assert answers[9] == ["nothing"]
    assert answers[10][:3] == [seq, seq, digest]  # the host head is that pack
    # a result for a pack that is no longer pending changes nothing
    again = pack_prog([init(boot), ("result", [seq, ACCEPTED, 0])])
    assert again[1] == ["unknown"]


def test_refused_pack_records_return_and_go_into_the_next_pack() -> None:
    """Refused: the records stay in the ring, unpinned, and the next pack carries them
    first (capture order), under a new seq, linked to the host's head (genesis)."""
    boot = 4
    s1 = (boot << 32) | 1
    answers = pack_prog(
        [
            init(boot),
            *(simple_capture(n).request() for n in range(3)),
            ("build", [T0, 2048]),
            ("result", [s1, REFUSED, int(Reason.BAD_RECORD)]),
            ("ring", []),
            ("ring_list", []),
            ("counters", []),
            simple_capture(3).request(),
            ("build", [T0 + 1, 2048]),
            ("counters", []),
        ]
    )
    first_seq, first, _ = built_pack(answers[4])
    assert first_seq == s1
    assert answers[5] == ["ok"]
    assert RingState.parse(answers[6]) == RingState(3, 0, 0, 3, 0)  # all there, unpinned
    assert answers[7] == [1, 1, 0, 0, 2, 1, 0, 0, 3, 1, 0, 0]  # seq state pinned chained
    counters = Counters.parse(answers[8])
    assert (counters.refused, counters.records_returned, counters.last_reason) == (1, 3, 10)
    seq, pack, _ = built_pack(answers[10])
    assert seq == s1 + 1  # the refused seq is burnt
    assert record_ids(pack) == rids(boot, 1, 2, 3, 4)
    verified = verify_pack(pack, MEMORY_KEYS, None, PackKind.MEMORY)
    assert verified.pack.prev == GENESIS
    assert record_ids(first) == rids(boot, 1, 2, 3)
    counters = Counters.parse(answers[11])
    assert (counters.built, counters.records_sent, counters.records_returned) == (2, 7, 3)


def test_deferred_pack_is_repacked_like_a_refused_one() -> None:
    boot = 5
    s1 = (boot << 32) | 1
    answers = pack_prog(
        [
            init(boot),
            simple_capture(0).request(),
            ("build", [T0, 2048]),
            ("result", [s1, DEFERRED, int(Reason.STORAGE)]),
            ("build", [T0, 2048]),
            ("counters", []),
        ]
    )
    seq, pack, _ = built_pack(answers[4])
    assert seq == s1 + 1 and record_ids(pack) == rids(boot, 1)
    verify_pack(pack, MEMORY_KEYS, None, PackKind.MEMORY)
    counters = Counters.parse(answers[5])
    assert (counters.deferred, counters.refused, counters.last_reason) == (1, 0, 11)


def test_refusal_abandons_the_packs_linked_to_it() -> None:
    """P1 and P2 (linked to P1) in flight; P1 refused: P2 can never be accepted, so its
    records come back at once; the next pack links to the host head, and P2's own
    (broken-chain) result later is unknown and changes nothing."""
    boot = 6
    s1, s2 = (boot << 32) | 1, (boot << 32) | 2
    answers = pack_prog(
        [
            init(boot),
            simple_capture(0).request(),
            simple_capture(1).request(),
            ("build", [T0, 2048]),
            simple_capture(2).request(),
            ("build", [T0, 2048]),
            ("result", [s1, REFUSED, int(Reason.BAD_SIGNATURE)]),
            ("ring", []),
            ("counters", []),
            ("build", [T0 + 9, 2048]),
            ("result", [s2, REFUSED, int(Reason.BROKEN_CHAIN)]),
            ("counters", []),
        ]
    )
    _, p1, h1 = built_pack(answers[3])
    _, p2, _ = built_pack(answers[5])
    assert record_ids(p1) == rids(boot, 1, 2) and record_ids(p2) == rids(boot, 3)
    assert cbor.decode(cbor.decode(p2).value[2])[4] == h1  # P2 linked to P1
    assert RingState.parse(answers[7]) == RingState(3, 0, 0, 3, 0)
    counters = Counters.parse(answers[8])
    assert (counters.refused, counters.abandoned, counters.records_returned) == (1, 1, 3)
    seq3, p3, _ = built_pack(answers[9])
    assert seq3 == s2 + 1 and record_ids(p3) == rids(boot, 1, 2, 3)
    # the host: P2 links to a pack it never accepted; P3 to its head
    with pytest.raises(PackError) as err:
        verify_pack(p2, MEMORY_KEYS, None, PackKind.MEMORY)
    assert err.value.reason == Reason.BROKEN_CHAIN
    assert verify_pack(p3, MEMORY_KEYS, None, PackKind.MEMORY).pack.prev == GENESIS
    assert answers[10] == ["unknown"]
    after = Counters.parse(answers[11])
    assert (after.refused, after.abandoned, after.records_returned) == (1, 1, 3)
    assert (after.built, after.records_sent) == (3, 6)


def test_refusal_of_a_later_pack_links_the_next_to_the_earlier_pending_one() -> None:
    """P1 and P2 in flight; P2 deferred before P1's result: the next pack links to P1
    (the host may still accept it), and it is accepted after P1 is."""
    boot = 8
    s1, s2 = (boot << 32) | 1, (boot << 32) | 2
    answers = pack_prog(
        [
            init(boot),
            simple_capture(0).request(),
            ("build", [T0, 2048]),
            simple_capture(1).request(),
            ("build", [T0, 2048]),
            ("result", [s2, DEFERRED, int(Reason.STORAGE)]),
            ("build", [T0, 2048]),
            ("result", [s1, ACCEPTED, 0]),
            ("result", [s2 + 1, ACCEPTED, 0]),
            ("ring", []),
        ]
    )
    _, p1, h1 = built_pack(answers[2])
    _, p3, _ = built_pack(answers[6])
    head = ChainHead(s1, verify_pack(p1, MEMORY_KEYS, None, PackKind.MEMORY).pack.hash)
    assert head.hash == h1
    assert verify_pack(p3, MEMORY_KEYS, head, PackKind.MEMORY).pack.prev == h1
    assert record_ids(p3) == rids(boot, 2)
    assert answers[7:9] == [["ok"], ["ok"]]
    assert RingState.parse(answers[9]).used == 0


def test_accepting_a_later_pack_releases_the_earlier_ones_and_duplicate_counts() -> None:
    boot = 9
    s1, s2 = (boot << 32) | 1, (boot << 32) | 2
    answers = pack_prog(
        [
            init(boot),
            simple_capture(0).request(),
            ("build", [T0, 2048]),
            simple_capture(1).request(),
            ("build", [T0, 2048]),
            ("result", [s2, DUPLICATE, 0]),
            ("result", [s1, ACCEPTED, 0]),
            ("ring", []),
            ("counters", []),
            ("packer", []),
        ]
    )
    _, _, h2 = built_pack(answers[4])
    assert answers[5:7] == [["ok"], ["unknown"]]
    assert RingState.parse(answers[7]).used == 0
    counters = Counters.parse(answers[8])
    assert (counters.acked, counters.duplicates, counters.records_released) == (1, 1, 2)
    assert answers[9][1:3] == [s2, h2]


def test_hello_ack_head_releases_held_packs_and_repacks_the_rest() -> None:
    """SPEC §8.5 on a HELLO_ACK: pending packs at or below pack_seq are held by the
    host (records freed), the ones above are not (records packed again), and the
    next pack continues above everything signed, linked to pack_hash."""
    boot = 10
    seqs = [(boot << 32) | n for n in (1, 2, 3)]
    requests: list[Request] = [init(boot)]
    for n in range(3):
        requests += [simple_capture(n).request(), ("build", [T0 + n, 2048])]
    answers_before = pack_prog(requests)
    packs = [built_pack(answers_before[2 + 2 * n]) for n in range(3)]
    head = ChainHead(seqs[1], packs[1][2])
    answers = pack_prog(
        [
            *requests,
            ("head", [head.seq, head.hash]),
            ("ring", []),
            ("counters", []),
            ("build", [T0 + 5, 2048]),
            ("result", [seqs[2], REFUSED, 9]),
            ("packer", []),
        ]
    )
    assert answers[: len(requests)] == answers_before
    k = len(requests)
    assert RingState.parse(answers[k + 1]) == RingState(1, 0, 0, 3, 0)
    counters = Counters.parse(answers[k + 2])
    assert (counters.head_acked, counters.abandoned, counters.records_released) == (2, 1, 2)
    assert counters.records_returned == 1
    seq, pack, digest = built_pack(answers[k + 3])
    assert seq == seqs[2] + 1 and record_ids(pack) == rids(boot, 3)
    assert verify_pack(pack, MEMORY_KEYS, head, PackKind.MEMORY).pack.hash == digest
    assert answers[k + 4] == ["unknown"]  # the old session's pack is gone
    assert answers[k + 5][:6] == [seq, head.seq, head.hash, digest, seq + 1, 1]


@pytest.mark.parametrize(
    ("head_seq", "expected"),
    [
        (0, (7 << 32) | 1),
        ((6 << 32) | 99, (7 << 32) | 1),  # an earlier boot: n restarts at 1
        ((7 << 32) | 41, (7 << 32) | 42),  # at or above this boot: continue above the head
        ((9 << 32) | 3, (9 << 32) | 4),  # the boot counter did not persist
    ],
)
def test_next_seq_continues_above_the_host_head(head_seq: int, expected: int) -> None:
    h = GENESIS if head_seq == 0 else hashlib.sha256(b"head %d" % head_seq).digest()
    answers = pack_prog(
        [init(7), ("head", [head_seq, h]), simple_capture(0).request(), ("build", [T0, 2048])]
    )
    seq, pack, _ = built_pack(answers[3])
    assert seq == expected
    head = None if head_seq == 0 else ChainHead(head_seq, h)
    assert verify_pack(pack, MEMORY_KEYS, head, PackKind.MEMORY).pack.seq == expected


def test_a_pack_holds_as_many_records_as_fit_in_capture_order() -> None:
    """The cap bounds the whole pack; the records are a prefix in capture order;
    volatile records are never packed; a cap below one record builds nothing."""
    boot = 11
    big = Capture(bytes(200), "big", T0, bytes(32), 0x0FFF, ONE, ONE, ONE)
    alone = sign_pack(
        DEVICE_KEY,
        PackKind.MEMORY,
        DEVICE_ID,
        (boot << 32) | 1,
        GENESIS,
        T0,
        [big.record(record_id(DEVICE_ID, boot, 1), GENESIS)],
    ).encoded
    requests: list[Request] = [init(boot), big.request(), big.request()]
    requests += [("capturev", [b"volatile", b"v", T0, bytes(32)]), big.request()]
    requests += [("build", [T0, len(alone) - 1]), ("build", [T0, len(alone)])]
    requests += [("build", [T0, 5000]), ("build", [T0, 5000]), ("ring", [])]
    answers = pack_prog(requests)
    assert answers[5] == ["space"]
    _, first, _ = built_pack(answers[6])
    assert first == alone  # exactly the host's pack of that one record
    _, two, _ = built_pack(answers[7])
    assert record_ids(two) == rids(boot, 2, 4)
    assert answers[8] == ["nothing"]
    assert RingState.parse(answers[9]) == RingState(4, 3, 1, 4, 0)


# --------------------------------------------------------------------------------------
# Differential: random capture sequences, the host verifies what the C packer builds


class Device:
    """The C device (t_pack), driven by replaying its whole request history: each
    ``run`` re-executes every request so far (t_pack is deterministic; the replay
    must give the same answers as before)."""

    def __init__(self, boot: int) -> None:
        self.requests: list[Request] = [init(boot)]
        self.answers: list[Answer] = []

    def send(self, cmd: str, args: Sequence[Arg]) -> int:
        self.requests.append((cmd, list(args)))
        return len(self.requests) - 1

    def run(self) -> list[Answer]:
        answers = pack_prog(self.requests)
        assert answers[: len(self.answers)] == self.answers, "replay diverged"
        self.answers = answers
        return answers

    def ask(self, cmd: str, args: Sequence[Arg]) -> Answer:
        index = self.send(cmd, args)
        return self.run()[index]


class Scenario:
    """One device, one host: captures, packs in flight, host verdicts, HELLO_ACKs."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.boot = self.rng.randint(1, 1 << 20)
        self.dev = Device(self.boot)
        self.head: ChainHead | None = None
        self.captures: dict[int, Capture] = {}  # request index -> a gated capture
        self.in_flight: list[tuple[int, bytes]] = []  # offered, not seen by the host yet
        self.pending: list[int] = []  # mirror of the packer's pending seqs
        self.built: list[int] = []
        self.delivered: dict[bytes, Record] = {}
        self.accepted = self.refused = self.deferred = 0
        self.abandoned = self.head_acked = 0

    def start(self) -> None:
        roll = self.rng.random()
        if roll < 0.25:  # the host holds packs of an earlier boot
            self.hello(ChainHead(((self.boot - 1) << 32) | 5, self.rng.randbytes(32)))
        elif roll < 0.4:  # ... or of this boot counter (a device without persistent seq)
            self.hello(ChainHead((self.boot << 32) | 17, self.rng.randbytes(32)))

    def hello(self, head: ChainHead | None) -> None:
        """A new session: the device drops its unanswered offers (hm_pack.h) and takes
        the host's head."""
        self.head = head
        held = [s for s in self.pending if head is not None and s <= head.seq]
        self.head_acked += len(held)
        self.abandoned += len(self.pending) - len(held)
        self.in_flight.clear()
        self.pending.clear()
        self.dev.send("head", [0, GENESIS] if head is None else [head.seq, head.hash])

    def capture_some(self) -> None:
        for _ in range(self.rng.randint(0, 4)):
            cap = random_capture(self.rng)
            if self.rng.random() < 0.2:
                self.dev.send("capturev", cap.request()[1][:4])
            else:
                self.captures[self.dev.send(*cap.request())] = cap

    def capture_of(self, rid: bytes) -> Capture:
        seq = int.from_bytes(rid[12:], "big")
        for index, cap in self.captures.items():
            answer = self.dev.answers[index]
            if answer[0] == "ok" and answer[2] == seq:
                return cap
        raise AssertionError(f"record {rid.hex()} was never captured and gated")

    def build(self, cap: int) -> None:
        created = T0 + len(self.built) * 1000 + self.rng.randint(0, 999)
        answer = self.dev.ask("build", [created, cap])
        if answer == ["busy"]:
            assert len(self.pending) == limits().pending
            return
        if answer == ["nothing"]:
            return
        seq, pack, digest = built_pack(answer)
        assert len(pack) <= cap and hashlib.sha256(pack).digest() == digest
        floor = max([0, *self.built, *([self.head.seq] if self.head else [])])
        assert seq > floor, "a seq was reused or went below the host head"
        self.built.append(seq)
        self.pending.append(seq)
        self.in_flight.append((seq, pack))

    def host_answers(self, count: int, faults: bool) -> None:
        """The host verifies the oldest offers, in order, and answers each."""
        for _ in range(count):
            seq, pack = self.in_flight.pop(0)
            fate = self.rng.random() if faults else 0.5
            data = pack
            if fate < 0.1:  # damaged on the way: the signature no longer holds
                flip = bytearray(pack)
                flip[self.rng.randrange(len(flip))] ^= self.rng.randint(1, 255)
                data = bytes(flip)
            try:
                verified = verify_pack(data, MEMORY_KEYS, self.head, PackKind.MEMORY)
            except PackError as err:
                status, reason = REFUSED, err.reason
            else:
                if fate > 0.9:  # could not store it now
                    status, reason = DEFERRED, int(Reason.STORAGE)
                else:
                    status, reason = (DUPLICATE if verified.duplicate else ACCEPTED), 0
                    self.take(verified.pack)
                    if fate < 0.2:  # stored, but the session died before PACK_RESULT
                        self.hello(self.head)
                        return
            answer = self.dev.ask("result", [seq, status, reason])
            if seq not in self.pending:
                # abandoned: it linked to a pack the host refused, so it was refused too
                assert answer == ["unknown"] and status == REFUSED
                continue
            assert answer == ["ok"]
            at = self.pending.index(seq)
            if status in (ACCEPTED, DUPLICATE):
                self.accepted += 1
                del self.pending[: at + 1]
            else:
                self.refused += status == REFUSED
                self.deferred += status == DEFERRED
                self.abandoned += len(self.pending) - at - 1
                del self.pending[at:]

    def take(self, pack: Pack) -> None:
        """An accepted pack: its records are exactly Record.capture of their captures."""
        self.head = ChainHead(pack.seq, pack.hash)
        link = pack.prev
        ids = []
        for rec in pack.items:
            assert isinstance(rec, Record)
            assert rec.id not in self.delivered, "a record was delivered twice"
            assert rec == self.capture_of(rec.id).record(rec.id, link)
            self.delivered[rec.id] = rec
            ids.append(rec.id)
            link = rec.hash
        assert ids == sorted(ids)  # capture order

    def play(self) -> None:
        self.start()
        min_cap = limits().min_cap
        for _ in range(self.rng.randint(8, 16)):
            self.capture_some()
            if self.rng.random() < 0.8:
                self.build(self.rng.choice([min_cap, 700, 1000, 1500, 4096]))
            if self.rng.random() < 0.6:  # else the host stays silent for a while
                self.host_answers(self.rng.randint(0, len(self.in_flight)), faults=True)
            if self.rng.random() < 0.1:
                self.hello(self.head)
        # drain: everything gated reaches the host
        for _ in range(100):
            self.host_answers(len(self.in_flight), faults=False)
            self.build(4096)
            if not self.in_flight:
                break
        self.check_end()

    def check_end(self) -> None:
        answers = self.dev.run()
        stored = {
            record_id(DEVICE_ID, self.boot, as_int(answers[i][2]))
            for i in self.captures
            if answers[i][0] == "ok"
        }
        assert set(self.delivered) == stored, "a gated record never reached the host"
        ring = RingState.parse(self.dev.ask("ring", []))
        assert ring.pinned == 0 and ring.used == ring.volatiles
        counters = Counters.parse(self.dev.ask("counters", []))
        assert counters.built == len(self.built)
        assert counters.acked == self.accepted
        assert (counters.refused, counters.deferred) == (self.refused, self.deferred)
        assert (counters.abandoned, counters.head_acked) == (self.abandoned, self.head_acked)
        assert counters.records_released == len(self.delivered)
        assert counters.records_sent == counters.records_released + counters.records_returned
        assert self.built == sorted(set(self.built))


@pytest.mark.parametrize("seed", range(16))
def test_c_packs_are_accepted_by_the_host(seed: int) -> None:
    Scenario(0x9AC0 + seed).play()


# --------------------------------------------------------------------------------------
# Knowledge packs: packs.json and host-signed packs, intact and mutated


def host_key_request() -> Request:
    return ("k_init", [HOST_KEY.public.raw, HOST_KEY.kid, HOST_ID])


def head_requests(head: ChainHead | None) -> list[Request]:
    return [] if head is None else [("k_head", [head.seq, head.hash])]


def host_verdict(data: bytes, head: ChainHead | None) -> tuple[str, str, Pack | None]:
    try:
        verified = verify_pack(data, DEVICE_TRUST, head, PackKind.KNOWLEDGE, require_chain=False)
    except PackError as err:
        return "refused", reason_word(err.reason), None
    return ("duplicate" if verified.duplicate else "accepted"), "none", verified.pack


def fits_device(pack: Pack) -> bool:
    lim = limits()
    return len(pack.items) <= lim.knowledge_capacity and all(
        isinstance(it, KnowledgeItem)
        and all(len(s.encode()) <= lim.knowledge_text for s in (it.subject, it.predicate, it.obj))
        for it in pack.items
    )


def expected_device(
    data: bytes, head: ChainHead | None
) -> tuple[str, str, int, bytes, Pack | None]:
    """(status, reason, held seq, KNOWLEDGE_RESULT pack_id, stored pack) the device
    should answer, from the host's verify_pack."""
    status, reason, pack = host_verdict(data, head)
    held = 0 if head is None else head.seq
    pid = bytes(16)
    if pack is not None:
        pid = pack.pack_id
        if status == "accepted":
            if fits_device(pack):
                held = pack.seq
            else:
                status, reason, pack = "deferred", "storage", None
        else:
            pack = None
    elif reason in ("wrong-signer", "rollback", "replay"):  # got past step 9
        payload = cbor.decode(cbor.decode(data).value[2])
        pid = pack_id(payload[2], payload[3])
    return status, reason, held, pid, pack


def item_fields(item: KnowledgeItem) -> list[Arg | str]:
    return [
        item.triple_id,
        item.subject.encode(),
        item.predicate.encode(),
        item.obj.encode(),
        item.confidence,
    ]


def check_knowledge(cases: Sequence[tuple[str, bytes, ChainHead | None]]) -> None:
    requests: list[Request] = []
    for _, data, head in cases:
        requests += [
            host_key_request(),
            *head_requests(head),
            ("k_accept", [data]),
            ("k_items", []),
        ]
    answers = pack_prog(requests)
    at = 0
    for name, data, head in cases:
        at += 1 + len(head_requests(head))
        status, reason, held, pid, pack = expected_device(data, head)
        assert answers[at] == [status, reason, held, pid, len(pack.items) if pack else 0], name
        items: Answer = [len(pack.items) if pack else 0]
        for it in pack.items if pack else ():
            assert isinstance(it, KnowledgeItem)
            items += item_fields(it)
        assert answers[at + 1] == items, name
        at += 2


def test_knowledge_vectors() -> None:
    """Every knowledge case of packs.json, on the device: status, reason, held seq."""
    cases: list[dict[str, Any]] = load_vectors("packs")["cases"]
    knowledge = [c for c in cases if c["kind"] == "knowledge"]
    assert len(knowledge) == 3
    requests: list[Request] = []
    for case in knowledge:
        head = case["head"]
        requests.append(host_key_request())
        if head is not None:
            requests.append(("k_head", [head["seq"], bytes.fromhex(head["hash"])]))
        requests.append(("k_accept", [bytes.fromhex(case["pack"])]))
    answers = [a for a in pack_prog(requests) if len(a) == 5]
    for case, answer in zip(knowledge, answers, strict=True):
        expect = case["expect"]
        status, reason, held, pid, count = answer
        assert status == expect["status"], case["name"]
        if expect["status"] == "refused":
            assert reason == expect["reason"].replace("_", "-")
            assert held == case["head"]["seq"]
        else:
            assert reason == "none" and pid == bytes.fromhex(expect["pack_id"])
            assert held == int(expect["pack_id"][16:], 16) and count == 2


def test_every_vector_pack_pushed_to_a_device_matches_the_host() -> None:
    """All of packs.json (memory packs too) offered to a device as knowledge packs."""
    cases: list[dict[str, Any]] = load_vectors("packs")["cases"]
    check_knowledge(
        [
            (
                c["name"],
                bytes.fromhex(c["pack"]),
                None
                if c["head"] is None
                else ChainHead(c["head"]["seq"], bytes.fromhex(c["head"]["hash"])),
            )
            for c in cases
        ]
    )


def random_items(rng: random.Random, max_text: int, count: int) -> list[KnowledgeItem]:
    items = []
    for _ in range(count):
        s, p, o = (random_text(rng, max_text) for _ in range(3))
        tid = bytes.fromhex(identity.triple_id(s, p, o))
        items.append(KnowledgeItem(tid, s, p, o, random_q(rng)))
    return items


def cose(
    key: SigningKey,
    payload: bytes,
    protected: bytes | None = None,
    unprotected: dict[Any, Any] | None = None,
    tag: int = 18,
) -> bytes:
    prot = protected_header(key.kid) if protected is None else protected
    sig = key.sign(sig_structure(prot, payload))
    return cbor.encode(cbor.Tag(tag, [prot, unprotected or {}, payload, sig]))


def payload_of(pack: Pack) -> list[Any]:
    decoded: list[Any] = cbor.decode(cbor.decode(pack.encoded).value[2])
    return decoded


BAD_VALUES: list[Any] = [None, True, -1, 0, 2, 1 << 64 - 1, b"", b"\x00" * 7, "text", [], {}]


def mutate(rng: random.Random, pack: Pack, head: ChainHead | None) -> tuple[str, bytes]:
    """One host-signed knowledge pack, changed in one of the ways a device must handle."""
    data = pack.encoded
    prot, _, payload, sig = cbor.decode(data).value
    kind = rng.randrange(16)
    if kind == 0:
        return "intact", data
    if kind == 1:
        flip = bytearray(data)
        flip[rng.randrange(len(flip))] ^= rng.randint(1, 255)
        return "byte flip", bytes(flip)
    if kind == 2:
        return "truncated", data[: rng.randrange(len(data))]
    if kind == 3:
        return "trailing byte", data + bytes([rng.randrange(256)])
    if kind == 4:
        key = rng.choice([OTHER_KEY, DEVICE_KEY])
        return "wrong key", cose(key, payload)
    if kind == 5:
        seq = rng.choice([1, max(1, (head.seq if head else 1) - rng.randint(0, 3))])
        older = sign_pack(HOST_KEY, PackKind.KNOWLEDGE, HOST_ID, seq, pack.prev, pack.created, [])
        return "older or equal seq", older.encoded
    if kind == 6:
        label = rng.choice([3, 5, -1, 33, "x"])
        return "unprotected header", cbor.encode(cbor.Tag(18, [prot, {label: 1}, payload, sig]))
    if kind == 7:
        label = rng.choice([2, 3, 5, 33, -1, -260, 1000])
        header = cbor.encode({1: -8, 4: HOST_KEY.kid, label: rng.choice([0, b"x", "y"])})
        return "extra protected label", cose(HOST_KEY, payload, header)
    if kind == 8:
        alg = rng.choice([-7, 8, -9, "EdDSA", b"\x27", None])
        fields: dict[Any, Any] = {4: HOST_KEY.kid}
        if alg is not None:
            fields[1] = alg
        return "alg", cose(HOST_KEY, payload, cbor.encode(fields))
    if kind == 9:
        kid = rng.choice([HOST_KEY.kid[:7], HOST_KEY.kid + b"\x00", HOST_KEY.kid.hex(), None])
        fields = {1: -8} if kid is None else {1: -8, 4: kid}
        return "kid", cose(HOST_KEY, payload, cbor.encode(fields))
    if kind == 10:
        bad = rng.choice([sig[:63], sig + b"\x00", b""])
        return "signature length", cbor.encode(cbor.Tag(18, [prot, {}, payload, bad]))
    if kind == 11:
        fields_p = payload_of(pack)
        index = rng.randrange(7)
        fields_p[index] = rng.choice(BAD_VALUES)
        return f"payload field {index}", cose(HOST_KEY, cbor.encode(fields_p))
    if kind == 12:
        fields_p = payload_of(pack)
        if fields_p[6]:
            item = fields_p[6][rng.randrange(len(fields_p[6]))]
            item[rng.randrange(5)] = rng.choice([*BAD_VALUES, 0x10001])
        else:
            fields_p[6] = [rng.choice(BAD_VALUES)]
        return "item field", cose(HOST_KEY, cbor.encode(fields_p))
    if kind == 13:  # the host key signing for another signer, pack_id consistent
        other = sign_pack(HOST_KEY, PackKind.KNOWLEDGE, OTHER_ID, pack.seq, pack.prev, 0, [])
        return "wrong signer", other.encoded
    if kind == 14:
        fields_p = payload_of(pack)
        fields_p.append(0) if rng.random() < 0.5 else fields_p.pop()
        return "payload length", cose(HOST_KEY, cbor.encode(fields_p))
    tagged = rng.choice([98, 17, 19])
    return "other tag", cose(HOST_KEY, payload, tag=tagged)


def test_knowledge_mutations_match_the_host() -> None:
    rng = random.Random(0x4B0C)
    lim = limits()
    cases: list[tuple[str, bytes, ChainHead | None]] = []
    kinds: set[str] = set()
    outcomes: set[str] = set()
    for n in range(700):
        head: ChainHead | None = None
        if rng.random() < 0.7:
            head = ChainHead(rng.randint(1, 20), rng.randbytes(32))
        seq = rng.choice([rng.randint(1, 25), rng.randint(1, (1 << 64) - 1)])
        items = random_items(rng, lim.knowledge_text, rng.randint(0, lim.knowledge_capacity))
        prev = rng.choice([GENESIS, rng.randbytes(32)])
        pack = sign_pack(HOST_KEY, PackKind.KNOWLEDGE, HOST_ID, seq, prev, T0 + n, items)
        if head is not None and rng.random() < 0.1:
            head = ChainHead(seq, pack.hash)  # the held pack pushed again: duplicate
        name, data = mutate(rng, pack, head)
        cases.append((name, data, head))
        kinds.add(name.split(" ")[0])
        outcomes.add(expected_device(data, head)[1])
    check_knowledge(cases)
    # every way of failing of §8.4 that a device can see was exercised
    assert {
        "none",
        "malformed",
        "unsupported-alg",
        "unknown-key",
        "bad-signature",
        "wrong-signer",
        "rollback",
        "replay",
    } <= outcomes


def test_knowledge_store_all_or_nothing() -> None:
    """Items the store cannot hold: deferred (storage) after every check passed, and
    the held pack and its items stay as they were."""
    lim = limits()
    rng = random.Random(7)
    good = sign_pack(
        HOST_KEY, PackKind.KNOWLEDGE, HOST_ID, 3, GENESIS, T0, random_items(rng, 10, 2)
    )
    too_many = sign_pack(
        HOST_KEY,
        PackKind.KNOWLEDGE,
        HOST_ID,
        4,
        good.hash,
        T0,
        random_items(rng, 5, lim.knowledge_capacity + 1),
    )
    long_text = "x" * (lim.knowledge_text + 1)
    too_long = sign_pack(
        HOST_KEY,
        PackKind.KNOWLEDGE,
        HOST_ID,
        5,
        good.hash,
        T0,
        [
            KnowledgeItem(bytes(8), "s", "p", "o", 1),
            KnowledgeItem(bytes(8), "s", "p", long_text, 1),
        ],
    )
    full = sign_pack(
        HOST_KEY,
        PackKind.KNOWLEDGE,
        HOST_ID,
        6,
        good.hash,
        T0,
        random_items(rng, lim.knowledge_text, lim.knowledge_capacity),
    )
    answers = pack_prog(
        [
            host_key_request(),
            ("k_accept", [good.encoded]),
            ("k_items", []),
            ("k_accept", [too_many.encoded]),
            ("k_accept", [too_long.encoded]),
            ("k_items", []),
            ("k_accept", [full.encoded]),
            ("k_accept", [full.encoded]),
            ("k_accept", [good.encoded]),
            ("k_accept", [too_many.encoded]),
        ]
    )
    assert answers[1] == ["accepted", "none", 3, good.pack_id, 2]
    assert answers[3] == ["deferred", "storage", 3, too_many.pack_id, 2]
    assert answers[4] == ["deferred", "storage", 3, too_long.pack_id, 2]
    assert answers[5] == answers[2]
    assert answers[6] == ["accepted", "none", 6, full.pack_id, lim.knowledge_capacity]
    assert answers[7] == ["duplicate", "none", 6, full.pack_id, lim.knowledge_capacity]
    assert answers[8] == ["refused", "rollback", 6, good.pack_id, lim.knowledge_capacity]
    assert answers[9] == ["refused", "rollback", 6, too_many.pack_id, lim.knowledge_capacity]


def test_knowledge_without_a_host_key_is_unknown_key(gen_vectors: ModuleType) -> None:
    knowledge: Pack = gen_vectors.sample_packs()[2]
    answers = pack_prog([("k_init", []), ("k_accept", [knowledge.encoded])])
    assert answers[1] == ["refused", "unknown-key", 0, bytes(16), 0]


def text_label_pack() -> bytes:
    payload = cbor.decode(
        sign_pack(HOST_KEY, PackKind.KNOWLEDGE, HOST_ID, 2, GENESIS, T0, []).encoded
    ).value[2]
    return cose(HOST_KEY, payload, cbor.encode({1: -8, 4: HOST_KEY.kid, "x": 1}))


def test_protected_text_label_is_refused_as_the_spec_says() -> None:
    """SPEC §8.4 step 6 and the CDDL: the protected header has no key but 1 and 4."""
    answers = pack_prog([host_key_request(), ("k_accept", [text_label_pack()])])
    assert answers[1] == ["refused", "malformed", 0, bytes(16), 0]


def test_host_refuses_a_protected_text_label_too() -> None:
    with pytest.raises(PackError):
        verify_pack(text_label_pack(), DEVICE_TRUST, None, PackKind.KNOWLEDGE, require_chain=False)


def test_keys_used_here_are_the_vector_keys() -> None:
    trusted = load_vectors("packs")["trusted"]
    assert PublicKey(bytes.fromhex(trusted["host"]["public"])) == HOST_KEY.public
    assert PublicKey(bytes.fromhex(trusted["device"]["public"])) == DEVICE_KEY.public
    assert bytes.fromhex(trusted["device"]["signer"]) == DEVICE_ID
