"""Device packs admitted as packs (issue 13, speed at fleet scale): one transaction, one
audit entry per pack, batched embedding, one pattern step per sensor per pack, and the
same memories as the one-by-one path.

The oracle for the admitted rows is the engine's own one-by-one path (capture into the
working ring, then stages 2-5 with revision and distillation per record), fed the same
records one pack of one record at a time; verify must still name every tampered row.
On SQLite and on PostgreSQL (the throwaway engines; the tampered stores are files).
"""

from __future__ import annotations

import dataclasses
import json
import random
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hirmem.daemon.store import Store as DaemonStore
from hirmem.memory import distill, packaudit
from hirmem.memory.audit import Entry
from hirmem.memory.config import MemoryConfig
from hirmem.memory.distill_schema import STATS_NAMES
from hirmem.memory.embed import HashEmbedder
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.follow import follow_intake
from hirmem.memory.intake import admit_pack, check_record
from hirmem.memory.model import Memory, State, memory_text
from hirmem.memory.observe import describe
from hirmem.memory.store import COLUMNS, TRIGGERS
from hirmem.protocol import cbor, records
from hirmem.protocol.errors import HirmemError
from hirmem.protocol.fixedpoint import ONE
from hirmem.protocol.keys import derive_test_key
from hirmem.protocol.packs import PackKind, sign_pack
from hirmem.protocol.records import GENESIS, Record, host_flags, record_hash, record_id
from memory_backends import memory_backend, memory_server  # noqa: F401  (fixtures)
from record_chains import chained

pytestmark = pytest.mark.usefixtures("memory_backend")  # ":memory:" engines: SQLite, PostgreSQL

DEV = bytes.fromhex("5e5e5e5e5e5e5e01")
KEY = derive_test_key("admit-pack device 5e5e5e5e5e5e5e01")
T0 = 1_790_000_000.0
CONTEXT = bytes(range(32))
# all pass, GREEN; YELLOW (Rn below green); RED; domination (hard fail, R = 0); no source
FLAGS = (0x0FFF, 0x0FFF, 0x0FFF, 0x0C7F, 0x0D4F, 0x07FF, 0x0C53, 0x0FEF)


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _payload(rng: random.Random, k: int) -> bytes:
    kind = rng.random()
    if kind < 0.7:  # a reading of one of three sensors
        body: dict[str, Any] = {"sensor": f"temp{k % 3}", "t": round(rng.gauss(21, 0.6), 2)}
        if rng.random() < 0.05:
            body["t"] = round(rng.uniform(40, 90), 1)  # far off its baseline
        return json.dumps(body).encode()
    if kind < 0.85:  # an action chain
        return json.dumps({"action": ["close V3", "open V4"], "result": "flow restored",
                           "outcome": rng.choice(["success", "success", "failure"])}).encode()
    return f"note {rng.randrange(1000)} from the line".encode()  # a plain statement


def _records(
    rng: random.Random, n: int, first: int = 1, link: bytes = GENESIS, corrupt: bool = True
) -> list[Record]:
    out = []
    for k in range(first, first + n):
        rec = Record.capture(record_id(DEV, 1, k), _payload(rng, k), rng.choice(["cam", ""]),
                             int(T0 * 1000) + 1000 * k, CONTEXT, rng.choice(FLAGS),
                             rng.choice([0x10000, 0xC000, 0x8000]), 0xE666, 0x8000, link)
        if corrupt and rng.random() < 0.03:  # corrupted on the way: its hash no longer matches
            rec = dataclasses.replace(rec, payload=rec.payload + b" ")
        out.append(rec)
        link = rec.hash
    return out


def _one_by_one(
    engine: MemoryEngine, rec: Record, link: bytes, now: float,
    baselines: dict[tuple[str, str], distill.Baseline | None] | None = None,
) -> None:  # fmt: skip
    """The oracle: the record captured into the working ring, then stages 2-5 alone.
    ``baselines``: the sensors' baselines as its pack found them (read once a pack)."""
    device = DEV.hex()
    intact = rec.hash == record_hash(rec.id, rec.payload, rec.source, rec.timestamp,
                                     rec.context, rec.prev_hash)  # fmt: skip
    problem = check_record(rec, DEV, link, intact)
    if engine.store.hash_of(rec.id.hex()) is not None:
        return
    seen = describe(rec.payload, rec.source)
    aligned = None
    if seen.kind == "reading":
        cache = {} if baselines is None else baselines
        sensor = (seen.subject, seen.attribute)
        if sensor not in cache:
            cache[sensor] = distill.baseline(engine, device, *sensor)
        aligned = distill.baseline_aligned(engine, cache[sensor], seen.value)
    flags, disagreement = host_flags(rec, True, aligned, intact)
    text = memory_text(rec.payload, seen.subject, seen.attribute, seen.value)
    m = Memory(
        id=rec.id.hex(), payload=rec.payload, source=rec.source, timestamp=rec.timestamp,
        context=rec.context, flags=flags, confidence=rec.confidence / ONE,
        provenance=rec.provenance / ONE, priority=rec.priority / ONE, last_access=now,
        decayed_at=now, hash=rec.hash, prev_hash=rec.prev_hash, subject=seen.subject,
        attribute=seen.attribute, value=seen.value, negated=seen.negated, kind=seen.kind,
        device=device, kid=KEY.kid.hex(), created=now,
        device_scores=(rec.h, rec.i, rec.r, rec.f, rec.c, rec.rn, rec.w),
        embedding=engine.embedder.embed(text).astype(np.float32).tobytes(),
    )  # fmt: skip
    with engine.store.transaction():
        held = engine.insert_volatile(m, now, actor=f"intake:{device}")
        if disagreement:
            engine.audit.append_entries(
                [Entry("intake-mismatch", m.id, {"flags": rec.flags, "reason": disagreement},
                       f"intake:{device}")], ts=now)  # fmt: skip
        engine.process(m.id, device_check=problem and f"device record: {problem}",
                       mode="fixed", held=held)  # fmt: skip


_SKIP = {"audit_seq"}


def _rows(engine: MemoryEngine) -> dict[str, dict[str, Any]]:
    cols = [c for c in COLUMNS if c not in _SKIP]
    with engine.store.reading() as db:
        got = db.execute(
            f"SELECT {', '.join('m.' + c for c in cols)}, e.vector FROM memories m "
            "JOIN embeddings e ON e.memory = m.rowid ORDER BY m.rowid"
        ).fetchall()
    return {str(r[0]): dict(zip([*cols, "embedding"], r, strict=True)) for r in got}


def _stats(engine: MemoryEngine) -> list[tuple[Any, ...]]:
    """The distillates, each with the window it continues named by its key and first
    time (pattern ids are host ids, numbered in the order patterns were born)."""
    with engine.store.reading() as db:
        rows = [(*r[:7], dict(zip(STATS_NAMES, r[7:], strict=True))) for r in db.execute(
            "SELECT memory_id, form, device, subject, attribute, value_key, open, "
            f"{', '.join(STATS_NAMES)} FROM distillates ORDER BY rowid")]  # fmt: skip
    window = {r[0]: (*r[1:6], r[7]["first_ms"]) for r in rows if r[0]}
    out = []
    for r in rows:
        stats = r[7]
        stats["prev"] = window.get(stats["prev"], stats["prev"])
        out.append((*r[:7], stats))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_packs_of_one_record_admit_what_the_one_by_one_path_admits(seed: int) -> None:
    rng = random.Random(seed)
    records = _records(rng, 160)
    clock_a, clock_b = Clock(), Clock()
    a = MemoryEngine(":memory:", clock=clock_a)
    b = MemoryEngine(":memory:", clock=clock_b)
    link = GENESIS
    for k, rec in enumerate(records):
        clock_a.t = clock_b.t = T0 + 30 * k
        admit_pack(a, [rec], DEV, KEY.kid, link)
        _one_by_one(b, rec, link, clock_b.t)
        link = rec.hash
    rows_a, rows_b = _rows(a), _rows(b)
    assert sorted(rows_a) == sorted(rows_b)  # (a pattern is born before its last episode's row)
    for mid, row in rows_a.items():
        assert row == rows_b[mid], mid
    assert _stats(a) == _stats(b)
    states = {row["state"] for row in rows_a.values()}
    assert {int(State.QUARANTINED), int(State.CONSOLIDATED), int(State.CANDIDATE)} <= states
    assert a.store.count("kind = 'pattern'") and a.store.count("kind = 'procedure'")
    for e in (a, b):
        assert e.verify_audit().ok, e.verify_audit()


@pytest.mark.parametrize("config", [
    MemoryConfig(),
    # windows that close within a pack and between packs, by time and by count
    MemoryConfig(distill_window_s=200.0, distill_max_episodes=11),
])  # fmt: skip
def test_a_pack_admits_its_episodes_as_alone_and_steps_each_pattern_once(
    config: MemoryConfig,
) -> None:
    rng = random.Random(7)
    records = _records(rng, 400)
    clock_a, clock_b = Clock(), Clock()
    a = MemoryEngine(":memory:", config, clock=clock_a)
    b = MemoryEngine(":memory:", config, clock=clock_b)
    link = GENESIS
    for p in range(0, len(records), 8):
        pack = records[p : p + 8]
        clock_a.t = clock_b.t = T0 + 30 * p
        before = a.audit.head_seq
        patterns = a.store.count("kind IN ('pattern', 'procedure')")
        got = admit_pack(a, pack, DEV, KEY.kid, link)
        if a.store.count("kind IN ('pattern', 'procedure')") == patterns:
            # no pattern was born: one entry for the pack, after the disagreements noted
            actions = [r.action for r in a.audit.records()[before:]]
            assert actions == ["intake-mismatch"] * len(got.disagreed) + [packaudit.ACTION]
        found: dict[tuple[str, str], distill.Baseline | None] = {}
        for rec in pack:
            _one_by_one(b, rec, link, clock_b.t, found)  # the baselines as the pack found them
            link = rec.hash
    rows_a, rows_b = _rows(a), _rows(b)
    episodes = [mid for mid, row in rows_a.items() if row["kind"] not in ("pattern", "procedure")]
    assert sorted(episodes) == sorted(r.id.hex() for r in records)
    for mid in episodes:  # the episodes: as alone, to the last column
        assert rows_a[mid] == rows_b[mid], mid
    # the patterns: the same statistics; their strength took one step per pack, not
    # one per episode
    # (in the order their keys came, not their records: compared as sets)
    assert sorted(map(repr, (s[1:] for s in _stats(a)))) == sorted(
        map(repr, (s[1:] for s in _stats(b))))
    assert a.verify_audit().ok


def test_a_patterns_row_does_not_carry_its_episodes() -> None:
    clock = Clock()
    e = MemoryEngine(":memory:", clock=clock)
    rng = random.Random(5)
    link = GENESIS
    ids: list[str] = []
    for n in range(40):
        clock.t = T0 + 10 * n
        recs = []
        for j in range(8):
            body = json.dumps({"sensor": "temp0", "t": round(rng.gauss(21, 0.3), 2)}).encode()
            recs.append(Record.capture(record_id(DEV, 1, 8 * n + j + 1), body, "cam",
                                       int(T0 * 1000) + 100 * (8 * n + j), CONTEXT, 0x0FFF,
                                       0x10000, 0xE666, 0x8000, link))  # fmt: skip
            link = recs[-1].hash
        got = admit_pack(e, recs, DEV, KEY.kid, recs[0].prev_hash)
        assert len(got.admitted) == 8 and not got.mismatched
        ids += [r.id.hex() for r in recs]
    [p] = e.store.select("kind = 'pattern'")
    with e.store.reading() as db:
        [(row_links,)] = db.execute("SELECT links FROM memories WHERE id = ?", (p.id,)).fetchall()
    assert json.loads(row_links) == []  # the row: nothing to rewrite every pack
    assert list(p.links) == ids == distill.episodes_of(e, p.id)  # the read joins them
    assert e.require(p.id).value.endswith(f"{len(ids)} readings over 32 s")


def test_a_hash_embedders_batch_is_bit_for_bit_its_one_by_one_vectors() -> None:
    rng = random.Random(11)
    alphabet = "abcdefghij XYZ 0123456789.,:{}\"\t\n\u00e9\u0130\u03a3\u3000-_/"
    texts = ["", " ", "\t\n", "a", "x" * 5000, "word " * 4000]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 120)))
              for _ in range(3000)]  # fmt: skip
    texts += [json.dumps({"t": round(rng.gauss(21, 3), 2)}) + f" temp{k % 9} t" for k in range(500)]
    for dim in (64, 256, 384):
        e = HashEmbedder(dim)
        one = np.stack([e.embed(t) for t in texts])
        for size in (1, 8, 333, len(texts)):
            many = np.concatenate([e.embed_many(texts[k : k + size])
                                   for k in range(0, len(texts), size)])  # fmt: skip
            assert many.dtype == np.float32 and many.tobytes() == one.tobytes()
    assert HashEmbedder(8).embed_many([]).shape == (0, 8)


def test_the_pack_entry_is_the_deterministic_cbor_of_its_plain_map() -> None:
    rng = random.Random(13)
    for _ in range(500):
        n = rng.choice([0, 1, 8, 23, 24, 300])
        adm = [packaudit.Admission(rng.randbytes(16), rng.randbytes(32), rng.randrange(-30, 70),
                                   rng.randrange(-1, 400), rng.randrange(5), rng.randrange(-1, 3),
                                   rng.randrange(-1, 70000), rng.randrange(2))
               for _ in range(n)]  # fmt: skip
        gates = [[rng.randrange(0, 1 << 17) for _ in range(10)] for _ in range(rng.randrange(3))]
        body = packaudit.PackBody("ab" * 8, "cd" * 8, gates, [[65536] * 7],
                                  ["device record: x" * rng.randrange(3)], adm,
                                  [("f" * 32, repr(rng.random()), "1.5")])  # fmt: skip
        plain = {"device": body.device, "kid": body.kid, "gate_mode": "fixed",
                 "gates": gates, "scores": [[65536] * 7], "reasons": list(body.reasons),
                 "admissions": [[a.memory_id, a.hash, a.gate, a.scores, a.state, a.reason,
                                 a.pattern, a.agrees] for a in adm],
                 "patterns": [list(p) for p in body.patterns]}  # fmt: skip
        encoded = packaudit.encode(body)
        assert encoded == cbor.encode(plain)
        assert cbor.decode_strict(encoded) == plain
        assert list(packaudit.decode(encoded).admissions) == adm
    bad = packaudit.PackBody("d", "k", [], [], [], [packaudit.Admission(b"x", bytes(32), 0)], [])
    with pytest.raises(HirmemError, match="16-byte id"):
        packaudit.encode(bad)
    with pytest.raises(HirmemError, match="longer than 512"):
        packaudit.encode(dataclasses.replace(bad, admissions=[], reasons=["r" * 513]))
    with pytest.raises(ValueError):
        packaudit.encode(dataclasses.replace(bad, admissions=[], patterns=[("p", "x", "1")]))
    # 1.0 and True equal 1 (as dict keys too): refused, whether a small reference or a
    # gate row whose whole-number twin was encoded (and remembered) before
    ok = packaudit.Admission(bytes(16), bytes(32), 0)
    packaudit.encode(dataclasses.replace(bad, admissions=[ok], gates=[[1] * 10]))
    for odd in (1.0, True, None, "1", [1]):
        with pytest.raises(HirmemError, match="whole numbers"):
            packaudit.encode(dataclasses.replace(bad, admissions=[ok._replace(state=odd)]))  # type: ignore[arg-type]
        with pytest.raises(HirmemError, match="whole numbers"):
            packaudit.encode(dataclasses.replace(bad, admissions=[], gates=[[odd] + [1] * 9]))  # type: ignore[list-item]


def test_a_packs_byte_columns_are_stored_and_read_back_as_bytes() -> None:
    """The pack path binds its byte values as bytearrays (sqlite3 binds those without its
    adapter lookup): they must still land as BLOBs (bytea) and come back as ``bytes``
    equal to what the device sent, and the audit entry's body and links too."""
    e = MemoryEngine(":memory:", clock=Clock())
    recs = _records(random.Random(23), 8, corrupt=False)
    admit_pack(e, recs, DEV, KEY.kid, GENESIS)
    sqlite = e.store.pg is None
    blobs = ("payload", "context", "hash", "prev_hash")
    with e.store.reading() as db:
        rows = db.execute(
            f"SELECT m.id, {', '.join('m.' + c for c in blobs)}, e.vector FROM memories m "
            "JOIN embeddings e ON e.memory = m.rowid ORDER BY m.rowid").fetchall()  # fmt: skip
        audit = db.execute("SELECT detail, prev, hash FROM audit ORDER BY seq").fetchall()
        kinds = set()
        if sqlite:  # (PostgreSQL's columns are typed: bytea)
            kinds = {tuple(r) for r in db.execute(
                f"SELECT {', '.join(f'typeof(m.{c})' for c in blobs)}, typeof(e.vector) "
                "FROM memories m JOIN embeddings e ON e.memory = m.rowid")}  # fmt: skip
            kinds |= {tuple(r) for r in db.execute(
                "SELECT typeof(detail), typeof(prev), typeof(hash) FROM audit")}  # fmt: skip
    by_id = {r.id.hex(): r for r in recs}
    episodes = [r for r in rows if r[0] in by_id]
    assert len(episodes) == len(recs)
    for mid, payload, context, digest, prev, vector in episodes:
        rec = by_id[mid]
        assert (payload, context, digest, prev) == (rec.payload, rec.context, rec.hash,
                                                    rec.prev_hash)  # fmt: skip
        seen = describe(rec.payload, rec.source)
        text = memory_text(rec.payload, seen.subject, seen.attribute, seen.value)
        assert vector == e.embedder.embed(text).astype(np.float32).tobytes()
    for row in [*rows, *audit]:
        assert all(type(v) is bytes for v in row[1:] if not isinstance(v, str)), row
    assert e.store.hash_of(recs[0].id.hex()) == recs[0].hash
    if sqlite:
        assert kinds == {("blob",) * 5, ("blob",) * 3}
    assert e.verify_audit().ok


# -- tamper evidence on rows admitted with their pack ----------------------------------
def _followed(path: Path, tmp: Path) -> tuple[list[Record], str]:
    """A daemon store's packs followed into a file store: (the records, a domination
    record's id)."""
    store = DaemonStore(tmp / "intake.db")
    store.register_device(DEV, KEY.public.raw, "tamper")
    rng = random.Random(17)
    prev, records = GENESIS, []
    for p in range(6):
        fixed = _records(rng, 8, 8 * p + 1, prev, corrupt=False)  # a pack's first record
        pack = sign_pack(KEY, PackKind.MEMORY, DEV, (1 << 32) | (p + 1), prev,
                         int(T0 * 1000) + p, fixed)  # fmt: skip
        assert store.take_pack(DEV, pack.encoded).status == "accepted"
        prev = pack.hash
        records += fixed
    e = MemoryEngine(path, clock=Clock())
    follow_intake(e, store, limit=4)
    assert e.verify_audit().ok
    bad = next(m for m in e.store.select("permanent = 1"))
    e.close()
    store.close()
    return records, bad.id


def _attack(path: Path, stmt: str, params: tuple[object, ...]) -> None:
    db = sqlite3.connect(path)
    for name in TRIGGERS:
        db.execute(f"DROP TRIGGER IF EXISTS {name}")
    db.execute(stmt, params)
    for sql in TRIGGERS.values():
        db.execute(sql)
    db.commit()
    db.close()


def _problems(path: Path) -> list[str]:
    e = MemoryEngine(path, clock=Clock(T0 + 100))
    r = e.verify_audit()
    e.close()
    assert not r.ok
    return list(r.problems)


def test_a_packed_rows_payload_rewritten_with_its_hash_is_named(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite"
    records, _ = _followed(path, tmp_path)
    rec = records[13]
    forged = b'{"sensor": "temp1", "t": 99.0}'
    digest = record_hash(rec.id, forged, rec.source, rec.timestamp, rec.context, rec.prev_hash)
    _attack(path, "UPDATE memories SET payload = ?, hash = ? WHERE id = ?",
            (forged, digest, rec.id.hex()))  # fmt: skip
    assert any(rec.id.hex() in p and "rewritten together with its hash" in p
               for p in _problems(path))  # fmt: skip


def test_a_packed_rows_payload_rewritten_alone_is_named(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite"
    records, _ = _followed(path, tmp_path)
    rec = records[30]
    _attack(path, "UPDATE memories SET payload = ? WHERE id = ?", (b"forged", rec.id.hex()))
    assert any(rec.id.hex() in p and "does not match its hash" in p for p in _problems(path))


@pytest.mark.parametrize("stmt", [
    "DELETE FROM admissions WHERE memory = (SELECT rowid FROM memories WHERE id = ?)",
    "UPDATE admissions SET pos = pos + 1 WHERE memory = (SELECT rowid FROM memories WHERE id = ?)",
    "UPDATE admissions SET seq = 1 WHERE memory = (SELECT rowid FROM memories WHERE id = ?)",
])  # fmt: skip
def test_a_packed_row_pointed_away_from_its_admission_is_named(
    tmp_path: Path, stmt: str
) -> None:
    path = tmp_path / "m.sqlite"
    records, _ = _followed(path, tmp_path)
    mid = records[20].id.hex()
    _attack(path, stmt, (mid,))
    assert any(mid in p and "no capture record" in p for p in _problems(path))


def test_a_packed_rows_released_permanent_quarantine_is_named(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite"
    _, bad = _followed(path, tmp_path)
    _attack(path, "UPDATE memories SET permanent = 0, state = ? WHERE id = ?",
            (int(State.CANDIDATE), bad))  # fmt: skip
    assert any(bad in p and "permanent quarantine" in p for p in _problems(path))


def test_a_memorys_history_shows_its_packs_admission(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite"
    records, _ = _followed(path, tmp_path)
    e = MemoryEngine(path, clock=Clock(T0 + 100))
    rec = records[9]
    [entry] = [r for r in e.audit.records(rec.id.hex()) if r.action == packaudit.ACTION]
    body = packaudit.decode(entry.detail)
    [mine] = [a for a in body.admissions if a.memory_id == rec.id]
    assert mine.hash == rec.hash and mine.state == int(e.require(rec.id.hex()).state)
    assert entry.actor == f"intake:{DEV.hex()}"
    e.close()


def test_an_index_loaded_before_the_packs_ranks_as_one_loaded_after(tmp_path: Path) -> None:
    """Rows a pack inserts and patterns it steps reach a recall index already loaded
    (the daemon's) exactly as a fresh load of the file would hold them."""
    path = tmp_path / "m.sqlite"
    clock = Clock()
    e = MemoryEngine(path, clock=clock)
    assert e.recall("temp0", k=3, touch=False) == []  # the index is loaded, empty
    rng = random.Random(23)
    prev = GENESIS
    for p in range(12):
        clock.t = T0 + 60 * p
        recs = _records(rng, 8, 8 * p + 1, prev, corrupt=False)
        admit_pack(e, recs, DEV, KEY.kid, prev)
        prev = recs[-1].hash
    queries = ["temp0 t 21.3", "temp1 readings", "close v3 open v4 success", "note from the line"]
    live = [[(h.id, h.score) for h in hits] for hits in e.recall_batch(queries, k=8, touch=False)]
    e.close()
    fresh = MemoryEngine(path, clock=Clock(clock.t))
    again = [[(h.id, h.score) for h in hits]
             for hits in fresh.recall_batch(queries, k=8, touch=False)]  # fmt: skip
    assert live == again and all(live)
    assert any(fresh.require(mid).kind == "pattern" for hits in live for mid, _ in hits)
    fresh.close()


def test_a_payload_read_once_is_described_as_its_bytes_are() -> None:
    """describe_parsed of read_payload's object is describe of the payload's bytes, over
    thousands of payloads near each form: readings (counters, booleans, NaN, a sensor
    key or none), facts whole and in part, actions, keys twice, broken UTF-8, non-objects."""
    from hirmem.memory.observe import describe_parsed
    from hirmem.protocol.records import read_payload

    parts = ['"t": 21.5', '"n": 3', '"seq": 9', '"ok": true', '"t": NaN', '"t": 1e999',
             '"sensor": "Temp 0"', '"sensor": [1]', '"subject": "Door"', '"attribute": "open"',
             '"value": 1', '"value": "Yes"', '"negated": true', '"action": "open V4"',
             '"action": ["a", "b"]', '"action": []', '"outcome": "Success"', '"outcome": 1',
             '"result": "ok"', '"x": {"y": 2}', '"t": -4']  # fmt: skip
    rng = random.Random(1313)
    forms = set()
    for _ in range(4000):
        body = ", ".join(rng.choice(parts) for _ in range(rng.randrange(6)))
        shape = rng.choice(["{%s}", " {%s}\n", "[%s]", "%s", "{%s", "note %s"])
        payload = (shape % body).encode() + (b"\xff" if rng.random() < 0.03 else b"")
        source = rng.choice(["", "bus/cam", "temp7"])
        seen = describe_parsed(read_payload(payload)[1], source)
        assert seen == describe(payload, source), payload
        forms.add(seen.kind)
    assert forms == {"fact", "reading", "action"}


def test_a_followed_packs_payloads_are_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Readings the daemon checked are described and given bit 7 from one parse of each
    payload (read_payload), not one parse per reader. (An action's payload is read once
    more, by distillation, for its result.)"""
    store = DaemonStore(":memory:")
    store.register_device(DEV, KEY.public.raw)
    recs = _records(random.Random(8), 24, corrupt=False)
    pack = sign_pack(KEY, PackKind.MEMORY, DEV, (1 << 32) | 1, GENESIS, int(T0 * 1000), recs)
    assert store.take_pack(DEV, pack.encoded).status == "accepted"
    texts = {r.payload.decode() for r in recs if r.payload.startswith(b'{"sensor"')}
    parsed: list[str] = []
    loads = json.loads

    def counting(text: Any, *args: Any, **kwargs: Any) -> Any:
        if text in texts:
            parsed.append(text)
        return loads(text, *args, **kwargs)

    strict = records._STRICT_JSON  # read_payload's own decoder (no json.loads per call)
    decode = strict.decode

    def counting_strict(text: str) -> Any:
        if text in texts:
            parsed.append(text)
        return decode(text)

    monkeypatch.setattr(json, "loads", counting)
    monkeypatch.setattr(strict, "decode", counting_strict)
    e = MemoryEngine(":memory:", clock=Clock())
    got = follow_intake(e, store)
    assert got.admitted + got.quarantined == len(recs)
    held = [r.payload.decode() for r in recs if r.payload.decode() in texts]
    assert sorted(parsed) == sorted(held)
    e.close()
    store.close()


def test_open_distillates_read_at_once_are_those_read_one_by_one() -> None:
    """read_open_many (a pack's sensors in one statement) gives each key the open
    distillate _read_open finds alone: for keys open, closed (windows that closed by
    count and time) and never seen, of every form, on another device too."""
    config = MemoryConfig(distill_window_s=200.0, distill_max_episodes=11)
    e = MemoryEngine(":memory:", config, clock=Clock())
    records = _records(random.Random(17), 240, corrupt=False)
    link = GENESIS
    for p in range(0, len(records), 8):
        e.clock.t = T0 + 30 * p  # type: ignore[attr-defined]
        admit_pack(e, records[p : p + 8], DEV, KEY.kid, link)
        link = records[p + 7].hash
    with e.store.reading() as db:
        held = [tuple(str(x) for x in r) for r in db.execute(
            "SELECT form, device, subject, attribute, value_key FROM distillates")]  # fmt: skip
    assert any(r[0] == "reading" for r in held) and any(r[0] == "action" for r in held)
    keys = {tuple(k) for k in held} | {("reading", DEV.hex(), "temp9", "t", ""),
                                        ("reading", "00" * 8, "temp0", "t", ""),
                                        ("action", DEV.hex(), "nothing", "outcome", "")}
    read: distill.Read = {}
    distill.read_open_many(e, keys, read)  # type: ignore[arg-type]
    assert read.keys() == keys
    opened = 0
    for key in keys:
        alone = distill._read_open(e, key, None, keep=False)  # type: ignore[arg-type]
        assert read[key] == alone, key  # type: ignore[index]
        opened += alone is not None
    assert 0 < opened < len(keys)
    e.close()


def _cache_is_the_rows(e: MemoryEngine) -> int:
    """Every key the open-distillate cache holds, against its row read afresh; how many."""
    cache = distill.open_cache(e)
    held = dict(cache.rows)
    for key, d in held.items():
        cache.rows.clear()
        assert distill._read_open(e, key, None, keep=False) == d, key
    cache.rows.clear()
    cache.rows.update(held)
    return len(held)


def _admit_all(e: MemoryEngine, records: list[Record], undo: frozenset[int] = frozenset()) -> None:
    """``records`` in packs of 8 (the clock moving on), each pack of ``undo`` first
    admitted in a transaction that is then rolled back."""
    link = GENESIS
    for p in range(0, len(records), 8):
        e.clock.t = T0 + 30 * p  # type: ignore[attr-defined]
        if p in undo:
            with pytest.raises(RuntimeError, match="undone"), e.store.transaction():
                admit_pack(e, records[p : p + 8], DEV, KEY.kid, link)
                raise RuntimeError("undone")
        admit_pack(e, records[p : p + 8], DEV, KEY.kid, link)
        link = records[p + 7].hash


@pytest.mark.parametrize("seed", [3, 4])
def test_the_open_distillate_cache_holds_what_the_rows_hold(seed: int) -> None:
    """Across packs the writer keeps its sensors' open distillates: windows closing by
    count and time, patterns born, actions; after every pack each cached key is its row."""
    config = MemoryConfig(distill_window_s=200.0, distill_max_episodes=11)
    e = MemoryEngine(":memory:", config, clock=Clock())
    records = _records(random.Random(seed), 320, corrupt=False)
    link = GENESIS
    checked = 0
    for p in range(0, len(records), 8):
        e.clock.t = T0 + 30 * p  # type: ignore[attr-defined]
        admit_pack(e, records[p : p + 8], DEV, KEY.kid, link)
        link = records[p + 7].hash
        checked += _cache_is_the_rows(e)
    assert checked > 100
    e.close()


def test_a_rolled_back_pack_leaves_no_trace_in_the_distillate_cache() -> None:
    """A pack whose transaction rolls back after its distillation: the statistics it
    added in the cached objects are dropped with it; the same packs admitted again end
    as on an engine that never saw the undone ones."""
    config = MemoryConfig(distill_window_s=200.0, distill_max_episodes=11)
    records = _records(random.Random(5), 240, corrupt=False)
    plain = MemoryEngine(":memory:", config, clock=Clock())
    _admit_all(plain, records)
    undone = MemoryEngine(":memory:", config, clock=Clock())
    drops = distill.open_cache(undone).drops
    _admit_all(undone, records, undo=frozenset({40, 48, 120, 200}))
    assert distill.open_cache(undone).drops >= drops + 4
    assert _stats(undone) == _stats(plain)
    assert _rows(undone) == _rows(plain)
    assert _cache_is_the_rows(undone) > 0
    assert undone.verify_audit().ok
    plain.close()
    undone.close()


def test_another_writer_of_the_file_drops_the_distillate_cache(tmp_path: Path) -> None:
    """Two engines on one file take turns admitting one device's packs: each sees the
    other's distillation (its cache is dropped when the file moved under it), and the
    file ends as one engine alone leaves it."""
    config = MemoryConfig(distill_window_s=200.0, distill_max_episodes=11)
    records = _records(random.Random(6), 160, corrupt=False)
    alone = MemoryEngine(tmp_path / "alone.sqlite", config, clock=Clock())
    _admit_all(alone, records)
    a = MemoryEngine(tmp_path / "two.sqlite", config, clock=Clock())
    b = MemoryEngine(tmp_path / "two.sqlite", config, clock=Clock())
    drops = distill.open_cache(a).drops, distill.open_cache(b).drops
    link = GENESIS
    checked = 0
    for p in range(0, len(records), 8):
        e = (a, b)[(p // 8) % 2]
        e.clock.t = T0 + 30 * p  # type: ignore[attr-defined]
        admit_pack(e, records[p : p + 8], DEV, KEY.kid, link)
        link = records[p + 7].hash
        checked += _cache_is_the_rows(e)  # the writer's own, right after its pack
    assert checked > 20
    turns = len(records) // 16  # each engine's packs, every one after the other's
    assert distill.open_cache(a).drops - drops[0] >= turns - 1
    assert distill.open_cache(b).drops - drops[1] >= turns
    assert _stats(a) == _stats(alone)
    for e in (alone, a, b):
        e.close()


def test_a_baseline_is_the_statistics_as_they_were_read() -> None:
    """The baselines baseline() hands out stay as they were when read: later packs of the
    sensor (distilled into the cached distillate) do not change them."""
    e = MemoryEngine(":memory:", MemoryConfig(), clock=Clock())
    records = _records(random.Random(8), 160, corrupt=False)
    _admit_all(e, records[:80])
    held = e.store.db.execute(
        "SELECT subject FROM distillates WHERE form = 'reading' AND memory_id != '' "
        "AND open = 1").fetchall()  # fmt: skip
    assert held
    got = {str(r[0]): distill.baseline(e, DEV.hex(), str(r[0]), "t") for r in held}
    assert any(s is not None for s in got.values())
    then = {k: None if s is None else dataclasses.replace(s) for k, s in got.items()}
    link = records[79].hash
    for p in range(80, len(records), 8):
        e.clock.t = T0 + 30 * p  # type: ignore[attr-defined]
        admit_pack(e, records[p : p + 8], DEV, KEY.kid, link)
        link = records[p + 7].hash
    assert got == then
    assert any(distill.baseline(e, DEV.hex(), k, "t") != s for k, s in then.items())
    e.close()


def _readings_of(device: bytes, first: int, n: int, link: bytes) -> list[Record]:
    """GREEN readings of one sensor, numbered from ``first`` in boot 0."""
    return chained(device, first, ({"sensor": "temp0", "t": 21.0 + k / 100}
                                   for k in range(first, first + n)), link, boot=0)  # fmt: skip


def test_a_device_named_as_the_host_never_takes_an_id_the_host_gives() -> None:
    """A device whose id is the host's id prefix numbers its records (boot 0) in the very
    space the host numbers the patterns it derives: its records are conflicts (the space
    is reserved), never a failed insert that would stop the other devices' packs; and an
    id already held there (a store written before this rule) is skipped, not reused."""
    from hirmem.memory.engine import HOST_ID

    clock = Clock()
    engine = MemoryEngine(":memory:", MemoryConfig(), clock=clock)
    rogue = _readings_of(HOST_ID, 1, 16, GENESIS)
    for p in range(0, 16, 8):
        clock.t = T0 + p
        got = admit_pack(engine, rogue[p : p + 8], HOST_ID, KEY.kid,
                         GENESIS if p == 0 else rogue[p - 1].hash)  # fmt: skip
        assert got.conflicts == [r.id.hex() for r in rogue[p : p + 8]]
        assert not (got.admitted or got.quarantined)
    assert engine.store.count("1 = 1") == 0
    honest = _readings_of(DEV, 1, 8, GENESIS)
    clock.t = T0 + 100
    got = admit_pack(engine, honest, DEV, KEY.kid, GENESIS)  # a pattern is born for DEV
    assert sorted(got.admitted + got.quarantined) == sorted(r.id.hex() for r in honest)
    first = engine.store.select("kind IN ('pattern', 'procedure')")
    assert [m.id for m in first] == [(HOST_ID + (1).to_bytes(8, "big")).hex()]
    # a row already holding the host's next id (written before the rule): skipped
    engine.store.insert(dataclasses.replace(first[0], id=(HOST_ID + (2).to_bytes(8, "big")).hex()))
    other = bytes.fromhex("5e5e5e5e5e5e5e02")
    clock.t = T0 + 200
    admit_pack(engine, _readings_of(other, 1, 8, GENESIS), other, KEY.kid, GENESIS)
    ids = {m.id for m in engine.store.select("kind IN ('pattern', 'procedure')")}
    assert (HOST_ID + (3).to_bytes(8, "big")).hex() in ids
