"""SQLite drivers of all four stores (one file may hold all of them).

Each store opens its own connection in WAL mode. Deletes are real ``DELETE``s, so an erased
record leaves the file's live pages (``VACUUM`` reclaims the free ones).
The vector driver keeps each vector packed (:mod:`.packed`: sparse when that is smaller, else
float32, both exact) and answers ``near`` from a matrix of them loaded on the first query
after a write (sparse rows cost their non-zero entries); the metadata filter is an indexed
SQL lookup.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from hirmem.protocol.identity import fold, triple_id
from hirmem.semantic.errors import SemanticError
from hirmem.semantic.stores import filters
from hirmem.semantic.stores.base import Match, Vec, as_unit, check_terms, top_k
from hirmem.semantic.stores.db import Where, open_db
from hirmem.semantic.stores.packed import Rows, dim_of, pack
from hirmem.semantic.values import Chunk, Doc
from hirmem.sql import Connection

__all__ = ["SQLiteDocs", "SQLiteGraph", "SQLiteTriples", "SQLiteVectors", "connect"]


def connect(path: Where, store: str = "stores") -> Connection:
    try:
        db = open_db(path, store, timeout=30)
        if str(path) != ":memory:":
            db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.DatabaseError as exc:
        raise SemanticError(f"{path}: cannot open as SQLite: {exc}") from None
    return db


def _json(value: Mapping[str, Any], *, sort: bool = True) -> str:
    """Metadata as a row holds it: with no spaces (a row per vector, node and document, so
    two spaces per field add up), keys sorted unless the caller's order is kept."""
    return json.dumps(value, sort_keys=sort, separators=(",", ":"))


class _SQLite:
    SCHEMA = ""

    def __init__(self, path: Where = ":memory:") -> None:
        self.path = str(path)
        self._db = connect(path, type(self).__name__.lower())
        self._lock = threading.RLock()
        self._db.executescript(self.SCHEMA)

    def close(self) -> None:
        self._db.close()


class SQLiteTriples(_SQLite):
    SCHEMA = """
    CREATE TABLE IF NOT EXISTS triples (
        id TEXT PRIMARY KEY, s TEXT NOT NULL, p TEXT NOT NULL, o TEXT NOT NULL,
        fs TEXT NOT NULL, fp TEXT NOT NULL, fo TEXT NOT NULL) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS triples_sp ON triples(fs, fp);
    CREATE INDEX IF NOT EXISTS triples_po ON triples(fp, fo);
    CREATE INDEX IF NOT EXISTS triples_o ON triples(fo);
    """

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM triples").fetchone()[0])

    @staticmethod
    def _row(s: str, p: str, o: str) -> tuple[str, ...]:
        fs, fp, fo = fold(s), fold(p), fold(o)
        return (triple_id(fs, fp, fo), s, p, o, fs, fp, fo)

    def assert_triple(self, s: str, p: str, o: str) -> str:
        check_terms(s, p, o)
        row = self._row(s, p, o)
        with self._lock:
            self._db.execute("INSERT OR IGNORE INTO triples VALUES (?,?,?,?,?,?,?)", row)
        return row[0]

    def assert_many(self, triples: Iterable[tuple[str, str, str]]) -> int:
        batch = list(triples)
        for s, p, o in batch:
            check_terms(s, p, o)
        rows = [self._row(s, p, o) for s, p, o in batch]
        with self._lock:
            self._db.execute("BEGIN")
            try:
                cur = self._db.executemany(
                    "INSERT OR IGNORE INTO triples VALUES (?,?,?,?,?,?,?)", rows
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return cur.rowcount

    def match(
        self, s: str | None = None, p: str | None = None, o: str | None = None
    ) -> list[tuple[str, str, str]]:
        check_terms(s, p, o)
        where, args = [], []
        for col, term in (("fs", s), ("fp", p), ("fo", o)):
            if term is not None:
                where.append(f"{col} = ?")
                args.append(fold(term))
        sql = "SELECT s, p, o FROM triples"
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self._lock:
            return [(a, b, c) for a, b, c in self._db.execute(sql, args).fetchall()]

    def delete(self, s: str, p: str, o: str) -> bool:
        with self._lock:
            cur = self._db.execute("DELETE FROM triples WHERE id = ?", (triple_id(s, p, o),))
        return cur.rowcount > 0


def _terms(row: int, meta: Mapping[str, Any]) -> list[tuple[str, str, int]]:
    return [(k, filters.term_json(t), row) for k, t in filters.meta_terms(meta)]


ROW_SETS = 256  # filters (and single conditions) whose rows are kept until the next write


class SQLiteVectors(_SQLite):
    """``vector_meta`` is the filter's index: one row per metadata term, as :mod:`.filters`
    defines terms (``value`` is the term as JSON, ``["n", 1]``), naming its vector by the
    vector row's integer ``rowid`` (not its text id: the index would repeat that id once per
    term). It has no second index: a vector's terms are found again from its ``meta`` to
    delete them. It is derived from ``vectors.meta`` and rebuilt from it when a file written
    by an earlier version holds bare values there (``1``, ``"s1"``, which compared ``1`` and
    ``1.0`` as different) or text ids."""

    SCHEMA = """
    CREATE TABLE IF NOT EXISTS vectors (id TEXT PRIMARY KEY, vec BLOB NOT NULL, meta TEXT NOT NULL);
    CREATE TABLE IF NOT EXISTS vector_meta (id INTEGER NOT NULL, key TEXT NOT NULL,
        value TEXT NOT NULL, PRIMARY KEY (key, value, id)) WITHOUT ROWID;
    DROP INDEX IF EXISTS vector_meta_id;
    """

    def __init__(self, path: Where = ":memory:") -> None:
        super().__init__(path)
        # ids in rowid order, their positions by rowid, and the matrix of their vectors
        self._cache: tuple[list[str], dict[int, int], Rows] | None = None
        self._rows: dict[tuple[filters.Cond, ...], tuple[list[str], npt.NDArray[np.intp]]] = {}
        # rowids per single condition, until the next write: a fence condition that admits
        # most rows (``container in [...]``) is read once, not once per subject it is
        # combined with
        self._selected: dict[filters.Cond, frozenset[int]] = {}
        self.dim: int | None = None
        row = self._db.execute("SELECT vec FROM vectors LIMIT 1").fetchone()
        if row is not None:
            self.dim = dim_of(row[0])
            held = self._db.execute("SELECT value, typeof(id) FROM vector_meta LIMIT 1").fetchone()
            if held is not None and (not held[0].startswith("[") or held[1] != "integer"):
                self._reindex()

    def _reindex(self) -> None:
        """Rebuild the filter index from the metadata."""
        with self._lock:
            self._db.execute("BEGIN")
            rows = self._db.execute("SELECT rowid, meta FROM vectors").fetchall()
            self._db.execute("DELETE FROM vector_meta")
            self._db.executemany("INSERT OR IGNORE INTO vector_meta VALUES (?,?,?)",
                                 [(r, k, v) for row, meta in rows
                                  for k, v, r in _terms(row, json.loads(meta))])
            self._db.execute("COMMIT")  # fmt: skip

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM vectors").fetchone()[0])

    def put(self, id: str, vec: Vec, meta: Mapping[str, Any]) -> None:
        self.put_many([(id, vec, meta)])

    def put_many(self, items: Iterable[tuple[str, Vec, Mapping[str, Any]]]) -> None:
        rows: list[tuple[str, bytes, str, Mapping[str, Any]]] = []
        for id, vec, meta in items:
            v = as_unit(vec, self.dim)
            self.dim = int(v.shape[0])
            rows.append((id, pack(v), _json(dict(meta)), meta))
        with self._lock:
            self._db.execute("BEGIN")
            try:
                for id, blob, text, meta in rows:
                    self._unterm(id)
                    # an upsert keeps the row's rowid, which the filter index names
                    rowid = self._db.execute(
                        "INSERT INTO vectors VALUES (?,?,?) ON CONFLICT(id) DO UPDATE SET "
                        "vec = excluded.vec, meta = excluded.meta RETURNING rowid",
                        (id, blob, text)).fetchone()[0]  # fmt: skip
                    self._db.executemany("INSERT OR IGNORE INTO vector_meta VALUES (?,?,?)",
                                         [(r, k, v) for k, v, r in _terms(rowid, meta)])
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._cache = None
            self._rows.clear()
            self._selected.clear()

    def _unterm(self, id: str) -> None:
        """Take the filter terms of vector ``id`` (if held) out of the index."""
        held = self._db.execute("SELECT rowid, meta FROM vectors WHERE id = ?", (id,)).fetchone()
        if held is not None:
            self._db.executemany("DELETE FROM vector_meta WHERE key = ? AND value = ? AND id = ?",
                                 _terms(held[0], json.loads(held[1])))  # fmt: skip

    def delete(self, id: str) -> bool:
        with self._lock:
            self._unterm(id)
            cur = self._db.execute("DELETE FROM vectors WHERE id = ?", (id,))
            self._cache = None
            self._rows.clear()
            self._selected.clear()
        return cur.rowcount > 0

    def _loaded(self) -> tuple[list[str], dict[int, int], Rows]:
        if self._cache is None:
            rows = self._db.execute("SELECT rowid, id, vec FROM vectors ORDER BY rowid").fetchall()
            ids = [r[1] for r in rows]
            mat = Rows([r[2] for r in rows], self.dim or 0)
            self._cache = (ids, {r[0]: n for n, r in enumerate(rows)}, mat)
        return self._cache

    def _selected_by(self, cond: filters.Cond) -> frozenset[int]:
        held = self._selected.get(cond)
        if held is None:
            if len(self._selected) >= ROW_SETS:
                self._selected.clear()
            held = self._selected[cond] = frozenset(self._select(cond))
        return held

    def _select(self, cond: filters.Cond) -> set[int]:
        """Rowids whose metadata satisfies one condition: equality and ``in`` by the index,
        a range by testing each distinct term of the key (the rule of :mod:`.filters`)."""
        if cond.equal is not None:
            wanted = [filters.term_json(t) for t in cond.equal]
            out: set[int] = set()
            for at in range(0, len(wanted), 500):  # bounded statement size
                part = wanted[at : at + 500]
                sql = ("SELECT id FROM vector_meta WHERE key = ? AND value IN "
                       f"({','.join('?' * len(part))})")  # fmt: skip
                out.update(r[0] for r in self._db.execute(sql, [cond.key, *part]))
            return out
        terms = self._db.execute("SELECT DISTINCT value FROM vector_meta WHERE key = ?",
                                 (cond.key,)).fetchall()  # fmt: skip
        admitted = [t for (t,) in terms if cond.admits(filters.term_from_json(t))]
        return self._select(filters.Cond(cond.key, equal=frozenset(
            filters.term_from_json(t) for t in admitted))) if admitted else set()  # fmt: skip

    def near(self, vec: Vec, k: int, filter: Mapping[str, Any] | None = None) -> list[Match]:
        conds = filters.parse(filter)
        with self._lock:
            if self.dim is None:
                return []
            q = as_unit(vec, self.dim)
            ids, pos, mat = self._loaded()
            if conds:
                held = self._rows.get(conds)
                if held is None:
                    # smallest first: each intersection then walks the smaller set
                    sets = sorted((self._selected_by(c) for c in conds), key=len)
                    found = set(sets[0]).intersection(*sets[1:])
                    at = sorted(pos[r] for r in found)
                    rows = np.asarray(at, dtype=np.intp)
                    if len(self._rows) >= ROW_SETS:
                        self._rows.clear()
                    held = self._rows[conds] = ([ids[i] for i in at], rows)
                hit, rows = held
                best = top_k(hit, mat.dot(q, rows), k)
            else:
                best = top_k(ids, mat.dot(q), k)
            out = []
            for i, score in best:
                meta = self._db.execute("SELECT meta FROM vectors WHERE id = ?", (i,)).fetchone()
                out.append(Match(i, score, json.loads(meta[0])))
            return out


class SQLiteGraph(_SQLite):
    SCHEMA = """
    CREATE TABLE IF NOT EXISTS nodes (id TEXT PRIMARY KEY, props TEXT NOT NULL);
    CREATE TABLE IF NOT EXISTS edges (src TEXT NOT NULL, dst TEXT NOT NULL, label TEXT NOT NULL,
        seq INTEGER PRIMARY KEY AUTOINCREMENT, UNIQUE (src, dst, label));
    CREATE INDEX IF NOT EXISTS edges_dst ON edges(dst);
    """

    def node(self, id: str, props: Mapping[str, Any]) -> None:
        with self._lock:
            old = self.props(id) or {}
            old.update(props)
            self._db.execute("INSERT OR REPLACE INTO nodes VALUES (?, ?)",
                             (id, _json(old)))  # fmt: skip

    def edge(self, src: str, dst: str, label: str) -> None:
        with self._lock:
            for n in (src, dst):
                self._db.execute("INSERT OR IGNORE INTO nodes VALUES (?, '{}')", (n,))
            self._db.execute("INSERT OR IGNORE INTO edges (src, dst, label) VALUES (?, ?, ?)",
                             (src, dst, label))  # fmt: skip

    def out(self, id: str, label: str | None = None) -> list[str]:
        sql = "SELECT dst FROM edges WHERE src = ?"
        args: tuple[str, ...] = (id,)
        if label is not None:
            sql += " AND label = ?"
            args = (id, label)
        sql += " GROUP BY dst ORDER BY min(seq)"  # each neighbour once, in first-linked order
        with self._lock:
            return [r[0] for r in self._db.execute(sql, args).fetchall()]

    def props(self, id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT props FROM nodes WHERE id = ?", (id,)).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def delete(self, id: str) -> bool:
        with self._lock:
            self._db.execute("DELETE FROM edges WHERE src = ? OR dst = ?", (id, id))
            return self._db.execute("DELETE FROM nodes WHERE id = ?", (id,)).rowcount > 0


class SQLiteDocs(_SQLite):
    SCHEMA = """
    CREATE TABLE IF NOT EXISTS docs (id TEXT PRIMARY KEY, source TEXT NOT NULL,
        text TEXT NOT NULL, meta TEXT NOT NULL);
    CREATE TABLE IF NOT EXISTS chunks (doc_id TEXT NOT NULL, idx INTEGER NOT NULL,
        text TEXT NOT NULL, start INTEGER NOT NULL, end_ INTEGER NOT NULL,
        PRIMARY KEY (doc_id, idx)) WITHOUT ROWID;
    """

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM docs").fetchone()[0])

    def put(self, doc: Doc, chunks: Sequence[Chunk]) -> None:
        with self._lock:
            self._db.execute("BEGIN")
            try:
                row = (doc.id, doc.source, doc.text, _json(doc.meta, sort=False))
                self._db.execute("INSERT OR REPLACE INTO docs VALUES (?, ?, ?, ?)", row)
                self._db.execute("DELETE FROM chunks WHERE doc_id = ?", (doc.id,))
                self._db.executemany(
                    "INSERT INTO chunks VALUES (?, ?, ?, ?, ?)",
                    [(c.doc_id, c.index, c.text, c.start, c.end) for c in chunks],
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def get(self, doc_id: str) -> Doc | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM docs WHERE id = ?", (doc_id,)).fetchone()
        return None if row is None else Doc(row[0], row[1], row[2], json.loads(row[3]))

    def chunk(self, chunk_id: str) -> Chunk | None:
        doc, _, index = chunk_id.rpartition("#")
        if not index.isdigit():
            return None
        with self._lock:
            row = self._db.execute("SELECT * FROM chunks WHERE doc_id = ? AND idx = ?",
                                   (doc, int(index))).fetchone()  # fmt: skip
        return None if row is None else Chunk(*row)

    def chunks(self, doc_id: str) -> list[Chunk]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM chunks WHERE doc_id = ? ORDER BY idx",
                                    (doc_id,)).fetchall()  # fmt: skip
        return [Chunk(*r) for r in rows]

    def delete(self, doc_id: str) -> bool:
        with self._lock:
            self._db.execute("DELETE FROM chunks WHERE doc_id = ?", (doc_id,))
            return self._db.execute("DELETE FROM docs WHERE id = ?", (doc_id,)).rowcount > 0
