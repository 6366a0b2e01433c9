"""The daemon's pack intake: a session's PACK_OFFERs into the durable store.

:class:`StoreIntake` is the :class:`hirmem.link.session.PackIntake` the daemon gives each
session: ``offer`` verifies and commits in one transaction (:meth:`Store.take_pack`)
before the session sends its PACK_RESULT, and ``chain_head`` answers HELLO_ACK from
the same database, so a restarted daemon continues every device's chain.
"""

from __future__ import annotations

from hirmem.daemon.store import Store
from hirmem.link.session import DeviceInfo, PackDisposition
from hirmem.protocol.messages import PackStatus
from hirmem.protocol.packs import ChainHead, Reason

_STATUS = {
    "accepted": PackStatus.ACCEPTED,
    "duplicate": PackStatus.DUPLICATE,
    "refused": PackStatus.REFUSED,
}


class StoreIntake:
    """Device packs into a :class:`Store`, exactly once."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def chain_head(self, device: DeviceInfo) -> ChainHead | None:
        return self.store.chain_head(device.device_id)

    def offer(self, device: DeviceInfo, pack: bytes) -> PackDisposition:
        taken = self.store.take_pack(device.device_id, pack)
        reason = taken.reason if taken.status == "refused" else Reason.NONE
        status = _STATUS[taken.status]
        return PackDisposition(status, reason, taken.pack_id, taken.seq, taken.detail)
