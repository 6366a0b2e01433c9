"""Generate protocol/vectors/*.json from the host implementation, or check them.

    python tools/gen_vectors.py           # (re)write every vector file
    python tools/gen_vectors.py --check   # exit 1 if any committed file is stale

Vectors are language-neutral JSON (byte strings as lower-case hex) that the C
core, the MicroPython agent and the host must reproduce bit for bit. The keys
used here are test keys derived from public strings: never provision them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "host"))
sys.path.insert(0, str(ROOT / "tools"))

from hirmem.protocol import cbor, fixedpoint, gate, identity, pieces  # noqa: E402
from hirmem.protocol.errors import FrameError, MessageError, PackError  # noqa: E402
from hirmem.protocol.frames import FrameDecoder, cobs_encode, crc32, decode_frame, encode_frame  # noqa: E402
from hirmem.protocol.keys import derive_test_key  # noqa: E402
from hirmem.protocol.messages import (  # noqa: E402
    Ack,
    Capture,
    CaptureResult,
    Error,
    Hello,
    HelloAck,
    KnowledgePush,
    KnowledgeResult,
    Log,
    Message,
    PackOffer,
    PackResult,
    Proof,
    Status,
    StatusRequest,
    decode_message,
    encode_message,
    to_json,
)
from hirmem.protocol.packs import (  # noqa: E402
    ChainHead,
    KnowledgeItem,
    Pack,
    PackKind,
    Reason,
    TrustedKey,
    sign_pack,
    verify_pack,
)
from hirmem.protocol.proof import hello_echo, proof_input, sign_proof  # noqa: E402
from hirmem.protocol.records import GENESIS, Record, record_id  # noqa: E402
from rfc8032_cases import RFC8032_CASES  # noqa: E402

VECTORS = ROOT / "protocol" / "vectors"
Vector = dict[str, Any]


DEVICE_KEY = derive_test_key("device 0102030405060708")
OTHER_KEY = derive_test_key("device 1112131415161718")
HOST_KEY = derive_test_key("host a1a2a3a4a5a6a7a8")
DEVICE_ID = bytes.fromhex("0102030405060708")
OTHER_ID = bytes.fromhex("1112131415161718")
HOST_ID = bytes.fromhex("a1a2a3a4a5a6a7a8")
T0 = 1_780_000_000_000  # a fixed creation time (ms since the Unix epoch)


def _hex_error(err: FrameError) -> dict[str, str]:
    return {"error": err.kind}


# ---- frames -----------------------------------------------------------------


def frames() -> Vector:
    bodies = {
        "one byte": b"\x42",
        "zeros": bytes(8),
        "hello world": b"hello world",
        "254-byte run without zero": bytes(range(1, 255)),
        "255-byte run without zero": bytes(range(1, 256)),
        "mixed zeros and runs": b"\x00" + bytes(range(1, 255)) + b"\x00\x00" + b"\x11" * 200,
        "largest at max_frame 512": bytes((i * 7 + 1) % 256 for i in range(508)),
        "largest at the floor 128": bytes(i % 5 for i in range(124)),
    }
    valid = []
    for name, body in bodies.items():
        valid.append(
            {
                "name": name,
                "body": body.hex(),
                "crc32": f"{crc32(body):08x}",
                "wire": encode_frame(body).hex(),
            }
        )
    good = encode_frame(b"hello world")
    flipped_body = bytearray(good)
    flipped_body[3] ^= 0x01
    flipped_crc = bytearray(good)
    flipped_crc[-2] ^= 0x80
    overrun = bytearray(good)
    overrun[0] = 0x40
    short = cobs_encode(b"\x01\x02\x03") + b"\x00"
    long_raw = bytes(509) + crc32(bytes(509)).to_bytes(4, "little")
    too_long = cobs_encode(long_raw) + b"\x00"
    invalid = []
    for name, wire in (
        ("bit flip in the body", bytes(flipped_body)),
        ("bit flip in the CRC", bytes(flipped_crc)),
        ("COBS block overruns the frame", bytes(overrun)),
        ("shorter than a CRC plus one byte", short),
        ("decoded size above max_frame 512", too_long),
    ):
        try:
            decode_frame(wire, 512)
        except FrameError as err:
            invalid.append({"name": name, "wire": wire.hex(), "max_frame": 512, "error": err.kind})
        else:
            raise AssertionError(f"{name} decoded")
    stream = (
        b"\x13\x37noise"
        + b"\x00"
        + encode_frame(b"first")
        + bytes(flipped_body)
        + b"\x00"
        + encode_frame(b"after an empty frame")
        + too_long
        + encode_frame(b"last")
    )
    decoder = FrameDecoder(512)
    events = decoder.feed(stream)
    expected = [{"body": e.hex()} if isinstance(e, bytes) else _hex_error(e) for e in events]
    cobs_cases = {
        "one zero": b"\x00",
        "two zeros": b"\x00\x00",
        "zero inside": b"\x11\x22\x00\x33",
        "no zero": b"\x11\x22\x33\x44",
        "trailing zeros": b"\x11\x00\x00\x00",
        "254 non-zero bytes: no block after the full one": bytes(range(1, 255)),
        "zero then 254 non-zero bytes": b"\x00" + bytes(range(1, 255)),
        "255 non-zero bytes": bytes(range(1, 256)),
        "254 non-zero bytes then a zero": bytes(range(2, 256)) + b"\x00",
        "508 non-zero bytes (two full blocks)": bytes((i % 255) + 1 for i in range(508)),
    }
    return {
        "cobs": [
            {"name": n, "data": d.hex(), "encoded": cobs_encode(d).hex()}
            for n, d in cobs_cases.items()
        ],
        "description": "COBS frames: body || CRC-32 (IEEE, little-endian), COBS-encoded, "
        "ended by 0x00. 'stream' is one byte stream a receiver decodes in order, "
        "resynchronising on each 0x00; empty frames are skipped.",
        "valid": valid,
        "invalid": invalid,
        "streams": [
            {
                "name": "garbage, damage and recovery",
                "max_frame": 512,
                "stream": stream.hex(),
                "expected": expected,
            }
        ],
    }


# ---- messages -----------------------------------------------------------------


def sample_messages(
    record_pack: bytes, knowledge_pack: bytes
) -> list[tuple[str, Message, int, int]]:
    kid = DEVICE_KEY.kid
    return [
        (
            "hello",
            Hello(
                DEVICE_ID, "mps2-an385", "0.1.0", 7, 0x1F, 512, 4096, 4, kid, HOST_KEY.kid, 8, 32
            ),
            1,
            0,
        ),
        (
            "hello without host key",
            small_hello(),
            1,
            0,
        ),
        (
            "hello-ack",  # answers the "hello" vector
            HelloAck(
                HOST_ID, 512, 4096, 4, T0, 0, GENESIS, CHALLENGE, hello_echo(hello_vector_body())
            ),
            1,
            1,
        ),
        (
            "hello-ack with chain head",
            HelloAck(
                HOST_ID, 128, 1024, 1, T0 + 5, (7 << 32) | 3, hashlib.sha256(b"head").digest(),
                bytes(range(0xF0, 0x100)), hello_echo(encode_message(small_hello(), 1, 0)),
            ),  # answers the "hello without host key" vector
            1,
            1,
        ),
        (
            "capture",
            Capture(
                "temp0",
                b'{"t":21.5}',
                hashlib.sha256(b"ctx").digest(),
                0x0FFF,
                0x10000,
                0xE666,
                0x8000,
            ),
            2,
            1,
        ),
        (
            "capture-result",
            CaptureResult(
                2,
                0,
                record_id(DEVICE_ID, 7, 1),
                0x0FFF,
                0x10000,
                0x10000,
                0x10000,
                0x10000,
                0x10000,
                0x10000,
                0xE666,
                0,
                0,
                1,
            ),
            2,
            2,
        ),
        ("capture-result refused", CaptureResult(3, 1, b"", 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0), 3, 3),
        ("pack-offer", PackOffer(record_pack), 3, 2),
        ("pack-result accepted", PackResult(0, 0, 0), 4, 3),  # answers the offer of seq 3 - 0
        ("pack-result refused", PackResult(0, 2, int(Reason.ROLLBACK)), 5, 3),
        ("knowledge-push", KnowledgePush(knowledge_pack), 6, 4),
        (
            "knowledge-result",
            KnowledgeResult(bytes(HOST_ID) + (5).to_bytes(8, "big"), 0, 0, 5),
            4,
            6,
        ),
        ("status-request", StatusRequest(), 7, 4),
        ("status", Status(120_000, 12, 16, 40, 20, 1, 3, 9, 2, 2, 61, 1, 0, 5), 5, 7),
        ("log", Log(1, "ring 12/16, 3 quarantined"), 0, 7),
        ("error", Error(2, 9, "unknown message type 99"), 0, 9),
        ("ack", Ack(), 0, 12),
        ("proof", Proof(proof_signature()), 2, 1),
    ]


CHALLENGE = bytes(range(0x10, 0x20))  # the "hello-ack" vector's challenge


def small_hello() -> Hello:
    """The "hello without host key" vector's HELLO, which "hello-ack with chain head" answers."""
    return Hello(DEVICE_ID, "hifive1", "0.1.0", 1, 0x09, 128, 1024, 1, DEVICE_KEY.kid, b"")


def hello_vector_body() -> bytes:
    """The body of the "hello" vector: what the "proof" vector covers."""
    kid = DEVICE_KEY.kid
    hello = Hello(DEVICE_ID, "mps2-an385", "0.1.0", 7, 0x1F, 512, 4096, 4, kid, HOST_KEY.kid, 8, 32)
    return encode_message(hello, 1, 0)


def proof_signature() -> bytes:
    """PROOF of the "hello" device answering the "hello-ack" vector (SPEC §5.15)."""
    return sign_proof(DEVICE_KEY, HOST_ID, CHALLENGE, DEVICE_ID, 7, hello_vector_body())


def proof_vector() -> dict[str, Any]:
    body = hello_vector_body()
    message = proof_input(HOST_ID, CHALLENGE, DEVICE_ID, 7, body)
    return {
        "description": "SPEC §5.15: the bytes a PROOF signs for the 'hello' vector's device "
        "answering the 'hello-ack' vector, and the signature (device vector key).",
        "host_id": HOST_ID.hex(),
        "challenge": CHALLENGE.hex(),
        "device_id": DEVICE_ID.hex(),
        "boot": 7,
        "hello_body": body.hex(),
        "input": message.hex(),
        "signature": proof_signature().hex(),
    }


def messages(record_pack: bytes, knowledge_pack: bytes) -> Vector:
    valid = []
    for name, msg, seq, ack in sample_messages(record_pack, knowledge_pack):
        body = encode_message(msg, seq, ack)
        valid.append(
            {
                "name": name,
                "seq": seq,
                "ack": ack,
                "message": to_json(msg),
                "body": body.hex(),
                "frame": encode_frame(body).hex() if len(body) + 4 <= 512 else None,
            }
        )
    status_req = encode_message(StatusRequest(), 7, 4)
    bad_bodies = {
        "unknown version": cbor.encode([2, 9, 7, 4]),
        "unknown type": cbor.encode([1, 99, 7, 4]),
        "too few fields": cbor.encode([1, 10, 5, 7, 1, 2]),
        "field of the wrong type": cbor.encode([1, 11, 0, 7, "1", "text"]),
        "sequenced type with seq 0": cbor.encode([1, 9, 0, 4]),
        "unsequenced type with seq 5": cbor.encode([1, 13, 5, 4]),
        "byte string of the wrong size": cbor.encode([1, 8, 4, 3, b"short", 0, 0, 0]),
        "Q16.16 above one": cbor.encode([1, 3, 2, 1, "s", b"", bytes(32), 0, 0x10001, 0, 0]),
        "non-minimal integer head": bytes.fromhex("841801") + status_req[2:],
        "indefinite-length array": b"\x9f" + status_req[1:] + b"\xff",
        "not an array": cbor.encode({1: 9}),
        "trailing byte": status_req + b"\x00",
    }
    invalid = []
    for name, body in bad_bodies.items():
        try:
            decode_message(body)
        except MessageError as err:
            invalid.append({"name": name, "body": body.hex(), "error_code": int(err.code)})
        else:
            raise AssertionError(f"{name} decoded")
    offer = encode_message(PackOffer(record_pack), 3, 2)
    cut = [
        {
            "max_frame": max_frame,
            "body": offer.hex(),
            "pieces": [p.hex() for p in pieces.split(offer, max_frame)],
            "frames": [encode_frame(p, max_frame).hex() for p in pieces.split(offer, max_frame)],
        }
        for max_frame in (128, 256, 512)
    ]
    return {
        "pieces": cut,
        "description": "Link messages: [version, type, seq, ack, fields...] in deterministic "
        "CBOR. 'frame' is the body framed for the wire (null when the body does not fit "
        "max_frame 512: such a body travels in frame pieces, SPEC 6.8, see 'pieces': the "
        "body with its own seq and ack, cut at each max_frame). Invalid bodies give the "
        "ERROR code a receiver answers with.",
        "valid": valid,
        "invalid": invalid,
        "proof": proof_vector(),
    }


# ---- fixed point and gate ----------------------------------------------------


def fixed_point() -> Vector:
    one = fixedpoint.ONE
    pairs = [
        (0, 0),
        (one, one),
        (one, 0x8000),
        (0x8000, 0x8000),
        (0x4000, 0xC000),
        (1, 0x8000),
        (1, 0x7FFF),
        (3, 0x8000),
        (0xE666, 0xB333),
        (0xFFFF, 0xFFFF),
        (0x12345, 0x6789A),
        (0x7FFFFFFF, 0x2),
        (0xFFFFFFFF, 0x1),
    ]
    sqrts = [0, 1, 2, 3, 0x4000, 0x8000, 0xC000, one, 0x24000, 0x7FFF, 0xFFFFFFFF]
    sqrt_muls = [
        (one, one),
        (0xC000, one),
        (0x8000, 0xC000),
        (0x4000, 0x4000),
        (0x4000, one),
        (1, 1),
        (0xB505, 0xC000),
        (0, one),
    ]
    isqrts = [
        0,
        1,
        2,
        3,
        4,
        6,
        7,
        8,
        12,
        13,
        (1 << 32) - 1,
        1 << 32,
        (1 << 64) - 1,
        0xC0000000 * 0x10000,
    ]
    return {
        "description": "Q16.16 unsigned: mul = (a*b + 0x8000) >> 16; isqrt_round(n) = "
        "floor(sqrt(n)) + 1 when n - r*r > r; sqrt(a) = isqrt_round(a << 16); "
        "sqrt_mul(a, b) = isqrt_round(a * b).",
        "mul": [{"a": a, "b": b, "result": fixedpoint.q_mul(a, b)} for a, b in pairs],
        "isqrt_round": [{"n": n, "result": fixedpoint.isqrt_round(n)} for n in isqrts],
        "sqrt": [{"a": a, "result": fixedpoint.q_sqrt(a)} for a in sqrts],
        "sqrt_mul": [{"a": a, "b": b, "result": fixedpoint.q_sqrt_mul(a, b)} for a, b in sqrt_muls],
    }


def gate_vectors() -> Vector:
    cases = []
    for flags, q, p in gate.gate_edge_cases():
        g = gate.evaluate(flags, q, p)
        cases.append(
            {
                "flags": flags,
                "quality": q,
                "provenance": p,
                "h": g.h,
                "i": g.i,
                "r": g.r,
                "f": g.f,
                "c": g.c,
                "rn": g.rn,
                "w": g.w,
                "verdict": int(g.verdict),
                "hard": int(g.hard),
                "state": int(g.disposition),
            }
        )
    return {
        "description": "The HIR gate in Q16.16: flags are ACTION_FLAGS (bit set = sub-check "
        "passed); quality and provenance are Q and P of W = Q*P*H*I*R; verdict 0 GREEN, "
        "1 YELLOW, 2 RED; hard bits 1 domination, 2 invariant, 4 consent, 8 honesty zero; "
        "state 1 candidate, 3 quarantined.",
        "cases": cases,
    }


# ---- records and hashes ------------------------------------------------------


def record_chain(prev: bytes = GENESIS, boot: int = 7, first: int = 1) -> list[Record]:
    inputs = [
        (b'{"t":21.5}', "temp0", 0x0FFF, 0x10000, 0xE666, 0x8000),
        (b'{"t":85.0,"note":"spike"}', "temp0", 0x0F3F, 0xC000, 0x8000, 0xC000),
        (b"", "", 0x0F73, 0x8000, 0x4000, 0x4000),
    ]
    out = []
    for n, (payload, source, flags, q, p, prio) in enumerate(inputs):
        rid = record_id(DEVICE_ID, boot, first + n)
        ctx = hashlib.sha256(b"context %d" % (first + n)).digest()
        rec = Record.capture(rid, payload, source, T0 + 1000 * n, ctx, flags, q, p, prio, prev)
        out.append(rec)
        prev = rec.hash
    return out


def records() -> Vector:
    chain = record_chain()
    return {
        "description": "Memory records as they travel. hash = SHA-256(CBOR [id, payload, "
        "source, timestamp, context, prev_hash]); the first record links to the pack's prev "
        "(here genesis: 32 zero bytes), each later one to the record before it.",
        "chain": [
            {
                "hash_input": cbor.encode(
                    [r.id, r.payload, r.source, r.timestamp, r.context, r.prev_hash]
                ).hex(),
                "hash": r.hash.hex(),
                "prev_hash": r.prev_hash.hex(),
                "wire": cbor.encode(r.to_wire()).hex(),
            }
            for r in chain
        ],
    }


def hashes() -> Vector:
    messages = [
        b"",
        b"abc",
        b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
        b"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnop"
        b"jklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
    ]
    messages += [
        bytes((i * 31) & 0xFF for i in range(n))
        for n in (55, 56, 63, 64, 65, 111, 112, 127, 128, 129, 1000)
    ]
    cases: list[dict[str, Any]] = [
        {
            "message": m.hex(),
            "sha256": hashlib.sha256(m).hexdigest(),
            "sha512": hashlib.sha512(m).hexdigest(),
        }
        for m in messages
    ]
    million = b"a" * 1_000_000
    cases.append(
        {
            "repeat": {"byte": "61", "count": 1_000_000},
            "sha256": hashlib.sha256(million).hexdigest(),
            "sha512": hashlib.sha512(million).hexdigest(),
        }
    )
    return {
        "description": "SHA-256 and SHA-512 (FIPS 180-4) around the block boundaries.",
        "cases": cases,
    }


# ---- Ed25519 -----------------------------------------------------------------

L = 2**252 + 27742317777372353535851937790883648493


def ed25519() -> Vector:
    cases: list[dict[str, Any]] = []
    for name, sk, pk, msg_hex, sig in RFC8032_CASES:
        cases.append(
            {
                "name": name,
                "secret": sk,
                "public": pk,
                "message": msg_hex,
                "signature": sig,
                "valid": True,
            }
        )
    pack = sign_pack(DEVICE_KEY, PackKind.MEMORY, DEVICE_ID, 1, GENESIS, T0, record_chain())
    protected, _, payload, _sig = cbor.decode(pack.encoded).value
    from hirmem.protocol.packs import sig_structure

    for name, sized in (
        ("pack-sized: a device pack's Sig_structure", sig_structure(protected, payload)),
        ("pack-sized: 512 bytes", bytes(i & 0xFF for i in range(512))),
    ):
        sig_b = DEVICE_KEY.sign(sized)
        cases.append(
            {
                "name": name,
                "secret": DEVICE_KEY.seed().hex(),
                "public": DEVICE_KEY.public.raw.hex(),
                "message": sized.hex(),
                "signature": sig_b.hex(),
                "valid": True,
            }
        )
    # verification-only cases: the expected result is what OpenSSL (cryptography) decides
    msg = b"hirmem verify edge cases"
    good = DEVICE_KEY.sign(msg)
    s = int.from_bytes(good[32:], "little")
    non_canonical = good[:32] + (s + L).to_bytes(32, "little")
    flipped_r = bytes([good[0] ^ 1]) + good[1:]
    identity_point = (1).to_bytes(32, "little")
    small_order_sig = identity_point + bytes(32)
    pub = DEVICE_KEY.public
    for name, key_raw, signature, message in (
        ("S + L (non-canonical S) must be refused", pub.raw, non_canonical, msg),
        ("bit flip in R", pub.raw, flipped_r, msg),
        ("other message", pub.raw, good, msg + b"!"),
        (
            "small-order public key (identity) with R = identity, S = 0",
            identity_point,
            small_order_sig,
            msg,
        ),
    ):
        from hirmem.protocol.keys import PublicKey

        cases.append(
            {
                "name": name,
                "public": key_raw.hex(),
                "message": message.hex(),
                "signature": signature.hex(),
                "valid": PublicKey(key_raw).verify(signature, message),
            }
        )
    return {
        "description": "Ed25519 (RFC 8032, pure EdDSA). Cases with a secret must be reproduced "
        "(public key and signature); all must verify to 'valid'. Verification follows "
        "OpenSSL: S must be < L, the encoded points must decode.",
        "cases": cases,
    }


# ---- packs -------------------------------------------------------------------


def _trusted() -> dict[str, Any]:
    return {
        "device": {
            "kid": DEVICE_KEY.kid.hex(),
            "public": DEVICE_KEY.public.raw.hex(),
            "signer": DEVICE_ID.hex(),
            "kind": "memory",
        },
        "host": {
            "kid": HOST_KEY.kid.hex(),
            "public": HOST_KEY.public.raw.hex(),
            "signer": HOST_ID.hex(),
            "kind": "knowledge",
        },
    }


def trusted_keys() -> dict[bytes, TrustedKey]:
    return {
        DEVICE_KEY.kid: TrustedKey(DEVICE_KEY.public, DEVICE_ID, PackKind.MEMORY),
        HOST_KEY.kid: TrustedKey(HOST_KEY.public, HOST_ID, PackKind.KNOWLEDGE),
    }


def knowledge_items() -> list[KnowledgeItem]:
    out = []
    for s, p, o, conf in (
        ("temp0", "max_safe", "80.0", 0xF000),
        ("pump", "serves", "zone 3", 0x10000),
    ):
        tid = bytes.fromhex(identity.triple_id(s, p, o))
        out.append(KnowledgeItem(tid, s, p, o, conf))
    return out


def sample_packs() -> tuple[Pack, Pack, Pack]:
    first = sign_pack(
        DEVICE_KEY, PackKind.MEMORY, DEVICE_ID, (7 << 32) | 1, GENESIS, T0, record_chain()
    )
    second = sign_pack(
        DEVICE_KEY,
        PackKind.MEMORY,
        DEVICE_ID,
        (7 << 32) | 2,
        first.hash,
        T0 + 4000,
        record_chain(first.hash, 7, 4),
    )
    knowledge = sign_pack(HOST_KEY, PackKind.KNOWLEDGE, HOST_ID, 5, GENESIS, T0, knowledge_items())
    return first, second, knowledge


def packs() -> Vector:
    keys = trusted_keys()
    first, second, knowledge = sample_packs()
    h1 = ChainHead(first.seq, first.hash)
    h2 = ChainHead(second.seq, second.hash)
    tampered = bytearray(second.encoded)
    tampered[tampered.find(b"spike")] ^= 0x20
    stranger = sign_pack(
        OTHER_KEY, PackKind.MEMORY, DEVICE_ID, second.seq, first.hash, T0 + 4000, []
    )
    replay = sign_pack(
        DEVICE_KEY, PackKind.MEMORY, DEVICE_ID, second.seq, first.hash, T0 + 9999, []
    )
    broken = sign_pack(
        DEVICE_KEY,
        PackKind.MEMORY,
        DEVICE_ID,
        second.seq,
        hashlib.sha256(b"x").digest(),
        T0 + 4000,
        [],
    )
    wrong_signer = sign_pack(DEVICE_KEY, PackKind.MEMORY, OTHER_ID, 1, GENESIS, T0, [])
    bad_record = _resign_with_bad_record(first)
    alg_es256 = _with_protected(first, cbor.encode({1: -7, 4: DEVICE_KEY.kid}))
    older_knowledge = sign_pack(HOST_KEY, PackKind.KNOWLEDGE, HOST_ID, 4, GENESIS, T0, [])
    newer_knowledge = sign_pack(
        HOST_KEY,
        PackKind.KNOWLEDGE,
        HOST_ID,
        9,
        hashlib.sha256(b"missed").digest(),
        T0,
        knowledge_items(),
    )
    cases: list[tuple[str, Pack | bytes, ChainHead | None, PackKind, bool]] = [
        ("first pack of a device (genesis)", first, None, PackKind.MEMORY, True),
        ("second pack chained to the first", second, h1, PackKind.MEMORY, True),
        ("the head again: duplicate", second, h2, PackKind.MEMORY, True),
        ("tampered byte in a record", bytes(tampered), h1, PackKind.MEMORY, True),
        ("signed by an unknown key", stranger, h1, PackKind.MEMORY, True),
        ("rollback: older than the head", first, h2, PackKind.MEMORY, True),
        ("replay: the head's seq with other content", replay, h2, PackKind.MEMORY, True),
        ("broken chain: prev is not the head", broken, h1, PackKind.MEMORY, True),
        ("the device key signing for another device", wrong_signer, None, PackKind.MEMORY, True),
        ("record hash does not match its content", bad_record, None, PackKind.MEMORY, True),
        ("alg ES256 instead of EdDSA", alg_es256, None, PackKind.MEMORY, True),
        ("truncated", first.encoded[:-10], None, PackKind.MEMORY, True),
        ("a knowledge pack offered as a memory pack", knowledge, None, PackKind.MEMORY, True),
        (
            "knowledge pack on a device",
            knowledge,
            ChainHead(4, bytes(32)),
            PackKind.KNOWLEDGE,
            False,
        ),
        (
            "knowledge pack after missed versions",
            newer_knowledge,
            ChainHead(5, knowledge.hash),
            PackKind.KNOWLEDGE,
            False,
        ),
        (
            "knowledge rollback on a device",
            older_knowledge,
            ChainHead(5, knowledge.hash),
            PackKind.KNOWLEDGE,
            False,
        ),
    ]
    out = []
    expect: dict[str, Any]
    for name, pack, head, kind, chain in cases:
        data = pack.encoded if isinstance(pack, Pack) else pack
        try:
            result = verify_pack(data, keys, head, kind, require_chain=chain)
            expect = {
                "status": "duplicate" if result.duplicate else "accepted",
                "pack_id": result.pack.pack_id.hex(),
                "hash": result.pack.hash.hex(),
            }
        except PackError as err:
            expect = {
                "status": "refused",
                "reason": Reason(err.reason).name.lower(),
                "code": err.reason,
            }
        out.append(
            {
                "name": name,
                "kind": kind.name.lower(),
                "require_chain": chain,
                "head": None if head is None else {"seq": head.seq, "hash": head.hash.hex()},
                "pack": data.hex(),
                "expect": expect,
            }
        )
    return {
        "description": "COSE_Sign1 packs with EdDSA. Verify against 'trusted' and 'head' (the "
        "signer's last accepted seq and pack hash, null if none) in the order of SPEC.md §8.4.",
        "trusted": _trusted(),
        "cases": out,
    }


def _with_protected(pack: Pack, protected: bytes) -> bytes:
    from hirmem.protocol.packs import sig_structure

    _, unprot, payload, _ = cbor.decode(pack.encoded).value
    sig = DEVICE_KEY.sign(sig_structure(protected, payload))
    return cbor.encode(cbor.Tag(18, [protected, unprot, payload, sig]))


def _resign_with_bad_record(pack: Pack) -> bytes:
    from hirmem.protocol.packs import protected_header, sig_structure

    _, unprot, payload_raw, _ = cbor.decode(pack.encoded).value
    payload = cbor.decode(payload_raw)
    payload[6][0][1] = b'{"t":99.9}'  # content changed, hash left as it was
    payload_raw = cbor.encode(payload)
    protected = protected_header(DEVICE_KEY.kid)
    sig = DEVICE_KEY.sign(sig_structure(protected, payload_raw))
    return cbor.encode(cbor.Tag(18, [protected, unprot, payload_raw, sig]))


# ---- identity ----------------------------------------------------------------


def identity_vectors() -> Vector:
    cases = []
    for s, p, o in identity.EDGE_CASES:
        cases.append(
            {
                "s": s.hex(),
                "p": p.hex(),
                "o": o.hex(),
                "fold_s": identity.fold(s),
                "fold_p": identity.fold(p),
                "fold_o": identity.fold(o),
                "id": identity.triple_id(s, p, o),
            }
        )
    return {
        "description": "Semantic identity: fold (split on Go unicode.IsSpace runs, join with "
        "one space, simple lower-case per rune, invalid UTF-8 bytes -> U+FFFD each), then "
        "64-bit FNV-1a over fold(s) 00 fold(p) 00 fold(o) 00. Inputs are raw bytes (hex).",
        "cases": cases,
    }


def build() -> dict[str, Vector]:
    first, _, knowledge = sample_packs()
    generators: dict[str, Callable[[], Vector]] = {
        "frames.json": frames,
        "messages.json": lambda: messages(first.encoded, knowledge.encoded),
        "fixed_point.json": fixed_point,
        "gate.json": gate_vectors,
        "records.json": records,
        "hashes.json": hashes,
        "ed25519.json": ed25519,
        "packs.json": packs,
        "identity.json": identity_vectors,
    }
    return {name: gen() for name, gen in generators.items()}


def render(vector: Vector) -> str:
    return json.dumps(vector, indent=1, ensure_ascii=False, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a committed file is stale")
    args = parser.parse_args(argv)
    stale = []
    built = build()
    for name, vector in built.items():
        path = VECTORS / name
        text = render(vector)
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    extra = sorted(p.name for p in VECTORS.glob("*.json") if p.name not in built)
    if args.check:
        if stale or extra:
            for name in stale:
                print(f"stale: protocol/vectors/{name} (run tools/gen_vectors.py)")
            for name in extra:
                print(f"not generated by this tool: protocol/vectors/{name}")
            return 1
        print(f"protocol/vectors: {len(built)} files up to date")
    else:
        print(f"wrote {len(built)} files to protocol/vectors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
