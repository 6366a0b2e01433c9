"""The daemon store's records rows as the intake writes them.

The verifier hands the store each record's fields as decoded (``Verified.wire``) and the
store binds them as they are, with the device and the pack bound once, the BLOB fields
as bytearrays and the u64 timestamp shifted; a pack the fast path did not read is
written from its Records. Both must give the rows the Records say, byte for byte and
type for type (BLOBs stay BLOBs), in packs smaller and larger than one INSERT. The
decoded-pack cache keeps the newest packs, oldest out first.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest

from hirmem.daemon import store as store_module
from hirmem.daemon.store import RECORDS_PER_INSERT, U64_OFFSET, Store
from hirmem.protocol.packs import Pack, PackKind, Verified, sign_pack, verify_pack
from hirmem.protocol.records import GENESIS, Record, record_id
from test_store import DEV_A, KEY_A, T0

ROW_SQL = (
    "SELECT id, device_id, pack_id, idx, payload, source, timestamp, context, flags, h, i, "
    "r, f, c, rn, confidence, provenance, priority, w, state, layer, hash, prev_hash, "
    "typeof(id), typeof(device_id), typeof(pack_id), typeof(payload), typeof(context), "
    "typeof(hash), typeof(prev_hash) FROM records ORDER BY rowid"
)


def packs(rng: random.Random) -> list[Pack]:
    """Packs of one device with records of every kind of field (u64 timestamps at both
    ends, empty and full payloads, text of multibyte characters), one of them larger
    than one INSERT."""
    out, prev, n = [], GENESIS, 0
    for seq, count in enumerate([1, 8, RECORDS_PER_INSERT + 3, 0, 5], start=1):
        recs, link = [], prev
        for _ in range(count):
            n += 1
            rec = Record.capture(
                record_id(DEV_A, 1, n),
                rng.choice([b"", b"x", rng.randbytes(256), b'{"t": 21.5}']),
                rng.choice(["", "temp0", "é€𝄞" * 5]),
                rng.choice([0, 1, T0 + n, U64_OFFSET - 1, U64_OFFSET, (1 << 64) - 1]),
                rng.randbytes(32), rng.choice([0x0FFF, 0x07FF, 0]), rng.randrange(0x10001),
                rng.randrange(0x10001), rng.randrange(0x10001), link,
            )  # fmt: skip
            recs.append(rec)
            link = rec.hash
        pack = sign_pack(KEY_A, PackKind.MEMORY, DEV_A, seq, prev, T0, recs)
        out.append(pack)
        prev = pack.hash
    return out


def expected(pack: Pack) -> list[tuple[Any, ...]]:
    rows = []
    for idx, r in enumerate(pack.items):
        assert isinstance(r, Record)
        rows.append((r.id, DEV_A, pack.pack_id, idx, r.payload, r.source,
                     r.timestamp - U64_OFFSET, r.context, r.flags, r.h, r.i, r.r, r.f, r.c,
                     r.rn, r.confidence, r.provenance, r.priority, r.w, r.state, r.layer,
                     r.hash, r.prev_hash, *["blob"] * 7))  # fmt: skip
    return rows


@pytest.mark.parametrize("decoded_rows", [True, False])
def test_records_rows_are_the_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      decoded_rows: bool) -> None:  # fmt: skip
    if not decoded_rows:  # as for a pack the strict path read: no decoded rows
        def without_rows(*args: Any, **kw: Any) -> Verified:
            got = verify_pack(*args, **kw)
            return Verified(got.pack, got.duplicate)

        monkeypatch.setattr(store_module, "verify_pack", without_rows)
    made = packs(random.Random(41))
    with Store(tmp_path / "rows.db") as store:
        store.register_device(DEV_A, KEY_A.public.raw)
        answers = [store.take_pack(DEV_A, pack.encoded) for pack in made]
        assert [a.status for a in answers] == ["accepted"] * len(made)
        assert [a.records for a in answers] == [len(p.items) for p in made]
        rows = store._db.execute(ROW_SQL).fetchall()
        assert rows == [row for pack in made for row in expected(pack)]
        assert [rec for rec, _ in store.iter_records()] == [r for p in made for r in p.items]
        kinds = store._db.execute(
            "SELECT DISTINCT typeof(pack_id), typeof(device_id), typeof(hash), typeof(prev), "
            "typeof(raw) FROM packs").fetchall()  # fmt: skip
        assert kinds == [("blob",) * 5]
        assert store.chain_head(DEV_A) is not None
        assert store.check_integrity() == []


def test_the_decoded_pack_cache_keeps_the_newest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "_DECODED", OrderedDict())
    monkeypatch.setattr(store_module, "DECODED_KEPT", 3)
    made = packs(random.Random(43))
    with Store(tmp_path / "cache.db") as store:
        store.register_device(DEV_A, KEY_A.public.raw)
        for pack in made:
            store.take_pack(DEV_A, pack.encoded)
        assert list(store_module._DECODED) == [p.hash for p in made[-3:]]
        here = store.packs_since(0, 10)
        assert [p for _, p in here] == made
        assert all(p is store_module._DECODED[p.hash] for _, p in here[-3:])
