"""Consolidation dynamics: the write gate, memory strength, decay and the scheduler.

Equations (``memory-layer-stack.txt``), with the parameters from :class:`MemoryConfig`:

* Write gate: ``W = Q · P · H · I · R`` — a zero on any axis is a zero.
* Strength: ``M(t+1) = min(M_max, max(0, M(t) + alpha·(U·Rel·Rn) - β·(D + X)))`` where U
  is the rehearsal since the last update (each recall hit at or above
  ``rehearsal_min_sim`` counts its similarity), Rel the memory's priority, Rn its
  resonance, D the decay accrued since the last update and X contradiction/corruption
  pressure; ``M_max`` is ``max_strength`` (saturation).
* Decay law: a cumulative function ``g(idle)`` of the idle time since the last access;
  the decay of one update is ``g(now - last) - g(done - last)`` where ``done`` is the
  instant up to which decay was already applied. Sums of updates telescope, so the
  result does not depend on how often the sweep runs, and a second sweep at the same
  instant adds nothing (the scheduler is idempotent).
* Gate disposition by Rn: ``≥ green`` consolidates, ``≥ yellow`` holds a candidate,
  below quarantines (MEM-INV-7).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hirmem.memory.config import MemoryConfig
from hirmem.memory.model import Layer, State

__all__ = [
    "DecayScheduler",
    "SweepResult",
    "cumulative_decay",
    "decay_between",
    "decayed_now",
    "rn_disposition",
    "strength_step",
    "sweep_arrays",
    "write_gate",
]

F64 = npt.NDArray[np.float64]


def write_gate(q: float, p: float, h: float, i: float, r: float) -> float:
    """W = Q·P·H·I·R (float reference; the fixed mode comes from :mod:`hirmem.protocol.gate`)."""
    return q * p * h * i * r


def strength_step(
    m: float, u: float, rel: float, rn: float, d: float, x: float, cfg: MemoryConfig
) -> float:
    """One update of memory strength, floored at 0 and saturating at ``max_strength``."""
    return min(cfg.max_strength, max(0.0, m + cfg.alpha * (u * rel * rn) - cfg.beta * (d + x)))


def rn_disposition(rn: float, cfg: MemoryConfig) -> State:
    """Stage 5 by resonance: consolidated, candidate (held) or quarantined."""
    if rn >= cfg.green:
        return State.CONSOLIDATED
    if rn >= cfg.yellow:
        return State.CANDIDATE
    return State.QUARANTINED


def cumulative_decay(idle: float, cfg: MemoryConfig, tau: float | None = None) -> float:
    """g(idle): total decay after ``idle`` seconds without access (τ: the layer's, see
    :meth:`MemoryConfig.tau_for`; ``decay_tau_s`` when not given)."""
    t = cfg.decay_tau_s if tau is None else tau
    if idle <= 0 or cfg.decay_law == "none":
        return 0.0
    if cfg.decay_law == "linear":
        return idle / t
    return -math.expm1(-idle / t)


def decay_between(
    last_access: float, done: float, now: float, cfg: MemoryConfig, tau: float | None = None
) -> float:
    """Decay accrued from ``max(done, last_access)`` to ``now`` (0 if nothing new)."""
    start = max(done, last_access)
    if now <= start:
        return 0.0
    return cumulative_decay(now - last_access, cfg, tau) - cumulative_decay(
        start - last_access, cfg, tau
    )


def _g(idle: F64, cfg: MemoryConfig, tau: F64 | float) -> F64:
    idle = np.maximum(idle, 0.0)
    if cfg.decay_law == "none":
        return np.zeros_like(idle)
    if cfg.decay_law == "linear":
        return idle / tau
    return -np.expm1(-idle / tau)


@dataclass(frozen=True)
class SweepResult:
    """New strength and decayed_at columns and the rows that changed."""

    strength: F64
    decayed_at: F64
    changed: npt.NDArray[np.bool_]


def sweep_arrays(
    now: float,
    strength: F64,
    pending_u: F64,
    priority: F64,
    rn: F64,
    last_access: F64,
    decayed_at: F64,
    cfg: MemoryConfig,
    tau: F64 | None = None,
) -> SweepResult:
    """The strength equation over whole columns (X = 0: pressure is applied on detection);
    ``tau`` is each row's decay τ (its layer's), ``decay_tau_s`` for all when not given."""
    t: F64 | float = cfg.decay_tau_s if tau is None else tau
    start = np.maximum(decayed_at, last_access)
    d = np.where(now > start, _g(now - last_access, cfg, t) - _g(start - last_access, cfg, t), 0.0)
    new = np.clip(strength + cfg.alpha * (pending_u * priority * rn) - cfg.beta * d,
                  0.0, cfg.max_strength)  # fmt: skip
    new_done = np.maximum(decayed_at, now)
    changed = (new != strength) | (new_done != decayed_at) | (pending_u != 0)
    return SweepResult(new, new_done, changed)


def layer_taus(layer: npt.NDArray[np.int8], cfg: MemoryConfig) -> F64:
    """Each row's decay τ, from its layer (:meth:`MemoryConfig.tau_for`)."""
    tau = np.full(len(layer), cfg.decay_tau_s, dtype=np.float64)
    tau[layer == int(Layer.EPISODIC)] = cfg.episodic_tau_s
    tau[layer == int(Layer.PROCEDURAL)] = cfg.procedural_tau_s
    return tau


def decayed_now(
    now: float,
    strength: F64,
    last_access: F64,
    decayed_at: F64,
    layer: npt.NDArray[np.int8],
    cfg: MemoryConfig,
) -> F64:
    """Strength decayed to ``now`` (what a sweep at ``now`` would settle, rehearsal aside),
    each row on its layer's τ: recall ranks on this, not on the strength of the last sweep."""
    tau = layer_taus(layer, cfg)
    start = np.maximum(decayed_at, last_access)
    d = np.where(now > start, _g(now - last_access, cfg, tau) - _g(start - last_access, cfg, tau),
                 0.0)  # fmt: skip
    out: F64 = np.maximum(0.0, strength - cfg.beta * d)
    return out


class DecayScheduler:
    """Runs ``sweep(now)`` every ``interval`` seconds of the given clock.

    :meth:`tick` is what a daemon calls from its loop (or :meth:`start` runs a thread).
    The sweep itself is idempotent, so a tick that repeats an instant changes nothing.
    """

    def __init__(
        self,
        sweep: Callable[[float], object],
        interval: float,
        clock: Callable[[], float],
        last_run: float = -math.inf,
    ) -> None:
        self._sweep = sweep
        self.interval = interval
        self._clock = clock
        self.last_run = last_run
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def due(self, now: float) -> bool:
        return now - self.last_run >= self.interval

    def tick(self, now: float | None = None) -> bool:
        """Sweep if due; returns whether it swept."""
        t = self._clock() if now is None else now
        if not self.due(t):
            return False
        self._sweep(t)
        self.last_run = t
        return True

    def start(self, poll: float = 1.0) -> None:
        def loop() -> None:
            while not self._stop.wait(poll):
                self.tick()

        self._thread = threading.Thread(target=loop, name="hirmem-decay", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
