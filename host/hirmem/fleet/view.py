"""A tenant's store read as the HTTP API reads a daemon's: a
:class:`~hirmem.daemon.reader.FleetReader` over a :class:`~hirmem.fleet.tenant.TenantStore`.

What a fleet node does not have is answered empty rather than invented: no serial
sessions (devices reach the fleet through gateways), no device counters (a gateway does
not forward them), no knowledge pushes. A device's first and last seen are the arrival
times of its first and latest packs. A refusal's reason is the fleet's wire name (the
keys of :data:`hirmem.fleet.refusals.STATUS`) mapped onto the pack refusal codes the
daemon keeps; a fleet reason that has no code of its own (``revoked``,
``device-of-another-tenant``) is kept at the head of the refusal's detail.
"""

from __future__ import annotations

from collections.abc import Sequence

from hirmem.daemon.reader import DeviceRow, Refusal, StoredPack
from hirmem.fleet.refusals import PACK_REASONS
from hirmem.fleet.tenant import TenantStore
from hirmem.protocol.packs import Pack, Reason
from hirmem.protocol.records import Record

__all__ = ["TenantView", "refusal_code"]

_U64 = 1 << 63  # the tenant store keeps every u64 as value - 2**63
_CODES: dict[str, Reason] = {name: code for code, name in PACK_REASONS.items()}
_CODES.update({
    "revoked": Reason.UNKNOWN_KEY,
    "device-of-another-tenant": Reason.UNKNOWN_KEY,
    "storage-unavailable": Reason.STORAGE,
})  # fmt: skip
BOOT_PACKS = 1000  # the newest packs of a device whose records' boot counters are read


def refusal_code(reason: str) -> tuple[Reason, str]:
    """The daemon's code for a fleet reason, and what to put before the detail ("" when
    the code says it all)."""
    code = _CODES.get(reason, Reason.MALFORMED)
    return code, "" if PACK_REASONS.get(code) == reason else f"{reason}: "


class TenantView:
    """One tenant's store, read-only, in the shape :mod:`hirmem.api.views` reads."""

    def __init__(self, store: TenantStore) -> None:
        self.store = store

    # ---- the IntakeReader: the store answers these itself ----------------------------------

    def packs(self, device_id: bytes | None = None) -> list[StoredPack]:
        return self.store.packs(device_id)

    def packs_since(self, after: int = 0, limit: int = 100) -> list[tuple[int, Pack]]:
        return self.store.packs_since(after, limit)

    def records(self, after: int = 0, limit: int = 1000) -> list[tuple[int, Record, bytes]]:
        return self.store.records(after, limit)

    def record_conflicts(self) -> list[tuple[bytes, bytes, int, bytes]]:
        return self.store.record_conflicts()

    # ---- devices ---------------------------------------------------------------------------

    def devices(self) -> list[DeviceRow]:
        seen = self._seen()
        out = []
        for d in self.store.devices():
            first, last = seen.get(d.device_id, (None, None))
            out.append(DeviceRow(d.device_id, d.public_key, d.kid, d.board, d.firmware, d.boot,
                                 d.registered, first, last, d.head))  # fmt: skip
        return out

    def device(self, device_id: bytes) -> DeviceRow | None:
        return next((d for d in self.devices() if d.device_id == device_id), None)

    def _seen(self) -> dict[bytes, tuple[int, int]]:
        with self.store.backend.reading() as tx:
            rows = tx.rows("SELECT device_id, min(received), max(received) FROM packs "
                           "GROUP BY device_id")  # fmt: skip
        return {bytes(d): (int(lo), int(hi)) for d, lo, hi in rows}

    def counters(self, device_id: bytes) -> dict[str, int]:
        return {}

    def counters_of(self, device_ids: Sequence[bytes]) -> dict[bytes, dict[str, int]]:
        return {d: {} for d in device_ids}

    def device_knowledge(self, device_id: bytes) -> list[tuple[int, str, int, int]]:
        return []

    def sessions(self) -> dict[bytes, tuple[str, str, int]]:
        return {}

    def session_names(self) -> dict[bytes, str]:
        return {}

    # ---- packs and records -------------------------------------------------------------------

    def count_packs(self, device_id: bytes | None = None) -> int:
        return self._count("SELECT count(*) FROM packs", "device_id", device_id)

    def count_records(self, device_id: bytes | None = None) -> int:
        return self._count("SELECT count(*) FROM records r JOIN packs p ON p.n = r.pack_n",
                           "p.device_id", device_id)  # fmt: skip

    def _count(self, sql: str, column: str, device_id: bytes | None) -> int:
        with self.store.backend.reading() as tx:
            if device_id is None:
                return int(tx.rows(sql)[0][0])
            return int(tx.rows(f"{sql} WHERE {column} = ?", (device_id,))[0][0])

    def last_packs(self) -> dict[bytes, tuple[int, int]]:
        with self.store.backend.reading() as tx:
            rows = tx.rows("SELECT device_id, max(seq), max(received) FROM packs "
                           "GROUP BY device_id")  # fmt: skip
        return {bytes(d): (int(s) + _U64, int(r)) for d, s, r in rows}

    def received_since(self, since_ms: int) -> list[int]:
        with self.store.backend.reading() as tx:
            rows = tx.rows("SELECT received FROM packs WHERE received >= ? ORDER BY received",
                           (since_ms,))  # fmt: skip
        return [int(r[0]) for r in rows]

    def pack_boots(self, device_id: bytes) -> dict[bytes, tuple[int, int]]:
        """pack id → (lowest, highest) boot counter of its records' ids (bytes 8-11 of a
        record id), over the device's newest :data:`BOOT_PACKS` packs."""
        with self.store.backend.reading() as tx:
            rows = tx.rows(
                "SELECT p.pack_id, r.id FROM records r JOIN packs p ON p.n = r.pack_n "
                "WHERE p.n IN (SELECT n FROM packs WHERE device_id = ? ORDER BY seq DESC "
                "LIMIT ?)",
                (device_id, BOOT_PACKS),
            )
        out: dict[bytes, tuple[int, int]] = {}
        for pack_id, rid in rows:
            boot = int.from_bytes(bytes(rid)[8:12], "big")
            lo, hi = out.get(bytes(pack_id), (boot, boot))
            out[bytes(pack_id)] = (min(lo, boot), max(hi, boot))
        return out

    # ---- refusals ----------------------------------------------------------------------------

    def refusals(self, device_id: bytes | None = None) -> list[Refusal]:
        sql = ("SELECT sha256, device_id, reason, detail, seq, size, first_at, last_at, offers "
               "FROM refusals")  # fmt: skip
        args: tuple[bytes, ...] = ()
        if device_id is not None:
            sql += " WHERE device_id = ?"
            args = (device_id,)
        with self.store.backend.reading() as tx:
            rows = tx.rows(sql + " ORDER BY first_at, sha256", args)
        out = []
        for sha, dev, reason, detail, seq, size, first, last, offers in rows:
            code, head = refusal_code(str(reason))
            out.append(Refusal(bytes(sha), b"" if dev is None else bytes(dev), code,
                               head + str(detail), None, None if seq is None else int(seq) + _U64,
                               int(size), int(first), int(last), int(offers)))  # fmt: skip
        return out
