"""Every board in QEMU under faults, driven by the real host session.

The host side is hirmem.link.session.Session run by hirmem.link.line.Link over a
SerialTransport on QEMU's serial socket (tests/board_host.LinkHost), with a pack
intake that verifies every device pack (hirmem.link.session.MemoryIntake). Oracles are
the host codec (FrameDecoder counts damage the way SPEC §2.4 defines it),
hirmem.protocol.records.record_id, and hirmem.protocol.packs.verify_pack (inside the
intake, with the chain required).

What the firmware really does with its ring (hm_agent.c, hm_ring.h): a capture is
stored VOLATILE and gated at once, in the same call, so the agent's ring never holds
a VOLATILE record between two captures. Only VOLATILE records are evictable (I3);
CANDIDATE and QUARANTINED records, pinned to an unacknowledged pack or not, leave the
ring only when the host acknowledged a pack carrying them. So an overflowing ring
evicts nothing and refuses with backpressure (I4): CAPTURE_RESULT refused-full,
counted in STATUS refusals, and every stored record reaches the host later.
"""

from __future__ import annotations

import hashlib
import random
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from board_host import BOARDS, BoardHost, LineTap, LinkHost, provisioned
from hirmem.emulation.provision import HostTrust, SlotSettings
from hirmem.emulation.qemu import QemuBoard
from hirmem.link.session import (
    CaptureDone,
    DeviceInfo,
    DeviceReset,
    LogLine,
    MemoryIntake,
    PackDisposition,
    PackReceived,
    PackRefused,
    SessionLost,
    SessionOpened,
)
from hirmem.protocol import identity
from hirmem.protocol.errors import FrameError, PackError
from hirmem.protocol.frames import FrameDecoder, encode_frame
from hirmem.protocol.keys import derive_test_key
from hirmem.protocol.messages import (
    Capture,
    KnowledgePush,
    KnowledgeResult,
    PackStatus,
    encode_message,
)
from hirmem.protocol.packs import (
    ChainHead,
    KnowledgeItem,
    Pack,
    PackKind,
    Reason,
    TrustedKey,
    sign_pack,
    verify_pack,
)
from hirmem.protocol.records import GENESIS, Record, record_id

T0 = 1_780_000_000_000
ONE = 0x10000
DEVICE_ID = bytes.fromhex("0102030405060708")
HOST_ID = bytes.fromhex("a1a2a3a4a5a6a7a8")
DEVICE_KEY = derive_test_key("device 0102030405060708")
HOST_KEY = derive_test_key("host a1a2a3a4a5a6a7a8")
OTHER_HOST_KEY = derive_test_key("host b1b2b3b4b5b6b7b8")
MEMORY_KEYS = {DEVICE_KEY.kid: TrustedKey(DEVICE_KEY.public, DEVICE_ID, PackKind.MEMORY)}
KNOWLEDGE_KEYS = {HOST_KEY.kid: TrustedKey(HOST_KEY.public, HOST_ID, PackKind.KNOWLEDGE)}
CONTEXT = hashlib.sha256(b"event frame").digest()
BOOT = 7
RING = 16  # HM_RING_CAPACITY on every board (firmware/boards.mk)
MAX_FRAME = {"mps2-an385": 512, "hifive1": 256, "stm32f4": 512}  # the device's offer

pytestmark = pytest.mark.parametrize("board", BOARDS)


def settings(**kw: int) -> SlotSettings:
    return SlotSettings(
        DEVICE_ID, DEVICE_KEY, HostTrust(HOST_KEY.public, HOST_ID), boot_base=BOOT, **kw
    )


@contextmanager
def linked(
    board: str,
    tmp_path: Path,
    intake: MemoryIntake,
    *,
    tap: bool = False,
    qmp: bool = False,
    **kw: int,
) -> Iterator[tuple[LinkHost, QemuBoard, LineTap | None]]:
    """Boot a provisioned image; the real session on its line (through a LineTap if
    asked); the handshake done."""
    elf = provisioned(board, tmp_path, settings(**kw))
    with QemuBoard(board, elf, timeout=40, qmp=qmp) as qb:
        relay = LineTap(qb.url) if tap else None
        host = LinkHost(relay.url if relay else qb.url, HOST_ID, intake).start()
        try:
            opened = host.wait(SessionOpened)
            assert (opened.device.board, opened.device.boot) == (board, BOOT)
            yield host, qb, relay
        finally:
            host.close()
            if relay is not None:
                relay.close()


def capture(host: LinkHost, n: int, source: str = "t") -> int:
    """A small GREEN capture (payload + source within one arena block on every board)."""
    payload = f'{{"n":{n}}}'.encode()
    return host.call(lambda s: s.capture(source, payload, CONTEXT, 0x0FFF, ONE, ONE, 0x8000))


def captured(host: LinkHost, tokens: list[int], timeout: float = 10.0) -> list[CaptureDone]:
    """The CaptureDone of each token, in the order of the tokens."""
    got = {}
    for _ in tokens:
        done = host.wait(CaptureDone, lambda d: d.token in tokens, timeout)
        got[done.token] = done
    return [got[t] for t in tokens]


def records_of(packs: list[Pack]) -> list[Record]:
    return [r for p in packs for r in p.items if isinstance(r, Record)]


# ---- the ring under overflow --------------------------------------------------------


def test_ring_overflow_refuses_with_backpressure_and_evicts_nothing(
    board: str, tmp_path: Path
) -> None:
    """No offload policy: 16 captures fill the ring, 4 more are refused-full."""
    intake = MemoryIntake(MEMORY_KEYS)
    with linked(board, tmp_path, intake) as (host, _qb, _):
        tokens = [capture(host, n) for n in range(RING + 4)]
        results = captured(host, tokens)
        status = host.status()
    stored = [d.result for d in results if d.result.status == 0]
    refused = [d.result for d in results if d.result.status != 0]
    assert [r.record_id for r in stored] == [record_id(DEVICE_ID, BOOT, n) for n in range(1, 17)]
    assert [(r.status, r.record_id) for r in refused] == [(1, b"")] * 4  # refused-full
    assert [d.result for d in results[:RING]] == stored  # the first 16 in, the last 4 out
    assert (status.captures, status.refusals, status.evictions) == (RING + 4, 4, 0)
    assert (status.ring_used, status.ring_capacity, status.candidates) == (RING, RING, RING)
    assert status.packs_sent == 0 and intake.accepted == []


class SwitchIntake(MemoryIntake):
    """MemoryIntake that answers *deferred* (host storage full) while ``full`` is set."""

    def __init__(self) -> None:
        super().__init__(MEMORY_KEYS)
        self.full = threading.Event()
        self.deferred = 0

    def offer(self, device: DeviceInfo, pack: bytes) -> PackDisposition:
        if self.full.is_set():
            self.deferred += 1
            answer = PackDisposition.deferred("host storage full (test)")
            self.answers.append(answer)
            return answer
        return super().offer(device, pack)


def test_unacknowledged_records_are_never_evicted_and_nothing_is_dropped(
    board: str, tmp_path: Path
) -> None:
    """Packs are offered (records pinned) but the host cannot store them: the device
    keeps every record, refuses the overflow, and delivers all of it once the host
    takes packs again."""
    intake = SwitchIntake()
    intake.full.set()
    with linked(board, tmp_path, intake, offer_threshold=4, offer_period_ms=200) as (host, _, _):
        first = [capture(host, n) for n in range(4)]
        captured(host, first)
        refusal = host.wait(PackRefused)  # pinned in a pack, then deferred: held 4 s
        assert refusal.disposition.status == PackStatus.DEFERRED
        tokens = [capture(host, n) for n in range(4, RING + 4)]
        results = [d.result for d in captured(host, tokens)]
        full = host.status()
        intake.full.clear()  # the host can store again
        want = [record_id(DEVICE_ID, BOOT, n) for n in range(1, RING + 1)]
        while [r.id for r in records_of(intake.accepted)] != want:
            host.wait(PackReceived, timeout=8)  # after the 4 s hold of a deferred result
        drained = host.status()
        extra = capture(host, 99)  # room again: stored, and offloaded in its turn
        late = host.wait(CaptureDone, lambda d: d.token == extra).result
        host.wait(PackReceived, timeout=8)
        final = host.status()
    stored = [r for r in results if r.status == 0]
    refused = [r for r in results if r.status != 0]
    assert len(stored) == RING - 4 and [r.status for r in refused] == [1] * 4
    assert (full.captures, full.refusals, full.evictions, full.ring_used) == (RING + 4, 4, 0, RING)
    assert intake.deferred >= 1 and full.packs_acked == 0
    # every stored record reached the host exactly once, in capture order, verified
    assert (drained.ring_used, drained.evictions, drained.refusals) == (0, 0, 4)
    assert (late.status, late.record_id) == (0, record_id(DEVICE_ID, BOOT, RING + 1))
    assert [r.id for r in records_of(intake.accepted)] == [*want, late.record_id]
    assert drained.packs_acked + 1 == final.packs_acked == len(intake.accepted)
    assert (final.captures, final.refusals, final.evictions, final.ring_used) == (RING + 5, 4, 0, 0)


# ---- damage on the line ----------------------------------------------------------------


def damage(max_frame: int, good: bytes) -> bytes:
    """Line noise and damaged frames, each ended by 00 (so a receiver resynchronises):
    random bytes, a frame with a flipped bit (bad CRC), a cut frame, a frame too long
    for the receiver, a stray COBS code."""
    rng = random.Random(4)
    noise = bytes(rng.randrange(1, 256) for _ in range(40))
    flipped = bytearray(good)
    flipped[len(flipped) // 2] ^= 0x10
    if 0 in flipped[:-1]:  # keep exactly one frame
        flipped[len(flipped) // 2] ^= 0x30
    cut = good[: len(good) // 2] + b"\x00"
    too_long = bytes([0xFF]) * (max_frame + 40) + b"\x00"
    return b"\x00" + noise + b"\x00" + bytes(flipped) + cut + too_long + b"\x05\x01\x00"


def bad_frames(raw: bytes, max_frame: int) -> int:
    """How many damaged frames the host codec sees in ``raw`` (the oracle)."""
    return sum(isinstance(x, FrameError) for x in FrameDecoder(max_frame).feed(raw))


def test_garbage_and_damaged_frames_are_counted_and_the_session_recovers(
    board: str, tmp_path: Path
) -> None:
    intake = MemoryIntake(MEMORY_KEYS)
    with linked(board, tmp_path, intake, tap=True) as (host, _qb, tap):
        assert tap is not None
        mf = MAX_FRAME[board]
        before = host.status()
        # towards the device: the agent's receiver counts each damaged frame
        good = encode_frame(encode_message(Capture("x", b"1", CONTEXT, 0, 0, 0, 0), 9, 1), mf)
        to_device = damage(mf, good) * 3
        want_device = bad_frames(to_device, mf)
        host.inject(to_device)
        after = host.status()
        # towards the host: the session's receiver counts them
        host_bad = host.session.counters.frames_bad_total
        to_host = damage(512, good) * 3
        want_host = bad_frames(to_host, 512)
        tap.inject_to_host(to_host)
        # the session goes on: a capture round trip and a status after the noise
        token = capture(host, 1)
        done = host.wait(CaptureDone, lambda d: d.token == token)
        final = host.status()
        host_after = host.session.counters.frames_bad_total
        lost = host.of(SessionLost)
    assert want_device >= 12 and want_host >= 12
    assert after.frames_bad - before.frames_bad == want_device  # exact: frames_bad of STATUS
    assert final.frames_bad == after.frames_bad  # nothing else was damaged
    # the relay may cut one of the device's own frames with the first 00: at most one more
    assert want_host <= host_after - host_bad <= want_host + 1
    assert lost == [] and done.result.status == 0
    assert done.result.record_id == record_id(DEVICE_ID, BOOT, 1)
    assert final.frames_good > after.frames_good


# ---- a reset in the middle of a session ------------------------------------------------


def knowledge_pack(seq: int, key_name: str = "host a1a2a3a4a5a6a7a8") -> Pack:
    key = derive_test_key(key_name)
    items = [
        KnowledgeItem(bytes.fromhex(identity.triple_id(s, p, o)), s, p, o, c)
        for s, p, o, c in [("temp0", "max_safe", "80.0", 0xF000), ("pump", "serves", "zone 3", ONE)]
    ]
    return sign_pack(key, PackKind.KNOWLEDGE, HOST_ID, seq, GENESIS, T0, items)


def noinit_outside_loadable_segments(elf: Path) -> tuple[int, int, list[tuple[int, int]]]:
    """(.noinit address, size, [(vaddr, memsz) of every PT_LOAD]) of a 32-bit LE ELF."""
    data = elf.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 1 and data[5] == 1
    phoff, shoff = struct.unpack_from("<II", data, 28)
    phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from("<HHHHH", data, 42)
    loads = []
    for i in range(phnum):
        p_type, _off, vaddr, _paddr, _filesz, memsz = struct.unpack_from(
            "<IIIIII", data, phoff + i * phentsize
        )
        if p_type == 1:
            loads.append((vaddr, memsz))
    str_off = struct.unpack_from("<I", data, shoff + shstrndx * shentsize + 16)[0]
    for i in range(shnum):
        name, _t, _f, addr, _o, size = struct.unpack_from("<IIIIII", data, shoff + i * shentsize)
        if data[str_off + name : data.index(b"\x00", str_off + name)] == b".noinit":
            return addr, size, loads
    raise AssertionError(f"{elf}: no .noinit section")


def test_noinit_is_in_no_loadable_segment(board: str, tmp_path: Path) -> None:
    """QEMU's system_reset rewrites every PT_LOAD (zero-filling memsz beyond filesz),
    so the warm-reset record must lie in none of them."""
    elf = provisioned(board, tmp_path, settings())
    addr, size, loads = noinit_outside_loadable_segments(elf)
    assert size >= 76 and loads
    assert all(addr + size <= lo or addr >= lo + n for lo, n in loads), (hex(addr), loads)


def test_device_reset_is_detected_and_the_session_re_established(
    board: str, tmp_path: Path
) -> None:
    intake = MemoryIntake(MEMORY_KEYS)
    with linked(board, tmp_path, intake, qmp=True, offer_threshold=2) as (host, qb, _):
        five, four = knowledge_pack(5), knowledge_pack(4)
        accepted = host.push(five.encoded)
        tokens = [capture(host, n) for n in (1, 2)]
        captured(host, tokens)
        first = host.wait(PackReceived, timeout=10)
        assert host.wait(LogLine, lambda e: e.text.startswith("boot=")).text == (
            f"boot={BOOT} reset=cold warm_boots=0"
        )
        qb.reset()  # QMP system_reset: a warm reset of the board
        reset = host.wait(DeviceReset)
        reopened = host.wait(SessionOpened)
        log = host.wait(LogLine, lambda e: e.text.startswith("boot="))
        tokens = [capture(host, n) for n in (3, 4)]
        after = captured(host, tokens)
        second = host.wait(PackReceived, timeout=10)
        rollback = host.push(four.encoded)
        status = host.status()
        unknown = host.push(knowledge_pack(6, "host b1b2b3b4b5b6b7b8").encoded)
    assert (accepted.status, accepted.held_seq) == (PackStatus.ACCEPTED, 5)
    assert (reset.old_boot, reset.new_boot) == (BOOT, BOOT + 1)
    assert (reopened.device.boot, reopened.pack_seq) == (BOOT + 1, first.seq)
    assert log.text == f"boot={BOOT + 1} reset=warm warm_boots=1"
    # the record ids carry the new boot, and the chain goes on from the stored head
    assert [d.result.record_id for d in after] == [
        record_id(DEVICE_ID, BOOT + 1, n) for n in (1, 2)
    ]
    assert (first.seq, second.seq) == ((BOOT << 32) | 1, ((BOOT + 1) << 32) | 1)
    p1, p2 = intake.accepted
    assert (p1.prev, p2.prev) == (GENESIS, p1.hash)  # verified with require_chain=True
    assert intake.heads[DEVICE_ID] == ChainHead(p2.seq, p2.hash)
    # the knowledge head survived the reset: a rollback is still refused
    assert (rollback.status, rollback.reason, rollback.held_seq) == (
        PackStatus.REFUSED,
        Reason.ROLLBACK,
        5,
    )
    assert status.knowledge_seq == 5
    # the real session does not even send a pack the device would refuse as unknown-key
    assert unknown.status is None and "unknown-key" in unknown.detail


# ---- knowledge refusals on the board ---------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    name: str
    pack: bytes
    reason: Reason


def test_knowledge_refusals_carry_the_right_reason(board: str, tmp_path: Path) -> None:
    """A tampered pack, an unknown key and a rollback, over the board's line.

    Sent with the codec-level BoardHost: the real session would not send the
    unknown-key pack (it checks the device's host_kid first; see the reset test)."""
    good5, good4 = knowledge_pack(5), knowledge_pack(4)
    tampered = bytearray(good5.encoded)
    at = tampered.index(b"zone 3")
    tampered[at : at + 6] = b"zone 4"  # still well-formed CBOR, signature broken
    cases = [
        Refusal("tampered", bytes(tampered), Reason.BAD_SIGNATURE),
        Refusal(
            "unknown key", knowledge_pack(5, "host b1b2b3b4b5b6b7b8").encoded, Reason.UNKNOWN_KEY
        ),
    ]
    # the host's verifier is the oracle for the reasons
    for case in cases:
        with pytest.raises(PackError) as err:
            verify_pack(case.pack, KNOWLEDGE_KEYS, None, PackKind.KNOWLEDGE)
        assert err.value.reason == case.reason, case.name
    elf = provisioned(board, tmp_path, settings())
    with QemuBoard(board, elf, timeout=30) as qb:
        host = BoardHost.connect(qb.url, HOST_ID)
        try:
            host.handshake(T0)
            answers = []
            for pack in [c.pack for c in cases] + [good5.encoded, good4.encoded]:
                host.send(KnowledgePush(pack))
                [(_, result)] = host.wait_take(KnowledgeResult, timeout=10)
                answers.append(result)
        finally:
            host.close()
    bad_sig, unknown, ok, rollback = answers
    assert (bad_sig.status, bad_sig.reason, bad_sig.held_seq) == (2, Reason.BAD_SIGNATURE, 0)
    assert (unknown.status, unknown.reason, unknown.held_seq) == (2, Reason.UNKNOWN_KEY, 0)
    assert ok == KnowledgeResult(good5.pack_id, 0, 0, 5)
    assert rollback == KnowledgeResult(good4.pack_id, 2, int(Reason.ROLLBACK), 5)
    with pytest.raises(PackError) as err:
        verify_pack(good4.encoded, KNOWLEDGE_KEYS, ChainHead(5, good5.hash), PackKind.KNOWLEDGE)
    assert err.value.reason == Reason.ROLLBACK
