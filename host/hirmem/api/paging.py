"""Opaque cursors: a page answers ``items`` and ``next`` (null on the last page).

A cursor is base64url of ``<kind>:<position>``; one of another listing, or altered, is
refused with a problem (400) rather than read as the start.
"""

from __future__ import annotations

import base64
import binascii

from hirmem.api.problems import Problem

MAX_LIMIT = 500


def encode(kind: str, position: str | int) -> str:
    return base64.urlsafe_b64encode(f"{kind}:{position}".encode()).rstrip(b"=").decode()


def decode(kind: str, cursor: str | None) -> str | None:
    """The position a cursor of ``kind`` holds; None for no cursor (the first page)."""
    if not cursor:
        return None
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        text = ""
    found, sep, position = text.partition(":")
    if not sep or found != kind:
        raise Problem(
            400, "bad-cursor",
            f"cursor {cursor!r} is not a cursor of this listing ({kind}); give the `next` "
            "value of the previous page, or none for the first",
        )  # fmt: skip
    return position


def decode_int(kind: str, cursor: str | None) -> int:
    position = decode(kind, cursor)
    if position is None:
        return 0
    if not position.isdigit():
        raise Problem(400, "bad-cursor", f"cursor {cursor!r} is damaged")
    return int(position)
