"""The memory engine follows the daemon's intake: stored device packs become memories once."""

from __future__ import annotations

from pathlib import Path

from hirmem.daemon.store import Store
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.follow import CURSOR_KEY, follow_intake
from hirmem.protocol.packs import PackKind, sign_pack
from hirmem.protocol.records import GENESIS, Record, State, record_id
from test_store import CONTEXT, DEV_A, KEY_A, T0, Device


def test_packs_from_the_intake_become_memories_once(tmp_path: Path) -> None:
    store = Store(tmp_path / "intake.db")
    store.register_device(DEV_A, KEY_A.public.raw, "mps2-an385")
    dev = Device(DEV_A, KEY_A)
    packs = [dev.pack(3), dev.pack(2)]
    for p in packs:
        assert store.take_pack(DEV_A, p.encoded).status == "accepted"
    engine = MemoryEngine(tmp_path / "memory.db")
    report = follow_intake(engine, store)
    assert (report.packs, report.admitted, report.duplicates, report.mismatched) == (2, 5, 0, 0)
    ids = {r.id.hex() for p in packs for r in p.items if isinstance(r, Record)}
    # issue 13: the five readings of temp0 are episodes, distilled into one pattern
    held = {m.id: m for m in engine.store.select("kind != 'pattern'")}
    assert set(held) == ids
    [pattern] = engine.store.select("kind = 'pattern'")
    assert set(pattern.links) == ids
    assert all(m.device == DEV_A.hex() for m in held.values())
    # nothing new: nothing admitted, and a restart resumes from the stored cursor
    assert follow_intake(engine, store).packs == 0
    engine.close()
    engine = MemoryEngine(tmp_path / "memory.db")
    assert engine.store.meta(CURSOR_KEY) is not None
    third = dev.pack(1)
    assert store.take_pack(DEV_A, third.encoded).status == "accepted"
    assert (follow_intake(engine, store).packs, engine.store.count("kind != 'pattern'")) == (1, 6)
    assert engine.store.count("kind = 'pattern'") == 1  # reinforced, not copied


def test_a_hard_fail_from_a_device_is_quarantined_on_the_host(tmp_path: Path) -> None:
    store = Store(tmp_path / "intake.db")
    store.register_device(DEV_A, KEY_A.public.raw)
    # flags without the consent bit: the device's gate hard-fails it into quarantine
    bad = Record.capture(
        record_id(DEV_A, 1, 1),
        b'{"t":1}',
        "temp0",
        T0,
        CONTEXT,
        0x07FF,
        0x10000,
        0xE666,
        0x8000,
        GENESIS,
    )
    pack = sign_pack(KEY_A, PackKind.MEMORY, DEV_A, (1 << 32) | 1, GENESIS, T0, [bad])
    assert bad.state == State.QUARANTINED
    assert store.take_pack(DEV_A, pack.encoded).status == "accepted"
    engine = MemoryEngine(":memory:")
    report = follow_intake(engine, store)
    assert (report.admitted, report.quarantined) == (0, 1)
    [m] = engine.store.select()
    assert m.state.name == "QUARANTINED" and m.trust == 0


def test_a_stored_pack_changed_after_its_verification_is_refused(tmp_path: Path) -> None:
    """Issue 13, one verification: follow does not verify a pack's signature again, it
    checks the bytes against the hash the daemon stored with them when it verified them,
    and the pack's key id against its device's. A byte changed in the file is named."""
    import sqlite3

    from hirmem.daemon.store import StoreError

    store = Store(tmp_path / "intake.db")
    store.register_device(DEV_A, KEY_A.public.raw)
    dev = Device(DEV_A, KEY_A)
    for p in (dev.pack(2), dev.pack(2)):
        assert store.take_pack(DEV_A, p.encoded).status == "accepted"
    assert [rowid for rowid, _ in store.packs_since(0)] == [1, 2]
    store.close()
    raw = sqlite3.connect(tmp_path / "intake.db")
    (data,) = raw.execute("SELECT raw FROM packs WHERE rowid = 2").fetchone()
    changed = bytearray(data)
    changed[-1] ^= 1  # a bit of the signature
    raw.execute("DROP TRIGGER IF EXISTS packs_no_update")
    raw.execute("UPDATE packs SET raw = ? WHERE rowid = 2", (bytes(changed),))
    raw.commit()
    raw.close()
    store = Store(tmp_path / "intake.db")
    engine = MemoryEngine(tmp_path / "memory.db")
    try:
        follow_intake(engine, store)
    except StoreError as exc:
        assert "stored pack 2 changed since it was verified" in str(exc)
    else:
        raise AssertionError("a changed stored pack was followed")
    assert engine.store.meta(CURSOR_KEY) is None  # the batch it came in is refused whole
    engine.close()
    store.close()
