"""The one door into the daemon's store for the memory engine and the semantic substrate.

They read what the daemon took in — the device registry, accepted packs (verified once,
on intake; on the way out checked against the hash recorded then and against their
device's key id) and records, in arrival order from a cursor — and never write to it.
They import this module and nothing else of :mod:`hirmem.daemon`, so the store's
schema, its write paths and the service can change behind it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from hirmem.daemon.store import DeviceRow, Store, StoredPack, StoreError
from hirmem.protocol.packs import Pack
from hirmem.protocol.records import Record

__all__ = ["DeviceRow", "IntakeReader", "StoredPack", "open_intake"]


class IntakeReader(Protocol):
    """What a reader may ask of the daemon's store (:class:`~hirmem.daemon.store.Store`)."""

    def devices(self) -> list[DeviceRow]:
        """The registered devices, ordered by id."""
        ...

    def packs(self, device_id: bytes | None = None) -> list[StoredPack]:
        """The accepted packs' envelopes, of one device or all."""
        ...

    def packs_since(self, after: int = 0, limit: int = 100) -> list[tuple[int, Pack]]:
        """Accepted packs in arrival order, (cursor, pack) with cursor > ``after``."""
        ...

    def records(self, after: int = 0, limit: int = 1000) -> list[tuple[int, Record, bytes]]:
        """Stored records in arrival order: (cursor, record, pack_id), cursor > ``after``."""
        ...

    def record_conflicts(self) -> list[tuple[bytes, bytes, int, bytes]]:
        """(record id, pack_id, index in the pack, hash) of the records of accepted packs
        that ``records`` does not return: their id was held by a different record."""
        ...


@contextmanager
def open_intake(path: str | Path) -> Iterator[IntakeReader]:
    """Open the daemon's store at ``path`` for reading; closed when the block ends.

    A reader never creates a store: a path with nothing there (a mistyped one, or a daemon
    that has not run yet) is refused, rather than answered from a new empty store."""
    if not Path(path).is_file():
        raise StoreError(f"{path}: no daemon store here (is the path right? the daemon "
                         "creates it when it first runs)")  # fmt: skip
    with Store(path) as store:
        yield store
