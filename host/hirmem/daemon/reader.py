"""The one door into the daemon's store for the memory engine and the semantic substrate.

They read what the daemon took in — the device registry, accepted packs (verified once,
on intake; on the way out checked against the hash recorded then and against their
device's key id) and records, in arrival order from a cursor — and never write to it.
They import this module and nothing else of :mod:`hirmem.daemon`, so the store's
schema, its write paths and the service can change behind it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from hirmem.daemon.store import DeviceRow, Refusal, Store, StoredPack, StoreError
from hirmem.protocol.packs import Pack
from hirmem.protocol.records import Record

__all__ = [
    "DeviceRow", "FleetReader", "IntakeReader", "Refusal", "StoredPack", "open_fleet",
    "open_intake",
]  # fmt: skip


class IntakeReader(Protocol):
    """What a reader may ask of the daemon's store (:class:`~hirmem.daemon.store.Store`)."""

    def devices(self) -> list[DeviceRow]:
        """The registered devices, ordered by id."""
        ...

    def packs(self, device_id: bytes | None = None) -> list[StoredPack]:
        """The accepted packs' envelopes, of one device or all."""
        ...

    def packs_since(self, after: int = 0, limit: int = 100) -> list[tuple[int, Pack]]:
        """Accepted packs in arrival order, (cursor, pack) with cursor > ``after``.

        Verified once, at intake, and not again: each pack's signature, signer and
        chain, and each record's id (the signer's), link (the first to the pack's
        ``prev``), hash, normalised flags, gate scores, state and layer
        (:meth:`~hirmem.protocol.records.Record.check`). The bytes are checked against
        the hash recorded then, so all of that holds for what is returned: a reader
        takes the records as intact and checked. In the daemon's own process a pack is
        the object the verifier decoded (nothing is decoded twice)."""
        ...

    def records(self, after: int = 0, limit: int = 1000) -> list[tuple[int, Record, bytes]]:
        """Stored records in arrival order: (cursor, record, pack_id), cursor > ``after``."""
        ...

    def record_conflicts(self) -> list[tuple[bytes, bytes, int, bytes]]:
        """(record id, pack_id, index in the pack, hash) of the records of accepted packs
        that ``records`` does not return: their id was held by a different record."""
        ...


class FleetReader(IntakeReader, Protocol):
    """What an operator's view reads besides: per-device counters, refusals, knowledge
    state and sessions (the HTTP API and its dashboard, :mod:`hirmem.api`)."""

    def device(self, device_id: bytes) -> DeviceRow | None: ...

    def counters(self, device_id: bytes) -> dict[str, int]:
        """The counters the daemon last saved for the device (frames, refusals, …)."""
        ...

    def counters_of(self, device_ids: Sequence[bytes]) -> dict[bytes, dict[str, int]]:
        """The saved counters of several devices at once."""
        ...

    def refusals(self, device_id: bytes | None = None) -> list[Refusal]: ...

    def device_knowledge(self, device_id: bytes) -> list[tuple[int, str, int, int]]:
        """(seq, status, reason, held_seq) of each knowledge version offered the device."""
        ...

    def sessions(self) -> dict[bytes, tuple[str, str, int]]:
        """device → (line url, session state, since ms)."""
        ...

    def session_names(self) -> dict[bytes, str]: ...

    def count_packs(self, device_id: bytes | None = None) -> int: ...

    def count_records(self, device_id: bytes | None = None) -> int: ...

    def last_packs(self) -> dict[bytes, tuple[int, int]]:
        """device → (seq, received ms) of its latest accepted pack."""
        ...

    def received_since(self, since_ms: int) -> list[int]:
        """Arrival times (ms) of the packs accepted since ``since_ms``."""
        ...

    def pack_boots(self, device_id: bytes) -> dict[bytes, tuple[int, int]]:
        """pack id → (lowest, highest) boot counter of its records."""
        ...


@contextmanager
def open_fleet(path: str | Path) -> Iterator[FleetReader]:
    """:func:`open_intake` with the operator's reads (same refusal of a missing store)."""
    with open_intake(path) as reader:
        assert isinstance(reader, Store)
        yield reader


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
