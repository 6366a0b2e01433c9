"""The integrity/provenance layer: an append-only, SHA-256-chained audit log.

Each record is ``(seq, ts, action, memory_id, actor, detail, prev, hash)`` with

    hash = SHA-256( CBOR [seq, ts, action, memory_id, actor, detail, prev] )

where ``detail`` is the deterministic CBOR of a small map and ``prev`` is the hash of
the record before (32 zero bytes for the first). The table refuses updates and deletes
(SQLite triggers, MEM-INV-5); :meth:`AuditLog.verify` walks the chain and names the
first broken link, so tampering that bypasses the triggers (editing the file) is found.

A device pack's admission is one ``admit-pack`` record whose detail lists every record
it admitted (:mod:`.packaudit`: fixed shapes, no free field).

MEM-INV-8: the chain records system actions only. ``action`` must be one of
:data:`ACTIONS`, ``actor`` is ``"system"``, ``"intake:<device>"`` or ``"steward:<name>"``,
and ``detail`` keys must be in :data:`DETAIL_KEYS` (gate scores, states, strengths,
hashes, reasons) with scalar values: there is no field in which a human's biometrics or
behaviour scores could be recorded, and :meth:`AuditLog.append` refuses any other key.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from hirmem.memory import packaudit
from hirmem.memory.store import Store
from hirmem.protocol import cbor
from hirmem.protocol.errors import HirmemError
from hirmem.sql import Connection

__all__ = ["ACTIONS", "DETAIL_KEYS", "GENESIS", "AuditLog", "AuditRecord", "Entry", "Verification"]

GENESIS = bytes(32)

ACTIONS = frozenset(
    {
        "capture", "admit", "transition", "strength", "contradiction", "corruption",
        "repair", "review", "evict", "intake-mismatch", "sweep", "integrity",
        "derive", "supersede", "unflag", "admit-pack",
    }
)  # fmt: skip

DETAIL_KEYS = frozenset(
    {
        "from", "to", "reason", "verdict", "hard", "flags", "h", "i", "r", "f", "c", "rn",
        "w", "trust", "strength", "old_strength", "x", "decision", "version", "prior",
        "conflict", "device", "kid", "gate_mode", "hash", "count", "layer", "now",
        "device_scores", "host_scores",
        "activity", "form", "wasDerivedFrom", "agrees", "statement", "superseded_by",
        "valid_to", "value", "new_value",
    }
)  # fmt: skip

_MAX_TEXT = 512


class Entry(NamedTuple):
    """One record to append: what happened, to which memory, the detail, and who did it
    (an ``admit-pack`` entry's detail comes encoded and checked by
    :func:`hirmem.memory.packaudit.encode`)."""

    action: str
    memory_id: str
    detail: dict[str, Any] | bytes
    actor: str = "system"


@dataclass(frozen=True)
class AuditRecord:
    seq: int
    ts: int  # ms
    action: str
    memory_id: str
    actor: str
    detail: dict[str, Any]
    prev: bytes
    hash: bytes


@dataclass(frozen=True)
class Verification:
    ok: bool
    count: int
    first_bad: int | None  # seq of the first broken link
    reason: str
    problems: tuple[str, ...] = ()  # every problem found beyond the chain's links

    def __str__(self) -> str:
        if self.ok:
            return f"audit chain intact: {self.count} records"
        head = (
            f"audit chain broken at seq {self.first_bad}: {self.reason}"
            if self.first_bad is not None
            else f"audit chain of {self.count} records does not match the store"
        )
        return head + "".join(f"\n  - {p}" for p in self.problems)


def _clean_detail(detail: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in detail.items():
        if key not in DETAIL_KEYS:
            raise HirmemError(
                f"audit detail key {key!r} is not a system-action field (MEM-INV-8); "
                f"allowed: {sorted(DETAIL_KEYS)}"
            )
        t = type(value)
        if t is int or t is bytes or t is bool or value is None:  # the common cases first
            pass
        elif t is str:
            if len(value) > _MAX_TEXT:
                raise HirmemError(f"audit detail {key} is longer than {_MAX_TEXT} characters")
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise HirmemError(f"audit detail {key} is not finite: {value}")
            value = repr(value)  # hirmem CBOR carries no floats
        elif isinstance(value, (list, tuple)):
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
                raise HirmemError(f"audit detail {key} must be a list of ints")
            value = list(value)
        elif isinstance(value, str):
            if len(value) > _MAX_TEXT:
                raise HirmemError(f"audit detail {key} is longer than {_MAX_TEXT} characters")
        elif value is not None and not isinstance(value, (int, bytes)):
            raise HirmemError(f"audit detail {key} has unsupported type {type(value).__name__}")
        out[key] = value
    return out


_PLAIN = frozenset({str, int, float, bool, bytes, type(None)})
_BODIES: dict[str, bytes] = {}  # the repr of a recurring detail -> its checked encoding
_BODIES_MAX = 4096  # bounded: emptied when full (the recurring details come back at once)


def _body(detail: dict[str, Any]) -> bytes:
    """The checked CBOR of ``detail``, remembered for details that recur (the gate's
    scores of a device's readings, a lifecycle step): for text keys and values of
    exactly these types, the dict's repr names its encoding (it keeps 1, 1.0 and True
    apart, -0.0 from 0.0, text from bytes). Anything else is checked and encoded anew."""
    key = None
    for k, v in detail.items():
        t = type(v)
        if type(k) is not str or (
            t not in _PLAIN and not (t is list and all(type(x) is int for x in v))
        ):
            break
    else:
        key = repr(detail)
        known = _BODIES.get(key)
        if known is not None:
            return known
    body = cbor.encode_map(_clean_detail(detail))
    if key is not None:
        if len(_BODIES) >= _BODIES_MAX:
            _BODIES.clear()
        _BODIES[key] = body
    return body


def _check_actor(actor: str) -> None:
    if actor == "system":
        return
    prefix, _, name = actor.partition(":")
    if prefix not in ("intake", "steward") or not name.strip():
        raise HirmemError(
            f"audit actor {actor!r} must be 'system', 'intake:<device>' or 'steward:<name>'"
        )


def record_hash(
    seq: int, ts: int, action: str, memory_id: str, actor: str, detail: bytes, prev: bytes
) -> bytes:
    preimage = cbor.encode_array((seq, ts, action, memory_id, actor, detail, prev))
    return hashlib.sha256(preimage).digest()


class AuditLog:
    def __init__(self, store: Store) -> None:
        self.store = store
        row = store.db.execute("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1").fetchone()
        self.head_seq: int = 0 if row is None else int(row[0])
        self.head_hash: bytes = GENESIS if row is None else bytes(row[1])
        store.rollback_hooks.append(self.resync)
        store.reload_hooks.append(self.resync)

    def append(
        self,
        action: str,
        memory_id: str,
        detail: dict[str, Any] | None = None,
        actor: str = "system",
        ts: float | None = None,
    ) -> int:
        """Append one record and return its seq."""
        return self.append_many([(action, memory_id, detail or {})], actor, ts)[0]

    def append_many(
        self,
        entries: list[tuple[str, str, dict[str, Any]]],
        actor: str = "system",
        ts: float | None = None,
    ) -> list[int]:
        """Append ``(action, memory_id, detail)`` records in order with one statement."""
        return self.append_entries([Entry(a, m, d, actor) for a, m, d in entries], ts)

    def append_entries(self, entries: Sequence[Entry], ts: float | None = None) -> list[int]:
        """Append records, each with its own actor, in order with one statement (a
        device pack's admissions: the capture is the device's, the gate's the system's)."""
        ms = int((time.time() if ts is None else ts) * 1000)
        bodies = []
        checked: set[str] = set()
        for action, memory_id, detail, actor in entries:
            if actor not in checked:
                _check_actor(actor)
                checked.add(actor)
            if action not in ACTIONS:
                raise HirmemError(f"audit action {action!r} is not one of {sorted(ACTIONS)}")
            if isinstance(detail, bytes):
                if action != packaudit.ACTION:
                    raise HirmemError(f"audit action {action!r} takes a map as its detail")
                bodies.append((action, memory_id, detail, actor))
            else:
                bodies.append((action, memory_id, _body(detail), actor))
        with self.store.writing() as db:  # the head is read and moved by the writer only
            rows = []
            seq, prev = self.head_seq, self.head_hash
            for action, memory_id, body, actor in bodies:
                seq += 1
                digest = record_hash(seq, ms, action, memory_id, actor, body, prev)
                # BLOBs bound as bytearrays (bytes would go through sqlite3's adapter
                # registry first; psycopg writes either as bytea)
                rows.append((seq, ms, action, memory_id, actor, bytearray(body),
                             bytearray(prev), bytearray(digest)))  # fmt: skip
                prev = digest
            db.executemany(
                "INSERT INTO audit(seq, ts, action, memory_id, actor, detail, prev, hash) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            first = self.head_seq + 1
            self.head_seq, self.head_hash = seq, prev
        return list(range(first, seq + 1))

    def resync(self) -> None:
        """Re-read the head (after a rolled-back transaction)."""
        with self.store.writing() as db:
            row = db.execute("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1").fetchone()
        self.head_seq = 0 if row is None else int(row[0])
        self.head_hash = GENESIS if row is None else bytes(row[1])

    def records(self, memory_id: str | None = None, limit: int | None = None) -> list[AuditRecord]:
        sql = "SELECT seq, ts, action, memory_id, actor, detail, prev, hash FROM audit"
        params: tuple[Any, ...] = ()
        if memory_id is not None:  # its own records, and its device pack's admission
            sql += (
                " WHERE memory_id = ? OR seq = (SELECT p.seq FROM admissions p "
                "JOIN memories m ON m.rowid = p.memory WHERE m.id = ?)"
            )
            params = (memory_id, memory_id)
        sql += " ORDER BY seq"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        out = []
        with self.store.reading() as db:
            for seq, ts, action, mid, actor, detail, prev, digest in db.execute(sql, params):
                out.append(
                    AuditRecord(seq, ts, action, mid, actor, cbor.decode(detail), prev, digest)
                )
        return out

    def verify(self) -> Verification:
        """Walk the whole chain; report the first record whose link or hash is wrong."""
        with self.store.reading() as db:
            return self._walk(db)

    @staticmethod
    def _walk(db: Connection) -> Verification:
        prev = GENESIS
        expect = 1
        count = 0
        rows = db.execute(
            "SELECT seq, ts, action, memory_id, actor, detail, prev, hash FROM audit ORDER BY seq"
        )
        for seq, ts, action, mid, actor, detail, link, digest in rows:
            if seq != expect:
                return Verification(False, count, expect, f"record {expect} is missing")
            if link != prev:
                return Verification(False, count, seq, "prev does not match the previous hash")
            if record_hash(seq, ts, action, mid, actor, detail, link) != digest:
                return Verification(False, count, seq, "hash does not match the record")
            prev = digest
            expect += 1
            count += 1
        return Verification(True, count, None, "")
