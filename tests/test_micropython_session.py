"""The MicroPython agent's session rules against hm_agent.h, on the unix port.

Over a pty with the small synchronous host of tests/mp_host.py (which can go deaf,
send ERRORs and answer packs any way): the session dying after 8 retransmission
timeouts and coming back, ERROR no-session restarting the handshake at once, refused
and deferred PACK_RESULTs, refused-full backpressure counted in STATUS, a run at
max_frame 128 / window 1 with fragments both ways, ERROR busy for a fragment, the
knowledge head persisted across a reset (the knowledge_saved hook). In process: the
sequence-number limits (seq_limits.py), and the ring compared request by request with
hm_ring itself (ring_ops.py against build/host/t_core): LRU eviction of VOLATILE
records, refusal without eviction, releases.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hirmem.protocol import identity, pieces
from hirmem.protocol.frames import encode_frame
from hirmem.protocol.keys import SigningKey
from hirmem.protocol.messages import (
    Capture,
    CaptureResult,
    Error,
    ErrorCode,
    Hello,
    KnowledgePush,
    KnowledgeResult,
    PackOffer,
    Status,
    StatusRequest,
    decode_message,
    encode_message,
)
from hirmem.protocol.packs import (
    KnowledgeItem,
    PackKind,
    Reason,
    TrustedKey,
    sign_pack,
    verify_pack,
)
from hirmem.protocol.records import GENESIS, Record, record_id
from mp_host import (
    BOOT,
    CONTEXT,
    DEVICE_ID,
    DEVICE_SEED,
    HOST_ID,
    HOST_SEED,
    ONE,
    T0,
    MpDevice,
    MpHost,
    device_config,
    until,
)
from mp_run import MICROPYTHON, MP_DIR, run_mp

pytestmark = pytest.mark.skipif(MICROPYTHON is None, reason="micropython not installed")

DEVICE_KEY = SigningKey(DEVICE_SEED)
HOST_KEY = SigningKey(HOST_SEED)
MEMORY_KEYS = {DEVICE_KEY.kid: TrustedKey(DEVICE_KEY.public, DEVICE_ID, PackKind.MEMORY)}
RTO_STEPS = [250, 500, 1000, 2000, 4000, 4000, 4000]  # ms between transmissions (hm_agent.h)


@pytest.fixture
def make_host(tmp_path: Path) -> Iterator[Any]:
    devices: list[MpDevice] = []

    def make(**over: Any) -> MpHost:
        dev = MpDevice(device_config(**over), tmp_path)
        devices.append(dev)
        return MpHost(dev, HOST_ID)

    yield make
    for dev in devices:
        err = dev.close()
        assert "Traceback" not in err, err


def knowledge(seq: int) -> bytes:
    items = [
        KnowledgeItem(bytes.fromhex(identity.triple_id("pump", "serves", f"zone {seq}")),
                      "pump", "serves", f"zone {seq}", ONE),
    ]  # fmt: skip
    return sign_pack(HOST_KEY, PackKind.KNOWLEDGE, HOST_ID, seq, GENESIS, T0, items).encoded


def capture(n: int, payload: bytes | None = None) -> Capture:
    return Capture(f"s{n}", f"reading {n}".encode() if payload is None else payload, CONTEXT,
                   0x0FFF, ONE, ONE, 0)  # fmt: skip


def status(host: MpHost) -> Status:
    host.send(StatusRequest())
    [st] = host.wait(Status)
    assert isinstance(st, Status)
    return st


def sent_bodies(host: MpHost, kind: type) -> list[tuple[float, bytes, int]]:
    return [(t, body, env.seq) for t, body, env in host.log if isinstance(env.message, kind)]


# ---- session lifetime ----------------------------------------------------------------------


def test_session_dies_after_8_timeouts_and_comes_back(make_host: Any) -> None:
    host = make_host()
    host.handshake(T0)
    host.pump(0.1)
    host.deafen()  # from now on the device's STATUS is never acknowledged
    host.send(StatusRequest())
    hellos = host.hellos
    t_hello = until(host, lambda: host.hellos > hellos, 25)
    sent = sent_bodies(host, Status)
    # the STATUS 8 times, byte-identical (go-back-N resends the encoded body), then HELLO
    assert len(sent) == 8 and len({body for _, body, _ in sent}) == 1 and sent[0][2] == 3
    times = [t for t, _, _ in sent] + [t_hello]
    gaps = [round((b - a) * 1000) for a, b in itertools.pairwise(times)]
    for gap, want in zip(gaps, [*RTO_STEPS, 4000], strict=True):
        assert want - 30 <= gap <= want + 300, (gaps, "RTO 250 ms doubling to 4 s")
    # a new handshake from the first RTO: the next HELLO 250 ms later, the same bytes
    first_hello = [t for t, _, env in host.log if isinstance(env.message, Hello)][-1]
    until(host, lambda: host.hellos > hellos + 1, 2)
    again = [t for t, _, env in host.log if isinstance(env.message, Hello)][-1]
    assert 220 <= (again - first_hello) * 1000 <= 550
    # and a new session works: seqs start at 2 again (the PROOF, then the STATUS at 3),
    # the device counted 7 retransmissions
    host.hear()
    host.hello = None
    host.delivered.clear()  # the old session's STATUS
    host.handshake(T0 + 30_000)
    st = status(host)
    assert st.retransmits == 7
    assert sent_bodies(host, Status)[-1][2] == 3


def test_error_no_session_starts_a_handshake_at_once(make_host: Any) -> None:
    host = make_host()
    host.handshake(T0)
    host.pump(0.2)
    hellos = host.hellos
    t0 = time.monotonic()
    host.dev.write(encode_frame(encode_message(
        Error(int(ErrorCode.NO_SESSION), 0, "no session: send HELLO"), 0, host.expected - 1)))
    t1 = until(host, lambda: host.hellos > hellos, 2)
    assert t1 - t0 < 0.15  # at once: no timer of the device was running
    host.hello = None
    host.handshake(T0 + 1000)
    st = status(host)
    assert sent_bodies(host, Status)[-1][2] == 3 and st.captures == 0


# ---- packs: refused, deferred, accepted ----------------------------------------------------


def test_refused_and_deferred_pack_results(make_host: Any) -> None:
    host = make_host(offer_threshold=2)
    host.handshake(T0)
    host.send(capture(1))
    host.send(capture(2))
    host.wait(CaptureResult, 2)
    packs = []
    timing = []
    for status_code, reason in ((2, int(Reason.BROKEN_CHAIN)), (3, int(Reason.STORAGE)),
                                (0, 0)):  # fmt: skip
        [(offer_seq, offer)] = host.wait_seq(PackOffer, timeout=15)
        timing.append(time.monotonic())
        assert isinstance(offer, PackOffer)
        pack = verify_pack(offer.pack, MEMORY_KEYS, None, PackKind.MEMORY).pack
        packs.append(pack)
        host.send(host.pack_result(offer_seq, status_code, reason))
        timing.append(time.monotonic())
    # a refused pack's records stay and are packed again at once, with a new pack seq;
    # a deferred one holds the next offer back for 4 s (HM_AGENT_DEFER_MS)
    assert timing[2] - timing[1] < 1.5
    assert 3.9 <= timing[4] - timing[3] <= 5.5
    assert [p.seq for p in packs] == [(BOOT << 32) | n for n in (1, 2, 3)]
    assert all(p.prev == GENESIS for p in packs)  # the host head never moved
    ids = [[r.id for r in p.items if isinstance(r, Record)] for p in packs]
    assert ids == [[record_id(DEVICE_ID, BOOT, 1), record_id(DEVICE_ID, BOOT, 2)]] * 3
    host.pump(0.3)
    st = status(host)
    assert (st.ring_used, st.packs_sent, st.packs_acked) == (0, 3, 1)


# ---- the ring: backpressure -------------------------------------------------------------------


def test_full_ring_refuses_and_counts_it(make_host: Any) -> None:
    # 6 slots, an arena of 32 blocks of 32 bytes; nothing is offloaded (no policy)
    host = make_host(ring_capacity=6, arena_size=1024)
    host.handshake(T0)
    caps = [Capture("", bytes([n]) * 256, CONTEXT, 0x0FFF, ONE, ONE, 0) for n in range(4)]
    caps += [capture(4, b"x")]  # refused: the arena is full (8 blocks each), nothing evictable
    caps += [Capture("", b"", CONTEXT, 0x0FFF, ONE, ONE, 0)] * 2  # no blocks: 2 slots left
    caps += [Capture("", b"", CONTEXT, 0x0FFF, ONE, ONE, 0)]  # refused: no slot
    results = []
    for c in caps:  # one at a time: 8 at once would find the queue full (ERROR busy)
        host.send(c)
        results += host.wait(CaptureResult)
    got = [r.status for r in results if isinstance(r, CaptureResult)]
    assert got == [0, 0, 0, 0, 1, 0, 0, 1]
    refused = [r for r in results if isinstance(r, CaptureResult) and r.status == 1]
    assert all(r.record_id == b"" and r.verdict == 2 and r.state == 0 for r in refused)
    st = status(host)
    assert (st.captures, st.refusals, st.evictions, st.ring_used) == (8, 2, 0, 6)
    assert st.candidates + st.quarantined == 6


def test_ring_matches_hm_ring_request_by_request() -> None:
    """Random capture / gate / release sequences: the MicroPython ring and hm_ring (C)
    give the same slot, id, gate result, counters, live records and LRU order."""
    from native_harness import run

    data = json.loads(run_mp(MP_DIR / "checks" / "ring_ops.py", "41", "40", "60", heap="16M"))

    def arg(a: Any) -> Any:
        return bytes.fromhex(a[1:]) if isinstance(a, str) and a.startswith("x") else a

    requests = [(cmd, [arg(a) for a in args]) for cmd, args, _ in data]
    answers = run("t_core", requests)
    for k, ((cmd, args, want), got) in enumerate(zip(data, answers, strict=True)):
        assert [arg(w) for w in want] == got, (k, cmd, args[:2])
    counters = [a for (cmd, _, _), a in zip(data, answers, strict=True) if cmd == "ring_counters"]
    assert max(int(str(c[1])) for c in counters) > 10  # VOLATILE records were evicted
    assert any(a == ["refused_full"] for a in answers)  # and refused without eviction


# ---- small frames, window 1, fragments both ways, ERROR busy ------------------------------


def test_max_frame_128_window_1(make_host: Any) -> None:
    host = make_host(max_frame=128, window=1, offer_threshold=3)
    ack = host.handshake(T0)
    assert (ack.max_frame, ack.window) == (128, 1)
    for n in range(3):
        host.send(capture(n))
    host.wait(CaptureResult, 3)
    [(offer_seq, offer)] = host.wait_seq(PackOffer, timeout=15)
    assert isinstance(offer, PackOffer)
    assert host.pieces_in >= 6 and all(len(b) + 4 <= 128 for b in host.piece_bodies)
    pack = verify_pack(offer.pack, MEMORY_KEYS, None, PackKind.MEMORY).pack
    assert len(pack.items) == 3
    host.send(host.pack_result(offer_seq, 0, 0))
    # the host's knowledge push in fragments of 128 bytes
    push = KnowledgePush(knowledge(4))
    assert len(encode_message(push, 9, 9)) + 4 > 128
    host.send(push)
    [kr] = host.wait(KnowledgeResult, timeout=15)
    assert kr == KnowledgeResult(HOST_ID + (4).to_bytes(8, "big"), 0, 0, 4)
    st = status(host)
    assert (st.packs_acked, st.ring_used, st.knowledge_seq, st.frames_bad) == (1, 0, 4, 0)


def test_fragment_finding_the_queue_full_is_answered_busy(make_host: Any) -> None:
    host = make_host(max_frame=128, window=1)
    host.handshake(T0)
    host.pump(0.1)
    host.deafen()  # window 1 and no acks: answers pile up in the device's queue
    for _ in range(6):
        host.send(StatusRequest())
    host.pump(0.3)
    push = KnowledgePush(knowledge(2))
    first = host.next_seq
    host.send(push)  # 3 fragments: the first finds the queue full
    host.pump(0.3)
    busy = [e.message for e in host.unsequenced if isinstance(e.message, Error)]
    assert [(e.code, e.ref) for e in busy] == [(int(ErrorCode.BUSY), first)]
    assert not [m for _, m in host.delivered if isinstance(m, KnowledgeResult)]
    host.hear()
    host.ack()
    host.wait(Status, 6)
    host.next_seq = first  # the host's retransmission of the same seqs
    host.send(push)
    [kr] = host.wait(KnowledgeResult, timeout=15)
    assert isinstance(kr, KnowledgeResult) and (kr.status, kr.held_seq) == (0, 2)


# ---- knowledge head persisted across a reset ------------------------------------------------


def test_knowledge_head_survives_a_reset(make_host: Any, tmp_path: Path) -> None:
    head_file = tmp_path / "knowledge.head"
    host = make_host(knowledge_file=str(head_file))
    host.handshake(T0)
    pack5 = knowledge(5)
    host.send(KnowledgePush(pack5))
    [kr] = host.wait(KnowledgeResult, timeout=15)
    assert isinstance(kr, KnowledgeResult) and kr.status == 0
    assert head_file.read_text().split() == ["5", hashlib.sha256(pack5).hexdigest()]
    # reset: the agent starts again with the saved head
    host.dev.restart()
    host.hello = None
    host.handshake(T0 + 5000)
    host.send(KnowledgePush(knowledge(3)))
    [kr] = host.wait(KnowledgeResult, timeout=15)
    assert kr == KnowledgeResult(HOST_ID + (3).to_bytes(8, "big"), 2, int(Reason.ROLLBACK), 5)
    host.send(KnowledgePush(pack5))  # the held head itself: duplicate (its hash was kept)
    [kr] = host.wait(KnowledgeResult, timeout=15)
    assert kr == KnowledgeResult(HOST_ID + (5).to_bytes(8, "big"), 1, 0, 5)
    assert status(host).knowledge_seq == 5


# ---- sequence limits (in process) ------------------------------------------------------------


def test_only_the_hello_ack_of_the_current_hello_opens() -> None:
    """SPEC §6.5 device step 3, in process: HELLO_ACKs that echo the previous boot's HELLO
    or nothing are ignored and counted, without an ERROR; the right one opens."""
    out = json.loads(run_mp(MP_DIR / "checks" / "hello_echo.py"))
    # [session, sessions, stale_hello_acks, ignored, errors_sent]
    assert out["previous_boot"] == [False, 0, 1, 0, 0]
    assert out["foreign"] == [False, 0, 2, 0, 0]
    assert out["current"] == [True, 1, 2, 0, 0]


def test_sequence_numbers_end_the_session_before_they_wrap() -> None:
    out = json.loads(run_mp(MP_DIR / "checks" / "seq_limits.py"))

    def messages(case: str) -> list[tuple[int, Any]]:
        joiner = pieces.Joiner(1 << 16)  # bodies in frame pieces are joined first
        bodies = [joiner.take(bytes.fromhex(f)) for f in out[case]["frames"]]
        return [
            (env.seq, env.message)
            for env in (decode_message(b) for b in bodies if b is not None)
        ]

    q = messages("queue")
    assert [(s, type(m).__name__) for s, m in q][-2:] == [(0xFFFFFFFE, "Status"), (1, "Hello")]
    assert (out["queue"]["sessions_lost"], out["queue"]["exhausted"]) == (1, 1)
    # the pack offer that would pass 2^32 - 1: session ended, nothing queued
    o = out["offer"]
    assert (o["first"], o["lost_after_first"], o["sessions"]) == (0, 1, 2)
    assert o["second"] == (3 << 32) | 2  # re-packed after the new HELLO_ACK, seq not reused
    offers = [s for s, m in messages("offer") if type(m).__name__ == "PackOffer"]
    assert offers == [3]  # after the new session's PROOF (seq 2), in frame pieces
    # the ring: the last id is ...ffffffff, then refused full (ids never repeat)
    r = [m for _, m in messages("ring") if isinstance(m, CaptureResult)]
    assert [c.status for c in r] == [0, 1]
    assert r[0].record_id == DEVICE_ID + (3).to_bytes(4, "big") + b"\xff\xff\xff\xff"
    assert out["ring"]["ring"] == [2, 1, 1]
