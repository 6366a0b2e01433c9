"""Link messages: the frame bodies of ``protocol/SPEC.md`` §4 and §5.

Every message is a CBOR array with fixed positions:

    [version, type, seq, ack, field...]

``seq`` numbers the sender's reliable messages from 1 (0 on the unsequenced
types ACK, LOG and ERROR); ``ack`` is the highest sequence received in order
from the peer. The fields of each type, in order, are declared once here in
``FIELDS`` and nowhere else in the host.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import IntEnum
from typing import Any, ClassVar

from hirmem.protocol import cbor
from hirmem.protocol.errors import CborError, MessageError
from hirmem.protocol.gate import Hard, Verdict
from hirmem.protocol.packs import Reason
from hirmem.protocol.records import State

VERSION = 1
U32 = (1 << 32) - 1
U64 = (1 << 64) - 1
Q_ONE = 0x10000


class MsgType(IntEnum):
    HELLO = 1
    HELLO_ACK = 2
    CAPTURE = 3
    CAPTURE_RESULT = 4
    PACK_OFFER = 5
    PACK_RESULT = 6
    KNOWLEDGE_PUSH = 7
    KNOWLEDGE_RESULT = 8
    STATUS_REQUEST = 9
    STATUS = 10
    LOG = 11
    ERROR = 12
    ACK = 13
    FRAGMENT = 14  # retired (SPEC §5.14): no message class, decoded as an unknown type
    PROOF = 15


UNSEQUENCED = frozenset({MsgType.ACK, MsgType.LOG, MsgType.ERROR})


class ErrorCode(IntEnum):
    UNKNOWN_VERSION = 1
    UNKNOWN_TYPE = 2
    MALFORMED = 3
    TOO_LARGE = 4
    NO_SESSION = 5
    REASSEMBLY = 6
    BUSY = 7
    INTERNAL = 8


class Capability(IntEnum):
    CAPTURE = 1 << 0  # accepts host-injected captures
    KNOWLEDGE = 1 << 1  # verifies and keeps knowledge packs
    SENSOR = 1 << 2  # has a sensor producing captures of its own
    FRAGMENTS = 1 << 3  # joins bodies sent in frame pieces (§6.8)
    STATUS = 1 << 4  # answers STATUS_REQUEST


class CaptureStatus(IntEnum):
    STORED = 0
    REFUSED_FULL = 1  # backpressure: the ring holds nothing evictable
    REFUSED_INVALID = 2  # the capture itself was unusable (reserved flag bits, sizes)


class PackStatus(IntEnum):
    ACCEPTED = 0
    DUPLICATE = 1  # already held: acknowledged again, stored once
    REFUSED = 2  # see the reason code
    DEFERRED = 3  # the receiver could not store it now; offer it again later


class LogLevel(IntEnum):
    DEBUG = 0
    INFO = 1
    WARN = 2
    ERROR = 3


# Field kinds, named once and bounded as protocol/hirmem.cddl bounds them.
# Unsigned integers (inclusive range in _INT_MIN/_INT_LIMITS):
UINT, UINT32, UINT16, Q = "uint", "uint32", "uint16", "q"
CAPTURE_STATUS, VERDICT, HARD, STATE = "capture_status", "verdict", "hard", "state"
PACK_STATUS, REASON, LOG_LEVEL, ERROR_CODE = "pack_status", "reason", "log_level", "error_code"
# Byte strings: ``bstrN`` has exactly N bytes (or one of _BSTR_SIZES), others a maximum.
BSTR, PAYLOAD = "bstr", "payload"
BSTR8, BSTR16, BSTR32, BSTR64 = "bstr8", "bstr16", "bstr32", "bstr64"
BSTR0_8, BSTR0_16 = "bstr0_8", "bstr0_16"
TSTR = "tstr"

MAX_TEXT = 240
MAX_PAYLOAD = 256
_INT_LIMITS = {
    UINT: U64, UINT32: U32, UINT16: 0xFFFF, Q: Q_ONE,
    CAPTURE_STATUS: max(CaptureStatus), VERDICT: max(Verdict), HARD: int(Hard(15)),
    STATE: max(State), PACK_STATUS: max(PackStatus), REASON: max(Reason),
    LOG_LEVEL: max(LogLevel), ERROR_CODE: max(ErrorCode),
}  # fmt: skip
_INT_MIN = {ERROR_CODE: min(ErrorCode)}
_BSTR_SIZES = {
    BSTR8: (8,), BSTR16: (16,), BSTR32: (32,), BSTR64: (64,), BSTR0_8: (0, 8), BSTR0_16: (0, 16)
}  # fmt: skip
_BSTR_MAX = {PAYLOAD: MAX_PAYLOAD}
_BYTES_KINDS = frozenset({BSTR, PAYLOAD, *_BSTR_SIZES})


class Message:
    """Base of all message classes (dataclasses listing their fields in wire order)."""

    TYPE: ClassVar[MsgType]
    FIELDS: ClassVar[tuple[str, ...]]  # one kind per dataclass field, same order


@dataclass(frozen=True, slots=True)
class Hello(Message):
    TYPE = MsgType.HELLO
    FIELDS = (BSTR8, TSTR, TSTR, UINT32, UINT, UINT16, UINT32, UINT16, BSTR8, BSTR0_8, UINT16,
              UINT16)  # fmt: skip
    device_id: bytes
    board: str
    firmware: str
    boot: int
    capabilities: int
    max_frame: int
    max_message: int
    window: int
    device_kid: bytes
    host_kid: bytes  # the host key this device trusts; empty when it holds none
    knowledge_facts: int = 0  # most facts it keeps from one knowledge pack; 0: not stated
    knowledge_text: int = 0  # longest subject, predicate or object it keeps, in bytes


@dataclass(frozen=True, slots=True)
class HelloAck(Message):
    TYPE = MsgType.HELLO_ACK
    FIELDS = (BSTR8, UINT16, UINT32, UINT16, UINT, UINT, BSTR32, BSTR16, BSTR16)
    host_id: bytes
    max_frame: int
    max_message: int
    window: int
    time_ms: int
    pack_seq: int  # the device's chain head as the host holds it (0: none yet)
    pack_hash: bytes
    challenge: bytes  # fresh random per session: what the device's PROOF signs (§6.5)
    hello_hash: bytes  # the HELLO it answers: proof.hello_echo(HELLO body) (§5.3)


@dataclass(frozen=True, slots=True)
class Capture(Message):
    TYPE = MsgType.CAPTURE
    FIELDS = (TSTR, PAYLOAD, BSTR32, UINT16, Q, Q, Q)
    source: str
    payload: bytes
    context: bytes
    flags: int
    confidence: int
    provenance: int
    priority: int


@dataclass(frozen=True, slots=True)
class CaptureResult(Message):
    TYPE = MsgType.CAPTURE_RESULT
    FIELDS = (UINT32, CAPTURE_STATUS, BSTR0_16, UINT16, Q, Q, Q, Q, Q, Q, Q, VERDICT, HARD, STATE)
    ref: int  # seq of the CAPTURE it answers; 0 for the device's own sensor
    status: int
    record_id: bytes  # 16 bytes, empty when refused
    flags: int
    h: int
    i: int
    r: int
    f: int
    c: int
    rn: int
    w: int
    verdict: int
    hard: int
    state: int


@dataclass(frozen=True, slots=True)
class PackOffer(Message):
    TYPE = MsgType.PACK_OFFER
    FIELDS = (BSTR,)
    pack: bytes


@dataclass(frozen=True, slots=True)
class PackResult(Message):
    TYPE = MsgType.PACK_RESULT
    FIELDS = (UINT32, PACK_STATUS, REASON)
    back: int  # the PACK_OFFER answered is the one of seq (this message's ack) - back
    status: int
    reason: int


@dataclass(frozen=True, slots=True)
class KnowledgePush(Message):
    TYPE = MsgType.KNOWLEDGE_PUSH
    FIELDS = (BSTR,)
    pack: bytes


@dataclass(frozen=True, slots=True)
class KnowledgeResult(Message):
    TYPE = MsgType.KNOWLEDGE_RESULT
    FIELDS = (BSTR16, PACK_STATUS, REASON, UINT)
    pack_id: bytes
    status: int
    reason: int
    held_seq: int


@dataclass(frozen=True, slots=True)
class StatusRequest(Message):
    TYPE = MsgType.STATUS_REQUEST
    FIELDS = ()


@dataclass(frozen=True, slots=True)
class Status(Message):
    TYPE = MsgType.STATUS
    FIELDS = (UINT,) * 14
    uptime_ms: int
    ring_used: int
    ring_capacity: int
    captures: int
    evictions: int
    refusals: int
    quarantined: int
    candidates: int
    packs_sent: int
    packs_acked: int
    frames_good: int
    frames_bad: int
    retransmits: int
    knowledge_seq: int


@dataclass(frozen=True, slots=True)
class Log(Message):
    TYPE = MsgType.LOG
    FIELDS = (LOG_LEVEL, TSTR)
    level: int
    text: str


@dataclass(frozen=True, slots=True)
class Error(Message):
    TYPE = MsgType.ERROR
    FIELDS = (ERROR_CODE, UINT32, TSTR)
    code: int
    ref: int  # seq of the offending message, 0 when unknown
    detail: str


@dataclass(frozen=True, slots=True)
class Ack(Message):
    TYPE = MsgType.ACK
    FIELDS = ()


@dataclass(frozen=True, slots=True)
class Proof(Message):
    """The device's first sequenced message of a session: it holds its key (§5.15)."""

    TYPE = MsgType.PROOF
    FIELDS = (BSTR64,)
    signature: bytes  # Ed25519 over protocol.proof.proof_input(...)


CLASSES: dict[int, type[Message]] = {
    int(cls.TYPE): cls
    for cls in (
        Hello,
        HelloAck,
        Capture,
        CaptureResult,
        PackOffer,
        PackResult,
        KnowledgePush,
        KnowledgeResult,
        StatusRequest,
        Status,
        Log,
        Error,
        Ack,
        Proof,
    )
}


@dataclass(frozen=True, slots=True)
class Envelope:
    seq: int
    ack: int
    message: Message


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _check_field(cls: type[Message], name: str, kind: str, value: object) -> None:
    where = f"{cls.__name__}.{name}"
    if kind in _INT_LIMITS:
        low, high = _INT_MIN.get(kind, 0), _INT_LIMITS[kind]
        if type(value) is not int or not low <= value <= high:
            raise MessageError(
                ErrorCode.MALFORMED, f"{where} must be an integer in {low}..{high}, got {value!r}"
            )
    elif kind == TSTR:
        if type(value) is not str or len(value.encode("utf-8", "replace")) > MAX_TEXT:
            raise MessageError(ErrorCode.MALFORMED, f"{where} must be text of ≤ {MAX_TEXT} bytes")
        if not value.isascii() and _has_surrogate(value):
            raise MessageError(ErrorCode.MALFORMED, f"{where} is not encodable as UTF-8")
    else:
        if type(value) is not bytes:
            raise MessageError(
                ErrorCode.MALFORMED, f"{where} must be a byte string, got {type(value).__name__}"
            )
        sizes = _BSTR_SIZES.get(kind)
        if sizes is not None and len(value) not in sizes:
            raise MessageError(
                ErrorCode.MALFORMED,
                f"{where} must be {' or '.join(map(str, sizes))} bytes, got {len(value)}",
            )
        if kind in _BSTR_MAX and len(value) > _BSTR_MAX[kind]:
            raise MessageError(
                ErrorCode.MALFORMED, f"{where} is {len(value)} bytes, limit {_BSTR_MAX[kind]}"
            )


_FIELD_NAMES: dict[type[Message], tuple[str, ...]] = {
    cls: tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
    for cls in CLASSES.values()
}


def _names(cls: type[Message]) -> tuple[str, ...]:
    return _FIELD_NAMES[cls]


def encode_message(message: Message, seq: int = 0, ack: int = 0, *, inner: bool = False) -> bytes:
    """Encode a message body; checks every field so bad bodies never reach the wire.

    ``inner`` encodes a message without its sequencing (seq 0, ack 0), as the
    retired FRAGMENT carried it; the daemon sizes a knowledge push by it.
    """
    cls = type(message)
    if inner:
        if seq != 0 or ack != 0:
            raise MessageError(ErrorCode.MALFORMED, "an inner message has seq 0, ack 0")
    elif (message.TYPE in UNSEQUENCED) != (seq == 0):
        want = "0" if message.TYPE in UNSEQUENCED else "≥ 1"
        raise MessageError(ErrorCode.MALFORMED, f"{cls.__name__} must have seq {want}, got {seq}")
    for name, value in (("seq", seq), ("ack", ack)):
        if type(value) is not int or not 0 <= value <= U32:
            raise MessageError(ErrorCode.MALFORMED, f"{name} must be in 0..{U32}, got {value!r}")
    names = _names(cls)
    # IntEnum members (ErrorCode, Reason, PackStatus, …) go on the wire as plain ints
    values = [_plain(getattr(message, name)) for name in names]
    for name, kind, field_value in zip(names, cls.FIELDS, values, strict=True):
        _check_field(cls, name, kind, field_value)
    return cbor.encode([VERSION, int(message.TYPE), seq, ack, *values])


def _plain(value: object) -> object:
    if isinstance(value, int) and type(value) is not int and not isinstance(value, bool):
        return int(value)
    return value


def peek_header(body: bytes) -> tuple[int, int, int] | None:
    """(version, type, seq) of a body if its header can be read at all, for error replies."""
    try:
        item = cbor.decode(body)
    except CborError:
        return None
    if isinstance(item, list) and len(item) >= 3 and all(type(x) is int for x in item[:3]):
        return item[0], item[1], item[2]
    return None


def decode_message(body: bytes, *, inner: bool = False) -> Envelope:
    """Decode and check a frame body; raise MessageError (with its wire ErrorCode).

    ``inner`` decodes a message without its sequencing: its seq and ack are 0
    (SPEC §4.3 step 6, as the retired FRAGMENT carried it). Type 14 (FRAGMENT, retired)
    has no class: it is an unknown type (§5.14).
    """
    try:
        item = cbor.decode(body)
    except CborError as exc:
        raise MessageError(ErrorCode.MALFORMED, f"body is not deterministic CBOR: {exc}") from None
    if not isinstance(item, list) or len(item) < 4:
        raise MessageError(ErrorCode.MALFORMED, "a message is [version, type, seq, ack, ...]")
    version, mtype, seq, ack = item[:4]
    if type(version) is not int or version != VERSION:
        raise MessageError(
            ErrorCode.UNKNOWN_VERSION, f"protocol version {version!r}; this peer speaks {VERSION}"
        )
    cls = CLASSES.get(mtype) if type(mtype) is int else None
    if cls is None:
        raise MessageError(ErrorCode.UNKNOWN_TYPE, f"unknown message type {mtype!r}")
    for name, value in (("seq", seq), ("ack", ack)):
        if type(value) is not int or not 0 <= value <= U32:
            raise MessageError(ErrorCode.MALFORMED, f"{name} must be in 0..{U32}, got {value!r}")
    if inner:
        if seq != 0 or ack != 0:
            raise MessageError(ErrorCode.REASSEMBLY, "an inner message has seq 0, ack 0")
    elif (cls.TYPE in UNSEQUENCED) != (seq == 0):
        want = "0" if cls.TYPE in UNSEQUENCED else "≥ 1"
        raise MessageError(ErrorCode.MALFORMED, f"{cls.__name__} must have seq {want}, got {seq}")
    values = item[4:]
    if len(values) != len(cls.FIELDS):
        raise MessageError(
            ErrorCode.MALFORMED,
            f"{cls.__name__} has {len(cls.FIELDS)} fields after the header, got {len(values)}",
        )
    for name, kind, value in zip(_names(cls), cls.FIELDS, values, strict=True):
        _check_field(cls, name, kind, value)
    message: Message = cls(*values)
    return Envelope(seq, ack, message)


def to_json(message: Message) -> dict[str, Any]:
    """A JSON-friendly view (bytes as hex) for vectors and logs."""
    out: dict[str, Any] = {"type": message.TYPE.name}
    for name in _names(type(message)):
        value = getattr(message, name)
        out[name] = value.hex() if isinstance(value, bytes) else value
    return out


def from_json(data: dict[str, Any]) -> Message:
    cls = CLASSES[int(MsgType[data["type"]])]
    args = []
    for name, kind in zip(_names(cls), cls.FIELDS, strict=True):
        value = data[name]
        args.append(bytes.fromhex(value) if kind in _BYTES_KINDS else value)
    return cls(*args)
