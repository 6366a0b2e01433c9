"""The daemon under a full disk and a peer that stops reading: every device keeps being served.

The devices are :class:`hirmem.emulation.simdevice.SimDevice`s: honest devices written
with the host codec on real TCP lines, which keep every pack they made until the host
accepts it. The store is real SQLite; the full disk is a real filesystem (a small
tmpfs mounted for the test, which needs root) filled to the last byte.
"""

from __future__ import annotations

import logging
import os
import random
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from hirmem.cli.commands import status_rows
from hirmem.daemon.config import build_config
from hirmem.daemon.service import Daemon, DeviceWorker, sign_knowledge
from hirmem.daemon.store import (
    REFUSAL_KEEP,
    REFUSALS_PER_DEVICE,
    DeviceLimits,
    Store,
)
from hirmem.emulation.rogue import RogueDevice
from hirmem.emulation.simdevice import SimDevice
from hirmem.link.line import FEED_SLICE
from hirmem.protocol.clock import now_ms
from hirmem.protocol.frames import encode_frame
from hirmem.protocol.identity import triple_id
from hirmem.protocol.keys import derive_test_key, write_key_file
from hirmem.protocol.messages import PackStatus, StatusRequest, encode_message
from hirmem.protocol.packs import KnowledgeItem

HOST_ID = bytes.fromhex("f1f2f3f4f5f6f7f8")
HOST_KEY = derive_test_key("fault test host")


def wait_until(done: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def device_id(n: int) -> bytes:
    return bytes.fromhex(f"fa{n:014x}")


def sim(n: int, **settings: object) -> SimDevice:
    dev = device_id(n)
    key = derive_test_key(f"fault test device {dev.hex()}")
    return SimDevice(dev, key, host_key=HOST_KEY.public, **settings)  # type: ignore[arg-type]


def register(db: Path, devices: list[SimDevice]) -> None:
    with Store(db) as store:
        for d in devices:
            store.register_device(d.device_id, d.key.public.raw, d.board)


def daemon_for(
    tmp_path: Path, db: Path, devices: Sequence[SimDevice | RogueDevice], **host: object
) -> Daemon:
    key_file = tmp_path / "host.key"
    if not key_file.exists():
        write_key_file(key_file, HOST_KEY)
    settings: dict[str, object] = {
        "id": HOST_ID.hex(),
        "database": str(db),
        "key": str(key_file),
        "max_frame": 1024,
        "save_every": 0.1,
        "status_every": 0.3,
        "reconnect_min": 0.05,
        "reconnect_max": 0.4,
        "write_timeout": 1.0,
    }
    settings.update(host)
    urls: list[str] = [d.url for d in devices]
    lines = [{"url": url, "name": f"sim{i}"} for i, url in enumerate(urls)]
    config = build_config({"host": settings, "device": lines}, tmp_path, [])
    return Daemon(config)


@contextmanager
def running(devices: list[SimDevice]) -> Iterator[list[SimDevice]]:
    with ExitStack() as stack:
        for d in devices:
            stack.callback(d.close)
            d.start()
        yield devices
    for d in devices:
        assert d.error is None, d.error


@contextmanager
def small_disk(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for the full-disk test: {proc.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def fill(disk: Path) -> Path:
    """Fill ``disk`` to the last byte; the filler file is returned (delete it to free)."""
    filler = disk / "filler"
    block = b"\xa5" * 65536
    with open(filler, "ab", buffering=0) as f:
        for size in (65536, 4096, 1):  # down to the last partial block
            while True:
                try:
                    if not f.write(block[:size]):
                        break
                except OSError:
                    break
    return filler


class Errors(logging.Handler):
    """Every log record of the daemon that carries a traceback."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.tracebacks: list[str] = []
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        if record.exc_info:
            self.tracebacks.append(record.getMessage())


@contextmanager
def daemon_logs() -> Iterator[Errors]:
    handler = Errors()
    logger = logging.getLogger("hirmem")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def stored_seqs(store: Store, dev: bytes) -> list[int]:
    return [p.seq for p in store.packs(dev)]


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs for the full disk needs root")
def test_full_disk_during_intake_and_a_line_drop_loses_nothing(tmp_path: Path) -> None:
    devices = [sim(1, pack_every_s=0.02), sim(2, pack_every_s=0.02)]
    with small_disk(tmp_path / "disk", "3m") as disk, daemon_logs() as logs:
        db = disk / "hirmem.db"
        register(db, devices)
        with running(devices):
            daemon = daemon_for(tmp_path, db, devices)
            daemon.start()
            try:
                wait_until(lambda: all(len(d.accepted) >= 5 for d in devices), 30, "first packs")
                filler = fill(disk)
                deferred = [d.deferred for d in devices]
                wait_until(
                    lambda: all(d.deferred > n for d, n in zip(devices, deferred, strict=True)),
                    60,
                    "both devices told to keep their packs (deferred)",
                )
                # the line drops while nothing can be written: the worker must live on
                before = devices[0].sessions
                devices[0].drop_line()
                wait_until(lambda: daemon.workers[0].reconnects >= 1, 10, "the reconnect")
                time.sleep(1.0)
                assert all(w.alive for w in daemon.workers)
                assert daemon.workers[0].store_errors > 0
                stuck = [len(d.accepted) for d in devices]
                filler.unlink()  # space again
                wait_until(
                    lambda: all(
                        len(d.accepted) >= n + 10 for d, n in zip(devices, stuck, strict=True)
                    ),
                    60,
                    "every device served again after the space came back",
                )
                assert devices[0].sessions > before
                wait_until(
                    lambda: daemon.store.sessions()[devices[0].device_id][1] == "open",
                    10,
                    "the session state saved again",
                )
                # a clean stop with a full disk: no traceback, the store closed
                for d in devices:
                    d.packs_to_make = 0
                fill(disk)
                time.sleep(0.5)
            finally:
                daemon.stop()
            with pytest.raises(Exception, match="closed"):
                daemon.store.devices()
        assert logs.tracebacks == []
        assert "daemon stopped" in logs.messages
        (disk / "filler").unlink()
        with Store(db) as store:
            assert store.check_integrity() == []
            for d in devices:
                # every pack the device saw acknowledged is stored, once, in order
                assert stored_seqs(store, d.device_id) == d.accepted
                assert d.refused == []
            assert store.refusals() == []


def knowledge_items(n: int) -> list[KnowledgeItem]:
    facts = [("pump", "serves", f"zone {n}"), ("temp0", "max_safe", "80.0")]
    return [KnowledgeItem(bytes.fromhex(triple_id(*f)), *f, 0xF000) for f in facts]


def writes_blocked(worker: DeviceWorker) -> bool:
    """The daemon stopped answering the stalled peer's bait for 1 s, or dropped its line."""
    if worker.reconnects or worker.line_pauses:
        return True
    before = dict(worker.session.counters.refused_in)
    time.sleep(1.0)
    return (
        worker.reconnects > 0
        or worker.line_pauses > 0
        or worker.session.counters.refused_in == before
    )


def test_a_peer_that_stops_reading_starves_nobody(tmp_path: Path) -> None:
    honest = [sim(n, pack_every_s=0.05) for n in (11, 12, 13, 14)]
    hostile = sim(15, pack_every_s=0.05)
    devices = [hostile, *honest]  # first: housekeeping reaches it before the others
    db = tmp_path / "stall.db"
    register(db, devices)
    with running(devices), daemon_logs() as logs:
        daemon = daemon_for(tmp_path, db, devices, status_every=0.25)
        daemon.start()
        try:
            wait_until(lambda: all(d.sessions >= 1 and d.accepted for d in devices), 30, "open")
            hostile.stall()
            wait_until(lambda: writes_blocked(daemon.workers[0]), 90, "the stalled line to block")
            store = daemon.store
            statuses = [d.status_answers for d in honest]
            counters = [store.counters(d.device_id).get("packs_accepted", 0) for d in honest]
            for v in (1, 2):
                sign_knowledge(store, HOST_KEY, HOST_ID, knowledge_items(v), now_ms())
                wait_until(
                    lambda v=v: all((v, 0) in d.knowledge for d in honest),  # type: ignore[misc]
                    10,
                    f"knowledge version {v} taken by every honest device",
                )
            time.sleep(3.0)
            for d, n in zip(honest, statuses, strict=True):
                assert d.status_answers >= n + 8, "STATUS requests kept their schedule"
            for d, n in zip(honest, counters, strict=True):
                assert store.counters(d.device_id)["packs_accepted"] > n, "counters saved"
            # the hostile line was paused for its flood or dropped at its write deadline;
            # the honest ones neither
            assert daemon.workers[0].line_pauses + daemon.workers[0].reconnects >= 1
            assert all(w.reconnects == 0 and w.line_pauses == 0 for w in daemon.workers[1:])
        finally:
            started = time.monotonic()
            daemon.stop()
            stop_s = time.monotonic() - started
    assert stop_s < 3.0, f"stopping took {stop_s:.1f} s"
    assert logs.tracebacks == []


def facts(version: int, n: int) -> list[KnowledgeItem]:
    triples = [("pump", "serves", f"zone {version}.{k}") for k in range(n)]
    return [KnowledgeItem(bytes.fromhex(triple_id(*t)), *t, 0xF000) for t in triples]


def test_a_knowledge_version_a_device_cannot_hold_does_not_block_the_next(
    tmp_path: Path,
) -> None:
    """9 facts for an 8-fact device that does not state its capacity in HELLO: it answers
    deferred each time; after a few tries the version is recorded as deferred (storage)
    by that device and later versions go out; a newer version pushed while an older one
    waits for its retry replaces it."""
    device = sim(31, pack_every_s=0.1, max_facts=8, state_capacity=False)
    db = tmp_path / "knowledge.db"
    register(db, [device])
    with running([device]):
        daemon = daemon_for(tmp_path, db, [device])
        daemon.start()
        store = daemon.store
        dev = device.device_id

        def answer(seq: int) -> tuple[str, int] | None:
            rows = {s: (st, r) for s, st, r, _ in store.device_knowledge(dev)}
            return rows.get(seq)

        try:
            wait_until(lambda: device.sessions >= 1, 20, "the session")
            too_big = sign_knowledge(store, HOST_KEY, HOST_ID, facts(1, 9), now_ms())
            wait_until(lambda: answer(too_big.seq) == ("deferred", 11), 30, "v1 given up")
            assert [s for s, _ in device.knowledge].count(too_big.seq) == 3
            fits = sign_knowledge(store, HOST_KEY, HOST_ID, facts(2, 8), now_ms())
            wait_until(lambda: answer(fits.seq) == ("accepted", 0), 10, "v2 accepted")
            # an oversized version waiting for its retry is replaced by the next one
            waiting = sign_knowledge(store, HOST_KEY, HOST_ID, facts(3, 9), now_ms())
            wait_until(lambda: (waiting.seq, 3) in device.knowledge, 10, "v3 deferred once")
            newest = sign_knowledge(store, HOST_KEY, HOST_ID, facts(4, 1), now_ms())
            wait_until(lambda: answer(newest.seq) == ("accepted", 0), 3, "v4 accepted at once")
            assert answer(waiting.seq) == ("not-sent", 0)
        finally:
            daemon.stop()
    assert device.knowledge[-1] == (4, 0)


def test_a_version_beyond_the_stated_capacity_is_refused_not_sent(tmp_path: Path) -> None:
    """Issue 15 §4: the device states in HELLO that it keeps 8 facts. A version of 9 (kept
    by `hirmem push --anyway`) is recorded refused (storage) for it without being sent;
    the next version, of 8, goes out and is accepted."""
    device = sim(32, pack_every_s=0.1, max_facts=8)
    db = tmp_path / "capacity.db"
    register(db, [device])
    with running([device]):
        daemon = daemon_for(tmp_path, db, [device])
        daemon.start()
        store = daemon.store
        dev = device.device_id
        try:
            wait_until(lambda: device.sessions >= 1, 20, "the session")
            wait_until(lambda: store.device_limits(dev) is not None, 5, "the HELLO kept")
            limits = store.device_limits(dev)
            assert limits is not None and limits.knowledge_facts == 8
            too_big = sign_knowledge(store, HOST_KEY, HOST_ID, facts(1, 9), now_ms())
            wait_until(lambda: [(s, st, r) for s, st, r, _ in store.device_knowledge(dev)]
                       == [(too_big.seq, "refused", 11)], 10, "v1 refused")  # fmt: skip
            fits = sign_knowledge(store, HOST_KEY, HOST_ID, facts(2, 8), now_ms())
            wait_until(lambda: (fits.seq, 0) in device.knowledge, 10, "v2 accepted")
            time.sleep(0.5)  # housekeeping rounds: v1 is not offered again either
            counters = daemon.workers[0].session.counters
            assert counters.knowledge_refused == {"storage": 1}
            assert counters.knowledge_pushed == 1
        finally:
            daemon.stop()
    assert device.knowledge == [(2, 0)]  # the device never saw version 1


def test_pack_seqs_and_timestamps_above_2_63_are_stored(tmp_path: Path) -> None:
    """A device whose boot counter is ≥ 2^31 signs pack seqs ≥ 2^63 (boot << 32 | n);
    with record timestamps near 2^64 too, every pack is stored and answered accepted."""
    device = sim(41, boot=1 << 31, timestamp_base=(1 << 64) - 1000, packs_to_make=6)
    db = tmp_path / "u64.db"
    register(db, [device])
    with running([device]):
        daemon = daemon_for(tmp_path, db, [device])
        daemon.start()
        try:
            wait_until(lambda: device.done, 30, "six packs accepted")
        finally:
            daemon.stop()
    assert device.deferred == 0 and device.refused == []
    with Store(db) as store:
        assert stored_seqs(store, device.device_id) == device.accepted
        assert min(device.accepted) >= 1 << 63
        stamps = [r.timestamp for r, _ in store.iter_records()]
        assert stamps == [(1 << 64) - 1000 + k for k in range(1, 25)]
        assert store.check_integrity() == []


def test_an_unregistered_device_offering_junk_leaves_the_store_bounded(tmp_path: Path) -> None:
    """400 distinct junk offers of 3.9 KB from a device nobody registered: the store
    keeps a bounded digest of each refusal (REFUSALS_PER_DEVICE of them, REFUSAL_KEEP
    bytes each), counts the ones rotated out, and stays far below what was offered."""
    offers, size = 400, 3900
    rogue = RogueDevice(bytes.fromhex("ee00000000000bad"), derive_test_key("junk"),
                        max_frame=4096)  # fmt: skip
    db = tmp_path / "junk.db"
    Store(db).close()
    daemon = daemon_for(tmp_path, db, [rogue], max_frame=4096)
    daemon.start()
    rng = random.Random(15)
    try:
        rogue.connect(timeout=20)
        for _ in range(offers):
            result = rogue.offer(rng.randbytes(size))
            assert PackStatus(result.status) == PackStatus.REFUSED
    finally:
        rogue.close()
        daemon.stop()
    with Store(db) as store:
        kept = store.refusals()
        assert len(kept) == REFUSALS_PER_DEVICE
        assert all(r.size == size and r.offers == 1 for r in kept)
        rotated = offers - len(kept)
        assert store.refusals_rotated() == {rogue.device_id: (rotated, rotated)}
        db_ = store._db
        db_.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        kept_bytes = db_.execute("SELECT sum(length(raw)) FROM refusals").fetchone()[0]
        assert kept_bytes == REFUSAL_KEEP * REFUSALS_PER_DEVICE
        pages = db_.execute("PRAGMA page_count").fetchone()[0]
        free = db_.execute("PRAGMA freelist_count").fetchone()[0]
        used = (pages - free) * db_.execute("PRAGMA page_size").fetchone()[0]
    assert used < 512 * 1024, f"{used} bytes used for {offers * size} bytes of junk offered"


def test_a_streaming_device_is_seen_on_every_frame_not_only_at_hello(tmp_path: Path) -> None:
    device = sim(51, pack_every_s=0.05)
    db = tmp_path / "seen.db"
    register(db, [device])
    with running([device]):
        daemon = daemon_for(tmp_path, db, [device])
        daemon.start()
        try:
            wait_until(lambda: device.sessions >= 1, 20, "the session")
            time.sleep(3.0)  # streaming, no new HELLO
            (row,) = status_rows(daemon.store)
            assert row["name"] == "sim0"  # the configured name of its line
            assert device.sessions == 1
            assert isinstance(row["last_seen_s"], float) and row["last_seen_s"] < 1.0, row
        finally:
            daemon.stop()


def test_a_simulated_device_on_a_pty_is_served(tmp_path: Path) -> None:
    device = sim(61, on_pty=True, packs_to_make=10)
    db = tmp_path / "pty.db"
    register(db, [device])
    with running([device]):
        daemon = daemon_for(tmp_path, db, [device])
        daemon.start()
        try:
            wait_until(lambda: device.done, 30, "ten packs over the pty")
        finally:
            daemon.stop()
    assert device.url.startswith("/dev/")
    with Store(db) as store:
        assert stored_seqs(store, device.device_id) == device.accepted
        # what its HELLO said it can take is kept for `hirmem push` to check against
        limits = DeviceLimits(0x1F, device.max_frame, 4096, HOST_KEY.public.kid,
                              device.max_facts, 240)  # and the knowledge it keeps  # fmt: skip
        assert store.device_limits(device.device_id) == limits


def test_a_flooding_peer_is_paused_at_its_first_read_not_after_a_second_of_it(
    tmp_path: Path,
) -> None:
    """The flood check runs on the line's own thread after every slice of a read the
    session is fed (FEED_SLICE bytes): a peer that writes frames the host must refuse
    as fast as loopback allows gets at most one slice parsed per pause, not whatever
    arrives until the next housekeeping round (save_every, 1 s here), which holds the
    interpreter's lock the honest lines need. Before, the stalled line of
    tools/bench_daemon.py took 0.6 s of CPU in 6 (0.03 s now)."""
    hostile = sim(81, pack_every_s=0.05)
    db = tmp_path / "flood.db"
    register(db, [hostile])
    frame = len(encode_frame(encode_message(StatusRequest(), 1, 0), hostile.max_frame))
    per_slice = FEED_SLICE // frame + 1  # the most frames one slice can carry
    with running([hostile]):
        daemon = daemon_for(tmp_path, db, [hostile], save_every=1.0, status_every=0)
        daemon.start()
        try:
            wait_until(lambda: hostile.sessions >= 1 and bool(hostile.accepted), 30, "a session")
            worker = daemon.workers[0]
            before = worker.noise()
            hostile.stall()  # reads nothing from now on, and floods STATUS_REQUESTs
            wait_until(lambda: worker.line_pauses >= 2, 30, "two pauses of the flood")
            time.sleep(2.0)
            pauses, parsed = worker.line_pauses, worker.noise() - before
        finally:
            daemon.stop()
    assert hostile.stall_writes > 0
    # one slice before each pause, one after the last, and one that was under way
    assert parsed <= (pauses + 2) * per_slice, (parsed, pauses, per_slice)
