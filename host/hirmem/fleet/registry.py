"""The fleet's registry: tenants and where their stores live, gateways, the device index,
the tenants' checkpoint keys.

One database read on every request, so a revoked gateway is refused from the next
request on (no cache to expire): by default the SQLite file ``fleet.db`` in the fleet's
directory (one machine); or, when the fleet is given a registry conninfo (``hirmem fleet
… --registry postgresql://…``, ``fleet.registry`` of the config, ``$HIRMEM_FLEET_REGISTRY``),
a PostgreSQL database that every fleet node on every machine reads and writes. The
same statements run on both (:mod:`hirmem.sql.backend`):

- ``tenants``: name, backend (``sqlite`` or ``postgres``) and location (the SQLite file,
  or the libpq conninfo of the tenant's own PostgreSQL database) — the placement table:
  a tenant's database may live on any cluster. A registry on PostgreSQL places tenants
  on PostgreSQL only: a SQLite file is one machine's, and another node would make an
  empty one of its own;
- ``gateways``: keyid (the hex kid of its Ed25519 public key) → tenant, revocable;
- ``devices``: which tenant holds a device key (to tell "another tenant's device" from
  "unknown" without opening every tenant's store). A device is claimed in the registry
  first, in one statement that the unique keys decide (``INSERT … ON CONFLICT DO
  NOTHING``, then the rows read back): of two nodes registering one device id or key for
  two tenants at once, one wins and the other is refused, and only the winner's store
  trusts the key;
- ``refusals``: what was refused before a tenant was known (the HTTP signature, the
  body's size or type, backpressure), the newest :data:`KEPT` kept and every one counted
  in ``refusal_counts``;
- ``checkpoint_keys``: on PostgreSQL, each tenant's memory-engine checkpoint key sealed
  with the fleet secret (:mod:`hirmem.fleet.sealing`), so every node signs and verifies
  the tenant's one audit chain with one key. With the SQLite registry the key is the
  file ``memory/<tenant>.key`` in the fleet's directory, as before.

:func:`migrate` copies a ``fleet.db`` (and the PostgreSQL tenants' key files) into an
empty PostgreSQL registry; a node given a PostgreSQL registry beside a ``fleet.db`` that
holds tenants the PostgreSQL one lacks refuses to start and says so.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from hirmem.api.tokens import SCHEMA as TOKENS_SCHEMA
from hirmem.fleet.sealing import ENV_SECRET, SealError, open_key, seal_key
from hirmem.fleet.tenant import TenantStore
from hirmem.protocol.clock import now_ms
from hirmem.protocol.errors import HirmemError
from hirmem.protocol.keys import (
    ID_SIZE,
    KeyFileError,
    SigningKey,
    key_id,
    read_key_file,
    write_key_file,
)
from hirmem.sql.backend import Backend, PostgresBackend, SqliteBackend, Tx
from hirmem.sql.dialect import to_postgres

__all__ = [
    "ENV_REGISTRY",
    "Gateway",
    "Registry",
    "RegistryError",
    "Tenant",
    "migrate",
    "safe_conninfo",
]

KEPT = 10_000
TENANT_NAME = re.compile(r"[a-z0-9][a-z0-9_]{0,40}")
ENV_REGISTRY = "HIRMEM_FLEET_REGISTRY"

SCHEMA = """
CREATE TABLE IF NOT EXISTS tenants (
    name        TEXT PRIMARY KEY,
    backend     TEXT NOT NULL CHECK (backend IN ('sqlite', 'postgres')),
    location    TEXT NOT NULL,
    created     BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS gateways (
    keyid       TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL REFERENCES tenants(name),
    public_key  {bytes} NOT NULL,
    label       TEXT NOT NULL DEFAULT '',
    added       BIGINT NOT NULL,
    revoked_at  BIGINT
);
CREATE TABLE IF NOT EXISTS devices (
    device_id   {bytes} PRIMARY KEY,
    kid         {bytes} NOT NULL UNIQUE,
    tenant      TEXT NOT NULL REFERENCES tenants(name)
);
CREATE TABLE IF NOT EXISTS refusals (
    n           {serial},
    at          BIGINT NOT NULL,
    status      INTEGER NOT NULL,
    reason      TEXT NOT NULL,
    gateway     TEXT NOT NULL,
    detail      TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS refusal_counts (
    reason      TEXT PRIMARY KEY,
    count       BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS checkpoint_keys (
    tenant      TEXT PRIMARY KEY REFERENCES tenants(name),
    kid         {bytes} NOT NULL,
    sealed      {bytes} NOT NULL,
    created     BIGINT NOT NULL
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


def _integrity_errors(backend: Backend) -> tuple[type[Exception], ...]:
    """The exceptions a refused row raises on ``backend`` (a key in use, a bad reference)."""
    if backend.kind == "postgres":
        import psycopg

        return (psycopg.IntegrityError,)
    return (sqlite3.IntegrityError,)


class Registry:
    """The fleet registry: ``directory/fleet.db``, or the PostgreSQL database
    ``registry`` (a libpq conninfo); tenant stores are opened on demand.

    ``secret`` (:func:`hirmem.fleet.sealing.read_secret`) seals the checkpoint keys of a
    PostgreSQL registry. ``create``: make the tables when they are not there (else
    :class:`RegistryError`)."""

    def __init__(
        self,
        directory: str | Path,
        pg_pool: int = 8,
        *,
        registry: str | None = None,
        secret: bytes | None = None,
        create: bool = True,
        check_local: bool = True,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.pg_pool = pg_pool
        self.conninfo = registry
        self.secret = secret
        self._lock = threading.Lock()
        self._stores: dict[str, TenantStore] = {}
        self._where: dict[str, str] = {}  # the location each open store was opened at
        self._keys: dict[str, SigningKey] = {}  # checkpoint keys opened (they never change)
        try:
            self.backend: Backend = (
                SqliteBackend(self.directory / "fleet.db", foreign_keys=True)
                if registry is None
                else PostgresBackend(registry, pg_pool)
            )
        except HirmemError as exc:
            raise RegistryError(f"{self.where}: cannot open the registry: {exc}") from None
        self._refused = _integrity_errors(self.backend)
        try:
            if not create and not self.exists():
                raise RegistryError(
                    f"{self.where}: no fleet registry here (`hirmem fleet tenant add` makes "
                    "one; `hirmem fleet registry migrate` copies a fleet.db into it)"
                )
            with self.backend.transaction() as tx:
                if self.backend.kind == "postgres":  # nodes starting at once make it once
                    tx.rows("SELECT pg_advisory_xact_lock(hashtext('hirmem.fleet.registry'))")
                for statement in self.backend.schema(SCHEMA).split(";"):
                    if statement.strip():
                        tx.run(statement)
            if registry is not None and check_local:
                self._check_local()
        except BaseException:
            self.backend.close()
            raise

    @property
    def where(self) -> str:
        """What messages call the registry (never a password)."""
        if self.conninfo is None:
            return str(self.directory / "fleet.db")
        return "the PostgreSQL registry " + safe_conninfo(self.conninfo)

    def exists(self) -> bool:
        """Whether the registry's tables are there."""
        sql = (
            "SELECT count(*) FROM sqlite_master WHERE name = 'tenants'"
            if self.backend.kind == "sqlite"
            else "SELECT count(*) FROM pg_tables WHERE tablename = 'tenants' "
            "AND schemaname = current_schema()"
        )
        return bool(self._rows(sql)[0][0])

    def _check_local(self) -> None:
        """Refuse a PostgreSQL registry that lacks the tenants of a ``fleet.db`` beside it
        (a fleet moved to PostgreSQL without :func:`migrate`: its gateways would be
        refused as unknown)."""
        local = _local_tenants(self.directory / "fleet.db")
        missing = sorted(set(local) - {t.name for t in self.tenants()})
        if missing:
            raise RegistryError(
                f"{self.directory / 'fleet.db'} holds a SQLite registry with tenants "
                f"{', '.join(missing)} that {self.where} does not: copy it with "
                "`hirmem fleet registry migrate --registry CONNINFO` (or move fleet.db "
                "away to start an empty fleet)"
            )

    def close(self) -> None:
        with self._lock:
            for store in self._stores.values():
                store.close()
            self._stores.clear()
            self.backend.close()

    def _rows(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        with self.backend.reading() as tx:
            rows: list[tuple[Any, ...]] = tx.rows(sql, args)
        return rows

    @contextmanager
    def _writing(self) -> Iterator[Tx]:
        """A write transaction; a refused row (a key in use) is a :class:`RegistryError`."""
        try:
            with self.backend.transaction() as tx:
                yield tx
        except self._refused as exc:
            raise RegistryError(str(exc).strip()) from None

    def _write(self, sql: str, args: tuple[object, ...] = ()) -> int:
        with self._writing() as tx:
            return tx.run(sql, args)

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
        if postgres is None and self.conninfo is not None:
            raise RegistryError(
                f"tenant {name}: a fleet whose registry is on PostgreSQL places its tenants "
                "on PostgreSQL (--postgres CONNINFO): a SQLite file is one machine's"
            )
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
        """Register a device key for a tenant: claimed in the fleet's index first (the
        unique keys decide between two nodes claiming it at once), then trusted by the
        tenant's store."""
        if len(device_id) != ID_SIZE:
            raise RegistryError(f"a device id is {ID_SIZE} bytes ({2 * ID_SIZE} hex digits)")
        if self.tenant(tenant) is None:
            raise RegistryError(f"no tenant {tenant}")
        kid = key_id(public_key)
        with self._writing() as tx:
            claimed = tx.run(
                "INSERT INTO devices VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                (device_id, kid, tenant),
            )
            rows = tx.rows(
                "SELECT tenant FROM devices WHERE device_id = ? OR kid = ?", (device_id, kid)
            )
        if any(str(r[0]) != tenant for r in rows):
            raise RegistryError(f"device {device_id.hex()} or its key is another tenant's")
        try:
            self.store(tenant).add_device(device_id, public_key, label)
        except BaseException:
            if claimed:  # the tenant's store refused it: so does the index
                self._write(
                    "DELETE FROM devices WHERE device_id = ? AND kid = ? AND tenant = ?",
                    (device_id, kid, tenant),
                )
            raise

    def revoke_device(self, tenant: str, device_id: bytes) -> None:
        self.store(tenant).revoke_device(device_id)

    def device_tenant(self, kid: bytes) -> str | None:
        rows = self._rows("SELECT tenant FROM devices WHERE kid = ?", (kid,))
        return None if not rows else str(rows[0][0])

    # ---- refusals before a tenant is known -----------------------------------------------

    def refuse(self, status: int, reason: str, gateway: str, detail: str, count: int = 1) -> None:
        with self._writing() as tx:
            tx.run(
                "INSERT INTO refusals (at, status, reason, gateway, detail) VALUES (?, ?, ?, ?, ?)",
                (now_ms(), status, reason, gateway[:80], detail[:240]),
            )
            tx.run(
                "INSERT INTO refusal_counts VALUES (?, ?) ON CONFLICT (reason) "
                "DO UPDATE SET count = refusal_counts.count + excluded.count",
                (reason, count),
            )
            tx.run("DELETE FROM refusals WHERE n <= (SELECT max(n) FROM refusals) - ?", (KEPT,))

    def refusal_counts(self) -> dict[str, int]:
        return {str(r): int(c) for r, c in self._rows("SELECT reason, count FROM refusal_counts")}

    def refusals_kept(self) -> int:
        return int(self._rows("SELECT count(*) FROM refusals")[0][0])

    # ---- checkpoint keys -----------------------------------------------------------------

    def checkpoint_key(self, tenant: str) -> SigningKey:
        """The key that signs the audit checkpoints of ``tenant``'s memory engine, made on
        first use: sealed in a PostgreSQL registry (every node opens the same one: the
        first node to store it wins, the others read it back), else the file
        ``memory/<tenant>.key`` in the fleet's directory."""
        with self._lock:
            held = self._keys.get(tenant)
        if held is not None:
            return held
        if self.conninfo is None:
            path = self.directory / "memory" / f"{tenant}.key"
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                with suppress(KeyFileError):  # another process wrote it first: read theirs
                    write_key_file(path, SigningKey.generate())
            key = read_key_file(path)
        else:
            if self.secret is None:
                raise SealError(
                    f"tenant {tenant}: a PostgreSQL registry keeps checkpoint keys sealed "
                    f"with the fleet secret, and none was given (${ENV_SECRET}, or "
                    "--secret-file FILE; the same on every node)"
                )
            if self.tenant(tenant) is None:
                raise RegistryError(f"no tenant {tenant}")
            fresh = SigningKey.generate()  # kept only if no node stored one first
            self._write(
                "INSERT INTO checkpoint_keys VALUES (?, ?, ?, ?) ON CONFLICT (tenant) DO NOTHING",
                (tenant, fresh.kid, seal_key(self.secret, tenant, fresh), now_ms()),
            )
            found = self._rows("SELECT sealed FROM checkpoint_keys WHERE tenant = ?", (tenant,))
            key = open_key(self.secret, tenant, bytes(found[0][0]))
        with self._lock:
            self._keys[tenant] = key
        return key


    def reseal(self, new_secret: bytes) -> int:
        """Seal every checkpoint key again under ``new_secret`` (a fleet secret rotated),
        in one transaction: each is opened with this registry's secret first, so a wrong
        old secret changes nothing. The number of keys resealed. Nodes given the old
        secret cannot open a key from then on (restart them with the new one)."""
        if self.conninfo is None or self.secret is None:
            raise SealError("reseal: a PostgreSQL registry and its current fleet secret")
        old = self.secret
        with self._writing() as tx:
            rows = tx.rows("SELECT tenant, sealed FROM checkpoint_keys ORDER BY tenant FOR UPDATE")
            for tenant, sealed in rows:
                key = open_key(old, str(tenant), bytes(sealed))
                tx.run(
                    "UPDATE checkpoint_keys SET sealed = ? WHERE tenant = ?",
                    (seal_key(new_secret, str(tenant), key), tenant),
                )
        self.secret = new_secret
        return len(rows)

_PASSWORD = re.compile(r"(password\s*=\s*)\S+|(://[^:/@?]*:)[^@/?]*(@)")


def safe_conninfo(conninfo: str) -> str:
    """A conninfo (key=value or URI) without its password, for messages."""
    return _PASSWORD.sub(
        lambda m: f"{m.group(1)}***" if m.group(1) else f"{m.group(2)}***{m.group(3)}", conninfo
    )


def _local_tenants(path: Path) -> list[str]:
    """The tenants of the SQLite registry at ``path`` (none when it is not there)."""
    if not path.is_file():
        return []
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        if db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'tenants'").fetchone()[0]:
            return [str(r[0]) for r in db.execute("SELECT name FROM tenants")]
        return []
    finally:
        db.close()


# what migrate copies, in an order the references allow (refusals without their numbers:
# the PostgreSQL sequence numbers them again, in the same order)
_COPIED = (
    ("tenants", "name, backend, location, created", "name"),
    ("gateways", "keyid, tenant, public_key, label, added, revoked_at", "keyid"),
    ("devices", "device_id, kid, tenant", "device_id"),
    ("refusals", "at, status, reason, gateway, detail", "n"),
    ("refusal_counts", "reason, count", "reason"),
)


def migrate(directory: str | Path, registry: str, secret: bytes | None) -> dict[str, int]:
    """Copy the SQLite registry ``directory/fleet.db`` into the empty PostgreSQL registry
    ``registry``, in one transaction, with each PostgreSQL tenant's checkpoint key file
    (``memory/<tenant>.key``) sealed with ``secret``. ``fleet.db`` is only read. Refused:
    a registry that already has tenants, and a fleet with SQLite tenants (their files are
    this machine's: move them to PostgreSQL first). The API tokens of ``fleet.db`` come
    along. Rows copied per table."""
    directory = Path(directory)
    source = directory / "fleet.db"
    if not source.is_file():
        raise RegistryError(f"{source}: no SQLite registry to migrate")
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    try:
        tenants = [(str(n), str(b)) for n, b in src.execute("SELECT name, backend FROM tenants")]
        local = sorted(n for n, b in tenants if b != "postgres")
        if local:
            raise RegistryError(
                f"{source}: tenants {', '.join(local)} are SQLite files on this machine; a "
                "PostgreSQL registry places tenants on PostgreSQL only"
            )
        keys = {n: directory / "memory" / f"{n}.key" for n, _ in tenants}
        keys = {n: p for n, p in keys.items() if p.exists()}
        if keys and secret is None:
            raise SealError(
                f"checkpoint keys of {', '.join(sorted(keys))} are sealed into the registry "
                f"with the fleet secret: give ${ENV_SECRET} or --secret-file"
            )
        reg = Registry(directory, 2, registry=registry, secret=secret, check_local=False)
        try:
            held = reg.tenants()
            if held:
                raise RegistryError(
                    f"{reg.where} already holds tenants ({', '.join(t.name for t in held)}): "
                    "migrate into an empty registry"
                )
            copied: dict[str, int] = {}
            with reg._writing() as tx:
                for table, columns, order in _COPIED:
                    rows = src.execute(f"SELECT {columns} FROM {table} ORDER BY {order}")
                    marks = ", ".join("?" * len(columns.split(",")))
                    copied[table] = 0
                    for row in rows:
                        tx.run(f"INSERT INTO {table} ({columns}) VALUES ({marks})", tuple(row))
                        copied[table] += 1
                has_tokens = src.execute(
                    "SELECT count(*) FROM sqlite_master WHERE name = 'api_tokens'"
                ).fetchone()[0]
                if has_tokens:  # the API's bearer tokens (hirmem.fleet.serving.token_store)
                    tx.run(to_postgres(TOKENS_SCHEMA))
                    columns = "id, name, tenant, scope, digest, created, revoked"
                    copied["api_tokens"] = 0
                    for row in src.execute(f"SELECT {columns} FROM api_tokens ORDER BY created"):
                        tx.run(f"INSERT INTO api_tokens ({columns}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                               tuple(row))  # fmt: skip
                        copied["api_tokens"] += 1
                for name, path in sorted(keys.items()):
                    assert secret is not None  # checked above
                    key = read_key_file(path)
                    tx.run(
                        "INSERT INTO checkpoint_keys VALUES (?, ?, ?, ?)",
                        (name, key.kid, seal_key(secret, name, key), now_ms()),
                    )
                copied["checkpoint_keys"] = len(keys)
        finally:
            reg.close()
    finally:
        src.close()
    return copied


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
