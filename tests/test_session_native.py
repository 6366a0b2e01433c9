"""hirmem.link.session.Session against the real C device agent (build/host/t_agent).

Every test runs the host session and hm_agent on one virtual clock, joined by a line
that can lose, damage, repeat or inject frames (tests/session_peer.py). Oracles are
independent of the session: hirmem.protocol.gate.evaluate on the normalised record, the
device's own counters, and verify_pack inside the intake.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest

from conftest import DEVICE_ID, HOST_ID, HOST_KEY
from hirmem.link.session import (
    CaptureDone,
    DeviceInfo,
    DeviceReset,
    ErrorReceived,
    IntakeFailed,
    KnowledgeDone,
    LogLine,
    MemoryIntake,
    PackDisposition,
    PackReceived,
    PackRefused,
    RequestFailed,
    SessionConfig,
    SessionLost,
    SessionOpened,
    StatusReport,
)
from hirmem.protocol import identity
from hirmem.protocol.frames import decode_frame, encode_frame
from hirmem.protocol.gate import evaluate
from hirmem.protocol.messages import (
    CaptureResult,
    KnowledgePush,
    PackOffer,
    PackResult,
    PackStatus,
)
from hirmem.protocol.packs import ChainHead, KnowledgeItem, Pack, PackKind, Reason, sign_pack
from hirmem.protocol.records import GENESIS, Record, normalise, record_id
from session_peer import MEMORY_KEYS, T0, Agent, Bench, is_piece_frame, message_of

ONE = 0x10000
CONTEXT = hashlib.sha256(b"event frame").digest()


@pytest.fixture
def agent() -> Iterator[Agent]:
    peer = Agent()
    yield peer
    peer.close()


def open_bench(agent: Agent, config: SessionConfig | None = None, **init: int | bool) -> Bench:
    bench = Bench(agent, config=config)
    bench.start(**init)
    bench.run_until(lambda: bench.session.is_open, 100)
    # and the device has the host's acknowledgement of its PROOF (the delayed ACK)
    bench.run_until(lambda: (lambda st: st[2] == st[1])(agent.state()), 100)
    return bench


def capture(bench: Bench, n: int, flags: int = 0x0FFF, q: int = ONE, p: int = 0xE666) -> int:
    return bench.session.capture(f"temp{n}", f'{{"t":{n}}}'.encode(), CONTEXT, flags, q, p, 0x8000)


def records(packs: list[Pack]) -> list[bytes]:
    return [r.id for pack in packs for r in pack.items if isinstance(r, Record)]


def knowledge_pack(seq: int, prev: bytes = GENESIS) -> Pack:
    items = [
        KnowledgeItem(bytes.fromhex(identity.triple_id(s, p, o)), s, p, o, c)
        for s, p, o, c in [("temp0", "max_safe", "80.0", 0xF000), ("pump", "serves", "zone 3", ONE)]
    ]
    return sign_pack(HOST_KEY, PackKind.KNOWLEDGE, HOST_ID, seq, prev, T0, items)


def drop_first(kind: type | None, count: int = 1) -> tuple[list[int], object]:
    """A tap fault dropping the first ``count`` frames carrying a message of ``kind``
    (None: frames carrying a piece of a longer body, SPEC §6.8)."""
    dropped = [0]

    def fault(frame: bytes) -> bytes:
        hit = is_piece_frame(frame) if kind is None else isinstance(message_of(frame), kind)
        if dropped[0] < count and hit:
            dropped[0] += 1
            return b""
        return frame

    return dropped, fault


# ---- handshake -----------------------------------------------------------------------


def test_handshake_agrees_and_carries_chain_head(agent: Agent) -> None:
    head = ChainHead((6 << 32) | 9, hashlib.sha256(b"last pack").digest())
    bench = Bench(agent, config=SessionConfig(HOST_ID, max_frame=256, window=2))
    bench.intake.heads[DEVICE_ID] = head
    bench.start(boot=7)
    # the device answers HELLO_ACK at once with its PROOF (which carries the ack): the
    # session is open as soon as the host verified it (SPEC §6.5)
    assert bench.session.phase == "open" and bench.session.counters.proofs_verified == 1
    [opened] = bench.take(SessionOpened)
    assert opened.device.device_id == DEVICE_ID and opened.device.boot == 7
    assert (opened.max_frame, opened.window, opened.pack_seq) == (256, 2, head.seq)
    session, next_seq, _una, _nxt, expected, _rto, max_frame, window, wall = agent.state()
    assert (session, next_seq, expected, max_frame, window) == (1, 3, 2, 256, 2)  # PROOF: 2
    assert abs(wall - (T0 + bench.now)) <= 25  # the device took the host's clock
    # the device continues the host's chain: its first pack links to the head we sent
    assert bench.session.counters.delivered == 1 and bench.session.counters.hellos == 1


def test_hello_without_host_key_and_small_device(agent: Agent) -> None:
    bench = open_bench(agent, host_key=False, max_frame=128, window=1, caps=0x0B, max_message=1024)
    device = bench.session.device
    assert isinstance(device, DeviceInfo)
    assert (device.host_kid, device.max_frame, device.window, device.capabilities) == (
        b"",
        128,
        1,
        0x0B,
    )
    assert (bench.session.max_frame, bench.session.window) == (128, 1)
    # STATUS was not announced: the request fails at once, nothing goes on the wire
    token = bench.session.request_status()
    bench.flush()
    [failed] = bench.take(RequestFailed)
    assert failed.token == token and "STATUS" in failed.reason
    # the device holds no host key: a push would be refused, so it is not sent
    push = bench.session.push_knowledge(knowledge_pack(5).encoded)
    bench.flush()
    [done] = bench.take(KnowledgeDone)
    assert done.token == push and done.status is None and "host key none" in done.detail


# ---- captures ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "q", "p", "source"),
    [
        (0x0FFF, ONE, 0xE666, "temp0"),
        (0x0F73, 0x8000, 0x8000, ""),
        (0x0BFF, ONE, ONE, "s"),  # consent failed: quarantined
        (0x0000, 0x1234, 0x4321, "x"),
        (0x07F3, 0xC000, 0xC000, "sensor/é"),
        (0x0C7F, ONE, ONE, "yellow"),
    ],
)
def test_capture_verdict_matches_gate(
    agent: Agent, flags: int, q: int, p: int, source: str
) -> None:
    bench = open_bench(agent)
    payload = b'{"t":21.5}'
    token = bench.session.capture(source, payload, CONTEXT, flags, q, p, 0x8000)
    bench.flush()
    bench.run(40)
    [done] = bench.take(CaptureDone)
    assert done.token == token
    g = evaluate(normalise(flags, payload, source, T0, CONTEXT), q, p)  # timestamp known
    assert done.result == CaptureResult(
        2, 0, record_id(DEVICE_ID, 7, 1), g.flags, g.h, g.i, g.r, g.f, g.c, g.rn, g.w,
        int(g.verdict), int(g.hard), int(g.disposition),
    )  # fmt: skip


def test_capture_refusals_and_own_capture(agent: Agent) -> None:
    bench = open_bench(agent, ring=2)
    tokens = [
        bench.session.capture("a", b"x", CONTEXT, 0x1FFF, ONE, ONE),  # reserved bit
        bench.session.capture("a" * 65, b"x", CONTEXT, 0x0FFF, ONE, ONE),  # source > 64
        capture(bench, 1),
        capture(bench, 2),
        capture(bench, 3),  # ring of two, nothing evictable: refused-full
    ]
    bench.flush()
    bench.run(200)
    done = {e.token: e.result.status for e in bench.take(CaptureDone)}
    assert done == dict(zip(tokens, [2, 2, 0, 0, 1], strict=True))
    bench.from_device(agent.capture(b"\x01", b"adc0", 0x0FFF, ONE, ONE))
    bench.run(40)
    [own] = bench.take(CaptureDone)
    assert own.token is None and own.result.ref == 0 and own.result.status == 1  # ring full
    assert bench.session.counters.own_captures == 1


def test_status_request_and_log(agent: Agent) -> None:
    bench = open_bench(agent)
    capture(bench, 1)
    token = bench.session.request_status()
    bench.flush()
    bench.run(40)
    [report] = bench.take(StatusReport)
    assert report.token == token
    assert (report.status.captures, report.status.candidates, report.status.ring_used) == (1, 1, 1)
    assert report.status.ring_capacity == agent.status()["ring_capacity"] == 16
    bench.from_device(agent.out("log", 2, b"ring 1/16"))
    assert bench.take(LogLine)[0].text == "ring 1/16"


# ---- device packs --------------------------------------------------------------------


def test_device_packs_verified_chained_and_acknowledged(agent: Agent) -> None:
    bench = open_bench(agent, offer_n=3)
    for n in range(1, 7):
        capture(bench, n)
        bench.flush()
        bench.run(30)
    bench.run_until(lambda: bench.seen(PackReceived) == 2, 3000)
    first, second = bench.intake.accepted
    assert first.seq == (7 << 32) | 1 and first.prev == GENESIS
    assert second.seq == first.seq + 1 and second.prev == first.hash
    assert records(bench.intake.accepted) == [record_id(DEVICE_ID, 7, n) for n in range(1, 7)]
    st = agent.status()
    assert (st["packs_sent"], st["packs_acked"], st["ring_used"]) == (2, 2, 0)
    assert bench.session.counters.packs_accepted == 2
    assert bench.intake.heads[DEVICE_ID] == ChainHead(second.seq, second.hash)


@pytest.mark.parametrize(
    ("max_frame", "offer_n", "kind"),
    [(512, 1, PackOffer), (512, 3, None), (128, 3, None)],
)
def test_lost_pack_offer_is_retransmitted_and_taken_once(
    agent: Agent, max_frame: int, offer_n: int, kind: type | None
) -> None:
    bench = open_bench(agent, SessionConfig(HOST_ID, max_frame=max_frame), offer_n=offer_n)
    dropped, fault = drop_first(kind)
    bench.d2h.fault = fault  # type: ignore[assignment]
    for n in range(1, offer_n + 1):
        capture(bench, n)
    bench.flush()
    bench.run_until(lambda: bench.seen(PackReceived) == 1, 3000)
    bench.run(1000)
    assert dropped == [1]
    assert len(bench.intake.answers) == 1
    assert records(bench.intake.accepted) == [
        record_id(DEVICE_ID, 7, n) for n in range(1, offer_n + 1)
    ]
    st = agent.status()
    assert st["retransmits"] >= 1 and (st["packs_sent"], st["packs_acked"]) == (1, 1)


def test_lost_pack_result_is_retransmitted_not_reoffered(agent: Agent) -> None:
    bench = open_bench(agent, offer_n=2)
    dropped, fault = drop_first(PackResult)
    bench.h2d.fault = fault  # type: ignore[assignment]
    capture(bench, 1)
    capture(bench, 2)
    bench.flush()
    bench.run(3000)
    assert dropped == [1]
    assert bench.session.counters.retransmissions >= 1
    assert [a.status for a in bench.intake.answers] == [PackStatus.ACCEPTED]
    assert agent.status()["packs_acked"] == 1 and agent.status()["ring_used"] == 0


def test_pack_result_lost_with_the_session_is_not_taken_twice(agent: Agent) -> None:
    bench = open_bench(agent, offer_n=2)
    cut = [False]

    def line(frame: bytes) -> bytes:
        if isinstance(message_of(frame), PackResult):
            cut[0] = True  # from the PACK_RESULT on, nothing reaches the device
        return b"" if cut[0] else frame

    bench.h2d.fault = line
    capture(bench, 1)
    capture(bench, 2)
    bench.flush()
    bench.run_until(lambda: agent.state()[0] == 0, 25_000, step=10)  # the device gave up
    bench.h2d.fault = None
    bench.run_until(lambda: agent.status()["ring_used"] == 0, 10_000, step=5)
    bench.run(100)
    # the new HELLO_ACK carried the accepted pack as the chain head: no second offer
    assert [a.status for a in bench.intake.answers] == [PackStatus.ACCEPTED]
    assert records(bench.intake.accepted) == [record_id(DEVICE_ID, 7, n) for n in (1, 2)]
    assert bench.take(SessionOpened)[-1].pack_seq == bench.intake.accepted[0].seq
    assert agent.status()["offers"] == 1


def test_keepalive_detects_a_silent_device(agent: Agent) -> None:
    bench = open_bench(agent, SessionConfig(HOST_ID, keepalive_ms=1000))
    bench.run(1500, step=5)
    assert bench.take(StatusReport)[0].token is None  # a probe, answered
    bench.d2h.fault = lambda frame: b""  # the device falls silent
    bench.run_until(lambda: bench.seen(SessionLost) == 1, 25_000, step=10)
    assert bench.session.phase == "idle"


def test_duplicated_frames_both_ways_exactly_once(agent: Agent) -> None:
    bench = open_bench(agent, offer_n=3)
    bench.d2h.fault = lambda frame: frame + frame
    bench.h2d.fault = lambda frame: frame + frame
    tokens = [capture(bench, n) for n in range(1, 7)]
    bench.flush()
    bench.run_until(lambda: len(records(bench.intake.accepted)) == 6, 5000)
    bench.run(500)
    assert sorted(e.token or 0 for e in bench.take(CaptureDone)) == tokens
    assert records(bench.intake.accepted) == [record_id(DEVICE_ID, 7, n) for n in range(1, 7)]
    assert len(bench.intake.answers) == len(bench.intake.accepted) == agent.status()["packs_acked"]
    assert bench.session.counters.duplicates > 0 and agent.status()["duplicates"] > 0


def test_intake_failure_answers_deferred_then_retaken(agent: Agent) -> None:
    class Flaky(MemoryIntake):
        calls = 0

        def offer(self, device: DeviceInfo, pack: bytes) -> PackDisposition:
            self.calls += 1
            if self.calls == 1:
                raise OSError("disk full")
            return super().offer(device, pack)

    bench = Bench(agent, intake=Flaky(MEMORY_KEYS))
    bench.start(offer_n=1)
    bench.run_until(lambda: bench.session.is_open, 100)
    capture(bench, 1)
    bench.flush()
    bench.run_until(lambda: bench.seen(PackRefused) == 1, 2000)
    [failed] = bench.take(IntakeFailed)
    assert "disk full" in failed.detail
    [deferred] = bench.take(PackRefused)
    assert deferred.disposition.status == PackStatus.DEFERRED
    assert deferred.disposition.reason == Reason.STORAGE
    bench.run_until(lambda: bench.seen(PackReceived) == 1, 8000, step=5)
    assert records(bench.intake.accepted) == [record_id(DEVICE_ID, 7, 1)]


# ---- fragmentation and knowledge -----------------------------------------------------


def test_fragmentation_both_directions_at_128(agent: Agent) -> None:
    sizes: list[int] = []

    def measure(frame: bytes) -> bytes:
        if frame != b"\x00":
            sizes.append(len(decode_frame(frame, 0xFFFF)) + 4)
        return frame

    bench = open_bench(agent, SessionConfig(HOST_ID, max_frame=128), offer_n=3)
    bench.h2d.fault = measure
    for n in range(1, 4):
        capture(bench, n)
    five = knowledge_pack(5)
    assert len(five.encoded) > 124  # needs fragments at 128
    push = bench.session.push_knowledge(five.encoded)
    bench.flush()
    bench.run_until(lambda: bench.seen(KnowledgeDone) == 1 and bench.seen(PackReceived) == 1, 5000)
    [done] = bench.take(KnowledgeDone)
    assert (done.token, done.status, done.reason, done.held_seq) == (
        push,
        PackStatus.ACCEPTED,
        Reason.NONE,
        5,
    )
    counters = bench.session.counters
    # (frame pieces carry more per frame than FRAGMENTs did: 2 and more, not 3, SPEC §6.8)
    assert counters.fragments_out >= 2 and counters.fragments_in >= 3
    assert counters.reassembled == 1 and max(sizes) <= 128
    assert records(bench.intake.accepted) == [record_id(DEVICE_ID, 7, n) for n in (1, 2, 3)]
    assert agent.status()["knowledge_seq"] == 5


@pytest.mark.parametrize("max_frame", [128, 512])
def test_knowledge_push_then_rollback_refused(agent: Agent, max_frame: int) -> None:
    bench = open_bench(agent, SessionConfig(HOST_ID, max_frame=max_frame))
    five, four = knowledge_pack(5), knowledge_pack(4)
    t5 = bench.session.push_knowledge(five.encoded)
    t4 = bench.session.push_knowledge(four.encoded)
    bench.flush()
    bench.run_until(lambda: bench.seen(KnowledgeDone) == 2, 3000)
    done = {e.token: e for e in bench.take(KnowledgeDone)}
    assert (done[t5].status, done[t5].held_seq, done[t5].pack_id) == (
        PackStatus.ACCEPTED,
        5,
        five.pack_id,
    )
    assert (done[t4].status, done[t4].reason, done[t4].held_seq) == (
        PackStatus.REFUSED,
        Reason.ROLLBACK,
        5,
    )
    assert bench.session.counters.knowledge_refused == {"rollback": 1}


def test_knowledge_too_large_for_device_is_not_sent(agent: Agent) -> None:
    bench = open_bench(agent, SessionConfig(HOST_ID, max_frame=128), max_message=200)
    token = bench.session.push_knowledge(knowledge_pack(5).encoded)
    bench.flush()
    [done] = bench.take(KnowledgeDone)
    assert done.token == token and done.status is None and "200" in done.detail
    assert bench.session.counters.fragments_out == 0


def test_knowledge_push_survives_lost_session(agent: Agent) -> None:
    bench = open_bench(agent)
    bench.h2d.fault = lambda frame: b""  # the line to the device is cut
    token = bench.session.push_knowledge(knowledge_pack(6).encoded)
    bench.flush()
    bench.run_until(lambda: bench.seen(SessionLost) == 1, 21_000, step=10)
    assert bench.seen(KnowledgeDone) == 0  # kept for the next session
    bench.h2d.fault = None
    # the device never saw the push; its own capture is refused with no-session
    bench.from_device(agent.capture(b"\x01", b"adc0", 0x0FFF, ONE, ONE))
    bench.run_until(lambda: bench.seen(KnowledgeDone) == 1, 3000)
    [done] = bench.take(KnowledgeDone)
    assert (done.token, done.status, done.held_seq) == (token, PackStatus.ACCEPTED, 6)
    assert bench.session.counters.no_session >= 1


# ---- damage, resets, timeouts ----------------------------------------------------------


def test_garbage_and_corrupted_frames_counted_and_recovered(agent: Agent) -> None:
    bench = open_bench(agent)
    state = {"results": 0, "captures": 0}

    def damage_d2h(frame: bytes) -> bytes:
        if isinstance(message_of(frame), CaptureResult):
            state["results"] += 1
            if state["results"] == 1:
                return b"\x13\x37noise\x00" + frame  # garbage before a good frame
            if state["results"] == 2:
                bad = bytearray(frame)
                bad[3] ^= 0x40 if bad[3] != 0x40 else 0x20
                return bytes(bad)  # bad CRC: lost, retransmitted by the device
            if state["results"] == 3:
                return b"\x01" * 600 + b"\x00" + frame  # too long, then the frame
        return frame

    def damage_h2d(frame: bytes) -> bytes:
        if isinstance(message_of(frame), KnowledgePush | type(None)):
            return frame
        if frame != b"\x00" and state["captures"] == 0:
            state["captures"] += 1
            bad = bytearray(frame)
            bad[-3] ^= 0x04 if bad[-3] != 0x04 else 0x08
            return bytes(bad)
        return frame

    bench.d2h.fault = damage_d2h
    bench.h2d.fault = damage_h2d
    tokens = [capture(bench, n) for n in range(1, 5)]
    bench.flush()
    bench.run_until(lambda: bench.seen(CaptureDone) == 4, 3000)
    assert sorted(e.token or 0 for e in bench.take(CaptureDone)) == tokens
    assert bench.session.counters.frames_bad == {"bad-cobs": 1, "bad-crc": 1, "too-long": 1}
    assert agent.status()["frames_bad"] == 1 and agent.status()["captures"] == 4


def test_bad_messages_from_device_get_errors(agent: Agent) -> None:
    bench = open_bench(agent)
    wrong_direction = encode_frame(bytes.fromhex("8401090904"), 512)  # STATUS_REQUEST, seq 9
    not_cbor = encode_frame(bytes.fromhex("9f01090704ff"), 512)
    error_back = encode_frame(bytes.fromhex("87010c0001090060"), 512)  # a bad ERROR: silence
    before = agent.status()["errors_rcvd"]
    bench.session.feed(wrong_direction + not_cbor + error_back, bench.now)
    out = bench.session.take_output()
    agent.out("input", out)
    assert agent.status()["errors_rcvd"] == before + 2
    assert bench.session.counters.refused_in == {
        "unknown-type": 1,
        "malformed": 1,
        "unanswered-error": 1,
    }
    # the session goes on
    token = capture(bench, 1)
    bench.flush()
    bench.run(40)
    assert [e.token for e in bench.take(CaptureDone)] == [token]


def test_device_reset_mid_session(agent: Agent) -> None:
    bench = open_bench(agent, offer_n=2)
    capture(bench, 1)
    capture(bench, 2)
    bench.flush()
    bench.run_until(lambda: bench.seen(PackReceived) == 1, 3000)
    [first] = bench.intake.accepted
    # a capture in flight when the device resets: its answer never comes
    bench.h2d.fault = lambda frame: b""
    lost = capture(bench, 3)
    bench.flush()
    bench.h2d.fault = None
    bench.start(boot=8, offer_n=1)  # the device reboots: fresh RAM, new boot counter
    bench.run_until(lambda: bench.seen(SessionOpened) == 2, 100)
    [reset] = bench.take(DeviceReset)
    assert (reset.device_id, reset.old_boot, reset.new_boot) == (DEVICE_ID, 7, 8)
    [lost_event] = bench.take(SessionLost)
    assert "HELLO" in lost_event.reason
    [failed] = bench.take(RequestFailed)
    assert failed.token == lost and failed.kind == "capture"
    opened = bench.take(SessionOpened)[-1]
    assert opened.pack_seq == first.seq and opened.device.boot == 8
    capture(bench, 4)
    bench.flush()
    bench.run_until(lambda: bench.seen(PackReceived) == 2, 3000)
    second = bench.intake.accepted[-1]
    assert second.seq == (8 << 32) | 1 and second.prev == first.hash  # the chain goes on
    assert records([second]) == [record_id(DEVICE_ID, 8, 1)]
    assert bench.session.counters.device_resets == 1


def test_device_reset_during_fragmented_offer(agent: Agent) -> None:
    bench = open_bench(agent, SessionConfig(HOST_ID, max_frame=128), offer_n=3)
    passed = [0]

    def half(frame: bytes) -> bytes:  # the line carries the first two pieces only
        if is_piece_frame(frame):
            passed[0] += 1
            return frame if passed[0] <= 2 else b""
        return frame

    bench.d2h.fault = half
    for n in range(1, 4):
        capture(bench, n)
    bench.flush()
    bench.run_until(lambda: bench.session.counters.fragments_in >= 2, 3000)
    assert bench.seen(PackReceived) == 0
    bench.d2h.fault = None
    bench.start(boot=9, offer_n=1)  # reset with half a pack delivered
    bench.run_until(lambda: bench.seen(SessionOpened) == 2, 100)
    capture(bench, 1)
    bench.flush()
    bench.run_until(lambda: bench.seen(PackReceived) == 1, 3000)
    [pack] = bench.intake.accepted
    assert pack.seq == (9 << 32) | 1 and pack.prev == GENESIS
    assert bench.session.counters.reassembled == 1  # the half message was dropped


def test_line_cut_timeouts_then_reestablished(agent: Agent) -> None:
    bench = open_bench(agent)
    bench.d2h.fault = lambda frame: b""
    bench.h2d.fault = lambda frame: b""
    token = capture(bench, 1)
    bench.flush()
    sent_at = bench.now
    bench.run_until(lambda: bench.seen(SessionLost) == 1, 21_000, step=5)
    assert 19_750 <= bench.now - sent_at <= 19_760
    [lost] = bench.take(SessionLost)
    assert "8 retransmission timeouts" in lost.reason
    assert bench.session.counters.retransmissions == 7
    [failed] = bench.take(RequestFailed)
    assert failed.token == token
    # the device has a result of its own waiting: it times out too and says HELLO
    bench.from_device(agent.capture(b"\x02", b"adc0", 0x0FFF, ONE, ONE))
    bench.run(25_000, step=10)
    assert agent.state()[0] == 0
    bench.d2h.fault = None
    bench.h2d.fault = None
    bench.run_until(lambda: bench.seen(SessionOpened) == 2, 8000, step=5)
    assert bench.seen(DeviceReset) == 0  # same boot: a lost session, not a reboot
    token = capture(bench, 2)
    bench.flush()
    bench.run(40)
    assert [e.token for e in bench.take(CaptureDone)] == [token]


def test_host_drop_gets_device_back_with_no_session(agent: Agent) -> None:
    bench = open_bench(agent)
    bench.session.drop("operator restarted the session")
    assert bench.take(SessionLost)[0].reason == "operator restarted the session"
    bench.from_device(agent.capture(b"\x03", b"adc0", 0x0FFF, ONE, ONE))
    bench.run_until(lambda: bench.seen(SessionOpened) == 2, 500)
    assert bench.session.counters.no_session == 1
    assert agent.status()["sessions"] == 2 and agent.status()["errors_rcvd"] == 1
    assert bench.seen(ErrorReceived) == 0
