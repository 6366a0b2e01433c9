"""Dictionary encoding for the tiers' tables: a string that many rows repeat (a name, a
container, a predicate, a kind) is held once in a ``<table>(id INTEGER PRIMARY KEY, word
TEXT UNIQUE)`` and the rows hold its integer; and :func:`source_key`, the 64-bit integer a
row keeps for the document it came from (most documents give a row or two, so a dictionary
row and its unique index would cost more than the name they save).

Works on SQLite and, through :mod:`hirmem.sql.dialect`, on PostgreSQL.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection

from hirmem.protocol.identity import fnv1a64
from hirmem.semantic.errors import SemanticError
from hirmem.sql import Connection

__all__ = ["Sources", "Words", "source_key"]


def source_key(source: str) -> int:
    """``source`` as the signed 64-bit integer (FNV-1a of its UTF-8) its rows keep: found by
    it when the source is withdrawn; never read back as a name."""
    return _signed(fnv1a64(source.encode()))


class Words:
    """The dictionary table ``table`` on ``db`` (made if missing), its strings in the
    column ``column`` (the tiers' tables name it ``word`` or ``name``). Every id is read
    from the database, never remembered by one process: two writers of one store (two
    fleet nodes on one tenant) share the dictionary. The caller holds the store's lock
    and, for :meth:`id` with ``create``, its write transaction."""

    def __init__(self, db: Connection, table: str, column: str = "word") -> None:
        for name in (table, column):
            if not name.isidentifier():
                raise ValueError(f"{name!r} is not a plain SQL name")
        self.db, self.table, self.column = db, table, column
        db.execute(f"CREATE TABLE IF NOT EXISTS {table} "
                   f"(id INTEGER PRIMARY KEY, {column} TEXT UNIQUE NOT NULL)")  # fmt: skip

    def id(self, word: str, *, create: bool = True) -> int | None:
        """The integer of ``word``; a new one when it is not held and ``create`` (else None).
        A word another writer added first is found, not added twice."""
        find = f"SELECT id FROM {self.table} WHERE {self.column} = ?"
        row = self.db.execute(find, (word,)).fetchone()
        if row is None and create:
            self.db.execute(f"INSERT OR IGNORE INTO {self.table}({self.column}) VALUES (?)",
                            (word,))  # fmt: skip
            row = self.db.execute(find, (word,)).fetchone()
        return None if row is None else int(row[0])

    def ids(self, words: Collection[str]) -> list[int]:
        """The integers of those of ``words`` held, smallest first."""
        if not words:
            return []
        marks = ",".join("?" * len(words))
        return [int(r[0]) for r in self.db.execute(
            f"SELECT id FROM {self.table} WHERE {self.column} IN ({marks}) ORDER BY id",
            sorted(words))]  # fmt: skip

    def word(self, wid: int) -> str:
        row = self.db.execute(f"SELECT {self.column} FROM {self.table} WHERE id = ?",
                              (wid,)).fetchone()  # fmt: skip
        if row is None:
            raise KeyError(f"{self.table} holds no word {wid}")
        return str(row[0])


_HEX_ID = re.compile(r"[0-9a-f]{16}")


class Sources:
    """Source names as the 64-bit integers rows keep for them. A document id (16 lower-case
    hex digits: what the substrate names its documents by) *is* a 64-bit number, so it is
    kept as that number and spelled again from it, with no dictionary row; any other name
    is kept as ``hashed(name)`` with a row of ``table(id INTEGER PRIMARY KEY, name TEXT)``
    to spell it (two names of one key are refused, never conflated)."""

    def __init__(self, db: Connection, table: str, hashed: Callable[[str], int]) -> None:
        if not table.isidentifier():
            raise ValueError(f"{table!r} is not a plain SQL name")
        self.db, self.table, self.hashed = db, table, hashed
        db.execute(f"CREATE TABLE IF NOT EXISTS {table} (id INTEGER PRIMARY KEY, "
                   "name TEXT NOT NULL)")  # fmt: skip

    def key(self, name: str, *, create: bool = True) -> int:
        """The integer ``name`` is kept as (its dictionary row written when ``create``)."""
        if _HEX_ID.fullmatch(name):
            key = _signed(int(name, 16))
            held = self._held(key)
            if held is not None:
                raise SemanticError(f"sources {held!r} and {name!r} share a 64-bit key")
            return key
        key = self.hashed(name)
        held = self._held(key)
        if held is None and create:
            self.db.execute(f"INSERT INTO {self.table} VALUES (?, ?)", (key, name))
        elif held is not None and held != name:
            raise SemanticError(f"sources {held!r} and {name!r} share a 64-bit hash")
        return key

    def forget(self, name: str) -> None:
        """Drop ``name``'s dictionary row (its rows are gone)."""
        if not _HEX_ID.fullmatch(name):
            self.db.execute(f"DELETE FROM {self.table} WHERE id = ? AND name = ?",
                            (self.hashed(name), name))  # fmt: skip

    def name(self, key: int, spelled: str | None = None, *, joined: bool = False) -> str:
        """The name kept as ``key``. ``joined``: the caller read its dictionary row with it
        (``spelled``, its name, None for a document id spelled from the number)."""
        if spelled is not None:
            return spelled
        held = None if joined else self._held(key)
        return held if held is not None else f"{key & 0xFFFFFFFFFFFFFFFF:016x}"

    def _held(self, key: int) -> str | None:
        row = self.db.execute(f"SELECT name FROM {self.table} WHERE id = ?", (key,)).fetchone()
        return None if row is None else str(row[0])


def _signed(h: int) -> int:
    return h - (1 << 64) if h >= 1 << 63 else h
