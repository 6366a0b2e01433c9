"""tools/qemu_launch.py: the thin command line over hirmem.emulation.qemu."""

from __future__ import annotations

import socket
import subprocess
import sys

from board_host import ROOT, image
from hirmem.emulation.provision import EXIT_UNPROVISIONED
from hirmem.emulation.qemu import BOARDS, QemuBoard, QemuError


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
