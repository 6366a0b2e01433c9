"""Fleet consolidation: a tenant's accepted packs through the memory engine and into the
semantic substrate, across all its devices.

A worker claims jobs from the tenant's queue (:meth:`TenantStore.claim`: on PostgreSQL
``FOR UPDATE SKIP LOCKED``, so workers in several processes share the queue without
waiting on each other), reads each pack back (verified again with its device's key),
admits its records into the tenant's memory engine (:func:`intake_records`, which keeps
each memory's device and key and skips a record it already holds), feeds the same
records to the tenant's semantic substrate (a PROV trace record → pack → device → key),
and only then marks the job done. A worker killed between the two leaves the job to be
claimed again when its lease ends; the engine and the substrate see the repeat as a
duplicate, so nothing is admitted twice.

Where the engine and the substrate keep their state follows the tenant: a PostgreSQL
tenant's memory engine is in the schema ``memory`` of the tenant's own database and its
semantic substrate in the schema ``semantic`` (so the synchronous standby has both, and
``hirmem fleet tenant move`` carries both: they are opened again wherever the placement
points, see ``locate``, or when their server dropped their connections); a SQLite
tenant's are the files ``memory/<tenant>.db`` and ``semantic/<tenant>.db`` beside the
fleet's registry. A PostgreSQL tenant's engine signs its checkpoints with the key
``key_of(tenant)`` gives (:meth:`hirmem.fleet.registry.Registry.checkpoint_key`: sealed in
a PostgreSQL registry, so every node signs the one chain with one key; else the file
``memory/<tenant>.key`` in the fleet directory, also the default without ``key_of``).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Container, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from hirmem.daemon.reader import DeviceRow, StoredPack
from hirmem.fleet.tenant import TenantStore
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.intake import intake_records
from hirmem.protocol.errors import HirmemError
from hirmem.protocol.keys import SigningKey, read_key_file, write_key_file
from hirmem.protocol.packs import Pack
from hirmem.protocol.records import Record
from hirmem.semantic.devices import DeviceFeed
from hirmem.semantic.substrate import Substrate
from hirmem.sql import PgTarget
from hirmem.sql.pgconn import PgConnection

__all__ = ["Consolidator", "Recalled", "RoundReport"]


@dataclass
class RoundReport:
    packs: int = 0
    admitted: int = 0
    quarantined: int = 0
    duplicates: int = 0
    assertions: int = 0
    conflicts: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Recalled:
    """One recall answer at the fleet with its trace: record, pack, device, key."""

    record: str
    text: str
    score: float
    device: str
    pack: str
    kid: str


class _OnePack:
    """A tenant store seen through one pack: what :class:`DeviceFeed` reads, limited to
    the records of the pack a job names (no cursor over the whole store, whose numbers
    PostgreSQL may commit out of order)."""

    def __init__(self, store: TenantStore, pack: Pack, received: int) -> None:
        self.store, self.pack, self.received = store, pack, received

    def devices(self) -> list[DeviceRow]:
        return [d for d in self.store.devices() if d.device_id == self.pack.signer]

    def packs(self, device_id: bytes | None = None) -> list[StoredPack]:
        p = self.pack
        return [
            StoredPack(
                p.pack_id, p.signer, p.seq, p.hash, p.prev, p.created, self.received, len(p.items)
            )
        ]

    def packs_since(self, after: int = 0, limit: int = 100) -> list[tuple[int, Pack]]:
        return [] if after else [(1, self.pack)]

    def records(self, after: int = 0, limit: int = 1000) -> list[tuple[int, Record, bytes]]:
        recs = [r for r in self.pack.items if isinstance(r, Record)]
        return [(i + 1, r, self.pack.pack_id) for i, r in enumerate(recs) if i >= after][:limit]

    def record_conflicts(self) -> list[tuple[bytes, bytes, int, bytes]]:
        return []


MEMORY_SCHEMA = "memory"  # the engine's schema in a PostgreSQL tenant's database
SEMANTIC_SCHEMA = "semantic"  # the substrate's schema there


class Consolidator:
    """Memory engines and substrates per tenant, under ``directory``; one per process.

    ``locate(tenant)``: the conninfo of the tenant's PostgreSQL database, None for a
    SQLite tenant (:meth:`hirmem.fleet.registry.Registry.postgres_of`, read at every use,
    so a tenant moved to a promoted standby has its engine opened there); without it
    every engine is a SQLite file."""

    def __init__(
        self,
        directory: str | Path,
        worker: str,
        clock: Callable[[], float] = time.time,
        locate: Callable[[str], str | None] | None = None,
        key_of: Callable[[str], SigningKey] | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.worker = worker
        self.clock = clock
        self.locate = locate or (lambda tenant: None)
        self.key_of = key_of
        self._engines: dict[str, MemoryEngine] = {}
        self._placed: dict[str, str | None] = {}  # tenant → the database its engine is on
        self._substrates: dict[str, Substrate] = {}
        self._sited: dict[str, str | None] = {}  # tenant → the database its substrate is on
        self._lock = threading.Lock()  # one round at a time per process: one engine writer
        self._opening = threading.Lock()  # the engines' table (the API reads it mid-round)

    def engine(self, tenant: str) -> MemoryEngine:
        where = self.locate(tenant)
        with self._opening:
            held = self._engines.get(tenant)
            if held is not None and (self._placed[tenant] != where or _broken(held)):
                self._drop(tenant)  # moved (a failover), or its server went away
                held = None
            if held is None:
                held = self._open(tenant, where)
                self._engines[tenant], self._placed[tenant] = held, where
            return held

    def _open(self, tenant: str, where: str | None) -> MemoryEngine:
        folder = self.directory / "memory"
        folder.mkdir(parents=True, exist_ok=True)
        if where is None:
            return MemoryEngine(folder / f"{tenant}.db", clock=self.clock)
        if self.key_of is not None:
            key = self.key_of(tenant)
        else:
            key_path = folder / f"{tenant}.key"
            if not key_path.exists():
                write_key_file(key_path, SigningKey.generate())
            key = read_key_file(key_path)
        return MemoryEngine(PgTarget(where, MEMORY_SCHEMA), clock=self.clock, signing_key=key)

    def _drop(self, tenant: str) -> None:
        engine = self._engines.pop(tenant)
        self._placed.pop(tenant, None)
        try:
            engine.close()  # signs the head where it can
        except (HirmemError, sqlite3.Error):
            with suppress(Exception):
                engine.store.close()

    def substrate(self, tenant: str) -> Substrate:
        """The tenant's substrate, opened where the tenant is (again when it moved or its
        server dropped the connections)."""
        where = self.locate(tenant)
        held = self._substrates.get(tenant)
        if held is not None and (self._sited[tenant] != where or _substrate_broken(held)):
            self._substrates.pop(tenant)
            _close_substrate(held)
            held = None
        if held is None:
            if where is None:
                path = self.directory / "semantic" / f"{tenant}.db"
                path.parent.mkdir(parents=True, exist_ok=True)
                held = Substrate.open(path)
            else:
                held = Substrate.open(PgTarget(where, SEMANTIC_SCHEMA))
            self._substrates[tenant], self._sited[tenant] = held, where
        return held

    def _kept(self, kind: str, tenant: str, held: Container[str]) -> bool:
        """Whether the tenant's ``kind`` store is open or on disk (never made by a read)."""
        if tenant in held:
            return True
        where = self.locate(tenant)
        if where is not None:
            schema = MEMORY_SCHEMA if kind == "memory" else SEMANTIC_SCHEMA
            return _has_table(where, f"{schema}.{_KEPT_TABLE[kind]}")
        return (self.directory / kind / f"{tenant}.db").is_file()

    def served_engine(self, tenant: str) -> MemoryEngine | None:
        """The tenant's engine for the API in this process (thread-safe on its own), None
        before the tenant's first consolidation made its store. It does not wait for a
        round: the engine serialises its own writes."""
        if not self._kept("memory", tenant, self._engines):
            return None
        return self.engine(tenant)

    @contextmanager
    def served_substrate(self, tenant: str) -> Iterator[Substrate | None]:
        """The tenant's substrate for the API, used between rounds (None before the first
        one): the rounds' own, so an answer sees every round that finished."""
        with self._lock:
            kept = self._kept("semantic", tenant, self._substrates)
            yield self.substrate(tenant) if kept else None

    def close(self) -> None:
        with self._lock, self._opening:
            for engine in self._engines.values():
                engine.close()
            for sub in self._substrates.values():
                _close_substrate(sub)
            self._engines.clear()
            self._placed.clear()
            self._substrates.clear()
            self._sited.clear()

    def run(self, tenant: str, store: TenantStore, limit: int = 32) -> RoundReport:
        """Claim and consolidate up to ``limit`` jobs of ``tenant``."""
        report = RoundReport()
        with self._lock:
            jobs = store.claim(self.worker, limit)
            if not jobs:
                return report
            engine, substrate = self.engine(tenant), self.substrate(tenant)
            for job in jobs:
                pack, received = store.pack_by_n(job.pack_n)
                records = [r for r in pack.items if isinstance(r, Record)]
                got = intake_records(engine, records, pack.signer, pack.kid, pack.prev)
                feed = DeviceFeed(  # the tenant's rows read <tenant>/<device>/<source>
                    _OnePack(store, pack, received), substrate, verdict=engine.withheld,
                    tenant=tenant,
                )
                _, fed = feed.pull(0, len(records) + 1)
                substrate.save()
                store.finish([job])
                report.packs += 1
                report.admitted += len(got.admitted)
                report.quarantined += len(got.quarantined)
                report.duplicates += len(got.duplicates)
                report.assertions += len(fed.triples)
                report.conflicts += got.conflicts
            engine.checkpoint()  # the chain's head signed: what the API's audit shows
        return report

    def recall(self, tenant: str, store: TenantStore, query: str, k: int = 5) -> list[Recalled]:
        """The tenant's memory recalled across its devices, each answer traced to the
        record, the pack that carried it, the device and the key that signed it."""
        with self._lock:
            engine = self.engine(tenant)
            hits = engine.recall(query, k, touch=False)
            out = []
            for hit in hits:
                m = engine.require(hit.id)
                origin = store.record_origin(bytes.fromhex(m.id))
                if origin is None:
                    continue  # a memory of the host's own, not a device record
                pack_id, device, kid = origin
                out.append(
                    Recalled(m.id, m.text(), hit.score, device.hex(), pack_id.hex(), kid.hex())
                )
        return out


def _broken(engine: MemoryEngine) -> bool:
    """A PostgreSQL engine whose write connection the server dropped (killed, failed
    over): reopened at its next use rather than failing every round."""
    db = engine.store.db
    return isinstance(db, PgConnection) and bool(db.raw.closed or db.raw.broken)


_KEPT_TABLE = {"memory": "memories", "semantic": "prov"}  # a table each store makes first


def _pg_connections(sub: Substrate) -> list[PgConnection]:
    """The PostgreSQL connections of a substrate's stores (none for a SQLite one)."""
    parts = (sub.docs, sub.triples, sub.vectors, sub.graph, sub.ledger, sub.decisions, sub.prov,
             sub.passages, sub.claims, sub.memories, sub.entities)  # fmt: skip
    found = (getattr(part, "_db", None) for part in parts)
    return [db for db in found if isinstance(db, PgConnection)]


def _substrate_broken(sub: Substrate) -> bool:
    """A PostgreSQL substrate one of whose connections the server dropped."""
    return any(db.raw.closed or db.raw.broken for db in _pg_connections(sub))


def _close_substrate(sub: Substrate) -> None:
    """Close a substrate, its connections even when their server is gone (what was not
    flushed is redone: the jobs it came from are not marked done before a flush)."""
    try:
        sub.close()
    except (HirmemError, sqlite3.Error):
        for db in _pg_connections(sub):
            with suppress(Exception):
                db.close()


def _has_table(conninfo: str, table: str) -> bool:
    """Whether a tenant's PostgreSQL database holds ``table`` yet (a read never makes
    one)."""
    import psycopg

    try:
        with psycopg.connect(conninfo, autocommit=True) as db:
            row = db.execute("SELECT to_regclass(%s)", (table,)).fetchone()
    except psycopg.Error as exc:
        raise HirmemError(f"cannot reach the tenant's database: {exc}".strip()) from None
    return row is not None and row[0] is not None
