#!/usr/bin/env python3
"""A board image in QEMU behind a pseudo-terminal: a stand-in for a board on a USB
serial port, to rehearse real-board runs without the board.

    .venv/bin/python tools/pty_board.py start hifive1 IMAGE --link /tmp/hirmem-tty
    .venv/bin/python tools/pty_board.py stop --link /tmp/hirmem-tty

``start`` is a flashing hook: it stops the board already running on ``--link`` (as
flashing resets a board), boots IMAGE with tools/qemu_launch.py and leaves a
background relay between QEMU's UART socket and a pseudo-terminal whose device is
linked at ``--link``; it returns once the link is there. The terminal stays when the
image exits (a halted board keeps its USB serial port). ``stop`` ends QEMU and the
relay and removes the link. QEMU ends after ``--timeout`` seconds in any case.

tests/test_embedded_boards.py takes it as ``--flash-command``:

    pytest -p pytest_embedded tests/test_embedded_boards.py -m hifive1 \\
        --port /tmp/hirmem-tty --image build/boards/hifive1/hirmem.elf \\
        --flash-command ".venv/bin/python tools/pty_board.py start {board} {elf} \\
                         --link /tmp/hirmem-tty"

The QEMU it starts does not carry the test run's mark (HIRMEM_TEST_RUN): like a real
board it outlives the test module that flashed it, until ``stop``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pty
import select
import signal
import socket
import subprocess
import sys
import time
import tty
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAUNCHER = ROOT / "tools" / "qemu_launch.py"
TEST_RUN_MARK = "HIRMEM_TEST_RUN"  # tests/conftest.py


def pid_file(link: Path) -> Path:
    return link.with_name(link.name + ".pids")


def stop(link: Path) -> None:
    pids = pid_file(link)
    if pids.is_file():
        for pid in pids.read_text().split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.killpg(int(pid), signal.SIGKILL)  # each runs in a session of its own
        pids.unlink()
    if link.is_symlink():
        link.unlink()


def relay(master: int, host: str, port: int) -> None:
    """pty master <-> QEMU's socket, until killed; after QEMU closes, keep the pty."""
    sock: socket.socket | None = socket.create_connection((host, port))
    while True:
        watched = [master] + ([sock] if sock is not None else [])
        ready, _, _ = select.select(watched, [], [], 0.1)
        if sock is not None and sock in ready:
            data = sock.recv(4096)
            if not data:
                sock.close()
                sock = None  # the board halted; its serial port stays
            else:
                os.write(master, data)
        if master in ready:
            try:
                data = os.read(master, 4096)
            except OSError:  # no one has the terminal open right now
                time.sleep(0.05)
                continue
            if sock is not None:
                sock.sendall(data)


def start(board: str, image: Path, link: Path, timeout: float) -> int:
    stop(link)
    env = {k: v for k, v in os.environ.items() if k != TEST_RUN_MARK}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "host"),
                                                      env.get("PYTHONPATH")]))  # fmt: skip
    launcher = subprocess.Popen(
        [sys.executable, str(LAUNCHER), board, str(image), "--timeout", str(timeout)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip
    assert launcher.stdout is not None and launcher.stderr is not None
    url = launcher.stdout.readline().strip()
    if not url.startswith("socket://"):
        launcher.wait(10)
        print(f"pty_board: QEMU did not start: {launcher.stderr.read().strip()}", file=sys.stderr)
        return 1
    host, port = url.removeprefix("socket://").rsplit(":", 1)
    master, slave = pty.openpty()
    tty.setraw(slave)
    link.symlink_to(os.ttyname(slave))
    bridge = os.fork()
    if bridge == 0:  # the relay: a session of its own, no terminal, no pipes
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        try:
            relay(master, host, int(port))
        finally:
            os._exit(0)
    pid_file(link).write_text(f"{launcher.pid} {bridge}\n")
    print(f"{board}: {image} on {url}, its UART at {link}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("start", help="(re)boot an image behind the pseudo-terminal")
    run.add_argument("board")
    run.add_argument("image", type=Path)
    run.add_argument("--link", type=Path, required=True, help="where the terminal's device goes")
    run.add_argument("--timeout", type=float, default=600.0, help="QEMU's seconds (600)")
    end = sub.add_parser("stop", help="end QEMU and the relay, remove the link")
    end.add_argument("--link", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "stop":
        stop(args.link)
        return 0
    return start(args.board, args.image, args.link, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
