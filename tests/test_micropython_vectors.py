"""protocol/vectors reproduced bit for bit by the MicroPython agent on the unix port.

One micropython process per vector file (firmware/micropython/checks/vectors.py)
computes every value from the inputs; this test compares with the file.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from mp_run import MICROPYTHON, MP_DIR, VECTORS, run_mp_json

pytestmark = pytest.mark.skipif(MICROPYTHON is None, reason="micropython not installed")
CHECK = MP_DIR / "checks" / "vectors.py"
FRAME_ERRORS = {"too-short", "too-long", "bad-cobs", "bad-crc"}


def load(name: str) -> Any:
    return json.loads((VECTORS / f"{name}.json").read_text())


def compute(name: str) -> Any:
    return run_mp_json(CHECK, str(VECTORS), name)


def test_frames() -> None:
    d, got = load("frames"), compute("frames")
    assert len(got["valid"]) == len(d["valid"]) > 0
    for v, g in zip(d["valid"], got["valid"], strict=True):
        assert g["crc32"] == v["crc32"], v["name"]
        assert g["wire"] == v["wire"], v["name"]
        assert g["decoded"] == [{"body": v["body"]}], v["name"]
    for v, g in zip(d["cobs"], got["cobs"], strict=True):
        assert g["encoded"] == v["encoded"], v["name"]
        assert g["decoded"] == v["data"], v["name"]
    for v, g in zip(d["invalid"], got["invalid"], strict=True):
        assert g == [{"error": v["error"]}], v["name"]
    for v, g in zip(d["streams"], got["streams"], strict=True):
        for chunked in g:  # whole, then in chunks of 1, 3 and 7 bytes
            assert chunked == v["expected"], v["name"]


def test_messages() -> None:
    d, got = load("messages"), compute("messages")
    for v, g in zip(d["valid"], got["valid"], strict=True):
        assert g["body"] == v["body"], v["name"]
        assert g["frame"] == v["frame"], v["name"]
        assert g["decoded"] == {**v["message"], "seq": v["seq"], "ack": v["ack"]}, v["name"]
    assert got["invalid"] == [v["error_code"] for v in d["invalid"]]
    for v, g in zip(d["pieces"], got["pieces"], strict=True):
        assert g["pieces"] == v["pieces"]
        assert g["frames"] == v["frames"]
        assert g["joined"] == v["body"]


def test_fixed_point() -> None:
    d, got = load("fixed_point"), compute("fixed_point")
    for op in ("mul", "isqrt_round", "sqrt", "sqrt_mul"):
        assert got[op] == [c["result"] for c in d[op]], op


def test_gate() -> None:
    d, got = load("gate"), compute("gate")
    keys = ("h", "i", "r", "f", "c", "rn", "w", "verdict", "hard", "state")
    assert got == [{k: c[k] for k in keys} for c in d["cases"]]


def test_records() -> None:
    d, got = load("records"), compute("records")
    keys = ("hash_input", "hash", "prev_hash", "wire")
    assert got == [{k: c[k] for k in keys} for c in d["chain"]]


def test_hashes() -> None:
    d, got = load("hashes"), compute("hashes")
    assert got == [{"sha256": c["sha256"], "sha512": c["sha512"]} for c in d["cases"]]


def test_ed25519() -> None:
    d, got = load("ed25519"), compute("ed25519")
    for c, g in zip(d["cases"], got, strict=True):
        assert g["valid"] == c["valid"], c["name"]
        if "secret" in c:
            assert (g["public"], g["signature"]) == (c["public"], c["signature"]), c["name"]


def test_packs_including_refusals() -> None:
    d, got = load("packs"), compute("packs")
    reasons = set()
    for c, g in zip(d["cases"], got, strict=True):
        e = c["expect"]
        assert g["status"] == e["status"], c["name"]
        if e["status"] == "refused":
            assert g["reason"] == e["code"], c["name"]
            reasons.add(e["code"])
        else:
            assert (g["pack_id"], g["hash"]) == (e["pack_id"], e["hash"]), c["name"]
    assert len(reasons) >= 8  # the vector set exercises the order of SPEC 8.4
