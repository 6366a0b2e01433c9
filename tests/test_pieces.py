"""Frame pieces (SPEC §6.10 draft): the host codec (hirmem.protocol.pieces), the C codec
(hm_piece_* / hm_join_* of firmware/core/hm_frag.c through tests/native/t_wire.c) and an
independent re-implementation written here from the SPEC text must agree, piece for
piece and refusal for refusal, over thousands of random bodies, max_frame values and
adversarial piece sequences (continuation without a first, overlong, duplicate, gap,
restart, bad heads); every refusal is counted by its kind.
"""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Sequence
from pathlib import Path

import pytest

from hirmem.protocol import cbor, pieces
from hirmem.protocol.errors import MessageError
from hirmem.protocol.messages import ErrorCode, PackOffer, StatusRequest, encode_message
from mp_run import MICROPYTHON, MP_DIR, run_mp
from native_harness import Arg, run

HM_MAX_MESSAGE = 4096  # firmware/core/hm_config.h default: the C joiner's buffer
KINDS = ("too_large", "orphan", "gap", "empty", "bad_head", "bad_check", "restart", "duplicate")


# ---- the oracle: SPEC §6.8 read again, written without the codecs' structure ------


def oracle_split(body: bytes, max_frame: int) -> list[bytes]:
    room = max_frame - 4
    if len(body) <= room:
        return [body]
    rest = bytearray(body + zlib.crc32(body).to_bytes(4, "little"))
    frames, k = [], 0
    while rest:
        take = bytes(rest[: room - 1])
        del rest[: room - 1]
        head = 0xF0 if k == 0 else 0xE0 + (8 if not rest else 0) + k % 8
        frames.append(bytes([head]) + take)
        k += 1
    return frames


def oracle_join(limit: int, bodies: Sequence[bytes]) -> tuple[list[object], dict[str, int], int]:
    """Per body: "pass", "more", the joined bytes, or the refusal's ERROR code name."""
    out: list[object] = []
    counts = dict.fromkeys(KINDS, 0)
    joined = 0
    stream: bytearray | None = None  # None when idle
    number = 0
    for body in bodies:
        if not body or body[0] < 0xE0:
            out.append("pass")
            continue
        verdict: str | None = None
        data = body[1:]
        last = False
        if body[0] > 0xF0:
            verdict = "bad_head"
        elif body[0] == 0xF0:
            if stream is not None:
                counts["restart"] += 1
            stream, number = bytearray(), 0
            if not data:
                verdict = "empty"
        elif stream is None:
            verdict = "orphan"
        elif number > 1 and body[0] % 8 == (number - 1) % 8:
            counts["duplicate"] += 1
            out.append("more")
            continue
        elif body[0] % 8 != number % 8:
            verdict = "gap"
        else:
            last = bool(body[0] & 8)
            if not data:
                verdict = "empty"
        if verdict is None:
            assert stream is not None
            if len(stream) + len(data) > limit + 4:
                verdict = "too_large"
            else:
                stream += data
                number += 1
                if last:
                    whole, check = bytes(stream[:-4]), bytes(stream[-4:])
                    stream = None
                    if zlib.crc32(whole).to_bytes(4, "little") != check:
                        verdict = "bad_check"
                    else:
                        out.append(whole)
                        joined += 1
                        continue
        if verdict is not None:
            counts[verdict] += 1
            stream = None
            out.append("too-large" if verdict == "too_large" else "reassembly")
        else:
            out.append("more")
    return out, counts, joined


# ---- the host codec, answering like the C program ----------------------------------


def host_join(limit: int, bodies: Sequence[bytes]) -> tuple[list[object], dict[str, int], int]:
    joiner = pieces.Joiner(limit)
    out: list[object] = []
    for body in bodies:
        if not pieces.is_piece(body):
            out.append("pass")
            continue
        try:
            got = joiner.take(body)
        except MessageError as exc:
            assert exc.code in (ErrorCode.TOO_LARGE, ErrorCode.REASSEMBLY)
            out.append("too-large" if exc.code == ErrorCode.TOO_LARGE else "reassembly")
            continue
        out.append("more" if got is None else got)
    return out, dict(joiner.refused), joiner.joined


def c_answers(requests: list[tuple[str, Sequence[Arg]]]) -> list[list[Arg | str]]:
    return run("t_wire", requests)


def c_join_result(answer: list[Arg | str]) -> tuple[list[object], dict[str, int], int]:
    at = answer.index("refused")
    counts = dict(zip(KINDS, answer[at + 1 : at + 1 + len(KINDS)], strict=True))
    return list(answer[:at]), {k: int(v) for k, v in counts.items()}, int(answer[-1])


# ---- random material ---------------------------------------------------------------


def random_body(rng: random.Random, limit: int) -> bytes:
    n = rng.choice([1, 2, rng.randrange(1, 300), rng.randrange(1, limit + 1)])
    body = bytes(rng.randrange(256) for _ in range(n))
    return bytes([0x85]) + body[1:] if rng.random() < 0.5 else body


def mutate(rng: random.Random, frames: list[bytes]) -> list[bytes]:
    """An adversarial variant of a piece sequence."""
    frames = list(frames)
    for _ in range(rng.randrange(1, 4)):
        if not frames:
            break
        op = rng.randrange(10)
        i = rng.randrange(len(frames))
        if op == 0:
            del frames[i]  # a lost frame: gap, or orphans after a lost first
        elif op == 1:
            frames.insert(i, frames[i])  # a duplicate
        elif op == 2 and len(frames) > 1:
            j = rng.randrange(len(frames))
            frames[i], frames[j] = frames[j], frames[i]
        elif op == 3:
            frames[i] = frames[i][: rng.randrange(len(frames[i]) + 1)]  # cut short
        elif op == 4:
            frames[i] = bytes([rng.randrange(0xE0, 0x100)]) + frames[i][1:]  # any head
        elif op == 5 and len(frames[i]) > 1:
            at = rng.randrange(1, len(frames[i]))  # a bit flip the frame CRC missed
            frames[i] = frames[i][:at] + bytes([frames[i][at] ^ 1]) + frames[i][at + 1 :]
        elif op == 6:
            frames[i] = frames[i] + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
        elif op == 8 and frames[i]:
            frames[i] = bytes([frames[i][0] ^ 0x08]) + frames[i][1:]  # last flag flipped
        elif op == 7:
            frames.insert(i, bytes([0x84, 1, 13, 0, 1]))  # a message between pieces
        else:
            frames = frames[:i] + frames[:i]  # a go-back-N retransmission from the start
    return frames


# ---- tests -------------------------------------------------------------------------


def test_split_examples() -> None:
    body = bytes(range(256)) * 3  # 768 bytes, and its 4-byte check: 772 in 251-byte steps
    frames = pieces.split(body, 256)
    assert [len(f) for f in frames] == [252, 252, 252, 20]
    assert frames[0] == b"\xf0" + body[:251]
    assert [f[0] for f in frames[1:]] == [0xE1, 0xE2, 0xEB]  # the last one flagged
    stream = b"".join(f[1:] for f in frames)
    assert stream == body + zlib.crc32(body).to_bytes(4, "little")
    assert pieces.split(body[:252], 256) == [body[:252]]  # fits: never cut
    assert [f[0] for f in pieces.split(bytes(2000), 128)][7:11] == [0xE7, 0xE0, 0xE1, 0xE2]


def test_differential_split_and_join() -> None:
    """Host, C and oracle agree on the pieces of 3,000 random bodies at random
    max_frame values, and each joins them back to the body."""
    rng = random.Random(0x9E3779B9)
    requests: list[tuple[str, Sequence[Arg]]] = []
    cases = []
    for _ in range(3000):
        max_frame = rng.choice([128, 129, 130, 255, 256, 257, 512, rng.randrange(128, 1200)])
        body = random_body(rng, min(HM_MAX_MESSAGE, 60 * (max_frame - 5)))
        frames = pieces.split(body, max_frame)
        assert frames == oracle_split(body, max_frame)
        assert all(len(f) + 4 <= max_frame for f in frames)
        assert all(len(f) + 4 == max_frame for f in frames[:-1])  # every frame but the last full
        cases.append((body, frames))
        requests.append(("piece_split", [body, max_frame]))
        requests.append(("piece_join", [HM_MAX_MESSAGE, *frames]))
    answers = c_answers(requests)
    for n, (body, frames) in enumerate(cases):
        assert answers[2 * n] == frames
        c_out = c_join_result(answers[2 * n + 1])
        host_out = host_join(HM_MAX_MESSAGE, frames)
        assert c_out == host_out == oracle_join(HM_MAX_MESSAGE, frames)
        if len(frames) > 1:
            assert host_out[0][-1] == body and host_out[2] == 1


def test_differential_adversarial() -> None:
    """5,000 mutated piece sequences (lost, duplicated, swapped, truncated, re-headed,
    lengthened frames, wrong totals, messages in between, retransmissions): the same
    answer per frame and the same refusal counts on all three."""
    rng = random.Random(20261202)
    requests: list[tuple[str, Sequence[Arg]]] = []
    cases = []
    for _ in range(5000):
        max_frame = rng.choice([128, 131, 256, rng.randrange(128, 700)])
        limit = rng.choice([HM_MAX_MESSAGE, rng.randrange(0, HM_MAX_MESSAGE + 1)])
        size = min(HM_MAX_MESSAGE, 8 * max_frame)
        bodies = [random_body(rng, size) for _ in range(rng.randrange(1, 3))]
        frames = [f for b in bodies for f in pieces.split(b, max_frame)]
        frames = mutate(rng, frames)[:60]
        cases.append((limit, frames))
        requests.append(("piece_join", [limit, *frames]))
    answers = c_answers(requests)
    seen = dict.fromkeys(KINDS, 0)
    for answer, (limit, frames) in zip(answers, cases, strict=True):
        expected = oracle_join(limit, frames)
        assert host_join(limit, frames) == expected, frames
        assert c_join_result(answer) == expected, frames
        for kind, count in expected[1].items():
            seen[kind] += count
    assert all(seen[kind] > 0 for kind in KINDS), seen  # every refusal was exercised


def stream(body: bytes) -> bytes:
    return body + zlib.crc32(body).to_bytes(4, "little")


ABCDEF = stream(b"abcdef")  # 10 bytes: cut below into 2 + 2 + 6 or so


@pytest.mark.parametrize(
    ("frames", "answers", "kind"),
    [
        ([b"\xe1abc"], ["reassembly"], "orphan"),
        ([b"\xf0ab", b"\xe2cde"], ["more", "reassembly"], "gap"),
        ([b"\xf0ab", b"\xe1cd", b"\xe3e"], ["more", "more", "reassembly"], "gap"),
        ([b"\xf0"], ["reassembly"], "empty"),
        ([b"\xf0ab", b"\xe1"], ["more", "reassembly"], "empty"),
        ([b"\xf0ab", b"\xe9c"], ["more", "reassembly"], "bad_check"),  # shorter than a check
        ([b"\xf7abc"], ["reassembly"], "bad_head"),
        ([b"\xf0" + bytes(4101)], ["too-large"], "too_large"),  # 4,096 and the check fit
        ([b"\xf0" + bytes(4000), b"\xe1" + bytes(101)], ["more", "too-large"], "too_large"),
        ([b"\xf0ab", b"\xe9cdef\x00\x00\x00\x00"], ["more", "reassembly"], "bad_check"),
        (
            [b"\xf0" + ABCDEF[:2], b"\xe1" + ABCDEF[2:4], b"\xe1" + ABCDEF[2:4],
             b"\xea" + ABCDEF[4:]],
            ["more", "more", "more", b"abcdef"],
            "duplicate",
        ),
        (  # a repeated number is ignored whatever its bytes: the first copy counts
            [b"\xf0" + ABCDEF[:2], b"\xe1" + ABCDEF[2:4], b"\xe1cx", b"\xea" + ABCDEF[4:]],
            ["more"] * 3 + [b"abcdef"],
            "duplicate",
        ),
        (
            [b"\xf0zz", b"\xf0" + ABCDEF[:5], b"\xe9" + ABCDEF[5:]],
            ["more", "more", b"abcdef"],
            "restart",
        ),
    ],
)
def test_each_refusal_counted(frames: list[bytes], answers: list[object], kind: str) -> None:
    """One case per refusal kind, on the host and in C: answered and counted once."""
    c_out = c_join_result(c_answers([("piece_join", [HM_MAX_MESSAGE, *frames])])[0])
    host_out = host_join(HM_MAX_MESSAGE, frames)
    assert c_out == host_out
    assert host_out[0] == answers
    assert host_out[1] == {k: int(k == kind) for k in KINDS}


def test_body_seq_differential() -> None:
    """The seq an ERROR too-large names, read from a body's first bytes: host, C (and
    MicroPython, below) agree on 3,000 starts of real envelopes, cut short and mutated."""
    rng = random.Random(7)
    samples = []
    for _ in range(3000):
        seq = rng.choice([0, 1, 23, 24, 255, 256, 65535, 65536, (1 << 32) - 1, 1 << 32])
        head = cbor.encode([1, rng.randrange(30), seq, 5, b"x" * 10])[:-11]
        start = head + bytes(rng.randrange(256) for _ in range(4))
        start = start[: rng.randrange(len(start) + 1)] if rng.random() < 0.3 else start
        if rng.random() < 0.3 and start:
            at = rng.randrange(len(start))
            start = start[:at] + bytes([rng.randrange(256)]) + start[at + 1 :]
        samples.append(start)
    answers = c_answers([("body_seq", [p]) for p in samples])
    assert [a[0] for a in answers] == [pieces.body_seq(p) for p in samples]
    assert pieces.body_seq(encode_message(StatusRequest(), 77, 5) + bytes(3)) == 77
    joiner = pieces.Joiner(100)
    body = encode_message(PackOffer(bytes(300)), 65539, 5)
    with pytest.raises(MessageError):
        for piece in pieces.split(body, 128):
            joiner.take(piece)
    assert joiner.seq == 65539 and joiner.refused["too_large"] == 1


def test_too_large_after_refusal_leaves_orphans() -> None:
    """After a too-large refusal, the rest of the body's pieces are refused one by one,
    counted: nothing is dropped silently."""
    body = bytes(600)
    frames = pieces.split(body, 128)
    out, counts, joined = host_join(300, frames)
    assert out == ["more", "more", "too-large"] + ["reassembly"] * (len(frames) - 3)
    assert counts["too_large"] == 1 and counts["orphan"] == len(frames) - 3 and joined == 0


def test_losses_never_join_a_wrong_body() -> None:
    """The case the body check is for: a 40-piece body whose numbers wrap (mod 8), sent
    twice; the line loses 8 pieces in a row of the first copy and the first piece of the
    second, so that numbers line up again. The joiner refuses (bad_check) rather than
    deliver a body with the wrong bytes, and the next full copy joins."""
    rng = random.Random(3)
    body = bytes(rng.randrange(256) for _ in range(40 * 123))
    frames = pieces.split(body, 128)
    copy1 = frames[:3] + frames[11:]  # pieces 3..10 lost: number 11 = 3 mod 8
    copy2 = frames[1:]  # its first piece lost
    out, counts, joined = oracle_join(1 << 16, copy1 + copy2 + frames)
    assert body not in out[:-1] and out[-1] == body and joined == 1
    assert counts["bad_check"] + counts["gap"] >= 1
    assert host_join(1 << 16, copy1 + copy2 + frames) == (out, counts, joined)


@pytest.mark.skipif(MICROPYTHON is None, reason="micropython missing")
def test_micropython_agrees(tmp_path: Path) -> None:
    """hirmem_mp.frag (the MicroPython agent's codec) against the host and the oracle:
    1,000 random bodies split, 1,500 mutated sequences joined, 500 body_seq reads."""
    rng = random.Random(0x51CE)
    split_cases = []
    for _ in range(1000):
        max_frame = rng.choice([128, 256, 512, rng.randrange(128, 900)])
        split_cases.append((random_body(rng, 3 * max_frame), max_frame))
    join_cases = []
    for _ in range(1500):
        max_frame = rng.choice([128, 140, 256])
        limit = rng.choice([HM_MAX_MESSAGE, rng.randrange(0, 1500)])
        frames = mutate(rng, pieces.split(random_body(rng, 6 * max_frame), max_frame))[:40]
        join_cases.append((limit, frames))
    seq_cases = [f[0] for _, f in join_cases[:500] if f]
    cases = {
        "split": [[b.hex(), mf] for b, mf in split_cases],
        "join": [[limit, [f.hex() for f in frames]] for limit, frames in join_cases],
        "seq": [p[1:].hex() for p in seq_cases],
    }
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(cases))
    got = json.loads(run_mp(MP_DIR / "checks" / "pieces.py", str(path), timeout=300, heap="32M"))
    assert got["split"] == [[p.hex() for p in pieces.split(b, mf)] for b, mf in split_cases]
    for (limit, frames), (answers, counts, joined) in zip(join_cases, got["join"], strict=True):
        out, expected_counts, expected_joined = oracle_join(limit, frames)
        assert answers == [a.hex() if isinstance(a, bytes) else a for a in out], frames
        assert counts == [expected_counts[k] for k in KINDS] and joined == expected_joined
    assert got["seq"] == [pieces.body_seq(p[1:]) for p in seq_cases]
