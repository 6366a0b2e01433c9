"""Real PostgreSQL 15 servers from hirmem.emulation.postgres: synchronous replication,
SIGKILL and promotion, a second independent primary, and that nothing is left running."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import psycopg
import pytest

from hirmem.emulation import postgres
from hirmem.emulation.postgres import Primary, Standby

pytestmark = pytest.mark.skipif(postgres.available() is not None,
                                reason=str(postgres.available()))  # fmt: skip


def alive(pid: int) -> bool:
    """Running (a zombie waiting for init to reap it is dead), after a moment's grace
    for the kernel to deliver a SIGKILL to a whole process group."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return False
        if state in ("Z", "X"):
            return False
        time.sleep(0.05)
    return True


def test_a_synchronous_commit_is_on_the_standby_and_survives_failover() -> None:
    with Primary() as primary, Standby(primary) as standby:
        assert primary.replication() == {"standby": ("streaming", "sync")}
        assert standby.in_recovery() and not primary.in_recovery()
        primary.sql("CREATE TABLE acked (n integer PRIMARY KEY)")
        with primary.connect() as db:
            for n in range(200):
                db.execute("INSERT INTO acked VALUES (%s)", (n,))  # each its own commit
        # synchronous_commit=on: the standby has flushed each commit before it returned;
        # remote_apply is not asked for, so wait for replay before reading there
        lsn = primary.sql("SELECT pg_current_wal_lsn()")[0][0]
        flushed = standby.sql("SELECT pg_last_wal_receive_lsn() >= %s::pg_lsn", (lsn,))
        assert flushed == [(True,)]
        primary.kill()
        assert not primary.running
        standby.promote()
        assert not standby.in_recovery()
        assert standby.sql("SELECT count(*), min(n), max(n) FROM acked") == [(200, 0, 199)]
        standby.sql("INSERT INTO acked VALUES (200)")  # and it takes writes now


def test_a_commit_waits_for_the_synchronous_standby() -> None:
    """With the standby gone a commit does not return: the wait is real."""
    with Primary() as primary, Standby(primary) as standby:
        primary.sql("CREATE TABLE t (x int)")
        standby.kill()
        with primary.connect() as db:
            # cancel the wait after 1.5 s: PostgreSQL then warns the commit is local only
            cancel = threading.Timer(1.5, db.cancel)
            notices: list[str] = []
            db.add_notice_handler(lambda d: notices.append(str(d.message_primary)))
            started = time.monotonic()
            cancel.start()
            db.execute("INSERT INTO t VALUES (1)")
            waited = time.monotonic() - started
            cancel.cancel()
        assert waited >= 1.4
        assert any("wait for synchronous replication" in n for n in notices), notices


def test_a_killed_primary_restarts_with_its_commits() -> None:
    with Primary() as primary:
        primary.sql("CREATE TABLE t (x int)")
        primary.sql("INSERT INTO t SELECT generate_series(1, 1000)")
        pid = primary.pid
        assert pid is not None
        primary.kill()
        assert not alive(pid)
        primary.restart()
        assert primary.sql("SELECT count(*) FROM t") == [(1000,)]


def test_two_primaries_are_independent_and_everything_stops() -> None:
    pids: list[int] = []
    roots = []
    with Primary("one") as one, Primary("two") as two:
        assert one.port != two.port
        one.sql("CREATE TABLE t (x int)")
        one.sql("INSERT INTO t VALUES (1)")
        two.sql("CREATE TABLE t (x int)")
        assert two.sql("SELECT count(*) FROM t") == [(0,)]
        pids = [p for p in (one.pid, two.pid) if p is not None]
        roots = [one.root, two.root]
        backends = one.sql("SELECT pid FROM pg_stat_activity WHERE backend_type <> 'walsender'")
        pids += [int(str(p)) for (p,) in backends]
    assert pids and not any(alive(p) for p in pids)
    assert not any(r.exists() for r in roots)


def test_a_failed_start_leaves_nothing_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    before = set(os.listdir("/tmp"))
    monkeypatch.setitem(postgres.SETTINGS, "shared_buffers", "'not a size'")
    with pytest.raises(postgres.PostgresError, match="did not start"):
        Primary("broken")
    left = {n for n in set(os.listdir("/tmp")) - before if n.startswith("hirmem-pg-broken")}
    assert not left


def test_writes_through_a_failover_lose_no_acknowledged_row() -> None:
    """A client commits rows one by one; the primary is SIGKILLed mid-stream and the
    synchronous standby promoted; the client reconnects there and goes on. Every row
    whose COMMIT returned is on the new primary; a row whose COMMIT got no answer may
    or may not be (it is in doubt, never acknowledged)."""
    with Primary() as primary, Standby(primary) as standby:
        primary.sql("CREATE TABLE acked (n integer PRIMARY KEY)")
        acked: list[int] = []
        in_doubt: list[int] = []
        stop = threading.Event()
        target: list[postgres.Server] = [primary]

        def write() -> None:
            n = 0
            while not stop.is_set():
                try:
                    with target[0].connect(timeout=2) as db:
                        while not stop.is_set():
                            n += 1
                            try:
                                db.execute("INSERT INTO acked VALUES (%s)", (n,))
                            except psycopg.OperationalError:
                                in_doubt.append(n)
                                raise
                            acked.append(n)
                except psycopg.OperationalError:
                    time.sleep(0.05)  # the server is gone: wait for the next one

        writer = threading.Thread(target=write)
        writer.start()
        try:
            while len(acked) < 300:
                time.sleep(0.01)
            primary.kill()
            killed_at = time.monotonic()
            standby.promote()
            target[0] = standby
            before = len(acked)
            while len(acked) < before + 100:
                time.sleep(0.01)
            recovered = time.monotonic() - killed_at
        finally:
            stop.set()
            writer.join(30)
        present = {int(str(n)) for (n,) in standby.sql("SELECT n FROM acked")}
        assert set(acked) <= present, sorted(set(acked) - present)[:10]
        assert present <= set(acked) | set(in_doubt)
        print(f"failover: {len(acked)} rows acknowledged, {len(in_doubt)} in doubt, "
              f"writes again {recovered:.2f} s after the SIGKILL")
