"""Signed packs (SPEC 8): COSE_Sign1 (tag 18) with EdDSA over Ed25519.

sign_pack() assembles and signs a pack from an encoded payload; verify() runs the
checks of SPEC 8.4 in order and returns (status, reason, pack_id, pack_hash, payload)
with the wire PackStatus and refusal reason; the device verifies knowledge packs with
require_chain False, and the same function reproduces every case of packs.json.
"""

from hashlib import sha256

from micropython import const

from . import cbor, ed25519
from .cbor import CborError, Tag
from .gate import evaluate, normalise
from .record import GENESIS, record_hash

KIND_MEMORY = const(1)
KIND_KNOWLEDGE = const(2)
MAX_PACK = const(65536)

ACCEPTED = const(0)
DUPLICATE = const(1)
REFUSED = const(2)
DEFERRED = const(3)

R_NONE = const(0)
R_MALFORMED = const(1)
R_TOO_LARGE = const(2)
R_UNSUPPORTED_ALG = const(3)
R_UNKNOWN_KEY = const(4)
R_BAD_SIGNATURE = const(5)
R_WRONG_SIGNER = const(6)
R_ROLLBACK = const(7)
R_REPLAY = const(8)
R_BROKEN_CHAIN = const(9)
R_BAD_RECORD = const(10)
R_STORAGE = const(11)

REASONS = ("none", "malformed", "too-large", "unsupported-alg", "unknown-key",
           "bad-signature", "wrong-signer", "rollback", "replay", "broken-chain",
           "bad-record", "storage")
STATUSES = ("accepted", "duplicate", "refused", "deferred")

_SIG1 = b"\x84\x6aSignature1"
_U64 = const(0xFFFFFFFFFFFFFFFF)


def kid_of(public: bytes) -> bytes:
    return sha256(public).digest()[0:8]


def protected_header(kid: bytes) -> bytes:
    return b"\xa2\x01\x27\x04\x48" + kid


def sig_structure(protected: bytes, payload) -> bytearray:
    out = bytearray(_SIG1)
    cbor.enc_bytes(out, protected)
    out.append(0x40)
    cbor.enc_bytes(out, payload)
    return out


def sign_pack(seed: bytes, kid: bytes, payload) -> bytes:
    """The encoded COSE_Sign1 of an encoded payload, signed with seed."""
    prot = protected_header(kid)
    sig = ed25519.sign(seed, sig_structure(prot, payload))
    out = bytearray(b"\xd2\x84")
    cbor.enc_bytes(out, prot)
    out.append(0xA0)
    cbor.enc_bytes(out, payload)
    cbor.enc_bytes(out, sig)
    return bytes(out)


def payload_head(out: bytearray, kind: int, signer: bytes, seq: int, prev: bytes,
                 created: int, nitems: int) -> None:
    out.append(0x87)
    out.append(kind)
    cbor.enc_bytes(out, signer + seq.to_bytes(8, "big"))
    cbor.enc_bytes(out, signer)
    cbor.head(out, 0, seq)
    cbor.enc_bytes(out, prev)
    cbor.head(out, 0, created)
    cbor.head(out, 4, nitems)


class TrustedKey:
    def __init__(self, public: bytes, signer: bytes, kind: int) -> None:
        self.public = public
        self.kid = kid_of(public)
        self.signer = signer
        self.kind = kind


def _is_uint(v: object, hi: int) -> bool:
    return type(v) is int and 0 <= v <= hi  # noqa: E721


def _is_b(v: object, n: int) -> bool:
    return type(v) is bytes and len(v) == n  # noqa: E721


def _record_shape(r: object) -> bool:
    if type(r) is not list or len(r) != 20:  # noqa: E721
        return False
    if not (_is_b(r[0], 16) and type(r[1]) is bytes and len(r[1]) <= 256  # noqa: E721
            and type(r[2]) is str and len(r[2].encode()) <= 64  # noqa: E721
            and _is_uint(r[3], _U64) and _is_b(r[4], 32) and _is_uint(r[5], 0x0FFF)):
        return False
    for k in range(6, 16):
        if not _is_uint(r[k], 0x10000):
            return False
    return (_is_uint(r[16], 4) and _is_uint(r[17], 4) and _is_b(r[18], 32)
            and _is_b(r[19], 32))


def _item_shape(it: object) -> bool:
    return (type(it) is list and len(it) == 5 and _is_b(it[0], 8)  # noqa: E721
            and type(it[1]) is str and type(it[2]) is str  # noqa: E721
            and type(it[3]) is str and _is_uint(it[4], 0x10000))  # noqa: E721


def check_record(r: list, signer: bytes, link: bytes) -> bool:
    """SPEC 8.6 for one record of a memory pack."""
    if r[0][0:8] != signer or r[19] != link:
        return False
    src = r[2].encode()
    if r[18] != record_hash(r[0], r[1], src, r[3], r[4], r[19]):
        return False
    flags = r[5]
    if normalise(flags, len(r[1]), True, len(src), r[3], len(r[4])) != flags:
        return False
    g = evaluate(flags, r[12], r[13])
    if (r[6], r[7], r[8], r[9], r[10], r[11], r[15]) != (g.h, g.i, g.r, g.f, g.c, g.rn, g.w):
        return False
    return r[17] == 1 and r[16] == g.state


_ZERO_ID = bytes(16)


def verify(pack, keys, head, kind: int, require_chain: bool):
    """SPEC 8.4. keys: TrustedKey list; head: (seq, hash) or None.

    Returns (status, reason, pack_id, pack_hash, payload_list). pack_id is 16 zero
    bytes unless step 9 was passed; pack_hash and payload are None unless accepted or
    duplicate.
    """
    if len(pack) > MAX_PACK:
        return REFUSED, R_TOO_LARGE, _ZERO_ID, None, None
    try:
        top = cbor.decode(pack)
    except CborError:
        return REFUSED, R_MALFORMED, _ZERO_ID, None, None
    if not isinstance(top, Tag) or top.tag != 18:
        return REFUSED, R_MALFORMED, _ZERO_ID, None, None
    arr = top.value
    if (type(arr) is not list or len(arr) != 4 or type(arr[0]) is not bytes  # noqa: E721
            or type(arr[1]) is not dict or len(arr[1]) != 0  # noqa: E721
            or type(arr[2]) is not bytes or type(arr[3]) is not bytes):  # noqa: E721
        return REFUSED, R_MALFORMED, _ZERO_ID, None, None
    prot, payload, sig = arr[0], arr[2], arr[3]
    try:
        ph = cbor.decode(prot)
    except CborError:
        return REFUSED, R_MALFORMED, _ZERO_ID, None, None
    if type(ph) is not dict:  # noqa: E721
        return REFUSED, R_MALFORMED, _ZERO_ID, None, None
    alg = ph.get(1, None)
    if type(alg) is not int or alg != -8:  # noqa: E721
        return REFUSED, R_UNSUPPORTED_ALG, _ZERO_ID, None, None
    kid = ph.get(4, None)
    if not _is_b(kid, 8) or len(ph) != 2:
        return REFUSED, R_MALFORMED, _ZERO_ID, None, None
    key = None
    for k in keys:
        if k.kid == kid and k.kind == kind:
            key = k
            break
    if key is None:
        return REFUSED, R_UNKNOWN_KEY, _ZERO_ID, None, None
    if len(sig) != 64 or not ed25519.verify(sig, key.public, sig_structure(prot, payload)):
        return REFUSED, R_BAD_SIGNATURE, _ZERO_ID, None, None
    # step 9: the payload
    try:
        pl = cbor.decode(payload)
    except CborError:
        return REFUSED, R_MALFORMED, _ZERO_ID, None, None
    if (type(pl) is not list or len(pl) != 7 or type(pl[0]) is not int  # noqa: E721
            or pl[0] != kind or not _is_b(pl[2], 8) or not _is_uint(pl[3], _U64)
            or pl[3] < 1 or not _is_b(pl[1], 16) or pl[1] != pl[2] + pl[3].to_bytes(8, "big")
            or not _is_b(pl[4], 32) or not _is_uint(pl[5], _U64)
            or type(pl[6]) is not list):  # noqa: E721
        return REFUSED, R_MALFORMED, _ZERO_ID, None, None
    shape = _record_shape if kind == KIND_MEMORY else _item_shape
    for it in pl[6]:
        if not shape(it):
            return REFUSED, R_MALFORMED, _ZERO_ID, None, None
    pack_id = pl[1]
    signer, seq, prev = pl[2], pl[3], pl[4]
    if signer != key.signer:
        return REFUSED, R_WRONG_SIGNER, pack_id, None, None
    phash = sha256(pack).digest()
    if head is not None:
        if seq < head[0]:
            return REFUSED, R_ROLLBACK, pack_id, None, None
        if seq == head[0]:
            if phash == head[1]:
                return DUPLICATE, R_NONE, pack_id, phash, pl
            return REFUSED, R_REPLAY, pack_id, None, None
    if require_chain and prev != (head[1] if head is not None else GENESIS):
        return REFUSED, R_BROKEN_CHAIN, pack_id, None, None
    if kind == KIND_MEMORY:
        link = prev
        for r in pl[6]:
            if not check_record(r, signer, link):
                return REFUSED, R_BAD_RECORD, pack_id, None, None
            link = r[18]
    return ACCEPTED, R_NONE, pack_id, phash, pl
