"""The fast CBOR paths against the strict ones, over thousands of inputs.

:func:`hirmem.protocol.cbor.decode` lets cbor2's C decoder read first and keeps its
value only when that provably is the strict reader's; :func:`encode_map` and
:func:`encode_array` write flat maps and arrays in one pass. Each must give exactly
what the strict path gives: the same value (types included), the same bytes, or the
same error with the same message. The strict side here is ``decode_strict`` and
``encode``, themselves checked against cbor2 and RFC 8949 in ``test_cbor.py``.
"""

from __future__ import annotations

import random

import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hirmem.protocol import cbor
from hirmem.protocol.cbor import MAX_DEPTH, Tag, decode, decode_strict, encode
from hirmem.protocol.errors import CborError
from test_cbor import PROPS, U64, keys, norm, other_keys, scalars, values


def outcome(fn: object, *args: object) -> tuple[str, object]:
    """("ok", a comparable shape of the value) or ("error", the exception's type and
    message): what a caller of ``fn`` can observe."""
    try:
        got = fn(*args)  # type: ignore[operator]
    except Exception as exc:  # the strict paths raise CborError; any other must match too
        return "error", (type(exc).__name__, str(exc))
    return "ok", (norm(got) if not isinstance(got, bytes) else got)


def same_decoding(data: bytes) -> None:
    assert outcome(decode, data) == outcome(decode_strict, data), data.hex()


# ---- decode: the compiled path against the strict reader ----------------------------------


@PROPS
@given(values)
def test_valid_encodings_decode_alike(value: object) -> None:
    data = encode(value)
    assert norm(decode(data)) == norm(decode_strict(data)) == norm(value)


def _mutations(data: bytes, rng: random.Random) -> list[bytes]:
    """Bytes near a valid encoding: a flipped, dropped, inserted or duplicated byte, a
    truncation, trailing bytes."""
    out = []
    k = rng.randrange(len(data))
    out.append(data[:k] + bytes([data[k] ^ (1 << rng.randrange(8))]) + data[k + 1 :])
    out.append(data[:k] + bytes([rng.randrange(256)]) + data[k + 1 :])
    out.append(data[:k] + data[k + 1 :])
    out.append(data[:k] + bytes([rng.randrange(256)]) + data[k:])
    out.append(data[:k] + data[k : k + 3] + data[k:])
    out.append(data[:k])
    out.append(data + bytes([rng.randrange(256)]))
    return out


def _random_value(rng: random.Random, depth: int = 0) -> object:
    pick = rng.randrange(10 if depth < 4 else 6)
    if pick == 0:
        return rng.choice([0, 1, 23, 24, 255, 256, 65535, 65536, U64 - 1, -1, -24, -25, -U64])
    if pick == 1:
        return rng.randrange(-(1 << 40), 1 << 40)
    if pick == 2:
        return rng.randbytes(rng.choice([0, 1, 23, 24, 40]))
    if pick == 3:
        return "".join(rng.choice("ab\u00e9\u4e2d\U0001f600z") for _ in range(rng.randrange(30)))
    if pick == 4:
        return rng.choice([True, False, None])
    if pick == 5:
        return rng.choice(["", "t", "temp0", "reason"])
    if pick in (6, 7):
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(5))]
    if pick == 8:
        choices = [rng.randrange(-30, 30), rng.randbytes(rng.randrange(4)), str(rng.random())]
        return {rng.choice(choices): _random_value(rng, depth + 1) for _ in range(rng.randrange(5))}
    return Tag(rng.choice([18, 24, 98, 1004, 55799, 1 << 20]), _random_value(rng, depth + 1))


def test_mutated_encodings_decode_or_fail_alike() -> None:
    """Thousands of near-valid inputs: the same value or the same refusal, word for word."""
    rng = random.Random(20260513)
    checked = 0
    for _ in range(1500):
        data = encode(_random_value(rng))
        if not data:
            continue
        for mutated in _mutations(data, rng):
            same_decoding(mutated)
            checked += 1
    assert checked > 10_000


# inputs cbor2 reads (or reads into something else) that hirmem refuses or reads as Tags
CBOR2_READS_OTHERWISE = {
    "float": "f93e00",
    "double": "fb3ff0000000000000",
    "undefined": "f7",
    "simple value": "f0",
    "two-byte simple": "f820",
    "indefinite array": "9f0102ff",
    "indefinite text": "7f616161626063ff",
    "non-minimal head": "1817",
    "non-minimal length": "5801ff",
    "length-first key order": "a2616101426162" + "02",
    "bytes key after longer text": "a2626162014161" + "02",
    "negative key after larger positive": "a2" + "20" + "01" + "1818" + "02",
    "duplicate keys": "a2616101616102",
    "bignum": "c249010000000000000000",
    "small bignum": "c24101",
    "negative bignum": "c349010000000000000000",
    "datetime": "c11a5f5e1000",
    "set": "d9010283010203",
    "self-describe": "d9d9f700",
    "shared value": "d81c8101",
    "string reference namespace": "d90100826361626364d81900",
    "decimal fraction": "c48221196ab3",
    "array key": "a1810100",
    "bool key": "a1f501",
    "null key": "a1f601",
    "trailing bytes": "0000",
    "invalid utf-8": "62c328",
    "too deep": "81" * (MAX_DEPTH + 1) + "00",
    "too deep map": "a101" * (MAX_DEPTH + 1) + "00",
    "too deep tag": "d862" * (MAX_DEPTH + 1) + "00",
}


@pytest.mark.parametrize("data", list(CBOR2_READS_OTHERWISE.values()),
                         ids=list(CBOR2_READS_OTHERWISE))  # fmt: skip
def test_what_cbor2_reads_otherwise_goes_to_the_strict_reader(data: str) -> None:
    raw = bytes.fromhex(data)
    assert cbor._decode_compiled(raw) is cbor._REFUSED
    same_decoding(raw)


def test_depth_limit_exactly() -> None:
    for inner in (b"\x00", b"\x80", b"\xa0", b"\x60"):
        for n in (MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1):
            same_decoding(b"\x81" * n + inner)
            same_decoding(b"\xa1\x01" * n + inner)
            same_decoding(b"\xd8\x62" * n + inner)


def test_tags_come_back_as_tags() -> None:
    data = encode(Tag(18, [b"p", {}, b"x", Tag(1004, "2026")]))
    got = decode(data)
    assert isinstance(got, Tag) and got.number == 18
    assert isinstance(got.value[3], Tag) and got.value[3] == Tag(1004, "2026")


def test_a_device_pack_takes_the_compiled_path() -> None:
    """Not a speed test: the compiled path must actually vouch for what hirmem writes,
    or the speed-up would be lost without any test failing."""
    record = [bytes(16), b'{"t": 21.5}', "temp0", 1_780_000_000_000, bytes(32),
              *range(13), bytes(32), bytes(32)]  # fmt: skip
    payload = encode({1: 1, 2: bytes(8), 3: [record] * 8, 4: "x" * 40})
    pack = encode(Tag(18, [encode({1: -8, 4: b"kid"}), {}, payload, bytes(64)]))
    for data in (pack, payload):
        assert cbor._decode_compiled(data) is not cbor._REFUSED
        assert norm(decode(data)) == norm(decode_strict(data))


# ---- encode_map / encode_array against encode ---------------------------------------------

members = st.one_of(
    scalars,
    values,
    st.floats(allow_nan=True),
    st.builds(cbor2.CBORTag, st.integers(0, 100), st.none()),
    st.text(st.characters(categories=["Cs"]), min_size=1, max_size=2),  # unencodable
    st.sets(st.integers(0, 3), max_size=2),
)


@PROPS
@given(st.dictionaries(st.one_of(keys, keys, other_keys), members, max_size=10))
def test_encode_map_is_encode(mapping: dict[object, object]) -> None:
    assert outcome(cbor.encode_map, mapping) == outcome(encode, mapping)


@PROPS
@given(st.lists(members, max_size=10))
def test_encode_array_is_encode(items: list[object]) -> None:
    assert outcome(cbor.encode_array, items) == outcome(encode, items)
    assert outcome(cbor.encode_array, tuple(items)) == outcome(encode, items)


def test_encode_map_and_array_at_every_length_boundary() -> None:
    for n in (0, 1, 23, 24, 255, 256, 300):
        m = {f"k{j}": j for j in range(n)}
        assert cbor.encode_map(m) == encode(m)
        items = [j * 7919 - 3000 for j in range(n)]
        assert cbor.encode_array(items) == encode(items)
    deep: object = 0
    for _ in range(MAX_DEPTH - 1):
        deep = [deep]
    assert cbor.encode_array([deep]) == encode([deep])
    with pytest.raises(CborError):
        cbor.encode_array([[deep]])
    assert outcome(cbor.encode_map, {"a": [[deep]]}) == outcome(encode, {"a": [[deep]]})
