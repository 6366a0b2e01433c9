"""What the application serves, per tenant: an interface, so one application mounts on
the daemon (local files, one tenant) and on a fleet node (its own stores per tenant).

A route asks :class:`Sources` for the intake reader, the memory engine or the semantic
substrate *of the principal's tenant*; a tenant the sources do not hold is a 404 problem,
never another tenant's data. The daemon's health and metrics come in as callables, so
this package needs nothing of the daemon's service.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Protocol

from hirmem.api.problems import Problem
from hirmem.daemon.reader import FleetReader, open_fleet
from hirmem.memory.config import MemoryConfig
from hirmem.memory.engine import MemoryEngine
from hirmem.protocol.keys import SigningKey
from hirmem.semantic.substrate import Substrate

HealthFn = Callable[[], tuple[bool, dict[str, Any]]]
MetricsFn = Callable[[], bytes]  # the Prometheus text exposition


class Sources(Protocol):
    """Where a tenant's data is. Every method raises :class:`Problem` (404) for a
    tenant it does not hold, and (503) for a part not there yet."""

    def fleet(self, tenant: str) -> AbstractContextManager[FleetReader]: ...

    def memory(self, tenant: str) -> MemoryEngine: ...

    def substrate(self, tenant: str) -> AbstractContextManager[Substrate]: ...

    def health(self) -> tuple[bool, dict[str, Any]]: ...

    def metrics(self) -> bytes: ...

    def close(self) -> None: ...


class LocalSources:
    """One tenant over local files: the daemon's intake store, its memory store and an
    optional semantic substrate. The memory engine and the substrate are opened at
    first use (the daemon's memory keeper creates the memory store on its first tick)."""

    def __init__(
        self,
        intake: Path,
        memory: Path | None = None,
        semantic: Path | None = None,
        *,
        tenant: str = "local",
        signing_key: SigningKey | None = None,
        memory_config: MemoryConfig | None = None,
        health: HealthFn | None = None,
        metrics: MetricsFn | None = None,
    ) -> None:
        self.intake_path, self.memory_path, self.semantic_path = intake, memory, semantic
        self.tenant = tenant
        self._key, self._memory_config = signing_key, memory_config
        self._health, self._metrics = health, metrics
        self._engine: MemoryEngine | None = None
        self._substrate: Substrate | None = None
        self._open_lock = threading.Lock()
        self._substrate_lock = threading.Lock()  # the substrate is used by one at a time
        self._fleet_cm: AbstractContextManager[FleetReader] | None = None
        self._fleet: FleetReader | None = None

    def _check(self, tenant: str) -> None:
        if tenant != self.tenant:
            raise Problem(404, "no-tenant", f"tenant {tenant!r} has no data on this host")

    @contextmanager
    def fleet(self, tenant: str) -> Iterator[FleetReader]:
        self._check(tenant)
        with self._open_lock:
            if self._fleet is None:
                if not self.intake_path.is_file():
                    raise Problem(503, "no-store",
                                  f"{self.intake_path}: no daemon store yet")  # fmt: skip
                self._fleet_cm = open_fleet(self.intake_path)
                self._fleet = self._fleet_cm.__enter__()
        yield self._fleet  # the store serialises its own reads

    def memory(self, tenant: str) -> MemoryEngine:
        self._check(tenant)
        with self._open_lock:
            if self._engine is None:
                path = self.memory_path
                if path is None or not path.is_file():
                    raise Problem(503, "no-memory",
                                  "this host keeps no memory store yet (the daemon's memory "
                                  "keeper creates it on its first tick)")  # fmt: skip
                self._engine = MemoryEngine(path, self._memory_config,
                                            signing_key=self._key)  # fmt: skip
            return self._engine

    @contextmanager
    def substrate(self, tenant: str) -> Iterator[Substrate]:
        self._check(tenant)
        with self._open_lock:
            if self._substrate is None:
                path = self.semantic_path
                if path is None or not path.is_file():
                    raise Problem(
                        503, "no-substrate",
                        "this host serves no semantic substrate (give [api] semantic = FILE, "
                        "filled by `hirmem semantic devices`)",
                    )  # fmt: skip
                self._substrate = Substrate.open(path)
        with self._substrate_lock:
            yield self._substrate

    def health(self) -> tuple[bool, dict[str, Any]]:
        if self._health is None:
            return True, {"status": "ok", "note": "no daemon in this process"}
        return self._health()

    def metrics(self) -> bytes:
        if self._metrics is None:
            raise Problem(503, "no-metrics", "no daemon in this process: no metrics")
        return self._metrics()

    def close(self) -> None:
        with self._open_lock:
            if self._engine is not None:
                self._engine.close()
                self._engine = None
            if self._substrate is not None:
                self._substrate.close()
                self._substrate = None
            if self._fleet_cm is not None:
                self._fleet_cm.__exit__(None, None, None)
                self._fleet_cm = self._fleet = None
