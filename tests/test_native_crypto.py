"""The C core's SHA-2 and Ed25519 (firmware/core/hm_sha2, hm_ed25519, hm_crypto).

Checked against protocol/vectors (hashes.json, ed25519.json), published vector files
(NIST CAVP SHA-2, SUPERCOP Ed25519 sign.input, from the ``cryptography-vectors``
package) and, differentially, against hashlib and OpenSSL through ``cryptography``:
the host verifies packs with OpenSSL, so the device must accept exactly what OpenSSL
accepts, also for crafted keys and signatures (SPEC §8.3).

Each test drives build/host/t_crypto once with a batch of requests (see
tests/native/t_crypto.c for the request notation).
"""

from __future__ import annotations

import hashlib
import importlib.resources
import importlib.util
import random
from collections.abc import Iterator, Sequence

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from conftest import load_vectors
from native_harness import Arg, run

Request = tuple[str, Sequence[Arg]]


def crypto(requests: Sequence[Request]) -> list[list[Arg | str]]:
    return run("t_crypto", requests)


def single(answers: list[list[Arg | str]]) -> list[Arg | str]:
    """The one field of each answer line."""
    assert all(len(a) == 1 for a in answers), [a for a in answers if len(a) != 1][:3]
    return [a[0] for a in answers]


# ---- OpenSSL, the oracle ----------------------------------------------------------------


def openssl_public(seed: bytes) -> bytes:
    key = Ed25519PrivateKey.from_private_bytes(seed).public_key()
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def openssl_sign(seed: bytes, msg: bytes) -> bytes:
    return Ed25519PrivateKey.from_private_bytes(seed).sign(msg)


def openssl_verify(pub: bytes, msg: bytes, sig: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(pub).verify(sig, msg)
    except (InvalidSignature, ValueError):
        return False
    return True


# ---- A small model of the group, to build edge-case keys and signatures -----------------

P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, -1, P) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)

Point = tuple[int, int, int, int]  # extended coordinates (X, Y, Z, T)
IDENTITY: Point = (0, 1, 1, 0)


def point_add(p: Point, q: Point) -> Point:
    x1, y1, z1, t1 = p
    x2, y2, z2, t2 = q
    a = (y1 - x1) * (y2 - x2) % P
    b = (y1 + x1) * (y2 + x2) % P
    c = 2 * D * t1 * t2 % P
    d = 2 * z1 * z2 % P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def point_mul(k: int, p: Point) -> Point:
    r = IDENTITY
    while k:
        if k & 1:
            r = point_add(r, p)
        p = point_add(p, p)
        k >>= 1
    return r


def point_neg(p: Point) -> Point:
    x, y, z, t = p
    return (-x % P, y, z, -t % P)


def encode(p: Point) -> bytes:
    x, y, z, _ = p
    zi = pow(z, -1, P)
    x, y = x * zi % P, y * zi % P
    return (y | (x & 1) << 255).to_bytes(32, "little")


def decode_openssl(s: bytes) -> Point | None:
    """OpenSSL's decoding: y = low 255 bits mod p; x = 0 ignores the sign bit."""
    v = int.from_bytes(s, "little")
    y = (v & (2**255 - 1)) % P
    x2 = (y * y - 1) * pow(D * y * y + 1, -1, P) % P
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P:
        x = x * SQRT_M1 % P
    if (x * x - x2) % P:
        return None
    if x & 1 != v >> 255:
        x = -x % P
    return (x, y, 1, x * y % P)


def model_verify(pub: bytes, msg: bytes, sig: bytes) -> bool:
    """SPEC §8.3 / hm_ed25519.h semantics, written out: must agree with OpenSSL."""
    s = int.from_bytes(sig[32:], "little")
    a = decode_openssl(pub)
    if s >= L or a is None:
        return False
    k = int.from_bytes(hashlib.sha512(sig[:32] + pub + msg).digest(), "little") % L
    return encode(point_add(point_mul(s, BASE), point_neg(point_mul(k, a)))) == sig[:32]


def find_base() -> Point:
    base = decode_openssl((4 * pow(5, -1, P) % P).to_bytes(32, "little"))
    assert base is not None
    return base


def find_torsion() -> list[Point]:
    """The 8 points of order dividing 8, as multiples of one point of order 8."""
    y = 2
    while True:
        point = decode_openssl(y.to_bytes(32, "little"))
        if point is not None:
            t = point_mul(L, point)  # kills the prime-order part
            if encode(point_mul(4, t)) != encode(IDENTITY):
                return [point_mul(i, t) for i in range(8)]
        y += 1


BASE = find_base()
TORSION = find_torsion()


def enc_y(y: int, sign: int = 0) -> bytes:
    return (y | sign << 255).to_bytes(32, "little")


def le32(n: int) -> bytes:
    return n.to_bytes(32, "little")


# ---- The C self-test, argument checks and hashes ----------------------------------------


def test_selftest() -> None:
    answers = crypto(
        [
            ("selftest", []),
            ("verify", [bytes(31), b"", bytes(64)]),
            ("sign", [bytes(32), 5]),
            ("sha256_chunks", [b"abc", 0]),
            ("nonsense", []),
        ]
    )
    assert answers[0] == ["ok"]
    assert answers[1:] == [["bad-request"]] * 4


def test_hashes_vectors() -> None:
    cases = load_vectors("hashes")["cases"]
    requests: list[Request] = []
    expected: list[bytes] = []
    for case in cases:
        for algo in ("sha256", "sha512"):
            digest = bytes.fromhex(case[algo])
            if "repeat" in case:
                part = bytes.fromhex(case["repeat"]["byte"])
                count = int(case["repeat"]["count"])
                requests += [
                    (f"{algo}_repeat", [part, count]),
                    (f"{algo}_repeat", [part * 1000, count // 1000]),
                ]
                expected += [digest, digest]
                continue
            msg = bytes.fromhex(case["message"])
            requests.append((algo, [msg]))
            expected.append(digest)
            for chunk in (1, 3, 55, 64, 127, 1000):
                requests.append((f"{algo}_chunks", [msg, chunk]))
                expected.append(digest)
    assert any("repeat" in case for case in cases)
    assert single(crypto(requests)) == expected


def test_hashes_against_hashlib() -> None:
    rng = random.Random(0x5A2)
    lengths = sorted(
        {
            n + d
            for n in (0, 55, 56, 64, 111, 112, 128, 1000, 2000)
            for d in (-1, 0, 1)
            if n + d >= 0
        }
        | {rng.randrange(2001) for _ in range(60)}
    )
    requests: list[Request] = []
    expected: list[bytes] = []
    for n in lengths:
        msg = rng.randbytes(n)
        chunk = rng.choice([1, 7, 63, 64, 65, 128, 129, 500])
        for algo in ("sha256", "sha512"):
            digest = hashlib.new(algo, msg).digest()
            requests += [(algo, [msg]), (f"{algo}_chunks", [msg, chunk])]
            expected += [digest, digest]
    assert single(crypto(requests)) == expected


def nist_file(name: str) -> str:
    """A file of the cryptography-vectors package (the published NIST/SUPERCOP files)."""
    return (importlib.resources.files("cryptography_vectors") / name).read_text()


def rsp_records(text: str) -> Iterator[dict[str, str]]:
    """The key = value records of a CAVP .rsp file."""
    record: dict[str, str] = {}
    for line in [*text.splitlines(), ""]:
        line = line.strip()
        if " = " in line and not line.startswith("#"):
            key, value = line.split(" = ", 1)
            record[key] = value
        elif not line and record:
            yield record
            record = {}


@pytest.mark.parametrize("algo", ["sha256", "sha512"])
def test_nist_cavp_sha2(algo: str) -> None:
    stem = f"hashes/SHA2/{algo.upper()}"
    requests: list[Request] = []
    expected: list[Arg | str] = []
    for kind in ("ShortMsg", "LongMsg"):
        records = [r for r in rsp_records(nist_file(f"{stem}{kind}.rsp")) if "MD" in r]
        assert len(records) >= 64
        for r in records:
            msg = bytes.fromhex(r["Msg"])[: int(r["Len"]) // 8]
            requests.append((algo, [msg]))
            expected.append(bytes.fromhex(r["MD"]))
    monte = list(rsp_records(nist_file(f"{stem}Monte.rsp")))
    seed = bytes.fromhex(next(r["Seed"] for r in monte if "Seed" in r))
    checkpoints = [bytes.fromhex(r["MD"]) for r in monte if "MD" in r]
    assert len(checkpoints) == 100
    answers = crypto([*requests, (f"{algo}_monte", [seed])])
    assert single(answers[:-1]) == expected
    assert answers[-1] == checkpoints


# ---- Ed25519 ----------------------------------------------------------------------------


def test_ed25519_vectors() -> None:
    cases = load_vectors("ed25519")["cases"]
    requests: list[Request] = []
    expected: list[Arg | str] = []
    for case in cases:
        pub, msg, sig = (bytes.fromhex(case[k]) for k in ("public", "message", "signature"))
        if case.get("secret"):
            seed = bytes.fromhex(case["secret"])
            requests += [("pub", [seed]), ("sign", [seed, msg])]
            expected += [pub, sig]
        requests.append(("verify", [pub, msg, sig]))
        expected.append(int(bool(case["valid"])))
        assert openssl_verify(pub, msg, sig) == bool(case["valid"]), case["name"]
    assert any(not case["valid"] for case in cases)
    assert single(crypto(requests)) == expected


def test_supercop_sign_input() -> None:
    lines = nist_file("asymmetric/Ed25519/sign.input").splitlines()
    assert len(lines) == 1024
    requests: list[Request] = []
    expected: list[Arg | str] = []
    for line in lines:
        sk, pub, msg, signed = (bytes.fromhex(f) for f in line.split(":")[:4])
        sig = signed[:64]
        assert signed[64:] == msg and sk[32:] == pub
        requests += [("pub", [sk[:32]]), ("sign", [sk[:32], msg]), ("verify", [pub, msg, sig])]
        expected += [pub, sig, 1]
    assert single(crypto(requests)) == expected


def mutations(
    rng: random.Random, pub: bytes, msg: bytes, sig: bytes
) -> list[tuple[bytes, bytes, bytes]]:
    """Verification requests derived from a valid (pub, msg, sig)."""
    s = int.from_bytes(sig[32:], "little")
    r_flip = bytearray(sig)
    r_flip[rng.randrange(32)] ^= 1 << rng.randrange(8)
    s_flip = bytearray(sig)
    bit = rng.randrange(256)
    s_flip[32 + bit // 8] ^= 1 << (bit % 8)
    top = bytearray(sig)
    top[63] |= rng.choice([0x20, 0x40, 0x80, 0xE0])
    msg_flip = bytearray(msg or b"\x00")
    msg_flip[rng.randrange(len(msg_flip))] ^= 1 << rng.randrange(8)
    other_pub = openssl_public(rng.randbytes(32))
    cases = [
        (pub, msg, sig),
        (pub, msg, bytes(r_flip)),
        (pub, msg, bytes(s_flip)),
        (pub, msg, bytes(top)),
        (pub, bytes(msg_flip), sig),
        (pub, msg + b"\x00", sig),
        (other_pub, msg, sig),
    ]
    if s + L < 2**256:
        cases.append((pub, msg, sig[:32] + le32(s + L)))
    if msg:
        cases.append((pub, msg[:-1], sig))
    return cases


def test_random_keys_against_openssl() -> None:
    rng = random.Random(25519)
    # Block boundaries of SHA-512 inside Ed25519: prefix (32) || M and R || A (64) || M.
    boundary = [
        n + d for n in (0, 48, 64, 80, 96, 112, 128, 176, 192, 240, 256) for d in (-1, 0, 1)
    ]
    lengths = [n for n in boundary if n >= 0] + [rng.randrange(2001) for _ in range(2000)]
    requests: list[Request] = []
    expected: list[Arg | str] = []
    for n in lengths:
        seed, msg = rng.randbytes(32), rng.randbytes(n)
        pub, sig = openssl_public(seed), openssl_sign(seed, msg)
        requests += [("pub", [seed]), ("sign", [seed, msg])]
        expected += [pub, sig]
        for v_pub, v_msg, v_sig in mutations(rng, pub, msg, sig):
            requests.append(("verify", [v_pub, v_msg, v_sig]))
            expected.append(int(openssl_verify(v_pub, v_msg, v_sig)))
    got = single(crypto(requests))
    mismatches = [
        (req, want, have)
        for req, want, have in zip(requests, expected, got, strict=True)
        if want != have
    ]
    assert not mismatches, mismatches[:5]
    assert expected.count(1) == len(lengths)  # every mutation is refused


def edge_public_keys(rng: random.Random) -> list[tuple[bytes, int | None, Point | None]]:
    """Edge public keys: (encoding, a, T) with the point = [a]B + T when known."""
    keys: list[tuple[bytes, int | None, Point | None]] = []
    for t in TORSION:  # small order, canonical and with the sign bit flipped
        enc = encode(t)
        keys.append((enc, 0, t))
        flipped = enc[:31] + bytes([enc[31] ^ 0x80])
        point = decode_openssl(flipped)
        assert point is not None
        keys.append((flipped, 0, point))
    for y in range(19):  # non-canonical y: y + p < 2^255, both signs
        for sign in (0, 1):
            enc = enc_y(y + P, sign)
            point = decode_openssl(enc)
            small = point is not None and encode(point_mul(8, point)) == encode(IDENTITY)
            keys.append((enc, 0 if small else None, point if small else None))
    for t in TORSION:  # mixed order: an ordinary key plus a torsion point
        a = rng.randrange(1, L)
        keys.append((encode(point_add(point_mul(a, BASE), t)), a, t))
    keys += [(enc_y(2**255 - 1 - i, 1), None, None) for i in range(4)]  # y near 2^255
    keys += [(rng.randbytes(32), None, None) for _ in range(48)]  # random strings
    return keys


def edge_signatures(
    rng: random.Random, pub: bytes, a: int | None, t: Point | None
) -> Iterator[tuple[bytes, bytes]]:
    """(msg, sig) pairs for one edge key: fixed small-order R, random, and constructed."""
    msg = rng.randbytes(rng.randrange(40))
    for small in [encode(IDENTITY), *(encode(x) for x in TORSION[1:4])]:
        yield msg, small + bytes(32)
    yield msg, rng.randbytes(32) + le32(rng.randrange(L))
    if a is None or t is None:
        return
    # R = [r]B - [c]T and S = r + k a: valid (cofactorless) exactly when [k]T = [c]T.
    for attempt in range(6):
        r = 0 if attempt < 2 else rng.randrange(L)
        c = rng.randrange(8)
        msg = rng.randbytes(rng.randrange(40))
        big_r = point_add(point_mul(r, BASE), point_neg(point_mul(c, t)))
        rb = encode(big_r)
        k = int.from_bytes(hashlib.sha512(rb + pub + msg).digest(), "little") % L
        s = (r + k * a) % L
        yield msg, rb + le32(s)
        yield msg, rb + le32(s + L)
        yield msg, rb + le32(s | 7 << 253)
        y = int.from_bytes(rb, "little") & (2**255 - 1)
        if y < 19:  # R of small y: its non-canonical alias, and the sign bit flipped
            yield msg, enc_y(y + P, rb[31] >> 7) + le32(s)
            yield msg, rb[:31] + bytes([rb[31] ^ 0x80]) + le32(s)


def test_edge_keys_and_signatures_against_openssl() -> None:
    rng = random.Random(8032)
    requests: list[Request] = []
    expected: list[Arg | str] = []
    for pub, a, t in edge_public_keys(rng):
        for msg, sig in edge_signatures(rng, pub, a, t):
            want = openssl_verify(pub, msg, sig)
            assert model_verify(pub, msg, sig) == want, (pub.hex(), msg.hex(), sig.hex())
            requests.append(("verify", [pub, msg, sig]))
            expected.append(int(want))
    got = single(crypto(requests))
    mismatches = [
        (req, want, have)
        for req, want, have in zip(requests, expected, got, strict=True)
        if want != have
    ]
    assert not mismatches, mismatches[:5]
    assert expected.count(1) >= 40 and expected.count(0) >= 200  # both outcomes well covered


def named_edge_cases() -> list[tuple[str, bytes, bytes, bytes, bool]]:
    """(name, pub, msg, sig, OpenSSL's answer): the edge rules of hm_ed25519.h, one each."""
    ident = encode(IDENTITY)
    msg = b"hirmem verify edge cases"
    rng = random.Random(1)
    a = rng.randrange(1, L)
    pub = encode(point_mul(a, BASE))

    def signed(pub: bytes, a: int, rb: bytes, r: int, msg: bytes) -> bytes:
        k = int.from_bytes(hashlib.sha512(rb + pub + msg).digest(), "little") % L
        return rb + le32((r + k * a) % L)

    good = signed(pub, a, encode(point_mul(7, BASE)), 7, msg)
    s = int.from_bytes(good[32:], "little")
    # y = p: a non-canonical encoding of y = 0, the order-4 point (sqrt(-1), 0).
    # R = identity, S = 0 is valid iff [k]A = identity, i.e. k = 0 mod 4.
    order4 = enc_y(P)
    k_mod4 = {
        int.from_bytes(hashlib.sha512(ident + order4 + m).digest(), "little") % L % 4 == 0: m
        for m in (b"m%d" % i for i in range(40))
    }
    # A mixed-order key [a]B + T8, R = [r]B - T8: valid with the cofactor, but the
    # cofactorless equation holds only if k = 1 mod 8.
    mixed = encode(point_add(point_mul(a, BASE), TORSION[1]))
    rb = encode(point_add(point_mul(9, BASE), point_neg(TORSION[1])))
    by_k_mod8 = {
        int.from_bytes(hashlib.sha512(rb + mixed + m).digest(), "little") % L % 8 == 1: m
        for m in (b"c%d" % i for i in range(100))
    }
    return [
        ("ordinary signature", pub, msg, good, True),
        ("S + L", pub, msg, good[:32] + le32(s + L), False),
        ("S = L", ident, msg, ident + le32(L), False),
        ("S with bit 255 set", pub, msg, good[:32] + le32(s | 1 << 255), False),
        ("S with bit 253 set", pub, msg, good[:32] + le32(s | 1 << 253), False),
        ("A = identity, R = identity, S = 0 (spec vector)", ident, msg, ident + bytes(32), True),
        ("A = identity with the sign bit set (x = 0)", enc_y(1, 1), msg, ident + bytes(32), True),
        ("A = y = p + 1, non-canonical identity", enc_y(P + 1), msg, ident + bytes(32), True),
        ("A = y = p + 1 with the sign bit set", enc_y(P + 1, 1), msg, ident + bytes(32), True),
        (
            "A = y = p, non-canonical order 4, k = 0 mod 4",
            order4,
            k_mod4[True],
            ident + bytes(32),
            True,
        ),
        (
            "A = y = p, non-canonical order 4, k != 0 mod 4",
            order4,
            k_mod4[False],
            ident + bytes(32),
            False,
        ),
        ("A = y = 2, not on the curve", enc_y(2), msg, ident + bytes(32), False),
        (
            "R = identity (small order) with an ordinary key",
            pub,
            msg,
            signed(pub, a, ident, 0, msg),
            True,
        ),
        ("R = identity encoded as y = p + 1", ident, msg, enc_y(P + 1) + bytes(32), False),
        ("R = identity with the sign bit set", ident, msg, enc_y(1, 1) + bytes(32), False),
        (
            "mixed-order key, k = 1 mod 8",
            mixed,
            by_k_mod8[True],
            signed(mixed, a, rb, 9, by_k_mod8[True]),
            True,
        ),
        (
            "mixed-order key, cofactored-only signature",
            mixed,
            by_k_mod8[False],
            signed(mixed, a, rb, 9, by_k_mod8[False]),
            False,
        ),
    ]


def test_openssl_edge_semantics() -> None:
    """Each verification edge rule, by name: OpenSSL's answer is pinned here, so a change in
    OpenSSL shows up as a named failure, and the C core must give the same answer."""
    cases = named_edge_cases()
    for name, pub, msg, sig, want in cases:
        assert openssl_verify(pub, msg, sig) == want, name
        assert model_verify(pub, msg, sig) == want, name
    got = single(crypto([("verify", [pub, msg, sig]) for _, pub, msg, sig, _ in cases]))
    assert {name: bool(g) for (name, *_), g in zip(cases, got, strict=True)} == {
        name: want for name, *_, want in cases
    }
