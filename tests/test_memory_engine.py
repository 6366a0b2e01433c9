"""The memory engine's stages: capture, contradiction/repair, review, intake, recall, CLI."""

from __future__ import annotations

import argparse
import json
import math
import random
import sqlite3
import zlib
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hirmem.memory import cli, review
from hirmem.memory.config import MemoryConfig
from hirmem.memory.dynamics import decay_between
from hirmem.memory.embed import HashEmbedder
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.intake import intake_records
from hirmem.memory.model import Layer, Memory, State
from hirmem.memory.recall import RecallFilter, RecallHit
from hirmem.memory.states import IllegalTransition
from hirmem.protocol.errors import HirmemError
from hirmem.protocol.fixedpoint import ONE
from hirmem.protocol.identity import fold
from hirmem.protocol.records import GENESIS, Record
from memory_backends import memory_backend, memory_server  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("memory_backend")

T0 = 1_780_000_000.0
DAY = 86400.0
DEVICE = bytes.fromhex("0102030405060708")


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def fact(subject: str, attribute: str, value: str, negated: bool = False) -> str:
    return json.dumps({"subject": subject, "attribute": attribute, "value": value,
                       "negated": negated})  # fmt: skip


# -- stage 1: capture and the working ring -------------------------------------------------
def test_capture_is_volatile_in_working_memory_with_id_time_source_context() -> None:
    e = MemoryEngine(":memory:", clock=Clock())
    m = e.capture("raw reading", "sensor-7")
    assert (m.state, m.layer) == (State.VOLATILE, Layer.WORKING)
    assert m.timestamp == int(T0 * 1000) and m.source == "sensor-7" and len(m.context) == 32
    assert m.verdict == -1 and m.h == 0.0  # no HIR evaluation yet
    assert m.hash == m.content_hash()


def test_working_ring_evicts_least_recently_accessed_volatile() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", MemoryConfig(working_capacity=3), clock=clock)
    ids = []
    for n in range(5):
        clock.t += 1
        ids.append(e.capture(f"r{n}", "s").id)
    kept = {m.id for m in e.store.select("state = 0")}
    assert kept == set(ids[2:])
    assert [r.action for r in e.audit.records(ids[0])] == ["capture", "evict"]
    gated = e.process(ids[2])  # gated memories leave the ring and are never evicted
    for n in range(5):
        e.capture(f"later {n}", "s")
    assert e.get(gated.id) is not None


def test_process_twice_is_refused() -> None:
    e = MemoryEngine(":memory:", clock=Clock())
    m = e.admit("x", "s")
    with pytest.raises(HirmemError, match="already gated"):
        e.process(m.id)


def test_illegal_transition_through_the_engine_names_both_states() -> None:
    e = MemoryEngine(":memory:", clock=Clock())
    m = e.admit("x", "s")
    with pytest.raises(IllegalTransition, match="consolidated → volatile"):
        e.transition(m, State.VOLATILE, "test")


def test_procedures_consolidate_into_the_procedural_layer() -> None:
    m = MemoryEngine(":memory:", clock=Clock()).admit("reset pump: close V3, open V4", "ops",
                                                      kind="procedure")  # fmt: skip
    assert (m.state, m.layer) == (State.CONSOLIDATED, Layer.PROCEDURAL)


# -- stage 7: contradiction, corruption, repair ------------------------------------------
def test_value_contradiction_downgrades_the_less_trusted_and_flags_both() -> None:
    e = MemoryEngine(":memory:", clock=Clock())
    a = e.admit(fact("Door 4", "state", "open"), "cam1")
    b = e.admit(fact("door  4", "STATE", "closed"), "cam2", flags=0x0FFE, confidence=0.6)
    a2, b2 = e.require(a.id), e.require(b.id)
    # issue 13: the winner's flag clears once the loser is quarantined (it was stuck)
    assert not a2.flagged and b2.flagged and b.id in a2.links and a.id in b2.links
    assert [r.action for r in e.audit.records(a.id)][-1] == "unflag"
    assert a2.strength == a.strength  # more trusted: only flagged
    cfg = e.config
    assert b.w == pytest.approx(0.6 * 0.75, abs=1e-4)  # W with H = 0.75: M started there
    assert b2.strength == pytest.approx(max(0.0, b.w - cfg.beta * cfg.contradiction_x))
    assert b2.state is State.QUARANTINED and b2.quarantine_reason == "contradiction"


def test_equal_trust_contradiction_downgrades_both() -> None:
    e = MemoryEngine(":memory:", clock=Clock())
    a = e.admit(fact("pump", "mode", "auto"), "s")
    b = e.admit(fact("pump", "mode", "manual"), "s")
    assert e.require(a.id).strength == pytest.approx(0.5)
    assert e.require(a.id).state is State.CONSOLIDATED
    assert e.require(b.id).strength == pytest.approx(0.5)


def test_explicit_negation_conflicts_even_for_multi_valued_attributes() -> None:
    e = MemoryEngine(":memory:", clock=Clock())
    a = e.admit(fact("alice", "knows", "bob"), "s")
    b = e.admit(fact("alice", "knows", "carol"), "s")  # multi-valued: no conflict
    assert not e.require(a.id).flagged and not e.require(b.id).flagged
    c = e.admit(fact("alice", "knows", "bob", negated=True), "s")
    assert e.require(a.id).flagged and e.require(c.id).flagged
    assert not e.require(b.id).flagged


def test_corrupted_hash_raises_x_and_quarantines(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    e = MemoryEngine(path, clock=Clock())
    good = e.admit("fine", "s")
    bad = e.admit("will be corrupted", "s")
    e.close()
    db = sqlite3.connect(path)
    db.execute("DROP TRIGGER memories_content_fixed")
    db.execute("UPDATE memories SET payload = ? WHERE id = ?", (b"forged", bad.id))
    db.commit()
    db.close()
    e = MemoryEngine(path, clock=Clock())
    assert e.check_integrity() == [bad.id]
    got = e.require(bad.id)
    assert got.state is State.QUARANTINED and got.quarantine_reason == "corrupted hash"
    assert got.strength == 0.0 and got.flagged
    assert e.require(good.id).state is State.CONSOLIDATED
    assert e.check_integrity() == [bad.id]  # still corrupted, still quarantined, no error


def test_repair_writes_a_linked_new_version_and_preserves_the_original() -> None:
    e = MemoryEngine(":memory:", clock=Clock())
    a = e.admit(fact("tank", "level", "80%"), "s")
    new = e.repair(a.id, fact("tank", "level", "75%"), reason="sensor recalibrated",
                   actor="steward:bob", value="75%")  # fmt: skip
    old = e.require(a.id)
    assert (old.payload, old.hash, old.state) == (a.payload, a.hash, State.ARCHIVED)
    assert new.supersedes == a.id and new.prev_hash == a.hash and new.version == 2
    assert a.id in new.links and new.hash == new.content_hash()
    assert new.state is State.CONSOLIDATED and not new.flagged  # no conflict with its prior
    assert [m.id for m in e.history(a.id)] == [a.id, new.id]
    rep = next(r for r in e.audit.records(new.id) if r.action == "repair")
    assert rep.actor == "steward:bob" and rep.detail["prior"] == a.id


# -- quarantine review ------------------------------------------------------------------
def test_steward_promotes_a_quarantined_memory_with_who_and_why() -> None:
    e = MemoryEngine(":memory:", clock=Clock())
    a = e.admit(fact("valve", "pos", "open"), "s")
    b = e.admit(fact("valve", "pos", "shut"), "s", confidence=0.4)
    assert e.require(b.id).state is State.QUARANTINED
    d = review.decide(e, b.id, "carol", "promote", "checked on site: valve is shut")
    got = e.require(b.id)
    assert got.state is State.CONSOLIDATED  # Rn = 1 ≥ green after review
    assert (d.steward, d.decision) == ("carol", "promote")
    assert review.decisions(e, b.id)[0].reason == "checked on site: valve is shut"
    rec = e.audit.records()[d.audit_seq - 1]
    assert rec.action == "review" and rec.actor == "steward:carol"
    assert a.id != b.id


@pytest.mark.parametrize("decision", ["retire", "keep"])
def test_steward_retire_and_keep(decision: str) -> None:
    e = MemoryEngine(":memory:", clock=Clock())
    m = e.admit("rn too low", "s", flags=0x0D4F)
    review.decide(e, m.id, "dan", decision, "reason given")
    want = State.ARCHIVED if decision == "retire" else State.QUARANTINED
    assert e.require(m.id).state is want


@pytest.mark.parametrize(("steward", "decision", "reason"), [
    ("", "promote", "x"), ("ed", "promote", " "), ("ed", "delete", "x"), ("a:b", "keep", "x"),
])  # fmt: skip
def test_review_refuses_incomplete_decisions(steward: str, decision: str, reason: str) -> None:
    e = MemoryEngine(":memory:", clock=Clock())
    m = e.admit("rn too low", "s", flags=0x0D4F)
    with pytest.raises(HirmemError):
        review.decide(e, m.id, steward, decision, reason)


def test_review_only_applies_to_quarantined_memories() -> None:
    e = MemoryEngine(":memory:", clock=Clock())
    m = e.admit("fine", "s")
    with pytest.raises(HirmemError, match="not quarantined"):
        review.decide(e, m.id, "ed", "promote", "why not")


# -- intake from device packs -----------------------------------------------------------
def device_records(flags: list[int], prev: bytes = GENESIS) -> list[Record]:
    out, link = [], prev
    for seq, f in enumerate(flags, start=1):
        rid = DEVICE + (7).to_bytes(4, "big") + seq.to_bytes(4, "big")
        rec = Record.capture(rid, json.dumps({"t": 20 + seq}).encode(), "temp0",
                             1_780_000_000_000 + seq, bytes([seq]) * 32, f, ONE, 0xE666,
                             0x8000, link)  # fmt: skip
        out.append(rec)
        link = rec.hash
    return out


def test_intake_keeps_device_scores_and_applies_the_lifecycle() -> None:
    e = MemoryEngine(":memory:", MemoryConfig(gate_mode="float"), clock=Clock())
    # the second word fails bit 5 (the host cannot judge reversibility); the fourth
    # asserts bit 7 failed, but the payload is well-formed JSON: the host evaluates
    # structure itself (issue 13, §5), so that record is YELLOW, not RED, and the
    # disagreement is reported
    recs = device_records([0x0FFF, 0x0CDF, 0x07FF, 0x0D4F])
    rep = intake_records(e, recs, DEVICE, b"kid1", GENESIS)
    states = [e.require(r.id.hex()).state for r in recs]
    assert states == [State.CONSOLIDATED, State.CANDIDATE, State.QUARANTINED, State.CANDIDATE]
    assert rep.admitted == [recs[j].id.hex() for j in (0, 1, 3)] and not rep.mismatched
    assert list(rep.disagreed) == [recs[3].id.hex()]
    assert "structurally_consistent passed" in rep.disagreed[recs[3].id.hex()]
    m = e.require(recs[1].id.hex())
    assert m.device_scores == (recs[1].h, recs[1].i, recs[1].r, recs[1].f, recs[1].c,
                               recs[1].rn, recs[1].w)  # fmt: skip
    assert m.gate_mode == "fixed" and m.hash == recs[1].hash and m.device == DEVICE.hex()
    assert m.rn * ONE == recs[1].rn
    again = intake_records(e, recs, DEVICE, b"kid1", GENESIS)
    assert len(again.duplicates) == 4 and not again.admitted


@pytest.mark.parametrize(("field", "value", "why"), [
    ("rn", 0x10000, "gate scores"), ("payload", b"forged", "hash"),
    ("flags", 0x0FF7, "normalised"), ("prev_hash", b"\x01" * 32, "chain"),
    ("state", 3, "disposition"),
])  # fmt: skip
def test_intake_quarantines_records_the_host_disagrees_with(
    field: str, value: object, why: str
) -> None:
    import dataclasses

    e = MemoryEngine(":memory:", clock=Clock())
    recs = device_records([0x0C7F, 0x0FFF])
    bad = dataclasses.replace(recs[0], **{field: value})  # type: ignore[arg-type]
    rep = intake_records(e, [bad, recs[1]], DEVICE, b"kid1", GENESIS)
    got = e.require(bad.id.hex())
    assert got.state is State.QUARANTINED and why in got.quarantine_reason
    assert why in rep.mismatched[bad.id.hex()]
    assert e.require(recs[1].id.hex()).state is State.CONSOLIDATED


def test_intake_refuses_ids_of_another_device() -> None:
    e = MemoryEngine(":memory:", clock=Clock())
    rep = intake_records(e, device_records([0x0FFF]), bytes(8), b"kid", None)
    assert "device id" in next(iter(rep.mismatched.values()))


# -- stage 6: recall --------------------------------------------------------------------
def test_embedder_is_deterministic_unit_length_and_similarity_tracks_text() -> None:
    emb = HashEmbedder(128)
    a, b, c = (emb.embed(t) for t in ("pump pressure high", "pump pressure is high", "door"))
    assert np.array_equal(a, emb.embed("pump pressure high"))
    assert math.isclose(float(np.linalg.norm(a)), 1.0, rel_tol=1e-6)
    assert float(a @ b) > 0.6 > float(a @ c)


def _reference_hash_embedding(text: str, dim: int) -> npt.NDArray[np.float32]:
    """The hash embedding as the module documents it, n-gram by n-gram in float32 (the
    vectors already stored were made this way: the embedder must keep every bit)."""
    vec = np.zeros(dim, dtype=np.float32)
    for word in fold(text).split(" "):
        if word:
            marked = f"\x02{word}\x03".encode()
            for n in (3, 4, 5):
                for k in range(max(1, len(marked) - n + 1)):
                    hv = zlib.crc32(marked[k : k + n])
                    vec[hv % dim] += np.float32(1.0 if hv & 0x80000000 else -1.0)
    norm = float(np.linalg.norm(vec))
    return vec / np.float32(norm) if norm > 0 else vec


def test_hash_embedder_keeps_every_bit_of_the_documented_vector() -> None:
    rng = random.Random(7)
    alphabet = "ab cdé 0123456789.-_/ ΣXYZ   pump"
    for dim in (128, 256):
        emb = HashEmbedder(dim)
        for _ in range(2000):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(80)))
            text += " pump" * rng.randrange(3)  # words again: the cached path
            got = emb.embed(text)
            assert got.dtype == np.float32
            assert got.tobytes() == _reference_hash_embedding(text, dim).tobytes(), text


def oracle(
    e: MemoryEngine, query: str, k: int, flt: RecallFilter, now: float
) -> list[tuple[str, float]]:
    q = e.embedder.embed(query).astype(np.float64)
    scored = []
    for m in e.store.select():
        # issue 13: a quarantined memory reaches no recall, whatever the filter asks
        if m.state in (State.VOLATILE, State.QUARANTINED) or not flt.matches(m):
            continue
        sim = max(0.0, float(np.frombuffer(m.embedding, np.float32).astype(np.float64) @ q))
        rec = math.exp(-(now - m.last_access) / e.config.recency_tau_s)
        # issue 13: recall ranks on the strength decayed to now, not that of the last sweep
        # (live memories only: archived and quarantined ones do not decay)
        d = decay_between(m.last_access, m.decayed_at, now, e.config, e.config.tau_for(m.layer))
        d = d if m.state in (State.CANDIDATE, State.CONSOLIDATED) else 0.0
        s = sim * max(0.0, m.strength - e.config.beta * d) * rec * m.trust
        if s > 0:
            scored.append((m.id, s))
    scored.sort(key=lambda x: (-x[1], x[0]))
    return scored[:k]


WORDS = [
    "pump",
    "valve",
    "door",
    "tank",
    "pressure",
    "level",
    "open",
    "closed",
    "high",
    "low",
    "alarm",
    "motor",
]


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.tuples(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
                       st.sampled_from([0x0FFF, 0x0C7F, 0x0FFE, 0x07FF, 0x0D4F]),
                       st.integers(0, 3), st.floats(0, 20 * DAY)),
             min_size=1, max_size=25),
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
    st.integers(1, 8),
    st.sampled_from(["none", "state", "layer", "source", "subject", "device"]),
)  # fmt: skip
def test_recall_matches_brute_force_oracle(
    items: list[tuple[list[str], int, int, float]], query: list[str], k: int, kind: str
) -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    for words, flags, src, age in items:
        clock.t = T0 + age
        e.admit(" ".join(words), f"s{src}", flags=flags, subject=f"subj{src % 2}")
    clock.t = T0 + 25 * DAY
    flt = {
        "none": RecallFilter(),
        "state": RecallFilter(states=frozenset({State.QUARANTINED, State.CANDIDATE})),
        "layer": RecallFilter(layers=frozenset({Layer.EPISODIC})),
        "source": RecallFilter(sources=frozenset({"s1", "s2"})),
        "subject": RecallFilter(subjects=frozenset({"subj0"})),
        "device": RecallFilter(devices=frozenset({"nobody"})),
    }[kind]
    want = oracle(e, " ".join(query), k, flt, clock.t)
    got = e.recall(" ".join(query), k, flt, touch=False)
    assert [round(h.score, 9) for h in got] == [round(s, 9) for _, s in want]
    assert {h.id for h in got} <= {m.id for m in e.store.select()}
    for h in got:
        m = e.require(h.id)
        assert h.trust == m.trust > 0 and flt.matches(m)
        assert h.score == pytest.approx(h.sim * h.strength * h.recency * h.trust)


def test_recall_prefers_strong_recent_trusted_memories() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    old = e.admit("boiler temperature reading", "s")
    clock.t += 14 * DAY
    new = e.admit("boiler temperature reading", "s")
    weak = e.admit("boiler temperature reading", "s", flags=0x0C7F)
    hits = e.recall("boiler temperature", k=3, touch=False)
    assert [h.id for h in hits] == [new.id, old.id, weak.id] or next(h.id for h in hits) == new.id
    assert hits[0].recency > hits[1].recency or hits[0].trust > hits[1].trust


def test_recall_increments_access_count_and_explicit_id_reaches_anything() -> None:
    e = MemoryEngine(":memory:", clock=Clock())
    m = e.admit("heat exchanger fouling", "s")
    q = e.admit("heat exchanger fouling", "s", flags=0x07FF)  # trust 0
    hits = e.recall("heat exchanger", k=5)
    assert [h.id for h in hits] == [m.id]
    assert e.require(m.id).access_count == 1 and e.require(q.id).access_count == 0
    assert e.get(q.id) is not None


def test_batch_recall_equals_single_recalls() -> None:
    e = MemoryEngine(":memory:", clock=Clock())
    for n, w in enumerate(WORDS):
        e.admit(f"{w} {WORDS[(n + 3) % len(WORDS)]}", "s")
    queries = ["pump level", "door alarm", "motor"]
    batch = e.recall_batch(queries, 4, touch=False)
    singles = [e.recall(q, 4, touch=False) for q in queries]
    assert [[h.id for h in b] for b in batch] == [[h.id for h in s] for s in singles]


def test_recall_index_follows_state_changes() -> None:
    e = MemoryEngine(":memory:", clock=Clock())
    m = e.admit("coolant pump vibration", "s")
    assert e.recall("coolant pump", touch=False)
    e.transition(e.require(m.id), State.QUARANTINED, "test")
    assert e.recall("coolant pump", touch=False) == []
    only_q = RecallFilter(states=frozenset({State.QUARANTINED}))
    # issue 13 (one guard): not even a filter asking for quarantine recalls it; its id does
    assert e.recall("coolant pump", flt=only_q, touch=False) == []
    assert e.require(m.id).state is State.QUARANTINED


# -- CLI --------------------------------------------------------------------------------
def run_cli(db: Path, *argv: str) -> int:
    parser = argparse.ArgumentParser(prog="hirmem")
    sub = parser.add_subparsers(dest="command", required=True)
    cli.add_parser(sub)
    return cli.run(parser.parse_args(["memory", "--db", str(db), *argv]))


def test_cli_inspects_reviews_and_verifies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "cli.sqlite"
    assert run_cli(db, "admit", "pump 3 pressure 4.2 bar", "--source", "p3") == 0
    assert run_cli(db, "admit", "obey me", "--source", "x", "--flags", "0x07ff") == 0
    assert run_cli(db, "admit", "low rn", "--source", "y", "--flags", "0x0d4f") == 0
    out = capsys.readouterr().out
    assert "consolidated" in out and "quarantined: hard fail: domination" in out
    assert run_cli(db, "stats") == 0
    assert "quarantined 2" in capsys.readouterr().out
    assert run_cli(db, "review", "list") == 0
    listing = capsys.readouterr().out
    assert "[permanent]" in listing
    low = next(line.split()[0] for line in listing.splitlines() if "low rn" in line)
    assert run_cli(db, "review", "decide", low, "--steward", "ann", "--decision", "retire",
                   "--reason", "noise") == 0  # fmt: skip
    assert run_cli(db, "review", "history") == 0
    assert "retire by ann: noise" in capsys.readouterr().out
    assert run_cli(db, "recall", "pump pressure", "-k", "2") == 0
    assert "Sim" in capsys.readouterr().out
    assert run_cli(db, "list", "--state", "archived") == 0
    assert low in capsys.readouterr().out
    assert run_cli(db, "show", low) == 0 and "quarantine_reason" in capsys.readouterr().out
    assert run_cli(db, "history", low) == 0 and "review" in capsys.readouterr().out
    assert run_cli(db, "sweep") == 0 and run_cli(db, "check") == 0
    assert run_cli(db, "verify") == 0 and "intact" in capsys.readouterr().out
    assert run_cli(db, "show", "00" * 16) == 2


def test_memory_text_includes_structured_parts() -> None:
    m = Memory(id="00" * 16, payload=b"p", source="", timestamp=1, context=bytes(32),
               subject="door", attribute="state", value="open")  # fmt: skip
    assert m.text() == "p door state open" and fold(" A ") == "a"
    assert isinstance(RecallHit("a", 1, 0.0, 0.0, 0.0, 0.0, 0.0), RecallHit)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 40), st.integers(1, 5),
       st.sampled_from([0.0, 0.3, 0.9]), st.sampled_from([32768, 100, 7]))  # fmt: skip
def test_recall_index_top_k_equals_brute_force_on_larger_populations(
    seed: int, k: int, nq: int, zero_share: float, block: int
) -> None:
    """The fast path (one multiply, one argpartition) and its exact fallback against a
    brute-force ranking, with many zero weights, several states and a source filter."""
    from hirmem.memory.recall import RecallIndex

    rng = np.random.default_rng(seed)
    n, dim = 1500, 32
    emb = rng.standard_normal((n, dim)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    strength = rng.uniform(0, 2, n) * (rng.random(n) >= zero_share)
    trust = rng.choice([0.0, 0.5, 1.0], n)
    last = T0 - rng.uniform(0, 30 * DAY, n)
    state = rng.choice([1, 2, 3, 4], n).astype(np.int8)
    sources = [f"s{j % 7}" for j in range(n)]
    idx = RecallIndex(dim, MemoryConfig().recency_tau_s, T0)
    idx.load_columns(np.arange(1, n + 1), [j.to_bytes(16, "big") for j in range(n)], emb,
                     strength, last, trust, state, np.full(n, 2, np.int8), sources, sources,
                     sources)  # fmt: skip
    idx.block = block  # batched queries go block by block when n > block
    q = rng.standard_normal((nq, dim)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    for flt in (RecallFilter(), RecallFilter(sources=frozenset({"s1", "s4"}))):
        got = idx.search(q, k, flt, T0)
        allowed = np.isin(state, [int(s) for s in flt.states])
        if flt.sources:
            allowed &= np.isin(np.array(sources), list(flt.sources))
        rec = np.exp(-(T0 - last) / MemoryConfig().recency_tau_s)
        for j in range(nq):
            score = np.maximum(emb.astype(np.float64) @ q[j].astype(np.float64), 0)
            score = score * strength * rec * trust
            score[~allowed] = 0
            want = np.sort(score[score > 0])[::-1][:k]
            assert np.allclose([h.score for h in got[j]], want, rtol=1e-4, atol=1e-12)


def test_blocked_top_k_equals_a_full_partition() -> None:
    """The batched search's block-by-block selection (the best kept per query, later
    blocks only compared with its bar) against one partition of every key: 300 random
    populations, blocks from 1 row to more than all of them, k below and above a block."""
    from hirmem.memory.recall import RecallIndex

    rng = np.random.default_rng(17)
    for _ in range(300):
        n, m, k = int(rng.integers(1, 400)), int(rng.integers(1, 6)), int(rng.integers(1, 50))
        kk = min(k, n)
        idx = RecallIndex(16, 3600.0, 0.0)
        idx.n = n
        idx.emb = rng.standard_normal((n, 16)).astype(np.float32)
        idx.block = int(rng.choice([1, 3, 7, 16, 100, 1000]))
        scale = rng.uniform(0.1, 1, n).astype(np.float32)
        q = rng.standard_normal((m, 16)).astype(np.float32)
        top, keys = idx._blocked(q, scale, kk)
        full = (q @ idx.emb.T) * scale
        for j in range(m):
            assert len(set(top[j].tolist())) == kk
            assert np.allclose(np.sort(full[j][top[j]]), np.sort(full[j])[-kk:], atol=1e-5)
            assert np.allclose(np.sort(keys[j]), np.sort(full[j])[-kk:], atol=1e-5)
