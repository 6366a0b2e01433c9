"""A power cut after the N-th non-volatile write, for every N of a scenario, on a board.

The cut images are the board images built with -DBOARD_NV_CUT (boards/common/board_nv.c)
into build/boards-nvcut/; each N is a copy with ``board_nv_cut_at`` patched to N. The
scenario on a new region: power on (the boot counter: an erase and a program), a
knowledge push (a program), another (a page switch on hifive1: an erase and a
program). With the cut at write N the board tears that write and stops (exit 5); the
normal image then powers on on the same region, and:
 - its boot counter is above every boot counter the cut run announced in HELLO;
 - its knowledge head is at least the last version the host saw accepted (never a
   rollback), at most the last one pushed, and an older version is refused.
"""

from __future__ import annotations

import struct
import subprocess
from functools import cache
from pathlib import Path

import pytest

from board_host import ROOT, BoardHost, provisioned
from hirmem.emulation.provision import locate_slot, provision_image
from hirmem.emulation.qemu import QemuBoard, QemuError
from hirmem.protocol.messages import KnowledgePush, KnowledgeResult, Status, StatusRequest
from test_board_qemu import BOOT, HOST_ID, T0, knowledge_pack, settings

CUT_OUT = ROOT / "build" / "boards-nvcut"
EXIT_NV = 5  # boards/include/board.h BOARD_EXIT_NV
# The scenario's NV writes on a new region: mps2-an385 (1 KB pages) erase + program at
# boot, a program per push; hifive1 (256 B pages, two records each) switches pages at
# the second push: one more erase.
WRITES = {"mps2-an385": 4, "hifive1": 5, "stm32f4": 4}


@cache
def cut_image(board: str) -> Path:
    proc = subprocess.run(
        ["make", "-s", "-C", str(ROOT / "firmware"), f"board-{board}",
         f"BOARDS_OUT={CUT_OUT}", "BOARD_EXTRA_CFLAGS=-DBOARD_NV_CUT"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return CUT_OUT / board / "hirmem.elf"


def cut_at(board: str, n: int, tmp_path: Path) -> Path:
    """A provisioned cut image that tears its n-th NV write."""
    elf = tmp_path / f"cut-{n}.elf"
    provision_image(cut_image(board), settings(), elf)
    data = bytearray(elf.read_bytes())
    at = locate_slot(bytes(data), "board_nv_cut_at", 4).elf_offset
    data[at:at + 4] = struct.pack("<I", n)
    elf.write_bytes(bytes(data))
    return elf


def scenario(board: str, elf: Path, nv: Path) -> tuple[list[int], int, int, bool]:
    """Run the scenario until the board stops: (boots announced, last version seen
    accepted, last version pushed, whether it stopped)."""
    boots: list[int] = []
    accepted = pushed = 0
    with QemuBoard(board, elf, timeout=30, nv_file=nv) as qb:
        host = BoardHost.connect(qb.url, HOST_ID)
        try:
            try:
                host.wait_for(lambda: host.hello is not None, 10, "HELLO")
            except AssertionError:  # the board stopped (closed the line) before it
                assert qb.wait(10) == EXIT_NV
                return boots, accepted, pushed, True
            assert host.hello is not None
            boots.append(host.hello.boot)
            host.handshake(T0)
            for version in (5, 6):
                pushed = version
                host.send(KnowledgePush(knowledge_pack(version).encoded))
                try:
                    [(_, result)] = host.wait_take(KnowledgeResult, timeout=10)
                except AssertionError:
                    break  # it stopped before it answered
                assert isinstance(result, KnowledgeResult) and result.status == 0
                accepted = version
        finally:
            host.close()
        try:
            code = qb.wait(10)
        except QemuError:
            code = None  # still running: the cut came after the scenario's writes
        assert code in (None, EXIT_NV), code
    return boots, accepted, pushed, code == EXIT_NV


@pytest.mark.parametrize("board", ["mps2-an385", "hifive1", "stm32f4"])
def test_a_cut_after_every_nv_write(board: str, tmp_path: Path) -> None:
    normal = provisioned(board, tmp_path, settings())
    for n in range(1, WRITES[board] + 2):  # every write, then one past the last
        nv = tmp_path / f"nv-{n}.bin"
        boots, accepted, pushed, stopped = scenario(board, cut_at(board, n, tmp_path), nv)
        assert stopped == (n <= WRITES[board]), n
        with QemuBoard(board, normal, timeout=30, nv_file=nv) as qb:  # power back on
            host = BoardHost.connect(qb.url, HOST_ID)
            try:
                host.handshake(T0 + 1000)
                assert host.hello is not None
                assert host.hello.boot >= BOOT and all(host.hello.boot > b for b in boots)
                host.send(StatusRequest())
                [(_, status)] = host.wait_take(Status)
                assert isinstance(status, Status)
                held = status.knowledge_seq
                assert accepted <= held <= pushed, (n, accepted, held, pushed)
                if held:
                    host.send(KnowledgePush(knowledge_pack(held - 1).encoded))
                    [(_, result)] = host.wait_take(KnowledgeResult)
                    assert isinstance(result, KnowledgeResult)
                    assert (result.status, result.held_seq) == (2, held)  # rollback refused
            finally:
                host.close()
