"""The C wire modules (firmware/core: hm_crc32, hm_frame, hm_cbor, hm_msg, hm_frag).

Driven through tests/native/t_wire.c: every case of protocol/vectors/frames.json and
messages.json reproduced bit for bit, then a seeded differential fuzz (20,000 inputs)
in which the C decoders and the host reference (hirmem.protocol.frames, .cbor, .messages)
must agree on accept/refuse, on the error kind or ERROR code, and on the
decoded content and its re-encoding.

Every f8 xx two-byte simple value is refused on both sides (SPEC §3.2): the C reader
does so by construction, the host since commit 0183ce0 ("CBOR fixes from fuzzing").
"""

from __future__ import annotations

import binascii
import dataclasses
import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from conftest import vector_params
from hirmem.protocol import cbor
from hirmem.protocol.cbor import Tag
from hirmem.protocol.errors import CborError, FrameError, MessageError
from hirmem.protocol.frames import (
    BAD_COBS,
    BAD_CRC,
    TOO_LONG,
    TOO_SHORT,
    FrameDecoder,
    cobs_decode,
    cobs_encode,
    encode_frame,
)
from hirmem.protocol.messages import (
    BSTR,
    BSTR0_8,
    BSTR0_16,
    BSTR8,
    BSTR16,
    BSTR32,
    BSTR64,
    CAPTURE_STATUS,
    CLASSES,
    ERROR_CODE,
    HARD,
    LOG_LEVEL,
    PACK_STATUS,
    PAYLOAD,
    REASON,
    STATE,
    TSTR,
    UINT,
    UINT16,
    UINT32,
    VERDICT,
    Message,
    MsgType,
    decode_message,
    encode_message,
    from_json,
)
from hirmem.protocol.messages import Q as Q16
from native_harness import Arg, run

Answer = list[Arg | str]
Request = tuple[str, Sequence[Arg]]

U32 = (1 << 32) - 1
U64 = (1 << 64) - 1
HM_MAX_FRAME = 512  # firmware/core/hm_config.h defaults
HM_MAX_MESSAGE = 4096


def wire(requests: Sequence[Request]) -> list[Answer]:
    return run("t_wire", requests)


def one(cmd: str, *args: Arg) -> Answer:
    return wire([(cmd, args)])[0]


# ---- oracles: the host reference ----------------------------------------------------


def spec_cbor_ok(data: bytes) -> bool:
    """protocol.cbor accepts data; an accepted item re-encodes to the same bytes (SPEC §3)."""
    try:
        item = cbor.decode(data)
    except CborError:
        return False
    assert cbor.encode(item) == data, f"host: {data.hex()} does not re-encode to itself"
    return True


def field_values(message: Message) -> list[Arg]:
    out: list[Arg] = []
    for f in dataclasses.fields(message):  # type: ignore[arg-type]
        value = getattr(message, f.name)
        out.append(value.encode() if isinstance(value, str) else value)
    return out


def expect_decode(body: bytes, inner: bool) -> Answer:
    """What msg_decode answers, from hirmem.protocol.messages.decode_message."""
    if not spec_cbor_ok(body):
        return ["err", 3, 0, 0]
    item = cbor.decode(body)
    typ = ref = 0
    if isinstance(item, list) and len(item) >= 4:
        head = item[:3]
        if all(type(x) is int for x in head) and 0 <= head[2] <= U32:
            ref = head[2]
        if (
            type(head[0]) is int
            and head[0] == 1
            and type(head[1]) is int
            and head[1] in CLASSES  # 1..15 but the retired 14
        ):
            typ = head[1]
    try:
        env = decode_message(body, inner=inner)
    except MessageError as exc:
        return ["err", int(exc.code), typ, ref]
    msg = env.message
    return ["ok", int(msg.TYPE), env.seq, env.ack, body, *field_values(msg)]


def expect_stream(stream: bytes, max_frame: int) -> Answer:
    dec = FrameDecoder(max_frame)
    events: Answer = [x if isinstance(x, bytes) else x.kind for x in dec.feed(stream)]
    errors = dec.stats.errors
    counts = [errors.get(kind, 0) for kind in (TOO_SHORT, TOO_LONG, BAD_COBS, BAD_CRC)]
    return [*events, "stats", dec.stats.frames, dec.stats.empty, *counts]


def expect_uncobs(data: bytes) -> Answer:
    try:
        return [cobs_decode(data)]
    except FrameError as err:
        return [err.kind]


def expect_encode(message: Message, seq: int, ack: int, inner: bool) -> Answer:
    try:
        return [encode_message(message, seq, ack, inner=inner)]
    except MessageError as exc:
        return ["err", int(exc.code)]


def encode_request(message: Message, seq: int, ack: int, inner: bool) -> Request:
    values = field_values(message)
    if inner:
        return ("msg_encode_inner", [int(message.TYPE), *values])
    return ("msg_encode", [int(message.TYPE), seq << 32 | ack, *values])


# ---- C-only unit checks ---------------------------------------------------------------


def test_selftest() -> None:
    answer = one("selftest")
    assert answer[0] == "ok", f"selftest failed at t_wire.c line {answer[1:]!r}"
    assert isinstance(answer[1], int) and answer[1] > 20_000


def test_crc32_check_values_and_zlib() -> None:
    rng = random.Random(32)
    datas = [b"123456789", b"\x42", b"", *(rng.randbytes(rng.randrange(600)) for _ in range(200))]
    answers = wire([("crc32", [d]) for d in datas])
    assert answers[0] == [0xCBF43926, 0xCBF43926]
    assert answers[1] == [0x4AD0CF31, 0x4AD0CF31]
    for data, answer in zip(datas, answers, strict=True):
        want = binascii.crc32(data)
        assert answer == [want, want]


# ---- frames.json ------------------------------------------------------------------------


@pytest.mark.parametrize("case", vector_params("frames", "valid"))
def test_frame_vectors_valid(case: dict[str, Any]) -> None:
    body, frame = bytes.fromhex(case["body"]), bytes.fromhex(case["wire"])
    assert frame.index(0) == len(frame) - 1
    crc = int(case["crc32"], 16)
    fits = [mf for mf in (128, HM_MAX_FRAME) if len(body) + 4 <= mf]
    requests: list[Request] = [("crc32", [body])]
    for mf in fits:
        requests += [("frame_encode", [body, mf]), ("frame_stream", [frame, mf])]
    answers = wire(requests)
    assert answers[0] == [crc, crc]
    for k in range(len(fits)):
        assert answers[1 + 2 * k] == [frame]
        assert answers[2 + 2 * k] == [body, "stats", 1, 0, 0, 0, 0, 0]


@pytest.mark.parametrize("case", vector_params("frames", "cobs"))
def test_cobs_vectors(case: dict[str, Any]) -> None:
    data, encoded = bytes.fromhex(case["data"]), bytes.fromhex(case["encoded"])
    assert wire([("cobs", [data]), ("uncobs", [encoded])]) == [[encoded], [data]]


@pytest.mark.parametrize("case", vector_params("frames", "invalid"))
def test_frame_vectors_invalid(case: dict[str, Any]) -> None:
    frame = bytes.fromhex(case["wire"])
    assert frame.index(0) == len(frame) - 1
    kind = case["error"]
    counts = [int(kind == k) for k in (TOO_SHORT, TOO_LONG, BAD_COBS, BAD_CRC)]
    assert one("frame_stream", frame, case["max_frame"]) == [kind, "stats", 0, 0, *counts]


@pytest.mark.parametrize("case", vector_params("frames", "streams"))
def test_frame_vectors_streams(case: dict[str, Any]) -> None:
    stream = bytes.fromhex(case["stream"])
    events: Answer = [
        bytes.fromhex(e["body"]) if "body" in e else e["error"] for e in case["expected"]
    ]
    answer = one("frame_stream", stream, case["max_frame"])
    assert answer[: len(events)] == events
    assert answer == expect_stream(stream, case["max_frame"])  # counters too


def test_spec_final_full_block_example() -> None:
    """SPEC §2.3: a 250-byte body whose decoded frame is 254 non-zero bytes."""
    body = bytes((13 * i % 255) + 1 for i in range(250))
    frame = b"\xff" + body + bytes.fromhex("ebf6baeb") + b"\x00"
    assert wire([("frame_encode", [body, 512]), ("frame_stream", [frame, 512])]) == [
        [frame],
        [body, "stats", 1, 0, 0, 0, 0, 0],
    ]


# ---- messages.json ------------------------------------------------------------------------


@pytest.mark.parametrize("case", vector_params("messages", "valid"))
def test_message_vectors_valid(case: dict[str, Any]) -> None:
    body = bytes.fromhex(case["body"])
    message = from_json(case["message"])
    seq, ack = case["seq"], case["ack"]
    requests: list[Request] = [
        ("msg_decode", [body, 0]),
        encode_request(message, seq, ack, False),
    ]
    frame = bytes.fromhex(case["frame"]) if case["frame"] else None
    if frame is not None:
        requests += [("frame_encode", [body, 512]), ("frame_stream", [frame, 512])]
    answers = wire(requests)
    assert answers[0] == ["ok", int(message.TYPE), seq, ack, body, *field_values(message)]
    assert answers[1] == [body]
    if frame is not None:
        assert answers[2] == [frame]
        assert answers[3] == [body, "stats", 1, 0, 0, 0, 0, 0]
    else:
        assert one("frame_encode", body, 512) == ["refused"]


@pytest.mark.parametrize("case", vector_params("messages", "invalid"))
def test_message_vectors_invalid(case: dict[str, Any]) -> None:
    body = bytes.fromhex(case["body"])
    answer = one("msg_decode", body, 0)
    assert answer[:2] == ["err", case["error_code"]]
    assert answer == expect_decode(body, False)  # type and ERROR ref as well


@pytest.mark.parametrize("case", vector_params("messages", "pieces"))
def test_message_vectors_pieces(case: dict[str, Any]) -> None:
    body = bytes.fromhex(case["body"])
    mf = case["max_frame"]
    cut = [bytes.fromhex(p) for p in case["pieces"]]
    frames = [bytes.fromhex(f) for f in case["frames"]]
    answers = wire(
        [
            ("piece_split", [body, mf]),
            *(("frame_encode", [p, mf]) for p in cut),
            ("frame_stream", [b"".join(frames), mf]),
            ("piece_join", [HM_MAX_MESSAGE, *cut]),
            # a receiver whose max_message is one byte short refuses at the last piece
            ("piece_join", [len(body) - 1, *cut]),
        ]
    )
    n = len(cut)
    assert answers[0] == cut
    assert answers[1 : 1 + n] == [[f] for f in frames]
    assert answers[1 + n] == [*cut, "stats", n, 0, 0, 0, 0, 0]
    assert answers[2 + n] == ["more"] * (n - 1) + [body, "refused", *[0] * 8, "joined", 1]
    assert answers[3 + n][:n] == ["more"] * (n - 1) + ["too-large"]


def test_two_byte_simple_values_refused() -> None:
    """SPEC §3.2 refuses every f8 xx, also f8 14/15/16 (not false/true/null)."""
    simples = (0, 19, 20, 21, 22, 23, 24, 31, 32, 255)
    bodies = [bytes([0x84, 0xF8, simple, 0x09, 0x07, 0x04]) for simple in simples]
    answers = wire(
        [("cbor_check", [bytes([0x81, 0xF8, simple])]) for simple in simples]
        + [("msg_decode", [body, 0]) for body in bodies]
    )
    assert answers[: len(simples)] == [["simple"]] * len(simples)
    assert answers[len(simples) :] == [["err", 3, 0, 0]] * len(simples)
    assert answers[len(simples) :] == [expect_decode(body, False) for body in bodies]


# ---- differential fuzz ----------------------------------------------------------------------

FUZZ_SEED = 20_240_611
N_STREAMS = 3_000
N_COBS = 2_000
N_CBOR = 3_000
N_DECODE = 10_000  # and the 2,000 once spent on the retired FRAGMENT codec
N_ENCODE = 2_000
TOTAL = N_STREAMS + N_COBS + N_CBOR + N_DECODE + N_ENCODE

MAX_FRAMES = [128, 129, 200, 253, 254, 255, 256, 257, 300, 400, 508, 509, 510, 511, 512]
TEXT_CHARS = "abcXYZ 09_-é€𝄞\u00a0\u2028ßİ"

# upper edge of each integer kind and exact/maximal size of each byte-string kind, as
# SPEC §5 states them (the oracle, not this table, decides what is valid)
INT_EDGE = {
    UINT: U64, UINT32: U32, UINT16: 0xFFFF, Q16: 0x10000, CAPTURE_STATUS: 2, VERDICT: 2,
    HARD: 15, STATE: 4, PACK_STATUS: 3, REASON: 11, LOG_LEVEL: 3, ERROR_CODE: 8,
}  # fmt: skip
BYTES_SIZES = {
    BSTR8: (8,), BSTR16: (16,), BSTR32: (32,), BSTR64: (64,), BSTR0_8: (0, 8), BSTR0_16: (0, 16),
}  # fmt: skip


def rand_text(rng: random.Random, valid: bool = True) -> str:
    text = "".join(rng.choice(TEXT_CHARS) for _ in range(rng.randrange(0, 80)))
    if rng.random() < 0.1:  # near the bound of 240 bytes (120 characters of 2 bytes)
        text = "é" * (120 + rng.randrange(-1, 1 if valid else 2))
    return text


def rand_value(rng: random.Random, kind: str, valid: bool = True) -> object:
    if kind in INT_EDGE:
        edge = INT_EDGE[kind]
        low = 1 if kind == ERROR_CODE else 0
        if not valid and rng.random() < 0.5:  # (requests carry numbers up to 2^64 - 1)
            return rng.choice([min(edge + 1, U64), low - 1 if low else min(edge + 2, U64), U64])
        return rng.choice([low, edge, rng.randint(low, edge), rng.randint(low, min(edge, 30))])
    if kind == TSTR:
        return rand_text(rng, valid)
    if kind in BYTES_SIZES:
        sizes = BYTES_SIZES[kind]
        n = rng.choice(sizes) if valid or rng.random() < 0.5 else rng.choice(sizes) + 1
        return rng.randbytes(n)
    if kind == PAYLOAD:
        return rng.randbytes(rng.choice([0, 1, 10, 255, 256] + ([] if valid else [257])))
    assert kind == BSTR
    return rng.randbytes(rng.choice([0, 1, 23, 24, 300]))


def rand_message(rng: random.Random, valid: bool = True) -> Message:
    cls = CLASSES[rng.choice(sorted(CLASSES))]
    return cls(*(rand_value(rng, kind, valid) for kind in cls.FIELDS))


def rand_envelope(rng: random.Random, message: Message) -> tuple[int, int]:
    seq = 0 if message.TYPE in (MsgType.ACK, MsgType.LOG, MsgType.ERROR) else 1
    seq = rng.choice([seq, seq, rng.randint(seq, U32)]) if seq else 0
    return seq, rng.choice([0, 1, rng.randint(0, U32), U32])


def valid_body(rng: random.Random, inner: bool = False) -> bytes:
    message = rand_message(rng)
    if inner:
        return encode_message(message, inner=True)
    return encode_message(message, *rand_envelope(rng, message))


ODD_ITEMS: list[object] = [
    -1, 0, 1, 2, 13, 14, 15, 99, 0x10000, 0x10001, U32, U32 + 1, U64, -U64 - 1, True, False,
    None, b"", "", [], {}, [1], {1: 2}, Tag(18, 0), Tag(1, b""), b"\x00" * 8, b"\x00" * 16,
    b"\x00" * 32, b"\x00" * 257, "x" * 240, "x" * 241,
]  # fmt: skip


def mutate(rng: random.Random, data: bytes) -> bytes:
    """One structural or byte-level change (several, sometimes)."""
    out = bytearray(data)
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        op = rng.randrange(9)
        pos = rng.randrange(len(out) + 1)
        if op == 0 and out:
            out[min(pos, len(out) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1 and out:
            out[min(pos, len(out) - 1)] = rng.choice([0x00, 0x18, 0x19, 0x1A, 0x1B, 0x1F,
                                                       0x5F, 0x9F, 0xBF, 0xF8, 0xF9, 0xFF,
                                                       rng.randrange(256)])  # fmt: skip
        elif op == 2:
            out[pos:pos] = bytes([rng.randrange(256)])
        elif op == 3 and out:
            del out[min(pos, len(out) - 1)]
        elif op == 4:
            del out[pos:]
        elif op == 5:
            out += rng.randbytes(rng.randint(1, 3))
        elif op == 6 and out:
            out[min(pos, len(out) - 1)] = rng.choice([0x14, 0x15, 0x16, 0xF4, 0xF5, 0xF6])
        elif op == 7 and pos + 2 <= len(out):
            out[pos : pos + 2] = bytes([0xF8, rng.choice([0x14, 0x15, 0x16, 0x20])])
        else:
            out[pos:pos] = rng.randbytes(rng.randint(0, 4))
    return bytes(out)


def schema_variant(rng: random.Random, body: bytes) -> bytes:
    """Well-formed CBOR with one element replaced, dropped or added: schema errors."""
    item = cbor.decode(body)
    assert isinstance(item, list)
    op = rng.randrange(4)
    index = rng.randrange(len(item))
    if op == 0:
        item[index] = rng.choice(ODD_ITEMS)
    elif op == 1:
        del item[index]
    elif op == 2:
        item.insert(index, rng.choice(ODD_ITEMS))
    else:
        item[index] = rng.choice(ODD_ITEMS)
        item[rng.randrange(len(item))] = rng.choice(ODD_ITEMS)
    return cbor.encode(item)


def rand_cbor(rng: random.Random, depth: int = 0) -> bytes:
    """Raw CBOR, mostly well-formed, with every kind of head and an occasional flaw."""

    def head(major: int, n: int) -> bytes:
        if rng.random() < 0.03:  # non-minimal
            return bytes([major << 5 | 27]) + n.to_bytes(8, "big")
        if n < 24:
            return bytes([major << 5 | n])
        for info, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
            if n < 1 << (8 * size):
                return bytes([major << 5 | info]) + n.to_bytes(size, "big")
        raise ValueError(n)

    kind = rng.randrange(12 if depth < 18 else 5)
    if kind == 0:
        return head(0, rng.choice([0, 23, 24, 255, 256, 65535, 65536, U32, U32 + 1, U64]))
    if kind == 1:
        return head(1, rng.choice([0, 7, 24, 1000, U64]))
    if kind == 2:
        return head(2, (n := rng.choice([0, 1, 8, 30]))) + rng.randbytes(n)
    if kind == 3:
        raw = rand_text(rng).encode()
        if rng.random() < 0.15:
            raw += rng.choice([b"\x80", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2"])
        return head(3, len(raw)) + raw
    if kind == 4:
        return rng.choice([b"\xf4", b"\xf5", b"\xf6", b"\xf7", b"\xf8\x14", b"\xf8\x15",
                           b"\xf8\x16", b"\xf8\x20", b"\xe0", b"\xf9\x00\x00", b"\xfc", b"\xff",
                           b"\x1f", b"\x5f\xff"])  # fmt: skip
    if kind in (5, 6, 7) or depth > 12:
        return head(4, (n := rng.randrange(0, 2 if depth > 12 else 4))) + b"".join(
            rand_cbor(rng, depth + 1) for _ in range(n)
        )
    if kind in (8, 9):
        # scalar keys mostly (depth 99: no containers), sometimes any item as a key
        keys = [rand_cbor(rng, 99 if rng.random() < 0.9 else depth + 1) for _ in range(3)]
        keys = keys[: rng.randrange(0, 4)]
        order = rng.random()
        if order < 0.7:
            keys = sorted(set(keys))
        elif order < 0.85 and keys:
            keys = sorted([*keys, keys[0]])  # a repeated key
        return head(5, len(keys)) + b"".join(k + rand_cbor(rng, depth + 1) for k in keys)
    if kind == 10:
        return head(6, rng.choice([0, 1, 18, 24, 55799])) + rand_cbor(rng, depth + 1)
    return b"\x81" * rng.choice([14, 15, 16, 17]) + b"\x00"  # around the depth limit


def rand_stream(rng: random.Random, max_frame: int) -> bytes:
    parts: list[bytes] = []
    for _ in range(rng.randint(1, 8)):
        op = rng.randrange(10)
        if op <= 3:
            size = rng.choice([1, 2, rng.randint(1, max_frame - 4), max_frame - 4])
            body = rng.randbytes(size) if rng.random() < 0.6 else bytes(size)
            if rng.random() < 0.3:
                body = bytes(b % 255 + 1 for b in body)  # zero-free: the longest encodings
            frame = encode_frame(body, max_frame)
            if op == 3:  # damage it, the delimiter kept last
                frame = mutate(rng, frame[:-1]) + b"\x00"
            parts.append(frame)
        elif op == 4:
            parts.append(b"\x00" * rng.randint(1, 3))
        elif op == 5:
            parts.append(rng.randbytes(rng.randint(1, 40)))
        elif op == 6:  # over the encoded limit, or right at it
            limit = max_frame + (max_frame + 253) // 254
            parts.append(b"\x01" * (limit + rng.randint(-2, 3)) + b"\x00")
        elif op == 7:  # decodes past max_frame
            big = rng.randint(max_frame - 6, HM_MAX_FRAME + 4)
            parts.append(encode_frame(bytes(big), max(HM_MAX_FRAME + 8, big + 4)))
        elif op == 8:  # frames too short
            parts.append(cobs_encode(rng.randbytes(rng.randint(0, 4))) + b"\x00")
        else:  # a frame cut by a premature delimiter
            frame = encode_frame(rng.randbytes(rng.randint(1, 60)), max_frame)
            cut = rng.randrange(1, len(frame))
            parts.append(frame[:cut] + b"\x00" + frame[cut:])
    return b"".join(parts)


def check_batch(
    requests: Sequence[Request], expected: Sequence[Answer], what: Callable[[int], str]
) -> None:
    answers = wire(requests)
    for index, (got, want) in enumerate(zip(answers, expected, strict=True)):
        assert got == want, f"{what(index)}: C {got!r} != host {want!r}"


def test_fuzz_total() -> None:
    assert TOTAL >= 20_000


def test_fuzz_frame_streams() -> None:
    rng = random.Random(FUZZ_SEED + 1)
    requests: list[Request] = []
    expected: list[Answer] = []
    for _ in range(N_STREAMS):
        mf = rng.choice(MAX_FRAMES)
        stream = rand_stream(rng, mf)
        requests.append(("frame_stream", [stream, mf]))
        expected.append(expect_stream(stream, mf))
    kinds = {x for answer in expected for x in answer if isinstance(x, str)}
    assert kinds >= {"too-short", "too-long", "bad-cobs", "bad-crc", "stats"}
    check_batch(requests, expected, lambda i: f"stream {requests[i][1]!r}")


def test_fuzz_cobs() -> None:
    rng = random.Random(FUZZ_SEED + 2)
    requests: list[Request] = []
    expected: list[Answer] = []
    for n in range(N_COBS):
        if n % 2 == 0:
            size = rng.choice([0, 1, 253, 254, 255, 508, 509, rng.randrange(700)])
            data = rng.randbytes(size)
            if rng.random() < 0.5:
                data = bytes(b if rng.random() < 0.98 else 0 for b in data.replace(b"\0", b"\1"))
            requests.append(("cobs", [data]))
            expected.append([cobs_encode(data)])
        else:
            enc = cobs_encode(rng.randbytes(rng.randrange(600)))
            if rng.random() < 0.7:
                enc = mutate(rng, enc)
            requests.append(("uncobs", [enc]))
            expected.append(expect_uncobs(enc))
    check_batch(requests, expected, lambda i: f"{requests[i]!r}")


def test_fuzz_cbor_check() -> None:
    rng = random.Random(FUZZ_SEED + 3)
    datas: list[bytes] = []
    for n in range(N_CBOR):
        data = rand_cbor(rng)
        if n % 3 == 0:
            data = mutate(rng, data)
        datas.append(data)
    answers = wire([("cbor_check", [d]) for d in datas])
    accepted = 0
    for data, answer in zip(datas, answers, strict=True):
        want = spec_cbor_ok(data)
        accepted += want
        assert (answer == ["ok"]) == want, f"cbor {data.hex()}: C {answer!r}, host ok={want}"
    assert 0.2 * N_CBOR < accepted < 0.9 * N_CBOR


def test_fuzz_message_decode() -> None:
    rng = random.Random(FUZZ_SEED + 4)
    requests: list[Request] = []
    expected: list[Answer] = []
    for n in range(N_DECODE):
        inner = n % 5 == 0
        body = valid_body(rng, inner=inner and rng.random() < 0.8)
        op = n % 4
        if op == 1:
            body = mutate(rng, body)
        elif op == 2:
            body = schema_variant(rng, body)
        elif op == 3 and rng.random() < 0.5:
            body = cbor.encode([rng.choice(ODD_ITEMS) for _ in range(rng.randrange(6))])
        requests.append(("msg_decode", [body, int(inner)]))
        expected.append(expect_decode(body, inner))
    outcomes = {(a[0], a[1]) for a in expected}
    assert {("err", c) for c in (1, 2, 3, 6)} <= outcomes
    assert len({a[1] for a in expected if a[0] == "ok"}) == len(CLASSES)  # every type accepted
    check_batch(requests, expected, lambda i: f"body {requests[i][1]!r}")


def test_fuzz_message_encode() -> None:
    rng = random.Random(FUZZ_SEED + 5)
    requests: list[Request] = []
    expected: list[Answer] = []
    for n in range(N_ENCODE):
        message = rand_message(rng, valid=n % 3 != 0)
        inner = n % 7 == 0  # msg_encode_inner carries seq 0, ack 0 (others: selftest)
        seq, ack = (0, 0) if inner else rand_envelope(rng, message)
        if n % 11 == 0 and not inner:
            seq = rng.choice([0, 1])  # sometimes against the type's rule
        requests.append(encode_request(message, seq, ack, inner))
        expected.append(expect_encode(message, seq, ack, inner))
    answers = wire(requests)
    for request, got, want in zip(requests, answers, expected, strict=True):
        if got == ["unrepresentable"]:  # a value beyond the C member's type
            assert want == ["err", 3], f"{request!r}: host {want!r}"
        else:
            assert got == want, f"{request!r}: C {got!r} != host {want!r}"
    assert sum(a[0] == "err" for a in expected) > N_ENCODE // 10


