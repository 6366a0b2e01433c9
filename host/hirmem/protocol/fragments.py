"""Carrying a message larger than one frame as FRAGMENT messages (SPEC.md §6).

The inner message is a complete body encoded with seq 0 and ack 0; each
fragment is a sequenced message of its own, so the link's retransmission keeps
them in order. ``msg_id`` is the seq of the first fragment, ``offset`` the
position of the chunk in the inner body, ``total`` its length.
"""

from __future__ import annotations

from hirmem.protocol.errors import MessageError
from hirmem.protocol.frames import CRC_SIZE
from hirmem.protocol.messages import U32, ErrorCode, Fragment, encode_message

# The largest FRAGMENT envelope around an empty chunk: every integer at its widest
# (5 bytes) plus a 3-byte head for the chunk's length (chunks stay below 65536 bytes).
_OVERHEAD = len(encode_message(Fragment(U32, U32, U32, b""), U32, U32)) - 1 + 3


def chunk_size(max_frame: int) -> int:
    """Bytes of inner body that fit in one fragment frame of ``max_frame``."""
    size = max_frame - CRC_SIZE - _OVERHEAD
    if size <= 0:
        raise ValueError(f"max_frame {max_frame} leaves no room for a fragment")
    return size


def fits(body: bytes, max_frame: int) -> bool:
    return len(body) + CRC_SIZE <= max_frame


def split(inner: bytes, max_frame: int, first_seq: int) -> list[tuple[int, Fragment]]:
    """Cut an inner body into (seq, fragment) pairs numbered from ``first_seq``."""
    step = chunk_size(max_frame)
    return [
        (first_seq + n, Fragment(first_seq, offset, len(inner), inner[offset : offset + step]))
        for n, offset in enumerate(range(0, len(inner), step))
    ]


class Reassembler:
    """One reassembly at a time, bounded by ``limit`` (the max_message we announced)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._msg_id: int | None = None
        self._total = 0
        self._parts: list[bytes] = []
        self._have = 0

    @property
    def busy(self) -> bool:
        return self._msg_id is not None

    def reset(self) -> None:
        self._msg_id, self._total, self._parts, self._have = None, 0, [], 0

    def add(self, fragment: Fragment) -> bytes | None:
        """Take the next fragment; return the inner body once complete.

        Raises MessageError(TOO_LARGE) or MessageError(REASSEMBLY); the partial
        message is discarded in both cases.
        """
        if fragment.offset == 0:
            if self._msg_id is not None:
                stale = self._msg_id
                self.reset()
                raise MessageError(
                    ErrorCode.REASSEMBLY,
                    f"message {fragment.msg_id} started while message {stale} was incomplete",
                )
            if fragment.total > self.limit:
                raise MessageError(
                    ErrorCode.TOO_LARGE,
                    f"message of {fragment.total} bytes exceeds the reassembly limit {self.limit}",
                )
            self._msg_id, self._total = fragment.msg_id, fragment.total
        elif (fragment.msg_id, fragment.total, fragment.offset) != (
            self._msg_id,
            self._total,
            self._have,
        ):
            want = (self._msg_id, self._total, self._have)
            self.reset()
            raise MessageError(
                ErrorCode.REASSEMBLY,
                f"fragment (msg {fragment.msg_id}, total {fragment.total}, offset "
                f"{fragment.offset}) does not continue (msg, total, offset) = {want}",
            )
        if not fragment.chunk or self._have + len(fragment.chunk) > self._total:
            self.reset()
            raise MessageError(ErrorCode.REASSEMBLY, "fragment chunk is empty or overruns total")
        self._parts.append(fragment.chunk)
        self._have += len(fragment.chunk)
        if self._have < self._total:
            return None
        inner = b"".join(self._parts)
        self.reset()
        return inner
