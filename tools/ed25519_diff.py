"""Ed25519 of the C core and of the MicroPython agent against OpenSSL, seed by seed.

    python tools/ed25519_diff.py [--count N] [--seed S] [--target c|mp|both]

For each of N random seeds and messages (lengths 0..N_MAX, the SHA-512 block
boundaries of Ed25519 among them) both implementations must derive OpenSSL's public
key (through ``cryptography``), produce OpenSSL's signature, accept it, and refuse one
mutation of it (a bit of R or S flipped, S + L, high bits of S set, a bit of the
message flipped, another key), exactly as OpenSSL decides. The C core runs as
build/host/t_crypto (ASan + UBSan, ``make -C firmware host``); MicroPython as the
unix port on firmware/micropython/checks/ed25519_requests.py, one process per
batch. The test command runs a few thousand cases (tests/test_ed25519_diff.py); this
tool runs more. Prints the figures per target; exit status 1 on any mismatch.

About one clamped scalar in eight has a top radix-16 digit that becomes 8 after the
carries of a signed recoding (``top_digit_carries``); the report counts them, since a
recoding that drops that carry derives a wrong key for exactly these seeds.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import native_harness  # noqa: E402
from mp_run import MP_DIR, run_mp  # noqa: E402

L = 2**252 + 27742317777372353535851937790883648493
MAX_MESSAGE = 300
# SHA-512 block boundaries inside Ed25519: prefix (32) || M and R || A (64) || M.
BOUNDARY_LENGTHS = tuple(n + d for n in (0, 64, 96, 112, 128, 176, 192, 240) for d in (-1, 0, 1)
                         if n + d >= 0)
MP_CHECK = MP_DIR / "checks" / "ed25519_requests.py"
MP_BATCH = 4000  # requests per micropython process

Request = tuple[str, Sequence[native_harness.Arg]]


@dataclass(frozen=True)
class Case:
    """One seed and message with OpenSSL's answers, and one mutated verification."""

    seed: bytes
    msg: bytes
    pub: bytes
    sig: bytes
    mutation: str
    mutated: tuple[bytes, bytes, bytes]  # (pub, msg, sig)
    mutated_valid: bool

    def requests(self) -> list[Request]:
        m_pub, m_msg, m_sig = self.mutated
        return [
            ("pub", [self.seed]),
            ("sign", [self.seed, self.msg]),
            ("verify", [self.pub, self.msg, self.sig]),
            ("verify", [m_pub, m_msg, m_sig]),
        ]

    def expected(self) -> list[native_harness.Arg]:
        return [self.pub, self.sig, 1, int(self.mutated_valid)]


def openssl_public(seed: bytes) -> bytes:
    key = Ed25519PrivateKey.from_private_bytes(seed).public_key()
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def openssl_verify(pub: bytes, msg: bytes, sig: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(pub).verify(sig, msg)
    except (InvalidSignature, ValueError):
        return False
    return True


def top_digit_carries(seed: bytes) -> bool:
    """True when the clamped scalar's signed radix-16 recoding carries into digit 63
    and makes it 8 (digits 0..62 in -8..7, each carrying when its value reaches 8)."""
    a = int.from_bytes(hashlib.sha512(seed).digest()[:32], "little")
    a = (a & ((1 << 254) - 8)) | (1 << 254)
    carry = 0
    for m in range(63):
        carry = (((a >> (4 * m)) & 15) + carry + 8) >> 4
    return (a >> 252) + carry == 8


def _flip(data: bytes, bit: int) -> bytes:
    out = bytearray(data)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


MUTATIONS: dict[str, Callable[[random.Random, bytes, bytes, bytes], tuple[bytes, bytes, bytes]]]
MUTATIONS = {
    "r-bit": lambda rng, pub, msg, sig: (pub, msg, _flip(sig, rng.randrange(256))),
    "s-bit": lambda rng, pub, msg, sig: (pub, msg, _flip(sig, 256 + rng.randrange(256))),
    "s-plus-l": lambda rng, pub, msg, sig: (
        pub, msg, sig[:32] + ((int.from_bytes(sig[32:], "little") + L) % 2**256).to_bytes(
            32, "little")),
    "s-high": lambda rng, pub, msg, sig: (
        pub, msg, sig[:63] + bytes([sig[63] | rng.choice([0x20, 0x40, 0x80, 0xE0])])),
    "msg-bit": lambda rng, pub, msg, sig: (
        (pub, _flip(msg, rng.randrange(8 * len(msg))), sig) if msg else (pub, b"\x00", sig)),
    "other-key": lambda rng, pub, msg, sig: (openssl_public(rng.randbytes(32)), msg, sig),
}


def make_cases(count: int, seed: int) -> list[Case]:
    """count cases from a seeded generator; OpenSSL answers every one."""
    rng = random.Random(seed)
    kinds = sorted(MUTATIONS)
    cases = []
    for index in range(count):
        length = (BOUNDARY_LENGTHS[index] if index < len(BOUNDARY_LENGTHS)
                  else rng.randrange(MAX_MESSAGE + 1))
        key_seed, msg = rng.randbytes(32), rng.randbytes(length)
        pub = openssl_public(key_seed)
        sig = Ed25519PrivateKey.from_private_bytes(key_seed).sign(msg)
        kind = kinds[index % len(kinds)]
        mutated = MUTATIONS[kind](rng, pub, msg, sig)
        cases.append(Case(key_seed, msg, pub, sig, kind, mutated, openssl_verify(*mutated)))
    return cases


def requests_of(cases: Sequence[Case]) -> list[Request]:
    return [r for case in cases for r in case.requests()]


def answer_c(requests: Sequence[Request]) -> list[native_harness.Arg | str]:
    """The C core's answers (build/host/t_crypto)."""
    return [line[0] if len(line) == 1 else " ".join(map(str, line))
            for line in native_harness.run("t_crypto", requests)]


def answer_mp(requests: Sequence[Request]) -> list[native_harness.Arg | str]:
    """MicroPython's answers, MP_BATCH requests per process."""
    answers: list[native_harness.Arg | str] = []
    with tempfile.TemporaryDirectory(prefix="hm-ed25519-") as tmp:
        path = Path(tmp) / "requests.txt"
        for start in range(0, len(requests), MP_BATCH):
            batch = requests[start:start + MP_BATCH]
            path.write_text(native_harness.request_text(batch))
            lines = native_harness.parse_answers(run_mp(MP_CHECK, str(path), timeout=600))
            if len(lines) != len(batch):
                raise AssertionError(f"micropython: {len(batch)} requests, {len(lines)} answers")
            answers += [line[0] if len(line) == 1 else " ".join(map(str, line))
                        for line in lines]
    return answers


@dataclass
class Mismatch:
    case: Case
    request: Request
    expected: native_harness.Arg
    got: native_harness.Arg | str

    def describe(self) -> str:
        def show(value: native_harness.Arg | str) -> str:
            return value.hex() if isinstance(value, bytes) else str(value)

        return (f"seed {self.case.seed.hex()} msg {len(self.case.msg)} B {self.request[0]} "
                f"({self.case.mutation}): expected {show(self.expected)}, got {show(self.got)}")


def compare(cases: Sequence[Case], answers: Sequence[native_harness.Arg | str]) -> list[Mismatch]:
    """Every answer that differs from OpenSSL's, with its case."""
    out = []
    for index, case in enumerate(cases):
        got = answers[4 * index:4 * index + 4]
        for request, want, have in zip(case.requests(), case.expected(), got, strict=True):
            if want != have:
                out.append(Mismatch(case, request, want, have))
    return out


TARGETS: dict[str, Callable[[Sequence[Request]], list[native_harness.Arg | str]]] = {
    "c": answer_c,
    "mp": answer_mp,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20000, help="seeds and messages")
    parser.add_argument("--seed", type=int, default=int(time.time()), help="generator seed")
    parser.add_argument("--target", choices=["c", "mp", "both"], default="both")
    args = parser.parse_args(argv)
    start = time.monotonic()
    cases = make_cases(args.count, args.seed)
    carries = sum(top_digit_carries(c.seed) for c in cases)
    refused = sum(not c.mutated_valid for c in cases)
    print(f"seed {args.seed}: {len(cases)} cases, {carries} with a carry into digit 63, "
          f"{refused} mutations refused by OpenSSL ({time.monotonic() - start:.1f} s)")
    failed = False
    for target in ("c", "mp") if args.target == "both" else (args.target,):
        start = time.monotonic()
        mismatches = compare(cases, TARGETS[target](requests_of(cases)))
        elapsed = time.monotonic() - start
        print(f"{target}: {4 * len(cases)} requests, {len(mismatches)} mismatches "
              f"({elapsed:.1f} s, {1000 * elapsed / len(cases):.2f} ms per case)")
        for m in mismatches[:10]:
            print("  " + m.describe())
        failed |= bool(mismatches)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
