"""The memory engine's tests on both of its stores: SQLite and PostgreSQL.

A test module that says ``pytestmark = pytest.mark.usefixtures("memory_backend")`` runs
each of its tests twice: once as written, and once with every throwaway engine
(``MemoryEngine(":memory:")``) kept in a fresh schema of a real PostgreSQL server that
the module starts once (the tests' file stores stay SQLite files: they open them with
``sqlite3`` to tamper with them).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import settings

from hirmem.emulation import postgres
from hirmem.memory import engine as engine_module
from hirmem.memory.store import Store
from hirmem.sql import PgTarget

_schemas = itertools.count(1)
LIVE = 6  # throwaway stores open at once (each holds one or two connections)


def pg_skip() -> pytest.MarkDecorator:
    reason = postgres.available()
    return pytest.mark.skipif(reason is not None, reason=reason or "")


def throwaway_on(dsn: str) -> type[Store]:
    """A Store class whose ``":memory:"`` is a new schema of ``dsn``'s database."""

    live: deque[Store] = deque()

    class PgThrowaway(Store):
        def __init__(self, path: str | Path | PgTarget = ":memory:") -> None:
            if str(path) == ":memory:":
                path = PgTarget(dsn, f"mem_{next(_schemas)}")
                # tests drop their engines unclosed: the oldest ones' connections are
                # closed (the server takes 60 clients), none a test could still hold
                while len(live) >= LIVE:
                    live.popleft().close()
                live.append(self)
            super().__init__(path)

    return PgThrowaway


@contextmanager
def throwaway_primary(name: str, *, fsync: bool = True) -> Iterator[postgres.Primary]:
    """A PostgreSQL primary for throwaway stores: a commit need not wait for its WAL flush
    (the tests check what the stores do, not the disk; the fleet's tests keep fsync'd
    commits); ``fsync=False`` spares the disk the shutdown checkpoint too."""
    with postgres.Primary(name) as primary:
        primary.sql("ALTER SYSTEM SET synchronous_commit = off")
        if not fsync:
            primary.sql("ALTER SYSTEM SET fsync = off")
        primary.sql("SELECT pg_reload_conf()")
        yield primary


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pg_skip())])
def memory_server(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "sqlite":
        yield "sqlite"
        return
    with throwaway_primary("memory") as primary, pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine_module, "Store", throwaway_on(primary.dsn))
        yield "postgres"


@pytest.fixture
def memory_backend(memory_server: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """The module's engine store for this test; on PostgreSQL a property test draws a
    quarter of its examples (at least 5): each makes a schema over the network, and the
    SQLite run keeps the full count."""
    test = request.function
    given = getattr(test, "_hypothesis_internal_use_settings", None)
    if memory_server != "postgres" or given is None:
        yield memory_server
        return
    test._hypothesis_internal_use_settings = settings(
        given, max_examples=max(5, given.max_examples // 4)
    )
    try:
        yield memory_server
    finally:
        test._hypothesis_internal_use_settings = given
