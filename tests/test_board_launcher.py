"""tools/qemu_launch.py: the thin command line over hirmem.emulation.qemu.

And the hygiene of hirmem.emulation.qemu: one QEMU per board however it is entered,
none left behind by a launcher that is terminated or an interpreter that exits with a
board open (conftest.no_qemu_outlives_its_module checks the same after every module).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack

import pytest

from board_host import ROOT, image
from conftest import session_qemu_processes, wait_no_session_qemu
from hirmem.emulation.provision import EXIT_UNPROVISIONED
from hirmem.emulation.qemu import BOARDS, QemuBoard, QemuError, live_processes

LAUNCHER = str(ROOT / "tools" / "qemu_launch.py")


def test_launch_cli_prints_url_and_returns_the_exit_code() -> None:
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tools" / "qemu_launch.py"), "stm32f4",
         str(image("stm32f4")), "--timeout", "20"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("socket://127.0.0.1:"), url
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)):
            assert proc.wait(15) == EXIT_UNPROVISIONED  # the template image refuses
    finally:
        proc.kill()
        proc.wait()


def test_launcher_errors_say_what_is_wrong() -> None:
    try:
        QemuBoard("pdp11", image("hifive1"))
    except QemuError as exc:
        assert "unknown board 'pdp11'" in str(exc) and "hifive1" in str(exc)
    else:
        raise AssertionError("an unknown board was accepted")
    missing = ROOT / "build" / "boards" / "nope.elf"
    try:
        QemuBoard("hifive1", missing).start()
    except QemuError as exc:
        assert "no such image" in str(exc)
    else:
        raise AssertionError("a missing image was accepted")
    assert set(BOARDS) == {"mps2-an385", "hifive1", "stm32f4"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def launcher(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, LAUNCHER, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_started_board_entered_as_a_context_runs_one_qemu() -> None:
    """``stack.enter_context(board.start())`` used to launch a second QEMU and leak the
    first; entering a started board now enters it, and a second start() is refused."""
    with ExitStack() as stack:
        qb = stack.enter_context(QemuBoard("hifive1", image("hifive1"), timeout=20).start())
        assert qb.proc is not None
        assert [pid for pid, _ in session_qemu_processes()] == [qb.proc.pid]
        assert live_processes() == [qb.proc.pid]
        with pytest.raises(QemuError, match="already started"):
            qb.start()
    assert wait_no_session_qemu(5.0) == []
    assert live_processes() == []


def test_an_interpreter_that_exits_with_a_board_open_kills_its_qemu() -> None:
    code = ("import sys; from pathlib import Path; from hirmem.emulation.qemu import QemuBoard; "
            f"qb = QemuBoard('hifive1', Path({str(image('hifive1'))!r}), timeout=60).start(); "
            "print(qb.proc.pid, flush=True)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=30, check=True)
    pid = int(proc.stdout.split()[0])
    assert pid not in [p for p, _ in wait_no_session_qemu(5.0)]
    assert wait_no_session_qemu(0) == []


def test_launcher_port_option_and_a_port_in_use() -> None:
    port = free_port()
    first = launcher("hifive1", str(image("hifive1")), "--timeout", "20", "--port", str(port))
    try:
        assert first.stdout is not None
        assert first.stdout.readline().strip() == f"socket://127.0.0.1:{port}"
        second = launcher("hifive1", str(image("hifive1")), "--port", str(port))
        out, err = second.communicate(timeout=20)
        assert second.returncode == 2 and out == ""
        assert "qemu_launch: QEMU did not start hifive1" in err and "in use" in err, err
        bad = launcher("hifive1", str(image("hifive1")), "--port", "70000")
        _, err = bad.communicate(timeout=20)
        assert bad.returncode == 2 and "port 70000 is not a TCP port" in err, err
    finally:
        first.terminate()
        first.wait()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
def test_launcher_terminated_by_a_signal_takes_its_qemu_along(sig: signal.Signals) -> None:
    proc = launcher("mps2-an385", str(image("mps2-an385")), "--timeout", "60")
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        port = url.rsplit(":", 1)[1]
        running = [pid for pid, cmd in session_qemu_processes() if f":{port}," in cmd]
        assert len(running) == 1, session_qemu_processes()
        proc.send_signal(sig)
        assert proc.wait(15) == (-sig if sig == signal.SIGKILL else 128 + sig)
        assert wait_no_session_qemu(5.0) == []
    finally:
        proc.kill()
        proc.wait()


def test_the_leak_check_finds_an_orphaned_qemu_of_this_session() -> None:
    """conftest's check finds a QEMU by the session's mark even when its parent is gone
    (here a shell that started it in the background and exited)."""
    command = " ".join(["exec", "qemu-system-riscv32", "-M", "sifive_e", "-nographic",
                        "-monitor", "none", "-S", "-kernel", str(image("hifive1"))])
    subprocess.run(["sh", "-c", f"({command}) >/dev/null 2>&1 &"], check=True, timeout=10)
    try:
        found = wait_for(session_qemu_processes, 10.0)
        assert len(found) == 1 and "sifive_e" in found[0][1], found
        assert found[0][0] not in live_processes()  # not one of this interpreter's boards
    finally:
        for pid, _ in session_qemu_processes():
            os.kill(pid, signal.SIGKILL)
    assert wait_no_session_qemu(5.0) == []


def wait_for(probe: Callable[[], list[tuple[int, str]]], seconds: float) -> list[tuple[int, str]]:
    end = time.monotonic() + seconds
    while not (found := probe()) and time.monotonic() < end:
        time.sleep(0.05)
    return found
