"""Fuzz the wire decoders: frames, link messages and signed packs.

    python tools/fuzz_codec.py --count 100000 --seed 1

Half of the inputs are random byte strings (0..700 bytes), half are mutations of valid
seeds (frames and frame streams, message bodies of every type, signed packs): bit flips,
byte sets, insertions, deletions, truncations, splices of two seeds and duplicated ranges,
plus CBOR-aware ones (tokens inserted or written at item boundaries, an extra member added
to an array or map). The targets take turns: FrameDecoder.feed and decode_frame,
messages.decode_message, and packs.verify_pack against a fixed set of trusted keys and
chain heads.

A violation is any exception that is not a HirmemError, an input that takes longer than
the hang limit, a broken FrameDecoder invariant (buffer bound, stats, chunking), or a pack
that differs from every seed and is still accepted. Violations are printed with the input
in hex (and a minimised input) and make the exit status 1. A message body that is
accepted but does not re-encode to the same bytes is reported as a note, not a violation.
Runs are reproducible from --seed.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import random
import signal
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "host"))

from hirmem.protocol import messages as wire_messages  # noqa: E402
from hirmem.protocol import packs as wire_packs  # noqa: E402
from hirmem.protocol.errors import FrameError, HirmemError, MessageError, PackError  # noqa: E402
from hirmem.protocol.frames import (  # noqa: E402
    FrameDecoder,
    decode_frame,
    encode_frame,
    max_wire_size,
)
from hirmem.protocol.keys import derive_test_key  # noqa: E402
from hirmem.protocol.messages import (  # noqa: E402
    Ack,
    Capture,
    CaptureResult,
    Error,
    ErrorCode,
    Hello,
    HelloAck,
    KnowledgePush,
    KnowledgeResult,
    Log,
    Message,
    MsgType,
    PackOffer,
    PackResult,
    Proof,
    Status,
    StatusRequest,
    decode_message,
    encode_message,
)
from hirmem.protocol.packs import (  # noqa: E402
    ChainHead,
    KnowledgeItem,
    Pack,
    PackKind,
    Reason,
    TrustedKey,
    sign_pack,
    verify_pack,
)
from hirmem.protocol.records import GENESIS, Record, record_id  # noqa: E402

MAX_RANDOM = 700
MAX_FRAME = 512
HANG_SECONDS = 5.0
SHOW_VIOLATIONS = 10

# bytes that mean something to CBOR or COBS: heads at the size boundaries, indefinite and
# break codes, empty containers, tags, simple values and floats, COBS codes 0x01/0xFE/0xFF
INTERESTING = bytes.fromhex(
    "00 01 02 17 18 19 1a 1b 1c 1f 20 37 38 40 41 57 58 5f 60 61 7f 80 81 84 97 98 9f a0 a1"
    " b7 b8 bf c0 c6 d2 d8 e0 f4 f5 f6 f7 f8 f9 fa fb fe ff"
)


# small CBOR items and heads for structure-aware insertions and overwrites
TOKENS = [
    bytes.fromhex(t)
    for t in (
        *("00", "01", "17", "1818", "190100", "1a00010000", "1b0000000100000000"),
        *("20", "3bffffffffffffffff", "40", "4100", "60", "6161", "80", "8100"),
        *("a0", "a100", "a10000", "c000", "d200", "d818", "f4", "f5", "f6", "f7", "f93c00"),
        *("ff", "81", "82", "a1", "a2", "9f", "bf", "5f", "7f"),
    )
]

# complete small items, to add as members of arrays and maps
ITEMS = [
    bytes.fromhex(t)
    for t in (
        *("00", "01", "17", "1818", "20", "40", "4100", "60", "6161", "80", "8100", "a0"),
        *("c000", "f4", "f5", "f6"),
    )
]


class InvariantBroken(Exception):
    """A decoder returned, but what it returned breaks a promise of the module."""


class Hang(BaseException):
    """Raised from the alarm handler when one input takes longer than HANG_SECONDS."""


# ---- seeds ----------------------------------------------------------------------------------


DEVICE_KEY = derive_test_key("fuzz device")
HOST_KEY = derive_test_key("fuzz host")
DEVICE_ID = bytes.fromhex("0f0e0d0c0b0a0908")
HOST_ID = bytes.fromhex("f1f2f3f4f5f6f7f8")
TRUSTED: dict[bytes, TrustedKey] = {
    DEVICE_KEY.kid: TrustedKey(DEVICE_KEY.public, DEVICE_ID, PackKind.MEMORY),
    HOST_KEY.kid: TrustedKey(HOST_KEY.public, HOST_ID, PackKind.KNOWLEDGE),
}
T0 = 1_780_000_000_000


@dataclass(frozen=True)
class PackCase:
    """A valid pack and the verifier state it is accepted in."""

    name: str
    encoded: bytes
    head: ChainHead | None
    kind: PackKind
    require_chain: bool


def _records(prev: bytes, boot: int, first: int, count: int) -> list[Record]:
    out = []
    for n in range(count):
        rid = record_id(DEVICE_ID, boot, first + n)
        ctx = hashlib.sha256(b"fuzz context %d" % (first + n)).digest()
        payload = (b'{"t":%d.5,"n":"' % n) + bytes(range(0x61, 0x61 + n * 7)) + b'"}'
        flags = (0x0FFF, 0x0F3F, 0x0B7F, 0x0000)[n % 4]
        rec = Record.capture(
            rid, payload, f"temp{n}", T0 + n, ctx, flags, 0xC000, 0xE666, 0x8000, prev
        )
        out.append(rec)
        prev = rec.hash
    return out


def build_pack_cases() -> list[PackCase]:
    first = sign_pack(
        DEVICE_KEY,
        PackKind.MEMORY,
        DEVICE_ID,
        (3 << 32) | 1,
        GENESIS,
        T0,
        _records(GENESIS, 3, 1, 3),
    )
    second = sign_pack(
        DEVICE_KEY,
        PackKind.MEMORY,
        DEVICE_ID,
        (3 << 32) | 2,
        first.hash,
        T0 + 1,
        _records(first.hash, 3, 4, 2),
    )
    empty = sign_pack(
        DEVICE_KEY, PackKind.MEMORY, DEVICE_ID, (3 << 32) | 3, second.hash, T0 + 2, []
    )
    items = [
        KnowledgeItem(bytes.fromhex("0123456789abcdef"), "temp0", "max_safe", "80.0", 0xF000),
        KnowledgeItem(bytes(8), "pump", "serves", "zone 3 ✓", 0x10000),
        KnowledgeItem(b"\xff" * 8, "", "", "", 0),
    ]
    knowledge = sign_pack(HOST_KEY, PackKind.KNOWLEDGE, HOST_ID, 5, GENESIS, T0, items)
    cases = [
        PackCase("first", first.encoded, None, PackKind.MEMORY, True),
        PackCase("second", second.encoded, _head(first), PackKind.MEMORY, True),
        PackCase("duplicate", second.encoded, _head(second), PackKind.MEMORY, True),
        PackCase("empty", empty.encoded, _head(second), PackKind.MEMORY, True),
        PackCase(
            "knowledge", knowledge.encoded, ChainHead(4, bytes(32)), PackKind.KNOWLEDGE, False
        ),
    ]
    for case in cases:  # the seeds themselves must pass, or the fuzzing proves nothing
        wire_packs.verify_pack(
            case.encoded, TRUSTED, case.head, case.kind, require_chain=case.require_chain
        )
    return cases


def _head(pack: Pack) -> ChainHead:
    return ChainHead(pack.seq, pack.hash)


def build_messages(pack: bytes, knowledge: bytes) -> list[bytes]:
    kid = DEVICE_KEY.kid
    samples: list[tuple[Message, int, int]] = [
        (Hello(DEVICE_ID, "mps2-an385", "0.1.0", 7, 0x1F, 512, 4096, 4, kid, HOST_KEY.kid), 1, 0),
        (Hello(DEVICE_ID, "b" * 240, "", 0xFFFFFFFF, 1 << 63, 128, 0, 0xFFFF, kid, b""), 1, 0),
        (
            HelloAck(
                HOST_ID, 512, 4096, 4, T0, (3 << 32) | 2, bytes(range(32)), bytes(16), bytes(16)
            ),
            1,
            1,
        ),
        (Capture("temp0", b'{"t":21.5}', bytes(32), 0x0FFF, 0x10000, 0xE666, 0x8000), 2, 1),
        (CaptureResult(2, 0, bytes(16), 0x0FFF, *(0x10000,) * 7, 0, 0, 1), 2, 2),
        (CaptureResult(0, 1, b"", 0, 0, 0, 0, 0, 0, 0, 0, 2, 15, 3), 0xFFFFFFFF, 0),
        (PackOffer(pack[:200]), 3, 2),
        (PackResult(0, 2, int(Reason.ROLLBACK)), 4, 3),
        (KnowledgePush(knowledge[:200]), 6, 4),
        (KnowledgeResult(HOST_ID + (5).to_bytes(8, "big"), 0, 0, 5), 4, 6),
        (StatusRequest(), 7, 4),
        (Status(120_000, 12, 16, 40, 20, 1, 3, 9, 2, 2, 61, 1, 0, 1 << 40), 5, 7),
        (Log(1, "ring 12/16, 3 quarantined — ok"), 0, 7),
        (Error(int(ErrorCode.UNKNOWN_TYPE), 9, "unknown message type 99"), 0, 9),
        (Ack(), 0, 12),
        (Proof(bytes(range(64))), 2, 1),
    ]
    covered = {int(m.TYPE) for m, _, _ in samples}
    # every type but the retired FRAGMENT (SPEC §5.14), which has no message class
    assert covered == {int(t) for t in MsgType} - {14}, "a message type has no seed"
    bodies = [encode_message(m, seq, ack) for m, seq, ack in samples]
    for body in bodies:
        wire_messages.decode_message(body)  # not the target: tests may replace that
    return bodies


def build_frame_seeds(bodies: Sequence[bytes]) -> list[bytes]:
    frames = [encode_frame(b) for b in bodies if len(b) + 4 <= MAX_FRAME]
    frames += [
        encode_frame(b"\x42"),
        encode_frame(bytes(16)),
        encode_frame(bytes(range(1, 255))),
        encode_frame(bytes(range(1, 256))),
        encode_frame(bytes((i * 7 + 1) % 256 for i in range(MAX_FRAME - 4))),
    ]
    streams = [
        frames[0] + frames[1] + frames[2],
        b"\x13\x37noise\x00" + frames[3] + b"\x00\x00" + frames[4],
        frames[-1] + frames[-2] + b"\x00" + frames[5],
        encode_frame(bytes(600), 1024) + frames[6],
    ]
    return frames + streams


@dataclass
class Seeds:
    frames: list[bytes]
    messages: list[bytes]
    packs: list[PackCase]

    @classmethod
    def build(cls) -> Seeds:
        packs = build_pack_cases()
        messages = build_messages(packs[0].encoded, packs[-1].encoded)
        return cls(build_frame_seeds(messages), messages, packs)


# ---- mutations ------------------------------------------------------------------------------


def _byte(rng: random.Random) -> int:
    return (
        INTERESTING[rng.randrange(len(INTERESTING))] if rng.random() < 0.5 else rng.randrange(256)
    )


def item_offsets(data: bytes) -> tuple[tuple[int, ...], ...]:
    """Offsets where CBOR data items start, grouped by nesting level (0: the top item), also
    inside byte strings that hold CBOR themselves (a COSE protected header, a pack payload).
    The end of the data counts as a level-0 offset.

    Mutating at item boundaries reaches the structure (an extra map entry, a replaced
    field) far more often than uniformly chosen offsets; picking the level first keeps the
    few outer items (COSE array members, message fields) from drowning in record fields.
    """
    levels: dict[int, list[int]] = {}

    def walk(pos: int, end: int, depth: int) -> int:
        if pos >= end or depth > 24:
            raise ValueError("no item here")
        levels.setdefault(depth, []).append(pos)
        initial = data[pos]
        major, n = initial >> 5, initial & 0x1F
        pos += 1
        if n >= 28:
            raise ValueError("not a definite head")
        if n >= 24:
            size = 1 << (n - 24)
            n = int.from_bytes(data[pos : pos + size], "big")
            pos += size
        if major in (0, 1, 7):
            return pos
        if major in (2, 3):
            stop = pos + n
            if stop > end:
                raise ValueError("string past the end")
            if major == 2 and n:
                saved = {k: len(v) for k, v in levels.items()}
                try:
                    if walk(pos, stop, depth + 1) != stop:
                        raise ValueError("not one item")
                except (ValueError, IndexError):
                    for k in list(levels):
                        del levels[k][saved.get(k, 0) :]
            return stop
        if major == 6:
            return walk(pos, end, depth + 1)
        for _ in range(n * (2 if major == 5 else 1)):
            pos = walk(pos, end, depth + 1)
        return pos

    with contextlib.suppress(ValueError, IndexError):
        walk(0, len(data), 0)
    levels.setdefault(0, []).append(len(data))
    return tuple(tuple(sorted(set(v))) for _, v in sorted(levels.items()) if v)


def mutate(
    rng: random.Random,
    data: bytes,
    pool: Sequence[bytes],
    marks: Sequence[Sequence[int]] = (),
) -> bytes:
    """One to four stacked mutations of ``data``; the first one often lands on one of
    ``marks`` (item boundaries of the unmodified seed, by level: see item_offsets)."""
    buf = bytearray(data)
    ops = 1
    while ops < 4 and rng.random() < 0.35:
        ops += 1
    for step in range(ops):
        op = rng.randrange(11)
        size = len(buf)
        if step == 0 and marks and rng.random() < 0.5:
            level = marks[rng.randrange(len(marks))]
            at = level[rng.randrange(len(level))]
        else:
            at = rng.randrange(size + 1)
        inside = at < size  # ``at`` names an existing byte
        if op == 0 and inside:  # bit flip
            buf[at] ^= 1 << rng.randrange(8)
        elif op == 1 and inside:  # byte set
            buf[at] = _byte(rng)
        elif op == 2 and inside:  # small arithmetic on a byte (a length or a count)
            buf[at] = (buf[at] + rng.choice((-2, -1, 1, 2))) & 0xFF
        elif op == 3:  # insertion of random bytes
            buf[at:at] = bytes(_byte(rng) for _ in range(rng.randint(1, 8)))
        elif op == 4 and inside:  # deletion
            del buf[at : at + rng.randint(1, 16)]
        elif op == 5:  # truncation
            del buf[at:]
        elif op == 6:  # splice with another seed
            other = pool[rng.randrange(len(pool))]
            buf = buf[:at] + other[rng.randrange(len(other) + 1) :]
        elif op == 7 and inside:  # duplicate a range
            chunk = buf[at : at + rng.randint(1, 32)]
            where = rng.randrange(size + 1)
            buf[where:where] = chunk
        elif op == 10 and inside and buf[at] >> 5 in (4, 5) and buf[at] & 0x1F < 23:
            # grow an array or map by one member: a small complete item (a pair for maps)
            member = ITEMS[rng.randrange(len(ITEMS))]
            if buf[at] >> 5 == 5:
                member += ITEMS[rng.randrange(len(ITEMS))]
            buf[at] += 1
            buf[at + 1 : at + 1] = member
        elif op in (8, 10):  # insertion of a CBOR token
            buf[at:at] = TOKENS[rng.randrange(len(TOKENS))]
        elif op == 9:  # overwrite with a CBOR token
            token = TOKENS[rng.randrange(len(TOKENS))]
            buf[at : at + len(token)] = token
    return bytes(buf)


# ---- targets --------------------------------------------------------------------------------


def _label(codes: type[ErrorCode] | type[Reason], code: int) -> str:
    """A refusal code as a short name (the number itself if the enum does not know it)."""
    try:
        return codes(code).name.lower().replace("_", "-")
    except ValueError:
        return f"code-{code}"


def _event_view(events: Sequence[bytes | FrameError]) -> list[tuple[str, object]]:
    return [("body", e) if isinstance(e, bytes) else (e.kind, e.detail) for e in events]


def target_frames(data: bytes, rng: random.Random, tally: Tally) -> str:
    """FrameDecoder over the input whole and in random chunks, then decode_frame."""
    whole = FrameDecoder(MAX_FRAME)
    events = whole.feed(data)
    limit = max_wire_size(MAX_FRAME) - 1
    if len(whole._buf) > limit:
        raise InvariantBroken(f"decoder buffer {len(whole._buf)} bytes > wire limit {limit}")
    for event in events:
        if not isinstance(event, bytes | FrameError):
            raise InvariantBroken(f"feed returned a {type(event).__name__}")
        tally.extra["stream " + ("body" if isinstance(event, bytes) else event.kind)] += 1
    stats = whole.stats
    good = sum(1 for e in events if isinstance(e, bytes))
    if stats.frames != good or stats.bad != len(events) - good or stats.bytes_in != len(data):
        raise InvariantBroken(f"stats {stats} do not match {len(events)} events")
    pieces = data.split(b"\x00")
    if stats.empty != sum(1 for p in pieces[:-1] if not p):
        raise InvariantBroken(f"stats.empty {stats.empty} does not count the empty frames")
    chunked = FrameDecoder(MAX_FRAME)
    cuts = sorted(rng.randrange(len(data) + 1) for _ in range(rng.randint(1, 4)))
    again: list[bytes | FrameError] = []
    previous = 0
    for cut in [*cuts, len(data)]:
        again += chunked.feed(data[previous:cut])
        previous = cut
    if _event_view(again) != _event_view(events) or chunked.stats != stats:
        raise InvariantBroken(f"chunking at {cuts} changed the events")
    try:
        decode_frame(data, MAX_FRAME)
    except FrameError as err:
        return err.kind
    return "accepted"


def target_messages(data: bytes, rng: random.Random, tally: Tally) -> str:
    try:
        envelope = decode_message(data)
    except MessageError as err:
        return _label(ErrorCode, err.code)
    try:
        canonical = encode_message(envelope.message, envelope.seq, envelope.ack) == data
    except HirmemError:
        canonical = False
    if not canonical:
        tally.extra["accepted but not canonical"] += 1
        tally.anomalies.setdefault("accepted but re-encodes differently", data)
    return "accepted"


def target_packs(data: bytes, case: PackCase, seeds: frozenset[bytes], tally: Tally) -> str:
    try:
        verified = verify_pack(
            data, TRUSTED, case.head, case.kind, require_chain=case.require_chain
        )
    except PackError as err:
        return _label(Reason, err.reason)
    if data not in seeds:
        raise InvariantBroken(
            f"a pack that differs from every seed was accepted in case {case.name!r} "
            f"(pack_id {verified.pack.pack_id.hex()}, hash {verified.pack.hash.hex()})"
        )
    return "duplicate" if verified.duplicate else "accepted"


# ---- the run ----------------------------------------------------------------------------


@dataclass
class Violation:
    target: str
    what: str
    data: bytes
    where: str = ""
    minimal: bytes | None = None


@dataclass
class Tally:
    name: str
    inputs: int = 0
    random: int = 0
    mutated: int = 0
    unchanged: int = 0  # mutations that happened to give back their seed
    outcomes: Counter[str] = field(default_factory=Counter)
    extra: Counter[str] = field(default_factory=Counter)
    anomalies: dict[str, bytes] = field(default_factory=dict)
    elapsed: float = 0.0
    slowest: float = 0.0

    def line(self) -> str:
        accepted = self.outcomes["accepted"] + self.outcomes["duplicate"]
        refused = {k: v for k, v in self.outcomes.items() if k not in ("accepted", "duplicate")}
        parts = [
            f"{self.name:<8} inputs={self.inputs} (random {self.random}, mutated {self.mutated},"
            f" equal to seed {self.unchanged})",
            f"accepted={accepted}",
            "refused=" + (", ".join(f"{k}:{v}" for k, v in sorted(refused.items())) or "0"),
        ]
        if self.extra:
            parts.append(", ".join(f"{k}:{v}" for k, v in sorted(self.extra.items())))
        parts.append(f"slowest={self.slowest * 1000:.1f}ms elapsed={self.elapsed:.2f}s")
        return " | ".join(parts)


@dataclass
class Report:
    tallies: list[Tally]
    violations: list[Violation]
    elapsed: float

    @property
    def total(self) -> int:
        return sum(t.inputs for t in self.tallies)


class HangGuard:
    """A per-input alarm where the platform allows it (SIGALRM, main thread); else a no-op."""

    def __init__(self) -> None:
        self.enabled = (
            hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
        )
        self._previous: object = None

    def __enter__(self) -> HangGuard:
        if self.enabled:
            self._previous = signal.signal(signal.SIGALRM, self._on_alarm)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self.disarm()
            signal.signal(signal.SIGALRM, self._previous)  # type: ignore[arg-type]

    @staticmethod
    def _on_alarm(signum: int, frame: object) -> None:
        raise Hang()

    def arm(self) -> None:
        if self.enabled:
            signal.setitimer(signal.ITIMER_REAL, HANG_SECONDS)

    def disarm(self) -> None:
        if self.enabled:
            signal.setitimer(signal.ITIMER_REAL, 0)


def _where(exc: BaseException) -> str:
    """The innermost frames outside this driver: where the exception came from."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename != __file__]
    return " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in frames[::-1][:3])


Target = Callable[[bytes], str]


def _signature(target: Target, data: bytes) -> str | None:
    """The kind of violation ``data`` causes in ``target`` (None: no violation)."""
    try:
        target(data)
    except InvariantBroken as exc:
        return f"invariant:{str(exc)[:40]}"
    except HirmemError:
        return None
    except Exception as exc:
        return f"{type(exc).__name__}@{_where(exc)}"
    return None


def minimise(target: Target, data: bytes, budget: int = 3000) -> bytes:
    """Greedy delta debugging: drop chunks while the same violation persists."""
    want = _signature(target, data)
    if want is None:
        return data
    chunk = max(1, len(data) // 2)
    while chunk >= 1 and budget > 0:
        start = 0
        while start < len(data) and budget > 0:
            candidate = data[:start] + data[start + chunk :]
            budget -= 1
            if _signature(target, candidate) == want:
                data = candidate
            else:
                start += chunk
        chunk //= 2
    return data


def _replay(which: int, case: PackCase, pack_seeds: frozenset[bytes]) -> Target:
    """The target as a one-argument function, for minimising a violating input."""
    scratch = Tally("scratch")
    if which == 0:
        return lambda data: target_frames(data, random.Random(0), scratch)
    if which == 1:
        return lambda data: target_messages(data, random.Random(0), scratch)
    return lambda data: target_packs(data, case, pack_seeds, scratch)


def run(count: int, seed: int) -> Report:
    rng = random.Random(seed)
    seeds = Seeds.build()
    pack_pool = [c.encoded for c in seeds.packs]
    pack_seeds = frozenset(pack_pool)
    tallies = [Tally("frames"), Tally("messages"), Tally("packs")]
    pools: list[list[bytes]] = [seeds.frames, seeds.messages, pack_pool]
    marks = [
        [item_offsets(seed) if which else () for seed in pool] for which, pool in enumerate(pools)
    ]
    violations: list[tuple[Violation, Target | None]] = []
    started = time.perf_counter()
    with HangGuard() as guard:
        for index in range(count):
            which = index % 3
            tally = tallies[which]
            pool = pools[which]
            case = seeds.packs[(index // 3) % len(seeds.packs)]
            if (index // 3) % 2 == 0:
                data = rng.randbytes(rng.randint(0, MAX_RANDOM))
                tally.random += 1
            else:
                origin = rng.randrange(len(pool))
                data = mutate(rng, pool[origin], pool, marks[which][origin])
                tally.mutated += 1
                if which == 2:
                    case = seeds.packs[origin]
                if data == pool[origin]:
                    tally.unchanged += 1
            tally.inputs += 1
            label = tally.name if which != 2 else f"packs (case {case.name})"
            replay: Target | None = _replay(which, case, pack_seeds)
            began = time.perf_counter()
            try:
                guard.arm()
                if which == 0:
                    outcome = target_frames(data, rng, tally)
                elif which == 1:
                    outcome = target_messages(data, rng, tally)
                else:
                    outcome = target_packs(data, case, pack_seeds, tally)
                guard.disarm()
            except BaseException as exc:
                guard.disarm()
                if isinstance(exc, InvariantBroken):
                    what = str(exc)
                elif isinstance(exc, Hang):
                    what, replay = f"input took longer than {HANG_SECONDS} s", None
                elif isinstance(exc, HirmemError):
                    what = f"{type(exc).__name__} escaped the target: {exc}"
                elif isinstance(exc, Exception):
                    what = f"{type(exc).__name__}: {exc}"
                else:
                    raise  # KeyboardInterrupt, SystemExit: not the input's fault
                violations.append((Violation(label, what, data, _where(exc)), replay))
                outcome = "violation"
            spent = time.perf_counter() - began
            tally.elapsed += spent
            tally.slowest = max(tally.slowest, spent)
            tally.outcomes[outcome] += 1
    for violation, target in violations[:SHOW_VIOLATIONS]:
        if target is not None:
            violation.minimal = minimise(target, violation.data)
    return Report(tallies, [v for v, _ in violations], time.perf_counter() - started)


def print_report(report: Report, out: TextIO) -> None:
    for tally in report.tallies:
        print(tally.line(), file=out)
        for what, data in tally.anomalies.items():
            print(f"  note: {tally.name}: {what}, first input {data.hex()}", file=out)
    for violation in report.violations[:SHOW_VIOLATIONS]:
        print(
            f"VIOLATION {violation.target}: {violation.what}"
            + (f" [{violation.where}]" if violation.where else "")
            + "\n"
            f"  input ({len(violation.data)} bytes): {violation.data.hex()}",
            file=out,
        )
        if violation.minimal is not None and violation.minimal != violation.data:
            print(
                f"  minimised ({len(violation.minimal)} bytes): {violation.minimal.hex()}", file=out
            )
    if len(report.violations) > SHOW_VIOLATIONS:
        print(f"... {len(report.violations) - SHOW_VIOLATIONS} more violations", file=out)
    print(
        f"total inputs={report.total} violations={len(report.violations)} "
        f"elapsed={report.elapsed:.2f}s",
        file=out,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000, help="number of inputs")
    parser.add_argument("--seed", type=int, default=1, help="random seed (reproducible runs)")
    args = parser.parse_args(argv)
    if args.count < 0:
        parser.error("--count must be >= 0")
    report = run(args.count, args.seed)
    print_report(report, sys.stdout)
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
