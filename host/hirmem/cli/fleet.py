"""``hirmem fleet …``: the fleet node and its registry.

    hirmem fleet serve [--database-dir fleet] [--host 127.0.0.1] [--port 8470] [--workers N]
    hirmem fleet tenant add NAME [--postgres CONNINFO [--pg-database DB]] [--json]
    hirmem fleet tenant list [--json]
    hirmem fleet tenant move NAME --postgres CONNINFO   # after a failover
    hirmem fleet tenant key NAME --out FILE     # its checkpoint key, for hirmem memory --key
    hirmem fleet gateway add --tenant T (--public-key HEX | --key FILE [--new-key]) [--json]
    hirmem fleet gateway revoke KEYID
    hirmem fleet gateway list [--json]
    hirmem fleet device add --tenant T --device-id HEX (--public-key HEX | --key FILE) [--json]
    hirmem fleet device revoke --tenant T --device-id HEX
    hirmem fleet status [--json]                    # per tenant: devices, packs, refusals
    hirmem fleet consolidate [--tenant T] [--every S]
    hirmem fleet recall --tenant T TEXT [-k 5] [--json]
    hirmem fleet token create --tenant T [--scope read|review|admin] [--name N]
    hirmem fleet token list [--json]
    hirmem fleet token revoke ID
    hirmem fleet registry migrate --registry CONNINFO  # fleet.db → PostgreSQL
    hirmem fleet registry reseal --new-secret-file FILE   # rotate the fleet secret

The fleet's directory (``--database-dir``) holds the registry (``fleet.db``), the SQLite
tenant stores and the consolidation's memory and semantic files; its default is
``$HIRMEM_FLEET_DIR``, then ``fleet.directory`` of ``--config``, then ``fleet``. A
directory without a registry is an error for every command but ``tenant add`` (which
creates it) unless ``--create`` is given.

A fleet served by nodes on several machines keeps its registry on PostgreSQL:
``--registry CONNINFO`` (a libpq conninfo or ``postgresql://`` URI of the registry's
database; default ``$HIRMEM_FLEET_REGISTRY``, then ``fleet.registry`` of ``--config``),
the same on every node and every command. Its tenants' checkpoint keys are sealed there
with the fleet secret: ``$HIRMEM_FLEET_SECRET`` or ``--secret-file FILE`` (default
``fleet.secret_file`` of ``--config``), the same on every node.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from hirmem.cli import options
from hirmem.fleet.registry import ENV_REGISTRY, safe_conninfo
from hirmem.fleet.sealing import ENV_SECRET
from hirmem.protocol.errors import HirmemError
from hirmem.protocol.keys import ID_SIZE, SigningKey, read_key_file, write_key_file

__all__ = ["add_parser", "run"]

ENV_DIR = "HIRMEM_FLEET_DIR"
DEFAULT_PORT = 8470


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "fleet", help="the fleet node: serve gateway uploads; tenants, gateways, devices"
    )
    _dir_option(p)
    sub = p.add_subparsers(dest="fleet_command", required=True)

    serve = _leaf(
        sub, "serve", help="serve PUT /v1/packs/{id}, GET /v1/healthz, the API and dashboard"
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT)
    serve.add_argument("--workers", type=int, default=1, help="fleet-node processes")
    serve.add_argument("--max-body", type=int, default=65536, help="largest upload, bytes")
    serve.add_argument(
        "--max-inflight",
        type=int,
        default=64,
        help="uploads judged at once per process (more: 503 + Retry-After)",
    )
    serve.add_argument(
        "--consolidate-every",
        type=float,
        default=2.0,
        metavar="S",
        help="run consolidation in the server every S seconds (0: off; "
        "with --workers > 1 run `hirmem fleet consolidate` beside it)",
    )
    serve.add_argument("--pg-pool", type=int, default=8, help="connections per PostgreSQL tenant")
    serve.add_argument("--ssl-certfile", help="serve HTTPS with this certificate (PEM)")
    serve.add_argument("--ssl-keyfile", help="the certificate's private key (PEM)")

    tenant = sub.add_parser("tenant", help="tenants: add, list")
    tsub = tenant.add_subparsers(dest="tenant_command", required=True)
    tadd = _leaf(tsub, "add", table=True, help="a tenant with its own store")
    tadd.add_argument("name")
    tadd.add_argument(
        "--postgres",
        metavar="CONNINFO",
        help="put its store in a new database on this PostgreSQL cluster "
        "(libpq conninfo of a maintenance database); default: a SQLite file",
    )
    tadd.add_argument("--pg-database", help="the new database's name (default hirmem_<name>)")
    _leaf(tsub, "list", table=True, help="tenants and where their stores are")
    tmove = _leaf(
        tsub,
        "move",
        table=True,
        help="point a PostgreSQL tenant at the server now holding its database",
    )
    tmove.add_argument("name")
    tmove.add_argument(
        "--postgres",
        required=True,
        metavar="CONNINFO",
        help="the tenant database's conninfo there (a promoted standby, ...)",
    )

    tkey = _leaf(
        tsub,
        "key",
        help="write a tenant's memory checkpoint key to a key file (mode 0600), for "
        "`hirmem memory --memory postgresql://… --key FILE`",
    )
    tkey.add_argument("name")
    tkey.add_argument("--out", type=Path, required=True, metavar="FILE")

    gw = sub.add_parser("gateway", help="gateways: add, revoke, list")
    gsub = gw.add_subparsers(dest="gateway_command", required=True)
    gadd = _leaf(gsub, "add", table=True, help="register a gateway's Ed25519 public key")
    gadd.add_argument("--tenant", required=True)
    _key_options(gadd, new=True)
    gadd.add_argument("--label", default="")
    grev = _leaf(gsub, "revoke", help="refuse a gateway's requests from now on")
    grev.add_argument("keyid", help="the gateway's keyid (16 hex digits)")
    _leaf(gsub, "list", table=True, help="gateways by tenant")

    dev = sub.add_parser("device", help="device keys of a tenant")
    dsub = dev.add_subparsers(dest="device_command", required=True)
    dadd = _leaf(dsub, "add", table=True, help="trust a device's key for a tenant")
    dadd.add_argument("--tenant", required=True)
    dadd.add_argument("--device-id", required=True, help="16 hex digits")
    _key_options(dadd, new=False)
    dadd.add_argument("--label", default="")
    drev = _leaf(dsub, "revoke", help="refuse a device's packs from now on (its stored ones stay)")
    drev.add_argument("--tenant", required=True)
    drev.add_argument("--device-id", required=True, help="16 hex digits")

    _leaf(sub, "status", table=True, help="per tenant: devices, packs, records, refusals")
    cons = _leaf(
        sub,
        "consolidate",
        table=True,
        help="run the memory engine and the substrate over accepted packs",
    )
    cons.add_argument("--tenant", help="one tenant (default: every tenant)")
    cons.add_argument(
        "--every",
        type=float,
        default=0.0,
        metavar="S",
        help="keep running, a round every S seconds (0: one round)",
    )
    rec = _leaf(sub, "recall", table=True, help="recall across a tenant's devices, traced")
    rec.add_argument("--tenant", required=True)
    rec.add_argument("text")
    rec.add_argument("-k", type=int, default=5)

    tok = sub.add_parser("token", help="API bearer tokens, each bound to one tenant")
    toksub = tok.add_subparsers(dest="token_command", required=True)
    tc = _leaf(toksub, "create", help="a new token, printed once (kept hashed)")
    tc.add_argument("--tenant", required=True, help="the one tenant whose data it reaches")
    tc.add_argument(
        "--scope",
        choices=("read", "review", "admin"),
        default="read",
        help="read < review (decide quarantined memories) < admin (admit)",
    )
    tc.add_argument("--name", help="who holds it, the steward of its reviews (default T-SCOPE)")
    _leaf(toksub, "list", table=True, help="the tokens (never their secrets)")
    tr = _leaf(toksub, "revoke", help="stop accepting a token")
    tr.add_argument("id", help="the token's id (16 hex digits, `fleet token list`)")

    reg = sub.add_parser("registry", help="the registry itself: move it to PostgreSQL")
    regsub = reg.add_subparsers(dest="registry_command", required=True)
    _leaf(
        regsub,
        "migrate",
        table=True,
        help="copy the directory's fleet.db (and its PostgreSQL tenants' checkpoint key "
        "files, sealed) into the empty PostgreSQL registry --registry names",
    )
    reseal = _leaf(
        regsub,
        "reseal",
        help="rotate the fleet secret: seal every checkpoint key again under a new one",
    )
    reseal.add_argument(
        "--new-secret-file", type=Path, required=True, metavar="FILE", help="the new secret"
    )
    return p


def _dir_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--database-dir",
        type=Path,
        default=argparse.SUPPRESS,
        metavar="DIR",
        help=f"the fleet's directory (default: ${ENV_DIR}, fleet.directory of --config, fleet)",
    )
    p.add_argument(
        "--registry",
        default=argparse.SUPPRESS,
        metavar="CONNINFO",
        help=f"the registry on PostgreSQL, shared by every node (default: ${ENV_REGISTRY}, "
        "fleet.registry of --config; none: DIR/fleet.db)",
    )
    p.add_argument(
        "--secret-file",
        type=Path,
        default=argparse.SUPPRESS,
        metavar="FILE",
        help=f"the fleet secret sealing checkpoint keys in a PostgreSQL registry (default: "
        f"${ENV_SECRET}, fleet.secret_file of --config)",
    )
    options.add_config(p)
    options.add_create(p)


def _leaf(sub: Any, name: str, *, table: bool = False, help: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(name, help=help)
    _dir_option(p)
    if table:
        options.add_json(p)
    return p


def _key_options(p: argparse.ArgumentParser, *, new: bool) -> None:
    p.add_argument("--public-key", metavar="HEX", help="the Ed25519 public key, 64 hex digits")
    p.add_argument("--key", type=Path, metavar="FILE", help="a hirmem key file (its public key)")
    if new:
        p.add_argument(
            "--new-key",
            action="store_true",
            help="create the key file --key names first (mode 0600)",
        )


def _config_value(args: argparse.Namespace, key: str) -> tuple[str, Path] | None:
    """``fleet.<key>`` of the ``--config`` TOML file (a string) and the file's path."""
    config = getattr(args, "config_toml", None)
    if config is None:
        return None
    try:
        doc = tomllib.loads(Path(config).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise HirmemError(f"--config {config}: cannot read it as TOML: {exc}") from None
    fleet = doc.get("fleet")
    value = fleet.get(key) if isinstance(fleet, dict) else None
    if value is None:
        return None
    if not isinstance(value, str):
        raise HirmemError(f"--config {config}: fleet.{key} must be a string")
    return value, Path(config)


def directory(args: argparse.Namespace, environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    given = getattr(args, "database_dir", None)
    if given is not None:
        return Path(given)
    if env.get(ENV_DIR):
        return Path(env[ENV_DIR])
    found = _config_value(args, "directory")
    if found is not None:
        return found[1].resolve().parent / found[0]
    return Path("fleet")


def registry_conninfo(
    args: argparse.Namespace, environ: dict[str, str] | None = None
) -> str | None:
    """The PostgreSQL registry's conninfo (``--registry``, ``$HIRMEM_FLEET_REGISTRY``,
    ``fleet.registry``), None for the directory's ``fleet.db``."""
    env = os.environ if environ is None else environ
    given = getattr(args, "registry", None)
    if given:
        return str(given)
    if env.get(ENV_REGISTRY):
        return env[ENV_REGISTRY]
    found = _config_value(args, "registry")
    return found[0] if found is not None else None


def fleet_secret(args: argparse.Namespace) -> bytes | None:
    """The fleet secret: ``--secret-file``, ``$HIRMEM_FLEET_SECRET``, ``fleet.secret_file``."""
    from hirmem.fleet.sealing import read_secret

    given = getattr(args, "secret_file", None)
    if given is not None:
        return read_secret(given)
    from_env = read_secret()
    if from_env is not None:
        return from_env
    found = _config_value(args, "secret_file")
    return None if found is None else read_secret(found[1].resolve().parent / found[0])


def _public_key(args: argparse.Namespace) -> bytes:
    if (args.public_key is None) == (args.key is None):
        raise HirmemError("give exactly one of --public-key HEX and --key FILE")
    if args.public_key is not None:
        try:
            raw = bytes.fromhex(args.public_key)
        except ValueError:
            raise HirmemError("--public-key: not hexadecimal") from None
        if len(raw) != 32:
            raise HirmemError(
                f"--public-key: an Ed25519 public key is 64 hex digits, got {len(args.public_key)}"
            )
        return raw
    if getattr(args, "new_key", False):
        write_key_file(args.key, SigningKey.generate())
    return read_key_file(args.key).public.raw


def _emit(args: argparse.Namespace, data: Any, lines: list[str]) -> None:
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        for line in lines:
            print(line)


def run(args: argparse.Namespace) -> int:
    from hirmem.fleet.registry import Registry

    cmd = args.fleet_command
    where = directory(args)
    conninfo = registry_conninfo(args)
    secret = fleet_secret(args)
    if cmd == "registry" and args.registry_command == "reseal":
        from hirmem.fleet.sealing import read_secret

        if conninfo is None:
            raise HirmemError("registry reseal: only a PostgreSQL registry (--registry) seals keys")
        new_secret = read_secret(args.new_secret_file)
        assert new_secret is not None  # a file was named
        reg = Registry(where, 1, registry=conninfo, secret=secret, create=False)
        try:
            count = reg.reseal(new_secret)
        finally:
            reg.close()
        print(f"{count} checkpoint keys sealed under the new secret: give it to every node")
        return 0
    if cmd == "registry":
        return _migrate(args, where, conninfo, secret)
    creating = (cmd == "tenant" and args.tenant_command == "add") or args.create
    if conninfo is None and not (where / "fleet.db").exists() and not creating:
        raise HirmemError(
            f"{where}: no fleet registry here (a mistyped --database-dir? "
            "`hirmem fleet tenant add` creates one; --create starts an empty one)"
        )
    if cmd == "serve":
        # the registry checked before the server starts: a wrong one fails with its reason
        Registry(where, 1, registry=conninfo, secret=secret, create=creating).close()
        return _serve(args, where, conninfo, secret)
    reg = Registry(where, registry=conninfo, secret=secret, create=creating)
    try:
        if cmd == "tenant":
            return _tenant(args, reg)
        if cmd == "gateway":
            return _gateway(args, reg)
        if cmd == "device" and args.device_command == "revoke":
            reg.revoke_device(args.tenant, _device_id(args.device_id))
            print(f"device {args.device_id} revoked for tenant {args.tenant}")
            return 0
        if cmd == "device":
            device_id = _device_id(args.device_id)
            reg.add_device(args.tenant, device_id, _public_key(args), args.label)
            data = {"tenant": args.tenant, "device": device_id.hex()}
            _emit(args, data, [f"device {device_id.hex()} trusted for tenant {args.tenant}"])
            return 0
        if cmd == "status":
            return _status(args, reg)
        if cmd == "consolidate":
            return _consolidate(args, reg, where)
        if cmd == "recall":
            return _recall(args, reg, where)
        if cmd == "token":
            return _token(args, reg, where)
    finally:
        reg.close()
    raise HirmemError(f"unknown fleet command {cmd}")


def _device_id(text: str) -> bytes:
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raise HirmemError("--device-id: not hexadecimal") from None
    if len(raw) != ID_SIZE:
        raise HirmemError(f"--device-id: {2 * ID_SIZE} hex digits, got {len(text)}")
    return raw


def _tenant(args: argparse.Namespace, reg: Any) -> int:
    if args.tenant_command == "key":
        if reg.tenant(args.name) is None:
            raise HirmemError(f"no tenant {args.name}")
        key = reg.checkpoint_key(args.name)
        write_key_file(args.out, key)
        print(f"tenant {args.name}: checkpoint key {key.kid.hex()} written to {args.out}")
        return 0
    if args.tenant_command == "add":
        rows = [reg.add_tenant(args.name, args.postgres, args.pg_database)]
    elif args.tenant_command == "move":
        rows = [reg.move_tenant(args.name, args.postgres)]
    else:
        rows = reg.tenants()
    data = [
        {"tenant": t.name, "backend": t.backend, "location": safe_conninfo(t.location)}
        for t in rows
    ]
    _emit(args, data, [f"{d['tenant']:<20} {d['backend']:<9} {d['location']}" for d in data])
    return 0


def _gateway(args: argparse.Namespace, reg: Any) -> int:
    if args.gateway_command == "revoke":
        reg.revoke_gateway(args.keyid)
        print(f"gateway {args.keyid} revoked")
        return 0
    if args.gateway_command == "add":
        rows = [reg.add_gateway(args.tenant, _public_key(args), args.label)]
    else:
        rows = reg.gateways()
    data = [
        {
            "keyid": g.keyid,
            "tenant": g.tenant,
            "public_key": g.public_key.hex(),
            "revoked": g.revoked,
        }
        for g in rows
    ]
    _emit(
        args,
        data,
        [f"{d['keyid']} {d['tenant']:<20} {'revoked' if d['revoked'] else 'active'}" for d in data],
    )
    return 0


def _status(args: argparse.Namespace, reg: Any) -> int:
    data = []
    for t in reg.tenants():
        store = reg.store(t.name)
        counts = store.counts()
        data.append(
            {
                "tenant": t.name,
                "backend": t.backend,
                **counts,
                "open_jobs": store.open_jobs(),
                "refusals": store.refusal_counts(),
            }
        )
    summary = {"tenants": data, "refusals_before_tenant": reg.refusal_counts()}
    lines = [
        f"{d['tenant']:<20} {d['backend']:<9} devices {d['devices']:>5}  packs "
        f"{d['packs']:>8}  records {d['records']:>9}  open jobs {d['open_jobs']:>6}  "
        f"refused {sum(d['refusals'].values()):>6}"
        for d in data
    ]
    lines.append(f"refused before a tenant was known: {summary['refusals_before_tenant']}")
    _emit(args, summary, lines)
    return 0


def _consolidate(args: argparse.Namespace, reg: Any, where: Path) -> int:
    from hirmem.fleet.consolidate import Consolidator

    worker = Consolidator(
        where, f"cli-{os.getpid()}", locate=reg.postgres_of, key_of=reg.checkpoint_key
    )
    try:
        while True:
            names = [args.tenant] if args.tenant else [t.name for t in reg.tenants()]
            out = {}
            for name in names:
                store = reg.store(name)
                total = {
                    "packs": 0,
                    "admitted": 0,
                    "quarantined": 0,
                    "duplicates": 0,
                    "assertions": 0,
                }
                while (r := worker.run(name, store)).packs:
                    for key in total:
                        total[key] += getattr(r, key)
                out[name] = total
            _emit(
                args,
                out,
                [
                    f"{n}: {v['packs']} packs, {v['admitted']} admitted, "
                    f"{v['quarantined']} quarantined, {v['duplicates']} duplicates, "
                    f"{v['assertions']} assertions"
                    for n, v in out.items()
                ],
            )
            if args.every <= 0:
                return 0
            sys.stdout.flush()
            time.sleep(args.every)
    finally:
        worker.close()


def _recall(args: argparse.Namespace, reg: Any, where: Path) -> int:
    from hirmem.fleet.consolidate import Consolidator

    if reg.tenant(args.tenant) is None:
        raise HirmemError(f"no tenant {args.tenant}")
    worker = Consolidator(
        where, f"cli-{os.getpid()}", locate=reg.postgres_of, key_of=reg.checkpoint_key
    )
    try:
        hits = worker.recall(args.tenant, reg.store(args.tenant), args.text, args.k)
    finally:
        worker.close()
    data = [
        {
            "record": h.record,
            "text": h.text,
            "score": round(h.score, 6),
            "device": h.device,
            "pack": h.pack,
            "kid": h.kid,
        }
        for h in hits
    ]
    _emit(
        args,
        data,
        [
            f"{h.score:.3f}  {h.text[:60]:<60}  record {h.record}  "
            f"pack {h.pack}  device {h.device}  key {h.kid}"
            for h in hits
        ],
    )
    return 0


def _token(args: argparse.Namespace, reg: Any, where: Path) -> int:
    from hirmem.fleet.serving import create_token, token_store

    tokens = token_store(reg)
    try:
        if args.token_command == "create":
            name = args.name or f"{args.tenant}-{args.scope}"
            token, row = create_token(reg, tokens, args.tenant, name, args.scope)
            print(token)
            print(
                f"token {row.id} for {row.name} (scope {row.scope}, tenant {row.tenant}); "
                "shown once, kept only as its SHA-256",
                file=sys.stderr,
            )
            return 0
        if args.token_command == "revoke":
            row = tokens.revoke(args.id)
            print(f"token {row.id} ({row.name}) revoked")
            return 0
        data = [
            {
                "id": r.id,
                "name": r.name,
                "tenant": r.tenant,
                "scope": r.scope,
                "created_ms": r.created_ms,
                "revoked_ms": r.revoked_ms,
            }
            for r in tokens.list()
        ]
        _emit(
            args,
            data,
            [
                f"{d['id']}  {d['name']:<16} {d['scope']:<7} {d['tenant']:<20} "
                f"{'revoked' if d['revoked_ms'] is not None else 'live'}"
                for d in data
            ],
        )
        return 0
    finally:
        tokens.close()


def _migrate(
    args: argparse.Namespace, where: Path, conninfo: str | None, secret: bytes | None
) -> int:
    from hirmem.fleet.registry import migrate

    if conninfo is None:
        raise HirmemError(
            "registry migrate: name the PostgreSQL registry to copy into "
            f"(--registry CONNINFO or ${ENV_REGISTRY})"
        )
    copied = migrate(where, conninfo, secret)
    _emit(
        args,
        copied,
        [f"{table}: {n} rows copied" for table, n in copied.items()]
        + [
            f"{where / 'fleet.db'} was only read: serve every node with --registry now "
            "(and the same fleet secret)"
        ],
    )
    return 0


def _serve(
    args: argparse.Namespace, where: Path, conninfo: str | None, secret: bytes | None
) -> int:
    import uvicorn

    from hirmem.fleet.app import FleetConfig, create_app

    if args.workers < 1:
        raise HirmemError("--workers: at least 1")
    ssl = {"ssl_certfile": args.ssl_certfile, "ssl_keyfile": args.ssl_keyfile}
    if args.workers == 1:
        config = FleetConfig(
            where,
            max_body=args.max_body,
            max_inflight=args.max_inflight,
            pg_pool=args.pg_pool,
            consolidate_every=args.consolidate_every,
            registry=conninfo,
            secret=secret,
        )
        uvicorn.run(create_app(config), host=args.host, port=args.port, log_level="warning", **ssl)
        return 0
    # several processes: uvicorn imports the app factory in each; settings by environment
    os.environ.update(
        {
            "HIRMEM_FLEET_DIR": str(where.resolve()),
            "HIRMEM_FLEET_MAX_BODY": str(args.max_body),
            "HIRMEM_FLEET_MAX_INFLIGHT": str(args.max_inflight),
            "HIRMEM_FLEET_PG_POOL": str(args.pg_pool),
            ENV_REGISTRY: conninfo or "",
        }
    )
    if secret is not None:
        os.environ[ENV_SECRET] = secret.decode("utf-8", errors="surrogateescape")
    uvicorn.run(
        "hirmem.fleet.app:app_from_env",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level="warning",
        **ssl,
    )
    return 0
