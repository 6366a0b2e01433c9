"""hirmem daemon against emulated boards: many devices at once, exactly once, clean stops.

The boards are the real firmware images in QEMU (Cortex-M3 and rv32), provisioned
with their synthetic sensor on; the daemon serves them over their UART sockets and
takes their packs into a real SQLite store. What is checked is what an operator
relies on: every record a device captured is in the store exactly once (capture
seqs per boot form one gapless run), the chain verifies again, a knowledge version
reaches every device, a killed daemon loses nothing, and a bad configuration stops
the daemon before it starts anything.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path

import pytest

from board_host import provisioned
from hirmem.cli.commands import status_rows
from hirmem.daemon.config import ConfigError, build_config, load_config
from hirmem.daemon.service import Daemon, render_metrics, sign_knowledge
from hirmem.daemon.store import Store
from hirmem.emulation.faultproxy import BYTE_KINDS, Direction, FaultKind, FaultPlan, FaultProxy
from hirmem.emulation.provision import HostTrust, SlotSettings
from hirmem.emulation.qemu import QemuBoard
from hirmem.emulation.rogue import RogueDevice
from hirmem.emulation.simdevice import SimDevice
from hirmem.protocol.clock import now_ms
from hirmem.protocol.identity import triple_id
from hirmem.protocol.keys import derive_test_key, write_key_file
from hirmem.protocol.messages import PackStatus
from hirmem.protocol.packs import KnowledgeItem, Reason
from hirmem.protocol.records import Record
from test_daemon_faults import writes_blocked
from test_metrics import samples
from test_store import Device

ROOT = Path(__file__).resolve().parent.parent
HOST_ID = bytes.fromhex("d1d2d3d4d5d6d7d8")
HOST_KEY = derive_test_key("daemon test host")
BOARDS = {  # board -> device id
    "mps2-an385": bytes.fromhex("3300000000000001"),
    "hifive1": bytes.fromhex("5500000000000002"),
}

needs_qemu = pytest.mark.skipif(
    any(not Path(f"/usr/bin/{q}").exists() for q in ("qemu-system-arm", "qemu-system-riscv32")),
    reason="QEMU (qemu-system-arm, qemu-system-misc) is not installed",
)


def slot(device_id: bytes, *, sensor_ms: int = 40, offer: int = 4) -> SlotSettings:
    return SlotSettings(
        device_id,
        derive_test_key(f"daemon test device {device_id.hex()}"),
        HostTrust(HOST_KEY.public, HOST_ID),
        boot_base=1,
        sensor_period_ms=sensor_ms,
        offer_threshold=offer,
        offer_period_ms=2000,
    )


def wait_until(done: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


@contextmanager
def boards(
    tmp_path: Path, names: tuple[str, ...], timeout: float = 120
) -> Iterator[list[QemuBoard]]:
    with ExitStack() as stack:
        running = []
        for name in names:
            elf = provisioned(name, tmp_path, slot(BOARDS[name]))
            running.append(stack.enter_context(QemuBoard(name, elf, timeout=timeout)))
        yield running


def register(db: Path, names: tuple[str, ...]) -> None:
    with Store(db) as store:
        for name in names:
            dev = BOARDS[name]
            key = derive_test_key(f"daemon test device {dev.hex()}")
            store.register_device(dev, key.public.raw, name)


def gapless(records: list[Record]) -> dict[tuple[bytes, int], int]:
    """Per (device, boot): the number of records, asserting their capture seqs are 1..n."""
    runs: dict[tuple[bytes, int], list[int]] = {}
    for r in records:
        runs.setdefault((r.id[:8], int.from_bytes(r.id[8:12], "big")), []).append(
            int.from_bytes(r.id[12:], "big")
        )
    for key, seqs in runs.items():
        assert sorted(seqs) == list(range(1, len(seqs) + 1)), f"gap or double in {key}"
    return {k: len(v) for k, v in runs.items()}


def all_records(store: Store) -> list[Record]:
    return [r for r, _ in store.iter_records()]


def knowledge(n: int) -> list[KnowledgeItem]:
    facts = [("pump", "serves", f"zone {n}"), ("temp0", "max_safe", "80.0")]
    return [KnowledgeItem(bytes.fromhex(triple_id(*f)), *f, 0xF000) for f in facts]


@needs_qemu
def test_one_daemon_serves_boards_of_both_architectures(tmp_path: Path) -> None:
    names = ("mps2-an385", "hifive1")
    db = tmp_path / "hirmem.db"
    register(db, names)
    key_file = tmp_path / "host.key"
    write_key_file(key_file, HOST_KEY)
    with boards(tmp_path, names) as qbs:
        config = build_config(
            {
                "host": {
                    "id": HOST_ID.hex(),
                    "database": db.name,
                    "key": key_file.name,
                    "save_every": 0.2,
                    "status_every": 0.5,
                    "metrics": "127.0.0.1:0",
                },
                "device": [{"url": qb.url, "name": qb.spec.name} for qb in qbs],
            },
            tmp_path,
            [],
        )
        daemon = Daemon(config)
        daemon.start()
        try:
            store = daemon.store
            wait_until(
                lambda: all(len(store.packs(BOARDS[n])) >= 3 for n in names), 90, "3 packs each"
            )
            pack = sign_knowledge(store, HOST_KEY, HOST_ID, knowledge(1), now_ms())
            wait_until(
                lambda: all(
                    (pack.seq, "accepted")
                    in [(s, st) for s, st, _, _ in store.device_knowledge(BOARDS[n])]
                    for n in names
                ),
                30,
                "the knowledge version accepted by both devices",
            )
            # the devices' own STATUS reached the counters; metrics show every device
            wait_until(
                lambda: all(
                    store.counters(BOARDS[n]).get("device.knowledge_seq") == pack.seq for n in names
                ),
                10,
                "device STATUS with the new knowledge seq",
            )
            text = render_metrics(daemon)
            for n in names:
                accepted = samples(text, "hirmem_packs_accepted_total", device=BOARDS[n].hex())
                assert len(accepted) == 1 and accepted[0].labels["name"] == n
                assert accepted[0].value >= 3
            assert samples(text, "hirmem_session_open")
        finally:
            daemon.stop()
    with Store(db) as store:
        assert store.check_integrity() == []
        runs = gapless(all_records(store))
        for n in names:
            assert sum(c for (dev, _), c in runs.items() if dev == BOARDS[n]) >= 12
        rows = {r["device"]: r for r in status_rows(store)}
        for n in names:
            row = rows[BOARDS[n].hex()]
            assert row["board"] == n and row["knowledge"] == 1
            assert row["records"] == store.count_records(BOARDS[n])
            assert isinstance(row["frames_good"], int) and row["frames_good"] > 0
        # nothing of theirs was refused
        assert store.refusals() == []


def _write_config(tmp_path: Path, urls: list[str], db: Path) -> Path:
    key_file = tmp_path / "host.key"
    if not key_file.exists():
        write_key_file(key_file, HOST_KEY)
    devices = "".join(f'\n[[device]]\nurl = "{u}"\n' for u in urls)
    path = tmp_path / "hirmem.toml"
    path.write_text(
        f'[host]\nid = "{HOST_ID.hex()}"\ndatabase = "{db}"\nkey = "host.key"\n'
        f"save_every = 0.2\nstatus_every = 0\nreconnect_min = 0.1\nreconnect_max = 0.5\n" + devices
    )
    return path


def _daemon_process(config: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "host"))
    return subprocess.Popen(
        [sys.executable, "-m", "hirmem.cli", "daemon", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


@needs_qemu
def _stored_beyond(store: Store, device: bytes, count: int) -> bool:
    return store.count_records(device) > count


def test_sigkill_during_sync_loses_nothing(tmp_path: Path) -> None:
    names = ("mps2-an385",)
    db = tmp_path / "kill.db"
    register(db, names)
    dev = BOARDS[names[0]]
    with boards(tmp_path, names, timeout=150) as (qb,):
        config = _write_config(tmp_path, [qb.url], db)
        rng = random.Random(5)
        for _ in range(5):
            # killed at a random moment of the sync (the sensor offers a pack every ~160 ms),
            # once this run has stored something: on a loaded machine the start alone can
            # outlast a fixed sleep
            with Store(db) as store:
                storing = partial(_stored_beyond, store, dev, store.count_records(dev))
                proc = _daemon_process(config)
                wait_until(storing, 60, "the run storing")
            time.sleep(rng.uniform(0.0, 0.8))
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
        proc = _daemon_process(config)
        with Store(db) as store:
            target = store.count_records(dev) + 8
            wait_until(lambda: store.count_records(dev) >= target, 60, "records after")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
        assert proc.returncode == 0, out
        assert "daemon stopped" in out
    with Store(db) as store:
        assert store.check_integrity() == []
        runs = gapless(all_records(store))  # one boot, capture seqs 1..n: none lost, none twice
        assert list(runs) == [(dev, 1)] and runs[(dev, 1)] >= 16
        assert store.refusals() == []


def test_configuration_errors_say_what_to_fix(tmp_path: Path) -> None:
    key_file = tmp_path / "host.key"
    write_key_file(key_file, HOST_KEY)

    def problems(text: str, devices: list[str] | None = None) -> str:
        path = tmp_path / "c.toml"
        path.write_text(text)
        with pytest.raises(ConfigError) as exc:
            load_config(path, devices or [], {})
        return str(exc.value)

    good_host = f'[host]\nid = "{HOST_ID.hex()}"\n'
    assert "not valid TOML" in problems("[host\nid = 1")
    assert "no such port" in problems(good_host + '[[device]]\nurl = "/dev/ttyNOPE"\n')
    assert "unknown scheme 'tcp'" in problems(good_host, ["tcp://127.0.0.1:1"])
    assert "needs a host and a port" in problems(good_host, ["socket://localhost"])
    assert "host.id is missing" in problems('[[device]]\nurl = "loop://"\n')
    assert "must be 16 hex digits" in problems('[host]\nid = "abc"\n', ["loop://"])
    assert "no devices" in problems(good_host)
    assert "listed twice" in problems(good_host, ["loop://", "loop://"])
    assert "host.window" in problems(good_host + "window = 9\n", ["loop://"])
    assert "unknown key" in problems(good_host + "colour = 1\n", ["loop://"])
    missing = problems(good_host + 'key = "nope.key"\n', ["loop://"])
    assert "nope.key" in missing and "cannot read the key file" in missing
    key_file.chmod(0o644)
    assert "chmod 600" in problems(good_host + 'key = "host.key"\n', ["loop://"])
    # all problems at once, one per line
    many = problems('[host]\nid = "zz"\nwindow = 0\n', ["/dev/ttyNOPE"])
    assert many.count("\n  - ") == 3
    # the command refuses before it creates anything
    bad = tmp_path / "bad.toml"
    bad.write_text(
        f'[host]\nid = "{HOST_ID.hex()}"\ndatabase = "new.db"\n[[device]]\nurl = "/dev/ttyNOPE"\n'
    )
    proc = subprocess.run(
        [sys.executable, "-m", "hirmem.cli", "daemon", "--config", str(bad)],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT / "host")),
        timeout=30,
    )
    assert proc.returncode == 2 and "no such port" in proc.stderr
    assert not (tmp_path / "new.db").exists()


def test_configuration_values_are_not_silently_coerced(tmp_path: Path) -> None:
    """Issue #15: max_frame = 512.7 became 512, name = 5 became "5", database = 5 a file
    named 5. Each is now a configuration error naming the key."""
    good_host = f'[host]\nid = "{HOST_ID.hex()}"\n'

    def problems(text: str) -> str:
        path = tmp_path / "c.toml"
        path.write_text(text)
        with pytest.raises(ConfigError) as exc:
            load_config(path, ["loop://"], {})
        return str(exc.value)

    assert "host.max_frame = 512.7" in problems(good_host + "max_frame = 512.7\n")
    assert "host.window = 2.5" in problems(good_host + "window = 2.5\n")
    assert "host.database = 5" in problems(good_host + "database = 5\n")
    assert "host.metrics = 9464" in problems(good_host + "metrics = 9464\n")
    assert "host.key = 7" in problems(good_host + "key = 7\n")
    named = problems(good_host + '[[device]]\nurl = "loop://x"\nname = 5\n')
    assert "device #1.name = 5" in named
    fine = load_config(None, ["loop://"], {"id": HOST_ID.hex(), "max_frame": 1024})
    assert fine.max_frame == 1024


def test_bad_packs_are_refused_with_their_reason_and_recorded(tmp_path: Path) -> None:
    """A device offering a tampered, a foreign, a replayed and a rolled-back pack."""
    dev_id = bytes.fromhex("5c00000000000001")
    key = derive_test_key("scripted device")
    db = tmp_path / "bad.db"
    with Store(db) as store:
        store.register_device(dev_id, key.public.raw, "scripted")
    device = RogueDevice(dev_id, key)
    config = build_config(
        {
            "host": {
                "id": HOST_ID.hex(),
                "database": db.name,
                "save_every": 0.1,
                "status_every": 0,
            },
            "device": [{"url": device.url}],
        },
        tmp_path,
        [],
    )
    daemon = Daemon(config)
    daemon.start()
    try:
        ack = device.connect()
        assert (ack.pack_seq, ack.max_frame) == (0, 512)
        packer = Device(dev_id, key)
        first, second = packer.pack(1), packer.pack(1)
        tampered = bytearray(packer.pack(1).encoded)
        tampered[-70] ^= 0x01
        foreign = Device(dev_id, derive_test_key("not registered")).pack(1)
        replay = Device(dev_id, key).pack(1, seq=second.seq, prev=first.hash)
        rollback = Device(dev_id, key, boot=0).pack(1, seq=7)
        answers = [
            device.offer(p)
            for p in (
                first.encoded,
                second.encoded,
                bytes(tampered),
                foreign.encoded,
                replay.encoded,
                rollback.encoded,
                first.encoded,
            )
        ]
        got = [(PackStatus(a.status), Reason(a.reason)) for a in answers]
        assert got == [
            (PackStatus.ACCEPTED, Reason.NONE),
            (PackStatus.ACCEPTED, Reason.NONE),
            (PackStatus.REFUSED, Reason.BAD_SIGNATURE),
            (PackStatus.REFUSED, Reason.UNKNOWN_KEY),
            (PackStatus.REFUSED, Reason.REPLAY),
            (PackStatus.REFUSED, Reason.ROLLBACK),
            (PackStatus.DUPLICATE, Reason.NONE),  # an old pack again: same answer, no copy
        ]
        # each answer names its offer by the seq it was sent with (SPEC §5.7)
        named = device.answered[-7:]
        assert named == list(range(named[0], named[0] + 7))
        refused = ("bad-signature", "unknown-key", "replay", "rollback")
        # counters are saved every 0.1 s: wait for a save after the last answer (duplicate)
        wait_until(
            lambda: daemon.store.counters(dev_id).get("packs_duplicate") == 1, 5, "counters saved"
        )
        counters = daemon.store.counters(dev_id)
        assert counters["packs_accepted"] == 2 and counters["packs_duplicate"] == 1
        for name in refused:
            assert counters[f"packs_refused.{name}"] == 1, name
    finally:
        daemon.stop()
        device.close()
    with Store(db) as store:
        recorded = {r.reason: r for r in store.refusals(dev_id)}
        assert set(recorded) == {
            Reason.BAD_SIGNATURE,
            Reason.UNKNOWN_KEY,
            Reason.REPLAY,
            Reason.ROLLBACK,
        }
        assert store.count_records(dev_id) == 2 and store.check_integrity() == []


def _noisy_frames(proxy: FaultProxy, direction: Direction) -> int:
    """Distinct emitted frames that byte noise or garbage made bad (one bad frame each)."""
    hit = {
        (e.session, e.out_frame)
        for e in proxy.events()
        if e.direction == direction and (e.kind in BYTE_KINDS or e.kind == FaultKind.GARBAGE)
    }
    return len(hit)


@needs_qemu
def test_ten_thousand_frames_of_faults_lose_nothing(tmp_path: Path) -> None:
    """Both boards behind fault proxies: every candidate stored once, every fault counted."""
    names = ("mps2-an385", "hifive1")
    db = tmp_path / "faults.db"
    register(db, names)
    plan = FaultPlan(
        flip=0.0002,
        drop_byte=0.0001,
        dup_byte=0.0001,
        drop_frame=0.01,
        dup_frame=0.01,
        reorder=0.01,
        garbage=0.005,
        cut=0.0005,
        delay=0.005,
        delay_ms=30,
    )
    with ExitStack() as stack:
        qbs = []
        for name in names:
            elf = provisioned(name, tmp_path, slot(BOARDS[name], sensor_ms=10, offer=8))
            qbs.append(stack.enter_context(QemuBoard(name, elf, timeout=240)))
        proxies = [
            stack.enter_context(
                FaultProxy(
                    qb.url.removeprefix("socket://"),
                    seed=n + 1,
                    to_upstream=plan,
                    to_client=plan,
                    record_events=True,
                )
            )
            for n, qb in enumerate(qbs)
        ]
        config = build_config(
            {
                "host": {
                    "id": HOST_ID.hex(),
                    "database": db.name,
                    "save_every": 0.2,
                    "status_every": 0.5,
                    "reconnect_min": 0.05,
                    "reconnect_max": 0.2,
                },
                "device": [{"url": p.url} for p in proxies],
            },
            tmp_path,
            [],
        )
        daemon = Daemon(config)
        daemon.start()
        try:

            def frames() -> int:
                return sum(
                    p.stats().to_client.frames_in + p.stats().to_upstream.frames_in for p in proxies
                )

            wait_until(lambda: frames() >= 10_000, 200, "10,000 frames through the proxies")
            stats = [p.stats() for p in proxies]
            # a last STATUS from each device, then its released records must all be stored
            time.sleep(1.0)
            finals = {}
            for n in names:
                c = daemon.store.counters(BOARDS[n])
                finals[n] = c["device.captures"] - c["device.refusals"] - c["device.ring_used"]
            wait_until(
                lambda: all(daemon.store.count_records(BOARDS[n]) >= finals[n] for n in names),
                30,
                "every record the devices released to be in the store",
            )
            workers = {w.config.url: w for w in daemon.workers}
            for proxy, st in zip(proxies, stats, strict=True):
                worker = workers[proxy.url]
                host = worker.session.counters.snapshot()
                cuts = st.to_client.cut + st.to_upstream.cut
                assert st.to_client.faults > 0 and st.to_upstream.faults > 0
                # device -> daemon damage: each noisy frame or burst is one bad frame at the host
                noisy_in = _noisy_frames(proxy, Direction.TO_CLIENT)
                # (a cut may take a damaged frame with it, or leave a partial one behind)
                assert noisy_in - cuts <= host.frames_bad_total <= noisy_in + cuts + 1
                # daemon -> device damage: the device counts it (STATUS frames_bad)
                noisy_out = _noisy_frames(proxy, Direction.TO_UPSTREAM)
                device_bad = worker.device_status["frames_bad"]
                assert noisy_out - cuts <= device_bad <= noisy_out + cuts + 1
                # dropped frames come back as retransmissions, copies as duplicates
                assert host.retransmissions + worker.device_status["retransmits"] > 0
                assert host.duplicates + host.out_of_order > 0
                # every cut is a reconnect of the daemon's worker
                assert worker.reconnects >= cuts
        finally:
            daemon.stop()
    with Store(db) as store:
        assert store.check_integrity() == []  # every signature and record hash again
        runs = gapless(all_records(store))  # none lost in the middle, none twice
        for n in names:
            assert store.count_records(BOARDS[n]) >= finals[n] > 0
            assert len([k for k in runs if k[0] == BOARDS[n]]) == 1
        assert store.refusals() == []  # damage never reached the intake as a pack


class _DeviceLogs(logging.Handler):
    """The device LOG lines the daemon logs ("device log", ctx text), per device."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[tuple[str | None, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        ctx = getattr(record, "ctx", {})
        if record.getMessage() == "device log" and isinstance(ctx, dict):
            self.lines.append((ctx.get("device"), str(ctx.get("text"))))


@needs_qemu
def test_device_reset_mid_transfer_loses_nothing(tmp_path: Path) -> None:
    """Issue #5 test 3: QMP system_reset of each board at seeded random moments while its
    packs flow (fragmented at max_frame 512 and 256, so some resets cut a transfer).
    The agent resumes its ring and packer from .noinit; nothing is lost, nothing twice."""
    names = ("mps2-an385", "hifive1")
    db = tmp_path / "resets.db"
    register(db, names)
    handler = _DeviceLogs()
    daemon_log = logging.getLogger("hirmem.daemon")
    daemon_log.addHandler(handler)
    daemon_log.setLevel(logging.INFO)
    resets = dict.fromkeys(names, 0)
    with ExitStack() as stack:
        qbs = {}
        for name in names:
            elf = provisioned(name, tmp_path, slot(BOARDS[name], sensor_ms=20, offer=4))
            qbs[name] = stack.enter_context(QemuBoard(name, elf, timeout=120, qmp=True))
        config = build_config(
            {
                "host": {
                    "id": HOST_ID.hex(),
                    "database": db.name,
                    "save_every": 0.2,
                    "status_every": 0.3,
                },
                "device": [{"url": qb.url, "name": n} for n, qb in qbs.items()],
            },
            tmp_path,
            [],
        )
        daemon = Daemon(config)
        daemon.start()
        try:
            store = daemon.store
            wait_until(
                lambda: all(len(store.packs(BOARDS[n])) >= 2 for n in names), 30, "packs flowing"
            )
            rng = random.Random(20260501)
            for _ in range(12):
                time.sleep(rng.uniform(0.05, 0.9))  # 4 records a pack, a pack every ~80 ms
                name = rng.choice(names)
                qbs[name].reset()
                resets[name] += 1
            workers = {w.config.url: w for w in daemon.workers}
            # every reset seen by the host as one; then packs flow again for each device
            wait_until(
                lambda: all(
                    workers[qbs[n].url].session.counters.device_resets == resets[n] for n in names
                ),
                20,
                "a DeviceReset per reset",
            )
            counts = {n: store.count_records(BOARDS[n]) for n in names}
            wait_until(
                lambda: all(store.count_records(BOARDS[n]) >= counts[n] + 8 for n in names),
                20,
                "records after the last reset",
            )
            # a STATUS from after the last reset: the records the device released in its
            # current numbering (captured - refused - held) must all be in the store
            time.sleep(1.0)
            finals = {}
            for n in names:
                st = workers[qbs[n].url].device_status
                finals[n] = st["captures"] - st["refusals"] - st["ring_used"]
            time.sleep(1.0)  # what was released before that STATUS is stored by now
        finally:
            daemon.stop()
            daemon_log.removeHandler(handler)
    assert all(resets[n] >= 3 for n in names), resets
    with Store(db) as store:
        assert store.check_integrity() == []
        assert store.record_conflicts() == []  # no record id came back with other contents
        assert store.refusals() == []
        runs = gapless(all_records(store))  # per (device, boot of the id): 1..n, none twice
        for n in names:
            dev = BOARDS[n]
            # the numbering the device uses now is the highest boot among its ids (a resume
            # keeps the numbering while records are held, and renumbers under the new boot
            # only once the host holds everything)
            current = max(boot for d, boot in runs if d == dev)
            assert runs[(dev, current)] >= finals[n] > 0, (n, runs, finals)
    # a resume that found its memory broken would have started empty and said so
    assert [t for _, t in handler.lines if t.startswith("resume failed")] == []
    # the resumes kept records, some of them in packs whose result the reset cut off
    kept = [
        tuple(int(f.split("=")[1]) for f in t.split()[1:])
        for _, t in handler.lines
        if t.startswith("resume kept=")
    ]
    assert len(kept) == sum(resets.values()), kept
    assert sum(k for k, _ in kept) > 0 and sum(p for _, p in kept) > 0, kept
    # every reset was a warm one (the app's boot line, in sessions that lasted 0.5 s)
    boots = [t for _, t in handler.lines if t.startswith("boot=")]
    assert {t for t in boots if "reset=cold" in t} <= {"boot=1 reset=cold warm_boots=0"}
    assert any("reset=warm" in t for t in boots)


@needs_qemu
def test_a_board_booted_past_2_31_has_its_packs_stored(tmp_path: Path) -> None:
    """Issue #15: an image provisioned with boot 2^31 signs pack seqs ≥ 2^63
    ((boot << 32) | n), which SQLite's signed integers could not hold: every pack was
    deferred for ever and the board refused its captures."""
    name, dev = "hifive1", BOARDS["hifive1"]
    db = tmp_path / "boot.db"
    register(db, (name,))
    settings = dataclasses.replace(slot(dev), boot_base=1 << 31)
    elf = provisioned(name, tmp_path, settings)
    with QemuBoard(name, elf, timeout=120).start() as qb:
        config = _write_config(tmp_path, [qb.url], db)
        proc = _daemon_process(config)
        try:
            with Store(db) as store:
                wait_until(lambda: store.count_packs(dev) >= 3, 60, "three packs stored")
        finally:
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=20)
        assert proc.returncode == 0, out
        assert "deferred" not in out, out
    with Store(db) as store:
        seqs = [p.seq for p in store.packs(dev)]
        assert seqs == sorted(seqs) and seqs[0] >> 32 == 1 << 31
        assert store.check_integrity() == []
        runs = gapless(all_records(store))
        assert list(runs) == [(dev, 1 << 31)]
        assert store.refusals() == []


@needs_qemu
def test_a_stalled_line_does_not_starve_the_boards(tmp_path: Path) -> None:
    """Issue #15: one line whose peer stops reading froze housekeeping (STATUS requests,
    counter saves, knowledge pushes) for every device. Two boards keep theirs on schedule
    beside a simulated peer that stalls (it keeps sending what draws answers)."""
    names = ("mps2-an385", "hifive1")
    db = tmp_path / "stall.db"
    register(db, names)
    hostile = SimDevice(bytes.fromhex("ee000000000000f1"), derive_test_key("stalling peer"))
    with Store(db) as store:
        store.register_device(hostile.device_id, hostile.key.public.raw, "simulated")
    key_file = tmp_path / "host.key"
    write_key_file(key_file, HOST_KEY)
    hostile.start()
    try:
        with boards(tmp_path, names) as qbs:
            config = build_config(
                {
                    "host": {
                        "id": HOST_ID.hex(),
                        "database": db.name,
                        "key": key_file.name,
                        "save_every": 0.2,
                        "status_every": 0.5,
                        "write_timeout": 1.0,
                    },
                    "device": [{"url": hostile.url}] + [{"url": qb.url} for qb in qbs],
                },
                tmp_path,
                [],
            )
            daemon = Daemon(config)
            daemon.start()
            try:
                store = daemon.store
                wait_until(
                    lambda: all(store.counters(BOARDS[n]).get("device.uptime_ms") for n in names)
                    and hostile.sessions >= 1,
                    60,
                    "every session open and the boards' first STATUS saved",
                )
                hostile.stall()
                wait_until(lambda: writes_blocked(daemon.workers[0]), 60, "the stalled line")
                uptimes = {n: store.counters(BOARDS[n])["device.uptime_ms"] for n in names}
                pack = sign_knowledge(store, HOST_KEY, HOST_ID, knowledge(15), now_ms())
                wait_until(
                    lambda: all(
                        (pack.seq, "accepted")
                        in [(s, st) for s, st, _, _ in store.device_knowledge(BOARDS[n])]
                        for n in names
                    ),
                    30,
                    "the knowledge version accepted by both boards",
                )
                time.sleep(2.0)
                for n in names:  # STATUS answered and saved: the device's uptime moved on
                    assert store.counters(BOARDS[n])["device.uptime_ms"] > uptimes[n] + 1000
                assert all(w.reconnects == 0 for w in daemon.workers[1:])
            finally:
                daemon.stop()
    finally:
        hostile.close()
