"""The durable store: registry, exactly-once pack intake, refusals, knowledge, integrity.

Packs are signed with the host codec (an independent implementation of the same
contract as the devices' packers); the store must take each valid pack once, answer
a pack offered again with *duplicate*, record every refusal with its §8.4 reason,
and survive a SIGKILL in the middle of an intake with nothing lost or doubled.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from hirmem.daemon.intake import StoreIntake
from hirmem.daemon.store import MIGRATIONS, PACK_RECORDS_SQL, Store, StoreError
from hirmem.link.session import DeviceInfo
from hirmem.protocol.identity import triple_id
from hirmem.protocol.keys import SigningKey, derive_test_key
from hirmem.protocol.messages import PackStatus
from hirmem.protocol.packs import ChainHead, KnowledgeItem, Pack, PackKind, Reason, sign_pack
from hirmem.protocol.records import GENESIS, Record, record_id

ROOT = Path(__file__).resolve().parent.parent
T0 = 1_780_000_000_000
DEV_A = bytes.fromhex("0a0a0a0a0a0a0a01")
DEV_B = bytes.fromhex("0b0b0b0b0b0b0b02")
KEY_A = derive_test_key("store device a")
KEY_B = derive_test_key("store device b")
HOST = derive_test_key("store host")
HOST_ID = bytes.fromhex("a1a2a3a4a5a6a7a8")
CONTEXT = bytes(range(32))


class Device:
    """A device's packer in miniature: records chained through packs, seqs growing."""

    def __init__(self, device_id: bytes, key: SigningKey, boot: int = 1) -> None:
        self.device_id, self.key, self.boot = device_id, key, boot
        self.capture_seq = 0
        self.pack_n = 0
        self.prev = GENESIS

    def pack(
        self, n_records: int = 3, *, prev: bytes | None = None, seq: int | None = None
    ) -> Pack:
        link = self.prev if prev is None else prev
        records = []
        for _ in range(n_records):
            self.capture_seq += 1
            rec = Record.capture(
                record_id(self.device_id, self.boot, self.capture_seq),
                f'{{"t":{self.capture_seq}}}'.encode(),
                "temp0",
                T0 + self.capture_seq,
                CONTEXT,
                0x0FFF,
                0x10000,
                0xE666,
                0x8000,
                link,
            )
            records.append(rec)
            link = rec.hash
        if seq is None:
            self.pack_n += 1
            seq = (self.boot << 32) | self.pack_n
        pack = sign_pack(
            self.key, PackKind.MEMORY, self.device_id, seq, self.prev if prev is None else prev,
            T0 + seq % 1000, records,
        )  # fmt: skip
        if prev is None:
            self.prev = pack.hash
        return pack


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "hirmem.db")
    s.register_device(DEV_A, KEY_A.public.raw, "mps2-an385")
    s.register_device(DEV_B, KEY_B.public.raw, "hifive1")
    return s


def test_a_chain_of_packs_is_taken_once(store: Store) -> None:
    dev = Device(DEV_A, KEY_A)
    packs = [dev.pack(n) for n in (3, 1, 5)]
    for p in packs:
        taken = store.take_pack(DEV_A, p.encoded)
        assert (taken.status, taken.pack_id, taken.seq, taken.records) == (
            "accepted", p.pack_id, p.seq, len(p.items))  # fmt: skip
    assert store.chain_head(DEV_A) == ChainHead(packs[-1].seq, packs[-1].hash)
    assert store.count_records(DEV_A) == 9
    # every pack offered again, newest and oldest: duplicate, nothing stored twice
    for p in (packs[-1], packs[0], packs[1]):
        again = store.take_pack(DEV_A, p.encoded)
        assert (again.status, again.pack_id, again.seq) == ("duplicate", p.pack_id, p.seq)
    assert store.count_records() == 9 and len(store.packs(DEV_A)) == 3
    # records come back in arrival order, equal to what was signed
    got = store.records()
    assert [r for _, r, _ in got] == [r for p in packs for r in p.items]
    assert [pid for _, _, pid in got] == [p.pack_id for p in packs for _ in p.items]
    assert store.records(after=got[3][0]) == got[4:]
    assert store.check_integrity() == []


def _refusal(store: Store, data: bytes, line: bytes = DEV_A) -> tuple[str, Reason]:
    taken = store.take_pack(line, data)
    return taken.status, taken.reason


def test_each_refusal_is_recorded_with_its_reason(store: Store) -> None:
    dev = Device(DEV_A, KEY_A)
    first, second = dev.pack(), dev.pack()
    assert store.take_pack(DEV_A, first.encoded).status == "accepted"
    assert store.take_pack(DEV_A, second.encoded).status == "accepted"

    tampered = bytearray(dev.pack().encoded)
    tampered[-70] ^= 0x01  # inside the payload: the signature no longer verifies
    stranger = Device(bytes.fromhex("0c0c0c0c0c0c0c03"), derive_test_key("unregistered"))
    rollback = Device(DEV_A, KEY_A).pack(seq=(1 << 32) | 1, prev=GENESIS)  # seq 1, other bytes
    older = Device(DEV_A, KEY_A, boot=0).pack(seq=5, prev=GENESIS)
    broken = Device(DEV_A, KEY_A).pack(seq=(1 << 32) | 9, prev=bytes(31) + b"\x01")
    cases = {
        Reason.BAD_SIGNATURE: bytes(tampered),
        Reason.UNKNOWN_KEY: stranger.pack().encoded,
        Reason.REPLAY: Device(DEV_A, KEY_A).pack(seq=second.seq, prev=first.hash).encoded,
        Reason.ROLLBACK: older.encoded,
        Reason.BROKEN_CHAIN: broken.encoded,
        Reason.MALFORMED: b"\xd2\x84\x40",
    }
    assert rollback.seq < second.seq
    for reason, data in cases.items():
        assert _refusal(store, data) == ("refused", reason), reason.name
    # offered again: refused again, recorded once with two offers
    assert _refusal(store, cases[Reason.BAD_SIGNATURE]) == ("refused", Reason.BAD_SIGNATURE)
    refusals = {r.reason: r for r in store.refusals(DEV_A)}
    assert set(refusals) == set(cases)
    assert refusals[Reason.BAD_SIGNATURE].offers == 2
    assert all(r.offers == 1 for k, r in refusals.items() if k != Reason.BAD_SIGNATURE)
    # late refusals name the pack; early ones cannot
    assert refusals[Reason.ROLLBACK].seq == 5 and refusals[Reason.BROKEN_CHAIN].pack_id
    assert refusals[Reason.MALFORMED].pack_id is None
    # nothing of them was stored, and the chain head did not move
    assert store.count_records() == 6
    assert store.chain_head(DEV_A) == ChainHead(second.seq, second.hash)
    assert store.check_integrity() == []


def test_a_pack_must_come_from_the_device_on_the_line(store: Store) -> None:
    pack_b = Device(DEV_B, KEY_B).pack()
    # B's pack offered on A's line: verified against A's key only
    assert _refusal(store, pack_b.encoded, DEV_A) == ("refused", Reason.UNKNOWN_KEY)
    assert store.take_pack(DEV_B, pack_b.encoded).status == "accepted"
    # once stored, the same bytes on A's line are not A's duplicate
    assert _refusal(store, pack_b.encoded, DEV_A) == ("refused", Reason.WRONG_SIGNER)


def test_intake_adapter_answers_like_a_pack_result(store: Store) -> None:
    intake = StoreIntake(store)
    info = DeviceInfo(DEV_A, "mps2-an385", "0.1.0", 1, 0x1F, 512, 4096, 4, KEY_A.kid, b"")
    dev = Device(DEV_A, KEY_A)
    assert intake.chain_head(info) is None
    p = dev.pack()
    ok = intake.offer(info, p.encoded)
    assert (ok.status, ok.reason, ok.pack_id, ok.seq) == (PackStatus.ACCEPTED, Reason.NONE,
                                                          p.pack_id, p.seq)  # fmt: skip
    assert intake.offer(info, p.encoded).status == PackStatus.DUPLICATE
    assert intake.chain_head(info) == ChainHead(p.seq, p.hash)
    bad = intake.offer(info, b"\x00")
    assert (bad.status, bad.reason) == (PackStatus.REFUSED, Reason.MALFORMED)


def test_registry_rules(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    row = store.register_device(DEV_A, KEY_A.public.raw, "mps2-an385")
    assert (row.kid, row.head, row.first_seen) == (KEY_A.kid, None, None)
    assert store.register_device(DEV_A, KEY_A.public.raw) == row  # idempotent
    with pytest.raises(StoreError, match="registered with another key"):
        store.register_device(DEV_A, KEY_B.public.raw)
    with pytest.raises(StoreError, match="already trusted for device"):
        store.register_device(DEV_B, KEY_A.public.raw)
    with pytest.raises(StoreError, match="8 bytes"):
        store.register_device(b"\x01", KEY_B.public.raw)
    store.seen(DEV_A, "mps2-an385", "0.2.0", 9)
    seen = store.device(DEV_A)
    assert seen is not None and (seen.firmware, seen.boot) == ("0.2.0", 9)
    assert seen.first_seen is not None and seen.first_seen == seen.last_seen
    assert set(store.trusted_keys()) == {KEY_A.kid}
    assert store.take_pack(DEV_A, Device(DEV_A, KEY_A).pack().encoded).status == "accepted"
    with pytest.raises(StoreError, match="stored packs"):
        store.remove_device(DEV_A)
    store.register_device(DEV_B, KEY_B.public.raw)
    store.remove_device(DEV_B)
    assert store.device(DEV_B) is None


def test_schema_is_versioned(tmp_path: Path) -> None:
    path = tmp_path / "v.db"
    Store(path).close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.execute("PRAGMA user_version = 99")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="newer than this hirmem"):
        Store(path)
    (tmp_path / "junk.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="cannot open the store"):
        Store(tmp_path / "junk.db")


def test_integrity_check_finds_tampering(store: Store) -> None:
    dev = Device(DEV_A, KEY_A)
    for _ in range(3):
        assert store.take_pack(DEV_A, dev.pack().encoded).status == "accepted"
    assert store.check_integrity() == []
    db = sqlite3.connect(store.path)
    raw = db.execute("SELECT raw FROM packs ORDER BY seq LIMIT 1 OFFSET 1").fetchone()[0]
    forged = bytearray(raw)
    forged[-1] ^= 0x80
    db.execute("UPDATE packs SET raw = ? WHERE raw = ?", (bytes(forged), raw))
    db.execute("DELETE FROM packs WHERE seq = (SELECT max(seq) FROM packs)")
    db.commit()
    db.close()
    problems = store.check_integrity()
    assert any("do not hash to the recorded hash" in p for p in problems)
    assert any("does not verify again" in p for p in problems)
    assert any("chain head is not the last stored pack" in p for p in problems)
    assert any("belong to no stored pack" in p for p in problems)


def test_knowledge_versions_and_device_state(store: Store) -> None:
    def kpack(seq: int) -> Pack:
        tid = bytes.fromhex(triple_id("pump", "serves", "zone 3"))
        item = KnowledgeItem(tid, "pump", "serves", "zone 3", 0x10000)
        return sign_pack(HOST, PackKind.KNOWLEDGE, HOST_ID, seq, GENESIS, T0, [item])

    assert store.knowledge() is None and store.knowledge_head() is None
    store.add_knowledge(kpack(3))
    with pytest.raises(StoreError, match="not above the latest"):
        store.add_knowledge(kpack(3))
    store.add_knowledge(kpack(5))
    latest = store.knowledge()
    assert latest is not None and latest.seq == 5 and latest.raw == kpack(5).encoded
    assert store.knowledge(3) is not None and store.knowledge(4) is None
    store.set_device_knowledge(DEV_A, 5, "pending")
    store.set_device_knowledge(DEV_A, 5, "accepted", 0, 5)
    store.set_device_knowledge(DEV_A, 3, "refused", int(Reason.ROLLBACK), 5)
    assert store.device_knowledge(DEV_A) == [(3, "refused", 7, 5), (5, "accepted", 0, 5)]
    with pytest.raises(StoreError, match="only knowledge packs"):
        store.add_knowledge(Device(DEV_A, KEY_A).pack())


def test_counters_and_sessions_for_the_status_command(store: Store) -> None:
    store.save_counters(DEV_A, {"frames_good": 10, "frames_bad": 2})
    store.save_counters(DEV_A, {"frames_good": 12})
    assert store.counters(DEV_A) == {"frames_bad": 2, "frames_good": 12}
    store.set_session(DEV_A, "socket://127.0.0.1:5000", "open")
    url, state, since = store.sessions()[DEV_A]
    assert (url, state) == ("socket://127.0.0.1:5000", "open") and since > 0


def test_threads_share_one_store(store: Store) -> None:
    errors: list[BaseException] = []

    def feed(device_id: bytes, key: SigningKey) -> None:
        dev = Device(device_id, key)
        try:
            for _ in range(20):
                assert store.take_pack(device_id, dev.pack(2).encoded).status == "accepted"
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=feed, args=a) for a in ((DEV_A, KEY_A), (DEV_B, KEY_B))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert store.count_records(DEV_A) == store.count_records(DEV_B) == 40
    assert store.check_integrity() == []


# A child process takes packs as fast as it can and prints the seq of each one after
# take_pack returned (the moment a PACK_RESULT would leave). SIGKILL lands at a random
# point; the reopened store must hold every printed pack, at most one more, each once.
CHILD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    from test_store import DEV_A, KEY_A, Device
    from hirmem.daemon.store import Store
    store = Store({db!r})
    dev = Device(DEV_A, KEY_A)
    print("ready", flush=True)
    while True:
        p = dev.pack(2)
        assert store.take_pack(DEV_A, p.encoded).status == "accepted"
        print(p.seq & 0xFFFFFFFF, flush=True)
    """
)


@pytest.mark.parametrize("delay", [0.1, 0.3, 0.6])
def test_sigkill_during_intake_loses_nothing(tmp_path: Path, delay: float) -> None:
    db = tmp_path / "kill.db"
    Store(db).register_device(DEV_A, KEY_A.public.raw)
    script = CHILD.format(tests=str(ROOT / "tests"), db=str(db))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "host"))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env,
                            text=True)  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    acked = [int(line) for line in proc.stdout.read().split()]
    assert acked, "the child stored nothing before it was killed"
    store = Store(db)
    assert store.check_integrity() == []
    stored = [p.seq & 0xFFFFFFFF for p in store.packs(DEV_A)]
    assert stored == list(range(1, len(stored) + 1))  # one chain, no gap, no double
    assert len(acked) <= len(stored) <= len(acked) + 1
    assert store.count_records(DEV_A) == 2 * len(stored)
    # the device resends what it has no answer for: the next pack is a duplicate or new
    dev = Device(DEV_A, KEY_A)
    replay = [dev.pack(2) for _ in range(len(stored) + 1)]
    assert store.take_pack(DEV_A, replay[len(stored) - 1].encoded).status == "duplicate"
    assert store.take_pack(DEV_A, replay[len(stored)].encoded).status == "accepted"


def test_a_reused_record_id_is_kept_as_a_conflict(store: Store) -> None:
    first = Device(DEV_A, KEY_A)
    p1 = first.pack(3)
    assert store.take_pack(DEV_A, p1.encoded).records == 3
    # power-cycled without its boot counter: capture seqs restart, the chain continues
    again = Device(DEV_A, KEY_A)
    p2 = again.pack(4, prev=p1.hash, seq=p1.seq + 1)
    assert store.integrity_warnings() == [] and store.count_record_conflicts() == 0
    taken = store.take_pack(DEV_A, p2.encoded)
    assert (taken.status, taken.records) == ("accepted", 1)  # seq 4 is new
    conflicts = store.record_conflicts()
    reused = [r for r in p2.items[:3] if isinstance(r, Record)]
    assert [(c[0], c[3]) for c in conflicts] == [(r.id, r.hash) for r in reused]
    assert store.count_records() == 4
    assert store.check_integrity() == []
    # sound, but never silent: the intake names them, the counts and a warning say so
    assert taken.conflicts == tuple(r.id for r in reused)
    assert store.count_record_conflicts() == store.count_record_conflicts(DEV_A) == 3
    assert store.count_record_conflicts(DEV_B) == 0
    assert store.integrity_warnings() == [
        f"device {DEV_A.hex()}: 3 record conflicts (record ids reused with other contents, "
        f"packs seq {p2.seq:#x}..{p2.seq:#x}; kept in record_conflicts)"
    ]
    # the same pack again is a duplicate: no second copy of its conflicts
    assert store.take_pack(DEV_A, p2.encoded).conflicts == ()
    assert store.count_record_conflicts() == 3


def store_with_conflicts(path: Path) -> tuple[Store, list[Record]]:
    """DEV_A registered, one pack of 3 records, then a pack of 4 from a device that lost
    its boot counter: 3 of them reuse the first pack's ids with other contents."""
    store = Store(path)
    store.register_device(DEV_A, KEY_A.public.raw, "mps2-an385")
    first = Device(DEV_A, KEY_A)
    p1 = first.pack(3)
    assert store.take_pack(DEV_A, p1.encoded).status == "accepted"
    p2 = Device(DEV_A, KEY_A).pack(4, prev=p1.hash, seq=p1.seq + 1)
    assert len(store.take_pack(DEV_A, p2.encoded).conflicts) == 3
    return store, [r for r in p2.items[:3] if isinstance(r, Record)]


def test_an_old_store_is_migrated_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(MIGRATIONS[0] + "; PRAGMA user_version = 1;")
    db.close()
    store = Store(path)  # migration 2 runs
    assert store.record_conflicts() == []
    store.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)


U64_EDGES = (0, (1 << 63) - 1, 1 << 63, (1 << 64) - 1)


def test_every_u64_round_trips_in_order(store: Store) -> None:
    """Pack seq, created, record timestamps, counters and knowledge seqs at 0, 2^63-1,
    2^63 and 2^64-1 are stored, read back exactly and still ordered (SQLite's
    integers are signed: these used to overflow or refuse to bind)."""
    store.register_device(DEV_A, KEY_A.public.raw)
    seqs = [1, (1 << 63) - 1, 1 << 63, (1 << 64) - 1]  # a pack seq is 1..2^64-1
    prev = GENESIS
    for k, (seq, edge) in enumerate(zip(seqs, U64_EDGES, strict=True)):
        rec = Record.capture(record_id(DEV_A, 1, k + 1), b"{}", "temp0", edge, CONTEXT,
                             0x0FFF, 0x10000, 0xE666, 0x8000, prev)  # fmt: skip
        pack = sign_pack(KEY_A, PackKind.MEMORY, DEV_A, seq, prev, edge, [rec])
        taken = store.take_pack(DEV_A, pack.encoded)
        assert (taken.status, taken.seq) == ("accepted", seq), taken.detail
        assert store.take_pack(DEV_A, pack.encoded).seq == seq  # the duplicate answer too
        prev = pack.hash
    assert [p.seq for p in store.packs(DEV_A)] == seqs
    assert [p.created for p in store.packs(DEV_A)] == list(U64_EDGES)
    assert [r.timestamp for r, _ in store.iter_records()] == list(U64_EDGES)
    head = store.chain_head(DEV_A)
    assert head is not None and head.seq == (1 << 64) - 1
    assert store.check_integrity() == []
    store.save_counters(DEV_A, {f"c{k}": v for k, v in enumerate(U64_EDGES)})
    assert store.counters(DEV_A) == {f"c{k}": v for k, v in enumerate(U64_EDGES)}
    for seq in seqs[1:]:
        version = sign_pack(HOST, PackKind.KNOWLEDGE, HOST_ID, seq, GENESIS, seq, [])
        store.add_knowledge(version)
        store.set_device_knowledge(DEV_A, seq, "accepted", 0, seq)
    latest = store.knowledge()
    assert latest is not None and (latest.seq, latest.created) == ((1 << 64) - 1,) * 2
    assert store.knowledge((1 << 63) - 1) is not None
    assert [(s, h) for s, _, _, h in store.device_knowledge(DEV_A)] == [(s, s) for s in seqs[1:]]
    with pytest.raises(StoreError, match="not above the latest"):
        store.add_knowledge(sign_pack(HOST, PackKind.KNOWLEDGE, HOST_ID, 1 << 63, GENESIS, 0, []))
    refused = sign_pack(KEY_A, PackKind.MEMORY, DEV_A, 1 << 63, prev, 0, [])
    assert store.take_pack(DEV_A, refused.encoded).reason == Reason.ROLLBACK
    assert [r.seq for r in store.refusals(DEV_A)] == [1 << 63]


def test_a_version_2_store_is_migrated_to_the_u64_mapping(tmp_path: Path) -> None:
    """Values an older store kept as plain integers read back the same after migration."""
    path = tmp_path / "v2.db"
    db = sqlite3.connect(path)
    db.executescript(MIGRATIONS[0] + ";" + MIGRATIONS[1] + "; PRAGMA user_version = 2;")
    db.execute(
        "INSERT INTO devices (device_id, public_key, kid, registered, head_seq, head_hash) "
        "VALUES (?, ?, ?, 0, ?, ?)",
        (DEV_A, KEY_A.public.raw, KEY_A.kid, 4294967301, bytes(32)),
    )
    db.execute("INSERT INTO knowledge VALUES (3, ?, ?, 77, 0, x'00')", (bytes(16), bytes(32)))
    db.execute("INSERT INTO device_counters VALUES (?, 'frames_good', 12345)", (DEV_A,))
    db.execute("INSERT INTO device_knowledge VALUES (?, 3, 'accepted', 0, 3, 0)", (DEV_A,))
    db.commit()
    db.close()
    with Store(path) as store:
        head = store.chain_head(DEV_A)
        assert head is not None and head.seq == 4294967301
        row = store.knowledge()
        assert row is not None and (row.seq, row.created) == (3, 77)
        assert store.counters(DEV_A) == {"frames_good": 12345}
        assert store.device_knowledge(DEV_A) == [(3, "accepted", 0, 3)]


def test_the_integrity_check_finds_a_packs_records_by_index(store: Store) -> None:
    """`intake --check` counts each pack's records: with a scan per pack it was quadratic
    (108 s at 81 k records). Both lookups of that count must use an index."""
    plan = store._db.execute("EXPLAIN QUERY PLAN " + PACK_RECORDS_SQL, (b"", b"")).fetchall()
    details = [str(row[-1]) for row in plan]
    scans = [d for d in details if d.startswith("SCAN") and d != "SCAN CONSTANT ROW"]
    assert scans == [], f"full scans in the per-pack count: {details}"
    assert any("records_pack" in d for d in details), details
