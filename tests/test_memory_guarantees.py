"""Issue 13 part A: the engine's guarantees, one test per bug reproduced in the issue,
then reinforcement that means rehearsal and strength kept over time."""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hirmem.memory import cli, review
from hirmem.memory.config import MemoryConfig
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.model import State
from hirmem.memory.recall import RecallFilter
from hirmem.protocol.errors import HirmemError
from memory_backends import memory_backend, memory_server  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("memory_backend")

T0 = 1_780_000_000.0
DAY = 86400.0
HOUR = 3600.0


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def fact(subject: str, attribute: str, value: str) -> str:
    return json.dumps({"subject": subject, "attribute": attribute, "value": value})


# -- the listed bugs -----------------------------------------------------------------------
def test_repair_takes_the_structured_value_from_its_new_payload() -> None:
    e = MemoryEngine(":memory:", clock=Clock())
    m = e.admit(fact("door 3", "state", "open"), "cam")
    fixed = e.repair(m.id, fact("door 3", "state", "closed"), reason="misread")
    assert (fixed.subject, fixed.attribute, fixed.value) == ("door 3", "state", "closed")
    # an explicit value still overrides, and a free-text payload keeps the prior's triple
    again = e.repair(fixed.id, "door three is shut", reason="wording", value="shut")
    assert (again.subject, again.value) == ("door 3", "shut")


def test_steward_promote_does_not_bring_a_memory_back_at_strength_zero() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    m = e.admit("calibrated reading", "s", confidence=0.0)  # W = 0: quarantined at M = 0
    assert (m.state, m.strength, m.permanent) == (State.QUARANTINED, 0.0, False)
    review.decide(e, m.id, "ana", "promote", "calibration confirmed")
    got = e.require(m.id)
    assert got.state is State.CONSOLIDATED
    assert got.strength == e.config.review_strength
    assert any(r.action == "strength" and r.actor == "steward:ana" for r in e.audit.records(m.id))
    clock.t += HOUR
    e.sweep()
    assert e.require(m.id).state is State.CONSOLIDATED  # not archived by the next sweep


def test_a_quarantined_memory_cannot_be_reset_to_volatile_and_deleted() -> None:
    e = MemoryEngine(":memory:", clock=Clock())
    m = e.admit("doubtful", "s", flags=0x0D4F)
    assert m.state is State.QUARANTINED
    with pytest.raises(sqlite3.DatabaseError, match="illegal lifecycle transition"):
        e.store.db.execute("UPDATE memories SET state = 0 WHERE id = ?", (m.id,))
    with pytest.raises(sqlite3.DatabaseError, match="MEM-INV-3"):
        e.store.db.execute("DELETE FROM memories WHERE id = ?", (m.id,))
    assert e.require(m.id).state is State.QUARANTINED


def test_a_permanent_quarantine_cannot_be_released_by_an_update() -> None:
    e = MemoryEngine(":memory:", clock=Clock())
    m = e.admit("you must obey", "s", flags=0x07FF)  # no consent bit: R = 0
    assert m.permanent and m.state is State.QUARANTINED
    with pytest.raises(sqlite3.DatabaseError, match="MEM-INV-2"):
        e.store.db.execute("UPDATE memories SET permanent = 0 WHERE id = ?", (m.id,))
    with pytest.raises(sqlite3.DatabaseError, match=r"MEM-INV-2|illegal"):
        e.store.db.execute("UPDATE memories SET state = 4 WHERE id = ?", (m.id,))
    assert e.require(m.id).permanent


def test_a_superseded_memory_cannot_be_repaired_twice() -> None:
    e = MemoryEngine(":memory:", clock=Clock())
    m = e.admit(fact("pump", "status", "ok"), "s")
    first = e.repair(m.id, fact("pump", "status", "worn"), reason="inspection")
    with pytest.raises(HirmemError, match=f"already repaired by {first.id}"):
        e.repair(m.id, fact("pump", "status", "broken"), reason="second opinion")
    assert [v.id for v in e.history(m.id)] == [m.id, first.id]
    # the database refuses a fork too
    with pytest.raises(sqlite3.DatabaseError, match="UNIQUE"):
        e.store.db.execute(
            "UPDATE memories SET supersedes = ? WHERE id = ?", (m.id, e.admit("z", "s").id)
        )


def test_repair_is_gated_on_its_own_inputs() -> None:
    e = MemoryEngine(":memory:", clock=Clock())
    m = e.admit(fact("valve", "state", "open"), "s", flags=0x0D4F, confidence=0.3)
    assert m.state is State.QUARANTINED
    fixed = e.repair(m.id, fact("valve", "state", "closed"), reason="re-measured",
                     flags=0x0FFF, confidence=1.0)  # fmt: skip
    assert fixed.state is State.CONSOLIDATED and fixed.flags == 0x0FFF and fixed.w == 1.0
    rec = next(r for r in e.audit.records(fixed.id) if r.action == "repair")
    assert rec.detail["flags"] == 0x0FFF and rec.detail["hash"] == fixed.hash


def test_a_green_record_never_consolidates_below_the_archive_threshold() -> None:
    e = MemoryEngine(":memory:", clock=Clock())
    m = e.admit("faint but valid", "s", confidence=0.02)  # GREEN, W = 0.02 < 0.05
    assert m.verdict == 0 and m.w < e.config.archive_strength
    assert m.state is State.CANDIDATE
    assert "W below archive_strength" in json.dumps(
        [r.detail for r in e.audit.records(m.id) if r.action == "transition"]
    )


def test_a_recall_that_settles_a_large_strength_change_is_audited() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    m = e.admit("pump seal leaking at valve 3", "s")
    clock.t += 10 * DAY  # 0.5 of decay pending, no sweep
    before = len(e.audit.records(m.id))
    e.recall("pump seal leaking", k=1)
    got = e.require(m.id)
    assert got.strength < 0.75
    new = e.audit.records(m.id)[before:]
    assert [r.action for r in new] == ["strength"]
    assert new[0].detail["reason"] == "rehearsal"
    assert float(new[0].detail["strength"]) == got.strength
    assert got.audit_seq == new[0].seq


def test_working_memory_evicts_the_least_recently_accessed() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", MemoryConfig(working_capacity=3), clock=clock)
    ids = []
    for n in range(3):
        clock.t += 1
        ids.append(e.capture(f"r{n}", "s").id)
    clock.t += 1
    e.access(ids[0])  # the oldest capture is now the most recently used
    clock.t += 1
    e.capture("r3", "s")
    kept = {m.id for m in e.store.select("state = 0")}
    assert ids[0] in kept and ids[1] not in kept
    assert [r.action for r in e.audit.records(ids[1])] == ["capture", "evict"]


def test_cli_repair_writes_a_new_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "m.sqlite"
    e = MemoryEngine(db)
    m = e.admit(fact("fan", "speed", "fast"), "s", flags=0x0D4F)
    e.close()
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["memory", "--db", str(db), "repair", m.id,
                              fact("fan", "speed", "slow"), "--reason", "re-read",
                              "--steward", "ana", "--flags", "0x0fff"])  # fmt: skip
    assert cli.run(args) == 0
    out = capsys.readouterr().out
    e = MemoryEngine(db)
    [new] = e.store.select("supersedes = ?", (m.id,))
    assert new.id in out and new.value == "slow" and new.state is State.CONSOLIDATED
    assert [r.actor for r in e.audit.records(new.id) if r.action == "repair"] == ["steward:ana"]
    args = parser.parse_args(["memory", "--db", str(db), "repair", m.id, "x", "--reason", "y"])
    assert cli.run(args) == 2
    assert "already repaired" in capsys.readouterr().err
    e.close()


# -- reinforcement that means rehearsal ----------------------------------------------------
def test_rehearsal_is_weighted_by_similarity_and_weak_hits_do_not_count() -> None:
    probe = MemoryEngine(":memory:")
    q = probe.embedder.embed("pump seal leaking").astype(np.float64)
    texts = ["pump seal leaking at valve 3", "pump room door"]
    sims = [float(q @ probe.embedder.embed(t).astype(np.float64)) for t in texts]
    assert sims[0] > sims[1] > 0
    cfg = MemoryConfig(decay_law="none", rehearsal_min_sim=(sims[0] + sims[1]) / 2)
    e = MemoryEngine(":memory:", cfg, clock=Clock())
    strong, weak = (e.admit(t, "s", flags=0x0C7F, priority=1.0) for t in texts)
    hits = {h.id: h for h in e.recall("pump seal leaking", k=2)}
    assert set(hits) == {strong.id, weak.id}  # both surface …
    assert e.require(strong.id).strength == pytest.approx(
        strong.strength + cfg.alpha * hits[strong.id].sim * strong.rn
    )
    assert e.require(weak.id) == weak  # … only the true hit is rehearsed (or even counted)
    assert e.require(strong.id).access_count == 1


def test_strength_saturates_at_max_strength() -> None:
    clock = Clock()
    cfg = MemoryConfig(decay_law="none", alpha=1.0, rehearsal_min_sim=0.0)
    e = MemoryEngine(":memory:", cfg, clock=clock)
    m = e.admit("hot topic", "s", priority=1.0)
    for _ in range(30):
        clock.t += 1
        e.recall("hot topic", k=1)
        e.sweep()
    assert e.require(m.id).strength == cfg.max_strength


def test_recall_ranks_on_strength_decayed_to_now() -> None:
    clock = Clock()
    cfg = MemoryConfig(recency_tau_s=1e15)  # recency out of the way: rank by M · Trust
    e = MemoryEngine(":memory:", cfg, clock=clock)
    old = e.admit("boiler pressure high", "a")  # W = 1.0
    clock.t += 10 * DAY  # no sweep since: stored M still 1.0, true M now 0.5
    fresh = e.admit("boiler pressure high", "b", confidence=0.6)  # W = 0.6
    hits = e.recall("boiler pressure high", k=2, touch=False)
    assert [h.id for h in hits] == [fresh.id, old.id]
    assert hits[1].strength == pytest.approx(0.5)


def test_archived_memories_are_read_only_to_recall() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    m = e.admit("old news", "s")
    clock.t += 19.5 * DAY
    e.sweep()
    archived = e.require(m.id)
    assert archived.state is State.ARCHIVED and archived.strength == pytest.approx(0.025)
    head = e.audit.head_seq
    for _ in range(20):
        clock.t += 1
        hits = e.recall("old news", k=1, flt=RecallFilter(states=frozenset({State.ARCHIVED})))
        assert [h.id for h in hits] == [m.id]
    assert e.require(m.id) == archived  # not strengthened, not even counted
    assert e.audit.head_seq == head


# -- strength over time --------------------------------------------------------------------
def test_strength_history_is_kept_at_sweeps_and_rehearsals_and_bounded() -> None:
    clock = Clock()
    cfg = MemoryConfig(history_points=24, history_bucket_s=HOUR)
    e = MemoryEngine(":memory:", cfg, clock=clock)
    m = e.admit("compressor vibration", "s")
    assert e.strength_history(m.id) == [(T0, 1.0, "admit")]
    for hour in range(1, 24 * 5):  # five days of hourly sweeps, a recall every 6 h
        clock.t = T0 + hour * HOUR
        if hour % 6 == 0:
            e.recall("compressor vibration", k=1)
        e.sweep()
    points = e.strength_history(m.id)
    assert len(points) == cfg.history_points  # bounded
    times = [t for t, _, _ in points]
    assert times == sorted(times) and times[-1] == clock.t
    assert points[-1][1] == e.require(m.id).strength
    causes = [c for _, _, c in points]
    assert set(causes) == {"sweep", "rehearsal"} and causes.count("rehearsal") == 4
    with e.store.reading() as db:
        assert db.execute("SELECT count(*) FROM strength_history").fetchone()[0] == 24
    # a rehearsal in an hour of its own is kept as such
    clock.t += HOUR
    e.recall("compressor vibration", k=1)
    assert e.strength_history(m.id)[-1][2] == "rehearsal"


# -- sub-checks the host evaluates itself --------------------------------------------------
def test_the_host_evaluates_signature_and_uncertainty_and_records_a_disagreement() -> None:
    from hirmem.memory.intake import intake_records
    from hirmem.protocol.fixedpoint import ONE
    from hirmem.protocol.records import GENESIS, Record, record_id

    device = bytes.fromhex("0102030405060708")
    ctx = bytes(range(32))
    honest = Record.capture(record_id(device, 1, 1), b'{"t":21.5}', "temp0", int(T0 * 1000),
                            ctx, 0x0FFF, ONE, ONE, ONE // 2, GENESIS)  # fmt: skip
    # the device says the signature is not intact and it disclosed no uncertainty
    modest = Record.capture(record_id(device, 1, 2), b'{"t":21.6}', "temp0", int(T0 * 1000),
                            ctx, 0x0FFC, ONE, ONE, ONE // 2, honest.hash)  # fmt: skip
    e = MemoryEngine(":memory:", clock=Clock())
    got = intake_records(e, [honest, modest], device, b"k" * 8, GENESIS)
    assert got.mismatched == {}  # the device computed its own gate correctly …
    assert list(got.disagreed) == [modest.id.hex()]  # … from bits the host finds otherwise
    assert "signature_intact passed" in got.disagreed[modest.id.hex()]
    assert "uncertainty_disclosed passed" in got.disagreed[modest.id.hex()]
    m = e.require(modest.id.hex())
    assert m.flags == 0x0FFF and m.state is State.CONSOLIDATED  # gated on the host's bits
    [rec] = [r for r in e.audit.records(m.id) if r.action == "intake-mismatch"]
    assert rec.detail["flags"] == 0x0FFC and rec.actor == f"intake:{device.hex()}"
    # an unverified pack does not earn signature_intact, whatever the device says
    e2 = MemoryEngine(":memory:", clock=Clock())
    got2 = intake_records(e2, [honest], device, b"k" * 8, GENESIS, signature_verified=False)
    assert "signature_intact failed" in got2.disagreed[honest.id.hex()]
    assert e2.require(honest.id.hex()).flags == 0x0FFD


def test_cli_history_shows_strength_over_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "m.sqlite"
    clock = Clock()
    e = MemoryEngine(db, clock=clock)
    m = e.admit("fan bearing noise", "s")
    clock.t += 2 * DAY
    e.sweep()
    e.close()
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    assert cli.run(parser.parse_args(["memory", "--db", str(db), "history", m.id])) == 0
    out = capsys.readouterr().out
    assert "strength: 2026-05-28T20:26Z 1.000 (admit)  2026-05-30T20:26Z 0.900 (sweep)" in out


# -- the guarantees together, over random days of use ---------------------------------------
OPS = st.lists(
    st.tuples(st.sampled_from(["admit", "recall", "sweep", "repair", "promote", "wait"]),
              st.integers(0, 5), st.sampled_from([0x0FFF, 0x0C7F, 0x0D4F, 0x07FF, 0x0F0F])),
    min_size=5, max_size=40,
)  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(OPS)
def test_random_days_of_use_keep_every_guarantee(ops: list[tuple[str, int, int]]) -> None:
    from test_memory_concurrency import index_disagreements

    clock = Clock()
    cfg = MemoryConfig(history_points=8, history_bucket_s=HOUR)
    e = MemoryEngine(":memory:", cfg, clock=clock)
    archived_seen: dict[str, tuple[float, int]] = {}
    for op, n, flags in ops:
        clock.t += HOUR * (1 + n * 7)  # up to ~1.5 days between steps
        if op == "admit":
            e.admit(fact(f"room{n % 3}", "temp", str(20 + n)), "s", flags=flags,
                    confidence=(n + 1) / 6)  # fmt: skip
        elif op == "recall":
            e.recall(f"room{n % 3} temp {20 + n}", k=3)
            e.recall(f"room{n % 3} temp {20 + n}", k=3, flt=RecallFilter(states=frozenset(State)))
        elif op == "wait":
            clock.t += n * 4 * DAY
        elif op == "sweep":
            e.sweep()
        elif op == "repair":
            live = e.store.select("state IN (1, 2, 3) AND id NOT IN "
                                  "(SELECT supersedes FROM memories)")  # fmt: skip
            if live:
                e.repair(live[n % len(live)].id, fact("room0", "temp", str(n)), reason="fix")
        elif op == "promote":
            waiting = [m for m in review.pending(e) if not m.permanent]
            if waiting:
                review.decide(e, waiting[n % len(waiting)].id, "ana", "promote", "checked")
        for m in e.store.select("state = 4"):
            if m.id in archived_seen:  # archived: read-only from then on
                assert (m.strength, m.access_count) == archived_seen[m.id]
            archived_seen[m.id] = (m.strength, m.access_count)
    assert e.verify_audit().ok
    assert index_disagreements(e) == []
    everything = e.store.select()
    assert all(0.0 <= m.strength <= cfg.max_strength for m in everything)
    assert all(m.state is State.QUARANTINED for m in everything if m.permanent)
    with e.store.reading() as db:
        most = db.execute(
            "SELECT coalesce(max(c), 0) FROM (SELECT count(*) AS c FROM strength_history "
            "GROUP BY memory)"
        ).fetchone()[0]
        forks = db.execute(
            "SELECT count(*) FROM (SELECT supersedes FROM memories WHERE supersedes != '' "
            "GROUP BY supersedes HAVING count(*) > 1)"
        ).fetchone()[0]
    assert most <= cfg.history_points and forks == 0
