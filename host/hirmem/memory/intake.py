"""Records from device packs into the memory engine, re-checked on the host.

The daemon verifies a pack's signature and chain (:func:`hirmem.protocol.packs.verify_pack`) and
hands its records here with the signer's device id and key id. Each record:

* keeps the device's gate scores (``device_scores``: h, i, r, f, c, rn, w as Q16.16)
  next to the host's own;
* is re-checked: the id belongs to the device, the chain link, the hash (§7.4), the
  normalised flags (§9.3), the gate scores recomputed in fixed point (§9.4) and the
  state/layer the gate gives. A record that fails any check is stored all the same
  (quarantine preserves) but quarantined with the failure as its reason;
* then goes through stages 2-5 in fixed mode, exactly as a host capture does, so a
  GREEN record consolidates, a YELLOW one is a held candidate and a RED or hard-failed
  one is quarantined.

A record whose id is already stored is a duplicate (a re-sent pack) and is skipped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from hirmem.memory import contradiction
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.model import Memory
from hirmem.protocol.fixedpoint import ONE
from hirmem.protocol.gate import evaluate
from hirmem.protocol.identity import fold
from hirmem.protocol.records import Layer, Record, normalise, record_hash

__all__ = ["IntakeReport", "check_record", "intake_records"]


@dataclass
class IntakeReport:
    admitted: list[str] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    mismatched: dict[str, str] = field(default_factory=dict)
    # ids held by a different record (another hash): not admitted, never "already held"
    conflicts: list[str] = field(default_factory=list)


def check_record(rec: Record, device_id: bytes, link: bytes | None) -> str:
    """What is wrong with a device record, or "" when the host agrees with the device."""
    if rec.id[: len(device_id)] != device_id:
        return f"record id does not start with device id {device_id.hex()}"
    if link is not None and rec.prev_hash != link:
        return "prev_hash does not continue the device chain"
    if record_hash(rec.id, rec.payload, rec.source, rec.timestamp, rec.context, rec.prev_hash) != (
        rec.hash
    ):
        return "hash does not match the record content (corrupted)"
    if normalise(rec.flags, rec.payload, rec.source, rec.timestamp, rec.context) != rec.flags:
        return "flags are not normalised (schema_valid / source_present)"
    g = evaluate(rec.flags, rec.confidence, rec.provenance)
    if (rec.h, rec.i, rec.r, rec.f, rec.c, rec.rn, rec.w) != (g.h, g.i, g.r, g.f, g.c, g.rn, g.w):
        return "device gate scores differ from the host's fixed-point gate"
    if (rec.state, rec.layer) != (int(g.disposition), int(Layer.EPISODIC)):
        return "state/layer differ from the gate's disposition"
    return ""


def intake_records(
    engine: MemoryEngine,
    records: Iterable[Record],
    device_id: bytes,
    kid: bytes,
    pack_prev: bytes | None = None,
) -> IntakeReport:
    """Admit the records of one verified pack (``pack_prev`` = the pack's ``prev``)."""
    report = IntakeReport()
    link = pack_prev
    with engine.store.transaction():
        for rec in records:
            mid = rec.id.hex()
            problem = check_record(rec, device_id, link)
            link = rec.hash
            held = engine.store.get(mid)
            if held is not None:
                (report.duplicates if held.hash == rec.hash else report.conflicts).append(mid)
                continue
            now = engine.clock()
            parsed = contradiction.structured(rec.payload)
            subject, attribute, value, negated = parsed or ("", "", "", False)
            m = Memory(
                id=mid,
                payload=rec.payload,
                source=rec.source,
                timestamp=rec.timestamp,
                context=rec.context,
                flags=rec.flags,
                confidence=rec.confidence / ONE,
                provenance=rec.provenance / ONE,
                priority=rec.priority / ONE,
                last_access=now,
                decayed_at=now,
                hash=rec.hash,
                prev_hash=rec.prev_hash,
                subject=fold(subject),
                attribute=fold(attribute),
                value=value,
                negated=negated,
                device=device_id.hex(),
                kid=kid.hex(),
                device_scores=(rec.h, rec.i, rec.r, rec.f, rec.c, rec.rn, rec.w),
                created=now,
            )
            m = m.replace(embedding=engine.embedder.embed(m.text()).astype(np.float32).tobytes())
            engine.insert_volatile(m, now, actor=f"intake:{device_id.hex()}")
            if problem:
                report.mismatched[mid] = problem
            out = engine.process(mid, device_check=problem and f"device record: {problem}",
                                 mode="fixed")  # fmt: skip
            if out.state.name == "QUARANTINED":
                report.quarantined.append(mid)
            else:
                report.admitted.append(mid)
    return report
