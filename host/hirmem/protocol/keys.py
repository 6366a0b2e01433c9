"""Ed25519 keys and key ids, on top of ``cryptography``.

A key id (kid) is the first 8 bytes of SHA-256 over the 32-byte raw public key.
It travels in a pack's protected header and in the handshake.

Key files hold one Ed25519 seed as ``hirmem-ed25519-seed-v1 <64 hex digits>``; they
are created with mode 0600 and refused when group or others can read them. Nothing
here prints, logs or puts a seed into an exception message or a ``repr``.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from hirmem.protocol.errors import HirmemError

KID_SIZE = 8
ID_SIZE = 8  # device ids and host ids
KEY_FILE_TAG = "hirmem-ed25519-seed-v1"


def key_id(public_raw: bytes) -> bytes:
    if len(public_raw) != 32:
        raise HirmemError(f"an Ed25519 public key is 32 bytes, got {len(public_raw)}")
    return hashlib.sha256(public_raw).digest()[:KID_SIZE]


@dataclass(frozen=True)
class PublicKey:
    raw: bytes

    def __post_init__(self) -> None:
        key_id(self.raw)  # validates the length

    @property
    def kid(self) -> bytes:
        return key_id(self.raw)

    def verify(self, signature: bytes, message: bytes) -> bool:
        """True when ``signature`` is a valid Ed25519 signature of ``message``."""
        try:
            loaded = self.__dict__.get("_loaded")
            if loaded is None:  # parsed once per PublicKey (a verifier keeps its keys)
                loaded = Ed25519PublicKey.from_public_bytes(self.raw)
                object.__setattr__(self, "_loaded", loaded)
            loaded.verify(signature, message)
        except (InvalidSignature, ValueError):
            return False
        return True


class SigningKey:
    """An Ed25519 private key held as its 32-byte seed. ``repr`` never shows it."""

    __slots__ = ("_key", "public")

    def __init__(self, seed: bytes) -> None:
        if len(seed) != 32:
            raise HirmemError(f"an Ed25519 seed is 32 bytes, got {len(seed)}")
        self._key = Ed25519PrivateKey.from_private_bytes(seed)
        raw = self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.public = PublicKey(raw)

    @classmethod
    def generate(cls) -> SigningKey:
        import os

        return cls(os.urandom(32))

    @property
    def kid(self) -> bytes:
        return self.public.kid

    def seed(self) -> bytes:
        """The secret seed, for key files only; never log it."""
        from cryptography.hazmat.primitives.serialization import NoEncryption, PrivateFormat

        return self._key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())

    def sign(self, message: bytes) -> bytes:
        return self._key.sign(message)

    def __repr__(self) -> str:
        return f"SigningKey(kid={self.kid.hex()})"


def derive_test_key(label: str) -> SigningKey:
    """A key derived from a public string: for vectors, tests and fuzzing only.

    Anyone can recompute it (seed = SHA-256("hirmem test key: " + label)); a key
    made this way must never be provisioned on a device or a host.
    """
    return SigningKey(hashlib.sha256(f"hirmem test key: {label}".encode()).digest())


class KeyFileError(HirmemError):
    """A key file could not be written or read as a hirmem seed file."""


def write_key_file(path: Path, key: SigningKey) -> None:
    """Write ``key``'s seed to a new file readable by its owner only (mode 0600)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise KeyFileError(f"{path}: already exists; refusing to overwrite a key") from None
    with os.fdopen(fd, "w", encoding="ascii") as f:
        os.fchmod(f.fileno(), 0o600)  # whatever the umask said
        f.write(f"{KEY_FILE_TAG} {key.seed().hex()}\n")


def read_key_file(path: Path) -> SigningKey:
    """Read a key file written by :func:`write_key_file`."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise KeyFileError(f"{path}: cannot read the key file ({type(exc).__name__})") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyFileError(
            f"{path}: group or others can access this key file (mode {mode & 0o777:o}); "
            "chmod 600 it"
        )
    parts = text.split()
    if len(parts) != 2 or parts[0] != KEY_FILE_TAG or len(parts[1]) != 64:
        raise KeyFileError(f"{path}: not a {KEY_FILE_TAG} key file")
    try:
        seed = bytes.fromhex(parts[1])
    except ValueError:
        raise KeyFileError(f"{path}: the seed is not hexadecimal") from None
    return SigningKey(seed)
