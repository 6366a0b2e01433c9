"""The MicroPython device served by the real host: Session + Link + StoreIntake, and the Daemon.

The agent runs in `micropython` on the master side of a pty; the host opens the
slave path with hirmem.link.transport.SerialTransport (pyserial), exactly as it opens a
board's /dev/ttyACM0. Packs go through hirmem.daemon.intake.StoreIntake into a real SQLite
store: every record stored exactly once, the chain verifying again
(store.check_integrity), knowledge pushed with Session.push_knowledge and answered.
A lost PACK_RESULT is recovered through ERROR no-session and the HELLO_ACK's chain
head, without storing anything twice. The last test runs hirmem.daemon.service.Daemon itself
against the device's pty path.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from hirmem.daemon.intake import StoreIntake
from hirmem.daemon.store import Store
from hirmem.link.line import Link
from hirmem.link.session import (
    CaptureDone,
    Event,
    KnowledgeDone,
    PackReceived,
    Session,
    SessionConfig,
    SessionLost,
    SessionOpened,
    StatusReport,
)
from hirmem.link.transport import SerialTransport
from hirmem.protocol.errors import HirmemError
from hirmem.protocol.frames import decode_frame
from hirmem.protocol.gate import evaluate
from hirmem.protocol.keys import SigningKey
from hirmem.protocol.messages import PackResult, PackStatus, decode_message
from hirmem.protocol.packs import KnowledgeItem, PackKind, sign_pack
from hirmem.protocol.records import GENESIS, normalise, record_id
from mp_host import BOOT, CONTEXT, DEVICE_ID, DEVICE_SEED, HOST_ID, HOST_SEED, ONE, MpDevice
from mp_host import device_config as base_config
from mp_run import MICROPYTHON

pytestmark = pytest.mark.skipif(MICROPYTHON is None, reason="micropython not installed")

DEVICE_KEY = SigningKey(DEVICE_SEED)
HOST_KEY = SigningKey(HOST_SEED)


def knowledge(seq: int, created: int) -> bytes:
    from hirmem.protocol import identity

    items = [
        KnowledgeItem(bytes.fromhex(identity.triple_id("pump", "serves", f"zone {seq}")),
                      "pump", "serves", f"zone {seq}", ONE),
    ]  # fmt: skip
    return sign_pack(HOST_KEY, PackKind.KNOWLEDGE, HOST_ID, seq, GENESIS, created, items).encoded


class LossyTransport(SerialTransport):
    """SerialTransport that can drop the host's PACK_RESULT frames (a lossy line)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.drop_pack_results = False
        self.dropped = 0

    def write(self, data: bytes) -> None:
        if self.drop_pack_results:
            pieces = data.split(b"\x00")  # the session writes whole frames, each ends in 00
            kept = bytearray()
            for piece in pieces[:-1]:
                if piece and is_pack_result(piece):
                    self.dropped += 1
                    continue
                kept += piece + b"\x00"
            data = bytes(kept) + pieces[-1]
        super().write(data)


def is_pack_result(wire: bytes) -> bool:
    try:
        return isinstance(decode_message(decode_frame(wire, 4096)).message, PackResult)
    except HirmemError:
        return False


@dataclass
class Rig:
    """A Link thread serving the device; events collected for the test."""

    link: Link
    transport: LossyTransport
    events: list[Event] = field(default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)
    on_event: Callable[[Event], None] | None = None

    def handle(self, event: Event) -> None:
        if self.on_event is not None:
            self.on_event(event)
        with self.cond:
            self.events.append(event)
            self.cond.notify_all()

    def wait(self, predicate: Callable[[list[Event]], Any], timeout: float = 15) -> Any:
        """The first truthy predicate(events), waiting for events up to timeout."""
        end = time.monotonic() + timeout
        with self.cond:
            while not (found := predicate(self.events)):
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"not within {timeout} s; events: {self.events[-12:]}")
                self.cond.wait(left)
        return found

    def of(self, kind: type, n: int = 1, timeout: float = 15) -> list[Any]:
        """The first n events of a kind (waiting for them)."""

        def first(events: list[Event]) -> list[Event] | None:
            got = [e for e in events if isinstance(e, kind)]
            return got[:n] if len(got) >= n else None

        return list(self.wait(first, timeout))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "hirmem.db") as s:
        s.register_device(DEVICE_ID, DEVICE_KEY.public.raw, "unix-pty")
        yield s


@pytest.fixture
def served(tmp_path: Path, store: Store) -> Iterator[tuple[Rig, MpDevice]]:
    dev = MpDevice(base_config(offer_threshold=3, status_period_ms=1000), tmp_path,
                   on_master=True)  # fmt: skip
    transport = LossyTransport(dev.port)
    session = Session(SessionConfig(HOST_ID), StoreIntake(store))
    rig = Rig(Link(transport, session), transport)
    rig.link.on_event = rig.handle
    thread = threading.Thread(target=rig.link.run, name="link", daemon=True)
    thread.start()
    try:
        yield rig, dev
    finally:
        rig.link.stop()
        thread.join(5)
        err = dev.close()
        assert not thread.is_alive()
        assert "Traceback" not in err, err


def capture_and_check(rig: Rig, n0: int, count: int) -> None:
    """count CAPTURE requests; each result checked against hirmem.protocol.gate on the record."""
    tokens: list[int] = []
    for n in range(n0, n0 + count):
        message = (f"temp{n}", f'{{"t":{n}}}'.encode(), CONTEXT, 0x0FFF, ONE, 0xE666, 0x8000)

        def request(s: Session, m: tuple[Any, ...] = message) -> int:
            return s.capture(*m)

        tokens.append(rig.link.call(request))
    def results(events: list[Event]) -> dict[int, Any] | None:
        got: dict[int, Any] = {}
        for e in events:
            if isinstance(e, CaptureDone) and e.token is not None and e.token in tokens:
                got[e.token] = e.result
        return got if len(got) == count else None

    done = rig.wait(results)
    opened = rig.of(SessionOpened)[-1]
    for k, token in enumerate(tokens):
        n = n0 + k
        res = done[token]
        ts = opened.at_ms  # the device's wall clock is set by HELLO_ACK; only used for bit 3
        g = evaluate(normalise(0x0FFF, f'{{"t":{n}}}'.encode(), f"temp{n}", ts or 1, CONTEXT),
                     ONE, 0xE666)  # fmt: skip
        assert res.status == 0 and res.record_id == record_id(DEVICE_ID, BOOT, n)
        assert (res.flags, res.rn, res.w, res.verdict, res.state) == (
            g.flags, g.rn, g.w, int(g.verdict), int(g.disposition))


def test_served_by_session_link_and_store(served: tuple[Rig, MpDevice], store: Store) -> None:
    rig, _ = served
    [opened] = rig.of(SessionOpened)
    assert opened.device.device_id == DEVICE_ID and opened.device.board == "unix-pty"
    assert (opened.max_frame, opened.window, opened.pack_seq) == (512, 4, 0)

    # captures, offloaded at 3 (fragmented at 512), stored once
    capture_and_check(rig, 1, 3)
    [received] = rig.of(PackReceived)
    assert received.seq == (BOOT << 32) | 1 and not received.duplicate
    assert store.count_records(DEVICE_ID) == 3
    assert store.check_integrity() == []

    # knowledge pushed and answered
    token = rig.link.call(lambda s: s.push_knowledge(knowledge(5, opened.at_ms)))
    [kd] = rig.wait(lambda ev: [e for e in ev if isinstance(e, KnowledgeDone)])
    assert (kd.token, kd.status, kd.held_seq, kd.seq) == (token, PackStatus.ACCEPTED, 5, 5)

    # three more: the second pack chains onto the first
    capture_and_check(rig, 4, 3)
    rig.of(PackReceived, 2)
    packs = store.packs(DEVICE_ID)
    assert [p.seq & 0xFFFFFFFF for p in packs] == [1, 2] and packs[1].prev == packs[0].hash
    assert store.count_records(DEVICE_ID) == 6

    # the device's periodic STATUS reaches the host: nothing left in its ring
    rig.wait(lambda ev: [e for e in ev if isinstance(e, StatusReport)
                         and e.status.packs_acked == 2], timeout=5)  # fmt: skip
    status = [e for e in rig.events if isinstance(e, StatusReport)][-1].status
    assert (status.ring_used, status.packs_sent, status.knowledge_seq) == (0, 2, 5)
    c = rig.link.session.counters
    assert (c.packs_accepted, c.packs_duplicate, c.knowledge_accepted) == (2, 0, 1)
    assert store.check_integrity() == []


def test_lost_pack_result_recovered_without_a_double(
    served: tuple[Rig, MpDevice], store: Store
) -> None:
    """The PACK_RESULT never reaches the device and the host ends the session. The
    device's next frame gets ERROR no-session, it says HELLO at once, and the HELLO_ACK
    carries the stored chain head: the device releases the records instead of offering
    them again. Nothing is stored twice."""
    rig, _ = served
    rig.of(SessionOpened)
    capture_and_check(rig, 1, 3)
    rig.of(PackReceived)

    lost: list[SessionLost] = []

    def drop_after_store(event: Event) -> None:
        if isinstance(event, SessionLost):
            lost.append(event)
        if isinstance(event, PackReceived) and rig.transport.drop_pack_results:
            rig.link.call(lambda s: s.drop("test: the PACK_RESULT was lost"))
            rig.transport.drop_pack_results = False

    rig.on_event = drop_after_store
    rig.transport.drop_pack_results = True
    capture_and_check(rig, 4, 3)
    [_, second] = rig.of(PackReceived, 2)
    # the SessionLost of drop() inside Link.call reaches the event callback
    assert rig.link.call(lambda s: s.counters.sessions_lost) == 1
    assert [e.reason for e in lost] == ["test: the PACK_RESULT was lost"]
    [_, reopened] = rig.of(SessionOpened, 2, timeout=10)
    assert reopened.pack_seq == second.seq  # the head from the store
    assert rig.transport.dropped >= 1
    assert rig.link.session.counters.no_session >= 1
    token = rig.link.call(lambda s: s.request_status())
    [report] = rig.wait(lambda ev: [e for e in ev if isinstance(e, StatusReport)
                                    and e.token == token])  # fmt: skip
    assert (report.status.ring_used, report.status.packs_sent) == (0, 2)
    time.sleep(0.5)
    c = rig.link.session.counters
    assert (c.packs_offered, c.packs_accepted, c.packs_duplicate) == (2, 2, 0)
    assert store.count_records(DEVICE_ID) == 6 and len(store.packs(DEVICE_ID)) == 2
    assert store.check_integrity() == []


def test_daemon_serves_the_micropython_device(tmp_path: Path) -> None:
    """hirmem.daemon.service.Daemon itself on the device's pty path: the device's own sensor
    readings reach the store exactly once, the newest knowledge version is pushed."""
    from hirmem.daemon.config import build_config
    from hirmem.daemon.service import Daemon, sign_knowledge

    dev = MpDevice(base_config(offer_threshold=2, sensor_period_ms=150, sensor_count=6),
                   tmp_path, on_master=True)  # fmt: skip
    try:
        config = build_config(
            {"host": {"id": HOST_ID.hex(), "database": "hirmem.db", "status_every": 0.5,
                      "save_every": 0.2},
             "device": [{"url": dev.port, "name": "micropython"}]},
            tmp_path, [],
        )  # fmt: skip
        daemon = Daemon(config)
        daemon.store.register_device(DEVICE_ID, DEVICE_KEY.public.raw, "unix-pty")
        from hirmem.protocol import identity

        items = [KnowledgeItem(bytes.fromhex(identity.triple_id("pump", "serves", "zone 1")),
                               "pump", "serves", "zone 1", ONE)]  # fmt: skip
        sign_knowledge(daemon.store, HOST_KEY, HOST_ID, items, int(time.time() * 1000))
        daemon.start()
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                held = daemon.store.device_knowledge(DEVICE_ID)
                if daemon.store.count_records(DEVICE_ID) >= 6 and held and (
                        held[-1][1] != "pending"):
                    break
                time.sleep(0.1)
            store = daemon.store
            assert store.count_records(DEVICE_ID) == 6
            packs = store.packs(DEVICE_ID)
            assert [p.seq & 0xFFFFFFFF for p in packs] == [1, 2, 3]
            assert store.device_knowledge(DEVICE_ID) == [(1, "accepted", 0, 1)]
            assert store.check_integrity() == []
            row = store.device(DEVICE_ID)
            assert row is not None and (row.board, row.boot) == ("unix-pty", BOOT)
        finally:
            daemon.stop()
        with Store(tmp_path / "hirmem.db") as again:
            assert again.count_records(DEVICE_ID) == 6 and again.check_integrity() == []
            counters = again.counters(DEVICE_ID)
            assert counters.get("packs_accepted") == 3 and counters.get("sessions_opened") == 1
    finally:
        err = dev.close()
        assert "Traceback" not in err, err
