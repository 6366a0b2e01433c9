"""Deterministic CBOR (RFC 8949 §4.2.1, core deterministic encoding), strictly.

The encoder emits the preferred (shortest) head for every item, definite lengths
only, and map keys sorted by the bytewise order of their encodings. The decoder
accepts exactly what the encoder can produce and refuses everything else with a
:class:`~hirmem.protocol.errors.CborError` that says what was wrong and where:
indefinite lengths, non-minimal heads, unsorted or repeated map keys, floats,
undefined and other simple values, invalid UTF-8, nesting deeper than
``MAX_DEPTH``, lengths beyond the input, and trailing bytes. Because of that,
``encode(decode(b)) == b`` for every accepted ``b``.

Supported values: ``int`` (-2⁶⁴ … 2⁶⁴-1), ``bytes``, ``str``, ``list``/``tuple``,
``dict``, ``bool``, ``None`` and :class:`Tag`. hirmem has no floating point on
the wire: scores travel as Q16.16 integers.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from hirmem.protocol.errors import CborError

MAX_DEPTH = 16

_U64 = 1 << 64
_KEY_TYPES = (int, bytes, str)  # map keys; other types could collide (True == 1 in Python)


@dataclass(frozen=True, slots=True)
class Tag:
    """A tagged data item (major type 6)."""

    number: int
    value: Any


# one-byte heads (argument < 24) of every major type, made once
_SMALL_HEADS = tuple(tuple(bytes(((major << 5) | n,)) for n in range(24)) for major in range(8))
# encodings of map keys seen before (audit details, pack fields: a small, fixed set);
# bounded, so an adversary's many distinct keys only stop it from growing
_KEY_CACHE: dict[int | bytes | str, bytes] = {}
_KEY_CACHE_MAX = 4096


def _head(major: int, n: int) -> bytes:
    if n < 24:
        return _SMALL_HEADS[major][n]
    mt = major << 5
    if n < 0x100:
        return bytes((mt | 24, n))
    if n < 0x10000:
        return struct.pack(">BH", mt | 25, n)
    if n < 0x100000000:
        return struct.pack(">BI", mt | 26, n)
    return struct.pack(">BQ", mt | 27, n)


def _encode_into(out: list[bytes], obj: object, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise CborError(f"nesting deeper than {MAX_DEPTH} levels")
    t = type(obj)
    if t is int:
        n: int = obj  # type: ignore[assignment]
        if n >= 0:
            if n >= _U64:
                raise CborError(f"integer {n} does not fit in 64 bits")
            out.append(_head(0, n))
        else:
            if -n - 1 >= _U64:
                raise CborError(f"integer {n} does not fit in 64 bits")
            out.append(_head(1, -n - 1))
    elif t is bytes or t is bytearray or t is memoryview:
        b = bytes(obj)  # type: ignore[call-overload]
        out.append(_head(2, len(b)))
        out.append(b)
    elif t is str:
        try:
            s = obj.encode("utf-8")  # type: ignore[attr-defined]
        except UnicodeEncodeError as exc:
            raise CborError(f"text is not encodable as UTF-8: {exc.reason}") from None
        out.append(_head(3, len(s)))
        out.append(s)
    elif t is list or t is tuple:
        seq: list[object] | tuple[object, ...] = obj  # type: ignore[assignment]
        out.append(_head(4, len(seq)))
        for item in seq:
            _encode_item(out, item, depth + 1)
    elif t is dict:
        mapping: dict[object, object] = obj  # type: ignore[assignment]
        pairs = sorted((_key(k), v) for k, v in mapping.items())
        out.append(_head(5, len(pairs)))
        previous = None
        for key, value in pairs:
            if key == previous:
                raise CborError("map has two keys with the same encoding")
            previous = key
            out.append(key)
            _encode_item(out, value, depth + 1)
    elif t is bool:
        out.append(b"\xf5" if obj else b"\xf4")
    elif obj is None:
        out.append(b"\xf6")
    elif t is Tag:
        tag: Tag = obj  # type: ignore[assignment]
        if not 0 <= tag.number < _U64:
            raise CborError(f"tag number {tag.number} out of range")
        out.append(_head(6, tag.number))
        _encode_into(out, tag.value, depth + 1)
    else:
        raise CborError(f"cannot encode {t.__name__} in hirmem CBOR (no floats, no custom types)")


def _encode_item(out: list[bytes], item: object, depth: int) -> None:
    """One element of a container: the common scalars (short text, bytes, small
    non-negative integers, null) written here, anything else by :func:`_encode_into`.
    The same bytes either way; it only saves a call per element of the flat maps and
    arrays hirmem encodes most (audit details, record fields)."""
    t = type(item)
    if t is str and depth <= MAX_DEPTH:
        try:
            b = item.encode("utf-8")  # type: ignore[attr-defined]
        except UnicodeEncodeError as exc:
            raise CborError(f"text is not encodable as UTF-8: {exc.reason}") from None
        n = len(b)
        out.append(_SMALL_HEADS[3][n] if n < 24 else _head(3, n))
        out.append(b)
    elif t is bytes and depth <= MAX_DEPTH:
        n = len(item)  # type: ignore[arg-type]
        out.append(_SMALL_HEADS[2][n] if n < 24 else _head(2, n))
        out.append(item)  # type: ignore[arg-type]
    elif t is int and 0 <= item < 24 and depth <= MAX_DEPTH:  # type: ignore[operator]
        out.append(_SMALL_HEADS[0][item])  # type: ignore[call-overload]
    elif item is None and depth <= MAX_DEPTH:
        out.append(b"\xf6")
    else:
        _encode_into(out, item, depth)


def _key(k: object) -> bytes:
    """A map key's encoding (the key's type is checked first: True == 1 in Python)."""
    if type(k) not in _KEY_TYPES:
        raise CborError(f"map key {k!r}: keys are integers, byte strings or text")
    key: int | bytes | str = k  # type: ignore[assignment]
    got = _KEY_CACHE.get(key)
    if got is None:
        got = encode(key)
        if len(_KEY_CACHE) < _KEY_CACHE_MAX:
            _KEY_CACHE[key] = got
    return got


def encode(obj: object) -> bytes:
    """Encode ``obj`` in core deterministic CBOR."""
    out: list[bytes] = []
    _encode_into(out, obj, 0)
    return b"".join(out)


class _Reader:
    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0
        self.end = len(data)

    def fail(self, what: str) -> CborError:
        return CborError(f"{what} at byte {self.pos}")

    def head(self) -> tuple[int, int, int]:
        """Return (major, argument, offset of the head); refuse non-preferred heads."""
        start = self.pos
        if start >= self.end:
            raise self.fail("input ends where a data item was expected")
        ib = self.data[start]
        major, info = ib >> 5, ib & 0x1F
        self.pos = start + 1
        if info < 24:
            return major, info, start
        if info > 27:
            if ib == 0xFF:
                raise CborError(f"break byte 0xff outside any indefinite item at byte {start}")
            if info == 31 and major in (2, 3, 4, 5):
                raise CborError(f"indefinite-length item (initial byte 0x{ib:02x}) at byte {start}")
            raise CborError(
                f"additional information {info} is not valid for major type {major} "
                f"(initial byte 0x{ib:02x}) at byte {start}"
            )
        size = 1 << (info - 24)
        stop = self.pos + size
        if stop > self.end:
            raise CborError(f"input ends inside the head at byte {start}")
        n = int.from_bytes(self.data[self.pos : stop], "big")
        self.pos = stop
        if major == 7:
            if size > 1:
                raise CborError(
                    f"floating-point value at byte {start} (hirmem uses Q16.16 integers)"
                )
            if n < 32:  # RFC 8949 §3.3: not well-formed
                raise CborError(f"simple value {n} in two bytes at byte {start} is not well-formed")
            return major, n, start  # simple value in one extra byte, refused by the caller
        floor = 24 if size == 1 else 1 << (4 * size)
        if n < floor:
            raise CborError(f"non-minimal head at byte {start}: {n} encoded in {size + 1} bytes")
        return major, n, start

    def take(self, n: int, start: int) -> bytes:
        stop = self.pos + n
        if stop > self.end:
            raise CborError(
                f"string at byte {start} declares {n} bytes but only {self.end - self.pos} remain"
            )
        chunk = self.data[self.pos : stop]
        self.pos = stop
        return chunk

    def item(self, depth: int) -> object:
        if depth > MAX_DEPTH:
            raise self.fail(f"nesting deeper than {MAX_DEPTH} levels")
        major, n, start = self.head()
        if major == 0:
            return n
        if major == 1:
            return -1 - n
        if major == 2:
            return self.take(n, start)
        if major == 3:
            raw = self.take(n, start)
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise CborError(
                    f"text string at byte {start} is not valid UTF-8: {exc.reason}"
                ) from None
        if major == 4:
            if n > self.end - self.pos:
                raise CborError(
                    f"array at byte {start} declares {n} items, more than the input holds"
                )
            return [self.item(depth + 1) for _ in range(n)]
        if major == 5:
            if 2 * n > self.end - self.pos:
                raise CborError(
                    f"map at byte {start} declares {n} pairs, more than the input holds"
                )
            result: dict[object, object] = {}
            previous = b""
            for _ in range(n):
                key_start = self.pos
                key = self.item(depth + 1)
                key_bytes = self.data[key_start : self.pos]
                if key_bytes <= previous:
                    what = "repeated" if key_bytes == previous else "out of order"
                    raise CborError(f"map key at byte {key_start} is {what} (deterministic CBOR)")
                if type(key) not in _KEY_TYPES:
                    raise CborError(
                        f"map key at byte {key_start} is not an integer, byte or text string"
                    )
                previous = key_bytes
                result[key] = self.item(depth + 1)
            return result
        if major == 6:
            return Tag(n, self.item(depth + 1))
        # major 7
        if n == 20:
            return False
        if n == 21:
            return True
        if n == 22:
            return None
        raise CborError(f"simple value {n} at byte {start} is not allowed")


def decode(data: bytes) -> Any:
    """Decode one deterministic CBOR item that spans all of ``data``."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise CborError(f"expected bytes, got {type(data).__name__}")
    reader = _Reader(bytes(data))
    value = reader.item(0)
    if reader.pos != reader.end:
        raise CborError(
            f"trailing bytes after the data item: {reader.end - reader.pos} from byte {reader.pos}"
        )
    return value
