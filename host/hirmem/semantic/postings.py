"""Posting lists: for each key (a name's or a term's integer), the sorted row ids under it,
packed. The one implementation the store's sets of rows by an integer use: the mentions
of passages and of tier 1 (the memories' and passages' modules), the vector stores'
filter terms (:mod:`hirmem.semantic.stores.sqlite`).

A mention was a row (name, row id[, strong]) of a B-tree, about ten bytes each; here a
key's row ids are held in parts of ``<table>(key, last, ids)``: ``ids`` the LEB128
varints (:func:`~hirmem.semantic.dictionary.pack_ints`) of the first id and then each
gap to the one before, shifted left by one to carry a flag bit when the list is
``flagged`` (a passage's mention is strong or weak); ``last`` the part's largest id. A
part holds at most :data:`PART_BYTES` (kept under what SQLite keeps in a B-tree cell
before it spills to an overflow page). Most writes add ids larger than every one held:
such an id is appended to the key's last part without decoding it (its gap from
``last``); an id below ``last`` and a removal rewrite the one part that holds it. Reading
decodes the parts of a few keys at once with numpy (:func:`varints`), no loop per id.

Written inside the caller's write transaction (the store's one writer: on SQLite it
says ``BEGIN IMMEDIATE``, on PostgreSQL its advisory lock), so the read of a part and its
rewrite see no other writer between them. Works on SQLite and on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import numpy as np
import numpy.typing as npt

from hirmem.semantic.dictionary import pack_ints
from hirmem.sql import Connection

__all__ = ["PART_BYTES", "Postings", "varints"]

PART_BYTES = 900  # a part's blob at most: with its key under SQLite's 1,002 B in-cell limit
_MAX_ID = 1 << 55  # ids above this would not fit the decoder's 8 varint bytes (flag bit too)

I64 = npt.NDArray[np.int64]


def varints(blob: bytes) -> I64:
    """The integers of a :func:`~hirmem.semantic.dictionary.pack_ints` blob (each under
    2**56), decoded with numpy; a blob cut inside an integer is refused."""
    buf = np.frombuffer(blob, dtype=np.uint8)
    if not buf.size:
        return np.zeros(0, dtype=np.int64)
    ends = np.flatnonzero(buf < 0x80)
    if not ends.size or ends[-1] != buf.size - 1:
        raise ValueError("a packed integer list ends inside an integer")
    starts = np.empty_like(ends)
    starts[0], starts[1:] = 0, ends[:-1] + 1
    if int((ends - starts).max()) > 7:
        raise ValueError("a packed integer of more than 8 bytes")
    pos = np.arange(buf.size, dtype=np.int64) - np.repeat(starts, ends - starts + 1)
    low = (buf & 0x7F).astype(np.int64) << (7 * pos)
    out: I64 = np.add.reduceat(low, starts)
    return out


def _varint_bytes(values: I64) -> tuple[bytes, I64]:
    """``values`` (each under 2**56) as :func:`~hirmem.semantic.dictionary.pack_ints`
    packs them, encoded with numpy; and the offset each one's bytes end at."""
    if not values.size:
        return b"", np.zeros(0, dtype=np.int64)
    shifts = 7 * np.arange(8, dtype=np.int64)
    groups = (values[:, None] >> shifts) & 0x7F
    sizes = _bytes_needed(values)
    used = np.arange(8)[None, :] < sizes[:, None]
    more = np.arange(8)[None, :] < (sizes - 1)[:, None]
    out = (groups | (more * 0x80)).astype(np.uint8)[used]
    return out.tobytes(), np.cumsum(sizes)


def _bytes_needed(values: I64) -> I64:
    """How many 7-bit groups each of ``values`` needs (one for 0)."""
    n = np.ones(values.shape, dtype=np.int64)
    for k in range(1, 8):
        n += values >= (1 << (7 * k))
    return n


def _check(table: str, rid: int) -> None:
    if not 0 <= rid < _MAX_ID:
        raise ValueError(f"{table}: row id {rid} out of range (0 to 2**55)")


class Postings:
    """The posting lists kept in ``table`` on ``db`` (the caller makes it with
    :meth:`create`); ``flagged``: each id carries one bit (strong or weak)."""

    def __init__(self, db: Connection, table: str, *, flagged: bool) -> None:
        if not table.isidentifier():
            raise ValueError(f"{table!r} is not a plain SQL name")
        self.db, self.table, self.shift = db, table, int(flagged)

    def create(self) -> None:
        self.db.execute(f"CREATE TABLE IF NOT EXISTS {self.table} (key INTEGER NOT NULL, "
                        "last INTEGER NOT NULL, ids BLOB NOT NULL, "
                        "PRIMARY KEY (key, last)) WITHOUT ROWID")  # fmt: skip

    # ---- writing ----------------------------------------------------------------------------

    def add(self, rows: Iterable[tuple[int, int, int]]) -> None:
        """Each (key, id, flag): ``id`` added to ``key``'s list (an id held already keeps
        its flag, as ``INSERT OR IGNORE`` kept a row)."""
        by_key: dict[int, dict[int, int]] = {}
        for key, rid, flag in rows:
            _check(self.table, rid)
            by_key.setdefault(key, {}).setdefault(rid, flag & self.shift)
        for key, ids in by_key.items():
            for rid in sorted(ids):
                self._add(key, rid, ids[rid])

    def _add(self, key: int, rid: int, flag: int) -> None:
        row = self.db.execute(f"SELECT last, ids FROM {self.table} WHERE key = ? AND last >= ? "
                              "ORDER BY last LIMIT 1", (key, rid)).fetchone()  # fmt: skip
        if row is not None:  # below a held id: the part that holds its place, rewritten
            last, blob = int(row[0]), bytes(row[1])
            ids, flags = self._decode(blob)
            at = int(np.searchsorted(ids, rid))
            if ids[at] == rid:
                return
            ids, flags = np.insert(ids, at, rid), np.insert(flags, at, flag)
            self.db.execute(f"DELETE FROM {self.table} WHERE key = ? AND last = ?", (key, last))
            self._put(key, ids, flags)
            return
        tail = self.db.execute(f"SELECT last, ids FROM {self.table} WHERE key = ? "
                               "ORDER BY last DESC LIMIT 1", (key,)).fetchone()  # fmt: skip
        step = pack_ints([((rid - int(tail[0])) << self.shift | flag) if tail is not None
                          else (rid << self.shift | flag)])  # fmt: skip
        if tail is not None and len(tail[1]) + len(step) <= PART_BYTES:
            self.db.execute(f"UPDATE {self.table} SET last = ?, ids = ? WHERE key = ? AND "
                            "last = ?", (rid, bytes(tail[1]) + step, key, int(tail[0])))
        else:  # a new part: its first id whole
            self.db.execute(f"INSERT INTO {self.table} VALUES (?, ?, ?)",
                            (key, rid, pack_ints([rid << self.shift | flag])))  # fmt: skip

    def remove(self, rows: Iterable[tuple[int, int]]) -> None:
        """Each (key, id): ``id`` taken out of ``key``'s list (one not held: nothing)."""
        for key, rid in sorted(set(rows)):
            row = self.db.execute(f"SELECT last, ids FROM {self.table} WHERE key = ? AND "
                                  "last >= ? ORDER BY last LIMIT 1", (key, rid)).fetchone()
            if row is None:
                continue
            ids, flags = self._decode(bytes(row[1]))
            at = int(np.searchsorted(ids, rid))
            if at == len(ids) or ids[at] != rid:
                continue
            self.db.execute(f"DELETE FROM {self.table} WHERE key = ? AND last = ?",
                            (key, int(row[0])))  # fmt: skip
            if len(ids) > 1:
                self._put(key, np.delete(ids, at), np.delete(flags, at))

    def _put(self, key: int, ids: I64, flags: I64) -> None:
        """Write sorted ``ids`` of ``key`` as parts of at most :data:`PART_BYTES` (a part
        rewritten after an insertion may split in two)."""
        gaps, ends = _varint_bytes(np.diff(ids, prepend=0) << self.shift | flags)
        start = 0
        while start < len(ids):
            head = pack_ints([int(ids[start]) << self.shift | int(flags[start])])
            # the gaps after the first that fit beside it: ends[i] is where gap i ends
            room = int(ends[start]) + PART_BYTES - len(head)
            end = max(start + 1, int(np.searchsorted(ends, room, side="right")))
            blob = head + gaps[int(ends[start]) : int(ends[end - 1])]
            self.db.execute(f"INSERT INTO {self.table} VALUES (?, ?, ?)",
                            (key, int(ids[end - 1]), blob))  # fmt: skip
            start = end

    def fill(self, rows: Iterable[tuple[int, int, int]]) -> None:
        """Write the lists of (key, id, flag) rows into an empty table (a conversion)."""
        by_key: dict[int, dict[int, int]] = {}
        for key, rid, flag in rows:
            _check(self.table, rid)
            by_key.setdefault(key, {}).setdefault(rid, flag & self.shift)
        for key, held in by_key.items():
            ids = np.asarray(sorted(held), dtype=np.int64)
            self._put(key, ids, np.asarray([held[int(i)] for i in ids], dtype=np.int64))

    # ---- reading ----------------------------------------------------------------------------

    def _decode(self, blob: bytes) -> tuple[I64, I64]:
        v = varints(blob)
        return np.cumsum(v >> self.shift), v & self.shift

    def ids(self, keys: Collection[int]) -> I64:
        """The ids listed under any of ``keys``, sorted, each once (keys read 500 a
        statement: the statement's size is bounded however many are asked)."""
        ordered = sorted(set(keys))
        found = [self._decoded(f"WHERE key IN ({','.join('?' * len(some))})", some)[1]
                 for some in (ordered[at : at + 500] for at in range(0, len(ordered), 500))]
        return np.unique(np.concatenate(found)) if found else np.zeros(0, dtype=np.int64)

    def held(self, key: int) -> bool:
        """Whether ``key``'s list holds an id."""
        return self.db.execute(f"SELECT 1 FROM {self.table} WHERE key = ? LIMIT 1",
                               (key,)).fetchone() is not None  # fmt: skip

    def clear(self) -> None:
        """Every list emptied (a rebuild; inside the caller's write transaction)."""
        self.db.execute(f"DELETE FROM {self.table}")

    def everything(self) -> tuple[I64, I64, I64]:
        """(keys, ids, flags) of every posting, by key then id."""
        return self._decoded("", [])

    def _decoded(self, where: str, args: list[int]) -> tuple[I64, I64, I64]:
        rows = self.db.execute(f"SELECT key, ids FROM {self.table} {where} ORDER BY key, last",
                               args).fetchall()  # fmt: skip
        if not rows:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        blobs = [bytes(b) for _, b in rows]
        v = varints(b"".join(blobs))
        # each part's values: counted by its varint ends; its gaps summed from its first id
        lens = np.fromiter((len(b) for b in blobs), dtype=np.int64, count=len(blobs))
        ends = np.cumsum(np.frombuffer(b"".join(blobs), dtype=np.uint8) < 0x80)
        counts = np.diff(ends[np.cumsum(lens) - 1], prepend=0)
        firsts = np.cumsum(counts) - counts
        gaps = v >> self.shift
        run = np.cumsum(gaps)
        ids = run - np.repeat(run[firsts] - gaps[firsts], counts)
        keys = np.repeat(np.fromiter((int(k) for k, _ in rows), dtype=np.int64,
                                     count=len(rows)), counts)  # fmt: skip
        return keys, ids, v & self.shift
