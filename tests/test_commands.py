"""The operator's commands end to end on a real store: keys, devices, push, status, intake."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from hirmem.cli.entry import main
from hirmem.daemon.store import DeviceLimits, Store
from hirmem.protocol.keys import derive_test_key, read_key_file
from hirmem.protocol.packs import PackKind, Reason, TrustedKey, verify_pack
from test_store import DEV_A, KEY_A, Device, store_with_conflicts

HOST_ID = "a1a2a3a4a5a6a7a8"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_keys_devices_push_status_intake(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "h.db")
    key = tmp_path / "host.key"
    code, out, _ = run(capsys, "keys", "--out", str(key))
    assert code == 0 and "mode 0600" in out
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    host = read_key_file(key)
    assert host.seed().hex() not in out  # the public key is printed, never the seed
    assert host.public.raw.hex() in out
    # a second run does not overwrite the key
    code, _, err = run(capsys, "keys", "--out", str(key))
    assert code == 2 and "already exists" in err

    ident = tmp_path / "dev.pub.json"
    ident.write_text(json.dumps({"device_id": DEV_A.hex(), "public_key": KEY_A.public.raw.hex()}))
    code, out, _ = run(
        capsys, "device", "add", "--database", db, "--identity", str(ident), "--board", "mps2-an385"
    )
    assert code == 0 and KEY_A.kid.hex() in out
    code, _, err = run(
        capsys,
        "device",
        "add",
        "--database",
        db,
        "--id",
        DEV_A.hex(),
        "--public",
        derive_test_key("other").public.raw.hex(),
    )
    assert code == 2 and "registered with another key" in err
    code, out, _ = run(capsys, "device", "list", "--database", db)
    assert DEV_A.hex() in out and "no pack yet" in out

    with Store(db) as store:
        dev = Device(DEV_A, KEY_A)
        assert store.take_pack(DEV_A, dev.pack(2).encoded).status == "accepted"
        assert store.take_pack(DEV_A, b"\xd2\x84").status == "refused"
        store.save_counters(DEV_A, {"frames_good": 7, "frames_bad.crc": 2, "frames_bad.cobs": 1})

    code, out, _ = run(
        capsys,
        "push",
        "--database",
        db,
        "--key",
        str(key),
        "--host-id",
        HOST_ID,
        "--fact",
        "pump|serves|zone 3|0.9",
        "--fact",
        "temp0|max_safe|80.0",
    )
    assert code == 0 and "knowledge version 1 (2 facts" in out
    with Store(db) as store:
        row = store.knowledge()
        assert row is not None
        keys = {host.kid: TrustedKey(host.public, bytes.fromhex(HOST_ID), PackKind.KNOWLEDGE)}
        pack = verify_pack(row.raw, keys, None, PackKind.KNOWLEDGE, require_chain=False).pack
        assert [(i.subject, i.confidence) for i in pack.items] == [  # type: ignore[union-attr]
            ("pump", round(0.9 * 65536)),
            ("temp0", 65536),
        ]
    code, _, err = run(
        capsys,
        "push",
        "--database",
        db,
        "--key",
        str(key),
        "--host-id",
        HOST_ID,
        "--fact",
        "only|two",
    )
    assert code == 2 and "subject|predicate|object" in err

    code, out, _ = run(capsys, "status", "--database", db)
    assert code == 0
    header, rule, line = out.splitlines()[:3]
    assert header.split()[:3] == ["device", "board", "boot"] and set(rule) <= {"-", " "}
    fields = line.split()
    assert fields[0] == DEV_A.hex() and "never" in line
    code, out, _ = run(capsys, "status", "--database", db, "--json")
    [row_json] = json.loads(out)
    assert (row_json["packs"], row_json["records"], row_json["refused"]) == (1, 2, 1)
    assert (row_json["frames_good"], row_json["frames_bad"]) == (7, 3)

    code, out, _ = run(capsys, "intake", "--database", db, "--records", "--check")
    assert code == 0
    assert out.count("  record ") == 2 and Reason.MALFORMED.name.lower() in out
    assert "integrity: ok" in out

    code, _, err = run(capsys, "status", "--database", str(tmp_path / "missing.db"))
    assert code == 2 and "no store here" in err


def test_intake_check_on_an_empty_file_and_a_damaged_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty file is not a store (it said "integrity: ok"); a damaged one is reported
    with what to do (it crashed with a traceback)."""
    empty = tmp_path / "empty.db"
    empty.touch()
    code, out, err = run(capsys, "intake", "--database", str(empty), "--check")
    assert code == 2 and "integrity: ok" not in out and "empty" in err
    assert empty.stat().st_size == 0  # nothing was created in it

    db = tmp_path / "damaged.db"
    with Store(db) as store:
        store.register_device(DEV_A, KEY_A.public.raw)
        dev = Device(DEV_A, KEY_A)
        for _ in range(40):
            store.take_pack(DEV_A, dev.pack(20).encoded)
        store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(db.read_bytes())
    page = 4096
    for at in range(3 * page, len(data) - page, 2 * page):  # every other page from the 4th
        data[at : at + page] = bytes([0x5A]) * page
    db.write_bytes(bytes(data))
    code, out, err = run(capsys, "intake", "--database", str(db), "--check")
    assert code != 0 and "integrity: ok" not in out
    assert "Traceback" not in out + err
    assert "malformed" in out + err or "damaged" in out + err, (out, err)


def test_push_refuses_a_version_a_known_device_cannot_take(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A device's HELLO said it reassembles at most 300 bytes: a bigger knowledge version
    could never reach it, and `hirmem push` says so before keeping anything (it used to be
    kept and re-offered for ever). A device not seen yet does not hold a push back."""
    db = tmp_path / "h.db"
    key = tmp_path / "host.key"
    assert run(capsys, "keys", "--out", str(key))[0] == 0
    host = read_key_file(key)
    small = bytes.fromhex("0c0c0c0c0c0c0c03")
    with Store(db) as store:
        store.register_device(DEV_A, KEY_A.public.raw)  # never seen: limits unknown
        store.register_device(small, derive_test_key("small device").public.raw)
        store.seen(small, "tiny", "1.0", 1, DeviceLimits(0x1F, 128, 300, host.kid))
    facts = [f"pump|serves|zone {n}|0.9" for n in range(12)]
    argv = ["push", "--database", str(db), "--key", str(key), "--host-id", HOST_ID]
    code, out, err = run(capsys, *argv, *[a for f in facts for a in ("--fact", f)])
    assert code == 2, out
    assert small.hex() in err and "reassembles at most 300" in err and "nothing was kept" in err
    with Store(db) as store:
        assert store.knowledge() is None
    assert run(capsys, *argv, "--fact", "pump|serves|zone 1")[0] == 0  # a small one fits
    code, _, _ = run(capsys, *argv, "--anyway", *[a for f in facts for a in ("--fact", f)])
    assert code == 0
    with Store(db) as store:
        latest = store.knowledge()
        assert latest is not None and latest.seq == 2


def test_push_refuses_more_facts_than_a_known_device_keeps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 15 §4: a device's HELLO said it keeps 8 facts of at most 32 bytes: 9 facts,
    or one longer text, are refused by `hirmem push` (nothing kept); 8 go; --anyway
    keeps an oversized version all the same (the daemon then records it refused)."""
    db = tmp_path / "h.db"
    key = tmp_path / "host.key"
    assert run(capsys, "keys", "--out", str(key))[0] == 0
    host = read_key_file(key)
    board = bytes.fromhex("0c0c0c0c0c0c0c08")
    with Store(db) as store:
        store.register_device(board, derive_test_key("eight facts").public.raw)
        store.seen(board, "hifive1", "1.0", 1, DeviceLimits(0x1F, 512, 4096, host.kid, 8, 32))
    argv = ["push", "--database", str(db), "--key", str(key), "--host-id", HOST_ID]

    def facts(n: int, subject: str = "pump") -> list[str]:
        return [a for k in range(n) for a in ("--fact", f"{subject}|serves|zone {k}|0.9")]

    code, out, err = run(capsys, *argv, *facts(9))
    assert code == 2, out
    assert board.hex() in err and "keeps at most 8 facts, the pack has 9" in err
    code, _, err = run(capsys, *argv, *facts(1, "p" * 33))
    assert code == 2 and "texts of at most 32 bytes" in err
    with Store(db) as store:
        assert store.knowledge() is None
    assert run(capsys, *argv, *facts(8))[0] == 0
    assert run(capsys, *argv, "--anyway", *facts(9))[0] == 0
    with Store(db) as store:
        latest = store.knowledge()
        assert latest is not None and latest.seq == 2 and latest.nitems == 9
        limits = store.device_limits(board)
        assert limits is not None and (limits.knowledge_facts, limits.knowledge_text) == (8, 32)


def test_record_conflicts_are_shown_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A record id seen again with other contents: status, intake, intake --check,
    memory follow and semantic devices all say so (none of them used to)."""
    db = str(tmp_path / "h.db")
    store, reused = store_with_conflicts(Path(db))
    store.close()
    ids = [r.id.hex() for r in reused]

    code, out, _ = run(capsys, "status", "--database", db)
    assert code == 0
    header, _, line = out.splitlines()[:3]
    def cell(name: str) -> str:  # columns are aligned; some cells hold spaces
        return line[header.index(f"  {name} ") + 2:].split()[0]

    assert (cell("conflicts"), cell("records")) == ("3", "4")
    assert f"warning: device {DEV_A.hex()}: 3 record conflicts" in out
    code, out, _ = run(capsys, "status", "--database", db, "--json")
    assert json.loads(out)[0]["conflicts"] == 3

    code, out, _ = run(capsys, "intake", "--database", db)
    assert code == 0
    conflict_lines = [x for x in out.splitlines() if x.startswith("conflict record ")]
    assert [x.split()[2] for x in conflict_lines] == ids
    code, out, _ = run(capsys, "intake", "--database", db, "--device", "0b0b0b0b0b0b0b02")
    assert "conflict record" not in out  # another device's view
    code, out, _ = run(capsys, "intake", "--database", db, "--check")
    assert code == 1 and "integrity: ok" not in out
    assert f"integrity: 1 warning: device {DEV_A.hex()}: 3 record conflicts" in out

    memory_db = str(tmp_path / "memory.db")
    code, out, _ = run(capsys, "memory", "--db", memory_db, "follow", "--intake", db)
    assert code == 0
    assert "4 admitted" in out and "0 already held" in out and "3 record conflicts" in out
    assert "warning: 3 records not admitted" in out and all(i in out for i in ids)

    substrate = str(tmp_path / "s.db")
    code, out, _ = run(capsys, "semantic", "devices", "--store", db, "--db", substrate)
    assert code == 0 and "fed 4 records" in out
    assert "warning: 3 records of the store are not fed" in out
    assert all(f"record/{i}: pack " in out for i in ids)
