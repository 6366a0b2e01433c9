"""Boards whose state survives a power cycle: the non-volatile region in QEMU.

A file holds the board's non-volatile region (hirmem.emulation.qemu ``nv_file``: it
backs mps2-an385's PSRAM and hifive1's DTIM; stm32f4's image writes it through
semihosting), the image keeps hm_persist's records there (board_nv, firmware/app):
killing QEMU and starting the same image with the same file is a power cycle. The
boot counter grows across cold boots (record ids never repeat) and the knowledge head
is kept, so a superseded version stays refused (before, a cold boot reported
knowledge_seq 0 and took the old version back).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from board_host import BoardHost, provisioned
from hirmem.emulation.qemu import QemuBoard, QemuError
from hirmem.protocol.messages import KnowledgePush, KnowledgeResult, Status, StatusRequest
from test_board_qemu import BOOT, HOST_ID, knowledge_pack, settings

NV_BOARDS = ("mps2-an385", "hifive1", "stm32f4")


def power_cycle(board: str, elf: Path, nv: Path) -> BoardHost:
    """One power-on: boot the image on the region, complete the handshake."""
    qb = QemuBoard(board, elf, timeout=30, nv_file=nv).start()
    host = BoardHost.connect(qb.url, HOST_ID)
    host.qemu = qb  # type: ignore[attr-defined]
    host.handshake(1_780_000_000_000)
    return host


def power_off(host: BoardHost) -> None:
    host.close()
    host.qemu.close()  # type: ignore[attr-defined]  # a kill: no shutdown code runs


@pytest.mark.parametrize("board", NV_BOARDS)
def test_boot_counter_and_knowledge_head_survive_power_cycles(board: str, tmp_path: Path) -> None:
    elf = provisioned(board, tmp_path, settings())
    nv = tmp_path / "nv.bin"
    boots = []
    five, four = knowledge_pack(5), knowledge_pack(4)

    host = power_cycle(board, elf, nv)  # a new region: the slot's boot base
    try:
        assert host.hello is not None
        boots.append(host.hello.boot)
        host.send(KnowledgePush(five.encoded))
        [(_, accepted)] = host.wait_take(KnowledgeResult)
        assert accepted == KnowledgeResult(five.pack_id, 0, 0, 5)
    finally:
        power_off(host)

    for _ in range(2):
        host = power_cycle(board, elf, nv)
        try:
            assert host.hello is not None
            boots.append(host.hello.boot)
            host.send(StatusRequest())
            [(_, status)] = host.wait_take(Status)
            assert isinstance(status, Status) and status.knowledge_seq == 5
            host.send(KnowledgePush(four.encoded))
            [(_, refused)] = host.wait_take(KnowledgeResult)
            assert refused == KnowledgeResult(four.pack_id, 2, 7, 5)  # rollback, held 5
        finally:
            power_off(host)
    assert boots == [BOOT, BOOT + 1, BOOT + 2]


def test_a_region_path_qemu_cannot_take_is_refused(tmp_path: Path) -> None:
    board = QemuBoard("stm32f4", provisioned("stm32f4", tmp_path, settings()),
                      nv_file=tmp_path / "a,b.bin")  # fmt: skip
    with pytest.raises(QemuError, match="a path with a comma"):
        board.start()
    board.close()
