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

**A pack is admitted as one** (:func:`admit_pack`): its records are gated, embedded,
inserted, distilled and audited together — one transaction, one ``admit-pack`` audit
record listing every admission (:mod:`.packaudit`), one step per pattern — and each
ends exactly as the one-by-one path (capture, then stages 2-5) would leave it, with the
sensors' baselines as the pack found them. Stated facts, which may contradict or
revise, still go one by one.

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

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from hirmem.memory import distill, packaudit
from hirmem.memory.audit import Entry
from hirmem.memory.embed import embed_batch
from hirmem.memory.engine import HOST_ID, Captured, GateScores, MemoryEngine, gate_scores
from hirmem.memory.model import Memory, State, layer_for, memory_text
from hirmem.memory.observe import Described, describe_parsed, is_episode
from hirmem.memory.store import ADMIT_COLUMNS
from hirmem.protocol.errors import HirmemError
from hirmem.protocol.fixedpoint import ONE
from hirmem.protocol.gate import evaluate
from hirmem.protocol.records import (
    Layer,
    Record,
    host_flags,
    normalise,
    read_payload,
    record_hash,
)

__all__ = ["Admitted", "IntakeReport", "PackIn", "admit_pack", "admit_packs", "check_record",
           "intake_records"]


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
    key, which is what sets signature_intact), in one transaction: every record is
    re-checked here (:func:`admit_pack` with ``checked=False``)."""
    return admit_pack(engine, records, device_id, kid, pack_prev, signature_verified)


class Admitted(NamedTuple):
    """A device record as its pack admits it: what distillation reads of an episode
    (:class:`hirmem.memory.distill.Episode`), without building a whole memory (a
    tuple: built once per record, cheaply)."""

    id: str
    kind: str
    device: str
    subject: str
    attribute: str
    value: str
    negated: bool
    timestamp: int
    payload: bytes
    h: float
    i: float
    r: float
    w: float
    state: State
    flagged: bool = False


class _Fresh(NamedTuple):  # a record of the pack, read once
    rec: Record
    mid: str
    problem: str
    intact: bool
    seen: Described
    structure: bool | None  # bit 7 as read_payload found it
    text: str  # what the embedder sees (memory_text)
    at: int  # its row among the batch's embedded texts (-1: a stated fact, alone)


class PackIn(NamedTuple):
    """A verified pack as :func:`admit_packs` takes it: its records, decoded, in order,
    its signer's device id and key id, and its ``prev`` (the first record's chain link)."""

    records: Sequence[Record]
    device_id: bytes
    kid: bytes
    prev: bytes | None = None


def admit_pack(
    engine: MemoryEngine,
    records: Iterable[Record],
    device_id: bytes,
    kid: bytes,
    pack_prev: bytes | None = None,
    signature_verified: bool = True,
    checked: bool = False,
) -> IntakeReport:
    """Admit the records of one pack, in one transaction of the writer.

    ``records``: the pack's records, decoded, in order; ``device_id``/``kid``: its
    signer; ``pack_prev``: the pack's ``prev`` (the first record's chain link);
    ``signature_verified``: the pack's signature was verified with the device's key
    (sets signature_intact); ``checked``: every record was already checked against its
    chain link, its hash and its gate scores (:func:`hirmem.protocol.packs.verify_pack`
    with the chain, as the daemon does before storing a pack), so they are not checked
    again here.

    Records that contradict and revise nothing (readings, actions, statements) are
    admitted together: gated (the gate remembered per flag word), embedded in one
    batch, inserted with one statement per table, distilled with one update per
    pattern, and audited with **one** ``admit-pack`` entry (:mod:`.packaudit`) that
    lists each admission and each pattern step. A stated fact (a subject and an
    attribute) may contradict or revise what is held, so it goes through
    :meth:`MemoryEngine.admit_captured` one by one, in its place in the order."""
    pack = PackIn(list(records), device_id, kid, pack_prev)
    return admit_packs(engine, [pack], signature_verified, checked)[0]


EMBED_CHUNK = 4096  # texts embedded at once at most (bounds the embedder's work arrays)


def admit_packs(
    engine: MemoryEngine,
    packs: Sequence[PackIn],
    signature_verified: bool = True,
    checked: bool = False,
) -> list[IntakeReport]:
    """Admit several packs (a follow batch) in one transaction of the writer: each
    exactly as :func:`admit_pack` admits it alone, after the ones before it, with one
    report per pack. What does not depend on the packs before — each record's checks,
    its payload read once, whether its id is held already (one look-up for the batch)
    and its embedding (one batch for every record of every pack) — is read first."""
    with engine.store.transaction():
        fresh = _read_packs(engine, packs, checked)
        texts = [f.text for of_pack in fresh for f in of_pack[1] if f.at >= 0]
        vectors = _embed(engine, texts)
        reports = []
        for pack, (report, records) in zip(packs, fresh, strict=True):
            reports.append(report)
            _admit_read(engine, report, records, pack, vectors, signature_verified)
    return reports


def _embed(engine: MemoryEngine, texts: list[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
    if len(texts) <= EMBED_CHUNK:
        return embed_batch(engine.embedder, texts)
    return np.concatenate([embed_batch(engine.embedder, texts[k : k + EMBED_CHUNK])
                           for k in range(0, len(texts), EMBED_CHUNK)])  # fmt: skip


_HOST_PREFIX = HOST_ID.hex()


def _read_packs(
    engine: MemoryEngine, packs: Sequence[PackIn], checked: bool
) -> list[tuple[IntakeReport, list[_Fresh]]]:
    """Each pack's report (its duplicates and conflicts so far) and its fresh records,
    read: checked (unless ``checked``), their payloads parsed and described, and the
    text of each that is admitted with its pack (``at``: its place among those texts,
    -1 for a stated fact, admitted alone). A record is fresh when no stored memory and
    no record before it in the batch holds its id (one look-up for the whole batch: the
    batch's own records are the only device records it stores)."""
    held = engine.store.hashes_of([rec.id.hex() for pack in packs for rec in pack.records])
    out = []
    at = 0
    for pack in packs:
        report = IntakeReport()
        records: list[_Fresh] = []
        link = pack.prev
        device_id = pack.device_id
        for rec in pack.records:
            mid = rec.id.hex()
            if checked:
                problem, intact = "", True
            else:
                intact = rec.hash == record_hash(
                    rec.id, rec.payload, rec.source, rec.timestamp, rec.context, rec.prev_hash
                )  # once for both checks that need it
                problem = check_record(rec, device_id, link, intact)
            link = rec.hash
            if mid.startswith(_HOST_PREFIX):
                # the host's own id space (the patterns it derives): reserved, so a device
                # whose id is the host's prefix never takes an id the host will give
                report.conflicts.append(mid)
                continue
            if mid in held:
                (report.duplicates if held[mid] == rec.hash else report.conflicts).append(mid)
                continue
            held[mid] = rec.hash  # the same id again in this batch is a duplicate too
            # the payload's JSON parsed once: its structure (bit 7) and its form
            structure, data = read_payload(rec.payload)
            seen = describe_parsed(data, rec.source)  # a fact, a reading or an action
            alone = seen.kind == "fact" and bool(seen.subject and seen.attribute)
            text = memory_text(rec.payload, seen.subject, seen.attribute, seen.value)
            records.append(_Fresh(rec, mid, problem, intact, seen, structure, text,
                                  -1 if alone else at))  # fmt: skip
            at += not alone
        out.append((report, records))
    return out



def _admit_read(
    engine: MemoryEngine, report: IntakeReport, records: list[_Fresh], pack: PackIn,
    vectors: np.ndarray[Any, np.dtype[np.float32]], signature_verified: bool,
) -> None:  # fmt: skip
    """One pack's fresh records (:func:`_read_packs`), in its transaction: runs of those
    that contradict and revise nothing admitted together, each stated fact alone."""
    device, key_id = pack.device_id.hex(), pack.kid.hex()
    with engine.store.transaction():
        now = engine.clock()
        run: list[_Fresh] = []
        for f in records:
            if f.at < 0:
                _admit_together(engine, report, run, vectors, device, key_id, now,
                                signature_verified)  # fmt: skip
                run = []
                _admit_alone(engine, report, f, device, key_id, now, signature_verified)
            else:
                run.append(f)
        _admit_together(engine, report, run, vectors, device, key_id, now, signature_verified)


class _Baselines:
    """Each sensor's baseline as the pack found it (read once per sensor per pack)."""

    def __init__(self, engine: MemoryEngine, device: str) -> None:
        self.engine, self.device = engine, device
        self.known: dict[tuple[str, str], distill.Baseline | None] = {}
        self.read: distill.Read = {}  # the distillates read, for the pack's distillation

    def read_all(self, seens: Iterable[Described]) -> None:
        """Read the sensors' distillates of a pack's readings at once (not one by one)."""
        distill.read_open_many(self.engine, [
            ("reading", self.device, seen.subject, seen.attribute, "")
            for seen in seens if seen.kind == "reading"], self.read)  # fmt: skip

    def aligned(self, seen: Described) -> bool | None:
        if seen.kind != "reading":
            return None
        sensor = (seen.subject, seen.attribute)
        if sensor not in self.known:
            self.known[sensor] = distill.baseline(self.engine, self.device, *sensor, self.read)
        return distill.baseline_aligned(self.engine, self.known[sensor], seen.value)


def _host_view(
    f: _Fresh, base: _Baselines, signature_verified: bool, notes: list[Entry],
    report: IntakeReport, actor: str,
) -> int:  # fmt: skip
    """The flags the host gates ``f`` on (its evaluated sub-checks, then stage 2), with
    a disagreement with the device noted and reported."""
    flags, disagreement = host_flags(f.rec, signature_verified, base.aligned(f.seen), f.intact,
                                     f.structure)
    if disagreement:
        report.disagreed[f.mid] = disagreement
        notes.append(Entry("intake-mismatch", f.mid,
                           {"flags": f.rec.flags, "reason": disagreement}, actor))  # fmt: skip
    if f.problem:
        report.mismatched[f.mid] = f.problem
    return flags


def _admit_alone(
    engine: MemoryEngine, report: IntakeReport, f: _Fresh, device: str, key_id: str,
    now: float, signature_verified: bool,
) -> None:  # fmt: skip
    """A stated fact: captured and processed one by one (it may contradict or revise)."""
    rec, seen = f.rec, f.seen
    actor = f"intake:{device}"
    notes: list[Entry] = []
    flags = _host_view(f, _Baselines(engine, device), signature_verified, notes, report, actor)
    m = Memory(
        id=f.mid, payload=rec.payload, source=rec.source, timestamp=rec.timestamp,
        context=rec.context, flags=flags, confidence=rec.confidence / ONE,
        provenance=rec.provenance / ONE, priority=rec.priority / ONE, last_access=now,
        decayed_at=now, hash=rec.hash, prev_hash=rec.prev_hash, subject=seen.subject,
        attribute=seen.attribute, value=seen.value, negated=seen.negated, kind=seen.kind,
        device=device, kid=key_id, device_scores=_device_scores(rec), created=now,
        embedding=engine.embedder.embed(f.text).astype(np.float32).tobytes(),
    )  # fmt: skip
    item = Captured(m, f.problem and f"device record: {f.problem}", actor, tuple(notes))
    for out in engine.admit_captured([item], now, mode="fixed"):
        (report.quarantined if out.state is State.QUARANTINED else report.admitted).append(out.id)


def _device_scores(rec: Record) -> tuple[int, ...]:
    return (rec.h, rec.i, rec.r, rec.f, rec.c, rec.rn, rec.w)


class _Numbering:
    """Distinct values of a pack entry's shared tables, numbered as they first come."""

    def __init__(self) -> None:
        self.of: dict[object, int] = {}
        self.values: list[Any] = []

    def __call__(self, key: object, value: Any) -> int:
        k = self.of.get(key)
        if k is None:
            k = self.of[key] = len(self.values)
            self.values.append(value)
        return k

    def add(self, key: object, value: Any) -> int:
        """Number a key not numbered yet (the caller checked ``of`` first, so that a
        recurring key builds no value)."""
        k = self.of[key] = len(self.values)
        self.values.append(value)
        return k


class _Judged(NamedTuple):
    """Stages 2-5 for the records of a pack alike in what the gate reads: the row's
    :data:`JUDGED_COLUMNS`, the gate result's and the quarantine reason's places in the
    pack's entry (-1: none), the state and the gate's scores."""

    columns: tuple[Any, ...]
    gate: int
    reason: int
    state: State
    g: GateScores


# the judged part of a fresh row (hirmem.memory.store.ADMIT_COLUMNS, in its order)
JUDGED_COLUMNS = ADMIT_COLUMNS[ADMIT_COLUMNS.index("flags") : ADMIT_COLUMNS.index("audit_seq")]


def _judge(
    engine: MemoryEngine, f: _Fresh, flags: int, gates: _Numbering, reasons: _Numbering
) -> _Judged:
    """What stages 3-5 make of ``f`` with its host-normalised ``flags`` (fresh: volatile
    → candidate (→ consolidated), or quarantined)."""
    rec, seen = f.rec, f.seen
    confidence, provenance = rec.confidence / ONE, rec.provenance / ONE
    g = gate_scores(flags, confidence, provenance, "fixed")
    state, reason = engine.disposition(g, f.problem and f"device record: {f.problem}")
    if state is State.CONSOLIDATED and g.h <= 0:
        raise HirmemError(f"memory {f.mid} has H = 0 and cannot consolidate (MEM-INV-1)")
    layer = layer_for(state, seen.kind, Layer.WORKING,
                      is_episode(seen.kind, seen.subject, seen.attribute))  # fmt: skip
    gate_key = (g.q16, g.verdict, g.hard, flags)
    gate = gates.of.get(gate_key)
    if gate is None:
        gate = gates.add(gate_key, [flags, *g.q16, int(g.verdict), int(g.hard)])
    why = reason if state is State.QUARANTINED else ""
    columns = (flags, confidence, provenance, g.h, g.i, g.r, g.f, g.c, g.rn, g.w,
               int(g.verdict), int(g.hard), g.h * g.i * g.r, g.w, int(state), int(layer), why,
               int(g.r == 0), g.mode)  # fmt: skip
    return _Judged(columns, gate, reasons(reason, reason) if reason else -1, state, g)


def _admit_together(
    engine: MemoryEngine, report: IntakeReport, run: list[_Fresh],
    embedded: np.ndarray[Any, np.dtype[np.float32]], device: str, key_id: str, now: float,
    signature_verified: bool,
) -> None:  # fmt: skip
    """Fresh records that contradict and revise nothing, admitted as one: see
    :func:`admit_pack`. Each ends as the one-by-one path would leave it (the same
    state, layer, scores, strength and strength point), with one audit entry for all.
    Records alike in what the gate reads (flags as the host finds them, Q, P, the form,
    what intake found wrong) are judged once. ``embedded``: the batch's embeddings, the
    run's at their records' ``at``."""
    if not run:
        return
    actor = f"intake:{device}"
    base = _Baselines(engine, device)
    base.read_all(f.seen for f in run)
    notes: list[Entry] = []
    gates, scores, reasons = _Numbering(), _Numbering(), _Numbering()
    scores_json: list[str] = []  # the distinct device scores as the rows hold them
    judged: dict[tuple[Any, ...], _Judged] = {}
    episodes: list[Admitted] = []
    own: list[tuple[Any, ...]] = []  # each row's own columns (ADMIT_COLUMNS' first part)
    marks: list[tuple[_Judged, int]] = []  # each record's judgement and device scores
    for f in run:
        rec, seen = f.rec, f.seen
        flags = normalise(_host_view(f, base, signature_verified, notes, report, actor),
                          rec.payload, rec.source, rec.timestamp, rec.context)  # fmt: skip
        key = (flags, rec.confidence, rec.provenance, seen.kind,
               bool(seen.subject and seen.attribute), f.problem)  # fmt: skip
        j = judged.get(key)
        if j is None:
            j = judged[key] = _judge(engine, f, flags, gates, reasons)
        ds = (rec.h, rec.i, rec.r, rec.f, rec.c, rec.rn, rec.w)
        score = scores.of.get(ds)
        if score is None:
            score = scores.add(ds, list(ds))
            scores_json.append(json.dumps(list(ds)))  # the row's device_scores column
        marks.append((j, score))
        # the BLOB columns as bytearrays: sqlite3 binds those as they are (bytes go
        # through its adapter registry first); they are stored, and read back, as BLOBs
        own.append((f.mid, bytearray(rec.payload), rec.source, rec.timestamp,
                    bytearray(rec.context), bytearray(rec.hash), bytearray(rec.prev_hash),
                    seen.subject, seen.attribute, seen.value, int(seen.negated),
                    seen.kind, scores_json[score], rec.priority / ONE))  # fmt: skip
        g = j.g
        episodes.append(Admitted(f.mid, seen.kind, device, seen.subject, seen.attribute,
                                 seen.value, seen.negated, rec.timestamp, rec.payload,
                                 g.h, g.i, g.r, g.w, j.state))  # fmt: skip
    first, last = run[0].at, run[-1].at
    vectors = (embedded[first : last + 1] if last - first == len(run) - 1
               else embedded[[f.at for f in run]])  # fmt: skip
    distilled = distill.PackDistillation()
    distill.on_episodes(engine, episodes, distilled, fresh=True, read=base.read)
    steps = distilled.steps
    fed: dict[str, tuple[int, bool]] = {
        mid: (k, agrees) for k, step in enumerate(steps) for mid, agrees in step.episodes
    }
    admissions = [
        packaudit.Admission(f.rec.id, f.rec.hash, j.gate, score, int(j.state), j.reason,
                            *((fed[f.mid][0], int(fed[f.mid][1])) if f.mid in fed else (-1, 0)))
        for f, (j, score) in zip(run, marks, strict=True)
    ]  # fmt: skip
    body = packaudit.PackBody(device, key_id, gates.values, scores.values, reasons.values,
                              admissions,
                              [(st.memory_id, repr(st.old), repr(st.new)) for st in steps])
    entries = [*notes, Entry(packaudit.ACTION, "", packaudit.encode(body), actor)]
    seq = engine.audit.append_entries(entries, ts=now)[-1]
    shared = (seq, now, now, now, device, key_id)
    rows = [(rowid, *mine, *j.columns, *shared) for rowid, mine, (j, _) in
            zip(engine.store.new_rowids(len(run)), own, marks, strict=True)]  # fmt: skip
    engine.store.insert_admitted(rows, list(map(bytearray, np.ascontiguousarray(vectors))), seq)
    engine.admitted_rows(rows, vectors, now)
    distill.write_steps(engine, distilled, seq, now, [row[0] for row in rows])
    for f, (j, _) in zip(run, marks, strict=True):
        (report.quarantined if j.state is State.QUARANTINED else report.admitted).append(f.mid)
