"""Dictionary encoding for the tiers' tables: a string that many rows repeat (a name, a
container, a predicate, a kind) is held once in a ``<table>(id INTEGER PRIMARY KEY, word
TEXT UNIQUE)`` and the rows hold its integer; and :func:`source_key`, the 64-bit integer a
row keeps for the document it came from (most documents give a row or two, so a dictionary
row and its unique index would cost more than the name they save).

Works on SQLite and, through :mod:`hirmem.sql.dialect`, on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Collection

from hirmem.protocol.identity import fnv1a64
from hirmem.sql import Connection

__all__ = ["Words", "source_key"]


def source_key(source: str) -> int:
    """``source`` as the signed 64-bit integer (FNV-1a of its UTF-8) its rows keep: found by
    it when the source is withdrawn; never read back as a name."""
    h = fnv1a64(source.encode())
    return h - (1 << 64) if h >= 1 << 63 else h


class Words:
    """The dictionary table ``table`` on ``db`` (made if missing). The caller holds the
    store's lock and, for :meth:`id` with ``create``, its write transaction."""

    def __init__(self, db: Connection, table: str) -> None:
        if not table.isidentifier():
            raise ValueError(f"{table!r} is not a plain SQL name")
        self.db, self.table = db, table
        db.execute(f"CREATE TABLE IF NOT EXISTS {table} "
                   "(id INTEGER PRIMARY KEY, word TEXT UNIQUE NOT NULL)")  # fmt: skip

    def id(self, word: str, *, create: bool = True) -> int | None:
        """The integer of ``word``; a new one when it is not held and ``create`` (else None)."""
        row = self.db.execute(f"SELECT id FROM {self.table} WHERE word = ?", (word,)).fetchone()
        if row is not None:
            return int(row[0])
        if not create:
            return None
        cur = self.db.execute(f"INSERT INTO {self.table}(word) VALUES (?)", (word,))
        return int(cur.lastrowid or 0)

    def ids(self, words: Collection[str]) -> list[int]:
        """The integers of those of ``words`` held (in no particular order)."""
        if not words:
            return []
        marks = ",".join("?" * len(words))
        return [int(r[0]) for r in self.db.execute(
            f"SELECT id FROM {self.table} WHERE word IN ({marks})", sorted(words))]  # fmt: skip

    def word(self, wid: int) -> str:
        row = self.db.execute(f"SELECT word FROM {self.table} WHERE id = ?", (wid,)).fetchone()
        if row is None:
            raise KeyError(f"{self.table} holds no word {wid}")
        return str(row[0])
