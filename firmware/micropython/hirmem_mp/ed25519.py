"""Ed25519 (RFC 8032 section 5.1, pure EdDSA) on MicroPython's big integers.

Field elements are ints mod p = 2^255 - 19; points are extended twisted-Edwards
coordinates (X, Y, Z, T) with x = X/Z, y = Y/Z, xy = T/Z (Hisil et al. 2008).

Speed: [a]B uses a fixed-base comb over a table of 64 affine points
(k * 2^(32 j) B for j = 0..7, k = 1..8) built once on first use, with radix-16
signed digits: 28 doublings and at most 64 mixed additions. [k]A in verification
uses a width-5 NAF with 8 precomputed odd multiples: about 253 doublings and 50
additions.

Verification follows OpenSSL's rules (SPEC 8.3, firmware/core/hm_ed25519.h): S < L
else refused; A is the low 255 bits reduced mod p (a set sign bit with x = 0 is
ignored); k = SHA-512(R || A || M) mod L; the canonical encoding of [S]B - [k]A must
equal R. Not constant time: big-integer arithmetic on MicroPython leaks operand
sizes through timing (see README).
"""

from micropython import const

from .sha512 import SHA512

P = const(0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFED)
L = const(0x1000000000000000000000000000000014DEF9DEA2F79CD65812631A5CF5D3ED)
D = const(0x52036CEE2B6FFE738CC740797779E89800700A4D4141D8AB75EB4DCA135978A3)
D2 = const(0x2406D9DC56DFFCE7198E80F2EEF3D13000E0149A8283B156EBD69B9426B2F159)
SQRT_M1 = const(0x2B8324804FC1DF0B2B4D00993DFBD7A72F431806AD2FE478C4EE1B274A0EA0B0)
_BX = const(0x216936D3CD6E53FEC0A4E231FDD6DC5C692CC7609525A7B2C9562D608F25D51A)
_BY = const(0x6666666666666666666666666666666666666666666666666666666666666658)
_MASK255 = const(0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF)

_IDENT = (0, 1, 1, 0)


def _dbl(p1):
    X1, Y1, Z1, _ = p1
    a = X1 * X1 % P
    b = Y1 * Y1 % P
    c = 2 * Z1 * Z1 % P
    h = a + b
    s = X1 + Y1
    e = h - s * s % P
    g = a - b
    f = c + g
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def _add(p1, p2):
    X1, Y1, Z1, T1 = p1
    X2, Y2, Z2, T2 = p2
    a = (Y1 - X1) * (Y2 - X2) % P
    b = (Y1 + X1) * (Y2 + X2) % P
    c = T1 * D2 % P * T2 % P
    d = 2 * Z1 * Z2 % P
    e = b - a
    f = d - c
    g = d + c
    h = b + a
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def _madd(p1, q):
    """p1 + an affine point in the form (y + x, y - x, 2 d x y)."""
    X1, Y1, Z1, T1 = p1
    yp, ym, t2d = q
    a = (Y1 - X1) * ym % P
    b = (Y1 + X1) * yp % P
    c = T1 * t2d % P
    d = 2 * Z1
    e = b - a
    f = d - c
    g = d + c
    h = b + a
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def _msub(p1, q):
    yp, ym, t2d = q
    return _madd(p1, (ym, yp, P - t2d))


def _neg(p1):
    X, Y, Z, T = p1
    return ((P - X) % P, Y, Z, (P - T) % P)


def _affine(p1):
    X, Y, Z, _ = p1
    zi = pow(Z, P - 2, P)
    return X * zi % P, Y * zi % P


def encode_point(p1) -> bytes:
    x, y = _affine(p1)
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


def decode_point(s: bytes):
    """The point of a 32-byte encoding (OpenSSL rules), or None."""
    y = (int.from_bytes(s, "little") & _MASK255) % P
    sign = s[31] >> 7
    yy = y * y % P
    u = (yy - 1) % P
    v = (D * yy + 1) % P
    v3 = v * v % P * v % P
    x = u * v3 % P * pow(u * v3 % P * v3 % P * v % P, (P - 5) // 8, P) % P
    vxx = v * x % P * x % P
    if vxx != u:
        if vxx != (P - u) % P:
            return None
        x = x * SQRT_M1 % P
    if (x & 1) != sign:
        x = (P - x) % P
    return (x, y, 1, x * y % P)


_table = None


def _base_table():
    """64 affine points k * 2^(32 j) * B (j = 0..7, k = 1..8) as (y+x, y-x, 2dxy)."""
    global _table
    if _table is not None:
        return _table
    tab = []
    bj = (_BX, _BY, 1, _BX * _BY % P)
    for j in range(8):
        acc = bj
        for k in range(8):
            x, y = _affine(acc)
            tab.append(((y + x) % P, (y - x) % P, 2 * D * x % P * y % P))
            acc = _add(acc, bj)
        if j < 7:
            for _ in range(32):
                bj = _dbl(bj)
    _table = tab
    return tab


def _radix16(a: int):
    """Signed radix-16 digits with a = sum e[m] 16^m (a < 2^255): e[0..62] in -8..7,
    e[63] in 0..8. The top digit is never recentred: it takes the last carry (a top
    nibble of 7 plus a carry is 8, and the table holds 8 * 2^(32 j) B)."""
    e = bytearray(64)  # stored as value + 8
    carry = 0
    for m in range(63):
        d = ((a >> (4 * m)) & 15) + carry
        carry = (d + 8) >> 4
        e[m] = d - (carry << 4) + 8
    e[63] = (a >> 252) + carry + 8
    return e


def scalarmult_base(a: int):
    """[a]B for 0 <= a < 2^255."""
    tab = _base_table()
    e = _radix16(a)
    q = _IDENT
    for i in range(7, -1, -1):
        if i != 7:
            q = _dbl(_dbl(_dbl(_dbl(q))))
        for j in range(8):
            d = e[8 * j + i] - 8
            if d > 0:
                q = _madd(q, tab[8 * j + d - 1])
            elif d < 0:
                q = _msub(q, tab[8 * j - d - 1])
    return q


def _wnaf(k: int):
    """Width-5 NAF digits of k >= 0, least significant first (odd, |d| <= 15)."""
    out = bytearray(257)  # value + 16
    i = 0
    while k:
        if k & 1:
            d = k & 31
            if d > 16:
                d -= 32
            k -= d
        else:
            d = 0
        out[i] = d + 16
        i += 1
        k >>= 1
    return out, i


def scalarmult(p1, k: int):
    """[k]p1 for k >= 0 (variable time)."""
    odd = [p1]
    p2 = _dbl(p1)
    for _ in range(7):
        odd.append(_add(odd[-1], p2))
    naf, n = _wnaf(k)
    q = _IDENT
    for i in range(n - 1, -1, -1):
        q = _dbl(q)
        d = naf[i] - 16
        if d > 0:
            q = _add(q, odd[d >> 1])
        elif d < 0:
            q = _add(q, _neg(odd[(-d) >> 1]))
    return q


def _clamp(h: bytes) -> int:
    a = int.from_bytes(h[0:32], "little")
    a &= (1 << 254) - 8
    a |= 1 << 254
    return a


def public_key(seed: bytes) -> bytes:
    h = SHA512(seed).digest()
    return encode_point(scalarmult_base(_clamp(h)))


def sign(seed: bytes, msg) -> bytes:
    """The 64-byte signature R || S of msg under the 32-byte seed."""
    h = SHA512(seed).digest()
    a = _clamp(h)
    pub = encode_point(scalarmult_base(a))
    hs = SHA512(h[32:64])
    hs.update(msg)
    r = int.from_bytes(hs.digest(), "little") % L
    rb = encode_point(scalarmult_base(r))
    hk = SHA512(rb)
    hk.update(pub)
    hk.update(msg)
    k = int.from_bytes(hk.digest(), "little") % L
    s = (r + k * a) % L
    return rb + s.to_bytes(32, "little")


def verify(sig, pub, msg) -> bool:
    if len(sig) != 64 or len(pub) != 32:
        return False
    s = int.from_bytes(sig[32:64], "little")
    if s >= L:
        return False
    a = decode_point(bytes(pub))
    if a is None:
        return False
    hk = SHA512(sig[0:32])
    hk.update(pub)
    hk.update(msg)
    k = int.from_bytes(hk.digest(), "little") % L
    q = _add(scalarmult_base(s), _neg(scalarmult(a, k)))
    return encode_point(q) == bytes(sig[0:32])
