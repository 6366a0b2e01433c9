"""A follow batch admitted at once (issue 13, speed at fleet scale): ``admit_packs``
reads every pack's records first (checks, payloads, one look-up of held ids, one
embedding batch), then admits each pack in order. The oracle is ``admit_pack`` called
pack by pack on another engine: the same rows, to the last column and the audit seq,
the same distillates, the same reports and the same audit chain, over packs of several
devices with stated facts, re-sent packs, records re-sent within the batch and ids
reused for other records (conflicts). On SQLite and on PostgreSQL."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from hirmem.memory.config import MemoryConfig
from hirmem.memory.engine import HOST_ID, MemoryEngine
from hirmem.memory.intake import PackIn, admit_pack, admit_packs
from hirmem.protocol.keys import derive_test_key
from hirmem.protocol.records import GENESIS, Record, record_id
from memory_backends import memory_backend, memory_server  # noqa: F401  (fixtures)
from test_memory_admit_pack import CONTEXT, T0, Clock, _payload, _rows, _stats

pytestmark = pytest.mark.usefixtures("memory_backend")

DEVICES = [bytes.fromhex(f"7a7a7a7a7a7a7a{d:02x}") for d in range(3)]
KEYS = [derive_test_key(f"admit batch {d.hex()}") for d in DEVICES]


def _fact(rng: random.Random, k: int) -> bytes:
    value = rng.choice(["open", "closed", "open"])
    return f'{{"subject": "door{k % 2}", "attribute": "state", "value": "{value}"}}'.encode()


def _batch(rng: random.Random, packs_each: int) -> list[PackIn]:
    """Packs of three devices, interleaved; some re-sent whole, some with a record of an
    earlier pack again, some reusing an earlier record's id for another record."""
    out: list[PackIn] = []
    seq = [0] * len(DEVICES)
    link = [GENESIS] * len(DEVICES)
    sent: list[Record] = []
    for _ in range(packs_each):
        for d, dev in enumerate(DEVICES):
            recs = []
            prev = link[d]
            for _ in range(rng.randrange(1, 9)):
                seq[d] += 1
                body = _fact(rng, seq[d]) if rng.random() < 0.1 else _payload(rng, seq[d])
                rec = Record.capture(record_id(dev, 1, seq[d]), body, rng.choice(["cam", ""]),
                                     int(T0 * 1000) + 1000 * seq[d], CONTEXT,
                                     rng.choice([0x0FFF, 0x0FFF, 0x0C7F, 0x07FF]),
                                     rng.choice([0x10000, 0xC000]), 0xE666, 0x8000, link[d])
                recs.append(rec)
                link[d] = rec.hash
            if sent and rng.random() < 0.15:  # an earlier record again, as it was
                recs.append(rng.choice(sent))
            if sent and rng.random() < 0.1:  # an earlier id, another record
                old = rng.choice(sent)
                recs.append(dataclasses.replace(old, payload=old.payload + b" "))
            sent += recs
            out.append(PackIn(recs, dev, KEYS[d].kid, prev))
            if rng.random() < 0.1:  # the pack re-sent
                out.append(out[-1])
    return out


def _reports(got: list[Any]) -> list[tuple[Any, ...]]:
    return [(r.admitted, r.quarantined, r.duplicates, r.conflicts, r.mismatched, r.disagreed)
            for r in got]  # fmt: skip


def _chain(e: MemoryEngine) -> list[tuple[Any, ...]]:
    return [(r.seq, r.action, r.memory_id, r.actor, r.detail, r.hash) for r in e.audit.records()]


@pytest.mark.parametrize("seed", [1, 2])
def test_a_batch_admits_what_its_packs_admit_one_after_the_other(seed: int) -> None:
    config = MemoryConfig(distill_window_s=200.0, distill_max_episodes=11)
    rng = random.Random(seed)
    batches = [_batch(rng, 6) for _ in range(3)]
    a = MemoryEngine(":memory:", config, clock=Clock())
    b = MemoryEngine(":memory:", config, clock=Clock())
    got_a, got_b = [], []
    for batch in batches:
        got_a += admit_packs(a, batch)
        got_b += [admit_pack(b, p.records, p.device_id, p.kid, p.prev) for p in batch]
    assert _reports(got_a) == _reports(got_b)
    assert sum(len(r.duplicates) for r in got_a) and sum(len(r.conflicts) for r in got_a)
    assert a.store.count("kind = 'fact'") and a.store.count("kind = 'pattern'")
    rows_a, rows_b = _rows(a), _rows(b)
    assert list(rows_a) == list(rows_b)
    for mid, row in rows_a.items():
        assert row == rows_b[mid], mid
    assert _stats(a) == _stats(b)
    assert _chain(a) == _chain(b)
    assert a.verify_audit().ok
    for e in (a, b):
        e.close()


def test_an_id_in_the_hosts_space_is_looked_up_at_its_packs_turn() -> None:
    """A device whose record ids fall in the host's own id space (the ids it gives the
    patterns it derives, here a device named as the host, boot 0 and 1): every such
    record is a conflict (the space is reserved), in the batch as pack by pack."""
    config = MemoryConfig()
    device = HOST_ID
    key = derive_test_key("admit batch host space")
    rng = random.Random(3)
    packs: list[PackIn] = []
    link = GENESIS
    for p in range(8):
        recs = []
        prev = link
        for j in range(8):
            k = 8 * p + j + 1
            rid = record_id(device, 0, j + 1) if p == 6 and j < 2 else record_id(device, 1, k)
            rec = Record.capture(rid, _payload(rng, k), "cam",
                                 int(T0 * 1000) + 1000 * k, CONTEXT, 0x0FFF, 0x10000, 0xE666,
                                 0x8000, link)  # fmt: skip
            recs.append(rec)
            link = rec.hash
        packs.append(PackIn(recs, device, key.kid, prev))
    a = MemoryEngine(":memory:", config, clock=Clock())
    b = MemoryEngine(":memory:", config, clock=Clock())
    got_a = admit_packs(a, packs)
    got_b = [admit_pack(b, p.records, p.device_id, p.kid, p.prev) for p in packs]
    assert _reports(got_a) == _reports(got_b)
    assert sum(len(r.conflicts) for r in got_a)  # the host's pattern ids came first
    assert _rows(a) == _rows(b)
    for e in (a, b):
        e.close()
