"""hirmem.link.session.Session alone, on a virtual clock: the exact timing and bytes of §6.

The device side here is a few frames built with the host codec, to pin down what the
C agent cannot show directly: when the host retransmits, when it acknowledges, what
it answers to a HELLO it cannot accept, and what it sends before the handshake.
"""

from __future__ import annotations

from conftest import DEVICE_ID, DEVICE_KEY, HOST_ID, HOST_KEY
from hirmem.link.session import (
    MemoryIntake,
    RequestFailed,
    Session,
    SessionConfig,
    SessionLost,
    SessionOpened,
)
from hirmem.protocol.errors import FrameError
from hirmem.protocol.frames import FrameDecoder, encode_frame
from hirmem.protocol.messages import (
    Ack,
    CaptureResult,
    Envelope,
    Error,
    Hello,
    HelloAck,
    Message,
    Proof,
    decode_message,
    encode_message,
)
from hirmem.protocol.proof import hello_echo, sign_proof
from session_peer import MEMORY_KEYS, T0

CONTEXT = bytes(32)
CHALLENGE = bytes(range(16))  # what new_session's HELLO_ACKs carry


def hello_body(boot: int = 7, max_frame: int = 512, window: int = 4) -> bytes:
    message = Hello(
        DEVICE_ID, "sim", "0", boot, 0x1F, max_frame, 4096, window, DEVICE_KEY.kid, HOST_KEY.kid
    )
    return encode_message(message, 1, 0)


def hello(boot: int = 7, max_frame: int = 512, window: int = 4) -> bytes:
    return encode_frame(hello_body(boot, max_frame, window), 128)


def proof(boot: int = 7) -> bytes:
    """The device's PROOF (seq 2, ack 1) for the default HELLO: it opens the session."""
    signature = sign_proof(DEVICE_KEY, HOST_ID, CHALLENGE, DEVICE_ID, boot, hello_body(boot))
    return frame(Proof(signature), 2, 1)


def frame(message: Message, seq: int, ack: int) -> bytes:
    return encode_frame(encode_message(message, seq, ack), 512)


def decode_all(data: bytes) -> list[Envelope]:
    out = []
    for item in FrameDecoder(512).feed(data):
        assert not isinstance(item, FrameError), item
        out.append(decode_message(item))
    return out


def new_session(**config: int) -> Session:
    return Session(
        SessionConfig(HOST_ID, **config),
        MemoryIntake(MEMORY_KEYS),
        wall_ms=lambda: T0,
        challenge=lambda: CHALLENGE,
    )


def result(ref: int) -> CaptureResult:
    return CaptureResult(ref, 1, b"", 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0)


def test_hello_ack_and_its_retransmission_schedule() -> None:
    s = new_session(max_frame=256, window=2)
    s.feed(hello(), 0)
    first = s.take_output()
    assert first[:1] == b"\x00"  # flush the device's receiver before the first frame
    [env] = decode_all(first)
    assert (env.seq, env.ack) == (1, 1)
    assert env.message == HelloAck(
        HOST_ID, 256, 65536 + 16, 2, T0, 0, bytes(32), CHALLENGE, hello_echo(hello_body())
    )
    times = []
    for now in range(1, 21_000):
        s.poll(now)
        out = s.take_output()
        if out:
            assert out == first[1:]  # byte-identical, go-back-N
            times.append(now)
    assert times == [250, 750, 1750, 3750, 7750, 11750, 15750]
    [lost] = s.take_events()
    assert isinstance(lost, SessionLost) and "8 retransmission timeouts" in lost.reason
    assert s.counters.retransmissions == 7 and s.counters.timeouts == 8


def test_repeated_hello_of_a_fresh_session_gets_the_same_answer() -> None:
    s = new_session()
    s.feed(hello(), 0)
    first = s.take_output()[1:]
    s.feed(hello(), 100)
    assert s.take_output() == first
    assert s.counters.hello_retransmits == 1 and s.take_events() == []
    # proven: the session opens (and is no longer fresh: the PROOF was delivered)
    s.feed(proof(), 110)
    assert isinstance(s.take_events()[0], SessionOpened)
    s.feed(frame(result(0), 3, 1), 120)
    s.take_output()  # the PROOF's ACK
    s.feed(hello(), 130)  # same boot, not fresh: the device lost its session
    events = s.take_events()
    assert [type(e).__name__ for e in events] == ["CaptureDone", "SessionLost"]
    [env] = decode_all(s.take_output())
    assert isinstance(env.message, HelloAck) and (env.seq, env.ack) == (1, 1)


def test_hello_refusals() -> None:
    s = new_session()
    s.feed(hello(max_frame=127), 0)
    [env] = decode_all(s.take_output())
    assert isinstance(env.message, Error) and (env.message.code, env.message.ref) == (4, 1)
    s.feed(hello(window=0), 1)
    [env] = decode_all(s.take_output())
    assert isinstance(env.message, Error) and (env.message.code, env.message.ref) == (3, 1)
    assert s.phase == "idle"


def test_no_session_answer_and_frame_limit_before_handshake() -> None:
    s = new_session()
    s.feed(frame(result(0), 5, 3), 0)
    [env] = decode_all(s.take_output())
    assert isinstance(env.message, Error) and (env.message.code, env.message.ref) == (5, 5)
    assert s.counters.no_session == 1
    # a capture requested before any session waits for the handshake to complete
    token = s.capture("x" * 200, b"y" * 256, CONTEXT, 0x0FFF, 1, 1)
    s.feed(hello(), 10)
    out = s.take_output()
    assert [type(e.message) for e in decode_all(out)] == [HelloAck]
    s.feed(frame(Ack(), 0, 1), 20)  # acknowledged, not proven: the session is not open
    assert s.take_output() == b"" and s.phase == "handshake" and s.take_events() == []
    s.feed(proof(), 21)
    envs = decode_all(s.take_output())
    assert [type(e.message).__name__ for e in envs] == ["Capture"]
    assert s.take_events()[0].__class__ is SessionOpened and token == 1


def test_delayed_ack_and_window() -> None:
    s = new_session(window=2, ack_delay_ms=15)
    s.feed(hello(), 0)
    s.take_output()
    s.feed(proof(), 5)
    s.take_events()
    s.poll(20)
    [env] = decode_all(s.take_output())
    assert isinstance(env.message, Ack) and env.ack == 2  # the PROOF, acknowledged
    s.feed(frame(result(0), 3, 1), 100)
    assert s.take_output() == b""  # the ACK is delayed ...
    s.poll(114)
    assert s.take_output() == b""
    s.poll(115)  # ... by exactly ack_delay_ms
    [env] = decode_all(s.take_output())
    assert isinstance(env.message, Ack) and env.ack == 3
    for n in range(4):
        s.capture(f"s{n}", b"x", CONTEXT, 0x0FFF, 1, 1)
    s.poll(200)
    envs = decode_all(s.take_output())
    assert [e.seq for e in envs] == [2, 3]  # window 2: the others wait
    s.feed(frame(Ack(), 0, 2), 210)  # one acknowledged: one more goes
    assert [e.seq for e in decode_all(s.take_output())] == [4]
    # a delivered message is acknowledged by the next frame we send, not a separate ACK
    s.feed(frame(result(2), 4, 4), 220)
    [env] = decode_all(s.take_output())
    assert env.seq == 5 and env.ack == 4
    s.poll(400)
    assert all(not isinstance(e.message, Ack) for e in decode_all(s.take_output()))


def test_unanswerable_requests_fail_and_lost_session_fails_sent_ones() -> None:
    s = new_session()
    s.feed(hello(), 0)
    s.feed(proof(), 1)
    s.take_output()
    s.take_events()
    sent = s.capture("a", b"x", CONTEXT, 0x0FFF, 1, 1)
    s.poll(2)
    assert s.take_output()
    s.drop("test")
    events = s.take_events()
    assert [type(e) for e in events] == [SessionLost, RequestFailed]
    failed = events[1]
    assert isinstance(failed, RequestFailed) and failed.token == sent
    assert "session lost" in failed.reason


def test_hello_after_host_sent_requests_starts_a_new_session() -> None:
    s = new_session()
    s.feed(hello(), 0)
    s.feed(proof(), 1)
    s.take_output()
    s.take_events()
    token = s.capture("a", b"x", CONTEXT, 0x0FFF, 1, 1)
    s.poll(2)
    assert [e.seq for e in decode_all(s.take_output())] == [2]
    # the CAPTURE seq 2 is out: a HELLO now means the device lost its session;
    # replaying the old HELLO_ACK would let the device deliver our seq 2 again in its
    # new session (and since the PROOF, expected is 3: not fresh either)
    s.feed(hello(), 300)
    events = s.take_events()
    assert [type(e).__name__ for e in events] == ["SessionLost", "RequestFailed"]
    assert isinstance(events[1], RequestFailed) and events[1].token == token
    [env] = decode_all(s.take_output())
    assert isinstance(env.message, HelloAck) and s.phase == "handshake"
