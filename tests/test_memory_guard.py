"""One guard across the system (issue 13, MEM-INV-6): a quarantined or Trust = 0 record
reaches no recall, no graph and no answer, only its explicit id.

End to end with real parts: a device key, a signed pack, the daemon's store taking it,
the memory engine following the store, the semantic substrate fed from the same store,
and a question asked of it.
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest

from hirmem.daemon.store import Store
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.follow import follow_intake
from hirmem.memory.intake import intake_records
from hirmem.memory.model import Memory, State
from hirmem.memory.recall import RecallFilter
from hirmem.protocol.keys import derive_test_key
from hirmem.protocol.packs import PackKind, sign_pack
from hirmem.protocol.records import GENESIS, Record, record_id, withheld
from hirmem.semantic.devices import DeviceFeed
from hirmem.semantic.retrieve import Embedder
from hirmem.semantic.substrate import Substrate

DEV = bytes.fromhex("9a9a9a9a9a9a9a01")
KEY = derive_test_key("guard device 9a9a9a9a9a9a9a01")
T0 = 1_790_000_000_000
CONTEXT = bytes(range(32))


def _pack_with_a_domination_record(store: Store) -> tuple[Record, Record]:
    good = Record.capture(record_id(DEV, 1, 1), json.dumps({"door": "open"}).encode(), "cam",
                          T0 + 1, CONTEXT, 0x0FFF, 0x10000, 0xE666, 0x8000, GENESIS)  # fmt: skip
    bad = Record.capture(record_id(DEV, 1, 2),
                         json.dumps({"door": "unlocked by admin override"}).encode(),
                         "intruder", T0 + 2, CONTEXT, 0x07FF, 0x10000, 0xE666, 0x8000,
                         good.hash)  # fmt: skip
    pack = sign_pack(KEY, PackKind.MEMORY, DEV, (1 << 32) | 1, GENESIS, T0 + 10, [good, bad])
    taken = store.take_pack(DEV, pack.encoded)
    assert taken.status == "accepted", taken.detail
    return good, bad


def test_a_domination_record_never_reaches_recall_graph_or_answer(tmp_path: Path) -> None:
    store = Store(tmp_path / "hirmem.db")
    store.register_device(DEV, KEY.public.raw, "guarded")
    _, bad = _pack_with_a_domination_record(store)
    assert withheld(bad).startswith("hard fail: domination")
    # the memory engine: permanently quarantined, recalled by nothing, got by its id
    engine = MemoryEngine(tmp_path / "memory.db")
    report = follow_intake(engine, store)
    assert (report.admitted, report.quarantined) == (1, 1)
    m = engine.require(bad.id.hex())
    assert m.state is State.QUARANTINED and m.permanent and m.trust == 0
    everything = RecallFilter(states=frozenset(State))
    for flt in (None, everything):
        hits = engine.recall("door unlocked by admin override intruder", k=10, flt=flt)
        assert bad.id.hex() not in {h.id for h in hits}
    # the semantic substrate fed from the same daemon store: no document, no triple
    sub = Substrate.in_memory()
    feed = DeviceFeed(store, sub)
    _, result = feed.pull()
    sources = {d.source for d in result.docs}
    assert len(result.docs) == 1 and all(bad.id.hex() not in s for s in sources)
    assert all("admin" not in t.object for t in result.triples)
    assert feed.withheld == {"hard fail: domination": 1}
    # and no answer: asked about the intruder, nothing is believed
    subject = f"{DEV.hex()}/intruder"
    ans = sub.ask(f"what is the door of {subject}?")
    assert all("admin" not in h.evidence for h in ans.hits)
    good_ans = sub.ask(f"what is the door of {DEV.hex()}/cam?")
    assert good_ans.hits and good_ans.hits[0].evidence == '"door": "open"'
    engine.close()
    store.close()


def test_the_record_guard_and_the_engine_agree_on_every_flag_word() -> None:
    """Differential: for every 12-bit flag word and Q, P at the edges, and for records
    whose carried scores were altered, the engine quarantines a device record exactly
    when :func:`withheld` keeps it out of the graph."""
    rng = random.Random(13)
    engine = MemoryEngine(":memory:")
    link = GENESIS
    records = []
    for flags in range(0x1000):
        q, p = rng.choice([(0x10000, 0xE666), (0, 0xE666), (0x8000, 0), (0x10000, 0x10000)])
        n = flags + 1
        rec = Record.capture(record_id(DEV, 2, n), b"x", "s", T0 + n, CONTEXT, flags, q, p,
                             0x8000, link)  # fmt: skip
        if rng.random() < 0.05:  # a device that lies about its scores
            rec = dataclasses.replace(rec, rn=(rec.rn + 1) & 0xFFFF)
        records.append(rec)
        link = rec.hash
    intake_records(engine, records, DEV, b"kid", GENESIS)
    disagree = [
        (hex(r.flags), withheld(r))
        for r in records
        if (engine.require(r.id.hex()).state is State.QUARANTINED) != bool(withheld(r))
    ]
    assert disagree == []


def test_what_the_host_quarantines_stays_out_of_the_graph_too(tmp_path: Path) -> None:
    """A record only the host can judge — it lost a contradiction to a stronger one at
    the same instant — is quarantined by the engine, and the engine's verdict, handed
    to the feed, keeps it out of the graph and the answers."""
    store = Store(tmp_path / "hirmem.db")
    store.register_device(DEV, KEY.public.raw, "guarded")

    def claim(n: int, value: str, q: int, link: bytes) -> Record:
        body = json.dumps({"subject": "valve 7", "attribute": "position", "value": value})
        return Record.capture(record_id(DEV, 1, n), body.encode(), "plc", T0, CONTEXT,
                              0x0FFF, q, 0xE666, 0x8000, link)  # fmt: skip

    strong = claim(1, "shut", 0x10000, GENESIS)
    weak = claim(2, "wide open", 0x1000, strong.hash)
    pack = sign_pack(KEY, PackKind.MEMORY, DEV, (1 << 32) | 1, GENESIS, T0 + 10, [strong, weak])
    assert store.take_pack(DEV, pack.encoded).status == "accepted"
    assert withheld(weak) == ""  # nothing on the record itself says so
    engine = MemoryEngine(tmp_path / "memory.db")
    follow_intake(engine, store)
    assert engine.require(weak.id.hex()).state is State.QUARANTINED
    assert engine.withheld(weak.id) and not engine.withheld(strong.id)
    sub = Substrate.in_memory()
    feed = DeviceFeed(store, sub, verdict=engine.withheld)
    _, result = feed.pull()
    assert len(result.docs) == 1 and all("wide open" not in t.object for t in result.triples)
    assert sum(feed.withheld.values()) == 1
    ans = sub.ask("what is the position of valve 7?")
    assert all("wide open" not in h.evidence for h in ans.hits)
    engine.close()
    store.close()


def test_the_semantic_cli_takes_the_memory_engines_verdicts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from hirmem.cli.entry import main

    store = Store(tmp_path / "hirmem.db")
    store.register_device(DEV, KEY.public.raw, "guarded")
    _pack_with_a_domination_record(store)
    store.close()
    intake, mem, sem = (str(tmp_path / n) for n in ("hirmem.db", "memory.db", "sem.db"))
    assert main(["memory", "--db", mem, "follow", "--intake", intake]) == 0
    assert main(["semantic", "devices", "--store", intake, "--db", sem, "--memory", mem]) == 0
    assert "fed 1 records" in capsys.readouterr().out
    assert main(["semantic", "devices", "--store", intake, "--db", sem,
                 "--memory", str(tmp_path / "none.db")]) == 2  # fmt: skip
    assert "no memory store" in capsys.readouterr().err


def _valve_claim(n: int, value: str, q: int, link: bytes) -> Record:
    body = json.dumps({"subject": "valve 7", "attribute": "position", "value": value})
    return Record.capture(record_id(DEV, 1, n), body.encode(), "plc", T0, CONTEXT, 0x0FFF,
                          q, 0xE666, 0x8000, link)  # fmt: skip


def _take(store: Store, n: int, prev: bytes, rec: Record) -> bytes:
    """Sign and store pack ``n`` of DEV holding ``rec``; returns the pack's hash."""
    pack = sign_pack(KEY, PackKind.MEMORY, DEV, (1 << 32) | n, prev, T0 + 10 * n, [rec])
    taken = store.take_pack(DEV, pack.encoded)
    assert taken.status == "accepted", taken.detail
    return pack.hash


def test_a_record_quarantined_after_it_was_fed_is_retracted(tmp_path: Path) -> None:
    """Issue 13, one guard: the feed took a weak claim while the engine still held it; a
    later pack (a strong claim of the same instant) makes the engine quarantine it; the
    next recheck retracts what it asserted (kept as history, with the reason) and
    withdraws its passages: no answer names it."""
    store = Store(tmp_path / "hirmem.db")
    store.register_device(DEV, KEY.public.raw, "guarded")
    engine = MemoryEngine(tmp_path / "memory.db")
    sub = Substrate.in_memory()
    weak = _valve_claim(1, "wide open", 0x1000, GENESIS)
    first = _take(store, 1, GENESIS, weak)
    follow_intake(engine, store)
    assert engine.withheld(weak.id) == ""
    feed = DeviceFeed(store, sub, verdict=engine.withheld)
    cursor, result = feed.pull()
    assert any("wide open" in t.object for t in result.triples)
    assert feed.recheck() == 0  # nothing to take back yet
    _take(store, 2, first, _valve_claim(2, "shut", 0x10000, first))
    follow_intake(engine, store)
    assert engine.require(weak.id.hex()).state is State.QUARANTINED
    feed.pull(cursor)
    assert feed.recheck() == 1
    gone = [e for e in sub.ledger.edges(include_retracted=True) if "wide open" in e.object]
    assert gone and all(e.retracted_at and "withheld after it was fed" in e.retraction
                        for e in gone)  # fmt: skip
    ans = sub.ask("what is the position of valve 7?")
    assert ans.hits and all("wide open" not in h.evidence for h in ans.hits)
    assert feed.recheck() == 0  # taken back once
    assert sum(feed.withheld.values()) == 1
    engine.close()
    store.close()


def test_semantic_devices_finds_the_memory_store_beside_the_intake(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without ``--memory`` the engine's store the daemon keeps beside the intake is
    used; with none there, the output says only the record-level guard applies."""
    from hirmem.cli.entry import main

    store = Store(tmp_path / "hirmem.db")
    store.register_device(DEV, KEY.public.raw, "guarded")
    first = _take(store, 1, GENESIS, _valve_claim(1, "wide open", 0x1000, GENESIS))
    store.close()
    intake, sem = str(tmp_path / "hirmem.db"), str(tmp_path / "sem.db")
    argv = ["semantic", "devices", "--database", intake, "--substrate", sem]
    assert main(argv) == 0
    out = capsys.readouterr()
    assert "guard: record-level only" in out.out and "fed 1 records" in out.out
    store = Store(tmp_path / "hirmem.db")
    _take(store, 2, first, _valve_claim(2, "shut", 0x10000, first))
    store.close()
    mem = str(tmp_path / "hirmem-memory.sqlite")
    assert main(["memory", "--db", mem, "follow", "--intake", intake]) == 0
    capsys.readouterr()
    assert main(argv) == 0
    out = capsys.readouterr()
    assert "record-level" not in out.out
    assert "fed 1 records" in out.out and "(1 fed earlier, retracted now)" in out.out


def _readings(n0: int, values: list[float], link: bytes) -> list[Record]:
    out = []
    for n, v in enumerate(values, start=n0):
        rec = Record.capture(record_id(DEV, 3, n), json.dumps({"temp_c": v}).encode(), "temp0",
                             T0 + 1000 * n, CONTEXT, 0x0FFF, 0x10000, 0xE666, 0x8000,
                             link)  # fmt: skip
        out.append(rec)
        link = rec.hash
    return out


def test_the_guard_holds_in_every_tier_and_distilled_memories_are_tier_one(tmp_path: Path) -> None:
    """Issue 16, point 2: a pack of readings with a domination record among them. The
    readings become claims of their sensor and the engine's distilled pattern a tier-1
    memory; the domination record enters no tier (no passage, no claim, no memory); the
    pattern reinforced by more readings is the same memory updated; once the engine
    quarantines the pattern it leaves tier 1, counted once."""
    store = Store(tmp_path / "hirmem.db")
    store.register_device(DEV, KEY.public.raw, "guarded")
    good = _readings(1, [21.5, 21.75, 22.0, 22.25], GENESIS)
    body = json.dumps({"temp_c": 99.0, "door": "unlocked by admin override"}).encode()
    bad = Record.capture(record_id(DEV, 3, 9), body, "temp0", T0 + 9000, CONTEXT, 0x07FF,
                         0x10000, 0xE666, 0x8000, good[-1].hash)  # fmt: skip
    assert withheld(bad).startswith("hard fail: domination")
    first = sign_pack(KEY, PackKind.MEMORY, DEV, (1 << 32) | 1, GENESIS, T0 + 10_000, [*good, bad])
    assert store.take_pack(DEV, first.encoded).status == "accepted"
    engine = MemoryEngine(tmp_path / "memory.db")
    follow_intake(engine, store)
    sub = Substrate.in_memory(passage_embedder=Embedder())
    feed = DeviceFeed(store, sub, verdict=engine.withheld)
    cursor, _ = feed.pull()

    def distilled() -> list[Memory]:
        return engine.store.select("kind IN (?, ?)", ("pattern", "procedure"))

    assert feed.distilled(distilled()) == 1
    sensor, here = f"{DEV.hex()}/temp0", {f"local/{DEV.hex()}/temp0"}
    everywhere = {f"local/{DEV.hex()}/temp0", f"local/{DEV.hex()}/distill"}
    # tier 2: the readings are a series; the domination record's 99 is no value of it
    values = [r.value for r in sub.claims.history(sensor, "reading.temp_c", here)]
    assert values == ["21.5 degC", "21.75 degC", "22 degC", "22.25 degC"]
    assert [r.value for r in sub.claims.current(sensor, "reading.temp_c", here)] == ["22.25 degC"]
    assert sub.claims.about("admin override", everywhere) == []
    assert sub.claims.current(sensor, "reading.door", here) == []
    # tier 0 and tier 1: nothing of it either, whatever is asked
    for q in ("door unlocked by admin override", "temp0 temperature 99", "temp0 readings"):
        _, hits = sub.remember(q, everywhere, 20)
        assert hits and all("admin" not in h.text and "99" not in h.text for h in hits)
    bad_ref = f"hirmem://device/{DEV.hex()}/record/{bad.id.hex()}"
    assert all(d.source != bad_ref for d in (sub.docs.get(h.source) for h in hits) if d)
    [pattern] = distilled()
    memory = sub.memories.get(f"distill:{pattern.id}")
    assert memory is not None and memory.certainty in ("asserted", "hedged")
    assert memory.container == f"local/{DEV.hex()}/distill" and "4 readings" in memory.text
    assert sub.memories.search("temp0 readings", 5, {f"local/{DEV.hex()}/temp0"}) == []  # fenced
    # reinforced: the same memory, updated in place
    more = _readings(10, [22.0, 21.75], first.hash)  # a pack opens on the one before
    second = sign_pack(KEY, PackKind.MEMORY, DEV, (1 << 32) | 2, first.hash, T0 + 20_000, more)
    assert store.take_pack(DEV, second.encoded).status == "accepted"
    follow_intake(engine, store)
    feed.pull(cursor)
    n = len(sub.memories)
    assert feed.distilled(distilled()) == 1 and len(sub.memories) == n
    again = sub.memories.get(f"distill:{pattern.id}")
    assert again is not None and again.id == memory.id and "6 readings" in again.text
    assert [r.value for r in sub.claims.current(sensor, "reading.temp_c", here)] == ["21.75 degC"]
    # the engine quarantines the pattern: it leaves tier 1, counted once however often asked
    engine.transition(engine.require(pattern.id), State.QUARANTINED, "steward: bad calibration")
    assert feed.distilled(distilled()) == 0 and feed.distilled(distilled()) == 0
    assert sub.memories.get(f"distill:{pattern.id}") is None
    reason = "quarantined by the memory engine: steward: bad calibration"
    assert feed.withheld[reason] == 1 and feed.withheld["hard fail: domination"] == 1
    engine.close()
    store.close()
