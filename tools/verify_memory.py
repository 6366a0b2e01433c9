"""The memory state machine and MEM-INV-1…8, explored exhaustively to a bound.

    python tools/verify_memory.py [--depth N] [--memories K] [--planted NAME]

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
  ``review`` (approve/reject) of each memory where it applies, and ``integrity``.

After every step the invariants are checked as predicates over the rows SQLite holds
(not by asking the engine): MEM-INV-1…8 of ``memory-layer-stack.txt``, the lifecycle
(legal transitions only, each audited, archived read-only, quarantined never recalled
nor rehearsed), strength bounds, and a second sweep at the same instant changing
nothing. The gate is re-computed from the flags by an oracle of its own; hashes of rows
and audit records are re-computed from the bytes. A refused operation must leave no trace.

States are pruned by a hash of their canonical rows (ids replaced by content order,
times relative to the clock), so the search stops at a fixed point or at ``depth``.
``planted`` breaks one engine rule (:data:`PLANTS`) to show the search catches it.
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
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hirmem.memory import dynamics, review
from hirmem.memory.config import MemoryConfig
from hirmem.memory.distill_schema import SPAN, STATS_NAMES
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.model import Memory, State
from hirmem.memory.recall import RecallFilter, RecallHit, RecallIndex
from hirmem.protocol import cbor
from hirmem.protocol.errors import HirmemError
from hirmem.protocol.records import HASH_SIZE, MAX_PAYLOAD, MAX_SOURCE
from verify_c import Report  # one Report for tools/verify.py's methods

__all__ = ["OUTCOMES", "PLANTS", "SLOTS", "Report", "explore"]

T0 = 1_780_000_000.0
VOLATILE, CANDIDATE, CONSOLIDATED, QUARANTINED, ARCHIVED = range(5)
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
    "unflag",
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


PLANTS: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "archived-recall": _archived_recall,
    "quarantine-recall": _quarantine_recall,
    "rn-threshold": _rn_threshold,
    "repair-unlinked": _repair_unlinked,
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
    side += _query(db, "SELECT 'l', distillate, base, mask FROM distill_links "
                       "ORDER BY distillate, base")
    return View(
        now, rows,
        _query(db, "SELECT seq, ts, action, memory_id, actor, detail, prev, hash FROM audit "
                   "ORDER BY seq"),
        _query(db, "SELECT * FROM reviews ORDER BY seq"),
        _query(db, "SELECT * FROM checkpoints ORDER BY seq"),
        side,
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
    at = {r["rowid"]: r["id"] for r in v.rows.values()}  # a link names memories by rowid
    side = []
    for row in v.side:
        items: list[Any] = []
        for pos, x in enumerate(row):
            if row[0] == "d" and pos == 1:
                continue
            if row[0] == "l" and pos == 1:
                items.append(opened.get(x))
            elif row[0] == "l" and pos == 2:  # base and mask: the episodes they name
                items.append(tuple(sorted((ref.get(at.get(x + k), "?") for k in range(SPAN)
                                           if row[3] >> k & 1), key=repr)))  # fmt: skip
            elif row[0] == "l":
                continue
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


def inv1(b: View, a: View, s: Step, cfg: MemoryConfig) -> list[str]:
    out = []
    consolidated = {x["id"] for x in a.records() if x["action"] == "transition"
                    and x["detail"].get("to") == "consolidated"}  # fmt: skip
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
    for r in a.rows.values():
        if about.get(r["audit_seq"]) != r["id"]:
            out.append(f"{r['id']} cites audit record {r['audit_seq']}, not one about it")
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


def inv7(b: View, a: View, s: Step, cfg: MemoryConfig) -> list[str]:
    out = []
    new = a.records(len(b.audit))
    for x in new:
        if x["action"] != "admit":
            continue
        r = a.rows[x["id"]]
        h, i, rr, rn, w, hard = gate_oracle(r)
        if any(
            abs(got - want) > GATE_TOL
            for got, want in ((r["h"], h), (r["i"], i), (r["r"], rr), (r["rn"], rn), (r["w"], w))
        ):
            out.append(f"{r['id']} stored gate scores the oracle does not compute "
                       f"(rn {r['rn']} vs {rn}, w {r['w']} vs {w})")  # fmt: skip
        near = min(abs(rn - cfg.green), abs(rn - cfg.yellow)) <= GATE_TOL
        if hard or w == 0 or rn < cfg.yellow:
            want = "quarantined"
        elif rn >= cfg.green:
            want = "consolidated" if r["w"] >= cfg.archive_strength else "candidate"
        else:
            want = "candidate"
        if x["detail"].get("to") != want and not near:
            out.append(f"{r['id']} with Rn {rn:.3f}, W {w:.3f}, hard {hard} was admitted "
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


def inv8(b: View, a: View, s: Step, cfg: MemoryConfig) -> list[str]:
    out = []
    for x in a.records(len(b.audit)):
        if x["action"] not in SYSTEM_ACTIONS or not ACTOR.match(x["actor"]):
            out.append(f"audit {x['seq']}: {x['action']} by {x['actor']} is no system action")
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


INVARIANTS: tuple[tuple[str, Callable[[View, View, Step, MemoryConfig], list[str]]], ...] = (
    ("MEM-INV-1", inv1), ("MEM-INV-2", inv2), ("MEM-INV-3", inv3), ("MEM-INV-4", inv4),
    ("MEM-INV-5", inv5), ("MEM-INV-6", inv6), ("MEM-INV-7", inv7), ("MEM-INV-8", inv8),
    ("LIFECYCLE", lifecycle), ("REFUSAL", refusal),
)  # fmt: skip


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
    engine.audit.resync()
    engine._reload_index()


def text_of(r: dict[str, Any]) -> str:
    body = bytes(r["payload"]).decode("utf-8", errors="replace")
    return body or f"{r['subject']} {r['attribute']} {r['value']}".strip() or "memory"


def enabled(v: View, slots: tuple[Slot, ...], steps: dict[str, float],
            outcomes: tuple[str, ...]) -> list[tuple[str, ...]]:  # fmt: skip
    """Every operation that applies in state ``v``."""
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
    return ops


def apply(engine: MemoryEngine, clock: Clock, v: View, op: tuple[str, ...],
          steps: dict[str, float]) -> list[RecallHit]:  # fmt: skip
    """Run one operation on the engine; returns the hits of a recall."""
    kind = op[0]
    every = RecallFilter(states=frozenset(State))
    if kind in ("admit", "capture"):
        slot = next(s for s in SLOTS if s.name == op[1])
        o = OUTCOMES[op[2]] if kind == "admit" else OUTCOMES["green"]
        call = engine.admit if kind == "admit" else engine.capture
        call(b"" if o.empty else slot.payload, "" if o.empty else "verify", flags=o.flags,
             confidence=o.confidence, kind=slot.kind, subject=slot.subject,
             attribute=slot.attribute, value=slot.value, context=slot.context)  # fmt: skip
    elif kind == "gate":
        engine.process(op[1])
    elif kind == "recall":
        return engine.recall(text_of(v.rows[op[1]]), 8, every if op[2] == "explicit" else None)
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
    return []


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
            config: MemoryConfig | None = None) -> Report:  # fmt: skip
    """Breadth-first over every operation sequence up to ``depth`` from an empty engine
    with ``memories`` slots (1..5), checking every invariant after every step."""
    if not 1 <= memories <= len(SLOTS):
        raise ValueError(f"memories must be in 1..{len(SLOTS)}, got {memories}")
    if planted is not None and planted not in PLANTS:
        raise ValueError(f"unknown planted bug {planted!r}; known: {sorted(PLANTS)}")
    unknown = set(outcomes) - set(OUTCOMES)
    if unknown:
        raise ValueError(f"unknown gate outcomes {sorted(unknown)}; known: {list(OUTCOMES)}")
    cfg = config or MemoryConfig()
    slots, steps = SLOTS[:memories], steps_for(cfg)
    name = f"memory state machine: depth {depth}, {memories} memories" + (
        f", planted {planted}" if planted else ""
    )
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
            for level in range(1, depth + 1):
                nxt: list[tuple[bytes, bytes, float]] = []
                fresh.append(0)
                for key, snap, t in frontier:
                    restore(engine, snap)
                    clock.t = t
                    before = read_view(engine, t)
                    for op in enabled(before, slots, steps, outcomes):
                        restore(engine, snap)
                        clock.t = t
                        step = Step(op)
                        try:
                            step.hits = apply(engine, clock, before, op, steps)
                        except HirmemError as exc:
                            step.refused = str(exc)
                            refused += 1
                        except Exception as exc:  # any crash is a finding
                            step.refused = f"crash: {type(exc).__name__}: {exc}"
                        after = read_view(engine, clock.t)
                        after.follow(before)
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
        "checked after every step: "
        + ", ".join(label for label, _ in INVARIANTS)
        + ", DYNAMICS (sweep idempotent)",
        f"transitions executed: {transitions} (refused by the engine: {refused})",
        f"operation sequences covered: {sequences}",
        f"distinct states: {len(parent)} (new per level: {', '.join(map(str, fresh))})",
        f"depth reached: {reached} of {depth}"
        + (" (fixed point)" if reached < depth and not violations else ""),
        f"time: {elapsed:.1f} s",
        *violations,
    ]
    return Report(name, not violations, lines)


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
    args = ap.parse_args(argv)
    report = explore(args.depth, args.memories, args.planted, stop_at_first=not args.all)
    print(f"{report.name}: {'ok' if report.ok else 'VIOLATED'}")
    for line in report.lines:
        print("  " + line)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
