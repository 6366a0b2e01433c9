"""SQLite persistence for the memory engine: WAL, migrations, enforced invariants; or the
same on PostgreSQL.

A store is a SQLite file (or ``":memory:"``), or a schema of a PostgreSQL database
(:class:`~hirmem.sql.PgTarget`: a fleet tenant's engine lives in its tenant's database,
so replication and failover carry it). On PostgreSQL the write connection is a
:class:`~hirmem.sql.pgconn.PgConnection`: the engine's statements stay as written for
SQLite and are said in PostgreSQL's dialect on the way; what SQLite has built in (the
triggers, ``user_version``, ``data_version``, ``BEGIN IMMEDIATE``) is
:mod:`hirmem.memory.store_pg`'s. Everything below holds on both.

One file holds everything: ``memories`` (one row per memory object, all schema fields),
``audit`` (the provenance layer: the append-only chain), ``reviews`` (steward decisions)
and ``meta`` (chain heads, the last sweep, the embedder). Everything the engine knows
is in the file, so a restart resumes exactly where it stopped.

The database itself refuses what the invariants forbid, whatever code talks to it:

* ``audit`` and ``reviews`` rows can be neither updated nor deleted (MEM-INV-5);
* a memory can be deleted only while volatile (eviction from the working ring), never
  once gated (MEM-INV-3: quarantine preserves, never silent deletion);
* the hashed content of a memory (id, payload, source, timestamp, context, prev_hash,
  hash) can never be updated: a repair writes a new version (MEM-INV-4).

Schema versions live in ``PRAGMA user_version``; :data:`MIGRATIONS` brings any older
file up to date on open.

**One writer.** The write connection belongs to the store's writer: a re-entrant lock
that a thread holds for a whole transaction (:meth:`Store.transaction`) or a single write
(:meth:`Store.writing`). Admissions, follow, sweeps, repairs and reviews all run under it,
so no two threads ever interleave statements, transaction depth or cached chain heads.
Another process writing the same file (a ``hirmem memory`` command beside the daemon) is
serialised by SQLite (``BEGIN IMMEDIATE``); each transaction starts by checking
``PRAGMA data_version`` and re-reads the caches built on the file (the audit head, the
recall index) when someone else committed.

Readers never share the writer's transaction state: a thread that does not hold the
writer reads through its own read-only connection (:meth:`Store.reading`), which in WAL
mode sees the last committed snapshot and never waits for the writer. A ``":memory:"``
store has no second connection to give (a private in-memory database is visible to one
connection only), so there reads go through the writer: they take the lock and wait for
the running transaction to end, which also keeps them out of its uncommitted state.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from hirmem.memory import store_pg
from hirmem.memory.distill_schema import ids_at, linked_rowids, upgrade_distillation
from hirmem.memory.model import Layer, Memory, State
from hirmem.protocol.errors import HirmemError
from hirmem.sql import Connection, PgTarget
from hirmem.sql.pgconn import PgConnection

__all__ = ["ADMIT_COLUMNS", "ADMIT_CONSTANTS", "COLUMNS", "DERIVED_KINDS", "MIGRATIONS",
           "PG_READERS", "SCHEMA_VERSION", "SUPERSEDED_BY", "TRIGGERS", "WRITE_CACHE_KIB", "Store",
           "Writer"]  # fmt: skip

DERIVED_KINDS = ("pattern", "procedure")  # kinds whose episodes are in distill_links
# the repair of a memory (WHERE clause; parameter: its id): the partial unique index
# memories_one_repair serves it, which a plain ``supersedes = ?`` cannot use
SUPERSEDED_BY = "supersedes = ? AND supersedes != ''"
WRITE_CACHE_KIB = 32768  # the SQLite write connection's page cache, at most (32 MiB)
PG_READERS = 4  # read connections a store on PostgreSQL holds at most (besides its writer)

_V1 = """
CREATE TABLE memories (
    rowid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    payload BLOB NOT NULL,
    source TEXT NOT NULL,
    timestamp INTEGER NOT NULL,
    context BLOB NOT NULL,
    flags INTEGER NOT NULL,
    h REAL NOT NULL, i REAL NOT NULL, r REAL NOT NULL,
    f REAL NOT NULL, c REAL NOT NULL, rn REAL NOT NULL,
    confidence REAL NOT NULL, provenance REAL NOT NULL, priority REAL NOT NULL,
    w REAL NOT NULL, verdict INTEGER NOT NULL, hard INTEGER NOT NULL, trust REAL NOT NULL,
    links TEXT NOT NULL,
    access_count INTEGER NOT NULL, access_seen INTEGER NOT NULL,
    strength REAL NOT NULL CHECK (strength >= 0),
    last_access REAL NOT NULL, decayed_at REAL NOT NULL,
    hash BLOB NOT NULL, prev_hash BLOB NOT NULL, audit_seq INTEGER NOT NULL,
    state INTEGER NOT NULL CHECK (state BETWEEN 0 AND 4),
    layer INTEGER NOT NULL CHECK (layer BETWEEN 0 AND 3),
    subject TEXT NOT NULL, attribute TEXT NOT NULL, value TEXT NOT NULL,
    negated INTEGER NOT NULL, kind TEXT NOT NULL,
    device TEXT NOT NULL, kid TEXT NOT NULL, device_scores TEXT NOT NULL,
    gate_mode TEXT NOT NULL, version INTEGER NOT NULL, supersedes TEXT NOT NULL,
    flagged INTEGER NOT NULL, quarantine_reason TEXT NOT NULL, permanent INTEGER NOT NULL,
    created REAL NOT NULL, embedding BLOB NOT NULL
);
CREATE INDEX memories_state ON memories(state);
CREATE TABLE audit (
    seq INTEGER PRIMARY KEY,
    ts INTEGER NOT NULL,
    action TEXT NOT NULL,
    memory_id TEXT NOT NULL,
    actor TEXT NOT NULL,
    detail BLOB NOT NULL,
    prev BLOB NOT NULL,
    hash BLOB NOT NULL
);
CREATE TABLE reviews (
    seq INTEGER PRIMARY KEY,
    memory_id TEXT NOT NULL,
    steward TEXT NOT NULL,
    decision TEXT NOT NULL,
    reason TEXT NOT NULL,
    ts REAL NOT NULL,
    audit_seq INTEGER NOT NULL
);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
BEGIN SELECT RAISE(ABORT, 'audit chain is append-only (MEM-INV-5): no update'); END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
BEGIN SELECT RAISE(ABORT, 'audit chain is append-only (MEM-INV-5): no delete'); END;
CREATE TRIGGER reviews_no_update BEFORE UPDATE ON reviews
BEGIN SELECT RAISE(ABORT, 'steward decisions are append-only: no update'); END;
CREATE TRIGGER reviews_no_delete BEFORE DELETE ON reviews
BEGIN SELECT RAISE(ABORT, 'steward decisions are append-only: no delete'); END;
CREATE TRIGGER memories_no_delete BEFORE DELETE ON memories WHEN OLD.state != 0
BEGIN SELECT RAISE(ABORT, 'only volatile memories may be evicted (MEM-INV-3)'); END;
CREATE TRIGGER memories_content_fixed
BEFORE UPDATE OF id, payload, source, timestamp, context, prev_hash, hash ON memories
BEGIN SELECT RAISE(ABORT, 'memory content is immutable: repair writes a new version'); END;
"""

_V2 = """
CREATE INDEX memories_subject ON memories(subject, attribute);
CREATE INDEX memories_device ON memories(device);
CREATE INDEX memories_supersedes ON memories(supersedes);
"""

# v3: the lifecycle and permanent quarantine enforced by the database too; one repair
# per version (no forked chains); the audit indexed by memory (verify joins rows to
# their capture and admission records); signed checkpoints of the chain head.
_V3 = """
CREATE TRIGGER memories_legal_state BEFORE UPDATE OF state ON memories
WHEN NEW.state != OLD.state AND OLD.state * 10 + NEW.state NOT IN (1, 3, 12, 13, 14, 23, 24, 31, 34)
BEGIN SELECT RAISE(ABORT, 'illegal lifecycle transition (see hirmem.memory.states)'); END;
CREATE TRIGGER memories_permanent_quarantine BEFORE UPDATE OF permanent, state ON memories
WHEN OLD.permanent = 1 AND (NEW.permanent = 0 OR (OLD.state = 3 AND NEW.state != 3))
BEGIN SELECT RAISE(ABORT, 'permanent quarantine cannot be lifted (MEM-INV-2)'); END;
CREATE UNIQUE INDEX memories_one_repair ON memories(supersedes) WHERE supersedes != '';
CREATE INDEX audit_memory ON audit(memory_id, action);
CREATE TABLE checkpoints (
    seq INTEGER PRIMARY KEY,
    audit_seq INTEGER NOT NULL,
    head BLOB NOT NULL,
    ts INTEGER NOT NULL,
    kid BLOB NOT NULL,
    signature BLOB NOT NULL
);
CREATE TRIGGER checkpoints_no_update BEFORE UPDATE ON checkpoints
BEGIN SELECT RAISE(ABORT, 'checkpoints are append-only: no update'); END;
CREATE TRIGGER checkpoints_no_delete BEFORE DELETE ON checkpoints
BEGIN SELECT RAISE(ABORT, 'checkpoints are append-only: no delete'); END;
CREATE TABLE strength_history (
    memory INTEGER NOT NULL,
    slot INTEGER NOT NULL,
    ts REAL NOT NULL,
    strength REAL NOT NULL,
    cause INTEGER NOT NULL,
    PRIMARY KEY (memory, slot)
) WITHOUT ROWID;
"""

# v4: counts per state and layer answered from one index (``hirmem memory stats`` at a
# million rows reads the index, never the rows); it serves every lookup by state too.
_V4 = """
CREATE INDEX memories_state_layer ON memories(state, layer);
DROP INDEX memories_state;
"""

# v5: embeddings in their own table. A memory's row is a few hundred bytes instead of
# 1.3 KiB, so the sweep and every admission step that rewrite a row write a tenth of a
# page, not a page of WAL; the 1 KiB vector is written once, at capture (it never
# changes), and read only to load the recall index. Evicting a volatile memory takes
# its vector with it.
_V5 = """
CREATE TABLE embeddings (memory INTEGER PRIMARY KEY, vector BLOB NOT NULL);
INSERT INTO embeddings(memory, vector) SELECT rowid, embedding FROM memories;
ALTER TABLE memories DROP COLUMN embedding;
CREATE TRIGGER memories_evict_embedding AFTER DELETE ON memories
BEGIN DELETE FROM embeddings WHERE memory = OLD.rowid; END;
CREATE TRIGGER embeddings_fixed BEFORE UPDATE ON embeddings
BEGIN SELECT RAISE(ABORT, 'an embedding is written once, at capture'); END;
CREATE TRIGGER embeddings_kept BEFORE DELETE ON embeddings
WHEN (SELECT state FROM memories WHERE rowid = OLD.memory) != 0
BEGIN SELECT RAISE(ABORT, 'a gated memory keeps its embedding (MEM-INV-3)'); END;
"""

# v6: a device pack's records are admitted with one audit entry (``admit-pack``, see
# hirmem.memory.packaudit); this table says which entry, and where in it, holds a
# memory's admission. It is an index, not evidence: verify checks the row's hash
# against the entry it points to, so a pointer changed or removed is named.
_V6 = """
CREATE TABLE admissions (memory INTEGER PRIMARY KEY, seq INTEGER NOT NULL, pos INTEGER NOT NULL);
"""

# v7: indexes a fresh device record does not pay for. Lookups by ``supersedes`` name a
# memory (``supersedes = ? AND supersedes != ''``) and are served by the partial unique
# index of v3, so its full twin goes; contradiction and revision look up stated facts
# by subject, attribute and time, so that index holds facts only (a reading's sensor
# and field are not looked up in SQL: the recall index and the distillates hold them).
_V7 = """
DROP INDEX memories_supersedes;
CREATE INDEX memories_facts ON memories(subject, attribute, timestamp) WHERE kind = 'fact';
DROP INDEX memories_subject;
"""


# v8: a distillate's statistics in a column each, not one JSON document, and its links
# as ranges of rowids, not a row per episode (a pack's step writes a few numbers per
# pattern; see hirmem.memory.distill_schema). A step in Python: the documents hold
# ±Infinity, which no JSON function of either database reads.
Migration = str | Callable[[Connection], None]  # a script, or a step given the connection

# v9: an index no query reads goes. Nothing looks memories up by device in SQL (the
# recall index holds each row's device, and a device's distillates are keyed in their
# own table), yet every fresh row paid a B-tree insert into it — at one of a fleet's
# few device keys, so a follow batch dirtied a page per device in it.
_V9 = """
DROP INDEX IF EXISTS memories_device;
"""
MIGRATIONS: tuple[Migration, ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, upgrade_distillation,
                                     _V9)  # fmt: skip
SCHEMA_VERSION = len(MIGRATIONS)

COLUMNS: tuple[str, ...] = (
    "id", "payload", "source", "timestamp", "context", "flags",
    "h", "i", "r", "f", "c", "rn", "confidence", "provenance", "priority",
    "w", "verdict", "hard", "trust", "links", "access_count", "access_seen",
    "strength", "last_access", "decayed_at", "hash", "prev_hash", "audit_seq",
    "state", "layer", "subject", "attribute", "value", "negated", "kind",
    "device", "kid", "device_scores", "gate_mode", "version", "supersedes",
    "flagged", "quarantine_reason", "permanent", "created",
)  # fmt: skip  (the embedding is in its own table: ``embeddings``, keyed by rowid)
_MUTABLE = tuple(
    c for c in COLUMNS
    if c not in ("id", "payload", "source", "timestamp", "context", "prev_hash", "hash")
)  # fmt: skip
# the vector by a correlated lookup (not a join): callers' WHERE clauses stay plain
_SELECT = (
    "SELECT rowid, " + ", ".join(COLUMNS)
    + ", (SELECT vector FROM embeddings WHERE memory = memories.rowid) FROM memories"
)  # fmt: skip
# A device pack's fresh rows (Store.insert_admitted): what each record brings, what its
# gate judged, what the pack's rows share, in this order; the rest is alike for every
# fresh row and written as constants.
ADMIT_COLUMNS: tuple[str, ...] = (
    "id", "payload", "source", "timestamp", "context", "hash", "prev_hash", "subject",
    "attribute", "value", "negated", "kind", "device_scores", "priority",
    "flags", "confidence", "provenance", "h", "i", "r", "f", "c", "rn", "w", "verdict",
    "hard", "trust", "strength", "state", "layer", "quarantine_reason", "permanent",
    "gate_mode",
    "audit_seq", "last_access", "decayed_at", "created", "device", "kid",
)  # fmt: skip
ADMIT_CONSTANTS: dict[str, str] = {
    "links": "'[]'", "access_count": "0", "access_seen": "0", "version": "1",
    "supersedes": "''", "flagged": "0",
}  # fmt: skip
if sorted((*ADMIT_COLUMNS, *ADMIT_CONSTANTS)) != sorted(COLUMNS):
    raise AssertionError("ADMIT_COLUMNS and ADMIT_CONSTANTS must cover COLUMNS once each")
_INSERT_ADMITTED = (
    f"INSERT INTO memories (rowid, {', '.join((*ADMIT_COLUMNS, *ADMIT_CONSTANTS))}) "
    f"VALUES (?, {', '.join('?' * len(ADMIT_COLUMNS))}, {', '.join(ADMIT_CONSTANTS.values())})"
)
_UPDATE = (
    "UPDATE memories SET " + ", ".join(f"{c} = :{c}" for c in _MUTABLE)
    + " WHERE id = :id RETURNING rowid"
)  # fmt: skip


def to_row(m: Memory) -> dict[str, Any]:
    row = {c: getattr(m, c) for c in COLUMNS}
    row["links"] = json.dumps(list(m.links))
    row["device_scores"] = json.dumps(list(m.device_scores))
    row["state"] = int(m.state)
    row["layer"] = int(m.layer)
    row["negated"] = int(m.negated)
    row["flagged"] = int(m.flagged)
    row["permanent"] = int(m.permanent)
    return row


def from_row(row: Sequence[Any]) -> tuple[int, Memory]:
    """A row of ``_SELECT``: rowid, the columns, the embedding."""
    values = dict(zip(COLUMNS, row[1:-1], strict=True))
    values["embedding"] = bytes(row[-1] or b"")
    values["links"] = tuple(json.loads(values["links"]))
    values["device_scores"] = tuple(json.loads(values["device_scores"]))
    values["state"] = State(values["state"])
    values["layer"] = Layer(values["layer"])
    for name in ("negated", "flagged", "permanent"):
        values[name] = bool(values[name])
    return int(row[0]), Memory(**values)


class Writer:
    """The store's single writer: a re-entrant lock that knows which thread holds it."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.owner: int | None = None
        self._holds = 0

    def held(self) -> bool:
        return self.owner == threading.get_ident()

    def __enter__(self) -> None:
        self._lock.acquire()
        self.owner = threading.get_ident()
        self._holds += 1

    def __exit__(self, *exc: object) -> None:
        self._holds -= 1
        if self._holds == 0:
            self.owner = None
        self._lock.release()


class Store:
    """One SQLite file (or ``":memory:"``), or a schema of a PostgreSQL database
    (:class:`~hirmem.sql.PgTarget`), holding a memory engine's state."""

    def __init__(self, path: str | Path | PgTarget = ":memory:") -> None:
        self.path = str(path)
        self.pg = path if isinstance(path, PgTarget) else None
        self.in_memory = self.path == ":memory:" or self.path.startswith("file::memory:")
        # The write connection: only for the thread that holds ``self.writer``.
        self.db: Connection
        if self.pg is not None:
            self.db = _pg_connect(self.pg)
            store_pg.bootstrap(self.db, self.pg.schema)
        else:
            self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute("PRAGMA foreign_keys=ON")
            # the writer's page cache holds a follow batch's pages (bounded): a batch is
            # written to the WAL once, at commit, not spilled page by page as it grows
            self.db.execute(f"PRAGMA cache_size=-{WRITE_CACHE_KIB}")
        self.writer = Writer()
        self._depth = 0
        self._readers: dict[int, sqlite3.Connection] = {}  # thread id → read connection
        self._readers_lock = threading.Lock()
        # PostgreSQL: read connections lent for one read block each, at most PG_READERS
        # (a server's clients are few; an API's thread pool is not)
        self._pg_idle: list[PgConnection] = []
        self._pg_lent: dict[int, PgConnection] = {}  # thread id → its open read block's
        self._pg_slots = threading.BoundedSemaphore(PG_READERS)
        self.rollback_hooks: list[Callable[[], None]] = []
        # writes held back until the outermost transaction commits, run just before it
        self.commit_hooks: list[Callable[[], None]] = []
        # caches to re-read when another connection wrote the file (see transaction())
        self.reload_hooks: list[Callable[[], None]] = []
        self._data_version: int | None = None
        self.migrate()
        # the file as this connection first saw it: caches read after this are current
        self._data_version = self._writes_seen()

    @property
    def sqlite(self) -> sqlite3.Connection:
        """The write connection of a SQLite store (for SQLite's own calls: backup,
        tracing); a store on PostgreSQL has none."""
        if not isinstance(self.db, sqlite3.Connection):
            raise HirmemError(f"memory store on {self.path} is not a SQLite file")
        return self.db

    def _writes_seen(self) -> int:
        """SQLite's ``data_version``; on PostgreSQL the ``writes`` counter."""
        if isinstance(self.db, PgConnection):
            return int(self.db.execute("SELECT n FROM writes").fetchone()[0])
        return int(self.db.execute("PRAGMA data_version").fetchone()[0])

    # -- schema -------------------------------------------------------------------------
    @property
    def schema_version(self) -> int:
        if isinstance(self.db, PgConnection):
            return store_pg.schema_version(self.db)
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def migrate(self, target: int = SCHEMA_VERSION) -> None:
        current = self.schema_version
        if current > SCHEMA_VERSION:
            raise HirmemError(
                f"memory store {self.path} has schema {current}, this hirmem knows up to "
                f"{SCHEMA_VERSION}: upgrade hirmem"
            )
        for version in range(current, target):
            try:
                with self.transaction():
                    if self.schema_version > version:
                        continue  # another process migrated it meanwhile
                    step = MIGRATIONS[version]
                    if isinstance(step, str):
                        for statement in _statements(step):
                            self._migrate_statement(statement)
                    else:
                        step(self.db)
                    if isinstance(self.db, PgConnection):
                        store_pg.add_own_triggers(self.db, set(TRIGGERS))
                        store_pg.set_schema_version(self.db, version + 1)
                    else:
                        self.db.execute(f"PRAGMA user_version={version + 1}")
            except sqlite3.IntegrityError as exc:
                raise HirmemError(
                    f"memory store {self.path} cannot be upgraded to schema {version + 1}: "
                    f"{exc}; its rows break a rule that schema enforces (for schema 3: one "
                    "repair per version, so a memory repaired twice must be resolved by hand "
                    "in a copy first); the file is unchanged"
                ) from exc

    def _migrate_statement(self, statement: str) -> None:
        """One statement of a migration; on PostgreSQL a trigger is its PL/pgSQL twin."""
        if not isinstance(self.db, PgConnection):
            self.db.execute(statement)
        elif statement.upper().startswith("CREATE TRIGGER"):
            store_pg.restore_triggers(self.db, [statement.split()[2]])
        else:
            self.db.execute(statement)

    def trigger_names(self) -> list[str]:
        """The triggers the schema keeps (on PostgreSQL also its ``*_no_truncate``)."""
        return list(store_pg.PG_TRIGGERS if self.pg is not None else TRIGGERS)

    # -- triggers -----------------------------------------------------------------------
    def missing_triggers(self) -> list[str]:
        """The schema's triggers that are not in the file as the schema wrote them
        (dropped, or replaced by another body under the same name; on PostgreSQL also
        disabled, or running another function)."""
        if self.pg is not None:
            with self.writing() as db:
                assert isinstance(db, PgConnection)
                return store_pg.missing_triggers(db, self.pg.schema, self.trigger_names())
        with self.writing() as db:
            have = {
                str(name): _squeeze(str(sql))
                for name, sql in db.execute(
                    "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"
                )
            }
        return [n for n, sql in TRIGGERS.items() if have.get(n) != _squeeze(sql)]

    def restore_triggers(self, names: Sequence[str]) -> None:
        """Re-create the named triggers from the schema (in the caller's transaction)."""
        with self.writing() as db:
            if isinstance(db, PgConnection):
                store_pg.restore_triggers(db, list(names))
                return
            for name in names:
                db.execute(f"DROP TRIGGER IF EXISTS {name}")
                db.execute(TRIGGERS[name])

    # -- transactions -------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Hold the writer and run one transaction. Nestable: only the outermost level
        begins and commits (or rolls back)."""
        with self.writer:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            self.db.execute("BEGIN" if self.pg is not None else "BEGIN IMMEDIATE")
            self._depth = 1
            try:
                self._notice_other_writers()
                yield
                for hook in self.commit_hooks:
                    hook()
            except BaseException:
                self._depth = 0
                self.db.execute("ROLLBACK")
                if self.pg is not None:
                    self._data_version = None  # its bump is undone: look again next time
                for hook in self.rollback_hooks:  # caches (audit head, recall index) re-read
                    hook()
                raise
            self._depth = 0
            if isinstance(self.db, PgConnection):
                self._count_own_writes(self.db)
            self.db.execute("COMMIT")

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction of the writer is running (on the caller's thread when
        it holds the writer)."""
        return self._depth > 0

    def _notice_other_writers(self) -> None:
        """Inside a fresh transaction: if another connection (a ``hirmem memory`` command
        beside the daemon, another process) committed since this one last looked, the
        caches built on the file (audit head, recall index) are re-read first."""
        if isinstance(self.db, PgConnection):
            store_pg.lock(self.db, self.pg.schema if self.pg else "")  # until COMMIT/ROLLBACK
            version = int(self.db.execute("SELECT n FROM writes").fetchone()[0])
            seen, self._data_version = self._data_version, version
            changed = seen is None or seen != version
        else:
            version = int(self.db.execute("PRAGMA data_version").fetchone()[0])
            seen, self._data_version = self._data_version, version
            changed = seen is not None and seen != version
        if changed:
            for hook in self.reload_hooks:
                hook()

    def _count_own_writes(self, db: PgConnection) -> None:
        """Before COMMIT on PostgreSQL: a transaction that wrote bumps ``writes`` (the
        others' next transaction sees it moved); one that only read commits without a
        write of its own (no WAL flush: a recall stays a read). The writer's lock is
        held, so the count is this store's own last one."""
        version = store_pg.bump_writes(db)
        if version is not None:
            self._data_version = version

    @contextmanager
    def writing(self) -> Iterator[Connection]:
        """Hold the writer (no transaction of its own) and get the write connection.
        On PostgreSQL, outside a transaction, it runs one: its writes are counted and its
        reads see the chain's head under the writer's lock, as SQLite's would."""
        if self.pg is not None and not self._depth:
            with self.transaction():
                yield self.db
            return
        first = not self.writer.held()
        with self.writer:
            if first and not self._depth:
                self._notice_other_writers()
            yield self.db

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A connection to read from, never sharing another thread's transaction.

        The writer's own thread reads its connection (it must see what it is writing);
        any other thread gets its own read-only connection, inside one read transaction
        (one consistent snapshot for the whole block); a ``":memory:"`` store reads
        through the writer. On PostgreSQL the read connection is lent for the block from
        at most :data:`PG_READERS` (a thread past them waits for one).
        """
        if self.writer.held():
            yield self.db
            return
        if self.in_memory:
            with self.writer:
                yield self.db
            return
        if self.pg is not None:
            with self._pg_reading() as pg:
                yield pg
            return
        conn = self._reader()
        if conn.in_transaction:  # a nested read: already inside this thread's snapshot
            yield conn
            return
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")

    @contextmanager
    def _pg_reading(self) -> Iterator[PgConnection]:
        """A read block on PostgreSQL: a connection lent from a bounded set for the block,
        one snapshot (REPEATABLE READ) for all of it; a nested block reuses it."""
        assert self.pg is not None
        ident = threading.get_ident()
        nested = self._pg_lent.get(ident)
        if nested is not None:
            yield nested
            return
        with self._pg_slots:
            with self._readers_lock:
                conn = self._pg_idle.pop() if self._pg_idle else None
            if conn is None or conn.raw.closed:
                conn = _pg_connect(self.pg)
            self._pg_lent[ident] = conn
            healthy = False
            try:
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                yield conn
                conn.execute("COMMIT")
                healthy = True
            finally:
                del self._pg_lent[ident]
                if not healthy:
                    with suppress(Exception):
                        conn.close()  # its transaction's state is unknown: not lent again
                else:
                    with self._readers_lock:
                        self._pg_idle.append(conn)

    def _reader(self) -> sqlite3.Connection:
        ident = threading.get_ident()
        with self._readers_lock:
            conn = self._readers.get(ident)
            if conn is None:
                alive = {t.ident for t in threading.enumerate()}
                for gone in [k for k in self._readers if k not in alive]:  # bounded: live threads
                    self._readers.pop(gone).close()
                conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
                conn.execute("PRAGMA query_only=ON")
                self._readers[ident] = conn
            return conn

    def close(self) -> None:
        with self._readers_lock:
            for conn in self._readers.values():
                conn.close()
            self._readers.clear()
            for pg in self._pg_idle:
                pg.close()
            self._pg_idle.clear()
        with self.writer:
            self.db.close()

    # -- memories -----------------------------------------------------------------------
    def insert(self, m: Memory) -> int:
        names = ", ".join(COLUMNS)
        marks = ", ".join(f":{c}" for c in COLUMNS)
        try:
            with self.writing() as db:
                cur = db.execute(f"INSERT INTO memories ({names}) VALUES ({marks})", to_row(m))
                rowid = int(cur.lastrowid or 0)
                db.execute("INSERT INTO embeddings(memory, vector) VALUES (?, ?)",
                           (rowid, m.embedding))  # fmt: skip
        except sqlite3.IntegrityError as exc:
            raise HirmemError(f"memory {m.id} cannot be stored: {exc}") from exc
        return rowid

    def insert_many(self, ms: Sequence[Memory]) -> list[int]:
        """Insert new memories and their embeddings with one statement each; returns
        their rowids, in order (given explicitly: the writer holds the transaction)."""
        names = ", ".join(COLUMNS)
        marks = ", ".join(f":{c}" for c in COLUMNS)
        try:
            with self.writing() as db:
                rowids = self._new_rowids(db, len(ms))
                rows = [to_row(m) for m in ms]
                for rowid, row in zip(rowids, rows, strict=True):
                    row["rowid"] = rowid
                db.executemany(
                    f"INSERT INTO memories (rowid, {names}) VALUES (:rowid, {marks})", rows
                )
                db.executemany("INSERT INTO embeddings(memory, vector) VALUES (?, ?)",
                               zip(rowids, (m.embedding for m in ms), strict=True))  # fmt: skip
        except sqlite3.IntegrityError as exc:
            raise HirmemError(f"memories {ms[0].id}… cannot be stored: {exc}") from exc
        return rowids

    def insert_admitted(
        self, rows: Sequence[Sequence[Any]], vectors: Sequence[bytes | bytearray], seq: int
    ) -> None:
        """Insert a device pack's fresh memories, their embeddings, and where audit entry
        ``seq`` lists each of them (``admissions``: position k for the k-th row), one
        statement each. A row is its rowid (from :meth:`new_rowids`) then the
        :data:`ADMIT_COLUMNS`; the columns every fresh row holds alike are written as
        constants (:data:`ADMIT_CONSTANTS`)."""
        try:
            with self.writing() as db:
                db.executemany(_INSERT_ADMITTED, rows)
                rowids = [row[0] for row in rows]
                db.executemany("INSERT INTO embeddings(memory, vector) VALUES (?, ?)",
                               zip(rowids, vectors, strict=True))  # fmt: skip
                db.executemany("INSERT INTO admissions(memory, seq, pos) VALUES (?, ?, ?)",
                               [(r, seq, k) for k, r in enumerate(rowids)])  # fmt: skip
        except sqlite3.IntegrityError as exc:
            raise HirmemError(f"memories {rows[0][1]}… cannot be stored: {exc}") from exc

    def new_rowids(self, n: int) -> list[int]:
        """Rowids for ``n`` memories about to be inserted (under the writer): SQLite's own
        choice (max + 1 …), or numbers drawn from the identity's sequence on PostgreSQL
        (which a plain insert uses)."""
        with self.writing() as db:
            return self._new_rowids(db, n)

    def _new_rowids(self, db: Connection, n: int) -> list[int]:
        if self.pg is not None:
            rows = db.execute(
                "SELECT nextval(pg_get_serial_sequence('memories', 'rowid')) "
                "FROM generate_series(1, ?)", (n,)
            ).fetchall()
            return [int(r[0]) for r in rows]
        first = int(db.execute("SELECT coalesce(max(rowid), 0) FROM memories").fetchone()[0]) + 1
        return list(range(first, first + n))

    def hashes_of(self, memory_ids: Sequence[str]) -> dict[str, bytes]:
        """The content hashes of those of ``memory_ids`` that are stored."""
        out: dict[str, bytes] = {}
        with self.reading() as db:
            for k in range(0, len(memory_ids), 500):
                chunk = list(memory_ids[k : k + 500])
                marks = ",".join("?" * len(chunk))
                for mid, digest in db.execute(
                    f"SELECT id, hash FROM memories WHERE id IN ({marks})", chunk
                ):
                    out[str(mid)] = bytes(digest)
        return out

    def update(self, m: Memory) -> int:
        """Write the mutable fields of ``m`` (content fields are immutable, and so is the
        embedding, in its own table); returns the row's rowid. A derived memory's
        episodes stay out of its row (see :meth:`_linked`)."""
        with self.writing() as db:
            if m.kind in DERIVED_KINDS and m.links:
                episodes = set(self._linked(db, m.replace(links=())).links)
                m = m.replace(links=tuple(x for x in m.links if x not in episodes))
            row = to_row(m)
            got = db.execute(_UPDATE, row).fetchone()
        if got is None:
            raise HirmemError(f"memory {m.id} is not in the store")
        return int(got[0])

    def delete_volatile(self, memory_id: str) -> None:
        with self.writing() as db:
            db.execute("DELETE FROM memories WHERE id = ?", (memory_id,))

    def get(self, memory_id: str) -> Memory | None:
        with self.reading() as db:
            row = db.execute(_SELECT + " WHERE id = ?", (memory_id,)).fetchone()
            return None if row is None else self._linked(db, from_row(row)[1])

    @staticmethod
    def _linked(db: Connection, m: Memory) -> Memory:
        """A derived memory (a pattern, a learnt procedure) with the episodes it rests on
        among its links: they are kept in ``distill_links`` (the distillation's table),
        never in its row, which a pack's step would otherwise rewrite with up to
        ``distill_max_episodes`` ids. Every episode it was distilled from, in the order
        they came (their rowids' order), except those quarantined since (it is rebuilt
        without them)."""
        if m.kind not in DERIVED_KINDS:
            return m
        rowids: list[int] = []
        for (distillate,) in db.execute(
            "SELECT rowid FROM distillates WHERE memory_id = ? ORDER BY rowid", (m.id,)
        ).fetchall():
            rowids += linked_rowids(db, int(distillate))
        episodes = ids_at(db, rowids, "state != 3")
        return m.replace(links=tuple(dict.fromkeys((*m.links, *episodes)))) if episodes else m

    def hash_of(self, memory_id: str) -> bytes | None:
        """The content hash a memory is stored with (a cheap "is it held?")."""
        with self.reading() as db:
            row = db.execute("SELECT hash FROM memories WHERE id = ?", (memory_id,)).fetchone()
        return None if row is None else bytes(row[0])

    def rowid(self, memory_id: str) -> int | None:
        with self.reading() as db:
            row = db.execute("SELECT rowid FROM memories WHERE id = ?", (memory_id,)).fetchone()
        return None if row is None else int(row[0])

    def select(self, where: str = "", params: Sequence[Any] = (), tail: str = "") -> list[Memory]:
        sql = _SELECT + (f" WHERE {where}" if where else "") + (f" {tail}" if tail else "")
        with self.reading() as db:
            rows = db.execute(sql, tuple(params)).fetchall()
            return [self._linked(db, from_row(row)[1]) for row in rows]

    def select_rows(self, where: str = "", params: Sequence[Any] = ()) -> list[tuple[int, Memory]]:
        sql = _SELECT + (f" WHERE {where}" if where else "") + " ORDER BY rowid"
        with self.reading() as db:
            rows = db.execute(sql, tuple(params)).fetchall()
            return [(r, self._linked(db, m)) for r, m in map(from_row, rows)]

    def count(self, where: str = "", params: Sequence[Any] = ()) -> int:
        sql = "SELECT count(*) FROM memories" + (f" WHERE {where}" if where else "")
        with self.reading() as db:
            return int(db.execute(sql, tuple(params)).fetchone()[0])

    def counts_by(self, column: str) -> dict[int, int]:
        if column not in ("state", "layer"):
            raise HirmemError(f"cannot count by {column}")
        out: dict[int, int] = {}
        for (state, layer), n in self.counts_by_state_layer().items():
            key = state if column == "state" else layer
            out[key] = out.get(key, 0) + n
        return out

    def counts_by_state_layer(self) -> dict[tuple[int, int], int]:
        """Memories per (state, layer), from the ``memories_state_layer`` index alone."""
        with self.reading() as db:
            rows = db.execute("SELECT state, layer, count(*) FROM memories GROUP BY state, layer")
            return {(int(s), int(x)): int(n) for s, x, n in rows}

    # -- meta ---------------------------------------------------------------------------
    def meta(self, key: str, default: str | None = None) -> str | None:
        with self.reading() as db:
            row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return default if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        with self.writing() as db:
            db.execute(
                "INSERT INTO meta(key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, value),
            )


def _pg_connect(target: PgTarget) -> PgConnection:
    try:
        return PgConnection(target.conninfo, target.schema)
    except sqlite3.Error as exc:
        raise HirmemError(f"memory store on {target}: {exc}") from None


def _squeeze(sql: str) -> str:
    """A statement's text with runs of white space as one space and no final ';'."""
    return " ".join(sql.split()).rstrip(";").rstrip()


def _statements(script: str) -> list[str]:
    """Split a migration into statements (triggers contain ';' inside BEGIN … END)."""
    out: list[str] = []
    buf = ""
    for line in script.strip().splitlines():
        buf += line + "\n"
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out


# Every trigger of the schema, by name: what the store checks on open.
TRIGGERS: dict[str, str] = {
    stmt.split()[2]: stmt
    for script in MIGRATIONS
    if isinstance(script, str)
    for stmt in _statements(script)
    if stmt.upper().startswith("CREATE TRIGGER")
}
