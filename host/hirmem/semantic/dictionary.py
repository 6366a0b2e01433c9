"""Dictionary encoding for the tiers' tables: a string that many rows repeat (a name, a
container, a predicate, a kind) is held once in a ``<table>(id INTEGER PRIMARY KEY, word
TEXT UNIQUE)`` and the rows hold its integer; and sources: :func:`source_key`, the 64-bit
integer of a source's name, held by the rows as a small dense code (:class:`Codes`, one
table a file's tiers share).

Works on SQLite and, through :mod:`hirmem.sql.dialect`, on PostgreSQL.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Sequence

from hirmem.protocol.identity import fnv1a64
from hirmem.semantic.errors import SemanticError
from hirmem.sql import Connection

__all__ = ["PART_BYTES", "Codes", "SourceRows", "Sources", "Words", "pack_ints",
           "source_key", "source_number", "unpack_ints"]


def source_key(source: str) -> int:
    """``source`` as the signed 64-bit integer (FNV-1a of its UTF-8) its rows keep: found by
    it when the source is withdrawn; never read back as a name."""
    return _signed(fnv1a64(source.encode()))


def source_number(source: str) -> int:
    """The 64-bit key of ``source``: a document id (16 lower-case hex digits) is its own
    number, any other name :func:`source_key` of it. Every tier codes a source by it."""
    return _signed(int(source, 16)) if _HEX_ID.fullmatch(source) else source_key(source)


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
CODES = "source_codes"
_CODED = "source_coded"


class Codes:
    """The shared ``source_codes(id INTEGER PRIMARY KEY, key INTEGER UNIQUE)`` of a store's
    file: each source's 64-bit key (:func:`source_key`, or a document id's own number) as a
    small dense integer, the one the tiers' rows hold (one to three bytes where the key takes
    eight, in the row and again in each index on it). Every tier in one file uses the same
    code for a source, so their rows join on it. A code is read back from the database after
    ``INSERT OR IGNORE``, never remembered: two writers of one store share the table. Codes
    are never reused (a source written again gets its code back)."""

    def __init__(self, db: Connection) -> None:
        self.db = db
        db.execute(f"CREATE TABLE IF NOT EXISTS {CODES} "
                   "(id INTEGER PRIMARY KEY, key INTEGER UNIQUE NOT NULL)")  # fmt: skip
        # the (table, column)s whose keys are codes: a column of a store of before is
        # converted once, when the file is opened (:meth:`adopt`)
        db.execute(f"CREATE TABLE IF NOT EXISTS {_CODED} (col TEXT PRIMARY KEY)")

    def code(self, key: int, *, create: bool = True) -> int:
        """The code of 64-bit ``key``; a new one when it has none and ``create``, else 0
        (no row holds 0: a lookup by it finds nothing)."""
        find = f"SELECT id FROM {CODES} WHERE key = ?"
        row = self.db.execute(find, (key,)).fetchone()
        if row is None and create:
            self.db.execute(f"INSERT OR IGNORE INTO {CODES}(key) VALUES (?)", (key,))
            row = self.db.execute(find, (key,)).fetchone()
        return 0 if row is None else int(row[0])

    def adopt(self, table: str, column: str,
              rekeyed: Callable[[], dict[int, int]] | None = None) -> None:  # fmt: skip
        """Hold codes in ``table.column`` from now on; the 64-bit keys a store of before
        kept there are replaced by their codes (once per file, in one transaction: every row
        of the column in one statement, so a code is never read as a key). ``rekeyed``: the
        keys of before that are another key now (old: new), each coded as its new key."""
        for name in (table, column):
            if not name.isidentifier():
                raise ValueError(f"{name!r} is not a plain SQL name")
        mark = f"{table}.{column}"
        own = not self.db.in_transaction
        if own:
            self.db.execute("BEGIN")
        try:
            if self.db.execute(f"SELECT 1 FROM {_CODED} WHERE col = ?",
                               (mark,)).fetchone() is None:  # fmt: skip
                moved = {} if rekeyed is None else rekeyed()
                some = f"FROM {table} WHERE {column} IS NOT NULL"  # (NULL: none, kept)
                held = [int(r[0]) for r in self.db.execute(
                    f"SELECT DISTINCT {column} {some} ORDER BY {column}")]  # fmt: skip
                # first to the new keys (64-bit both: neither is ever the other), then
                # every key to its code
                self.db.executemany(f"UPDATE {table} SET {column} = ? WHERE {column} = ?",
                                    [(moved[k], k) for k in held if k in moved])  # fmt: skip
                self.db.execute(f"INSERT OR IGNORE INTO {CODES}(key) SELECT DISTINCT {column} "
                                f"{some} ORDER BY {column}")  # fmt: skip
                self.db.execute(f"UPDATE {table} SET {column} = (SELECT c.id FROM {CODES} c "
                                f"WHERE c.key = {table}.{column}) "
                                f"WHERE {column} IS NOT NULL")  # fmt: skip
                self.db.execute(f"INSERT INTO {_CODED} VALUES (?)", (mark,))
            if own:
                self.db.execute("COMMIT")
        except BaseException:
            if own:
                self.db.execute("ROLLBACK")
            raise


class Sources:
    """Source names as the codes (:class:`Codes`) rows keep for them. A document id (16
    lower-case hex digits: what the substrate names its documents by) *is* a 64-bit number,
    so its key is that number, spelled again from it, with no dictionary row; any other name
    is keyed ``hashed(name)`` with a row of ``table(id INTEGER PRIMARY KEY, name TEXT)``
    (its id the key) to spell it (two names of one key are refused, never conflated)."""

    def __init__(self, db: Connection, table: str, hashed: Callable[[str], int]) -> None:
        if not table.isidentifier():
            raise ValueError(f"{table!r} is not a plain SQL name")
        self.db, self.table, self.hashed = db, table, hashed
        self.codes = Codes(db)
        db.execute(f"CREATE TABLE IF NOT EXISTS {table} (id INTEGER PRIMARY KEY, "
                   "name TEXT NOT NULL)")  # fmt: skip

    def code(self, name: str, *, create: bool = True) -> int:
        """The code ``name`` is kept as (its dictionary row and code written when
        ``create``; else 0 when it has none)."""
        if _HEX_ID.fullmatch(name):
            key = source_number(name)
            held = self._held(key)
            if held is not None:
                raise SemanticError(f"sources {held!r} and {name!r} share a 64-bit key")
            return self.codes.code(key, create=create)
        key = self.hashed(name)
        held = self._held(key)
        if held is None and create:
            self.db.execute(f"INSERT INTO {self.table} VALUES (?, ?)", (key, name))
        elif held is not None and held != name:
            raise SemanticError(f"sources {held!r} and {name!r} share a 64-bit hash")
        return self.codes.code(key, create=create)

    def forget(self, name: str) -> None:
        """Drop ``name``'s dictionary row (its rows are gone)."""
        if not _HEX_ID.fullmatch(name):
            self.db.execute(f"DELETE FROM {self.table} WHERE id = ? AND name = ?",
                            (self.hashed(name), name))  # fmt: skip

    def joined(self, column: str, alias: str) -> str:
        """The joins that spell the code in ``column``: ``{alias}k.key`` and
        ``{alias}.name`` (NULL for a document id) are then what :meth:`spelled` takes."""
        return (f"JOIN {CODES} {alias}k ON {alias}k.id = {column} "
                f"LEFT JOIN {self.table} {alias} ON {alias}.id = {alias}k.key")

    @staticmethod
    def spelled(key: int, name: str | None) -> str:
        """A source's name from the columns of :meth:`joined`: its dictionary name, or the
        document id its key is."""
        return name if name is not None else f"{key & 0xFFFFFFFFFFFFFFFF:016x}"

    def _held(self, key: int) -> str | None:
        row = self.db.execute(f"SELECT name FROM {self.table} WHERE id = ?", (key,)).fetchone()
        return None if row is None else str(row[0])


class SourceRows:
    """What each source wrote to ``table``, found by the source's code when it is withdrawn:
    each row's ``width`` integers (its key but the source) packed in blobs of
    ``<table>_by(source, part, rows)``, a few bytes a row where an index by source would
    hold every row's key again. A blob holds at most :data:`PART_BYTES` (a row more starts
    the source's next part), so a source of many rows (a long document's claims) costs each
    row it adds the same, not a rewrite of all it wrote before. Written in the transaction
    that writes the rows (the store's one writer), so it lists exactly the rows added."""

    def __init__(self, db: Connection, table: str, width: int) -> None:
        if not table.isidentifier():
            raise ValueError(f"{table!r} is not a plain SQL name")
        self.db, self.of, self.table, self.width = db, table, f"{table}_by", width

    def made(self, columns: str | None) -> bool:
        """Make the table (the caller's transaction open); in a store of before, from the
        ``columns`` (comma-separated, ``width`` of them) of the rows held (None: no rows of
        before to list). Whether it was made now (the caller then drops the index by source
        it replaces)."""
        # (imported here: the stores package imports this module)
        from hirmem.semantic.stores.db import has_table

        if has_table(self.db, self.table):
            return False
        self.db.execute(f"CREATE TABLE {self.table} (source INTEGER NOT NULL, "
                        "part INTEGER NOT NULL, rows BLOB NOT NULL, "
                        "PRIMARY KEY (source, part)) WITHOUT ROWID")  # fmt: skip
        held: dict[int, list[bytes]] = {}
        listed: Iterable[Sequence[int]] = [] if columns is None else self.db.execute(
            f"SELECT source, {columns} FROM {self.of} ORDER BY source")  # fmt: skip
        for src, *row in listed:
            parts = held.setdefault(int(src), [b""])
            blob = pack_ints(int(v) for v in row)
            if len(parts[-1]) + len(blob) > PART_BYTES:
                parts.append(b"")
            parts[-1] += blob
        self.db.executemany(f"INSERT INTO {self.table} VALUES (?, ?, ?)",
                            [(src, i, blob) for src, parts in held.items()
                             for i, blob in enumerate(parts)])  # fmt: skip
        return True

    def add(self, source: int, row: Sequence[int], *, once: bool = False) -> bool:
        """Source ``source`` (its code) wrote a row of these integers; whether it was listed.
        ``once``: not when the source's last part lists it already (a row said again at
        once; one listed in an earlier part is listed again: the caller counts what is
        listed, so the count and the list agree either way)."""
        if len(row) != self.width:
            raise ValueError(f"{self.table}: a row of {len(row)} integers, not {self.width}")
        blob = pack_ints(row)
        last = self.db.execute(f"SELECT part, rows FROM {self.table} WHERE source = ? "
                               "ORDER BY part DESC LIMIT 1", (source,)).fetchone()  # fmt: skip
        if once and last is not None:
            flat, want = unpack_ints(bytes(last[1])), list(row)
            if any(flat[i : i + self.width] == want for i in range(0, len(flat), self.width)):
                return False
        if last is None:
            self.db.execute(f"INSERT INTO {self.table} VALUES (?, 0, ?)", (source, blob))
        elif len(last[1]) + len(blob) <= PART_BYTES:
            self.db.execute(f"UPDATE {self.table} SET rows = ? WHERE source = ? AND part = ?",
                            (bytes(last[1]) + blob, source, last[0]))  # fmt: skip
        else:
            self.db.execute(f"INSERT INTO {self.table} VALUES (?, ?, ?)",
                            (source, int(last[0]) + 1, blob))  # fmt: skip
        return True

    def rows(self, source: int) -> list[tuple[int, ...]]:
        """The rows ``source`` wrote (its list kept)."""
        parts = self.db.execute(f"SELECT rows FROM {self.table} WHERE source = ? "
                                "ORDER BY part", (source,)).fetchall()  # fmt: skip
        flat = [v for (blob,) in parts for v in unpack_ints(bytes(blob))]
        return [tuple(flat[i : i + self.width]) for i in range(0, len(flat), self.width)]

    def take(self, source: int) -> list[tuple[int, ...]]:
        """The rows ``source`` wrote, its list forgotten (the caller deletes them)."""
        held = self.rows(source)
        if held:
            self.db.execute(f"DELETE FROM {self.table} WHERE source = ?", (source,))
        return held


# a SourceRows blob at most (about 110 rows of four small integers): with its key, under the
# 1,002 B SQLite keeps in a B-tree cell before spilling the rest to an overflow page
PART_BYTES = 900


def pack_ints(values: Iterable[int]) -> bytes:
    """Non-negative integers as a blob of LEB128 varints (a small one in one byte)."""
    out = bytearray()
    for v in values:
        if v < 0:
            raise ValueError(f"{v} is negative")
        while True:
            low, v = v & 0x7F, v >> 7
            out.append(low | (0x80 if v else 0))
            if not v:
                break
    return bytes(out)


def unpack_ints(blob: bytes) -> list[int]:
    """The integers of :func:`pack_ints`; a blob cut inside one is refused."""
    out, v, shift = [], 0, 0
    for b in blob:
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            out.append(v)
            v, shift = 0, 0
    if shift:
        raise ValueError("a packed integer list ends inside an integer")
    return out


def _signed(h: int) -> int:
    return h - (1 << 64) if h >= 1 << 63 else h
