"""A tenant's SQLite store writes concurrent uploads in group commits: fewer transactions
than packs, every writer answered after the COMMIT that holds its pack, and a failed
commit fails its own writers alone (nothing of it stored; they retry) without stalling
the others."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hirmem.fleet.tenant import Accepted, TenantStore
from hirmem.protocol.keys import derive_test_key
from hirmem.sql.backend import SqliteBackend, Tx
from test_store import Device


class SlowBackend(SqliteBackend):
    """SQLite whose write transactions take 20 ms more (a slow fsync), counted; the
    ``fail`` next ones raise a disk error before COMMIT."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.writes = 0
        self.fail = 0

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        with super().transaction() as tx:
            self.writes += 1
            yield tx
            time.sleep(0.02)
            if self.fail:
                self.fail -= 1
                raise sqlite3.OperationalError("disk I/O error (injected)")


def upload_all(store: TenantStore, packs: list[tuple[str, bytes]]) -> list[object]:
    outcomes: list[object] = [None] * len(packs)
    barrier = threading.Barrier(len(packs))

    def send(i: int) -> None:
        barrier.wait()
        try:
            outcomes[i] = store.take(packs[i][0], packs[i][1], "gw")
        except sqlite3.Error as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(packs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a writer never got its answer"
    return outcomes


def make(tmp_path: Path, n: int) -> tuple[TenantStore, SlowBackend, list[Device]]:
    backend = SlowBackend(tmp_path / "t.db")
    store = TenantStore(backend, "t")
    devices = []
    for i in range(n):
        dev = Device(bytes([0xA0, 0, 0, 0, 0, 0, 0, i + 1]), derive_test_key(f"group {i}"))
        store.add_device(dev.device_id, dev.key.public.raw)
        devices.append(dev)
    return store, backend, devices


def test_concurrent_uploads_share_commits(tmp_path: Path) -> None:
    store, backend, devices = make(tmp_path, 16)
    packs = [(p.pack_id.hex(), p.encoded) for p in (d.pack(4) for d in devices)]
    before = backend.writes
    outcomes = upload_all(store, packs)
    assert all(isinstance(o, Accepted) and o.first for o in outcomes)
    assert backend.writes - before < 16  # one transaction held several packs
    assert store.counts()["packs"] == 16 and store.counts()["records"] == 64


def test_a_failed_group_commit_fails_its_writers_alone(tmp_path: Path) -> None:
    store, backend, devices = make(tmp_path, 12)
    packs = [(p.pack_id.hex(), p.encoded) for p in (d.pack(2) for d in devices)]
    backend.fail = 1
    outcomes = upload_all(store, packs)
    failed = [i for i, o in enumerate(outcomes) if isinstance(o, sqlite3.Error)]
    assert failed and all(isinstance(outcomes[i], Accepted) for i in range(12) if i not in failed)
    assert store.counts()["packs"] == 12 - len(failed)  # nothing of the failed commit stored
    for i in failed:  # the gateway sends again: stored now, once
        again = store.take(packs[i][0], packs[i][1], "gw")
        assert isinstance(again, Accepted) and again.first
    assert store.counts()["packs"] == 12 and store.counts()["jobs"] == 12
