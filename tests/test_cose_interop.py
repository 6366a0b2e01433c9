"""hirmem packs are plain COSE_Sign1: pycose verifies hirmem's packs and hirmem pycose's.

pycose is an independent COSE implementation (RFC 9052). Packs signed by
:func:`hirmem.protocol.packs.sign_pack` must verify there, and packs pycose builds and signs with
the same protected header (``{1: -8, 4: kid}``, EdDSA) must verify with
:func:`hirmem.protocol.packs.verify_pack` — and be refused for the same reasons as hirmem's own.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import cbor2
import pytest
from pycose.algorithms import EdDSA
from pycose.headers import KID, Algorithm
from pycose.keys.curves import Ed25519
from pycose.keys.okp import OKPKey
from pycose.messages.cosemessage import CoseMessage
from pycose.messages.sign1message import Sign1Message

from conftest import (
    DEVICE_ID,
    DEVICE_KEY,
    HOST_ID,
    HOST_KEY,
    OTHER_KEY,
    load_vectors,
)
from hirmem.protocol import cbor, identity
from hirmem.protocol.errors import PackError
from hirmem.protocol.keys import SigningKey
from hirmem.protocol.packs import (
    KnowledgeItem,
    PackKind,
    Reason,
    TrustedKey,
    Verified,
    pack_id,
    sign_pack,
    verify_pack,
)
from hirmem.protocol.records import GENESIS, Record

T0 = 1_780_000_000_000  # the generator's creation time
MEMORY_SEQ = (7 << 32) | 1  # boot 7, first pack: the generator's first device pack
KNOWLEDGE_SEQ = 5

TRUSTED = {
    DEVICE_KEY.kid: TrustedKey(DEVICE_KEY.public, DEVICE_ID, PackKind.MEMORY),
    HOST_KEY.kid: TrustedKey(HOST_KEY.public, HOST_ID, PackKind.KNOWLEDGE),
}


def _records() -> list[Record]:
    return [
        Record.from_wire(cbor.decode(bytes.fromhex(case["wire"])))
        for case in load_vectors("records")["chain"]
    ]


def _knowledge() -> list[KnowledgeItem]:
    return [
        KnowledgeItem(bytes.fromhex(identity.triple_id(s, p, o)), s, p, o, confidence)
        for s, p, o, confidence in (
            ("temp0", "max_safe", "80.0", 0xF000),
            ("pump", "serves", "zone 3", 0x10000),
        )
    ]


def _vector_pack(name: str) -> bytes:
    (case,) = (c for c in load_vectors("packs")["cases"] if c["name"] == name)
    return bytes.fromhex(case["pack"])


def pycose_decode(data: bytes) -> Sign1Message:
    """pycose's own decoder (pyproject pins cbor2 < 6, which pycose 1.1 needs)."""
    message = CoseMessage.decode(data)
    assert isinstance(message, Sign1Message)
    return message


def _okp(key: SigningKey, *, private: bool) -> Any:
    if private:
        return OKPKey(crv=Ed25519, x=key.public.raw, d=key.seed())
    return OKPKey(crv=Ed25519, x=key.public.raw)


def _pycose_pack(
    key: SigningKey, kind: PackKind, signer: bytes, seq: int, items: list[list[Any]]
) -> bytes:
    payload = cbor.encode([int(kind), pack_id(signer, seq), signer, seq, GENESIS, T0, items])
    message = Sign1Message(phdr={Algorithm: EdDSA, KID: key.kid}, payload=payload)
    message.key = _okp(key, private=True)
    encoded: bytes = message.encode(tag=True)
    return encoded


def _pycose_memory_pack(key: SigningKey = DEVICE_KEY) -> bytes:
    items = [record.to_wire() for record in _records()]
    return _pycose_pack(key, PackKind.MEMORY, DEVICE_ID, MEMORY_SEQ, items)


def _pycose_knowledge_pack() -> bytes:
    items = [item.to_wire() for item in _knowledge()]
    return _pycose_pack(HOST_KEY, PackKind.KNOWLEDGE, HOST_ID, KNOWLEDGE_SEQ, items)


def test_derived_test_keys_match_the_generator_and_the_vectors(gen_vectors: ModuleType) -> None:
    trusted = load_vectors("packs")["trusted"]
    for ours, theirs, entry in (
        (DEVICE_KEY, gen_vectors.DEVICE_KEY, trusted["device"]),
        (HOST_KEY, gen_vectors.HOST_KEY, trusted["host"]),
        (OTHER_KEY, gen_vectors.OTHER_KEY, None),
    ):
        assert ours.seed() == theirs.seed()
        if entry is not None:
            assert (ours.public.raw.hex(), ours.kid.hex()) == (entry["public"], entry["kid"])


# ---- (a) hirmem signs, pycose verifies -----------------------------------------------------


def _hirmem_packs() -> list[Any]:
    fresh_memory = sign_pack(
        DEVICE_KEY, PackKind.MEMORY, DEVICE_ID, MEMORY_SEQ, GENESIS, T0, _records()
    )
    fresh_knowledge = sign_pack(
        HOST_KEY, PackKind.KNOWLEDGE, HOST_ID, KNOWLEDGE_SEQ, GENESIS, T0, _knowledge()
    )
    empty = sign_pack(DEVICE_KEY, PackKind.MEMORY, DEVICE_ID, 1, GENESIS, 0, [])
    params = [
        pytest.param(fresh_memory.encoded, DEVICE_KEY, id="memory pack from sign_pack"),
        pytest.param(fresh_knowledge.encoded, HOST_KEY, id="knowledge pack from sign_pack"),
        pytest.param(empty.encoded, DEVICE_KEY, id="empty memory pack from sign_pack"),
    ]
    signers = {"memory": DEVICE_KEY, "knowledge": HOST_KEY}
    for case in load_vectors("packs")["cases"]:
        if case["expect"]["status"] == "accepted":
            key = signers[case["kind"]]
            params.append(
                pytest.param(bytes.fromhex(case["pack"]), key, id=f"vector: {case['name']}")
            )
    return params


@pytest.mark.parametrize(("data", "key"), _hirmem_packs())
def test_pycose_verifies_a_pack_signed_by_hirmem(data: bytes, key: SigningKey) -> None:
    message = pycose_decode(data)
    message.key = _okp(key, private=False)
    assert message.verify_signature() is True


@pytest.mark.parametrize(("data", "key"), _hirmem_packs())
def test_pycose_reads_eddsa_and_the_key_id_from_the_protected_header(
    data: bytes, key: SigningKey
) -> None:
    message = pycose_decode(data)
    assert message.phdr[Algorithm] is EdDSA
    assert EdDSA.identifier == -8
    assert message.phdr[KID] == key.kid
    assert message.uhdr == {}
    assert cbor2.loads(message.phdr_encoded) == {1: -8, 4: key.kid}


def test_pycose_refuses_a_hirmem_pack_under_the_wrong_key() -> None:
    message = pycose_decode(_vector_pack("first pack of a device (genesis)"))
    message.key = _okp(OTHER_KEY, private=False)
    assert message.verify_signature() is False


# ---- (b) pycose signs, hirmem verifies -----------------------------------------------------


def test_hirmem_accepts_a_memory_pack_signed_by_pycose_with_the_same_records() -> None:
    data = _pycose_memory_pack()
    result = verify_pack(data, TRUSTED, None, PackKind.MEMORY)
    assert isinstance(result, Verified)
    assert not result.duplicate
    assert result.pack.items == tuple(_records())
    assert result.pack.pack_id == pack_id(DEVICE_ID, MEMORY_SEQ)
    assert result.pack.kid == DEVICE_KEY.kid


def test_hirmem_accepts_a_knowledge_pack_signed_by_pycose_with_the_same_items() -> None:
    data = _pycose_knowledge_pack()
    result = verify_pack(data, TRUSTED, None, PackKind.KNOWLEDGE, require_chain=False)
    assert result.pack.items == tuple(_knowledge())
    assert result.pack.signer == HOST_ID


@pytest.mark.parametrize(
    ("build", "vector"),
    [
        pytest.param(_pycose_memory_pack, "first pack of a device (genesis)", id="memory"),
        pytest.param(_pycose_knowledge_pack, "knowledge pack on a device", id="knowledge"),
    ],
)
def test_pycose_and_hirmem_produce_the_same_bytes_for_the_same_pack(
    build: Any, vector: str
) -> None:
    """Ed25519 is deterministic and both encodings are minimal: the packs are identical."""
    assert build() == _vector_pack(vector)


# ---- (c) tampering with pycose's output ----------------------------------------------------


def _flip(data: bytes, index: int) -> bytes:
    out = bytearray(data)
    out[index] ^= 0x01
    return bytes(out)


def _tampered() -> list[Any]:
    data = _pycose_memory_pack()
    return [
        pytest.param(_flip(data, data.index(b"spike")), id="a byte of a record payload"),
        pytest.param(_flip(data, data.index(T0.to_bytes(8, "big")) + 7), id="the creation time"),
        pytest.param(_flip(data, len(data) // 2), id="a byte in the middle"),
        pytest.param(_flip(data, len(data) - 1), id="the last signature byte"),
        pytest.param(_flip(data, len(data) - 64), id="the first signature byte"),
    ]


@pytest.mark.parametrize("data", _tampered())
def test_hirmem_refuses_a_tampered_pycose_pack_as_bad_signature(data: bytes) -> None:
    with pytest.raises(PackError) as caught:
        verify_pack(data, TRUSTED, None, PackKind.MEMORY)
    assert caught.value.reason == Reason.BAD_SIGNATURE


# ---- (d) a pycose pack under a key hirmem does not trust -----------------------------------


def test_hirmem_refuses_a_pycose_pack_from_an_untrusted_key_as_unknown_key() -> None:
    data = _pycose_memory_pack(OTHER_KEY)
    message = pycose_decode(data)
    message.key = _okp(OTHER_KEY, private=False)
    assert message.verify_signature() is True  # a good signature, just not a trusted key
    with pytest.raises(PackError) as caught:
        verify_pack(data, TRUSTED, None, PackKind.MEMORY)
    assert caught.value.reason == Reason.UNKNOWN_KEY


def test_hirmem_refuses_a_pycose_pack_whose_key_is_trusted_for_the_other_kind() -> None:
    data = _pycose_knowledge_pack()
    with pytest.raises(PackError) as caught:
        verify_pack(data, TRUSTED, None, PackKind.MEMORY)
    assert caught.value.reason == Reason.UNKNOWN_KEY
