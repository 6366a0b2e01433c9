"""HTTP Message Signatures (RFC 9421) with Ed25519, as a gateway signs its uploads.

A gateway signs each request to the fleet with its Ed25519 key under the label ``hm``,
covering ``"@method" "@authority" "@path" "content-type" "content-digest"`` with the
parameters ``created``, ``nonce``, ``keyid`` and ``alg="ed25519"``; the body is bound
through Content-Digest (RFC 9530, sha-256). The fleet verifies with
:func:`verify_request`, which refuses with one :class:`HttpSignatureError` reason of
:data:`REASONS`.

The structured fields (RFC 8941) the headers use are parsed strictly here: dictionaries
of items or inner lists with parameters; anything else is ``malformed``. The signature
base is built from the parsed Signature-Input and re-serialized in RFC 8941's canonical
form, so whitespace a proxy may add between members does not break a signature.
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from hirmem.protocol.errors import HirmemError

LABEL = "hm"
ALG = "ed25519"
COVERED: tuple[str, ...] = ("@method", "@authority", "@path", "content-type", "content-digest")
DERIVED = frozenset({"@method", "@authority", "@path"})
MAX_SKEW = 300  # seconds either side of the verifier's clock

# Why a request was refused; a verifier counts refusals by these.
REASONS = frozenset({
    "missing",  # no Signature-Input / Signature / Content-Digest, or no "hm" label
    "malformed",  # headers that do not parse, or a signature not over what is required
    "unknown-key",  # a keyid the registry does not know, or a revoked one
    "bad-signature",  # does not verify with the key
    "stale",  # created outside the window (or expired)
    "replayed",  # a nonce seen within the window
    "digest-mismatch",  # Content-Digest is not the body's
})  # fmt: skip

SfBare = int | str | bytes | bool  # RFC 8941 bare items kept here (tokens as Token)
SfParams = dict[str, "SfBare | Token"]


class HttpSignatureError(HirmemError):
    """A request's signature was refused; ``reason`` is one of :data:`REASONS`."""

    def __init__(self, reason: str, detail: str) -> None:
        if reason not in REASONS:
            raise ValueError(f"unknown refusal reason {reason!r}")
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


# ---- RFC 8941 structured fields (the subset signatures use, parsed strictly) -----------


@dataclass(frozen=True, slots=True)
class Token:
    """An RFC 8941 token (an unquoted bare item)."""

    value: str


@dataclass(frozen=True, slots=True)
class SfItem:
    value: SfBare | Token
    params: SfParams


@dataclass(frozen=True, slots=True)
class SfInnerList:
    items: tuple[SfItem, ...]
    params: SfParams


class _SfSyntax(ValueError):
    pass


_KEY = re.compile(r"[a-z*][a-z0-9_\-.*]*")
_TOKEN = re.compile(r"[A-Za-z*][!#$%&'*+\-.^_`|~0-9A-Za-z:/]*")
_INTEGER = re.compile(r"-?[0-9]{1,15}")
_BASE64 = re.compile(r"[A-Za-z0-9+/=]*")


class _Parser:
    def __init__(self, text: str) -> None:
        if not text.isascii():
            raise _SfSyntax("not ASCII")
        self.text = text
        self.at = 0

    def peek(self) -> str:
        return self.text[self.at] if self.at < len(self.text) else ""

    def skip(self, chars: str) -> None:
        while self.at < len(self.text) and self.text[self.at] in chars:
            self.at += 1

    def match(self, pattern: re.Pattern[str], what: str) -> str:
        found = pattern.match(self.text, self.at)
        if found is None:
            raise _SfSyntax(f"expected {what} at offset {self.at}")
        self.at = found.end()
        return found.group()

    def dictionary(self) -> dict[str, SfItem | SfInnerList]:
        members: dict[str, SfItem | SfInnerList] = {}
        self.skip(" ")
        while self.at < len(self.text):
            key = self.match(_KEY, "a key")
            if self.peek() == "=":
                self.at += 1
                member: SfItem | SfInnerList = (
                    self.inner_list() if self.peek() == "(" else self.item()
                )
            else:
                member = SfItem(True, self.params())
            if key in members:  # RFC 8941 keeps the last; for signatures that is an attack
                raise _SfSyntax(f"the key {key!r} appears twice")
            members[key] = member
            self.skip(" \t")
            if self.at >= len(self.text):
                break
            if self.peek() != ",":
                raise _SfSyntax(f"expected ',' at offset {self.at}")
            self.at += 1
            self.skip(" \t")
            if self.at >= len(self.text):
                raise _SfSyntax("a trailing ','")
        return members

    def inner_list(self) -> SfInnerList:
        self.at += 1  # "("
        items: list[SfItem] = []
        while True:
            self.skip(" ")
            if self.peek() == ")":
                self.at += 1
                return SfInnerList(tuple(items), self.params())
            items.append(self.item())
            if self.peek() not in (" ", ")"):
                raise _SfSyntax(f"expected ' ' or ')' at offset {self.at}")

    def item(self) -> SfItem:
        value = self.bare()
        return SfItem(value, self.params())

    def params(self) -> SfParams:
        params: SfParams = {}
        while self.peek() == ";":
            self.at += 1
            self.skip(" ")
            key = self.match(_KEY, "a parameter key")
            value: SfBare | Token = True
            if self.peek() == "=":
                self.at += 1
                value = self.bare()
            if key in params:
                raise _SfSyntax(f"the parameter {key!r} appears twice")
            params[key] = value
        return params

    def bare(self) -> SfBare | Token:
        c = self.peek()
        if c == '"':
            return self.string()
        if c == ":":
            self.at += 1
            encoded = self.match(_BASE64, "base64")
            if self.peek() != ":":
                raise _SfSyntax(f"an unterminated byte sequence at offset {self.at}")
            self.at += 1
            try:
                return base64.b64decode(encoded, validate=True)
            except ValueError:
                raise _SfSyntax("a byte sequence that is not base64") from None
        if c == "?":
            self.at += 1
            flag = self.peek()
            if flag not in ("0", "1"):
                raise _SfSyntax(f"a bad boolean at offset {self.at}")
            self.at += 1
            return flag == "1"
        if c == "-" or c.isdigit():
            number = self.match(_INTEGER, "an integer")
            if self.peek() == ".":  # decimals carry no meaning in a signature header
                raise _SfSyntax(f"a decimal at offset {self.at}")
            return int(number)
        if c.isascii() and (c.isalpha() or c == "*"):
            return Token(self.match(_TOKEN, "a token"))
        raise _SfSyntax(f"an unexpected {c!r} at offset {self.at}" if c else "an empty value")

    def string(self) -> str:
        self.at += 1
        out: list[str] = []
        while self.at < len(self.text):
            c = self.text[self.at]
            self.at += 1
            if c == "\\":
                escaped = self.peek()
                if escaped not in ('"', "\\"):
                    raise _SfSyntax(f"a bad escape at offset {self.at}")
                out.append(escaped)
                self.at += 1
            elif c == '"':
                return "".join(out)
            elif not " " <= c <= "~":
                raise _SfSyntax(f"a control character in a string at offset {self.at - 1}")
            else:
                out.append(c)
        raise _SfSyntax("an unterminated string")


def parse_dictionary(text: str) -> dict[str, SfItem | SfInnerList]:
    """An RFC 8941 dictionary; :class:`ValueError` when it does not parse."""
    return _Parser(text).dictionary()


def _serialize_bare(value: SfBare | Token) -> str:
    if isinstance(value, bool):
        return "?1" if value else "?0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Token):
        return value.value
    if isinstance(value, bytes):
        return f":{base64.b64encode(value).decode()}:"
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _serialize_params(params: Mapping[str, SfBare | Token]) -> str:
    return "".join(
        f";{key}" if value is True else f";{key}={_serialize_bare(value)}"
        for key, value in params.items()
    )


def serialize_inner_list(inner: SfInnerList) -> str:
    items = " ".join(_serialize_bare(i.value) + _serialize_params(i.params) for i in inner.items)
    return f"({items}){_serialize_params(inner.params)}"


# ---- signature base (RFC 9421 §2.5) -----------------------------------------------------


def content_digest(body: bytes) -> str:
    """The Content-Digest field value for ``body`` (RFC 9530, sha-256)."""
    return f"sha-256=:{base64.b64encode(hashlib.sha256(body).digest()).decode()}:"


def _header(headers: Mapping[str, str], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name:
            return value.strip(" \t")
    return None


def component_value(
    name: str, method: str, authority: str, path: str, headers: Mapping[str, str]
) -> str:
    """One covered component's value; ``missing`` when the request has no such field."""
    if name == "@method":
        value = method
    elif name == "@authority":
        value = authority.lower()
    elif name == "@path":
        value = path or "/"
    elif name.startswith("@"):
        raise HttpSignatureError("malformed", f"the derived component {name!r} is not supported")
    else:
        field = _header(headers, name)
        if field is None:
            raise HttpSignatureError("missing", f"the covered field {name!r} is not in the request")
        value = field
    if not value.isascii() or any(c in value for c in "\r\n\0"):
        raise HttpSignatureError("malformed", f"the {name!r} value holds a control character")
    return value


def signature_base(components: Sequence[tuple[str, str]], params: str) -> bytes:
    """The signature base: one ``"name": value`` line per covered component, then the
    ``"@signature-params"`` line with the serialized inner list ``params``."""
    lines = [f'"{name}": {value}' for name, value in components]
    lines.append(f'"@signature-params": {params}')
    return "\n".join(lines).encode("ascii")


def sign_components(
    method: str,
    authority: str,
    path: str,
    headers: Mapping[str, str],
    covered: Sequence[str],
    params: Mapping[str, SfBare | Token],
    key: Ed25519PrivateKey,
    label: str,
) -> tuple[str, str]:
    """Sign the ``covered`` components with ``params``: the (Signature-Input,
    Signature) field values under ``label``. General; :func:`sign_request` is the
    gateway's use of it."""
    inner = SfInnerList(tuple(SfItem(name, {}) for name in covered), dict(params))
    serialized = serialize_inner_list(inner)
    base = signature_base(
        [(n, component_value(n, method, authority, path, headers)) for n in covered], serialized
    )
    signature = key.sign(base)
    return f"{label}={serialized}", f"{label}=:{base64.b64encode(signature).decode()}:"


def sign_request(
    method: str,
    authority: str,
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    key: Ed25519PrivateKey,
    keyid: str,
    created: int,
    nonce: str,
) -> dict[str, str]:
    """The headers to add to a request (Content-Digest, Signature-Input, Signature)."""
    digest = content_digest(body)
    with_digest = {**{k: v for k, v in headers.items() if k.lower() != "content-digest"},
                   "content-digest": digest}  # fmt: skip
    params: dict[str, SfBare | Token] = {
        "created": created, "nonce": nonce, "keyid": keyid, "alg": ALG,
    }  # fmt: skip
    signature_input, signature = sign_components(
        method, authority, path, with_digest, COVERED, params, key, LABEL
    )
    return {"Content-Digest": digest, "Signature-Input": signature_input, "Signature": signature}


# ---- verification -------------------------------------------------------------------------


class NonceCache:
    """The nonces seen per keyid, each kept until its ``created`` leaves the window.

    Bounded: at ``capacity`` entries the one with the oldest ``created`` is evicted and
    ``floor`` rises to its ``created``; a request created at or before the floor is then
    refused (:meth:`admit` returns "stale"), because its nonce may have been forgotten.
    Nothing replayable is ever accepted, whatever the load. Thread-safe.
    """

    def __init__(self, capacity: int = 1_000_000) -> None:
        if capacity < 1:
            raise ValueError("a nonce cache holds at least one nonce")
        self.capacity = capacity
        self.floor: int | None = None
        self.evicted = 0  # entries dropped for the bound (each raised the floor)
        self._seen: dict[tuple[str, str], int] = {}
        self._by_created: list[tuple[int, str, str]] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._seen)

    def admit(self, keyid: str, nonce: str, created: int, now: int, window: int) -> str | None:
        """Record the nonce; None when it is new, else the refusal reason."""
        with self._lock:
            # forget what left the window: a replay of it is refused as stale anyway
            while self._by_created and self._by_created[0][0] < now - window:
                _, k, n = heapq.heappop(self._by_created)
                self._seen.pop((k, n), None)
            if self.floor is not None and created <= self.floor:
                return "stale"
            if (keyid, nonce) in self._seen:
                return "replayed"
            while len(self._seen) >= self.capacity:
                oldest, k, n = heapq.heappop(self._by_created)
                del self._seen[(k, n)]
                self.floor = oldest if self.floor is None else max(self.floor, oldest)
                self.evicted += 1
            if self.floor is not None and created <= self.floor:
                return "stale"
            self._seen[(keyid, nonce)] = created
            heapq.heappush(self._by_created, (created, keyid, nonce))
            return None


def _member(headers: Mapping[str, str], field: str) -> SfItem | SfInnerList:
    raw = _header(headers, field)
    if raw is None:
        raise HttpSignatureError("missing", f"no {field} header")
    try:
        members = parse_dictionary(raw)
    except ValueError as exc:
        raise HttpSignatureError("malformed", f"{field}: {exc}") from None
    if LABEL not in members:
        raise HttpSignatureError("missing", f"{field} has no {LABEL!r} signature")
    return members[LABEL]


def _param(params: SfParams, name: str, kind: type) -> object:
    value = params.get(name)
    if value is None:
        raise HttpSignatureError("malformed", f"the signature has no {name!r} parameter")
    if type(value) is not kind:
        raise HttpSignatureError("malformed", f"the {name!r} parameter is not a {kind.__name__}")
    return value


def verify_request(
    method: str,
    authority: str,
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    public_key_for: Callable[[str], Ed25519PublicKey | None],
    now: int,
    nonces: NonceCache,
    max_skew: int = MAX_SKEW,
) -> str:
    """The keyid that signed the request, or :class:`HttpSignatureError`.

    ``public_key_for`` answers None for an unknown or revoked keyid. The nonce is
    recorded only once everything else held, so a forged request cannot burn the
    nonce of a real one.
    """
    signature_input = _member(headers, "signature-input")
    signature_member = _member(headers, "signature")
    if not isinstance(signature_input, SfInnerList):
        raise HttpSignatureError("malformed", "Signature-Input: the signature is not an inner list")
    if not isinstance(signature_member, SfItem) or not isinstance(signature_member.value, bytes):
        raise HttpSignatureError("malformed", "Signature: the signature is not a byte sequence")
    if len(signature_member.value) != 64:
        raise HttpSignatureError(
            "malformed", f"an Ed25519 signature is 64 bytes, got {len(signature_member.value)}"
        )
    covered: list[str] = []
    for item in signature_input.items:
        if not isinstance(item.value, str) or item.params:
            raise HttpSignatureError(
                "malformed", "a covered component is not a plain component name"
            )
        if item.value in covered:
            raise HttpSignatureError("malformed", f"the component {item.value!r} is covered twice")
        covered.append(item.value)
    uncovered = [name for name in COVERED if name not in covered]
    if uncovered:
        raise HttpSignatureError("malformed", f"the signature does not cover {uncovered}")
    params = signature_input.params
    if _param(params, "alg", str) != ALG:
        raise HttpSignatureError("malformed", f"the alg parameter is not {ALG!r}")
    created = int(_param(params, "created", int))  # type: ignore[call-overload]
    keyid = str(_param(params, "keyid", str))
    nonce = str(_param(params, "nonce", str))
    if abs(now - created) > max_skew:
        raise HttpSignatureError(
            "stale", f"created {created} is {now - created:+d} s from now (allowed ±{max_skew})"
        )
    expires = params.get("expires")
    if expires is not None:
        if type(expires) is not int:
            raise HttpSignatureError("malformed", "the 'expires' parameter is not an int")
        if expires < now:
            raise HttpSignatureError("stale", f"the signature expired at {expires}")
    public_key = public_key_for(keyid)
    if public_key is None:
        raise HttpSignatureError("unknown-key", f"keyid {keyid!r} is unknown or revoked")
    base = signature_base(
        [(n, component_value(n, method, authority, path, headers)) for n in covered],
        serialize_inner_list(signature_input),
    )
    try:
        public_key.verify(signature_member.value, base)
    except InvalidSignature:
        raise HttpSignatureError(
            "bad-signature", f"the signature does not verify with keyid {keyid!r}"
        ) from None
    _check_digest(component_value("content-digest", method, authority, path, headers), body)
    refused = nonces.admit(keyid, nonce, created, now, max_skew)
    if refused == "replayed":
        raise HttpSignatureError("replayed", f"nonce {nonce!r} of keyid {keyid!r} seen before")
    if refused is not None:
        raise HttpSignatureError(
            "stale", f"created {created} is at or before the nonce cache's floor {nonces.floor}"
        )
    return keyid


def _check_digest(field: str, body: bytes) -> None:
    try:
        digests = parse_dictionary(field)
    except ValueError as exc:
        raise HttpSignatureError("malformed", f"Content-Digest: {exc}") from None
    member = digests.get("sha-256")
    if member is None:
        raise HttpSignatureError("malformed", "Content-Digest has no sha-256 digest")
    if not isinstance(member, SfItem) or not isinstance(member.value, bytes):
        raise HttpSignatureError("malformed", "Content-Digest: sha-256 is not a byte sequence")
    if member.value != hashlib.sha256(body).digest():
        raise HttpSignatureError("digest-mismatch", "Content-Digest is not the body's SHA-256")
