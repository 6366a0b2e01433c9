"""Fragmentation (SPEC 6.8): FRAGMENT bodies out, one reassembly in.

The reassembly buffer is allocated once (max_message bytes) and reused.
"""

from micropython import const

from . import msg

OVERHEAD = const(35)  # CRC + the largest FRAGMENT envelope around a chunk


def chunk_size(max_frame: int) -> int:
    return max_frame - OVERHEAD if max_frame > OVERHEAD else 0


def count(n: int, max_frame: int) -> int:
    c = chunk_size(max_frame)
    return (n + c - 1) // c if c and n else 0


def fragment(inner, max_frame: int, index: int, first_seq: int, ack: int) -> bytes:
    """FRAGMENT body number `index` of the inner body."""
    c = chunk_size(max_frame)
    off = index * c
    end = min(off + c, len(inner))
    return msg.encode(msg.FRAGMENT, first_seq + index, ack,
                      (first_seq, off, len(inner), bytes(inner[off:end])))


class Reassembler:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.buf = bytearray(limit)
        self.busy = False
        self.msg_id = 0
        self.total = 0
        self.have = 0

    def reset(self) -> None:
        self.busy = False

    def add(self, msg_id: int, offset: int, total: int, chunk: bytes) -> int:
        """0 while more is due, else the inner length (bytes at buf); raises
        msg.MsgError(E_TOO_LARGE or E_REASSEMBLY, msg_id)."""
        if offset == 0:
            if self.busy:
                self.busy = False
                raise msg.MsgError(msg.E_REASSEMBLY, msg_id, "new message during reassembly")
            if total > self.limit:
                raise msg.MsgError(msg.E_TOO_LARGE, msg_id, "message above max_message")
            self.busy = True
            self.msg_id = msg_id
            self.total = total
            self.have = 0
        elif not self.busy or (msg_id, total, offset) != (self.msg_id, self.total, self.have):
            self.busy = False
            raise msg.MsgError(msg.E_REASSEMBLY, msg_id, "fragment does not continue")
        n = len(chunk)
        if n == 0 or offset + n > total:
            self.busy = False
            raise msg.MsgError(msg.E_REASSEMBLY, msg_id, "empty or overrunning chunk")
        self.buf[offset : offset + n] = chunk
        self.have = offset + n
        if self.have == total:
            self.busy = False
            return total
        return 0
