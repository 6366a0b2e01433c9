"""The memory engine follows the daemon's intake: device packs become memories.

:func:`follow_intake` reads the packs the daemon stored (:meth:`IntakeReader.packs_since`:
their bytes checked against the hash recorded when the daemon verified them) after the
cursor kept in the engine's ``meta`` table, and admits their records through
:func:`intake_records` (the device's gate scores kept and re-checked on the host). The
cursor advances in the same engine transaction as the records, so a crash between packs
repeats nothing and skips nothing. A record whose id a different record already holds
(a device that reused ids) is not admitted and is reported as a conflict, never as
"already held".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hirmem.daemon.reader import IntakeReader
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.intake import intake_records
from hirmem.protocol.records import Record

CURSOR_KEY = "intake_cursor"


@dataclass
class FollowReport:
    packs: int = 0
    admitted: int = 0
    quarantined: int = 0
    duplicates: int = 0
    mismatched: int = 0
    disagreed: int = 0  # records whose host-evaluated sub-checks differ from the device's
    conflicts: list[str] = field(default_factory=list)  # record ids held by another record


def follow_intake(engine: MemoryEngine, store: IntakeReader, *, limit: int = 100) -> FollowReport:
    """Admit every pack stored since the last call (at most ``limit`` per round trip)."""
    report = FollowReport()
    cursor = int(engine.store.meta(CURSOR_KEY, "0") or 0)
    while batch := store.packs_since(cursor, limit):
        for rowid, pack in batch:
            records = [r for r in pack.items if isinstance(r, Record)]
            with engine.store.transaction():
                # another follower may have taken this pack since the cursor was read
                if int(engine.store.meta(CURSOR_KEY, "0") or 0) >= rowid:
                    cursor = rowid
                    continue
                got = intake_records(engine, records, pack.signer, pack.kid, pack.prev)
                engine.store.set_meta(CURSOR_KEY, str(rowid))
            cursor = rowid
            report.packs += 1
            report.admitted += len(got.admitted)
            report.quarantined += len(got.quarantined)
            report.duplicates += len(got.duplicates)
            report.mismatched += len(got.mismatched)
            report.disagreed += len(got.disagreed)
            report.conflicts += got.conflicts
    return report
