"""The fleet's registry: tenants and where their stores live, gateways, the device index.

One SQLite file (``fleet.db`` in the fleet's directory), read on every request, so a
revoked gateway is refused from the next request on (no cache to expire):

- ``tenants``: name, backend (``sqlite`` or ``postgres``) and location (the SQLite file,
  or the libpq conninfo of the tenant's own PostgreSQL database) — the placement table:
  a tenant's database may live on any cluster;
- ``gateways``: keyid (the hex kid of its Ed25519 public key) → tenant, revocable;
- ``devices``: which tenant holds a device key (to tell "another tenant's device" from
  "unknown" without opening every tenant's store);
- ``refusals``: what was refused before a tenant was known (the HTTP signature, the
  body's size or type, backpressure), the newest :data:`KEPT` kept and every one counted
  in ``refusal_counts``.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from hirmem.fleet.tenant import TenantStore
from hirmem.protocol.clock import now_ms
from hirmem.protocol.errors import HirmemError
from hirmem.protocol.keys import ID_SIZE, key_id
from hirmem.sql.backend import Backend, PostgresBackend, SqliteBackend

__all__ = ["Gateway", "Registry", "RegistryError", "Tenant"]

KEPT = 10_000
TENANT_NAME = re.compile(r"[a-z0-9][a-z0-9_]{0,40}")

SCHEMA = """
CREATE TABLE IF NOT EXISTS tenants (
    name        TEXT PRIMARY KEY,
    backend     TEXT NOT NULL CHECK (backend IN ('sqlite', 'postgres')),
    location    TEXT NOT NULL,
    created     INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS gateways (
    keyid       TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL REFERENCES tenants(name),
    public_key  BLOB NOT NULL,
    label       TEXT NOT NULL DEFAULT '',
    added       INTEGER NOT NULL,
    revoked_at  INTEGER
);
CREATE TABLE IF NOT EXISTS devices (
    device_id   BLOB PRIMARY KEY,
    kid         BLOB NOT NULL UNIQUE,
    tenant      TEXT NOT NULL REFERENCES tenants(name)
);
CREATE TABLE IF NOT EXISTS refusals (
    n           INTEGER PRIMARY KEY AUTOINCREMENT,
    at          INTEGER NOT NULL,
    status      INTEGER NOT NULL,
    reason      TEXT NOT NULL,
    gateway     TEXT NOT NULL,
    detail      TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS refusal_counts (
    reason      TEXT PRIMARY KEY,
    count       INTEGER NOT NULL
)
"""


class RegistryError(HirmemError):
    """A registry change that cannot be made (an unknown tenant, a key in use, …)."""


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    backend: str
    location: str


@dataclass(frozen=True, slots=True)
class Gateway:
    keyid: str
    tenant: str
    public_key: bytes
    revoked: bool


class Registry:
    """The fleet registry in ``directory/fleet.db``; tenant stores are opened on demand."""

    def __init__(self, directory: str | Path, pg_pool: int = 8) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.pg_pool = pg_pool
        self._lock = threading.Lock()
        self._stores: dict[str, TenantStore] = {}
        self._where: dict[str, str] = {}  # the location each open store was opened at
        try:
            self._db = sqlite3.connect(
                str(self.directory / "fleet.db"),
                isolation_level=None,
                check_same_thread=False,
                timeout=30,
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.executescript(SCHEMA)
        except sqlite3.Error as exc:
            raise RegistryError(f"{self.directory}: cannot open the registry: {exc}") from None

    def close(self) -> None:
        with self._lock:
            for store in self._stores.values():
                store.close()
            self._stores.clear()
            self._db.close()

    def _rows(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return [tuple(r) for r in self._db.execute(sql, args).fetchall()]

    def _write(self, sql: str, args: tuple[object, ...] = ()) -> int:
        with self._lock:
            try:
                return self._db.execute(sql, args).rowcount
            except sqlite3.IntegrityError as exc:
                raise RegistryError(str(exc)) from None

    # ---- tenants -------------------------------------------------------------------------

    def add_tenant(
        self, name: str, postgres: str | None = None, database: str | None = None
    ) -> Tenant:
        """A new tenant with its own store: a SQLite file under the fleet directory, or
        (``postgres`` = the conninfo of a cluster's maintenance database) a new database
        (``database``, by default ``hirmem_<name>``) created on that cluster; an existing
        database is refused, never shared."""
        if not TENANT_NAME.fullmatch(name):
            raise RegistryError(f"tenant name {name!r}: 1-41 of a-z, 0-9, _ (first not _)")
        if self.tenant(name) is not None:
            raise RegistryError(f"tenant {name} exists")
        if postgres is None:
            tenant = Tenant(name, "sqlite", str(self.directory / "tenants" / f"{name}.db"))
        else:
            tenant = Tenant(
                name, "postgres", create_database(postgres, database or f"hirmem_{name}")
            )
        self.open_tenant(tenant).close()  # the schema, now: a broken location fails here
        self._write(
            "INSERT INTO tenants VALUES (?, ?, ?, ?)",
            (tenant.name, tenant.backend, tenant.location, now_ms()),
        )
        return tenant

    def tenant(self, name: str) -> Tenant | None:
        rows = self._rows("SELECT name, backend, location FROM tenants WHERE name = ?", (name,))
        return None if not rows else Tenant(*map(str, rows[0]))

    def tenants(self) -> list[Tenant]:
        rows = self._rows("SELECT name, backend, location FROM tenants ORDER BY name")
        return [Tenant(*map(str, r)) for r in rows]

    def postgres_of(self, name: str) -> str | None:
        """The conninfo of a PostgreSQL tenant's database (where it is placed now); None
        for a SQLite tenant or no tenant."""
        tenant = self.tenant(name)
        return tenant.location if tenant is not None and tenant.backend == "postgres" else None

    def open_tenant(self, tenant: Tenant) -> TenantStore:
        backend: Backend
        if tenant.backend == "sqlite":
            Path(tenant.location).parent.mkdir(parents=True, exist_ok=True)
            backend = SqliteBackend(tenant.location)
        else:
            backend = PostgresBackend(tenant.location, self.pg_pool)
        return TenantStore(backend, tenant.name)

    def store(self, name: str) -> TenantStore:
        """The tenant's store, opened once per registry and opened again when the
        placement moved it (:meth:`move_tenant`, read on every call: a process serving
        the tenant follows a failover from its next request)."""
        tenant = self.tenant(name)
        if tenant is None:
            raise RegistryError(f"no tenant {name}")
        with self._lock:
            found = self._stores.get(name)
            if found is not None and self._where.get(name) == tenant.location:
                return found
        opened = self.open_tenant(tenant)
        with self._lock:
            old = self._stores.get(name)
            if old is not None and self._where.get(name) == tenant.location:
                opened.close()
                return old
            self._stores[name], self._where[name] = opened, tenant.location
        if old is not None:
            old.close()  # its transactions still running finish on their connections
        return opened

    def move_tenant(self, name: str, postgres: str) -> Tenant:
        """Point a PostgreSQL tenant at another server holding its database (a promoted
        standby, a cluster it was copied to): ``postgres`` is the database's conninfo.
        The store there is opened (and its schema checked) before the move is written."""
        tenant = self.tenant(name)
        if tenant is None:
            raise RegistryError(f"no tenant {name}")
        if tenant.backend != "postgres":
            raise RegistryError(f"tenant {name} is on SQLite; only PostgreSQL tenants move")
        moved = Tenant(name, "postgres", postgres)
        self.open_tenant(moved).close()
        self._write("UPDATE tenants SET location = ? WHERE name = ?", (postgres, name))
        return moved

    # ---- gateways ------------------------------------------------------------------------

    def add_gateway(self, tenant: str, public_key: bytes, label: str = "") -> Gateway:
        if self.tenant(tenant) is None:
            raise RegistryError(f"no tenant {tenant}")
        keyid = key_id(public_key).hex()
        held = self.gateway(keyid)
        if held is not None:
            if held.tenant != tenant or held.revoked:
                why = "revoked" if held.revoked else "for another tenant"
                raise RegistryError(f"gateway key {keyid} is already registered ({why})")
            return held
        self._write(
            "INSERT INTO gateways (keyid, tenant, public_key, label, added) VALUES (?, ?, ?, ?, ?)",
            (keyid, tenant, public_key, label, now_ms()),
        )
        return Gateway(keyid, tenant, public_key, False)

    def revoke_gateway(self, keyid: str) -> None:
        if not self._write(
            "UPDATE gateways SET revoked_at = ? WHERE keyid = ? AND revoked_at IS NULL",
            (now_ms(), keyid),
        ):
            raise RegistryError(f"no active gateway with keyid {keyid}")

    def gateway(self, keyid: str) -> Gateway | None:
        rows = self._rows(
            "SELECT keyid, tenant, public_key, revoked_at FROM gateways WHERE keyid = ?", (keyid,)
        )
        if not rows:
            return None
        k, t, pub, revoked = rows[0]
        return Gateway(str(k), str(t), bytes(pub), revoked is not None)

    def gateways(self) -> list[Gateway]:
        rows = self._rows(
            "SELECT keyid, tenant, public_key, revoked_at FROM gateways ORDER BY tenant, keyid"
        )
        return [Gateway(str(k), str(t), bytes(p), r is not None) for k, t, p, r in rows]

    def gateway_key(self, keyid: str) -> tuple[Ed25519PublicKey, str] | None:
        """(public key, tenant) of an active gateway: the tenant comes from here only."""
        gw = self.gateway(keyid)
        if gw is None or gw.revoked:
            return None
        return Ed25519PublicKey.from_public_bytes(gw.public_key), gw.tenant

    # ---- devices -------------------------------------------------------------------------

    def add_device(self, tenant: str, device_id: bytes, public_key: bytes, label: str = "") -> None:
        """Register a device key for a tenant: in the fleet's index and the tenant's store."""
        if len(device_id) != ID_SIZE:
            raise RegistryError(f"a device id is {ID_SIZE} bytes ({2 * ID_SIZE} hex digits)")
        kid = key_id(public_key)
        rows = self._rows(
            "SELECT tenant FROM devices WHERE device_id = ? OR kid = ?", (device_id, kid)
        )
        if any(str(r[0]) != tenant for r in rows):
            raise RegistryError(f"device {device_id.hex()} or its key is another tenant's")
        self.store(tenant).add_device(device_id, public_key, label)
        self._write("INSERT OR IGNORE INTO devices VALUES (?, ?, ?)", (device_id, kid, tenant))

    def revoke_device(self, tenant: str, device_id: bytes) -> None:
        self.store(tenant).revoke_device(device_id)

    def device_tenant(self, kid: bytes) -> str | None:
        rows = self._rows("SELECT tenant FROM devices WHERE kid = ?", (kid,))
        return None if not rows else str(rows[0][0])

    # ---- refusals before a tenant is known -----------------------------------------------

    def refuse(self, status: int, reason: str, gateway: str, detail: str, count: int = 1) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    "INSERT INTO refusals (at, status, reason, gateway, detail) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (now_ms(), status, reason, gateway[:80], detail[:240]),
                )
                self._db.execute(
                    "INSERT INTO refusal_counts VALUES (?, ?) ON CONFLICT (reason) "
                    "DO UPDATE SET count = count + excluded.count",
                    (reason, count),
                )
                self._db.execute(
                    "DELETE FROM refusals WHERE n <= (SELECT max(n) FROM refusals) - ?", (KEPT,)
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def refusal_counts(self) -> dict[str, int]:
        return {str(r): int(c) for r, c in self._rows("SELECT reason, count FROM refusal_counts")}


def create_database(admin_conninfo: str, dbname: str) -> str:
    """Create ``dbname`` on the cluster ``admin_conninfo`` reaches; the conninfo of the
    new database. One that exists is refused: a tenant never shares another's data."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    try:
        with psycopg.connect(admin_conninfo, autocommit=True) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)
            ).fetchone()
            if exists is not None:
                raise RegistryError(
                    f"PostgreSQL: database {dbname} exists; drop it or name another"
                )
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
    except psycopg.Error as exc:
        raise RegistryError(f"PostgreSQL: cannot create database {dbname}: {exc}") from None
    return make_conninfo(admin_conninfo, dbname=dbname)
