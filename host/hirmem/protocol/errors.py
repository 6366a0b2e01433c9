"""The one error family hirmem raises for bad input.

Every decoding or verification failure is a :class:`HirmemError` whose message
says what was wrong (what was expected and what arrived). Library exceptions
(cbor2, cryptography, struct) never escape a hirmem decoder.
"""

from __future__ import annotations


class HirmemError(Exception):
    """Base class: bad input or a refused operation, with a message for people."""


class CborError(HirmemError):
    """A byte string is not deterministic CBOR of the kinds hirmem uses."""


class FrameError(HirmemError):
    """A frame on the wire is damaged; ``kind`` names the damage."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


class MessageError(HirmemError):
    """A frame body is valid CBOR but not a valid hirmem message."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


class PackError(HirmemError):
    """A signed pack was refused; ``reason`` is the wire refusal code.

    ``pack_id`` and ``seq`` are the pack's when the refusal came after its payload was
    read (SPEC §8.4 step 9 on: wrong-signer … bad-record), as PACK_RESULT must carry
    them (§5.7); otherwise 16 zero bytes and 0.
    """

    def __init__(
        self, reason: int, detail: str, pack_id: bytes = bytes(16), seq: int = 0
    ) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.pack_id = pack_id
        self.seq = seq
