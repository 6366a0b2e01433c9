"""SQL databases behind small interfaces: SQLite or PostgreSQL, for the stores that run on
either (the fleet's tenant stores, and each tenant's memory engine and semantic
substrate on the fleet).

* :mod:`~hirmem.sql.backend` — one database, one small transaction interface
  (:class:`~hirmem.sql.backend.Backend`): the fleet's registry and tenant stores
* :mod:`~hirmem.sql.dialect` — a statement written for SQLite in PostgreSQL's dialect
* :mod:`~hirmem.sql.pgconn` — a PostgreSQL connection that answers as a
  ``sqlite3.Connection`` does, so code written against ``sqlite3`` (the memory engine)
  keeps its statements on PostgreSQL
* :mod:`~hirmem.sql.lexical` — full-text indexes behind one interface: SQLite FTS5, or
  a PostgreSQL ``tsvector`` index ranked by BM25 from its own term statistics (the
  semantic substrate's passages and memories)
* :class:`PgTarget` — where a store lives on PostgreSQL: a database and a schema in it

May import: :mod:`hirmem.protocol` only (memory, semantic and fleet import it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Connection", "Cursor", "PgTarget"]


@dataclass(frozen=True)
class PgTarget:
    """A store on PostgreSQL: the database (a libpq conninfo) and the schema in it that
    holds the store's tables (several stores share a tenant's database, each in its own
    schema)."""

    conninfo: str
    schema: str

    def __str__(self) -> str:  # what error messages name: never a password
        return f"postgresql schema {self.schema}"


class Cursor(Protocol):
    """What the stores read from a statement's cursor (sqlite3's, or PgCursor)."""

    @property
    def rowcount(self) -> int: ...

    @property
    def lastrowid(self) -> int | None: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """A ``sqlite3.Connection``, or a :class:`~hirmem.sql.pgconn.PgConnection`."""

    @property
    def in_transaction(self) -> bool: ...

    def execute(self, sql: str, parameters: Any = (), /) -> Cursor: ...

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> Cursor: ...

    def executescript(self, sql_script: str, /) -> Any: ...

    def close(self) -> None: ...
