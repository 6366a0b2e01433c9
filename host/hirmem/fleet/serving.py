"""The HTTP API and dashboard (:mod:`hirmem.api`) on a fleet node: the same application
the daemon serves, over :class:`FleetSources`, mounted beside the upload routes.

Per tenant, the sources are its store read as an intake (:class:`~hirmem.fleet.view.
TenantView`), and the memory engine and substrate its consolidation keeps (this
process's :class:`~hirmem.fleet.consolidate.Consolidator`, so an answer sees every round
that finished here). Bearer tokens live hashed in the fleet registry (table
``api_tokens`` of ``fleet.db``, or of the PostgreSQL registry every node shares), each
bound to one tenant of the registry: the tenant of every request is its token's;
nothing in a request names one.

With ``--workers N`` consolidation runs in another process (``hirmem fleet consolidate``):
the memory engine follows its commits (SQLite's data version), the substrate is read as
this process opened it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI

from hirmem.api.dashboard import application
from hirmem.api.problems import Problem
from hirmem.api.tokens import TokenRow, TokenStore
from hirmem.fleet.registry import Registry, RegistryError
from hirmem.fleet.view import TenantView
from hirmem.memory.engine import MemoryEngine
from hirmem.semantic.substrate import Substrate
from hirmem.sql.backend import Backend
from hirmem.sql.dialect import to_postgres

if TYPE_CHECKING:
    from hirmem.fleet.app import FleetNode

__all__ = ["FleetSources", "api_app", "create_token", "token_store"]


def token_store(registry: str | Path | Registry) -> TokenStore:
    """The fleet's API tokens: a table of the registry (given, or the file ``fleet.db``
    of a fleet directory)."""
    if isinstance(registry, Registry) and registry.conninfo is not None:
        return TokenStore(registry.where, _RegistryDatabase(registry.backend))
    directory = registry.directory if isinstance(registry, Registry) else Path(registry)
    return TokenStore(directory / "fleet.db")


class _Rows:
    """A statement's answer as a ``sqlite3`` cursor gives it (what TokenStore reads)."""

    def __init__(self, rows: list[tuple[Any, ...]], rowcount: int) -> None:
        self.rows, self.rowcount = rows, rowcount

    def fetchone(self) -> tuple[Any, ...] | None:
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self.rows


class _RegistryDatabase:
    """A PostgreSQL registry's database as :class:`TokenStore` talks to one: each
    statement (SQLite's dialect, translated) its own transaction on the registry's pool,
    which replaces a connection the server dropped."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def execute(self, sql: str, parameters: Any = (), /) -> _Rows:
        statement = to_postgres(sql)
        with self.backend.transaction() as tx:
            if statement.lstrip()[:6].upper() == "SELECT":
                return _Rows(tx.rows(statement, parameters), -1)
            return _Rows([], tx.run(statement, parameters))

    def close(self) -> None:
        """The registry owns the pool and closes it."""


def create_token(registry: Registry, tokens: TokenStore, tenant: str, name: str, scope: str
                 ) -> tuple[str, TokenRow]:  # fmt: skip
    """A token bound to ``tenant``, which must be one of the registry's."""
    if registry.tenant(tenant) is None:
        raise RegistryError(f"no tenant {tenant} (hirmem fleet tenant list shows them)")
    return tokens.create(name, scope, tenant)


class FleetSources:
    """:class:`hirmem.api.sources.Sources` over a fleet node's tenants."""

    def __init__(self, node: FleetNode) -> None:
        self.node = node

    def _known(self, tenant: str) -> None:
        if self.node.registry.tenant(tenant) is None:
            raise Problem(404, "no-tenant", f"tenant {tenant!r} has no data on this node")

    @contextmanager
    def fleet(self, tenant: str) -> Iterator[TenantView]:
        self._known(tenant)
        yield TenantView(self.node.registry.store(tenant))

    def memory(self, tenant: str) -> MemoryEngine:
        self._known(tenant)
        engine = self.node.worker().served_engine(tenant)
        if engine is None:
            raise Problem(503, "no-memory", f"tenant {tenant!r} has no memory yet (its "
                          "first consolidation round makes it)")  # fmt: skip
        return engine

    @contextmanager
    def substrate(self, tenant: str) -> Iterator[Substrate]:
        self._known(tenant)
        with self.node.worker().served_substrate(tenant) as sub:
            if sub is None:
                raise Problem(503, "no-substrate", f"tenant {tenant!r} has no semantic "
                              "substrate yet (its first consolidation round makes it)")  # fmt: skip
            yield sub

    def health(self) -> tuple[bool, dict[str, Any]]:
        node = self.node
        return True, {"status": "ok", "role": "fleet node", "inflight": node.inflight,
                      "overloaded": node.overloaded,
                      "consolidation_failures": node.consolidation_failures,
                      "unrecorded_refusals": node.unrecorded_refusals}  # fmt: skip

    def metrics(self) -> bytes:
        """The node's own figures (no tenant's data: every token may read them)."""
        node = self.node
        families = (
            ("hirmem_fleet_inflight", "gauge", "Uploads being judged now.", node.inflight),
            ("hirmem_fleet_overloaded_total", "counter",
             "Uploads answered 503 over the in-flight bound.", node.overloaded),
            ("hirmem_fleet_consolidation_failures_total", "counter",
             "Consolidation rounds that failed.", node.consolidation_failures),
            ("hirmem_fleet_unrecorded_refusals_total", "counter",
             "Refusals the registry could not record (its database failed).",
             node.unrecorded_refusals),
        )  # fmt: skip
        lines = []
        for name, kind, text, value in families:
            lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}", f"{name} {value}"]
        return ("\n".join(lines) + "\n").encode()

    def close(self) -> None:
        """Nothing of its own: the registry and the consolidator are the node's."""


def api_app(node: FleetNode, tokens: TokenStore) -> FastAPI:
    """The API and dashboard over the node's tenants."""
    return application(FleetSources(node), tokens)
