"""Boot a board image in QEMU with its UART on a local TCP socket.

    with QemuBoard("hifive1", Path("build/boards/hifive1/hirmem.elf"), timeout=20) as qb:
        port = serial.serial_for_url(qb.url)   # socket://127.0.0.1:PORT
        ...
        code = qb.wait(5)                      # the image's exit code (semihosting)

    with QemuBoard("mps2-an385", elf, qmp=True) as qb:   # a QMP socket as well
        ...
        qb.reset()                             # QMP system_reset: a warm reset

QEMU listens with ``-serial tcp:127.0.0.1:PORT,server=on,wait=on``: the guest does
not start before the host connects, so no early byte is lost. The port comes from
the kernel (bind to port 0, close, hand the number to QEMU); if another process
takes it in between, QEMU fails to listen and the launcher tries again with a new
port. A ``port`` given by the caller is used as it is (one attempt). The launcher
only returns once QEMU reports that it is waiting for the connection. The process
is killed when the context ends (normally or by an exception) and when ``timeout``
seconds have passed since the start, whatever the guest does; semihosting is on so
the guest's exit code becomes QEMU's.

With ``qmp=True`` QEMU also serves QMP on a Unix socket in a private temporary
directory; :meth:`QemuBoard.reset` sends ``system_reset`` through it (the CPU and the
devices reset, the image's loadable segments are written again, the rest of RAM
keeps its contents: a warm reset; the serial connection stays open). ``extra_args``
go on QEMU's command line before ``-kernel`` (e.g. a TCG ``-plugin``).

With ``nv_file`` a file backs the machine's RAM (mps2-an385: the 16 MB PSRAM at
0x21000000; hifive1: the whole 16 KB DTIM), so the board's non-volatile region
(board_nv) survives a kill of QEMU: start the same image with the same file and it
boots as after a power cycle. Each start is a power-on: the file is zeroed outside
the region first (RAM does not survive a power cut; on hifive1 the file is all of the
RAM, .noinit included). A new file reads as zeros (an empty region). stm32f4
(netduinoplus2) has no such RAM: its image keeps the region in the file itself,
through semihosting (the path goes on the semihosting command line).

No QEMU outlives its launcher: ``start()`` launches once (``with board.start()`` and
``stack.enter_context(board.start())`` enter the running board, they never launch a
second QEMU), every live process is listed in ``live_processes()`` and killed at
interpreter exit, and ``terminate_on_signals()`` turns SIGTERM and SIGHUP into
``SystemExit`` so that the ``with`` blocks of a command line program close their boards
(QEMU runs in its own session, so a signal to the launcher's group does not reach it).
``die_with_parent=True`` has the kernel kill QEMU when the launching thread ends, even
by SIGKILL (Linux).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from hirmem.protocol.errors import HirmemError

HOST = "127.0.0.1"
READY_TEXT = "waiting for connection"


@dataclass(frozen=True)
class BoardSpec:
    """How QEMU runs one board of boards/."""

    name: str
    qemu: str
    machine: str
    extra: tuple[str, ...] = ()
    # (memory backend id, size) of the machine RAM a file can back: the board's
    # non-volatile region lives there (boards/include/board.h board_nv); None: none
    nv_ram: tuple[str, str] | None = None
    # (offset, length) of that region in the file: what a power cycle keeps
    nv_region: tuple[int, int] = (0, 0)
    # the region is a host file the image writes through semihosting instead
    nv_semihost: bool = False


BOARDS: dict[str, BoardSpec] = {
    "mps2-an385": BoardSpec("mps2-an385", "qemu-system-arm", "mps2-an385",
                            nv_ram=("m0", "16M"), nv_region=(0, 2048)),
    "hifive1": BoardSpec("hifive1", "qemu-system-riscv32", "sifive_e", nv_ram=("d0", "16K"),
                         nv_region=(16 * 1024 - 512, 512)),
    "stm32f4": BoardSpec("stm32f4", "qemu-system-arm", "netduinoplus2", nv_semihost=True),
}


class QemuError(HirmemError):
    """QEMU could not be started, or did not do what was asked in time."""


def board_spec(board: str) -> BoardSpec:
    try:
        return BOARDS[board]
    except KeyError:
        raise QemuError(f"unknown board {board!r}; known: {', '.join(sorted(BOARDS))}") from None


def qemu_command(
    spec: BoardSpec,
    image: Path,
    port: int,
    *,
    qmp_path: Path | None = None,
    extra_args: Sequence[str] = (),
    nv_file: Path | None = None,
) -> list[str]:
    qmp = ["-qmp", f"unix:{qmp_path},server=on,wait=off"] if qmp_path is not None else []
    machine, backend, semihosting = spec.machine, [], "enable=on,target=native"
    if nv_file is not None and spec.nv_semihost:
        if "," in str(nv_file):
            raise QemuError(f"{nv_file}: a path with a comma cannot go on QEMU's command line")
        semihosting += f",arg=hirmem-nv,arg={nv_file}"  # boards/common/board_nv.c
    elif nv_file is not None:
        if spec.nv_ram is None:
            raise QemuError(f"{spec.name} has no non-volatile region")
        ident, size = spec.nv_ram
        machine += f",memory-backend={ident}"
        backend = ["-object", f"memory-backend-file,id={ident},size={size},"
                   f"mem-path={nv_file},share=on"]  # fmt: skip
    return [
        spec.qemu,
        "-M",
        machine,
        *backend,
        "-nographic",
        "-monitor",
        "none",
        "-semihosting-config",
        semihosting,
        "-serial",
        f"tcp:{HOST}:{port},server=on,wait=on",
        *qmp,
        *spec.extra,
        *extra_args,
        "-kernel",
        str(image),
    ]


def _die_with_parent(parent: int) -> Callable[[], None]:
    """A preexec_fn: the kernel kills the child when the thread that started it ends
    (Linux PR_SET_PDEATHSIG), even by SIGKILL. Only for a program that starts its boards
    from the main thread and keeps it (tools/qemu_launch.py)."""

    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before the fork

    def arm() -> None:
        if prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            os._exit(127)
        if os.getppid() != parent:  # the parent died before the guard was armed
            os._exit(127)

    return arm


_PR_SET_PDEATHSIG = 1
_live: set[subprocess.Popen[bytes]] = set()
_live_lock = threading.Lock()


def live_processes() -> list[int]:
    """The process ids of the QEMU processes this interpreter started and has not
    yet seen end."""
    with _live_lock:
        return sorted(p.pid for p in _live if p.poll() is None)


def _kill_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
    with _live_lock:
        _live.discard(proc)


@atexit.register
def _kill_all() -> None:
    """The last guard: a board left open when the interpreter exits is killed."""
    with _live_lock:
        procs = list(_live)
    for proc in procs:
        _kill_process(proc)


@contextlib.contextmanager
def terminate_on_signals() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise SystemExit(128 + signal number) in
    the main thread, so ``with`` blocks unwind and close their boards. Elsewhere than
    in the main thread it does nothing (Python delivers signals to the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


class QemuBoard:
    """One QEMU process running a board image; a context manager that always kills it."""

    def __init__(
        self,
        board: str,
        image: Path,
        *,
        timeout: float = 30.0,
        start_timeout: float = 10.0,
        qmp: bool = False,
        extra_args: Sequence[str] = (),
        port: int | None = None,
        die_with_parent: bool = False,
        nv_file: Path | None = None,
    ) -> None:
        if port is not None and not 0 < port < 65536:
            raise QemuError(f"port {port} is not a TCP port (1..65535)")
        self.spec = board_spec(board)
        self.fixed_port = port
        self.nv_file = nv_file
        if nv_file is not None and self.spec.nv_ram is None and not self.spec.nv_semihost:
            raise QemuError(f"{board} has no non-volatile region")
        self.die_with_parent = die_with_parent
        self.extra_args = tuple(extra_args)
        self._qmp_dir: tempfile.TemporaryDirectory[str] | None = (
            tempfile.TemporaryDirectory(prefix="hirmem-qmp-") if qmp else None
        )
        self._qmp: socket.socket | None = None
        self._qmp_buf = b""
        self.resets = 0
        self.image = image
        self.timeout = timeout
        self.start_timeout = start_timeout
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._stderr = bytearray()
        self._ready = threading.Event()
        self._reader: threading.Thread | None = None
        self._deadline = 0.0
        self._killer: threading.Timer | None = None
        self.timed_out = False

    @property
    def url(self) -> str:
        """The pyserial URL of the board's UART."""
        return f"socket://{HOST}:{self.port}"

    @property
    def qmp_path(self) -> Path | None:
        """The QMP socket (None without ``qmp=True``)."""
        return Path(self._qmp_dir.name) / "qmp.sock" if self._qmp_dir is not None else None

    @property
    def stderr(self) -> str:
        return self._stderr.decode(errors="replace")

    def start(self) -> QemuBoard:
        """Launch QEMU; once only (a second call raises QemuError)."""
        if self.proc is not None:
            raise QemuError(f"{self.spec.name} is already started (port {self.port})")
        if self.nv_file is not None and self.nv_file.exists() and self.spec.nv_ram:
            self._power_on_ram(self.nv_file)
        if not self.image.is_file():
            raise QemuError(f"{self.image}: no such image (run make -C firmware boards)")
        if shutil.which(self.spec.qemu) is None:
            raise QemuError(f"{self.spec.qemu} is not installed (Debian: qemu-system-arm/-misc)")
        last = ""
        for _attempt in range(5 if self.fixed_port is None else 1):
            self.port = _free_port() if self.fixed_port is None else self.fixed_port
            if self._launch():
                self._deadline = time.monotonic() + self.timeout
                self._killer = threading.Timer(self.timeout, self._expire)
                self._killer.daemon = True
                self._killer.start()
                return self
            last = self.stderr.strip()
            if "Address already in use" not in last:
                break
        self.close()
        raise QemuError(f"QEMU did not start {self.spec.name}: {last or 'no message'}")

    def _power_on_ram(self, path: Path) -> None:
        """Zero the RAM file outside the non-volatile region (see the module doc)."""
        offset, length = self.spec.nv_region
        with path.open("r+b") as f:
            size = f.seek(0, 2)
            for start, end in ((0, offset), (offset + length, size)):
                f.seek(start)
                while start < end:
                    n = min(end - start, 1 << 20)
                    f.write(bytes(n))
                    start += n

    def _launch(self) -> bool:
        self._stderr.clear()
        self._ready.clear()
        if self.proc is not None:  # an earlier attempt that could not listen
            _kill_process(self.proc)
        self.proc = proc = subprocess.Popen(
            qemu_command(
                self.spec,
                self.image,
                self.port,
                qmp_path=self.qmp_path,
                extra_args=self.extra_args,
                nv_file=self.nv_file,
            ),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_die_with_parent(os.getpid()) if self.die_with_parent else None,
        )
        with _live_lock:
            _live.add(proc)
        self._reader = threading.Thread(target=self._drain, args=(proc,), daemon=True)
        self._reader.start()
        end = time.monotonic() + self.start_timeout
        while time.monotonic() < end:
            if self._ready.wait(0.02):
                return True
            if self.proc.poll() is not None:
                self._reader.join(1)
                return False
        self._kill()
        raise QemuError(f"QEMU did not listen on port {self.port} within {self.start_timeout} s")

    def _drain(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self._stderr += line
            if READY_TEXT in line.decode(errors="replace"):
                self._ready.set()

    def _expire(self) -> None:
        self.timed_out = True
        self._kill()

    def _kill(self) -> None:
        if self.proc is not None:
            _kill_process(self.proc)

    def wait(self, timeout: float | None = None) -> int:
        """The exit code, waiting at most ``timeout`` seconds (and never past the
        launcher's own deadline). Raises QemuError when the board is still running."""
        if self.proc is None:
            raise QemuError("QEMU was not started")
        remaining = self._deadline - time.monotonic()
        limit = remaining + 1.0  # the killer acts at the deadline: give it a moment
        if timeout is not None and timeout < remaining:
            limit = timeout
        try:
            code = self.proc.wait(max(limit, 0.0))
        except subprocess.TimeoutExpired:
            if time.monotonic() >= self._deadline:
                self._expire()
                raise QemuError(
                    f"{self.spec.name} killed at the {self.timeout} s timeout"
                ) from None
            raise QemuError(f"{self.spec.name} still running after {limit:.1f} s") from None
        if self.timed_out:
            raise QemuError(f"{self.spec.name} killed at the {self.timeout} s timeout")
        return code

    # ---- QMP ---------------------------------------------------------------------

    def qmp(self, command: str, arguments: dict[str, object] | None = None) -> object:
        """Run one QMP command; its "return" value. Raises QemuError on an "error"."""
        sock = self._qmp_connect()
        request: dict[str, object] = {"execute": command}
        if arguments:
            request["arguments"] = arguments
        sock.sendall(json.dumps(request).encode() + b"\r\n")
        reply = self._qmp_reply()
        if "error" in reply:
            raise QemuError(f"QMP {command}: {reply['error']}")
        return reply.get("return")

    def reset(self) -> None:
        """A warm reset of the board (QMP system_reset); RAM outside the image stays."""
        self.qmp("system_reset")
        self.resets += 1

    def _qmp_connect(self) -> socket.socket:
        if self._qmp is not None:
            return self._qmp
        path = self.qmp_path
        if path is None:
            raise QemuError("this board was started without qmp=True")
        if self.proc is None or self.proc.poll() is not None:
            raise QemuError(f"{self.spec.name} is not running")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.start_timeout)
        end = time.monotonic() + self.start_timeout
        while True:
            try:
                sock.connect(str(path))
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if time.monotonic() > end:
                    sock.close()
                    raise QemuError(f"no QMP socket at {path}") from None
                time.sleep(0.01)
        self._qmp, self._qmp_buf = sock, b""
        greeting = self._qmp_message()
        if "QMP" not in greeting:
            raise QemuError(f"not a QMP greeting: {greeting}")
        sock.sendall(b'{"execute": "qmp_capabilities"}\r\n')
        reply = self._qmp_reply()
        if "error" in reply:
            raise QemuError(f"QMP qmp_capabilities: {reply['error']}")
        return sock

    def _qmp_message(self) -> dict[str, object]:
        assert self._qmp is not None
        while b"\n" not in self._qmp_buf:
            try:
                chunk = self._qmp.recv(65536)
            except TimeoutError:
                raise QemuError("QMP: no answer in time") from None
            if not chunk:
                raise QemuError("QMP: QEMU closed the socket")
            self._qmp_buf += chunk
        line, self._qmp_buf = self._qmp_buf.split(b"\n", 1)
        message = json.loads(line)
        if not isinstance(message, dict):
            raise QemuError(f"QMP: unexpected {line!r}")
        return message

    def _qmp_reply(self) -> dict[str, object]:
        while True:  # asynchronous events (RESET, ...) come in between
            message = self._qmp_message()
            if "return" in message or "error" in message:
                return message

    def close(self) -> None:
        if self._qmp is not None:
            with contextlib.suppress(OSError):
                self._qmp.close()
            self._qmp = None
        if self._killer is not None:
            self._killer.cancel()
        self._kill()
        if self._reader is not None:
            self._reader.join(2)
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()
        if self._qmp_dir is not None:
            self._qmp_dir.cleanup()

    def __enter__(self) -> QemuBoard:
        """Start the board unless ``start()`` already did (never a second QEMU)."""
        return self if self.proc is not None else self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def run_board(board: str, image: Path, timeout: float = 30.0) -> QemuBoard:
    """Start a board (the caller closes it, or uses it as a context manager)."""
    return QemuBoard(board, image, timeout=timeout).start()
