"""Where a substrate store keeps its tables: a SQLite file (or ``":memory:"``), or a
schema of a PostgreSQL database (:class:`~hirmem.sql.PgTarget`: a fleet tenant's
substrate lives in its tenant's database, so the standby and ``tenant move`` carry it).

:func:`open_db` is the one place a store gets its connection. On PostgreSQL it is a
:class:`~hirmem.sql.pgconn.PgConnection`: the store's statements stay as written for
SQLite and are said in PostgreSQL's dialect on the way (:mod:`hirmem.sql.dialect`); each
store's transactions take an advisory lock named for the schema and the store, so a store
has one writer across processes. A store holds one connection (its reads go through it,
under the store's own lock), so a substrate on PostgreSQL holds one per store: ten (its
triples are a view of its ledger).

What stays SQLite's alone: text holding a NUL character (PostgreSQL's text has none: the
row is refused with PostgreSQL's error); the ``hirmem semantic`` commands (they take a
file); the upgrades of files written by earlier layouts (they read SQLite's catalogue;
:func:`~hirmem.semantic.stores.sqlite.earlier_table` finds none in a server schema, which
is only ever made in the current, compact layout);
the ``open_store`` drivers by DSN (``sqlite:``; a PostgreSQL substrate is opened whole,
:meth:`~hirmem.semantic.substrate.Substrate.open` with a :class:`~hirmem.sql.PgTarget`).
Like a SQLite file, a store reads what other processes wrote only when it is opened
again (the ledger, the PROV log and the decisions are loaded once).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import numpy.typing as npt

from hirmem.sql import Connection, PgTarget
from hirmem.sql.pgconn import PgConnection

__all__ = ["Where", "epoch", "has_table", "in_ids", "open_db"]

Where = str | Path | PgTarget


def open_db(where: Where, store: str, timeout: float = 5.0) -> Connection:
    """A connection to ``where`` for the store named ``store`` (autocommit: the store says
    BEGIN and COMMIT itself). ``timeout``: how long SQLite waits for another writer."""
    if not isinstance(where, PgTarget):
        return sqlite3.connect(str(where), isolation_level=None, check_same_thread=False,
                               timeout=timeout)  # fmt: skip
    db = PgConnection(where.conninfo, where.schema, writer_lock=f"hirmem.{where.schema}.{store}")
    try:
        db.raw.execute("BEGIN")  # the schema made once, whoever opens first
        db.raw.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"hirmem.{where.schema}",))
        db.verbatim(f'CREATE SCHEMA IF NOT EXISTS "{where.schema}"')
        db.raw.execute("COMMIT")
    except BaseException:
        db.close()
        raise
    return db


def has_table(db: Connection, name: str) -> bool:
    """Whether the file (or the connection's schema) holds table ``name``: how a store
    finds a layout of an earlier version to convert, on SQLite and PostgreSQL alike."""
    if isinstance(db, PgConnection):
        row = db.raw.execute("SELECT to_regclass(%s)", (f'"{db.schema}".{name}',)).fetchone()
        return row is not None and row[0] is not None
    return db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                      (name,)).fetchone() is not None  # fmt: skip


def in_ids(db: Connection, column: str, ids: npt.NDArray[np.int64]) -> tuple[str, object]:
    """The condition that ``column`` is one of ``ids``, with its one argument, so a set of
    any size is applied inside the statement (before its ORDER BY and LIMIT): SQLite's
    ``json_each`` over a JSON array, PostgreSQL's ``= ANY`` over an array."""
    if isinstance(db, PgConnection):
        return f"{column} = ANY(?)", [int(i) for i in ids]
    return (f"{column} IN (SELECT value FROM json_each(?))",
            "[" + ",".join(map(str, ids.tolist())) + "]")


def epoch(db: Connection, meta: str, first: int, key: str = "name") -> int:
    """The store's epoch, the instant its rows' times are written from (a few bytes each,
    not eight): ``first`` when the key/value table ``meta`` (its key column ``key``) holds
    none yet, else the one held. Set by the first write, read back in the caller's
    transaction: two writers of one store write from the same instant. Never changes once
    set (a row's offset is read back with it)."""
    for name in (meta, key):
        if not name.isidentifier():
            raise ValueError(f"{name!r} is not a plain SQL name")
    db.execute(f"INSERT OR IGNORE INTO {meta} ({key}, value) VALUES ('epoch', ?)", (first,))
    return int(db.execute(f"SELECT value FROM {meta} WHERE {key} = 'epoch'").fetchone()[0])
