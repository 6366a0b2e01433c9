"""One tenant's store: its devices and chain heads, accepted packs, refusals, work queue.

:meth:`TenantStore.take` is the upload contract (``PUT /v1/packs/{id}``) without HTTP:

1. a pack whose bytes are already stored gets the original answer again (if its address
   is its pack id) and nothing is written;
2. the device is found by the key id of the pack's protected header in this tenant's
   registry (unknown, revoked or another tenant's: refused, with what the pack says of
   itself) and the pack verified with its key against the chain head read
   (:func:`hirmem.protocol.packs.verify_pack`: signature, signer, sequence, chain, every
   record); its address must be its pack id;
3. one transaction stores the pack (unique on (device key, seq)) and its records, moves
   the device's head only if it is still the head read in step 2 (compare-and-set; when
   another upload moved it first, nothing is written and the upload is judged again
   from step 1), and enqueues the consolidation job; the answer exists only after
   commit. On SQLite, packs verified at the same time share one transaction
   (:class:`GroupCommit`), each with its own compare-and-set.

A refusal is recorded before it is answered, as a digest (SHA-256 of the bytes, reason,
detail, offers), at most :data:`REFUSALS_KEPT` digests; older ones are rotated out into
per-reason counts, so the count of refusals is never lost.

The store also answers as an :class:`~hirmem.daemon.reader.IntakeReader`, so the memory
engine and the semantic substrate read a tenant as they read a daemon's intake.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hirmem.daemon.reader import DeviceRow, StoredPack
from hirmem.fleet.refusals import PACK_REASONS, STATUS
from hirmem.protocol import cbor
from hirmem.protocol.clock import now_ms
from hirmem.protocol.errors import HirmemError, PackError
from hirmem.protocol.keys import ID_SIZE, PublicKey, key_id
from hirmem.protocol.packs import (
    HDR_KID,
    ChainHead,
    Pack,
    PackKind,
    Reason,
    TrustedKey,
    read_unverified,
    verify_pack,
)
from hirmem.protocol.records import Record
from hirmem.sql.backend import Backend, Tx

__all__ = ["Accepted", "Refused", "TenantStore", "TenantStoreError"]

REFUSALS_KEPT = 10_000  # digests kept per tenant; older ones become per-reason counts
REFUSAL_DETAIL = 240
CAS_ROUNDS = 64  # judgements of one upload while other uploads keep moving its head
GROUP_MAX = 64  # packs in one SQLite group commit

# every u64 (seq, created) is stored as value - 2**63: signed 64-bit columns, order kept
_U64 = 1 << 63

SCHEMA = """
CREATE TABLE IF NOT EXISTS devices (
    device_id   {bytes} PRIMARY KEY,
    kid         {bytes} NOT NULL UNIQUE,
    public_key  {bytes} NOT NULL,
    label       TEXT NOT NULL DEFAULT '',
    registered  BIGINT NOT NULL,
    revoked_at  BIGINT,
    head_seq    BIGINT,
    head_hash   {bytes}
);
CREATE TABLE IF NOT EXISTS packs (
    n           {serial},
    pack_id     {bytes} NOT NULL UNIQUE,
    device_id   {bytes} NOT NULL REFERENCES devices(device_id),
    kid         {bytes} NOT NULL,
    seq         BIGINT NOT NULL,
    hash        {bytes} NOT NULL UNIQUE,
    prev        {bytes} NOT NULL,
    created     BIGINT NOT NULL,
    received    BIGINT NOT NULL,
    nrecords    INTEGER NOT NULL,
    gateway     TEXT NOT NULL,
    raw         {bytes} NOT NULL,
    UNIQUE (kid, seq)
);
CREATE TABLE IF NOT EXISTS records (
    n           {serial},
    pack_n      BIGINT NOT NULL REFERENCES packs(n),
    idx         INTEGER NOT NULL,
    id          {bytes} NOT NULL,
    hash        {bytes} NOT NULL,
    UNIQUE (pack_n, idx)
);
CREATE INDEX IF NOT EXISTS records_id ON records(id);
CREATE TABLE IF NOT EXISTS refusals (
    sha256      {bytes} NOT NULL,
    reason      TEXT NOT NULL,
    status      INTEGER NOT NULL,
    gateway     TEXT NOT NULL,
    device_id   {bytes},
    seq         BIGINT,
    detail      TEXT NOT NULL,
    size        INTEGER NOT NULL,
    first_at    BIGINT NOT NULL,
    last_at     BIGINT NOT NULL,
    offers      BIGINT NOT NULL,
    PRIMARY KEY (sha256, reason)
);
CREATE INDEX IF NOT EXISTS refusals_age ON refusals(last_at);
CREATE TABLE IF NOT EXISTS refusals_rotated (
    reason      TEXT PRIMARY KEY,
    digests     BIGINT NOT NULL,
    offers      BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS jobs (
    n           {serial},
    pack_n      BIGINT NOT NULL UNIQUE REFERENCES packs(n),
    enqueued    BIGINT NOT NULL,
    claimed_by  TEXT,
    claimed_until BIGINT,
    done_at     BIGINT
);
CREATE INDEX IF NOT EXISTS jobs_open ON jobs(done_at, n)
"""


Elsewhere = Callable[[bytes], bool]


def _nowhere(kid: bytes) -> bool:
    return False


class TenantStoreError(HirmemError):
    """A registry change the store cannot make (a device with another key, …)."""



@dataclass(frozen=True, slots=True)
class Accepted:
    """A stored pack: ``first`` on the upload that stored it, not on a repeat."""

    pack_id: bytes
    device: bytes
    seq: int
    records: int
    stored_at: int  # ms since the epoch, when it committed
    first: bool

    def answer(self) -> dict[str, object]:
        return {
            "pack_id": self.pack_id.hex(),
            "device": self.device.hex(),
            "seq": self.seq,
            "records": self.records,
            "stored_at": self.stored_at,
        }


@dataclass(frozen=True, slots=True)
class Refused:
    reason: str  # a key of hirmem.fleet.refusals.STATUS
    detail: str


@dataclass(frozen=True, slots=True)
class Job:
    n: int
    pack_n: int


@dataclass(frozen=True, slots=True)
class Device:
    device_id: bytes
    kid: bytes
    public_key: bytes
    revoked: bool
    head: ChainHead | None


class TenantStore:
    """A tenant's database (see the module docstring); ``other_tenant`` answers, for a kid
    this store does not know, whether another tenant of the fleet holds it."""

    def __init__(self, backend: Backend, name: str = "") -> None:
        self.backend = backend
        self.name = name
        self._group = GroupCommit(self) if backend.kind == "sqlite" else None
        with backend.transaction() as tx:
            for statement in backend.schema(SCHEMA).split(";"):
                if statement.strip():
                    tx.run(statement)

    def close(self) -> None:
        self.backend.close()

    # ---- registry ----------------------------------------------------------------------

    def add_device(self, device_id: bytes, public_key: bytes, label: str = "") -> None:
        """Trust ``public_key`` for ``device_id``; the same pair again is a no-op."""
        if len(device_id) != ID_SIZE:
            raise TenantStoreError(f"a device id is {ID_SIZE} bytes, got {len(device_id)}")
        kid = key_id(public_key)
        with self.backend.transaction() as tx:
            rows = tx.rows(
                "SELECT device_id, public_key FROM devices WHERE device_id = ? OR kid = ?",
                (device_id, kid),
            )
            for dev, pub in rows:
                if bytes(dev) == device_id and bytes(pub) == public_key:
                    return
                raise TenantStoreError(
                    f"device {device_id.hex()} or key {kid.hex()} is already registered "
                    "with another key or device"
                )
            tx.run(
                "INSERT INTO devices (device_id, kid, public_key, label, registered) "
                "VALUES (?, ?, ?, ?, ?)",
                (device_id, kid, public_key, label, now_ms()),
            )

    def revoke_device(self, device_id: bytes) -> None:
        with self.backend.transaction() as tx:
            if not tx.run(
                "UPDATE devices SET revoked_at = ? WHERE device_id = ? AND revoked_at IS NULL",
                (now_ms(), device_id),
            ):
                raise TenantStoreError(f"device {device_id.hex()} is not registered (or revoked)")

    def device_by_kid(self, kid: bytes, tx: Tx | None = None) -> Device | None:
        sql = (
            "SELECT device_id, kid, public_key, revoked_at, head_seq, head_hash "
            "FROM devices WHERE kid = ?"
        )
        if tx is None:
            with self.backend.reading() as own:
                rows = own.rows(sql, (kid,))
        else:
            rows = tx.rows(sql, (kid,))
        if not rows:
            return None
        dev, k, pub, revoked, hseq, hhash = rows[0]
        head = None if hseq is None else ChainHead(int(hseq) + _U64, bytes(hhash))
        return Device(bytes(dev), bytes(k), bytes(pub), revoked is not None, head)

    # ---- intake ------------------------------------------------------------------------

    def take(
        self, path_id: str, data: bytes, gateway: str, elsewhere: Elsewhere = _nowhere
    ) -> Accepted | Refused:
        """Judge and store one upload (see the module docstring); ``elsewhere`` tells, for a
        key id this tenant does not hold, whether another tenant of the fleet does."""
        for _ in range(CAS_ROUNDS):
            outcome = self._judge(path_id, data, gateway, elsewhere)
            if outcome is not None:
                return outcome
        return self._refuse(
            data,
            gateway,
            "overloaded",
            None,
            None,
            f"the chain head kept moving over {CAS_ROUNDS} rounds",
        )

    def _judge(
        self, path_id: str, data: bytes, gateway: str, elsewhere: Elsewhere
    ) -> Accepted | Refused | None:
        """One round: the answer, or None when the chain head moved under it."""
        digest = hashlib.sha256(data).digest()
        kid = _peek_kid(data)  # the payload is decoded once, by verify_pack below
        with self.backend.reading() as tx:
            stored = self._stored(tx, "hash = ?", digest)
            device = None if stored is not None or kid is None else self.device_by_kid(kid, tx)
        if stored is not None:
            if stored.pack_id.hex() != path_id:
                return self._mismatch(
                    data, gateway, path_id, stored.device, stored.seq, stored.pack_id
                )
            return stored
        if device is None or device.revoked:
            return self._refuse_unverified(data, gateway, path_id, device, elsewhere)
        keys = {
            device.kid: TrustedKey(PublicKey(device.public_key), device.device_id, PackKind.MEMORY)
        }
        try:
            verified = verify_pack(data, keys, device.head, PackKind.MEMORY, require_chain=True)
        except PackError as exc:
            reason = PACK_REASONS[_reason(exc)]
            seq = exc.seq if exc.pack_id != bytes(16) else None
            if reason == "rollback" and seq is not None and self._seq_taken(device.kid, seq):
                reason = "duplicate-seq-different-pack"
            return self._refuse(data, gateway, reason, device.device_id, seq, exc.detail)
        pack = verified.pack
        if pack.pack_id.hex() != path_id:
            return self._mismatch(data, gateway, path_id, pack.signer, pack.seq, pack.pack_id)
        if verified.duplicate:  # the head itself: stored, found by hash on the next round
            return None
        return self._store(pack, device, gateway)

    def _mismatch(
        self, data: bytes, gateway: str, path_id: str, device: bytes, seq: int, pack_id: bytes
    ) -> Refused:
        detail = f"the address names {path_id[:40]}, the pack is {pack_id.hex()}"
        return self._refuse(data, gateway, "pack-id-mismatch", device, seq, detail)

    def _refuse_unverified(
        self, data: bytes, gateway: str, path_id: str, device: Device | None, elsewhere: Elsewhere
    ) -> Refused:
        """The refusal of a pack no device of this tenant may send (unknown, revoked, or
        not a pack at all), with what the pack says of itself, unverified."""
        try:
            pack = read_unverified(data, PackKind.MEMORY)
        except PackError as exc:
            return self._refuse(data, gateway, PACK_REASONS[_reason(exc)], None, None, exc.detail)
        if pack.pack_id.hex() != path_id:
            return self._mismatch(data, gateway, path_id, pack.signer, pack.seq, pack.pack_id)
        if device is not None:
            detail = f"device {device.device_id.hex()} is revoked"
            return self._refuse(data, gateway, "revoked", pack.signer, pack.seq, detail)
        reason = "device-of-another-tenant" if elsewhere(pack.kid) else "unknown-device"
        detail = f"no device of this tenant has key {pack.kid.hex()}"
        return self._refuse(data, gateway, reason, pack.signer, pack.seq, detail)

    def _seq_taken(self, kid: bytes, seq: int) -> bool:
        with self.backend.reading() as tx:
            return bool(tx.rows("SELECT 1 FROM packs WHERE kid = ? AND seq = ?", (kid, seq - _U64)))

    def _stored(self, tx: Tx, where: str, *args: object) -> Accepted | None:
        rows = tx.rows(
            f"SELECT pack_id, device_id, seq, nrecords, received FROM packs WHERE {where}", args
        )
        if not rows:
            return None
        pid, dev, seq, n, received = rows[0]
        return Accepted(bytes(pid), bytes(dev), int(seq) + _U64, int(n), int(received), False)

    def _store(self, pack: Pack, device: Device, gateway: str) -> Accepted | None:
        """Write a verified pack in a transaction of its own (PostgreSQL: each connection
        commits by itself) or, on SQLite's one writer, in the next group commit."""
        if self._group is not None:
            return self._group.write(pack, device, gateway)
        with self.backend.transaction() as tx:
            return self._write(tx, pack, device, gateway)

    def _write(self, tx: Tx, pack: Pack, device: Device, gateway: str) -> Accepted | None:
        """Inside ``tx``: move the head by compare-and-set, store the pack, its records and
        its job; None (nothing written) when the head is no longer the one verified against."""
        t = now_ms()
        old_hash = None if device.head is None else device.head.hash
        moved = tx.run(
            "UPDATE devices SET head_seq = ?, head_hash = ? WHERE device_id = ? AND "
            "revoked_at IS NULL AND "
            + ("head_hash IS NULL" if old_hash is None else "head_hash = ?"),
            (
                pack.seq - _U64,
                pack.hash,
                device.device_id,
                *(() if old_hash is None else (old_hash,)),
            ),
        )
        if moved != 1:
            return None  # another upload moved the head (or a revocation): judge again
        pack_n = tx.rows(
            "INSERT INTO packs (pack_id, device_id, kid, seq, hash, prev, created, "
            "received, nrecords, gateway, raw) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "RETURNING n",
            (
                pack.pack_id,
                pack.signer,
                pack.kid,
                pack.seq - _U64,
                pack.hash,
                pack.prev,
                pack.created - _U64,
                t,
                len(pack.items),
                gateway,
                pack.encoded,
            ),
        )[0][0]
        rows: list[object] = []  # the record itself stays in the pack's bytes
        for idx, rec in enumerate(pack.items):
            assert isinstance(rec, Record)
            rows += (pack_n, idx, rec.id, rec.hash)
        if pack.items:  # one statement, one round trip to a server
            tx.run(
                "INSERT INTO records (pack_n, idx, id, hash) VALUES "
                + ", ".join(["(?, ?, ?, ?)"] * len(pack.items)),
                rows,
            )
        tx.run("INSERT INTO jobs (pack_n, enqueued) VALUES (?, ?)", (pack_n, t))
        return Accepted(pack.pack_id, pack.signer, pack.seq, len(pack.items), t, True)

    # ---- refusals ----------------------------------------------------------------------

    def _refuse(
        self,
        data: bytes,
        gateway: str,
        reason: str,
        device: bytes | None,
        seq: int | None,
        detail: str,
    ) -> Refused:
        t = now_ms()
        digest = hashlib.sha256(data).digest()
        detail = detail[:REFUSAL_DETAIL]
        with self.backend.transaction() as tx:
            tx.run(
                "INSERT INTO refusals (sha256, reason, status, gateway, device_id, seq, detail, "
                "size, first_at, last_at, offers) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1) "
                "ON CONFLICT (sha256, reason) DO UPDATE SET offers = refusals.offers + 1, "
                "last_at = excluded.last_at, gateway = excluded.gateway",
                (
                    digest,
                    reason,
                    STATUS[reason],
                    gateway,
                    device,
                    None if seq is None else seq - _U64,
                    detail,
                    len(data),
                    t,
                    t,
                ),
            )
            self._rotate(tx)
        return Refused(reason, detail)

    def _rotate(self, tx: Tx) -> None:
        over = tx.rows(
            "SELECT sha256, reason, offers FROM refusals ORDER BY last_at DESC, "
            "sha256 LIMIT 64 OFFSET ?",
            (REFUSALS_KEPT,),
        )
        for sha, reason, offers in over:
            tx.run("DELETE FROM refusals WHERE sha256 = ? AND reason = ?", (sha, reason))
            tx.run(
                "INSERT INTO refusals_rotated (reason, digests, offers) VALUES (?, 1, ?) "
                "ON CONFLICT (reason) DO UPDATE SET digests = refusals_rotated.digests + 1, "
                "offers = refusals_rotated.offers + excluded.offers",
                (reason, offers),
            )

    def refusal_counts(self) -> dict[str, int]:
        """Offers refused, by reason: the digests kept and those rotated out."""
        counts: dict[str, int] = {}
        with self.backend.reading() as tx:
            for reason, offers in tx.rows(
                "SELECT reason, sum(offers) FROM refusals GROUP BY reason"
            ):
                counts[str(reason)] = int(offers)
            for reason, offers in tx.rows("SELECT reason, offers FROM refusals_rotated"):
                counts[str(reason)] = counts.get(str(reason), 0) + int(offers)
        return counts

    def refusals(self) -> list[tuple[bytes, str, int, str]]:
        """The digests kept: (sha256, reason, offers, detail), oldest first."""
        with self.backend.reading() as tx:
            rows = tx.rows(
                "SELECT sha256, reason, offers, detail FROM refusals ORDER BY first_at, sha256"
            )
        return [(bytes(a), str(b), int(c), str(d)) for a, b, c, d in rows]

    # ---- the consolidation queue ---------------------------------------------------------

    def claim(self, worker: str, limit: int = 16, lease_ms: int = 60_000) -> list[Job]:
        """Claim up to ``limit`` open jobs for ``lease_ms`` (PostgreSQL: SKIP LOCKED, so
        workers in several processes never wait for nor take each other's rows)."""
        t = now_ms()
        with self.backend.transaction() as tx:
            rows = tx.rows(
                "SELECT n, pack_n FROM jobs WHERE done_at IS NULL AND (claimed_until IS NULL "
                "OR claimed_until < ?) ORDER BY n LIMIT ?" + self.backend.skip_locked,
                (t, limit),
            )
            for n, _ in rows:
                tx.run(
                    "UPDATE jobs SET claimed_by = ?, claimed_until = ? WHERE n = ?",
                    (worker, t + lease_ms, n),
                )
        return [Job(int(n), int(p)) for n, p in rows]

    def finish(self, jobs: Sequence[Job]) -> None:
        with self.backend.transaction() as tx:
            for job in jobs:
                tx.run("UPDATE jobs SET done_at = ? WHERE n = ?", (now_ms(), job.n))

    def open_jobs(self) -> int:
        with self.backend.reading() as tx:
            return int(tx.rows("SELECT count(*) FROM jobs WHERE done_at IS NULL")[0][0])

    def pack_by_n(self, pack_n: int) -> tuple[Pack, int]:
        """A stored pack verified again with its device's key (the store is not trusted),
        and when it was stored."""
        with self.backend.reading() as tx:
            rows = tx.rows(
                "SELECT p.raw, d.device_id, d.public_key, p.received FROM packs p JOIN devices d "
                "ON d.device_id = p.device_id WHERE p.n = ?",
                (pack_n,),
            )
        if not rows:
            raise TenantStoreError(f"no stored pack {pack_n}")
        raw, dev, pub, received = rows[0]
        return _reverify(bytes(raw), bytes(dev), bytes(pub), pack_n), int(received)

    # ---- the IntakeReader (memory engine, semantic substrate) ------------------------------

    def devices(self) -> list[DeviceRow]:
        with self.backend.reading() as tx:
            rows = tx.rows(
                "SELECT device_id, public_key, kid, label, registered, head_seq, "
                "head_hash FROM devices ORDER BY device_id"
            )
        return [
            DeviceRow(
                bytes(d),
                bytes(p),
                bytes(k),
                str(label),
                "",
                0,
                int(reg),
                None,
                None,
                None if hs is None else ChainHead(int(hs) + _U64, bytes(hh)),
            )
            for d, p, k, label, reg, hs, hh in rows
        ]

    def packs(self, device_id: bytes | None = None) -> list[StoredPack]:
        sql = "SELECT pack_id, device_id, seq, hash, prev, created, received, nrecords FROM packs"
        with self.backend.reading() as tx:
            if device_id is None:
                rows = tx.rows(sql + " ORDER BY device_id, seq")
            else:
                rows = tx.rows(sql + " WHERE device_id = ? ORDER BY seq", (device_id,))
        return [
            StoredPack(
                bytes(a), bytes(b), int(c) + _U64, bytes(d), bytes(e), int(f) + _U64, int(g), int(h)
            )
            for a, b, c, d, e, f, g, h in rows
        ]

    def packs_since(self, after: int = 0, limit: int = 100) -> list[tuple[int, Pack]]:
        """Accepted packs by store order (on PostgreSQL a later commit may hold a lower
        number: followers there use the job queue, :meth:`claim`)."""
        with self.backend.reading() as tx:
            rows = tx.rows(
                "SELECT p.n, p.raw, d.device_id, d.public_key FROM packs p JOIN "
                "devices d ON d.device_id = p.device_id WHERE p.n > ? ORDER BY p.n "
                "LIMIT ?",
                (after, limit),
            )
        return [
            (int(n), _reverify(bytes(raw), bytes(dev), bytes(pub), int(n)))
            for n, raw, dev, pub in rows
        ]

    def records(self, after: int = 0, limit: int = 1000) -> list[tuple[int, Record, bytes]]:
        """Stored records by store order, (n, record, pack id), read from their packs."""
        with self.backend.reading() as tx:
            rows = tx.rows(
                "SELECT r.n, r.idx, r.pack_n FROM records r WHERE r.n > ? ORDER BY r.n LIMIT ?",
                (after, limit),
            )
            wanted = sorted({int(r[2]) for r in rows})
            raws = (
                {
                    int(n): bytes(raw)
                    for n, raw in tx.rows(
                        f"SELECT n, raw FROM packs WHERE n IN ({', '.join('?' * len(wanted))})",
                        wanted,
                    )
                }
                if wanted
                else {}
            )
        packs = {n: read_unverified(raw, PackKind.MEMORY) for n, raw in raws.items()}
        out = []
        for n, idx, pack_n in rows:
            pack = packs[int(pack_n)]
            rec = pack.items[int(idx)]
            assert isinstance(rec, Record)
            out.append((int(n), rec, pack.pack_id))
        return out

    def record_conflicts(self) -> list[tuple[bytes, bytes, int, bytes]]:
        """Records whose id an earlier, different record holds (a device that reused ids)."""
        with self.backend.reading() as tx:
            rows = tx.rows(
                "SELECT r.id, p.pack_id, r.idx, r.hash FROM records r JOIN packs p ON "
                "p.n = r.pack_n WHERE EXISTS (SELECT 1 FROM records o WHERE o.id = r.id AND "
                "o.n < r.n AND o.hash <> r.hash) ORDER BY r.n"
            )
        return [(bytes(a), bytes(b), int(c), bytes(d)) for a, b, c, d in rows]

    def record_origin(self, record_id: bytes) -> tuple[bytes, bytes, bytes] | None:
        """(pack_id, device_id, kid) of the first pack that carried a record."""
        with self.backend.reading() as tx:
            rows = tx.rows(
                "SELECT p.pack_id, p.device_id, p.kid FROM records r JOIN packs p "
                "ON p.n = r.pack_n WHERE r.id = ? ORDER BY r.n LIMIT 1",
                (record_id,),
            )
        return None if not rows else (bytes(rows[0][0]), bytes(rows[0][1]), bytes(rows[0][2]))

    def counts(self) -> dict[str, int]:
        with self.backend.reading() as tx:
            return {
                t: int(tx.rows(f"SELECT count(*) FROM {t}")[0][0])
                for t in ("devices", "packs", "records", "jobs")
            }


class _Waiter:
    __slots__ = ("device", "done", "error", "gateway", "pack", "result")

    def __init__(self, pack: Pack, device: Device, gateway: str) -> None:
        self.pack, self.device, self.gateway = pack, device, gateway
        self.done = False
        self.result: Accepted | None = None
        self.error: BaseException | None = None


def _answer(w: _Waiter) -> Accepted | None:
    if w.error is not None:
        raise w.error
    return w.result


class GroupCommit:
    """Uploads verified at the same time written in one SQLite transaction: one fsync
    for up to :data:`GROUP_MAX` packs instead of one each.

    A writer queues its pack; whoever finds no leader becomes it, writes every queued
    pack (each with its own compare-and-set, so one that lost its head changes nothing
    and is judged again) in one transaction, and wakes their writers after COMMIT. An
    error fails that transaction's writers alone (nothing of it was stored). The leader
    stops once its own pack is written and hands the queue to a waiting writer.
    """

    def __init__(self, store: TenantStore) -> None:
        self.store = store
        self._cond = threading.Condition()
        self._queue: list[_Waiter] = []
        self._leading = False

    def write(self, pack: Pack, device: Device, gateway: str) -> Accepted | None:
        me = _Waiter(pack, device, gateway)
        with self._cond:
            self._queue.append(me)
            while not me.done and self._leading:
                self._cond.wait()
            if me.done:
                return _answer(me)
            self._leading = True
        try:
            while not me.done:
                with self._cond:
                    batch, self._queue = self._queue[:GROUP_MAX], self._queue[GROUP_MAX:]
                self._commit(batch)
        finally:
            with self._cond:
                self._leading = False
                if not me.done and me in self._queue:  # a failed batch before ours
                    self._queue.remove(me)
                self._cond.notify_all()  # a waiting writer leads next
        return _answer(me)

    def _commit(self, batch: list[_Waiter]) -> None:
        try:
            with self.store.backend.transaction() as tx:
                results = [self.store._write(tx, w.pack, w.device, w.gateway) for w in batch]
        except BaseException as exc:
            with self._cond:
                for w in batch:
                    w.error, w.done = exc, True
            raise
        with self._cond:
            for w, result in zip(batch, results, strict=True):
                w.result, w.done = result, True
            self._cond.notify_all()


def _peek_kid(data: bytes) -> bytes | None:
    """The key id in a pack's protected header, read without decoding its payload; None
    for anything that is not so (read_unverified then says precisely what is wrong)."""
    try:
        outer = cbor.decode(data)
        kid = cbor.decode(outer.value[0])[HDR_KID]
    except Exception:
        return None
    return kid if type(kid) is bytes else None


def _reason(exc: PackError) -> Reason:
    return Reason(exc.reason)


def _reverify(raw: bytes, device_id: bytes, public: bytes, n: int) -> Pack:
    key = PublicKey(public)
    keys = {key.kid: TrustedKey(key, device_id, PackKind.MEMORY)}
    try:
        return verify_pack(raw, keys, None, PackKind.MEMORY, require_chain=False).pack
    except PackError as exc:
        raise TenantStoreError(f"stored pack {n} does not verify any more: {exc}") from None
