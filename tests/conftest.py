"""Shared test helpers: the committed wire vectors and the generator's test keys."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import settings

from hirmem.protocol.keys import derive_test_key

# The test command is a gate: the same examples on every run, no wall-clock deadline on
# shared machines. HIRMEM_EXPLORE=1 draws fresh examples (and keeps failures in
# .hypothesis/ as usual) for hunting.
settings.register_profile("gate", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("explore", deadline=None, print_blob=True)
settings.load_profile("explore" if os.environ.get("HIRMEM_EXPLORE") else "gate")

# Every process this test session starts inherits this mark, so a QEMU it leaves behind
# is found even after its parent is gone (reparented) and never confused with another
# session's (other worktrees run their tests on the same machine).
RUN_MARK = "HIRMEM_TEST_RUN"
os.environ[RUN_MARK] = f"{os.getpid()}-{uuid.uuid4().hex}"

# The semantic substrate embeds passages with MiniLM where it is installed; the tests use
# the hashed fallback unless they ask for MiniLM themselves: fast, and the same on every
# machine whether or not the model is installed.
os.environ.setdefault("HIRMEM_EMBEDDER", "hash")

ROOT = Path(__file__).resolve().parent.parent
VECTORS = ROOT / "protocol" / "vectors"
CDDL = ROOT / "protocol" / "hirmem.cddl"
GEN_VECTORS = ROOT / "tools" / "gen_vectors.py"


@cache
def load_vectors(name: str) -> dict[str, Any]:
    """One committed vector file, e.g. ``load_vectors("frames")``."""
    data: dict[str, Any] = json.loads((VECTORS / f"{name}.json").read_text(encoding="utf-8"))
    return data


def vector_params(name: str, section: str) -> list[Any]:
    """The cases of one section as ``pytest.param``s, each named after its case."""
    cases: list[dict[str, Any]] = load_vectors(name)[section]
    return [pytest.param(case, id=str(case.get("name", index))) for index, case in enumerate(cases)]


DEVICE_KEY = derive_test_key("device 0102030405060708")
OTHER_KEY = derive_test_key("device 1112131415161718")
HOST_KEY = derive_test_key("host a1a2a3a4a5a6a7a8")
DEVICE_ID = bytes.fromhex("0102030405060708")
OTHER_ID = bytes.fromhex("1112131415161718")
HOST_ID = bytes.fromhex("a1a2a3a4a5a6a7a8")


@pytest.fixture(scope="session")
def gen_vectors() -> ModuleType:
    """tools/gen_vectors.py, imported from its path (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location("gen_vectors", GEN_VECTORS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def session_qemu_processes() -> list[tuple[int, str]]:
    """(pid, command line) of every live qemu-system process started under this test
    session, wherever it now hangs in the process tree (zombies are not alive)."""
    mark = f"{RUN_MARK}={os.environ[RUN_MARK]}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if not (entry / "comm").read_text().startswith("qemu-system"):
                continue
            stat = (entry / "stat").read_text()
            if stat[stat.rindex(")") + 2] == "Z":
                continue
            if mark not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # it ended while we looked
            continue
        found.append((int(entry.name), cmdline.strip()))
    return found


def wait_no_session_qemu(seconds: float) -> list[tuple[int, str]]:
    """The session's QEMU processes still alive after waiting up to ``seconds``."""
    end = time.monotonic() + seconds
    while True:
        left = session_qemu_processes()
        if not left or time.monotonic() >= end:
            return left
        time.sleep(0.05)


@pytest.fixture(autouse=True, scope="module")
def no_qemu_outlives_its_module(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test module (its fixtures closed): no QEMU it started is alive. One
    that is gets killed (so the next module starts clean) and fails the module."""
    yield
    left = wait_no_session_qemu(5.0)
    for pid, _ in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if left:
        listing = "\n".join(f"  {pid}: {cmd}" for pid, cmd in left)
        pytest.fail(f"{request.module.__name__} left {len(left)} QEMU process(es) "
                    f"running:\n{listing}", pytrace=False)


# ---- board suites on pytest-embedded (tests/test_embedded_boards.py) -----------------

EMBEDDED_SUITE = "test_embedded_boards.py"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hirmem real boards", "tests/test_embedded_boards.py on hardware")
    group.addoption("--flash-command", default=None,
                    help="shell command that flashes a provisioned image; {elf} {bin} "
                    "{board} {port} are filled in")  # fmt: skip
    group.addoption("--reset-command", default=None,
                    help="shell command that resets the board (warm reset); {board} {port}")
    group.addoption("--image", default=None,
                    help="the board's unprovisioned ELF (default: PlatformIO's build of "
                    "hifive1-revb / stm32f4-disco)")  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    for board in ("mps2_an385", "hifive1", "stm32f4"):
        config.addinivalue_line("markers", f"{board}: a board suite case on the {board} board")
    config.addinivalue_line(
        "markers", "board_setup(unprovisioned, nv, qmp, **slot): how the image goes on the board"
    )
    config.addinivalue_line(
        "markers", "sqlite_only(reason): a substrate test skipped on PostgreSQL (semantic_backends)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.pluginmanager.has_plugin("pytest_embedded"):
        return
    skip = pytest.mark.skip(
        reason="pytest-embedded is not loaded (pyproject: -p no:pytest_embedded); run "
        f"pytest -p pytest_embedded tests/{EMBEDDED_SUITE} (tools/run test does)"
    )
    for item in items:
        if item.path.name == EMBEDDED_SUITE:
            item.add_marker(skip)
