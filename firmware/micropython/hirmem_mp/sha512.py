"""SHA-512 (FIPS 180-4) for MicroPython, which has none; Ed25519 needs it.

64-bit words are kept as two 32-bit halves (hi, lo), so every intermediate stays a
small int on a 64-bit port and the compression loop allocates nothing. The message
schedule lives in two preallocated 80-entry lists per hasher.
"""

from micropython import const

_M = const(0xFFFFFFFF)

_KH = (
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
    0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2, 0xca273ece, 0xd186b8c7,
    0xeada7dd6, 0xf57d4f7f, 0x06f067aa, 0x0a637dc5, 0x113f9804, 0x1b710b35,
    0x28db77f5, 0x32caab7b, 0x3c9ebe0a, 0x431d67c4, 0x4cc5d4be, 0x597f299c,
    0x5fcb6fab, 0x6c44198c,
)
_KL = (
    0xd728ae22, 0x23ef65cd, 0xec4d3b2f, 0x8189dbbc, 0xf348b538, 0xb605d019,
    0xaf194f9b, 0xda6d8118, 0xa3030242, 0x45706fbe, 0x4ee4b28c, 0xd5ffb4e2,
    0xf27b896f, 0x3b1696b1, 0x25c71235, 0xcf692694, 0x9ef14ad2, 0x384f25e3,
    0x8b8cd5b5, 0x77ac9c65, 0x592b0275, 0x6ea6e483, 0xbd41fbd4, 0x831153b5,
    0xee66dfab, 0x2db43210, 0x98fb213f, 0xbeef0ee4, 0x3da88fc2, 0x930aa725,
    0xe003826f, 0x0a0e6e70, 0x46d22ffc, 0x5c26c926, 0x5ac42aed, 0x9d95b3df,
    0x8baf63de, 0x3c77b2a8, 0x47edaee6, 0x1482353b, 0x4cf10364, 0xbc423001,
    0xd0f89791, 0x0654be30, 0xd6ef5218, 0x5565a910, 0x5771202a, 0x32bbd1b8,
    0xb8d2d0c8, 0x5141ab53, 0xdf8eeb99, 0xe19b48a8, 0xc5c95a63, 0xe3418acb,
    0x7763e373, 0xd6b2b8a3, 0x5defb2fc, 0x43172f60, 0xa1f0ab72, 0x1a6439ec,
    0x23631e28, 0xde82bde9, 0xb2c67915, 0xe372532b, 0xea26619c, 0x21c0c207,
    0xcde0eb1e, 0xee6ed178, 0x72176fba, 0xa2c898a6, 0xbef90dae, 0x131c471b,
    0x23047d84, 0x40c72493, 0x15c9bebc, 0x9c100d4c, 0xcb3e42b6, 0xfc657e2a,
    0x3ad6faec, 0x4a475817,
)
_IV = (
    0x6a09e667, 0xf3bcc908, 0xbb67ae85, 0x84caa73b, 0x3c6ef372, 0xfe94f82b,
    0xa54ff53a, 0x5f1d36f1, 0x510e527f, 0xade682d1, 0x9b05688c, 0x2b3e6c1f,
    0x1f83d9ab, 0xfb41bd6b, 0x5be0cd19, 0x137e2179,
)


class SHA512:
    def __init__(self, data=None) -> None:
        self._h: list[int] = list(_IV)
        self._wh = [0] * 80
        self._wl = [0] * 80
        self._buf = bytearray(128)
        self._n = 0  # bytes in _buf
        self._len = 0  # total bytes hashed
        if data is not None:
            self.update(data)

    def update(self, data) -> None:
        mv = memoryview(data)
        n = len(mv)
        self._len += n
        i = 0
        buf = self._buf
        if self._n:
            take = 128 - self._n
            if take > n:
                take = n
            buf[self._n : self._n + take] = mv[0:take]
            self._n += take
            i = take
            if self._n < 128:
                return
            self._compress(buf, 0)
            self._n = 0
        while n - i >= 128:
            self._compress(mv, i)
            i += 128
        if i < n:
            buf[0 : n - i] = mv[i:n]
            self._n = n - i

    def digest(self) -> bytes:
        buf = self._buf
        n = self._n
        bits = self._len * 8
        buf[n] = 0x80
        n += 1
        if n > 112:
            for j in range(n, 128):
                buf[j] = 0
            self._compress(buf, 0)
            n = 0
        for j in range(n, 120):
            buf[j] = 0
        buf[120:128] = bits.to_bytes(8, "big")
        self._compress(buf, 0)
        out = bytearray(64)
        h = self._h
        for j in range(16):
            v = h[j]
            out[4 * j] = v >> 24
            out[4 * j + 1] = (v >> 16) & 0xFF
            out[4 * j + 2] = (v >> 8) & 0xFF
            out[4 * j + 3] = v & 0xFF
        return bytes(out)

    def _compress(self, block, off: int) -> None:
        wh = self._wh
        wl = self._wl
        for t in range(16):
            p = off + 8 * t
            wh[t] = (block[p] << 24) | (block[p + 1] << 16) | (block[p + 2] << 8) | block[p + 3]
            wl[t] = (block[p + 4] << 24) | (block[p + 5] << 16) | (block[p + 6] << 8) | block[p + 7]
        for t in range(16, 80):
            # sigma1(w[t-2]) = rotr19 ^ rotr61 ^ shr6
            xh = wh[t - 2]
            xl = wl[t - 2]
            s1h = ((xh >> 19) | (xl << 13)) ^ ((xl >> 29) | (xh << 3)) ^ (xh >> 6)
            s1l = ((xl >> 19) | (xh << 13)) ^ ((xh >> 29) | (xl << 3)) ^ ((xl >> 6) | (xh << 26))
            # sigma0(w[t-15]) = rotr1 ^ rotr8 ^ shr7
            xh = wh[t - 15]
            xl = wl[t - 15]
            s0h = ((xh >> 1) | (xl << 31)) ^ ((xh >> 8) | (xl << 24)) ^ (xh >> 7)
            s0l = ((xl >> 1) | (xh << 31)) ^ ((xl >> 8) | (xh << 24)) ^ ((xl >> 7) | (xh << 25))
            lo = (s1l & _M) + wl[t - 7] + (s0l & _M) + wl[t - 16]
            wl[t] = lo & _M
            wh[t] = ((s1h & _M) + wh[t - 7] + (s0h & _M) + wh[t - 16] + (lo >> 32)) & _M
        h = self._h
        ah, al, bh, bl, ch, cl, dh, dl = h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]
        eh, el, fh, fl, gh, gl, hh, hl = h[8], h[9], h[10], h[11], h[12], h[13], h[14], h[15]
        for t in range(80):
            # Sigma1(e) = rotr14 ^ rotr18 ^ rotr41
            S1h = (((eh >> 14) | (el << 18)) ^ ((eh >> 18) | (el << 14)) ^ ((el >> 9) | (eh << 23))) & _M
            S1l = (((el >> 14) | (eh << 18)) ^ ((el >> 18) | (eh << 14)) ^ ((eh >> 9) | (el << 23))) & _M
            chh = (eh & fh) ^ (~eh & gh)
            chl = (el & fl) ^ (~el & gl)
            lo = hl + S1l + (chl & _M) + _KL[t] + wl[t]
            t1h = hh + S1h + (chh & _M) + _KH[t] + wh[t] + (lo >> 32)
            t1l = lo & _M
            # Sigma0(a) = rotr28 ^ rotr34 ^ rotr39
            S0h = (((ah >> 28) | (al << 4)) ^ ((al >> 2) | (ah << 30)) ^ ((al >> 7) | (ah << 25))) & _M
            S0l = (((al >> 28) | (ah << 4)) ^ ((ah >> 2) | (al << 30)) ^ ((ah >> 7) | (al << 25))) & _M
            mjh = (ah & bh) ^ (ah & ch) ^ (bh & ch)
            mjl = (al & bl) ^ (al & cl) ^ (bl & cl)
            hh, hl = gh, gl
            gh, gl = fh, fl
            fh, fl = eh, el
            lo = dl + t1l
            eh = (dh + t1h + (lo >> 32)) & _M
            el = lo & _M
            dh, dl = ch, cl
            ch, cl = bh, bl
            bh, bl = ah, al
            lo = t1l + S0l + mjl
            ah = (t1h + S0h + mjh + (lo >> 32)) & _M
            al = lo & _M
        lo = h[1] + al
        h[0] = (h[0] + ah + (lo >> 32)) & _M
        h[1] = lo & _M
        lo = h[3] + bl
        h[2] = (h[2] + bh + (lo >> 32)) & _M
        h[3] = lo & _M
        lo = h[5] + cl
        h[4] = (h[4] + ch + (lo >> 32)) & _M
        h[5] = lo & _M
        lo = h[7] + dl
        h[6] = (h[6] + dh + (lo >> 32)) & _M
        h[7] = lo & _M
        lo = h[9] + el
        h[8] = (h[8] + eh + (lo >> 32)) & _M
        h[9] = lo & _M
        lo = h[11] + fl
        h[10] = (h[10] + fh + (lo >> 32)) & _M
        h[11] = lo & _M
        lo = h[13] + gl
        h[12] = (h[12] + gh + (lo >> 32)) & _M
        h[13] = lo & _M
        lo = h[15] + hl
        h[14] = (h[14] + hh + (lo >> 32)) & _M
        h[15] = lo & _M

def sha512(data) -> bytes:
    return SHA512(data).digest()
