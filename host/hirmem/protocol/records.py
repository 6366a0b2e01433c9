"""The memory record as it travels in a device pack, its hash and its chain.

A record is a CBOR array with fixed positions (see ``protocol/SPEC.md`` §7):

    [id, payload, source, timestamp, context, flags,
     h, i, r, f, c, rn, confidence, provenance, priority, w,
     state, layer, hash, prev_hash]

Scores are Q16.16 integers. ``hash`` is SHA-256 over the deterministic CBOR of
``[id, payload, source, timestamp, context, prev_hash]`` — the payload and its
provenance, bound to the previous record — so the records of a device form one
chain: inside a pack the first record links to the pack's ``prev`` (the hash of
the signer's previous pack) and each later record to the one before it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields, make_dataclass
from enum import IntEnum
from types import EllipsisType
from typing import Any

from hirmem.protocol import cbor
from hirmem.protocol.errors import HirmemError
from hirmem.protocol.gate import Check, evaluate

RECORD_ID_SIZE = 16  # device id (8) + boot counter (u32 BE) + capture sequence (u32 BE)
HASH_SIZE = 32
MAX_PAYLOAD = 256
MAX_SOURCE = 64
GENESIS = bytes(HASH_SIZE)


class State(IntEnum):
    VOLATILE = 0
    CANDIDATE = 1
    CONSOLIDATED = 2
    QUARANTINED = 3
    ARCHIVED = 4


class Layer(IntEnum):
    WORKING = 0
    EPISODIC = 1
    SEMANTIC = 2
    PROCEDURAL = 3
    PROVENANCE = 4


def record_id(device_id: bytes, boot: int, seq: int) -> bytes:
    return device_id + boot.to_bytes(4, "big") + seq.to_bytes(4, "big")


def record_hash(
    rid: bytes, payload: bytes, source: str, timestamp: int, context: bytes, prev_hash: bytes
) -> bytes:
    return hashlib.sha256(
        cbor.encode_array((rid, payload, source, timestamp, context, prev_hash))
    ).digest()


def normalise(flags: int, payload: bytes, source: str, timestamp: int, context: bytes) -> int:
    """Stage 2: set ACTION_FLAGS bits 3 (schema_valid) and 2 (source_present) from the record.

    The record is kept either way: a missing source or an invalid schema lowers H
    at the gate, it does not drop the record. Schema valid means a non-empty
    payload within MAX_PAYLOAD, a known timestamp (> 0), a 32-byte context and a
    source within MAX_SOURCE bytes.
    """
    schema_ok = (
        0 < len(payload) <= MAX_PAYLOAD
        and timestamp > 0
        and len(context) == HASH_SIZE
        and len(source.encode("utf-8")) <= MAX_SOURCE
    )
    flags &= ~_SCHEMA_SOURCE  # (plain ints: IntFlag arithmetic is slow per record)
    if schema_ok:
        flags |= _SCHEMA_VALID
    if source:
        flags |= _SOURCE_PRESENT
    return flags


@dataclass(frozen=True, slots=True)
class Record:
    id: bytes
    payload: bytes
    source: str
    timestamp: int
    context: bytes
    flags: int
    h: int
    i: int
    r: int
    f: int
    c: int
    rn: int
    confidence: int
    provenance: int
    priority: int
    w: int
    state: int
    layer: int
    hash: bytes
    prev_hash: bytes

    @classmethod
    def capture(
        cls,
        rid: bytes,
        payload: bytes,
        source: str,
        timestamp: int,
        context: bytes,
        flags: int,
        confidence: int,
        provenance: int,
        priority: int,
        prev_hash: bytes,
    ) -> Record:
        """Build a record the way a device does: normalise, gate, then hash and chain it."""
        flags = normalise(flags, payload, source, timestamp, context)
        g = evaluate(flags, confidence, provenance)
        return cls(
            rid,
            payload,
            source,
            timestamp,
            context,
            flags,
            g.h,
            g.i,
            g.r,
            g.f,
            g.c,
            g.rn,
            confidence,
            provenance,
            priority,
            g.w,
            int(g.disposition),
            int(Layer.EPISODIC),
            record_hash(rid, payload, source, timestamp, context, prev_hash),
            prev_hash,
        )

    def to_wire(self) -> list[Any]:
        return [
            self.id,
            self.payload,
            self.source,
            self.timestamp,
            self.context,
            self.flags,
            self.h,
            self.i,
            self.r,
            self.f,
            self.c,
            self.rn,
            self.confidence,
            self.provenance,
            self.priority,
            self.w,
            self.state,
            self.layer,
            self.hash,
            self.prev_hash,
        ]

    @classmethod
    def from_wire(cls, item: object) -> Record:
        """Check the shape and types of a wire record (not its hash: see :meth:`check`)."""
        if not isinstance(item, list) or len(item) != 20:
            n = len(item) if isinstance(item, list) else type(item).__name__
            raise HirmemError(f"a record is an array of 20 items, got {n}")
        _want(item, 0, bytes, "id", RECORD_ID_SIZE)
        _want(item, 1, bytes, "payload")
        if len(item[1]) > MAX_PAYLOAD:
            raise HirmemError(f"record payload is {len(item[1])} bytes, limit {MAX_PAYLOAD}")
        _want(item, 2, str, "source")
        if len(item[2].encode()) > MAX_SOURCE:
            raise HirmemError(f"record source is longer than {MAX_SOURCE} bytes")
        _want(item, 4, bytes, "context", HASH_SIZE)
        for index, name in ((3, "timestamp"), *enumerate(_UINT_FIELDS, start=5)):
            _want(item, index, int, name)
            high = _UINT_LIMITS.get(name, (1 << 64) - 1)
            if not 0 <= item[index] <= high:
                raise HirmemError(f"record {name} must be in 0..{high}, got {item[index]}")
        _want(item, 18, bytes, "hash", HASH_SIZE)
        _want(item, 19, bytes, "prev_hash", HASH_SIZE)
        return cls(*item)

    def check(self, prev_hash: bytes) -> None:
        """Verify the chain link, the hash and the gate scores; raise on any mismatch."""
        if self.prev_hash != prev_hash:
            raise HirmemError(
                f"record {self.id.hex()} links to {self.prev_hash.hex()[:16]}…, "
                f"expected {prev_hash.hex()[:16]}…"
            )
        want = record_hash(
            self.id, self.payload, self.source, self.timestamp, self.context, self.prev_hash
        )
        if want != self.hash:
            raise HirmemError(f"record {self.id.hex()} hash does not match its content")
        normal = normalise(self.flags, self.payload, self.source, self.timestamp, self.context)
        if normal != self.flags:
            raise HirmemError(
                f"record {self.id.hex()} carries flags 0x{self.flags:03x}, normalising its "
                f"fields gives 0x{normal:03x} (schema_valid / source_present)"
            )
        g = evaluate(self.flags, self.confidence, self.provenance)
        got = (self.h, self.i, self.r, self.f, self.c, self.rn, self.w)
        if got != (g.h, g.i, g.r, g.f, g.c, g.rn, g.w):
            raise HirmemError(
                f"record {self.id.hex()} carries gate scores {got}, the gate gives "
                f"{(g.h, g.i, g.r, g.f, g.c, g.rn, g.w)}"
            )
        if (self.state, self.layer) != (int(g.disposition), int(Layer.EPISODIC)):
            raise HirmemError(
                f"record {self.id.hex()} has state {self.state} / layer {self.layer}; a device "
                f"record is episodic ({int(Layer.EPISODIC)}) in the state its gate gives "
                f"({int(g.disposition)})"
            )


# ---- the pack verifier's fast path ---------------------------------------------------------
# A pack's records arrive as cbor2's lists. :func:`wire_read` says in one pass, without
# building a Record or raising, whether ``Record.from_wire(item)`` would succeed, what the
# item's deterministic CBOR encoding is (the verifier compares it with the bytes it came
# from), and whether its ``check(link)`` would pass with the id the signer's. It is
# exactly as strict as the methods it stands for: it vouches only where they accept.
# "Not vouched for" sends the verifier to the methods themselves, which raise with the
# reason (or accept what the fast path was too cautious to vouch for).

_WIRE_TYPES = (bytes, bytes, str, int, bytes, *(int,) * 13, bytes, bytes)
_U64 = 1 << 64
_SCHEMA_SOURCE = int(Check.SCHEMA_VALID | Check.SOURCE_PRESENT)
_SCHEMA_VALID = int(Check.SCHEMA_VALID)
_SOURCE_PRESENT = int(Check.SOURCE_PRESENT)
_EPISODIC = int(Layer.EPISODIC)
_SCORE_MAX = 0x10000


def _heads(make: Any, sizes: int) -> tuple[bytes, ...]:
    """The CBOR heads of strings of 0..``sizes`` bytes (``make(n)`` is one)."""
    return tuple(cbor.encode(make(n))[: len(cbor.encode(make(n))) - n] for n in range(sizes + 1))


_BYTES_HEADS = _heads(bytes, MAX_PAYLOAD)
_TEXT_HEADS = _heads(lambda n: "a" * n, MAX_SOURCE)
_ID_HEAD = cbor.encode(bytes(RECORD_ID_SIZE))[:1]
_HASH_HEAD = cbor.encode(bytes(HASH_SIZE))[:2]
_RECORD_HEAD = cbor.head(4, 20)
_PREIMAGE_HEAD = cbor.head(4, 6)
_U64_HEAD = cbor.head(0, 1 << 32)[:1]  # an unsigned integer of 8 bytes

# The thirteen integers of a record (flags … layer) as a key: their encoding and whether
# the gate gives exactly those scores, state and layer for its flags, Q and P. A device's
# records repeat a few such rows; bounded (cleared when full, so an adversary's many
# distinct rows only cost their computation).
_INTS_KEPT = 4096
_INTS: dict[tuple[int, ...], tuple[bytes, bool]] = {}


def _ints_row(key: tuple[int, ...]) -> tuple[bytes, bool] | None:
    """The encoding of ``key`` (flags, h, i, r, f, c, rn, confidence, provenance,
    priority, w, state, layer) and whether the gate agrees with it; None when a value
    is out of the range :meth:`Record.from_wire` allows."""
    flags, h, i, r, f, c, rn, q, p, priority, w, state, layer = key
    scores = (h, i, r, f, c, rn, q, p, priority, w)
    if not (0 <= flags <= _UINT_LIMITS["flags"] and min(scores) >= 0
            and max(scores) <= _SCORE_MAX and 0 <= state <= _UINT_LIMITS["state"]
            and 0 <= layer <= _UINT_LIMITS["layer"]):  # fmt: skip
        return None
    try:
        g = evaluate(flags, q, p)
        agrees = (h, i, r, f, c, rn, w, state, layer) == (
            g.h, g.i, g.r, g.f, g.c, g.rn, g.w, int(g.disposition), _EPISODIC)
    except HirmemError:  # the gate refuses its inputs; check() says so
        agrees = False
    row = (b"".join([cbor.head(0, v) for v in key]), agrees)
    if len(_INTS) >= _INTS_KEPT:
        _INTS.clear()
    _INTS[key] = row
    return row


def wire_read(item: object, signer: bytes | None, link: bytes) -> tuple[bytes, bool] | None:
    """None when :meth:`Record.from_wire` refuses ``item`` (types, sizes, ranges); else
    the item's deterministic CBOR encoding and whether it is sound: its id starts with
    ``signer`` and ``Record.from_wire(item).check(link)`` passes (link, hash, normalised
    flags, gate scores, state and layer). ``signer`` None: soundness is not asked (False).

    The encoding is written from the values the types were checked for, so it equals
    ``cbor.encode(item)`` for every item this does not refuse; the record's hash
    preimage shares its middle (id … context) with it."""
    if type(item) is not list or len(item) != 20 or tuple(map(type, item)) != _WIRE_TYPES:
        return None
    (rid, payload, source, ts, context, flags, h, i, r, f, c, rn, q, p, priority, w,
     state, layer, digest, prev) = item  # fmt: skip
    key = (flags, h, i, r, f, c, rn, q, p, priority, w, state, layer)
    ints = _INTS.get(key) or _ints_row(key)
    if ints is None or not (
        len(rid) == RECORD_ID_SIZE and len(payload) <= MAX_PAYLOAD
        and len(context) == HASH_SIZE and len(digest) == HASH_SIZE
        and len(prev) == HASH_SIZE and 0 <= ts < _U64
    ):  # fmt: skip
        return None
    text = source.encode()
    if len(text) > MAX_SOURCE:
        return None
    stamp = _U64_HEAD + ts.to_bytes(8, "big") if ts >> 32 else cbor.head(0, ts)
    middle = b"".join((_ID_HEAD, rid, _BYTES_HEADS[len(payload)], payload,
                       _TEXT_HEADS[len(text)], text, stamp, _HASH_HEAD, context))
    encoding = b"".join((_RECORD_HEAD, middle, ints[0], _HASH_HEAD, digest, _HASH_HEAD, prev))
    if signer is None or not ints[1] or prev != link or rid[: len(signer)] != signer:
        return encoding, False
    # normalise(): context and source sizes hold for a shaped record, the payload's too
    schema = _SCHEMA_VALID if payload and ts > 0 else 0
    if (flags & ~_SCHEMA_SOURCE) | schema | (_SOURCE_PRESENT if source else 0) != flags:
        return encoding, False
    preimage = b"".join((_PREIMAGE_HEAD, middle, _HASH_HEAD, prev))  # record_hash's
    return encoding, hashlib.sha256(preimage).digest() == digest


def wire_shaped(item: object) -> bool:
    """Whether :meth:`Record.from_wire` accepts ``item`` (types, sizes, ranges)."""
    return wire_read(item, None, GENESIS) is not None


def wire_sound(item: list[Any], signer: bytes, link: bytes) -> bool:
    """For an ``item`` that is :func:`wire_shaped`: whether its id starts with
    ``signer`` and ``Record.from_wire(item).check(link)`` passes (link, hash, normalised
    flags, gate scores, state and layer)."""
    read = wire_read(item, signer, link)
    return read is not None and read[1]


# Records of shaped items, made through a twin class with Record's slots that is not
# frozen: a frozen dataclass sets each of its 20 fields through object.__setattr__ (about
# 1.4 µs a record), the twin's plain attribute stores take a fifth of that; the object
# then becomes a Record (__class__ assignment: the layouts are the same slots).
_RecordTwin: Any = make_dataclass(
    "_RecordTwin", [(f.name, f.type) for f in fields(Record)], slots=True, eq=False,
    repr=False, match_args=False,
)  # fmt: skip


def shaped_records(items: list[list[Any]]) -> tuple[Record, ...]:
    """``tuple(Record(*item) for item in items)`` for items :func:`wire_read` vouched
    for (nothing is checked here)."""
    out = []
    for item in items:
        made = _RecordTwin(*item)
        made.__class__ = Record
        out.append(made)
    return tuple(out)


_UINT_FIELDS = (
    "flags",
    "h",
    "i",
    "r",
    "f",
    "c",
    "rn",
    "confidence",
    "provenance",
    "priority",
    "w",
    "state",
    "layer",
)


# the ACTION_FLAGS bits the host always evaluates itself from what it holds, whatever the
# device said; bit 7 (structure) when the payload declares a schema, bit 4 (baseline)
# when the memory engine holds a distilled baseline for the reading (see host_flags)
HOST_EVALUATED = int(Check.UNCERTAINTY_DISCLOSED | Check.SIGNATURE_INTACT)
_SIGNATURE_INTACT = int(Check.SIGNATURE_INTACT)
_UNCERTAINTY_DISCLOSED = int(Check.UNCERTAINTY_DISCLOSED)
_STRUCTURALLY_CONSISTENT = int(Check.STRUCTURALLY_CONSISTENT)
_BASELINE_ALIGNED = int(Check.BASELINE_ALIGNED)
_FORM_FIELDS = ("subject", "attribute", "value")


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("a key appears twice")
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


# one decoder for every payload: ``json.loads`` with hooks builds a new one per call
_STRICT_JSON = json.JSONDecoder(object_pairs_hook=_unique_pairs, parse_constant=_no_constant)


def structurally_consistent(payload: bytes) -> bool | None:
    """Bit 7 as the host finds it from the payload's own schema, or None when the
    payload declares none (it does not open as JSON: the device's word stands).

    A payload that opens as JSON (``{`` or ``[``) is consistent when it is UTF-8 JSON
    that parses whole, with no key twice in an object and no NaN or Infinity, and when
    an object that uses the fields of a structured form uses them whole: ``subject``,
    ``attribute`` and ``value`` all present as scalars if any is; ``action`` (a step or
    a list of steps) with an ``outcome`` string if either is present."""
    return read_payload(payload)[0]


def read_payload(payload: bytes) -> tuple[bool | None, dict[str, Any] | None]:
    """The payload's JSON read once for both of its readers: bit 7 as
    :func:`structurally_consistent` finds it, and the JSON object ``json.loads`` gives
    (None when the payload is not one), which the memory engine reads the form of a
    memory from. One strict parse serves both; only a payload it refuses (a key twice,
    NaN) that still parses plainly is parsed a second time."""
    head = payload.lstrip()[:1]
    if head not in (b"{", b"["):  # JSON whitespace is among what lstrip strips: no object
        return None, None
    try:
        data = _STRICT_JSON.decode(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return False, _plain_object(payload)
    if not isinstance(data, dict):
        return True, None
    if ("subject" in data or "attribute" in data or "value" in data) and not all(
        isinstance(v, (str, int, float)) and not isinstance(v, bool)
        for v in [data.get(k) for k in _FORM_FIELDS]
    ):
        return False, data
    if "action" in data or "outcome" in data:
        steps = data.get("action")
        steps = [steps] if isinstance(steps, str) else steps
        if not (isinstance(steps, list) and steps and all(isinstance(x, str) for x in steps)
                and isinstance(data.get("outcome"), str)):  # fmt: skip
            return False, data
    return True, data


def _plain_object(payload: bytes) -> dict[str, Any] | None:
    try:
        data = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def host_flags(
    rec: Record, signature_verified: bool, baseline_aligned: bool | None = None,
    intact: bool | None = None, structure: bool | EllipsisType | None = ...,
) -> tuple[int, str]:  # fmt: skip
    """The record's flags with the sub-checks the host can evaluate as the host finds
    them, and what the device asserted differently ("" when it agrees).

    Always bits 0 (the confidence field is a probability) and 1 (the pack signature
    the host verified, ``signature_verified``, and the record's hash); bit 7 from the
    payload's schema when it declares one (:func:`structurally_consistent`); bit 4
    when the caller holds a baseline for the record (``baseline_aligned``: the memory
    engine, from the distilled pattern of the reading's sensor). ``intact``: whether the
    record's hash matches its content, when the caller has just checked it;
    ``structure``: bit 7 as :func:`read_payload` found it, when the caller read the
    payload already."""
    found = 0
    evaluated = HOST_EVALUATED
    if intact is None:
        intact = record_hash(
            rec.id, rec.payload, rec.source, rec.timestamp, rec.context, rec.prev_hash
        ) == rec.hash  # fmt: skip
    if signature_verified and intact:
        found |= _SIGNATURE_INTACT
    if 0 <= rec.confidence <= 0x10000:  # a probability in Q16.16
        found |= _UNCERTAINTY_DISCLOSED
    if structure is ...:
        structure = structurally_consistent(rec.payload)
    if structure is not None:
        evaluated |= _STRUCTURALLY_CONSISTENT
        found |= _STRUCTURALLY_CONSISTENT if structure else 0
    if baseline_aligned is not None:
        evaluated |= _BASELINE_ALIGNED
        found |= _BASELINE_ALIGNED if baseline_aligned else 0
    flags = (rec.flags & ~evaluated) | found
    differ = (rec.flags ^ flags) & evaluated
    if not differ:  # the device asserted what the host found (the usual case)
        return flags, ""
    named = [c.name.lower() for c in Check if differ & c and c.name]
    said = ", ".join(f"{n} {'passed' if flags & Check[n.upper()] else 'failed'}" for n in named)
    return flags, (f"host evaluated {said}; the device asserted otherwise" if named else "")


def withheld(rec: Record, signature_verified: bool = True) -> str:
    """Why ``rec`` may reach no recall, graph or answer — "" when it may.

    The one guard across the system (MEM-INV-6, issue 13), evaluated on the record
    itself so every layer can apply it without the memory engine: a record the device
    quarantined, whose hash or normalised flags do not match its content, or whose
    gate — recomputed here from its flags, Q and P, not taken from the device —
    hard-fails, is RED, has W = 0 or Trust = H·I·R = 0, or whose carried scores differ
    from the recomputation. These are the reasons the memory engine quarantines a device
    record on intake, so what the engine keeps out of recall the semantic substrate
    keeps out of its graph. The gate runs on the flags as the host finds them
    (:func:`host_flags`: the pack signature it verified, ``signature_verified``, and the
    confidence field decide bits 0 and 1), exactly as the engine gates the record; the
    device's own scores are checked against its own flags.
    """
    if record_hash(rec.id, rec.payload, rec.source, rec.timestamp, rec.context,
                   rec.prev_hash) != rec.hash:  # fmt: skip
        return "hash does not match the record content"
    if normalise(rec.flags, rec.payload, rec.source, rec.timestamp, rec.context) != rec.flags:
        return "flags are not normalised (schema_valid / source_present)"
    try:
        own = evaluate(rec.flags, rec.confidence, rec.provenance)
        g = evaluate(host_flags(rec, signature_verified)[0], rec.confidence, rec.provenance)
    except HirmemError as exc:
        return f"gate inputs refused: {exc}"
    if g.hard:
        return "hard fail: " + ", ".join(
            h.name.lower() for h in type(g.hard) if h & g.hard and h.name is not None
        )
    if int(g.disposition) == int(State.QUARANTINED):
        return "gate RED: Rn below yellow"
    if g.w == 0:
        return "write gate W = 0"
    if g.h == 0 or g.i == 0 or g.r == 0:
        return "Trust = H·I·R = 0"
    if (rec.h, rec.i, rec.r, rec.f, rec.c, rec.rn, rec.w) != (
        own.h, own.i, own.r, own.f, own.c, own.rn, own.w
    ):
        return "device gate scores differ from the recomputed gate"
    return ""


_UINT_LIMITS = {
    "flags": 0x0FFF, "state": max(State), "layer": max(Layer),
    **{name: 0x10000 for name in ("h", "i", "r", "f", "c", "rn", "confidence", "provenance",
                                  "priority", "w")},
}  # fmt: skip


def _want(item: list[Any], index: int, kind: type, name: str, size: int | None = None) -> None:
    value: Any = item[index]
    if type(value) is not kind:
        raise HirmemError(f"record {name} must be {kind.__name__}, got {type(value).__name__}")
    if size is not None and len(item[index]) != size:
        raise HirmemError(f"record {name} must be {size} bytes, got {len(item[index])}")
