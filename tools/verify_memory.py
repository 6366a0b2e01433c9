"""The memory state machine and MEM-INV-1…8, explored exhaustively to a bound.

    python tools/verify_memory.py [--depth N] [--memories K] [--planted NAME]
                                  [--packs A,B] [--all] [--strict]

A real :class:`~hirmem.memory.engine.MemoryEngine` on a real SQLite file (in a
temporary directory) starts empty, with ``memories`` *slots* it may admit (facts about
one door that contradict each other, a procedure, a plain statement, a pump reading).
Breadth first, every operation enabled in a state is applied:

* ``admit`` of each free slot with each gate outcome (GREEN, AMBER, RED, W = 0, and the
  hard fails — domination, consent, invariant, H = 0, every check failed — which are
  exactly the Trust = 0 admissions); ``capture`` (volatile) and a later ``gate``;
* ``sweep`` after the fake clock advances by 0, the working TTL, and one τ of the
  episodic, semantic and procedural layers, and 20 procedural τ (everything archives);
* ``recall`` of each memory's text, normal and with an explicit every-state filter;
* ``contradict`` (a GREEN fact stating another value at the same instant), ``repair``,
  ``review`` (approve/reject) of each memory where it applies, and ``integrity``;
* ``pack``: one of the device packs of :data:`PACKS` admitted as a pack
  (:func:`hirmem.memory.intake.admit_pack`: one transaction, one ``admit-pack`` audit
  entry for the records that revise nothing, a stated fact alone, distillation inside),
  in every state: 1 to 3 records drawn from the same gate outcomes — one outcome, outcomes
  mixed, the hard fails, a pack whose signature the caller did not verify, a stated fact
  between two others, a record re-sent (a duplicate once held), a reading of a sensor
  whose pattern exists (a pattern step), another record under a held id (a conflict).
  By default the packs whose outcomes are all explored. H = 0 cannot arrive in a pack
  (see :data:`UNVERIFIED`).

After every step the invariants are checked as predicates over the rows SQLite holds
(not by asking the engine): MEM-INV-1…8 of ``memory-layer-stack.txt``, the lifecycle
(legal transitions only, each audited, archived read-only, quarantined never recalled
nor rehearsed), strength bounds, and a second sweep at the same instant changing
nothing. The gate is re-computed from the flags by an oracle of its own; hashes of rows
and audit records are re-computed from the bytes. A refused operation must leave no trace.

An ``admit-pack`` entry is read as what it stands for: each admission as the
transitions it implies (volatile → candidate → consolidated, or → quarantined: MEM-INV-1,
3, the lifecycle), its gate result against the row and the oracle and its state against
the oracle's (MEM-INV-7), its fixed fields and shapes, each record's hash and carried
scores as the device submitted them (MEM-INV-8), and the rows that cite it (MEM-INV-5).
Every record of a pack is accounted for once, and the ``admissions`` index agrees with the
entries both ways (PACK); the engine's own ``verify_audit`` passes after every step
(VERIFY). **Distillation** is checked as a state like any other (DISTILL): the episodes a
distillate links are held, none a pack admitted quarantined in that step, and a live
pattern cites each (a ``derive`` record, or the pack admission naming its pattern step);
a pattern is a derived memory whose scores are the means of its episodes' while they are
all live; a pack's pattern step moves the strength the row had to the one it has. So the
pattern a pack creates (audited one by one) or reinforces (in the entry) meets the
invariants as every memory does. A pattern no longer live never takes an episode
into its distillate (DISTILL-CLOSED: the engine closes its window when it is archived or
quarantined). An engine behaviour known to break a rule and not yet fixed can be listed
as a *finding* (:data:`FINDINGS`, empty today): shown with its trail, a violation with
``--strict``.

States are pruned by a hash of their canonical rows (ids replaced by content order,
times relative to the clock), so the search stops at a fixed point or at ``depth``.
``planted`` breaks one engine rule (:data:`PLANTS`; three in the pack path only, each
reached from the pack :data:`PACK_PLANTS` names) to show the search catches it.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import re
import sqlite3
import sys
import tempfile
import time
import types
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hirmem.memory import dynamics, intake, packaudit, review
from hirmem.memory.config import MemoryConfig
from hirmem.memory.distill_schema import SPAN, STATS_NAMES
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.intake import IntakeReport, admit_pack
from hirmem.memory.model import Memory, State
from hirmem.memory.recall import RecallFilter, RecallHit, RecallIndex
from hirmem.protocol import cbor
from hirmem.protocol.errors import HirmemError
from hirmem.protocol.fixedpoint import ONE
from hirmem.protocol.records import (
    GENESIS,
    HASH_SIZE,
    MAX_PAYLOAD,
    MAX_SOURCE,
    Record,
    record_id,
)
from verify_c import Report  # one Report for tools/verify.py's methods

__all__ = ["OUTCOMES", "PACKS", "PLANTS", "SLOTS", "Report", "explore"]

T0 = 1_780_000_000.0
VOLATILE, CANDIDATE, CONSOLIDATED, QUARANTINED, ARCHIVED = range(5)
LIVE = (CANDIDATE, CONSOLIDATED)
STATE_NAMES = ("volatile", "candidate", "consolidated", "quarantined", "archived")
# the lifecycle of memory-layer-stack.txt, written out here (not read from the engine)
LEGAL = {
    ("volatile", "candidate"), ("volatile", "quarantined"),
    ("candidate", "consolidated"), ("candidate", "quarantined"), ("candidate", "archived"),
    ("consolidated", "quarantined"), ("consolidated", "archived"),
    ("quarantined", "candidate"), ("quarantined", "archived"),
}  # fmt: skip
# MEM-INV-8: what the provenance layer may hold — system actions and their fields
SYSTEM_ACTIONS = {
    "capture", "admit", "transition", "strength", "contradiction", "corruption", "repair",
    "review", "evict", "intake-mismatch", "sweep", "integrity", "derive", "supersede",
    "unflag", "admit-pack",
}  # fmt: skip
SYSTEM_FIELDS = {
    "from", "to", "reason", "verdict", "hard", "flags", "h", "i", "r", "f", "c", "rn", "w",
    "trust", "strength", "old_strength", "x", "decision", "version", "prior", "conflict",
    "device", "kid", "gate_mode", "hash", "count", "layer", "now", "device_scores",
    "host_scores", "activity", "form", "wasDerivedFrom", "agrees", "statement",
    "superseded_by", "valid_to", "value", "new_value",
}  # fmt: skip
ACTOR = re.compile(r"^(system|intake:[0-9a-f]+|steward:[^:]+)$")
CONTENT = ("id", "payload", "source", "timestamp", "context", "prev_hash", "hash")
GATE_TOL = 4 / 65536  # the fixed gate is within 2 ulp of the reals; a margin on top


@dataclass(frozen=True)
class Slot:
    """A memory the explorer may admit: its payload and structured fields."""

    name: str
    payload: bytes
    kind: str = "fact"
    subject: str = ""
    attribute: str = ""
    value: str = ""

    @property
    def context(self) -> bytes:
        return hashlib.sha256(b"verify-slot:" + self.name.encode()).digest()


def _fact(name: str, value: str) -> Slot:
    body = {"subject": "door", "attribute": "state", "value": value}
    return Slot(name, json.dumps(body).encode(), "fact", "door", "state", value)


SLOTS = (
    _fact("door-open", "open"),
    _fact("door-closed", "closed"),
    Slot("procedure", b"reset the pump: close valve V2, restart P1", "procedure"),
    Slot("statement", b"valves are serviced every month"),
    Slot("reading", b'{"sensor": "pump", "bar": 3.1}'),
)


@dataclass(frozen=True)
class Outcome:
    flags: int
    confidence: float = 1.0
    empty: bool = False  # no payload and no source: normalisation clears H's bits 2, 3


OUTCOMES = {
    "green": Outcome(0x0FFF),
    "amber": Outcome(0x0C7F),  # H 1, I 0.75, R 0.5: Rn 0.73
    "red": Outcome(0x0D4F),  # H 1, I 0.25, R 0.75: Rn 0.47, no hard fail
    "w0": Outcome(0x0FFF, confidence=0.0),  # GREEN scores, W = 0, Trust 1
    "domination": Outcome(0x07FF),  # R = 0, permanent
    "consent": Outcome(0x0BFF),  # R = 0, permanent
    "invariant": Outcome(0x0FBF),  # I = 0
    "honesty0": Outcome(0x0FF0, empty=True),  # H = 0
    "trust0": Outcome(0x0000),  # every check failed: I = R = 0
}
CONTRA_CONTEXT = hashlib.sha256(b"verify-contradiction").digest()


# -- device packs: admitted as one (intake.admit_pack) ----------------------------------
DEVICE = bytes.fromhex("7e57ab1e00000001")
DEVICE_KID = hashlib.sha256(b"verify-memory device key").digest()[:8]  # only its hex is kept
PACK_ACTION = "admit-pack"
# an admit-pack entry's detail: its keys, and the shape of each table's rows
PACK_KEYS = {"device", "kid", "gate_mode", "gates", "scores", "reasons", "admissions",
             "patterns"}  # fmt: skip


@dataclass(frozen=True)
class DeviceRecord:
    """A record a device may send, with the gate outcome its flags give on the host
    (the host evaluates bits 0-3 and, for a JSON payload, bit 7 itself: the flags of
    each are chosen so that its outcome is what the host finds, not only the device)."""

    name: str
    payload: bytes
    outcome: str
    source: str = "cam"
    same_id_as: str = ""  # another record's id (a different record under a held id)


DEVICE_RECORDS = {r.name: r for r in (
    DeviceRecord("temp-21.0", b'{"sensor": "temp", "t": 21.0}', "green"),
    DeviceRecord("temp-21.4", b'{"sensor": "temp", "t": 21.4}', "green"),
    DeviceRecord("temp-21.2", b'{"sensor": "temp", "t": 21.2}', "green"),
    DeviceRecord("pump-serviced", b"pump P1 serviced", "green"),
    DeviceRecord("valve-sticks", b"valve V2 sticks when cold", "amber"),
    DeviceRecord("knock", b"a knock in pipe 4, once", "red"),
    DeviceRecord("flow-unsure", b'{"sensor": "flow", "lpm": 12.5}', "w0"),
    DeviceRecord("lock-held", b'{"sensor": "lock", "held": 1}', "domination"),
    DeviceRecord("hall-filmed", b"camera 2 filmed the hall", "consent"),
    DeviceRecord("level-negative", b'{"sensor": "level", "cm": -4}', "invariant"),
    DeviceRecord("blank", b"", "honesty0", ""),
    DeviceRecord("garbled", b"#x0 ?? 17", "trust0"),
    DeviceRecord("reset-pump", b'{"action": ["close V2", "restart P1"], "outcome": "success"}',
                 "green"),
    DeviceRecord("door-jammed", b'{"subject": "door", "attribute": "state", "value": "jammed"}',
                 "green"),
    DeviceRecord("pump-hums", b"pump P1 hums at start", "amber"),
    DeviceRecord("temp-altered", b'{"sensor": "temp", "t": 35.0}', "green",
                 same_id_as="temp-21.0"),
)}  # fmt: skip
# the packs the explorer may admit (each a chain of the device's records, in order)
PACKS: dict[str, tuple[str, ...]] = {
    "green-pair": ("temp-21.0", "temp-21.4"),  # one outcome; two readings: a pattern is born
    "soft": ("valve-sticks", "knock", "flow-unsure"),  # amber, red, W = 0 mixed
    "hard": ("lock-held", "hall-filmed", "level-negative"),  # domination, consent, invariant
    "zero": ("blank", "garbled"),  # the device's H = 0 (see UNVERIFIED), every check failed
    "with-fact": ("reset-pump", "door-jammed", "pump-hums"),  # a stated fact goes alone
    "repeat": ("temp-21.0", "pump-serviced"),  # a record re-sent (held once green-pair is)
    "pattern": ("temp-21.2",),  # a reading of the sensor green-pair distils
    "conflict": ("temp-altered",),  # another record under temp-21.0's id: never admitted
}
# packs whose signature the caller did not verify: the host finds bit 1 failed. H = 0
# cannot arrive in a device pack: the host evaluates bits 0-3 itself, and bit 0 (the
# confidence is a probability) holds for every record the format admits, so the device's
# H = 0 (an empty, unsourced record, bits 0 and 1 cleared) is H = 0.25 on the host
UNVERIFIED = {"zero"}


def _device_flags(r: DeviceRecord) -> tuple[int, int]:
    """Flags and confidence (Q16.16) of a device record with outcome ``r.outcome``."""
    o = OUTCOMES[r.outcome]
    flags = o.flags
    if r.payload.startswith(b"{"):  # the host reads bit 7 from a JSON payload itself
        flags |= 0x80
        if r.outcome == "amber":  # I = 0.75 without bit 5 rather than without bit 7
            flags &= ~0x20
    return flags, round(o.confidence * ONE)


def _build_packs() -> dict[str, tuple[Record, ...]]:
    """Each pack's records, chained within the pack; a record in two packs is one
    record (the same id and hash: a re-sent record), so it opens its later pack."""
    built: dict[str, Record] = {}
    out: dict[str, tuple[Record, ...]] = {}
    for pack, names in PACKS.items():
        link, recs = GENESIS, list[Record]()
        for name in names:
            rec = built.get(name)
            if rec is None:
                r = DEVICE_RECORDS[name]
                k = list(DEVICE_RECORDS).index(r.same_id_as or name) + 1
                flags, confidence = _device_flags(r)
                rec = built[name] = Record.capture(
                    record_id(DEVICE, 1, k), r.payload, r.source, int(T0 * 1000) + 1000 * k,
                    hashlib.sha256(b"verify-device:" + name.encode()).digest(), flags,
                    confidence, 0xE666, 0x8000, link)  # fmt: skip
            elif recs and rec.prev_hash != link:
                raise ValueError(f"pack {pack}: {name} is chained elsewhere; it must open it")
            recs.append(rec)
            link = rec.hash
        out[pack] = tuple(recs)
    return out


PACK_RECORDS = _build_packs()


def pack_outcomes(pack: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(DEVICE_RECORDS[n].outcome for n in PACKS[pack]))


def steps_for(cfg: MemoryConfig) -> dict[str, float]:
    """Clock advances of the sweep: each crosses one more layer's lifetime."""
    return {
        "0": 0.0,
        "ttl": cfg.working_ttl_s + 1,
        "tau-episodic": cfg.episodic_tau_s,
        "tau-semantic": cfg.decay_tau_s,
        "tau-procedural": cfg.procedural_tau_s,
        "20tau-procedural": 20 * cfg.procedural_tau_s,
    }




# -- the planted bugs -------------------------------------------------------------------
@contextlib.contextmanager
def _archived_recall() -> Iterator[None]:
    """A recall rehearses whatever it reaches, archived and quarantined included."""
    real = MemoryEngine._touch

    def touch(self: MemoryEngine, hit: RecallHit, now: float) -> None:
        held = self.require(hit.id).state
        if held not in (State.ARCHIVED, State.QUARANTINED):
            real(self, hit, now)
            return
        # the state guard sees a live memory; the row keeps its state when written
        require, save = self.require, self._save

        def as_live(memory_id: str) -> Memory:
            return require(memory_id).replace(state=State.CANDIDATE)

        def keep_state(m: Memory) -> Memory:
            return save(m.replace(state=held))

        self.require = as_live  # type: ignore[method-assign]
        self._save = keep_state  # type: ignore[method-assign]
        try:
            real(self, hit, now)
        finally:
            del self.require, self._save

    MemoryEngine._touch = touch  # type: ignore[method-assign]
    try:
        yield
    finally:
        MemoryEngine._touch = real  # type: ignore[method-assign]


@contextlib.contextmanager
def _quarantine_recall() -> Iterator[None]:
    """The recall mask forgets to keep quarantined rows out."""
    real = RecallIndex._compute_mask

    def mask(self: RecallIndex, flt: RecallFilter) -> Any:
        out = real(self, flt)
        n = self.n
        quarantined = self.state[:n] == QUARANTINED
        if not flt.states or QUARANTINED in {int(s) for s in flt.states}:
            out = out | quarantined
        return out

    RecallIndex._compute_mask = mask  # type: ignore[method-assign]
    try:
        yield
    finally:
        RecallIndex._compute_mask = real  # type: ignore[method-assign]


@contextlib.contextmanager
def _rn_threshold() -> Iterator[None]:
    """Stage 5 consolidates from YELLOW already (green threshold taken as yellow)."""
    real = dynamics.rn_disposition

    def disposition(rn: float, cfg: MemoryConfig) -> Any:
        return real(rn, MemoryConfig(green=cfg.yellow, yellow=cfg.yellow))

    dynamics.rn_disposition = disposition
    try:
        yield
    finally:
        dynamics.rn_disposition = real


@contextlib.contextmanager
def _repair_unlinked() -> Iterator[None]:
    """A repair's new version is chained to the host head, not to its prior."""
    real = MemoryEngine.capture

    def capture(self: MemoryEngine, *args: Any, **kw: Any) -> Any:
        kw.pop("_prev_hash", None)
        return real(self, *args, **kw)

    MemoryEngine.capture = capture  # type: ignore[method-assign]
    try:
        yield
    finally:
        MemoryEngine.capture = real  # type: ignore[method-assign]


@contextlib.contextmanager
def _pack_rn_only() -> Iterator[None]:
    """The pack path's stage 5 reads Rn only: it forgets the quarantine reasons (a hard
    fail, W = 0, what intake found wrong) that the one-by-one path honours."""
    real = intake._admit_together

    def together(engine: MemoryEngine, *args: Any, **kw: Any) -> None:
        def by_rn(g: Any, device_check: str = "") -> tuple[State, str]:
            target = dynamics.rn_disposition(g.rn, engine.config)
            return target, "Rn below yellow" if target is State.QUARANTINED else ""

        engine.disposition = by_rn  # type: ignore[method-assign]
        try:
            real(engine, *args, **kw)
        finally:
            del engine.disposition

    intake._admit_together = together
    try:
        yield
    finally:
        intake._admit_together = real


@contextlib.contextmanager
def _pack_quarantined_distils() -> Iterator[None]:
    """The pack path hands its quarantined records to distillation as live episodes."""
    real = intake.Admitted

    def admitted(*fields: Any) -> intake.Admitted:
        return real(*fields)._replace(state=State.CANDIDATE)

    intake.Admitted = admitted  # type: ignore[misc, assignment]
    try:
        yield
    finally:
        intake.Admitted = real  # type: ignore[misc]


@contextlib.contextmanager
def _pack_entry_link() -> Iterator[None]:
    """The pack's audit entry lists each record's chain link where its hash belongs."""
    names = vars(intake)  # the module's own names (packaudit is no export of it)
    real = names["packaudit"]
    link_of = {rec.id: rec.prev_hash for recs in PACK_RECORDS.values() for rec in recs}

    def admission(memory_id: bytes, digest: bytes, *rest: Any) -> packaudit.Admission:
        return packaudit.Admission(memory_id, link_of.get(memory_id, digest), *rest)

    shim = types.SimpleNamespace(**{k: getattr(real, k) for k in real.__all__})
    shim.Admission = admission
    names["packaudit"] = shim
    try:
        yield
    finally:
        names["packaudit"] = real


PLANTS: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "archived-recall": _archived_recall,
    "quarantine-recall": _quarantine_recall,
    "rn-threshold": _rn_threshold,
    "repair-unlinked": _repair_unlinked,
    # in the pack path (intake.admit_pack) only
    "pack-rn-only": _pack_rn_only,
    "pack-quarantined-distils": _pack_quarantined_distils,
    "pack-entry-link": _pack_entry_link,
}
# the packs (and so the outcomes) that reach each pack-path bug
PACK_PLANTS = {
    "pack-rn-only": ("soft",),
    "pack-quarantined-distils": ("soft",),
    "pack-entry-link": ("green-pair",),
}


# -- what the predicates read -----------------------------------------------------------
@dataclass
class View:
    """One state as SQLite holds it (raw column values), at clock ``now``."""

    now: float
    rows: dict[str, dict[str, Any]]
    audit: list[tuple[Any, ...]]
    reviews: list[tuple[Any, ...]]
    checkpoints: list[tuple[Any, ...]]
    side: list[tuple[Any, ...]]  # validity, distillates, distill links (for the hash)
    # the admissions index: memory id -> (seq, position) of its admit-pack entry
    admissions: dict[str, tuple[int, int]] = field(default_factory=dict)

    _decoded: list[dict[str, Any]] | None = None

    def records(self, start: int = 0) -> list[dict[str, Any]]:
        """The audit records from ``start`` on, details decoded (once per view)."""
        if self._decoded is None:
            self._decoded = self._decode(0)
        return self._decoded[start:]

    def _decode(self, start: int) -> list[dict[str, Any]]:
        return [
            {"seq": s, "action": a, "id": m, "actor": who, "detail": cbor.decode(d)}
            for s, _, a, m, who, d, _, _ in self.audit[start:]
        ]

    def follow(self, before: View) -> None:
        """Reuse ``before``'s decoded records when this audit extends it."""
        n = len(before.audit)
        if before._decoded is not None and self.audit[:n] == before.audit:
            self._decoded = before._decoded + self._decode(n)


def _query(db: sqlite3.Connection, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in db.execute(sql)]


def read_view(engine: MemoryEngine, now: float) -> View:
    db = engine.store.sqlite
    cur = db.execute("SELECT * FROM memories ORDER BY rowid")
    names = [d[0] for d in cur.description]
    rows = {r[names.index("id")]: dict(zip(names, r, strict=True)) for r in cur}
    side = _query(db, "SELECT 'v', * FROM validity ORDER BY memory_id")
    side += _query(db, "SELECT 'd', * FROM distillates ORDER BY rowid")
    # a link row names episodes by rowid ranges (base, mask): read as one
    # ('l', episode id, distillate) per episode, the shape every check reads
    at = {r["rowid"]: mid for mid, r in rows.items()}
    side += [("l", at.get(base + k, f"rowid {base + k}"), distillate)
             for distillate, base, mask in db.execute(
                 "SELECT distillate, base, mask FROM distill_links ORDER BY distillate, base")
             for k in range(SPAN) if mask >> k & 1]  # fmt: skip
    return View(
        now, rows,
        _query(db, "SELECT seq, ts, action, memory_id, actor, detail, prev, hash FROM audit "
                   "ORDER BY seq"),
        _query(db, "SELECT * FROM reviews ORDER BY seq"),
        _query(db, "SELECT * FROM checkpoints ORDER BY seq"),
        side,
        {str(m): (int(q), int(p)) for m, q, p in db.execute(
            "SELECT m.id, a.seq, a.pos FROM admissions a JOIN memories m ON m.rowid = a.memory")},
    )  # fmt: skip


# where a distillate's times are in its row of ``SELECT 'd', * FROM distillates``
_TIMES = {9 + STATS_NAMES.index(name) for name in ("first_ms", "last_ms", "since_ms")}


def canonical(v: View) -> bytes:
    """A digest of the state up to ids and absolute time: rows in content order, each
    id replaced by its position, every time made relative to the clock."""

    def content_key(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r["payload"], r["source"], r["kind"], r["version"], r["value"],
                round(v.now * 1000) - r["timestamp"], r["state"], r["created"] - v.now,
                r["strength"], r["id"])  # fmt: skip

    order = sorted(v.rows.values(), key=content_key)
    ref = {r["id"]: k for k, r in enumerate(order)}
    by_hash = {r["hash"]: k for k, r in enumerate(order)}
    trace: dict[str, list[tuple[Any, ...]]] = {}
    for rec in v.records():
        d = rec["detail"]
        trace.setdefault(rec["id"], []).append((rec["action"], d.get("to"), d.get("decision")))

    def rel(x: Any) -> Any:
        return ref.get(x, "?") if isinstance(x, str) and len(x) == 32 else x

    out = []
    for r in order:
        skip = ("id", "hash", "prev_hash", "context", "links", "supersedes", "audit_seq",
                "timestamp", "created", "last_access", "decayed_at", "strength")  # fmt: skip
        fixed = tuple((k, val) for k, val in r.items() if k not in skip)
        out.append((
            fixed, round(r["strength"], 9), round(v.now - r["last_access"], 3),
            round(v.now - r["decayed_at"], 3), round(v.now - r["created"], 3),
            round(v.now * 1000) - r["timestamp"], by_hash.get(r["prev_hash"], "other"),
            tuple(rel(x) for x in json.loads(r["links"])), rel(r["supersedes"]),
            tuple(trace.get(r["id"], ())),
        ))  # fmt: skip
    # a distillate's rowid says only the order distillates were opened in: its key instead
    opened = {row[1]: row[3:8] for row in v.side if row[0] == "d"}
    side = []
    for row in v.side:
        items: list[Any] = []
        for pos, x in enumerate(row):
            if row[0] == "d" and pos == 1:
                continue
            if row[0] == "l" and pos == 2:
                items.append(opened.get(x))
            elif row[0] == "d" and pos in _TIMES:  # a statistic that is a time (ms)
                items.append(round(v.now * 1000) - x)
            else:
                items.append(rel(x))
        side.append(tuple(items))
    reviews = sorted((rel(r[1]), r[3]) for r in v.reviews)
    return hashlib.sha256(repr((out, sorted(side, key=repr), reviews)).encode()).digest()[:16]


# -- the invariants, as predicates over views -------------------------------------------
@dataclass
class Step:
    op: tuple[str, ...]
    refused: str = ""
    hits: list[RecallHit] = field(default_factory=list)
    probe_default: list[RecallHit] = field(default_factory=list)
    probe_explicit: list[RecallHit] = field(default_factory=list)
    got_missing: list[str] = field(default_factory=list)  # trust-0 ids get() did not find
    pack: tuple[Record, ...] = ()  # the records of a pack admitted in this step
    intake: IntakeReport | None = None  # what admit_pack reported of them
    verified: list[str] = field(default_factory=list)  # what verify_audit found wrong


def content_hash(r: dict[str, Any]) -> bytes:
    body = [bytes.fromhex(r["id"]), r["payload"], r["source"], r["timestamp"], r["context"],
            r["prev_hash"]]  # fmt: skip
    return hashlib.sha256(cbor.encode(body)).digest()


def gate_oracle(r: dict[str, Any]) -> tuple[float, float, float, float, float, bool]:
    """H, I, R, Rn, W and the hard fail from the row's sub-checks (normalised from the
    record as stage 2 must) — the gate re-computed in reals, independently."""
    f = r["flags"] & ~0xC
    if (
        0 < len(r["payload"]) <= MAX_PAYLOAD
        and r["timestamp"] > 0
        and len(r["context"]) == HASH_SIZE
        and len(r["source"].encode()) <= MAX_SOURCE
    ):
        f |= 0x8  # fmt: skip
    if r["source"]:
        f |= 0x4
    h = bin(f & 0xF).count("1") / 4
    i = bin(f & 0xF0).count("1") / 4 if f & 0x40 else 0.0
    rr = bin(f & 0xF00).count("1") / 4 if f & 0x400 and f & 0x800 else 0.0
    rn = math.sqrt(math.sqrt(h * i) * math.sqrt(rr * i))
    w = r["confidence"] * r["provenance"] * h * i * rr
    hard = not (f & 0x40 and f & 0x400 and f & 0x800) or h == 0
    return h, i, rr, rn, w, hard


def well_formed(adm: Any) -> bool:
    """An admit-pack admission of the documented shape: [id (16 bytes), hash (32 bytes),
    gate, scores, state, reason, pattern, agrees] (whole numbers)."""
    return (isinstance(adm, list) and len(adm) == 8 and isinstance(adm[0], bytes)
            and len(adm[0]) == 16 and isinstance(adm[1], bytes) and len(adm[1]) == HASH_SIZE
            and all(type(x) is int for x in adm[2:]))  # fmt: skip


@dataclass(frozen=True)
class PackAdmission:
    """One well-formed admission of an admit-pack entry, where it stands."""

    seq: int
    pos: int
    memory_id: str
    fields: list[Any]  # [id, hash, gate, scores, state, reason, pattern, agrees]
    detail: dict[str, Any]  # the whole entry's detail (its tables)


def pack_admissions(v: View, start: int = 0) -> Iterator[PackAdmission]:
    """The well-formed admissions of the admit-pack entries from audit position
    ``start`` on (MEM-INV-8 names the others)."""
    for x in v.records(start):
        adms = x["detail"].get("admissions") if x["action"] == PACK_ACTION else None
        for pos, adm in enumerate(adms if isinstance(adms, list) else []):
            if well_formed(adm):
                yield PackAdmission(x["seq"], pos, adm[0].hex(), adm, x["detail"])


def admitted_as(v: View, state: int) -> set[str]:
    """Memories an admit-pack entry admitted in ``state`` (its implied transitions)."""
    return {p.memory_id for p in pack_admissions(v) if p.fields[4] == state}


def inv1(b: View, a: View, s: Step, cfg: MemoryConfig) -> list[str]:
    out = []
    consolidated = {x["id"] for x in a.records() if x["action"] == "transition"
                    and x["detail"].get("to") == "consolidated"}  # fmt: skip
    consolidated |= admitted_as(a, CONSOLIDATED)
    for r in a.rows.values():
        gated = r["state"] != VOLATILE and r["h"] == 0
        if gated and (r["state"] == CONSOLIDATED or r["id"] in consolidated):
            out.append(f"{r['id']} has H = 0 and was consolidated")
    return out


def inv2(b: View, a: View, s: Step, cfg: MemoryConfig) -> list[str]:
    out = []
    left = {x["id"] for x in a.records() if x["action"] == "transition"
            and x["detail"].get("from") == "quarantined"}  # fmt: skip
    for r in a.rows.values():
        zero = r["state"] != VOLATILE and r["r"] == 0 and r["gate_mode"] != "derived"
        if zero and not (r["state"] == QUARANTINED and r["permanent"]):
            out.append(f"{r['id']} has R = 0 but is {STATE_NAMES[r['state']]}, "
                       f"permanent={r['permanent']}")  # fmt: skip
        if r["permanent"] and (r["r"] != 0 or r["id"] in left):
            out.append(f"{r['id']} is permanent with R = {r['r']} or left quarantine")
    return out


def inv3(b: View, a: View, s: Step, cfg: MemoryConfig) -> list[str]:
    out = []
    evicted = {x["id"] for x in a.records(len(b.audit)) if x["action"] == "evict"}
    for mid, r in b.rows.items():
        if mid not in a.rows:
            if r["state"] != VOLATILE:
                out.append(f"{mid} ({STATE_NAMES[r['state']]}) was deleted")
            elif mid not in evicted:
                out.append(f"volatile {mid} vanished without an evict record")
    traced = {x["id"] for x in a.records() if x["action"] == "transition"
              and x["detail"].get("to") == "quarantined"}  # fmt: skip
    traced |= admitted_as(a, QUARANTINED)
    for r in a.rows.values():
        if r["state"] == QUARANTINED:
            if r["id"] not in traced:
                out.append(f"{r['id']} is quarantined without an audited transition")
            if content_hash(r) != r["hash"]:
                out.append(f"quarantined {r['id']} is not preserved: its hash does not match")
    return out


def inv4(b: View, a: View, s: Step, cfg: MemoryConfig) -> list[str]:
    out = []
    for mid, r in b.rows.items():
        if mid in a.rows and any(a.rows[mid][c] != r[c] for c in CONTENT):
            out.append(f"the content of {mid} changed")
    repairs = {(x["id"], x["detail"].get("prior")) for x in a.records()
               if x["action"] == "repair"}  # fmt: skip
    successors: dict[str, str] = {}
    for r in a.rows.values():
        prior_id = r["supersedes"]
        if not prior_id:
            continue
        prior = a.rows.get(prior_id)
        if prior is None:
            out.append(f"{r['id']} supersedes {prior_id}, which is not held")
            continue
        if r["prev_hash"] != prior["hash"] or prior_id not in json.loads(r["links"]):
            out.append(f"{r['id']} is not chained to its prior {prior_id}")
        if r["version"] != prior["version"] + 1 or (r["id"], prior_id) not in repairs:
            out.append(f"{r['id']} is no audited next version of {prior_id}")
        if prior_id in successors:
            out.append(f"{prior_id} was repaired twice ({successors[prior_id]}, {r['id']})")
        successors[prior_id] = r["id"]
    return out


def inv5(b: View, a: View, s: Step, cfg: MemoryConfig) -> list[str]:
    out = []
    for name, old, new in (("audit", b.audit, a.audit), ("reviews", b.reviews, a.reviews),
                           ("checkpoints", b.checkpoints, a.checkpoints)):  # fmt: skip
        if new[: len(old)] != old:
            out.append(f"the {name} table was rewritten, not appended to")
    prev = bytes(HASH_SIZE)
    for k, (seq, ts, action, mid, actor, detail, link, digest) in enumerate(a.audit):
        body = cbor.encode([seq, ts, action, mid, actor, detail, link])
        if seq != k + 1 or link != prev or hashlib.sha256(body).digest() != digest:
            out.append(f"audit record {seq} breaks the chain")
            break
        prev = digest
    about = {rec[0]: rec[3] for rec in a.audit}
    listed: dict[int, set[str]] = {}  # an admit-pack entry is about what it lists
    for p in pack_admissions(a):
        listed.setdefault(p.seq, set()).add(p.memory_id)
    for x in a.records():
        for step in x["detail"].get("patterns", []) if x["action"] == PACK_ACTION else []:
            if isinstance(step, list) and step:
                listed.setdefault(x["seq"], set()).add(str(step[0]))
    for r in a.rows.values():
        cited = r["audit_seq"]
        if about.get(cited) != r["id"] and r["id"] not in listed.get(cited, ()):
            out.append(f"{r['id']} cites audit record {cited}, not one about it")
    return out


def inv6(b: View, a: View, s: Step, cfg: MemoryConfig) -> list[str]:
    out = []
    for label, hits in (("recall", s.hits), ("normal recall", s.probe_default),
                        ("explicit recall", s.probe_explicit)):  # fmt: skip
        for h in hits:
            r = a.rows.get(h.id) or b.rows.get(h.id)
            if r is None or r["trust"] == 0:
                out.append(f"{label} returned {h.id}, whose Trust is 0")
    out += [f"{mid} has Trust 0 and is not reachable by explicit id" for mid in s.got_missing]
    return out


def oracle_disposition(r: dict[str, Any], cfg: MemoryConfig) -> tuple[str, bool, list[str]]:
    """The state MEM-INV-7 gives row ``r`` on admission, whether its Rn is within the
    gate's tolerance of a threshold, and how its stored scores differ from the oracle's."""
    h, i, rr, rn, w, hard = gate_oracle(r)
    out = []
    if any(
        abs(got - want) > GATE_TOL
        for got, want in ((r["h"], h), (r["i"], i), (r["r"], rr), (r["rn"], rn), (r["w"], w))
    ):
        out.append(f"{r['id']} stored gate scores the oracle does not compute "
                   f"(rn {r['rn']} vs {rn}, w {r['w']} vs {w})")  # fmt: skip
    near = min(abs(rn - cfg.green), abs(rn - cfg.yellow)) <= GATE_TOL
    if hard or w == 0 or rn < cfg.yellow or content_hash(r) != r["hash"]:  # or corrupted
        want = "quarantined"
    elif rn >= cfg.green:
        want = "consolidated" if r["w"] >= cfg.archive_strength else "candidate"
    else:
        want = "candidate"
    return want, near, out


GATE_COLUMNS = ("h", "i", "r", "f", "c", "rn", "w")


def inv7_pack(b: View, a: View, cfg: MemoryConfig) -> list[str]:
    """MEM-INV-7 for the admissions of this step's admit-pack entries: the gate result
    each cites is the row's flags and scores, the oracle's, and its state the oracle's."""
    out = []
    for p in pack_admissions(a, len(b.audit)):
        r = a.rows.get(p.memory_id)
        if r is None:
            out.append(f"admit-pack {p.seq} admits {p.memory_id}, which is not held")
            continue
        gates = p.detail.get("gates")
        k = p.fields[2]
        gate = gates[k] if isinstance(gates, list) and 0 <= k < len(gates) else None
        if not (isinstance(gate, list) and len(gate) == 10):
            out.append(f"{p.memory_id}: its admission cites no gate result (index {k})")
            continue
        if gate[0] != r["flags"] or any(
            not isinstance(q, int) or abs(q / ONE - r[c]) > 1e-12
            for q, c in zip(gate[1:8], GATE_COLUMNS, strict=True)
        ):
            out.append(f"{p.memory_id}: the gate result its entry cites ({gate}) is not the "
                       "row's flags and scores")  # fmt: skip
        want, near, wrong = oracle_disposition(r, cfg)
        out += wrong
        got = STATE_NAMES[p.fields[4]] if 0 <= p.fields[4] < len(STATE_NAMES) else p.fields[4]
        if got != want and not near:
            out.append(f"{p.memory_id} with Rn {r['rn']:.3f}, W {r['w']:.3f} was admitted {got} "
                       f"by its pack, not {want} (MEM-INV-7)")  # fmt: skip
    return out


def inv7(b: View, a: View, s: Step, cfg: MemoryConfig) -> list[str]:
    out = inv7_pack(b, a, cfg)
    new = a.records(len(b.audit))
    for x in new:
        if x["action"] != "admit":
            continue
        r = a.rows[x["id"]]
        want, near, wrong = oracle_disposition(r, cfg)
        out += wrong
        if x["detail"].get("to") != want and not near:
            out.append(f"{r['id']} with Rn {r['rn']:.3f}, W {r['w']:.3f} was admitted "
                       f"{x['detail'].get('to')}, not {want} (MEM-INV-7)")  # fmt: skip
        path = [y["detail"]["to"] for y in new if y["id"] == r["id"]
                and y["action"] == "transition"]  # fmt: skip
        first = {"consolidated": ["candidate", "consolidated"], "candidate": ["candidate"],
                 "quarantined": ["quarantined"]}[want]  # fmt: skip
        if path[: len(first)] != first and not near:
            out.append(f"{r['id']} went {path} after admission, not {first}")
    for r in a.rows.values():
        if r["state"] == CONSOLIDATED and not (r["h"] > 0 and r["rn"] >= cfg.yellow):
            stewarded = any(x["id"] == r["id"] and x["action"] == "review" for x in a.records())
            if not stewarded:
                out.append(f"{r['id']} is consolidated with Rn {r['rn']:.3f}, H {r['h']}")
    return out


def _rows_of(table: Any, size: int) -> bool:
    return isinstance(table, list) and all(
        isinstance(row, list) and len(row) == size and all(type(v) is int for v in row)
        for row in table
    )  # fmt: skip


def inv8_pack(x: dict[str, Any], a: View, s: Step) -> list[str]:
    """An admit-pack entry holds its fixed fields in their fixed shapes, and of each
    record only what the device submitted (its hash, its carried scores) and the
    engine's own findings (gate results, states, its reasons)."""
    seq, d = x["seq"], x["detail"]
    out = []
    if set(d) != PACK_KEYS:
        return [f"audit {seq}: admit-pack fields {sorted(d)} are not its fixed ones"]
    hexes = all(isinstance(d[k], str) and re.fullmatch("[0-9a-f]+", d[k])
                for k in ("device", "kid"))  # fmt: skip
    if not hexes or d["gate_mode"] != "fixed" or x["actor"] != f"intake:{d['device']}":
        out.append(f"audit {seq}: admit-pack device {d['device']!r}, kid {d['kid']!r}, gate "
                   f"mode {d['gate_mode']!r} by {x['actor']}")  # fmt: skip
    if not _rows_of(d["gates"], 10) or not _rows_of(d["scores"], 7):
        out.append(f"audit {seq}: admit-pack gate results or scores are not whole numbers")
    reasons = d["reasons"]
    if not (isinstance(reasons, list)
            and all(isinstance(t, str) and len(t) <= 512 for t in reasons)):  # fmt: skip
        out.append(f"audit {seq}: admit-pack reasons are not short texts")
        reasons = []
    steps: list[Any] = d["patterns"] if isinstance(d["patterns"], list) else [None]
    for step in steps:
        try:
            pid, old, new = step
            ok = re.fullmatch(r"[0-9a-f]{32}", pid) and math.isfinite(float(old) + float(new))
        except (TypeError, ValueError):
            ok = False
        if not ok:
            out.append(f"audit {seq}: admit-pack pattern step {step!r} is no [id, old, new]")
    submitted = {rec.id.hex(): rec for rec in s.pack}
    adms: list[Any] = d["admissions"] if isinstance(d["admissions"], list) else [None]
    for adm in adms:
        if not well_formed(adm):
            out.append(f"audit {seq}: admit-pack admission {adm!r} is malformed")
            continue
        mid, digest, score, state, why = adm[0].hex(), adm[1], adm[3], adm[4], adm[5]
        r = a.rows.get(mid)
        rec = submitted.get(mid)
        if r is None:
            continue  # MEM-INV-7 names it
        if digest != r["hash"] or (rec is not None and digest != rec.hash):
            out.append(f"{mid}: the hash its pack entry lists is not the row's or the "
                       "submitted record's")  # fmt: skip
        scores = d["scores"]
        carried = scores[score] if isinstance(scores, list) and 0 <= score < len(scores) else None
        if carried != json.loads(r["device_scores"] or "[]"):
            out.append(f"{mid}: its pack entry lists scores {carried}, not those the record "
                       f"carried ({r['device_scores']})")  # fmt: skip
        reason = reasons[why] if 0 <= why < len(reasons) else None
        if (why >= 0 or state == QUARANTINED) and reason != r["quarantine_reason"]:
            out.append(f"{mid}: its pack entry gives reason {reason!r}, the row "
                       f"{r['quarantine_reason']!r}")  # fmt: skip
        if (r["device"], r["kid"]) != (d["device"], d["kid"]):
            out.append(f"{mid} is from {r['device']}/{r['kid']}, its pack entry's signer is "
                       f"{d['device']}/{d['kid']}")  # fmt: skip
    return out


def inv8(b: View, a: View, s: Step, cfg: MemoryConfig) -> list[str]:
    out = []
    for x in a.records(len(b.audit)):
        if x["action"] not in SYSTEM_ACTIONS or not ACTOR.match(x["actor"]):
            out.append(f"audit {x['seq']}: {x['action']} by {x['actor']} is no system action")
        if x["action"] == PACK_ACTION:
            out += inv8_pack(x, a, s)
            continue
        extra = set(x["detail"]) - SYSTEM_FIELDS
        if extra:
            out.append(f"audit {x['seq']} records fields beyond system actions: {sorted(extra)}")
        for key, val in x["detail"].items():
            scalar = val is None or isinstance(val, (int, str, bytes))
            if not scalar and not (isinstance(val, list) and all(isinstance(y, int) for y in val)):
                out.append(f"audit {x['seq']} field {key} is not a scalar")
    return out


def lifecycle(b: View, a: View, s: Step, cfg: MemoryConfig) -> list[str]:
    """Legal, audited transitions only; archived read-only; quarantined unrecalled."""
    out = []
    state = {mid: STATE_NAMES[r["state"]] for mid, r in b.rows.items()}
    for x in a.records(len(b.audit)):
        if x["action"] == PACK_ACTION:  # volatile → candidate (→ consolidated) | quarantined
            for adm in x["detail"].get("admissions", []):
                mid = adm[0].hex() if well_formed(adm) else "?"
                to = STATE_NAMES[adm[4]] if well_formed(adm) and 0 <= adm[4] < 5 else "?"
                cur = state.get(mid, "volatile")
                if cur != "volatile" or to not in ("candidate", "consolidated", "quarantined"):
                    out.append(f"{mid}: admitted {to} by its pack from {cur} is not legal")
                state[mid] = to
            continue
        if x["action"] != "transition":
            continue
        frm, to = x["detail"].get("from"), x["detail"].get("to")
        cur = state.get(x["id"], "volatile")
        if (frm, to) not in LEGAL or frm != cur:
            out.append(f"{x['id']}: transition {frm} → {to} from {cur} is not legal")
        state[x["id"]] = str(to)
    for mid, r in a.rows.items():
        if state.get(mid, "volatile") != STATE_NAMES[r["state"]]:
            out.append(f"{mid} is {STATE_NAMES[r['state']]} but its audited state is "
                       f"{state.get(mid, 'volatile')}")  # fmt: skip
        if not 0 <= r["strength"] <= cfg.max_strength:
            out.append(f"{mid} has strength {r['strength']} outside [0, max_strength]")
        old = b.rows.get(mid)
        if old is None:
            continue
        if old["state"] == ARCHIVED:
            moved = [c for c in old if c != "audit_seq" and old[c] != r[c]]
            if moved:
                out.append(f"archived {mid} changed {moved} (read-only)")
        rehearsed = r["strength"] > old["strength"] or r["access_count"] != old["access_count"]
        if old["state"] == r["state"] == QUARANTINED and rehearsed:
            out.append(f"quarantined {mid} was strengthened or rehearsed")
    for h in [*s.hits, *s.probe_default, *s.probe_explicit]:
        hit = a.rows.get(h.id) or b.rows.get(h.id)
        if hit is not None and hit["state"] in (QUARANTINED, VOLATILE):
            out.append(f"recall returned {STATE_NAMES[hit['state']]} {h.id}")
    for h in s.probe_default:
        hit = a.rows.get(h.id)
        if hit is not None and hit["state"] not in (CANDIDATE, CONSOLIDATED):
            out.append(f"normal recall returned {STATE_NAMES[hit['state']]} {h.id}")
    return out


def refusal(b: View, a: View, s: Step, cfg: MemoryConfig) -> list[str]:
    if s.refused and (a.rows != b.rows or a.audit != b.audit or a.reviews != b.reviews):
        return [f"refused ({s.refused}) but left a trace"]
    return []


def pack(b: View, a: View, s: Step, cfg: MemoryConfig) -> list[str]:
    """Every record of a pack is accounted for once (admitted, quarantined, a duplicate
    of the record held, or a conflict with another), none silently lost; and the
    ``admissions`` index and the admit-pack entries agree, both ways."""
    out = []
    listed = {}
    for p in pack_admissions(a):
        listed[p.seq, p.pos] = p.memory_id
        if a.admissions.get(p.memory_id) != (p.seq, p.pos):
            out.append(f"{p.memory_id} is admission {p.pos} of entry {p.seq}, but the "
                       f"admissions index says {a.admissions.get(p.memory_id)}")  # fmt: skip
    for mid, at in a.admissions.items():
        if listed.get(at) != mid:
            out.append(f"the admissions index points {mid} at {at}, which does not list it")
    if s.intake is None:
        return out
    told = s.intake
    ids = [rec.id.hex() for rec in s.pack]
    reported = [*told.admitted, *told.quarantined, *told.duplicates, *told.conflicts]
    if sorted(reported) != sorted(ids):
        out.append(f"the pack's records {ids} were reported as {reported}, not each once")
    for rec in s.pack:
        mid, old, r = rec.id.hex(), b.rows.get(rec.id.hex()), a.rows.get(rec.id.hex())
        if old is not None:
            if mid not in (told.duplicates if old["hash"] == rec.hash else told.conflicts):
                out.append(f"{mid}, held before, was not reported a duplicate (or conflict)")
        elif r is None:
            out.append(f"{mid} of the pack was silently lost")
        elif mid in told.quarantined and r["state"] != QUARANTINED:
            out.append(f"{mid} was reported quarantined but is {STATE_NAMES[r['state']]}")
    return out


def verified(b: View, a: View, s: Step, cfg: MemoryConfig) -> list[str]:
    """The engine's own verify (chain, checkpoints, every row against its records,
    a packed row against its place in its pack's entry) passes."""
    return [f"verify_audit: {p}" for p in s.verified]


def citations(v: View) -> set[tuple[str, str]]:
    """(pattern, episode) pairs the audit cites: a ``derive`` record, or an admission
    of an admit-pack entry naming the pattern step the episode fed."""
    cited = {(x["id"], x["detail"].get("wasDerivedFrom")) for x in v.records()
             if x["action"] == "derive"}  # fmt: skip
    for p in pack_admissions(v):
        steps, k = p.detail.get("patterns"), p.fields[6]
        if isinstance(steps, list) and 0 <= k < len(steps) and isinstance(steps[k], list):
            cited.add((str(steps[k][0]), p.memory_id))
    return cited


def closed_support(b: View, a: View, s: Step, cfg: MemoryConfig) -> list[str]:
    """A pattern no longer live (archived, quarantined) whose open distillate took an
    episode in this step: linked to it (its links, as read, grow) and counted in its
    statistics, with no ``derive`` record or pack step citing it (before the engine
    closed such windows, distill._reinforce and _steps_of linked before finding the
    pattern takes no new support)."""
    cited = citations(a)
    dist = {row[1]: row[2] for row in a.side if row[0] == "d"}
    old = {(row[1], row[2]) for row in b.side if row[0] == "l"}
    out = []
    for row in a.side:
        if row[0] != "l" or (row[1], row[2]) in old:
            continue
        pid = dist.get(row[2])
        pattern = a.rows.get(pid) if pid else None
        if pattern is not None and pattern["state"] in (ARCHIVED, QUARANTINED) \
                and (pid, row[1]) not in cited:  # fmt: skip
            out.append(f"{STATE_NAMES[pattern['state']]} pattern {pid} took episode {row[1]} "
                       "into its distillate without citing it")  # fmt: skip
    return out


def distillation(b: View, a: View, s: Step, cfg: MemoryConfig) -> list[str]:
    """What distillation derives rests on what it cites: every episode a distillate
    holds is held, none its own pack admitted quarantined, and, for a live pattern,
    cited (a ``derive`` record or its pack admission naming the pattern step; a pattern
    no longer live: :func:`closed_support`); a pattern is a derived memory whose scores
    are the means of its episodes' when they are all live; a pack's pattern step moves
    the strength the row had to the one it has."""
    out = []
    dist = {row[1]: row for row in a.side if row[0] == "d"}  # rowid -> the distillate
    links = [(row[1], row[2]) for row in a.side if row[0] == "l"]
    cited = citations(a)
    for p in pack_admissions(a):
        if p.fields[4] == QUARANTINED and p.fields[6] != -1:
            out.append(f"quarantined {p.memory_id} fed pattern {p.fields[6]} of its pack")
    # admitted quarantined by this step's pack (a steward may promote one later: it feeds)
    packed_quarantined = {p.memory_id for p in pack_admissions(a, len(b.audit))
                          if p.fields[4] == QUARANTINED}  # fmt: skip
    support: dict[Any, list[str]] = {}
    for episode, rowid in links:
        d = dist.get(rowid)
        if episode not in a.rows or d is None:
            out.append(f"distillate {rowid} links episode {episode}, one of them not held")
            continue
        support.setdefault(rowid, []).append(episode)
        if episode in packed_quarantined:
            out.append(f"{episode}, admitted quarantined by this pack, feeds distillate {rowid}")
        pattern = a.rows.get(d[2]) if d[2] else None
        if pattern is not None and pattern["state"] in LIVE and (d[2], episode) not in cited:
            out.append(f"pattern {d[2]} rests on {episode} without citing it (PROV)")
    for rowid, d in dist.items():
        pid = d[2]
        if not pid:
            continue
        m = a.rows.get(pid)
        if m is None or m["kind"] not in ("pattern", "procedure") or m["gate_mode"] != "derived":
            out.append(f"distillate {rowid} names {pid}, which is no derived pattern")
            continue
        episodes = [a.rows[e] for e in support.get(rowid, [])]
        if m["state"] in LIVE and episodes and all(e["state"] in LIVE for e in episodes):
            n = len(episodes)
            mean = {c: sum(e[c] for e in episodes) / n for c in ("h", "i", "r", "w")}
            rn = math.sqrt(math.sqrt(mean["h"] * mean["i"]) * math.sqrt(mean["r"] * mean["i"]))
            if any(abs(m[c] - x) > 1e-9 for c, x in (*mean.items(), ("rn", rn))):
                out.append(f"pattern {pid} scores h {m['h']}, i {m['i']}, r {m['r']}, w "
                           f"{m['w']}, not the means of its {n} episodes {mean}")  # fmt: skip
    new = a.records(len(b.audit))
    for k, x in enumerate(new):
        for step in x["detail"].get("patterns", []) if x["action"] == PACK_ACTION else []:
            if not (isinstance(step, list) and len(step) == 3):
                continue  # MEM-INV-8 names it
            pid, old, moved = str(step[0]), step[1], step[2]
            earlier = any(y["id"] == pid for y in new[:k])
            later = any(y["id"] == pid for y in new[k + 1 :])
            was, now = b.rows.get(pid), a.rows.get(pid)
            if was is not None and not earlier and repr(was["strength"]) != old:
                out.append(f"pack step of {pid} starts from {old}, the row had "
                           f"{was['strength']!r}")  # fmt: skip
            if now is None or (not later and (repr(now["strength"]) != moved
                                              or now["audit_seq"] != x["seq"])):  # fmt: skip
                held = (now["strength"], now["audit_seq"]) if now else None
                out.append(f"pack step of {pid} ends at {moved} citing {x['seq']}; the row "
                           f"holds (strength, audit seq) {held}")  # fmt: skip
    return out


INVARIANTS: tuple[tuple[str, Callable[[View, View, Step, MemoryConfig], list[str]]], ...] = (
    ("MEM-INV-1", inv1), ("MEM-INV-2", inv2), ("MEM-INV-3", inv3), ("MEM-INV-4", inv4),
    ("MEM-INV-5", inv5), ("MEM-INV-6", inv6), ("MEM-INV-7", inv7), ("MEM-INV-8", inv8),
    ("LIFECYCLE", lifecycle), ("REFUSAL", refusal), ("PACK", pack), ("VERIFY", verified),
    ("DISTILL", distillation), ("DISTILL-CLOSED", closed_support),
)  # fmt: skip
# what the engine does that the invariants above do not allow, once known and not yet
# fixed, listed (with its trail) but failing the run only with ``strict``. Empty: the
# one it held (an archived pattern taking episodes, DISTILL-CLOSED) is fixed and checked
FINDINGS: tuple[tuple[str, Callable[[View, View, Step, MemoryConfig], list[str]]], ...] = ()
MAX_FINDINGS = 5  # trails printed; the rest counted


# -- the engine under exploration -------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


def snapshot(engine: MemoryEngine) -> bytes:
    mem = sqlite3.connect(":memory:")
    try:
        engine.store.sqlite.backup(mem)
        data = bytearray(mem.serialize())
        data[18:20] = b"\x01\x01"  # the WAL file's header says WAL; a copy in memory cannot be
        return zlib.compress(bytes(data), 1)
    finally:
        mem.close()


def restore(engine: MemoryEngine, data: bytes) -> None:
    mem = sqlite3.connect(":memory:")
    try:
        mem.deserialize(zlib.decompress(data))
        mem.backup(engine.store.sqlite)
    finally:
        mem.close()
    # the file changed under the engine's own connection (its data_version does not move):
    # the caches built on it (the open distillates, ...) are dropped as after another writer
    for hook in engine.store.reload_hooks:
        hook()
    engine.audit.resync()
    engine._reload_index()


def text_of(r: dict[str, Any]) -> str:
    body = bytes(r["payload"]).decode("utf-8", errors="replace")
    return body or f"{r['subject']} {r['attribute']} {r['value']}".strip() or "memory"


def enabled(v: View, slots: tuple[Slot, ...], steps: dict[str, float],
            outcomes: tuple[str, ...],
            packs: tuple[str, ...] = ()) -> list[tuple[str, ...]]:  # fmt: skip
    """Every operation that applies in state ``v`` (a pack, in every state: once its
    records are held, it is a pack re-sent; last, so that a planted bug outside the pack
    path is first found along the same trail with or without packs)."""
    ops: list[tuple[str, ...]] = []
    used = {r["context"] for r in v.rows.values()}
    for slot in slots:
        if slot.context not in used:
            ops += [("admit", slot.name, o) for o in outcomes]
            ops.append(("capture", slot.name))
    queries: set[str] = set()
    successors = {r["supersedes"] for r in v.rows.values()}
    for mid, r in v.rows.items():
        if r["state"] == VOLATILE:
            ops.append(("gate", mid))
            continue
        q = text_of(r)
        if q not in queries:
            queries.add(q)
            ops += [("recall", mid, "normal"), ("recall", mid, "explicit")]
        live = r["state"] in (CANDIDATE, CONSOLIDATED)
        if live and r["kind"] == "fact" and r["subject"] and r["attribute"]:
            ops.append(("contradict", mid))
        if mid not in successors:
            ops.append(("repair", mid))
        if r["state"] == QUARANTINED:
            ops += [("review", mid, "approve"), ("review", mid, "reject")]
    ops += [("sweep", name) for name in steps]
    ops.append(("integrity",))
    return ops + [("pack", name) for name in packs]


def apply(engine: MemoryEngine, clock: Clock, v: View, op: tuple[str, ...],
          steps: dict[str, float], step: Step) -> None:  # fmt: skip
    """Run one operation on the engine; a recall's hits and a pack's records and
    report go into ``step``."""
    kind = op[0]
    every = RecallFilter(states=frozenset(State))
    if kind == "pack":
        step.pack = PACK_RECORDS[op[1]]
        step.intake = admit_pack(engine, step.pack, DEVICE, DEVICE_KID, step.pack[0].prev_hash,
                                 signature_verified=op[1] not in UNVERIFIED)  # fmt: skip
    elif kind in ("admit", "capture"):
        slot = next(s for s in SLOTS if s.name == op[1])
        o = OUTCOMES[op[2]] if kind == "admit" else OUTCOMES["green"]
        call = engine.admit if kind == "admit" else engine.capture
        call(b"" if o.empty else slot.payload, "" if o.empty else "verify", flags=o.flags,
             confidence=o.confidence, kind=slot.kind, subject=slot.subject,
             attribute=slot.attribute, value=slot.value, context=slot.context)  # fmt: skip
    elif kind == "gate":
        engine.process(op[1])
    elif kind == "recall":
        step.hits = engine.recall(text_of(v.rows[op[1]]), 8,
                                  every if op[2] == "explicit" else None)  # fmt: skip
    elif kind == "contradict":
        r = v.rows[op[1]]
        other = "jammed" if r["value"] != "jammed" else "open"
        body = json.dumps({"subject": r["subject"], "attribute": r["attribute"], "value": other})
        engine.admit(body, "verify", subject=r["subject"], attribute=r["attribute"], value=other,
                     timestamp=r["timestamp"], context=CONTRA_CONTEXT)  # fmt: skip
    elif kind == "repair":
        r = v.rows[op[1]]
        if r["subject"] and r["attribute"] and r["kind"] == "fact":
            body = json.dumps({"subject": r["subject"], "attribute": r["attribute"],
                               "value": "fixed"})  # fmt: skip
        else:
            body = text_of(r) + " (revised)"
        engine.repair(op[1], body, reason="verify")
    elif kind == "review":
        decision = "promote" if op[2] == "approve" else "retire"
        review.decide(engine, op[1], "verifier", decision, "verify")
    elif kind == "sweep":
        clock.t += steps[op[1]]
        engine.sweep(clock.t)
    elif kind == "integrity":
        engine.check_integrity()


def probe(engine: MemoryEngine, a: View, s: Step) -> None:
    """Recall every memory's text (no rehearsal) normally and with every state allowed,
    and look every Trust-0 memory up by id."""
    texts = sorted({text_of(r) for r in a.rows.values()})
    if texts:
        k = len(a.rows) + 1
        every = RecallFilter(states=frozenset(State))
        s.probe_default = [h for hs in engine.recall_batch(texts, k, touch=False) for h in hs]
        s.probe_explicit = [h for hs in engine.recall_batch(texts, k, every, touch=False)
                            for h in hs]  # fmt: skip
    s.got_missing = [mid for mid, r in a.rows.items()
                     if r["trust"] == 0 and engine.get(mid) is None]  # fmt: skip


def describe_op(op: tuple[str, ...], v: View) -> str:
    parts = []
    for x in op:
        r = v.rows.get(x)
        parts.append(f"{x[-4:]}[{STATE_NAMES[r['state']]} {text_of(r)[:40]}]" if r else x)
    return " ".join(parts)


def explore(depth: int, memories: int, planted: str | None = None, *,
            outcomes: tuple[str, ...] = tuple(OUTCOMES), stop_at_first: bool = True,
            config: MemoryConfig | None = None,
            packs: tuple[str, ...] | None = None, strict: bool = False) -> Report:  # fmt: skip
    """Breadth-first over every operation sequence up to ``depth`` from an empty engine
    with ``memories`` slots (1..5) and the device ``packs`` (by default each whose
    records' outcomes are among ``outcomes``), checking every invariant after every
    step (and :data:`FINDINGS`, which fail it only when ``strict``)."""
    if not 1 <= memories <= len(SLOTS):
        raise ValueError(f"memories must be in 1..{len(SLOTS)}, got {memories}")
    if planted is not None and planted not in PLANTS:
        raise ValueError(f"unknown planted bug {planted!r}; known: {sorted(PLANTS)}")
    unknown = set(outcomes) - set(OUTCOMES)
    if unknown:
        raise ValueError(f"unknown gate outcomes {sorted(unknown)}; known: {list(OUTCOMES)}")
    if packs is None:
        packs = tuple(p for p in PACKS if set(pack_outcomes(p)) <= set(outcomes))
    if set(packs) - set(PACKS):
        raise ValueError(f"unknown packs {sorted(set(packs) - set(PACKS))}; known: {list(PACKS)}")
    cfg = config or MemoryConfig()
    slots, steps = SLOTS[:memories], steps_for(cfg)
    name = f"memory state machine: depth {depth}, {memories} memories, {len(packs)} packs" + (
        f", planted {planted}" if planted else ""
    )
    tally = PackTally()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, PLANTS[planted]() if planted \
            else contextlib.nullcontext():  # fmt: skip
        clock = Clock()
        engine = MemoryEngine(Path(tmp) / "memory.db", cfg, clock=clock)
        try:
            root = read_view(engine, clock.t)
            root_key = canonical(root)
            parent: dict[bytes, tuple[bytes, str] | None] = {root_key: None}
            edges: list[tuple[bytes, bytes]] = []  # every transition executed
            frontier = [(root_key, snapshot(engine), clock.t)]
            transitions = refused = 0
            reached = 0
            fresh: list[int] = []  # new states found at each level
            violations: list[str] = []
            noted: list[str] = []  # findings' trails (at most MAX_FINDINGS)
            findings = 0
            for level in range(1, depth + 1):
                nxt: list[tuple[bytes, bytes, float]] = []
                fresh.append(0)
                for key, snap, t in frontier:
                    restore(engine, snap)
                    clock.t = t
                    before = read_view(engine, t)
                    for op in enabled(before, slots, steps, outcomes, packs):
                        restore(engine, snap)
                        clock.t = t
                        step = Step(op)
                        try:
                            apply(engine, clock, before, op, steps, step)
                        except HirmemError as exc:
                            step.refused = str(exc)
                            refused += 1
                        except Exception as exc:  # any crash is a finding
                            step.refused = f"crash: {type(exc).__name__}: {exc}"
                        after = read_view(engine, clock.t)
                        after.follow(before)
                        check = engine.verify_audit()
                        if not check.ok:
                            step.verified = [str(check)]
                        tally.count(before, after, step)
                        child = canonical(after)
                        if child not in parent:  # a state's recall is probed once
                            probe(engine, after, step)
                        transitions += 1
                        problems = [f"{label}: {p}" for label, check in INVARIANTS
                                    for p in check(before, after, step, cfg)]  # fmt: skip
                        if step.refused.startswith("crash"):
                            problems.append(f"ENGINE: {step.refused}")
                        edges.append((key, child))
                        label = describe_op(op, before)
                        found = [f"{name}: {p}" for name, check in FINDINGS
                                 for p in check(before, after, step, cfg)]  # fmt: skip
                        if found and strict:
                            problems += found
                        elif found:
                            findings += 1
                            if findings <= MAX_FINDINGS:
                                trail = [*_trail(parent, key), label]
                                noted.append("FINDING after " + " → ".join(trail) + "\n    "
                                             + "\n    ".join(found))  # fmt: skip
                        if problems:
                            trail = [*_trail(parent, key), label]
                            violations.append(
                                "VIOLATION after " + " → ".join(trail) + "\n    "
                                + "\n    ".join(problems)
                            )  # fmt: skip
                            if stop_at_first:
                                break
                        if child not in parent:
                            parent[child] = (key, label)
                            fresh[-1] += 1
                            if level < depth:  # the last level is not expanded
                                nxt.append((child, snapshot(engine), clock.t))
                        if op[0] == "sweep" and not step.refused:
                            engine.sweep(clock.t)  # at the same instant: nothing to do
                            again = read_view(engine, clock.t)
                            if again.rows != after.rows or again.audit != after.audit:
                                violations.append(f"VIOLATION after {label}: DYNAMICS: a "
                                                  "second sweep at the same instant changed "
                                                  "the state")  # fmt: skip
                    if violations and stop_at_first:
                        break
                if fresh[-1] or violations:
                    reached = level
                frontier = nxt
                if not frontier or (violations and stop_at_first):
                    break
        finally:
            engine.store.close()
    elapsed = time.perf_counter() - start
    sequences = _sequences(edges, root_key, depth)
    lines = [
        f"slots: {', '.join(s.name for s in slots)}; gate outcomes: {', '.join(outcomes)}",
        f"sweep steps (s): {', '.join(f'{k}={v:g}' for k, v in steps.items())}",
        "packs: " + ("; ".join(f"{p} ({len(PACKS[p])}: {', '.join(pack_outcomes(p))})"
                               for p in packs) or "none"),
        "checked after every step: "
        + ", ".join(label for label, _ in INVARIANTS)
        + ", DYNAMICS (sweep idempotent)",
        f"transitions executed: {transitions} (refused by the engine: {refused})",
        tally.line(),
        f"operation sequences covered: {sequences}",
        f"distinct states: {len(parent)} (new per level: {', '.join(map(str, fresh))})",
        f"depth reached: {reached} of {depth}"
        + (" (fixed point)" if reached < depth and not violations else ""),
        f"findings ({', '.join(n for n, _ in FINDINGS) or 'none listed'}"
        + (", failing: strict): " if strict else ", not failing without --strict): ")
        + f"{findings} transitions",
        f"time: {elapsed:.1f} s",
        *violations,
        *noted,
    ]
    return Report(name, not violations, lines)


@dataclass
class PackTally:
    """What the explored pack admissions did, for the report."""

    steps: int = 0
    entries: int = 0
    admitted: int = 0
    quarantined: int = 0
    duplicates: int = 0
    conflicts: int = 0  # records under a held id with another hash (not admitted)
    born: int = 0  # patterns a pack step created
    reinforced: int = 0  # pattern steps admit-pack entries list

    def count(self, b: View, a: View, s: Step) -> None:
        if s.intake is None:
            return
        self.steps += 1
        self.admitted += len(s.intake.admitted)
        self.quarantined += len(s.intake.quarantined)
        self.duplicates += len(s.intake.duplicates)
        self.conflicts += len(s.intake.conflicts)
        self.born += sum(1 for mid, r in a.rows.items()
                         if mid not in b.rows and r["kind"] in ("pattern", "procedure"))
        for x in a.records(len(b.audit)):
            if x["action"] == PACK_ACTION:
                self.entries += 1
                self.reinforced += len(x["detail"].get("patterns", []))

    def line(self) -> str:
        return (f"pack admissions executed: {self.steps} (admit-pack entries {self.entries}; "
                f"records admitted {self.admitted}, quarantined {self.quarantined}, "
                f"duplicates {self.duplicates}, conflicts {self.conflicts}; patterns born "
                f"{self.born}, pattern steps {self.reinforced})")  # fmt: skip


def _sequences(edges: list[tuple[bytes, bytes]], root: bytes, depth: int) -> int:
    """Operation sequences of length 1..depth the explored transitions stand for: paths
    from the root in the graph of states (a pruned state's successors are those
    explored from its first visit)."""
    count = {root: 1}
    total = 0
    for _ in range(depth):
        nxt: dict[bytes, int] = {}
        for a, b in edges:
            if a in count:
                nxt[b] = nxt.get(b, 0) + count[a]
        total += sum(nxt.values())
        count = nxt
    return total


def _trail(parent: dict[bytes, tuple[bytes, str] | None], key: bytes) -> list[str]:
    out: list[str] = []
    link = parent[key]
    while link is not None:
        out.insert(0, link[1])
        link = parent[link[0]]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--memories", type=int, default=2)
    ap.add_argument("--planted", choices=sorted(PLANTS))
    ap.add_argument("--all", action="store_true", help="go on after a violation")
    ap.add_argument("--strict", action="store_true", help="a finding is a violation")
    ap.add_argument("--packs", help="comma-separated device packs (default: every one whose "
                    f"outcomes are explored): {', '.join(PACKS)}")  # fmt: skip
    args = ap.parse_args(argv)
    packs = tuple(p for p in args.packs.split(",") if p) if args.packs is not None else None
    report = explore(args.depth, args.memories, args.planted, stop_at_first=not args.all,
                     packs=packs, strict=args.strict)  # fmt: skip
    print(f"{report.name}: {'ok' if report.ok else 'VIOLATED'}")
    for line in report.lines:
        print("  " + line)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
