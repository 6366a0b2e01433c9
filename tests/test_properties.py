"""Property tests across the layers: frames, messages, signed packs."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hirmem.protocol import cbor, messages
from hirmem.protocol.cbor import Tag
from hirmem.protocol.errors import FrameError, HirmemError, MessageError, PackError
from hirmem.protocol.frames import FrameDecoder, decode_frame, encode_frame
from hirmem.protocol.keys import derive_test_key
from hirmem.protocol.messages import (
    CLASSES,
    MAX_TEXT,
    Q_ONE,
    TSTR,
    U32,
    U64,
    UNSEQUENCED,
    VERSION,
    Envelope,
    ErrorCode,
    Message,
    decode_message,
    encode_message,
)
from hirmem.protocol.packs import (
    ChainHead,
    KnowledgeItem,
    Pack,
    PackKind,
    Reason,
    TrustedKey,
    protected_header,
    sig_structure,
    sign_pack,
    verify_pack,
)
from hirmem.protocol.records import GENESIS, MAX_PAYLOAD, Record, record_id

PROPS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---- frames -------------------------------------------------------------------------------


@PROPS
@given(st.binary(min_size=1, max_size=508), st.integers(1, 64))
def test_frame_round_trip(body: bytes, chunk: int) -> None:
    wire = encode_frame(body)
    assert wire.endswith(b"\x00") and 0 not in wire[:-1]
    assert decode_frame(wire) == body
    assert decode_frame(wire[:-1]) == body
    for view in (bytearray(wire), memoryview(wire), memoryview(wire)[:-1]):
        decoded = decode_frame(view)  # type: ignore[arg-type]
        assert decoded == body and type(decoded) is bytes
    decoder = FrameDecoder()
    events: list[bytes | FrameError] = []
    for start in range(0, len(wire), chunk):
        events += decoder.feed(wire[start : start + chunk])
    assert events == [body]
    assert decoder.stats.frames == 1 and decoder.stats.bad == 0


@PROPS
@given(st.lists(st.binary(min_size=1, max_size=508), min_size=1, max_size=6))
def test_frame_sequences_round_trip(bodies: list[bytes]) -> None:
    stream = b"".join(encode_frame(b) for b in bodies)
    assert FrameDecoder().feed(stream) == bodies


# ---- messages -----------------------------------------------------------------------------

TEXT_240 = st.sampled_from(["", "x" * MAX_TEXT, "é" * (MAX_TEXT // 2), "€" * (MAX_TEXT // 3)])

# The field kinds are bounded in hirmem.protocol.messages (mirroring protocol/hirmem.cddl); the
# tables are read here so the round trips follow the contract as it evolves.
INT_LIMITS: dict[str, int] = messages._INT_LIMITS
INT_MIN: dict[str, int] = getattr(messages, "_INT_MIN", {})
BSTR_SIZES: dict[str, tuple[int, ...]] = messages._BSTR_SIZES
BSTR_MAX: dict[str, int] = getattr(messages, "_BSTR_MAX", {})


def int_range(kind: str) -> tuple[int, int]:
    return int(INT_MIN.get(kind, 0)), int(INT_LIMITS[kind])


def field_values(kind: str) -> st.SearchStrategy[Any]:
    if kind in INT_LIMITS:
        low, high = int_range(kind)
        edges = sorted(
            {low, high, min(high, low + 1), min(high, 23), min(high, 24), min(high, U32)}
        )
        return st.one_of(st.integers(low, high), st.sampled_from([e for e in edges if e >= low]))
    if kind == TSTR:
        return st.one_of(st.text(max_size=MAX_TEXT // 4), TEXT_240)
    if kind in BSTR_SIZES:
        return st.one_of(*(st.binary(min_size=n, max_size=n) for n in BSTR_SIZES[kind]))
    return st.binary(max_size=BSTR_MAX.get(kind, 300))


MESSAGE_CLASSES = sorted(CLASSES.values(), key=lambda c: int(c.TYPE))


def message_of(cls: type[Message]) -> st.SearchStrategy[Message]:
    return st.tuples(*(field_values(kind) for kind in cls.FIELDS)).map(lambda v: cls(*v))


def header_for(cls: type[Message]) -> st.SearchStrategy[tuple[int, int]]:
    seqs = st.just(0) if cls.TYPE in UNSEQUENCED else st.integers(1, U32)
    return st.tuples(seqs, st.integers(0, U32))


def test_every_message_type_is_covered() -> None:
    # every type but the retired FRAGMENT (SPEC §5.14), which has no class
    retired = {int(messages.MsgType.FRAGMENT)}
    assert {int(c.TYPE) for c in MESSAGE_CLASSES} == {int(t) for t in messages.MsgType} - retired
    known = {*INT_LIMITS, *BSTR_SIZES, *BSTR_MAX, TSTR, messages.BSTR}
    assert all(kind in known for cls in MESSAGE_CLASSES for kind in cls.FIELDS)


@given(seq=st.integers(0, U32), ack=st.integers(0, U32), fields=st.lists(st.integers(0, U32)))
def test_the_retired_fragment_type_is_unknown_whatever_follows(
    seq: int, ack: int, fields: list[int]
) -> None:
    """SPEC §5.14: type 14 is refused at step 4 (unknown-type), never as malformed,
    also in its old layout [1, 14, seq, ack, msg_id, offset, total, chunk]."""
    old_layout: list[object] = [*[*fields, 0, 0, 0][:3], b"chunk"]
    tails: list[list[object]] = [list(fields), old_layout]
    for tail in tails:
        for inner in (False, True):
            with pytest.raises(MessageError) as err:
                decode_message(cbor.encode([VERSION, 14, seq, ack, *tail]), inner=inner)
            assert err.value.code == ErrorCode.UNKNOWN_TYPE


@pytest.mark.parametrize("cls", MESSAGE_CLASSES, ids=lambda c: c.__name__)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_message_round_trip(cls: type[Message], data: Any) -> None:
    message = data.draw(message_of(cls))
    seq, ack = data.draw(header_for(cls))
    body = encode_message(message, seq, ack)
    assert decode_message(body) == Envelope(seq, ack, message)
    assert cbor.decode(body)[:4] == [VERSION, int(cls.TYPE), seq, ack]
    # through a frame, sized for the body
    max_frame = max(512, len(body) + 4)
    wire = encode_frame(body, max_frame)
    assert decode_message(decode_frame(wire, max_frame)).message == message
    assert FrameDecoder(max_frame).feed(wire) == [body]


def bad_value(kind: str) -> st.SearchStrategy[Any]:
    """A value the field kind must refuse."""
    wrong_types = st.sampled_from(["bytes", None, [b""], Tag(24, b"")])
    if kind in INT_LIMITS:
        low, high = int_range(kind)
        too_big = st.integers(high + 1, U64) if high < U64 else st.just(U64 + 1)
        return st.one_of(
            too_big,
            st.integers(-(1 << 64), low - 1),
            st.sampled_from([True, False, None, b"", "1", [1]]),
        )
    if kind == TSTR:
        return st.one_of(
            st.just("x" * (MAX_TEXT + 1)),
            st.just("é" * (MAX_TEXT // 2 + 1)),
            st.sampled_from([b"text", 1, None, ["t"]]),
        )
    if kind in BSTR_SIZES:
        sizes = BSTR_SIZES[kind]
        return st.one_of(
            st.binary(max_size=40).filter(lambda b: len(b) not in sizes),
            wrong_types,
            st.just(0),
        )
    if kind in BSTR_MAX:
        return st.one_of(
            st.binary(min_size=BSTR_MAX[kind] + 1, max_size=BSTR_MAX[kind] + 40),
            wrong_types,
        )
    return st.one_of(wrong_types, st.just(0))


@pytest.mark.parametrize("cls", [c for c in MESSAGE_CLASSES if c.FIELDS], ids=lambda c: c.__name__)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_out_of_range_fields_refused_both_ways(cls: type[Message], data: Any) -> None:
    message = data.draw(message_of(cls))
    seq, ack = data.draw(header_for(cls))
    index = data.draw(st.integers(0, len(cls.FIELDS) - 1))
    values: list[Any] = list(cbor.decode(encode_message(message, seq, ack))[4:])
    values[index] = data.draw(bad_value(cls.FIELDS[index]))
    field_name = [f.name for f in dataclasses.fields(message)][index]
    with pytest.raises(MessageError) as info:
        encode_message(cls(*values), seq, ack)
    assert f"{cls.__name__}.{field_name}" in str(info.value)
    try:
        body = cbor.encode([VERSION, int(cls.TYPE), seq, ack, *values])
    except HirmemError:
        return  # not even CBOR-encodable (out of the 64-bit range)
    with pytest.raises(MessageError) as info:
        decode_message(body)
    assert info.value.code == ErrorCode.MALFORMED
    assert f"{cls.__name__}.{field_name}" in str(info.value)


@PROPS
@given(st.sampled_from(MESSAGE_CLASSES).flatmap(message_of), st.data())
def test_single_byte_changes_to_a_message_are_refused_or_reencode(
    message: Message, data: Any
) -> None:
    seq, ack = data.draw(header_for(type(message)))
    body = bytearray(encode_message(message, seq, ack))
    index = data.draw(st.integers(0, len(body) - 1))
    body[index] = data.draw(st.integers(0, 255).filter(lambda b: b != body[index]))
    try:
        env = decode_message(bytes(body))
    except MessageError:
        return
    assert encode_message(env.message, env.seq, env.ack) == bytes(body)


def test_version_true_is_refused() -> None:
    """`true` == 1 in Python; the CDDL version is the uint 1 (found by tools/fuzz_codec.py)."""
    with pytest.raises(MessageError) as info:
        decode_message(bytes.fromhex("84f50d0000"))  # [true, 13 (ACK), 0, 0]
    assert info.value.code == ErrorCode.UNKNOWN_VERSION


# map keys that are not integers, byte or text strings: once a TypeError (unhashable tag
# key) or a silent merge of two pairs (1 and true); now a CborError at the key's offset
BAD_KEY_BODIES = [
    ("a1c08000", 1),  # {Tag(0, []): 0}
    ("a1d903e8810000", 1),  # {Tag(1000, [0]): 0}
    ("a20100f500", 3),  # {1: 0, true: 0}
    ("a20001f402", 3),  # {0: 1, false: 2}
    ("85010d0000a1f600", 6),  # [1, 13 (ACK), 0, 0, {null: 0}]
]


@pytest.mark.parametrize(("body", "at"), BAD_KEY_BODIES)
def test_message_decoder_refuses_non_scalar_map_keys(body: str, at: int) -> None:
    with pytest.raises(MessageError) as info:
        decode_message(bytes.fromhex(body))
    assert info.value.code == ErrorCode.MALFORMED
    assert f"map key at byte {at} is not an integer, byte or text string" in str(info.value)


# ---- packs --------------------------------------------------------------------------------


DEVICE_KEY = derive_test_key("property device")
HOST_KEY = derive_test_key("property host")
STRANGER_KEY = derive_test_key("property stranger")
DEVICE_ID = bytes.fromhex("d1d2d3d4d5d6d7d8")
HOST_ID = bytes.fromhex("a1a2a3a4a5a6a7a8")
TRUSTED = {
    DEVICE_KEY.kid: TrustedKey(DEVICE_KEY.public, DEVICE_ID, PackKind.MEMORY),
    HOST_KEY.kid: TrustedKey(HOST_KEY.public, HOST_ID, PackKind.KNOWLEDGE),
}

captures = st.tuples(
    st.binary(max_size=MAX_PAYLOAD),  # payload
    st.text(max_size=16),  # source: at most 64 UTF-8 bytes
    st.integers(0, U64),  # timestamp
    st.binary(min_size=32, max_size=32),  # context
    st.integers(0, 0x0FFF),  # flags (reserved bits clear)
    st.integers(0, Q_ONE),  # confidence
    st.integers(0, Q_ONE),  # provenance
    st.integers(0, Q_ONE),  # priority (Q16.16)
)


@st.composite
def chain_heads(draw: Any) -> tuple[ChainHead | None, int, bytes]:
    """(head held by the verifier, next seq, prev for the next pack)."""
    if draw(st.booleans()):
        return None, draw(st.integers(1, U64)), GENESIS
    held = draw(st.integers(1, U64 - 1))
    head_hash = draw(st.binary(min_size=32, max_size=32))
    return ChainHead(held, head_hash), draw(st.integers(held + 1, U64)), head_hash


@st.composite
def memory_packs(draw: Any) -> tuple[Pack, ChainHead | None]:
    head, seq, prev = draw(chain_heads())
    boot = draw(st.integers(0, U32))
    first = draw(st.integers(0, U32 - 8))
    records: list[Record] = []
    link = prev
    for n, (payload, source, ts, ctx, flags, conf, prov, prio) in enumerate(
        draw(st.lists(captures, max_size=4))
    ):
        rid = record_id(DEVICE_ID, boot, first + n)
        record = Record.capture(rid, payload, source, ts, ctx, flags, conf, prov, prio, link)
        records.append(record)
        link = record.hash
    created = draw(st.integers(0, U64))
    pack = sign_pack(DEVICE_KEY, PackKind.MEMORY, DEVICE_ID, seq, prev, created, records)
    return pack, head


knowledge_items = st.builds(
    KnowledgeItem,
    st.binary(min_size=8, max_size=8),
    st.text(max_size=20),
    st.text(max_size=20),
    st.text(max_size=20),
    st.integers(0, Q_ONE),
)


@st.composite
def knowledge_packs(draw: Any) -> tuple[Pack, ChainHead | None]:
    head, seq, prev = draw(chain_heads())
    if draw(st.booleans()):  # a device may have missed versions: any prev is fine
        prev = draw(st.binary(min_size=32, max_size=32))
    items = draw(st.lists(knowledge_items, max_size=5))
    created = draw(st.integers(0, U64))
    return sign_pack(HOST_KEY, PackKind.KNOWLEDGE, HOST_ID, seq, prev, created, items), head


any_pack = st.one_of(memory_packs(), knowledge_packs())


def verify(data: bytes, pack: Pack, head: ChainHead | None) -> Any:
    chain = pack.kind == PackKind.MEMORY
    return verify_pack(data, TRUSTED, head, pack.kind, require_chain=chain)


@PROPS
@given(any_pack)
def test_signed_pack_verifies_identically(case: tuple[Pack, ChainHead | None]) -> None:
    pack, head = case
    result = verify(pack.encoded, pack, head)
    assert result.duplicate is False
    got = result.pack
    assert got == pack
    assert got.items == pack.items and got.pack_id == pack.pack_id and got.hash == pack.hash
    assert got.hash == hashlib.sha256(pack.encoded).digest()
    assert got.pack_id == pack.signer + pack.seq.to_bytes(8, "big")
    again = verify(pack.encoded, pack, ChainHead(pack.seq, pack.hash))
    assert again.duplicate is True and again.pack == pack


def _mutations(data: Any, encoded: bytes) -> list[tuple[str, bytes]]:
    index = data.draw(st.integers(0, len(encoded) - 1), label="index")
    old = encoded[index]
    new = data.draw(st.integers(0, 255).filter(lambda b: b != old), label="new byte")
    bit = data.draw(st.integers(0, 7), label="bit")
    inserted = data.draw(st.integers(0, 255), label="inserted byte")
    cut = data.draw(st.integers(0, len(encoded) - 1), label="cut")
    return [
        ("set", encoded[:index] + bytes([new]) + encoded[index + 1 :]),
        ("flip", encoded[:index] + bytes([old ^ (1 << bit)]) + encoded[index + 1 :]),
        ("insert", encoded[:index] + bytes([inserted]) + encoded[index:]),
        ("delete", encoded[:index] + encoded[index + 1 :]),
        ("truncate", encoded[:cut]),
        ("append", encoded + bytes([inserted])),
    ]


@PROPS
@given(any_pack, st.data())
def test_any_single_byte_change_is_refused(case: tuple[Pack, ChainHead | None], data: Any) -> None:
    pack, head = case
    for name, mutated in _mutations(data, pack.encoded):
        assert mutated != pack.encoded
        for context in (head, ChainHead(pack.seq, pack.hash)):
            with pytest.raises(PackError) as info:
                verify(mutated, pack, context)
            assert info.value.reason in set(Reason) - {Reason.NONE}, name
            assert str(info.value).startswith(Reason(info.value.reason).name.lower() + ": ")


@FEW
@given(memory_packs())
def test_every_byte_of_a_pack_is_covered(case: tuple[Pack, ChainHead | None]) -> None:
    """Exhaustive over positions (one xor per byte) for a few packs."""
    pack, head = case
    encoded = pack.encoded
    for index in range(len(encoded)):
        mutated = encoded[:index] + bytes([encoded[index] ^ 0x55]) + encoded[index + 1 :]
        with pytest.raises(PackError):
            verify(mutated, pack, head)


wild = st.recursive(
    st.one_of(
        st.integers(-(1 << 64), (1 << 64) - 1),
        st.sampled_from([0, 1, 2, 0x10000, 0x10001, True, False, None]),
        st.binary(max_size=40),
        st.text(max_size=10),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.builds(Tag, st.integers(0, 30), inner)),
    max_leaves=8,
)


@PROPS
@given(any_pack, st.data())
def test_signed_but_malformed_payloads_are_refused_cleanly(
    case: tuple[Pack, ChainHead | None], data: Any
) -> None:
    """The signer's own key over a damaged payload: parsing must still only raise PackError."""
    pack, head = case
    protected, _, payload_raw, _ = cbor.decode(pack.encoded).value
    payload: list[Any] = cbor.decode(payload_raw)
    path = [data.draw(st.integers(0, 6), label="field")]
    target: list[Any] = payload
    if path[0] == 6 and payload[6] and data.draw(st.booleans()):
        item = data.draw(st.integers(0, len(payload[6]) - 1))
        target = payload[6][item]
        path = [data.draw(st.integers(0, len(target) - 1), label="item field")]
    target[path[0]] = data.draw(wild, label="value")
    key = DEVICE_KEY if pack.kind == PackKind.MEMORY else HOST_KEY
    new_payload = cbor.encode(payload)
    signature = key.sign(sig_structure(protected, new_payload))
    encoded = cbor.encode(Tag(18, [protected, {}, new_payload, signature]))
    with contextlib.suppress(PackError):
        verify(encoded, pack, head)


def test_unprotected_header_is_not_malleable() -> None:
    pack = sign_pack(DEVICE_KEY, PackKind.MEMORY, DEVICE_ID, 1, GENESIS, 0, [])
    encoded = pack.encoded
    at = 2 + len(cbor.encode(cbor.decode(encoded).value[0]))  # d2 84 <protected bstr>
    assert encoded[at] == 0xA0
    mutated = encoded[:at] + b"\xa1\x00" + encoded[at:]  # unprotected {0: {}}
    with pytest.raises(PackError) as info:
        verify_pack(mutated, TRUSTED, None, PackKind.MEMORY)
    assert info.value.reason == Reason.MALFORMED


def test_pack_kind_true_is_refused() -> None:
    """A signer's payload with kind `true` must not pass as MEMORY (1)."""
    payload = cbor.encode([True, DEVICE_ID + (1).to_bytes(8, "big"), DEVICE_ID, 1, GENESIS, 0, []])
    protected = protected_header(DEVICE_KEY.kid)
    signature = DEVICE_KEY.sign(sig_structure(protected, payload))
    encoded = cbor.encode(Tag(18, [protected, {}, payload, signature]))
    with pytest.raises(PackError) as info:
        verify_pack(encoded, TRUSTED, None, PackKind.MEMORY)
    assert info.value.reason == Reason.MALFORMED


@pytest.mark.parametrize(("body", "at"), BAD_KEY_BODIES)
def test_pack_verifier_refuses_non_scalar_map_keys(body: str, at: int) -> None:
    with pytest.raises(PackError) as info:
        verify_pack(bytes.fromhex(body), TRUSTED, None, PackKind.MEMORY)
    assert info.value.reason == Reason.MALFORMED
    assert f"map key at byte {at} is not an integer, byte or text string" in str(info.value)


def test_pack_verifier_refuses_bool_keys_in_the_unprotected_header() -> None:
    """{true: 0} in the unprotected header (outside the signature) would have been read as
    {1: 0}; now it is refused at the key, before any signature is checked."""
    pack = sign_pack(DEVICE_KEY, PackKind.MEMORY, DEVICE_ID, 1, GENESIS, 0, [])
    encoded = pack.encoded
    at = 2 + len(cbor.encode(cbor.decode(encoded).value[0]))  # d2 84 <protected bstr>
    assert encoded[at] == 0xA0
    for key in (b"\xf5", b"\xf4", b"\xf6", b"\xc0\x80"):
        mutated = encoded[:at] + b"\xa1" + key + b"\x00" + encoded[at + 1 :]
        with pytest.raises(PackError) as info:
            verify_pack(mutated, TRUSTED, None, PackKind.MEMORY)
        assert info.value.reason == Reason.MALFORMED
        assert f"map key at byte {at + 1} is not an integer" in str(info.value)


def test_stranger_and_wrong_kind_refused() -> None:
    stranger = sign_pack(STRANGER_KEY, PackKind.MEMORY, DEVICE_ID, 1, GENESIS, 0, [])
    with pytest.raises(PackError) as info:
        verify_pack(stranger.encoded, TRUSTED, None, PackKind.MEMORY)
    assert info.value.reason == Reason.UNKNOWN_KEY
    knowledge = sign_pack(HOST_KEY, PackKind.KNOWLEDGE, HOST_ID, 1, GENESIS, 0, [])
    with pytest.raises(PackError) as info:
        verify_pack(knowledge.encoded, TRUSTED, None, PackKind.MEMORY)
    assert info.value.reason == Reason.UNKNOWN_KEY
