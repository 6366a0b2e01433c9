"""The fuzz driver (tools/fuzz_codec.py): a full 100,000-input run, and proof it can fail."""

from __future__ import annotations

import random
import re
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

import fuzz_codec
from hirmem.protocol import cbor
from hirmem.protocol.errors import CborError, FrameError, MessageError
from hirmem.protocol.frames import FrameDecoder, decode_frame, encode_frame
from hirmem.protocol.messages import Envelope, MsgType, decode_message
from hirmem.protocol.packs import PackKind, Verified, sign_pack
from hirmem.protocol.records import GENESIS

TOTAL = re.compile(r"^total inputs=(\d+) violations=(\d+) elapsed=([\d.]+)s$", re.MULTILINE)


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, int, int]:
    code = fuzz_codec.main(list(args))
    out = capsys.readouterr().out
    match = TOTAL.search(out)
    assert match, out
    return code, out, int(match.group(1)), int(match.group(2))


def test_hundred_thousand_inputs(capsys: pytest.CaptureFixture[str]) -> None:
    started = time.perf_counter()
    code, out, total, violations = run_main(capsys, "--count", "100000", "--seed", "1")
    elapsed = time.perf_counter() - started
    with capsys.disabled():
        print("\n" + out + f"100,000 inputs in {elapsed:.1f} s\n", end="")
    assert total == 100_000
    for target in ("frames", "messages", "packs"):
        assert re.search(rf"^{target}\s+inputs=\d+", out, re.MULTILINE), out
    assert violations == 0, out
    assert code == 0, out


def test_detects_a_foreign_exception(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def planted(body: bytes) -> Envelope:
        if len(body) % 2:
            raise ValueError("planted by the test")
        return decode_message(body)

    monkeypatch.setattr(fuzz_codec, "decode_message", planted)
    code, out, total, violations = run_main(capsys, "--count", "60", "--seed", "3")
    assert code == 1
    assert total == 60
    assert violations > 0
    assert "VIOLATION messages: ValueError: planted by the test" in out
    assert re.search(r"input \(\d+ bytes\): [0-9a-f]*", out)


def test_detects_a_type_error_from_the_codec(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A TypeError out of the CBOR decoder (as an unhashable map key once gave) is a
    violation in every target that decodes CBOR: the driver tolerates no exception family
    but HirmemError."""
    real = cbor.decode

    def unhashable(data: bytes) -> object:  # every refusal escapes as a TypeError instead
        try:
            return real(data)
        except CborError:
            raise TypeError("unhashable type: 'list'") from None

    monkeypatch.setattr(cbor, "decode", unhashable)
    code, out, _, violations = run_main(capsys, "--count", "60", "--seed", "3")
    assert code == 1
    assert violations > 0
    assert "VIOLATION messages: TypeError: unhashable type: 'list'" in out
    assert re.search(r"VIOLATION packs \(case \w+\): TypeError: unhashable type", out), out


@pytest.mark.parametrize(
    "data",
    [
        "a1c08000",  # {Tag(0, []): 0}: once a TypeError out of every target
        "a1d903e8810000",  # {Tag(1000, [0]): 0}
        "a20100f500",  # {1: 0, true: 0}: once merged into one pair
        "85010d0000a1f500",  # an ACK with a fifth member {true: 0}
        "d284 40 a1f500 40 40".replace(" ", ""),  # COSE_Sign1 with {true: 0} unprotected
    ],
)
def test_non_scalar_map_keys_are_refusals_in_every_target(data: str) -> None:
    raw = bytes.fromhex(data)
    tally = fuzz_codec.Tally("test")
    rng = random.Random(0)
    assert fuzz_codec.target_messages(raw, rng, tally) == "malformed"
    seeds = fuzz_codec.Seeds.build()
    pack_seeds = frozenset(case.encoded for case in seeds.packs)
    for case in seeds.packs:
        assert fuzz_codec.target_packs(raw, case, pack_seeds, tally) == "malformed"
    framed = encode_frame(raw)
    assert fuzz_codec.target_frames(framed, rng, tally) == "accepted"
    assert decode_frame(framed) == raw
    assert not tally.anomalies


def test_detects_an_escaped_hirmem_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def wrong_family(wire: bytes, max_frame: int = 512) -> bytes:
        raise MessageError(3, "a frame decoder must raise FrameError")

    monkeypatch.setattr(fuzz_codec, "decode_frame", wrong_family)
    code, out, _, _ = run_main(capsys, "--count", "9", "--seed", "3")
    assert code == 1
    assert "VIOLATION frames: MessageError escaped the target" in out


def test_detects_an_accepted_mutated_pack(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pack = sign_pack(
        fuzz_codec.DEVICE_KEY, PackKind.MEMORY, fuzz_codec.DEVICE_ID, 1, GENESIS, 0, []
    )

    def accepts_everything(data: bytes, *args: object, **kwargs: object) -> Verified:
        return Verified(pack, duplicate=False)

    monkeypatch.setattr(fuzz_codec, "verify_pack", accepts_everything)
    code, out, _, _ = run_main(capsys, "--count", "30", "--seed", "3")
    assert code == 1
    assert "a pack that differs from every seed was accepted" in out


def test_detects_a_broken_decoder_invariant(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Forgetful(FrameDecoder):
        def feed(self, chunk: bytes) -> list[bytes | FrameError]:
            return super().feed(chunk)[1:]  # drops an event, stats still count it

    monkeypatch.setattr(fuzz_codec, "FrameDecoder", Forgetful)
    code, out, _, _ = run_main(capsys, "--count", "30", "--seed", "3")
    assert code == 1
    assert "VIOLATION frames:" in out


def test_detects_a_hang(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    if not fuzz_codec.HangGuard().enabled:
        pytest.skip("no SIGALRM here")

    def slow(body: bytes) -> Envelope:
        time.sleep(0.5)
        return decode_message(body)

    monkeypatch.setattr(fuzz_codec, "HANG_SECONDS", 0.05)
    monkeypatch.setattr(fuzz_codec, "decode_message", slow)
    code, out, _, violations = run_main(capsys, "--count", "3", "--seed", "3")
    assert code == 1
    assert violations == 1
    assert "input took longer than 0.05 s" in out


def test_runs_are_reproducible() -> None:
    first = fuzz_codec.run(600, 11)
    second = fuzz_codec.run(600, 11)
    other = fuzz_codec.run(600, 12)

    def view(report: fuzz_codec.Report) -> list[object]:
        return [(t.outcomes, t.extra, t.unchanged) for t in report.tallies]

    assert view(first) == view(second)
    assert view(first) != view(other)
    assert first.total == 600


def test_seeds_cover_every_message_type_and_verify() -> None:
    seeds = fuzz_codec.Seeds.build()
    types = {decode_message(body).message.TYPE for body in seeds.messages}
    assert types == set(MsgType) - {MsgType.FRAGMENT}  # retired (SPEC §5.14): no class
    assert len(seeds.packs) >= 4
    assert {case.kind for case in seeds.packs} == {PackKind.MEMORY, PackKind.KNOWLEDGE}
    assert any(len(seed) > 500 for seed in seeds.frames)


def test_mutations_stay_in_range_and_mostly_change_the_seed() -> None:
    rng = random.Random(5)
    seeds = fuzz_codec.Seeds.build()
    pool = [case.encoded for case in seeds.packs]
    changed = 0
    for _ in range(2000):
        origin = pool[rng.randrange(len(pool))]
        mutated = fuzz_codec.mutate(rng, origin, pool)
        changed += mutated != origin
        assert len(mutated) <= 2 * max(len(p) for p in pool) + 100
    assert changed > 1950


def test_minimise_finds_the_trigger() -> None:
    def target(data: bytes) -> str:
        if b"\xaa\xbb" in data:
            raise KeyError("trigger")
        return "accepted"

    data = bytes(range(100)) + b"\xaa\xbb" + bytes(50)
    assert fuzz_codec.minimise(target, data) == b"\xaa\xbb"
