"""The daemon store's records rows as the intake writes them.

A record's row is its id, device, pack, index in the pack and hash (schema 11: its
fields are the pack's bytes as signed, not a second copy), bound with the device and
the pack once and the BLOB fields as bytearrays; a pack read by the fast path or by the
strict one gives the same rows, byte for byte and type for type (BLOBs stay BLOBs), in
packs smaller and larger than one INSERT, and ``records`` reads each Record back from
its pack. A store of schema 10 (every field in the row) keeps its rows and cursors
through the migration. The decoded-pack cache keeps the newest packs, oldest out first.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest

from hirmem.daemon import store as store_module
from hirmem.daemon.store import RECORDS_PER_INSERT, U64_OFFSET, Store, StoreError
from hirmem.protocol.packs import Pack, PackKind, Verified, sign_pack, verify_pack
from hirmem.protocol.records import GENESIS, Record, record_id
from test_store import DEV_A, KEY_A, T0

ROW_SQL = (
    "SELECT id, device_id, pack_id, idx, hash, typeof(id), typeof(device_id), "
    "typeof(pack_id), typeof(hash) FROM records ORDER BY rowid"
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
        rows.append((r.id, DEV_A, pack.pack_id, idx, r.hash, *["blob"] * 4))
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


def test_a_store_of_schema_10_keeps_its_records_and_cursors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Schema 10 kept every field of a record in its row; migration 11 keeps only the
    id, place and hash. The records read back are the same, under the same cursors, and
    the intake goes on (a conflict included) after it."""
    made = packs(random.Random(47))
    path = tmp_path / "v10.db"
    with monkeypatch.context() as m:
        m.setattr(store_module, "MIGRATIONS", store_module.MIGRATIONS[:10])
        with Store(path) as old:  # the rows as schema 10's intake wrote them
            old.register_device(DEV_A, KEY_A.public.raw)
            db = old._db
            for pack in made[:3]:
                db.execute("INSERT INTO packs (pack_id, device_id, seq, hash, prev, created, "
                           "received, nrecords, raw) VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?)",
                           (pack.pack_id, DEV_A, pack.seq - U64_OFFSET, pack.hash, pack.prev,
                            pack.created - U64_OFFSET, len(pack.items), pack.encoded))
                for idx, r in enumerate(pack.items):
                    assert isinstance(r, Record)
                    w = r.to_wire()
                    db.execute(f"INSERT INTO records VALUES ({', '.join('?' * 23)})",
                               [w[0], DEV_A, pack.pack_id, idx, *w[1:3],
                                w[3] - U64_OFFSET, *w[4:]])
                db.execute("UPDATE devices SET head_seq = ?, head_hash = ?",
                           (pack.seq - U64_OFFSET, pack.hash))  # fmt: skip
            db.execute("DELETE FROM records WHERE rowid = 2")  # cursors with a gap
            before = []
            for row in db.execute(
                "SELECT rowid, id, payload, source, timestamp, context, flags, h, i, r, f, c, "
                "rn, confidence, provenance, priority, w, state, layer, hash, prev_hash, "
                "pack_id FROM records ORDER BY rowid"
            ):  # fmt: skip
                fields = list(row[1:21])
                fields[3] += U64_OFFSET
                before.append((int(row[0]), Record(*fields), bytes(row[21])))
    assert len(before) == sum(len(p.items) for p in made[:3]) - 1
    assert before[0][1] == made[0].items[0] and before[1][0] == 3
    monkeypatch.setattr(store_module, "_DECODED", OrderedDict())  # read from the bytes
    with Store(path) as store:
        assert store._db.execute("PRAGMA user_version").fetchone()[0] == len(
            store_module.MIGRATIONS)
        columns = [r[1] for r in store._db.execute("PRAGMA table_info(records)")]
        assert columns == ["id", "device_id", "pack_id", "idx", "hash"]
        assert store.records(0, 10_000) == before
        assert store.records(before[5][0], 3) == before[6:9]
        for pack in made[3:]:
            assert store.take_pack(DEV_A, pack.encoded).status == "accepted"
        assert [r for _, r, _ in store.records(0, 10_000)] == [
            r for p in made for r in p.items if r != made[1].items[0]]
        assert store.check_integrity() == []


def test_a_record_row_that_is_not_its_packs_record_is_refused(tmp_path: Path) -> None:
    """records() takes a record's fields from its pack's bytes at the index its row
    names: a row whose index, id or hash does not match that record, or whose pack's
    bytes changed, is an error that says so, never another record's fields."""
    made = packs(random.Random(53))[:2]
    with Store(tmp_path / "rows.db") as store:
        store.register_device(DEV_A, KEY_A.public.raw)
        for pack in made:
            store.take_pack(DEV_A, pack.encoded)
        assert len(store.records()) == 9
        for sql in ("UPDATE records SET idx = idx + 1 WHERE rowid = 3",
                    "UPDATE records SET hash = zeroblob(32) WHERE rowid = 3",
                    "UPDATE records SET idx = 99 WHERE rowid = 3"):  # fmt: skip
            store._db.execute("BEGIN")
            store._db.execute(sql)
            with pytest.raises(StoreError, match="is not record"):
                store.records()
            store._db.execute("ROLLBACK")
        store._db.execute("UPDATE packs SET raw = CAST(raw || x'00' AS BLOB) WHERE seq = ?",
                          (2 - U64_OFFSET,))  # fmt: skip
        with pytest.raises(StoreError, match="changed since it was verified"):
            store.records()
