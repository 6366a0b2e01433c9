"""Inputs that look almost right: a CBOR true where 1 belongs, extra header labels,
records in a state their gate does not give. Each must be refused with its reason."""

from __future__ import annotations

import pytest

from conftest import DEVICE_KEY, load_vectors
from hirmem.protocol import cbor
from hirmem.protocol.errors import MessageError, PackError
from hirmem.protocol.keys import SigningKey
from hirmem.protocol.messages import ErrorCode, decode_message
from hirmem.protocol.packs import PackKind, Reason, TrustedKey, sig_structure, verify_pack

DEVICE_ID = bytes.fromhex("0102030405060708")
KEYS = {DEVICE_KEY.kid: TrustedKey(DEVICE_KEY.public, DEVICE_ID, PackKind.MEMORY)}
FIRST = bytes.fromhex(load_vectors("packs")["cases"][0]["pack"])


def _resign(protected: bytes, payload: bytes, key: SigningKey = DEVICE_KEY) -> bytes:
    signature = key.sign(sig_structure(protected, payload))
    return cbor.encode(cbor.Tag(18, [protected, {}, payload, signature]))


def _payload() -> list[object]:
    payload: list[object] = cbor.decode(cbor.decode(FIRST).value[2])
    return payload


def test_true_is_not_protocol_version_1() -> None:
    with pytest.raises(MessageError) as err:
        decode_message(bytes.fromhex("84f5090704"))
    assert err.value.code == ErrorCode.UNKNOWN_VERSION


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        ({1: -8, 4: DEVICE_KEY.kid, 3: 0}, Reason.MALFORMED),
        ({1: -8}, Reason.MALFORMED),
        ({1: -7, 4: DEVICE_KEY.kid}, Reason.UNSUPPORTED_ALG),
    ],
    ids=["extra label", "no kid", "ES256"],
)
def test_protected_header_is_exactly_alg_and_kid(header: dict[object, object], reason: int) -> None:
    protected = cbor.encode(header)
    pack = _resign(protected, cbor.decode(FIRST).value[2])
    with pytest.raises(PackError) as err:
        verify_pack(pack, KEYS, None, PackKind.MEMORY)
    assert err.value.reason == reason


def test_true_is_not_the_alg_label() -> None:
    protected = bytes.fromhex("a2f52704") + b"\x48" + DEVICE_KEY.kid  # {true: -8, 4: kid}
    pack = _resign(protected, cbor.decode(FIRST).value[2])
    with pytest.raises(PackError) as err:
        verify_pack(pack, KEYS, None, PackKind.MEMORY)
    assert err.value.reason == Reason.MALFORMED
    assert "map key at byte 1" in str(err.value)


def test_true_is_not_pack_kind_1() -> None:
    payload = _payload()
    payload[0] = True
    protected = cbor.decode(FIRST).value[0]
    with pytest.raises(PackError) as err:
        verify_pack(_resign(protected, cbor.encode(payload)), KEYS, None, PackKind.MEMORY)
    assert err.value.reason == Reason.MALFORMED


@pytest.mark.parametrize(("index", "value"), [(16, 2), (17, 3)], ids=["consolidated", "procedural"])
def test_a_device_record_is_episodic_in_the_state_its_gate_gives(index: int, value: int) -> None:
    payload = _payload()
    records = payload[6]
    assert isinstance(records, list)
    records[0][index] = value
    protected = cbor.decode(FIRST).value[0]
    with pytest.raises(PackError) as err:
        verify_pack(_resign(protected, cbor.encode(payload)), KEYS, None, PackKind.MEMORY)
    assert err.value.reason == Reason.BAD_RECORD
    assert "episodic" in str(err.value)


def test_enum_members_encode_as_their_integers_and_booleans_do_not() -> None:
    from hirmem.protocol.messages import Error, encode_message

    body = encode_message(Error(ErrorCode.MALFORMED, 5, "bad"), 0, 3)
    assert body == encode_message(Error(int(ErrorCode.MALFORMED), 5, "bad"), 0, 3)
    assert decode_message(body).message == Error(3, 5, "bad")
    with pytest.raises(MessageError, match="must be an integer"):
        encode_message(Error(True, 5, "bad"), 0, 3)
