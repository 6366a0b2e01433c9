"""Deterministic CBOR (SPEC section 3): an encoder and a strict decoder.

Encoding is RFC 8949 section 4.2.1 core deterministic: shortest heads, definite
lengths, map keys sorted bytewise by their encodings. The decoder refuses anything
else (non-minimal heads, indefinite lengths, floats and simple values other than
false/true/null, invalid UTF-8, unsorted or repeated map keys, array or map keys,
depth above 16, trailing bytes) by raising CborError.

Decoded values: int, bytes, str, list, dict, Tag, and True/False/None for f5/f4/f6
(which no hirmem schema accepts as an integer: check with `type(x) is int`).
"""

from micropython import const

MAX_DEPTH = const(16)


class CborError(ValueError):
    pass


class Tag:
    def __init__(self, tag: int, value: object) -> None:
        self.tag = tag
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tag) and other.tag == self.tag and other.value == self.value


def head(out: bytearray, major: int, n: int) -> None:
    """Append the shortest head of major type `major` with argument n (0 .. 2^64-1)."""
    m = major << 5
    if n < 24:
        out.append(m | n)
    elif n < 0x100:
        out.append(m | 24)
        out.append(n)
    elif n < 0x10000:
        out.append(m | 25)
        out.append(n >> 8)
        out.append(n & 0xFF)
    elif n < 0x100000000:
        out.append(m | 26)
        out.extend(n.to_bytes(4, "big"))
    elif n < 0x10000000000000000:
        out.append(m | 27)
        out.extend(n.to_bytes(8, "big"))
    else:
        raise CborError("integer beyond 64 bits")


def head_size(n: int) -> int:
    if n < 24:
        return 1
    if n < 0x100:
        return 2
    if n < 0x10000:
        return 3
    if n < 0x100000000:
        return 5
    return 9


def enc_uint(out: bytearray, n: int) -> None:
    head(out, 0, n)


def enc_int(out: bytearray, n: int) -> None:
    if n >= 0:
        head(out, 0, n)
    else:
        head(out, 1, -1 - n)


def enc_bytes(out: bytearray, b: bytes) -> None:
    head(out, 2, len(b))
    out.extend(b)


def enc_text(out: bytearray, s: str) -> None:
    b = s.encode()
    head(out, 3, len(b))
    out.extend(b)


def encode_into(out: bytearray, obj: object, depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        raise CborError("nesting deeper than 16")
    if obj is True:
        out.append(0xF5)
    elif obj is False:
        out.append(0xF4)
    elif obj is None:
        out.append(0xF6)
    elif isinstance(obj, int):
        enc_int(out, obj)
    elif isinstance(obj, (bytes, bytearray, memoryview)):
        head(out, 2, len(obj))
        out.extend(obj)
    elif isinstance(obj, str):
        enc_text(out, obj)
    elif isinstance(obj, (list, tuple)):
        head(out, 4, len(obj))
        for x in obj:
            encode_into(out, x, depth + 1)
    elif isinstance(obj, dict):
        pairs = []
        for k in obj:
            kb = bytearray()
            encode_into(kb, k, depth + 1)
            vb = bytearray()
            encode_into(vb, obj[k], depth + 1)
            pairs.append((bytes(kb), vb))
        pairs.sort(key=lambda p: p[0])
        head(out, 5, len(pairs))
        for kb, vb in pairs:
            out.extend(kb)
            out.extend(vb)
    elif isinstance(obj, Tag):
        head(out, 6, obj.tag)
        encode_into(out, obj.value, depth + 1)
    else:
        raise CborError("cannot encode this type")


def encode(obj: object) -> bytes:
    out = bytearray()
    encode_into(out, obj)
    return bytes(out)


def utf8_valid(b: bytes, start: int = 0, end: int = -1) -> bool:
    """RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF."""
    if end < 0:
        end = len(b)
    i = start
    while i < end:
        c = b[i]
        if c < 0x80:
            i += 1
            continue
        if 0xC2 <= c <= 0xDF:
            n = 1
            lo = 0x80
            hi = 0xBF
        elif 0xE0 <= c <= 0xEF:
            n = 2
            lo = 0xA0 if c == 0xE0 else 0x80
            hi = 0x9F if c == 0xED else 0xBF
        elif 0xF0 <= c <= 0xF4:
            n = 3
            lo = 0x90 if c == 0xF0 else 0x80
            hi = 0x8F if c == 0xF4 else 0xBF
        else:
            return False
        if i + n >= end:
            return False
        c1 = b[i + 1]
        if c1 < lo or c1 > hi:
            return False
        for j in range(i + 2, i + n + 1):
            if b[j] & 0xC0 != 0x80:
                return False
        i += n + 1
    return True


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.d = data
        self.p = 0
        self.n = len(data)

    def arg(self, ai: int) -> int:
        d = self.d
        p = self.p
        if ai < 24:
            return ai
        if ai == 24:
            if p + 1 > self.n:
                raise CborError("truncated head")
            v = d[p]
            self.p = p + 1
            if v < 24:
                raise CborError("non-minimal head")
            return v
        if ai == 25:
            if p + 2 > self.n:
                raise CborError("truncated head")
            v = (d[p] << 8) | d[p + 1]
            self.p = p + 2
            if v < 0x100:
                raise CborError("non-minimal head")
            return v
        if ai == 26:
            if p + 4 > self.n:
                raise CborError("truncated head")
            v = int.from_bytes(d[p : p + 4], "big")
            self.p = p + 4
            if v < 0x10000:
                raise CborError("non-minimal head")
            return v
        if ai == 27:
            if p + 8 > self.n:
                raise CborError("truncated head")
            v = int.from_bytes(d[p : p + 8], "big")
            self.p = p + 8
            if v < 0x100000000:
                raise CborError("non-minimal head")
            return v
        raise CborError("reserved or indefinite additional information")

    def item(self, depth: int) -> object:
        if depth > MAX_DEPTH:
            raise CborError("nesting deeper than 16")
        if self.p >= self.n:
            raise CborError("truncated item")
        ib = self.d[self.p]
        self.p += 1
        major = ib >> 5
        ai = ib & 0x1F
        if major == 7:
            if ai == 20:
                return False
            if ai == 21:
                return True
            if ai == 22:
                return None
            raise CborError("float or simple value")
        n = self.arg(ai)
        if major == 0:
            return n
        if major == 1:
            return -1 - n
        if major == 2 or major == 3:
            p = self.p
            if n > self.n - p:
                raise CborError("string overruns the input")
            self.p = p + n
            if major == 2:
                return bytes(self.d[p : p + n])
            if not utf8_valid(self.d, p, p + n):
                raise CborError("invalid UTF-8")
            return str(self.d[p : p + n], "utf-8")
        if major == 4:
            if n > self.n - self.p:
                raise CborError("array count overruns the input")
            return [self.item(depth + 1) for _ in range(n)]
        if major == 5:
            if n > (self.n - self.p) // 2:
                raise CborError("map count overruns the input")
            out = {}
            last = None
            for _ in range(n):
                k0 = self.p
                if k0 < self.n and (self.d[k0] >> 5) in (4, 5):
                    raise CborError("array or map as a map key")
                k = self.item(depth + 1)
                kb = bytes(self.d[k0 : self.p])
                if last is not None and kb <= last:
                    raise CborError("map keys not in deterministic order")
                last = kb
                out[k] = self.item(depth + 1)
            return out
        return Tag(n, self.item(depth + 1))  # major 6


def decode(data: bytes) -> object:
    """Exactly one deterministic CBOR item, or CborError."""
    r = _Reader(data)
    v = r.item(0)
    if r.p != r.n:
        raise CborError("trailing bytes")
    return v
