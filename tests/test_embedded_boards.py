"""The board suites on pytest-embedded: the same file for QEMU boards and real ones.

Every test talks to the board through pytest-embedded's serial service (the
``dut`` fixture, ``--embedded-services serial``): the bytes it collected are read
by tests/board_host.BoardHost (through embedded_rig.DutLine), frames go out with
``dut.write``. Where the UART is comes from the ``port`` fixture, overridden here:

- no ``--port``: each test boots a freshly provisioned image in QEMU and hands
  pytest-embedded its socket URL (``-serial tcp:...,server,wait=on``);
- ``--port /dev/ttyACM0 -m hifive1 --flash-command "..."``: a real board; each
  test provisions the board's image (--image, or PlatformIO's build of
  hifive1-revb / stm32f4-disco) with the test's keys and flashes it with the hook.
  What only the emulator can do skips with the reason.

Markers select the board (``-m hifive1``, ``-m stm32f4``, ``-m mps2_an385``).
Suites: boot, handshake, verdicts, packs, knowledge, resets, power cuts. The
oracles are those of tests/test_board_qemu.py (the host gate, record ids, the
device's public key, the knowledge pack sequence).

pytest-embedded is not loaded in the default pytest run (pyproject: -p
no:pytest_embedded, its autouse fixtures would run for every test): run this file
with ``pytest -p pytest_embedded tests/test_embedded_boards.py`` (tools/run test
does); without the plugin its tests skip and say so.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from board_host import BOARDS, BoardHost
from embedded_rig import DutLine, Rig, RigError, SocketPort
from hirmem.emulation.provision import EXIT_UNPROVISIONED
from hirmem.protocol.gate import evaluate
from hirmem.protocol.messages import (
    Capture,
    CaptureResult,
    KnowledgePush,
    KnowledgeResult,
    PackOffer,
    Status,
    StatusRequest,
)
from hirmem.protocol.packs import PackKind, verify_pack
from hirmem.protocol.records import GENESIS, Record, normalise, record_id
from test_board_qemu import (
    BOOT,
    CASES,
    CONTEXT,
    DEVICE_ID,
    DEVICE_KEY,
    HOST_ID,
    HOST_KEY,
    MEMORY_KEYS,
    OFFER,
    T0,
    knowledge_pack,
    settings,
)

pytestmark = pytest.mark.filterwarnings(
    # pytest-embedded records its options as junit attributes for every test
    "ignore:record_xml_attribute is an experimental feature"
)


def marker_name(board: str) -> str:
    return board.replace("-", "_")


@pytest.fixture(params=[pytest.param(b, marks=getattr(pytest.mark, marker_name(b)))
                        for b in BOARDS])  # fmt: skip
def board(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


# ---- pytest-embedded's fixtures, set for these suites ------------------------------


@pytest.fixture
def embedded_services() -> str:
    return "serial"


@pytest.fixture(scope="session")
def session_root_logdir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """pytest-embedded's logs under pytest's own temporary folder (kept: the last 3)."""
    return str(tmp_path_factory.getbasetemp())


@pytest.fixture
def rig(request: pytest.FixtureRequest, board: str, tmp_path: Path) -> Iterator[Rig]:
    config = request.config
    real_port = config.getoption("port", None)
    if real_port and config.option.markexpr.strip() != marker_name(board):
        pytest.fail(f"on a real board ({real_port}) select the board that is connected: "
                    "-m hifive1 or -m stm32f4", pytrace=False)  # fmt: skip
    the_rig = Rig(
        board, tmp_path, real_port, config.getoption("flash_command"),
        config.getoption("reset_command"), config.getoption("image"),
    )  # fmt: skip
    yield the_rig
    the_rig.close()


@pytest.fixture
def port(request: pytest.FixtureRequest, rig: Rig) -> str | SocketPort:
    """Where pytest-embedded opens the board's UART, after the image is on the board
    (``@pytest.mark.board_setup(...)``: unprovisioned, nv, qmp and slot settings):
    the real board's device, or QEMU's socket URL opened as a SocketPort (which
    pytest-embedded's serial service takes as it is)."""
    mark = request.node.get_closest_marker("board_setup")
    kw: dict[str, Any] = dict(mark.kwargs) if mark else {}
    unprovisioned = kw.pop("unprovisioned", False)
    nv, qmp = kw.pop("nv", False), kw.pop("qmp", False)
    try:
        where = rig.boot(None if unprovisioned else settings(**kw), nv=nv, qmp=qmp)
    except RigError as exc:
        pytest.fail(str(exc), pytrace=False)
    return where if rig.real else SocketPort.open_url(where)


@pytest.fixture
def line(dut: Any) -> DutLine:
    return DutLine(dut)


@pytest.fixture
def host(line: DutLine) -> BoardHost:
    return BoardHost(line, HOST_ID)


def patience(rig: Rig) -> float:
    """A real board boots from flash after the hook: give it more time."""
    return 15.0 if rig.real else 5.0


# ---- boot --------------------------------------------------------------------------


def test_boot_hello_carries_the_provisioned_identity(
    board: str, dut: Any, host: BoardHost, rig: Rig
) -> None:
    # pytest-embedded's own expect on the raw stream: the board's name is CBOR text
    # inside HELLO; the bytes expect consumed go to the host codec, nothing is lost
    dut.expect_exact(board.encode(), timeout=patience(rig))
    host.feed(dut.pexpect_proc.before + dut.pexpect_proc.after)
    host.wait_for(lambda: host.hello is not None, patience(rig), "HELLO")
    hello = host.hello
    assert hello is not None
    assert (hello.board, hello.firmware, hello.device_id) == (board, "0.1.0", DEVICE_ID)
    if not rig.real:  # a real board's region may hold boots from earlier runs
        assert hello.boot == BOOT
    assert (hello.device_kid, hello.host_kid) == (DEVICE_KEY.kid, HOST_KEY.kid)
    assert (hello.max_frame, hello.max_message, hello.window) == (*OFFER[board], 4)
    assert host.frame_errors == []


@pytest.mark.board_setup(unprovisioned=True)
def test_boot_unprovisioned_image_refuses_to_start(host: BoardHost, rig: Rig) -> None:
    host.pump(1.0 if not rig.real else 5.0)
    assert host.wire_in == 0 and host.hello is None  # not a byte on the line
    if rig.qemu is not None:  # the exit code only the emulator reports
        assert rig.qemu.wait(10) == EXIT_UNPROVISIONED
        host.pump(0.2)
        assert host.disconnected  # the serial service saw the line close


# ---- handshake and verdicts -----------------------------------------------------------


def test_handshake_then_status(board: str, host: BoardHost, rig: Rig) -> None:
    ack = host.handshake(T0, timeout=patience(rig))
    host.send(StatusRequest())
    [(_, status)] = host.wait_take(Status)
    assert ack.max_frame == min(512, OFFER[board][0]) and host.last_ack >= 1
    assert (status.captures, status.frames_bad, status.knowledge_seq) == (0, 0, 0)
    assert status.ring_capacity > 0 and status.frames_good >= 2


def test_verdicts_match_the_host_gate(board: str, host: BoardHost, rig: Rig) -> None:
    host.handshake(T0, timeout=patience(rig))
    refs = [host.send(Capture(src, payload, CONTEXT, flags, q, p, 0x8000))
            for src, payload, flags, q, p in CASES]  # fmt: skip
    results = host.wait_take(CaptureResult, len(CASES))
    host.send(StatusRequest())
    [(_, status)] = host.wait_take(Status)
    boot = host.hello.boot if host.hello else BOOT
    for n, ((src, payload, flags, q, p), ref, (_, got)) in enumerate(
        zip(CASES, refs, results, strict=True), start=1
    ):
        g = evaluate(normalise(flags, payload, src, T0, CONTEXT), q, p)
        assert got == CaptureResult(
            ref, 0, record_id(DEVICE_ID, boot, n), g.flags, g.h, g.i, g.r, g.f, g.c, g.rn,
            g.w, int(g.verdict), int(g.hard), int(g.disposition),
        )  # fmt: skip
    assert {(m.verdict, m.hard != 0) for _, m in results} >= {(0, False), (2, True)}
    assert (status.captures, status.ring_used, status.frames_bad) == (len(CASES), len(CASES), 0)


# ---- packs and knowledge ------------------------------------------------------------------


@pytest.mark.board_setup(offer_threshold=2)
def test_packs_device_pack_verifies_on_the_host(host: BoardHost, rig: Rig) -> None:
    host.handshake(T0, timeout=patience(rig))
    for n in (1, 2):
        host.send(Capture(f"temp{n}", f'{{"t":{n}}}'.encode(), CONTEXT, 0x0FFF, 0x10000,
                          0x10000, 0))  # fmt: skip
    host.wait_take(CaptureResult, 2)
    [(offer_seq, offer)] = host.wait_take(PackOffer, 1, timeout=10)
    pack = verify_pack(offer.pack, MEMORY_KEYS, None, PackKind.MEMORY).pack
    host.send(host.pack_result(offer_seq, 0, 0))
    host.pump(0.1)
    host.send(StatusRequest())
    [(_, status)] = host.wait_take(Status)
    boot = host.hello.boot if host.hello else BOOT
    assert (pack.signer, pack.seq, pack.prev) == (DEVICE_ID, (boot << 32) | 1, GENESIS)
    records = [r for r in pack.items if isinstance(r, Record)]
    assert [r.id for r in records] == [record_id(DEVICE_ID, boot, n) for n in (1, 2)]
    assert [r.payload for r in records] == [b'{"t":1}', b'{"t":2}']
    assert (status.packs_sent, status.packs_acked, status.ring_used) == (1, 1, 0)


def test_knowledge_push_accepted_and_rollback_refused(host: BoardHost, rig: Rig) -> None:
    if rig.real:
        rig.require_emulator("a fresh knowledge head (a real board keeps it in flash)")
    host.handshake(T0, timeout=patience(rig))
    five, four = knowledge_pack(5), knowledge_pack(4)
    host.send(KnowledgePush(five.encoded))
    [(_, first)] = host.wait_take(KnowledgeResult)
    host.send(KnowledgePush(four.encoded))
    [(_, second)] = host.wait_take(KnowledgeResult)
    host.send(StatusRequest())
    [(_, status)] = host.wait_take(Status)
    assert first == KnowledgeResult(five.pack_id, 0, 0, 5)  # accepted, held 5
    assert second == KnowledgeResult(four.pack_id, 2, 7, 5)  # refused: rollback
    assert status.knowledge_seq == 5


# ---- resets and power cuts --------------------------------------------------------------


def boot_log(host: BoardHost) -> str:
    host.wait_for(lambda: any(t.startswith("boot=") for t in host.logs()), 5, "the boot LOG")
    return next(t for t in host.logs() if t.startswith("boot="))


@pytest.mark.board_setup(qmp=True)
def test_resets_warm_reset_opens_a_new_session(
    host: BoardHost, line: DutLine, rig: Rig
) -> None:
    host.handshake(T0, timeout=patience(rig))
    first = host.hello
    assert first is not None
    assert re.fullmatch(rf"boot={first.boot} reset=cold warm_boots=0", boot_log(host))
    rig.reset()
    again = BoardHost(line, HOST_ID)  # the device starts over: seq 1, a new HELLO
    again.wait_for(lambda: again.hello is not None and again.hello.boot != first.boot,
                   patience(rig), "the HELLO after the reset")  # fmt: skip
    again.handshake(T0)
    assert again.hello is not None and again.hello.boot == first.boot + 1
    assert boot_log(again) == f"boot={first.boot + 1} reset=warm warm_boots=1"
    again.send(StatusRequest())
    [(_, status)] = again.wait_take(Status)
    assert status.captures == 0


@pytest.mark.board_setup(nv=True)
def test_power_cuts_keep_the_boot_counter_and_knowledge_head(
    host: BoardHost, line: DutLine, rig: Rig
) -> None:
    rig.require_emulator("a power cut (QEMU killed mid-session)")
    five, four = knowledge_pack(5), knowledge_pack(4)
    host.handshake(T0)
    host.send(KnowledgePush(five.encoded))
    [(_, accepted)] = host.wait_take(KnowledgeResult)
    boots = [host.hello.boot if host.hello else -1]
    for _ in range(2):
        line.power_cycle(rig)
        host = BoardHost(line, HOST_ID)
        host.handshake(T0)
        boots.append(host.hello.boot if host.hello else -1)
        host.send(StatusRequest())
        [(_, status)] = host.wait_take(Status)
        assert status.knowledge_seq == 5
        host.send(KnowledgePush(four.encoded))
        [(_, refused)] = host.wait_take(KnowledgeResult)
        assert refused == KnowledgeResult(four.pack_id, 2, 7, 5)  # rollback, held 5
    assert accepted == KnowledgeResult(five.pack_id, 0, 0, 5)
    assert boots == [BOOT, BOOT + 1, BOOT + 2]

