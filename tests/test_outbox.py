"""The daemon's fleet outbox against a real HTTP fleet node (tests/fleetstub.py).

Every pack the store accepts reaches the fleet once, in each device's order; nothing
leaves the outbox before the fleet's 201/200; 4xx refusals are recorded and not sent
again; 429/503 Retry-After is honoured; the backoff is exponential with full jitter; a
full outbox defers intake (nothing dropped); a lost answer, a network cut through the
fault proxy and a SIGKILLed daemon lose nothing and store nothing twice at the fleet.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import random
import signal
import ssl
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from prometheus_client.parser import text_string_to_metric_families

from fleetstub import FleetStub
from hirmem.cli.entry import main as hirmem_main
from hirmem.daemon.config import ConfigError, DaemonConfig, DeviceConfig, FleetConfig, build_config
from hirmem.daemon.intake import StoreIntake
from hirmem.daemon.metrics import render_metrics
from hirmem.daemon.outbox import Outbox, retry_after_seconds
from hirmem.daemon.service import Daemon
from hirmem.daemon.store import OutboxStatus, Store
from hirmem.emulation.faultproxy import FaultProxy
from hirmem.emulation.simdevice import SimDevice
from hirmem.link.session import DeviceInfo
from hirmem.protocol.keys import derive_test_key, write_key_file
from hirmem.protocol.messages import PackStatus
from hirmem.protocol.packs import Reason
from test_store import DEV_A, DEV_B, KEY_A, KEY_B, Device

GATEWAY = derive_test_key("outbox gateway")
ROOT = Path(__file__).resolve().parent.parent


class FakeClock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def fleet() -> Iterator[FleetStub]:
    with FleetStub() as stub:
        stub.register_gateway("gw-1", GATEWAY)
        stub.register_device(DEV_A, KEY_A)
        stub.register_device(DEV_B, KEY_B)
        yield stub


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "gateway.key"
    write_key_file(path, GATEWAY)
    return path


def open_store(path: Path) -> Store:
    store = Store(path)
    if not store.devices():
        store.register_device(DEV_A, KEY_A.public.raw, "mps2-an385")
        store.register_device(DEV_B, KEY_B.public.raw, "hifive1")
    return store


def fleet_config(url: str, key: Path, **more: object) -> FleetConfig:
    settings: dict[str, object] = {"keyid": "gw-1", "backoff_min": 0.01, "backoff_max": 0.2,
                                   "timeout": 5.0, **more}  # fmt: skip
    return FleetConfig(url, key, **settings)  # type: ignore[arg-type]


def drain(outbox: Outbox, rounds: int = 200) -> None:
    """Tick until the outbox is empty (real time: backoffs are short in these tests)."""
    for _ in range(rounds):
        outbox.tick()
        status = outbox.store.outbox_status()
        assert status is not None
        if status.depth == 0:
            return
        time.sleep(max(0.0, min(outbox.next_at - time.time(), 0.2)))
    raise AssertionError(f"the outbox did not drain: {outbox.store.outbox_status()}")


def test_every_accepted_pack_reaches_the_fleet_once_in_order(
    tmp_path: Path, fleet: FleetStub, key_file: Path
) -> None:
    store = open_store(tmp_path / "d.db")
    a, b = Device(DEV_A, KEY_A), Device(DEV_B, KEY_B)
    early = [a.pack(2) for _ in range(3)]  # stored before any outbox: queued at enable
    for p in early:
        assert store.take_pack(DEV_A, p.encoded).status == "accepted"
    outbox = Outbox(store, fleet_config(fleet.url, key_file))
    status = store.outbox_status()
    assert status is not None and status.depth == 3
    packs = list(early)
    for n in range(20):
        dev, key = (a, DEV_A) if n % 3 else (b, DEV_B)
        p = dev.pack(1 + n % 4)
        assert store.take_pack(key, p.encoded).status == "accepted"
        packs.append(p)
    drain(outbox)
    assert set(fleet.stored) == {p.pack_id.hex() for p in packs}
    assert max(fleet.stored.values()) == 1
    for device in (DEV_A, DEV_B):  # each device's packs in seq order
        mine = [h for h in fleet.order if bytes.fromhex(h)[:8] == device]
        assert mine == [p.pack_id.hex() for p in packs if p.signer == device]
    status = store.outbox_status()
    assert status is not None and (status.depth, status.acked, status.refused) == (0, 23, 0)
    assert fleet.statuses() == {201: 23}
    # a second daemon on the same store sends nothing again
    Outbox(store, fleet_config(fleet.url, key_file)).tick()
    assert fleet.statuses() == {201: 23}
    assert store.count_packs() == 23  # the store keeps every pack


def test_a_refusal_is_recorded_and_not_retried_until_requeued(
    tmp_path: Path, fleet: FleetStub, key_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    del fleet.devices[KEY_B.kid]  # the fleet does not know device B yet
    store = open_store(tmp_path / "d.db")
    outbox = Outbox(store, fleet_config(fleet.url, key_file))
    a, b = Device(DEV_A, KEY_A), Device(DEV_B, KEY_B)
    for p in (a.pack(), b.pack(), a.pack(), b.pack()):
        store.take_pack(p.signer, p.encoded)
    drain(outbox)
    refused = store.fleet_refusals()
    assert [(r.device_id, r.status, r.reason) for r in refused] == [
        (DEV_B, 403, "unknown-device")] * 2
    for _ in range(5):
        outbox.tick()
    assert fleet.statuses() == {201: 2, 403: 2}  # no second attempt
    status = store.outbox_status()
    assert status is not None and status.refused == 2 and "unknown-device" in str(
        status.last_error)
    db = str(tmp_path / "d.db")
    assert hirmem_main(["outbox", "--database", db, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [(r["device"], r["status"], r["reason"]) for r in shown["refusals"]] == [
        (DEV_B.hex(), 403, "unknown-device")] * 2
    assert shown["outbox"]["depth"] == 0 and shown["outbox"]["refused"] == 2
    fleet.register_device(DEV_B, KEY_B)
    assert hirmem_main(["outbox", "--database", db, "--requeue", "--device", DEV_A.hex()]) == 0
    assert "0 refused packs queued again" in capsys.readouterr().out
    assert hirmem_main(["outbox", "--database", db, "--requeue", "--device", DEV_B.hex()]) == 0
    assert "2 refused packs queued again" in capsys.readouterr().out
    drain(outbox)
    assert len(fleet.stored) == 4 and store.fleet_refusals() == []


def test_retry_after_is_honoured_and_backoff_is_full_jitter(
    tmp_path: Path, fleet: FleetStub, key_file: Path
) -> None:
    store = open_store(tmp_path / "d.db")
    clock = FakeClock(time.time())
    config = fleet_config(fleet.url, key_file, backoff_min=1.0, backoff_max=60.0)
    outbox = Outbox(store, config, clock=clock, rng=random.Random(5))
    p = Device(DEV_A, KEY_A).pack()
    store.take_pack(DEV_A, p.encoded)
    fleet.script.extend(["503:7", "500", "500", "500", "500", "500", "500", "500", "500"])
    outbox.tick()
    assert 7.0 <= outbox.next_at - clock.now <= 8.0  # Retry-After: 7 (+ up to backoff_min)
    clock.now += 6.5
    outbox.tick()
    assert len(fleet.log) == 1  # not before the fleet said
    delays = []
    for n in range(1, 9):
        clock.now = outbox.next_at
        outbox.tick()
        delay = outbox.next_at - clock.now
        assert 0 <= delay <= min(60.0, 1.0 * 2 ** n), (n, delay)  # full jitter, capped
        delays.append(delay)
    assert len(set(delays)) == len(delays) and max(delays) > 4  # random, and growing
    assert fleet.statuses() == {503: 1, 500: 8}
    clock.now = outbox.next_at
    outbox.tick()  # the script is spent: stored now
    assert fleet.stored[p.pack_id.hex()] == 1 and outbox.failures == 0
    status = store.outbox_status()
    assert status is not None and status.errors == 9 and status.acked == 1


@pytest.mark.parametrize("seed", range(4))
def test_random_fleet_failures_never_lose_reorder_or_double_a_pack(
    tmp_path: Path, fleet: FleetStub, key_file: Path, seed: int
) -> None:
    """Uploads from three devices on concurrent lanes meet a random script of fleet
    answers (500, 503, answers lost after the commit, successes) while new packs keep
    arriving: each pack is stored once, each device's in order, and the outbox empties."""
    rng = random.Random(seed)
    fleet.script.extend(rng.choice(["ok", "ok", "ok", "500", "503:0", "drop"])
                        for _ in range(150))  # fmt: skip
    store = open_store(tmp_path / "d.db")
    third = (bytes.fromhex("0c0c0c0c0c0c0c03"), derive_test_key("outbox device c"))
    store.register_device(third[0], third[1].public.raw)
    fleet.register_device(*third)
    devices = [Device(DEV_A, KEY_A), Device(DEV_B, KEY_B), Device(*third)]
    outbox = Outbox(store, fleet_config(fleet.url, key_file, backoff_min=0.001,
                                        backoff_max=0.01), rng=random.Random(seed))  # fmt: skip
    packs = []
    for _ in range(6):
        for _ in range(rng.randrange(5, 15)):
            dev = rng.choice(devices)
            p = dev.pack(rng.randrange(1, 6))
            assert store.take_pack(dev.device_id, p.encoded).status == "accepted"
            packs.append(p)
        for _ in range(rng.randrange(1, 4)):
            outbox.tick()
            time.sleep(0.01)
    drain(outbox, rounds=2000)
    outbox.close()
    assert set(fleet.stored) == {p.pack_id.hex() for p in packs}
    assert max(fleet.stored.values()) == 1
    for dev in devices:
        mine = [h for h in fleet.order if bytes.fromhex(h)[:8] == dev.device_id]
        assert mine == [p.pack_id.hex() for p in packs if p.signer == dev.device_id]
    assert store.fleet_refusals() == []


def test_retry_after_forms() -> None:
    assert retry_after_seconds("12", 0.0) == 12.0
    assert retry_after_seconds("999999", 0.0) == 3600.0  # bounded
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", 1445412470.0) == 10.0
    assert retry_after_seconds("soon", 0.0) is None and retry_after_seconds(None, 0.0) is None


def test_a_lost_answer_after_the_fleet_commit_is_a_repeat_not_a_second_copy(
    tmp_path: Path, fleet: FleetStub, key_file: Path
) -> None:
    store = open_store(tmp_path / "d.db")
    outbox = Outbox(store, fleet_config(fleet.url, key_file))
    packs = [Device(DEV_A, KEY_A).pack()]
    store.take_pack(DEV_A, packs[0].encoded)
    fleet.script.append("drop")
    drain(outbox)
    assert fleet.stored[packs[0].pack_id.hex()] == 1
    assert [s for _, s, _ in fleet.log] == [0, 200]  # no answer, then the original one


def test_a_kept_alive_connection_the_fleet_closed_is_reopened_not_backed_off(
    tmp_path: Path, fleet: FleetStub, key_file: Path
) -> None:
    store = open_store(tmp_path / "d.db")
    outbox = Outbox(store, fleet_config(fleet.url, key_file))
    fleet.hang_up = True
    dev = Device(DEV_A, KEY_A)
    for _ in range(4):
        store.take_pack(DEV_A, dev.pack().encoded)
        time.sleep(0.05)  # the server has closed its side by now
        assert outbox.tick() == 1
    status = store.outbox_status()
    assert status is not None and (status.acked, status.errors) == (4, 0)


def test_a_full_outbox_defers_intake_and_nothing_is_dropped(
    tmp_path: Path, fleet: FleetStub, key_file: Path
) -> None:
    store = open_store(tmp_path / "d.db")
    fleet.script.extend(["500"] * 3)
    outbox = Outbox(store, fleet_config(fleet.url, key_file, max_packs=3))
    intake = StoreIntake(store)
    device = DeviceInfo(DEV_A, "mps2-an385", "test", 1, 0, 512, 4096, 4, KEY_A.kid, b"")
    dev = Device(DEV_A, KEY_A)
    packs = [dev.pack() for _ in range(5)]
    answers = [intake.offer(device, p.encoded) for p in packs[:3]]
    assert [a.status for a in answers] == [PackStatus.ACCEPTED] * 3
    full = intake.offer(device, packs[3].encoded)
    assert (full.status, full.reason) == (PackStatus.DEFERRED, Reason.STORAGE)
    assert "outbox is full" in full.detail
    assert intake.offer(device, packs[0].encoded).status == PackStatus.DUPLICATE  # still
    status = store.outbox_status()
    assert status is not None and status.full and status.deferred == 1
    assert store.count_packs() == 3
    outbox.tick()  # the fleet fails: the queue stays
    status = store.outbox_status()
    assert status is not None and status.depth == 3 and status.full
    drain(outbox)
    status = store.outbox_status()
    assert status is not None and not status.full and status.depth == 0
    for p in packs[3:]:  # the device offers its kept packs again
        assert intake.offer(device, p.encoded).status == PackStatus.ACCEPTED
    drain(outbox)
    assert len(fleet.stored) == 5 and max(fleet.stored.values()) == 1


def test_a_network_cut_through_the_fault_proxy_loses_nothing(
    tmp_path: Path, fleet: FleetStub, key_file: Path
) -> None:
    """Packs keep arriving while the network to the fleet is cut and restored, twice;
    the outbox runs on its own thread as in the daemon."""
    store = open_store(tmp_path / "d.db")
    fleet.delay = 0.002
    with FaultProxy(("127.0.0.1", fleet.port), seed=17) as proxy:
        outbox = Outbox(store, fleet_config(f"http://127.0.0.1:{proxy.port}", key_file))
        stop = threading.Event()

        def run() -> None:
            while not stop.wait(0.01):
                outbox.tick()

        sender = threading.Thread(target=run)
        sender.start()
        devices = [(Device(DEV_A, KEY_A), DEV_A), (Device(DEV_B, KEY_B), DEV_B)]
        packs = []
        try:
            for n in range(120):
                dev, key = devices[n % 2]
                p = dev.pack(2)
                assert store.take_pack(key, p.encoded).status == "accepted"
                packs.append(p)
                if n in (30, 80):
                    proxy.partition()
                if n in (55, 105):
                    proxy.heal()
                time.sleep(0.01)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                status = store.outbox_status()
                assert status is not None
                if status.depth == 0:
                    break
                time.sleep(0.05)
        finally:
            stop.set()
            sender.join()
        stats = proxy.stats()
    assert status is not None and status.depth == 0, status
    assert set(fleet.stored) == {p.pack_id.hex() for p in packs}
    assert max(fleet.stored.values()) == 1  # nothing stored twice
    assert stats.partition_refusals > 0 or stats.manual_cuts > 0
    assert status.errors > 0 and status.acked == 120


CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from hirmem.daemon.config import FleetConfig
    from hirmem.daemon.outbox import Outbox
    from hirmem.daemon.store import OutboxStatus, Store
    store = Store(sys.argv[1])
    outbox = Outbox(store, FleetConfig(sys.argv[2], Path(sys.argv[3]), "gw-1",
                                       backoff_min=0.01, backoff_max=0.1))
    print("ready", flush=True)
    while True:
        outbox.tick()
        time.sleep(0.005)
""")


def test_a_sigkilled_daemon_resumes_and_the_fleet_stores_each_pack_once(
    tmp_path: Path, fleet: FleetStub, key_file: Path
) -> None:
    db = tmp_path / "d.db"
    store = open_store(db)
    store.enable_outbox(fleet.url, 1000, 1 << 30)
    a, b = Device(DEV_A, KEY_A), Device(DEV_B, KEY_B)
    packs = [a.pack(2) if n % 2 else b.pack(1) for n in range(40)]
    for p in packs:
        assert store.take_pack(p.signer, p.encoded).status == "accepted"
    store.close()
    fleet.delay = 0.003  # so that a kill lands while uploads are in flight
    env = {**os.environ, "PYTHONPATH": str(ROOT / "host")}
    rng = random.Random(9)
    kills = 0
    for _ in range(20):
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(db), fleet.url, str(key_file)],
                                 env=env, stdout=subprocess.PIPE)  # fmt: skip
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        time.sleep(rng.uniform(0.05, 0.3))
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        kills += 1
        if len(fleet.stored) == len(packs):
            break
    with Store(db) as after:
        outbox = Outbox(after, fleet_config(fleet.url, key_file))
        drain(outbox)
        status = after.outbox_status()
        assert status is not None and status.depth == 0
        assert after.count_packs() == len(packs)
    assert kills >= 3
    assert fleet.statuses()[200] > 0  # a kill landed between the fleet's commit and ours
    assert set(fleet.stored) == {p.pack_id.hex() for p in packs}
    assert max(fleet.stored.values()) == 1


def test_status_json_and_metrics_show_the_outbox(
    tmp_path: Path, fleet: FleetStub, key_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "d.db"
    store = open_store(db)
    config = DaemonConfig(bytes(8), db, (DeviceConfig("socket://127.0.0.1:9"),),
                          fleet=fleet_config(fleet.url, key_file))  # fmt: skip
    daemon = Daemon(config, store=store)
    assert daemon.outbox is not None and daemon.background == [daemon.outbox]
    fleet.script.append("503:30")
    p = Device(DEV_A, KEY_A).pack()
    store.take_pack(DEV_A, p.encoded)
    time.sleep(0.05)
    daemon.outbox.tick()
    families = {f.name: f for f in text_string_to_metric_families(render_metrics(daemon))}
    assert families["hirmem_outbox_depth"].samples[0].value == 1
    assert families["hirmem_outbox_oldest_age_seconds"].samples[0].value > 0.04
    assert families["hirmem_outbox_backoff_seconds"].samples[0].value > 29
    [info] = families["hirmem_outbox_last_error_info"].samples
    assert "HTTP 503" in info.labels["error"]
    daemon.stop()
    assert hirmem_main(["status", "--database", str(db)]) == 0
    out = capsys.readouterr().out
    assert f"fleet outbox to {fleet.url}: 1 packs unsent" in out and "HTTP 503" in out
    assert hirmem_main(["status", "--database", str(db), "--json"]) == 0
    rows = {r["device"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows[DEV_A.hex()]["fleet_unsent"] == 1 and rows[DEV_B.hex()]["fleet_unsent"] == 0
    assert float(rows[DEV_A.hex()]["fleet_unsent_oldest_s"]) >= 0
    assert "overloaded" in str(rows[DEV_A.hex()]["fleet_error"])
    assert rows[DEV_A.hex()]["fleet_full"] is False


def test_fleet_configuration_is_checked(tmp_path: Path, key_file: Path) -> None:
    base = {"host": {"id": "a1a2a3a4a5a6a7a8"}, "device": [{"url": "socket://127.0.0.1:9"}]}
    good = build_config({**base, "fleet": {"url": "https://fleet.example:8443/",
                                           "key": str(key_file), "keyid": "gw-1"}},
                        tmp_path, [])  # fmt: skip
    assert good.fleet is not None and good.fleet.url == "https://fleet.example:8443"
    assert build_config(base, tmp_path, []).fleet is None
    with pytest.raises(ConfigError) as info:
        build_config({**base, "fleet": {"url": "ftp://x", "key": "missing.key", "max_packs": 0,
                                        "backoff_min": 5.0, "backoff_max": 1.0, "colour": 1}},
                     tmp_path, [])  # fmt: skip
    text = str(info.value)
    for says in ("fleet.url", "fleet.key", "fleet.max_packs", "backoff_max", "fleet.colour"):
        assert says in text, says


def test_devices_to_daemon_to_fleet_through_a_partition_a_full_outbox_and_sigkills(
    tmp_path: Path, fleet: FleetStub, key_file: Path
) -> None:
    """The whole chain with real processes: simulated devices on socket lines, `hirmem
    daemon` with a [fleet] (a small outbox bound), the fleet behind the fault proxy.
    The network starts cut: the outbox fills, intake defers, the devices keep their
    packs. Then it heals while the daemon is SIGKILLed and restarted three times. In
    the end each device's every pack is at the fleet exactly once."""
    sims = [SimDevice(bytes.fromhex(f"5e0000000000000{n}"), derive_test_key(f"outbox sim {n}"),
                      records_per_pack=4, packs_to_make=25, pack_every_s=0.01)
            for n in (1, 2)]  # fmt: skip
    db = tmp_path / "daemon.db"
    with Store(db) as store:
        for sim in sims:
            store.register_device(sim.device_id, sim.key.public.raw, sim.board)
            fleet.register_device(sim.device_id, sim.key)
    with FaultProxy(("127.0.0.1", fleet.port), seed=5) as proxy, ExitStack() as stack:
        for sim in sims:
            stack.callback(sim.close)
            sim.start()
        proxy.partition()
        lines = "".join(f'\n[[device]]\nurl = "{s.url}"\n' for s in sims)
        config = tmp_path / "hirmem.toml"
        config.write_text(
            f'[host]\nid = "a1a2a3a4a5a6a7a8"\ndatabase = "{db}"\nmemory_every = 0\n'
            "max_frame = 1024\n"
            "save_every = 0.2\nstatus_every = 0\nreconnect_min = 0.05\nreconnect_max = 0.3\n"
            f'[fleet]\nurl = "http://127.0.0.1:{proxy.port}"\nkey = "{key_file}"\n'
            'keyid = "gw-1"\nmax_packs = 6\nbackoff_min = 0.05\nbackoff_max = 0.3\n' + lines
        )
        env = {**os.environ, "PYTHONPATH": str(ROOT / "host")}
        argv = [sys.executable, "-m", "hirmem.cli", "daemon", "--config", str(config)]

        def daemon() -> subprocess.Popen[bytes]:
            log = (tmp_path / "daemon.log").open("ab")
            return subprocess.Popen(argv, env=env, stdout=log, stderr=log)

        def outbox_status() -> OutboxStatus | None:
            with Store(db) as store:
                return store.outbox_status()

        proc = daemon()
        try:
            deadline = time.monotonic() + 60
            while not ((s := outbox_status()) and s.full and sum(x.deferred for x in sims)):
                assert time.monotonic() < deadline, (
                    "the outbox never filled", outbox_status(), [x.deferred for x in sims],
                    [x.accepted for x in sims], [x.sessions for x in sims])
                time.sleep(0.1)
            proxy.heal()
            rng = random.Random(11)
            for _ in range(3):
                time.sleep(rng.uniform(0.5, 1.5))
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                proc = daemon()
            deadline = time.monotonic() + 120
            while not (all(s.done for s in sims) and (o := outbox_status()) and o.depth == 0):
                assert time.monotonic() < deadline, (outbox_status(), [s.accepted for s in sims])
                time.sleep(0.1)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    with Store(db) as store:
        stored = {p.pack_id.hex() for p in store.packs()}
        assert store.check_integrity() == []
    assert len(stored) == 50 and set(fleet.stored) == stored
    assert max(fleet.stored.values()) == 1
    for sim in sims:
        assert sim.error is None and sim.deferred > 0
        assert sim.accepted == sorted(sim.accepted) and len(sim.accepted) == 25


def _certificates(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server certificate for 127.0.0.1 it signed: (ca.pem, cert.pem, key.pem)."""
    now = datetime.datetime.now(datetime.UTC)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("test fleet CA")).issuer_name(
        name("test fleet CA")).public_key(ca_key.public_key()).serial_number(1)
        .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256()))  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(name("127.0.0.1")).issuer_name(
        ca.subject).public_key(key.public_key()).serial_number(2)
        .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(ca_key, hashes.SHA256()))  # fmt: skip
    paths = tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))  # fmt: skip
    return paths


def test_https_with_the_fleet_ca_and_not_without_it(tmp_path: Path, key_file: Path) -> None:
    ca, cert, key = _certificates(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    with FleetStub(tls) as fleet:
        fleet.register_gateway("gw-1", GATEWAY)
        fleet.register_device(DEV_A, KEY_A)
        store = open_store(tmp_path / "d.db")
        store.take_pack(DEV_A, Device(DEV_A, KEY_A).pack().encoded)
        untrusting = Outbox(store, fleet_config(fleet.url, key_file))  # the system's CAs
        assert untrusting.tick() == 0
        status = store.outbox_status()
        assert status is not None and "CERTIFICATE_VERIFY_FAILED" in str(status.last_error)
        untrusting.close()
        trusting = Outbox(store, fleet_config(fleet.url, key_file, ca=ca))
        drain(trusting)
        trusting.close()
        assert len(fleet.stored) == 1
