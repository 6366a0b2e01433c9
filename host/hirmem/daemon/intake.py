"""The daemon's pack intake: a session's PACK_OFFERs into the durable store.

:class:`StoreIntake` is the :class:`hirmem.link.session.PackIntake` the daemon gives each
session: ``device_key`` gives the registered key a session PROOF must verify with
(a refused PROOF goes to the refusals digest), ``offer`` verifies and commits in
one transaction (:meth:`Store.take_pack`)
before the session sends its PACK_RESULT, and ``chain_head`` answers HELLO_ACK from
the same database, so a restarted daemon continues every device's chain.

A record whose id a different record already holds (a device that reused ids) is kept
by the store in ``record_conflicts``; the intake counts it (``record_conflicts``, a
daemon counter and metric) and logs a warning with the ids, so it is never silent.
"""

from __future__ import annotations

import logging
import time

from hirmem.daemon.metrics import IntakeLatency
from hirmem.daemon.store import Intake, Store
from hirmem.link.session import DeviceInfo, PackDisposition
from hirmem.protocol.keys import PublicKey
from hirmem.protocol.messages import PackStatus
from hirmem.protocol.packs import ChainHead, Reason

_STATUS = {
    "accepted": PackStatus.ACCEPTED,
    "duplicate": PackStatus.DUPLICATE,
    "refused": PackStatus.REFUSED,
    "deferred": PackStatus.DEFERRED,  # the fleet outbox is full: the device keeps the pack
}


log = logging.getLogger("hirmem.daemon.intake")
LOGGED_IDS = 4  # record ids named in one warning; the count says how many there were


class StoreIntake:
    """Device packs into a :class:`Store`, exactly once."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.record_conflicts = 0  # records of accepted packs parked as conflicts
        self.latency = IntakeLatency()  # from the complete pack to its commit, by outcome

    def chain_head(self, device: DeviceInfo) -> ChainHead | None:
        return self.store.chain_head(device.device_id)

    def device_key(self, device: DeviceInfo) -> PublicKey | None:
        row = self.store.device(device.device_id)
        return None if row is None else PublicKey(row.public_key)

    def proof_refused(self, device: DeviceInfo, body: bytes, reason: Reason, detail: str) -> None:
        self.store.refuse_proof(device.device_id, body, reason, detail)

    def offer(self, device: DeviceInfo, pack: bytes) -> PackDisposition:
        taken = self._take(device.device_id, pack)
        if taken.conflicts:
            self.record_conflicts += len(taken.conflicts)
            ids = [rid.hex() for rid in taken.conflicts[:LOGGED_IDS]]
            log.warning(
                "record conflicts: ids reused with other contents, kept apart",
                extra={"ctx": {"device": device.device_id.hex(), "pack": taken.pack_id.hex(),
                               "seq": taken.seq, "count": len(taken.conflicts),
                               "ids": ",".join(ids)}},
            )  # fmt: skip
        reason = taken.reason if taken.status in ("refused", "deferred") else Reason.NONE
        status = _STATUS[taken.status]
        return PackDisposition(status, reason, taken.pack_id, taken.seq, taken.detail)

    def _take(self, device_id: bytes, pack: bytes) -> Intake:
        """The store's answer, timed: the session calls ``offer`` as soon as the pack's
        last byte was read, so this is the time from received to committed."""
        start = time.perf_counter()
        try:
            taken = self.store.take_pack(device_id, pack)
        except BaseException:
            self.latency.observe("deferred", time.perf_counter() - start)
            raise
        self.latency.observe(taken.status, time.perf_counter() - start)
        return taken
