"""Every committed wire vector (protocol/vectors/*.json) round-trips through the host codec.

The vectors are what the C core and the MicroPython agent must reproduce bit for bit, so
the host has to agree with each of them exactly, and tools/gen_vectors.py must still
produce the committed files.
"""

from __future__ import annotations

import hashlib
import random
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from conftest import VECTORS, load_vectors, vector_params
from hirmem.protocol import cbor, fixedpoint, gate, identity, pieces
from hirmem.protocol.errors import FrameError, MessageError, PackError
from hirmem.protocol.frames import (
    FrameDecoder,
    cobs_decode,
    cobs_encode,
    crc32,
    decode_frame,
    encode_frame,
)
from hirmem.protocol.keys import PublicKey, SigningKey, key_id
from hirmem.protocol.messages import (
    Ack,
    Capture,
    Envelope,
    KnowledgeResult,
    Log,
    Message,
    PackOffer,
    StatusRequest,
    decode_message,
    encode_message,
    from_json,
    to_json,
)
from hirmem.protocol.packs import ChainHead, PackKind, Reason, TrustedKey, verify_pack
from hirmem.protocol.records import GENESIS, Record, record_hash

Case = dict[str, Any]
Split = Callable[[bytes], list[bytes]]

# ---- frames.json ---------------------------------------------------------------------------


@pytest.mark.parametrize("case", vector_params("frames", "valid"))
def test_frame_encoding_reproduces_the_wire_bytes_and_crc(case: Case) -> None:
    body = bytes.fromhex(case["body"])
    assert f"{crc32(body):08x}" == case["crc32"]
    assert encode_frame(body).hex() == case["wire"]


@pytest.mark.parametrize("case", vector_params("frames", "valid"))
def test_frame_decoding_gives_back_the_body(case: Case) -> None:
    body = bytes.fromhex(case["body"])
    wire = bytes.fromhex(case["wire"])
    assert decode_frame(wire) == body
    assert decode_frame(wire[:-1]) == body  # the delimiter is optional for decode_frame
    # a receiver whose buffer holds exactly body + CRC (at least the floor) still decodes it
    assert decode_frame(wire, max(128, len(body) + 4)) == body


@pytest.mark.parametrize("case", vector_params("frames", "invalid"))
def test_damaged_frame_is_refused_with_the_named_damage(case: Case) -> None:
    with pytest.raises(FrameError) as caught:
        decode_frame(bytes.fromhex(case["wire"]), case["max_frame"])
    assert caught.value.kind == case["error"]


def _events(decoder: FrameDecoder, chunks: list[bytes]) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for chunk in chunks:
        for event in decoder.feed(chunk):
            if isinstance(event, FrameError):
                out.append({"error": event.kind})
            else:
                out.append({"body": event.hex()})
    return out


def _whole(stream: bytes) -> list[bytes]:
    return [stream]


def _byte_by_byte(stream: bytes) -> list[bytes]:
    return [stream[i : i + 1] for i in range(len(stream))]


def _random_chunks(seed: int) -> Split:
    def split(stream: bytes) -> list[bytes]:
        rng = random.Random(seed)
        chunks: list[bytes] = []
        pos = 0
        while pos < len(stream):
            size = rng.choice((0, 1, 2, 3, 5, 8, 13, 21, 64, 300))  # 0: an empty read
            chunks.append(stream[pos : pos + size])
            pos += size
        return chunks

    return split


_SPLITS = [
    pytest.param(_whole, id="whole"),
    pytest.param(_byte_by_byte, id="one byte at a time"),
    *(pytest.param(_random_chunks(seed), id=f"random chunks seed {seed}") for seed in range(8)),
]


@pytest.mark.parametrize("split", _SPLITS)
@pytest.mark.parametrize("case", vector_params("frames", "streams"))
def test_stream_decoder_yields_the_expected_frames_however_the_bytes_arrive(
    case: Case, split: Split
) -> None:
    stream = bytes.fromhex(case["stream"])
    decoder = FrameDecoder(case["max_frame"])
    assert _events(decoder, split(stream)) == case["expected"]


@pytest.mark.parametrize("case", vector_params("frames", "streams"))
def test_stream_decoder_counts_every_frame_and_every_error(case: Case) -> None:
    stream = bytes.fromhex(case["stream"])
    decoder = FrameDecoder(case["max_frame"])
    decoder.feed(stream)
    expected: list[dict[str, str]] = case["expected"]
    errors = Counter(e["error"] for e in expected if "error" in e)
    stats = decoder.stats
    assert stats.errors == dict(errors)
    assert stats.bad == sum(errors.values())
    assert stats.frames == sum(1 for e in expected if "body" in e)
    # every delimiter ends either a reported frame or an empty one
    assert stats.empty == stream.count(0) - len(expected)
    assert stats.bytes_in == len(stream)


# ---- messages.json -------------------------------------------------------------------------


@pytest.mark.parametrize("case", vector_params("messages", "valid"))
def test_message_encodes_to_the_vector_body(case: Case) -> None:
    message = from_json(case["message"])
    assert encode_message(message, case["seq"], case["ack"]).hex() == case["body"]
    assert to_json(message) == case["message"]


@pytest.mark.parametrize("case", vector_params("messages", "valid"))
def test_vector_body_decodes_to_the_same_message_seq_and_ack(case: Case) -> None:
    envelope = decode_message(bytes.fromhex(case["body"]))
    assert envelope == Envelope(case["seq"], case["ack"], from_json(case["message"]))


@pytest.mark.parametrize("case", vector_params("messages", "valid"))
def test_message_frame_is_the_body_framed_for_the_wire(case: Case) -> None:
    body = bytes.fromhex(case["body"])
    if case["frame"] is None:  # too large for one frame: it travels in frame pieces
        assert len(body) + 4 > 512
        with pytest.raises(FrameError, match="too-long"):
            encode_frame(body)
        return
    assert encode_frame(body).hex() == case["frame"]
    assert decode_frame(bytes.fromhex(case["frame"])) == body


@pytest.mark.parametrize("case", vector_params("messages", "pieces"))
def test_a_large_message_splits_into_the_vector_pieces_and_joins(case: Case) -> None:
    body = bytes.fromhex(case["body"])
    max_frame = case["max_frame"]
    assert [p.hex() for p in pieces.split(body, max_frame)] == case["pieces"]
    joiner = pieces.Joiner(65536)
    result = None
    for n, frame in enumerate(case["frames"]):
        piece = decode_frame(bytes.fromhex(frame), max_frame)
        assert piece.hex() == case["pieces"][n] and len(piece) + 4 <= max_frame
        result = joiner.take(piece)
        assert (result is None) == (n < len(case["frames"]) - 1)
    assert result == body
    envelope = decode_message(body)
    assert (envelope.seq, envelope.ack) == (3, 2) and isinstance(envelope.message, PackOffer)


@pytest.mark.parametrize("case", vector_params("frames", "cobs"))
def test_cobs_vector(case: Case) -> None:
    data, encoded = bytes.fromhex(case["data"]), bytes.fromhex(case["encoded"])
    assert cobs_encode(data) == encoded
    assert cobs_decode(encoded) == data


@pytest.mark.parametrize("case", vector_params("messages", "invalid"))
def test_invalid_body_is_refused_with_the_error_code_to_answer(case: Case) -> None:
    with pytest.raises(MessageError) as caught:
        decode_message(bytes.fromhex(case["body"]))
    assert caught.value.code == case["error_code"]


# The invalid bodies that a message object could be asked to produce: encode_message
# promises that "bad bodies never reach the wire", so it must refuse each one.
_ENCODABLE_INVALID: dict[str, tuple[Message, int, int]] = {
    "field of the wrong type": (Log("1", "text"), 0, 7),  # type: ignore[arg-type]
    "unsequenced type with seq 5": (Ack(), 5, 4),
    "byte string of the wrong size": (KnowledgeResult(b"short", 0, 0, 0), 4, 3),
    "Q16.16 above one": (Capture("s", b"", bytes(32), 0, 0x10001, 0, 0), 2, 1),
}


@pytest.mark.parametrize(
    ("name", "message", "seq", "ack"),
    [pytest.param(name, *args, id=name) for name, args in _ENCODABLE_INVALID.items()]
    + [
        pytest.param(
            "sequenced type with seq 0",
            StatusRequest(),
            0,
            4,
            id="sequenced type with seq 0",
        )
    ],
)
def test_encoder_refuses_to_produce_a_body_the_decoder_refuses(
    name: str, message: Message, seq: int, ack: int
) -> None:
    vector = {c["name"]: c for c in load_vectors("messages")["invalid"]}[name]
    with pytest.raises(MessageError) as caught:
        encode_message(message, seq, ack)
    assert caught.value.code == vector["error_code"]


# ---- fixed_point.json and gate.json --------------------------------------------------------


def _ids(cases: list[Case], *keys: str) -> list[Any]:
    return [pytest.param(c, id=",".join(f"{k}={c[k]:#x}" for k in keys)) for c in cases]


@pytest.mark.parametrize("case", _ids(load_vectors("fixed_point")["mul"], "a", "b"))
def test_q_mul_rounds_half_up_like_the_vector(case: Case) -> None:
    assert fixedpoint.q_mul(case["a"], case["b"]) == case["result"]


@pytest.mark.parametrize("case", _ids(load_vectors("fixed_point")["isqrt_round"], "n"))
def test_isqrt_round_matches_the_vector(case: Case) -> None:
    assert fixedpoint.isqrt_round(case["n"]) == case["result"]


@pytest.mark.parametrize("case", _ids(load_vectors("fixed_point")["sqrt"], "a"))
def test_q_sqrt_matches_the_vector(case: Case) -> None:
    assert fixedpoint.q_sqrt(case["a"]) == case["result"]


@pytest.mark.parametrize("case", _ids(load_vectors("fixed_point")["sqrt_mul"], "a", "b"))
def test_q_sqrt_mul_matches_the_vector(case: Case) -> None:
    assert fixedpoint.q_sqrt_mul(case["a"], case["b"]) == case["result"]


@pytest.mark.parametrize(
    "case", _ids(load_vectors("gate")["cases"], "flags", "quality", "provenance")
)
def test_gate_reproduces_every_score_verdict_and_disposition(case: Case) -> None:
    g = gate.evaluate(case["flags"], case["quality"], case["provenance"])
    got = {
        "flags": g.flags, "quality": case["quality"], "provenance": case["provenance"],
        "h": g.h, "i": g.i, "r": g.r, "f": g.f, "c": g.c, "rn": g.rn, "w": g.w,
        "verdict": int(g.verdict), "hard": int(g.hard), "state": int(g.disposition),
    }  # fmt: skip
    assert got == case


# ---- records.json --------------------------------------------------------------------------

_CHAIN: list[Case] = load_vectors("records")["chain"]
_CHAIN_PARAMS = [pytest.param(i, id=f"record {i}") for i in range(len(_CHAIN))]


@pytest.mark.parametrize("index", _CHAIN_PARAMS)
def test_record_hash_is_sha256_of_its_hash_input(index: int) -> None:
    case = _CHAIN[index]
    hash_input = bytes.fromhex(case["hash_input"])
    assert hashlib.sha256(hash_input).hexdigest() == case["hash"]
    record = Record.from_wire(cbor.decode(bytes.fromhex(case["wire"])))
    r = record
    parts = (r.id, r.payload, r.source, r.timestamp, r.context, r.prev_hash)
    assert cbor.decode(hash_input) == list(parts)
    assert record_hash(*parts).hex() == case["hash"]


@pytest.mark.parametrize("index", _CHAIN_PARAMS)
def test_record_wire_decodes_checks_and_encodes_back(index: int) -> None:
    case = _CHAIN[index]
    wire = bytes.fromhex(case["wire"])
    record = Record.from_wire(cbor.decode(wire))
    assert record.hash.hex() == case["hash"]
    assert record.prev_hash.hex() == case["prev_hash"]
    record.check(bytes.fromhex(case["prev_hash"]))
    assert cbor.encode(record.to_wire()) == wire


def test_records_form_one_chain_from_genesis() -> None:
    link = GENESIS
    for case in _CHAIN:
        record = Record.from_wire(cbor.decode(bytes.fromhex(case["wire"])))
        record.check(link)
        link = record.hash
    assert [c["prev_hash"] for c in _CHAIN] == [GENESIS.hex()] + [c["hash"] for c in _CHAIN[:-1]]


# ---- hashes.json ---------------------------------------------------------------------------


def _hash_message(case: Case) -> bytes:
    if "repeat" in case:
        count: int = case["repeat"]["count"]
        return bytes.fromhex(case["repeat"]["byte"]) * count
    return bytes.fromhex(case["message"])


def _hash_id(index: int, case: Case) -> str:
    if "repeat" in case:
        return f"#{index}: {case['repeat']['count']} x {case['repeat']['byte']}"
    return f"#{index}: {len(case['message']) // 2} bytes"


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, id=_hash_id(i, c)) for i, c in enumerate(load_vectors("hashes")["cases"])],
)
def test_sha256_and_sha512_vectors_agree_with_hashlib(case: Case) -> None:
    message = _hash_message(case)
    assert hashlib.sha256(message).hexdigest() == case["sha256"]
    assert hashlib.sha512(message).hexdigest() == case["sha512"]


def test_hash_vectors_include_the_million_a_case() -> None:
    repeats = [c["repeat"] for c in load_vectors("hashes")["cases"] if "repeat" in c]
    assert {"byte": "61", "count": 1_000_000} in repeats


# ---- ed25519.json --------------------------------------------------------------------------

_ED25519: list[Case] = load_vectors("ed25519")["cases"]


@pytest.mark.parametrize("case", [pytest.param(c, id=c["name"]) for c in _ED25519 if "secret" in c])
def test_signing_key_reproduces_public_key_and_signature(case: Case) -> None:
    key = SigningKey(bytes.fromhex(case["secret"]))
    assert key.public.raw.hex() == case["public"]
    assert key.sign(bytes.fromhex(case["message"])).hex() == case["signature"]


@pytest.mark.parametrize("case", vector_params("ed25519", "cases"))
def test_public_key_verification_gives_the_expected_verdict(case: Case) -> None:
    public = PublicKey(bytes.fromhex(case["public"]))
    verdict = public.verify(bytes.fromhex(case["signature"]), bytes.fromhex(case["message"]))
    assert verdict is case["valid"]


# ---- packs.json ----------------------------------------------------------------------------


def _trusted_keys() -> dict[bytes, TrustedKey]:
    keys: dict[bytes, TrustedKey] = {}
    for entry in load_vectors("packs")["trusted"].values():
        public = PublicKey(bytes.fromhex(entry["public"]))
        assert key_id(public.raw).hex() == entry["kid"]
        keys[bytes.fromhex(entry["kid"])] = TrustedKey(
            public, bytes.fromhex(entry["signer"]), PackKind[entry["kind"].upper()]
        )
    return keys


def _head(data: Case | None) -> ChainHead | None:
    return None if data is None else ChainHead(data["seq"], bytes.fromhex(data["hash"]))


@pytest.mark.parametrize("case", vector_params("packs", "cases"))
def test_pack_verification_gives_the_expected_status(case: Case) -> None:
    data = bytes.fromhex(case["pack"])
    expect: Case = case["expect"]
    run = (data, _trusted_keys(), _head(case["head"]), PackKind[case["kind"].upper()])
    if expect["status"] == "refused":
        with pytest.raises(PackError) as caught:
            verify_pack(*run, require_chain=case["require_chain"])
        assert caught.value.reason == expect["code"]
        assert Reason(caught.value.reason).name.lower() == expect["reason"]
    else:
        result = verify_pack(*run, require_chain=case["require_chain"])
        assert result.duplicate is (expect["status"] == "duplicate")
        assert result.pack.pack_id.hex() == expect["pack_id"]
        assert result.pack.hash.hex() == expect["hash"] == hashlib.sha256(data).hexdigest()
        assert result.pack.encoded == data


# ---- identity.json -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, id=f"#{i}: {c['id']}")
        for i, c in enumerate(load_vectors("identity")["cases"])
    ],
)
def test_fold_and_triple_id_reproduce_the_identity_vector(case: Case) -> None:
    s, p, o = (bytes.fromhex(case[k]) for k in ("s", "p", "o"))
    assert (identity.fold(s), identity.fold(p), identity.fold(o)) == (
        case["fold_s"],
        case["fold_p"],
        case["fold_o"],
    )
    assert identity.triple_id(s, p, o) == case["id"]


# The reference ids of the Go reference implementation, as listed in DESIGN.md.
REFERENCE_IDS = {
    ("Alice", "knows", "Bob"): "f7e43c882ab02b80",
    ("  Alice  Smith ", "WORKS_AT", "Acme\tCorp"): "feb326503cdb8f90",
    ("é", "ß", "İ"): "00ea780590d4c37e",
    ("", "", ""): "d94d12186c0f2fb7",
}


@pytest.mark.parametrize(("triple", "expected"), list(REFERENCE_IDS.items()), ids=repr)
def test_identity_vectors_carry_the_reference_ids(
    triple: tuple[str, str, str], expected: str
) -> None:
    hexed = tuple(part.encode().hex() for part in triple)
    found = [
        c["id"] for c in load_vectors("identity")["cases"] if (c["s"], c["p"], c["o"]) == hexed
    ]
    assert found == [expected]
    assert identity.triple_id(*triple) == expected


# ---- tools/gen_vectors.py ------------------------------------------------------------------


def test_committed_vectors_are_what_the_generator_produces(
    gen_vectors: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gen_vectors.main(["--check"]) == 0
    assert "9 files up to date" in capsys.readouterr().out


def _edit_crc(directory: Path) -> str:
    path = directory / "frames.json"
    text = path.read_text(encoding="utf-8")
    crc = load_vectors("frames")["valid"][0]["crc32"]
    path.write_text(text.replace(crc, f"{int(crc, 16) ^ 1:08x}", 1), encoding="utf-8")
    return "stale: protocol/vectors/frames.json"


def _delete_file(directory: Path) -> str:
    (directory / "gate.json").unlink()
    return "stale: protocol/vectors/gate.json"


def _add_file(directory: Path) -> str:
    (directory / "extra.json").write_text("{}\n", encoding="utf-8")
    return "not generated by this tool: protocol/vectors/extra.json"


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(_edit_crc, id="one hex digit changed"),
        pytest.param(_delete_file, id="a file missing"),
        pytest.param(_add_file, id="an unknown file"),
    ],
)
def test_generator_check_fails_when_a_vector_file_drifts(
    gen_vectors: ModuleType,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    damage: Callable[[Path], str],
) -> None:
    copy = tmp_path / "vectors"
    shutil.copytree(VECTORS, copy)
    monkeypatch.setattr(gen_vectors, "VECTORS", copy)
    assert gen_vectors.main(["--check"]) == 0  # the untouched copy is up to date
    capsys.readouterr()
    complaint = damage(copy)
    assert gen_vectors.main(["--check"]) == 1
    assert complaint in capsys.readouterr().out
