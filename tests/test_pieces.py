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
from collections.abc import Sequence
from pathlib import Path

import pytest

from hirmem.protocol import cbor, pieces
from hirmem.protocol.errors import MessageError
from hirmem.protocol.messages import ErrorCode, StatusRequest, encode_message
from mp_run import MICROPYTHON, MP_DIR, run_mp
from native_harness import Arg, run

HM_MAX_MESSAGE = 4096  # firmware/core/hm_config.h default: the C joiner's buffer
KINDS = ("too_large", "orphan", "gap", "overrun", "empty", "bad_head", "restart", "duplicate")


# ---- the oracle: SPEC §6.10 read again, written without the codecs' structure ------


def oracle_split(body: bytes, max_frame: int) -> list[bytes]:
    room = max_frame - 4
    if len(body) <= room:
        return [body]
    rest, frames, k = bytearray(body), [], 0
    while rest:
        head = b"\xf0" + len(body).to_bytes(3, "big") if k == 0 else bytes([0xE0 + k % 16])
        take = room - len(head)
        frames.append(head + bytes(rest[:take]))
        del rest[:take]
        k += 1
    return frames


def oracle_join(limit: int, bodies: Sequence[bytes]) -> tuple[list[object], dict[str, int], int]:
    """Per body: "pass", "more", the joined bytes, or the refusal's ERROR code name."""
    out: list[object] = []
    counts = dict.fromkeys(KINDS, 0)
    joined = 0
    partial: bytearray | None = None
    total = number = 0
    for body in bodies:
        if not body or body[0] < 0xE0:
            out.append("pass")
            continue
        verdict: str | None = None
        if body[0] == 0xF0 and len(body) >= 4:
            if partial is not None:
                counts["restart"] += 1
            partial = None
            size = (body[1] << 16) + (body[2] << 8) + body[3]
            data = body[4:]
            if size > limit:
                verdict = "too_large"
            elif not data:
                verdict = "empty"
            elif len(data) >= size:
                verdict = "overrun"
            else:
                partial, total, number = bytearray(data), size, 1
        elif body[0] >= 0xF0:
            verdict = "bad_head"
        elif partial is None:
            verdict = "orphan"
        elif number > 1 and body[0] - 0xE0 == (number - 1) % 16:
            counts["duplicate"] += 1
            out.append("more")
            continue
        elif body[0] - 0xE0 != number % 16:
            verdict = "gap"
        elif len(body) == 1:
            verdict = "empty"
        elif len(partial) + len(body) - 1 > total:
            verdict = "overrun"
        else:
            partial += body[1:]
            number += 1
        if verdict is not None:
            counts[verdict] += 1
            partial = None
            out.append("too-large" if verdict == "too_large" else "reassembly")
        elif partial is not None and len(partial) == total:
            out.append(bytes(partial))
            joined += 1
            partial = None
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
        op = rng.randrange(9)
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
        elif op == 5 and frames[i][:1] == b"\xf0" and len(frames[i]) >= 4:
            total = rng.choice([0, 1, rng.randrange(1 << 24)])
            frames[i] = b"\xf0" + total.to_bytes(3, "big") + frames[i][4:]  # wrong total
        elif op == 6:
            frames[i] = frames[i] + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
        elif op == 7:
            frames.insert(i, bytes([0x84, 1, 13, 0, 1]))  # a message between pieces
        else:
            frames = frames[:i] + frames[:i]  # a go-back-N retransmission from the start
    return frames


# ---- tests -------------------------------------------------------------------------


def test_split_examples() -> None:
    body = bytes(range(256)) * 3  # 768 bytes
    frames = pieces.split(body, 256)
    assert [len(f) for f in frames] == [252, 252, 252, 19]
    assert frames[0][:4] == bytes.fromhex("f0000300") and frames[0][4:] == body[:248]
    assert [f[0] for f in frames[1:]] == [0xE1, 0xE2, 0xE3]
    assert b"".join(f[4:] if f[0] == 0xF0 else f[1:] for f in frames) == body
    assert pieces.split(body[:252], 256) == [body[:252]]  # fits: never cut
    with pytest.raises(ValueError):
        pieces.split(bytes(1 << 24), 512)


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


@pytest.mark.parametrize(
    ("frames", "answers", "kind"),
    [
        ([b"\xe1abc"], ["reassembly"], "orphan"),
        ([b"\xf0\x00\x00\x05ab", b"\xe2cde"], ["more", "reassembly"], "gap"),
        ([b"\xf0\x00\x00\x05ab", b"\xe1cd", b"\xe3e"], ["more", "more", "reassembly"], "gap"),
        ([b"\xf0\x00\x00\x05ab", b"\xe1cdef"], ["more", "reassembly"], "overrun"),
        ([b"\xf0\x00\x00\x02ab"], ["reassembly"], "overrun"),
        ([b"\xf0\x00\x00\x05"], ["reassembly"], "empty"),
        (
            [b"\xf0\x00\x00\x06ab", b"\xe1cd", b"\xe1cd", b"\xe2ef"],
            ["more", "more", "more", b"abcdef"],
            "duplicate",
        ),
        (  # a repeated number is ignored whatever its bytes: the first copy counts
            [b"\xf0\x00\x00\x06ab", b"\xe1cd", b"\xe1cx", b"\xe2ef"],
            ["more"] * 3 + [b"abcdef"],
            "duplicate",
        ),
        ([b"\xf0\x00\x00\x05ab", b"\xe1"], ["more", "reassembly"], "empty"),
        ([b"\xf0\x00\x00"], ["reassembly"], "bad_head"),
        ([b"\xf7abc"], ["reassembly"], "bad_head"),
        ([b"\xf0\x00\x10\x01ab"], ["too-large"], "too_large"),
        (
            [b"\xf0\x00\x00\x05ab", b"\xf0\x00\x00\x03ab", b"\xe1c"],
            ["more", "more", b"abc"],
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


def test_first_seq_differential() -> None:
    """The seq an ERROR too-large names, read from a first piece's CBOR heads: host and
    C agree on 3,000 first pieces of real envelopes, cut short and mutated."""
    rng = random.Random(7)
    samples = []
    for _ in range(3000):
        seq = rng.choice([0, 1, 23, 24, 255, 256, 65535, 65536, (1 << 32) - 1, 1 << 32])
        head = cbor.encode([1, rng.randrange(30), seq, 5, b"x" * 10])[:-11]
        piece = b"\xf0\x00\x10\x00" + head + bytes(rng.randrange(256) for _ in range(4))
        piece = piece[: rng.randrange(len(piece) + 1)] if rng.random() < 0.3 else piece
        if rng.random() < 0.3 and piece:
            at = rng.randrange(len(piece))
            piece = piece[:at] + bytes([rng.randrange(256)]) + piece[at + 1 :]
        samples.append(piece)
    answers = c_answers([("piece_seq", [p]) for p in samples])
    assert [a[0] for a in answers] == [pieces.first_seq(p) for p in samples]
    whole = pieces.split(encode_message(StatusRequest(), 77, 5) + bytes(300), 128)[0]
    assert pieces.first_seq(whole) == 77


def test_too_large_after_refusal_leaves_orphans() -> None:
    """After a too-large first piece, its continuations are refused one by one, counted."""
    body = bytes(600)
    frames = pieces.split(body, 128)
    out, counts, joined = host_join(599, frames)
    assert out == ["too-large"] + ["reassembly"] * (len(frames) - 1)
    assert counts["too_large"] == 1 and counts["orphan"] == len(frames) - 1 and joined == 0


@pytest.mark.skipif(MICROPYTHON is None, reason="micropython missing")
def test_micropython_agrees(tmp_path: Path) -> None:
    """hirmem_mp.frag (the MicroPython agent's codec) against the host and the oracle:
    1,000 random bodies split, 1,500 mutated sequences joined, 500 first_seq reads."""
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
        "seq": [p.hex() for p in seq_cases],
    }
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(cases))
    got = json.loads(run_mp(MP_DIR / "checks" / "pieces.py", str(path), timeout=300, heap="32M"))
    assert got["split"] == [[p.hex() for p in pieces.split(b, mf)] for b, mf in split_cases]
    for (limit, frames), (answers, counts, joined) in zip(join_cases, got["join"], strict=True):
        out, expected_counts, expected_joined = oracle_join(limit, frames)
        assert answers == [a.hex() if isinstance(a, bytes) else a for a in out], frames
        assert counts == [expected_counts[k] for k in KINDS] and joined == expected_joined
    assert got["seq"] == [pieces.first_seq(p) for p in seq_cases]
