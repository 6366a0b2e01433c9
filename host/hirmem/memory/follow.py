"""The memory engine follows the daemon's intake: device packs become memories.

:func:`follow_intake` reads the packs the daemon stored (:meth:`IntakeReader.packs_since`:
their bytes checked against the hash recorded when the daemon verified them) after the
cursor kept in the engine's ``meta`` table, and admits each pack's decoded records with
:func:`hirmem.memory.intake.admit_pack` (the signer, key id and ``prev`` of the pack;
``checked=True``: the daemon verified the signature, the chain and every record before
storing the pack, so nothing is verified twice). The packs of one read are admitted in
one transaction, and the cursor advances in it, so a crash repeats nothing and skips
nothing. A record whose id a different record already holds
(a device that reused ids) is not admitted and is reported as a conflict, never as
"already held".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hirmem.daemon.reader import IntakeReader
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.intake import IntakeReport, PackIn, admit_packs
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

    def add(self, got: IntakeReport) -> None:
        """Count one pack's admission."""
        self.packs += 1
        self.admitted += len(got.admitted)
        self.quarantined += len(got.quarantined)
        self.duplicates += len(got.duplicates)
        self.mismatched += len(got.mismatched)
        self.disagreed += len(got.disagreed)
        self.conflicts += got.conflicts


def follow_intake(engine: MemoryEngine, store: IntakeReader, *, limit: int = 100) -> FollowReport:
    """Admit every pack stored since the last call: ``limit`` packs per read, each read's
    packs in one transaction of the writer (the cursor moved in it)."""
    report = FollowReport()
    cursor = int(engine.store.meta(CURSOR_KEY, "0") or 0)
    while batch := store.packs_since(cursor, limit):
        with engine.store.transaction():
            # another follower may have taken some of them since the cursor was read
            taken = int(engine.store.meta(CURSOR_KEY, "0") or 0)
            packs = [
                PackIn([r for r in pack.items if isinstance(r, Record)], pack.signer, pack.kid,
                       pack.prev)
                for rowid, pack in batch if rowid > taken
            ]  # fmt: skip
            for got in admit_packs(engine, packs, checked=True):
                report.add(got)
            engine.store.set_meta(CURSOR_KEY, str(max(taken, batch[-1][0])))
        cursor = batch[-1][0]
    return report
