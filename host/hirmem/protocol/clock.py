"""Wall-clock time as the protocol counts it: integer milliseconds since the Unix epoch
(SPEC §1.6), the one definition every layer reads."""

from __future__ import annotations

import time

__all__ = ["now_ms"]


def now_ms() -> int:
    """Milliseconds since the Unix epoch, now."""
    return time.time_ns() // 1_000_000
