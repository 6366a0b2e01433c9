"""Session proof (``protocol/SPEC.md`` §5.15, §6.5): a device shows it holds its key.

HELLO_ACK carries a 16-byte challenge, fresh for every new session. The device's
first sequenced message is PROOF: an Ed25519 signature, with its device key, over

    "hirmem session proof v1" || host_id (8) || challenge (16) || device_id (8)
        || boot (u32 big-endian) || SHA-256(HELLO body as sent)

91 bytes, every part of fixed size (no length ambiguity). The host verifies it with
the key it registered for ``device_id`` before it records anything of the session.
The host id keeps a proof for one host from opening a session at another; the
challenge keeps a recorded proof from opening a later session; the HELLO hash binds
what the device announced (board, boot, limits, kids) to the key.

HELLO_ACK names the HELLO it answers with the first 16 bytes of the same hash
(``hello_echo``): a device takes only the HELLO_ACK of its current HELLO, never one
that answered an older boot's HELLO and arrives late (§5.3, §6.5 device step 3).
"""

from __future__ import annotations

import hashlib

from hirmem.protocol.keys import ID_SIZE, PublicKey, SigningKey

PROOF_LABEL = b"hirmem session proof v1"
CHALLENGE_SIZE = 16
PROOF_INPUT_SIZE = len(PROOF_LABEL) + ID_SIZE + CHALLENGE_SIZE + ID_SIZE + 4 + 32
HELLO_ECHO_SIZE = 16  # why 16 of the 32 bytes: SPEC §12


def hello_echo(hello_body: bytes) -> bytes:
    """HELLO_ACK's hello_hash: the first 16 bytes of SHA-256 of the HELLO body."""
    return hashlib.sha256(hello_body).digest()[:HELLO_ECHO_SIZE]


def proof_input(
    host_id: bytes, challenge: bytes, device_id: bytes, boot: int, hello_body: bytes
) -> bytes:
    """The bytes a PROOF signs."""
    if len(host_id) != ID_SIZE or len(device_id) != ID_SIZE:
        raise ValueError(f"host and device ids are {ID_SIZE} bytes")
    if len(challenge) != CHALLENGE_SIZE:
        raise ValueError(f"a challenge is {CHALLENGE_SIZE} bytes, got {len(challenge)}")
    if not 0 <= boot <= 0xFFFFFFFF:
        raise ValueError(f"boot is a u32, got {boot}")
    return b"".join(
        (PROOF_LABEL, host_id, challenge, device_id, boot.to_bytes(4, "big"),
         hashlib.sha256(hello_body).digest())
    )  # fmt: skip


def sign_proof(
    key: SigningKey,
    host_id: bytes,
    challenge: bytes,
    device_id: bytes,
    boot: int,
    hello_body: bytes,
) -> bytes:
    """The 64-byte PROOF signature a device with ``key`` sends."""
    return key.sign(proof_input(host_id, challenge, device_id, boot, hello_body))


def verify_proof(
    public_key: PublicKey,
    signature: bytes,
    host_id: bytes,
    challenge: bytes,
    device_id: bytes,
    boot: int,
    hello_body: bytes,
) -> bool:
    """True when ``signature`` is the PROOF of ``public_key``'s holder for this HELLO."""
    message = proof_input(host_id, challenge, device_id, boot, hello_body)
    return len(signature) == 64 and public_key.verify(signature, message)
