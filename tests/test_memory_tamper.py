"""Tamper evidence to the head: each tampering case of issue 13 is caught and named.

The attacker has the file and SQLite (not the host key): they drop triggers, edit rows,
re-hash what they changed and put the triggers back. Checkpoints signed at every sweep
and at close, the rows checked against their capture/admission records, and the
triggers checked on open each catch a case the chain's links alone cannot.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path

import pytest

from hirmem.memory import evidence
from hirmem.memory.audit import record_hash as audit_hash
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.model import State
from hirmem.memory.store import TRIGGERS
from hirmem.protocol.records import record_hash

T0 = 1_780_000_000.0
DAY = 86400.0


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def build(path: Path) -> tuple[str, str]:
    """A store with sweeps (checkpoints) and a permanent quarantine; (fact id, R=0 id)."""
    clock = Clock()
    e = MemoryEngine(path, clock=clock)
    fact = e.admit(json.dumps({"subject": "tank", "attribute": "level", "value": "80"}), "s")
    e.admit("pump on", "s", flags=0x0C7F)
    clock.t += DAY
    e.sweep()
    bad = e.admit("obey me", "s", flags=0x07FF)
    for n in range(5):
        e.admit(f"reading {n}", "s")
    clock.t += DAY
    e.sweep()
    e.admit("after the last sweep", "s")
    assert e.verify_audit().ok
    e.close()  # signs a checkpoint of the head
    return fact.id, bad.id


def attack(path: Path, *sql: tuple[str, tuple[object, ...]], restore: bool = True) -> None:
    db = sqlite3.connect(path)
    for name in TRIGGERS:
        db.execute(f"DROP TRIGGER IF EXISTS {name}")
    for stmt, params in sql:
        db.execute(stmt, params)
    if restore:  # a careful attacker puts the triggers back
        for stmt in TRIGGERS.values():
            db.execute(stmt)
    db.commit()
    db.close()


def reopen(path: Path) -> MemoryEngine:
    return MemoryEngine(path, clock=Clock(T0 + 3 * DAY))


def test_checkpoints_are_signed_at_every_sweep_and_at_close(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite"
    build(path)
    e = reopen(path)
    with e.store.reading() as db:
        cps = db.execute("SELECT seq, audit_seq FROM checkpoints ORDER BY seq").fetchall()
        last = evidence.latest_checkpoint(db)
    assert len(cps) == 3  # two sweeps and the close
    assert last is not None and last.audit_seq == e.audit.head_seq
    assert last.kid == e.signing_key.kid
    assert e.signing_key.public.verify(
        last.signature, evidence.checkpoint_message(last.seq, last.audit_seq, last.head, last.ts)
    )
    assert e.verify_audit().ok
    e.close()  # nothing moved: no new checkpoint
    e = reopen(path)
    with e.store.reading() as db:
        assert db.execute("SELECT count(*) FROM checkpoints").fetchone()[0] == 3
    e.close()


def test_a_payload_rewritten_together_with_its_hash_is_named(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite"
    fact_id, _ = build(path)
    e = reopen(path)
    m = e.require(fact_id)
    e.close()
    forged = json.dumps({"subject": "tank", "attribute": "level", "value": "10"}).encode()
    new_hash = record_hash(bytes.fromhex(m.id), forged, m.source, m.timestamp, m.context,
                           m.prev_hash)  # fmt: skip
    attack(path, ("UPDATE memories SET payload = ?, hash = ? WHERE id = ?",
                  (forged, new_hash, m.id)))  # fmt: skip
    e = reopen(path)
    assert e.check_integrity() == []  # the row agrees with itself …
    r = e.verify_audit()
    assert not r.ok  # … but not with the hash its capture record carries
    assert any(m.id in p and "rewritten together with its hash" in p for p in r.problems)
    assert "rewritten together with its hash" in str(r)


def test_dropped_triggers_are_recreated_on_open_and_named_by_verify(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite"
    build(path)
    db = sqlite3.connect(path)
    db.execute("DROP TRIGGER audit_no_delete")
    db.execute("DROP TRIGGER memories_permanent_quarantine")
    db.execute("DROP TRIGGER memories_content_fixed")
    db.execute(  # and one replaced by a body that lets everything through
        "CREATE TRIGGER memories_content_fixed BEFORE UPDATE OF payload ON memories "
        "WHEN 0 BEGIN SELECT 1; END"
    )
    db.commit()
    db.close()
    e = reopen(path)
    assert e.store.missing_triggers() == []  # re-created
    with pytest.raises(sqlite3.DatabaseError, match="append-only"), e.store.writing() as conn:
        conn.execute("DELETE FROM audit")
    r = e.verify_audit()
    assert not r.ok
    [named] = [p for p in r.problems if "triggers" in p]
    for name in ("audit_no_delete", "memories_permanent_quarantine", "memories_content_fixed"):
        assert name in named
    e.close()


def test_a_truncated_tail_with_audit_seq_lowered_is_named(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite"
    build(path)
    attack(
        path,
        ("DELETE FROM audit WHERE seq > (SELECT max(seq) - 3 FROM audit)", ()),
        ("UPDATE memories SET audit_seq = min(audit_seq, (SELECT max(seq) FROM audit))", ()),
    )
    e = reopen(path)
    assert e.audit.verify().ok  # the links alone are intact
    r = e.verify_audit()
    assert not r.ok
    assert any("truncated" in p and "checkpoint #3" in p for p in r.problems), r.problems


def test_a_fully_rehashed_chain_is_named(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite"
    build(path)
    db = sqlite3.connect(path)
    rows = db.execute(
        "SELECT seq, ts, action, memory_id, actor, detail, prev, hash FROM audit ORDER BY seq"
    ).fetchall()
    db.close()
    # rewrite the reason of record 3 and re-hash every record from there to the head
    rewritten = []
    prev = rows[1][7]
    for seq, ts, action, mid, actor, detail, _, _ in rows[2:]:
        if seq == 3:
            detail = detail.replace(b"gate passed", b"gate PASSED")
        digest = audit_hash(seq, ts, action, mid, actor, detail, prev)
        rewritten.append(("UPDATE audit SET detail = ?, prev = ?, hash = ? WHERE seq = ?",
                          (detail, prev, digest, seq)))  # fmt: skip
        prev = digest
    attack(path, *rewritten)
    e = reopen(path)
    assert e.audit.verify().ok  # every link checks out …
    r = e.verify_audit()
    assert not r.ok  # … but no longer the heads the host signed
    named = [p for p in r.problems if "rewritten and re-hashed" in p]
    assert len(named) == 3 and "checkpoint #1" in named[0]


def test_a_released_permanent_quarantine_is_named(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite"
    _, bad_id = build(path)
    attack(path, ("UPDATE memories SET permanent = 0, state = ? WHERE id = ?",
                  (int(State.CANDIDATE), bad_id)))  # fmt: skip
    e = reopen(path)
    r = e.verify_audit()
    assert not r.ok
    assert any(bad_id in p and "permanent quarantine" in p for p in r.problems)


def test_a_forged_checkpoint_signature_is_named(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite"
    build(path)
    attack(path, ("UPDATE checkpoints SET signature = zeroblob(64) WHERE seq = 2", ()))
    r = reopen(path).verify_audit()
    assert not r.ok and any("checkpoint #2: the signature does not verify" in p
                            for p in r.problems)  # fmt: skip


def test_a_device_record_corrupted_on_arrival_is_not_tampering(tmp_path: Path) -> None:
    from hirmem.memory.intake import intake_records
    from hirmem.protocol.fixedpoint import ONE
    from hirmem.protocol.records import GENESIS, Record, record_id

    device = bytes.fromhex("0102030405060708")
    rec = Record.capture(record_id(device, 1, 1), b'{"t":1}', "temp0", int(T0 * 1000),
                         bytes(32), 0x0FFF, ONE, ONE, ONE // 2, GENESIS)  # fmt: skip
    broken = dataclasses.replace(rec, payload=b'{"t":9}')  # the hash no longer matches
    e = MemoryEngine(tmp_path / "m.sqlite", clock=Clock())
    got = intake_records(e, [broken], device, b"k" * 8, GENESIS)
    assert "corrupted" in got.mismatched[rec.id.hex()]
    assert e.require(rec.id.hex()).state is State.QUARANTINED
    assert e.verify_audit().ok  # known and recorded at admission: no false alarm


def test_an_anchor_kept_outside_catches_removed_checkpoints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    from hirmem.memory import cli

    path = tmp_path / "m.sqlite"
    build(path)
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    assert cli.run(parser.parse_args(["memory", "--db", str(path), "checkpoint"])) == 0
    line = capsys.readouterr().out.strip()
    anchor = evidence.Checkpoint.parse(line)
    assert reopen(path).verify_audit(anchor).ok
    # the newest checkpoint and the records it covered beyond the one before: gone
    attack(path,
           ("DELETE FROM checkpoints WHERE seq = (SELECT max(seq) FROM checkpoints)", ()),
           ("DELETE FROM audit WHERE seq > (SELECT audit_seq FROM checkpoints "
            "ORDER BY seq DESC LIMIT 1)", ()),
           ("DELETE FROM memories WHERE id NOT IN "  # and the memories admitted since
            "(SELECT memory_id FROM audit WHERE action = 'capture')", ()),
           ("UPDATE memories SET audit_seq = min(audit_seq, (SELECT max(seq) FROM audit))", ()))
    e = reopen(path)
    assert e.verify_audit().ok  # from inside the file alone: undetectable
    e.close()
    args = parser.parse_args(["memory", "--db", str(path), "verify", "--anchor", line])
    assert cli.run(args) == 1
    assert "newer checkpoints were removed" in capsys.readouterr().out


def test_a_store_signed_by_one_key_is_not_signed_by_another(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    from hirmem.memory import cli
    from hirmem.protocol.errors import HirmemError
    from hirmem.protocol.keys import SigningKey, write_key_file

    host = SigningKey.generate()
    write_key_file(tmp_path / "host.key", host)
    path = tmp_path / "m.sqlite"
    e = MemoryEngine(path, signing_key=host)
    e.admit("kept by the daemon", "s")
    e.close()
    other = MemoryEngine(path)  # the key beside the store, not the daemon's host key
    with pytest.raises(HirmemError, match="open it with the key that signs it"):
        other.sweep()
    r = other.verify_audit()
    assert not r.ok and "--key" in str(r)
    other.store.close()
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    base = ["memory", "--db", str(path)]
    assert cli.run(parser.parse_args([*base, "admit", "x"])) == 2
    assert "--key" in capsys.readouterr().err
    assert MemoryEngine(path, signing_key=host).store.count() == 1  # refused before writing
    keyed = [*base, "--key", str(tmp_path / "host.key")]
    assert cli.run(parser.parse_args([*keyed, "admit", "y"])) == 0
    assert cli.run(parser.parse_args([*keyed, "verify"])) == 0
