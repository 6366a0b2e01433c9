"""Signed packs: COSE_Sign1 (RFC 9052, tag 18) with EdDSA over Ed25519.

A device memory pack (kind 1) carries a device's episodic candidates up to the
host, signed with the device key; a knowledge pack (kind 2) carries knowledge
items down to devices, signed with the host key. The payload is the CBOR array

    [kind, pack_id, signer, seq, prev, created, items]

``pack_id`` is ``signer || seq`` (8 + 8 bytes, big-endian seq); ``seq`` only
grows per signer; ``prev`` is the pack hash (SHA-256 of the whole encoded
COSE_Sign1, tag included) of the signer's previous pack, 32 zero bytes for the
first one; ``created`` is milliseconds since the Unix epoch.

:func:`verify_pack` checks in the order of ``protocol/SPEC.md`` §8.4 and raises a
:class:`~hirmem.protocol.errors.PackError` whose ``reason`` is the wire refusal code.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, NamedTuple

import cbor2

from hirmem.protocol import cbor
from hirmem.protocol.cbor import Tag
from hirmem.protocol.errors import CborError, HirmemError, PackError
from hirmem.protocol.keys import ID_SIZE, KID_SIZE, PublicKey, SigningKey
from hirmem.protocol.records import GENESIS, HASH_SIZE, Record, shaped_records, wire_read

COSE_SIGN1_TAG = 18
ALG_EDDSA = -8
HDR_ALG = 1
HDR_KID = 4
MAX_PACK = 65536
SIGNATURE_SIZE = 64


class PackKind(IntEnum):
    MEMORY = 1  # device -> host, device key
    KNOWLEDGE = 2  # host -> device, host key


class Reason(IntEnum):
    """Why a pack was refused (the wire code in PACK_RESULT / KNOWLEDGE_RESULT)."""

    NONE = 0
    MALFORMED = 1
    TOO_LARGE = 2
    UNSUPPORTED_ALG = 3
    UNKNOWN_KEY = 4
    BAD_SIGNATURE = 5
    WRONG_SIGNER = 6
    ROLLBACK = 7
    REPLAY = 8
    BROKEN_CHAIN = 9
    BAD_RECORD = 10
    STORAGE = 11  # the receiver could not store it now; offer it again later


@dataclass(frozen=True, slots=True)
class KnowledgeItem:
    """One piece of knowledge pushed to devices: a triple with its identity."""

    triple_id: bytes  # 8 bytes: the FNV-1a id of (subject, predicate, object)
    subject: str
    predicate: str
    obj: str
    confidence: int  # Q16.16

    def to_wire(self) -> list[Any]:
        return [self.triple_id, self.subject, self.predicate, self.obj, self.confidence]

    @classmethod
    def from_wire(cls, item: object) -> KnowledgeItem:
        if (
            not isinstance(item, list)
            or len(item) != 5
            or type(item[0]) is not bytes
            or len(item[0]) != 8
            or not all(type(x) is str for x in item[1:4])
            or type(item[4]) is not int
            or not 0 <= item[4] <= 0x10000
        ):
            raise HirmemError(
                "a knowledge item is [triple_id: 8 bytes, subject, predicate, object, confidence]"
            )
        return cls(item[0], item[1], item[2], item[3], item[4])


@dataclass(frozen=True, slots=True)
class TrustedKey:
    """A public key the verifier trusts, bound to one signer and one pack kind."""

    public: PublicKey
    signer: bytes
    kind: PackKind


@dataclass(frozen=True, slots=True)
class ChainHead:
    """What a verifier remembers of a signer: the last accepted seq and pack hash."""

    seq: int
    hash: bytes


@dataclass(frozen=True, slots=True)
class Pack:
    kind: PackKind
    pack_id: bytes
    signer: bytes
    seq: int
    prev: bytes
    created: int
    items: tuple[Record, ...] | tuple[KnowledgeItem, ...]
    kid: bytes
    encoded: bytes  # the COSE_Sign1 bytes exactly as signed and sent
    hash: bytes  # SHA-256(encoded): the next pack's prev


@dataclass(frozen=True, slots=True)
class Verified:
    pack: Pack
    duplicate: bool  # the same pack as the current head: acknowledge again, store nothing
    # a memory pack's records as decoded, each its 20 fields in wire order, when the fast
    # path read it (the values cbor2 gave, before any Record was made); else None
    wire: list[list[Any]] | None = None


def pack_id(signer: bytes, seq: int) -> bytes:
    return signer + seq.to_bytes(8, "big")


def protected_header(kid: bytes) -> bytes:
    return cbor.encode({HDR_ALG: ALG_EDDSA, HDR_KID: kid})


def sig_structure(protected: bytes, payload: bytes) -> bytes:
    """The bytes EdDSA signs (RFC 9052 §4.4), with empty external AAD:
    ``cbor.encode(["Signature1", protected, b"", payload])``, written from its heads."""
    return b"".join((_SIG_STRUCTURE_HEAD, cbor.head(2, len(protected)), protected, b"\x40",
                     cbor.head(2, len(payload)), payload))


_SIG_STRUCTURE_HEAD = cbor.head(4, 4) + cbor.encode("Signature1")  # up to the protected header


def sign_pack(
    key: SigningKey,
    kind: PackKind,
    signer: bytes,
    seq: int,
    prev: bytes,
    created: int,
    items: Sequence[Record] | Sequence[KnowledgeItem],
) -> Pack:
    if len(signer) != ID_SIZE or len(prev) != HASH_SIZE or not 0 < seq < 1 << 64:
        raise HirmemError("signer must be 8 bytes, prev 32 bytes, seq in 1..2^64-1")
    pid = pack_id(signer, seq)
    payload = cbor.encode(
        [int(kind), pid, signer, seq, prev, created, [it.to_wire() for it in items]]
    )
    protected = protected_header(key.kid)
    signature = key.sign(sig_structure(protected, payload))
    encoded = cbor.encode(Tag(COSE_SIGN1_TAG, [protected, {}, payload, signature]))
    if len(encoded) > MAX_PACK:
        raise HirmemError(f"pack of {len(encoded)} bytes exceeds {MAX_PACK}; split the records")
    held: tuple[Record, ...] | tuple[KnowledgeItem, ...] = tuple(items)  # type: ignore[assignment]
    return Pack(
        kind,
        pid,
        signer,
        seq,
        prev,
        created,
        held,
        key.kid,
        encoded,
        hashlib.sha256(encoded).digest(),
    )


def _refuse(reason: Reason, detail: str, pack: Pack | None = None) -> PackError:
    """The refusal; after step 9 it names the pack it refuses (``pack``)."""
    if pack is None:
        return PackError(int(reason), f"{reason.name.lower()}: {detail}")
    return PackError(int(reason), f"{reason.name.lower()}: {detail}", pack.pack_id, pack.seq)


def verify_pack(
    data: bytes,
    keys: Mapping[bytes, TrustedKey],
    head: ChainHead | None,
    kind: PackKind,
    *,
    require_chain: bool = True,
    fast: bool = True,
    data_hash: bytes | None = None,
) -> Verified:
    """Verify a pack against the trusted keys and the signer's chain head.

    ``require_chain`` is true for device packs at the host (every pack links to
    the previous one); a device checking knowledge packs sets it false, since it
    may have missed versions, and relies on the sequence alone.

    The pack is read once (:func:`_read_fast`: one cbor2 decode of the envelope and one
    of the payload; each record's shape, deterministic encoding and soundness checked
    in one pass without raising, :func:`~hirmem.protocol.records.wire_read`); where the
    fast path does not vouch, the strict reader and :meth:`Record.check` decide, with
    their messages. ``fast=False`` runs only those: the reference the fast path is
    tested against (same result, same refusal, for every input).

    ``data_hash``: SHA-256 of ``data``, when the caller computed it already (the pack's
    hash; computed here otherwise).
    """
    read = _read_fast(data, kind, data_hash) if fast else None
    if read is None:
        protected_raw, payload_raw, signature, kid = _envelope(data)
    else:
        protected_raw, payload_raw, signature, kid = read.protected, read.payload, \
            read.signature, read.pack.kid  # fmt: skip
    trusted = keys.get(kid)
    if trusted is None or trusted.kind != kind:
        raise _refuse(Reason.UNKNOWN_KEY, f"no trusted {kind.name.lower()} key with id {kid.hex()}")
    if len(signature) != SIGNATURE_SIZE or not trusted.public.verify(
        signature, sig_structure(protected_raw, payload_raw)
    ):
        raise _refuse(Reason.BAD_SIGNATURE, f"signature does not verify with key {kid.hex()}")

    pack = _parse_payload(payload_raw, kind, kid, data, data_hash) if read is None else read.pack
    if pack.signer != trusted.signer:
        raise _refuse(
            Reason.WRONG_SIGNER,
            f"key {kid.hex()} belongs to {trusted.signer.hex()}, pack names {pack.signer.hex()}",
            pack,
        )
    if head is not None:
        if pack.seq < head.seq:
            raise _refuse(
                Reason.ROLLBACK, f"seq {pack.seq} is older than the held seq {head.seq}", pack
            )
        if pack.seq == head.seq:
            if pack.hash == head.hash:
                return Verified(pack, duplicate=True)
            raise _refuse(Reason.REPLAY, f"seq {pack.seq} was already used by another pack", pack)
    if require_chain:
        want = GENESIS if head is None else head.hash
        if pack.prev != want:
            raise _refuse(
                Reason.BROKEN_CHAIN,
                f"prev {pack.prev.hex()[:16]}… does not match the chain head {want.hex()[:16]}…",
                pack,
            )
    if kind != PackKind.MEMORY:
        return Verified(pack, duplicate=False)
    if read is None or not read.sound:
        _check_records(pack)
    return Verified(pack, duplicate=False, wire=None if read is None else read.wire)


def _check_records(pack: Pack) -> None:
    """Each record is the signer's and checks (:meth:`Record.check`) against the record
    before it, the first against the pack's prev; raise the refusal for the first that
    does not."""
    link = pack.prev
    for record in pack.items:
        assert isinstance(record, Record)
        if record.id[:ID_SIZE] != pack.signer:
            raise _refuse(Reason.BAD_RECORD, f"record {record.id.hex()} is not the signer's", pack)
        try:
            record.check(link)
        except HirmemError as exc:
            raise _refuse(Reason.BAD_RECORD, str(exc), pack) from None
        link = record.hash


class _FastRead(NamedTuple):  # a tuple: made once per pack, cheaply
    protected: bytes
    payload: bytes
    signature: bytes
    pack: Pack
    wire: list[list[Any]]  # the records as decoded (memory packs; empty for knowledge)
    sound: bool  # every record passes _check_records (memory packs read with sound=True)


# the protected header {1: -8, 4: kid} in its one deterministic encoding, up to the kid;
# the head of a tagged COSE_Sign1 array of four; the head of the payload array of seven
_PROTECTED_HEAD = protected_header(bytes(KID_SIZE))[:-KID_SIZE]
_SIGN1_HEAD = cbor.encode(Tag(COSE_SIGN1_TAG, [b"", {}, b"", b""]))[:2]
_PAYLOAD_HEAD = cbor.head(4, 7)
_ID_HEAD = cbor.head(2, ID_SIZE)
_PACK_ID_HEAD = cbor.head(2, 2 * ID_SIZE)
_HASH_HEAD = cbor.head(2, HASH_SIZE)


def _read_fast(data: bytes, kind: PackKind, digest: bytes | None = None, *,
               sound: bool = True) -> _FastRead | None:  # fmt: skip
    """What :func:`_envelope` and :func:`_parse_payload` would return for ``data``, read
    by cbor2's C decoder, or None when that is not proven (then the strict reader
    decides, and says what is wrong). For a memory pack with ``sound``, also whether
    every record passes :func:`_check_records` (each checked in the same pass).

    The proof, as for :func:`hirmem.protocol.cbor.decode`: every value taken is checked
    to be exactly of the type and size the strict readers require (so nothing cbor2
    decodes beyond hirmem CBOR — floats, tags other than 18, simple values, maps with
    keys — gets through), and the bytes are the one deterministic encoding of that
    value: the envelope and the payload's fields rebuilt from their heads and compared,
    each record's encoding written by :func:`~hirmem.protocol.records.wire_read` from
    the values it checked and compared in place (a knowledge pack's items re-encoded by
    cbor2: arrays, integers and strings only, so its canonical form is hirmem's), and
    nothing after the last. The strict reader accepts exactly the deterministic
    encodings and decodes them to the value encoded, so it would return these same
    values. Records are taken only when ``wire_read`` vouches for their shape (what
    ``Record.from_wire`` accepts).
    """
    if len(data) > MAX_PACK:
        return None
    try:
        # read_size: the input in one read (cbor2 reads item by item otherwise)
        outer = cbor2.loads(data, read_size=len(data) or 1)
        if type(outer) is not cbor2.CBORTag or outer.tag != COSE_SIGN1_TAG:
            return None
        body = outer.value
        if type(body) is not list or len(body) != 4:
            return None
        protected, unprotected, payload, signature = body
        if (
            type(protected) is not bytes
            or type(unprotected) is not dict
            or unprotected
            or type(payload) is not bytes
            or type(signature) is not bytes
            or len(protected) != len(_PROTECTED_HEAD) + KID_SIZE
            or not protected.startswith(_PROTECTED_HEAD)
        ):
            return None
        envelope = (_SIGN1_HEAD, cbor.head(2, len(protected)), protected, b"\xa0",
                    cbor.head(2, len(payload)), payload, cbor.head(2, len(signature)),
                    signature)  # the one deterministic encoding of the envelope
        if data != b"".join(envelope):
            return None
        p = cbor2.loads(payload, read_size=len(payload) or 1)
        if type(p) is not list or len(p) != 7:
            return None
        k, pid, signer, seq, prev, created, items = p
        if (
            type(k) is not int
            or k != int(kind)
            or type(signer) is not bytes
            or len(signer) != ID_SIZE
            or type(seq) is not int
            or not 0 < seq < 1 << 64
            or type(pid) is not bytes
            or pid != pack_id(signer, seq)
            or type(prev) is not bytes
            or len(prev) != HASH_SIZE
            or type(created) is not int
            or not 0 <= created < 1 << 64
            or type(items) is not list
        ):
            return None
        fields = b"".join((_PAYLOAD_HEAD, cbor.head(0, k), _PACK_ID_HEAD, pid, _ID_HEAD, signer,
                           cbor.head(0, seq), _HASH_HEAD, prev, cbor.head(0, created),
                           cbor.head(4, len(items))))  # fmt: skip
        if not payload.startswith(fields):
            return None
        parsed: tuple[Record, ...] | tuple[KnowledgeItem, ...]
        if kind == PackKind.MEMORY:
            at, link, vouched = len(fields), prev, sound
            for item in items:
                read = wire_read(item, signer if vouched else None, link)
                if read is None or not payload.startswith(read[0], at):
                    return None
                at += len(read[0])
                vouched = read[1]
                link = item[18]  # its hash
            if at != len(payload):
                return None
            parsed = shaped_records(items)
            wire = items
        else:
            parsed = tuple(KnowledgeItem.from_wire(it) for it in items)
            wire, vouched = [], False
            if cbor2.dumps(p) != payload:  # the one deterministic encoding (no maps in it)
                return None
    except Exception:  # anything cbor2 refuses, or a knowledge item: the strict reader
        return None
    pack = Pack(kind, pid, signer, seq, prev, created, parsed, protected[-KID_SIZE:], data,
                hashlib.sha256(data).digest() if digest is None else digest)  # fmt: skip
    return _FastRead(protected, payload, signature, pack, wire, vouched)


def _envelope(data: bytes) -> tuple[bytes, bytes, bytes, bytes]:
    """Steps 1-6 of §8.4: (protected, payload, signature, kid) of a well-formed COSE_Sign1."""
    if len(data) > MAX_PACK:
        raise _refuse(Reason.TOO_LARGE, f"{len(data)} bytes, limit {MAX_PACK}")
    try:
        outer = cbor.decode(data)
    except CborError as exc:
        raise _refuse(Reason.MALFORMED, f"not deterministic CBOR: {exc}") from None
    if not isinstance(outer, Tag) or outer.number != COSE_SIGN1_TAG:
        raise _refuse(Reason.MALFORMED, "not a tagged COSE_Sign1 (tag 18)")
    body = outer.value
    if (
        not isinstance(body, list)
        or len(body) != 4
        or type(body[0]) is not bytes
        or not isinstance(body[1], dict)
        or type(body[2]) is not bytes
        or type(body[3]) is not bytes
    ):
        raise _refuse(Reason.MALFORMED, "COSE_Sign1 is [protected: bstr, {}, payload: bstr, sig]")
    protected_raw, unprotected, payload_raw, signature = body
    if unprotected:
        # unsigned: anything here could be added in transit and would change the pack hash
        raise _refuse(Reason.MALFORMED, "the unprotected header must be empty")
    try:
        protected = cbor.decode(protected_raw)
    except CborError as exc:
        raise _refuse(Reason.MALFORMED, f"protected header: {exc}") from None
    if not isinstance(protected, dict):
        raise _refuse(Reason.MALFORMED, "protected header is not a map")
    alg = protected.get(HDR_ALG)
    if type(alg) is not int or alg != ALG_EDDSA:
        raise _refuse(Reason.UNSUPPORTED_ALG, f"alg {alg!r}, only EdDSA (-8) is accepted")
    kid = protected.get(HDR_KID)
    if set(protected) != {HDR_ALG, HDR_KID} or type(kid) is not bytes or len(kid) != KID_SIZE:
        raise _refuse(
            Reason.MALFORMED,
            f"the protected header is exactly {{1: -8, 4: kid of {KID_SIZE} bytes}}",
        )
    return protected_raw, payload_raw, signature, kid


def read_unverified(data: bytes, kind: PackKind) -> Pack:
    """A pack's fields read without checking its key, signature or chain.

    For bookkeeping before verification happens elsewhere (the host session notes the
    id and seq of a knowledge pack it pushes; the device verifies it): trust nothing
    in the result. Raises :class:`PackError` for a pack that is not well formed.
    """
    read = _read_fast(data, kind, sound=False)
    if read is not None:
        return read.pack
    _, payload_raw, _, kid = _envelope(data)
    return _parse_payload(payload_raw, kind, kid, data)


def _parse_payload(raw: bytes, kind: PackKind, kid: bytes, encoded: bytes,
                   digest: bytes | None = None) -> Pack:  # fmt: skip
    try:
        p = cbor.decode(raw)
    except CborError as exc:
        raise _refuse(Reason.MALFORMED, f"payload: {exc}") from None
    if not isinstance(p, list) or len(p) != 7:
        raise _refuse(
            Reason.MALFORMED, "payload is [kind, pack_id, signer, seq, prev, created, items]"
        )
    k, pid, signer, seq, prev, created, items = p
    if type(k) is not int or k != int(kind):
        raise _refuse(Reason.MALFORMED, f"pack kind {k!r}, expected {int(kind)} ({kind.name})")
    if type(signer) is not bytes or len(signer) != ID_SIZE:
        raise _refuse(Reason.MALFORMED, f"signer must be {ID_SIZE} bytes")
    if type(seq) is not int or not 0 < seq < 1 << 64:
        raise _refuse(Reason.MALFORMED, "seq must be an integer in 1..2^64-1")
    if pid != pack_id(signer, seq):
        raise _refuse(Reason.MALFORMED, "pack_id is not signer || seq")
    if type(prev) is not bytes or len(prev) != HASH_SIZE:
        raise _refuse(Reason.MALFORMED, f"prev must be {HASH_SIZE} bytes")
    if type(created) is not int or not 0 <= created < 1 << 64:
        raise _refuse(Reason.MALFORMED, "created must be an unsigned integer")
    if not isinstance(items, list):
        raise _refuse(Reason.MALFORMED, "items must be an array")
    parsed: tuple[Record, ...] | tuple[KnowledgeItem, ...]
    try:
        if kind == PackKind.MEMORY:
            parsed = tuple(Record.from_wire(it) for it in items)
        else:
            parsed = tuple(KnowledgeItem.from_wire(it) for it in items)
    except HirmemError as exc:
        raise _refuse(Reason.MALFORMED, str(exc)) from None
    return Pack(
        kind,
        pid,
        signer,
        seq,
        prev,
        created,
        parsed,
        kid,
        encoded,
        hashlib.sha256(encoded).digest() if digest is None else digest,
    )
