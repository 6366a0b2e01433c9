"""The C device agent (firmware/core/hm_agent) against a host peer built on the host codec.

build/host/t_agent runs one agent with a virtual clock; this test plays the host with
the real host codec (hirmem.protocol: frames, messages, pieces, packs):
it decodes every byte the agent writes, sequences and reassembles like a host, and
checks the results against independent oracles (hirmem.protocol.gate.evaluate after normalise,
verify_pack with the device key). The program checks the agent invariants A1-A4 of
hm_agent.h after every request.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import pytest

from codec_receiver import CHALLENGE, CodecReceiver
from hirmem.protocol import identity
from hirmem.protocol.frames import encode_frame
from hirmem.protocol.gate import evaluate
from hirmem.protocol.keys import SigningKey
from hirmem.protocol.messages import (
    Ack,
    Capture,
    CaptureResult,
    Error,
    Hello,
    HelloAck,
    KnowledgePush,
    KnowledgeResult,
    Log,
    Message,
    PackOffer,
    Status,
    StatusRequest,
    encode_message,
)
from hirmem.protocol.packs import (
    ChainHead,
    KnowledgeItem,
    Pack,
    PackKind,
    TrustedKey,
    sign_pack,
    verify_pack,
)
from hirmem.protocol.pieces import split
from hirmem.protocol.proof import hello_echo
from hirmem.protocol.records import GENESIS, Record, normalise, record_id
from session_peer import Agent

T0 = 1_780_000_000_000
ONE = 0x10000
DEVICE_ID = bytes.fromhex("0102030405060708")
HOST_ID = bytes.fromhex("a1a2a3a4a5a6a7a8")
# hirmem.protocol.keys.derive_test_key, computed here: seed = SHA-256("hirmem test key: <label>")
DEVICE_SEED = hashlib.sha256(b"hirmem test key: device 0102030405060708").digest()
HOST_SEED = hashlib.sha256(b"hirmem test key: host a1a2a3a4a5a6a7a8").digest()
DEVICE_KEY = SigningKey(DEVICE_SEED)
HOST_KEY = SigningKey(HOST_SEED)
MEMORY_KEYS = {DEVICE_KEY.kid: TrustedKey(DEVICE_KEY.public, DEVICE_ID, PackKind.MEMORY)}
CONTEXT = hashlib.sha256(b"event frame").digest()
ALL_CAPS = 0x1F


# t_agent driven one request line at a time: the same driver the session tests use
Device = Agent


@dataclass
class Host(CodecReceiver):
    """A minimal host session: sequencing, acks, reassembly, all with the host codec."""

    dev: Device
    max_frame: int = 512
    window: int = 4
    next_seq: int = 1

    def feed(self, data: bytes) -> None:
        self.receive(data)

    def frame(self, message: Message, seq: int | None = None) -> bytes:
        """Encode a sequenced message with the next seq (or a given one) and frame it."""
        if seq is None:
            seq, self.next_seq = self.next_seq, self.next_seq + 1
        return encode_frame(encode_message(message, seq, self.expected - 1), self.max_frame)

    def send(self, message: Message) -> None:
        """Send a message, in frame pieces when it does not fit; feed the answer back."""
        body = encode_message(message, self.next_seq, self.expected - 1)
        self.next_seq += 1
        wire = b"".join(encode_frame(p, self.max_frame) for p in split(body, self.max_frame))
        self.feed(self.dev.out("input", wire))

    def ack(self) -> None:
        self.owed = False
        wire = encode_frame(encode_message(Ack(), 0, self.expected - 1), self.max_frame)
        self.feed(self.dev.out("input", wire))

    def advance(self, ms: int, step: int = 10) -> None:
        """Move the device clock, acknowledging what arrives as a host would."""
        for _ in range(0, ms, step):
            self.feed(self.dev.out("advance", step))
            while self.owed:
                self.ack()

    def take(self, kind: type[Message]) -> list[tuple[int, Message]]:
        got = [(s, m) for s, m in self.delivered if isinstance(m, kind)]
        self.delivered = [(s, m) for s, m in self.delivered if not isinstance(m, kind)]
        return got

    def handshake(
        self, *, pack_seq: int = 0, pack_hash: bytes = GENESIS, max_message: int = 65536
    ) -> HelloAck:
        assert self.hello is not None
        ack = HelloAck(
            HOST_ID,
            min(self.max_frame, self.hello.max_frame),
            max_message,
            min(self.window, self.hello.window),
            T0,
            pack_seq,
            pack_hash,
            CHALLENGE,
            self.hello_echo,
        )
        self.max_frame, self.window = ack.max_frame, ack.window
        self.next_seq, self.expected = 2, 2
        wire = encode_frame(encode_message(ack, 1, 1), 128)
        proofs = len(self.proofs)
        self.feed(self.dev.out("input", wire))
        # the device's first message: its PROOF, seq 2, carrying the ack of HELLO_ACK
        assert len(self.proofs) == proofs + 1 and self.proof_verifies(DEVICE_KEY.public, HOST_ID)
        self.advance(20)
        return ack


@pytest.fixture
def dev() -> Iterator[Device]:
    device = Device()
    yield device
    device.close()


def connect(
    dev: Device,
    host_frame: int = 512,
    host_window: int = 4,
    *,
    ring: int = 0,
    offer_n: int = 0,
    offer_t: int = 0,
    status_t: int = 0,
    max_message: int = 4096,
) -> Host:
    host = Host(dev, max_frame=host_frame, window=host_window)
    out = dev.init(
        ring=ring, offer_n=offer_n, offer_t=offer_t, status_t=status_t, max_message=max_message
    )
    assert out[0] == 0
    host.feed(out)
    host.handshake()
    return host


def capture(host: Host, n: int, *, flags: int = 0x0FFF, q: int = ONE, p: int = 0xE666) -> Capture:
    return Capture(f"temp{n}", f'{{"t":{n}}}'.encode(), CONTEXT, flags, q, p, 0x8000)


# ---- handshake ---------------------------------------------------------------------


def test_hello_fields_and_resends(dev: Device) -> None:
    host = Host(dev)
    out = dev.init(boot=9)
    assert out[:1] == b"\x00"
    host.feed(out)
    assert host.hello == Hello(
        DEVICE_ID, "native", "0.1.0", 9, ALL_CAPS, 512, 4096, 4, DEVICE_KEY.kid, HOST_KEY.kid,
        8, 32,  # HM_KNOWLEDGE_CAPACITY facts of HM_KNOWLEDGE_TEXT bytes (KNOWLEDGE announced)
    )  # fmt: skip
    first = host.wire_bodies[-1]
    assert len(first) + 4 <= 128
    # resent byte-identical at 0.25, 0.75, 1.75, 3.75, 7.75, then every 4 s: never gives up
    times = []
    for ms in range(1, 16_000):
        out = dev.out("advance", 1)
        if out:
            host.feed(out)
            assert host.wire_bodies[-1] == first
            times.append(ms)
    assert times == [250, 750, 1750, 3750, 7750, 11750, 15750]
    # nothing is acknowledged without a session: a CAPTURE is ignored silently
    assert dev.out("input", host.frame(capture(host, 1), seq=2)) == b""


def test_a_hello_ack_of_another_hello_is_ignored_and_counted(dev: Device) -> None:
    """SPEC §6.5 device step 3: HELLO_ACK must echo the current HELLO (§5.3). One that
    answered the previous boot's HELLO, late on the line, opens nothing and draws no ERROR,
    even when its bounds are wrong too; each is counted. The right one then opens."""
    host = Host(dev)
    host.feed(dev.init(boot=9))
    assert host.hello is not None
    older = encode_message(replace(host.hello, boot=8), 1, 0)
    stale = HelloAck(HOST_ID, 512, 65536, 4, T0, 0, GENESIS, CHALLENGE, hello_echo(older))
    for ack in (stale, stale, replace(stale, window=9)):  # duplicated; beyond the offer
        assert dev.out("input", encode_frame(encode_message(ack, 1, 1), 128)) == b""
    assert dev.state()[0] == 0 and dev.status()["stale_hello_acks"] == 3
    one_bit = bytearray(host.hello_echo)
    one_bit[15] ^= 0x01  # a single bit off is as foreign as any other echo
    foreign = replace(stale, hello_hash=bytes(one_bit))
    assert dev.out("input", encode_frame(encode_message(foreign, 1, 1), 128)) == b""
    assert dev.status()["stale_hello_acks"] == 4
    host.handshake()
    assert dev.state()[0] == 1 and dev.status()["stale_hello_acks"] == 4
    assert dev.status()["ignored"] == 0  # counted as stale, not among the other ignored


def test_hello_without_host_key(dev: Device) -> None:
    host = Host(dev)
    host.feed(dev.init(host_key=False, max_frame=128, window=1, caps=0x0B, max_message=1024))
    assert host.hello is not None
    assert (host.hello.host_kid, host.hello.max_frame, host.hello.window) == (b"", 128, 1)
    assert host.hello.capabilities == 0x0B


def test_handshake_agreement(dev: Device) -> None:
    host = Host(dev, max_frame=256, window=2)
    host.feed(dev.init())
    host.handshake()
    session, next_seq, _una, _nxt, expected, _rto, mf, win, wall = dev.state()
    assert (session, next_seq, expected, mf, win) == (1, 3, 2, 256, 2)  # PROOF was seq 2
    assert T0 <= wall <= T0 + 100
    # the HELLO_ACK was acknowledged at once by the PROOF (ack 1), so no separate ACK
    assert [e.ack for e in host.unsequenced if isinstance(e.message, Ack)] == []
    assert [env.ack for _, _, env in host.frames if env.seq == 2] == [1]


def test_hello_ack_beyond_offer_is_malformed(dev: Device) -> None:
    host = Host(dev)
    host.feed(dev.init(window=2))
    # window above the offer
    bad = HelloAck(HOST_ID, 512, 4096, 3, T0, 0, GENESIS, CHALLENGE, host.hello_echo)
    host.feed(dev.out("input", encode_frame(encode_message(bad, 1, 1), 128)))
    errors = [e.message for e in host.unsequenced if isinstance(e.message, Error)]
    assert [(e.code, e.ref) for e in errors] == [(3, 1)]
    assert dev.state()[0] == 0


# ---- captures ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "q", "p", "source"),
    [
        (0x0FFF, ONE, 0xE666, "temp0"),
        (0x0F73, 0x8000, 0x8000, ""),
        (0x0BFF, ONE, ONE, "s"),  # consent failed: quarantined
        (0x0000, 0x1234, 0x4321, "x"),
        (0x07F3, 0xC000, 0xC000, "sensor/é"),
    ],
)
def test_capture_result_matches_gate(dev: Device, flags: int, q: int, p: int, source: str) -> None:
    host = connect(dev)
    payload = b'{"t":21.5}'
    host.send(Capture(source, payload, CONTEXT, flags, q, p, 0x8000))
    host.advance(20)
    [(seq, msg)] = host.take(CaptureResult)
    assert isinstance(msg, CaptureResult)
    timestamp = dev.state()[8] - 20  # the wall clock when the capture arrived
    g = evaluate(normalise(flags, payload, source, timestamp, CONTEXT), q, p)
    assert msg == CaptureResult(
        2, 0, record_id(DEVICE_ID, 7, 1), g.flags, g.h, g.i, g.r, g.f, g.c, g.rn, g.w,
        int(g.verdict), int(g.hard), int(g.disposition),
    )  # fmt: skip
    assert seq == 3  # after the PROOF (seq 2)


def test_capture_refusals(dev: Device) -> None:
    host = connect(dev, ring=2)
    host.send(Capture("a", b"x", CONTEXT, 0x1FFF, ONE, ONE, 0))  # reserved bit 12
    host.send(Capture("a" * 65, b"x", CONTEXT, 0x0FFF, ONE, ONE, 0))  # source > 64 bytes
    host.send(capture(host, 1))
    host.send(capture(host, 2))
    host.send(capture(host, 3))  # two gated records, nothing evictable: full
    host.advance(20)
    results = [m for _, m in host.take(CaptureResult)]
    assert [m.status for m in results if isinstance(m, CaptureResult)] == [2, 2, 0, 0, 1]
    refused = results[0]
    assert refused == CaptureResult(2, 2, b"", 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0)
    st = dev.status()
    assert (st["captures"], st["refusals"], st["ring_used"], st["ring_capacity"]) == (5, 3, 2, 2)


def test_own_capture_reported_with_ref_0(dev: Device) -> None:
    host = connect(dev)
    answer = dev.request("capture", b"\x01\x02", b"adc0", 0, CONTEXT, 0x0FFF, ONE, ONE, ONE)
    assert answer[0] == "0"
    host.feed(bytes.fromhex(answer[1][1:]))
    [(_, msg)] = host.take(CaptureResult)
    assert isinstance(msg, CaptureResult) and msg.ref == 0 and msg.status == 0
    assert dev.request("capture", b"x", b"\xff", 0, CONTEXT, 0x0FFF, ONE, ONE, ONE)[0] == "2"


def test_own_results_leave_room_for_an_offer_and_an_answer(dev: Device) -> None:
    """A sensor faster than the line: its CAPTURE_RESULTs stop at queue - 2 (6 - 2), the
    rest are counted lost, and a host request is still answered, not refused busy."""
    host = connect(dev, offer_n=3)
    for n in range(6):  # nothing acknowledged: the queue only grows
        answer = dev.request("capture", b"%d" % n, b"adc0", 0, CONTEXT, 0x0FFF, ONE, ONE, ONE)
        assert answer[0] == "0"  # every reading is stored in the ring all the same
        host.feed(bytes.fromhex(answer[1][1:]))
    st = dev.status()
    assert (st["results_lost"], st["ring_used"]) == (2, 6)
    host.send(StatusRequest())  # the reserve takes it: STATUS queued, no ERROR busy
    host.advance(300)
    assert not [e for e in host.unsequenced if isinstance(e.message, Error)]
    assert host.take(Status)
    # and the pack offer found its entry too
    assert host.take(PackOffer)


# ---- packs -------------------------------------------------------------------------


def collect_pack(host: Host, ms: int = 2000) -> tuple[int, Pack]:
    host.advance(ms)
    offers = host.take(PackOffer)
    assert len(offers) == 1, offers
    seq, offer = offers[0]
    assert isinstance(offer, PackOffer)
    head = None
    return seq, verify_pack(offer.pack, MEMORY_KEYS, head, PackKind.MEMORY).pack


def fill(host: Host, n: int, start: int = 1) -> None:
    for i in range(start, start + n):
        host.send(capture(host, i))
    assert len(host.take(CaptureResult)) == n


@pytest.mark.parametrize("max_frame", [128, 512])
def test_offload_fragmented_pack(dev: Device, max_frame: int) -> None:
    host = connect(dev, host_frame=max_frame, offer_n=3)
    fill(host, 3)
    pieces_before = host.pieces_in
    offer_seq, pack = collect_pack(host)
    assert host.pieces_in - pieces_before > 1  # one seq, several frames (SPEC §6.8)
    assert all(len(b) + 4 <= max_frame for b in host.piece_bodies)
    assert pack.seq == (7 << 32) | 1 and pack.prev == GENESIS
    assert [r.id for r in pack.items if isinstance(r, Record)] == [
        record_id(DEVICE_ID, 7, n) for n in (1, 2, 3)
    ]
    sources = [r.source for r in pack.items if isinstance(r, Record)]
    assert sources == ["temp1", "temp2", "temp3"]
    st = dev.status()
    assert (st["packs_sent"], st["pinned"], st["ring_used"]) == (1, 3, 3)
    host.send(host.pack_result(offer_seq, 0, 0))
    host.send(StatusRequest())
    host.advance(20)
    [(_, status)] = host.take(Status)
    assert isinstance(status, Status)
    assert (status.packs_sent, status.packs_acked, status.ring_used) == (1, 1, 0)
    assert status.captures == 3 and status.candidates == 3


def test_the_slot_public_key_is_checked_once_and_signs(dev: Device) -> None:
    """hm_agent_config.public_key (the key slot's copy): a key that is not the seed's is
    refused at init; the right one is what every pack is signed with (OpenSSL verifies)."""
    seed = DEVICE_KEY.seed()
    for wrong in (HOST_KEY.public.raw, bytes(32), DEVICE_KEY.public.raw[:31] + b"\x00"):
        answer = dev.request("init", DEVICE_ID, 7, ALL_CAPS, 512, 4, 4096, 2, 0, 0, seed,
                             b"", b"", b"", 0, wrong)  # fmt: skip
        assert answer == ["bad_arg"], wrong.hex()
    host = Host(dev)
    out = dev.init(offer_n=2, public_key=DEVICE_KEY.public.raw)
    host.feed(out)
    host.handshake()
    fill(host, 2)
    _, pack = collect_pack(host)  # verified with the registered key
    assert [r.id for r in pack.items if isinstance(r, Record)] == [
        record_id(DEVICE_ID, 7, n) for n in (1, 2)
    ]


def test_offload_by_period(dev: Device) -> None:
    host = connect(dev, offer_t=1000)
    fill(host, 1)
    host.advance(500)
    assert host.take(PackOffer) == []
    _, pack = collect_pack(host, 600)
    assert len(pack.items) == 1


def test_refused_pack_records_come_back(dev: Device) -> None:
    host = connect(dev, offer_n=2)
    fill(host, 2)
    first_seq, first = collect_pack(host)
    host.send(host.pack_result(first_seq, 2, 10))  # refused, bad-record
    host.advance(20)
    st = dev.status()
    assert (st["records_returned"], st["packs_refused"]) == (2, 1)
    second_seq, second = collect_pack(host)
    assert second.seq == first.seq + 1 and second.prev == GENESIS
    assert [r.id for r in second.items if isinstance(r, Record)] == [
        r.id for r in first.items if isinstance(r, Record)
    ]
    host.send(host.pack_result(second_seq, 0, 0))
    host.advance(20)
    assert dev.status()["ring_used"] == 0


def test_reset_continues_chain_above_host_head(dev: Device) -> None:
    host = connect(dev, offer_n=1)
    fill(host, 1)
    first_seq, first = collect_pack(host)
    host.send(host.pack_result(first_seq, 0, 0))
    host.advance(20)
    # the device resets: new boot counter, fresh RAM
    host = Host(dev)
    out = dev.init(boot=8, offer_n=1)
    host.feed(out)
    assert host.hello is not None and host.hello.boot == 8
    host.handshake(pack_seq=first.seq, pack_hash=first.hash)
    fill(host, 1)
    host.advance(2000)
    [(_, offer)] = host.take(PackOffer)
    assert isinstance(offer, PackOffer)
    head = ChainHead(first.seq, first.hash)
    pack = verify_pack(offer.pack, MEMORY_KEYS, head, PackKind.MEMORY).pack
    assert pack.seq == (8 << 32) | 1 and pack.prev == first.hash
    assert [r.id for r in pack.items if isinstance(r, Record)] == [record_id(DEVICE_ID, 8, 1)]


# ---- reliability -------------------------------------------------------------------


def test_lost_device_frame_is_retransmitted(dev: Device) -> None:
    host = connect(dev)
    out1 = dev.out("input", host.frame(capture(host, 1)))  # CAPTURE_RESULT seq 3: lost
    host.feed(dev.out("input", host.frame(capture(host, 2))))  # seq 4 arrives: out of order
    assert out1 and host.out_of_order == 1 and host.delivered == []
    host.ack()  # the host re-acknowledges 2 (the PROOF)
    for _ in range(22):
        assert dev.out("advance", 10) == b""  # nothing before the RTO (250 ms)
    host.advance(30, step=1)
    got = host.take(CaptureResult)
    assert [(s, m.ref) for s, m in got if isinstance(m, CaptureResult)] == [(3, 2), (4, 3)]
    assert dev.status()["retransmits"] == 2
    host.advance(500)
    assert host.take(CaptureResult) == []  # each message exactly once


def test_lost_host_frame_is_recovered(dev: Device) -> None:
    host = connect(dev)
    lost = host.frame(capture(host, 1))  # seq 2 never arrives
    late = host.frame(capture(host, 2))  # seq 3
    host.feed(dev.out("input", late))
    host.advance(20)
    assert host.take(CaptureResult) == []
    acks = [e.ack for e in host.unsequenced if isinstance(e.message, Ack)]
    assert acks[-1] == 1  # out of order: discarded, re-acknowledged
    host.feed(dev.out("input", lost))
    host.feed(dev.out("input", late))
    host.advance(20)
    got = host.take(CaptureResult)
    assert [m.ref for _, m in got if isinstance(m, CaptureResult)] == [2, 3]
    assert dev.status()["captures"] == 2


def test_duplicate_is_reacked_not_redelivered(dev: Device) -> None:
    host = connect(dev)
    wire = host.frame(capture(host, 1))
    host.feed(dev.out("input", wire))
    host.advance(20)
    assert len(host.take(CaptureResult)) == 1
    before = len(host.unsequenced)
    host.feed(dev.out("input", wire))
    host.advance(20, step=1)
    assert host.take(CaptureResult) == []
    assert [e.ack for e in host.unsequenced[before:] if isinstance(e.message, Ack)] == [2]
    st = dev.status()
    assert (st["captures"], st["duplicates"]) == (1, 1)


def test_corrupted_frame_counted_and_recovered(dev: Device) -> None:
    host = connect(dev)
    wire = host.frame(capture(host, 1))
    bad = bytearray(wire)
    bad[5] ^= 0x01 if bad[5] != 0x01 else 0x02
    assert dev.out("input", bytes(bad)) == b""  # damage is never answered
    assert dev.status()["frames_bad"] == 1
    host.feed(dev.out("input", wire))  # the host's retransmission
    host.advance(20)
    assert len(host.take(CaptureResult)) == 1


def test_chunked_input(dev: Device) -> None:
    host = connect(dev)
    wire = host.frame(capture(host, 1)) + host.frame(StatusRequest())
    out = b""
    for i in range(0, len(wire), 3):
        out += dev.out("input", wire[i : i + 3])
    host.feed(out)
    host.advance(20)
    assert len(host.take(CaptureResult)) == 1 and len(host.take(Status)) == 1


def test_session_dies_after_8_timeouts_then_hello(dev: Device) -> None:
    host = connect(dev)
    dev.out("input", host.frame(capture(host, 1)))  # result never acknowledged
    out = dev.out("advance", 19_749)
    host.feed(out)
    assert dev.state()[0] == 1
    host.feed(dev.out("advance", 1))
    assert dev.state()[0] == 0 and isinstance(host.hello, Hello)
    st = dev.status()
    assert (st["retransmits"], st["sessions_lost"]) == (7, 1)


def test_error_no_session_restarts_handshake(dev: Device) -> None:
    host = connect(dev)
    host.hello = None
    err = encode_frame(encode_message(Error(5, 2, "no session"), 0, 0), 512)
    host.feed(dev.out("input", err))
    assert host.hello is not None and dev.state()[0] == 0


@pytest.mark.parametrize(
    ("body", "code", "ref"),
    [
        (bytes.fromhex("84020907 04".replace(" ", "")), 1, 7),  # unknown version
        (bytes.fromhex("8401186307 04".replace(" ", "")), 2, 7),  # unknown type 99
        (encode_message(CaptureResult(0, 1, b"", 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0), 2, 1), 2, 2),
        (bytes.fromhex("8401090004"), 3, 0),  # sequenced type with seq 0
        (bytes.fromhex("9f01090704ff"), 3, 0),  # indefinite array
    ],
)
def test_bad_messages_get_error(dev: Device, body: bytes, code: int, ref: int) -> None:
    host = connect(dev)
    host.feed(dev.out("input", encode_frame(body, 512)))
    errors = [e.message for e in host.unsequenced if isinstance(e.message, Error)]
    assert [(e.code, e.ref) for e in errors] == [(code, ref)]
    if code == 1:
        assert "1" in errors[0].detail
    # not acknowledged: seq 2 is still expected and is delivered now
    host.send(capture(host, 1))
    host.advance(20)
    [(_, msg)] = host.take(CaptureResult)
    assert isinstance(msg, CaptureResult) and msg.ref == 2


def test_error_is_not_answered(dev: Device) -> None:
    connect(dev)
    body = bytes.fromhex("87010c0001090060")  # ERROR with code 9: malformed
    assert dev.out("input", encode_frame(body, 512)) == b""
    assert dev.status()["errors_sent"] == 0


# ---- knowledge ---------------------------------------------------------------------


def knowledge_pack(seq: int) -> Pack:
    items = [
        KnowledgeItem(bytes.fromhex(identity.triple_id(s, p, o)), s, p, o, c)
        for s, p, o, c in [("temp0", "max_safe", "80.0", 0xF000), ("pump", "serves", "zone 3", ONE)]
    ]
    return sign_pack(HOST_KEY, PackKind.KNOWLEDGE, HOST_ID, seq, GENESIS, T0, items)


@pytest.mark.parametrize("max_frame", [128, 512])
def test_knowledge_push_and_rollback(dev: Device, max_frame: int) -> None:
    host = connect(dev, host_frame=max_frame)
    five = knowledge_pack(5)
    host.send(KnowledgePush(five.encoded))
    host.advance(20)
    [(_, res)] = host.take(KnowledgeResult)
    assert res == KnowledgeResult(five.pack_id, 0, 0, 5)
    four = knowledge_pack(4)
    host.send(KnowledgePush(four.encoded))
    host.advance(20)
    [(_, res)] = host.take(KnowledgeResult)
    assert res == KnowledgeResult(four.pack_id, 2, 7, 5)  # refused, rollback, still 5
    status = dev.status()
    assert status["knowledge_seq"] == 5
    # the board was asked once to keep the head (seq 5 and the pack's SHA-256), not
    # again for the refused one
    head = hashlib.sha256(five.encoded).digest()
    assert (status["saved_seq"], status["saved_calls"]) == (5, 1)
    assert status["saved_hash_head"] == int.from_bytes(head[:2], "big")


def test_knowledge_too_large_for_max_message(dev: Device) -> None:
    host = connect(dev, host_frame=128, max_message=200)
    host.send(KnowledgePush(knowledge_pack(5).encoded))
    host.advance(20)
    errors = [e.message for e in host.unsequenced if isinstance(e.message, Error)]
    assert errors and errors[0].code == 4 and errors[0].ref == 2


# ---- misc ----------------------------------------------------------------------------


def test_periodic_status_and_log(dev: Device) -> None:
    host = connect(dev, status_t=1000)
    host.advance(1000)
    assert len(host.take(Status)) == 1
    out = dev.out("log", 1, b"ring ok")
    host.feed(out)
    assert host.unsequenced[-1].message.__class__.__name__ == "Log"


def test_sizes(dev: Device) -> None:
    agent, ring, packer, knowledge, join, rx, queue = (int(x) for x in dev.request("sizes"))
    assert agent < 20_000
    assert agent > ring + packer + knowledge + join + rx + queue


def test_many_captures_window_and_exactly_once(dev: Device) -> None:
    host = connect(dev, host_window=2)
    frames: Sequence[bytes] = [host.frame(capture(host, i)) for i in range(1, 11)]
    for wire in frames:
        host.feed(dev.out("input", wire))
    host.advance(3000)
    refs = [m.ref for _, m in host.take(CaptureResult) if isinstance(m, CaptureResult)]
    # the queue may answer busy; the host retransmits what was not acknowledged
    while len(refs) < 10:
        for seq, wire in enumerate(frames, start=2):
            if seq > max(host.acks_seen):  # what the device has not acknowledged
                host.feed(dev.out("input", wire))
        host.advance(1000)
        refs += [m.ref for _, m in host.take(CaptureResult) if isinstance(m, CaptureResult)]
    assert sorted(refs) == list(range(2, 12)) and len(refs) == 10


# ---- resume after a warm reset (hm_agent.h "Resume") -----------------------------------


def warm_reset(dev: Device, boot: int = 8) -> Host:
    """A warm reset: hm_agent_init again on the kept struct with resume = 1."""
    answer = dev.request("resume", boot)
    assert answer[0] == "ok", answer
    out = bytes.fromhex(answer[1][1:])
    assert out[:1] == b"\x00"
    host = Host(dev)
    host.feed(out)
    assert host.hello is not None and host.hello.boot == boot  # the new boot counter
    return host


def ids(pack: Pack) -> list[bytes]:
    return [r.id for r in pack.items if isinstance(r, Record)]


def ring_state(dev: Device) -> dict[str, int]:
    names = ("ring_boot", "ring_seq", "used", "pinned", "packer_boot", "pending")
    return dict(zip(names, (int(x) for x in dev.request("ring")), strict=True))


def test_resume_releases_a_pack_the_host_stored(dev: Device) -> None:
    """The host stored the pack, its PACK_RESULT was lost to the reset: the HELLO_ACK head
    releases the records and the pack is never offered again."""
    host = connect(dev, offer_n=2)
    fill(host, 2)
    _, first = collect_pack(host)
    assert ids(first) == [record_id(DEVICE_ID, 7, n) for n in (1, 2)]
    host = warm_reset(dev)  # no PACK_RESULT reached the device
    st = dev.status()
    assert (st["resumes"], st["resume_failed"], st["ring_used"], st["pinned"]) == (1, 0, 2, 2)
    host.handshake(pack_seq=first.seq, pack_hash=first.hash)
    st = dev.status()
    assert (st["ring_used"], st["records_released"], st["pinned"]) == (0, 2, 0)
    host.advance(3000)
    assert host.take(PackOffer) == []
    # the ring was empty after the head: numbering goes on under the new boot
    assert ring_state(dev)["ring_boot"] == 8 and ring_state(dev)["packer_boot"] == 8
    fill(host, 2)
    host.advance(2000)
    [(_, offer)] = host.take(PackOffer)
    assert isinstance(offer, PackOffer)
    pack = verify_pack(offer.pack, MEMORY_KEYS, ChainHead(first.seq, first.hash), PackKind.MEMORY)
    assert pack.pack.seq == (8 << 32) | 1 and pack.pack.prev == first.hash
    assert ids(pack.pack) == [record_id(DEVICE_ID, 8, n) for n in (1, 2)]
    assert not any(isinstance(e.message, Log) for e in host.unsequenced)  # nothing to report


@pytest.mark.parametrize("mid_transfer", [False, True])
def test_resume_offers_an_unstored_pack_again_exactly_once(dev: Device, mid_transfer: bool) -> None:
    """The pack was in flight (whole, or cut between its frame pieces) and the host did not
    store it: after the reset the records are packed again and offered once."""
    host = connect(dev, host_frame=128, offer_n=3)
    fill(host, 3)
    if mid_transfer:
        before = host.pieces_in
        out = dev.out("advance", 2)  # the offer leaves in pieces; the line takes half
        host.feed(out[: len(out) // 2])
        assert host.pieces_in > before
        assert host.take(PackOffer) == []
        st = dev.status()
        assert (st["packs_sent"], st["pinned"]) == (1, 3)
        old_seq = (7 << 32) | 1
    else:
        _, first = collect_pack(host)
        old_seq = first.seq
    host = warm_reset(dev)
    host.handshake()  # the host holds nothing of it: genesis head
    st = dev.status()
    # abandoned at the head (records_returned), already packed again (pinned)
    assert (st["resumes"], st["ring_used"], st["records_returned"]) == (1, 3, 3)
    host.advance(2000)
    [(offer_seq, offer)] = host.take(PackOffer)
    assert isinstance(offer, PackOffer)
    again = verify_pack(offer.pack, MEMORY_KEYS, None, PackKind.MEMORY).pack
    assert again.seq == old_seq + 1 and again.prev == GENESIS  # the old seq is burnt
    assert ids(again) == [record_id(DEVICE_ID, 7, n) for n in (1, 2, 3)]  # their ids kept
    host.send(host.pack_result(offer_seq, 0, 0))
    host.advance(3000)
    assert host.take(PackOffer) == []  # exactly once
    st = dev.status()
    assert (st["ring_used"], st["records_released"], st["packs_acked"]) == (0, 3, 1)


def test_resume_of_corrupted_memory_starts_empty_and_says_so(dev: Device) -> None:
    host = connect(dev)
    fill(host, 2)
    assert dev.request("scribble", 0, b"\xff" * 176) == ["ok"]  # slot 0 is garbage now
    host = warm_reset(dev)
    st = dev.status()
    assert (st["resumes"], st["resume_failed"], st["ring_used"], st["captures"]) == (0, 1, 0, 0)
    assert ring_state(dev)["ring_boot"] == 8
    assert not any(isinstance(e.message, Log) for e in host.unsequenced)  # after the handshake
    host.handshake()
    logs = [e.message for e in host.unsequenced if isinstance(e.message, Log)]
    assert logs == [Log(2, "resume failed: memory lost")]
    host.send(capture(host, 9))
    [(_, res)] = host.take(CaptureResult)
    assert isinstance(res, CaptureResult) and res.record_id == record_id(DEVICE_ID, 8, 1)


@pytest.mark.parametrize(
    "offset, data",
    [
        (0, b"\xff" * 4),  # a slot's context bytes: not structure, resumed as is
        (140, (9).to_bytes(4, "little")),  # slot 0's seq becomes 9 > ring seq 2
        (165, b"\x02"),  # slot 0's state becomes CONSOLIDATED
        (176 + 164, b"\x07"),  # slot 1's block count
    ],
)
def test_resume_checks_the_ring_structure(dev: Device, offset: int, data: bytes) -> None:
    agent, ring, *_ = (int(x) for x in dev.request("sizes"))
    assert ring > offset and agent > ring
    host = connect(dev)
    fill(host, 2)
    assert dev.request("scribble", offset, data) == ["ok"]
    warm_reset(dev)
    st = dev.status()
    structural = offset >= 140
    assert (st["resumes"], st["resume_failed"]) == ((0, 1) if structural else (1, 0))
    assert st["ring_used"] == (0 if structural else 2)


def test_record_ids_continue_across_a_resume(dev: Device) -> None:
    host = connect(dev)
    fill(host, 2)
    host = warm_reset(dev, boot=12)
    host.handshake()
    host.send(capture(host, 3))
    [(_, res)] = host.take(CaptureResult)
    assert isinstance(res, CaptureResult)
    # the ring still held records: its numbering (boot 7) goes on, not boot 12's
    assert res.record_id == record_id(DEVICE_ID, 7, 3)
    assert ring_state(dev) == {
        "ring_boot": 7, "ring_seq": 3, "used": 3, "pinned": 0, "packer_boot": 7, "pending": 0,
    }  # fmt: skip
    st = dev.status()
    assert (st["captures"], st["candidates"]) == (3, 3)  # the ring's counters were kept


def test_resume_undoes_a_build_the_reset_interrupted(dev: Device) -> None:
    host = connect(dev, offer_n=5)
    fill(host, 2)
    assert dev.request("halfbuild") == ["ok"]
    assert ring_state(dev)["pinned"] == 1 and ring_state(dev)["pending"] == 0
    host = warm_reset(dev)
    assert dev.status()["resumes"] == 1
    assert ring_state(dev)["pinned"] == 0  # never offered: packable again
    host.handshake()
    host.send(capture(host, 3))
    host.send(capture(host, 4))
    host.send(capture(host, 5))
    host.take(CaptureResult)
    _, pack = collect_pack(host)
    assert ids(pack) == [record_id(DEVICE_ID, 7, n) for n in range(1, 6)]
