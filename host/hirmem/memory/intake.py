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

**Which sub-checks the host evaluates itself**
(:func:`hirmem.protocol.records.host_flags`). Of the twelve ACTION_FLAGS bits a device
asserts, the host recomputes four from what it holds and gates on its own findings: bit
2 source_present and bit 3 schema_valid from the record (§9.3, as the device must), bit
1 signature_intact from the pack signature it verified (and the record's hash over its
content), bit 0 uncertainty_disclosed from the confidence field (the record states its
confidence as a probability, 0 ≤ Q ≤ 1). The other eight (baseline, reversibility,
invariants, structure, life-first, coercion, consent, domination) stay the device's
assertion. When the device asserted bit 0 or 1 differently, the host's value is used and
the disagreement is appended to the audit chain (``intake-mismatch``, with the device's
flags and the bits named) and reported. """

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from hirmem.memory.engine import MemoryEngine
from hirmem.memory.model import Memory
from hirmem.memory.observe import describe
from hirmem.protocol.fixedpoint import ONE
from hirmem.protocol.gate import evaluate
from hirmem.protocol.records import Layer, Record, host_flags, normalise, record_hash

__all__ = ["IntakeReport", "check_record", "intake_records"]


"""Bits the host evaluates for a device record beyond normalise's two (bits 2 and 3)."""


@dataclass
class IntakeReport:
    admitted: list[str] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    mismatched: dict[str, str] = field(default_factory=dict)
    disagreed: dict[str, str] = field(default_factory=dict)  # host-evaluated bits differ
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
    signature_verified: bool = True,
) -> IntakeReport:
    """Admit the records of one verified pack (``pack_prev`` = the pack's ``prev``;
    ``signature_verified``: the caller verified the pack's signature with the device's
    key, which is what sets signature_intact)."""
    report = IntakeReport()
    link = pack_prev
    with engine.store.transaction():
        for rec in records:
            mid = rec.id.hex()
            problem = check_record(rec, device_id, link)
            link = rec.hash
            held = engine.store.hash_of(mid)
            if held is not None:
                (report.duplicates if held == rec.hash else report.conflicts).append(mid)
                continue
            now = engine.clock()
            flags, disagreement = host_flags(rec, signature_verified)
            seen = describe(rec.payload, rec.source)  # a fact, a reading or an action
            m = Memory(
                id=mid,
                payload=rec.payload,
                source=rec.source,
                timestamp=rec.timestamp,
                context=rec.context,
                flags=flags,
                confidence=rec.confidence / ONE,
                provenance=rec.provenance / ONE,
                priority=rec.priority / ONE,
                last_access=now,
                decayed_at=now,
                hash=rec.hash,
                prev_hash=rec.prev_hash,
                subject=seen.subject,
                attribute=seen.attribute,
                value=seen.value,
                negated=seen.negated,
                kind=seen.kind,
                device=device_id.hex(),
                kid=kid.hex(),
                device_scores=(rec.h, rec.i, rec.r, rec.f, rec.c, rec.rn, rec.w),
                created=now,
            )
            m = m.replace(embedding=engine.embedder.embed(m.text()).astype(np.float32).tobytes())
            m = engine.insert_volatile(m, now, actor=f"intake:{device_id.hex()}")
            if disagreement:
                report.disagreed[mid] = disagreement
                engine.audit.append(
                    "intake-mismatch", mid, {"flags": rec.flags, "reason": disagreement},
                    actor=f"intake:{device_id.hex()}", ts=now,
                )  # fmt: skip
            if problem:
                report.mismatched[mid] = problem
            out = engine.process(mid, device_check=problem and f"device record: {problem}",
                                 mode="fixed", held=m)  # fmt: skip
            if out.state.name == "QUARANTINED":
                report.quarantined.append(mid)
            else:
                report.admitted.append(mid)
    return report
