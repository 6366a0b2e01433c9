"""Robot Framework keywords that run a hirmem board in QEMU (hirmem.emulation.qemu).

The QEMU side of keywords/qemu.resource: Start Board boots a provisioned image with
its UART on a local socket (QEMU holds the guest until the host connects, so no
byte is lost) and connects the host end (HirmemLine, the host codec); Stop Board
always kills QEMU.
"""

from __future__ import annotations

from pathlib import Path

from HirmemLine import HirmemLine

from hirmem.emulation.qemu import QemuBoard


class HirmemQemu(HirmemLine):
    ROBOT_LIBRARY_SCOPE = "SUITE"

    def __init__(self) -> None:
        super().__init__()
        self.qemu: QemuBoard | None = None

    def start_board(self, board: str, elf: str, timeout: float = 30) -> str:
        """Boot ``elf`` on ``board`` in QEMU and connect the line; returns its URL."""
        self.stop_board()
        self.qemu = QemuBoard(board, Path(elf), timeout=float(timeout)).start()
        self.connect_line(self.qemu.url, board)
        return self.qemu.url

    def stop_board(self) -> None:
        self.close_line()
        if self.qemu is not None:
            self.qemu.close()
            self.qemu = None

    def board_exit_code(self, timeout: float = 5) -> int:
        """Wait for the image to exit (semihosting); its exit code."""
        if self.qemu is None:
            raise AssertionError("no board is running")
        return self.qemu.wait(float(timeout))
