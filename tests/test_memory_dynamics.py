"""Consolidation dynamics: strength equation, decay laws, the sweep and its scheduler."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hirmem.memory.config import MemoryConfig
from hirmem.memory.dynamics import (
    DecayScheduler,
    cumulative_decay,
    decay_between,
    rn_disposition,
    strength_step,
    sweep_arrays,
    write_gate,
)
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.model import State

T0 = 1_780_000_000.0
DAY = 86400.0
CFG = MemoryConfig()
unit = st.floats(0, 1, allow_nan=False)


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_write_gate_is_the_product_and_zero_on_any_axis() -> None:
    assert write_gate(0.5, 0.8, 1.0, 0.75, 0.5) == pytest.approx(0.15)
    for k in range(5):
        args = [0.9] * 5
        args[k] = 0.0
        assert write_gate(*args) == 0.0


@given(st.floats(0, 10), unit, unit, unit, st.floats(0, 10), st.floats(0, 10), st.integers(0, 5))
def test_strength_equation_term_by_term(
    m: float, rel: float, rn: float, d0: float, d: float, x: float, u: int
) -> None:
    got = strength_step(m, u, rel, rn, d, x, CFG)
    want = m + CFG.alpha * (u * rel * rn) - CFG.beta * (d + x)
    # issue 13: strength saturates at max_strength
    assert got == pytest.approx(min(CFG.max_strength, max(0.0, want)))
    assert got >= 0.0
    # Each term pushes the way the spec says.
    assert strength_step(m, u + 1, 1.0, 1.0, d, x, CFG) >= strength_step(m, u, 1.0, 1.0, d, x, CFG)
    assert strength_step(m, u, rel, rn, d + 1, x, CFG) <= got
    assert strength_step(m, u, rel, rn, d, x + 1, CFG) <= got


def test_strength_floor_at_zero() -> None:
    assert strength_step(0.1, 0, 1, 1, 100, 0, CFG) == 0.0


@pytest.mark.parametrize(("rn", "want"), [
    (1.0, State.CONSOLIDATED), (0.75, State.CONSOLIDATED), (0.7499, State.CANDIDATE),
    (0.5, State.CANDIDATE), (0.4999, State.QUARANTINED), (0.0, State.QUARANTINED),
])  # fmt: skip
def test_rn_thresholds(rn: float, want: State) -> None:
    assert rn_disposition(rn, CFG) is want


def test_decay_laws() -> None:
    assert cumulative_decay(2 * DAY, CFG) == pytest.approx(2.0)
    exp = MemoryConfig(decay_law="exponential")
    assert cumulative_decay(DAY, exp) == pytest.approx(1 - math.exp(-1))
    assert cumulative_decay(1e9, exp) == pytest.approx(1.0)
    assert cumulative_decay(5 * DAY, MemoryConfig(decay_law="none")) == 0.0
    assert cumulative_decay(-5.0, CFG) == 0.0


@settings(max_examples=100)
@given(
    st.sampled_from(["linear", "exponential"]),
    st.lists(st.floats(0, 5 * DAY), min_size=1, max_size=6),
)
def test_decay_telescopes_whatever_the_sweep_schedule(law: str, steps: list[float]) -> None:
    """Sweeping at many instants accrues the same decay as one sweep at the last."""
    cfg = MemoryConfig(decay_law=law)
    times = sorted(T0 + s for s in steps)
    done, total = T0, 0.0
    for t in times:
        total += decay_between(T0, done, t, cfg)
        done = max(done, t)
    assert total == pytest.approx(decay_between(T0, T0, times[-1], cfg), abs=1e-9)
    assert decay_between(T0, done, done, cfg) == 0.0  # repeating an instant adds nothing


@settings(max_examples=50)
@given(st.lists(st.tuples(st.floats(0, 3), st.integers(0, 4), unit, unit,
                          st.floats(0, 10 * DAY), st.floats(0, 10 * DAY)),
                min_size=1, max_size=20))  # fmt: skip
def test_vectorised_sweep_matches_the_scalar_equation(
    rows: list[tuple[float, int, float, float, float, float]],
) -> None:
    now = T0 + 20 * DAY
    a = np.array(rows, dtype=np.float64)
    la = T0 + a[:, 4]
    done = la + a[:, 5]
    res = sweep_arrays(now, a[:, 0], a[:, 1], a[:, 2], a[:, 3], la, done, CFG)
    for j, (m, u, rel, rn, _, _) in enumerate(rows):
        d = decay_between(la[j], done[j], now, CFG)
        assert res.strength[j] == pytest.approx(strength_step(m, u, rel, rn, d, 0.0, CFG))
    again = sweep_arrays(now, res.strength, np.zeros(len(rows)), a[:, 2], a[:, 3], la,
                         res.decayed_at, CFG)  # fmt: skip
    assert not again.changed.any()
    assert np.array_equal(again.strength, res.strength)


def _snapshot(e: MemoryEngine) -> list[tuple[object, ...]]:
    return [(m.id, m.strength, m.state, m.layer, m.decayed_at, m.access_seen)
            for m in e.store.select(tail="ORDER BY rowid")]  # fmt: skip


def test_engine_sweep_is_idempotent_and_audits_nothing_the_second_time() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    for n in range(5):
        e.admit(f"memory {n}", "s", flags=0x0C7F if n % 2 else 0x0FFF)
    clock.t += 3 * DAY
    first = e.sweep()
    snap, head = _snapshot(e), e.audit.head_seq
    second = e.sweep(clock.t)
    assert first.changed == 5 and second.changed == 0
    assert _snapshot(e) == snap and e.audit.head_seq == head


def test_sweep_decays_then_archives_below_threshold() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    m = e.admit("fading fact", "s")  # GREEN, M = W = 1.0
    clock.t += 10 * DAY
    e.sweep()
    assert e.require(m.id).strength == pytest.approx(1.0 - 10 * CFG.beta)
    clock.t += 9.5 * DAY  # 19.5 idle days: M = 0.025 < 0.05
    rep = e.sweep()
    got = e.require(m.id)
    assert rep.archived == 1 and got.state is State.ARCHIVED
    assert got.strength == pytest.approx(1.0 - 19.5 * CFG.beta)
    assert [r.detail["to"] for r in e.audit.records(m.id) if r.action == "transition"][-1] == (
        "archived"
    )


def test_rehearsal_feeds_the_next_strength_update_and_promotes() -> None:
    clock = Clock()
    cfg = MemoryConfig(decay_law="none")
    e = MemoryEngine(":memory:", cfg, clock=clock)
    m = e.admit("pump seal leaking at valve 3", "s", flags=0x0C7F, priority=1.0)
    assert m.state is State.CANDIDATE
    m0 = m.strength
    hits = e.recall("pump seal leaking", k=1)
    assert [h.id for h in hits] == [m.id]
    assert e.require(m.id).access_count == 1
    e.sweep(clock.t + 1)
    after = e.require(m.id)
    # issue 13: U of a rehearsal is the hit's similarity (above rehearsal_min_sim)
    assert hits[0].sim >= cfg.rehearsal_min_sim
    assert after.strength == pytest.approx(m0 + cfg.alpha * hits[0].sim * 1.0 * m.rn)
    while e.require(m.id).state is State.CANDIDATE:
        clock.t += 1
        e.recall("pump seal leaking", k=1)
        e.sweep(clock.t)
    got = e.require(m.id)
    assert got.state is State.CONSOLIDATED and got.strength >= cfg.promote_strength


def test_scheduler_runs_when_due_and_survives_restart(tmp_path: object) -> None:
    calls: list[float] = []
    clock = Clock()
    s = DecayScheduler(calls.append, 3600, clock)
    assert s.tick() and calls == [T0]
    assert not s.tick(T0 + 10)
    assert s.tick(T0 + 3600) and calls == [T0, T0 + 3600]


def test_engine_scheduler_resumes_last_sweep_from_the_store(tmp_path: object) -> None:
    import pathlib

    path = pathlib.Path(str(tmp_path)) / "m.sqlite"
    clock = Clock()
    e = MemoryEngine(path, clock=clock)
    e.admit("x y z", "s")
    assert e.scheduler.tick()
    e.close()
    e2 = MemoryEngine(path, clock=clock)
    assert e2.scheduler.last_run == T0 and not e2.scheduler.tick()
    e2.close()


def assert_index_matches_store(e: MemoryEngine) -> None:
    for rowid, m in e.store.select_rows("state != 0"):
        pos = int(e.index.pos_of_rowid[rowid])
        assert pos >= 0 and e.index.ids[pos].tobytes().hex() == m.id
        assert (int(e.index.state[pos]), int(e.index.layer[pos])) == (int(m.state), int(m.layer))
        assert float(e.index.strength[pos]) == m.strength


def test_sweep_promotion_without_other_change_reaches_the_index() -> None:
    """A candidate settled past the promotion strength by a recall is promoted by a sweep
    at that same instant (nothing else changes): store and recall index must agree."""
    clock = Clock()
    e = MemoryEngine(":memory:", MemoryConfig(decay_law="none", alpha=1.0), clock=clock)
    m = e.admit("filter clogged on line 2", "s", flags=0x0C7F, priority=1.0)
    e.recall("filter clogged", k=1)  # access 1
    clock.t += 1
    e.recall("filter clogged", k=1)  # settles U = 1: M = 0.375 + 0.73 ≥ 0.9
    assert e.require(m.id).strength >= e.config.promote_strength
    rep = e.sweep(clock.t)
    assert rep.promoted == 1 and e.require(m.id).state is State.CONSOLIDATED
    assert_index_matches_store(e)


@settings(max_examples=20, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0x0FFF, 0x0C7F, 0x0C5C]), st.floats(0, 6 * DAY),
                          st.booleans()), min_size=1, max_size=12))  # fmt: skip
def test_index_follows_the_store_through_sweeps(steps: list[tuple[int, float, bool]]) -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    for flags, dt, recall in steps:
        e.admit(f"reading {flags} {dt}", "s", flags=flags)
        clock.t += dt
        if recall:
            e.recall("reading", k=3)
        e.sweep()
        assert_index_matches_store(e)
