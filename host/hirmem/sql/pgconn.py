"""A PostgreSQL connection that answers as a ``sqlite3.Connection`` does.

The memory engine's code talks to its store's connection with the handful of calls of
Python's ``sqlite3`` module (``execute``/``executemany`` returning a cursor with
``fetchone``/``fetchall``/iteration, ``rowcount`` and ``lastrowid``, ``in_transaction``,
``close``). :class:`PgConnection` gives the same calls over psycopg 3, so the engine keeps
its statements: each goes through :func:`hirmem.sql.dialect.to_postgres` first.

What differs is made to look the same:

* ``lastrowid``: an ``INSERT`` into a table with an identity column (SQLite's rowid,
  made explicit by the dialect) gets ``RETURNING`` that column, read back here;
* errors: a constraint or a trigger's refusal (``RAISE EXCEPTION``) is raised as
  :class:`PgIntegrityError`, a ``sqlite3.IntegrityError``, as SQLite raises them (the
  engine catches that class), a constraint's message starting with SQLite's words
  (``UNIQUE constraint failed: …``); any other database error as ``sqlite3.OperationalError``,
  PostgreSQL's message kept;
* values: ``numeric`` results (``sum`` of integers) come back as ``int`` (or ``float``),
  not ``Decimal``; ``bool`` parameters are sent as 0/1 (SQLite has no booleans, and a
  ``BIGINT`` column takes no PostgreSQL ``boolean``).

The connection runs in autocommit mode; the caller says ``BEGIN``/``COMMIT``/``ROLLBACK``
itself, as the memory store does on SQLite. A connection opened with ``writer_lock``
takes ``pg_advisory_xact_lock`` on that name right after each ``BEGIN`` (SQLite's
``BEGIN IMMEDIATE``): a store's transactions have one writer across processes and
machines. :meth:`PgConnection.executescript` runs a script of statements (``;``
between them, ``--`` comments) as ``sqlite3``'s does, in one transaction.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from hirmem.sql.dialect import inserted_table, to_postgres

__all__ = ["PgConnection", "PgCursor", "PgIntegrityError", "split_script"]

Params = Sequence[Any] | Mapping[str, Any]


# SQLSTATE → the words SQLite's error for the same refusal starts with
_SQLITE_SAYS = {
    "23505": "UNIQUE constraint failed",
    "23502": "NOT NULL constraint failed",
    "23514": "CHECK constraint failed",
    "23503": "FOREIGN KEY constraint failed",
}


class PgIntegrityError(sqlite3.IntegrityError):
    """PostgreSQL refused a row: a constraint, or a trigger that raised."""


class PgCursor:
    """The rows a statement returned, read as a ``sqlite3.Cursor`` reads them."""

    def __init__(self, rows: list[tuple[Any, ...]], rowcount: int, lastrowid: int | None):
        self._rows = rows
        self._next = 0
        self.rowcount = rowcount
        self.lastrowid = lastrowid

    def fetchone(self) -> Any:  # a tuple, or None (sqlite3 says Any too)
        if self._next >= len(self._rows):
            return None
        self._next += 1
        return self._rows[self._next - 1]

    def fetchall(self) -> list[tuple[Any, ...]]:
        rest, self._next = self._rows[self._next :], len(self._rows)
        return rest

    def fetchmany(self, size: int = 1) -> list[tuple[Any, ...]]:
        part = self._rows[self._next : self._next + size]
        self._next += len(part)
        return part

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        while (row := self.fetchone()) is not None:
            yield row


_BEGIN = re.compile(r"^\s*BEGIN(\s+(DEFERRED|IMMEDIATE|EXCLUSIVE))?(\s+TRANSACTION)?\s*;?\s*$",
                    re.I)  # fmt: skip


def split_script(script: str) -> list[str]:
    """The statements of a SQL script: split at ``;`` outside quotes, ``--`` comments
    dropped, empty statements skipped."""
    out, part, i, n = [], [], 0, len(script)
    while i < n:
        ch = script[i]
        if ch in ("'", '"'):
            end = script.find(ch, i + 1)
            end = n - 1 if end == -1 else end
            part.append(script[i : end + 1])
            i = end + 1
            continue
        if ch == "-" and script.startswith("--", i):
            i = script.find("\n", i)
            i = n if i == -1 else i
            continue
        if ch == ";":
            out.append("".join(part).strip())
            part = []
        else:
            part.append(ch)
        i += 1
    out.append("".join(part).strip())
    return [s for s in out if s]


def _param(value: Any) -> Any:
    return int(value) if isinstance(value, bool) else value


def _params(params: Params) -> Params:
    if isinstance(params, Mapping):
        return {k: _param(v) for k, v in params.items()}
    return tuple(_param(v) for v in params)


class PgConnection:
    """One psycopg connection to ``conninfo`` with ``schema`` first on its search path."""

    def __init__(self, conninfo: str, schema: str, writer_lock: str | None = None) -> None:
        import psycopg  # imported here: SQLite-only installs never need it
        from psycopg.adapt import Loader

        class _NumberLoader(Loader):  # numeric → int when whole, else float
            def load(self, data: Any) -> int | float:
                text = bytes(data).decode()
                return int(text) if text.lstrip("-").isdigit() else float(text)

        self._psycopg = psycopg
        self.schema = schema
        try:
            self.raw = psycopg.connect(
                conninfo, autocommit=True, options=f"-c search_path={schema},public"
            )
        except psycopg.Error as exc:
            raise sqlite3.OperationalError(f"cannot connect to PostgreSQL: {exc}") from None
        self.raw.adapters.register_loader("numeric", _NumberLoader)
        self._keys: dict[str, str | None] = {}  # table → its identity column
        self.writer_lock = writer_lock

    @property
    def in_transaction(self) -> bool:
        return bool(self.raw.info.transaction_status != self._psycopg.pq.TransactionStatus.IDLE)

    def _identity(self, table: str) -> str | None:
        if table not in self._keys:
            with self.raw.cursor() as cur:
                cur.execute(
                    "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) "
                    "AND attidentity != '' AND NOT attisdropped",
                    (table,),
                )
                row = cur.fetchone()
            self._keys[table] = None if row is None else str(row[0])
        return self._keys[table]

    def _error(self, exc: Exception, sql: str) -> sqlite3.Error:
        errors = self._psycopg.errors
        text = str(exc).strip()
        if isinstance(exc, (errors.IntegrityError, errors.RaiseException)):
            # SQLite's words first (what callers and people match on), PostgreSQL's after
            said = _SQLITE_SAYS.get(getattr(exc, "sqlstate", None) or "")
            return PgIntegrityError(f"{said}: {text}" if said else text)
        return sqlite3.OperationalError(f"{text} (in: {sql.strip()[:160]})")

    def execute(self, sql: str, params: Params = ()) -> PgCursor:
        if self.writer_lock is not None and _BEGIN.match(sql):
            self._run("BEGIN", ())
            self._run("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.writer_lock,))
            return PgCursor([], -1, None)
        statement = to_postgres(sql)
        table = inserted_table(sql)
        key = self._identity(table) if table is not None else None
        if key is not None:
            statement += f" RETURNING {key}"
        try:
            with self.raw.cursor() as cur:
                cur.execute(statement, _params(params))
                rows = [tuple(r) for r in cur.fetchall()] if cur.description else []
                count = int(cur.rowcount)
        except self._psycopg.Error as exc:
            raise self._error(exc, sql) from exc
        if key is not None:  # the RETURNING was ours: the caller asked for no rows
            return PgCursor([], count, int(rows[0][0]) if rows else None)
        return PgCursor(rows, count, None)

    def executemany(self, sql: str, seq: Iterable[Params]) -> PgCursor:
        statement = to_postgres(sql)
        try:
            with self.raw.cursor() as cur:
                cur.executemany(statement, [_params(p) for p in seq])
                count = int(cur.rowcount)
        except self._psycopg.Error as exc:
            raise self._error(exc, sql) from exc
        return PgCursor([], count, None)

    def _run(self, statement: str, params: Params) -> None:
        try:
            self.raw.execute(statement, params)
        except self._psycopg.Error as exc:
            raise self._error(exc, statement) from exc

    def executescript(self, script: str) -> PgCursor:
        """Each statement of ``script`` (as SQLite takes it) in turn, in one transaction
        (joined when one is open), under the writer's lock when it has one."""
        statements = split_script(script)
        own = not self.in_transaction
        if own:
            self.execute("BEGIN")
        try:
            for statement in statements:
                self.execute(statement)
        except BaseException:
            if own:
                self.execute("ROLLBACK")
            raise
        if own:
            self.execute("COMMIT")
        return PgCursor([], -1, None)

    def verbatim(self, sql: str) -> None:
        """Run ``sql`` as written, untranslated and without parameters (PL/pgSQL)."""
        try:
            self.raw.execute(sql.encode())
        except self._psycopg.Error as exc:
            raise self._error(exc, sql) from exc

    def close(self) -> None:
        self.raw.close()
