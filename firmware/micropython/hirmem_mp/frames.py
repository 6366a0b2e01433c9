"""COBS frames with CRC-32 (SPEC section 2).

wire = COBS(body || CRC32(body) LE) || 00. The receiver (FrameRx) collects bytes in
a buffer allocated once, resynchronises on every 00, and checks each frame in the
order of SPEC 2.4; damaged frames are counted by kind and dropped. Nothing is
allocated per received byte: feed() loops over the input and indexes preallocated
bytearrays; only a completed frame creates a memoryview for its handler.
"""

from binascii import crc32

from micropython import const

DEFAULT_MAX_FRAME = const(512)
MIN_MAX_FRAME = const(128)

E_TOO_SHORT = const(1)
E_TOO_LONG = const(2)
E_BAD_COBS = const(3)
E_BAD_CRC = const(4)
ERROR_NAMES = ("", "too-short", "too-long", "bad-cobs", "bad-crc")


def wire_bound(max_frame: int) -> int:
    """Bytes of one encoded frame without its delimiter (check 1 of SPEC 2.4)."""
    return max_frame + (max_frame + 253) // 254


def cobs_encode_into(src, n: int, dst, start: int = 0) -> int:
    """COBS of src[0:n] into dst[start:]; returns the end index. Canonical (SPEC 2.3)."""
    code_pos = start
    di = start + 1
    code = 1
    last = n - 1
    for i in range(n):
        b = src[i]
        if b == 0:
            dst[code_pos] = code
            code_pos = di
            di += 1
            code = 1
        else:
            dst[di] = b
            di += 1
            code += 1
            if code == 0xFF:
                dst[code_pos] = 0xFF
                if i == last:
                    return di
                code_pos = di
                di += 1
                code = 1
    dst[code_pos] = code
    return di


def cobs_decode_into(src, n: int, dst) -> int:
    """Decode src[0:n] into dst; the decoded length, or -1 for bad-cobs (or overflow)."""
    i = 0
    o = 0
    cap = len(dst)
    while i < n:
        c = src[i]
        if c == 0 or i + c > n:
            return -1
        i += 1
        end = i + c - 1
        if o + c - 1 > cap:
            return -2
        while i < end:
            b = src[i]
            if b == 0:
                return -1
            dst[o] = b
            o += 1
            i += 1
        if c != 0xFF and i < n:
            if o >= cap:
                return -2
            dst[o] = 0
            o += 1
    return o


def encode_frame_into(body, n: int, out, crc_buf=None) -> int:
    """Frame body[0:n] into out (at least wire_bound(n + 4) + 1 bytes); returns length.

    The CRC is appended to a copy of the body in crc_buf (a bytearray of at least
    n + 4 bytes; allocated here if not given).
    """
    if crc_buf is None:
        crc_buf = bytearray(n + 4)
    crc_buf[0:n] = body[0:n] if n != len(body) else body
    c = crc32(memoryview(crc_buf)[0:n])
    crc_buf[n] = c & 0xFF
    crc_buf[n + 1] = (c >> 8) & 0xFF
    crc_buf[n + 2] = (c >> 16) & 0xFF
    crc_buf[n + 3] = (c >> 24) & 0xFF
    end = cobs_encode_into(crc_buf, n + 4, out, 0)
    out[end] = 0
    return end + 1


def encode_frame(body: bytes) -> bytes:
    n = len(body)
    out = bytearray(wire_bound(n + 4) + 1)
    k = encode_frame_into(body, n, out)
    return bytes(out[0:k])


class FrameRx:
    """Streaming receiver with a buffer of one encoded frame (SPEC 2.6).

    on_frame(body) gets a memoryview of the body (valid until the next feed);
    on_error(kind) gets E_* for each damaged frame. Counters: good, bad, empty and
    one per error kind in errors[kind].
    """

    def __init__(self, max_frame: int, on_frame, on_error=None) -> None:
        self.max_frame = max_frame
        self.bound = wire_bound(max_frame)
        self.buf = bytearray(self.bound)
        self.dec = bytearray(max_frame + 1)
        self.mdec = memoryview(self.dec)
        self.n = 0
        self.skipping = False
        self.on_frame = on_frame
        self.on_error = on_error
        self.good = 0
        self.bad = 0
        self.empty = 0
        self.errors = [0, 0, 0, 0, 0]

    def set_max_frame(self, max_frame: int) -> None:
        """Lower the accepted size (never above the buffer's)."""
        if max_frame <= len(self.dec) - 1:
            self.max_frame = max_frame
            self.bound = wire_bound(max_frame)

    def reset(self) -> None:
        self.n = 0
        self.skipping = False

    def _error(self, kind: int) -> None:
        self.bad += 1
        self.errors[kind] += 1
        if self.on_error is not None:
            self.on_error(kind)

    def feed(self, data) -> None:
        buf = self.buf
        bound = self.bound
        n = self.n
        for b in data:
            if b != 0:
                if n < bound:
                    buf[n] = b
                    n += 1
                else:
                    self.skipping = True
                continue
            if self.skipping:
                self.skipping = False
                n = 0
                self._error(E_TOO_LONG)
                continue
            if n == 0:
                self.empty += 1
                continue
            self.n = 0
            self._frame(n)
            n = 0
        self.n = n

    def _frame(self, n: int) -> None:
        k = cobs_decode_into(self.buf, n, self.dec)
        if k == -1:
            self._error(E_BAD_COBS)
            return
        if k == -2:
            self._error(E_TOO_LONG)
            return
        if k < 5:
            self._error(E_TOO_SHORT)
            return
        if k > self.max_frame:
            self._error(E_TOO_LONG)
            return
        d = self.dec
        want = d[k - 4] | (d[k - 3] << 8) | (d[k - 2] << 16) | (d[k - 1] << 24)
        body = self.mdec[0 : k - 4]
        if crc32(body) != want:
            self._error(E_BAD_CRC)
            return
        self.good += 1
        self.on_frame(body)
