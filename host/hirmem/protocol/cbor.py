"""Deterministic CBOR (RFC 8949 §4.2.1, core deterministic encoding), strictly.

The encoder emits the preferred (shortest) head for every item, definite lengths
only, and map keys sorted by the bytewise order of their encodings. The decoder
accepts exactly what the encoder can produce and refuses everything else with a
:class:`~hirmem.protocol.errors.CborError` that says what was wrong and where:
indefinite lengths, non-minimal heads, unsorted or repeated map keys, floats,
undefined and other simple values, invalid UTF-8, nesting deeper than
``MAX_DEPTH``, lengths beyond the input, and trailing bytes. Because of that,
``encode(decode(b)) == b`` for every accepted ``b``.

Speed: :func:`decode` first lets cbor2's C decoder read the input and keeps its value
only when that provably is the strict reader's (:func:`_decode_compiled`); anything
else, every refusal included, goes to the strict reader (:func:`decode_strict`).
:func:`encode_map` and :func:`encode_array` write the flat maps and arrays of the audit
chain and the hash preimages in one pass, with the bytes and errors of :func:`encode`.

Supported values: ``int`` (-2⁶⁴ … 2⁶⁴-1), ``bytes``, ``str``, ``list``/``tuple``,
``dict``, ``bool``, ``None`` and :class:`Tag`. hirmem has no floating point on
the wire: scores travel as Q16.16 integers.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import cbor2

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


def head(major: int, n: int) -> bytes:
    """A data item's head: major type ``major`` with argument ``n``, shortest form (for
    writers that lay out a fixed shape themselves, e.g. memory.packaudit)."""
    return _head(major, n)


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


def encode_map(mapping: dict[Any, Any]) -> bytes:
    """``encode(mapping)`` — the same bytes and the same errors, in the same order — for
    the flat maps hirmem encodes most (audit details), with one call less per member."""
    pairs = sorted([(_key(k), v) for k, v in mapping.items()], key=_first)
    out = [_SMALL_HEADS[5][len(pairs)] if len(pairs) < 24 else _head(5, len(pairs))]
    previous = None
    for key, value in pairs:
        if key == previous:
            raise CborError("map has two keys with the same encoding")
        previous = key
        out.append(key)
        _encode_item(out, value, 1)
    return b"".join(out)


def _first(pair: tuple[bytes, object]) -> bytes:
    return pair[0]


def encode_array(items: Sequence[object]) -> bytes:
    """``encode(list(items))`` — the same bytes and the same errors — for the hash
    preimages (the audit chain's, the records'), integers written in line."""
    n = len(items)
    out = [_SMALL_HEADS[4][n] if n < 24 else _head(4, n)]
    for item in items:
        t = type(item)
        if t is bytes:
            size = len(item)  # type: ignore[arg-type]
            out.append(_BYTES_HEADS[size] if size < 24 else _head(2, size))
            out.append(item)  # type: ignore[arg-type]
        elif t is int and 0 <= item < _U64:  # type: ignore[operator]
            out.append(_head(0, item))  # type: ignore[arg-type]
        else:
            _encode_item(out, item, 1)
    return b"".join(out)


_BYTES_HEADS = _SMALL_HEADS[2]


_REFUSED = object()  # the compiled path does not vouch for the input: the strict reader decides


def _decode_compiled(data: bytes) -> Any:
    """The value of ``data`` by cbor2's C decoder when that is provably what the strict
    reader below would return, else ``_REFUSED`` (then the strict reader runs and gives
    the value or the precise error).

    The proof: the value holds only what hirmem CBOR allows (integers in 64 bits, byte
    and text strings, arrays, maps with integer, byte or text keys in bytewise order of
    their encodings, booleans, null, tags; no deeper than ``MAX_DEPTH``), and cbor2's
    canonical encoding of it gives back exactly ``data``. cbor2 orders map keys
    length-first where hirmem orders them bytewise; with the keys found in bytewise
    order too, both orders agree on that map, so ``encode(value) == data``: ``data``
    is preferred-serialised and sorted, with definite lengths and nothing after the
    item, which is exactly what the strict reader accepts, and it would decode it to
    this value (``encode(decode(b)) == b``)."""
    try:
        value = cbor2.loads(data)
        if cbor2.dumps(value, canonical=True) != data:
            return _REFUSED
    except Exception:  # anything cbor2 refuses or cannot write back: the strict reader
        return _REFUSED
    return _plain(value, 0)  # after the comparison: this turns cbor2's tags into Tags


def _plain(value: Any, depth: int) -> Any:
    """``value`` (cbor2's tags become :class:`Tag`) when it holds only what hirmem CBOR
    allows, in hirmem's key order, else ``_REFUSED``."""
    if depth > MAX_DEPTH:
        return _REFUSED
    t = type(value)
    if t is str or t is bytes or t is bool or value is None:
        return value
    if t is int:
        return value if -_U64 <= value < _U64 else _REFUSED
    if t is list:
        if value and depth >= MAX_DEPTH:
            return _REFUSED
        for j, item in enumerate(value):
            if type(item) is not str and type(item) is not bytes:
                got = _plain(item, depth + 1)
                if got is _REFUSED:
                    return _REFUSED
                value[j] = got  # a fresh list of cbor2's: a tag inside becomes a Tag
        return value
    if t is dict:
        previous = b""
        for key in value:
            if type(key) not in _KEY_TYPES or depth >= MAX_DEPTH:
                return _REFUSED
            if type(key) is int and not -_U64 <= key < _U64:
                return _REFUSED
            encoded = _key(key)
            if encoded <= previous:
                return _REFUSED
            previous = encoded
            got = _plain(value[key], depth + 1)
            if got is _REFUSED:
                return _REFUSED
            value[key] = got
        return value
    if t is cbor2.CBORTag:
        inner = _plain(value.value, depth + 1)
        return _REFUSED if inner is _REFUSED else Tag(value.tag, inner)
    return _REFUSED  # floats, simple values, undefined, cbor2's semantic types


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
    raw = bytes(data)
    value = _decode_compiled(raw)
    return decode_strict(raw) if value is _REFUSED else value


def decode_strict(data: bytes) -> Any:
    """:func:`decode` by the pure-Python reader alone: what :func:`decode` falls back to
    whenever the compiled path does not vouch for the input, so every refusal and its
    message come from here."""
    reader = _Reader(bytes(data))
    value = reader.item(0)
    if reader.pos != reader.end:
        raise CborError(
            f"trailing bytes after the data item: {reader.end - reader.pos} from byte {reader.pos}"
        )
    return value
