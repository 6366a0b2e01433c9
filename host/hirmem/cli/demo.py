"""``hirmem demo``: the whole stack on emulated boards, checked at the end.

1. Builds the firmware for three boards (Cortex-M3 mps2-an385, rv32 HiFive1,
   Cortex-M4F STM32F4), creates a key for each device and for the host, provisions
   the images (synthetic sensor on) and registers the devices in a fresh store.
2. Boots them in QEMU and serves them with the daemon over their UART sockets,
   with a fourth, scripted *rogue* device that offers a tampered pack and a
   rolled-back one. Live progress per device, once a second.
3. Pushes a signed knowledge version and waits until every board holds it.
4. Stops, and checks what it claims: for each board, the records the device
   released from its ring against the records in the store (every capture seq
   present once), the store's integrity (every pack and record verified again),
   and the refused packs with their reasons.
5. The memory engine admits what the devices sent (consolidated, held,
   quarantined), distils each board's sensor readings into one semantic memory
   (range, mean, trend, count, with its episodes) and answers a recall for the sensor
   with that distilled memory first; the semantic substrate turns the records into
   assertions and prints the PROV trace of one answer.

Everything is written under ``build/demo/`` (keys with mode 0600). The exit status
is 0 only when every check held.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from hirmem.daemon.config import build_config
from hirmem.daemon.service import Daemon, StructuredFormatter, sign_knowledge
from hirmem.daemon.store import Store
from hirmem.emulation.provision import HostTrust, SlotSettings, provision_image
from hirmem.emulation.qemu import QemuBoard, terminate_on_signals
from hirmem.emulation.rogue import RogueDevice
from hirmem.protocol.clock import now_ms
from hirmem.protocol.errors import HirmemError
from hirmem.protocol.gate import verdict_of
from hirmem.protocol.identity import triple_id
from hirmem.protocol.keys import SigningKey, write_key_file
from hirmem.protocol.packs import KnowledgeItem, Pack, Reason
from hirmem.protocol.records import State

ROOT = Path(__file__).resolve().parents[3]  # host/hirmem/cli/demo.py -> the checkout
BOARDS = {  # board -> (device id, what it is)
    "mps2-an385": (bytes.fromhex("de00000000000001"), "Cortex-M3"),
    "hifive1": (bytes.fromhex("de00000000000002"), "rv32imac, 16 KB RAM"),
    "stm32f4": (bytes.fromhex("de00000000000003"), "Cortex-M4F"),
}
HOST_ID = bytes.fromhex("4d4f53545f484f53")


class DemoError(HirmemError):
    """The demo could not set itself up (no firmware tree, a build failure, …)."""


@dataclass
class Board:
    name: str
    device_id: bytes
    label: str
    qemu: QemuBoard | None = None


def _say(text: str = "") -> None:
    print(text, flush=True)


def _build(workdir: Path) -> None:
    if not (ROOT / "firmware" / "Makefile").is_file():
        raise DemoError(f"{ROOT}: no firmware tree here; run the demo from a hirmem checkout")
    _say("building the firmware for three boards (make -C firmware boards) …")
    proc = subprocess.run(
        ["make", "-C", str(ROOT / "firmware"), "-j2", "boards"], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise DemoError(f"the board build failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    workdir.mkdir(parents=True)


def _provision(workdir: Path, host: SigningKey, sensor_ms: int) -> list[Board]:
    boards = []
    for name, (device_id, label) in BOARDS.items():
        key = SigningKey.generate()
        write_key_file(workdir / f"{name}.key", key)
        settings = SlotSettings(
            device_id,
            key,
            HostTrust(host.public, HOST_ID),
            boot_base=1,
            sensor_period_ms=sensor_ms,
            offer_threshold=6,
            offer_period_ms=1500,
            status_period_ms=0,
        )
        image = ROOT / "build" / "boards" / name / "hirmem.elf"
        provision_image(image, settings, workdir / f"{name}.elf")
        with Store(workdir / "hirmem.db") as store:
            store.register_device(device_id, key.public.raw, name)
        boards.append(Board(name, device_id, label))
    return boards


def _log_to(path: Path) -> None:
    """The daemon's structured log goes to a file; the console shows progress."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(StructuredFormatter(as_json=False))
    root = logging.getLogger("hirmem")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    root.propagate = False


def _progress(daemon: Daemon, t0: float) -> None:
    parts = []
    for w in daemon.workers:
        dev = w.device_id.hex()[-4:] if w.device_id else "----"
        c = w.session.counters
        stored = daemon.store.count_records(w.device_id) if w.device_id else 0
        parts.append(
            f"{dev}: {stored:>4} rec {c.packs_accepted:>3} packs {c.frames_good:>5} ok "
            f"{c.frames_bad_total:>2} bad {c.retransmissions:>3} rtx"
        )
    _say(f"  t={time.monotonic() - t0:5.1f}s  " + " | ".join(parts))


def _rogue(daemon_store: Store) -> tuple[RogueDevice, bytes]:
    """A scripted device (not firmware) that will offer bad packs; registered honestly."""
    key = SigningKey.generate()
    device_id = bytes.fromhex("de000000000000ff")
    daemon_store.register_device(device_id, key.public.raw, "rogue")
    return RogueDevice(device_id, key), device_id


def run(
    seconds: float = 15.0, sensor_ms: int = 50, workdir: Path | None = None,
    serve: str | None = None,
) -> int:  # fmt: skip
    """The demo; with ``serve`` (an "address:port"), the dashboard over what it left,
    until interrupted."""
    workdir = workdir or ROOT / "build" / "demo"
    if workdir.exists():
        shutil.rmtree(workdir)
    _build(workdir)
    host_key = SigningKey.generate()
    write_key_file(workdir / "host.key", host_key)
    boards = _provision(workdir, host_key, sensor_ms)
    db = workdir / "hirmem.db"
    with Store(db) as store:
        rogue, rogue_id = _rogue(store)
    _say(f"keys, provisioned images, the store and daemon.log are in {workdir}")
    checks: list[tuple[str, bool]] = []
    with ExitStack() as stack:
        stack.enter_context(terminate_on_signals())  # SIGTERM unwinds: the boards close
        for b in boards:
            qemu = QemuBoard(b.name, workdir / f"{b.name}.elf", timeout=seconds + 120)
            b.qemu = stack.enter_context(qemu)
            _say(f"  {b.name:<11} {b.label:<20} device {b.device_id.hex()}  UART {b.qemu.url}")
        stack.callback(rogue.close)
        devices = [{"url": b.qemu.url, "name": b.name} for b in boards if b.qemu]
        devices.append({"url": rogue.url, "name": "rogue"})
        config = build_config(
            {
                "host": {
                    "id": HOST_ID.hex(),
                    "database": db.name,
                    "save_every": 0.5,
                    "status_every": 1.0,
                },
                "device": devices,
            },
            workdir,
            [],
        )
        _log_to(workdir / "daemon.log")
        daemon = Daemon(config)
        daemon.start()
        try:
            _say(
                f"\nthe daemon serves {len(devices)} lines; progress (by the last 4 hex digits "
                "of each device id):"
            )
            t0 = time.monotonic()
            rogue.run_in_background()
            pushed: Pack | None = None
            while time.monotonic() - t0 < seconds:
                time.sleep(1.0)
                _progress(daemon, t0)
                if pushed is None and time.monotonic() - t0 > seconds / 3:
                    items = [
                        KnowledgeItem(bytes.fromhex(triple_id(s, p, o)), s, p, o, c)
                        for s, p, o, c in (
                            ("temp0", "max_safe", "80.0", 0xF000),
                            ("pump", "serves", "zone 3", 0x10000),
                        )
                    ]
                    pushed = sign_knowledge(daemon.store, host_key, HOST_ID, items, now_ms())
                    _say(
                        f"  pushed knowledge version {pushed.seq} ({len(items)} facts, "
                        f"{len(pushed.encoded)} bytes, signed by {host_key.kid.hex()})"
                    )
            checks.append(
                ("knowledge held by every board", _wait_knowledge(daemon, boards, pushed))
            )
            time.sleep(1.5)  # a last STATUS from every board
            finals = _released(daemon, boards)
            _wait_stored(daemon, finals)
        finally:
            daemon.stop()
    checks += _summary(db, boards, finals, rogue_id)
    checks += _memory(db, workdir, boards)
    _semantic(db, workdir)
    _say("\nchecks:")
    for name, ok in checks:
        _say(f"  [{'ok' if ok else 'FAILED'}] {name}")
    status = 0 if all(ok for _, ok in checks) else 1
    if serve is not None:
        with terminate_on_signals():
            try:
                serve_dashboard(workdir, serve)
            except KeyboardInterrupt:
                _say("\ninterrupted: the dashboard stopped")
    return status


def serve_dashboard(
    workdir: Path, listen: str, stop: threading.Event | None = None,
    on_ready: Callable[[str, str], None] | None = None,
) -> None:  # fmt: skip
    """Serve the API and dashboard over the demo's stores in ``workdir`` (intake,
    memory, semantic) on ``listen`` (a busy port: any free one), with a new admin token,
    until ``stop`` is set (or forever)."""
    from hirmem.api.dashboard import application
    from hirmem.api.server import ApiServer
    from hirmem.api.sources import LocalSources
    from hirmem.api.tokens import TokenStore

    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise HirmemError(f'--serve {listen!r}: give "address:port", like 127.0.0.1:8080')
    db = workdir / "hirmem.db"
    tokens = TokenStore(db)
    sources = LocalSources(db, workdir / "memory.db", workdir / "semantic.db")
    try:
        token, _ = tokens.create("demo-steward", "admin")
        app = application(sources, tokens)
        try:
            server = ApiServer(app, host, int(port))
        except HirmemError as exc:
            _say(f"{exc}; serving on a free port instead")
            server = ApiServer(app, host, 0)
        with server:
            _say(f"\ndashboard: {server.url}/ui/  (API: {server.url}/v1, described at "
                 f"{server.url}/openapi.json)")
            _say(f"sign in with this token (admin scope, made for the demo): {token}")
            _say("serving until interrupted (Ctrl-C)")
            if on_ready is not None:
                on_ready(server.url, token)
            (stop or threading.Event()).wait()  # an Event never set: until interrupted
    finally:
        sources.close()
        tokens.close()


def _wait_knowledge(
    daemon: Daemon, boards: list[Board], pack: Pack | None, timeout: float = 20
) -> bool:
    if pack is None:
        return False
    seq = pack.seq
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        held = [
            any(
                s == seq and st == "accepted"
                for s, st, _, _ in daemon.store.device_knowledge(b.device_id)
            )
            for b in boards
        ]
        if all(held):
            return True
        time.sleep(0.2)
    return False


def _released(daemon: Daemon, boards: list[Board]) -> dict[bytes, tuple[int, int, int, int]]:
    """Per board (captures, refused, in ring, released = captures - refused - in ring)."""
    out = {}
    for w in daemon.workers:
        if w.device_id is None or w.device_id not in {b.device_id for b in boards}:
            continue
        st = w.device_status
        c, r, u = st.get("captures", 0), st.get("refusals", 0), st.get("ring_used", 0)
        out[w.device_id] = (c, r, u, c - r - u)
    return out


def _wait_stored(daemon: Daemon, finals: dict[bytes, tuple[int, int, int, int]]) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if all(daemon.store.count_records(d) >= f[3] for d, f in finals.items()):
            return
        time.sleep(0.2)


def _summary(
    db: Path, boards: list[Board], finals: dict[bytes, tuple[int, int, int, int]], rogue: bytes
) -> list[tuple[str, bool]]:
    checks = []
    with Store(db) as store:
        records = [r for r, _ in store.iter_records()]
        _say(
            "\nsummary: captured, refused, in ring and released (captured - refused - in ring)"
            "\nfrom each board's last STATUS; stored and the rest from the store at the end"
            "\n(the sensors kept running after that STATUS, so stored >= released):"
        )
        _say(
            f"  {'board':<11} {'captured':>8} {'refused':>7} {'in ring':>7} {'released':>8} "
            f"{'stored':>6}  gapless  GREEN YELLOW RED quarantined"
        )
        for b in boards:
            mine = [r for r in records if r.id[:8] == b.device_id]
            seqs = sorted(int.from_bytes(r.id[12:], "big") for r in mine)
            gapless = seqs == list(range(1, len(seqs) + 1))
            verdicts = Counter(verdict_of(r.rn).name for r in mine)
            quarantined = sum(r.state == State.QUARANTINED for r in mine)
            cap, ref, ring, released = finals.get(b.device_id, (0, 0, 0, 0))
            _say(
                f"  {b.name:<11} {cap:>8} {ref:>7} {ring:>7} {released:>8} {len(mine):>6}  "
                f"{'yes' if gapless else 'NO':<7}  {verdicts['GREEN']:>5} {verdicts['YELLOW']:>6} "
                f"{verdicts['RED']:>3} {quarantined:>11}"
            )
            checks.append(
                (
                    f"{b.name}: every released record stored once, capture seqs "
                    f"gapless ({len(mine)} ≥ {released})",
                    gapless and len(mine) >= released > 0,
                )
            )
        problems = store.check_integrity()
        _say(
            f"  integrity check (every pack and record verified again): "
            f"{'ok' if not problems else '; '.join(problems)}"
        )
        checks.append(("store integrity", not problems))
        refusals = store.refusals()
        _say("  refused packs:")
        for r in refusals:
            who = "rogue" if r.device_id == rogue else r.device_id.hex()
            _say(f"    {who}: {Reason(r.reason).name.lower()} ({r.detail}) x{r.offers}")
        got = {Reason(r.reason) for r in refusals if r.device_id == rogue}
        checks.append(
            (
                "the rogue's tampered and rolled-back packs refused with their reasons",
                got == {Reason.BAD_SIGNATURE, Reason.ROLLBACK},
            )
        )
        checks.append(("no pack of a board refused", all(r.device_id == rogue for r in refusals)))
    return checks


def _memory(db: Path, workdir: Path, boards: list[Board]) -> list[tuple[str, bool]]:
    from hirmem.memory import distill
    from hirmem.memory.engine import MemoryEngine
    from hirmem.memory.follow import follow_intake

    engine = MemoryEngine(workdir / "memory.db")
    try:
        with Store(db) as store:
            report = follow_intake(engine, store)
        stats = engine.stats()
        _say(
            f"\nmemory engine: {report.packs} packs, {report.admitted} admitted, "
            f"{report.quarantined} quarantined, {report.mismatched} disagreed with the device"
        )
        for group, counts in stats.items():
            _say(f"  {group}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        ours = {b.device_id.hex() for b in boards}
        sensors = [d for d in distill.patterns(engine) if d.form == "reading" and d.device in ours]
        _say("  distilled from the boards' readings (semantic, each resting on its episodes):")
        for d in sensors:
            p = engine.require(d.memory_id)
            dev = f"{d.device[:2]}\N{HORIZONTAL ELLIPSIS}{d.device[-2:]}"
            _say(
                f"    {d.subject} on {dev}: {p.value}  "
                f"[{len(distill.episodes_of(engine, p.id))} episodes, M {p.strength:.2f}]"
            )
        query = "sensor temp0 reading"
        hits = engine.recall(query, k=3)
        _say(f"  recall {query!r}: score = Sim x M x Rec x Trust")
        for h in hits:
            kind = engine.require(h.id).kind
            _say(
                f"    {h.id}  {h.score:.4f} = {h.sim:.3f} x {h.strength:.3f} x "
                f"{h.recency:.3f} x {h.trust:.3f}  ({kind})"
            )
        first = engine.require(hits[0].id) if hits else None
        return [
            (
                "each board's sensor readings distilled into one semantic memory",
                {d.device for d in sensors} == ours,
            ),
            (
                "a recall for the sensor returns its distilled memory first",
                first is not None and first.kind == "pattern",
            ),
        ]
    finally:
        engine.close()


def _semantic(db: Path, workdir: Path) -> None:
    from hirmem.memory.engine import MemoryEngine
    from hirmem.semantic.devices import DeviceFeed
    from hirmem.semantic.substrate import Substrate

    sub = Substrate.open(workdir / "semantic.db")
    engine = MemoryEngine(workdir / "memory.db")  # its verdicts guard the graph too
    try:
        with Store(db) as store:
            feed = DeviceFeed(store, sub, verdict=engine.withheld)
            _, result = feed.pull(0)
        # the engine's distilled patterns and procedures, as store rows, are tier-1 memories
        kept = feed.distilled(engine.store.select("kind IN (?, ?)", ("pattern", "procedure")))
        _say(
            f"\nsemantic substrate: {len(result.docs)} device records became documents, "
            f"{len(result.triples)} assertions, {kept} distilled memories; "
            f"{sum(feed.withheld.values())} withheld "
            "(quarantined or Trust = 0: in no tier)"
        )
        if not result.triples:
            return
        ours = [t for t in result.triples if not t.subject.startswith("de000000000000ff")]
        first = (ours or result.triples)[0]
        _say(f"  one assertion: ({first.subject}, {first.predicate}, {first.object})")
        tid = triple_id(first.subject, first.predicate, first.object)
        _say(f"  its PROV-O trace (assertion:{tid}):")
        for ent in sub.prov.lineage(f"assertion:{tid}"):
            gen = ", ".join(ent.generated_by) or "-"
            _say(f"    {ent.kind:<10} {ent.id}  wasGeneratedBy {gen}")
    finally:
        sub.close()
        engine.close()
