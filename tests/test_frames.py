"""COBS, CRC-32 and the streaming frame decoder (hirmem.protocol.frames)."""

from __future__ import annotations

import binascii

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hirmem.protocol.errors import FrameError, HirmemError
from hirmem.protocol.frames import (
    BAD_COBS,
    BAD_CRC,
    DEFAULT_MAX_FRAME,
    MIN_MAX_FRAME,
    TOO_LONG,
    TOO_SHORT,
    FrameDecoder,
    cobs_decode,
    cobs_encode,
    crc32,
    decode_frame,
    encode_frame,
    max_wire_size,
)

RUN_01_FE = bytes(range(0x01, 0xFF))  # 254 bytes, no zero
RUN_01_FF = bytes(range(0x01, 0x100))  # 255 bytes
RUN_02_FF = bytes(range(0x02, 0x100))  # 254 bytes
RUN_03_FF = bytes(range(0x03, 0x100))  # 253 bytes

# The examples of the COBS literature (Cheshire & Baker 1999; the Wikipedia table), without
# the frame delimiter. Expected values spelled out block by block.
COBS_EXAMPLES: list[tuple[str, bytes, bytes]] = [
    ("empty", b"", b"\x01"),
    ("00", b"\x00", b"\x01\x01"),
    ("00 00", b"\x00\x00", b"\x01\x01\x01"),
    ("00 11 00", b"\x00\x11\x00", b"\x01\x02\x11\x01"),
    ("11 22 00 33", b"\x11\x22\x00\x33", b"\x03\x11\x22\x02\x33"),
    ("11 22 33 44", b"\x11\x22\x33\x44", b"\x05\x11\x22\x33\x44"),
    ("11 00 00 00", b"\x11\x00\x00\x00", b"\x02\x11\x01\x01\x01"),
    # a full block (code FF) that ends the data gets no empty block after it
    ("01..FE", RUN_01_FE, b"\xff" + RUN_01_FE),
    ("00 01..FE", b"\x00" + RUN_01_FE, b"\x01\xff" + RUN_01_FE),
    # 255 bytes: one full block of 01..FE, then a block holding FF alone (code 02)
    ("01..FF", RUN_01_FF, b"\xff" + RUN_01_FE + b"\x02\xff"),
    # 254 bytes 02..FF then 00: full block, then an empty block for the zero, then the
    # empty final block after it
    ("02..FF 00", RUN_02_FF + b"\x00", b"\xff" + RUN_02_FF + b"\x01\x01"),
    # 253 bytes 03..FF then 00 01: code FE (253 + zero), then code 02 for the final 01
    ("03..FF 00 01", RUN_03_FF + b"\x00\x01", b"\xfe" + RUN_03_FF + b"\x02\x01"),
]


@pytest.mark.parametrize(
    ("name", "data", "encoded"), COBS_EXAMPLES, ids=[e[0] for e in COBS_EXAMPLES]
)
def test_cobs_published_examples(name: str, data: bytes, encoded: bytes) -> None:
    assert cobs_encode(data) == encoded
    assert cobs_decode(encoded) == data


def test_cobs_example_lengths_are_what_the_literature_says() -> None:
    # sanity of the hand-written expectations themselves
    assert len(RUN_01_FE) == 254 and len(RUN_01_FF) == 255
    assert len(RUN_02_FF) == 254 and len(RUN_03_FF) == 253
    assert len(cobs_encode(RUN_01_FF)) == 257  # overhead ceil(255/254) = 2


def ref_cobs_encode(data: bytes) -> bytes:
    """Straight from the paper: a code byte per block, blocks end at 00 or after 254 bytes."""
    out = bytearray()
    code_at, code = 0, 1
    out.append(0)
    for i, byte in enumerate(data):
        if byte == 0:
            out[code_at] = code
            code_at, code = len(out), 1
            out.append(0)
            continue
        out.append(byte)
        code += 1
        if code == 0xFF:
            out[code_at] = code
            code_at, code = len(out), 1
            if i + 1 < len(data):
                out.append(0)
            else:
                return bytes(out)
    out[code_at] = code
    return bytes(out)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=1200),
        st.lists(st.sampled_from([b"\x00", b"\x01", RUN_01_FE[:253], RUN_01_FE]), max_size=8).map(
            b"".join
        ),
    )
)
def test_cobs_matches_reference_and_never_emits_zero(data: bytes) -> None:
    encoded = cobs_encode(data)
    assert 0 not in encoded
    assert encoded == ref_cobs_encode(data)
    assert cobs_decode(encoded) == data
    assert len(encoded) <= len(data) + max(1, -(-len(data) // 254))


# ---- CRC-32 -------------------------------------------------------------------------------


def ref_crc32(data: bytes) -> int:
    """Bitwise reflected CRC-32 (IEEE 802.3 polynomial 0xEDB88320), no tables."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0xEDB88320 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_crc32_check_value_and_one_frame_by_hand() -> None:
    assert crc32(b"123456789") == 0xCBF43926 == ref_crc32(b"123456789")
    # body 31..39, CRC CBF43926 little-endian = 26 39 F4 CB; no zero anywhere, so COBS is a
    # single block: code 0E (13 bytes + 1), the 13 bytes, then the 00 delimiter
    wire = encode_frame(b"123456789")
    assert wire.hex() == "0e" + b"123456789".hex() + "2639f4cb" + "00"
    assert decode_frame(wire) == b"123456789"


def test_crc_with_a_zero_byte_goes_through_cobs() -> None:
    body = b"\x00"
    crc = binascii.crc32(body).to_bytes(4, "little")
    assert crc.hex() == "8def02d2"
    assert encode_frame(body) == b"\x01\x05" + crc + b"\x00"


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=508))
def test_crc_is_binascii_little_endian(body: bytes) -> None:
    raw = cobs_decode(encode_frame(body)[:-1])
    assert raw == body + (binascii.crc32(body) & 0xFFFFFFFF).to_bytes(4, "little")
    assert crc32(body) == ref_crc32(body)


# ---- decode_frame errors ------------------------------------------------------------------


def frame_error(wire: bytes, max_frame: int = DEFAULT_MAX_FRAME) -> FrameError:
    with pytest.raises(FrameError) as info:
        decode_frame(wire, max_frame)
    err = info.value
    assert str(err) == f"{err.kind}: {err.detail}"
    return err


def test_bad_crc_names_both_values() -> None:
    wire = bytearray(encode_frame(b"hello world"))
    wire[3] ^= 0x01  # 'l' -> 'm'
    err = frame_error(bytes(wire))
    assert err.kind == BAD_CRC
    want = crc32(b"hemlo world")
    got = crc32(b"hello world")
    assert err.detail == f"CRC-32 expected 0x{want:08x}, frame carries 0x{got:08x}"


def test_bad_crc_in_the_crc_bytes() -> None:
    wire = bytearray(encode_frame(b"abc"))
    wire[-2] ^= 0x80
    err = frame_error(bytes(wire))
    assert err.kind == BAD_CRC
    carried = (crc32(b"abc") ^ 0x80000000).to_bytes(4, "little").hex()
    assert f"0x{crc32(b'abc'):08x}" in err.detail
    assert f"0x{int.from_bytes(bytes.fromhex(carried), 'little'):08x}" in err.detail


@pytest.mark.parametrize(
    ("wire", "detail"),
    [
        ("40 41 42", "block at offset 0 claims 63 bytes but only 2 remain"),
        ("02 41 05 41 42", "block at offset 2 claims 4 bytes but only 2 remain"),
        ("02 41 00 41 00", "zero byte inside the frame at offset 2"),
        ("03 41 00 41", "zero byte inside the block at offset 0"),
        ("00 00", "zero byte inside the frame at offset 0"),
    ],
)
def test_bad_cobs(wire: str, detail: str) -> None:
    err = frame_error(bytes.fromhex(wire.replace(" ", "")))
    assert err.kind == BAD_COBS
    assert err.detail == detail


@pytest.mark.parametrize("raw_size", [0, 1, 2, 3, 4])
def test_too_short(raw_size: int) -> None:
    err = frame_error(cobs_encode(bytes(range(1, raw_size + 1))) + b"\x00")
    assert err.kind == TOO_SHORT
    assert err.detail == f"{raw_size} decoded bytes; a frame needs at least 5"


def test_empty_wire_is_too_short() -> None:
    assert frame_error(b"").kind == TOO_SHORT
    assert frame_error(b"\x00").kind == TOO_SHORT


def test_too_long_by_wire_size_and_by_decoded_size() -> None:
    # zero-free: the encoded size crosses the wire limit first
    body = bytes((i % 255) + 1 for i in range(509))
    wire = encode_frame(body, 1024)
    err = frame_error(wire, 512)
    assert err.kind == TOO_LONG
    assert err.detail == f"{len(wire) - 1} encoded bytes exceed max_frame 512"
    # all zeros: 513 decoded bytes fit the 515-byte wire limit, the decoded size does not
    body = bytes(509)
    wire = encode_frame(body, 1024)
    assert len(wire) - 1 <= max_wire_size(512) - 1
    err = frame_error(wire, 512)
    assert err.kind == TOO_LONG
    assert err.detail == "513 decoded bytes exceed max_frame 512"


@pytest.mark.parametrize("max_frame", [MIN_MAX_FRAME, 129, 256, 512, 1024, 4096])
def test_largest_frame_at_each_bound(max_frame: int) -> None:
    for body in (bytes(max_frame - 4), bytes((i % 255) + 1 for i in range(max_frame - 4))):
        wire = encode_frame(body, max_frame)
        assert len(wire) <= max_wire_size(max_frame)
        assert decode_frame(wire, max_frame) == body
        decoder = FrameDecoder(max_frame)
        assert decoder.feed(wire) == [body]
        with pytest.raises(FrameError) as info:
            encode_frame(body + b"\x01", max_frame)
        assert info.value.kind == TOO_LONG
        assert f"exceeds max_frame {max_frame}" in info.value.detail


def test_max_wire_size_is_tight() -> None:
    zero_free = bytes((i % 255) + 1 for i in range(2000))
    for n in range(1, 2000):
        # the worst case (no zero at all) plus the delimiter is exactly the bound
        assert len(cobs_encode(zero_free[:n])) + 1 == max_wire_size(n)
        assert len(cobs_encode(bytes(n))) + 1 <= max_wire_size(n)


def test_encode_frame_refuses_empty_bodies() -> None:
    with pytest.raises(FrameError) as info:
        encode_frame(b"")
    assert info.value.kind == TOO_SHORT
    assert "cannot be empty" in str(info.value)


def test_frame_errors_are_hirmem_errors() -> None:
    assert issubclass(FrameError, HirmemError)


# ---- FrameDecoder -------------------------------------------------------------------------


def event_view(events: list[bytes | FrameError]) -> list[tuple[str, bytes | str]]:
    return [("body", e) if isinstance(e, bytes) else ("error", e.kind) for e in events]


def full_view(events: list[bytes | FrameError]) -> list[tuple[str, bytes | str]]:
    return [("body", e) if isinstance(e, bytes) else ("error", str(e)) for e in events]


@pytest.mark.parametrize("max_frame", [0, 5, 64, MIN_MAX_FRAME - 1])
def test_decoder_floor_enforced(max_frame: int) -> None:
    with pytest.raises(ValueError, match=f"below the floor {MIN_MAX_FRAME}"):
        FrameDecoder(max_frame)
    assert FrameDecoder(MIN_MAX_FRAME).max_frame == MIN_MAX_FRAME


def test_too_long_frame_skipped_and_next_frame_decoded() -> None:
    big = encode_frame(bytes((i % 255) + 1 for i in range(900)), 1024)  # overflows the buffer
    mid = encode_frame(bytes(509), 1024)  # fits the buffer, too long once decoded
    decoder = FrameDecoder(512)
    events = decoder.feed(big + encode_frame(b"next") + mid + encode_frame(b"after"))
    assert event_view(events) == [
        ("error", TOO_LONG),
        ("body", b"next"),
        ("error", TOO_LONG),
        ("body", b"after"),
    ]
    assert str(events[0]) == "too-long: frame longer than max_frame 512; skipped"
    assert decoder.stats.errors == {TOO_LONG: 2}
    assert decoder.stats.frames == 2


def test_resynchronises_after_garbage_and_counts_every_error() -> None:
    good = encode_frame(b"first")
    flipped = bytearray(encode_frame(b"second"))
    flipped[2] ^= 0x04
    stream = (
        b"\x13\x37noise\x00"  # garbage ended by a delimiter
        + good
        + bytes(flipped)
        + b"\x00\x00"  # two empty frames
        + b"\x02\x41\x05\x00"  # COBS overrun
        + b"\x02\x01\x00"  # too short
        + b"garbage without delimiter "
        + encode_frame(b"merged into the garbage")
        + encode_frame(b"last")
    )
    decoder = FrameDecoder()
    events = decoder.feed(stream)
    kinds = event_view(events)
    assert kinds[1] == ("body", b"first")
    assert kinds[2] == ("error", BAD_CRC)
    assert kinds[3] == ("error", BAD_COBS)
    assert kinds[4] == ("error", TOO_SHORT)
    assert kinds[5][0] == "error"
    assert kinds[6] == ("body", b"last")
    assert len(kinds) == 7
    stats = decoder.stats
    assert stats.frames == 2
    assert stats.empty == 2
    assert stats.bad == 5 == sum(1 for e in events if isinstance(e, FrameError))
    assert stats.bytes_in == len(stream)


def test_empty_frames_skipped_and_counted() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b"\x00\x00\x00") == []
    assert decoder.stats.empty == 3
    assert decoder.feed(b"\x00" + encode_frame(b"x") + b"\x00") == [b"x"]
    assert decoder.stats.empty == 5
    assert decoder.stats.frames == 1
    assert decoder.stats.bad == 0


def test_bounded_memory_for_a_megabyte_without_delimiter() -> None:
    for chunk_size in (1, 4096, 1 << 20):
        decoder = FrameDecoder()
        limit = max_wire_size(decoder.max_frame) - 1
        total = 1 << 20
        chunk = bytes((i % 255) + 1 for i in range(min(chunk_size, total)))
        fed = 0
        steps = 0
        while fed < total:
            assert decoder.feed(chunk) == []
            assert len(decoder._buf) <= limit
            fed += len(chunk)
            steps += 1
            if chunk_size == 1 and steps > 5000:
                # byte by byte through the whole megabyte is slow: the state does not
                # change after the overflow, so jump ahead with one big chunk
                rest = bytes(((i % 255) + 1) for i in range(total - fed))
                assert decoder.feed(rest) == []
                assert len(decoder._buf) <= limit
                fed = total
        events = decoder.feed(b"\x00" + encode_frame(b"alive"))
        assert event_view(events) == [("error", TOO_LONG), ("body", b"alive")]
        assert decoder.stats.errors == {TOO_LONG: 1}
        assert decoder.stats.bytes_in == total + 1 + len(encode_frame(b"alive"))


# ---- chunking -----------------------------------------------------------------------------

bodies = st.binary(min_size=1, max_size=508)
garbage = st.binary(min_size=1, max_size=40)
elements = st.one_of(
    bodies.map(lambda b: ("frame", b)),
    garbage.map(lambda g: ("garbage", g)),
    st.just(("empty", b"")),
    st.binary(min_size=509, max_size=700).map(lambda b: ("long", b)),
)


def build_stream(parts: list[tuple[str, bytes]]) -> bytes:
    out = bytearray()
    for kind, data in parts:
        if kind == "frame":
            out += encode_frame(data)
        elif kind == "garbage":
            out += data
        elif kind == "empty":
            out += b"\x00"
        else:
            out += encode_frame(data, 1024)
    return bytes(out)


def model(stream: bytes, max_frame: int = DEFAULT_MAX_FRAME) -> list[tuple[str, bytes | str]]:
    """What a receiver must report: one event per non-empty delimited piece."""
    limit = max_wire_size(max_frame) - 1
    out: list[tuple[str, bytes | str]] = []
    for piece in stream.split(b"\x00")[:-1]:
        if not piece:
            continue
        if len(piece) > limit:
            out.append(("error", TOO_LONG))
            continue
        try:
            out.append(("body", decode_frame(piece, max_frame)))
        except FrameError as err:
            out.append(("error", err.kind))
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(elements, max_size=12), st.lists(st.integers(0, 10_000), max_size=20))
def test_any_chunking_gives_the_same_events(
    parts: list[tuple[str, bytes]], cuts: list[int]
) -> None:
    stream = build_stream(parts)
    whole = FrameDecoder()
    expected = whole.feed(stream)
    points = sorted({c % (len(stream) + 1) for c in cuts})
    chunked = FrameDecoder()
    events: list[bytes | FrameError] = []
    previous = 0
    for point in [*points, len(stream)]:
        events += chunked.feed(stream[previous:point])
        previous = point
    assert full_view(events) == full_view(expected)
    assert event_view(expected) == model(stream)
    assert chunked.stats == whole.stats
    assert whole.stats.frames == sum(1 for e in expected if isinstance(e, bytes))
    assert whole.stats.bad == len(expected) - whole.stats.frames
    assert whole.stats.empty == sum(1 for p in stream.split(b"\x00")[:-1] if not p)
    # every frame not glued to preceding garbage comes through, in order
    intact = [
        data
        for index, (kind, data) in enumerate(parts)
        if kind == "frame"
        and (
            index == 0 or parts[index - 1][0] != "garbage" or parts[index - 1][1].endswith(b"\x00")
        )
    ]
    assert [e for e in expected if isinstance(e, bytes)] == intact
