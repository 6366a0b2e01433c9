"""Every tunable of the memory engine, with documented defaults.

Nothing in the engine uses a literal for alpha, β, the decay law or a threshold; it reads
them from a :class:`MemoryConfig`. Load one from JSON with :meth:`MemoryConfig.load`
(unknown keys and out-of-range values are refused with a message) or build one in code.

Defaults and why:

* ``alpha = 0.10`` — gain per rehearsal: a fully relevant (Rel = 1), fully resonant
  (Rn = 1) recall adds 0.1 to M.
* ``beta = 0.05`` — loss weight on decay and contradiction pressure.
* ``decay_law = "linear"``, ``decay_tau_s = 86400`` — D is the idle time since the
  last access in units of τ (one day): an idle memory loses β = 0.05 a day, so an
  unrehearsed memory admitted at full strength 1.0 archives after 19 idle days. The
  ``"exponential"`` law uses D = 1 - e^(-idle/τ) (bounded, for memories that should
  fade but never vanish by idleness alone); ``"none"`` disables decay.
* ``initial strength`` is the write gate W (stage 4): a high W is a short path to
  consolidation, a low W a long one.
* ``promote_strength = 0.90`` — a YELLOW candidate held for reinforcement consolidates
  once its strength reaches this.
* ``archive_strength = 0.05`` — a candidate or consolidated memory whose M falls below
  this is archived (read-only; the chain is preserved).
* ``green = 0.75``, ``yellow = 0.50`` — the Rn thresholds (float mode; fixed mode uses
  the protocol's Q16.16 thresholds 0xC000 and 0x8000, which are the same values).
* ``contradiction_x = 10.0`` — X of a contradiction; β·X = 0.5 of strength.
  ``corruption_x = 20.0`` — X of a corrupted hash (β·X = 1.0).
  ``quarantine_strength = 0.25`` — a memory downgraded by a contradiction below this
  strength is quarantined; above it, it stays in place, flagged.
* ``audit_strength_delta = 0.25`` — a strength change at least this large is audited
  (threshold crossings always are, as transitions).
* ``recency_tau_s = 604800`` — Rec = e^(-(now - last_access)/τ), τ one week.
* ``working_capacity = 1024`` — bound of the working-memory ring (volatile objects).
* ``multi_valued_attributes`` — attributes that may legitimately hold several values
  (every other attribute is single-valued for the contradiction detector).
* ``gate_mode = "fixed"`` — the Q16.16 gate of the protocol; ``"float"`` is the
  reference. ``embedder = "hash"`` — the built-in hashed n-gram embedder (no model);
  ``"minilm"`` is all-MiniLM-L6-v2 (384-d, numpy, optional packages: see
  :mod:`hirmem.embed.minilm`). A store keeps the embedder it was built with.
  ``embed_dim = 256`` — width of the hash embedder's vectors (MiniLM's is always 384).
* ``sweep_interval_s = 3600`` — how often the decay scheduler sweeps (the daemon runs
  it; see ``memory_every`` in :mod:`hirmem.daemon.config`).
* ``sweep_settle_delta = 0.01`` — a sweep writes a memory back only when something about
  it changed that must be written: its state (archive, promotion), rehearsals to fold
  in, or decay owed of at least this much strength. Below that the decay stays owed:
  the row keeps (strength, decayed_at), recall and the next sweep compute the same
  strength from it (the decay telescopes), and the stored strength is never more than
  this above the settled one. So an hourly sweep over a million memories rewrites the
  few that moved, not every live row. 0 settles every row whose strength moved at all.
* ``max_strength = 1.0`` — strength saturates here: rehearsal can bring a memory back to
  the strength of a perfect write (W ≤ 1) but never bank more, so a memory recalled a
  thousand times still fades within ``max_strength / β`` idle τ of its layer (20).
* ``rehearsal_min_sim = 0.35`` — a recall hit counts as a rehearsal only when its
  similarity to the query is at least this; its U is then the similarity itself (a hit
  at 0.9 rehearses three times as much as one at 0.3 would), so U·Rel·Rn of the strength
  equation is ``sim · priority · Rn``. Weaker hits are returned but are no use of the
  memory: not strengthened, not counted, not made recent.
* ``review_strength = 0.90`` — a steward's *promote* restores a memory to at least this
  strength (audited), so a memory a contradiction pressed to 0 does not come back at 0
  and archive at the next sweep.
* A GREEN record whose W is below ``archive_strength`` is held as a candidate (audited
  with the reason), never consolidated at a strength the next sweep would archive.
* ``history_bucket_s = 3600``, ``history_points = 336`` — strength over time is kept per
  memory at each sweep and rehearsal, one point per bucket of ``history_bucket_s`` (the
  last in a bucket wins) in a ring of ``history_points`` slots: at most 336 rows per
  memory, two weeks at hourly resolution (:meth:`MemoryEngine.strength_history`).

Per-layer lifetimes (the spec's timescales). Decay runs per layer with its own τ; with
the linear law a memory at strength 1.0 archives after 19 idle τ:

* working (seconds → minutes): ``working_ttl_s = 300`` — a volatile object not gated
  within five minutes is evicted from the ring (audited) at the next sweep.
* episodic (hours → days): ``episodic_tau_s = 21600`` (6 h) — an idle episode
  archives after about 4.75 days; what it taught lives on in its distilled pattern.
* semantic (days → weeks): ``decay_tau_s = 86400`` (1 day) — 19 idle days.
* procedural (weeks → permanent): ``procedural_tau_s = 2592000`` (30 days) — an
  idle procedure archives after about 19 months, and every use restarts the clock.

Revision and distillation:

* ``simultaneity_s = 1.0`` — two observations of one single-valued attribute whose
  capture times are this close hold at the same time: if they disagree they
  contradict. A later one (beyond this) supersedes the earlier one instead.
* ``value_abs_tolerance = 1e-6``, ``value_rel_tolerance = 1e-9`` — two values that
  both read as numbers are equal when ``|a - b| ≤ max(abs, rel · max(|a|, |b|))``
  (so ``"21.8"`` equals ``"21.80"``); other values compare folded.
* ``distill_min_episodes = 2`` — one observation is an episode, two about the same
  thing are a pattern. ``distill_window_s = 86400`` and ``distill_max_episodes = 512``
  bound one distilled memory (its ``links`` name every episode): past either, the next
  episode opens a new window (a new pattern memory linked to the closed one).
* ``procedure_min_successes = 3``, ``procedure_min_rate = 0.6`` — an action chain
  becomes a procedure once it succeeded this often at this success rate.
* ``baseline_min_episodes = 8``, ``baseline_sigmas = 3.0`` — a sensor's distilled
  pattern is its baseline once it rests on this many readings; a reading agrees with it
  (reinforces the pattern, and passes sub-check baseline_aligned on intake) when it is
  within this many standard deviations of the mean (or ``value_abs_tolerance``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hirmem.memory.embed import EMBEDDERS
from hirmem.protocol.errors import HirmemError
from hirmem.protocol.records import Layer

__all__ = ["DECAY_LAWS", "EMBEDDERS", "GATE_MODES", "MemoryConfig"]

DECAY_LAWS = ("linear", "exponential", "none")
GATE_MODES = ("fixed", "float")


@dataclass(frozen=True)
class MemoryConfig:
    alpha: float = 0.10
    beta: float = 0.05
    decay_law: str = "linear"
    decay_tau_s: float = 86400.0
    promote_strength: float = 0.90
    archive_strength: float = 0.05
    green: float = 0.75
    yellow: float = 0.50
    contradiction_x: float = 10.0
    corruption_x: float = 20.0
    quarantine_strength: float = 0.25
    audit_strength_delta: float = 0.25
    recency_tau_s: float = 604800.0
    working_capacity: int = 1024
    multi_valued_attributes: tuple[str, ...] = ("tag", "alias", "knows", "member", "label")
    gate_mode: str = "fixed"
    embedder: str = "hash"
    embed_dim: int = 256
    sweep_interval_s: float = 3600.0
    sweep_settle_delta: float = 0.01
    default_priority: float = 0.5
    working_ttl_s: float = 300.0
    episodic_tau_s: float = 21600.0
    procedural_tau_s: float = 2592000.0
    simultaneity_s: float = 1.0
    value_abs_tolerance: float = 1e-6
    value_rel_tolerance: float = 1e-9
    distill_min_episodes: int = 2
    distill_window_s: float = 86400.0
    distill_max_episodes: int = 512
    procedure_min_successes: int = 3
    procedure_min_rate: float = 0.6
    baseline_min_episodes: int = 8
    baseline_sigmas: float = 3.0
    max_strength: float = 1.0
    rehearsal_min_sim: float = 0.35
    review_strength: float = 0.90
    history_bucket_s: float = 3600.0
    history_points: int = 336

    def __post_init__(self) -> None:
        for name in (
            "alpha",
            "beta",
            "contradiction_x",
            "corruption_x",
            "archive_strength",
            "audit_strength_delta",
            "sweep_settle_delta",
            "default_priority",
            "simultaneity_s",
            "value_abs_tolerance",
            "value_rel_tolerance",
        ):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise HirmemError(f"memory config {name} must be a finite number ≥ 0, got {value}")
        for name in (
            "decay_tau_s", "recency_tau_s", "sweep_interval_s", "working_ttl_s",
            "episodic_tau_s", "procedural_tau_s", "distill_window_s", "history_bucket_s",
        ):  # fmt: skip
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise HirmemError(f"memory config {name} must be > 0 seconds, got {value}")
        if not 0 <= self.yellow <= self.green <= 1:
            raise HirmemError(
                f"memory config needs 0 ≤ yellow ≤ green ≤ 1, got {self.yellow}, {self.green}"
            )
        if not self.archive_strength <= self.quarantine_strength <= self.promote_strength:
            raise HirmemError(
                "memory config needs archive_strength ≤ quarantine_strength ≤ promote_strength"
            )
        if self.decay_law not in DECAY_LAWS:
            raise HirmemError(f"decay_law must be one of {DECAY_LAWS}, got {self.decay_law!r}")
        if self.gate_mode not in GATE_MODES:
            raise HirmemError(f"gate_mode must be one of {GATE_MODES}, got {self.gate_mode!r}")
        if self.embedder not in EMBEDDERS:
            raise HirmemError(f"embedder must be one of {EMBEDDERS}, got {self.embedder!r}")
        if not (math.isfinite(self.max_strength) and self.max_strength >= self.promote_strength):
            raise HirmemError("memory config needs a finite max_strength ≥ promote_strength")
        for name in ("rehearsal_min_sim", "review_strength"):
            value = getattr(self, name)
            if not 0 <= value <= 1:
                raise HirmemError(f"memory config {name} must be in 0..1, got {value}")
        if not 1 <= self.history_points <= 100_000:
            raise HirmemError("memory config history_points must be in 1..100000")
        if self.working_capacity < 1 or self.embed_dim < 8:
            raise HirmemError("working_capacity must be ≥ 1 and embed_dim ≥ 8")
        if not 1 <= self.distill_min_episodes <= self.distill_max_episodes:
            raise HirmemError(
                "memory config needs 1 ≤ distill_min_episodes ≤ distill_max_episodes, got "
                f"{self.distill_min_episodes}, {self.distill_max_episodes}"
            )
        if self.baseline_min_episodes < 2 or not self.baseline_sigmas > 0:
            raise HirmemError(
                "memory config needs baseline_min_episodes ≥ 2 and baseline_sigmas > 0, got "
                f"{self.baseline_min_episodes}, {self.baseline_sigmas}"
            )
        if self.procedure_min_successes < 1 or not 0 <= self.procedure_min_rate <= 1:
            raise HirmemError(
                "memory config needs procedure_min_successes ≥ 1 and 0 ≤ procedure_min_rate ≤ 1"
            )

    def tau_for(self, layer: int) -> float:
        """Decay τ of a layer: episodic, procedural, or semantic (everything else)."""
        if layer == Layer.EPISODIC:
            return self.episodic_tau_s
        if layer == Layer.PROCEDURAL:
            return self.procedural_tau_s
        return self.decay_tau_s

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise HirmemError(f"unknown memory config keys {unknown}; known: {sorted(known)}")
        values = dict(data)
        if "multi_valued_attributes" in values:
            values["multi_valued_attributes"] = tuple(values["multi_valued_attributes"])
        return cls(**values)

    @classmethod
    def load(cls, path: str | Path) -> MemoryConfig:
        """Read a JSON object of overrides; missing keys keep their defaults."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise HirmemError(f"cannot read memory config {path}: {exc}") from exc
        if not isinstance(data, dict):
            raise HirmemError(f"memory config {path} must hold a JSON object")
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["multi_valued_attributes"] = list(self.multi_valued_attributes)
        return out
