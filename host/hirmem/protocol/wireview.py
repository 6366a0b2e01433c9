"""A device's byte stream as readable lines: what ``pio device monitor`` shows.

:class:`WireView` takes the bytes a board sends, in chunks of any size, and
returns text: one line per frame, and every byte that is not part of a frame
passed through (printable ASCII as is, anything else as ``\\xNN``).

- A frame line names the message type by its number (``MsgType``; a number this
  host does not know shows as ``type N``), its seq and ack, and its fields in
  wire order: enumerations by name, Q16.16 scores as decimals, byte strings as
  hex (long ones cut). A body that this host cannot decode as a known message
  (a type added later, a new field) is still shown, field by field, with the
  reason.
- A frame that is damaged (bad COBS or CRC) shows as a ``!!`` line with its kind;
  it is counted in :attr:`WireView.damaged`, never skipped silently.
- Frame pieces (SPEC §6.8) show as ``PIECE`` lines and are joined; the whole
  message follows the last piece on a ``=`` line. A sequenced message seen again
  (the device retransmits when nobody acknowledges) is marked ``(again)``.

Telling frames from text: a frame starts with its COBS code byte (not 0x01: the
body never starts with 0x00) followed by the first body byte, and every body is
a CBOR array (a first byte in 0x80..0x9f) or a piece (0xe0..0xf0). A byte that
cannot start a frame is passed through as soon as the byte after it shows so (ASCII
text is never held longer than one byte), and a frame may start right after it. What could be a
frame is held up to the next 0x00 (the delimiter, not shown), then decoded or
reported damaged. A frame line after text without a newline starts on a line of
its own. A frame that follows text with no 0x00 between them is found unless the
last text byte happens to look like a code byte before a CBOR array head; the
host's own decoder loses such a frame in any case.
"""

from __future__ import annotations

import string
from enum import IntEnum, IntFlag

from hirmem.protocol import cbor, pieces
from hirmem.protocol.errors import CborError, FrameError, MessageError
from hirmem.protocol.frames import decode_frame, max_wire_size
from hirmem.protocol.gate import Hard, Verdict
from hirmem.protocol.messages import (
    CAPTURE_STATUS,
    ERROR_CODE,
    HARD,
    LOG_LEVEL,
    PACK_STATUS,
    Q_ONE,
    REASON,
    STATE,
    UNSEQUENCED,
    VERDICT,
    CaptureStatus,
    ErrorCode,
    Hello,
    LogLevel,
    Message,
    MsgType,
    PackStatus,
    Q,
    decode_message,
)
from hirmem.protocol.packs import Reason
from hirmem.protocol.records import State

# A monitor reads whatever the device sends, before any negotiation: the largest
# frame it accepts is generous (a device offers at most 4096 in HELLO) and bounded.
MONITOR_MAX_FRAME = 4096
REASSEMBLY_LIMIT = 65536
SHOWN_BYTES = 16  # byte strings longer than this are cut in the line
BIT_FIELDS = frozenset({"flags", "capabilities"})  # shown in hex
_ENUMS: dict[str, type[IntEnum] | type[IntFlag]] = {
    CAPTURE_STATUS: CaptureStatus,
    VERDICT: Verdict,
    HARD: Hard,
    STATE: State,
    PACK_STATUS: PackStatus,
    REASON: Reason,
    LOG_LEVEL: LogLevel,
    ERROR_CODE: ErrorCode,
}
_PRINTABLE = frozenset((string.printable.replace("\x0b", "").replace("\x0c", "")).encode())


def type_name(number: object) -> str:
    """``CAPTURE_RESULT`` for 4; ``type 99`` for a number this host does not know."""
    if type(number) is int:
        try:
            return MsgType(number).name
        except ValueError:
            pass
    return f"type {number!r}"


def show_bytes(value: bytes) -> str:
    if len(value) <= SHOWN_BYTES:
        return value.hex() or "''"
    return f"{value[:8].hex()}…({len(value)} bytes)"


def show_value(value: object, kind: str | None = None) -> str:
    """One field: by its kind when known (enums by name, Q16.16 as a decimal)."""
    if isinstance(value, bytes):
        return show_bytes(value)
    if type(value) is int and kind is not None:
        if kind == Q:
            return f"{value / Q_ONE:.4f}"
        enum = _ENUMS.get(kind)
        if enum is not None:
            if issubclass(enum, IntFlag):
                return "|".join(f.name or "" for f in enum(value)) if value else "0"
            try:
                return enum(value).name
            except ValueError:
                return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(show_value(v) for v in value) + "]"
    return repr(value)


def describe_message(message: Message) -> str:
    """The fields of a decoded message, ``name=value`` in wire order."""
    names = type(message).__dataclass_fields__  # type: ignore[attr-defined]
    parts = [
        f"{name}=0x{value:04x}" if name in BIT_FIELDS and type(value) is int
        else f"{name}={show_value(value, kind)}"
        for name, kind, value in (
            (name, kind, getattr(message, name))
            for name, kind in zip(names, message.FIELDS, strict=True)
        )
    ]  # fmt: skip
    return " ".join(parts)


def describe_body(body: bytes) -> tuple[str, Message | None, int]:
    """(line, decoded message or None, seq) for one frame body."""
    try:
        item = cbor.decode(body)
    except CborError as exc:
        return f"?? {len(body)}-byte frame, not CBOR: {exc}", None, 0
    if not isinstance(item, list) or len(item) < 4:
        return f"?? {len(body)}-byte frame, not a message: {show_value(item)}", None, 0
    version, number, seq, ack = item[:4]
    head = f"{type_name(number)} seq={seq!r} ack={ack!r}"
    if version != 1:
        head += f" version={version!r}"
    try:
        envelope = decode_message(body)
    except MessageError as exc:
        raw = [show_value(v) for v in item[4:]]
        return " ".join([head, *raw, f"({exc})"]), None, 0
    fields = describe_message(envelope.message)
    return (f"{head} {fields}" if fields else head), envelope.message, envelope.seq


def _body_start(byte: int) -> bool:
    """Whether a frame body can start with this byte: a CBOR array head, or a piece's
    head (e0..f0; f1..ff are no head)."""
    return 0x80 <= byte <= 0x9F or pieces.CONTINUATION <= byte <= pieces.FIRST


def show_text(data: bytes) -> str:
    """Bytes that are not a frame: printable ASCII as is, the rest escaped."""
    return "".join(chr(b) if b in _PRINTABLE else f"\\x{b:02x}" for b in data)


class WireView:
    """Device-to-host bytes in, readable text out (see the module's docstring)."""

    def __init__(self, max_frame: int = MONITOR_MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._limit = max_wire_size(max_frame) - 1
        self._segment = bytearray()  # held: may be the start of a frame
        self._joiner = pieces.Joiner(REASSEMBLY_LIMIT)
        self._last_seq = 0
        self._midline = False  # the text passed through so far ended without a newline
        self.frames = 0
        self.damaged = 0
        self.text_bytes = 0

    def feed(self, data: bytes) -> str:
        out: list[str] = []
        seg = self._segment
        for byte in data:
            if byte == 0:
                if len(seg) == 1:  # one byte before a delimiter: no frame, text
                    out.append(self._pass(bytes(seg)))
                elif seg:
                    if self._midline:  # text without a newline before this frame
                        out.append("\n")
                        self._midline = False
                    out.append(self._frame(bytes(seg)))
                seg.clear()
                continue
            seg.append(byte)
            if len(seg) > self._limit:  # no frame is this long: pass it all through
                out.append(self._pass(bytes(seg)))
                seg.clear()
            # a byte that cannot start a frame is text; a frame may start right after
            while seg and (seg[0] == 1 or (len(seg) >= 2 and not _body_start(seg[1]))):
                out.append(self._pass(bytes(seg[:1])))
                del seg[0]
        return "".join(out)

    def _pass(self, data: bytes) -> str:
        self.text_bytes += len(data)
        self._midline = not data.endswith(b"\n")
        return show_text(data)

    def _frame(self, wire: bytes) -> str:
        try:
            body = decode_frame(wire, self.max_frame)
        except FrameError as exc:
            self.damaged += 1
            return f"!! damaged frame ({exc.kind}: {exc}): {show_bytes(wire)}\n"
        self.frames += 1
        if pieces.is_piece(body):
            return self._piece(body)
        return self._message(body) + "\n"

    def _message(self, body: bytes) -> str:
        line, message, seq = describe_body(body)
        if isinstance(message, Hello):
            self._last_seq = 0  # the device (re)started its session
            self._joiner.reset()
        if message is not None and message.TYPE not in UNSEQUENCED:
            if seq <= self._last_seq:
                return f"{line} (again)"
            self._last_seq = seq
        return line

    def _piece(self, body: bytes) -> str:
        head = body[0]
        if head == pieces.FIRST:
            name = "first"
        else:
            name = f"{head & 0x07}" + (" last" if head & pieces.LAST else "")
        line = f"PIECE {name} ({len(body) - 1} bytes)\n"
        try:
            joined = self._joiner.take(body)
        except MessageError as exc:
            self.damaged += 1
            return f"{line}!! pieces: {exc}\n"
        if joined is None:
            return line
        return f"{line}  = {self._message(joined)}\n"
