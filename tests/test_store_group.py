"""The daemon store's intake in groups: one executemany per pack, one transaction for the
packs that arrive together, an answer only after its transaction committed.

Record conflicts are checked against a reference of the sequential rule (each record in
order: a new id is stored, an id held with another hash is a conflict) over random packs
that reuse ids from earlier packs and from their own; group commit with threads that
each look for their pack from another connection the moment it is acknowledged; a
failed transaction answers every pack in it with the error and stores none of them.
"""

from __future__ import annotations

import random
import sqlite3
import threading
from pathlib import Path

import pytest

from hirmem.daemon import store as store_module
from hirmem.daemon.store import Store, StoreError
from hirmem.protocol.keys import derive_test_key
from hirmem.protocol.packs import PackKind, read_unverified, sign_pack
from hirmem.protocol.records import GENESIS, Record, record_id
from test_store import DEV_A, KEY_A, T0, Device

CONTEXT = bytes(32)


class Reuser:
    """A device that reuses record ids (lost boot counter), from earlier packs and
    within a pack, with other contents."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.prev = GENESIS
        self.seq = 0
        self.n = 0

    def pack(self) -> tuple[bytes, list[Record]]:
        link, recs = self.prev, []
        for _ in range(self.rng.choice([1, 3, 8])):
            self.n += 1
            capture = self.rng.randrange(1, self.n + 1)  # often an id seen before
            rec = Record.capture(record_id(DEV_A, 1, capture), f"{self.n}".encode(), "s",
                                 T0 + self.n, CONTEXT, 0x0FFF, 0x10000, 0xE666, 0x8000,
                                 link)  # fmt: skip
            recs.append(rec)
            link = rec.hash
        self.seq += 1
        pack = sign_pack(KEY_A, PackKind.MEMORY, DEV_A, self.seq, self.prev, T0, recs)
        self.prev = pack.hash
        return pack.encoded, recs


@pytest.mark.parametrize("grouped", [False, True])
def test_conflicts_follow_the_sequential_rule(tmp_path: Path, grouped: bool) -> None:
    rng = random.Random(5)
    device = Reuser(rng)
    held: dict[bytes, bytes] = {}  # the reference: id -> hash of the record kept
    want_conflicts: list[tuple[bytes, int, bytes]] = []
    with Store(tmp_path / "s.db") as store:
        store.register_device(DEV_A, KEY_A.public.raw)
        packs = [device.pack() for _ in range(120)]
        if grouped:
            answers = []
            for start in range(0, len(packs), 7):
                answers += store.take_packs([(DEV_A, data) for data, _ in packs[start:start + 7]])
        else:
            answers = [store.take_pack(DEV_A, data) for data, _ in packs]
        for (_, recs), answer in zip(packs, answers, strict=True):
            stored, conflicts = 0, []
            for idx, rec in enumerate(recs):
                if rec.id not in held:
                    held[rec.id] = rec.hash
                    stored += 1
                elif held[rec.id] != rec.hash:
                    conflicts.append(rec.id)
                    want_conflicts.append((rec.id, idx, rec.hash))
            assert (answer.status, answer.records, answer.conflicts) == (
                "accepted", stored, tuple(conflicts))
        assert len(want_conflicts) > 100  # the rule's both branches were exercised
        got = [(r.id, r.hash) for r, _ in store.iter_records()]
        assert sorted(got) == sorted(held.items())
        assert [(c[0], c[2], c[3]) for c in store.record_conflicts()] == want_conflicts
        assert store.check_integrity() == []


def test_threads_offering_together_share_commits(tmp_path: Path) -> None:
    """Sixteen device lines at once: each pack acknowledged only when another connection
    already sees it committed, and fewer transactions than packs."""
    db = tmp_path / "g.db"
    devices = [(bytes.fromhex(f"0c0c0c0c0c0c{d:04x}"), derive_test_key(f"group {d}"))
               for d in range(16)]  # fmt: skip
    errors: list[BaseException] = []
    with Store(db) as store:
        for dev_id, key in devices:
            store.register_device(dev_id, key.public.raw)

        def line(dev_id: bytes, key: object) -> None:
            dev = Device(dev_id, key)  # type: ignore[arg-type]
            look = sqlite3.connect(db, timeout=30)
            try:
                for _ in range(10):
                    pack = dev.pack(2)
                    assert store.take_pack(dev_id, pack.encoded).status == "accepted"
                    seen = look.execute("SELECT count(*) FROM packs WHERE hash = ?",
                                        (pack.hash,)).fetchone()[0]  # fmt: skip
                    assert seen == 1, "acknowledged before its commit"
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
            finally:
                look.close()

        threads = [threading.Thread(target=line, args=d) for d in devices]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert store.count_packs() == store.intake_offers == 160
        assert store.intake_commits < 80  # packs that arrived together shared commits
        assert store.check_integrity() == []


def test_a_failed_group_stores_none_of_its_packs(tmp_path: Path) -> None:
    dev = Device(DEV_A, KEY_A)
    packs = [dev.pack(2) for _ in range(3)]
    with Store(tmp_path / "f.db") as store:
        store.register_device(DEV_A, KEY_A.public.raw)
        store._db.execute(
            "CREATE TRIGGER fail AFTER INSERT ON packs WHEN NEW.nrecords = 2 AND "
            "(SELECT count(*) FROM packs) = 2 BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
        )
        with pytest.raises(sqlite3.IntegrityError, match="disk on fire"):
            store.take_packs([(DEV_A, p.encoded) for p in packs])
        assert store.count_packs() == store.count_records() == 0
        assert store.device(DEV_A).head is None  # type: ignore[union-attr]
        assert not store.write_health().writable
        store._db.execute("DROP TRIGGER fail")
        answers = store.take_packs([(DEV_A, p.encoded) for p in packs])
        assert [a.status for a in answers] == ["accepted"] * 3
        assert store.write_health().writable


def test_packs_since_returns_the_verified_decoding_and_still_checks_the_bytes(
    tmp_path: Path,
) -> None:
    """A pack accepted in this process is handed to a reader, on any Store of the file,
    as the verifier decoded it (the same object), equal to what is read from the bytes;
    a stored pack whose bytes changed is refused all the same."""
    db = tmp_path / "d.db"
    dev = Device(DEV_A, KEY_A)
    packs = [dev.pack(3) for _ in range(5)]
    with Store(db) as store:
        store.register_device(DEV_A, KEY_A.public.raw)
        store.take_packs([(DEV_A, p.encoded) for p in packs])
        here = store.packs_since(0, 10)
        assert all(pack is store_module._DECODED[pack.hash] for _, pack in here)
        assert here == [(n + 1, p) for n, p in enumerate(packs)]
        assert [p for _, p in here] == [read_unverified(p.encoded, PackKind.MEMORY)
                                        for p in packs]  # fmt: skip
        with Store(db) as reader:  # the memory keeper's own reader
            assert all(a is b for (_, a), (_, b) in zip(reader.packs_since(0, 10), here,
                                                         strict=True))  # fmt: skip
        raw = bytearray(packs[1].encoded)
        raw[-1] ^= 1  # a bit of the signature
        store._db.execute("UPDATE packs SET raw = ? WHERE rowid = 2", (bytes(raw),))
        with pytest.raises(StoreError, match="stored pack 2 changed since it was verified"):
            store.packs_since(0, 10)


def test_a_pack_larger_than_one_insert_keeps_every_record_in_order(tmp_path: Path) -> None:
    from hirmem.daemon.store import RECORDS_PER_INSERT

    dev = Device(DEV_A, KEY_A)
    count = RECORDS_PER_INSERT + 44
    pack = dev.pack(count)
    with Store(tmp_path / "big.db") as store:
        store.register_device(DEV_A, KEY_A.public.raw)
        assert store.take_pack(DEV_A, pack.encoded).records == count
        rows = store._db.execute(
            "SELECT id, idx FROM records WHERE pack_id = ? ORDER BY rowid", (pack.pack_id,)
        ).fetchall()
        assert rows == [(r.id, j) for j, r in enumerate(pack.items)]  # type: ignore[attr-defined]
        assert store.check_integrity() == []


def test_a_line_whose_commit_failed_leaves_the_next_one_free_to_commit(tmp_path: Path) -> None:
    """take_pack after a failed group commit: the error reaches its caller, and the lead
    passes on (a lead left taken would make every later pack wait for ever)."""
    dev = Device(DEV_A, KEY_A)
    first, second = dev.pack(2), dev.pack(2)
    with Store(tmp_path / "l.db") as store:
        store.register_device(DEV_A, KEY_A.public.raw)
        store._db.execute("CREATE TRIGGER fail BEFORE INSERT ON packs "
                          "BEGIN SELECT RAISE(ABORT, 'no space'); END")  # fmt: skip
        with pytest.raises(sqlite3.IntegrityError, match="no space"):
            store.take_pack(DEV_A, first.encoded)
        store._db.execute("DROP TRIGGER fail")
        answers: list[str] = []
        line = threading.Thread(target=lambda: answers.extend(
            store.take_pack(DEV_A, p.encoded).status for p in (first, second)))  # fmt: skip
        line.start()
        line.join(timeout=30)
        assert not line.is_alive(), "the next pack waited for a lead nobody held"
        assert answers == ["accepted", "accepted"]
