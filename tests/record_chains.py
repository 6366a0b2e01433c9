"""Device records chained as a device writes them, for the memory tests: one record per
payload body, numbered from ``first`` in one boot, a second apart, GREEN flags."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from hirmem.protocol.records import Record, record_id

T0 = 1_790_000_000.0


def chained(device: bytes, first: int, bodies: Iterable[dict[str, Any]], link: bytes,
            boot: int = 1) -> list[Record]:  # fmt: skip
    """The records of ``bodies`` (JSON payloads), the first continuing ``link``."""
    out = []
    for k, body in enumerate(bodies, first):
        rec = Record.capture(record_id(device, boot, k), json.dumps(body).encode(), "cam",
                             int(T0 * 1000) + 1000 * k, bytes(32), 0x0FFF, 0x10000, 0xE666,
                             0x8000, link)  # fmt: skip
        out.append(rec)
        link = rec.hash
    return out
