"""Every board image in QEMU, its UART on a socket, against the host codec.

Each test boots a freshly provisioned image (hirmem.emulation.provision, test keys) with
hirmem.emulation.qemu.QemuBoard and plays the host with tests/board_host.BoardHost. The
oracles are independent of the firmware: hirmem.protocol.gate.evaluate on the normalised
record, hirmem.protocol.records.record_id, hirmem.protocol.packs.verify_pack with the device's
public key, and a Python model of the synthetic sensor's PRNG.
"""

from __future__ import annotations

import binascii
import hashlib
import re
import socket
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from board_host import BOARDS, BoardHost, image, provisioned
from hirmem.emulation.provision import (
    EXIT_UNPROVISIONED,
    SLOT_SIZE,
    HostTrust,
    SlotSettings,
    describe_slot,
    locate_slot,
)
from hirmem.emulation.qemu import QemuBoard, QemuError
from hirmem.protocol import identity
from hirmem.protocol.frames import encode_frame
from hirmem.protocol.gate import evaluate
from hirmem.protocol.keys import derive_test_key
from hirmem.protocol.messages import (
    Capture,
    CaptureResult,
    Error,
    HelloAck,
    KnowledgePush,
    KnowledgeResult,
    PackOffer,
    Status,
    StatusRequest,
    encode_message,
)
from hirmem.protocol.packs import KnowledgeItem, Pack, PackKind, TrustedKey, sign_pack, verify_pack
from hirmem.protocol.proof import hello_echo
from hirmem.protocol.records import GENESIS, Record, normalise, record_id

T0 = 1_780_000_000_000
ONE = 0x10000
DEVICE_ID = bytes.fromhex("0102030405060708")
HOST_ID = bytes.fromhex("a1a2a3a4a5a6a7a8")
DEVICE_KEY = derive_test_key("device 0102030405060708")
HOST_KEY = derive_test_key("host a1a2a3a4a5a6a7a8")
MEMORY_KEYS = {DEVICE_KEY.kid: TrustedKey(DEVICE_KEY.public, DEVICE_ID, PackKind.MEMORY)}
CONTEXT = hashlib.sha256(b"event frame").digest()
BOOT = 7
EXIT_CONFIG = 4  # boards/include/board.h BOARD_EXIT_CONFIG: hm_agent_init refused the slot
# what each board offers in HELLO (firmware/boards.mk BOARD_CFG_*)
OFFER = {"mps2-an385": (512, 4096), "hifive1": (256, 1024), "stm32f4": (512, 4096)}

pytestmark = pytest.mark.parametrize("board", BOARDS)


def settings(**kw: int) -> SlotSettings:
    return SlotSettings(
        DEVICE_ID, DEVICE_KEY, HostTrust(HOST_KEY.public, HOST_ID), boot_base=BOOT, **kw
    )


@contextmanager
def session(board: str, tmp_path: Path, **kw: int) -> Iterator[BoardHost]:
    """Boot a provisioned image, complete the handshake, yield the host side."""
    elf = provisioned(board, tmp_path, settings(**kw))
    with QemuBoard(board, elf, timeout=30) as qb:
        host = BoardHost.connect(qb.url, HOST_ID)
        try:
            host.handshake(T0)
            yield host
        finally:
            host.close()


def test_unprovisioned_image_refuses_to_start(board: str) -> None:
    with QemuBoard(board, image(board), timeout=15) as qb:
        host = BoardHost.connect(qb.url, HOST_ID)  # wait=on: the guest starts now
        code = qb.wait(10)
        host.pump(0.05)
        host.close()
    assert code == EXIT_UNPROVISIONED
    assert host.wire_in == 0 and host.hello is None  # not a byte on the line


def test_a_slot_whose_public_key_is_not_the_seeds_refuses_to_start(
    board: str, tmp_path: Path
) -> None:
    """The slot's public key is derived once at boot and compared, so that no signature
    derives it again (and none is made under a key the host does not hold)."""
    elf = provisioned(board, tmp_path, settings())
    data = bytearray(elf.read_bytes())
    at = locate_slot(bytes(data)).elf_offset
    slot = data[at:at + SLOT_SIZE]
    slot[80:112] = HOST_KEY.public.raw  # device_public: a valid key, not the seed's
    slot[-4:] = struct.pack("<I", binascii.crc32(slot[:-4]))  # a whole slot otherwise
    data[at:at + SLOT_SIZE] = slot
    elf.write_bytes(bytes(data))
    assert describe_slot(bytes(slot)).provisioned  # the slot checks all pass on the device
    with QemuBoard(board, elf, timeout=30) as qb:
        host = BoardHost.connect(qb.url, HOST_ID)
        code = qb.wait(20)
        host.pump(0.05)
        host.close()
    assert code == EXIT_CONFIG
    assert host.hello is None


def test_hello_carries_the_provisioned_identity(board: str, tmp_path: Path) -> None:
    elf = provisioned(board, tmp_path, settings())
    with QemuBoard(board, elf, timeout=20) as qb:
        host = BoardHost.connect(qb.url, HOST_ID)
        host.wait_for(lambda: host.hello is not None, 5, "HELLO")
        host.close()
    hello = host.hello
    assert hello is not None
    max_frame, max_message = OFFER[board]
    assert (hello.board, hello.firmware, hello.device_id, hello.boot) == (
        board, "0.1.0", DEVICE_ID, BOOT,
    )  # fmt: skip
    assert (hello.device_kid, hello.host_kid) == (DEVICE_KEY.kid, HOST_KEY.kid)
    assert (hello.max_frame, hello.max_message, hello.window) == (max_frame, max_message, 4)
    assert host.frame_errors == []


def test_a_hello_ack_of_another_hello_is_ignored_and_counted(board: str, tmp_path: Path) -> None:
    """SPEC §6.5 device step 3: a HELLO_ACK that echoes another HELLO (the previous boot's,
    late on the line, or one beyond the offer that is not for this HELLO either) opens no
    session and draws no ERROR; the board keeps saying HELLO, counts them, and opens with
    the HELLO_ACK of its current HELLO."""
    elf = provisioned(board, tmp_path, settings())
    with QemuBoard(board, elf, timeout=30) as qb:
        host = BoardHost.connect(qb.url, HOST_ID)
        try:
            host.wait_for(lambda: host.hello is not None, 5, "HELLO")
            assert host.hello is not None
            older = replace(host.hello, boot=host.hello.boot - 1)  # what the last boot said
            max_frame, _ = OFFER[board]
            stale = HelloAck(HOST_ID, max_frame, 65536, 4, T0, 0, GENESIS, bytes(16),
                             hello_echo(encode_message(older, 1, 0)))  # fmt: skip
            beyond = replace(stale, window=9, hello_hash=bytes(16))  # beyond, and foreign
            for ack in (stale, beyond):
                host.write(encode_frame(encode_message(ack, 1, 1), 128))
            hellos = host.hellos
            host.wait_for(lambda: host.hellos >= hellos + 2, 5, "HELLO, still")
            assert host.proofs == [] and host.last_ack == 0  # nothing opened
            assert not any(isinstance(e.message, Error) for e in host.unsequenced)
            host.handshake(T0)  # the HELLO_ACK of this HELLO opens the session
            assert host.proof_verifies(DEVICE_KEY.public, HOST_ID)
            host.wait_for(lambda: any(t.startswith("boot=") for t in host.logs()), 5, "boot LOG")
        finally:
            host.close()
    boot_log = next(t for t in host.logs() if t.startswith("boot="))
    assert boot_log == f"boot={BOOT} reset=cold warm_boots=0 stale_hello_acks=2"


CASES = [
    ("temp/0", b'{"t":21.5}', 0x0FFF, ONE, 0xE666),  # GREEN
    ("", b'{"t":21.6}', 0x0F73, 0x8000, 0x8000),  # no source, soft fails
    ("door", b"open", 0x0BFF, ONE, ONE),  # consent failed: hard, quarantined
    ("x", b"\x00\x01", 0x0000, 0x1234, 0x4321),  # everything failed: RED
    ("sensor/\u00e9", b"42", 0x07F3, 0xC000, 0xC000),  # domination: hard
]


def test_host_captures_match_the_gate(board: str, tmp_path: Path) -> None:
    with session(board, tmp_path) as host:
        refs = [
            host.send(Capture(src, payload, CONTEXT, flags, q, p, 0x8000))
            for src, payload, flags, q, p in CASES
        ]
        results = host.wait_take(CaptureResult, len(CASES))
        host.send(StatusRequest())
        [(_, status)] = host.wait_take(Status)
    verdicts = set()
    for n, ((src, payload, flags, q, p), ref, (_, got)) in enumerate(
        zip(CASES, refs, results, strict=True), start=1
    ):
        g = evaluate(normalise(flags, payload, src, T0, CONTEXT), q, p)
        assert got == CaptureResult(
            ref, 0, record_id(DEVICE_ID, BOOT, n), g.flags, g.h, g.i, g.r, g.f, g.c, g.rn,
            g.w, int(g.verdict), int(g.hard), int(g.disposition),
        )  # fmt: skip
        verdicts.add((got.verdict, got.hard != 0))
    assert {(0, False), (2, True)} <= verdicts  # GREEN and hard-failed RED both came back
    assert (status.captures, status.ring_used, status.frames_bad) == (len(CASES), len(CASES), 0)
    assert status.quarantined >= 2 and status.candidates >= 1


def test_device_pack_verifies_on_the_host(board: str, tmp_path: Path) -> None:
    with session(board, tmp_path, offer_threshold=2) as host:
        for n in (1, 2):
            host.send(Capture(f"temp{n}", f'{{"t":{n}}}'.encode(), CONTEXT, 0x0FFF, ONE, ONE, 0))
        host.wait_take(CaptureResult, 2)
        [(offer_seq, offer)] = host.wait_take(PackOffer, 1, timeout=10)
        verified = verify_pack(offer.pack, MEMORY_KEYS, None, PackKind.MEMORY)
        pack = verified.pack
        host.send(host.pack_result(offer_seq, 0, 0))
        host.pump(0.1)
        host.send(StatusRequest())
        [(_, status)] = host.wait_take(Status)
        used, free, size = stack_report(host)
    assert (pack.signer, pack.seq, pack.prev) == (DEVICE_ID, (BOOT << 32) | 1, GENESIS)
    records = [r for r in pack.items if isinstance(r, Record)]
    assert [r.id for r in records] == [record_id(DEVICE_ID, BOOT, n) for n in (1, 2)]
    assert [r.payload for r in records] == [b'{"t":1}', b'{"t":2}']
    assert (status.packs_sent, status.packs_acked, status.ring_used) == (1, 1, 0)
    print(f"\n{board}: after a device pack, stack used {used} of {size} bytes ({free} untouched)")


def stack_report(host: BoardHost) -> tuple[int, int, int]:
    """The last "stack used=U free=F size=S rx_overruns=N" LOG line (firmware/app/main.c),
    waiting for a fresh one (the app reports every 500 ms when the mark moved; 10 s leaves
    room for an emulator starved by a loaded machine, where 3 s once ran out)."""
    before = len(host.logs())
    host.wait_for(lambda: len(host.logs()) > before, 10, "a stack LOG line")
    line = [t for t in host.logs() if t.startswith("stack")][-1]
    m = re.fullmatch(r"stack used=(\d+) free=(\d+) size=(\d+) rx_overruns=(\d+)", line)
    assert m is not None, line
    used, free, size, overruns = (int(x) for x in m.groups())
    assert used + free == size and 512 < used < size and overruns == 0
    return used, free, size


def knowledge_pack(seq: int) -> Pack:
    items = [
        KnowledgeItem(bytes.fromhex(identity.triple_id(s, p, o)), s, p, o, c)
        for s, p, o, c in [("temp0", "max_safe", "80.0", 0xF000), ("pump", "serves", "zone 3", ONE)]
    ]
    return sign_pack(HOST_KEY, PackKind.KNOWLEDGE, HOST_ID, seq, GENESIS, T0, items)


def test_knowledge_push_accepted_and_rollback_refused(board: str, tmp_path: Path) -> None:
    with session(board, tmp_path) as host:
        five, four = knowledge_pack(5), knowledge_pack(4)
        host.send(KnowledgePush(five.encoded))
        [(_, first)] = host.wait_take(KnowledgeResult)
        host.send(KnowledgePush(four.encoded))
        [(_, second)] = host.wait_take(KnowledgeResult)
        host.send(StatusRequest())
        [(_, status)] = host.wait_take(Status)
        used, free, size = stack_report(host)
    assert first == KnowledgeResult(five.pack_id, 0, 0, 5)  # accepted, held 5
    assert second == KnowledgeResult(four.pack_id, 2, 7, 5)  # refused: rollback
    assert status.knowledge_seq == 5
    print(f"\n{board}: after Ed25519 verify, stack used {used} of {size} bytes ({free} untouched)")


def sensor_model(device_id: bytes, n: int) -> list[tuple[bytes, int, int, int]]:
    """firmware/app/sensor.c in Python: (payload, flags, confidence, provenance)."""
    state = binascii.crc32(device_id) or 0x9E3779B9
    centi, out = 2150, []

    def draw() -> int:
        nonlocal state
        state ^= (state << 13) & 0xFFFFFFFF
        state ^= state >> 17
        state ^= (state << 5) & 0xFFFFFFFF
        return state

    for count in range(1, n + 1):
        r, walk = draw() % 100, draw() % 41
        centi = min(max(centi + walk - 20, -4000), 8500)
        sign = "-" if centi < 0 else ""
        payload = f'{{"t":{sign}{abs(centi) // 100}.{abs(centi) % 100:02d},"n":{count}}}'
        clear = 0 if r < 70 else 0x11 if r < 85 else 0x31 if r < 93 else 0x400 if r < 97 else 0x40
        conf, prov = 0x9999 + draw() % 0x6668, 0xCCCC + draw() % 0x3335
        out.append((payload.encode(), 0x0FFF & ~clear, conf, prov))
    return out


def test_synthetic_sensor_stream(board: str, tmp_path: Path) -> None:
    """Own readings, gated on the device, against a model of the sensor's generator.

    A result that finds the queue's reserve reached is not sent (counted in
    results_lost, hm_agent.h HM_AGENT_OWN_RESERVE), so results are matched to the model
    by their record's capture seq, not by arrival order."""
    n = 12
    with session(board, tmp_path, sensor_period_ms=20) as host:
        results = host.wait_take(CaptureResult, n, timeout=10)
    model = sensor_model(DEVICE_ID, 16)
    got = [m for _, m in results if m.status == 0]  # stored (the ring holds 16)
    seqs = [int.from_bytes(m.record_id[12:], "big") for m in got]
    assert seqs == sorted(set(seqs)) and len(seqs) >= 8 and seqs[-1] <= 16
    for seq, msg in zip(seqs, got, strict=True):
        payload, flags, conf, prov = model[seq - 1]
        g = evaluate(normalise(flags, payload, "sensor/temp0", T0, CONTEXT), conf, prov)
        assert msg == CaptureResult(
            0, 0, record_id(DEVICE_ID, BOOT, seq), g.flags, g.h, g.i, g.r, g.f, g.c,
            g.rn, g.w, int(g.verdict), int(g.hard), int(g.disposition),
        )  # fmt: skip
    assert any(m.hard for m in got) or any(m.verdict == 0 for m in got)  # some fail the gate


def test_launcher_timeout_kills_the_board(board: str, tmp_path: Path) -> None:
    elf = provisioned(board, tmp_path, settings())
    qb = QemuBoard(board, elf, timeout=1.0)
    with qb, socket.create_connection(("127.0.0.1", qb.port)):
        start = time.monotonic()
        with pytest.raises(QemuError, match="timeout"):
            qb.wait(5)
        assert time.monotonic() - start < 3
    assert qb.proc is not None and qb.proc.poll() is not None
