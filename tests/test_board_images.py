"""Board images: the build (zero warnings, sizes), the key slot and provisioning.

Oracles: the cross toolchain itself (objcopy of the provisioned ELF must equal the
provisioned BIN; nm gives the slot's address and the memory layout), the C layout
(hm_slot.h's _Static_assert pins 192 bytes), and file modes from the OS.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

from board_host import ARCH_PREFIX, BOARDS, ROOT, build_boards, image
from hirmem.cli import entry as cli
from hirmem.emulation.provision import (
    SLOT_SIZE,
    HostTrust,
    ProvisionError,
    SlotSettings,
    create_device_key,
    describe_slot,
    locate_slot,
    pack_slot,
    provision_image,
    read_slot,
    template_slot,
)
from hirmem.protocol.keys import KeyFileError, derive_test_key, read_key_file

DEVICE_ID = bytes.fromhex("0102030405060708")
HOST_ID = bytes.fromhex("a1a2a3a4a5a6a7a8")
DEVICE_KEY = derive_test_key("device 0102030405060708")
HOST_KEY = derive_test_key("host a1a2a3a4a5a6a7a8")
RAM_SIZE = {"mps2-an385": 256 * 1024, "hifive1": 16 * 1024, "stm32f4": 112 * 1024}


def symbols(board: str) -> dict[str, tuple[int, int]]:
    """nm -S of the board's ELF: name -> (address, size)."""
    out = subprocess.run(
        [f"{ARCH_PREFIX[board]}nm", "-S", str(image(board))],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    table: dict[str, tuple[int, int]] = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4:
            table[parts[3]] = (int(parts[0], 16), int(parts[1], 16))
        elif len(parts) == 3:
            table[parts[2]] = (int(parts[0], 16), 0)
    return table


@pytest.mark.parametrize("board", BOARDS)
def test_board_builds_without_warnings(board: str, tmp_path: Path) -> None:
    # a fresh build in its own folder: every compiler call runs and shows its output
    proc = subprocess.run(
        ["make", "-j4", "-C", str(ROOT / "firmware"), f"board-{board}", f"BOARDS_OUT={tmp_path}"],
        capture_output=True, text=True,
    )  # fmt: skip
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    assert "warning" not in text.lower(), text
    assert "-Werror" in text and "-Os" in text
    # the core was compiled for this board, into its own object folder
    assert (tmp_path / board / "core" / "hm_agent.o").is_file()
    elf, binary = tmp_path / board / "hirmem.elf", tmp_path / board / "hirmem.bin"
    assert elf.stat().st_size > 0 and 10_000 < binary.stat().st_size < 64 * 1024


def test_boards_target_prints_sizes() -> None:
    out = build_boards()
    subprocess.run(["make", "-C", str(ROOT / "firmware"), "boards"], check=True,
                   capture_output=True)  # fmt: skip
    proc = subprocess.run(
        ["make", "-s", "-C", str(ROOT / "firmware"), "boards-size"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "warning" not in out.lower()
    for board in BOARDS:
        m = re.search(rf"^{re.escape(board)}\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s", proc.stdout, re.M)
        assert m is not None, proc.stdout
        text, data, bss, agent = (int(x) for x in m.groups())
        assert text > 10_000 and bss >= agent > 5_000
        print(f"\n{board}: text {text} data {data} bss {bss} sizeof(hm_agent) {agent}")


@pytest.mark.parametrize("board", BOARDS)
def test_memory_layout_leaves_room_for_the_stack(board: str) -> None:
    syms = symbols(board)
    limit, top = syms["_stack_limit"][0], syms["_stack_top"][0]
    ram = top - RAM_SIZE[board]
    assert ram <= syms["agent"][0] < limit  # the agent is in .bss, below the stack
    stack = top - limit
    if board == "hifive1":
        # 16 KB: the agent ~9 KB, the rest of .bss small, >= 6 KB for the stack
        assert syms["agent"][1] < 9_500 and stack >= 6_000, (syms["agent"], stack)
    assert syms["hm_key_slot"][1] == SLOT_SIZE


@pytest.mark.parametrize("board", BOARDS)
def test_built_image_carries_the_template_slot(board: str) -> None:
    elf = image(board)
    loc = locate_slot(elf.read_bytes())
    assert loc.address == symbols(board)["hm_key_slot"][0]
    assert loc.address % 256 == 0
    assert read_slot(elf) == template_slot()
    binary = elf.with_suffix(".bin").read_bytes()
    assert binary[loc.bin_offset : loc.bin_offset + SLOT_SIZE] == template_slot()
    assert not describe_slot(template_slot()).provisioned


def settings(**kw: int) -> SlotSettings:
    return SlotSettings(DEVICE_ID, DEVICE_KEY, HostTrust(HOST_KEY.public, HOST_ID), **kw)


@pytest.mark.parametrize("board", BOARDS)
def test_provisioned_bin_is_objcopy_of_provisioned_elf(board: str, tmp_path: Path) -> None:
    elf = image(board)
    out_elf, out_bin = tmp_path / "p.elf", tmp_path / "p.bin"
    provision_image(elf, settings(boot_base=5), out_elf, elf.with_suffix(".bin"), out_bin)
    ref = tmp_path / "ref.bin"
    subprocess.run([f"{ARCH_PREFIX[board]}objcopy", "-O", "binary", str(out_elf), str(ref)],
                   check=True)  # fmt: skip
    assert out_bin.read_bytes() == ref.read_bytes()
    assert read_slot(out_elf) == pack_slot(settings(boot_base=5))
    info = describe_slot(read_slot(out_elf))
    assert (info.provisioned, info.device_id, info.boot_base) == (True, DEVICE_ID, 5)
    assert info.host_kid == HOST_KEY.kid
    for path in (out_elf, out_bin):  # they hold the device seed
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # the input image is untouched, and a provisioned image is not provisioned again
    assert read_slot(elf) == template_slot()
    with pytest.raises(ProvisionError, match="already provisioned"):
        provision_image(out_elf, settings(), tmp_path / "again.elf")


def test_slot_layout_and_crc() -> None:
    raw = pack_slot(settings(sensor_period_ms=100, offer_threshold=3))
    assert len(raw) == SLOT_SIZE and raw[:8] == b"HMSLOT\x00\x01"
    # version 2 (issue 14): the device's public key after its seed, the rest moves down
    assert raw[8:10] == b"\x02\x00" and SLOT_SIZE == 192
    assert raw[112:144] == HOST_KEY.public.raw and raw[144:152] == HOST_KEY.kid
    assert raw[48:80] == DEVICE_KEY.seed() and raw[80:112] == DEVICE_KEY.public.raw
    assert describe_slot(raw).device_public == DEVICE_KEY.public.raw
    damaged = raw[:30] + bytes([raw[30] ^ 1]) + raw[31:]
    assert describe_slot(raw).provisioned and not describe_slot(damaged).provisioned
    with pytest.raises(ProvisionError, match="device id must be 8 bytes"):
        SlotSettings(b"\x01", DEVICE_KEY)
    assert DEVICE_KEY.seed().hex() not in repr(settings())


def test_locate_slot_refuses_other_files(tmp_path: Path) -> None:
    with pytest.raises(ProvisionError, match="not an ELF"):
        locate_slot(b"MZ" + bytes(100))
    host_elf = Path("/bin/true").read_bytes()
    with pytest.raises(ProvisionError, match="ELF32"):
        locate_slot(host_elf)


def test_device_key_file(tmp_path: Path) -> None:
    key = tmp_path / "dev.key"
    ident = create_device_key(key, DEVICE_ID)
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    loaded = read_key_file(key)
    assert loaded.public == ident.public and ident.device_id == DEVICE_ID
    pub = json.loads(Path(f"{key}.pub.json").read_text())
    assert pub == {
        "device_id": DEVICE_ID.hex(),
        "public_key": ident.public.raw.hex(),
        "kid": ident.public.kid.hex(),
    }
    assert loaded.seed().hex() not in Path(f"{key}.pub.json").read_text()
    with pytest.raises(KeyFileError, match="already exists"):
        create_device_key(key)
    os.chmod(key, 0o644)
    with pytest.raises(KeyFileError, match="chmod 600") as err:
        read_key_file(key)
    assert loaded.seed().hex() not in str(err.value)


def test_cli_provision_never_prints_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    elf = image("hifive1")
    key = tmp_path / "dev.key"
    argv = [
        "provision", "--new-key", "--key", str(key), "--device-id", DEVICE_ID.hex(),
        "--elf", str(elf), "--out", str(tmp_path / "out"),
        "--host-public", HOST_KEY.public.raw.hex(), "--host-id", HOST_ID.hex(),
        "--boot", "3", "--sensor-ms", "100",
    ]  # fmt: skip
    assert cli.main(argv) == 0
    out = capsys.readouterr()
    seed = read_key_file(key).seed().hex()
    assert seed not in out.out and seed not in out.err
    made = tmp_path / "out" / f"hirmem-{DEVICE_ID.hex()}.elf"
    info = describe_slot(read_slot(made))
    assert (info.provisioned, info.boot_base, info.host_kid) == (True, 3, HOST_KEY.kid)
    assert (tmp_path / "out" / f"hirmem-{DEVICE_ID.hex()}.bin").is_file()
    # a bad argument is an error message, not a traceback
    assert cli.main(["provision", "--key", str(key), "--device-id", "zz"]) == 2
    assert "--device-id: not hexadecimal" in capsys.readouterr().err
