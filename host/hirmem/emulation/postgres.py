"""Real PostgreSQL 15 servers for tests and benchmarks: primaries, synchronous standbys.

    with Primary() as primary, Standby(primary) as standby:
        with psycopg.connect(primary.dsn) as db:
            db.execute("CREATE TABLE t (x int)"); db.execute("INSERT INTO t VALUES (1)")
        primary.kill()                   # SIGKILL, as a power cut would
        standby.promote()                # now it takes writes; t holds the row

Each server is Debian's ``postgres`` binary (``/usr/lib/postgresql/15/bin``, override
with ``HIRMEM_PG_BIN``) on its own data directory under a fresh temporary directory,
listening on a free loopback port and on a Unix socket in that directory, with
``fsync`` on (a commit is on disk as in production). Authentication is ``trust``, on
loopback only: a test harness, never a deployment. Run as root, the servers run as the
unprivileged ``postgres`` user (``nobody`` when there is none), because ``initdb``
refuses root; the temporary directory is handed to that user.

A :class:`Standby` is made with ``pg_basebackup -R -X stream`` and streams from its
primary; with ``sync=True`` (the default) the primary's ``synchronous_standby_names``
names it and ``synchronous_commit`` is ``on``, so a COMMIT on the primary returns only
once the standby has the commit on disk. Every server is a context manager whose exit
stops the server (SIGTERM, then SIGKILL) and removes its directory, whatever happened.

A server never outlives the process that started it: beside each one runs a watchdog
(:data:`WATCHDOG`, a few lines of Python in their own session) which, once its parent —
the process that started the server — is gone, however it went (a SIGKILLed test run
included), SIGKILLs the server and its children (PostgreSQL gives each child a session
of its own) and removes the server's directory. It watches the parent process rather
than rely on ``PR_SET_PDEATHSIG``: that signal follows the thread that forked, and is
cleared when ``setpriv`` changes the user the server runs as.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType

import psycopg

from hirmem.protocol.errors import HirmemError

SUPERUSER = "hirmem"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0
SETTINGS: dict[str, str] = {  # appended to each primary's postgresql.conf
    "listen_addresses": "'127.0.0.1'",
    "wal_level": "replica",
    "max_wal_senders": "8",
    "wal_keep_size": "'256MB'",  # a standby that fell behind can catch up without a slot
    "hot_standby": "on",
    "fsync": "on",
    "synchronous_commit": "on",
    "shared_buffers": "'32MB'",
    "max_connections": "60",
    "logging_collector": "off",
    "log_min_messages": "warning",
}
# argv: the pid of the process that started the server, the server's process group (0:
# none, a directory only) and the directory to remove when that process is gone
WATCHDOG = """
import os, shutil, signal, sys, time
parent, group, root = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
while os.getppid() == parent:
    if group:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            sys.exit(0)  # the server was stopped: nothing left to watch
    time.sleep(0.1)
def children(pid):  # a PostgreSQL child calls setsid(): not in the postmaster's group
    found = []
    for name in os.listdir("/proc"):
        try:
            stat = open(f"/proc/{name}/stat").read()
        except OSError:
            continue
        if name.isdigit() and int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(name))
    return found
if group:
    for pid in [group] + children(group):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    time.sleep(0.2)  # the processes' exit releases the files
shutil.rmtree(root, ignore_errors=True)
"""
WATCH_INTERVAL = 0.1  # seconds between the watchdog's looks at its parent (see WATCHDOG)


def watchdog(group: int, root: Path) -> subprocess.Popen[bytes]:
    """A watchdog (:data:`WATCHDOG`) for the process group ``group`` (0: none) and the
    directory ``root``, on behalf of this process."""
    return subprocess.Popen(  # its own session: a signal to this process's group spares it
        [sys.executable, "-I", "-S", "-c", WATCHDOG, str(os.getpid()), str(group), str(root)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip


def _end_watchdog(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(timeout=STOP_TIMEOUT)


# what a connection attempt says while the server is still coming up
TRANSIENT = ("starting up", "Connection refused", "not yet accepting", "shutting down")


class PostgresError(HirmemError):
    """A server did not start, stop or change role as asked (the log tail says why)."""


def pg_bin() -> Path:
    return Path(os.environ.get("HIRMEM_PG_BIN", "/usr/lib/postgresql/15/bin"))


def available() -> str | None:
    """None when servers can be started here; else why not (for a test's skip)."""
    missing = [n for n in ("postgres", "initdb", "pg_basebackup") if not (pg_bin() / n).exists()]
    if missing:
        return f"PostgreSQL 15 is not installed ({', '.join(missing)} missing in {pg_bin()})"
    return None


def _run_as() -> tuple[int, int] | None:
    """(uid, gid) to drop to when running as root, else None."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            entry = pwd.getpwnam(name)
            return entry.pw_uid, entry.pw_gid
    raise PostgresError("running as root and neither a 'postgres' nor a 'nobody' user exists")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Server:
    """One PostgreSQL server process on its own data directory (see the module doc)."""

    role = "server"

    def __init__(self, name: str) -> None:
        self.name = name
        self.root = Path(tempfile.mkdtemp(prefix=f"hirmem-pg-{name}-"))
        self.data = self.root / "data"
        self.sockets = self.root / "run"
        self.log_path = self.root / "server.log"
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._owner = _run_as()
        self.sockets.mkdir()
        if self._owner is not None:
            for path in (self.root, self.sockets):
                os.chown(path, *self._owner)

    # ---- addresses -----------------------------------------------------------------------

    @property
    def dsn(self) -> str:
        """A libpq connection string over TCP on loopback."""
        return f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname=postgres"

    @property
    def socket_dsn(self) -> str:
        return f"host={self.sockets} port={self.port} user={SUPERUSER} dbname=postgres"

    def connect(self, *, autocommit: bool = True, timeout: float = 10.0) -> psycopg.Connection:
        return psycopg.connect(self.dsn, autocommit=autocommit, connect_timeout=int(timeout))

    def sql(self, statement: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        """Run one statement on a short connection (autocommit); its rows, if any."""
        with self.connect() as db:
            cursor = db.execute(statement, params)
            return list(cursor.fetchall()) if cursor.description else []

    # ---- processes -----------------------------------------------------------------------

    def _command(self, *argv: str | Path) -> list[str]:
        """``argv`` run as the unprivileged owner when this process is root."""
        args = [str(a) for a in argv]
        if self._owner is None:
            return args
        uid, gid = self._owner
        return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", *args]

    def _tool(self, *argv: str | Path, timeout: float = 120.0) -> None:
        done = subprocess.run(
            self._command(*argv), capture_output=True, timeout=timeout, cwd=self.root, check=False
        )
        if done.returncode != 0:
            output = (done.stdout + done.stderr).decode(errors="replace").strip()[-2000:]
            raise PostgresError(f"{self.name}: {Path(str(argv[0])).name} failed: {output}")

    def start(self, port: int = 0) -> None:
        """Start the server on ``port`` (0: a free one; a taken one: another) and wait
        until it takes connections."""
        if self.running:
            raise PostgresError(f"{self.name} is already running")
        for attempt in range(5):  # a free port can be taken between probe and bind
            self.port = port if port and attempt == 0 else _free_port()
            log = self.log_path.open("ab")
            try:
                argv = self._command(
                    pg_bin() / "postgres", "-D", self.data, "-p", str(self.port), "-k", self.sockets
                )
                self.process = subprocess.Popen(  # its own session: killpg reaches every backend
                    argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    cwd=self.root, start_new_session=True,
                )  # fmt: skip
            finally:
                log.close()
            self._watchdog = watchdog(self.process.pid, self.root)
            if self._wait_ready():
                return
            _end_watchdog(self._watchdog)
            self._watchdog = None
            if "already in use" not in self.log_tail():
                break
        raise PostgresError(f"{self.name} did not start: {self.log_tail()}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                self.process = None
                return False
            try:
                with psycopg.connect(self.dsn, connect_timeout=2):
                    return True
            except psycopg.OperationalError as exc:
                if not any(s in str(exc) for s in TRANSIENT):
                    raise PostgresError(f"{self.name}: cannot connect: {exc}") from None
            time.sleep(0.05)
        self.kill()
        raise PostgresError(f"{self.name} not ready within {START_TIMEOUT} s: {self.log_tail()}")

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def kill(self) -> None:
        """SIGKILL the postmaster and every backend at once (a power cut, for the
        server): no shutdown checkpoint; what was committed must be on disk."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=STOP_TIMEOUT)
        self.process = None
        _end_watchdog(self._watchdog)
        self._watchdog = None

    def stop(self) -> None:
        """A fast shutdown (SIGINT), SIGKILL if it does not finish in time."""
        if self.process is None:
            return
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.kill()
                return
        # backends outlive a crashed postmaster for a moment: make sure none is left
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process = None
        _end_watchdog(self._watchdog)
        self._watchdog = None

    def restart(self, *, keep_port: bool = False) -> None:
        """Start again on the same data directory (crash recovery after :meth:`kill`), on
        another free port, or with ``keep_port`` on the same one while it is free (the
        same address: clients reconnect to it)."""
        port = self.port
        self.stop()
        self.start(port if keep_port else 0)

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.strip().splitlines()[-lines:])

    def in_recovery(self) -> bool:
        return bool(self.sql("SELECT pg_is_in_recovery()")[0][0])

    def close(self) -> None:
        """Kill the server and remove its directory (nothing of it is kept, so no
        clean shutdown is waited for)."""
        try:
            self.kill()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Server:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


_template_lock = threading.Lock()
_template_root: Path | None = None
_template_watch: list[subprocess.Popen[bytes]] = []  # kept: its exit is reaped at ours


def _template() -> Path:
    """A fresh ``initdb`` output made once per process and copied for each primary
    (initdb takes seconds; a copy takes a fraction). Removed when the process exits."""
    global _template_root
    with _template_lock:
        if _template_root is None:
            maker = Server("template")
            maker._tool(pg_bin() / "initdb", "-D", maker.data, "-U", SUPERUSER,
                        "--auth=trust", "-E", "UTF8", "--locale=C", "--no-instructions",
                        "--no-sync")  # fmt: skip
            _template_root = maker.root
            atexit.register(shutil.rmtree, maker.root, True)
            _template_watch.append(watchdog(0, maker.root))  # a killed process's template too
        return _template_root / "data"


class Primary(Server):
    """A fresh cluster (``initdb``) that takes writes; started on construction."""

    role = "primary"

    def __init__(self, name: str = "primary") -> None:
        super().__init__(name)
        try:
            self._tool("cp", "-a", _template(), self.data)
            with (self.data / "postgresql.conf").open("a") as conf:
                conf.write("\n# hirmem.emulation.postgres\n")
                conf.writelines(f"{key} = {value}\n" for key, value in SETTINGS.items())
            self.start()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Primary:
        return self

    def synchronous_standbys(self, names: list[str]) -> None:
        """Make COMMIT wait for the first of ``names`` (none: commits wait for no one)."""
        value = "" if not names else "FIRST 1 (" + ", ".join(f'"{n}"' for n in names) + ")"
        self.sql(f"ALTER SYSTEM SET synchronous_standby_names = '{value}'")
        self.sql("SELECT pg_reload_conf()")

    def replication(self) -> dict[str, tuple[str, str]]:
        """Per connected standby (application_name): (state, sync_state)."""
        rows = self.sql("SELECT application_name, state, sync_state FROM pg_stat_replication")
        return {str(name): (str(state), str(sync)) for name, state, sync in rows}


class Standby(Server):
    """A streaming replica of ``primary`` (``pg_basebackup -R``); started on
    construction. With ``sync`` it becomes the primary's synchronous standby and the
    constructor returns once the primary reports it as ``sync``."""

    role = "standby"

    def __init__(self, primary: Primary, name: str = "standby", *, sync: bool = True) -> None:
        if '"' in name or "'" in name:
            raise PostgresError(f"a standby name without quotes, not {name!r}")
        super().__init__(name)
        self.primary = primary
        try:
            self._tool(pg_bin() / "pg_basebackup", "-D", self.data, "-h", "127.0.0.1",
                       "-p", str(primary.port), "-U", SUPERUSER, "-R", "-X", "stream",
                       "-c", "fast")  # fmt: skip
            with (self.data / "postgresql.auto.conf").open("a") as conf:
                # its own name on the primary, and no synchronous standby of its own
                # (the primary's setting came along in the copy; promoted, it would wait)
                conf.write(
                    f"primary_conninfo = 'host=127.0.0.1 port={primary.port} "
                    f"user={SUPERUSER} application_name={name}'\n"
                    "synchronous_standby_names = ''\n"
                )
            self.start()
            if sync:
                current = primary.sql("SHOW synchronous_standby_names")[0][0]
                names = [name]
                if current:  # keep the ones already named, this one last
                    inner = str(current).split("(", 1)[-1].rstrip(")")
                    names = [n.strip().strip('"') for n in inner.split(",") if n.strip()]
                    names.append(name)
                primary.synchronous_standbys(names)
            self.wait_streaming(sync=sync)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Standby:
        return self

    def wait_streaming(self, *, sync: bool, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.primary.replication().get(self.name)
            if state is not None and state[0] == "streaming" and (
                not sync or state[1] in ("sync", "quorum")
            ):
                return
            time.sleep(0.05)
        raise PostgresError(
            f"{self.name} is not streaming from {self.primary.name} within {timeout} s "
            f"(replication: {self.primary.replication()}): {self.log_tail()}"
        )

    def promote(self, timeout: float = START_TIMEOUT) -> None:
        """End recovery: the standby takes writes (after its primary died, say)."""
        rows = self.sql("SELECT pg_promote(true, %s)", (int(timeout),))
        if not rows or rows[0][0] is not True or self.in_recovery():
            raise PostgresError(f"{self.name} did not promote: {self.log_tail()}")
        self.role = "primary"
