"""PlatformIO builds the boards offline, and its images behave like make's.

The set-up (tools/pio_setup.py) prepares a fresh PlatformIO core folder; `pio run`
then builds every local board through the dev-platform in boards/platformio. Where
user namespaces are available, pio runs in a network namespace of its own with no
interface up (`unshare -rn`): a download attempt cannot succeed and fails the build.
Elsewhere every proxy points at a closed local port. Either way the core folder must
afterwards hold only what the set-up made and the symbolic links to the repository's
own packages (no download cache, no registry package).

Each PlatformIO ELF is provisioned with hirmem.emulation.provision and booted in QEMU next to
the make-built image provisioned the same way: both must send the same HELLO (board,
firmware, device id, boot counter, keys, and the offer that the per-board core
configuration decides), complete the handshake and answer a status request; the
agent has the same size in both (the same BOARD_CFG_<board>), and the BIN is the
ELF's loadable image.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from board_host import ARCH_PREFIX, BOARDS, ROOT, BoardHost, image
from hirmem.emulation.provision import HostTrust, SlotSettings, provision_image
from hirmem.emulation.qemu import QemuBoard
from hirmem.protocol.keys import derive_test_key
from hirmem.protocol.messages import Hello, Status, StatusRequest
from pio_host import PIO, SETUP, can_unshare_network, prepare_core

COMPILERS = ("arm-none-eabi-gcc", "riscv64-unknown-elf-gcc")
pytestmark = pytest.mark.skipif(
    any(shutil.which(c) is None for c in COMPILERS),
    reason="the Debian cross compilers (gcc-arm-none-eabi, gcc-riscv64-unknown-elf) "
    "are not installed",
)

T0 = 1_780_000_000_000
DEVICE_ID = bytes.fromhex("50494f0000000001")
HOST_ID = bytes.fromhex("b1b2b3b4b5b6b7b8")
SETTINGS = SlotSettings(
    DEVICE_ID,
    derive_test_key("device 50494f0000000001"),
    HostTrust(derive_test_key("host b1b2b3b4b5b6b7b8").public, HOST_ID),
    boot_base=3,
)
# what the set-up and a build may leave in the core folder
CORE_PACKAGES = {
    "tool-scons",
    "toolchain-arm-none-eabi.pio-link",
    "toolchain-riscv64-unknown-elf.pio-link",
}


@dataclass(frozen=True)
class PioRun:
    core: Path
    build: Path
    output: str
    isolated: bool  # ran in a network namespace without network


@pytest.fixture(scope="module")
def pio_run(tmp_path_factory: pytest.TempPathFactory) -> PioRun:
    base = tmp_path_factory.mktemp("pio")
    core, build = base / "core", base / "build"
    env = prepare_core(base)
    cmd = [str(PIO), "run", *(a for b in BOARDS for a in ("-e", b))]
    isolated = can_unshare_network()
    if isolated:
        cmd = ["unshare", "-rn", *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=180)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    return PioRun(core, build, output, isolated)


@pytest.fixture(scope="module")
def make_built() -> None:
    image(BOARDS[0])  # make -C firmware boards, once


def test_setup_is_idempotent_and_accepted_by_platformio(pio_run: PioRun) -> None:
    piopm = pio_run.core / "packages" / "tool-scons" / ".piopm"
    before = piopm.read_bytes()
    again = subprocess.run(
        [sys.executable, str(SETUP), "--core-dir", str(pio_run.core)],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "already up to date" in again.stdout
    assert piopm.read_bytes() == before  # pio run did not replace the set-up's tool-scons
    spec = json.loads(before)["spec"]
    assert (spec["owner"], spec["name"]) == ("platformio", "tool-scons")
    state = json.loads((pio_run.core / "appstate.json").read_text())
    assert state["settings"]["enable_telemetry"] is False


def test_nothing_was_downloaded(pio_run: PioRun) -> None:
    packages = {p.name for p in (pio_run.core / "packages").iterdir()}
    platforms = {p.name for p in (pio_run.core / "platforms").iterdir()}
    assert packages == CORE_PACKAGES
    assert platforms == {"platformio.pio-link"}  # boards/platformio, linked
    downloads = pio_run.core / ".cache" / "downloads"
    assert not downloads.exists() or not any(downloads.iterdir())
    for text in ("Downloading", "Unpacking", "registry.platformio.org"):
        assert text not in pio_run.output
    for board in BOARDS:
        assert f"{board}" in pio_run.output and "SUCCESS" in pio_run.output


def agent_size(board: str, elf: Path) -> int:
    out = subprocess.run(
        [f"{ARCH_PREFIX[board]}nm", "-S", str(elf)], capture_output=True, text=True, check=True
    ).stdout
    sizes = [
        int(f[1], 16) for f in (line.split() for line in out.splitlines()) if f[-1:] == ["agent"]
    ]
    assert len(sizes) == 1, f"no single 'agent' symbol in {elf}"
    return sizes[0]


def boot(board: str, elf: Path) -> tuple[Hello, Status]:
    with QemuBoard(board, elf, timeout=20) as qb:
        host = BoardHost.connect(qb.url, HOST_ID)
        try:
            host.handshake(T0)
            host.send(StatusRequest())
            [(_, status)] = host.wait_take(Status)
        finally:
            host.close()
    assert host.hello is not None and host.frame_errors == []
    return host.hello, status


@pytest.mark.parametrize("board", BOARDS)
def test_pio_image_boots_like_the_make_image(
    board: str, pio_run: PioRun, make_built: None, tmp_path: Path
) -> None:
    elf = pio_run.build / board / "hirmem.elf"
    bin_ = elf.with_suffix(".bin")
    assert elf.is_file() and bin_.is_file(), sorted(p.name for p in elf.parent.iterdir())
    make_elf = image(board)
    assert agent_size(board, elf) == agent_size(board, make_elf)

    out_elf, out_bin = tmp_path / "pio.elf", tmp_path / "pio.bin"
    provision_image(elf, SETTINGS, out_elf, bin_, out_bin)
    ref_elf = tmp_path / "make.elf"
    provision_image(make_elf, SETTINGS, ref_elf)
    # the BIN beside the ELF is the ELF's image: provisioned alike, they still agree
    loadable = tmp_path / "objcopy.bin"
    subprocess.run(
        [f"{ARCH_PREFIX[board]}objcopy", "-O", "binary", str(out_elf), str(loadable)], check=True
    )
    assert out_bin.read_bytes() == loadable.read_bytes()

    hello, status = boot(board, out_elf)
    ref_hello, ref_status = boot(board, ref_elf)
    assert hello == ref_hello
    assert (hello.board, hello.device_id, hello.boot) == (board, DEVICE_ID, 3)
    assert (status.ring_capacity, status.captures, status.frames_bad) == (
        ref_status.ring_capacity, ref_status.captures, ref_status.frames_bad,
    )  # fmt: skip
