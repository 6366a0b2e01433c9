"""The daemon store finds a device's records by the range of their ids (issue 13, speed
at fleet scale): no second index of records by device (migration 10 drops it), and every
per-device answer the same as the device column gives, for neighbouring ids and the
last id of all (ff…ff, whose range has no upper end)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from hirmem.daemon.store import MIGRATIONS, Store
from hirmem.protocol.gate import FLAGS_MASK
from hirmem.protocol.keys import derive_test_key
from hirmem.protocol.packs import PackKind, sign_pack
from hirmem.protocol.records import GENESIS, Record, record_id

DEVICES = [bytes.fromhex(h) for h in ("00000000000000ff", "0000000000000100",
                                      "0000000000000101", "fffffffffffffffe",
                                      "ffffffffffffffff")]  # fmt: skip


def _fill(store: Store) -> None:
    for d, dev in enumerate(DEVICES):
        key = derive_test_key(f"device range {d}")
        store.register_device(dev, key.public.raw)
        prev = GENESIS
        for p in range(d + 1):  # a different number of packs (and boots) per device
            link, recs = prev, []
            for k in range(d + 2):
                body = json.dumps({"t": k}).encode()
                rec = Record.capture(record_id(dev, p + 1, k + 1), body, "s", 1_000 + k,
                                     bytes(32), FLAGS_MASK, 0x10000, 0xE666, 0x8000,
                                     link)  # fmt: skip
                recs.append(rec)
                link = rec.hash
            pack = sign_pack(key, PackKind.MEMORY, dev, (1 << 32) | (p + 1), prev, 1_000 + p,
                             recs)  # fmt: skip
            assert store.take_pack(dev, pack.encoded).status == "accepted"
            prev = pack.hash


def _by_column(path: Path) -> dict[bytes, tuple[int, dict[bytes, tuple[int, int]]]]:
    """The oracle: per device, its records' count and boots per pack by the device column."""
    db = sqlite3.connect(path)
    out = {}
    for dev in DEVICES:
        n = db.execute("SELECT count(*) FROM records WHERE device_id = ?", (dev,)).fetchone()[0]
        boots = {bytes(p): (int.from_bytes(lo, "big"), int.from_bytes(hi, "big"))
                 for p, lo, hi in db.execute(
                     "SELECT pack_id, min(substr(id, 9, 4)), max(substr(id, 9, 4)) "
                     "FROM records WHERE device_id = ? GROUP BY pack_id", (dev,))}  # fmt: skip
        out[dev] = (int(n), boots)
    db.close()
    return out


def _answers(store: Store) -> dict[bytes, tuple[int, dict[bytes, tuple[int, int]]]]:
    return {dev: (store.count_records(dev), store.pack_boots(dev)) for dev in DEVICES}


def test_a_devices_records_are_found_by_their_ids_range(tmp_path: Path) -> None:
    path = tmp_path / "intake.db"
    store = Store(path)
    _fill(store)
    assert _answers(store) == _by_column(path)
    assert store.figures().records == {dev: n for dev, (n, _) in _by_column(path).items()}
    assert sum(n for n, _ in _answers(store).values()) == store.count_records()
    with store._lock:  # the plan: the primary key's index, no scan of the table
        plan = " ".join(str(r[3]) for r in store._db.execute(
            "EXPLAIN QUERY PLAN SELECT count(*) FROM records WHERE id >= ? AND id < ? "
            "AND device_id = ?", (DEVICES[0], DEVICES[1], DEVICES[0])))  # fmt: skip
    assert "SEARCH records USING INDEX sqlite_autoindex_records_1" in plan
    store.close()


def test_an_older_store_loses_the_device_index_and_answers_alike(tmp_path: Path) -> None:
    path = tmp_path / "intake.db"
    store = Store(path)
    _fill(store)
    before = _answers(store)
    store.close()
    db = sqlite3.connect(path)  # back to version 9, as an older hirmem left it
    db.execute("CREATE INDEX records_device ON records(device_id)")
    db.execute(f"PRAGMA user_version = {len(MIGRATIONS) - 1}")
    db.commit()
    db.close()
    store = Store(path)
    with store._lock:
        indexes = {str(r[1]) for r in store._db.execute("PRAGMA index_list(records)")}
    assert "records_device" not in indexes
    assert _answers(store) == before == _by_column(path)
    store.close()
