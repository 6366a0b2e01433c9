"""The fleet secret, and tenant checkpoint keys sealed with it for the shared registry.

When the registry is on PostgreSQL every node reads it, so each PostgreSQL tenant's
memory-engine checkpoint key is kept there (table ``checkpoint_keys``), never in clear:
the 32-byte Ed25519 seed is sealed with AES-256-GCM under a key derived (HKDF-SHA256)
from the fleet secret, the tenant's name bound in as associated data (a sealed key
copied to another tenant's row does not open). Every node of the fleet is given the same
secret (``HIRMEM_FLEET_SECRET``, or a file named by ``--secret-file`` /
``fleet.secret_file`` of the config); the database alone never holds what opens it.
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from hirmem.protocol.errors import HirmemError
from hirmem.protocol.keys import SigningKey

__all__ = ["ENV_SECRET", "MIN_SECRET", "SealError", "open_key", "read_secret", "seal_key"]

ENV_SECRET = "HIRMEM_FLEET_SECRET"
MIN_SECRET = 16  # bytes of secret text at the least
NONCE = 12
_INFO = b"hirmem fleet checkpoint keys v1"
_AAD = b"hirmem checkpoint key\x00"


class SealError(HirmemError):
    """No fleet secret, a short one, or one that does not open a sealed key."""


def read_secret(
    path: str | Path | None = None, environ: dict[str, str] | None = None
) -> bytes | None:
    """The fleet secret: the file ``path`` (surrounding white space dropped), else
    ``$HIRMEM_FLEET_SECRET``, else None."""
    env = os.environ if environ is None else environ
    if path is not None:
        try:
            text = Path(path).read_bytes().strip()
        except OSError as exc:
            raise SealError(f"fleet secret file {path}: {exc.strerror or exc}") from None
        where = f"fleet secret file {path}"
    elif env.get(ENV_SECRET):
        text, where = env[ENV_SECRET].strip().encode(), f"${ENV_SECRET}"
    else:
        return None
    if len(text) < MIN_SECRET:
        raise SealError(f"{where}: a fleet secret is at least {MIN_SECRET} bytes, got {len(text)}")
    return text


def _aead(secret: bytes) -> AESGCM:
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO)
    return AESGCM(hkdf.derive(secret))


def seal_key(secret: bytes, tenant: str, key: SigningKey) -> bytes:
    """nonce ‖ AES-256-GCM(seed), bound to ``tenant``."""
    nonce = os.urandom(NONCE)
    return nonce + _aead(secret).encrypt(nonce, key.seed(), _AAD + tenant.encode())


def open_key(secret: bytes, tenant: str, sealed: bytes) -> SigningKey:
    """The key :func:`seal_key` sealed for ``tenant`` with ``secret``."""
    try:
        seed = _aead(secret).decrypt(sealed[:NONCE], sealed[NONCE:], _AAD + tenant.encode())
    except (InvalidTag, ValueError):
        raise SealError(
            f"tenant {tenant}: the fleet secret does not open its checkpoint key (this node "
            f"was given another secret than the node that sealed it: ${ENV_SECRET} or "
            "--secret-file must be the same on every node)"
        ) from None
    return SigningKey(seed)
