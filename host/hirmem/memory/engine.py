"""The memory engine: the seven lifecycle stages over one SQLite store.

1. **capture** — :meth:`MemoryEngine.capture`: a volatile object in the working ring
   (bounded; overflow evicts the least recently accessed volatile object, audited).
   Id, timestamp, source, context hash assigned; no gate yet.
2. **normalise** — ACTION_FLAGS bits 2 and 3 from the record itself
   (:func:`hirmem.protocol.records.normalise`); a missing source or bad schema lowers H, the
   object is kept.
3. **HIR gate** — :func:`hirmem.protocol.gate.evaluate` (fixed, Q16.16, the protocol) or
   :func:`hirmem.protocol.gate.evaluate_float` (the reference), per ``config.gate_mode``. Scores
   are stored in the object. Hard fail → quarantine directly.
4. **weighting** — W = Q·P·H·I·R; W is the initial strength M. W = 0 → quarantine.
5. **consolidation** — Rn ≥ green consolidates, ≥ yellow holds the candidate for
   reinforcement (the sweep promotes it at ``promote_strength``), below quarantines.
6. **recall** — :meth:`MemoryEngine.recall` (see :mod:`.recall`).
7. **repair/quarantine** — contradictions (:mod:`.contradiction`) raise X, flag,
   downgrade or quarantine; :meth:`MemoryEngine.repair` writes a new version linked to
   the prior; :meth:`MemoryEngine.check_integrity` finds corrupted hashes. Steward
   review is in :mod:`.review`.

Every action is appended to the audit chain in the same transaction as the change.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from hirmem.memory import contradiction, distill, dynamics, evidence, paths, revision
from hirmem.memory.audit import AuditLog, Entry, Verification
from hirmem.memory.config import MemoryConfig
from hirmem.memory.embed import Embedder, embed_batch, make_embedder
from hirmem.memory.model import Layer, Memory, State, layer_for
from hirmem.memory.observe import describe, is_episode
from hirmem.memory.recall import RecallFilter, RecallHit, RecallIndex
from hirmem.memory.states import check_transition
from hirmem.memory.store import ADMIT_COLUMNS, SUPERSEDED_BY, Store
from hirmem.protocol import cbor
from hirmem.protocol.errors import HirmemError
from hirmem.protocol.fixedpoint import ONE, to_q
from hirmem.protocol.gate import FLAGS_MASK, Hard, Verdict, evaluate, evaluate_float
from hirmem.protocol.identity import fold
from hirmem.protocol.keys import SigningKey, read_key_file, write_key_file
from hirmem.protocol.records import normalise, record_hash
from hirmem.sql import PgTarget

__all__ = ["Captured", "GateScores", "MemoryEngine", "SweepReport"]

HOST_ID = b"hirmhost"  # 8-byte prefix of host-assigned memory ids
# a fresh row's columns by name (rowid first), and those the recall index holds
_ADMIT_AT = {name: k + 1 for k, name in enumerate(ADMIT_COLUMNS)}
_INDEXED = frozenset({"id", "last_access", "trust", "state", "layer", "source", "device",
                      "subject", "decayed_at"})  # fmt: skip
_PAGE = 1000  # rows per page of a streamed scan (check_integrity)
# observe.is_episode in SQL, for the sweep's columns
_EPISODE_SQL = (
    "(kind IN ('reading', 'action', 'event') OR (kind = 'fact' AND subject != '' "
    "AND attribute != ''))"
)

# why a strength-history point was written (the ``cause`` column)
HISTORY_ADMIT, HISTORY_SWEEP, HISTORY_REHEARSAL, HISTORY_PRESSURE, HISTORY_REVIEW = range(5)
HISTORY_CAUSES = ("admit", "sweep", "rehearsal", "pressure", "review")
HISTORY_PENDING = 65_536  # strength points a transaction holds back at most


@dataclass(frozen=True)
class GateScores:
    """Stage 3 + 4 output as reals in [0, 1]."""

    flags: int
    h: float
    i: float
    r: float
    f: float
    c: float
    rn: float
    w: float
    verdict: Verdict
    hard: Hard
    mode: str
    q16: tuple[int, ...] = ()  # fixed mode: (h, i, r, f, c, rn, w) as Q16.16


@dataclass(frozen=True)
class SweepReport:
    now: float
    examined: int
    changed: int
    archived: int
    promoted: int


def _store_key(path: str | Path | PgTarget) -> SigningKey:
    """The checkpoint key kept beside a file store (created on first use)."""
    if isinstance(path, PgTarget):
        raise HirmemError(f"a memory store on {path} needs its signing key given")
    text = str(path)
    if text == ":memory:" or text.startswith("file:"):
        return SigningKey.generate()
    key_path = Path(text + ".key")
    if not key_path.exists():
        write_key_file(key_path, SigningKey.generate())
    return read_key_file(key_path)


@functools.lru_cache(maxsize=4096)
def gate_scores(flags: int, confidence: float, provenance: float, mode: str) -> GateScores:
    """Stages 3 and 4 for one record, in the configured mode. A pure function of its
    inputs, so remembered (bounded): a fleet's records share a handful of flag words."""
    if mode == "fixed":
        g = evaluate(flags, to_q(confidence), to_q(provenance))
        q = (g.h, g.i, g.r, g.f, g.c, g.rn, g.w)
        h, i, r, f, c, rn, w = (v / ONE for v in q)
        return GateScores(flags, h, i, r, f, c, rn, w, g.verdict, g.hard, mode, q)
    fg = evaluate_float(flags, confidence, provenance)
    return GateScores(flags, fg.h, fg.i, fg.r, fg.f, fg.c, fg.rn, fg.w, fg.verdict, fg.hard, mode)


@dataclass(frozen=True)
class Captured:
    """An object captured outside the engine (a device record), to admit: the memory
    (volatile, its embedding computed), why intake found it inconsistent ("" when it
    did not), who captured it, and audit records that follow its capture."""

    memory: Memory
    device_check: str = ""
    actor: str = "system"
    notes: tuple[Entry, ...] = ()


def _live_steps(target: State, reason: str) -> list[tuple[State, str]]:
    """Stage 5's steps for a gated object that goes live."""
    if target is State.CONSOLIDATED:  # GREEN: volatile → candidate → consolidated
        return [(State.CANDIDATE, "gate passed"), (State.CONSOLIDATED, "Rn ≥ green: direct")]
    return [(State.CANDIDATE, reason or "Rn ≥ yellow: held")]


def _transition_entry(
    m: Memory, state: State, layer: Layer, new: State, reason: str, actor: str,
    extra: dict[str, object],
) -> tuple[Entry, Layer]:  # fmt: skip
    """The audit entry of moving ``m``, in ``state`` and ``layer``, to ``new`` (legal
    transitions only), and the layer it lands in."""
    check_transition(m.id, state, new)
    if new is State.CONSOLIDATED and m.h <= 0:
        raise HirmemError(f"memory {m.id} has H = 0 and cannot consolidate (MEM-INV-1)")
    if m.permanent and state is State.QUARANTINED:
        raise HirmemError(
            f"memory {m.id} is in permanent quarantine (R = 0, MEM-INV-2); it cannot "
            f"leave quarantine (asked: {new.name.lower()})"
        )
    landed = layer_for(new, m.kind, layer, is_episode(m.kind, m.subject, m.attribute))
    detail = {"from": state.name.lower(), "to": new.name.lower(), "reason": reason,
              "layer": landed.name.lower(), **extra}  # fmt: skip
    return Entry("transition", m.id, detail, actor), landed


def quarantine_reason(g: GateScores) -> str:
    """Why stages 3-5 quarantine a record, or "" when they do not."""
    hard = int(g.hard)
    reasons = [name for bit, name in ((1, "domination"), (2, "invariant"), (4, "consent"),
                                      (8, "honesty-zero")) if hard & bit]  # fmt: skip
    if reasons:
        return "hard fail: " + ", ".join(reasons)
    if g.verdict is Verdict.RED:
        return "gate RED: Rn below yellow"
    if g.w == 0:
        return "write gate W = 0"
    return ""


class MemoryEngine:
    """The host memory engine over one SQLite file (``":memory:"`` for a throwaway one)."""

    def __init__(
        self,
        path: str | Path | PgTarget = ":memory:",
        config: MemoryConfig | None = None,
        clock: Callable[[], float] = time.time,
        embedder: Embedder | None = None,
        signing_key: SigningKey | None = None,
    ) -> None:
        """``signing_key`` signs the audit chain's checkpoints (the host key); without
        one, a file store uses the key file ``<path>.key`` beside it (created, mode
        0600, on first open) and a ``":memory:"`` store a key of its own lifetime."""
        self.config = config or MemoryConfig()
        self.clock = clock
        # the embedder first: a missing optional model fails before the store is opened
        self.embedder: Embedder = embedder or make_embedder(
            self.config.embedder, self.config.embed_dim
        )
        self.store = Store(path)
        self.audit = AuditLog(self.store)
        self.signing_key = signing_key or _store_key(path)
        self._restore_triggers()
        known = self.store.meta("embedder")
        if known is None:
            self.store.set_meta("embedder", self.embedder.name)
        elif known != self.embedder.name:
            raise HirmemError(
                f"memory store {path} was built with embedder {known}, "
                f"not {self.embedder.name}: open it with the same embedder"
            )
        # the recall index is loaded on first use: a command that only counts or lists
        # (``stats``, ``review list``) never reads a million embeddings
        self._index: RecallIndex | None = None
        self.store.rollback_hooks.append(self._reload_index)
        # strength points of the running transaction, written with one statement when
        # it commits (or when they are read first); a rollback drops them with it
        self._history: list[tuple[int, int, float, float, int]] = []
        self.store.commit_hooks.append(self._write_history)
        self.store.rollback_hooks.append(self._history.clear)
        self._ensure_layer_tables()
        self.store.reload_hooks.append(self._reload_index)
        last = self.store.meta("last_sweep")
        self.scheduler = dynamics.DecayScheduler(
            self.sweep,
            self.config.sweep_interval_s,
            self.clock,
            float(last) if last is not None else float("-inf"),
        )

    def close(self) -> None:
        """Sign a checkpoint of the chain if it moved since the last one, then close
        (closed even when the checkpoint is refused: a foreign key)."""
        try:
            self.checkpoint()
        finally:
            self.store.close()

    # -- tamper evidence ----------------------------------------------------------------
    def checkpoint(self) -> evidence.Checkpoint | None:
        """Sign (seq, head hash) of the audit chain with the host key; None when the
        latest checkpoint already covers the head."""
        with self.store.transaction():
            if self.audit.head_seq == 0:
                return None
            return evidence.write_checkpoint(
                self.store.db, self.signing_key, self.audit.head_seq, self.audit.head_hash,
                self.clock(),
            )  # fmt: skip

    def check_signer(self) -> None:
        """Refuse (HirmemError) when the store's checkpoints are signed by another key:
        a command that writes would leave a head this engine cannot sign."""
        with self.store.reading() as db:
            evidence.check_signer(evidence.latest_checkpoint(db), self.signing_key)

    def _restore_triggers(self) -> None:
        """Re-create dropped or altered triggers on open, and say so in the chain."""
        missing = self.store.missing_triggers()
        if not missing:
            return
        with self.store.transaction():
            self.store.restore_triggers(missing)
            self.audit.append(
                "integrity", "",
                {"reason": "triggers missing or altered at open, re-created: "
                           + ", ".join(missing)},
                ts=self.clock(),
            )  # fmt: skip

    def _ensure_layer_tables(self) -> None:
        """The tables of distillation and revision (owned by those modules)."""
        with self.store.transaction():
            distill.ensure_schema(self)
            revision.ensure_schema(self)

    # -- helpers ------------------------------------------------------------------------
    @property
    def index(self) -> RecallIndex:
        """The recall index, loaded from the rows on first use (under the writer)."""
        with self.store.writing():
            if self._index is None:
                self._index = self._new_index()
                self._load_index(self._index)
            return self._index

    def _reload_index(self) -> None:
        """After a rolled-back transaction or another writer's commit: the index is
        rebuilt from the rows at its next use."""
        self._index = None

    def _new_index(self) -> RecallIndex:
        index = RecallIndex(self.embedder.dim, self.config.recency_tau_s, self.clock())
        cfg = self.config
        index.decay = lambda now, m, last, done, layer: dynamics.decayed_now(
            now, m, last, done, layer, cfg
        )
        return index

    def _load_index(self, index: RecallIndex) -> None:
        with self.store.writing() as db:
            rows = db.execute(
                "SELECT m.rowid, m.id, m.strength, m.last_access, m.trust, m.state, m.layer, "
                "m.source, m.device, m.subject, e.vector, m.decayed_at FROM memories m "
                "JOIN embeddings e ON e.memory = m.rowid WHERE m.state != 0 ORDER BY m.rowid"
            ).fetchall()
        if not rows:
            return
        cols = list(zip(*rows, strict=True))
        index.load_columns(
            np.array(cols[0], dtype=np.int64),
            [bytes.fromhex(x) for x in cols[1]],
            np.frombuffer(b"".join(cols[10]), dtype=np.float32).reshape(len(rows), -1),
            np.array(cols[2], dtype=np.float64),
            np.array(cols[3], dtype=np.float64),
            np.array(cols[4], dtype=np.float64),
            np.array(cols[5], dtype=np.int8),
            np.array(cols[6], dtype=np.int8),
            list(cols[7]),
            list(cols[8]),
            list(cols[9]),
            np.array(cols[11], dtype=np.float64),
        )

    def _save(self, m: Memory) -> Memory:
        self._write(m)
        return m

    def _write(self, m: Memory) -> int:
        """Write ``m``'s row and its place in the index; returns its rowid."""
        rowid = self.store.update(m)
        if self._index is not None:  # an index not loaded yet will read the row itself
            self._index.upsert(rowid, m)
        return rowid

    def get(self, memory_id: str) -> Memory | None:
        """Explicit id lookup: returns any memory, whatever its trust or state (a derived
        memory with the episodes it rests on among its links)."""
        return self.store.get(memory_id)

    def withheld(self, record_id: bytes) -> str:
        """Why a device record must reach no answer in another layer ("" when it may):
        the engine quarantined it or trusts it at 0. A record not yet followed is not
        judged here (follow the intake first). The verdict other layers are handed
        (:class:`hirmem.semantic.devices.Verdict`), so they need not import the engine."""
        m = self.store.get(record_id.hex())
        if m is None:
            return ""
        if m.state is State.QUARANTINED:
            return f"quarantined by the memory engine: {m.quarantine_reason}"
        return "Trust = 0 in the memory engine" if m.trust == 0 else ""

    def require(self, memory_id: str) -> Memory:
        m = self.get(memory_id)
        if m is None:
            raise HirmemError(f"no memory with id {memory_id}")
        return m

    def transition(
        self, m: Memory, new: State, reason: str, actor: str = "system", **extra: object
    ) -> Memory:
        """Move ``m`` to ``new`` (legal transitions only), audited, index updated."""
        # refused before the transaction begins (a rollback would drop the caches)
        entry, layer = _transition_entry(m, m.state, m.layer, new, reason, actor, extra)
        with self.store.transaction():
            seq = self.audit.append_entries([entry], ts=self.clock())[-1]
            out = m.replace(
                state=new, layer=layer, audit_seq=seq,
                quarantine_reason=reason if new is State.QUARANTINED else m.quarantine_reason,
            )  # fmt: skip
            out = self._save(out)
            if new is State.QUARANTINED:
                revision.revoke(self, out)  # a quarantined claim makes nothing history
            if State.QUARANTINED in (m.state, new):
                distill.reconsider(self, out)  # nor feeds a pattern, until promoted
            if new in (State.QUARANTINED, State.ARCHIVED):
                distill.close_windows(self, [m.id])  # a pattern no longer live is closed
            if new in (State.QUARANTINED, State.ARCHIVED):
                # what it contradicted may stand alone now
                revision.settle_flags(self, [x for x in m.links if x != m.id])
            if actor.startswith("steward:") and m.state is State.QUARANTINED:
                step = "steward promote" if new is State.CANDIDATE else "steward retire"
                paths.record_path(self, m, step, new, actor)
            return out

    def apply_strength(
        self, m: Memory, *, u: float = 0.0, d: float = 0.0, x: float = 0.0, reason: str,
        after: Sequence[Entry] = (),
    ) -> Memory:  # fmt: skip
        """One step of the strength equation for ``m``; audited when the change is large.
        ``after``: the audit entries of what caused the step (a pattern's new episodes),
        appended first in the same append, the row written once."""
        new = dynamics.strength_step(m.strength, u, m.priority, m.rn, d, x, self.config)
        with self.store.transaction():
            entries = list(after)
            if abs(new - m.strength) >= self.config.audit_strength_delta:
                entries.append(Entry(
                    "strength", m.id,
                    {"old_strength": m.strength, "strength": new, "x": x, "reason": reason},
                ))  # fmt: skip
            seq = self.audit.append_entries(entries, ts=self.clock())[-1] if entries else None
            out = m.replace(strength=new, audit_seq=m.audit_seq if seq is None else seq)
            rowid = self._write(out)
            self._record_history(np.array([rowid]), self.clock(), np.array([new]),
                                 HISTORY_PRESSURE)  # fmt: skip
            return out

    # -- stage 1: capture ---------------------------------------------------------------
    def _next_host_id(self) -> bytes:
        """The next free id in the host's space. A device whose own id is the host's
        prefix numbers its records in that space too: an id one of its records holds
        is skipped (its record came first), never inserted twice."""
        seq = int(self.store.meta("host_seq", "0") or "0")
        while True:
            seq += 1
            rid = HOST_ID + seq.to_bytes(8, "big")
            if not self.store.hashes_of([rid.hex()]):
                break
        self.store.set_meta("host_seq", str(seq))
        return rid

    def capture(
        self,
        payload: bytes | str,
        source: str = "",
        *,
        flags: int = FLAGS_MASK,
        confidence: float = 1.0,
        provenance: float = 1.0,
        priority: float | None = None,
        context: bytes | None = None,
        timestamp: int | None = None,
        subject: str = "",
        attribute: str = "",
        value: str = "",
        negated: bool = False,
        kind: str = "fact",
        links: Sequence[str] = (),
        _prev_hash: bytes | None = None,
        _version: int = 1,
        _supersedes: str = "",
        _insert: bool = True,
    ) -> Memory:
        """Stage 1: a volatile object in the working ring. ``flags`` are the sub-check
        results (ACTION_FLAGS, bit set = passed); ``confidence`` is Q, ``provenance`` P.
        ``_insert=False``: the object only, not stored (its host id and the host's chain
        head are taken all the same: store it in the caller's transaction,
        :meth:`insert_settled`)."""
        now = self.clock()
        data = payload.encode("utf-8") if isinstance(payload, str) else bytes(payload)
        for name, v in (("confidence", confidence), ("provenance", provenance)):
            if not 0.0 <= v <= 1.0:
                raise HirmemError(f"{name} must be in 0..1, got {v}")
        described = describe(data, source, kind)  # refuses an unknown kind
        ts = int(now * 1000) if timestamp is None else timestamp
        if not (subject or attribute):
            kind = described.kind
            subject, attribute = described.subject, described.attribute
            value, negated = described.value, described.negated
        with self.store.transaction():
            rid = self._next_host_id()
            if context is None:
                context = hashlib.sha256(rid + data + source.encode()).digest()
            prev = _prev_hash
            if prev is None:
                head = self.store.meta("host_head")
                prev = bytes.fromhex(head) if head else bytes(32)
            m = Memory(
                id=rid.hex(),
                payload=data,
                source=source,
                timestamp=ts,
                context=context,
                flags=flags,
                confidence=confidence,
                provenance=provenance,
                priority=self.config.default_priority if priority is None else priority,
                links=tuple(links),
                last_access=now,
                decayed_at=now,
                prev_hash=prev,
                subject=fold(subject),
                attribute=fold(attribute),
                value=value,
                negated=negated,
                kind=kind,
                version=_version,
                supersedes=_supersedes,
                created=now,
            )
            m = m.replace(
                hash=m.content_hash(),
                embedding=self.embedder.embed(m.text()).astype(np.float32).tobytes(),
            )
            if _prev_hash is None:
                self.store.set_meta("host_head", m.hash.hex())
            return self.insert_volatile(m, now) if _insert else m

    def insert_volatile(self, m: Memory, now: float, actor: str = "system") -> Memory:
        """Store a captured object in the working ring (stage 1), audited."""
        with self.store.transaction():
            seq = self.audit.append(
                "capture", m.id, {"hash": m.hash, "device": m.device or None}, actor=actor, ts=now
            )
            m = m.replace(audit_seq=seq)
            self.store.insert(m)  # one write: the row is born citing its capture record
            self._evict_overflow(now, keep=m.id)
            return m

    def insert_settled(
        self, m: Memory, steps: Sequence[tuple[State, str]], derived: Sequence[Entry],
        now: float,
    ) -> Memory:  # fmt: skip
        """A captured object (:meth:`capture` with ``_insert=False``) that goes straight
        through ``steps`` (target state, reason) — a distilled pattern's birth: the audit
        records the one-by-one path writes (its capture, ``derived``: what it rests on,
        then one ``transition`` per step) appended together, and its row inserted once,
        in its final state (it never sits in the working ring, so it evicts nothing)."""
        entries = [Entry("capture", m.id, {"hash": m.hash, "device": m.device or None}),
                   *derived]  # fmt: skip
        state, layer, why = m.state, m.layer, m.quarantine_reason
        for new, reason in steps:  # refused before the transaction begins
            entry, layer = _transition_entry(m, state, layer, new, reason, "system", {})
            entries.append(entry)
            state, why = new, reason if new is State.QUARANTINED else why
        with self.store.transaction():
            seq = self.audit.append_entries(entries, ts=now)[-1]
            out = m.replace(state=state, layer=layer, quarantine_reason=why, audit_seq=seq)
            rowid = self.store.insert(out)
            if self._index is not None and out.state is not State.VOLATILE:
                self._index.upsert(rowid, out)
            return out

    def _evict_overflow(self, now: float, keep: str) -> None:
        over = self.store.count("state = 0") - self.config.working_capacity
        if over <= 0:
            return
        for (mid,) in self.store.db.execute(  # the writer's own connection: under its lock
            "SELECT id FROM memories WHERE state = 0 AND id != ? "
            "ORDER BY last_access, rowid LIMIT ?",
            (keep, over),
        ).fetchall():
            self.store.delete_volatile(mid)
            self.audit.append("evict", mid, {"reason": "working ring overflow"}, ts=now)

    # -- stages 2-5 ---------------------------------------------------------------------
    def process(
        self, memory_id: str, *, device_check: str = "", mode: str | None = None,
        held: Memory | None = None,
    ) -> Memory:  # fmt: skip
        """Stages 2-5 for a volatile object: normalise, gate, weight, consolidate.

        ``device_check`` non-empty means intake found the device's record inconsistent
        (it names what): the memory is quarantined for review whatever the gate says.
        ``held``: the object as the caller stored it in this same transaction (saves
        reading it back).
        """
        with self.store.transaction():  # read, decide and write as one step of the writer
            m = held if held is not None and held.id == memory_id else self.require(memory_id)
            return self._process(m, device_check, mode)

    def _process(self, m: Memory, device_check: str, mode: str | None) -> Memory:
        if m.state is not State.VOLATILE:
            raise HirmemError(f"memory {m.id} was already gated ({m.state.name.lower()})")
        now = self.clock()
        changes, g, target, reason, admitted = self._gated(m, device_check, mode, now)
        with self.store.transaction():
            scored = m.replace(**changes)
            if target is State.QUARANTINED:
                seq = self.audit.append(*admitted, ts=now)
                self.store.update(scored.replace(audit_seq=seq))
                out = self.transition(scored, target, reason)
                rowid = self.store.rowid(out.id)
            else:
                out, rowid = self._admit_live(scored, admitted, _live_steps(target, reason), now)
            if rowid is not None:
                self._record_history(np.array([rowid]), now, np.array([g.w]), HISTORY_ADMIT)
            if out.state in (State.CANDIDATE, State.CONSOLIDATED):
                out = self._resolve_conflicts(out)
            return self._revise_and_distil(out)

    def _gated(
        self, m: Memory, device_check: str, mode: str | None, now: float
    ) -> tuple[dict[str, Any], GateScores, State, str, tuple[str, str, dict[str, Any]]]:
        """Stages 2-5 decided for a volatile object, nothing written: the fields the gate
        sets, its scores, the state it goes to, why, and the ``admit`` audit entry."""
        flags = normalise(m.flags, m.payload, m.source, m.timestamp, m.context)
        g = gate_scores(flags, m.confidence, m.provenance, mode or self.config.gate_mode)
        trust = g.h * g.i * g.r
        target, reason = self.disposition(g, device_check)
        changes: dict[str, Any] = dict(
            flags=flags, h=g.h, i=g.i, r=g.r, f=g.f, c=g.c, rn=g.rn, w=g.w,
            verdict=int(g.verdict), hard=int(g.hard), trust=trust, gate_mode=g.mode,
            strength=g.w, permanent=g.r == 0, last_access=now, decayed_at=now,
        )  # fmt: skip
        admitted = (
            "admit",
            m.id,
            {
                "flags": flags,
                "h": g.h,
                "i": g.i,
                "r": g.r,
                "f": g.f,
                "c": g.c,
                "rn": g.rn,
                "w": g.w,
                "trust": trust,
                "verdict": int(g.verdict),
                "hard": int(g.hard),
                "gate_mode": g.mode,
                "to": target.name.lower(),
                "reason": reason or None,
                "device_scores": list(m.device_scores) or None,
            },
        )
        return changes, g, target, reason, admitted

    def disposition(self, g: GateScores, device_check: str = "") -> tuple[State, str]:
        """Stage 5's decision for gated scores ``g``: the state a fresh object goes to,
        and why ("" for a plain pass). ``device_check``: what intake found wrong."""
        reason = device_check or quarantine_reason(g)
        if reason:
            return State.QUARANTINED, reason
        target = dynamics.rn_disposition(g.rn, self.config)
        if target is State.QUARANTINED:
            return target, "Rn below yellow"
        if target is State.CONSOLIDATED and g.w < self.config.archive_strength:
            # GREEN but born below the archive threshold: held as a candidate that
            # rehearsal may still reinforce, never consolidated at a strength the
            # next sweep archives
            return State.CANDIDATE, "Rn ≥ green but W below archive_strength: held"
        return target, ""

    def _steps(
        self, m: Memory, steps: Sequence[tuple[State, str]], h: float
    ) -> tuple[list[tuple[str, str, dict[str, Any]]], State, Layer]:
        """The ``transition`` audit entries of a gated object's first steps (each one
        checked as :meth:`transition` checks it; ``h``: its gated H), and the state and
        layer it ends in."""
        entries: list[tuple[str, str, dict[str, Any]]] = []
        state, layer = m.state, m.layer
        episode = is_episode(m.kind, m.subject, m.attribute)
        for new, why in steps:
            check_transition(m.id, state, new)
            if new is State.CONSOLIDATED and h <= 0:
                raise HirmemError(f"memory {m.id} has H = 0 and cannot consolidate (MEM-INV-1)")
            layer = layer_for(new, m.kind, layer, episode)
            entries.append(("transition", m.id, {
                "from": state.name.lower(), "to": new.name.lower(), "reason": why,
                "layer": layer.name.lower()}))  # fmt: skip
            state = new
        return entries, state, layer

    def _admit_live(
        self,
        m: Memory,
        admitted: tuple[str, str, dict[str, Any]],
        steps: list[tuple[State, str]],
        now: float,
    ) -> tuple[Memory, int | None]:
        """A gated object that goes live (candidate, or on to consolidated): the same
        audit records :meth:`transition` would append, in one append, and the row
        written once in its final state. These transitions neither start nor end a
        quarantine nor an archive, so none of transition's follow-ups apply."""
        entries, state, layer = self._steps(m, steps, m.h)
        seqs = self.audit.append_many([admitted, *entries], ts=now)
        out = m.replace(state=state, layer=layer, audit_seq=seqs[-1])
        for new, _ in steps[:-1]:  # the database checks every step (memories_legal_state)
            self.store.db.execute("UPDATE memories SET state = ? WHERE id = ?", (int(new), m.id))
        rowid = self.store.update(out)
        if self._index is not None:
            self._index.upsert(rowid, out)
        return out, rowid

    def admit_captured(
        self, items: Sequence[Captured], now: float, mode: str | None = None
    ) -> list[Memory]:
        """Stages 1-5 for objects captured elsewhere (a device pack's stated facts, which
        may contradict or revise what is held), one by one in order, in one
        transaction: each stored in the working ring (the capture's ``actor`` is the
        item's, its ``notes`` follow the capture), then gated as :meth:`process` gates
        it. A pack's other records are admitted together
        (:func:`hirmem.memory.intake.admit_pack`)."""
        out: list[Memory] = []
        with self.store.transaction():
            for item in items:
                held = self.insert_volatile(item.memory, now, actor=item.actor)
                if item.notes:
                    self.audit.append_entries(item.notes, ts=now)
                out.append(self.process(held.id, device_check=item.device_check, mode=mode,
                                        held=held))  # fmt: skip
        return out

    def _revise_and_distil(self, m: Memory) -> Memory:
        """After admission: revision by time (:mod:`.revision`), then distillation of a
        live episode into its pattern or procedure (:mod:`.distill`)."""
        if m.state not in (State.CANDIDATE, State.CONSOLIDATED):
            return m
        revision.revise(self, m)
        distill.on_episode(self, m)
        return self.require(m.id)

    def admit(self, payload: bytes | str, source: str = "", **kw: Any) -> Memory:
        """Stages 1-5 in one call (capture then process)."""
        with self.store.transaction():
            m = self.capture(payload, source, **kw)
            return self.process(m.id)

    # -- stage 6: recall ----------------------------------------------------------------
    def recall(
        self,
        query: str,
        k: int = 10,
        flt: RecallFilter | None = None,
        *,
        touch: bool = True,
    ) -> list[RecallHit]:
        """Top-k by Sim·M·Rec·Trust; each hit's access_count goes up (a rehearsal)."""
        return self.recall_batch([query], k, flt, touch=touch)[0]

    def recall_batch(
        self,
        queries: Sequence[str],
        k: int = 10,
        flt: RecallFilter | None = None,
        *,
        touch: bool = True,
    ) -> list[list[RecallHit]]:
        q = embed_batch(self.embedder, queries)
        # The index is the writer's: a search never sees it half-updated by a sweep.
        with self.store.transaction() if touch else self.store.writing():
            now = self.clock()
            results = self.index.search(q, k, flt or RecallFilter(), now)
            if touch:
                for hits in results:
                    for hit in hits:
                        self._touch(hit, now)
        return results

    def _touch(self, hit: RecallHit, now: float) -> None:
        """A recall hit: a rehearsal when similar enough (U = the similarity), settled at
        once with the decay up to now; audited when the change is large, kept in the
        strength history. A weaker hit is returned but is no use of the memory (neither
        counted nor made recent), and only live memories are rehearsed: an archived
        (read-only) or quarantined memory reached by an explicit filter is unchanged."""
        cfg = self.config
        if hit.sim < cfg.rehearsal_min_sim:
            return
        m = self.require(hit.id)
        if m.state not in (State.CANDIDATE, State.CONSOLIDATED):
            return
        u = hit.sim
        d = dynamics.decay_between(m.last_access, m.decayed_at, now, cfg, cfg.tau_for(m.layer))
        pending = m.access_count - m.access_seen  # rehearsals of an older store, not yet folded
        new = dynamics.strength_step(m.strength, u + pending, m.priority, m.rn, d, 0.0, cfg)
        out = m.replace(
            strength=new,
            access_seen=m.access_count + 1,
            access_count=m.access_count + 1,
            last_access=now,
            decayed_at=max(m.decayed_at, now),
        )
        if abs(new - m.strength) >= cfg.audit_strength_delta:
            seq = self.audit.append(
                "strength", m.id,
                {"old_strength": m.strength, "strength": new, "reason": "rehearsal", "now": now},
                ts=now,
            )  # fmt: skip
            out = out.replace(audit_seq=seq)
        self._save(out)
        self._record_history(np.array([hit.rowid]), now, np.array([new]), HISTORY_REHEARSAL)

    # -- stage 5 over time: the decay sweep ---------------------------------------------
    def sweep(self, now: float | None = None) -> SweepReport:
        """Apply the strength equation to every live memory up to ``now``; archive those
        below ``archive_strength``, promote reinforced candidates. Idempotent: a second
        sweep at the same instant finds nothing to do and writes nothing."""
        with self.store.transaction():  # one step of the writer, the read included
            report = self._sweep(now)
            self.checkpoint()  # anchor the head the sweep leaves
            return report

    def _sweep(self, now: float | None) -> SweepReport:
        t = self.clock() if now is None else now
        cfg = self.config
        self._expire_working(t)
        rows = self.store.db.execute(
            "SELECT rowid, strength, access_count - access_seen, priority, rn, last_access, "
            "decayed_at, state, h, flagged, kind = 'procedure', layer, "
            f"{_EPISODE_SQL} FROM memories WHERE state IN (1, 2)"
        ).fetchall()
        if not rows:
            return SweepReport(t, 0, 0, 0, 0)
        a = np.array(rows, dtype=np.float64)
        del rows
        rowid = a[:, 0].astype(np.int64)
        old = a[:, 1]
        tau_rows = dynamics.layer_taus(a[:, 11].astype(np.int8), cfg)
        res = dynamics.sweep_arrays(
            t, old, a[:, 2], a[:, 3], a[:, 4], a[:, 5], a[:, 6], cfg, tau_rows
        )
        state = a[:, 7].astype(np.int8)
        archive = res.strength < cfg.archive_strength
        promote = (
            (state == int(State.CANDIDATE))
            & ~archive
            & (res.strength >= cfg.promote_strength)
            & (a[:, 8] > 0)  # MEM-INV-1: H = 0 never consolidates
            & (a[:, 9] == 0)  # a flagged (contradicted) memory waits for repair or review
        )
        big = res.changed & (np.abs(res.strength - old) >= cfg.audit_strength_delta)
        new_state = state.copy()
        new_state[archive] = int(State.ARCHIVED)
        new_state[promote] = int(State.CONSOLIDATED)
        new_layer = a[:, 11].astype(np.int8)
        new_layer[promote] = np.where(
            a[promote, 10] > 0,
            int(Layer.PROCEDURAL),
            np.where(a[promote, 12] > 0, int(Layer.EPISODIC), int(Layer.SEMANTIC)),
        ).astype(np.int8)  # an episode stays episodic: its pattern is what is semantic
        # what must be written: a state change, rehearsals to fold in, or decay owed
        # of at least sweep_settle_delta (the rest stays owed, exactly: it telescopes)
        settle = res.changed & (
            archive | promote | big | (a[:, 2] != 0)
            | (np.abs(res.strength - old) >= max(cfg.sweep_settle_delta, 1e-300))
        )  # fmt: skip
        idx = np.flatnonzero(settle)
        special = np.flatnonzero(archive | promote | big)
        with self.store.transaction():
            self.store.db.executemany(
                "UPDATE memories SET strength = ?, decayed_at = ?, "
                "access_seen = access_count WHERE rowid = ?",
                zip(
                    res.strength[idx].tolist(),
                    res.decayed_at[idx].tolist(),
                    rowid[idx].tolist(),
                    strict=True,
                ),
            )
            ids = self._ids_of(rowid[special].tolist())
            entries: list[tuple[str, str, dict[str, Any]]] = []
            owners: list[int] = []  # which special row each audit entry belongs to
            for j in special.tolist():
                mid = ids[int(rowid[j])]
                if big[j]:
                    entries.append(("strength", mid, {
                        "old_strength": float(old[j]), "strength": float(res.strength[j]),
                        "reason": "sweep", "now": t}))  # fmt: skip
                    owners.append(j)
                if new_state[j] != state[j]:
                    old_s, new_s = State(int(state[j])), State(int(new_state[j]))
                    check_transition(mid, old_s, new_s)
                    why = (
                        "strength below archive threshold"
                        if archive[j]
                        else "reinforced to promote strength"
                    )
                    entries.append(("transition", mid, {
                        "from": old_s.name.lower(), "to": new_s.name.lower(), "reason": why,
                        "layer": Layer(int(new_layer[j])).name.lower()}))  # fmt: skip
                    owners.append(j)
            last_seq: dict[int, int] = {}
            for j, seq in zip(owners, self.audit.append_many(entries, ts=t), strict=True):
                last_seq[j] = seq  # the latest record about each memory
            self.store.db.executemany(
                "UPDATE memories SET state = ?, layer = ?, audit_seq = ? WHERE rowid = ?",
                [(int(new_state[j]), int(new_layer[j]), seq, int(rowid[j]))
                 for j, seq in last_seq.items()],
            )  # fmt: skip
            gone = np.flatnonzero(archive & (new_state != state))
            if gone.size:  # archived patterns take no new episodes
                distill.close_windows(self, [ids[int(rowid[j])] for j in gone.tolist()])
            self.store.set_meta("last_sweep", repr(t))
        upd = np.union1d(idx, special)
        if self._index is not None:  # an index not loaded yet will read the rows itself
            self._index.update_columns(rowid[upd], res.strength[upd], new_state[upd],
                                       new_layer[upd], res.decayed_at[upd])  # fmt: skip
        # the strength history keeps a point per moved memory at every sweep (a small
        # row in its own table), settled or not
        moved = np.flatnonzero(res.changed)
        self._record_history(rowid[moved], t, res.strength[moved], HISTORY_SWEEP)
        return SweepReport(t, len(a), len(idx), int(archive.sum()), int(promote.sum()))

    def _expire_working(self, now: float) -> int:
        """Working memory lives seconds to minutes: evict (audited) every volatile object
        not gated within ``working_ttl_s``."""
        stale = self.store.db.execute(
            "SELECT id FROM memories WHERE state = 0 AND created < ? ORDER BY rowid",
            (now - self.config.working_ttl_s,),
        ).fetchall()
        if not stale:
            return 0
        with self.store.transaction():
            for (mid,) in stale:
                self.store.delete_volatile(mid)
                self.audit.append("evict", mid, {"reason": "working memory lifetime"}, ts=now)
        return len(stale)

    def _ids_of(self, rowids: list[int]) -> dict[int, str]:
        out: dict[int, str] = {}
        with self.store.reading() as db:
            for k in range(0, len(rowids), 500):
                chunk = rowids[k : k + 500]
                marks = ",".join("?" * len(chunk))
                for r, mid in db.execute(
                    f"SELECT rowid, id FROM memories WHERE rowid IN ({marks})", chunk
                ):
                    out[int(r)] = str(mid)
        return out

    # -- stage 7: contradiction, corruption, repair -------------------------------------
    def _resolve_conflicts(self, m: Memory) -> Memory:
        conflicts = contradiction.find_conflicts(self.store, m, self.config)
        if not conflicts:
            return m
        group = [m, *(c.other for c in conflicts)]
        # Trust of a claim is its whole write gate W = Q·P·H·I·R. The side with the lower
        # W is downgraded (all sides when they tie), and the pressure it gets is X
        # scaled by the W of the strongest claim against it: weak claims cannot
        # quarantine a strong memory, however many of them there are.
        top = max(x.w for x in group)
        losers = {x.id for x in group if x.w < top} or {x.id for x in group}
        cfg = self.config
        kinds = ",".join(sorted({c.kind for c in conflicts}))
        out = m
        for x in group:
            against = [c.other for c in conflicts] if x.id == m.id else [m]
            others = tuple(sorted(o.id for o in against))
            lose = x.id in losers
            pressure = cfg.contradiction_x * max(o.w for o in against) if lose else 0.0
            seq = self.audit.append(
                "contradiction",
                x.id,
                {"conflict": ",".join(others), "reason": kinds, "x": pressure},
                ts=self.clock(),
            )
            x = self.require(x.id)  # fresh: an earlier step may have changed it
            links = tuple(dict.fromkeys((*x.links, *others)))
            y = self._save(x.replace(flagged=True, links=links, audit_seq=seq))
            if lose:
                y = self.apply_strength(y, x=pressure, reason="contradiction")
                if y.strength < cfg.quarantine_strength:
                    y = self.transition(y, State.QUARANTINED, "contradiction")
            if y.id == m.id:
                out = y
        revision.settle_flags(self, [x.id for x in group])
        return self.require(out.id)

    def check_integrity(self) -> list[str]:
        """Stage 7 for corruption: every memory whose hash does not match its content is
        pressured (X), flagged and quarantined (archived ones are only flagged)."""
        with self.store.writing():
            return self._check_integrity()

    def _check_integrity(self) -> list[str]:
        """Streamed: pages of ``_PAGE`` rows, only the hashed columns read, so memory
        stays bounded by the page (and the corrupted ids found) at any store size."""
        bad: list[str] = []
        after = 0
        while True:
            page = self.store.db.execute(
                "SELECT rowid, id, payload, source, timestamp, context, prev_hash, hash "
                "FROM memories WHERE rowid > ? ORDER BY rowid LIMIT ?",
                (after, _PAGE),
            ).fetchall()
            if not page:
                return bad
            after = int(page[-1][0])
            for _, mid, payload, source, ts, context, prev, digest in page:
                if record_hash(bytes.fromhex(mid), payload, source, ts, context, prev) != digest:
                    bad.append(mid)
                    self._quarantine_corrupted(self.require(mid))

    def _quarantine_corrupted(self, m: Memory) -> None:
        """Pressure (X), flag and quarantine one memory whose hash is wrong (an
        archived one is only flagged)."""
        with self.store.transaction():
            seq = self.audit.append(
                "corruption", m.id, {"hash": m.hash, "x": self.config.corruption_x},
                ts=self.clock(),
            )  # fmt: skip
            y = self._save(m.replace(flagged=True, audit_seq=seq))
            y = self.apply_strength(y, x=self.config.corruption_x, reason="corrupted hash")
            if y.state in (State.CANDIDATE, State.CONSOLIDATED, State.VOLATILE):
                self.transition(y, State.QUARANTINED, "corrupted hash")

    def repair(
        self,
        memory_id: str,
        payload: bytes | str,
        *,
        reason: str,
        actor: str = "system",
        value: str | None = None,
        negated: bool | None = None,
        source: str | None = None,
        flags: int | None = None,
        confidence: float | None = None,
        provenance: float | None = None,
    ) -> Memory:
        """Write a corrected version of ``memory_id``: a new memory whose prev_hash is the
        prior's hash and whose ``supersedes`` names it. The prior is preserved (a live
        prior is archived, read-only; a quarantined one stays quarantined).

        The new version is gated on its own inputs: the structured triple comes from the
        new payload when it carries one (``value``/``negated`` override it), and the
        sub-check ``flags``, ``confidence``, ``provenance`` and ``source`` given here
        replace the prior's (each defaults to the prior's). A version can be repaired
        once: repairing a superseded memory is refused and names the newer version.
        """
        with self.store.transaction():
            prior = self.require(memory_id)
            if prior.state is State.VOLATILE:
                raise HirmemError(f"memory {memory_id} is volatile: gate it before repairing it")
            newer = self.store.select(SUPERSEDED_BY, (prior.id,))
            if newer:
                raise HirmemError(
                    f"memory {memory_id} was already repaired by {newer[0].id} (version "
                    f"{newer[0].version}): repair the latest version, not a superseded one"
                )
            data = payload.encode("utf-8") if isinstance(payload, str) else bytes(payload)
            # the repaired memory states what its own payload says, not the prior's value
            seen = describe(data, prior.source if source is None else source)
            subject, attribute, own_value, own_negated = (
                (seen.subject, seen.attribute, seen.value, seen.negated)
                if seen.subject or seen.attribute
                else (prior.subject, prior.attribute, prior.value, prior.negated)
            )  # fmt: skip
            new = self.capture(
                data,
                prior.source if source is None else source,
                flags=prior.flags if flags is None else flags,
                confidence=prior.confidence if confidence is None else confidence,
                provenance=prior.provenance if provenance is None else provenance,
                priority=prior.priority,
                context=prior.context,
                subject=subject,
                attribute=attribute,
                value=own_value if value is None else value,
                negated=own_negated if negated is None else negated,
                # what the new payload is (a free-text correction of a reading is a fact)
                kind=seen.kind if seen.subject or seen.attribute or seen.kind != "fact"
                else ("fact" if prior.kind in ("reading", "action") else prior.kind),
                links=(prior.id,),
                _prev_hash=prior.hash,
                _version=prior.version + 1,
                _supersedes=prior.id,
            )
            if prior.device:
                new = self._save(new.replace(device=prior.device, kid=prior.kid))
            self.audit.append(
                "repair", new.id,
                {"prior": prior.id, "version": new.version, "reason": reason, "hash": new.hash,
                 "flags": new.flags},
                actor=actor, ts=self.clock(),
            )  # fmt: skip
            if prior.state in (State.CANDIDATE, State.CONSOLIDATED):
                self.transition(prior, State.ARCHIVED, f"superseded by {new.id}", actor=actor)
            out = self.process(new.id)
            if actor.startswith("steward:"):  # the repair path succeeded if it holds
                paths.record_path(self, prior, "steward repair", out.state, actor,
                                  ok=out.state is not State.QUARANTINED)  # fmt: skip
            return out

    def restore_strength(self, memory_id: str, floor: float, reason: str, actor: str) -> Memory:
        """Raise a memory's strength to at least ``floor`` (a steward vouching for it),
        audited; a memory already stronger is left as it is."""
        with self.store.transaction():
            m = self.require(memory_id)
            if m.strength >= floor:
                return m
            now = self.clock()
            seq = self.audit.append(
                "strength", m.id,
                {"old_strength": m.strength, "strength": floor, "reason": reason, "now": now},
                actor=actor, ts=now,
            )  # fmt: skip
            out = m.replace(strength=floor, decayed_at=max(m.decayed_at, now), audit_seq=seq)
            rowid = self._write(out)
            self._record_history(np.array([rowid]), now, np.array([floor]), HISTORY_REVIEW)
            return out

    def access(self, memory_id: str) -> Memory:
        """Read a memory by id as a use of it: an object in the working ring becomes the
        most recently accessed (the ring evicts the least recently *accessed*). Gated
        memories are returned as :meth:`get` would (a recall is their rehearsal)."""
        with self.store.transaction():
            m = self.require(memory_id)
            if m.state is not State.VOLATILE:
                return m
            return self._save(m.replace(last_access=self.clock()))

    # -- strength over time -------------------------------------------------------------
    def _record_history(
        self, rowids: npt.NDArray[np.int64], t: float, strength: npt.NDArray[np.float64],
        cause: int,
    ) -> None:  # fmt: skip
        """Keep (t, strength) per memory in its ring of ``history_points`` time buckets:
        inside a transaction, written when it commits (every point of a follow batch —
        its packs' admissions and their patterns' steps — with one statement)."""
        if len(rowids):
            self._record_points(rowids.tolist(), t, strength.tolist(), cause)

    def _record_points(
        self, rowids: Sequence[int], t: float, strength: Sequence[float], cause: int
    ) -> None:
        """:meth:`_record_history` of plain numbers (a pack's rows hold them so)."""
        if not rowids:
            return
        cfg = self.config
        slot = int(t // cfg.history_bucket_s) % cfg.history_points
        self._history += [(r, slot, t, m, cause) for r, m in zip(rowids, strength, strict=True)]
        # held back only by the writer's own running transaction
        if not (self.store.in_transaction and self.store.writer.held()) or (
            len(self._history) >= HISTORY_PENDING
        ):
            self._write_history()

    def _write_history(self) -> None:
        """Write the pending strength points, in the order they came (a memory's later
        point in the same bucket replaces the earlier one)."""
        if not self._history:
            return
        with self.store.writing() as db:
            db.executemany(
                "INSERT INTO strength_history(memory, slot, ts, strength, cause) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT(memory, slot) DO UPDATE SET "
                "ts = excluded.ts, strength = excluded.strength, cause = excluded.cause",
                self._history,
            )
        self._history.clear()

    def admitted_rows(
        self, rows: Sequence[Sequence[Any]], vectors: npt.NDArray[np.float32], now: float
    ) -> None:
        """Fresh rows inserted in their final state (a device pack's: rowid, then
        :data:`ADMIT_COLUMNS`; ``vectors``: their embeddings, in order): their admission
        strength points, and their places in the index when it is loaded (appended as
        columns: their rowids are new; an index not loaded yet reads the rows itself)."""
        n = len(rows)
        at = _ADMIT_AT["strength"]
        rowid_list, strength_list = [row[0] for row in rows], [row[at] for row in rows]
        self._record_points(rowid_list, now, strength_list, HISTORY_ADMIT)
        if self._index is None or not n:
            return
        rowids = np.array(rowid_list, dtype=np.int64)
        strength = np.array(strength_list, dtype=np.float64)
        cols = {name: [row[k] for row in rows] for name, k in _ADMIT_AT.items()
                if name in _INDEXED}  # fmt: skip
        if State.VOLATILE in cols["state"]:
            raise HirmemError("a volatile memory is not admitted in its final state")
        self._index.load_columns(
            rowids, [bytes.fromhex(x) for x in cols["id"]], vectors, strength,
            np.array(cols["last_access"], dtype=np.float64),
            np.array(cols["trust"], dtype=np.float64), np.array(cols["state"], dtype=np.int8),
            np.array(cols["layer"], dtype=np.int8), cols["source"], cols["device"],
            cols["subject"], np.array(cols["decayed_at"], dtype=np.float64),
        )  # fmt: skip

    def strengths_moved(
        self, moved: Sequence[tuple[int, str, float, float, float, float]], t: float
    ) -> None:
        """Rows whose strength was written in SQL (patterns' steps: rowid, id, strength,
        last access, decayed at, trust): their history points, and their columns in the
        index when it is loaded (a row it does not hold yet is read whole)."""
        rowids = [mv[0] for mv in moved]
        self._record_points(rowids, t, [mv[2] for mv in moved], HISTORY_PRESSURE)
        if self._index is not None:
            _, ids, strength, last_access, decayed_at, trust = zip(*moved, strict=True)
            missing = set(self._index.set_strengths(rowids, strength, last_access,
                                                    decayed_at, trust))  # fmt: skip
            for rowid, memory_id in zip(rowids, ids, strict=True):
                if rowid in missing:
                    self._index.upsert(rowid, self.require(memory_id))

    def strength_history(self, memory_id: str) -> list[tuple[float, float, str]]:
        """(time, strength, cause) points of a memory, oldest first (at most
        ``history_points``; the last point of each ``history_bucket_s`` bucket)."""
        if self._history and self.store.writer.held():
            self._write_history()  # the writer's own points, not committed yet
        with self.store.reading() as db:
            rows = db.execute(
                "SELECT h.ts, h.strength, h.cause FROM strength_history h "
                "JOIN memories m ON m.rowid = h.memory WHERE m.id = ? ORDER BY h.ts",
                (memory_id,),
            ).fetchall()
        return [(float(t), float(v), HISTORY_CAUSES[int(c)]) for t, v, c in rows]

    # -- inspection ---------------------------------------------------------------------
    def verify_audit(self, anchor: evidence.Checkpoint | None = None) -> Verification:
        """The chain's links, its checkpoints, every row against its records, and the
        triggers restored at open: every problem found is named
        (see :mod:`hirmem.memory.evidence`). ``anchor``: a checkpoint kept outside the
        store, which must still be in it and matched by the chain."""
        with self.store.reading() as db:  # one snapshot for the chain and the rows
            result = self.audit.verify()
            row = db.execute("SELECT max(audit_seq) FROM memories").fetchone()
            problems = evidence.check_checkpoints(db, self.signing_key)
            if anchor is not None:
                problems += evidence.check_anchor(db, self.signing_key, anchor)
            problems += evidence.check_rows(db)
            problems += [
                f"audit #{seq}: {cbor.decode(detail).get('reason')}"
                for seq, detail in db.execute(
                    "SELECT seq, detail FROM audit WHERE action = 'integrity' ORDER BY seq"
                )
            ]
        cited = int(row[0] or 0)
        if result.ok and cited > result.count:
            result = Verification(
                False, result.count, result.count + 1,
                f"memories cite audit seq {cited} but the chain ends at {result.count}",
            )  # fmt: skip
        if problems:
            return Verification(
                False, result.count, result.first_bad, result.reason, tuple(problems)
            )
        return result

    def history(self, memory_id: str) -> list[Memory]:
        """The version chain of a memory, oldest first."""
        chain = [self.require(memory_id)]
        while chain[0].supersedes:
            chain.insert(0, self.require(chain[0].supersedes))
        while True:
            nxt = self.store.select(SUPERSEDED_BY, (chain[-1].id,))
            if not nxt:
                return chain
            chain.append(nxt[0])

    def stats(self) -> dict[str, dict[str, int]]:
        """Counts per state and per layer, answered in SQL (one pass over an index; the
        recall index is not loaded)."""
        states: dict[int, int] = {}
        layers: dict[int, int] = {}
        for (state, layer), n in self.store.counts_by_state_layer().items():
            states[state] = states.get(state, 0) + n
            layers[layer] = layers.get(layer, 0) + n
        return {
            "states": {s.name.lower(): states.get(int(s), 0) for s in State},
            "layers": {
                **{
                    x.name.lower(): layers.get(int(x), 0)
                    for x in Layer
                    if x is not Layer.PROVENANCE
                },
                "provenance": self.audit.head_seq,
            },
        }
