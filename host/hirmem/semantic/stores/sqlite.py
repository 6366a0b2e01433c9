"""SQLite drivers of all four stores (one file may hold all of them).

Each store opens its own connection in WAL mode. Deletes are real ``DELETE``s, so an erased
record leaves the file's live pages (``VACUUM`` reclaims the free ones).
The vector driver keeps each vector packed (:mod:`.packed`: sparse when that is smaller, by
palette when smaller still, else float32, all exact, or int8 steps when the caller asks,
:meth:`SQLiteVectors.quantize`) and
answers ``near`` from a matrix of them loaded on the first query after a write (sparse rows
cost their non-zero entries); the metadata filter is an indexed SQL lookup. The graph, the
triples and the filter index are dictionary encoded (integers in their rows, each text
once); a document's chunks are byte ranges of its text.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from hirmem.protocol.identity import fold, triple_id
from hirmem.semantic.dictionary import CODES, Codes, Words, pack_ints, unpack_ints
from hirmem.semantic.errors import SemanticError
from hirmem.semantic.postings import Postings
from hirmem.semantic.stores import filters
from hirmem.semantic.stores.base import Match, Vec, as_unit, check_terms, top_k
from hirmem.semantic.stores.db import Where, has_table, open_db
from hirmem.semantic.stores.packed import Rows, dim_of, pack
from hirmem.semantic.values import Chunk, Doc
from hirmem.sql import Connection
from hirmem.sql.pgconn import PgConnection

__all__ = ["SQLiteDocs", "SQLiteGraph", "SQLiteTriples", "SQLiteVectors", "connect", "rowless"]


def connect(path: Where, store: str = "stores") -> Connection:
    try:
        db = open_db(path, store, timeout=30)
        if str(path) != ":memory:":
            db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.DatabaseError as exc:
        raise SemanticError(f"{path}: cannot open as SQLite: {exc}") from None
    return db


def earlier_table(db: Connection, name: str) -> str | None:
    """The ``CREATE TABLE`` statement of table ``name`` if the file holds one (the one place
    the stores read SQLite's catalogue, to find a layout of an earlier version to convert).
    None on PostgreSQL: a server database was only ever made in the current layout."""
    if isinstance(db, PgConnection):
        return None
    row = db.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?",
                     (name,)).fetchone()  # fmt: skip
    return None if row is None else str(row[0])


_CREATE = re.compile(r"^\s*CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?", re.I)


def rowless(db: Connection, table: str, ddl: str) -> None:
    """Create ``table`` by ``ddl`` (a ``WITHOUT ROWID`` table: the primary key is the table,
    not a second copy of its columns beside the rows); a table of that name in the earlier
    rowid layout is rebuilt into it, rows and all (its indexes go with the old table; the
    caller creates them again). Run before the caller's ``CREATE INDEX`` statements."""
    if isinstance(db, PgConnection):  # no earlier layout; the table may be there already
        db.execute(_CREATE.sub("CREATE TABLE IF NOT EXISTS ", ddl, count=1))
        return
    held = earlier_table(db, table)
    if held is None:
        db.execute(ddl)
        return
    if "WITHOUT ROWID" in held.upper():
        return
    own = not db.in_transaction
    if own:
        db.execute("BEGIN")
    try:
        db.execute(f"ALTER TABLE {table} RENAME TO {table}_earlier")
        db.execute(ddl)
        db.execute(f"INSERT OR IGNORE INTO {table} SELECT * FROM {table}_earlier")
        db.execute(f"DROP TABLE {table}_earlier")
        if own:
            db.execute("COMMIT")
    except BaseException:
        if own:
            db.execute("ROLLBACK")
        raise


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


def _h63(text: str) -> int:
    """63 bits of the BLAKE2b digest of ``text``: the integer a term is keyed by."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") >> 1


def _signed(hex_id: str) -> int:
    """A 64-bit id in hex as the signed integer SQLite keeps."""
    v = int(hex_id, 16)
    return v - (1 << 64) if v >= 1 << 63 else v


class SQLiteTriples(_SQLite):
    """Triples dictionary encoded: ``triple_terms`` holds each term as written once (keyed
    by the 63-bit hash of its text), and a triple is a row of integers: its id, its terms
    as written, and the hashes of its folded terms (what ``match`` looks up by, through the
    indexes of the shapes it answers; each answer is checked against the folded terms, so
    a hash collision cannot add a row). A term no triple names any more is deleted with
    its last triple. A file of the earlier layout (``triples`` holding the terms as text,
    folded and not) is converted when opened."""

    SCHEMA = """
    CREATE TABLE IF NOT EXISTS triple_terms (id INTEGER PRIMARY KEY, text TEXT NOT NULL);
    CREATE TABLE IF NOT EXISTS triple_rows (id INTEGER PRIMARY KEY, s INTEGER NOT NULL,
        p INTEGER NOT NULL, o INTEGER NOT NULL, fs INTEGER NOT NULL, fp INTEGER NOT NULL,
        fo INTEGER NOT NULL);
    CREATE INDEX IF NOT EXISTS triple_rows_sp ON triple_rows(fs, fp);
    CREATE INDEX IF NOT EXISTS triple_rows_po ON triple_rows(fp, fo);
    CREATE INDEX IF NOT EXISTS triple_rows_o ON triple_rows(fo);
    """

    def __init__(self, path: Where = ":memory:") -> None:
        super().__init__(path)
        if earlier_table(self._db, "triples") is not None:
            rows = self._db.execute("SELECT s, p, o FROM triples").fetchall()
            self.assert_many(rows, drop_earlier=True)

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM triple_rows").fetchone()[0])

    def _term(self, text: str) -> int:
        """The key of ``text`` in ``triple_terms``, written if new."""
        key = _h63(text)
        if self._db.execute("INSERT OR IGNORE INTO triple_terms VALUES (?, ?)",
                            (key, text)).rowcount == 0:  # fmt: skip
            held = self._db.execute("SELECT text FROM triple_terms WHERE id = ?",
                                    (key,)).fetchone()[0]  # fmt: skip
            if held != text:
                raise SemanticError(f"triple terms {text!r} and {held!r} share a key; this "
                                    "store cannot hold both")  # fmt: skip
        return key

    def _insert(self, s: str, p: str, o: str) -> int:
        fs, fp, fo = fold(s), fold(p), fold(o)
        row = (_signed(triple_id(fs, fp, fo)), self._term(s), self._term(p), self._term(o),
               _h63(fs), _h63(fp), _h63(fo))  # fmt: skip
        return self._db.execute("INSERT OR IGNORE INTO triple_rows VALUES (?,?,?,?,?,?,?)",
                                row).rowcount  # fmt: skip

    def assert_triple(self, s: str, p: str, o: str) -> str:
        check_terms(s, p, o)
        with self._lock:
            self._db.execute("BEGIN")
            try:
                self._insert(s, p, o)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return triple_id(fold(s), fold(p), fold(o))

    def assert_many(self, triples: Iterable[tuple[str, str, str]], *,
                    drop_earlier: bool = False) -> int:  # fmt: skip
        batch = list(triples)
        for s, p, o in batch:
            check_terms(s, p, o)
        with self._lock:
            self._db.execute("BEGIN")
            try:
                n = sum(self._insert(s, p, o) for s, p, o in batch)
                if drop_earlier:
                    self._db.execute("DROP TABLE triples")
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return n

    def match(
        self, s: str | None = None, p: str | None = None, o: str | None = None
    ) -> list[tuple[str, str, str]]:
        check_terms(s, p, o)
        where, args, want = [], [], []
        for col, term in (("fs", s), ("fp", p), ("fo", o)):
            if term is not None:
                where.append(f"r.{col} = ?")
                args.append(_h63(fold(term)))
                want.append(fold(term))
        sql = ("SELECT ts.text, tp.text, tt.text FROM triple_rows r "
               "JOIN triple_terms ts ON ts.id = r.s JOIN triple_terms tp ON tp.id = r.p "
               "JOIN triple_terms tt ON tt.id = r.o")  # fmt: skip
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        bound = [i for i, t in enumerate((s, p, o)) if t is not None]
        return [(a, b, c) for a, b, c in rows
                if [fold((a, b, c)[i]) for i in bound] == want]  # fmt: skip

    def delete(self, s: str, p: str, o: str) -> bool:
        key = _signed(triple_id(s, p, o))
        with self._lock:
            row = self._db.execute("SELECT s, p, o, fs, fp, fo FROM triple_rows WHERE id = ?",
                                   (key,)).fetchone()  # fmt: skip
            if row is None:
                return False
            self._db.execute("DELETE FROM triple_rows WHERE id = ?", (key,))
            terms = self._db.execute("SELECT id, text FROM triple_terms WHERE id IN (?, ?, ?)",
                                     row[:3]).fetchall()  # fmt: skip
            for term, text in terms:
                h = _h63(fold(text))
                if self._db.execute(
                    "SELECT 1 FROM triple_rows WHERE (fs = ? AND s = ?) OR (fp = ? AND p = ?) "
                    "OR (fo = ? AND o = ?) LIMIT 1", (h, term, h, term, h, term)
                ).fetchone() is None:  # fmt: skip
                    self._db.execute("DELETE FROM triple_terms WHERE id = ?", (term,))
        return True


_CHUNK0 = re.compile(r"([0-9a-f]{16})#0")  # the one chunk of a short document


def _vector_key(id: str) -> tuple[int, str | None]:
    """The integer a vector's row is keyed by, and the id text the row must hold: the
    chunk id ``<16 hex digits>#0`` is its document's integer (no text kept); another id
    is keyed by the 63-bit hash of its text, which the row keeps."""
    m = _CHUNK0.fullmatch(id)
    if m is not None:
        return _signed(m.group(1)), None
    return _h63(id), id


def _vector_id(key: int, name: str | None) -> str:
    """The id of a vector's row (the inverse of :func:`_vector_key`)."""
    return name if name is not None else f"{key % (1 << 64):016x}#0"


def _chunk0_keys(prefix: str) -> list[tuple[int, int]]:
    """The ranges of keys (signed, inclusive) of the ids ``<16 hex digits>#0`` that begin
    with ``prefix``."""
    head, tail = prefix[:16], prefix[16:]
    if re.fullmatch(r"[0-9a-f]*", head) is None or tail not in ("", "#", "#0") or (
            tail and len(head) < 16):  # fmt: skip
        return []
    lo, hi = int(head.ljust(16, "0"), 16), int(head.ljust(16, "f"), 16)
    half = 1 << 63
    out = []
    if lo < half:
        out.append((lo, min(hi, half - 1)))
    if hi >= half:
        out.append((max(lo, half) - (1 << 64), hi - (1 << 64)))
    return out


def _unvarints(raw: bytes) -> list[int]:
    """The integers of the vector metadata's codes (:func:`pack_ints`' varints)."""
    try:
        return unpack_ints(raw)
    except ValueError:
        raise SemanticError("vector metadata codes end inside a number") from None


ROW_SETS = 256  # filters (and single conditions) whose rows are kept until the next write
SHAPES = 1024  # metadata shapes (key lists) named by number; others are kept as JSON objects


class SQLiteVectors(_SQLite):
    """The filter's index is dictionary encoded: ``vector_terms`` holds each distinct
    metadata term once (its code, its key, the term as JSON as :mod:`.filters` defines
    terms, ``["n", 1]``), and ``vector_posts`` the vector rows (their ``seq``) holding each
    term, by its code (:class:`~hirmem.semantic.postings.Postings`: a byte or two a
    row). The codes are the database's: a
    write inserts the terms it needs (a term already there is left as it is) and reads
    their codes back inside its own transaction, so two processes writing one store agree
    on them; a query reads the codes of its terms when it runs; no code is kept in memory.
    A code is never reused (``AUTOINCREMENT``; PostgreSQL: an identity). A term no vector
    holds any more is deleted with its last row, by a statement that checks no row names
    its code. Only the keys named by :meth:`index_only` are indexed
    (every key until a caller names them; the choice is kept in ``vector_keys``): a filter on
    another key is answered by reading every row's ``meta``, the same answer, slower. The
    index is derived from the rows' metadata and rebuilt from it when a file of an earlier
    layout (``vector_meta``, a row per term of a vector, holding its code or, earlier, key
    and value text) is opened, or the keys change.

    A row's metadata is the codes of its terms where they give back the very dict
    (:meth:`_coded`: ``codes``, a few varints, and ``meta`` empty; every key indexed, every
    value its term's own value): a chunk's entry, ``{"container": …, "subject": [...]}``,
    is a few bytes, not its JSON. Other metadata is ``meta`` text (:meth:`_meta_text`).
    A code's term is read from ``vector_terms`` when first met and kept. The codes are
    written again when the index is rebuilt; a file or schema of the layout with every
    row's metadata as text (no ``codes`` column) gains the column and is coded when opened.

    A vector's row is keyed by its id as an integer (:func:`_vector_key`): a chunk id
    ``<16 hex digits>#0`` (the one chunk of a short document) is its document's integer,
    and no id text is kept; another id is keyed by the 63-bit hash of its text, which the
    row keeps (``name``, found by prefix through a partial index). The key is the row's
    own number (SQLite's rowid), so no index beside the table maps keys to rows. ``seq``
    numbers the rows in the order they were first written (the filter index names rows by
    it: a small integer, where a key is eight bytes); the next number is kept in
    ``vector_next`` and taken inside the writing transaction, so two writers never give
    out one number. Files or schemas of the earlier layouts (``vectors`` keyed by id
    text; numbered by ``seq`` with a unique index on ``key``) are converted when opened."""

    TABLE = (
        "CREATE TABLE IF NOT EXISTS vectors (key INTEGER PRIMARY KEY, seq INTEGER NOT NULL, "
        "name TEXT, vec BLOB NOT NULL, meta TEXT NOT NULL, codes BLOB)",
        "CREATE INDEX IF NOT EXISTS vectors_name ON vectors(name) WHERE name IS NOT NULL",
    )
    SCHEMA = """
    CREATE TABLE IF NOT EXISTS vector_terms (code INTEGER PRIMARY KEY AUTOINCREMENT,
        key TEXT NOT NULL, value TEXT NOT NULL, UNIQUE (key, value));
    CREATE TABLE IF NOT EXISTS vector_keys (key TEXT PRIMARY KEY);
    CREATE TABLE IF NOT EXISTS vector_shapes (id INTEGER PRIMARY KEY, keys TEXT NOT NULL);
    CREATE TABLE IF NOT EXISTS vector_next (id INTEGER PRIMARY KEY, seq INTEGER NOT NULL);
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
        # a metadata row is its values, named by the shape (the keys, in order) they follow
        self._shapes: dict[int, list[str]] = {}
        self._shape_of: dict[str, int] = {}
        self._term_of: dict[int, Any] = {}  # a term's value by its code (codes never reused)
        self._load_shapes()
        keys = [k for (k,) in self._db.execute("SELECT key FROM vector_keys ORDER BY key")]
        self._indexed: frozenset[str] | None = frozenset(keys) if keys else None
        # the layouts with a row per term of a vector: its code, or key and value text
        earlier = earlier_table(self._db, "vector_meta") is not None
        if earlier:
            self._db.execute("DROP TABLE IF EXISTS vector_meta")
        coded = {str(r[1]) for r in self._db.execute("PRAGMA table_info(vector_terms)")}
        if "code" not in coded:  # the layout keyed by a hash of each term: built again
            self._db.execute("DROP TABLE vector_terms")
            self._db.executescript(self.SCHEMA)
            earlier = True
        self._posts = Postings(self._db, "vector_posts", flagged=False)
        self._posts.create()
        earlier = self._rekey() or earlier
        earlier = self._add_codes() or earlier
        self._key_rows()
        row = self._db.execute("SELECT vec FROM vectors LIMIT 1").fetchone()
        if row is not None:
            self.dim = dim_of(row[0])
            if earlier:
                self._reindex()

    def _rekey(self) -> bool:
        """Create the vector table; one of the earlier layout (keyed by id text) is rebuilt
        into it in one transaction, rows and all. Whether one was (the filter index, which
        names rows by their numbers, is then built again)."""
        columns = ([] if not has_table(self._db, "vectors") else
                   [str(r[1]) for r in self._db.execute("PRAGMA table_info(vectors)")])
        if "id" not in columns:
            for ddl in self.TABLE:
                self._db.execute(ddl)
            return False
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                rows = self._db.execute("SELECT id, vec, meta FROM vectors "
                                        "ORDER BY rowid").fetchall()  # fmt: skip
                self._db.execute("DROP TABLE vectors")
                for ddl in self.TABLE:
                    self._db.execute(ddl)
                for seq, (id, vec, meta) in enumerate(rows, 1):
                    key, name = _vector_key(id)
                    self._db.execute("INSERT INTO vectors (key, seq, name, vec, meta) VALUES "
                                     "(?, ?, ?, ?, ?)", (key, seq, name, vec, meta))  # fmt: skip
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return True

    def _key_rows(self) -> None:
        """Rebuild a vector table of the layout numbered by ``seq`` (its rowid, beside a
        unique index on ``key``) into the one keyed by ``key``, rows and numbers kept."""
        def numbered() -> bool:
            return any(str(r[1]) == "seq" and int(r[5]) for r in
                       self._db.execute("PRAGMA table_info(vectors)"))  # fmt: skip

        if not numbered():
            return
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")  # one process converts it
            try:
                if numbered():
                    self._db.execute("ALTER TABLE vectors RENAME TO vectors_earlier")
                    self._db.execute("DROP INDEX IF EXISTS vectors_name")
                    self._db.execute(self.TABLE[0])
                    self._db.execute("INSERT INTO vectors (key, seq, name, vec, meta, codes) "
                                     "SELECT key, seq, name, vec, meta, codes FROM "
                                     "vectors_earlier")  # fmt: skip
                    self._db.execute("DROP TABLE vectors_earlier")
                    self._db.execute(self.TABLE[1])
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def _next_seq(self) -> int:
        """The number the next new row takes (inside the caller's write transaction)."""
        row = self._db.execute("SELECT seq FROM vector_next WHERE id = 1").fetchone()
        if row is not None:
            return int(row[0])
        held = self._db.execute("SELECT max(seq) FROM vectors").fetchone()[0]
        self._db.execute("INSERT INTO vector_next (id, seq) VALUES (1, ?)", (int(held or 0) + 1,))
        return int(held or 0) + 1

    def _add_codes(self) -> bool:
        """Give a vector table of the layout with every row's metadata as text its
        ``codes`` column; whether it did (the rows are then written again, coded, by
        :meth:`_reindex`)."""
        def held() -> bool:
            return "codes" in {str(r[1]) for r in self._db.execute("PRAGMA table_info(vectors)")}

        if held():
            return False
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")  # one process adds it
            try:
                added = not held()
                if added:
                    blob = "BYTEA" if isinstance(self._db, PgConnection) else "BLOB"
                    self._db.execute(f"ALTER TABLE vectors ADD COLUMN codes {blob}")
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return added

    def _load_shapes(self) -> None:
        rows = self._db.execute("SELECT id, keys FROM vector_shapes").fetchall()
        self._shapes = {int(n): list(json.loads(keys)) for n, keys in rows}
        self._shape_of = {json.dumps(keys): n for n, keys in self._shapes.items()}

    def _shape(self, meta: Mapping[str, Any]) -> int | None:
        """The number of the shape of ``meta`` (its keys, in order, kept once in
        ``vector_shapes``), written if new; None beyond :data:`SHAPES` shapes."""
        keys = json.dumps(list(meta))
        n = self._shape_of.get(keys)
        if n is None:
            if len(self._shapes) >= SHAPES:
                return None
            n = int(self._db.execute("INSERT INTO vector_shapes (keys) VALUES (?)",
                                     (keys,)).lastrowid or 0)  # fmt: skip
            self._shapes[n], self._shape_of[keys] = list(meta), n
        return n

    def _meta_text(self, meta: Mapping[str, Any]) -> str:
        """``meta`` as ``vectors.meta`` holds it when it is not coded (:meth:`_coded`): the
        number of its shape followed by its values as a JSON array, so a row does not
        repeat its key names; beyond :data:`SHAPES` shapes, a JSON object."""
        n = self._shape(meta)
        if n is None:
            return _json(dict(meta), sort=False)
        return f"{n}{json.dumps(list(meta.values()), separators=(',', ':'), ensure_ascii=False)}"

    def _coded(self, meta: Mapping[str, Any], codes: Mapping[tuple[str, str], int]
               ) -> bytes | None:  # fmt: skip
        """``meta`` as the filter index's codes of its terms (``codes``: the codes of
        :meth:`_terms`), or None when it cannot be read back from them as the very dict it
        is (a key not indexed, a value that is no term or not the term's own value: a
        whole float, a nested list; beyond :data:`SHAPES` shapes). Varints: the shape's
        number, then per value a scalar's code times two, or a list's length times two
        plus one followed by its members' codes."""
        if self._indexed is not None and not set(meta) <= self._indexed:
            return None
        out = []
        for key, value in meta.items():
            members = list(value) if isinstance(value, list | tuple) else [value]
            held = []
            for v in members:
                t = filters.term(v)
                if t is None or type(t[1]) is not type(v) or t[1] != v:
                    return None
                held.append(codes[(key, filters.term_json(t))])
            out += [len(held) * 2 + 1, *held] if isinstance(value, list | tuple) else [held[0] * 2]
        shape = self._shape(meta)
        return None if shape is None else pack_ints([shape, *out])

    def _meta_of(self, text: str, codes: bytes | None = None) -> dict[str, Any]:
        """The inverse of :meth:`_meta_text` (a JSON object is read as it is), or of
        :meth:`_coded` when the row holds ``codes``."""
        if codes is not None:
            return self._decoded(bytes(codes))
        if text.startswith("{"):
            return dict(json.loads(text))
        cut = text.index("[")
        return dict(zip(self._keys(int(text[:cut])), json.loads(text[cut:]), strict=True))

    def _keys(self, shape: int) -> list[str]:
        if shape not in self._shapes:  # named by another process writing this store since
            self._load_shapes()  # (a shape is never deleted: a number names one for good)
            if shape not in self._shapes:
                raise SemanticError(f"vector metadata names shape {shape}, which this store "
                                    "does not hold")  # fmt: skip
        return self._shapes[shape]

    def _decoded(self, codes: bytes) -> dict[str, Any]:
        """The metadata :meth:`_coded` wrote as ``codes``; a code's term is read from
        ``vector_terms`` when first met and kept (a code is never reused: it names one
        term for good)."""
        if not codes:
            raise SemanticError("vector metadata codes are empty: they name no shape")
        ints = list(codes) if max(codes) < 0x80 else _unvarints(codes)  # (one byte each)
        try:
            return self._spelled(ints)
        except KeyError:  # a code not met yet: its term read, with the row's others
            missing = sorted({c for n in ints for c in (n, n // 2)} - self._term_of.keys())
            for at in range(0, len(missing), 500):
                part = missing[at : at + 500]
                for code, value in self._db.execute(
                        f"SELECT code, value FROM vector_terms WHERE code IN "
                        f"({','.join('?' * len(part))})", part):  # fmt: skip
                    self._term_of[int(code)] = filters.term_from_json(value)[1]
        try:
            return self._spelled(ints)
        except KeyError as exc:
            raise SemanticError(f"vector metadata names term code {exc}, which this store "
                                "does not hold") from None  # fmt: skip

    def _spelled(self, ints: list[int]) -> dict[str, Any]:
        """:meth:`_decoded` from the codes' integers (KeyError: a code not kept yet)."""
        term = self._term_of
        meta: dict[str, Any] = {}
        at = 1
        for key in self._keys(ints[0]):
            if at >= len(ints):
                raise SemanticError("vector metadata codes end before their shape does")
            head = ints[at]
            if head % 2 == 0:
                meta[key] = term[head // 2]
                at += 1
            else:
                end = at + 1 + head // 2
                meta[key] = [term[c] for c in ints[at + 1 : end]]
                at = end
        if at != len(ints):
            raise SemanticError("vector metadata codes do not follow their shape")
        return meta

    int8 = False  # dense vectors written in int8 steps (:meth:`quantize`), else float32

    def quantize(self, on: bool = True) -> None:
        """Write dense vectors from now on as int8 steps with one scale (a quarter of
        float32, cosine kept to about 1e-2; :mod:`.packed`); sparse ones stay exact. Rows
        already written are read as they are."""
        self.int8 = on

    def index_only(self, keys: Iterable[str]) -> None:
        """Index the metadata keys ``keys`` only (the ones its callers filter on); the
        index is rebuilt when that changes what it holds."""
        wanted = frozenset(keys)
        if wanted == self._indexed:
            return
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("DELETE FROM vector_keys")
            self._db.executemany("INSERT INTO vector_keys VALUES (?)", [(k,) for k in wanted])
            self._db.execute("COMMIT")
            self._indexed = wanted
        self._reindex()

    def _terms(self, meta: Mapping[str, Any]) -> list[tuple[str, str]]:
        """(key, term text) of each indexed term of ``meta``, each once."""
        out = []
        for k, t in filters.meta_terms(meta):
            if self._indexed is None or k in self._indexed:
                out.append((k, filters.term_json(t)))
        return list(dict.fromkeys(out))

    def _code(self, key: str, text: str) -> int | None:
        """The code of term ``text`` of ``key`` as the database holds it now, or None."""
        row = self._db.execute("SELECT code FROM vector_terms WHERE key = ? AND value = ?",
                               (key, text)).fetchone()  # fmt: skip
        return None if row is None else int(row[0])

    def _index_terms(self, meta: Mapping[str, Any]) -> dict[tuple[str, str], int]:
        """The codes of the indexed terms of ``meta``, each written if new (inside the
        caller's transaction, so they are the database's)."""
        out = {}
        for key, text in self._terms(meta):
            self._db.execute("INSERT OR IGNORE INTO vector_terms (key, value) VALUES (?, ?)",
                             (key, text))  # fmt: skip
            code = self._code(key, text)
            assert code is not None  # written just above, in this transaction
            out[(key, text)] = code
        return out

    def _row_meta(self, meta: Mapping[str, Any]) -> tuple[dict[tuple[str, str], int], str,
                                                         bytes | None]:  # fmt: skip
        """The codes of ``meta``'s indexed terms, and the ``meta`` and ``codes`` columns
        of its row: coded where it can be (the text then empty), else the text."""
        codes = self._index_terms(meta)
        coded = self._coded(meta, codes)
        return codes, "" if coded is not None else self._meta_text(meta), coded

    def _index(self, row: int, codes: Iterable[int]) -> None:
        self._posts.add((code, row, 0) for code in codes)

    def _reindex(self) -> None:
        """Rebuild the filter index from the metadata."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                rows = [(key, seq, self._meta_of(meta, codes)) for key, seq, meta, codes in
                        self._db.execute("SELECT key, seq, meta, codes FROM vectors "
                                         "ORDER BY seq").fetchall()]  # (codes as before)
                self._posts.clear()
                self._db.execute("DELETE FROM vector_terms")
                for key, row, meta in rows:  # coded again: the terms have new codes
                    codes, text, coded = self._row_meta(meta)
                    self._db.execute("UPDATE vectors SET meta = ?, codes = ? WHERE key = ?",
                                     (text, coded, key))  # fmt: skip
                    self._index(row, codes.values())
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                self._rolled_back()
                raise
            self._rows.clear()
            self._selected.clear()

    def _rolled_back(self) -> None:
        """Forget what a rolled-back transaction wrote: its shapes, and the terms read
        while it ran (SQLite may give their codes to other terms: the sequence of
        ``AUTOINCREMENT`` rolls back too)."""
        self._load_shapes()
        self._term_of.clear()

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM vectors").fetchone()[0])

    def put(self, id: str, vec: Vec, meta: Mapping[str, Any]) -> None:
        self.put_many([(id, vec, meta)])

    def put_many(self, items: Iterable[tuple[str, Vec, Mapping[str, Any]]]) -> None:
        self._write(items, replace=False)

    def replace_all(self, items: Iterable[tuple[str, Vec, Mapping[str, Any]]]) -> None:
        """Every entry replaced by ``items`` in one transaction (vectors of another
        dimension allowed): a store embedded again is either all old or all new."""
        self._write(items, replace=True)

    def _write(self, items: Iterable[tuple[str, Vec, Mapping[str, Any]]], *,
               replace: bool) -> None:  # fmt: skip
        with self._lock:
            dim = None if replace else self.dim
            if dim is not None and self._db.execute(
                "SELECT 1 FROM vectors LIMIT 1"
            ).fetchone() is None:
                dim = None  # an emptied store takes vectors of any dimension again
            rows: list[tuple[str, bytes, Mapping[str, Any]]] = []
            for id, vec, meta in items:
                v = as_unit(vec, dim)
                dim = int(v.shape[0])
                rows.append((id, pack(v, int8=self.int8, palette=True), meta))
            self._db.execute("BEGIN IMMEDIATE")
            try:
                if replace:
                    for table in ("vectors", "vector_posts", "vector_terms"):
                        self._db.execute(f"DELETE FROM {table}")
                fresh = start = self._next_seq()
                for id, blob, meta in rows:
                    self._unterm(id)
                    codes, text, coded = self._row_meta(meta)
                    key, name = _vector_key(id)
                    # an upsert keeps the row's number, which the filter index names
                    seq = int(self._db.execute(
                        "INSERT INTO vectors (key, seq, name, vec, meta, codes) VALUES "
                        "(?,?,?,?,?,?) ON CONFLICT(key) DO UPDATE SET vec = excluded.vec, "
                        "meta = excluded.meta, codes = excluded.codes RETURNING seq",
                        (key, fresh, name, blob, text, coded)).fetchone()[0])  # fmt: skip
                    fresh += seq == fresh  # a new row took the number
                    self._index(seq, codes.values())
                if fresh != start:
                    self._db.execute("UPDATE vector_next SET seq = ? WHERE id = 1", (fresh,))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                self._rolled_back()
                raise
            if rows or replace:
                self.dim = dim if rows else None
            self._cache = None
            self._rows.clear()
            self._selected.clear()

    def _held(self, id: str) -> tuple[int, dict[str, Any]] | None:
        """(seq, meta) of the row of vector ``id``, or None. Raises when the row its key
        finds is another id's (a hash collision: this store cannot hold both)."""
        key, name = _vector_key(id)
        row = self._db.execute("SELECT seq, name, meta, codes FROM vectors WHERE key = ?",
                               (key,)).fetchone()  # fmt: skip
        if row is None:
            return None
        if row[1] != name:
            raise SemanticError(f"vector ids {id!r} and {_vector_id(key, row[1])!r} share a "
                                "key; this store cannot hold both")  # fmt: skip
        return int(row[0]), self._meta_of(row[2], row[3])

    def _unterm(self, id: str) -> None:
        """Take the filter terms of vector ``id`` (if held) out of the index."""
        held = self._held(id)
        if held is not None:
            row = held[0]
            for key, text in self._terms(held[1]):
                code = self._code(key, text)
                if code is None:
                    continue
                self._posts.remove([(code, row)])
                if not self._posts.held(code):
                    self._db.execute("DELETE FROM vector_terms WHERE code = ?", (code,))

    def delete(self, id: str) -> bool:
        with self._lock:
            try:
                self._unterm(id)
            except SemanticError:
                return False  # the key is another id's: this one is not held
            cur = self._db.execute("DELETE FROM vectors WHERE key = ?", (_vector_key(id)[0],))
            self._cache = None
            self._rows.clear()
            self._selected.clear()
        return cur.rowcount > 0

    def get(self, id: str) -> Match | None:
        """The entry ``id`` (score 0), or None."""
        with self._lock:
            try:
                row = self._held(id)
            except SemanticError:
                return None
        return None if row is None else Match(id, 0.0, row[1])

    def with_prefix(self, prefix: str) -> list[Match]:
        """Every entry whose id begins with ``prefix`` (score 0), found by the ids' index."""
        if not prefix:
            raise SemanticError("with_prefix needs a prefix: every entry is near() with no filter")
        with self._lock:
            if ord(prefix[-1]) < 0x10FFFF:  # named ids from the prefix up to the next one
                rows = self._db.execute(
                    "SELECT seq, key, name, meta, codes FROM vectors WHERE name >= ? AND "
                    "name < ?",
                    (prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1))).fetchall()  # fmt: skip
            else:
                rows = self._db.execute("SELECT seq, key, name, meta, codes FROM vectors "
                                        "WHERE name >= ?", (prefix,)).fetchall()  # fmt: skip
            for lo, hi in _chunk0_keys(prefix):  # ids held as their document's integer
                rows += self._db.execute(
                    "SELECT seq, key, name, meta, codes FROM vectors WHERE key >= ? AND key <= ? "
                    "AND name IS NULL", (lo, hi)).fetchall()  # fmt: skip
        found = sorted((seq, _vector_id(k, n), m, c) for seq, k, n, m, c in rows)
        return [Match(i, 0.0, self._meta_of(m, c)) for _, i, m, c in found
                if i.startswith(prefix)]  # fmt: skip

    def _loaded(self) -> tuple[list[str], dict[int, int], Rows]:
        if self._cache is None:
            rows = self._db.execute("SELECT seq, key, name, vec FROM vectors "
                                    "ORDER BY seq").fetchall()  # fmt: skip
            ids = [_vector_id(r[1], r[2]) for r in rows]
            mat = Rows([r[3] for r in rows], self.dim or 0)
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
        a range by testing each distinct term of the key (the rule of :mod:`.filters`); a
        key not indexed by reading every row's metadata."""
        if self._indexed is not None and cond.key not in self._indexed:
            return {row for row, meta, codes in self._db.execute(
                        "SELECT seq, meta, codes FROM vectors")
                    if filters.matches(self._meta_of(meta, codes), (cond,))}  # fmt: skip
        codes: list[int] = []
        if cond.equal is not None:
            texts = [filters.term_json(t) for t in cond.equal]
            for at in range(0, len(texts), 500):  # bounded statement size
                part = texts[at : at + 500]
                codes += [int(c) for (c,) in self._db.execute(
                    f"SELECT code FROM vector_terms WHERE key = ? AND value IN "
                    f"({','.join('?' * len(part))})", [cond.key, *part])]  # fmt: skip
        else:
            codes = [int(c) for c, t in self._db.execute(
                "SELECT code, value FROM vector_terms WHERE key = ?", (cond.key,))
                if cond.admits(filters.term_from_json(t))]  # fmt: skip
        return set(self._posts.ids(codes).tolist())

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
                best = top_k(hit, mat.cosine(q, rows), k)
            else:
                best = top_k(ids, mat.cosine(q), k)
            out = []
            for i, score in best:
                meta = self._db.execute("SELECT meta, codes FROM vectors WHERE key = ?",
                                        (_vector_key(i)[0],)).fetchone()  # fmt: skip
                out.append(Match(i, score, self._meta_of(meta[0], meta[1])))
            return out


def node_id(name: str) -> int:
    """The integer a graph node is keyed by: 63 bits of the BLAKE2b digest of its name, so
    an edge is three integers and a label, and a name is held once (in ``graph_nodes``)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big") >> 1


class SQLiteGraph(_SQLite):
    """Nodes keyed by :func:`node_id` (the name held once, beside its properties), edges by
    their ends' integers with their label; ``seq`` (the edge row's rowid) keeps the order
    edges were first linked in. A file of the earlier layout (``nodes`` and ``edges`` keyed
    by name text) is converted when opened."""

    SCHEMA = """
    CREATE TABLE IF NOT EXISTS graph_nodes (id INTEGER PRIMARY KEY, name TEXT NOT NULL,
        props TEXT NOT NULL);
    CREATE TABLE IF NOT EXISTS graph_edges (seq INTEGER PRIMARY KEY, src INTEGER NOT NULL,
        dst INTEGER NOT NULL, label TEXT NOT NULL, UNIQUE (src, label, dst));
    CREATE INDEX IF NOT EXISTS graph_edges_dst ON graph_edges(dst);
    """

    def __init__(self, path: Where = ":memory:") -> None:
        super().__init__(path)
        if earlier_table(self._db, "edges") is not None:
            self._convert()

    def _convert(self) -> None:
        """Move the nodes and edges of the earlier layout into the integer-keyed tables."""
        with self._lock:
            self._db.execute("BEGIN")
            try:
                for name, props in self._db.execute("SELECT id, props FROM nodes").fetchall():
                    self._named(name, props, replace=True)
                for src, dst, label in self._db.execute(
                    "SELECT src, dst, label FROM edges ORDER BY seq"
                ).fetchall():
                    self._link(src, dst, label)
                self._db.execute("DROP TABLE edges")
                self._db.execute("DROP TABLE nodes")
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def _named(self, name: str, props: str = "{}", *, replace: bool = False) -> int:
        """The node of ``name``, written if new (or its properties replaced)."""
        nid = node_id(name)
        held = self._db.execute("SELECT name FROM graph_nodes WHERE id = ?", (nid,)).fetchone()
        if held is not None and held[0] != name:
            raise SemanticError(f"graph nodes {name!r} and {held[0]!r} share a key; this store "
                                "cannot hold both")  # fmt: skip
        if held is None:
            self._db.execute("INSERT INTO graph_nodes VALUES (?, ?, ?)", (nid, name, props))
        elif replace:
            self._db.execute("UPDATE graph_nodes SET props = ? WHERE id = ?", (props, nid))
        return nid

    def _link(self, src: str, dst: str, label: str) -> None:
        a, b = self._named(src), self._named(dst)
        self._db.execute("INSERT OR IGNORE INTO graph_edges (src, dst, label) VALUES (?, ?, ?)",
                         (a, b, label))  # fmt: skip

    def node(self, id: str, props: Mapping[str, Any]) -> None:
        with self._lock:
            old = self.props(id) or {}
            old.update(props)
            self._named(id, _json(old), replace=True)

    def edge(self, src: str, dst: str, label: str) -> None:
        with self._lock:
            self._link(src, dst, label)

    def out(self, id: str, label: str | None = None) -> list[str]:
        sql = ("SELECT n.name FROM graph_edges e JOIN graph_nodes n ON n.id = e.dst "
               "WHERE e.src = ?")  # fmt: skip
        args: tuple[object, ...] = (node_id(id),)
        if label is not None:
            sql += " AND e.label = ?"
            args = (node_id(id), label)
        # each neighbour once, first-linked first (n.name named too: PostgreSQL asks for it)
        sql += " GROUP BY e.dst, n.name ORDER BY min(e.seq)"
        with self._lock:
            return [r[0] for r in self._db.execute(sql, args).fetchall()]

    def props(self, id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT name, props FROM graph_nodes WHERE id = ?",
                                   (node_id(id),)).fetchone()  # fmt: skip
        return None if row is None or row[0] != id else dict(json.loads(row[1]))

    def delete(self, id: str) -> bool:
        nid = node_id(id)
        with self._lock:
            if self.props(id) is None:
                return False
            self._db.execute("DELETE FROM graph_edges WHERE src = ? OR dst = ?", (nid, nid))
            return self._db.execute("DELETE FROM graph_nodes WHERE id = ?", (nid,)).rowcount > 0


_ORIGIN = ("ref", "offset", "size", "mtime", "sha256", "media_type")  # Origin.to_meta's keys
PLAIN = "text/plain"  # the media type a packed origin writes as 0
_HEX_ID = re.compile(r"[0-9a-f]{16}")  # a document id as values.doc_id makes it


def _doc_key(doc_id: str) -> tuple[int, str | None]:
    """The integer a document's row is keyed by, and the id text the row must hold: a
    16-hex-digit id is its own integer (no text kept); another id is keyed by the 63-bit
    hash of its text, which the row keeps (to tell a collision from the document)."""
    if _HEX_ID.fullmatch(doc_id):
        return _signed(doc_id), None
    return _h63(doc_id), doc_id


def _whole(doc: Doc, chunks: Sequence[Chunk]) -> bool:
    """Whether ``chunks`` is the one chunk that is the whole document."""
    return (len(chunks) == 1 and chunks[0].index == 0 and chunks[0].start == 0
            and chunks[0].end == len(doc.text.encode("utf-8"))
            and chunks[0].text == doc.text)  # fmt: skip


class SQLiteDocs(_SQLite):
    """A document is one row of ``docs_compact``, keyed by the code (the file's
    :class:`~hirmem.semantic.dictionary.Codes`, the tiers' codes of its sources) of its id
    as an integer (:func:`_doc_key`): dense and rising, so rows are appended and pages fill
    (a random 64-bit key left them ~86 % full); its chunks held by reference in it: ``cuts``
    is NULL for the one chunk that is the whole document (the usual short record), else a
    JSON list with a chunk's byte range ``[start, end]`` (its index its place in the list),
    or ``[index, start, end, text]`` for one whose index is elsewhere or whose text is not
    that range of its document (kept as given). The origin is packed (:meth:`_meta_text`):
    its reference left out when it is the document's source, its size and SHA-256 when they
    are the text's, a usual record's container a word of ``docs_words`` (its number in
    ``box``). The source's directory (up to its last ``/``) is a word too (``dir``; the row
    keeps the rest in ``source``). Deleting a document deletes its chunks. Files of the
    earlier layouts (``docs`` keyed by id text beside ``doc_chunks``, or beside ``chunks``
    holding every chunk's text) are converted when opened; a ``docs_compact`` without
    ``dir`` and ``box`` gains them, its rows written again in them.

    ``docs_places`` holds a source place's versions: the usual one (one version) as the
    code of that document's id (:class:`~hirmem.semantic.dictionary.Codes`; a file of
    before, with the id itself, has its column coded when opened)."""

    SCHEMA = """
    CREATE TABLE IF NOT EXISTS docs_compact (key INTEGER PRIMARY KEY, name TEXT,
        source TEXT NOT NULL, text TEXT NOT NULL, meta TEXT NOT NULL, cuts TEXT,
        dir INTEGER, box INTEGER);
    CREATE TABLE IF NOT EXISTS docs_places (key INTEGER PRIMARY KEY, name TEXT,
        current INTEGER, props TEXT);
    """
    # a row's columns, the source spelled again from ``dir`` and ``tail`` and the container
    # read from ``box`` (both words of ``docs_words``)
    _READ = ("SELECT d.name, coalesce(w.word, '') || d.source, d.text, d.meta, d.cuts, "
             "b.word FROM docs_compact d LEFT JOIN docs_words w ON w.id = d.dir "
             "LEFT JOIN docs_words b ON b.id = d.box WHERE d.key = ?")  # fmt: skip

    def __init__(self, path: Where = ":memory:") -> None:
        super().__init__(path)
        self._codes = Codes(self._db)
        self._words = Words(self._db, "docs_words")
        if not self._worded():
            self._add_words()
        self._codes.adopt("docs_compact", "key")
        self._codes.adopt("docs_places", "current")
        if has_table(self._db, "docs"):  # (on a server too: its schema had this layout)
            self._convert()

    def _worded(self) -> bool:
        return "box" in {str(r[1]) for r in self._db.execute("PRAGMA table_info(docs_compact)")}

    def _add_words(self) -> None:
        """Give a ``docs_compact`` of the layout before the words its ``dir`` and ``box``,
        and write its rows' source and metadata again in them (in one transaction, which
        first looks: one process converts it)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                if not self._worded():
                    for col in ("dir", "box"):
                        self._db.execute(f"ALTER TABLE docs_compact ADD COLUMN {col} INTEGER")
                    for key, source, text, meta in self._db.execute(
                            "SELECT key, source, text, meta FROM docs_compact").fetchall():
                        doc = Doc("", source, text, self._meta_of(meta, source, text))
                        self._db.execute("UPDATE docs_compact SET source = ?, meta = ?, dir = ?, "
                                         "box = ? WHERE key = ?", (*self._columns(doc), key))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    # ---- source places: the versions read at one place (a reference and an offset) ----

    def place(self, key: str) -> dict[str, Any] | None:
        """What is recorded of the source place ``key``: ``{"current": <doc id>}``, with
        ``"versions"`` (oldest first) once a second version was read there; None if none."""
        k, name = _doc_key(key)
        with self._lock:
            row = self._db.execute(f"SELECT p.name, c.key, p.props FROM docs_places p LEFT "
                                   f"JOIN {CODES} c ON c.id = p.current WHERE p.key = ?",
                                   (k,)).fetchone()  # fmt: skip
        if row is None or row[0] != name:
            return None
        if row[2] is not None:
            return dict(json.loads(row[2]))
        return {"current": f"{int(row[1]) % (1 << 64):016x}"}

    def set_place(self, key: str, props: Mapping[str, Any]) -> None:
        """Record ``props`` for the source place ``key``. The usual place (one version, a
        16-hex-digit id) is a row of two integers, the version as its document's code in
        ``source_codes`` (a byte or three where the id is eight); any other is kept as JSON."""
        k, name = _doc_key(key)
        current = props.get("current")
        plain = (list(props) == ["current"] and isinstance(current, str)
                 and _HEX_ID.fullmatch(current) is not None)  # fmt: skip
        with self._lock:
            own = not self._db.in_transaction  # (take_places writes many in its own)
            if own:
                self._db.execute("BEGIN")
            try:
                held = self._db.execute("SELECT name FROM docs_places WHERE key = ?",
                                        (k,)).fetchone()  # fmt: skip
                if held is not None and held[0] != name:
                    raise SemanticError(f"source places {key!r} and {held[0] or 'another'!r} "
                                        "share a key; this store cannot hold both")  # fmt: skip
                row = (k, name, self._codes.code(_signed(str(current))) if plain else None,
                       None if plain else _json(props, sort=False))  # fmt: skip
                self._db.execute("INSERT OR REPLACE INTO docs_places VALUES (?, ?, ?, ?)", row)
                if own:
                    self._db.execute("COMMIT")
            except BaseException:
                if own:
                    self._db.execute("ROLLBACK")
                raise

    def take_places(self, graph: SQLiteGraph, prefix: str) -> int:
        """Move the source places an earlier layout kept in ``graph`` (a node
        ``<prefix><key>`` holding its properties, and, earlier still, an edge labelled
        ``version`` to each version read) into this store; how many were moved."""
        gdb = graph._db
        with graph._lock:
            held = gdb.execute("SELECT id, name, props FROM graph_nodes WHERE name >= ? AND "
                               "name < ?", (prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1))
                               ).fetchall()  # fmt: skip
        nodes = [(nid, name, json.loads(props)) for nid, name, props in held
                 if name.startswith(prefix)]  # fmt: skip
        if not nodes:
            return 0
        with self._lock:
            self._db.execute("BEGIN")
            try:
                for _, name, props in nodes:
                    linked = graph.out(name, "version")
                    if linked and "versions" not in props:  # the layout with a version edge
                        props = {**props, "versions": linked}
                    self.set_place(name[len(prefix):], props)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        # then out of the graph (a crash between the two moves them again, the same way)
        with graph._lock:
            gdb.execute("BEGIN")
            try:
                for nid, _, _ in nodes:
                    gdb.execute("DELETE FROM graph_edges WHERE src = ? AND label = 'version'",
                                (nid,))  # fmt: skip
                    if gdb.execute("SELECT 1 FROM graph_edges WHERE src = ? OR dst = ? LIMIT 1",
                                   (nid, nid)).fetchone() is None:  # fmt: skip
                        gdb.execute("DELETE FROM graph_nodes WHERE id = ?", (nid,))
                gdb.execute("COMMIT")
            except BaseException:
                gdb.execute("ROLLBACK")
                raise
        return len(nodes)

    def _convert(self) -> None:
        """Move the documents and chunks of an earlier layout into ``docs_compact``."""
        table = next((t for t in ("doc_chunks", "chunks") if has_table(self._db, t)), None)
        with self._lock:
            self._db.execute("BEGIN")
            try:
                held: dict[str, list[tuple[int, int, int, str | None]]] = {}
                for doc_id, idx, start, end, text in [] if table is None else self._db.execute(
                        f"SELECT doc_id, idx, start, end_, text FROM {table} "
                        "ORDER BY doc_id, idx").fetchall():  # fmt: skip
                    held.setdefault(doc_id, []).append((idx, start, end, text))
                for id, source, text, meta in self._db.execute(
                        "SELECT id, source, text, meta FROM docs").fetchall():  # fmt: skip
                    doc = Doc(id, source, text, self._meta_of(meta, source, text))
                    raw = text.encode("utf-8")
                    chunks = [Chunk(id, i, raw[a:b].decode("utf-8") if t is None else t, a, b)
                              for i, a, b, t in held.get(id, [])]  # fmt: skip
                    self._write(doc, chunks)
                for table in ("doc_chunks", "chunks", "docs"):
                    self._db.execute(f"DROP TABLE IF EXISTS {table}")
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    @staticmethod
    def _meta_text(doc: Doc) -> tuple[str, str | None]:
        """``doc.meta`` as its row holds it, and the container the row names in ``box``
        (else None). An origin of the usual shape is a list: marked ``^``, ``[ref, offset,
        mtime, media_type]`` when its size and SHA-256 are those of the text (read back from
        it), and the whole metadata is that list (the container in ``box`` when it holds
        just a container and the origin; the list ``[0,0,0,0]``, most records', is the empty
        text); marked ``~``, every field in the order of :data:`_ORIGIN` otherwise; its
        reference 0 when it is the document's source (held once, in ``source``), in the
        ``^`` form its media type 0 when it is :data:`PLAIN`. A plain JSON object
        otherwise."""
        org = doc.meta.get("origin")
        if not (isinstance(org, Mapping) and tuple(org) == _ORIGIN
                and isinstance(org["ref"], str)):  # fmt: skip
            return _json(doc.meta, sort=False), None
        ref = 0 if org["ref"] == doc.source else org["ref"]
        raw = doc.text.encode("utf-8")
        if (org["size"] == len(raw) and org["sha256"] == hashlib.sha256(raw).hexdigest()
                and isinstance(org["media_type"], str)):  # fmt: skip
            media = 0 if org["media_type"] == PLAIN else org["media_type"]
            packed = [ref, org["offset"], org["mtime"], media]
            keys = list(doc.meta)
            box = doc.meta.get("container")
            if not (keys == ["origin"] or (keys == ["container", "origin"]
                                           and isinstance(box, str))):  # fmt: skip
                return "^" + _json({**doc.meta, "origin": packed}, sort=False), None
            # the usual record: fields by place
            text = "" if packed == [0, 0, 0, 0] else "^" + json.dumps(
                packed, separators=(",", ":"), ensure_ascii=False)  # fmt: skip
            return text, box if isinstance(box, str) else None
        packed = [ref, *(org[k] for k in _ORIGIN[1:])]
        return "~" + _json({**doc.meta, "origin": packed}, sort=False), None

    @staticmethod
    def _meta_of(text: str, source: str, doc_text: str,
                 box: str | None = None) -> dict[str, Any]:  # fmt: skip
        """The metadata of a row's ``meta`` (and container, ``box``'s word)."""
        if text == "":
            text = "^[0,0,0,0]"
        if not text.startswith(("~", "^")):
            return dict(json.loads(text))
        held = json.loads(text[1:])
        if isinstance(held, list):  # by place: the origin's fields, then the container
            if box is not None:
                held = [*held, box]
            meta = {"container": held[4]} if len(held) == 5 else {}
            meta["origin"], held = held[:4], meta
        meta = dict(held)
        org = list(meta["origin"])
        if text.startswith("^"):
            raw = doc_text.encode("utf-8")
            ref, offset, mtime, media = org
            org = [ref, offset, len(raw), mtime, hashlib.sha256(raw).hexdigest(),
                   PLAIN if media == 0 else media]  # fmt: skip
        meta["origin"] = dict(zip(_ORIGIN, [source if org[0] == 0 else org[0], *org[1:]],
                                  strict=True))  # fmt: skip
        return meta

    @staticmethod
    def _cuts(doc: Doc, chunks: Sequence[Chunk]) -> str | None:
        if _whole(doc, chunks):
            return None
        raw = doc.text.encode("utf-8")
        ordered = sorted(chunks, key=lambda c: c.index)  # read back in index order
        if len({c.index for c in ordered}) != len(ordered):
            raise SemanticError(f"document {doc.id}: two chunks share an index")
        out: list[list[Any]] = []
        for place, c in enumerate(ordered):
            same = raw[c.start : c.end] == c.text.encode("utf-8")
            out.append([c.start, c.end] if same and c.index == place
                       else [c.index, c.start, c.end, None if same else c.text])  # fmt: skip
        return json.dumps(out, separators=(",", ":"), ensure_ascii=False)

    @staticmethod
    def _chunks_of(doc_id: str, text: str, cuts: str | None) -> list[Chunk]:
        if cuts is None:
            return [Chunk(doc_id, 0, text, 0, len(text.encode("utf-8")))]
        raw = text.encode("utf-8")
        out = []
        for place, cut in enumerate(json.loads(cuts)):
            idx, start, end, own = (place, *cut, None) if len(cut) == 2 else cut
            out.append(Chunk(doc_id, idx, raw[start:end].decode("utf-8") if own is None
                             else own, start, end))  # fmt: skip
        return out

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM docs_compact").fetchone()[0])

    def _code(self, doc_id: str, *, create: bool) -> tuple[int, str | None]:
        """The code of ``doc_id``'s key (:func:`_doc_key`; 0 when it has none and not
        ``create``), and the id text its row must hold."""
        key, name = _doc_key(doc_id)
        return self._codes.code(key, create=create), name

    def _write(self, doc: Doc, chunks: Sequence[Chunk]) -> None:
        key, name = self._code(doc.id, create=True)
        held = self._db.execute("SELECT name, source FROM docs_compact WHERE key = ?",
                                (key,)).fetchone()  # fmt: skip
        if held is not None and held[0] != name:
            raise SemanticError(f"document ids {doc.id!r} and {held[0] or 'another'!r} share a "
                                "key; this store cannot hold both")  # fmt: skip
        tail, meta, folder, box = self._columns(doc)
        self._db.execute("INSERT OR REPLACE INTO docs_compact (key, name, source, text, meta, "
                         "cuts, dir, box) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                         (key, name, tail, doc.text, meta, self._cuts(doc, chunks), folder,
                          box))  # fmt: skip

    def _columns(self, doc: Doc) -> tuple[str, str, int | None, int | None]:
        """The ``source``, ``meta``, ``dir`` and ``box`` of ``doc``'s row (its words
        written if new: the caller holds the write transaction)."""
        meta, box = self._meta_text(doc)
        cut = doc.source.rfind("/") + 1  # a source's directory: a word many rows share
        folder, tail = (doc.source[:cut], doc.source[cut:]) if cut >= 4 else (None, doc.source)
        return (tail, meta, None if folder is None else self._words.id(folder),
                None if box is None else self._words.id(box))  # fmt: skip

    def put(self, doc: Doc, chunks: Sequence[Chunk]) -> None:
        with self._lock:
            self._db.execute("BEGIN")
            try:
                self._write(doc, chunks)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def _row(self, doc_id: str) -> tuple[str, str, str, str | None, str | None] | None:
        """(source, text, meta, cuts, container) of ``doc_id``, or None."""
        with self._lock:
            key, name = self._code(doc_id, create=False)
            row = self._db.execute(self._READ, (key,)).fetchone()
        if row is None or row[0] != name:
            return None
        return str(row[1]), str(row[2]), str(row[3]), row[4], row[5]

    def get(self, doc_id: str) -> Doc | None:
        row = self._row(doc_id)
        if row is None:
            return None
        source, text, meta, _, box = row
        return Doc(doc_id, source, text, self._meta_of(meta, source, text, box))

    def chunk(self, chunk_id: str) -> Chunk | None:
        doc, _, index = chunk_id.rpartition("#")
        if not index.isdigit():
            return None
        row = self._row(doc)
        if row is None:
            return None
        want = int(index)
        return next((c for c in self._chunks_of(doc, row[1], row[3]) if c.index == want), None)

    def chunks(self, doc_id: str) -> list[Chunk]:
        row = self._row(doc_id)
        return [] if row is None else self._chunks_of(doc_id, row[1], row[3])

    def delete(self, doc_id: str) -> bool:
        if self._row(doc_id) is None:
            return False
        with self._lock:
            return self._db.execute("DELETE FROM docs_compact WHERE key = ?",
                                    (self._code(doc_id, create=False)[0],)).rowcount > 0
