"""Sessions a device proves (SPEC §5.15, §6.5): a line that claims a device id without its key
changes nothing, a recorded PROOF opens no later session, the real device is served.

- The host session alone, on a virtual clock: a PROOF with the wrong key, a replayed
  PROOF of a recorded session, a first message that is no PROOF, a retransmitted HELLO
  (same challenge, the device's PROOF still good), a device with no registered key.
- Differential: the host's verify_proof against `cryptography` over proof inputs built
  here byte by byte, with every field and the signature mutated.
- The daemon with the real device on one line and, on two more lines, an impostor
  (the device's id, another key) and a replayer (a PROOF recorded with the device's
  key for an earlier challenge): the registry row, the session row, the counters and
  the knowledge state are the real device's alone, while it keeps being served. The
  real device is a SimDevice (host codec), a QEMU board of each architecture (the C
  core), and the MicroPython agent on the unix port.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from conftest import DEVICE_ID, DEVICE_KEY, HOST_ID, HOST_KEY
from hirmem.daemon.config import build_config
from hirmem.daemon.service import Daemon, sign_knowledge
from hirmem.daemon.store import Store
from hirmem.emulation.rogue import RogueDevice
from hirmem.link.session import (
    MemoryIntake,
    ProofRefused,
    Session,
    SessionConfig,
    SessionOpened,
)
from hirmem.protocol.errors import FrameError
from hirmem.protocol.frames import FrameDecoder, encode_frame
from hirmem.protocol.identity import triple_id
from hirmem.protocol.keys import PublicKey, SigningKey, derive_test_key, write_key_file
from hirmem.protocol.messages import (
    Ack,
    CaptureResult,
    Envelope,
    Error,
    ErrorCode,
    Hello,
    HelloAck,
    Message,
    Proof,
    decode_message,
    encode_message,
)
from hirmem.protocol.packs import KnowledgeItem
from hirmem.protocol.proof import (
    PROOF_INPUT_SIZE,
    hello_echo,
    proof_input,
    sign_proof,
    verify_proof,
)
from session_peer import MEMORY_KEYS, T0
from test_daemon import BOARDS, boards, needs_qemu
from test_daemon import HOST_ID as BOARD_HOST_ID
from test_daemon import HOST_KEY as BOARD_HOST_KEY

OTHER_KEY = derive_test_key("impostor")


# ---- the host session alone ------------------------------------------------------------


class Line:
    """One host Session and a scripted device on its line (virtual clock)."""

    def __init__(self, challenges: list[bytes], keys: MemoryIntake | None = None) -> None:
        self.intake = keys if keys is not None else MemoryIntake(MEMORY_KEYS)
        pending = list(challenges)
        self.session = Session(
            SessionConfig(HOST_ID), self.intake, wall_ms=lambda: T0,
            challenge=lambda: pending.pop(0),
        )  # fmt: skip
        self.now = 0

    def send(self, message: Message, seq: int, ack: int) -> list[Envelope]:
        self.now += 5
        self.session.feed(encode_frame(encode_message(message, seq, ack), 512), self.now)
        return self.take()

    def send_body(self, body: bytes) -> list[Envelope]:
        self.now += 5
        self.session.feed(encode_frame(body, 512), self.now)
        return self.take()

    def take(self) -> list[Envelope]:
        out = []
        for item in FrameDecoder(512).feed(self.session.take_output()):
            assert not isinstance(item, FrameError)
            out.append(decode_message(item))
        return out


def hello(boot: int = 7, board: str = "sim", device_id: bytes = DEVICE_ID) -> bytes:
    message = Hello(device_id, board, "0", boot, 0x1F, 512, 4096, 4, DEVICE_KEY.kid, HOST_KEY.kid)
    return encode_message(message, 1, 0)


def challenge_of(envs: list[Envelope]) -> bytes:
    [ack] = [e.message for e in envs if isinstance(e.message, HelloAck)]
    assert isinstance(ack, HelloAck)
    return ack.challenge


def test_the_right_key_opens_and_the_proof_binds_the_hello() -> None:
    line = Line([bytes(range(16))])
    body = hello()
    challenge = challenge_of(line.send_body(body))
    assert challenge == bytes(range(16)) and line.session.phase == "handshake"
    signature = sign_proof(DEVICE_KEY, HOST_ID, challenge, DEVICE_ID, 7, body)
    line.send(Proof(signature), 2, 1)
    [opened] = line.session.take_events()
    assert isinstance(opened, SessionOpened) and opened.proven and line.session.is_open
    assert line.session.counters.proofs_verified == 1


@pytest.mark.parametrize(
    "forge",
    [
        lambda c, body: sign_proof(OTHER_KEY, HOST_ID, c, DEVICE_ID, 7, body),  # another key
        lambda c, body: sign_proof(DEVICE_KEY, HOST_ID, c, DEVICE_ID, 8, body),  # other boot
        lambda c, body: sign_proof(DEVICE_KEY, bytes(8), c, DEVICE_ID, 7, body),  # other host
        lambda c, body: sign_proof(DEVICE_KEY, HOST_ID, c, DEVICE_ID, 7, hello(board="x")),
        lambda c, body: DEVICE_KEY.sign(c),  # the bare challenge: no domain label
    ],
    ids=["other key", "other boot", "other host", "other hello", "bare challenge"],
)
def test_a_proof_that_does_not_verify_opens_nothing(
    forge: Callable[[bytes, bytes], bytes],
) -> None:
    line = Line([bytes(range(16))])
    body = hello()
    challenge = challenge_of(line.send_body(body))
    out = line.send(Proof(forge(challenge, body)), 2, 1)
    errors = [e.message for e in out if isinstance(e.message, Error)]
    assert [(e.code, e.ref) for e in errors] == [(ErrorCode.NO_SESSION, 2)]
    [refused] = line.session.take_events()
    assert isinstance(refused, ProofRefused) and refused.reason == "bad-signature"
    assert line.session.phase == "idle" and line.session.device is None
    assert line.session.counters.proofs_refused == {"bad-signature": 1}
    assert [d for d, _, _ in line.intake.proofs_refused] == [DEVICE_ID]
    # nothing after it is delivered: the next message gets no-session
    out = line.send(CaptureResult(0, 1, b"", 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0), 3, 1)
    assert [type(e.message) for e in out] == [Error] and line.session.counters.delivered == 0


def test_a_replayed_proof_of_a_recorded_session_opens_nothing() -> None:
    first, second = bytes(range(16)), bytes(range(1, 17))
    line = Line([first, second])
    body = hello()
    # a real session, recorded: HELLO, then the device's PROOF for the first challenge
    recorded = Proof(sign_proof(DEVICE_KEY, HOST_ID, challenge_of(line.send_body(body)),
                                DEVICE_ID, 7, body))  # fmt: skip
    line.send(recorded, 2, 1)
    assert line.session.is_open
    line.session.drop("the line went away")
    line.session.take_events()
    # the recording played back: the same HELLO gets a new challenge, the PROOF fails
    assert challenge_of(line.send_body(body)) == second
    out = line.send(recorded, 2, 1)
    assert [e.message.code for e in out if isinstance(e.message, Error)] == [ErrorCode.NO_SESSION]
    assert [type(e) for e in line.session.take_events()] == [ProofRefused]
    assert line.session.counters.sessions_opened == 1
    # and on a new line (a new Session): another challenge again
    other = Line([bytes(range(2, 18))])
    other.send_body(body)
    other.send(recorded, 2, 1)
    assert not other.session.is_open and other.session.counters.proofs_refused


def test_a_retransmitted_hello_keeps_its_challenge_and_the_first_message_must_prove() -> None:
    line = Line([bytes(range(16)), bytes(range(5, 21))])
    body = hello()
    c1 = challenge_of(line.send_body(body))
    assert challenge_of(line.send_body(body)) == c1  # fresh session: the stored HELLO_ACK
    assert line.session.counters.hello_retransmits == 1
    # an ACK alone does not open; a sequenced message other than PROOF at seq 2 is refused
    assert line.send(Ack(), 0, 1) == [] and line.session.phase == "handshake"
    out = line.send(CaptureResult(0, 1, b"", 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0), 2, 1)
    assert [e.message.code for e in out if isinstance(e.message, Error)] == [ErrorCode.NO_SESSION]
    [refused] = line.session.take_events()
    assert isinstance(refused, ProofRefused) and refused.reason == "not-proof"
    c2 = challenge_of(line.send_body(body))
    assert c2 != c1
    line.send(Proof(sign_proof(DEVICE_KEY, HOST_ID, c2, DEVICE_ID, 7, body)), 2, 1)
    assert line.session.is_open


def test_hello_ack_echoes_the_hello_and_only_the_same_hello_is_a_retransmission() -> None:
    """HELLO_ACK names the HELLO it answers (SPEC §5.3); host step 2 resends the stored
    HELLO_ACK only for the same HELLO byte for byte: a HELLO of the same boot that says
    something else gets a new session whose HELLO_ACK echoes it (with the stored one, a
    device that checks the echo would wait forever)."""
    line = Line([bytes(range(16)), bytes(range(5, 21)), bytes(range(9, 25))])
    first, renamed = hello(), hello(board="sim-renamed")
    [ack1] = [e.message for e in line.send_body(first) if isinstance(e.message, HelloAck)]
    assert isinstance(ack1, HelloAck) and ack1.hello_hash == hello_echo(first)
    assert ack1.hello_hash == hashlib.sha256(first).digest()[:16]
    [again] = [e.message for e in line.send_body(first) if isinstance(e.message, HelloAck)]
    assert again == ack1 and line.session.counters.hello_retransmits == 1
    [ack2] = [e.message for e in line.send_body(renamed) if isinstance(e.message, HelloAck)]
    assert isinstance(ack2, HelloAck) and ack2.hello_hash == hello_echo(renamed)
    assert ack2.challenge != ack1.challenge and line.session.counters.hello_retransmits == 1
    line.send(Proof(sign_proof(DEVICE_KEY, HOST_ID, ack2.challenge, DEVICE_ID, 7, renamed)), 2, 1)
    assert line.session.is_open


def test_a_device_without_registered_key_opens_unproven() -> None:
    line = Line([bytes(16)], MemoryIntake({}))
    body = hello()
    challenge = challenge_of(line.send_body(body))
    line.send(Proof(sign_proof(OTHER_KEY, HOST_ID, challenge, DEVICE_ID, 7, body)), 2, 1)
    [opened] = line.session.take_events()
    assert isinstance(opened, SessionOpened) and not opened.proven
    assert line.session.counters.proofs_unchecked == 1


# ---- differential: verify_proof against cryptography ---------------------------------------


def oracle_input(host: bytes, chal: bytes, dev: bytes, boot: int, hello_body: bytes) -> bytes:
    """SPEC §5.15's proof-input, written out here from the table."""
    return (
        b"hirmem session proof v1" + host + chal + dev + boot.to_bytes(4, "big")
        + hashlib.sha256(hello_body).digest()
    )  # fmt: skip


ProofArgs = tuple[bytes, bytes, bytes, int, bytes]  # host_id, challenge, device_id, boot, HELLO


def mutate(rng: random.Random, args: ProofArgs) -> ProofArgs:
    """One of the five parts changed (a bit flipped, or another boot)."""
    which = rng.randrange(5)
    if which == 3:
        return (*args[:3], (args[3] + rng.randrange(1, 1 << 32)) % (1 << 32), args[4])
    part = args[which]
    assert isinstance(part, bytes)
    value = bytearray(part or b"\x00")
    value[rng.randrange(len(value))] ^= 1 << rng.randrange(8)
    out = list(args)
    out[which] = bytes(value)
    return (out[0], out[1], out[2], args[3], out[4])  # type: ignore[return-value]


def test_proof_verification_agrees_with_cryptography() -> None:
    rng = random.Random(1415)
    for _ in range(2000):
        private = Ed25519PrivateKey.from_private_bytes(rng.randbytes(32))
        public = PublicKey(private.public_key().public_bytes_raw())
        hello_body = rng.randbytes(rng.randrange(0, 125))
        args: ProofArgs = (rng.randbytes(8), rng.randbytes(16), rng.randbytes(8),
                           rng.randrange(1 << 32), hello_body)  # fmt: skip
        message = oracle_input(*args)
        assert len(message) == PROOF_INPUT_SIZE and message == proof_input(*args)
        signature = private.sign(message)
        assert verify_proof(public, signature, *args)
        # a part or the signature changed: cryptography and the host both refuse
        bad, bad_sig = args, signature
        if rng.random() < 0.3:
            i = rng.randrange(64)
            flipped = bytes([signature[i] ^ (1 << rng.randrange(8))])
            bad_sig = signature[:i] + flipped + signature[i + 1 :]
        else:
            bad = mutate(rng, args)
        try:
            private.public_key().verify(bad_sig, oracle_input(*bad))
            oracle = True
        except InvalidSignature:
            oracle = False
        assert oracle is False and verify_proof(public, bad_sig, *bad) is False


def test_the_proof_vector() -> None:
    import json

    from conftest import ROOT

    v = json.loads((ROOT / "protocol" / "vectors" / "messages.json").read_text())["proof"]
    args = (bytes.fromhex(v["host_id"]), bytes.fromhex(v["challenge"]),
            bytes.fromhex(v["device_id"]), v["boot"], bytes.fromhex(v["hello_body"]))  # fmt: skip
    assert proof_input(*args).hex() == v["input"]
    assert verify_proof(DEVICE_KEY.public, bytes.fromhex(v["signature"]), *args)
    private = Ed25519PrivateKey.from_private_bytes(DEVICE_KEY.seed())
    assert private.sign(bytes.fromhex(v["input"])).hex() == v["signature"]


# ---- the daemon: impostor lines beside the real device ------------------------------------


def recorded_replay(
    device_id: bytes, key: SigningKey, host_id: bytes, boot: int, board: str
) -> tuple[RogueDevice, Proof]:
    """A line that plays back a HELLO and the PROOF the device's key made for it in an
    earlier session (another challenge): all a recording of the line gives."""
    replayer = RogueDevice(device_id, OTHER_KEY, boot=boot, board=board)
    old_challenge = hashlib.sha256(b"an earlier session").digest()[:16]
    proof = Proof(sign_proof(key, host_id, old_challenge, device_id, boot, replayer.hello_body))
    replayer.replay_proof = proof
    return replayer, proof


def impostors_change_nothing(
    tmp_path: Path,
    store: Store,
    real_url: str,
    device_id: bytes,
    device_key: SigningKey,
    host: tuple[bytes, SigningKey],
    board: str,
    boot: int,
    served: Callable[[Store], int],
    *,
    timeout: float = 60,
) -> None:
    """Run a daemon over the real device's line and two impostor lines claiming its id;
    ``served(store)`` counts what the real device delivered (it must grow after them)."""
    host_id, host_key = host
    impostor = RogueDevice(device_id, OTHER_KEY, boot=4242, board="impostor")
    replayer, _ = recorded_replay(device_id, device_key, host_id, 4243, "replayed")
    key_file = tmp_path / "host.key"
    write_key_file(key_file, host_key)
    lines = [{"url": real_url, "name": "real"}, {"url": impostor.url, "name": "impostor"},
             {"url": replayer.url, "name": "replayer"}]  # fmt: skip
    config = build_config(
        {"host": {"id": host_id.hex(), "database": str(store.path), "key": str(key_file),
                  "save_every": 0.1, "status_every": 0.3, "max_frame": 1024},
         "device": lines},
        tmp_path, [],
    )  # fmt: skip
    daemon = Daemon(config, store=store)
    daemon.start()
    try:
        real, fake, replay = daemon.workers
        wait(lambda: real.session.is_open and served(store) > 0, timeout, "the real device")
        for rogue in (impostor, replayer):
            with pytest.raises(TimeoutError, match="PROOF refused"):
                rogue.connect(timeout=3)
            assert rogue.hello_ack is not None and rogue.acked < 2 and rogue.results == []
            assert [e.code for e in rogue.errors] == [ErrorCode.NO_SESSION]
        # knowledge goes to the proven device only, and only its answer is kept
        items = [KnowledgeItem(bytes.fromhex(triple_id("pump", "serves", "zone 9")), "pump",
                               "serves", "zone 9", 0xF000)]  # fmt: skip
        sign_knowledge(store, host_key, host_id, items, 1_780_000_000_000)
        before = served(store)
        wait(lambda: [(s, st) for s, st, _, _ in store.device_knowledge(device_id)]
             == [(1, "accepted")] and served(store) > before, timeout,
             "knowledge accepted and more served after the impostors")  # fmt: skip
        wait(lambda: store.counters(device_id).get("knowledge_accepted") == 1, 10, "a save")
        assert fake.device_id is None and replay.device_id is None
        assert fake.line_pauses >= 1 and replay.line_pauses >= 1
        for worker in (fake, replay):
            c = worker.session.counters
            assert c.proofs_refused == {"bad-signature": 1} and c.sessions_opened == 0
            assert c.delivered == 0 and c.knowledge_pushed == 0
    finally:
        daemon.stop()  # closes the store: what it kept is read back below
        impostor.close()
        replayer.close()
    with Store(store.path) as again:
        check_only_the_real_device(
            again, device_id, real_url, board, boot, real.session.counters.hellos
        )


def check_only_the_real_device(
    store: Store, device_id: bytes, real_url: str, board: str, boot: int, hellos: int
) -> None:
    row = store.device(device_id)
    assert row is not None and (row.board, row.boot) == (board, boot), row
    sessions = store.sessions()
    assert sessions[device_id][0] == real_url and set(sessions) == {device_id}
    counters = store.counters(device_id)
    assert counters["proofs_verified"] >= 1 and counters.get("proofs_refused.bad-signature") is None
    assert counters.get("hellos") == hellos
    assert store.device_knowledge(device_id) == [(1, "accepted", 0, 1)]
    proofs = [r for r in store.refusals(device_id) if r.detail.startswith("session proof")]
    assert len(proofs) == 2, proofs  # one digest per impostor line, nothing else of them


def wait(done: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def test_impostor_lines_beside_a_simulated_device(tmp_path: Path) -> None:
    from hirmem.emulation.simdevice import SimDevice

    host_key = derive_test_key("proof test host")
    device = SimDevice(DEVICE_ID, DEVICE_KEY, boot=3, board="sim-real",
                       host_key=host_key.public, pack_every_s=0.05)  # fmt: skip
    store = Store(tmp_path / "hirmem.db")
    store.register_device(DEVICE_ID, DEVICE_KEY.public.raw, "sim-real")
    device.start()
    try:
        impostors_change_nothing(
            tmp_path, store, device.url, DEVICE_ID, DEVICE_KEY, (HOST_ID, host_key),
            "sim-real", 3, lambda s: s.count_records(DEVICE_ID),
        )  # fmt: skip
    finally:
        device.close()
    assert device.error is None and device.sessions == 1 and device.knowledge == [(1, 0)]


@needs_qemu
@pytest.mark.parametrize("name", ["mps2-an385", "hifive1"])
def test_impostor_lines_beside_a_qemu_board(tmp_path: Path, name: str) -> None:
    dev = BOARDS[name]
    key = derive_test_key(f"daemon test device {dev.hex()}")
    store = Store(tmp_path / "hirmem.db")
    store.register_device(dev, key.public.raw, name)
    with boards(tmp_path, (name,), timeout=120) as (qb,):
        impostors_change_nothing(
            tmp_path, store, qb.url, dev, key, (BOARD_HOST_ID, BOARD_HOST_KEY), name, 1,
            lambda s: s.count_records(dev), timeout=90,
        )  # fmt: skip


def test_impostor_lines_beside_the_micropython_agent(tmp_path: Path) -> None:
    from mp_host import BOOT, MpDevice
    from mp_host import device_config as base_config

    host_key = HOST_KEY
    dev = MpDevice(base_config(offer_threshold=2, sensor_period_ms=150),
                   tmp_path, on_master=True)  # fmt: skip
    store = Store(tmp_path / "hirmem.db")
    store.register_device(DEVICE_ID, DEVICE_KEY.public.raw, "unix-pty")
    try:
        impostors_change_nothing(
            tmp_path, store, dev.port, DEVICE_ID, DEVICE_KEY, (HOST_ID, host_key), "unix-pty",
            BOOT, lambda s: s.count_records(DEVICE_ID), timeout=90,
        )  # fmt: skip
    finally:
        err = dev.close()
        assert "Traceback" not in err, err
