"""Memory records (SPEC 7): id, hash input, wire encoding."""

from hashlib import sha256

from . import cbor

GENESIS = bytes(32)


def record_id(device_id: bytes, boot: int, seq: int) -> bytes:
    return device_id + boot.to_bytes(4, "big") + seq.to_bytes(4, "big")


def hash_input(rid, payload, source: bytes, timestamp: int, context, prev_hash) -> bytes:
    """The 6-element CBOR array whose SHA-256 is the record hash (source as UTF-8 bytes)."""
    out = bytearray(b"\x86")
    cbor.enc_bytes(out, rid)
    cbor.enc_bytes(out, payload)
    cbor.head(out, 3, len(source))
    out.extend(source)
    cbor.head(out, 0, timestamp)
    cbor.enc_bytes(out, context)
    cbor.enc_bytes(out, prev_hash)
    return bytes(out)


def record_hash(rid, payload, source: bytes, timestamp: int, context, prev_hash) -> bytes:
    return sha256(hash_input(rid, payload, source, timestamp, context, prev_hash)).digest()


def encode_into(out: bytearray, rid, payload, source: bytes, timestamp: int, context,
                g, confidence: int, provenance: int, priority: int, layer: int,
                rhash, prev_hash) -> None:
    """Append the 20-element wire record; g is a gate.Result."""
    out.append(0x94)
    cbor.enc_bytes(out, rid)
    cbor.enc_bytes(out, payload)
    cbor.head(out, 3, len(source))
    out.extend(source)
    cbor.head(out, 0, timestamp)
    cbor.enc_bytes(out, context)
    for v in (g.flags, g.h, g.i, g.r, g.f, g.c, g.rn, confidence, provenance, priority,
              g.w, g.state, layer):
        cbor.head(out, 0, v)
    cbor.enc_bytes(out, rhash)
    cbor.enc_bytes(out, prev_hash)
