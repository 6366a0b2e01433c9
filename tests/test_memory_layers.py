"""What the layers are (issue 13): distillation, procedures, lifetimes, revision by time."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hirmem.memory import distill, revision
from hirmem.memory.config import MemoryConfig
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.model import Layer, State
from memory_backends import memory_backend, memory_server  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("memory_backend")

T0 = 1_780_000_000.0
DAY = 86400.0


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def fact(subject: str, attribute: str, value: str) -> str:
    return json.dumps({"subject": subject, "attribute": attribute, "value": value})


def reading(value: float, n: int) -> str:
    return json.dumps({"t": value, "n": n})


def patterns(e: MemoryEngine) -> list[str]:
    return [m.id for m in e.store.select("kind = 'pattern'")]


# -- distillation -------------------------------------------------------------------------
def test_five_identical_facts_give_one_semantic_memory_resting_on_all_five() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    eps = []
    for k in range(5):
        clock.t = T0 + 60 * k
        eps.append(e.admit(fact("pump 3", "mode", "auto"), "scada"))
    assert all(e.require(m.id).layer is Layer.EPISODIC for m in eps)  # episodes stay episodic
    [pid] = patterns(e)
    p = e.require(pid)
    assert (p.state, p.layer) == (State.CONSOLIDATED, Layer.SEMANTIC)
    assert list(p.links) == [m.id for m in eps] == distill.episodes_of(e, pid)
    assert p.value.startswith("auto (held 240 s, 5 of 5 observations, 0 changes")
    # reinforced by the three episodes after the two it was made of, not copied, up to the
    # strength bound
    want = min(e.config.max_strength, 1.0 + 3 * e.config.alpha * p.priority * p.rn)
    assert p.strength == pytest.approx(want, abs=1e-3) and p.last_access == T0 + 240
    derived = [r.detail for r in e.audit.records(pid) if r.action == "derive"]
    assert [d["wasDerivedFrom"] for d in derived] == [m.id for m in eps]
    # its gate scores are its episodes'
    assert (p.h, p.i, p.r, p.trust) == pytest.approx((1.0, 1.0, 1.0, 1.0))
    # recall returns the pattern first, not five copies
    hits = e.recall("pump 3 mode", k=5, touch=False)
    assert hits[0].id == pid


def _oracle(values: list[float], times_ms: list[int]) -> tuple[float, float, float, float]:
    t = (np.array(times_ms) - times_ms[0]) / 1000
    v = np.array(values)
    slope = float(np.polyfit(t, v, 1)[0]) if len(set(times_ms)) > 1 else 0.0
    return float(v.min()), float(v.max()), float(v.mean()), slope


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(-40, 85, allow_nan=False), st.integers(1, 5000)),
                min_size=2, max_size=60))  # fmt: skip
def test_reading_statistics_match_numpy(samples: list[tuple[float, int]]) -> None:
    """Range, mean, trend and count of a reading series against numpy (an independent
    oracle), over random series with random gaps."""
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    values: list[float] = []
    times: list[int] = []
    for n, (v, gap_ms) in enumerate(samples):
        clock.t += gap_ms / 1000
        ts = int(clock.t * 1000)
        e.admit(reading(round(v, 2), n), "sensor/temp0", timestamp=ts)
        values.append(round(v, 2))
        times.append(ts)
    [d] = distill.patterns(e)
    lo, hi, mean, slope = _oracle(values, times)
    s = d.stats
    assert (d.form, d.subject, d.attribute, s.n) == ("reading", "temp0", "t", len(values))
    assert (s.min_v, s.max_v) == (lo, hi)
    assert s.mean == pytest.approx(mean, abs=1e-9)
    assert s.slope == pytest.approx(slope, rel=1e-6, abs=1e-9)
    assert e.store.count("kind = 'pattern'") == 1


def test_reading_statement_and_recall_first() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    for n, v in enumerate([20.9, 21.4, 22.1, 21.2]):
        clock.t = T0 + 5 * n
        e.admit(reading(v, n), "sensor/temp0")
    [pid] = patterns(e)
    p = e.require(pid)
    assert p.value == "20.9\N{EN DASH}22.1, mean 21.4, trend +0.032/s, 4 readings over 15 s"
    hit = e.recall("sensor temp0 reading", k=3, touch=False)[0]
    assert hit.id == pid


def test_events_give_a_count_and_a_rate() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    for k in range(4):
        clock.t = T0 + 10 * k
        e.admit("door forced", "door/4", kind="event")
    [d] = distill.patterns(e)
    assert d.form == "event" and e.require(d.memory_id).value == "4 events over 30 s (0.133/s)"


def test_a_window_bounds_a_pattern_and_the_next_links_the_closed_one() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", MemoryConfig(distill_max_episodes=3), clock=clock)
    for n in range(7):
        clock.t = T0 + n
        e.admit(reading(20.0, n), "sensor/temp0")
    ds = distill.patterns(e)
    assert [d.stats.n for d in ds] == [3, 3]  # the 7th is pending in a third window
    second = e.require(ds[1].memory_id)
    assert second.links[0] == ds[0].memory_id and len(second.links) == 4


def test_quarantined_episodes_never_feed_a_pattern() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    for n in range(3):
        clock.t = T0 + n
        e.admit(reading(20.0, n), "sensor/temp0", flags=0x07FF)  # domination: quarantined
    assert patterns(e) == []


# -- procedures ---------------------------------------------------------------------------
def action(steps: list[str], outcome: str) -> str:
    return json.dumps({"action": steps, "result": "flow restored", "outcome": outcome})


def test_an_action_chain_that_succeeded_repeatedly_becomes_a_procedure() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    chain = ["close V3", "open V4"]
    for k, outcome in enumerate(["success", "failure", "success"]):
        clock.t = T0 + 3600 * k
        e.admit(action(chain, outcome), "ops")
    assert e.store.count("kind = 'procedure'") == 0  # two successes are not yet a routine
    clock.t = T0 + 4 * 3600
    e.admit(action(chain, "success"), "ops")
    [p] = e.store.select("kind = 'procedure'")
    assert (p.state, p.layer) == (State.CONSOLIDATED, Layer.PROCEDURAL)
    assert p.value == "steps close v3 → open v4 → flow restored; 3 of 4 succeeded (75%)"
    assert len(p.links) == 4


# -- lifetimes ----------------------------------------------------------------------------
def test_each_layer_lives_on_its_own_timescale() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    proc = e.admit("reset pump: close V3, open V4", "ops", kind="procedure")
    stated = e.admit("the plant has three pumps", "ops")
    eps = [e.admit(fact("pump 3", "mode", "auto"), "scada") for _ in range(2)]
    volatile = e.capture("half-read frame", "uart")
    pattern = patterns(e)[0]
    clock.t = T0 + e.config.working_ttl_s + 1
    e.sweep()
    assert e.get(volatile.id) is None  # working: minutes
    clock.t = T0 + 5 * DAY
    e.sweep()
    assert all(e.require(m.id).state is State.ARCHIVED for m in eps)  # episodic: days
    assert e.require(pattern).state is State.CONSOLIDATED
    clock.t = T0 + 19.5 * DAY
    e.sweep()
    assert e.require(stated.id).state is State.ARCHIVED  # semantic: weeks
    assert e.require(pattern).state is State.ARCHIVED
    assert e.require(proc.id).state is State.CONSOLIDATED  # procedural: not after 19 days
    clock.t = T0 + 300 * DAY
    e.sweep()
    assert e.require(proc.id).state is State.CONSOLIDATED


# -- revision by time ---------------------------------------------------------------------
def test_a_later_observation_supersedes_without_penalty() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    a = e.admit(fact("door 4", "state", "open"), "cam1")
    clock.t += 3600
    b = e.admit(fact("door 4", "state", "closed"), "cam1")
    a2, b2 = e.require(a.id), e.require(b.id)
    assert not (a2.flagged or b2.flagged)
    assert (a2.state, a2.strength) == (a.state, a.strength)  # history, unpenalised
    v = revision.validity(e, a2)
    assert (v.valid_to, v.superseded_by) == (b.timestamp, b.id)
    assert revision.validity(e, b2).valid_to is None
    # a late observation from before the change is history at once
    late = e.admit(fact("door 4", "state", "open"), "cam2", timestamp=a.timestamp + 60_000)
    assert revision.validity(e, e.require(late.id)).valid_to == b.timestamp
    assert revision.validity(e, e.require(a.id)).valid_to == b.timestamp  # one run of "open"
    assert revision.supersessions(e) == 1  # one change of state, however it was learnt


def test_numbers_compare_as_numbers() -> None:
    e = MemoryEngine(":memory:", clock=Clock())
    a = e.admit(fact("boiler", "setpoint", "21.8"), "s1")
    b = e.admit(fact("boiler", "setpoint", "21.80"), "s2")
    c = e.admit(fact("boiler", "setpoint", "2.18e1"), "s3")
    assert not any(e.require(m.id).flagged for m in (a, b, c))
    d = e.admit(fact("boiler", "setpoint", "25"), "s4")
    assert e.require(d.id).flagged


def test_weak_claims_cannot_quarantine_a_strong_memory() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    strong = e.admit(fact("valve 7", "position", "shut"), "plc")
    for _ in range(20):
        e.recall("valve 7 position", k=1)
    for k in range(4):
        e.admit(fact("valve 7", "position", f"open{k}"), "rumour", confidence=1e-4)
    s = e.require(strong.id)
    assert s.state is State.CONSOLIDATED and s.strength >= strong.strength
    assert not s.flagged  # each weak claim lost and was quarantined: the flag cleared


def test_a_flagged_winner_is_promoted_once_its_opponent_is_gone() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", MemoryConfig(contradiction_x=0.1), clock=clock)
    win = e.admit(fact("tank 2", "level", "high"), "s", flags=0x0C7F)  # YELLOW: a candidate
    assert win.state is State.CANDIDATE
    lose = e.admit(fact("tank 2", "level", "low"), "s", flags=0x0C7F)
    assert e.require(win.id).flagged and e.require(lose.id).flagged
    e.transition(e.require(lose.id), State.QUARANTINED, "steward: bad sensor")
    assert not e.require(win.id).flagged
    for _ in range(40):
        e.recall("tank 2 level high", k=1)
    e.sweep()
    assert e.require(win.id).state is State.CONSOLIDATED


def test_a_stream_with_one_change_and_one_conflict() -> None:
    """Acceptance: readings every 10 s for an hour, a door that opens once and one
    genuine conflict → exactly one supersession, one contradiction, the stream intact."""
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    rng = np.random.default_rng(13)
    readings = []
    for n in range(360):
        clock.t = T0 + 10 * n
        readings.append(e.admit(reading(round(21 + rng.normal(0, 0.3), 2), n), "sensor/t0"))
        if n in (0, 100, 200):
            e.admit(fact("door 1", "state", "closed"), "cam")
        if n in (250, 300):
            e.admit(fact("door 1", "state", "open"), "cam")  # the one true change (at 250)
        if n == 300:
            e.admit(fact("door 1", "state", "closed"), "cam2")  # at the same instant
    contradictions = [r for r in e.audit.records() if r.action == "contradiction"]
    assert revision.supersessions(e) == 1
    assert len({frozenset((r.memory_id, r.detail["conflict"])) for r in contradictions}) == 1
    assert all(e.require(m.id).state is not State.QUARANTINED for m in readings)
    assert not any(e.require(m.id).flagged for m in readings)


def test_a_stewards_repeated_review_path_becomes_a_procedure() -> None:
    from hirmem.memory import review

    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    for k in range(3):
        clock.t = T0 + DAY * k
        m = e.admit(f"odd frame {k}", "uart", flags=0x0D4F)  # RED: quarantined, R > 0
        assert m.state is State.QUARANTINED and not m.permanent
        review.decide(e, m.id, "ana", "retire", "line noise")
    [p] = e.store.select("kind = 'procedure'")
    assert p.layer is Layer.PROCEDURAL and p.state is State.CONSOLIDATED
    assert p.value == (
        "steps quarantined for gate red: rn below yellow → steward retire → archived; "
        "3 of 3 succeeded (100%)"
    )
    assert {e.require(x).source for x in p.links} == {"steward:ana"}


def test_action_records_from_a_device_become_a_procedure() -> None:
    from hirmem.memory.intake import intake_records
    from hirmem.protocol.records import GENESIS, Record, record_id

    dev = bytes.fromhex("0102030405060708")
    e = MemoryEngine(":memory:", clock=Clock())
    link, recs = GENESIS, []
    for n in range(1, 4):
        rec = Record.capture(record_id(dev, 1, n), action(["purge line"], "ok").encode(),
                             "agent/repair", int(T0 * 1000) + n, bytes(32), 0x0FFF, 0x10000,
                             0x10000, 0x8000, link)  # fmt: skip
        recs.append(rec)
        link = rec.hash
    intake_records(e, recs, dev, b"kid", GENESIS)
    [p] = e.store.select("kind = 'procedure'")
    assert p.device == dev.hex() and p.layer is Layer.PROCEDURAL
    assert p.value.endswith("3 of 3 succeeded (100%)")


def _cli(db: str, *argv: str) -> int:
    import argparse

    from hirmem.memory import cli

    parser = argparse.ArgumentParser(prog="hirmem")
    cli.add_parser(parser.add_subparsers(dest="command", required=True))
    return cli.run(parser.parse_args(["memory", "--db", db, *argv]))


def test_cli_learns_a_procedure_and_shows_patterns_with_their_episodes(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path) + "/cli.sqlite"
    chain = json.dumps({"action": ["stop pump", "flush filter"], "result": "pressure ok",
                        "outcome": "success"})  # fmt: skip
    for _ in range(3):
        assert _cli(db, "admit", chain, "--source", "ops", "--kind", "action") == 0
    for v in ("20.5", "21.0", "21.5"):
        assert _cli(db, "admit", json.dumps({"t": float(v)}), "--source", "sensor/temp0") == 0
    assert _cli(db, "admit", '{"action": "x"}', "--kind", "action") == 2
    assert "outcome" in capsys.readouterr().err
    assert _cli(db, "patterns", "--episodes") == 0
    out = capsys.readouterr().out
    assert "procedural" in out and "3 episodes  procedure: stop pump → flush filter" in out
    assert "3 of 3 succeeded (100%)" in out
    assert "20.5\N{EN DASH}21.5, mean 21.0" in out and "sensor temp0 t readings" in out
    assert out.count("episodic") == 6  # each pattern's episodes listed under it
    pid = next(line.split()[0] for line in out.splitlines() if "readings" in line)
    assert _cli(db, "show", pid) == 0
    assert "episodes: 3 (wasDerivedFrom)" in capsys.readouterr().out


def test_a_disputed_claim_feeds_its_pattern_only_once_settled() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", MemoryConfig(contradiction_x=0.1), clock=clock)
    for k in range(2):
        clock.t = T0 + k
        e.admit(fact("gate 9", "state", "closed"), "cam")
    clock.t = T0 + 100
    a = e.admit(fact("gate 9", "state", "open"), "cam")
    b = e.admit(fact("gate 9", "state", "closed"), "cam2")  # same instant: disputed
    [d] = distill.patterns(e)
    # "open" came first and changed the state; the disputing "closed" was held back
    assert (d.stats.n, d.stats.value, revision.supersessions(e)) == (3, "open", 1)
    assert e.require(a.id).flagged and e.require(b.id).flagged
    e.transition(e.require(a.id), State.QUARANTINED, "steward: camera 1 misaligned")
    assert revision.supersessions(e) == 0  # the quarantined claim made nothing history
    [d] = distill.patterns(e)
    # rebuilt without the quarantined "open": three closed observations, no change
    assert (d.stats.n, d.stats.value, d.stats.changes) == (3, "closed", 0)
    p = e.require(d.memory_id)
    assert b.id in p.links and a.id not in p.links and not e.require(b.id).flagged
    assert p.value.startswith("closed (held 100 s, 3 of 3 observations, 0 changes")
    assert revision.validity(e, e.require(b.id)).valid_to is None


def test_a_negation_is_not_agreement() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    e.admit(fact("lamp", "colour", "red"), "s")
    clock.t += 60
    e.admit(fact("lamp", "colour", "red"), "s")
    clock.t += 60
    e.admit(json.dumps({"subject": "lamp", "attribute": "colour", "value": "red",
                        "negated": True}), "s")  # fmt: skip
    [d] = distill.patterns(e)
    assert (d.stats.value, d.stats.changes) == ("not red", 1)


def test_a_pattern_whose_episodes_are_all_quarantined_is_quarantined() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    eps = []
    for n, v in enumerate([30.0, 31.0, 90.0]):
        clock.t = T0 + n
        eps.append(e.admit(reading(v, n), "sensor/temp9"))
    [pid] = patterns(e)
    e.transition(e.require(eps[2].id), State.QUARANTINED, "steward: stuck sensor")
    p = e.require(pid)
    assert p.value.startswith("30.0\N{EN DASH}31.0, mean 30.5") and eps[2].id not in p.links
    for m in eps[:2]:
        e.transition(e.require(m.id), State.QUARANTINED, "steward: wrong probe")
    p = e.require(pid)
    assert p.state is State.QUARANTINED
    assert e.recall("sensor temp9 t readings", k=5, touch=False) == []


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.integers(2, 600), st.sampled_from(["on", "off", "1.0", "1.00"]),
                       st.booleans()), min_size=1, max_size=14),
    st.randoms(use_true_random=False),
)  # fmt: skip
def test_revision_matches_an_oracle_whatever_the_arrival_order(
    steps: list[tuple[int, str, bool]], rnd: object
) -> None:
    """Observations of one attribute (gaps beyond the simultaneity window, sometimes a
    second, agreeing observation at the same instant) admitted in a random order: the
    supersessions are the changes of value in time order, and each observation's end of
    validity is the time of the next different value (oracle: a sorted walk)."""
    import random

    assert isinstance(rnd, random.Random)
    obs: list[tuple[int, str]] = []
    t = 0
    for gap, value, twin in steps:
        t += gap * 1000
        obs.append((t, value))
        if twin:
            obs.append((t, value))
    order = list(range(len(obs)))
    rnd.shuffle(order)
    e = MemoryEngine(":memory:", clock=Clock())
    ids: dict[int, str] = {}
    for j in order:
        ts, value = obs[j]
        ids[j] = e.admit(fact("relay", "state", value), f"s{j}",
                         timestamp=int(T0 * 1000) + ts).id  # fmt: skip

    def norm(v: str) -> str:
        return "1" if v.startswith("1") else v

    changes = sum(norm(a[1]) != norm(b[1]) for a, b in itertools.pairwise(obs))
    assert revision.supersessions(e) == changes
    for j, (ts, value) in enumerate(obs):
        nxt = next((u for u, v in obs if u > ts and norm(v) != norm(value)), None)
        got = revision.validity(e, e.require(ids[j])).valid_to
        assert got == (None if nxt is None else int(T0 * 1000) + nxt)
    assert not any(m.flagged for m in e.store.select())


def test_five_successive_temperature_facts_are_a_series_not_a_conflict() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    for k, v in enumerate(["21.5", "21.7", "22.0", "21.9", "21.6"]):
        clock.t = T0 + 60 * k
        e.admit(fact("temp0", "t", v), "sensor")
    assert e.store.count("state = 3") == 0 and e.store.count("flagged = 1") == 0
    assert revision.supersessions(e) == 4


def test_an_episode_a_steward_promotes_feeds_its_pattern_again() -> None:
    from hirmem.memory import review

    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    eps = []
    for n, v in enumerate([30.0, 31.0, 90.0]):
        clock.t = T0 + n
        eps.append(e.admit(reading(v, n), "sensor/temp9"))
    [pid] = patterns(e)
    e.transition(e.require(eps[2].id), State.QUARANTINED, "spike")
    assert "3 readings" not in e.require(pid).value
    review.decide(e, eps[2].id, "ana", "promote", "the spike was a real fire drill")
    p = e.require(pid)
    assert p.value.startswith("30.0\N{EN DASH}90.0, mean 50.3") and "3 readings" in p.value
    assert eps[2].id in p.links


@pytest.mark.parametrize(("change", "why"), [
    ({"distill_min_episodes": 0}, "distill_min_episodes"),
    ({"distill_min_episodes": 600}, "distill_max_episodes"),
    ({"procedure_min_rate": 1.5}, "procedure_min_rate"),
    ({"episodic_tau_s": 0}, "episodic_tau_s"),
    ({"simultaneity_s": -1}, "simultaneity_s"),
    ({"value_abs_tolerance": float("nan")}, "value_abs_tolerance"),
])  # fmt: skip
def test_layer_parameters_are_checked(change: dict[str, float], why: str) -> None:
    from hirmem.protocol.errors import HirmemError

    with pytest.raises(HirmemError, match=why):
        MemoryConfig.from_dict(change)


def test_revising_twice_writes_nothing_new() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    e.admit(fact("fan", "speed", "high"), "s")
    late = e.admit(fact("fan", "speed", "low"), "s", timestamp=int(T0 * 1000) - 600_000)
    head = e.audit.head_seq
    revision.revise(e, e.require(late.id))  # again: it is already history
    assert e.audit.head_seq == head and revision.supersessions(e) == 1


def test_a_stewards_repair_path_becomes_a_procedure_with_its_success_rate() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    for k in range(4):
        clock.t = T0 + DAY * k
        m = e.admit(fact(f"meter {k}", "unit", "kWh"), "scada", confidence=0.5)
        e.transition(m, State.QUARANTINED, "wrong unit")
        if k == 1:  # a stronger simultaneous claim will defeat this repair
            e.admit(fact(f"meter {k}", "unit", "Wh"), "billing")
        out = e.repair(m.id, fact(f"meter {k}", "unit", "MWh"), reason="unit fixed",
                       actor="steward:ana", value="MWh")  # fmt: skip
        assert (out.state is State.QUARANTINED) == (k == 1)
    [p] = e.store.select("kind = 'procedure'")
    assert p.value.startswith("steps quarantined for wrong unit → steward repair")
    assert p.value.endswith("3 of 4 succeeded (75%)")


@pytest.mark.parametrize(("payload", "kind", "why"), [
    ('{"action": "x"}', "action", "outcome"),
    ("restart the pump", "action", "JSON object"),
    ('{"note": "warm"}', "reading", "numeric field"),
    ("x", "memo", "kind must be one of"),
])  # fmt: skip
def test_a_payload_that_is_not_its_kind_is_refused(payload: str, kind: str, why: str) -> None:
    from hirmem.protocol.errors import HirmemError

    e = MemoryEngine(":memory:", clock=Clock())
    with pytest.raises(HirmemError, match=why):
        e.admit(payload, "ops", kind=kind)
    # read with the default kind, half an action is a plain statement
    assert e.admit('{"action": "x"}', "ops").kind == "fact"


def test_a_multi_valued_attribute_distils_one_pattern_per_value() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    for k, who in enumerate(["Bob", "bob", "Carol", "BOB", "carol"]):
        clock.t = T0 + k
        e.admit(fact("alice", "knows", who), "hr")
    found = sorted((d.value_key, d.stats.n) for d in distill.patterns(e))
    assert found == [("bob", 3), ("carol", 2)]


@pytest.mark.parametrize("how", ["sweep", "steward"])
def test_a_pattern_no_longer_live_takes_no_new_episode(how: str) -> None:
    """An archived pattern is read-only: the next episode of its key opens a new window
    and a new pattern; it never joins the archived pattern's links
    or statistics. Archived by a sweep (its semantic lifetime over, inside a window long
    enough to still be open) or by a transition."""
    clock = Clock()
    e = MemoryEngine(":memory:", MemoryConfig(distill_window_s=60 * DAY), clock=clock)
    for n in range(3):
        clock.t = T0 + n
        e.admit(reading(20.0, n), "sensor/temp0")
    [old] = distill.patterns(e)
    p = e.require(old.memory_id)
    if how == "sweep":
        clock.t = T0 + 30 * DAY
        e.sweep()
    else:
        e.transition(p, State.ARCHIVED, "test: retired")
    assert e.require(p.id).state is State.ARCHIVED
    links, stats = distill.episodes_of(e, p.id), distill.distillate_of(e, p.id)
    for n in range(3, 6):
        clock.t += 1
        e.admit(reading(20.0, n), "sensor/temp0")
    assert distill.episodes_of(e, p.id) == links  # no new support for the archived one
    assert distill.distillate_of(e, p.id) == stats
    ds = distill.patterns(e)
    assert len(ds) == 2 and ds[1].stats.n == 3
    new = e.require(ds[1].memory_id)
    assert new.state in (State.CANDIDATE, State.CONSOLIDATED)
    assert distill.episodes_of(e, new.id) == [m.id for m in e.store.select(
        "kind = 'reading' ORDER BY rowid")][3:]  # fmt: skip
