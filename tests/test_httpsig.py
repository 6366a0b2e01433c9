"""HTTP Message Signatures (RFC 9421) as the gateway signs and the fleet verifies.

Anchors: RFC 9421 Appendix B.2.6 (the Ed25519 example, reproduced byte for byte), an
oracle signature base written here from the RFC's text and checked with
``cryptography`` over thousands of random requests, and an independent RFC 9421
implementation (PyPI ``http-message-signatures``) signing for our verifier and
verifying what we sign. Then every refusal reason, and the nonce cache's bound.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import random
import threading
from collections.abc import Callable

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from http_message_signatures import (
    HTTPMessageSigner,
    HTTPMessageVerifier,
    MappingKeyResolver,
    algorithms,
)
from requests.models import Request

from hirmem.protocol import httpsig
from hirmem.protocol.httpsig import HttpSignatureError, NonceCache

# ---- RFC 9421 Appendix B ------------------------------------------------------------------

# B.1.4 (test-key-ed25519), PKCS#8
RFC_PRIVATE_PEM = b"""-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIJ+DYvh6SEqVTm50DFtMDoQikTmiCqirVv9mWG9qfSnF
-----END PRIVATE KEY-----
"""
RFC_PUBLIC_B64 = "JrQLj5P/89iXES9+vFgrIy29clF9CC/oPPsw3c5D0bs="  # the SPKI's raw 32 bytes
# B.2, the test request
RFC_HEADERS = {
    "Host": "example.com",
    "Date": "Tue, 20 Apr 2021 02:07:55 GMT",
    "Content-Type": "application/json",
    "Content-Digest": "sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7"
    "BNNyealdVLvRwEmTHWXvJwew==:",
    "Content-Length": "18",
}
RFC_BODY = b'{"hello": "world"}'
# B.2.6: base, Signature-Input and Signature (RFC 8792 line wraps undone)
RFC_B26_BASE = (
    '"date": Tue, 20 Apr 2021 02:07:55 GMT\n'
    '"@method": POST\n'
    '"@path": /foo\n'
    '"@authority": example.com\n'
    '"content-type": application/json\n'
    '"content-length": 18\n'
    '"@signature-params": ("date" "@method" "@path" "@authority" "content-type" '
    '"content-length");created=1618884473;keyid="test-key-ed25519"'
)
RFC_B26_INPUT = (
    'sig-b26=("date" "@method" "@path" "@authority" "content-type" "content-length")'
    ';created=1618884473;keyid="test-key-ed25519"'
)
RFC_B26_SIGNATURE = (
    "sig-b26=:wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5"
    "WPpBKRCw==:"
)
B26_COVERED = ("date", "@method", "@path", "@authority", "content-type", "content-length")


def rfc_key() -> Ed25519PrivateKey:
    key = load_pem_private_key(RFC_PRIVATE_PEM, password=None)
    assert isinstance(key, Ed25519PrivateKey)
    return key


def test_rfc9421_b26_reproduced_exactly() -> None:
    key = rfc_key()
    assert base64.b64encode(key.public_key().public_bytes_raw()).decode() == RFC_PUBLIC_B64
    # the B.2 request is self-consistent: its Content-Digest is the body's SHA-512
    digest = base64.b64encode(hashlib.sha512(RFC_BODY).digest()).decode()
    assert RFC_HEADERS["Content-Digest"] == f"sha-512=:{digest}:"
    params: dict[str, httpsig.SfBare | httpsig.Token] = {
        "created": 1618884473, "keyid": "test-key-ed25519",
    }  # fmt: skip
    signature_input, signature = httpsig.sign_components(
        "POST", "example.com", "/foo", RFC_HEADERS, B26_COVERED, params, key, "sig-b26"
    )
    assert signature_input == RFC_B26_INPUT
    assert signature == RFC_B26_SIGNATURE  # Ed25519 is deterministic: the very bytes
    components = [
        (n, httpsig.component_value(n, "POST", "example.com", "/foo", RFC_HEADERS))
        for n in B26_COVERED
    ]
    inner = RFC_B26_INPUT.split("=", 1)[1]
    assert httpsig.signature_base(components, inner).decode() == RFC_B26_BASE


def test_rfc9421_b26_parses_back_and_verifies() -> None:
    members = httpsig.parse_dictionary(RFC_B26_INPUT)
    inner = members["sig-b26"]
    assert isinstance(inner, httpsig.SfInnerList)
    assert [i.value for i in inner.items] == list(B26_COVERED)
    assert "sig-b26=" + httpsig.serialize_inner_list(inner) == RFC_B26_INPUT
    signature = httpsig.parse_dictionary(RFC_B26_SIGNATURE)["sig-b26"]
    assert isinstance(signature, httpsig.SfItem) and isinstance(signature.value, bytes)
    public = rfc_key().public_key()
    public.verify(signature.value, RFC_B26_BASE.encode())
    with pytest.raises(InvalidSignature):
        public.verify(signature.value, RFC_B26_BASE.replace("/foo", "/fop").encode())
    # the gateway profile asks for more than B.2.6 carries: no "hm" label at all
    headers = {**RFC_HEADERS, "Signature-Input": RFC_B26_INPUT, "Signature": RFC_B26_SIGNATURE}
    refusal = refused(headers, RFC_BODY, path="/foo", authority="example.com", method="POST")
    assert refusal.reason == "missing"
    # and under the right label it lacks the required components and parameters
    relabelled = {**RFC_HEADERS, "Signature-Input": RFC_B26_INPUT.replace("sig-b26", "hm"),
                  "Signature": RFC_B26_SIGNATURE.replace("sig-b26", "hm")}  # fmt: skip
    refusal = refused(relabelled, RFC_BODY, path="/foo", authority="example.com", method="POST")
    assert refusal.reason == "malformed" and "content-digest" in refusal.detail


# ---- an oracle from the RFC's text, checked with cryptography -------------------------------

NOW = 1_700_000_000  # in the past: the independent implementation refuses the future
AUTHORITY = "fleet.example:8443"
CTYPE = 'application/cose; cose-type="cose-sign1"'


def sf_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def oracle_base(
    method: str, authority: str, path: str, ctype: str, body: bytes,
    created: int, nonce: str, keyid: str,
) -> bytes:  # fmt: skip
    """RFC 9421 §2.5 written out for exactly the gateway's covered components."""
    digest = "sha-256=:" + base64.b64encode(hashlib.sha256(body).digest()).decode() + ":"
    params = (
        '("@method" "@authority" "@path" "content-type" "content-digest")'
        f";created={created};nonce={sf_string(nonce)};keyid={sf_string(keyid)}"
        ';alg="ed25519"'
    )
    return (
        f'"@method": {method}\n"@authority": {authority.lower()}\n"@path": {path}\n'
        f'"content-type": {ctype}\n"content-digest": {digest}\n"@signature-params": {params}'
    ).encode()


def random_request(rng: random.Random) -> dict[str, object]:
    printable = "".join(chr(c) for c in range(0x20, 0x7F))
    return {
        "method": rng.choice(["PUT", "POST", "GET", "DELETE"]),
        "authority": rng.choice(["fleet.example", "Fleet.Example:8443", "127.0.0.1:9000"]),
        "path": "/v1/packs/" + rng.randbytes(rng.randrange(1, 17)).hex(),
        "ctype": rng.choice([CTYPE, "application/octet-stream", "text/plain;charset=utf-8"]),
        "body": rng.randbytes(rng.randrange(0, 600)),
        "created": NOW + rng.randrange(-299, 300),
        "nonce": "".join(rng.choice(printable) for _ in range(rng.randrange(1, 24))),
        "keyid": rng.choice(["gw-1", 'gateway "two"', "k\\3",
                             base64.b64encode(rng.randbytes(8)).decode()]),
    }  # fmt: skip


def sign_ours(req: dict[str, object], key: Ed25519PrivateKey) -> dict[str, str]:
    headers = {"Content-Type": str(req["ctype"])}
    added = httpsig.sign_request(
        str(req["method"]), str(req["authority"]), str(req["path"]), headers,
        bytes(req["body"]), key, str(req["keyid"]), int(req["created"]), str(req["nonce"]),  # type: ignore[call-overload]
    )  # fmt: skip
    return {**headers, **added}


def verify_ours(
    req: dict[str, object], headers: dict[str, str], keys: dict[str, Ed25519PublicKey],
    nonces: NonceCache | None = None, *, body: bytes | None = None,
) -> str:  # fmt: skip
    return httpsig.verify_request(
        str(req["method"]), str(req["authority"]), str(req["path"]), headers,
        bytes(req["body"]) if body is None else body,  # type: ignore[call-overload]
        keys.get, NOW, NonceCache() if nonces is None else nonces,
    )  # fmt: skip


def test_differential_against_an_oracle_base_over_random_requests() -> None:
    rng = random.Random(9421)
    keys = [Ed25519PrivateKey.generate() for _ in range(4)]
    nonces = NonceCache()
    for round_ in range(2500):
        req = random_request(rng)
        key = rng.choice(keys)
        public = {str(req["keyid"]): key.public_key()}
        base = oracle_base(**req)  # type: ignore[arg-type]
        # ours signs: the oracle base verifies with cryptography
        headers = sign_ours(req, key)
        sig = httpsig.parse_dictionary(headers["Signature"])["hm"]
        assert isinstance(sig, httpsig.SfItem) and isinstance(sig.value, bytes)
        key.public_key().verify(sig.value, base)
        # the oracle signs with cryptography: ours verifies (fresh nonce each round)
        req["nonce"] = f"{req['nonce']}#{round_}"
        base = oracle_base(**req)  # type: ignore[arg-type]
        signed = {
            "content-type": str(req["ctype"]),
            "content-digest": "sha-256=:"
            + base64.b64encode(hashlib.sha256(bytes(req["body"])).digest()).decode() + ":",  # type: ignore[call-overload]
            "signature-input": "hm="
            + base.decode().rsplit('"@signature-params": ', 1)[1],
            "signature": "hm=:" + base64.b64encode(key.sign(base)).decode() + ":",
        }  # fmt: skip
        assert verify_ours(req, signed, public, nonces) == req["keyid"]
        # one change anywhere covered and the oracle-signed request is refused
        what = rng.choice(["body", "path", "method", "authority", "ctype", "sig", "created"])
        tampered = dict(signed)
        body = bytes(req["body"])  # type: ignore[call-overload]
        changed = dict(req)
        if what == "body":
            body = body + b"x"
        elif what == "path":
            changed["path"] = str(req["path"]) + "0"
        elif what == "method":
            changed["method"] = "PATCH"
        elif what == "authority":
            changed["authority"] = "evil.example"
        elif what == "ctype":
            tampered["content-type"] = "application/json"
        elif what == "sig":
            raw = bytearray(key.sign(base))
            raw[rng.randrange(64)] ^= 1 << rng.randrange(8)
            tampered["signature"] = "hm=:" + base64.b64encode(bytes(raw)).decode() + ":"
        else:
            tampered["signature-input"] = signed["signature-input"].replace(
                f"created={req['created']}", f"created={int(req['created']) + 1}"  # type: ignore[call-overload]
            )
        with pytest.raises(HttpSignatureError) as info:
            verify_ours(changed, tampered, public, NonceCache(), body=body)
        want = "digest-mismatch" if what == "body" else "bad-signature"
        assert info.value.reason == want, (what, info.value)


def test_differential_against_an_independent_rfc9421_implementation() -> None:
    rng = random.Random(17)
    key = Ed25519PrivateKey.generate()
    resolver = MappingKeyResolver(public_keys={"gw": key.public_key()}, private_keys={"gw": key})
    signer = HTTPMessageSigner(signature_algorithm=algorithms.ED25519, key_resolver=resolver)
    verifier = HTTPMessageVerifier(signature_algorithm=algorithms.ED25519, key_resolver=resolver)
    for _ in range(300):
        req = random_request(rng)
        req["keyid"] = "gw"
        req["nonce"] = base64.urlsafe_b64encode(rng.randbytes(12)).decode()
        url = f"https://{str(req['authority']).lower()}{req['path']}"
        body = bytes(req["body"])  # type: ignore[call-overload]
        # theirs signs, ours verifies
        theirs = Request(
            str(req["method"]), url, data=body, headers={"Content-Type": str(req["ctype"])}
        ).prepare()
        signer.sign(
            theirs, key_id="gw", nonce=str(req["nonce"]), label="hm", include_alg=True,
            created=datetime.datetime.fromtimestamp(int(req["created"]), datetime.UTC),  # type: ignore[call-overload]
            covered_component_ids=httpsig.COVERED, body=body,
        )  # fmt: skip
        assert verify_ours(req, {k: str(v) for k, v in theirs.headers.items()},
                           {"gw": key.public_key()}) == "gw"  # fmt: skip
        # ours signs, theirs verifies
        ours = Request(str(req["method"]), url, data=body, headers=sign_ours(req, key))
        prepared = ours.prepare()
        results = verifier.verify(prepared, max_age=None, require_components=httpsig.COVERED,
                                  body=body)  # fmt: skip
        assert [r.label for r in results] == ["hm"]
        assert results[0].parameters["nonce"] == req["nonce"]


# ---- every refusal reason ----------------------------------------------------------------

GW_KEY = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"httpsig test gateway").digest())
GW_PUBLIC = GW_KEY.public_key()
BODY = b"\xd2\x84 a pack's bytes"


def signed(**override: object) -> dict[str, str]:
    req = {"method": "PUT", "authority": AUTHORITY, "path": "/v1/packs/00ff", "ctype": CTYPE,
           "body": BODY, "created": NOW, "nonce": "n-1", "keyid": "gw-1", **override}  # fmt: skip
    return sign_ours(req, GW_KEY)


def refused(
    headers: dict[str, str], body: bytes = BODY, *, method: str = "PUT",
    authority: str = AUTHORITY, path: str = "/v1/packs/00ff",
    keys: Callable[[str], Ed25519PublicKey | None] = {"gw-1": GW_PUBLIC}.get,
    nonces: NonceCache | None = None, now: int = NOW,
) -> HttpSignatureError:  # fmt: skip
    with pytest.raises(HttpSignatureError) as info:
        httpsig.verify_request(method, authority, path, headers, body, keys, now,
                               NonceCache() if nonces is None else nonces)  # fmt: skip
    assert info.value.reason in httpsig.REASONS
    return info.value


def test_a_good_request_verifies_and_headers_are_case_blind() -> None:
    headers = signed()
    assert httpsig.verify_request(
        "PUT", AUTHORITY.upper(), "/v1/packs/00ff", {k.upper(): v for k, v in headers.items()},
        BODY, {"gw-1": GW_PUBLIC}.get, NOW, NonceCache(),
    ) == "gw-1"  # fmt: skip
    # whitespace a proxy adds between dictionary members does not matter
    spaced = {**headers, "Signature-Input": "other=();created=1,   " + headers["Signature-Input"]}
    assert httpsig.verify_request("PUT", AUTHORITY, "/v1/packs/00ff", spaced, BODY,
                                  {"gw-1": GW_PUBLIC}.get, NOW, NonceCache()) == "gw-1"  # fmt: skip


@pytest.mark.parametrize("drop", ["Signature-Input", "Signature", "Content-Digest", "Content-Type"])
def test_missing(drop: str) -> None:
    headers = {k: v for k, v in signed().items() if k != drop}
    assert refused(headers).reason == "missing"


def test_missing_label() -> None:
    headers = signed()
    headers["Signature"] = headers["Signature"].replace("hm=", "other=")
    assert refused(headers).reason == "missing"


MALFORMED: list[tuple[str, str, str]] = [
    ("Signature-Input", "hm=(", "empty"),
    ("Signature-Input", 'hm=("@method");created=1', "does not cover"),
    ("Signature-Input", "hm=1", "not an inner list"),
    ("Signature", "hm=:AAAA:", "64 bytes"),
    ("Signature", 'hm="text"', "not a byte sequence"),
    ("Signature", "hm=:!!:", "byte sequence"),
    ("Signature-Input", "hm=(), hm=()", "twice"),
    ("Signature-Input", "hm=();created=1.5", "decimal"),
    ("Signature-Input", "hm=(),", "trailing"),
    ("Signature-Input", "hm=()\u00e9", "ASCII"),
]


@pytest.mark.parametrize(("field", "value", "says"), MALFORMED)
def test_malformed_headers(field: str, value: str, says: str) -> None:
    headers = {**signed(), field: value}
    refusal = refused(headers)
    assert refusal.reason == "malformed" and says in refusal.detail, refusal


def _resigned(transform: Callable[[str], str]) -> dict[str, str]:
    """The request signed again over a changed Signature-Input (so only the change
    can be what is refused)."""
    headers = signed()
    inner = transform(headers["Signature-Input"].split("=", 1)[1])
    members = httpsig.parse_dictionary("hm=" + inner)["hm"]
    assert isinstance(members, httpsig.SfInnerList)
    covered = [str(i.value) for i in members.items]
    try:
        components = [(n, httpsig.component_value(n, "PUT", AUTHORITY, "/v1/packs/00ff",
                                                  headers)) for n in covered]  # fmt: skip
    except HttpSignatureError:  # a component that cannot be signed: any signature will do
        components = []
    base = httpsig.signature_base(components, httpsig.serialize_inner_list(members))
    headers["Signature-Input"] = "hm=" + inner
    headers["Signature"] = "hm=:" + base64.b64encode(GW_KEY.sign(base)).decode() + ":"
    return headers


@pytest.mark.parametrize(("change", "says"), [
    (lambda s: s.replace('alg="ed25519"', 'alg="rsa-pss-sha512"'), "alg"),
    (lambda s: s.replace(';nonce="n-1"', ""), "'nonce'"),
    (lambda s: s.replace(";created=", ";created=?1;x="), "'created' parameter is not"),
    (lambda s: s.replace('keyid="gw-1"', "keyid=gw"), "'keyid' parameter is not"),
    (lambda s: s.replace('"@path" ', ""), "'@path'"),
    (lambda s: s.replace('"@path"', '"@path" "@path"'), "twice"),
    (lambda s: s.replace('"@path"', '"@path";req'), "plain component"),
    (lambda s: s.replace('"@path"', '"@path" "@query"'), "not supported"),
    (lambda s: s.replace('"@path"', '"@path" "x-absent"'), "x-absent"),
])  # fmt: skip
def test_malformed_signature_parameters(change: Callable[[str], str], says: str) -> None:
    refusal = refused(_resigned(change))
    assert refusal.reason in ("malformed", "missing") and says in refusal.detail, refusal


def test_extra_covered_fields_and_parameters_are_allowed() -> None:
    headers = _resigned(lambda s: s.replace('"@path"', '"@path" "content-type2"')
                        .replace(";alg", ';tag="x";alg'))  # fmt: skip
    assert refused(headers).reason == "missing"  # the extra field must exist…
    headers["content-type2"] = "x"
    headers = _resigned(lambda s: s.replace('"@path"', '"@path" "x-extra"'))
    headers["x-extra"] = "1"  # …and then it is signed over like any other
    assert refused(headers).reason == "bad-signature"


def test_unknown_and_revoked_keys() -> None:
    assert refused(signed(keyid="gw-9")).reason == "unknown-key"
    assert refused(signed(), keys=lambda kid: None).reason == "unknown-key"  # revoked


def test_bad_signature() -> None:
    other = Ed25519PrivateKey.generate()
    assert refused(signed(), keys={"gw-1": other.public_key()}.get).reason == "bad-signature"
    assert refused(signed(), path="/v1/packs/00fe").reason == "bad-signature"
    assert refused(signed(), method="POST").reason == "bad-signature"
    assert refused(signed(), authority="fleet.example:8444").reason == "bad-signature"
    headers = signed()
    headers["Content-Type"] = "application/cbor"
    assert refused(headers).reason == "bad-signature"
    headers = signed()  # a Content-Digest swapped for another body's (it is covered)
    headers["Content-Digest"] = httpsig.content_digest(b"other")
    assert refused(headers, b"other").reason == "bad-signature"


@pytest.mark.parametrize("offset", [-301, 301, -10**6])
def test_stale(offset: int) -> None:
    assert refused(signed(created=NOW + offset)).reason == "stale"
    httpsig.verify_request("PUT", AUTHORITY, "/v1/packs/00ff", signed(created=NOW + offset),
                           BODY, {"gw-1": GW_PUBLIC}.get, NOW + offset, NonceCache())  # fmt: skip


def test_expired() -> None:
    headers = _resigned(lambda s: s + f";expires={NOW - 1}")
    assert refused(headers).reason == "stale"


def test_replayed_and_a_forgery_cannot_burn_a_nonce() -> None:
    nonces = NonceCache()
    forged = signed()
    forged["Signature"] = "hm=:" + base64.b64encode(bytes(64)).decode() + ":"
    assert refused(forged, nonces=nonces).reason == "bad-signature"
    assert len(nonces) == 0
    headers = signed()
    httpsig.verify_request("PUT", AUTHORITY, "/v1/packs/00ff", headers, BODY,
                           {"gw-1": GW_PUBLIC}.get, NOW, nonces)  # fmt: skip
    assert refused(headers, nonces=nonces).reason == "replayed"
    assert refused(headers, nonces=nonces, now=NOW + 299).reason == "replayed"
    # the same nonce from another gateway's key is its own
    keys = {"gw-1": GW_PUBLIC, "gw-2": GW_PUBLIC}
    httpsig.verify_request("PUT", AUTHORITY, "/v1/packs/00ff", signed(keyid="gw-2"), BODY,
                           keys.get, NOW, nonces)  # fmt: skip


def test_digest_mismatch() -> None:
    assert refused(signed(), BODY + b"!").reason == "digest-mismatch"
    assert refused(signed(), b"").reason == "digest-mismatch"


def test_a_content_digest_without_sha256_is_malformed() -> None:
    headers = signed(body=BODY)
    digest = base64.b64encode(hashlib.sha512(BODY).digest()).decode()
    headers = _resigned(lambda s: s)  # same input; swap the digest and sign again
    headers["Content-Digest"] = f"sha-512=:{digest}:"
    inner = headers["Signature-Input"].split("=", 1)[1]
    members = httpsig.parse_dictionary("hm=" + inner)["hm"]
    assert isinstance(members, httpsig.SfInnerList)
    base = httpsig.signature_base(
        [(str(i.value), httpsig.component_value(str(i.value), "PUT", AUTHORITY,
                                                "/v1/packs/00ff", headers))
         for i in members.items], inner)  # fmt: skip
    headers["Signature"] = "hm=:" + base64.b64encode(GW_KEY.sign(base)).decode() + ":"
    refusal = refused(headers)
    assert refusal.reason == "malformed" and "sha-256" in refusal.detail


def test_a_component_value_with_a_newline_is_refused_not_signed() -> None:
    with pytest.raises(HttpSignatureError) as info:
        signed(ctype="a\n\"@path\": /other")
    assert info.value.reason == "malformed"


# ---- the nonce cache -------------------------------------------------------------------------


def test_nonce_cache_forgets_what_left_the_window() -> None:
    cache = NonceCache(capacity=10)
    assert cache.admit("k", "a", created=100, now=100, window=300) is None
    assert cache.admit("k", "a", created=100, now=400, window=300) == "replayed"
    assert cache.admit("k", "b", created=500, now=500, window=300) is None
    assert len(cache) == 1  # "a" (created 100) left at now 500 > 100 + 300


def test_nonce_cache_bound_never_lets_a_replay_through() -> None:
    """A fake clock over two days, random requests and replays, against an oracle that
    remembers every nonce: at every step the cache holds at most its capacity, and an
    accepted request is never one seen before within the window."""
    rng = random.Random(3)
    window = 300
    cache = NonceCache(capacity=16)
    oracle: dict[tuple[str, str], int] = {}
    now = 0
    accepted = stale = replayed = 0
    issued: list[tuple[str, str, int]] = []
    while now < 2 * 86400:
        now += rng.choice([0, 1, 1, 2, 5, 30])
        if issued and rng.random() < 0.3:  # a replay of something issued earlier
            keyid, nonce, created = rng.choice(issued[-200:])
        else:
            keyid, nonce = rng.choice("abc"), f"{now}-{rng.randrange(10**9)}"
            created = now + rng.randrange(-window, window + 1)
            issued.append((keyid, nonce, created))
        if abs(now - created) > window:
            continue  # the verifier refuses it as stale before the cache is asked
        verdict = cache.admit(keyid, nonce, created, now, window)
        assert len(cache) <= cache.capacity
        if verdict is None:
            assert (keyid, nonce) not in oracle, "a replay was accepted"
            oracle[(keyid, nonce)] = created
            accepted += 1
        elif verdict == "replayed":
            assert (keyid, nonce) in oracle
            replayed += 1
        else:
            assert verdict == "stale"
            stale += 1
    assert accepted > 1000 and replayed > 300 and cache.evicted > 0 and stale > 0


def test_nonce_cache_two_threads_same_nonce_one_wins() -> None:
    for round_ in range(200):
        cache = NonceCache()
        results: list[str | None] = []
        barrier = threading.Barrier(2)

        def admit(
            cache: NonceCache = cache, barrier: threading.Barrier = barrier,
            results: list[str | None] = results, nonce: str = f"n{round_}",
        ) -> None:  # fmt: skip
            barrier.wait()
            results.append(cache.admit("k", nonce, 10, 10, 300))

        threads = [threading.Thread(target=admit) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results, key=str) == [None, "replayed"]
