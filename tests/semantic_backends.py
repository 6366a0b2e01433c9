"""The semantic substrate's tests on both of its stores: SQLite and PostgreSQL.

A test module that says ``pytestmark = pytest.mark.usefixtures("semantic_backend")`` runs
each of its tests twice: once as written, and once with every store the substrate opens
(:func:`hirmem.semantic.stores.db.open_db`) in a schema of a real PostgreSQL server the
module starts once: a private ``":memory:"`` store in a fresh schema, a file in the schema
named for its path (so a test that reopens a file reopens the same schema).
"""

from __future__ import annotations

import itertools
import re
from collections import deque
from collections.abc import Iterator

import pytest

from hirmem.semantic import (
    assertions,
    claims,
    decisions,
    entities,
    memories,
    passages,
    prov,
)
from hirmem.semantic.stores import db as db_module
from hirmem.semantic.stores import sqlite as sqlite_stores
from hirmem.sql import Connection, PgTarget
from memory_backends import pg_skip, throwaway_primary

# every module that opens a store's connection by name
OPENERS = (assertions, claims, decisions, entities, memories, passages, prov, sqlite_stores)
LIVE = 40  # connections held open at once (the server takes 60); the oldest are closed
_fresh = itertools.count(1)


def on_postgres(dsn: str) -> tuple[object, deque[Connection]]:
    """An ``open_db`` that puts every store on ``dsn``'s server, and its connections."""
    schemas: dict[str, str] = {}
    live: deque[Connection] = deque()

    def open_db(where: db_module.Where, store: str, timeout: float = 5.0) -> Connection:
        if not isinstance(where, PgTarget):
            key = str(where)
            if key == ":memory:":
                name = f"sem_{next(_fresh)}"
            else:
                name = schemas.setdefault(key, f"semf_{len(schemas) + 1}_"
                                          + re.sub(r"\W", "_", key)[-20:].lower())
            where = PgTarget(dsn, name)
        while len(live) >= LIVE:
            live.popleft().close()
        db = db_module.open_db(where, store, timeout)
        live.append(db)
        return db

    return open_db, live


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pg_skip())])
def semantic_server(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "sqlite":
        yield "sqlite"
        return
    with throwaway_primary("semantic", fsync=False) as primary, \
            pytest.MonkeyPatch.context() as patch:
        opener, live = on_postgres(primary.dsn)
        for module in OPENERS:
            patch.setattr(module, "open_db", opener)
        try:
            yield "postgres"
        finally:
            while live:
                live.popleft().close()


@pytest.fixture
def semantic_backend(semantic_server: str, request: pytest.FixtureRequest) -> str:
    """The module's substrate backend for this test: "sqlite" or "postgres". A test marked
    ``sqlite_only(reason)`` (it opens the SQLite file itself, or stores what PostgreSQL's
    text cannot hold) is skipped on PostgreSQL with its reason."""
    only = request.node.get_closest_marker("sqlite_only")
    if only is not None and semantic_server == "postgres":
        pytest.skip(f"SQLite only: {only.args[0]}")
    return semantic_server
