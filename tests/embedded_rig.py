"""The board under a pytest-embedded test: a QEMU board here, or a real one on a desk.

tests/test_embedded_boards.py is written once against pytest-embedded's serial
service (its ``dut`` fixture). What differs between an emulated and a real board
lives here:

- :class:`Rig` puts a provisioned image on the board and says where its UART is.
  On QEMU it boots the image (hirmem.emulation.qemu, ``-serial tcp:...,server,
  wait=on``: the guest starts when pytest-embedded opens the socket URL) and can
  reset it (QMP) and cut its power (kill QEMU, start it again on the same port
  with the same non-volatile file). On a real board (``--port /dev/ttyACM0``) it
  provisions the board's image and runs the flashing hook (``--flash-command``,
  e.g. OpenOCD or a PlatformIO upload), and resets through ``--reset-command``;
  what a real board cannot do here (a power cut on command, an exit code) skips
  with the reason.
- :class:`DutLine` is the port tests/board_host.BoardHost plays the host over: it
  reads the bytes pytest-embedded's serial service collected (the dut's pexpect
  stream, raw) and writes through ``dut.write``.
"""

from __future__ import annotations

import fcntl
import select
import shlex
import struct
import subprocess
import termios
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pexpect
import pytest
import serial
from serial.urlhandler.protocol_socket import Serial as SocketSerial

from board_host import ARCH_PREFIX, ROOT, image
from hirmem.emulation.provision import SlotSettings, provision_image
from hirmem.emulation.qemu import QemuBoard, QemuError

# the PlatformIO environment that builds each board's image for the real hardware
# (platformio.ini: other flash origin and clocks than the QEMU models)
REAL_ENVS = {"hifive1": "hifive1-revb", "stm32f4": "stm32f4-disco"}
FLASH_TIMEOUT = 120.0


class RigError(Exception):
    """The board could not be set up; the message says what to do."""


def real_image(board: str, given: str | None) -> Path:
    """The unprovisioned ELF for the real board: --image, or the PlatformIO build."""
    if given:
        return Path(given)
    env = REAL_ENVS.get(board)
    if env is None:
        raise RigError(f"{board} is a QEMU model only: no real board to run on")
    return ROOT / ".pio" / "build" / env / "firmware.elf"


@dataclass
class Rig:
    board: str
    workdir: Path
    port: str | None = None  # a real board's serial port (--port); None: QEMU
    flash_command: str | None = None
    reset_command: str | None = None
    image_path: str | None = None
    qemu: QemuBoard | None = None
    nv_file: Path | None = None
    elf: Path | None = None
    flashes: list[str] = field(default_factory=list)  # the hook's command lines, as run

    @property
    def real(self) -> bool:
        return self.port is not None

    def boot(self, settings: SlotSettings | None, *, nv: bool = False, qmp: bool = False) -> str:
        """Put the image (provisioned with ``settings``; None: unprovisioned) on the
        board; the URL or device of its UART."""
        source = real_image(self.board, self.image_path) if self.real else image(self.board)
        if not source.is_file():
            env = REAL_ENVS.get(self.board, self.board)
            raise RigError(f"{source}: no such image (build it: pio run -e {env}, or --image)")
        if settings is None:
            self.elf = source
        else:
            self.elf = self.workdir / f"{self.board}-{settings.device_id.hex()}.elf"
            bin_out = self.elf.with_suffix(".bin")
            provision_image(source, settings, self.elf)
            subprocess.run(
                [objcopy(self.board), "-O", "binary", str(self.elf), str(bin_out)], check=True
            )
        if self.real:
            self._flash()
            assert self.port is not None
            return self.port
        self.nv_file = self.workdir / "nv.bin" if nv else None
        self.qemu = QemuBoard(self.board, self.elf, timeout=60, qmp=qmp, nv_file=self.nv_file)
        self.qemu.start()
        return self.qemu.url

    def _flash(self) -> None:
        if not self.flash_command:
            raise RigError(
                "a real board needs --flash-command, e.g. \"openocd -f board/"
                "sifive-hifive1-revb.cfg -c 'program {elf} verify reset exit'\" "
                "({elf}, {bin}, {board}, {port} are filled in)"
            )
        assert self.elf is not None
        line = self.flash_command.format(
            elf=shlex.quote(str(self.elf)), bin=shlex.quote(str(self.elf.with_suffix(".bin"))),
            board=self.board, port=self.port,
        )  # fmt: skip
        self.flashes.append(line)
        proc = subprocess.run(line, shell=True, capture_output=True, text=True,
                              timeout=FLASH_TIMEOUT)  # fmt: skip
        if proc.returncode != 0:
            raise RigError(f"the flashing hook failed ({proc.returncode}): {line}\n"
                           f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")  # fmt: skip

    def reset(self) -> None:
        """A warm reset: QMP system_reset, or --reset-command on a real board."""
        if not self.real:
            assert self.qemu is not None
            self.qemu.reset()
            return
        if not self.reset_command:
            pytest.skip("a warm reset of a real board needs --reset-command "
                        "(e.g. \"openocd -f board/... -c 'init; reset run; exit'\")")  # fmt: skip
        subprocess.run(self.reset_command.format(board=self.board, port=self.port),
                       shell=True, check=True, timeout=FLASH_TIMEOUT)  # fmt: skip

    def require_emulator(self, what: str) -> None:
        if self.real:
            pytest.skip(f"{what} needs the emulator (QEMU); on a real board it is not "
                        "done on command")  # fmt: skip

    def power_cycle(self) -> None:
        """Kill QEMU (no shutdown code runs) and power on again: the same image, the
        same non-volatile file, the same TCP port."""
        self.require_emulator("a power cut")
        assert self.qemu is not None and self.elf is not None
        port = self.qemu.port
        self.qemu.close()
        self.qemu = QemuBoard(self.board, self.elf, timeout=60, port=port, nv_file=self.nv_file)
        for _ in range(50):  # the old process may hold the port for a moment
            try:
                self.qemu.start()
                return
            except QemuError:
                self.qemu.close()
                self.qemu = QemuBoard(self.board, self.elf, timeout=60, port=port,
                                      nv_file=self.nv_file)  # fmt: skip
                time.sleep(0.1)
        raise RigError(f"QEMU could not listen on port {port} again")

    def close(self) -> None:
        if self.qemu is not None:
            self.qemu.close()


def objcopy(board: str) -> str:
    return f"{ARCH_PREFIX[board]}objcopy"


class SocketPort(SocketSerial):  # type: ignore[misc]  # pyserial has no types
    """pyserial's socket:// port whose ``in_waiting`` is what the kernel holds.

    pyserial's own says 1 whenever the socket is readable, and pytest-embedded's
    serial service reads ``in_waiting`` bytes every 50 ms: 20 bytes a second. When
    the board closes the line (QEMU exited) it says 0 and notes it in
    ``peer_closed``: pytest-embedded would otherwise retry the connection for 9 s."""

    peer_closed = False

    @classmethod
    def open_url(cls, url: str) -> SocketPort:
        port = cls(None, timeout=0.05)
        port.port = url
        port.open()
        return port

    @property
    def in_waiting(self) -> int:
        if not self.is_open:
            raise serial.PortNotOpenError()
        ready, _, _ = select.select([self._socket], [], [], 0)
        if not ready:
            return 0
        held = fcntl.ioctl(self._socket.fileno(), termios.FIONREAD, b"\0\0\0\0")
        count: int = struct.unpack("i", held)[0]
        if count == 0:  # readable yet empty: the peer closed
            self.peer_closed = True
        return count


class DutLine:
    """A pyserial-like port over a pytest-embedded dut, for BoardHost."""

    def __init__(self, dut: Any) -> None:
        self.dut = dut

    def read(self, size: int) -> bytes:
        proc = self.dut.pexpect_proc
        if proc.buffer:  # bytes an expect() call read past its match
            data: bytes = proc.buffer[:size]
            proc.buffer = proc.buffer[size:]
            return data
        try:
            data = proc.read_nonblocking(size, timeout=0.02)
        except pexpect.TIMEOUT:
            data = b""
        except pexpect.EOF:
            raise serial.SerialException("pytest-embedded's serial stream ended") from None
        if not data:
            if getattr(self.dut.serial.proc, "peer_closed", False):
                raise serial.SerialException("the board closed the line")
            time.sleep(0.01)  # the stream is a file being written: no blocking read
        return data

    def write(self, data: bytes) -> None:
        self.dut.write(data)

    def flush(self) -> None:
        self.dut.serial.proc.flush()

    def close(self) -> None:
        """Nothing: the dut fixture closes the port."""

    def power_cycle(self, rig: Rig) -> None:
        """Cut the board's power with the serial service stopped, then open the line
        to the new power-on and let the service read it again."""
        with self.dut.serial.disable_redirect_thread(kill_port=True):
            rig.power_cycle()
            self.dut.serial.proc.open()
            self.dut.serial.proc.peer_closed = False
        self.dut.serial.start_redirect_thread()  # also if the old reader had ended
