"""The operator's commands: ``daemon``, ``device``, ``keys``, ``push``, ``status``, ``intake``.

Each command that reads or writes state takes ``--database`` (see :mod:`hirmem.cli.options`
for its defaults, ``--config`` and ``--create``);
the daemon and these commands can run at the same time (SQLite WAL): ``push`` adds a
knowledge version that the running daemon delivers, ``status`` reads the counters the
daemon saves every second.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from hirmem.cli import options
from hirmem.daemon.config import ConfigError, DaemonConfig, load_config
from hirmem.daemon.service import Daemon, setup_logging, sign_knowledge, undeliverable
from hirmem.daemon.store import DeviceRow, OutboxStatus, Store, StoreError
from hirmem.protocol.clock import now_ms
from hirmem.protocol.errors import HirmemError
from hirmem.protocol.identity import triple_id
from hirmem.protocol.keys import ID_SIZE, SigningKey, read_key_file, write_key_file
from hirmem.protocol.packs import KnowledgeItem, Pack, Reason
from hirmem.protocol.records import Record

if TYPE_CHECKING:
    from hirmem.api.server import ApiServer
    from hirmem.memory.config import MemoryConfig
    from hirmem.memory.keeper import Figure, MemoryKeeper

DEFAULT_DB = options.DEFAULT_DATABASE


def _hex(text: str, size: int, what: str) -> bytes:
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raw = b""
    if len(raw) != size:
        raise HirmemError(f"{what} must be {size * 2} hex digits, got {text!r}")
    return raw


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    d = sub.add_parser("daemon", help="serve devices: sessions, pack intake, knowledge push")
    options.add_config(d)
    d.add_argument(
        "--device",
        action="append",
        default=[],
        metavar="URL",
        help="a device line (pyserial URL, /dev path or pty); repeatable",
    )
    options.add_database(d)
    d.add_argument("--host-id", help="this host's id, 16 hex digits (overrides host.id)")
    d.add_argument("--host-key", type=Path, help="knowledge signing key file (host.key)")
    d.add_argument("--metrics", help='Prometheus endpoint "address:port" (host.metrics)')
    d.add_argument("--log-format", choices=("text", "json"), default="text")
    options.add_log_level(d)

    dev = sub.add_parser("device", help="the device registry: add, list, remove")
    _store_options(dev, create=False)
    dsub = dev.add_subparsers(dest="device_command", required=True)
    add = dsub.add_parser("add", help="trust a device's public key (creates the store)")
    _store_options(add, create=False)
    add.add_argument("--id", help="device id, 16 hex digits")
    add.add_argument("--public", help="Ed25519 public key, 64 hex digits")
    add.add_argument(
        "--identity",
        type=Path,
        help="the <key>.pub.json that `hirmem provision` wrote (id and key)",
    )
    add.add_argument("--board", default="")
    ls = dsub.add_parser("list", help="registered devices")
    _store_options(ls)
    options.add_json(ls)
    rm = dsub.add_parser("remove", help="stop trusting a device that has sent nothing")
    _store_options(rm)
    rm.add_argument("--id", required=True)

    keys = sub.add_parser("keys", help="create the host's knowledge-pack signing key")
    keys.add_argument("--out", type=Path, required=True, help="key file to create (mode 0600)")

    push = sub.add_parser("push", help="sign a knowledge version; the daemon delivers it")
    _store_options(push, create=False)
    push.add_argument("--key", type=Path, required=True, help="host key file (hirmem keys)")
    push.add_argument("--host-id", required=True, help="host id, 16 hex digits")
    push.add_argument(
        "--fact",
        action="append",
        default=[],
        metavar="S|P|O[|CONF]",
        help='a triple, e.g. "pump|serves|zone 3|0.9"; repeatable',
    )
    push.add_argument("--facts", type=Path, help="a JSON list of [s, p, o, confidence]")
    push.add_argument(
        "--anyway",
        action="store_true",
        help="keep the version even if a known device cannot take it (it is recorded as "
        "not sent to that device)",
    )

    st = sub.add_parser("status", help="devices, sessions and counters as a table")
    _store_options(st)
    options.add_json(st)

    ob = sub.add_parser(
        "outbox", help="the fleet outbox: what waits for the fleet, what it refused; requeue"
    )
    _store_options(ob)
    options.add_json(ob)
    ob.add_argument(
        "--requeue", action="store_true",
        help="send the packs the fleet refused again (once the cause is fixed, e.g. the "
        "device registered at the fleet); the running daemon picks them up",
    )  # fmt: skip
    ob.add_argument("--device", help="with --requeue: only this device's packs (16 hex digits)")

    it = sub.add_parser("intake", help="what arrived: packs, records, refusals")
    _store_options(it)
    options.add_json(it)
    it.add_argument("--device", help="only this device id")
    it.add_argument("--records", action="store_true", help="list the records too")
    it.add_argument(
        "--check",
        action="store_true",
        help="run the store's integrity check (exit 1 on a problem or a warning, such as "
        "record conflicts)",
    )


    tok = sub.add_parser("token", help="API bearer tokens: create, list, revoke")
    _store_options(tok, create=False)
    tsub = tok.add_subparsers(dest="token_command", required=True)
    tc = tsub.add_parser("create", help="a new token, printed once (kept hashed)")
    _store_options(tc, create=False)
    tc.add_argument("--name", required=True, help="who holds it (the steward of its reviews)")
    tc.add_argument("--scope", choices=("read", "review", "admin"), default="read",
                    help="read < review (decide quarantined memories) < admin (admit)")
    tc.add_argument("--tenant", default="local", help="whose data it reaches (default local)")
    tl = tsub.add_parser("list", help="the tokens (never their secrets)")
    _store_options(tl)
    options.add_json(tl)
    tr = tsub.add_parser("revoke", help="stop accepting a token")
    _store_options(tr)
    tr.add_argument("id", help="the token's id (16 hex digits, `token list`)")


def _store_options(parser: argparse.ArgumentParser, create: bool = True) -> None:
    """The store a command works on: ``--database``, ``--config`` (its default), and
    ``--create`` where a missing store is otherwise refused."""
    options.add_database(parser, create=create)
    options.add_config(parser)


def run(args: argparse.Namespace) -> int:
    handler = {
        "daemon": _daemon,
        "device": _device,
        "keys": _keys,
        "push": _push,
        "status": _status,
        "intake": _intake,
        "outbox": _outbox,
        "token": _token,
    }[args.command]
    try:
        return handler(args)
    except (StoreError, ConfigError) as exc:
        print(f"hirmem {args.command}: {exc}", file=sys.stderr)
        return 2


def _open_existing(path: Path, create: bool = False) -> Store:
    if create:
        return Store(path)
    options.require_existing(path)
    if path.is_file() and path.stat().st_size == 0:
        raise StoreError(
            f"{path}: the file is empty, not a hirmem store (a mistyped path? "
            "the daemon creates the store when it starts)"
        )
    return Store(path)


def _daemon(args: argparse.Namespace) -> int:
    overrides = {
        "database": str(args.database.resolve()) if args.database else None,
        "id": args.host_id,
        "key": str(args.host_key.resolve()) if args.host_key else None,
        "metrics": args.metrics,
    }
    config = load_config(args.config_toml, args.device, overrides)
    if not args.create:  # checked after the configuration, before anything is created
        options.require_existing(config.database)
    setup_logging(args.log_format, options.level_number(args.log_level or "info"))
    daemon = Daemon(config)  # creates the intake database the memory keeper reads
    mcfg: MemoryConfig | None = None
    key = None
    try:
        if config.memory_config:  # checked before anything serves
            from hirmem.memory.config import MemoryConfig

            mcfg = MemoryConfig.load(config.memory_config)
        key = read_key_file(config.host_key) if config.host_key else None
        if config.memory is not None:
            daemon.add_background(_MemoryJob(config, mcfg, key))
    except BaseException:
        daemon.stop()
        raise
    with ExitStack() as stack:
        if config.api is not None:
            try:
                stack.enter_context(serve_api(daemon, config, mcfg, key))
            except BaseException:
                daemon.stop()
                raise
        daemon.run()
    return 0


@contextmanager
def serve_api(
    daemon: Daemon, config: DaemonConfig, memory_config: MemoryConfig | None,
    key: SigningKey | None,
) -> Iterator[ApiServer]:  # fmt: skip
    """The HTTP API and dashboard of ``config.api`` over this daemon's stores, served
    on a thread of its own while the block runs."""
    from hirmem.api.dashboard import application
    from hirmem.api.server import ApiServer
    from hirmem.api.sources import LocalSources
    from hirmem.api.tokens import TokenStore
    from hirmem.daemon.health import health_report
    from hirmem.daemon.metrics import render_metrics

    api = config.api
    assert api is not None
    sources = LocalSources(
        config.database, config.memory, api.semantic, signing_key=key,
        memory_config=memory_config, health=lambda: health_report(daemon),
        metrics=lambda: render_metrics(daemon).encode(),
    )  # fmt: skip
    tokens = TokenStore(config.database)
    app = application(sources, tokens, rate=api.rate, burst=api.burst)
    server = ApiServer(app, api.listen.host, api.listen.port)
    try:
        server.start()
        print(f"hirmem: dashboard at {server.url}/ui/ (API at {server.url}/v1, "
              "tokens: hirmem token create)", file=sys.stderr, flush=True)  # fmt: skip
        yield server
    finally:
        server.stop()
        sources.close()
        tokens.close()


class _MemoryJob:
    """The daemon's memory keeper, imported and opened by its thread's first tick: the
    device lines serve at once instead of waiting for numpy and the recall index."""

    name = "memory"

    def __init__(
        self, config: DaemonConfig, memory_config: MemoryConfig | None, key: SigningKey | None
    ) -> None:
        self.interval = config.memory_every
        self._config, self._memory_config, self._key = config, memory_config, key
        self._keeper: MemoryKeeper | None = None

    def tick(self) -> object:
        if self._keeper is None:
            from hirmem.memory.keeper import MemoryKeeper

            c = self._config
            assert c.memory is not None
            self._keeper = MemoryKeeper.open(
                c.memory, c.database, c.memory_every, self._memory_config, self._key
            )
        return self._keeper.tick()

    def figures(self) -> list[Figure]:  # the keeper's, for /metrics (zeros until it opens)
        from hirmem.memory.keeper import MemoryKeeper

        return (self._keeper or MemoryKeeper(None, None, self.interval)).figures()

    def close(self) -> None:
        if self._keeper is not None:
            self._keeper.close()


def _device(args: argparse.Namespace) -> int:
    if args.device_command == "list":
        with _open_existing(args.database, args.create) as store:
            devices = store.devices()
        if args.json:
            print(json.dumps([device_row(d) for d in devices], indent=2))
            return 0
        for d in devices:
            head = f"seq {d.head.seq:#x}" if d.head else "no pack yet"
            print(f"{d.device_id.hex()}  kid {d.kid.hex()}  {d.board or '-':<12} {head}")
        return 0
    if args.device_command == "remove":
        with _open_existing(args.database, args.create) as store:
            store.remove_device(_hex(args.id, ID_SIZE, "--id"))
        return 0
    if args.identity is not None:
        ident = json.loads(args.identity.read_text(encoding="ascii"))
        device_id = _hex(ident["device_id"], ID_SIZE, "device_id")
        public = _hex(ident["public_key"], 32, "public_key")
    elif args.id and args.public:
        device_id = _hex(args.id, ID_SIZE, "--id")
        public = _hex(args.public, 32, "--public")
    else:
        raise HirmemError("give --identity FILE, or --id and --public")
    with Store(args.database) as store:
        row = store.register_device(device_id, public, args.board)
    print(f"device {row.device_id.hex()} trusted (kid {row.kid.hex()})")
    return 0


def device_row(d: DeviceRow) -> dict[str, object]:
    """One registered device as ``device list --json`` prints it."""
    return {
        "device": d.device_id.hex(),
        "kid": d.kid.hex(),
        "public_key": d.public_key.hex(),
        "board": d.board,
        "firmware": d.firmware,
        "boot": d.boot,
        "registered_ms": d.registered,
        "first_seen_ms": d.first_seen,
        "last_seen_ms": d.last_seen,
        "head_seq": d.head.seq if d.head else None,
    }


def _token(args: argparse.Namespace) -> int:
    from hirmem.api.tokens import TokenStore

    tokens = TokenStore(args.database)
    try:
        if args.token_command == "create":
            token, row = tokens.create(args.name, args.scope, args.tenant)
            print(token)
            print(f"token {row.id} for {row.name} (scope {row.scope}, tenant {row.tenant}); "
                  "shown once, kept only as its SHA-256", file=sys.stderr)  # fmt: skip
            return 0
        if args.token_command == "revoke":
            row = tokens.revoke(args.id)
            print(f"token {row.id} ({row.name}) revoked")
            return 0
        rows = tokens.list()
        if args.json:
            print(json.dumps([vars_of(r) for r in rows], indent=2))
            return 0
        for r in rows:
            state = "revoked" if r.revoked_ms is not None else "live"
            print(f"{r.id}  {r.name:<16} {r.scope:<7} {r.tenant:<10} {state}")
        return 0
    finally:
        tokens.close()


def vars_of(row: object) -> dict[str, object]:
    from dataclasses import asdict, is_dataclass

    assert is_dataclass(row) and not isinstance(row, type)
    return asdict(row)


def _keys(args: argparse.Namespace) -> int:
    key = SigningKey.generate()
    write_key_file(args.out, key)
    print(f"host key {key.kid.hex()} written to {args.out} (mode 0600)")
    print(f"public key (for `hirmem provision --host-public`): {key.public.raw.hex()}")
    return 0


def _facts(args: argparse.Namespace) -> list[KnowledgeItem]:
    rows: list[list[object]] = []
    for text in args.fact:
        parts = text.split("|")
        if len(parts) not in (3, 4):
            raise HirmemError(f"--fact {text!r}: give subject|predicate|object[|confidence]")
        rows.append([*parts[:3], float(parts[3]) if len(parts) == 4 else 1.0])
    if args.facts is not None:
        rows.extend(json.loads(args.facts.read_text(encoding="utf-8")))
    items = []
    for row in rows:
        s, p, o, conf = [*list(row), 1.0][:4]
        c = float(conf)  # type: ignore[arg-type]
        if not 0.0 <= c <= 1.0:
            raise HirmemError(f"confidence {c} of ({s}, {p}, {o}) is not in 0..1")
        tid = bytes.fromhex(triple_id(str(s), str(p), str(o)))
        items.append(KnowledgeItem(tid, str(s), str(p), str(o), round(c * 0x10000)))
    if not items:
        raise HirmemError("nothing to push: give --fact or --facts")
    return items


MAX_FRAME_LIMIT = 4096  # the largest frame a daemon offers (host.max_frame)


def _push(args: argparse.Namespace) -> int:
    key = read_key_file(args.key)
    host_id = _hex(args.host_id, ID_SIZE, "--host-id")
    items = _facts(args)
    with Store(args.database) as store:

        def deliverable(pack: Pack) -> None:
            cannot = undeliverable(store, pack, MAX_FRAME_LIMIT)
            if cannot and not args.anyway:
                lines = "".join(f"\n  - device {d.hex()}: {why}" for d, why in cannot.items())
                raise HirmemError(
                    f"knowledge version {pack.seq} ({len(pack.encoded)} bytes) cannot reach "
                    f"every device, as their last HELLO describes them:{lines}\n"
                    "nothing was kept; push fewer facts, or give --anyway"
                )

        pack = sign_knowledge(store, key, host_id, items, now_ms(), check=deliverable)
    print(
        f"knowledge version {pack.seq} ({len(items)} facts, {len(pack.encoded)} bytes) "
        f"signed by {key.kid.hex()}; the daemon delivers it"
    )
    return 0


def status_rows(store: Store) -> list[dict[str, object]]:
    """One dict per registered device: identity, session, stored data, key counters."""
    sessions = store.sessions()
    names = store.session_names()
    outbox = store.outbox_status()  # None: no fleet outbox was ever enabled
    now = now_ms()
    rows: list[dict[str, object]] = []
    for d in store.devices():
        c = store.counters(d.device_id)
        url, state, since = sessions.get(d.device_id, ("", "never connected", now))
        held = [k for k in store.device_knowledge(d.device_id) if k[1] in ("accepted", "duplicate")]
        refused = sum(r.offers for r in store.refusals(d.device_id))
        rows.append(
            {
                "device": d.device_id.hex(),
                "name": names.get(d.device_id, ""),
                "board": d.board,
                "firmware": d.firmware,
                "boot": d.boot,
                "session": state,
                "url": url,
                "since_s": round((now - since) / 1000, 1),
                "last_seen_s": None
                if d.last_seen is None
                else round((now - d.last_seen) / 1000, 1),
                "packs": store.count_packs(d.device_id),
                "records": store.count_records(d.device_id),
                "conflicts": store.count_record_conflicts(d.device_id),
                "refused": refused,
                "frames_good": c.get("frames_good", 0),
                "frames_bad": sum(v for k, v in c.items() if k.startswith("frames_bad.")),
                "retransmissions": c.get("retransmissions", 0),
                "evictions": c.get("device.evictions", 0),
                "device_refusals": c.get("device.refusals", 0),
                "knowledge": max((k[0] for k in held), default=0),
                **_fleet_fields(outbox, d.device_id, now),
            }
        )
    return rows


def _fleet_fields(outbox: OutboxStatus | None, device_id: bytes, now: int) -> dict[str, object]:
    """A device's part of the fleet outbox (all None when there is no outbox)."""
    if outbox is None:
        return dict.fromkeys(("fleet_unsent", "fleet_unsent_oldest_s", "fleet_full",
                              "fleet_error"))  # fmt: skip
    unsent, oldest = outbox.per_device.get(device_id, (0, None))
    return {
        "fleet_unsent": unsent,
        "fleet_unsent_oldest_s": None if oldest is None else round((now - oldest) / 1000, 1),
        "fleet_full": outbox.full,
        "fleet_error": outbox.last_error,
    }


def outbox_line(outbox: OutboxStatus, now: int) -> str:
    """The fleet outbox in one line of ``hirmem status``."""
    oldest = "" if outbox.oldest_received is None else (
        f", oldest {(now - outbox.oldest_received) / 1000:.1f} s"
    )  # fmt: skip
    line = (
        f"fleet outbox to {outbox.url}: {outbox.depth} packs unsent ({outbox.size} bytes"
        f"{oldest}); bound {outbox.max_packs} packs / {outbox.max_bytes} bytes; "
        f"acked {outbox.acked}, refused {outbox.refused}, failed attempts {outbox.errors}"
    )
    if outbox.full_since is not None:
        line += (
            f"; FULL for {(now - outbox.full_since) / 1000:.1f} s: intake defers new packs "
            f"({outbox.deferred} deferred so far)"
        )
    if outbox.last_error is not None and outbox.last_error_at is not None:
        line += (
            f"; last fleet error {(now - outbox.last_error_at) / 1000:.1f} s ago: "
            f"{outbox.last_error}"
        )
    return line


def _status(args: argparse.Namespace) -> int:
    with _open_existing(args.database, args.create) as store:
        rows = status_rows(store)
        warnings = store.integrity_warnings()
        outbox = store.outbox_status()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no devices registered (hirmem device add)")
        if outbox is not None:
            print(outbox_line(outbox, now_ms()))
        return 0
    cols = (
        "device",
        "board",
        "boot",
        "session",
        "packs",
        "records",
        "conflicts",
        "refused",
        "frames_good",
        "frames_bad",
        "retransmissions",
        "evictions",
        "device_refusals",
        "knowledge",
        "name",
    )
    head = {
        "frames_good": "frames ok",
        "frames_bad": "bad",
        "retransmissions": "resent",
        "device_refusals": "dev refused",
        "knowledge": "know.",
    }
    table = [[head.get(c, c) for c in cols]] + [[str(r[c]) for c in cols] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    for n, row in enumerate(table):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))
    for warning in warnings:
        print(f"warning: {warning} (hirmem intake lists them)")
    if outbox is not None:
        print(outbox_line(outbox, now_ms()))
    return 0


def _outbox(args: argparse.Namespace) -> int:
    device = _hex(args.device, ID_SIZE, "--device") if args.device else None
    if device is not None and not args.requeue:
        raise HirmemError("--device selects the packs --requeue sends again; add --requeue")
    with _open_existing(args.database, args.create) as store:
        requeued = store.outbox_requeue(device) if args.requeue else None
        outbox = store.outbox_status()
        refusals = store.fleet_refusals()
    if args.json:
        print(json.dumps({
            "outbox": None if outbox is None else {
                "url": outbox.url, "depth": outbox.depth, "bytes": outbox.size,
                "oldest_received_ms": outbox.oldest_received, "max_packs": outbox.max_packs,
                "max_bytes": outbox.max_bytes, "full_since_ms": outbox.full_since,
                "acked": outbox.acked, "refused": outbox.refused, "errors": outbox.errors,
                "deferred": outbox.deferred, "last_ok_ms": outbox.last_ok_at,
                "last_error": outbox.last_error, "last_error_ms": outbox.last_error_at,
            },
            "refusals": [{"pack_id": r.pack_id.hex(), "device": r.device_id.hex(),
                          "status": r.status, "reason": r.reason, "detail": r.detail,
                          "at_ms": r.at} for r in refusals],
            "requeued": requeued,
        }, indent=2))  # fmt: skip
        return 0
    if outbox is None:
        print("no fleet outbox: add a [fleet] table to the daemon's configuration")
        return 0
    print(outbox_line(outbox, now_ms()))
    for r in refusals:
        print(f"refused pack {r.pack_id.hex()} device {r.device_id.hex()}: {r.status} "
              f"{r.reason}: {r.detail}")  # fmt: skip
    if requeued is not None:
        print(f"{requeued} refused pack{'s' if requeued != 1 else ''} queued again")
    return 0


def _intake(args: argparse.Namespace) -> int:
    with _open_existing(args.database, args.create) as store:
        device = _hex(args.device, ID_SIZE, "--device") if args.device else None
        if args.json:
            return _intake_json(store, device, args.records, args.check)
        for p in store.packs(device):
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(p.received / 1000))
            print(
                f"pack {p.pack_id.hex()} device {p.device_id.hex()} seq {p.seq:#x} "
                f"{p.nrecords} records, received {when}Z"
            )
        if args.records:
            for rec in _records(store, device):
                print(
                    f"  record {rec.id.hex()} {rec.source} ts {rec.timestamp} "
                    f"rn {rec.rn / 65536:.3f} state {rec.state}"
                )
        for r in store.refusals(device):
            print(
                f"refused {r.sha256.hex()[:16]} device {r.device_id.hex()} "
                f"{Reason(r.reason).name.lower()} x{r.offers}: {r.detail}"
            )
        for rid, pack_id, idx, digest in _conflicts(store, device):
            print(
                f"conflict record {rid.hex()} in pack {pack_id.hex()} #{idx} hash "
                f"{digest.hex()[:16]}: the id is held by another record; kept apart"
            )
        if args.check:
            problems = store.check_integrity()
            warnings = store.integrity_warnings()
            if not problems and not warnings:
                print("integrity: ok")
                return 0
            if problems:
                print("integrity: " + "; ".join(problems))
            if warnings:
                print(f"integrity: {len(warnings)} warning{'s' if len(warnings) != 1 else ''}: "
                      + "; ".join(warnings))  # fmt: skip
            return 1
    return 0


def _records(store: Store, device: bytes | None) -> Iterator[Record]:
    for rec, _ in store.iter_records():
        if device is None or rec.id[:ID_SIZE] == device:
            yield rec


def _conflicts(store: Store, device: bytes | None) -> list[tuple[bytes, bytes, int, bytes]]:
    return [c for c in store.record_conflicts() if device is None or c[0][:ID_SIZE] == device]


def _intake_json(store: Store, device: bytes | None, records: bool, check: bool) -> int:
    """``intake --json``: one object with the packs, refusals, conflicts (and the records,
    the integrity check when asked); the exit status is the table's."""
    out: dict[str, object] = {
        "packs": [
            {"pack": p.pack_id.hex(), "device": p.device_id.hex(), "seq": p.seq,
             "records": p.nrecords, "received_ms": p.received}
            for p in store.packs(device)
        ],
        "refusals": [
            {"sha256": r.sha256.hex(), "device": r.device_id.hex(),
             "reason": Reason(r.reason).name.lower(), "offers": r.offers, "detail": r.detail,
             "size": r.size, "first_ms": r.first_at, "last_ms": r.last_at}
            for r in store.refusals(device)
        ],
        "conflicts": [
            {"record": rid.hex(), "pack": pack_id.hex(), "index": idx, "hash": digest.hex()}
            for rid, pack_id, idx, digest in _conflicts(store, device)
        ],
    }  # fmt: skip
    if records:
        out["records"] = [
            {"record": r.id.hex(), "source": r.source, "timestamp": r.timestamp,
             "rn": r.rn / 65536, "state": r.state}
            for r in _records(store, device)
        ]  # fmt: skip
    rc = 0
    if check:
        problems, warnings = store.check_integrity(), store.integrity_warnings()
        out["integrity"] = {"ok": not problems and not warnings, "problems": problems,
                            "warnings": warnings}  # fmt: skip
        rc = 0 if not problems and not warnings else 1
    print(json.dumps(out, indent=2))
    return rc
