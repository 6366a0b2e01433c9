"""The host's durable store: the device registry, the pack intake, knowledge versions.

One SQLite database in WAL mode with ``synchronous=FULL``: a transaction that
returned from COMMIT survives a killed process and a power cut. The daemon's
sessions take device packs through :meth:`Store.take_pack`, which verifies and
stores a pack in one transaction, so a PACK_RESULT (sent after it returns) only
ever acknowledges a pack that is on disk. A pack offered again (a lost
PACK_RESULT, a device reset, a restarted daemon) is found by its SHA-256 and gets
the same answer without a second copy; a refused pack is recorded with its
reason, once per distinct pack, with a count of offers.

Tables (schema version in ``PRAGMA user_version``, migrations below):

- ``devices``: id, Ed25519 public key and kid, board, firmware, last boot counter,
  first and last seen, the chain head (seq and hash of the last accepted pack).
- ``packs``: every accepted device pack, bytes exactly as signed.
- ``records``: every record of every accepted pack, in arrival (``rowid``) order: its id,
  its hash and its place (pack, index); its fields are read from the pack's bytes.
- ``refusals``: refused packs with their reason (§8.4), detail and offer count.
- ``record_conflicts``: records of accepted packs whose id an earlier, different record
  already holds (a device that reused ids after losing its boot counter).
- ``knowledge`` / ``device_knowledge``: host-signed knowledge packs and which
  device holds (or refused) which version.
- ``device_counters``: the daemon's per-device counters, saved as it runs, so that
  ``hirmem status`` can read them from another process.

One connection, guarded by a lock: the daemon's device threads share it.
"""

from __future__ import annotations

import functools
import hashlib
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hirmem.protocol import cbor
from hirmem.protocol.clock import now_ms
from hirmem.protocol.errors import HirmemError, PackError
from hirmem.protocol.keys import ID_SIZE, PublicKey, key_id
from hirmem.protocol.packs import (
    ChainHead,
    Pack,
    PackKind,
    Reason,
    TrustedKey,
    read_unverified,
    verify_pack,
)
from hirmem.protocol.records import Record

MIGRATIONS: tuple[str, ...] = (
    # 1: registry, intake, refusals, knowledge, counters
    """
    CREATE TABLE devices (
        device_id   BLOB PRIMARY KEY CHECK (length(device_id) = 8),
        public_key  BLOB NOT NULL CHECK (length(public_key) = 32),
        kid         BLOB NOT NULL UNIQUE CHECK (length(kid) = 8),
        board       TEXT NOT NULL DEFAULT '',
        firmware    TEXT NOT NULL DEFAULT '',
        boot        INTEGER NOT NULL DEFAULT 0,
        registered  INTEGER NOT NULL,
        first_seen  INTEGER,
        last_seen   INTEGER,
        head_seq    INTEGER,
        head_hash   BLOB
    );
    CREATE TABLE packs (
        pack_id     BLOB PRIMARY KEY,
        device_id   BLOB NOT NULL REFERENCES devices(device_id),
        seq         INTEGER NOT NULL,
        hash        BLOB NOT NULL UNIQUE,
        prev        BLOB NOT NULL,
        created     INTEGER NOT NULL,
        received    INTEGER NOT NULL,
        nrecords    INTEGER NOT NULL,
        raw         BLOB NOT NULL,
        UNIQUE (device_id, seq)
    );
    CREATE TABLE records (
        id          BLOB PRIMARY KEY,
        device_id   BLOB NOT NULL,
        pack_id     BLOB NOT NULL REFERENCES packs(pack_id),
        idx         INTEGER NOT NULL,
        payload     BLOB NOT NULL,
        source      TEXT NOT NULL,
        timestamp   INTEGER NOT NULL,
        context     BLOB NOT NULL,
        flags       INTEGER NOT NULL,
        h INTEGER NOT NULL, i INTEGER NOT NULL, r INTEGER NOT NULL,
        f INTEGER NOT NULL, c INTEGER NOT NULL, rn INTEGER NOT NULL,
        confidence  INTEGER NOT NULL,
        provenance  INTEGER NOT NULL,
        priority    INTEGER NOT NULL,
        w           INTEGER NOT NULL,
        state       INTEGER NOT NULL,
        layer       INTEGER NOT NULL,
        hash        BLOB NOT NULL,
        prev_hash   BLOB NOT NULL
    );
    CREATE INDEX records_device ON records(device_id);
    CREATE TABLE refusals (
        sha256      BLOB PRIMARY KEY,
        device_id   BLOB NOT NULL,
        reason      INTEGER NOT NULL,
        detail      TEXT NOT NULL,
        pack_id     BLOB,
        seq         INTEGER,
        size        INTEGER NOT NULL,
        first_at    INTEGER NOT NULL,
        last_at     INTEGER NOT NULL,
        offers      INTEGER NOT NULL,
        raw         BLOB NOT NULL
    );
    CREATE TABLE knowledge (
        seq         INTEGER PRIMARY KEY,
        pack_id     BLOB NOT NULL,
        hash        BLOB NOT NULL,
        created     INTEGER NOT NULL,
        nitems      INTEGER NOT NULL,
        raw         BLOB NOT NULL
    );
    CREATE TABLE device_knowledge (
        device_id   BLOB NOT NULL REFERENCES devices(device_id),
        seq         INTEGER NOT NULL,
        status      TEXT NOT NULL,
        reason      INTEGER NOT NULL DEFAULT 0,
        held_seq    INTEGER NOT NULL DEFAULT 0,
        updated     INTEGER NOT NULL,
        PRIMARY KEY (device_id, seq)
    );
    CREATE TABLE device_counters (
        device_id   BLOB NOT NULL,
        name        TEXT NOT NULL,
        value       INTEGER NOT NULL,
        PRIMARY KEY (device_id, name)
    );
    CREATE TABLE device_sessions (
        device_id   BLOB PRIMARY KEY,
        url         TEXT NOT NULL,
        state       TEXT NOT NULL,
        since       INTEGER NOT NULL
    );
    """,
    # 2: a record id seen again with other contents (a device whose boot counter did not
    # advance across a power cycle reuses ids); kept here, never dropped
    """
    CREATE TABLE record_conflicts (
        id          BLOB NOT NULL,
        pack_id     BLOB NOT NULL REFERENCES packs(pack_id),
        idx         INTEGER NOT NULL,
        hash        BLOB NOT NULL,
        wire        BLOB NOT NULL,
        PRIMARY KEY (pack_id, idx)
    );
    """,
)

# A refusal is kept as a digest: reason, detail, size, SHA-256 and the first
# REFUSAL_KEEP bytes offered. Each line device keeps its REFUSALS_PER_DEVICE most
# recent distinct digests, the store REFUSALS_TOTAL over all devices; older ones are
# rotated out and counted (refusals_rotated). Bound: about REFUSALS_TOTAL x 1 KiB.
REFUSAL_KEEP = 256
REFUSAL_DETAIL = 240  # characters of the refusal's detail kept
REFUSALS_PER_DEVICE = 256
REFUSALS_TOTAL = 8192

# Every u64 the SPEC allows (pack seq, created, record timestamps, STATUS counters,
# knowledge seqs) is stored as ``value - 2**63``: an order-preserving map onto
# SQLite's signed 64-bit integers, so ORDER BY, max() and comparisons still work.
# Migration 3 moves the values older stores kept as they were (all below 2**63).
U64_COLUMNS: tuple[tuple[str, str], ...] = (
    ("packs", "seq"), ("packs", "created"), ("records", "timestamp"),
    ("devices", "head_seq"), ("refusals", "seq"), ("knowledge", "seq"),
    ("knowledge", "created"), ("device_knowledge", "seq"),
    ("device_knowledge", "held_seq"), ("device_counters", "value"),
)  # fmt: skip
_SHIFT_SQL = "-9223372036854775807 - 1"  # -2**63 (the literal 2**63 is no SQLite integer)
MIGRATIONS = (
    *MIGRATIONS,
    # 3: u64 columns shifted by -2**63 (see U64_COLUMNS)
    ";".join(
        f"UPDATE {table} SET {column} = {column} + ({_SHIFT_SQL}) WHERE {column} IS NOT NULL"
        for table, column in U64_COLUMNS
    ),
    # 4: the records of a pack found by index (the integrity check counts them per pack:
    # without it, a full scan per pack made the check quadratic)
    "CREATE INDEX records_pack ON records(pack_id)",
    # 5: refusals are a bounded digest (see REFUSAL_KEEP, REFUSALS_PER_DEVICE): the
    # bytes kept are cut to their head, and digests rotated out are counted per device
    f"""
    UPDATE refusals SET raw = substr(raw, 1, {REFUSAL_KEEP});
    CREATE INDEX refusals_device ON refusals(device_id, last_at);
    CREATE TABLE refusals_rotated (
        device_id   BLOB PRIMARY KEY,
        digests     INTEGER NOT NULL,
        offers      INTEGER NOT NULL
    );
    """,
    # 6: what a device's last HELLO said it can take (NULL until it sent one), so that
    # `hirmem push` can refuse a knowledge version a known device could never receive
    """
    ALTER TABLE devices ADD COLUMN capabilities INTEGER;
    ALTER TABLE devices ADD COLUMN max_frame INTEGER;
    ALTER TABLE devices ADD COLUMN max_message INTEGER;
    ALTER TABLE devices ADD COLUMN host_kid BLOB;
    """,
    # 7: the name the daemon's configuration gives the device's line
    "ALTER TABLE device_sessions ADD COLUMN name TEXT NOT NULL DEFAULT ''",
    # 8: the fleet outbox (hirmem.daemon.outbox): accepted packs the fleet has not yet
    # acknowledged, filled in the transaction that stores a pack while an outbox is
    # enabled; the fleet's permanent refusals; one row of outbox state and figures
    """
    CREATE TABLE outbox (
        pack_id     BLOB PRIMARY KEY REFERENCES packs(pack_id),
        device_id   BLOB NOT NULL,
        received    INTEGER NOT NULL,
        size        INTEGER NOT NULL
    );
    CREATE TABLE fleet_refusals (
        pack_id     BLOB PRIMARY KEY REFERENCES packs(pack_id),
        device_id   BLOB NOT NULL,
        status      INTEGER NOT NULL,
        reason      TEXT NOT NULL,
        detail      TEXT NOT NULL,
        at          INTEGER NOT NULL
    );
    CREATE TABLE fleet_outbox (
        one             INTEGER PRIMARY KEY CHECK (one = 1),
        url             TEXT NOT NULL,
        enabled_at      INTEGER NOT NULL,
        filled_through  INTEGER NOT NULL,
        max_packs       INTEGER NOT NULL,
        max_bytes       INTEGER NOT NULL,
        acked           INTEGER NOT NULL DEFAULT 0,
        refused         INTEGER NOT NULL DEFAULT 0,
        errors          INTEGER NOT NULL DEFAULT 0,
        deferred        INTEGER NOT NULL DEFAULT 0,
        full_since      INTEGER,
        last_ok_at      INTEGER,
        last_error      TEXT,
        last_error_at   INTEGER
    );
    """,
    # 9: the knowledge a device's last HELLO says it keeps (facts per pack, longest text;
    # 0: not stated), so that `hirmem push` and the daemon refuse a version it cannot
    """
    ALTER TABLE devices ADD COLUMN knowledge_facts INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE devices ADD COLUMN knowledge_text INTEGER NOT NULL DEFAULT 0;
    """,
    # 10: no index of records by device: a record's id begins with its device's id (the
    # intake refuses any other), so the primary key's index finds a device's records
    # as a range of ids (see _device_range); the second index cost every stored record
    "DROP INDEX records_device",
    # 11: a record row is its place in its pack (pack, index), its id and its hash; its
    # fields are read from the pack's bytes as signed (packs.raw), not kept twice
    """
    CREATE TABLE records_at (
        id          BLOB PRIMARY KEY,
        device_id   BLOB NOT NULL,
        pack_id     BLOB NOT NULL REFERENCES packs(pack_id),
        idx         INTEGER NOT NULL,
        hash        BLOB NOT NULL
    );
    INSERT INTO records_at (rowid, id, device_id, pack_id, idx, hash)
        SELECT rowid, id, device_id, pack_id, idx, hash FROM records ORDER BY rowid;
    DROP TABLE records;
    ALTER TABLE records_at RENAME TO records;
    CREATE INDEX records_pack ON records(pack_id)
    """,
)


def _device_range(device_id: bytes) -> tuple[str, tuple[bytes, ...]]:
    """The ``records`` rows of one device as a range of their ids (which begin with the
    device id): a WHERE clause the primary key's index answers, and its arguments. The
    device column is compared too, so the answer is exact whatever the ids hold."""
    after = int.from_bytes(device_id, "big") + 1
    if after >> (8 * len(device_id)):  # ff…ff: no id comes after its range
        return "id >= ? AND device_id = ?", (device_id, device_id)
    return ("id >= ? AND id < ? AND device_id = ?",
            (device_id, after.to_bytes(len(device_id), "big"), device_id))  # fmt: skip

U64_OFFSET = 1 << 63


def u64_in(value: int) -> int:
    """A u64 as the store keeps it (order preserved)."""
    if not 0 <= value < 1 << 64:
        raise StoreError(f"{value} is not a u64 (0..2^64-1)")
    return value - U64_OFFSET


def u64_out(stored: object) -> int:
    """A stored u64 column back to its value."""
    return int(stored) + U64_OFFSET  # type: ignore[call-overload, no-any-return]


# A pack's records in one INSERT of many rows (up to RECORDS_PER_INSERT, within SQLite's
# variable limit); an id already held is skipped, and told apart from a conflict
# afterwards (Store._record_conflicts)
RECORDS_PER_INSERT = 256
# BLOB parameters are bound as bytearrays on the intake's path: sqlite3 binds int, float,
# str and bytearray values as they are, and offers every other value (bytes too) to its
# adapter registry first (a registry lookup and two failed attribute lookups, which cost
# several times the copy)


@functools.lru_cache(maxsize=RECORDS_PER_INSERT)
def _insert_records_sql(rows: int, start: int = 0) -> str:
    """The INSERT of ``rows`` records of one pack, the first at index ``start`` in the
    pack. Parameters: ?1 the device, ?2 the pack id, then each record's id and hash (its
    index is written in the statement)."""
    values = [f"(?{3 + 2 * j}, ?1, ?2, {start + j}, ?{4 + 2 * j})" for j in range(rows)]
    return f"INSERT INTO records VALUES {', '.join(values)} ON CONFLICT (id) DO NOTHING"


# Records (and conflicting records) stored for one pack: the integrity check runs it
# once per pack, so both lookups must use an index.
PACK_RECORDS_SQL = (
    "SELECT (SELECT count(*) FROM records WHERE pack_id = ?) + "
    "(SELECT count(*) FROM record_conflicts WHERE pack_id = ?)"
)



class StoreError(HirmemError):
    """The store cannot do what was asked (unknown device, a bad key, a damaged file)."""



@dataclass(frozen=True, slots=True)
class DeviceRow:
    device_id: bytes
    public_key: bytes
    kid: bytes
    board: str
    firmware: str
    boot: int
    registered: int
    first_seen: int | None
    last_seen: int | None
    head: ChainHead | None  # None until a pack was accepted


@dataclass(frozen=True, slots=True)
class DeviceLimits:
    """What a device's HELLO said it can take (SPEC §5.2)."""

    capabilities: int
    max_frame: int
    max_message: int
    host_kid: bytes  # the knowledge key it trusts; empty: none
    knowledge_facts: int = 0  # facts it keeps from one pack; 0: not stated
    knowledge_text: int = 0  # longest text of a fact it keeps, in bytes; 0: not stated


@dataclass(frozen=True, slots=True)
class Intake:
    """What :meth:`Store.take_pack` decided; the session turns it into a PACK_RESULT."""

    status: str  # "accepted", "duplicate", "refused" or "deferred" (the outbox is full)
    reason: Reason
    pack_id: bytes  # 16 zero bytes when the pack could not be read that far
    seq: int
    detail: str
    records: int = 0  # records stored (accepted only)
    conflicts: tuple[bytes, ...] = ()  # ids of records kept in record_conflicts instead


@dataclass(frozen=True, slots=True)
class StoredPack:
    pack_id: bytes
    device_id: bytes
    seq: int
    hash: bytes
    prev: bytes
    created: int
    received: int
    nrecords: int


@dataclass(frozen=True, slots=True)
class Refusal:
    sha256: bytes
    device_id: bytes
    reason: Reason
    detail: str
    pack_id: bytes | None
    seq: int | None
    size: int
    first_at: int
    last_at: int
    offers: int


@dataclass(frozen=True, slots=True)
class KnowledgeRow:
    seq: int
    pack_id: bytes
    hash: bytes
    created: int
    nitems: int
    raw: bytes


@dataclass(frozen=True, slots=True)
class WriteHealth:
    """How the store's writes went: the last failure (None when the last write
    succeeded), when, how many failed since the store was opened, and when the last
    one succeeded. ``writable`` is what ``/healthz`` reports."""

    writable: bool
    last_error: str | None
    last_error_at: int | None  # ms since the epoch
    last_ok_at: int | None
    failures: int


@dataclass(frozen=True, slots=True)
class StoreFigures:
    """What the store holds, per device, read in one snapshot for the metrics."""

    packs: dict[bytes, int]
    records: dict[bytes, int]
    record_conflicts: dict[bytes, int]
    refusals: dict[tuple[bytes, Reason], int]  # digests kept, by line device and reason
    refused_offers: dict[bytes, int]  # offers refused: kept digests' and rotated ones'
    refusals_rotated: dict[bytes, int]  # digests rotated out
    integrity_warnings: int
    devices: int  # registered
    size_bytes: int  # pages in use x page size


ZERO_PACK_ID = bytes(16)
KEYS_KEPT = 4096  # verifier keys kept made (the cache starts over when it is full)
FLEET_DETAIL = 400  # characters of a fleet refusal's or error's text kept


@dataclass(frozen=True, slots=True)
class OutboxPack:
    """An accepted pack the fleet has not acknowledged yet."""

    pack_id: bytes
    device_id: bytes
    seq: int
    received: int  # ms since the epoch
    raw: bytes


@dataclass(frozen=True, slots=True)
class FleetRefusal:
    pack_id: bytes
    device_id: bytes
    status: int  # the HTTP status
    reason: str  # the problem's machine-readable reason
    detail: str
    at: int


@dataclass(frozen=True, slots=True)
class OutboxStatus:
    """The fleet outbox as ``hirmem status`` and ``/metrics`` show it."""

    url: str
    depth: int  # packs not acknowledged
    size: int  # their bytes
    oldest_received: int | None  # ms since the epoch of the oldest unsent pack
    max_packs: int
    max_bytes: int
    full_since: int | None  # the bound was reached then (intake defers new packs)
    acked: int
    refused: int  # packs the fleet refused for good (see fleet_refusals)
    errors: int  # failed attempts (network, 5xx, 429, 401)
    deferred: int  # device packs deferred at intake because the outbox was full
    last_ok_at: int | None
    last_error: str | None
    last_error_at: int | None
    per_device: dict[bytes, tuple[int, int]]  # device -> (unsent, oldest received)

    @property
    def full(self) -> bool:
        return self.full_since is not None


GROUP_MAX = 256  # packs committed in one transaction at most (take_pack, take_packs)

# Accepted packs as the verifier decoded them, by hash, oldest first: packs_since hands a
# reader in this process the verifier's objects instead of decoding the bytes again.
# Process-wide, because a reader opens its own Store (the daemon's memory keeper does);
# keyed by the hash that names the bytes, so a pack whose transaction rolled back is one
# no reader asks for. Bound: DECODED_KEPT packs, about 12 KiB each (2,048: 25 MiB, the
# lag of a follower two seconds behind 1,000 packs/s).
DECODED_KEPT = 2048
# an OrderedDict: a plain dict's first key, after many deletions at its front, is found
# by skipping every deleted slot before it (until the table is rebuilt)
_DECODED: OrderedDict[bytes, Pack] = OrderedDict()
_DECODED_LOCK = threading.Lock()


def _keep_decoded(pack: Pack) -> None:
    with _DECODED_LOCK:
        _DECODED[pack.hash] = pack
        while len(_DECODED) > DECODED_KEPT:
            _DECODED.popitem(last=False)  # the oldest


def _stored_pack(name: str, raw: bytes, digest: bytes, device_id: bytes, kid: bytes) -> Pack:
    """A stored pack's bytes back as the pack: checked against the hash recorded when it
    was accepted and against its device's key id (see :meth:`Store.packs_since`), taken
    as the verifier decoded it when this process accepted it (``_DECODED``), else read
    again from the bytes."""
    data = bytes(raw)
    data_hash = hashlib.sha256(data).digest()
    if data_hash != bytes(digest):
        raise StoreError(f"{name} changed since it was verified: its bytes do not match the "
                         "hash recorded when it was accepted")  # fmt: skip
    try:
        pack = _DECODED.get(data_hash) or read_unverified(data, PackKind.MEMORY)
    except PackError as exc:
        raise StoreError(f"{name} is not well formed any more: {exc}") from None
    if pack.kid != bytes(kid) or pack.signer != bytes(device_id):
        raise StoreError(f"{name} is signed by key {pack.kid.hex()} for {pack.signer.hex()}, "
                         f"not by device {bytes(device_id).hex()}'s key {bytes(kid).hex()}")
    return pack


class _Offer:
    """A pack waiting for a group commit, then its answer (or the error)."""

    __slots__ = ("data", "device", "done", "error", "intake", "wake")

    def __init__(self, device: bytes, data: bytes) -> None:
        self.device = device
        self.data = data
        self.done = False
        # held until the offer is answered or its thread is to lead the next commit
        self.wake = threading.Lock()
        self.wake.acquire()
        self.intake: Intake | None = None
        self.error: BaseException | None = None

    def outcome(self) -> Intake:
        if self.error is not None:
            raise self.error
        assert self.intake is not None
        return self.intake


class Store:
    """The host database. Open with :meth:`open`; usable as a context manager."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        self._write_failures = 0
        self._write_error: tuple[str, int] | None = None  # the last write's failure
        self._write_ok_at: int | None = None
        self._reader: sqlite3.Connection | None = None  # figures(): its own snapshot
        self._reader_lock = threading.Lock()
        # the outbox bound while an outbox is enabled in this process: (max packs,
        # max bytes, packs, bytes); the counts are refreshed by outbox_status()
        self._outbox: list[int] | None = None
        self.intake_commits = 0  # transactions that committed offered packs
        self.intake_offers = 0  # packs they answered (accepted, duplicate, refused…)
        # packs offered by threads waiting for the store (see take_pack: group commit)
        self._offers: list[_Offer] = []
        self._group = threading.Lock()  # guards _offers and _leading
        self._leading = False  # a thread is committing offered packs
        # verifier keys made from registered devices' rows (see _trusted_key)
        self._keys: dict[tuple[bytes, bytes], TrustedKey] = {}
        try:
            self._db = sqlite3.connect(
                str(self.path), isolation_level=None, check_same_thread=False, timeout=30
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: cannot open the store: {exc}") from None

    def close(self) -> None:
        with self._lock:
            self._db.close()
        with self._reader_lock:
            if self._reader is not None:
                self._reader.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- schema ------------------------------------------------------------------------

    def _migrate(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > len(MIGRATIONS):
            raise StoreError(
                f"{self.path} has schema version {version}, newer than this hirmem "
                f"({len(MIGRATIONS)}): upgrade hirmem"
            )
        for number in range(version, len(MIGRATIONS)):
            with self._transaction():
                for statement in MIGRATIONS[number].split(";"):
                    if statement.strip():
                        self._db.execute(statement)
                self._db.execute(f"PRAGMA user_version = {number + 1}")

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE … COMMIT under the lock; ROLLBACK on any exception.

        A COMMIT that fails (SQLITE_FULL on a full disk) may leave the transaction
        open: it is rolled back too, so the next write starts clean once space is back.
        """
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    yield self._db
                    self._db.execute("COMMIT")
                except BaseException:
                    if self._db.in_transaction:
                        with suppress(sqlite3.Error):
                            self._db.execute("ROLLBACK")
                    raise
            except (sqlite3.Error, OSError) as exc:  # the file, not the caller's data
                self._write_failures += 1
                self._write_error = (f"{type(exc).__name__}: {exc}", now_ms())
                raise
            self._write_error = None
            self._write_ok_at = now_ms()

    def write_health(self) -> WriteHealth:
        """Whether the last write went through (see :class:`WriteHealth`)."""
        error = self._write_error
        return WriteHealth(
            error is None,
            None if error is None else error[0],
            None if error is None else error[1],
            self._write_ok_at,
            self._write_failures,
        )

    # ---- registry ------------------------------------------------------------------------

    def register_device(self, device_id: bytes, public_key: bytes, board: str = "") -> DeviceRow:
        """Trust ``public_key`` for ``device_id``. Registering the same pair again is a no-op;
        another key for a known device, or a key already trusted for another device, is an error.
        """
        if len(device_id) != ID_SIZE:
            raise StoreError(f"a device id is {ID_SIZE} bytes, got {len(device_id)}")
        PublicKey(public_key)  # 32 bytes
        kid = key_id(public_key)
        with self._transaction() as db:
            row = db.execute(
                "SELECT public_key FROM devices WHERE device_id = ?", (device_id,)
            ).fetchone()
            if row is not None:
                if row[0] != public_key:
                    raise StoreError(
                        f"device {device_id.hex()} is registered with another key; "
                        "remove it first (hirmem device remove) if the key was replaced"
                    )
            else:
                other = db.execute("SELECT device_id FROM devices WHERE kid = ?", (kid,)).fetchone()
                if other is not None:
                    raise StoreError(
                        f"key {kid.hex()} is already trusted for device {other[0].hex()}"
                    )
                db.execute(
                    "INSERT INTO devices (device_id, public_key, kid, board, registered) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (device_id, public_key, kid, board, now_ms()),
                )
        found = self.device(device_id)
        assert found is not None
        return found

    def remove_device(self, device_id: bytes) -> None:
        """Stop trusting a device's key. Its packs and records stay (they were verified)."""
        with self._transaction() as db:
            held = db.execute(
                "SELECT count(*) FROM packs WHERE device_id = ?", (device_id,)
            ).fetchone()[0]
            if held:
                raise StoreError(
                    f"device {device_id.hex()} has {held} stored packs; its registration "
                    "is their provenance and is kept"
                )
            db.execute("DELETE FROM device_knowledge WHERE device_id = ?", (device_id,))
            if db.execute("DELETE FROM devices WHERE device_id = ?", (device_id,)).rowcount == 0:
                raise StoreError(f"device {device_id.hex()} is not registered")

    def device(self, device_id: bytes) -> DeviceRow | None:
        with self._lock:
            row = self._db.execute(
                "SELECT * FROM devices WHERE device_id = ?", (device_id,)
            ).fetchone()
        return None if row is None else _device_row(row)

    def devices(self) -> list[DeviceRow]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM devices ORDER BY device_id").fetchall()
        return [_device_row(r) for r in rows]

    def trusted_keys(self) -> dict[bytes, TrustedKey]:
        """Every registered device key, by kid, for :func:`hirmem.protocol.packs.verify_pack`."""
        return {
            d.kid: TrustedKey(PublicKey(d.public_key), d.device_id, PackKind.MEMORY)
            for d in self.devices()
        }

    def seen(
        self,
        device_id: bytes,
        board: str,
        firmware: str,
        boot: int,
        limits: DeviceLimits | None = None,
    ) -> None:
        """A HELLO from a registered device (unknown devices are not added by a HELLO),
        with what it said it can take."""
        t = now_ms()
        with self._transaction() as db:
            db.execute(
                "UPDATE devices SET board = ?, firmware = ?, boot = ?, last_seen = ?, "
                "first_seen = coalesce(first_seen, ?) WHERE device_id = ?",
                (board, firmware, boot, t, t, device_id),
            )
            if limits is not None:
                db.execute(
                    "UPDATE devices SET capabilities = ?, max_frame = ?, max_message = ?, "
                    "host_kid = ?, knowledge_facts = ?, knowledge_text = ? WHERE device_id = ?",
                    (limits.capabilities, limits.max_frame, limits.max_message,
                     limits.host_kid, limits.knowledge_facts, limits.knowledge_text, device_id),
                )  # fmt: skip

    def device_limits(self, device_id: bytes) -> DeviceLimits | None:
        """What the device's last HELLO said it can take; None before its first HELLO."""
        with self._lock:
            row = self._db.execute(
                "SELECT capabilities, max_frame, max_message, host_kid, knowledge_facts, "
                "knowledge_text FROM devices WHERE device_id = ?",
                (device_id,),
            ).fetchone()
        if row is None or row[0] is None:
            return None
        return DeviceLimits(
            int(row[0]), int(row[1]), int(row[2]), bytes(row[3]), int(row[4]), int(row[5])
        )

    def chain_head(self, device_id: bytes) -> ChainHead | None:
        device = self.device(device_id)
        return None if device is None else device.head

    # ---- intake ------------------------------------------------------------------------

    def take_pack(self, line_device: bytes, data: bytes) -> Intake:
        """Verify a device pack offered by ``line_device`` and store it, in one transaction.

        Accepted: the pack, its records and the device's new chain head are committed
        before this returns. The same bytes again: *duplicate*, nothing stored twice.
        Refused: the reason is recorded (with the bytes) before this returns. A
        database error propagates (the session answers *deferred*).

        Group commit: packs that other threads (the daemon's device lines) offer while a
        commit is under way wait for it (not for the store), then one of them commits
        all the waiting ones in one transaction (at most ``GROUP_MAX``), each verified
        against the chain head the packs before it left. Every caller still returns only
        after the transaction holding its pack committed; when that transaction fails,
        every pack in it gets the error (nothing of it was stored).
        """
        offer = _Offer(line_device, data)
        with self._group:
            self._offers.append(offer)
            lead = not self._leading
            self._leading = True
        if not lead:  # a commit is under way: wait until one took this pack, or it leads
            offer.wake.acquire()
            if offer.done:
                return offer.outcome()
        try:
            while not offer.done:  # lead: commit every pack waiting, this one among them
                with self._group:
                    batch = self._offers[:GROUP_MAX]
                    del self._offers[:GROUP_MAX]
                try:
                    with self._lock:
                        self._commit_offers(batch)
                finally:
                    for other in batch:
                        if other is not offer:
                            other.wake.release()  # its answer is there
        finally:
            with self._group:  # hand the lead to the first pack still waiting, if any
                if self._offers:
                    self._offers[0].wake.release()
                else:
                    self._leading = False
        return offer.outcome()

    def take_packs(self, offers: Sequence[tuple[bytes, bytes]]) -> list[Intake]:
        """``take_pack`` for several (line device, pack bytes) offered together: one
        transaction, each pack verified against the chain head the ones before it left;
        an answer per offer, in order, once all are committed. A database error
        propagates (nothing of them was stored)."""
        batch = [_Offer(device, data) for device, data in offers]
        for start in range(0, len(batch), GROUP_MAX):
            with self._lock:
                self._commit_offers(batch[start:start + GROUP_MAX])
        return [offer.outcome() for offer in batch]

    def _commit_offers(self, batch: list[_Offer]) -> None:
        """Take every offer of ``batch`` in one transaction; each gets its answer, or
        the error that rolled the transaction back."""
        try:
            with self._transaction() as db:
                answers = [self._take(db, offer.device, offer.data) for offer in batch]
        except BaseException as exc:
            for offer in batch:
                offer.error, offer.done = exc, True
            if not isinstance(exc, Exception):
                raise
            return
        for offer, answer in zip(batch, answers, strict=True):
            offer.intake, offer.done = answer, True
        self.intake_commits += 1
        self.intake_offers += len(batch)

    def _take(self, db: sqlite3.Connection, line_device: bytes, data: bytes) -> Intake:
        """One offered pack, inside the caller's transaction."""
        digest = hashlib.sha256(data).digest()
        # the pack if it is stored already, and the line device's key and chain head
        # (bytearray parameters: see RECORDS_PER_INSERT)
        stored_id, stored_seq, owner, public, kid, head_seq, head_hash = db.execute(
            "SELECT p.pack_id, p.seq, p.device_id, d.public_key, d.kid, d.head_seq, "
            "d.head_hash FROM (SELECT 1) LEFT JOIN packs p ON p.hash = ? "
            "LEFT JOIN devices d ON d.device_id = ?",
            (bytearray(digest), bytearray(line_device)),
        ).fetchone()
        if stored_id is not None:
            if owner != line_device:
                return self._refuse(
                    db, line_device, data, digest, Reason.WRONG_SIGNER,
                    f"pack {stored_id.hex()} belongs to device {owner.hex()}",
                    stored_id, u64_out(stored_seq),
                )  # fmt: skip
            return Intake("duplicate", Reason.NONE, stored_id, u64_out(stored_seq),
                          "already stored")  # fmt: skip
        keys: dict[bytes, TrustedKey] = {}
        head: ChainHead | None = None
        if public is not None:
            keys = {kid: self._trusted_key(line_device, public)}
            if head_seq is not None:
                head = ChainHead(head_seq + U64_OFFSET, head_hash)
        try:
            verified = verify_pack(data, keys, head, PackKind.MEMORY, require_chain=True,
                                   data_hash=digest)
        except PackError as exc:
            return self._refuse(
                db, line_device, data, digest, Reason(exc.reason), exc.detail, exc.pack_id,
                exc.seq,
            )  # fmt: skip
        pack = verified.pack
        if verified.duplicate:  # the head itself, already stored (found above normally)
            return Intake("duplicate", Reason.NONE, pack.pack_id, pack.seq, "the chain head")
        full = self._outbox_full(db)
        if full is not None:  # the device keeps the pack and offers it again
            return Intake("deferred", Reason.STORAGE, pack.pack_id, pack.seq, full)
        stored, conflicts = self._insert_pack(db, pack)
        if self._outbox is not None:
            self._outbox_put(db, pack.pack_id)
        _keep_decoded(pack)
        return Intake("accepted", Reason.NONE, pack.pack_id, pack.seq, "", stored, conflicts)

    def _trusted_key(self, device_id: bytes, public: bytes) -> TrustedKey:
        """The device's registered key as the verifier takes it, made once per key."""
        got = self._keys.get((device_id, public))
        if got is None:
            got = TrustedKey(PublicKey(public), device_id, PackKind.MEMORY)
            if len(self._keys) >= KEYS_KEPT:
                self._keys.clear()
            self._keys[(device_id, public)] = got
        return got

    def _insert_pack(self, db: sqlite3.Connection, pack: Pack) -> tuple[int, tuple[bytes, ...]]:
        """Store an accepted pack: (records stored, ids of the records that conflict).

        Three statements for a pack of up to RECORDS_PER_INSERT records: the pack, its
        records in one INSERT (each its id and hash at its index in the pack: its fields
        are the pack's bytes, read back by :meth:`records`), the chain head. A record id
        is (device, boot, capture seq). The same id again with the same hash
        is the same record (stored once); with another hash it is a conflict: a device
        that reused ids. Both are kept, the second in record_conflicts. The insert skips
        every id already held (``DO NOTHING``); only when it skipped any are the ids
        looked up to tell the two apart.
        """
        # bytearray parameters: see RECORDS_PER_INSERT
        signer, pid = bytearray(pack.signer), bytearray(pack.pack_id)
        db.execute(
            "INSERT INTO packs (pack_id, device_id, seq, hash, prev, created, received, "
            "nrecords, raw) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (pid, signer, pack.seq - U64_OFFSET, bytearray(pack.hash), bytearray(pack.prev),
             pack.created - U64_OFFSET, now_ms(), len(pack.items), bytearray(pack.encoded)),
        )  # fmt: skip
        records: tuple[Record, ...] = pack.items  # type: ignore[assignment]
        stored = 0
        for start in range(0, len(records), RECORDS_PER_INSERT):
            chunk = records[start:start + RECORDS_PER_INSERT]
            values: list[Any] = [signer, pid]
            for rec in chunk:
                values += (bytearray(rec.id), bytearray(rec.hash))
            stored += db.execute(_insert_records_sql(len(chunk), start), values).rowcount
        conflicts: list[bytes] = []
        if stored != len(records):
            conflicts = self._record_conflicts(db, pack, records)
        db.execute(
            "UPDATE devices SET head_seq = ?, head_hash = ? WHERE device_id = ?",
            (pack.seq - U64_OFFSET, bytearray(pack.hash), signer),
        )
        return stored, tuple(conflicts)

    @staticmethod
    def _record_conflicts(
        db: sqlite3.Connection, pack: Pack, records: Sequence[Record]
    ) -> list[bytes]:
        """After the insert skipped some of ``records``: keep those whose id a record
        with another hash holds in record_conflicts, in pack order; their ids. A record
        the insert skipped is held by an earlier pack's record (another pack_id) or by
        an earlier one of this pack (another index), and conflicts when that one's hash
        differs."""
        held: dict[bytes, tuple[bytes, bytes, int]] = {}
        ids = list({r.id: None for r in records})
        for start in range(0, len(ids), 500):  # within SQLite's variable limit
            chunk = ids[start:start + 500]
            held.update(
                (bytes(i), (bytes(h), bytes(p), int(x))) for i, h, p, x in db.execute(
                    "SELECT id, hash, pack_id, idx FROM records WHERE id IN "
                    f"({', '.join('?' * len(chunk))})", chunk,
                ).fetchall()
            )  # fmt: skip
        conflicts = []
        for idx, rec in enumerate(records):
            digest, owner, at = held[rec.id]
            if (owner, at) == (pack.pack_id, idx) or digest == rec.hash:
                continue  # stored now, or the same record stored before
            db.execute(
                "INSERT INTO record_conflicts VALUES (?, ?, ?, ?, ?)",
                (rec.id, pack.pack_id, idx, rec.hash, cbor.encode(rec.to_wire())),
            )
            conflicts.append(rec.id)
        return conflicts

    def _refuse(
        self,
        db: sqlite3.Connection,
        line_device: bytes,
        data: bytes,
        digest: bytes,
        reason: Reason,
        detail: str,
        pack_id: bytes,
        seq: int,
    ) -> Intake:
        t = now_ms()
        known_id = pack_id if pack_id != ZERO_PACK_ID else None
        detail = detail[:REFUSAL_DETAIL]
        db.execute(
            "INSERT INTO refusals (sha256, device_id, reason, detail, pack_id, seq, size, "
            "first_at, last_at, offers, raw) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?) "
            "ON CONFLICT (sha256) DO UPDATE SET offers = offers + 1, last_at = excluded.last_at, "
            "reason = excluded.reason, detail = excluded.detail",
            (digest, line_device, int(reason), detail, known_id,
             u64_in(seq) if known_id else None,
             len(data), t, t, data[:REFUSAL_KEEP]),
        )  # fmt: skip
        self._rotate_refusals(db, line_device)
        return Intake("refused", reason, pack_id, seq, detail)

    def _rotate_refusals(self, db: sqlite3.Connection, device_id: bytes) -> None:
        """Drop the oldest digests over the device's quota and over the total, counted."""
        over = [
            (
                "SELECT rowid, device_id, offers FROM refusals WHERE device_id = ? "
                "ORDER BY last_at DESC, rowid DESC LIMIT -1 OFFSET ?",
                (device_id, REFUSALS_PER_DEVICE),
            ),
            (
                "SELECT rowid, device_id, offers FROM refusals "
                "ORDER BY last_at DESC, rowid DESC LIMIT -1 OFFSET ?",
                (REFUSALS_TOTAL,),
            ),
        ]
        for sql, args in over:
            for rowid, dev, offers in db.execute(sql, args).fetchall():
                db.execute("DELETE FROM refusals WHERE rowid = ?", (rowid,))
                db.execute(
                    "INSERT INTO refusals_rotated VALUES (?, 1, ?) ON CONFLICT (device_id) "
                    "DO UPDATE SET digests = digests + 1, offers = offers + excluded.offers",
                    (dev, offers),
                )

    # ---- the fleet outbox (hirmem.daemon.outbox sends; these keep its state) -------------

    def enable_outbox(self, url: str, max_packs: int, max_bytes: int) -> None:
        """From now on every accepted pack is also queued for the fleet at ``url``, in
        the transaction that stores it; packs stored while no outbox was enabled (since
        the last time one was) are queued now, so nothing stored is left unsent. At
        ``max_packs`` unsent packs or ``max_bytes`` of them, intake defers new packs."""
        if max_packs < 1 or max_bytes < 1:
            raise StoreError("the outbox bound must allow at least one pack")
        with self._transaction() as db:
            t = now_ms()
            db.execute(
                "INSERT INTO fleet_outbox (one, url, enabled_at, filled_through, max_packs, "
                "max_bytes) VALUES (1, ?, ?, 0, ?, ?) ON CONFLICT (one) DO UPDATE SET "
                "url = excluded.url, max_packs = excluded.max_packs, "
                "max_bytes = excluded.max_bytes",
                (url, t, max_packs, max_bytes),
            )
            through = db.execute("SELECT filled_through FROM fleet_outbox").fetchone()[0]
            db.execute(
                "INSERT OR IGNORE INTO outbox (pack_id, device_id, received, size) "
                "SELECT pack_id, device_id, received, length(raw) FROM packs WHERE rowid > ? "
                "AND pack_id NOT IN (SELECT pack_id FROM fleet_refusals)",
                (through,),
            )
            db.execute(
                "UPDATE fleet_outbox SET filled_through = "
                "(SELECT coalesce(max(rowid), 0) FROM packs)"
            )
            depth, size = db.execute("SELECT count(*), total(size) FROM outbox").fetchone()
            self._outbox = [max_packs, max_bytes, int(depth), int(size)]

    def _outbox_full(self, db: sqlite3.Connection) -> str | None:
        """Why a new pack cannot be queued now (the bound is reached), else None."""
        if self._outbox is None:
            return None
        max_packs, max_bytes, depth, size = self._outbox
        if depth < max_packs and size < max_bytes:
            return None
        db.execute(
            "UPDATE fleet_outbox SET deferred = deferred + 1, "
            "full_since = coalesce(full_since, ?)", (now_ms(),)
        )
        return (
            f"the fleet outbox is full ({depth} packs, {size} bytes unsent; bound "
            f"{max_packs} packs, {max_bytes} bytes): intake waits for the fleet"
        )

    def _outbox_put(self, db: sqlite3.Connection, pack_id: bytes) -> None:
        assert self._outbox is not None
        db.execute(
            "INSERT INTO outbox (pack_id, device_id, received, size) "
            "SELECT pack_id, device_id, received, length(raw) FROM packs WHERE pack_id = ?",
            (pack_id,),
        )
        db.execute(
            "UPDATE fleet_outbox SET filled_through = "
            "(SELECT rowid FROM packs WHERE pack_id = ?)", (pack_id,)
        )
        size = db.execute("SELECT size FROM outbox WHERE pack_id = ?", (pack_id,)).fetchone()[0]
        self._outbox[2] += 1
        self._outbox[3] += int(size)

    def outbox_batch(self, limit: int) -> list[OutboxPack]:
        """The oldest unsent packs in the order they were stored (each device's in seq
        order, as the fleet's chain check needs them)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT p.pack_id, p.device_id, p.seq, p.received, p.raw FROM outbox o "
                "JOIN packs p ON p.pack_id = o.pack_id ORDER BY p.rowid LIMIT ?",
                (limit,),
            ).fetchall()
        return [OutboxPack(bytes(a), bytes(b), u64_out(c), int(d), bytes(e))
                for a, b, c, d, e in rows]  # fmt: skip

    def outbox_acked(self, *pack_ids: bytes) -> None:
        """The fleet acknowledged these packs (stored, or stored before): forget them
        here, in one transaction."""
        if not pack_ids:
            return
        with self._transaction() as db:
            for pack_id in pack_ids:
                self._outbox_take(db, pack_id)
            db.execute(
                "UPDATE fleet_outbox SET acked = acked + ?, last_ok_at = ?",
                (len(pack_ids), now_ms()),
            )

    def outbox_refused(self, pack_id: bytes, status: int, reason: str, detail: str) -> None:
        """The fleet refused the pack for good: recorded with its reason, not sent again
        (until :meth:`outbox_requeue`)."""
        t = now_ms()
        with self._transaction() as db:
            device = db.execute(
                "SELECT device_id FROM packs WHERE pack_id = ?", (pack_id,)
            ).fetchone()
            db.execute(
                "INSERT OR REPLACE INTO fleet_refusals VALUES (?, ?, ?, ?, ?, ?)",
                (pack_id, device[0] if device else b"", status, reason[:80],
                 detail[:FLEET_DETAIL], t),
            )  # fmt: skip
            self._outbox_take(db, pack_id)
            db.execute(
                "UPDATE fleet_outbox SET refused = refused + 1, last_error = ?, "
                "last_error_at = ?",
                (f"pack {pack_id.hex()} refused: {status} {reason}: {detail}"[:FLEET_DETAIL], t),
            )

    def _outbox_take(self, db: sqlite3.Connection, pack_id: bytes) -> None:
        row = db.execute("SELECT size FROM outbox WHERE pack_id = ?", (pack_id,)).fetchone()
        if row is None:
            return
        db.execute("DELETE FROM outbox WHERE pack_id = ?", (pack_id,))
        if self._outbox is not None:
            self._outbox[2] -= 1
            self._outbox[3] -= int(row[0])
            max_packs, max_bytes, depth, size = self._outbox
            if depth < max_packs and size < max_bytes:
                db.execute("UPDATE fleet_outbox SET full_since = NULL")

    def outbox_error(self, text: str) -> None:
        """An attempt failed and will be retried (network, 5xx, 429, 401)."""
        with self._transaction() as db:
            db.execute(
                "UPDATE fleet_outbox SET errors = errors + 1, last_error = ?, last_error_at = ?",
                (text[:FLEET_DETAIL], now_ms()),
            )

    def outbox_requeue(self, device_id: bytes | None = None) -> int:
        """Queue the packs the fleet refused again (after the operator fixed the cause,
        e.g. registered the device at the fleet); how many."""
        with self._transaction() as db:
            where, args = ("", ()) if device_id is None else (" WHERE device_id = ?",
                                                              (device_id,))  # fmt: skip
            ids = [bytes(r[0]) for r in db.execute(
                "SELECT pack_id FROM fleet_refusals" + where, args).fetchall()]  # fmt: skip
            for pack_id in ids:
                db.execute("DELETE FROM fleet_refusals WHERE pack_id = ?", (pack_id,))
                db.execute(
                    "INSERT OR IGNORE INTO outbox (pack_id, device_id, received, size) "
                    "SELECT pack_id, device_id, received, length(raw) FROM packs "
                    "WHERE pack_id = ?", (pack_id,),
                )  # fmt: skip
            if self._outbox is not None:
                depth, size = db.execute("SELECT count(*), total(size) FROM outbox").fetchone()
                self._outbox[2:] = [int(depth), int(size)]
            return len(ids)

    def fleet_refusals(self) -> list[FleetRefusal]:
        with self._lock:
            rows = self._db.execute(
                "SELECT pack_id, device_id, status, reason, detail, at FROM fleet_refusals "
                "ORDER BY at, pack_id"
            ).fetchall()
        return [FleetRefusal(bytes(a), bytes(b), int(c), str(d), str(e), int(f))
                for a, b, c, d, e, f in rows]  # fmt: skip

    def outbox_status(self) -> OutboxStatus | None:
        """None when no outbox was ever enabled on this store."""
        with self._lock:
            db = self._db
            row = db.execute(
                "SELECT url, max_packs, max_bytes, full_since, acked, refused, errors, "
                "deferred, last_ok_at, last_error, last_error_at FROM fleet_outbox"
            ).fetchone()
            if row is None:
                return None
            depth, size, oldest = db.execute(
                "SELECT count(*), total(size), min(received) FROM outbox"
            ).fetchone()
            per_device = {
                bytes(d): (int(n), int(o)) for d, n, o in db.execute(
                    "SELECT device_id, count(*), min(received) FROM outbox GROUP BY device_id"
                ).fetchall()
            }  # fmt: skip
            if self._outbox is not None:  # the one true count, for the bound
                self._outbox[2:] = [int(depth), int(size)]
        return OutboxStatus(
            url=str(row[0]), depth=int(depth), size=int(size),
            oldest_received=None if oldest is None else int(oldest),
            max_packs=int(row[1]), max_bytes=int(row[2]), full_since=row[3],
            acked=int(row[4]), refused=int(row[5]), errors=int(row[6]), deferred=int(row[7]),
            last_ok_at=row[8], last_error=row[9], last_error_at=row[10], per_device=per_device,
        )  # fmt: skip

    def refuse_proof(self, line_device: bytes, body: bytes, reason: Reason, detail: str) -> None:
        """Record a session PROOF the host refused (SPEC §6.5) for the device id its HELLO
        claimed, in the same bounded digest as refused packs."""
        digest = hashlib.sha256(body).digest()
        with self._transaction() as db:
            self._refuse(
                db, line_device, body, digest, reason, f"session proof: {detail}", ZERO_PACK_ID, 0
            )

    # ---- reading -----------------------------------------------------------------------

    def packs(self, device_id: bytes | None = None) -> list[StoredPack]:
        sql = "SELECT pack_id, device_id, seq, hash, prev, created, received, nrecords FROM packs"
        args: tuple[bytes, ...] = ()
        if device_id is not None:
            sql += " WHERE device_id = ?"
            args = (device_id,)
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY device_id, seq", args).fetchall()
        return [
            StoredPack(r[0], r[1], u64_out(r[2]), r[3], r[4], u64_out(r[5]), r[6], r[7])
            for r in rows
        ]

    def last_packs(self) -> dict[bytes, tuple[int, int]]:
        """device → (seq, received ms) of its latest accepted pack, in one query."""
        with self._lock:
            rows = self._db.execute(
                "SELECT device_id, max(seq), max(received) FROM packs GROUP BY device_id"
            ).fetchall()
        return {bytes(d): (u64_out(s), int(r)) for d, s, r in rows}

    def received_since(self, since_ms: int) -> list[int]:
        """When each pack accepted at or after ``since_ms`` arrived (ms), oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT received FROM packs WHERE received >= ? ORDER BY received", (since_ms,)
            ).fetchall()
        return [int(r[0]) for r in rows]

    def pack_boots(self, device_id: bytes) -> dict[bytes, tuple[int, int]]:
        """pack id → (lowest, highest) boot counter in its records' ids, for a device's
        timeline: a pack whose boots run above the previous pack's shows a reboot."""
        with self._lock:
            where, args = _device_range(device_id)
            rows = self._db.execute(
                "SELECT pack_id, min(substr(id, 9, 4)), max(substr(id, 9, 4)) FROM records "
                f"WHERE {where} GROUP BY pack_id",
                args,
            ).fetchall()
        return {bytes(p): (int.from_bytes(lo, "big"), int.from_bytes(hi, "big"))
                for p, lo, hi in rows}  # fmt: skip

    def packs_since(self, after: int = 0, limit: int = 100) -> list[tuple[int, Pack]]:
        """Accepted packs in arrival order, (cursor, pack) with cursor > ``after``.

        A pack's signature was verified once, by :meth:`take_pack`, in the transaction
        that stored its bytes with their SHA-256 (``packs.hash``). On the way out the
        bytes are checked against that hash and the pack's key id against its device's
        registered key, not verified again: a reader (the memory engine) never takes
        bytes other than those that were verified, signed by the key its device holds.
        Why a hash and not a second signature check is as safe: the second check read
        the key from this same file, so whoever could rewrite a pack's bytes could
        rewrite its device's key too and sign with their own; against accidental change
        both catch any altered byte, and against a writer of the file neither holds.

        So every record of a returned pack passed :meth:`Record.check` against its link
        (the first against the pack's ``prev``) with an id of the signer's, when the pack
        was accepted: its hash matches its content, its flags are normalised, its gate
        scores, state and layer are the gate's. A reader need not check them again.

        Decoded once: a pack this process accepted (through any Store: the daemon's
        memory keeper opens a reader of its own) is returned as the verifier decoded it
        (kept by its hash, the last ``DECODED_KEPT``), not read again from its bytes.
        """
        with self._lock:
            rows = self._db.execute(
                "SELECT p.rowid, p.raw, p.hash, p.device_id, d.kid FROM packs p "
                "JOIN devices d ON d.device_id = p.device_id "
                "WHERE p.rowid > ? ORDER BY p.rowid LIMIT ?",
                (after, limit),
            ).fetchall()
        return [(int(rowid), _stored_pack(f"stored pack {rowid}", raw, digest, device_id, kid))
                for rowid, raw, digest, device_id, kid in rows]  # fmt: skip

    def records(self, after: int = 0, limit: int = 1000) -> list[tuple[int, Record, bytes]]:
        """Stored records in arrival order: (cursor, record, pack_id), cursor > ``after``.

        Each record is read from its pack's bytes (checked against the hash recorded when
        the pack was accepted, and decoded once per pack, as :meth:`packs_since` does),
        at the index its row names; its id and hash are the row's."""
        with self._lock:
            rows = self._db.execute(
                "SELECT rowid, id, pack_id, idx, hash FROM records WHERE rowid > ? "
                "ORDER BY rowid LIMIT ?",
                (after, limit),
            ).fetchall()
            wanted = list({bytes(r[2]): None for r in rows})
            held: dict[bytes, Pack] = {}
            for start in range(0, len(wanted), 500):  # within SQLite's variable limit
                chunk = wanted[start:start + 500]
                for pid, raw, digest, device_id, kid in self._db.execute(
                    "SELECT p.pack_id, p.raw, p.hash, p.device_id, d.kid FROM packs p "
                    "JOIN devices d ON d.device_id = p.device_id WHERE p.pack_id IN "
                    f"({', '.join('?' * len(chunk))})", chunk,
                ).fetchall():  # fmt: skip
                    held[bytes(pid)] = _stored_pack(f"stored pack {bytes(pid).hex()}", raw,
                                                    digest, device_id, kid)  # fmt: skip
        out = []
        for rowid, rid, pid, idx, digest in rows:
            pack = held.get(bytes(pid))
            rec = None if pack is None or not 0 <= idx < len(pack.items) else pack.items[idx]
            if not isinstance(rec, Record) or rec.id != bytes(rid) or rec.hash != bytes(digest):
                raise StoreError(f"stored record {bytes(rid).hex()} is not record {idx} of its "
                                 f"pack {bytes(pid).hex()}")  # fmt: skip
            out.append((int(rowid), rec, bytes(pid)))
        return out

    def iter_records(self, batch: int = 1000) -> Iterator[tuple[Record, bytes]]:
        """Every stored record in arrival order, with its pack id, read in batches."""
        cursor = 0
        while rows := self.records(cursor, batch):
            cursor = rows[-1][0]
            for _, rec, pack_id in rows:
                yield rec, pack_id

    def record_conflicts(self) -> list[tuple[bytes, bytes, int, bytes]]:
        """(record id, pack_id, index in the pack, hash) of records whose id was taken."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, pack_id, idx, hash FROM record_conflicts ORDER BY rowid"
            ).fetchall()
        return [(bytes(a), bytes(b), int(c), bytes(d)) for a, b, c, d in rows]

    def count_record_conflicts(self, device_id: bytes | None = None) -> int:
        """How many records of accepted packs hold an id a different record already had."""
        sql = "SELECT count(*) FROM record_conflicts"
        with self._lock:
            if device_id is None:
                return int(self._db.execute(sql).fetchone()[0])
            return int(self._db.execute(
                sql + " JOIN packs USING (pack_id) WHERE packs.device_id = ?", (device_id,)
            ).fetchone()[0])

    def count_records(self, device_id: bytes | None = None) -> int:
        return self._count("records", device_id)

    def count_packs(self, device_id: bytes | None = None) -> int:
        return self._count("packs", device_id)

    def _count(self, table: str, device_id: bytes | None) -> int:
        sql = f"SELECT count(*) FROM {table}"  # table: one of ours, never user input
        with self._lock:
            if device_id is None:
                return int(self._db.execute(sql).fetchone()[0])
            where, args = ("device_id = ?", (device_id,)) if table != "records" else (
                _device_range(device_id))  # fmt: skip
            return int(self._db.execute(f"{sql} WHERE {where}", args).fetchone()[0])

    def refusals(self, device_id: bytes | None = None) -> list[Refusal]:
        sql = (
            "SELECT sha256, device_id, reason, detail, pack_id, seq, size, first_at, last_at, "
            "offers FROM refusals"
        )
        args: tuple[bytes, ...] = ()
        if device_id is not None:
            sql += " WHERE device_id = ?"
            args = (device_id,)
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY first_at, sha256", args).fetchall()
        return [
            Refusal(r[0], r[1], Reason(r[2]), r[3], r[4], None if r[5] is None else u64_out(r[5]),
                    *r[6:])
            for r in rows
        ]  # fmt: skip

    def refusals_rotated(self) -> dict[bytes, tuple[int, int]]:
        """Per line device: (digests, offers) rotated out of the refusals table."""
        with self._lock:
            rows = self._db.execute("SELECT device_id, digests, offers FROM refusals_rotated")
            return {bytes(d): (int(n), int(o)) for d, n, o in rows.fetchall()}

    def figures(self) -> StoreFigures:
        """Counts per device for the metrics, read on a connection of their own (a WAL
        snapshot), so a scrape never waits for the intake's lock nor holds it."""
        if str(self.path) == ":memory:":  # nothing else can see it: read under the lock
            with self._lock:
                return self._figures(self._db)
        with self._reader_lock:
            if self._reader is None:
                self._reader = sqlite3.connect(
                    f"{self.path.resolve().as_uri()}?mode=ro", uri=True,
                    isolation_level=None, check_same_thread=False, timeout=5,
                )  # fmt: skip
            db = self._reader
            db.execute("BEGIN")  # one snapshot for every count
            try:
                return self._figures(db)
            finally:
                db.execute("COMMIT")

    @staticmethod
    def _figures(db: sqlite3.Connection) -> StoreFigures:
        def per_device(sql: str) -> dict[bytes, int]:
            return {bytes(d): int(n) for d, n in db.execute(sql).fetchall()}

        refusals: dict[tuple[bytes, Reason], int] = {}
        offers: dict[bytes, int] = {}
        for dev, reason, n, offered in db.execute(
            "SELECT device_id, reason, count(*), sum(offers) FROM refusals "
            "GROUP BY device_id, reason"
        ).fetchall():
            refusals[(bytes(dev), Reason(reason))] = int(n)
            offers[bytes(dev)] = offers.get(bytes(dev), 0) + int(offered)
        rotated: dict[bytes, int] = {}
        for dev, digests, offered in db.execute(
            "SELECT device_id, digests, offers FROM refusals_rotated"
        ).fetchall():
            rotated[bytes(dev)] = int(digests)
            offers[bytes(dev)] = offers.get(bytes(dev), 0) + int(offered)
        conflicts = per_device(
            "SELECT packs.device_id, count(*) FROM record_conflicts JOIN packs USING (pack_id) "
            "GROUP BY packs.device_id"
        )
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        free = db.execute("PRAGMA freelist_count").fetchone()[0]
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        return StoreFigures(
            packs=per_device("SELECT device_id, count(*) FROM packs GROUP BY device_id"),
            # by the id's device prefix: the primary key's index, in its order
            records=per_device(
                f"SELECT substr(id, 1, {ID_SIZE}) AS d, count(*) FROM records GROUP BY d"
            ),
            record_conflicts=conflicts,
            refusals=refusals,
            refused_offers=offers,
            refusals_rotated=rotated,
            integrity_warnings=len(conflicts),  # one warning per device with conflicts
            devices=int(db.execute("SELECT count(*) FROM devices").fetchone()[0]),
            size_bytes=int((pages - free) * page_size),
        )

    # ---- knowledge ---------------------------------------------------------------------

    def add_knowledge(self, pack: Pack) -> None:
        """Keep a host-signed knowledge pack as the version ``pack.seq``."""
        if pack.kind != PackKind.KNOWLEDGE:
            raise StoreError("only knowledge packs are kept as knowledge versions")
        with self._transaction() as db:
            top = db.execute("SELECT max(seq) FROM knowledge").fetchone()[0]
            latest = None if top is None else u64_out(top)
            if latest is not None and pack.seq <= latest:
                raise StoreError(
                    f"knowledge seq {pack.seq} is not above the latest version {latest}"
                )
            db.execute(
                "INSERT INTO knowledge VALUES (?, ?, ?, ?, ?, ?)",
                (u64_in(pack.seq), pack.pack_id, pack.hash, u64_in(pack.created),
                 len(pack.items), pack.encoded),
            )  # fmt: skip

    def knowledge(self, seq: int | None = None) -> KnowledgeRow | None:
        """A knowledge version, or the latest one."""
        with self._lock:
            if seq is None:
                row = self._db.execute(
                    "SELECT * FROM knowledge ORDER BY seq DESC LIMIT 1"
                ).fetchone()
            else:
                row = self._db.execute(
                    "SELECT * FROM knowledge WHERE seq = ?", (u64_in(seq),)
                ).fetchone()
        if row is None:
            return None
        return KnowledgeRow(u64_out(row[0]), row[1], row[2], u64_out(row[3]), row[4], row[5])

    def knowledge_head(self) -> ChainHead | None:
        latest = self.knowledge()
        return None if latest is None else ChainHead(latest.seq, latest.hash)

    def set_device_knowledge(
        self, device_id: bytes, seq: int, status: str, reason: int = 0, held_seq: int = 0
    ) -> None:
        """Record what a device answered for knowledge version ``seq`` (or "pending")."""
        with self._transaction() as db:
            db.execute(
                "INSERT INTO device_knowledge VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (device_id, seq) DO UPDATE SET status = excluded.status, "
                "reason = excluded.reason, held_seq = excluded.held_seq, "
                "updated = excluded.updated",
                (device_id, u64_in(seq), status, reason, u64_in(held_seq), now_ms()),
            )

    def device_knowledge(self, device_id: bytes) -> list[tuple[int, str, int, int]]:
        """(seq, status, reason, held_seq) per knowledge version offered to the device."""
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, status, reason, held_seq FROM device_knowledge "
                "WHERE device_id = ? ORDER BY seq",
                (device_id,),
            ).fetchall()
        return [(u64_out(a), str(b), int(c), u64_out(d)) for a, b, c, d in rows]

    # ---- counters and sessions (written by the daemon, read by `hirmem status`) ----------

    def save_counters(
        self, device_id: bytes, counters: Mapping[str, int], *, seen_at: int | None = None
    ) -> None:
        """Save a device's counters; ``seen_at`` (ms) also moves its last_seen there."""
        with self._transaction() as db:
            if seen_at is not None:
                db.execute(
                    "UPDATE devices SET last_seen = max(coalesce(last_seen, 0), ?) "
                    "WHERE device_id = ?",
                    (seen_at, device_id),
                )
            db.executemany(
                "INSERT INTO device_counters VALUES (?, ?, ?) ON CONFLICT (device_id, name) "
                "DO UPDATE SET value = excluded.value",
                [(device_id, name, u64_in(int(value))) for name, value in counters.items()],
            )

    def counters(self, device_id: bytes) -> dict[str, int]:
        with self._lock:
            rows = self._db.execute(
                "SELECT name, value FROM device_counters WHERE device_id = ? ORDER BY name",
                (device_id,),
            ).fetchall()
        return {str(n): u64_out(v) for n, v in rows}

    def counters_of(self, device_ids: Sequence[bytes]) -> dict[bytes, dict[str, int]]:
        """The saved counters of several devices in one query (a page of the device table)."""
        out: dict[bytes, dict[str, int]] = {d: {} for d in device_ids}
        for start in range(0, len(device_ids), 500):  # within SQLite's variable limit
            chunk = list(device_ids[start:start + 500])
            with self._lock:
                rows = self._db.execute(
                    "SELECT device_id, name, value FROM device_counters WHERE device_id IN "
                    f"({', '.join('?' * len(chunk))})",
                    chunk,
                ).fetchall()
            for d, n, v in rows:
                out[bytes(d)][str(n)] = u64_out(v)
        return out

    def set_session(self, device_id: bytes, url: str, state: str, name: str = "") -> None:
        with self._transaction() as db:
            db.execute(
                "INSERT INTO device_sessions (device_id, url, state, since, name) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (device_id) "
                "DO UPDATE SET url = excluded.url, state = excluded.state, "
                "since = excluded.since, name = excluded.name",
                (device_id, url, state, now_ms(), name),
            )

    def session_names(self) -> dict[bytes, str]:
        """The configured name of each device's line ("" when it has none)."""
        with self._lock:
            rows = self._db.execute("SELECT device_id, name FROM device_sessions").fetchall()
        return {bytes(d): str(n) for d, n in rows}

    def sessions(self) -> dict[bytes, tuple[str, str, int]]:
        with self._lock:
            rows = self._db.execute("SELECT device_id, url, state, since FROM device_sessions")
            return {r[0]: (str(r[1]), str(r[2]), int(r[3])) for r in rows.fetchall()}

    # ---- integrity -------------------------------------------------------------------------

    def check_integrity(self, *, signatures: bool = True) -> list[str]:
        """Problems found, none when the store is sound.

        SQLite's own check; then per device: packs form one chain from the genesis with
        increasing seqs, each hash is the SHA-256 of the stored bytes, the chain head is
        the last pack, every record belongs to its pack and the records chain through
        the packs; with ``signatures``, every pack verifies again with the device key.
        """
        problems: list[str] = []
        try:
            self._check_all(problems, signatures)
        except sqlite3.DatabaseError as exc:  # a damaged file: say so, do not crash
            problems.append(f"sqlite: the store cannot be read to the end: {exc}")
        return problems

    def _check_all(self, problems: list[str], signatures: bool) -> None:
        with self._lock:
            result = [r[0] for r in self._db.execute("PRAGMA integrity_check").fetchall()]
            if result != ["ok"]:
                problems.extend(f"sqlite: {line}" for line in result)
            for device in self.devices():
                problems.extend(self._check_device(device, signatures))
            orphans = self._db.execute(
                "SELECT count(*) FROM records WHERE pack_id NOT IN (SELECT pack_id FROM packs)"
            ).fetchone()[0]
            if orphans:
                problems.append(f"{orphans} records belong to no stored pack")

    def integrity_warnings(self) -> list[str]:
        """What is sound but wrong for the operator to miss: per device, the records
        kept in ``record_conflicts`` (an id the device used again for other contents,
        usually a boot counter lost in a power cut). None when there is nothing."""
        with self._lock:
            rows = self._db.execute(
                "SELECT packs.device_id, count(*), min(packs.seq), max(packs.seq) "
                "FROM record_conflicts JOIN packs USING (pack_id) "
                "GROUP BY packs.device_id ORDER BY packs.device_id"
            ).fetchall()
        return [
            f"device {bytes(dev).hex()}: {n} record conflict{'s' if n != 1 else ''} (record "
            f"ids reused with other contents, packs seq {u64_out(lo):#x}..{u64_out(hi):#x}; "
            f"kept in record_conflicts)"
            for dev, n, lo, hi in rows
        ]

    def _check_device(self, device: DeviceRow, signatures: bool) -> list[str]:
        name = device.device_id.hex()
        problems: list[str] = []
        rows = self._db.execute(  # a cursor: one pack in memory at a time
            "SELECT pack_id, seq, hash, prev, raw, nrecords FROM packs WHERE device_id = ? "
            "ORDER BY seq",
            (device.device_id,),
        )
        keys = {device.kid: TrustedKey(PublicKey(device.public_key), device.device_id,
                                       PackKind.MEMORY)}  # fmt: skip
        link: bytes | None = None
        last: ChainHead | None = None
        for pack_id, stored_seq, digest, prev, raw, nrecords in rows:
            seq = u64_out(stored_seq)
            where = f"device {name} pack seq {seq}"
            if hashlib.sha256(raw).digest() != digest:
                problems.append(f"{where}: stored bytes do not hash to the recorded hash")
            if link is not None and prev != link:
                problems.append(f"{where}: prev does not link to the previous stored pack")
            link = digest
            if signatures:
                try:
                    verify_pack(raw, keys, last, PackKind.MEMORY, require_chain=True)
                except PackError as exc:
                    problems.append(f"{where}: does not verify again: {exc}")
            last = ChainHead(seq, digest)
            stored = self._db.execute(PACK_RECORDS_SQL, (pack_id, pack_id)).fetchone()[0]
            if stored > nrecords:
                problems.append(f"{where}: {stored} records stored, the pack has {nrecords}")
        if last is None:
            if device.head is not None:
                problems.append(f"device {name}: a chain head without any stored pack")
        elif device.head != last:
            problems.append(f"device {name}: the chain head is not the last stored pack")
        return problems


def _device_row(row: Sequence[object]) -> DeviceRow:
    """A ``SELECT * FROM devices`` row."""

    def opt(v: object) -> int | None:
        return None if v is None else int(v)  # type: ignore[call-overload]

    head = None
    if row[9] is not None:
        head = ChainHead(u64_out(row[9]), bytes(row[10]))  # type: ignore[call-overload]
    return DeviceRow(
        device_id=bytes(row[0]),  # type: ignore[call-overload]
        public_key=bytes(row[1]),  # type: ignore[call-overload]
        kid=bytes(row[2]),  # type: ignore[call-overload]
        board=str(row[3]),
        firmware=str(row[4]),
        boot=int(row[5]),  # type: ignore[call-overload]
        registered=int(row[6]),  # type: ignore[call-overload]
        first_seen=opt(row[7]),
        last_seen=opt(row[8]),
        head=head,
    )
