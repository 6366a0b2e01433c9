"""memory_text (what the embedder sees) against its plain definition — the payload read
as UTF-8 (leniently), then the structured parts that are not empty, one space apart,
the whole stripped — over thousands of payloads and parts, empty ones and white space
among them (its fast path for three parts must not change a single text)."""

from __future__ import annotations

import random

from hirmem.memory.model import memory_text


def _plain(payload: bytes, subject: str, attribute: str, value: str) -> str:
    body = payload.decode("utf-8", errors="replace")
    extra = " ".join(p for p in (subject, attribute, value) if p)
    return f"{body} {extra}".strip() if extra else body


def test_memory_text_is_the_payload_and_the_parts_that_are_there() -> None:
    rng = random.Random(77)
    pieces = ["", "", " ", "temp0", "t", "21.5", "door", " state ", "\t", "\u00e9t\u00e9", "a b"]
    payloads = [b"", b" ", b'{"t": 21.5}', b" x \n", b"\xff\xfe", "caf\u00e9".encode(), b"note"]
    seen_fast = 0
    for _ in range(5000):
        payload = rng.choice(payloads) + rng.choice(payloads)
        parts = (rng.choice(pieces), rng.choice(pieces), rng.choice(pieces))
        assert memory_text(payload, *parts) == _plain(payload, *parts), (payload, parts)
        seen_fast += all(parts)
    assert seen_fast > 500
