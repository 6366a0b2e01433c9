"""Write the seed corpora of the C fuzz targets (firmware/fuzz/) from protocol/vectors.

    python tools/fuzz_corpus.py                      # build/fuzz/corpus/<target>/
    python tools/fuzz_corpus.py --out DIR --target fuzz_msg

Seeds are derived from frames.json, messages.json and packs.json every time (nothing
binary is committed): one file per seed, named by the SHA-1 of its bytes as libFuzzer
names its own units. Each target's directory is emptied first, so a seed dropped from
the vectors does not linger. The input formats are those the targets document:

- fuzz_cbor: one CBOR item (message bodies, COSE packs and their protected header and
  payload, plus a few hand-made edge items: every head size, depth 16, map order, UTF-8)
- fuzz_frame: a byte stream off the wire (every frame vector alone, the vector streams,
  every message frame in a row, the frames of the vectors' bodies cut in pieces)
- fuzz_msg: one message body (valid and invalid vectors, and the bodies the vectors
  cut in pieces as inner bodies: seq 0, ack 0)
- fuzz_pack: a knowledge pack (COSE_Sign1) as pushed down to a device: every pack of
  packs.json (the accepted knowledge packs and all the refused ones), their payloads
  (the target signs an input that starts like a payload itself), and the knowledge
  payloads written field by field for its mode 'K' (as they are, from another
  signer, with over-long texts, with too many items)
- fuzz_agent: a script of operations (see firmware/fuzz/fuzz_agent.c): after a valid
  handshake, every valid and invalid message body wrapped in a frame, every message
  frame and frame stream as raw line bytes, host messages built by the target (each
  kind, captures up to a pack offer and its result, every knowledge pack of
  packs.json pushed), clock advances through the retransmission timeouts, resets,
  damaged frames; and a script without the handshake feeding the vector HELLO_ACK
"""

from __future__ import annotations

import argparse
import hashlib
import json
import struct
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "host"))

from hirmem.protocol import cbor  # noqa: E402
from hirmem.protocol.messages import decode_message, encode_message  # noqa: E402

VECTORS = ROOT / "protocol" / "vectors"
OUT = ROOT / "build" / "fuzz" / "corpus"
# inputs the fuzzer once found failing, kept as seeds so every run replays them
REGRESSIONS = ROOT / "firmware" / "fuzz" / "regressions"
TARGETS = ("fuzz_agent", "fuzz_cbor", "fuzz_frame", "fuzz_msg", "fuzz_pack")


def _load(vectors: Path, name: str) -> Any:
    with open(vectors / name, encoding="utf-8") as f:
        return json.load(f)


def _hex(items: Iterable[dict[str, Any]], key: str) -> list[bytes]:
    return [bytes.fromhex(item[key]) for item in items if isinstance(item.get(key), str)]


def _cose_parts(pack: bytes) -> tuple[bytes, bytes] | None:
    """The protected header and the payload of a COSE_Sign1 pack, if it decodes."""
    try:
        item = cbor.decode(pack)
    except Exception:  # a deliberately broken pack (truncated, ...)
        return None
    value = getattr(item, "value", None)
    if not isinstance(value, list) or len(value) != 4:
        return None
    protected, payload = value[0], value[2]
    if not isinstance(protected, bytes) or not isinstance(payload, bytes):
        return None
    return protected, payload


def _cbor_edges() -> list[bytes]:
    """Small items at the edges of SPEC §3 that the vectors do not show."""
    heads = [
        bytes([0x17]),
        bytes([0x18, 0x18]),
        bytes([0x19, 0x01, 0x00]),
        bytes([0x1A, 0x00, 0x01, 0x00, 0x00]),
        bytes([0x1B, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00]),
        bytes([0x3B]) + b"\xff" * 8,
    ]
    return [
        *heads,
        bytes([0x81] * 16) + b"\x00",  # depth 16: accepted
        bytes([0x81] * 17) + b"\x00",  # depth 17: refused
        bytes.fromhex("a3") + b"\x01\x00" + b"\x20\x00" + b"\x41\x00\x00",  # keys in order
        bytes.fromhex("a2") + b"\x61a\x00" + b"\x62aa\x00",  # text keys, prefix first
        b"\x6b" + "h\u00e9\u20ac\U0001f600".encode(),  # 1- to 4-byte UTF-8
        bytes.fromhex("d2834040f6"),  # tag 18 around an array
        bytes.fromhex("83f4f5f6"),
    ]


def _knowledge_seed(payload: bytes, flags: int = 0, stretch: int = 0, extra: int = 0) -> bytes:
    """fuzz_pack mode C ('K'): a knowledge payload of the vectors, field by field.

    flags as fuzz_pack.c's structured() reads them; stretch lengthens every object
    text by that many bytes (beyond HM_KNOWLEDGE_TEXT: deferred), extra repeats the
    first item that many more times (beyond HM_KNOWLEDGE_CAPACITY: deferred).
    """
    value = cbor.decode(payload)
    items = list(value[6])
    items += items[:1] * extra
    out = bytearray(b"K" + bytes([value[3] & 0xFF, flags, len(items) % 16]))
    for triple_id, subject, predicate, obj, confidence in items:
        texts = [subject.encode(), predicate.encode(), (obj + "~" * stretch).encode()]
        out += struct.pack("<I", confidence) + triple_id
        for text in texts:
            out += bytes([len(text) % 64]) + text[:63]
    return bytes(out)


# fuzz_agent.c: opcodes (op % 11) and the script header.
A_RAW, A_ADVANCE, A_JUMP, A_CAPTURE, A_RESET, A_BODY = 0, 1, 2, 3, 4, 5
A_HANDSHAKE, A_MESSAGE, A_ACKALL, A_DAMAGED, A_LOG = 6, 7, 8, 9, 10


def _agent_config(offer_threshold: int = 0, offer_period: int = 0, status_period: int = 0) -> bytes:
    """do_init's block: caps, max_frame, window, max_message, ring, threshold, periods,
    flags, boot (all capabilities, 512-byte frames, window 4, 4 KB messages, boot 7)."""
    return struct.pack(
        "<BHBHBBHHBB", 0x1F, 512, 4, 4096, 0, offer_threshold, offer_period, status_period, 0, 7
    )


def _agent_script(ops: Iterable[bytes], handshake: bool = True, **config: int) -> bytes:
    # clock start, config, mode (bit 0: handshake: max_frame 512, window 4, defaults)
    head = struct.pack("<I", 1000) + _agent_config(**config)
    if handshake:
        return head + b"\x01" + struct.pack("<HBBB", 0, 3, 0, 0) + b"".join(ops)
    return head + b"\x00" + b"".join(ops)


def _agent_body(body: bytes, chunking: int = 0) -> bytes:
    return bytes([A_BODY]) + struct.pack("<HB", len(body), chunking) + body


def _agent_raw(data: bytes, chunking: int = 0) -> bytes:
    return bytes([A_RAW]) + struct.pack("<HB", len(data), chunking) + data


def _agent_advance(ms: int, step: int = 1) -> bytes:
    return bytes([A_ADVANCE]) + struct.pack("<HB", ms, step - 1)


def _agent_capture(payload: bytes, source: bytes, confidence: int = 0xE000) -> bytes:
    """A host CAPTURE built by the target (kind 0), the host's seq and ack."""
    return (
        bytes([A_MESSAGE, 0, 0, 0, len(source)])
        + struct.pack("<H", len(payload))
        + source
        + payload
        + bytes(range(32))  # context
        + struct.pack("<HIII", 0, confidence, 0xC000, 0x8000)
    )


def _agent_message(kind: int, fields: bytes = b"") -> bytes:
    return bytes([A_MESSAGE, kind, 0, 0]) + fields


def _agent_seeds(
    messages: dict[str, Any], frames: dict[str, Any], packs: list[bytes]
) -> list[bytes]:
    valid = _hex(messages["valid"], "body")
    invalid = _hex(messages["invalid"], "body")
    frame_bytes = b"\x00" + b"".join(_hex(messages["valid"], "frame"))
    ack_all = bytes([A_ACKALL])
    scripts = [
        _agent_script(_agent_body(b, 3) for b in valid),
        _agent_script(_agent_body(b) for b in invalid),
        _agent_script([_agent_raw(frame_bytes, 7)]),
        _agent_script([_agent_raw(frame_bytes)], handshake=False),
        *(_agent_script([_agent_raw(bytes.fromhex(s["stream"]), 5)]) for s in frames["streams"]),
        # every kind of host message, acknowledged, with time passing
        _agent_script(
            [
                _agent_capture(b"temperature 21.5 C", b"sensor/t"),
                _agent_message(1, bytes([1, 0, 0])),  # PACK_RESULT n=1 accepted
                _agent_message(3),  # STATUS_REQUEST
                _agent_message(4, bytes([3, 0, 0])),  # ERROR malformed ref 0
                _agent_message(5),  # ACK
                _agent_advance(30),
                ack_all,
                _agent_message(6, struct.pack("<HBB", 0, 3, 0)),  # HELLO_ACK again
            ]
        ),
        # captures up to a pack offer (threshold 2), its fragments acknowledged, a result
        _agent_script(
            [
                *(_agent_capture(bytes([65 + i]) * 200, b"cam/0") for i in range(4)),
                _agent_advance(30),
                ack_all,
                _agent_advance(300, 10),
                ack_all,
                _agent_advance(300, 10),
                ack_all,
                _agent_message(1, bytes([1, 0, 0])),
                ack_all,
            ],
            offer_threshold=2,
        ),
        # nobody answers: retransmissions until the session is lost, HELLO again
        _agent_script(
            [
                _agent_capture(b"x" * 40, b"s"),
                _agent_advance(40000, 64),
                bytes([A_HANDSHAKE]) + struct.pack("<HBBB", 0, 3, 0, 0),
            ],
            status_period=1000,
        ),
        # a damaged frame, a reset, own captures, a log line, a clock jump
        _agent_script(
            [
                bytes([A_DAMAGED]) + struct.pack("<H", len(valid[0])) + valid[0] + b"\x01\x00",
                bytes([A_CAPTURE])
                + struct.pack("<HB", 5, 3)
                + b"helloabc"
                + bytes(32)
                + b"\x00"
                + struct.pack("<HIII", 0, 0x10000, 0x8000, 0x4000),
                bytes([A_LOG, 1, 5]) + b"hello",
                bytes([A_JUMP]) + struct.pack("<I", 0xFFFFF000),
                _agent_advance(5000, 50),
                bytes([A_RESET]) + _agent_config(),
            ]
        ),
    ]
    # every knowledge pack pushed (fragmented where it does not fit)
    scripts += [
        _agent_script([_agent_message(2, struct.pack("<H", len(p)) + p), _agent_advance(30)])
        for p in packs
    ]
    return scripts


def seeds(vectors: Path = VECTORS) -> dict[str, list[bytes]]:
    """Every target's seeds, derived from the vector files."""
    frames = _load(vectors, "frames.json")
    messages = _load(vectors, "messages.json")
    packs = _load(vectors, "packs.json")

    valid_bodies = _hex(messages["valid"], "body")
    invalid_bodies = _hex(messages["invalid"], "body")
    inner_bodies = [
        encode_message(decode_message(body).message, inner=True)
        for body in _hex(messages["pieces"], "body")
    ]
    piece_frames = [b"".join(bytes.fromhex(f) for f in pc["frames"]) for pc in messages["pieces"]]
    pack_bytes = _hex(packs["cases"], "pack")
    parts = [p for p in map(_cose_parts, pack_bytes) if p is not None]
    payloads = [payload for _, payload in parts]
    knowledge = [p for p in dict.fromkeys(payloads) if p[:2] == b"\x87\x02"]
    structured = [_knowledge_seed(p) for p in knowledge]
    if knowledge:
        structured += [
            _knowledge_seed(knowledge[0], flags=1),
            _knowledge_seed(knowledge[0], stretch=40),
            _knowledge_seed(knowledge[0], extra=8),
        ]

    frame_wires = _hex(frames["valid"], "wire") + _hex(frames["invalid"], "wire")
    frame_seeds = [
        *frame_wires,
        *_hex(frames["streams"], "stream"),
        *(enc + b"\x00" for enc in _hex(frames["cobs"], "encoded")),
        b"".join(_hex(frames["valid"], "wire")),
        b"\x00" + b"".join(_hex(messages["valid"], "frame")),
        *piece_frames,
    ]

    cbor_seeds = [
        *valid_bodies,
        *invalid_bodies,
        *inner_bodies,
        *pack_bytes,
        *(protected for protected, _ in parts),
        *payloads,
        *_cbor_edges(),
    ]
    knowledge_packs = [
        bytes.fromhex(case["pack"]) for case in packs["cases"] if case.get("kind") == "knowledge"
    ]
    corpus = {
        "fuzz_agent": _agent_seeds(messages, frames, knowledge_packs),
        "fuzz_cbor": cbor_seeds,
        "fuzz_frame": frame_seeds,
        "fuzz_msg": [*valid_bodies, *invalid_bodies, *inner_bodies],
        "fuzz_pack": [*pack_bytes, *payloads, *structured],
    }
    for name, items in corpus.items():
        found = REGRESSIONS / name
        if found.is_dir():
            items += [p.read_bytes() for p in sorted(found.iterdir()) if p.is_file()]
    return {name: list(dict.fromkeys(items)) for name, items in corpus.items()}  # dedupe


def write(out: Path, corpus: dict[str, list[bytes]]) -> dict[str, int]:
    """Write each target's seeds to out/<target>/ (emptied first); return the counts."""
    counts: dict[str, int] = {}
    for name, items in corpus.items():
        directory = out / name
        directory.mkdir(parents=True, exist_ok=True)
        for old in directory.iterdir():
            if old.is_file():
                old.unlink()
        for item in items:
            (directory / hashlib.sha1(item).hexdigest()).write_bytes(item)
        counts[name] = len(items)
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vectors", type=Path, default=VECTORS, help="protocol/vectors")
    parser.add_argument("--out", type=Path, default=OUT, help="corpus root (%(default)s)")
    parser.add_argument(
        "--target", action="append", choices=TARGETS, help="only this target (repeatable)"
    )
    args = parser.parse_args(argv)
    corpus = seeds(args.vectors)
    if args.target:
        corpus = {name: corpus[name] for name in args.target}
    for name, count in write(args.out, corpus).items():
        print(f"{name}: {count} seeds in {args.out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
