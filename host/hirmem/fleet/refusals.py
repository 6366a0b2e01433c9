"""Why the fleet refuses an upload: a machine-readable reason and its HTTP status.

Refusals are answered as RFC 9457 problem details (``application/problem+json``) whose
``reason`` member is one of :data:`STATUS`'s keys.
"""

from __future__ import annotations

from hirmem.protocol.packs import Reason

STATUS: dict[str, int] = {
    "malformed": 400,
    "pack-id-mismatch": 400,
    "bad-record": 400,
    "unsupported-alg": 400,
    # the HTTP signature (the gateway)
    "missing": 401,
    "unknown-key": 401,
    "bad-signature": 401,
    "stale": 401,
    "replayed": 401,
    "digest-mismatch": 401,
    # the pack (the device)
    "unknown-device": 403,
    "device-of-another-tenant": 403,
    "revoked": 403,
    "bad-pack-signature": 403,
    "wrong-signer": 403,
    "rollback": 409,
    "broken-chain": 409,
    "duplicate-seq-different-pack": 409,
    "too-large": 413,
    "unsupported-media-type": 415,
    "overloaded": 503,
    "storage-unavailable": 503,  # the tenant's database failed: nothing stored, retry
}

# the daemon's pack refusal codes (protocol SPEC §8.4) as fleet reasons
PACK_REASONS: dict[Reason, str] = {
    Reason.MALFORMED: "malformed",
    Reason.TOO_LARGE: "too-large",
    Reason.UNSUPPORTED_ALG: "unsupported-alg",
    Reason.UNKNOWN_KEY: "unknown-device",
    Reason.BAD_SIGNATURE: "bad-pack-signature",
    Reason.WRONG_SIGNER: "wrong-signer",
    Reason.ROLLBACK: "rollback",
    Reason.REPLAY: "duplicate-seq-different-pack",
    Reason.BROKEN_CHAIN: "broken-chain",
    Reason.BAD_RECORD: "bad-record",
}

TITLES: dict[int, str] = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    409: "Conflict",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    503: "Service Unavailable",
}
