"""Bearer tokens with scopes, stored hashed (SHA-256) in a SQLite file.

A token is ``hm_<id>_<secret>``: ``id`` (16 hex digits) finds the row, ``secret`` (32
random bytes, base64url) is never stored — only SHA-256 of the whole token, compared in
constant time. Scopes nest: ``admin`` ⊃ ``review`` ⊃ ``read``. A revoked token is kept
(listed as revoked) and never accepted again. The table lives in the daemon's database
(the store the operator already backs up); this module owns it. A fleet whose registry
is on PostgreSQL hands in its registry's database instead (``db``: anything that answers
``execute`` as ``sqlite3`` does), so every node accepts the same tokens.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hirmem.protocol.errors import HirmemError

SCOPES = ("read", "review", "admin")
_TOKEN = re.compile(r"hm_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")

SCHEMA = """
CREATE TABLE IF NOT EXISTS api_tokens (
    id       TEXT PRIMARY KEY,
    name     TEXT NOT NULL,
    tenant   TEXT NOT NULL,
    scope    TEXT NOT NULL,
    digest   BLOB NOT NULL CHECK (length(digest) = 32),
    created  INTEGER NOT NULL,
    revoked  INTEGER
)
"""


class Database(Protocol):
    """The calls the store makes: a ``sqlite3.Connection`` answers them."""

    def execute(self, sql: str, parameters: Any = (), /) -> Any: ...

    def close(self) -> None: ...


class TokenError(HirmemError):
    """A token cannot be made, found or revoked as asked."""


class TokensUnavailable(TokenError):
    """The tokens' database failed (a fleet registry's server down): nothing can be said
    of a token now; the caller answers 503 and the client retries."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts for: the token's id, name (the steward), tenant and scope."""

    token_id: str
    name: str
    tenant: str
    scope: str

    def allows(self, scope: str) -> bool:
        return SCOPES.index(self.scope) >= SCOPES.index(scope)


@dataclass(frozen=True, slots=True)
class TokenRow:
    id: str
    name: str
    tenant: str
    scope: str
    created_ms: int
    revoked_ms: int | None


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("ascii")).digest()


class TokenStore:
    """The ``api_tokens`` table of one SQLite file (or of ``db``); safe from any thread."""

    def __init__(self, path: str | Path, db: Database | None = None) -> None:
        self.path = str(path)  # what messages name
        self._lock = threading.Lock()
        if db is None:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                   timeout=30)  # fmt: skip
            conn.execute("PRAGMA journal_mode=WAL")
            db = conn
        self._db: Database = db
        self._db.execute(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def create(self, name: str, scope: str, tenant: str = "local") -> tuple[str, TokenRow]:
        """A new token (returned once, in clear) and its row."""
        if scope not in SCOPES:
            raise TokenError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
        for what, value in (("name", name), ("tenant", tenant)):
            if not _NAME.fullmatch(value):
                raise TokenError(
                    f"token {what} {value!r}: 1-64 letters, digits or . _ @ -, starting with "
                    "a letter or digit (the name is the steward a review is recorded under)"
                )
        token_id = secrets.token_hex(8)
        secret = base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()
        token = f"hm_{token_id}_{secret}"
        now = int(time.time() * 1000)
        with self._lock:
            self._db.execute(
                "INSERT INTO api_tokens (id, name, tenant, scope, digest, created) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (token_id, name, tenant, scope, digest(token), now),
            )
        return token, TokenRow(token_id, name, tenant, scope, now, None)

    def list(self) -> list[TokenRow]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id, name, tenant, scope, created, revoked FROM api_tokens ORDER BY created"
            ).fetchall()
        return [TokenRow(*r) for r in rows]

    def revoke(self, token_id: str) -> TokenRow:
        with self._lock:
            cur = self._db.execute(
                "UPDATE api_tokens SET revoked = ? WHERE id = ? AND revoked IS NULL",
                (int(time.time() * 1000), token_id),
            )
            if cur.rowcount == 0:
                known = self._db.execute(
                    "SELECT 1 FROM api_tokens WHERE id = ?", (token_id,)
                ).fetchone()
                raise TokenError(
                    f"token {token_id}: already revoked" if known
                    else f"token {token_id}: no such token (hirmem token list shows them)"
                )  # fmt: skip
            row = self._db.execute(
                "SELECT id, name, tenant, scope, created, revoked FROM api_tokens WHERE id = ?",
                (token_id,),
            ).fetchone()
        return TokenRow(*row)

    def authenticate(self, token: str) -> Principal | None:
        """The principal of a live token, None for anything else (malformed, unknown,
        revoked, wrong secret): the caller answers all of them alike."""
        m = _TOKEN.fullmatch(token)
        if m is None:
            return None
        try:
            with self._lock:
                row = self._db.execute(
                    "SELECT name, tenant, scope, digest FROM api_tokens "
                    "WHERE id = ? AND revoked IS NULL",
                    (m.group(1),),
                ).fetchone()
        except Exception as exc:  # the database, not the token
            raise TokensUnavailable(f"the token store failed: {type(exc).__name__}") from exc
        if row is None or not hmac.compare_digest(bytes(row[3]), digest(token)):
            return None
        return Principal(m.group(1), str(row[0]), str(row[1]), str(row[2]))
