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
asserts, the host recomputes what it can from what it holds and gates on its own
findings: bit 2 source_present and bit 3 schema_valid from the record (§9.3, as the
device must); bit 1 signature_intact from the pack signature it verified (and the
record's hash over its content); bit 0 uncertainty_disclosed from the confidence field
(a probability, 0 ≤ Q ≤ 1); bit 7 structurally_consistent from the payload's own schema
when it declares one (JSON: :func:`hirmem.protocol.records.structurally_consistent`);
bit 4 baseline_aligned for a reading whose sensor has a distilled baseline
(:func:`hirmem.memory.distill.baseline`: the pattern as the pack found it, resting on at
least ``baseline_min_episodes`` readings; within ``baseline_sigmas`` standard deviations
of its mean). The others (reversibility, invariants, life-first, coercion, consent,
domination; structure of a payload that declares no schema; the baseline of anything
else) stay the device's assertion. When the device asserted an evaluated bit
differently, the host's value is used and the disagreement is appended to the audit
chain (``intake-mismatch``, with the device's flags and the bits named) and reported.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from hirmem.memory import distill
from hirmem.memory.audit import Entry
from hirmem.memory.engine import Captured, MemoryEngine
from hirmem.memory.model import Memory, State, memory_text
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


def check_record(
    rec: Record, device_id: bytes, link: bytes | None, intact: bool | None = None
) -> str:
    """What is wrong with a device record, or "" when the host agrees with the device
    (``intact``: whether its hash matches its content, when the caller checked it)."""
    if rec.id[: len(device_id)] != device_id:
        return f"record id does not start with device id {device_id.hex()}"
    if link is not None and rec.prev_hash != link:
        return "prev_hash does not continue the device chain"
    if intact is None:
        intact = rec.hash == record_hash(
            rec.id, rec.payload, rec.source, rec.timestamp, rec.context, rec.prev_hash
        )
    if not intact:
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
    key, which is what sets signature_intact), in one transaction
    (:meth:`MemoryEngine.admit_captured`)."""
    report = IntakeReport()
    link = pack_prev
    actor = f"intake:{device_id.hex()}"
    device, key_id = device_id.hex(), kid.hex()
    records = list(records)
    with engine.store.transaction():
        now = engine.clock()
        held = engine.store.hashes_of([rec.id.hex() for rec in records])
        items: list[Captured] = []
        baselines: dict[tuple[str, str], distill.Stats | None] = {}
        for rec in records:
            mid = rec.id.hex()
            intact = rec.hash == record_hash(
                rec.id, rec.payload, rec.source, rec.timestamp, rec.context, rec.prev_hash
            )  # once for both checks that need it
            problem = check_record(rec, device_id, link, intact)
            link = rec.hash
            if mid in held:
                (report.duplicates if held[mid] == rec.hash else report.conflicts).append(mid)
                continue
            held[mid] = rec.hash  # the same id again in this pack is a duplicate too
            seen = describe(rec.payload, rec.source)  # a fact, a reading or an action
            aligned = None
            if seen.kind == "reading":  # against its sensor's pattern as the pack found it
                sensor = (seen.subject, seen.attribute)
                if sensor not in baselines:
                    baselines[sensor] = distill.baseline(engine, device, *sensor)
                aligned = distill.baseline_aligned(engine, baselines[sensor], seen.value)
            flags, disagreement = host_flags(rec, signature_verified, aligned, intact)
            text = memory_text(rec.payload, seen.subject, seen.attribute, seen.value)
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
                device=device,
                kid=key_id,
                device_scores=(rec.h, rec.i, rec.r, rec.f, rec.c, rec.rn, rec.w),
                created=now,
                embedding=engine.embedder.embed(text).astype(np.float32).tobytes(),
            )
            notes: tuple[Entry, ...] = ()
            if disagreement:
                report.disagreed[mid] = disagreement
                notes = (Entry("intake-mismatch", mid,
                               {"flags": rec.flags, "reason": disagreement}, actor),)  # fmt: skip
            if problem:
                report.mismatched[mid] = problem
            items.append(Captured(m, problem and f"device record: {problem}", actor, notes))
        for out in engine.admit_captured(items, now, mode="fixed"):
            (report.quarantined if out.state is State.QUARANTINED else report.admitted).append(
                out.id
            )
    return report
