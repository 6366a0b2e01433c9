"""One SQL database behind one small interface: SQLite or PostgreSQL.

The fleet's tenant stores write their statements once, with ``?`` placeholders and the
types both engines know (``BIGINT``, ``TEXT``); a :class:`Backend` runs them on its
engine: :class:`SqliteBackend` (WAL, ``synchronous=FULL``, one writer at a time through
``BEGIN IMMEDIATE``) or :class:`PostgresBackend` (psycopg 3, a bounded pool of
connections, each transaction ``READ COMMITTED``). Byte strings are ``BLOB`` on SQLite
and ``BYTEA`` on PostgreSQL: schemas say ``{bytes}`` and the backend fills it in, as it
does ``{serial}`` for an ever-growing integer key.
"""

from __future__ import annotations

import queue
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Protocol

from hirmem.protocol.errors import HirmemError

__all__ = ["Backend", "BackendError", "PostgresBackend", "SqliteBackend", "Tx"]

Row = tuple[Any, ...]


class BackendError(HirmemError):
    """The database cannot be opened or refused a statement."""


class Tx(Protocol):
    """One open transaction."""

    def rows(self, sql: str, args: Sequence[object] = ()) -> list[Row]: ...

    def run(self, sql: str, args: Sequence[object] = ()) -> int:
        """Execute; the number of rows changed."""
        ...


class Backend(Protocol):
    kind: str  # "sqlite" or "postgres"
    skip_locked: str  # the row-claim suffix: " FOR UPDATE SKIP LOCKED" or ""

    def transaction(self) -> Any:  # a context manager yielding a Tx
        ...

    def reading(self) -> Any:  # a context manager yielding a Tx that only reads
        ...

    def schema(self, ddl: str) -> str: ...

    def close(self) -> None: ...


class _SqliteTx:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def rows(self, sql: str, args: Sequence[object] = ()) -> list[Row]:
        return [tuple(r) for r in self.db.execute(sql, tuple(args)).fetchall()]

    def run(self, sql: str, args: Sequence[object] = ()) -> int:
        return self.db.execute(sql, tuple(args)).rowcount


class SqliteBackend:
    """A SQLite file: one connection, one transaction at a time (SQLite has one writer)."""

    kind = "sqlite"
    skip_locked = ""

    def __init__(self, path: str | Path, *, foreign_keys: bool = False) -> None:
        """``foreign_keys``: enforce ``REFERENCES`` (SQLite does not unless asked;
        PostgreSQL always does)."""
        self.path = Path(path)
        self._lock = threading.Lock()
        self._local = threading.local()  # each thread's read connection
        self._readers: list[sqlite3.Connection] = []
        try:
            self._db = sqlite3.connect(
                str(self.path), isolation_level=None, check_same_thread=False, timeout=30
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            if foreign_keys:
                self._db.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as exc:
            raise BackendError(f"{self.path}: cannot open: {exc}") from None

    def schema(self, ddl: str) -> str:
        return ddl.format(bytes="BLOB", serial="INTEGER PRIMARY KEY AUTOINCREMENT")

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield _SqliteTx(self._db)
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    with suppress(sqlite3.Error):
                        self._db.execute("ROLLBACK")
                raise

    @contextmanager
    def reading(self) -> Iterator[Tx]:
        """A snapshot on this thread's own connection: WAL readers never wait for the
        writer (nor take its lock), in this process or another."""
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(
                str(self.path), isolation_level=None, check_same_thread=False, timeout=30
            )
            self._local.db = db
            with self._lock:
                self._readers.append(db)
        db.execute("BEGIN")
        try:
            yield _SqliteTx(db)
        finally:
            db.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._db.close()
            for db in self._readers:
                db.close()
            self._readers.clear()


class _PgTx:
    def __init__(self, cur: Any) -> None:
        self.cur = cur

    def rows(self, sql: str, args: Sequence[object] = ()) -> list[Row]:
        self.cur.execute(sql.replace("?", "%s"), tuple(args))
        return [tuple(r) for r in self.cur.fetchall()]

    def run(self, sql: str, args: Sequence[object] = ()) -> int:
        self.cur.execute(sql.replace("?", "%s"), tuple(args))
        return int(self.cur.rowcount)


class PostgresBackend:
    """A PostgreSQL database (a libpq conninfo string), through at most ``pool`` connections."""

    kind = "postgres"
    skip_locked = " FOR UPDATE SKIP LOCKED"

    def __init__(self, conninfo: str, pool: int = 8) -> None:
        import psycopg  # imported here: SQLite-only fleets never need it

        self._psycopg = psycopg
        self.conninfo = conninfo
        self._idle: queue.LifoQueue[Any] = queue.LifoQueue()
        self._slots = threading.BoundedSemaphore(pool)
        self._all: list[Any] = []
        self._lock = threading.Lock()
        with self.transaction() as tx:  # fail now, with the reason, if it cannot connect
            tx.rows("SELECT 1")

    def schema(self, ddl: str) -> str:
        return ddl.format(bytes="BYTEA", serial="BIGSERIAL PRIMARY KEY")

    def _connect(self) -> Any:
        try:
            conn = self._psycopg.connect(self.conninfo, autocommit=True)
        except self._psycopg.Error as exc:
            raise BackendError(f"cannot connect to PostgreSQL: {exc}".strip()) from None
        with self._lock:
            self._all.append(conn)
        return conn

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        self._slots.acquire()
        try:
            try:
                conn = self._idle.get_nowait()
            except queue.Empty:
                conn = self._connect()
            broken = False
            try:
                with conn.transaction(), conn.cursor() as cur:
                    yield _PgTx(cur)
            except self._psycopg.OperationalError:
                broken = True
                raise
            finally:
                if broken or conn.closed:
                    with self._lock, suppress(ValueError):
                        self._all.remove(conn)
                    with suppress(Exception):
                        conn.close()
                else:
                    self._idle.put(conn)
        finally:
            self._slots.release()

    def reading(self) -> Any:
        return self.transaction()  # READ COMMITTED: a read takes no lock a writer waits on

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                with suppress(Exception):
                    conn.close()
            self._all.clear()
