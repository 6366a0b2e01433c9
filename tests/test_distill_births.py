"""A pattern's birth (issue 13, distillation on the pack path): the memory distillation
derives is audited as the one-by-one path would audit it — captured, derived from each
of its episodes, candidate (then consolidated) — and its row is written once, in its
final state.

The oracle is the engine's one-by-one primitives, replayed on a second engine fed the
same records: ``capture`` into the working ring, the ``derive`` records, then
``transition`` after ``transition``. Both stores must end with the same rows and the
same audit records (the capture record of a pattern now names its device). On SQLite
and on PostgreSQL.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from hirmem.memory import distill
from hirmem.memory.config import MemoryConfig
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.intake import admit_pack
from hirmem.memory.model import Memory, State
from hirmem.memory.store import COLUMNS
from hirmem.protocol.records import GENESIS, Record
from memory_backends import memory_backend, memory_server  # noqa: F401  (fixtures)
from record_chains import chained

pytestmark = pytest.mark.usefixtures("memory_backend")

DEV = bytes.fromhex("b1b1b1b1b1b1b101")
T0 = 1_790_000_000.0


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _pack(first: int, n: int, link: bytes, sensors: int = 3) -> list[Record]:
    return chained(DEV, first, ({"sensor": f"temp{k % sensors}",
                                 "t": round(21 + (k * 7 % 13) / 10, 2)}
                                for k in range(first, first + n)), link)  # fmt: skip


def _one_by_one_create(
    engine: MemoryEngine, d: distill.Distillate, pack: distill.PackDistillation | None
) -> Memory:
    """A pattern's birth as the engine wrote it before it was written once: captured
    into the working ring, then each derive record, then one transition at a time."""
    episodes = distill.episodes_of_row(engine, d.rowid)
    if pack is not None:
        episodes += [mid for rowid, mid in pack.links if rowid == d.rowid]
    links = ([d.stats.prev] if d.stats.prev else []) + episodes
    kind = "procedure" if d.form == "action" else "pattern"
    m = engine.capture(distill._payload(d), "distill", kind=kind, subject=d.subject,
                       attribute=d.attribute, value=distill.statement(d),
                       links=links[: len(links) - len(episodes)])  # fmt: skip
    distill._save_stats(engine, d, m.id)
    now = engine.clock()
    m = distill._scored(m, d.stats, engine, device=d.device,
                        strength=d.stats.sum_w / d.stats.n, last_access=now, decayed_at=now)
    seqs = engine.audit.append_many([
        ("derive", m.id, {"activity": "distill", "form": d.form, "wasDerivedFrom": source,
                          "agrees": 1, "rn": m.rn, "w": m.w}) for source in links], ts=now)
    m = m.replace(audit_seq=seqs[-1])
    m = engine.transition(m, State.CANDIDATE, f"distilled from {len(episodes)} episodes")
    if m.rn >= engine.config.green and m.h > 0:
        m = engine.transition(m, State.CONSOLIDATED, "distilled pattern: Rn ≥ green")
    return m


def _feed(engine: MemoryEngine, clock: Clock) -> None:
    """Three packs of a device's readings (patterns born in the first, stepped after),
    then facts admitted one by one (a state pattern born on the admit path)."""
    link = GENESIS
    for p in range(3):
        clock.t = T0 + 60 * p
        recs = _pack(1 + 6 * p, 6, link)
        admit_pack(engine, recs, DEV, b"kid-births", link)
        link = recs[-1].hash
    for k in range(3):
        clock.t = T0 + 300 + k
        engine.admit(json.dumps({"subject": "pump 3", "attribute": "mode", "value": "auto"}),
                     "scada")  # fmt: skip


def _rows(engine: MemoryEngine) -> list[tuple[Any, ...]]:
    names = ", ".join(c for c in COLUMNS if c != "embedding")
    return [tuple(r) for r in engine.store.db.execute(
        f"SELECT rowid, {names} FROM memories ORDER BY rowid").fetchall()]  # fmt: skip


def _audit(engine: MemoryEngine) -> list[tuple[Any, ...]]:
    out = []
    for x in engine.audit.records():
        detail = dict(x.detail) if isinstance(x.detail, dict) else x.detail
        if x.action == "capture":
            detail.pop("device", None)  # the birth's capture record names the device now
        out.append((x.seq, x.action, x.memory_id, x.actor, repr(detail)))
    return out


def test_a_birth_is_audited_and_stored_as_the_one_by_one_path_leaves_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    fast = MemoryEngine(":memory:", clock=clock)
    _feed(fast, clock)
    clock.t = T0
    with monkeypatch.context() as patch:
        patch.setattr(distill, "_create", _one_by_one_create)
        slow = MemoryEngine(":memory:", clock=clock)
        _feed(slow, clock)
    born = fast.store.select("kind = 'pattern'")
    assert len(born) == 4  # three sensors and the pump's mode
    assert _rows(fast) == _rows(slow)
    assert _audit(fast) == _audit(slow)
    assert fast.verify_audit().ok and slow.verify_audit().ok
    for m in born:
        assert m.state is State.CONSOLIDATED
        capture = next(x for x in fast.audit.records()
                       if x.memory_id == m.id and x.action == "capture")  # fmt: skip
        assert capture.detail["device"] == (m.device or None)
        assert distill.episodes_of(fast, m.id)  # links resolve to its episodes
    fast.close()
    slow.close()


def test_a_birth_evicts_nothing_from_a_full_working_ring() -> None:
    """A pattern is never a working memory: its birth leaves the ring as it was (the
    capture into the ring made room for it by evicting the least recently accessed)."""
    clock = Clock()
    e = MemoryEngine(":memory:", MemoryConfig(working_capacity=3), clock=clock)
    notes = [e.capture(f"note {k}", "desk").id for k in range(3)]
    clock.t += 1
    admit_pack(e, _pack(1, 2, GENESIS, sensors=1), DEV, b"kid-births", GENESIS)
    assert [m.id for m in e.store.select("kind = 'pattern'")]  # a pattern was born
    assert [m.id for m in e.store.select("state = 0", tail="ORDER BY rowid")] == notes
    assert not [x for x in e.audit.records() if x.action == "evict"]
    assert e.verify_audit().ok
    e.close()
