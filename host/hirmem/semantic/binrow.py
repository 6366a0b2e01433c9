"""A tight binary form of the JSON-shaped values a store row holds (issue 16 §5).

:func:`pack` writes ``None``, booleans, integers, floats, strings and lists (nested), and
:func:`unpack` reads back exactly the value given: the same types, the same floats to the
bit. Each item is a tag byte (a kind in the top three bits, a small number in the low
five) followed by what the kind needs:

- an integer ``n >= 0`` (kind 0) or ``-1 - n`` (kind 1): ``n`` in the tag when under 28,
  else ``n - 28`` as a LEB128 varint after it (a 13-digit instant in ms: 7 bytes);
- a string (2) and a list (3): the length the same way, then the UTF-8 bytes or the items;
- a float (4) as the shortest decimal that reads back as it (``repr``): the exponent in
  the tag (-16 to +11), the digits as a zigzag varint (0.8: two bytes); any other float
  (-0.0, an infinity, a NaN, an exponent out of range) as its 8 IEEE bytes (tag 31);
- a chunk id ``<16 lower-case hex digits>#<n>`` (5), ``n`` with no leading zero: ``n``
  as an integer is, then the document's id as 8 bytes (9 bytes instead of 18 characters;
  any other string, however like it, is a string);
- ``None``, ``False``, ``True`` (6, numbers 0-2), and number 3: the float ``same`` the
  caller gave, written once elsewhere (a row's score repeated by each of its sources).
"""

from __future__ import annotations

import math
import re
import struct
from typing import Any

__all__ = ["pack", "pack_scored", "unpack", "unpack_scored"]

_INT, _NEG, _STR, _LIST, _FLOAT, _CHUNK, _SPECIAL = range(7)
_INLINE = 28  # numbers under this sit in the tag itself
_EXP0, _DOUBLE = 16, 31  # a float's tag number: its exponent + 16, or 31 for IEEE bytes
_NONE, _FALSE, _TRUE, _SAME = range(4)
_CHUNK_ID = re.compile(r"([0-9a-f]{16})#(0|[1-9][0-9]*)")
_DECIMAL = re.compile(r"(-?)(\d+)(?:\.(\d+))?(?:e([-+]\d+))?")


def _varint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _head(out: bytearray, kind: int, n: int) -> None:
    if n < _INLINE:
        out.append(kind << 5 | n)
    else:
        out.append(kind << 5 | _INLINE)
        _varint(out, n - _INLINE)


def _decimal(x: float) -> tuple[int, int] | None:
    """``(digits, exponent)`` with ``digits * 10**exponent`` reading back as ``x``, or
    None when the decimal form does not fit (or does not read back bit for bit)."""
    if not math.isfinite(x) or (x == 0.0 and math.copysign(1.0, x) < 0):
        return None
    m = _DECIMAL.fullmatch(repr(x))
    if m is None:
        return None
    sign, whole, frac, exp = m.groups()
    frac = (frac or "").rstrip("0")
    digits = int(sign + whole + frac)
    e = int(exp or 0) - len(frac)
    while digits and digits % 10 == 0 and e < _INLINE - _EXP0 - 1:  # 100.0: 1e2
        digits //= 10
        e += 1
    if not -_EXP0 <= e < _INLINE - _EXP0 or float(f"{digits}e{e}") != x:
        return None
    return digits, e


def _pack(out: bytearray, v: Any, same: float | None) -> None:
    if v is None or isinstance(v, bool):  # (before int: a bool is an int)
        out.append(_SPECIAL << 5 | (_NONE if v is None else _TRUE if v else _FALSE))
    elif isinstance(v, int):
        if v >= 0:
            _head(out, _INT, v)
        else:
            _head(out, _NEG, -1 - v)
    elif isinstance(v, float):
        if same is not None and v == same and struct.pack("<d", v) == struct.pack("<d", same):
            out.append(_SPECIAL << 5 | _SAME)
            return
        dec = _decimal(v)
        if dec is None:
            out.append(_FLOAT << 5 | _DOUBLE)
            out += struct.pack("<d", v)
        else:
            out.append(_FLOAT << 5 | (dec[1] + _EXP0))
            _varint(out, dec[0] * 2 if dec[0] >= 0 else -2 * dec[0] - 1)
    elif isinstance(v, str):
        m = _CHUNK_ID.fullmatch(v)
        if m is not None:
            _head(out, _CHUNK, int(m.group(2)))
            out += bytes.fromhex(m.group(1))
            return
        raw = v.encode("utf-8", "surrogatepass")
        _head(out, _STR, len(raw))
        out += raw
    elif isinstance(v, list | tuple):
        _head(out, _LIST, len(v))
        for item in v:
            _pack(out, item, same)
    else:
        raise TypeError(f"binrow cannot pack a {type(v).__name__}")


def pack(value: Any, same: float | None = None) -> bytes:
    """``value`` in the tight form; a float identical to ``same`` is written as a marker
    (give the same ``same`` to :func:`unpack`)."""
    out = bytearray()
    _pack(out, value, same)
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes, same: float | None) -> None:
        self.data, self.at, self.same = data, 0, same

    def varint(self) -> int:
        n = shift = 0
        while True:
            b = self.take(1)[0]
            n |= (b & 0x7F) << shift
            if b < 0x80:
                return n
            shift += 7

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise ValueError("binrow: the value ends early")
        part = self.data[self.at : self.at + n]
        self.at += n
        return part

    def item(self) -> Any:
        tag = self.take(1)[0]
        kind, n = tag >> 5, tag & 0x1F
        if kind == _SPECIAL:
            if n == _SAME:
                if self.same is None:
                    raise ValueError("binrow: a repeated float with no value given for it")
                return self.same
            return (None, False, True)[n]
        if kind == _FLOAT:
            if n == _DOUBLE:
                return float(struct.unpack("<d", self.take(8))[0])
            z = self.varint()
            return float(f"{z >> 1 if not z & 1 else -(z >> 1) - 1}e{n - _EXP0}")
        if n == _INLINE:
            n += self.varint()
        if kind == _INT:
            return n
        if kind == _NEG:
            return -1 - n
        if kind == _STR:
            return self.take(n).decode("utf-8", "surrogatepass")
        if kind == _LIST:
            return [self.item() for _ in range(n)]
        if kind == _CHUNK:
            return f"{self.take(8).hex()}#{n}"
        raise ValueError(f"binrow: unknown tag {tag:#04x}")


def _whole(r: _Reader) -> Any:
    value = r.item()
    if r.at != len(r.data):
        raise ValueError("binrow: bytes after the value")
    return value


def unpack(data: bytes, same: float | None = None) -> Any:
    """The value :func:`pack` wrote (``same``: the float it was given)."""
    return _whole(_Reader(bytes(data), same))


def pack_scored(score: Any, value: Any) -> bytes:
    """``score`` then ``value``, each float of ``value`` identical to a float ``score``
    written as a one-byte marker (a row's score and its sources' scores)."""
    return pack(score) + pack(value, same=score if type(score) is float else None)


def unpack_scored(data: bytes) -> tuple[Any, Any]:
    """The ``(score, value)`` :func:`pack_scored` wrote."""
    r = _Reader(bytes(data), None)
    score = r.item()
    r.same = score if type(score) is float else None
    return score, _whole(r)
