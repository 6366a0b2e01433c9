"""The JSON shapes the API answers and the dashboard draws: one function per view.

Everything here reads through :class:`~hirmem.daemon.reader.FleetReader` or the memory
engine; no route builds a shape of its own, so the page and the API never disagree.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass
from typing import Any

from hirmem.daemon.reader import DeviceRow, FleetReader, StoredPack
from hirmem.memory import distill
from hirmem.memory.audit import Verification
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.model import Layer, Memory, State
from hirmem.protocol.clock import now_ms
from hirmem.protocol.packs import Reason

SILENT_AFTER_MS = 60_000  # a device heard from longer ago than this is silent
TIMELINE_PACKS = 200  # the latest packs a device's timeline shows



def reason_name(code: int) -> str:
    try:
        return Reason(code).name.lower()
    except ValueError:
        return f"reason-{code}"


def liveness(d: DeviceRow, now: int, silent_after_ms: int = SILENT_AFTER_MS) -> str:
    """active (heard within ``silent_after_ms``), silent, or never-seen."""
    if d.last_seen is None:
        return "never-seen"
    return "active" if now - d.last_seen <= silent_after_ms else "silent"


@dataclass(frozen=True)
class FleetContext:
    """What every device row needs, read once per listing."""

    now: int
    sessions: dict[bytes, tuple[str, str, int]]
    names: dict[bytes, str]
    last_packs: dict[bytes, tuple[int, int]]

    @classmethod
    def read(cls, reader: FleetReader) -> FleetContext:
        return cls(now_ms(), reader.sessions(), reader.session_names(), reader.last_packs())


def device_rows(reader: FleetReader, devices: list[DeviceRow], ctx: FleetContext
                ) -> list[dict[str, Any]]:  # fmt: skip
    """A page of the device table (the counters read in one query)."""
    counters = reader.counters_of([d.device_id for d in devices])
    return [device_row(reader, d, ctx, counters[d.device_id]) for d in devices]


def device_row(
    reader: FleetReader, d: DeviceRow, ctx: FleetContext, counters: dict[str, int] | None = None
) -> dict[str, Any]:
    """One device as the table shows it: liveness, last pack, chain head, ring, firmware."""
    c = reader.counters(d.device_id) if counters is None else counters
    url, session, since = ctx.sessions.get(d.device_id, ("", "never connected", None))
    last = ctx.last_packs.get(d.device_id)
    used, capacity = c.get("device.ring_used"), c.get("device.ring_capacity")
    return {
        "device": d.device_id.hex(),
        "name": ctx.names.get(d.device_id, ""),
        "board": d.board,
        "firmware": d.firmware,
        "boot": d.boot,
        "liveness": liveness(d, ctx.now),
        "session": session,
        "url": url,
        "session_since_ms": since,
        "last_seen_ms": d.last_seen,
        "last_pack_ms": last[1] if last else None,
        "head_seq": d.head.seq if d.head else None,
        "head_hash": d.head.hash.hex() if d.head else None,
        "ring_used": used,
        "ring_capacity": capacity,
        "ring_fill": (used / capacity) if used is not None and capacity else None,
        "knowledge_version": c.get("device.knowledge_seq"),
    }


def fleet_summary(devices: list[DeviceRow], now: int) -> dict[str, int]:
    out = {"devices": len(devices), "active": 0, "silent": 0, "never-seen": 0}
    for d in devices:
        out[liveness(d, now)] += 1
    return out


def device_detail(reader: FleetReader, d: DeviceRow, ctx: FleetContext) -> dict[str, Any]:
    """One device with its counters, packs and refusals counted, and knowledge state."""
    refusals = reader.refusals(d.device_id)
    return {
        **device_row(reader, d, ctx),
        "kid": d.kid.hex(),
        "public_key": d.public_key.hex(),
        "registered_ms": d.registered,
        "first_seen_ms": d.first_seen,
        "counters": reader.counters(d.device_id),
        "packs": reader.count_packs(d.device_id),
        "records": reader.count_records(d.device_id),
        "refusals": {"digests": len(refusals), "offers": sum(r.offers for r in refusals)},
        "knowledge": [
            {"seq": seq, "status": status, "reason": reason_name(reason), "held_seq": held}
            for seq, status, reason, held in reader.device_knowledge(d.device_id)
        ],
    }


def pack_view(p: StoredPack) -> dict[str, Any]:
    return {"pack": p.pack_id.hex(), "device": p.device_id.hex(), "seq": p.seq,
            "hash": p.hash.hex(), "prev": p.prev.hex(), "created": p.created,
            "received_ms": p.received, "records": p.nrecords}  # fmt: skip


def refusal_views(reader: FleetReader, device_id: bytes | None) -> list[dict[str, Any]]:
    return [
        {"sha256": r.sha256.hex(), "device": r.device_id.hex(), "reason": reason_name(r.reason),
         "detail": r.detail, "seq": r.seq, "size": r.size, "first_ms": r.first_at,
         "last_ms": r.last_at, "offers": r.offers}
        for r in reader.refusals(device_id)
    ]  # fmt: skip


def refusals_by_reason(reader: FleetReader) -> dict[str, int]:
    """Offers refused, by reason, over the fleet (digests kept in the store)."""
    out: dict[str, int] = {}
    for r in reader.refusals(None):
        name = reason_name(r.reason)
        out[name] = out.get(name, 0) + r.offers
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def timeline(reader: FleetReader, device_id: bytes, limit: int = TIMELINE_PACKS
             ) -> list[dict[str, Any]]:  # fmt: skip
    """A device's events, oldest first: its latest ``limit`` packs, the reboots their
    records' boot counters show, the gaps between packs (longer than 3x the median
    interval and 10 s), and its refusals."""
    packs = reader.packs(device_id)[-limit:]
    boots = reader.pack_boots(device_id)
    events: list[dict[str, Any]] = []
    intervals = [b.received - a.received for a, b in itertools.pairwise(packs)]
    gap_ms = max(10_000.0, 3 * statistics.median(intervals)) if intervals else float("inf")
    last_boot: int | None = None
    for n, p in enumerate(packs):
        lo, hi = boots.get(p.pack_id, (None, None))
        if lo is not None and hi is not None:
            if last_boot is not None and hi > last_boot:
                events.append({"kind": "reboot", "at_ms": p.received,
                               "detail": f"boot {last_boot} → {hi}"})  # fmt: skip
            last_boot = hi if last_boot is None else max(last_boot, hi)
        if n and p.received - packs[n - 1].received > gap_ms:
            silent = (p.received - packs[n - 1].received) / 1000
            events.append({"kind": "gap", "at_ms": packs[n - 1].received,
                           "detail": f"{silent:.1f} s without a pack"})  # fmt: skip
        events.append({"kind": "pack", "at_ms": p.received,
                       "detail": f"seq {p.seq}, {p.nrecords} records"})  # fmt: skip
    for r in reader.refusals(device_id):
        events.append({"kind": "refusal", "at_ms": r.last_at,
                       "detail": f"{reason_name(r.reason)} x{r.offers}: {r.detail}"})  # fmt: skip
    events.sort(key=lambda e: (e["at_ms"], e["kind"]))
    return events


def memory_view(m: Memory) -> dict[str, Any]:
    """A memory's fields as JSON (the payload as text when it is UTF-8, and as hex)."""
    try:
        text: str | None = m.payload.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return {
        "id": m.id, "text": text, "payload_hex": m.payload.hex(), "source": m.source,
        "kind": m.kind, "subject": m.subject, "attribute": m.attribute, "value": m.value,
        "state": m.state.name.lower(), "layer": m.layer.name.lower(), "trust": m.trust,
        "strength": m.strength, "scores": {"h": m.h, "i": m.i, "r": m.r, "f": m.f,
                                           "c": m.c, "rn": m.rn, "w": m.w},
        "verdict": ("green", "yellow", "red")[m.verdict] if 0 <= m.verdict <= 2 else None,
        "device": m.device, "version": m.version, "supersedes": m.supersedes,
        "flagged": m.flagged, "quarantine_reason": m.quarantine_reason,
        "permanent": m.permanent, "created": m.created, "last_access": m.last_access,
        "access_count": m.access_count, "audit_seq": m.audit_seq, "hash": m.hash.hex(),
    }  # fmt: skip


def verification_view(v: Verification) -> dict[str, Any]:
    return {"ok": v.ok, "records": v.count, "first_bad": v.first_bad, "reason": v.reason,
            "problems": list(v.problems), "summary": str(v)}  # fmt: skip


def layer_state_counts(engine: MemoryEngine) -> dict[str, dict[str, int]]:
    """Memories by layer and state, answered in SQL."""
    out: dict[str, dict[str, int]] = {}
    for (state, layer), n in engine.store.counts_by_state_layer().items():
        row = out.setdefault(Layer(layer).name.lower(), {})
        row[State(state).name.lower()] = n
    return out


def verdicts_over_time(engine: MemoryEngine, buckets: int = 24) -> dict[str, Any]:
    """Gate verdicts (green, yellow, red) of the memories created in the last span,
    in ``buckets`` equal slices of it (the span: first to last creation, at least 60 s)."""
    with engine.store.reading() as db:
        lo, hi = db.execute(
            "SELECT min(created), max(created) FROM memories WHERE verdict >= 0"
        ).fetchone()
        if lo is None:
            return {"start": None, "step_s": 0, "series": {"green": [], "yellow": [], "red": []}}
        span = max(60.0, float(hi) - float(lo))
        step = span / buckets
        rows = db.execute(
            "SELECT min(CAST((created - ?) / ? AS INTEGER), ?), verdict, count(*) "
            "FROM memories WHERE verdict >= 0 GROUP BY 1, 2",
            (lo, step, buckets - 1),
        ).fetchall()
    series = {name: [0] * buckets for name in ("green", "yellow", "red")}
    for slot, verdict, n in rows:
        if 0 <= verdict <= 2:
            series[("green", "yellow", "red")[verdict]][int(slot)] += int(n)
    return {"start": float(lo), "step_s": step, "series": series}


def intake_rate(reader: FleetReader, now: int, minutes: int = 30) -> list[int]:
    """Packs received per minute over the last ``minutes`` minutes (oldest first)."""
    counts = [0] * minutes
    start = now - minutes * 60_000
    for received in reader.received_since(start):
        counts[min(minutes - 1, (received - start) // 60_000)] += 1
    return counts


def distilled_into(engine: MemoryEngine, episode_id: str) -> list[str]:
    """The derived memories (patterns, procedures) an episode is one of the grounds of."""
    return distill.derived_from(engine, episode_id)
