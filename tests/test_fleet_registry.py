"""The fleet registry on SQLite and on PostgreSQL (shared by nodes on several machines):
the same semantics on both (revocation from the next request, the refusal bound with
every refusal counted, device claims that two processes cannot both win), the tenants'
checkpoint keys sealed in a PostgreSQL registry, the migration of a ``fleet.db``, and two
fleet-node processes — two machines, each its own directory — serving one PostgreSQL
tenant whose one audit chain both sign and both verify."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import fleet_kit
from fleet_kit import BACKENDS, Gateway, free_port, wait_healthy
from hirmem.cli.entry import main
from hirmem.emulation import postgres
from hirmem.fleet import registry as registry_module
from hirmem.fleet.app import FleetConfig
from hirmem.fleet.registry import Registry, RegistryError, create_database
from hirmem.fleet.sealing import SealError, open_key, seal_key
from hirmem.fleet.serving import create_token, token_store
from hirmem.memory.engine import MemoryEngine
from hirmem.protocol.keys import SigningKey, derive_test_key, read_key_file, write_key_file
from hirmem.protocol.records import Record
from hirmem.sql import PgTarget
from test_store import Device

pg = fleet_kit.pg  # the PostgreSQL primary of the module (a fixture)

ROOT = Path(__file__).resolve().parents[1]
SECRET = b"a fleet secret of the test run, 32+"


def fresh_db(cluster: postgres.Primary, prefix: str) -> str:
    return create_database(cluster.dsn, f"{prefix}_{secrets.token_hex(4)}")


class World:
    """A registry of either kind and how to add a tenant to it."""

    def __init__(self, kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        self.kind = kind
        self.cluster: postgres.Primary | None = None
        self.conninfo: str | None = None
        if kind == "postgres":
            self.cluster = request.getfixturevalue("pg")
            self.conninfo = fresh_db(self.cluster, "hirmem_registry")
        self.tmp_path = tmp_path

    def directory(self, node: str) -> Path:
        """A node's directory: its own machine's on PostgreSQL; on SQLite the nodes are
        processes of one machine sharing the directory (and its fleet.db)."""
        return self.tmp_path / (node if self.conninfo else "fleet")

    def open(self, node: str = "node1") -> Registry:
        return Registry(self.directory(node), registry=self.conninfo, secret=SECRET)

    def add_tenant(self, reg: Registry, name: str) -> None:
        if self.cluster is None:
            reg.add_tenant(name)
        else:
            reg.add_tenant(name, self.cluster.dsn, f"hirmem_{name}_{secrets.token_hex(4)}")


@pytest.fixture(params=BACKENDS)
def world(request: pytest.FixtureRequest, tmp_path: Path) -> World:
    return World(request.param, tmp_path, request)


def test_revocation_and_refusal_bound_hold_on_both(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    one, two = world.open("node1"), world.open("node2")
    try:
        world.add_tenant(one, "acme")
        gw = derive_test_key("registry gateway")
        one.add_gateway("acme", gw.public.raw)
        seen = two  # another node reads the same rows
        assert seen.gateway_key(gw.kid.hex()) is not None
        one.revoke_gateway(gw.kid.hex())
        assert seen.gateway_key(gw.kid.hex()) is None  # the next request is refused
        with pytest.raises(RegistryError, match="no active gateway"):
            seen.revoke_gateway(gw.kid.hex())
        with pytest.raises(RegistryError, match="already registered"):
            seen.add_gateway("acme", gw.public.raw)
        monkeypatch.setattr(registry_module, "KEPT", 40)
        for i in range(100):
            (one, two)[i % 2].refuse(401, "bad-signature" if i % 3 else "stale", "gw", f"#{i}")
        one.refuse(503, "overloaded", "", "57 uploads over the bound", 57)
        assert seen.refusals_kept() == 40  # bounded …
        assert seen.refusal_counts() == {"bad-signature": 66, "stale": 34, "overloaded": 57}
        newest = seen._rows("SELECT detail FROM refusals ORDER BY n DESC LIMIT 1")
        assert newest == [("57 uploads over the bound",)]  # … keeping the newest
    finally:
        one.close()
        two.close()


CLAIMS = """
import json, sys
from pathlib import Path
from hirmem.fleet.registry import Registry, RegistryError
from hirmem.protocol.keys import derive_test_key
directory, conninfo, tenant, n = sys.argv[1], sys.argv[2] or None, sys.argv[3], int(sys.argv[4])
reg = Registry(Path(directory), registry=conninfo)
print("ready", flush=True)
sys.stdin.readline()  # both start claiming at once
won = []
for d in range(n):
    key = derive_test_key(f"contested device {d}")
    try:
        reg.add_device(tenant, bytes([0xD0, 0, 0, 0, 0, 0, d >> 8, d & 255]), key.public.raw)
        won.append(d)
    except RegistryError as exc:
        assert "another tenant's" in str(exc), exc
reg.close()
print(json.dumps(won), flush=True)
"""


def test_two_processes_claiming_the_same_devices_cannot_both_win(world: World) -> None:
    """Two processes (two nodes) register the same device ids and keys, one for tenant A
    and one for tenant B, at once: each device is won by exactly one, and only the
    winner's store trusts its key."""
    n = 60
    reg = world.open("node1")
    try:
        world.add_tenant(reg, "ta")
        world.add_tenant(reg, "tb")
    finally:
        reg.close()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "host"))
    procs = []
    for node, tenant in (("node1", "ta"), ("node2", "tb")):
        procs.append(subprocess.Popen(
            [sys.executable, "-c", CLAIMS, str(world.directory(node)), world.conninfo or "",
             tenant, str(n)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True,
        ))  # fmt: skip
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    won = []
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        won.append(set(json.loads(out)))
    assert won[0] & won[1] == set(), f"both won devices {sorted(won[0] & won[1])}"
    assert won[0] | won[1] == set(range(n))
    reg = world.open("node1")
    try:
        for tenant, mine in zip(("ta", "tb"), won, strict=True):
            held = {int.from_bytes(d.device_id[6:], "big") for d in reg.store(tenant).devices()}
            assert held == mine  # the loser's store never trusted a key it lost
            for d in mine:
                kid = derive_test_key(f"contested device {d}").kid
                assert reg.device_tenant(kid) == tenant
    finally:
        reg.close()


def test_checkpoint_keys_are_sealed_in_a_postgresql_registry(
    pg: postgres.Primary, tmp_path: Path
) -> None:
    conninfo = fresh_db(pg, "hirmem_registry")
    one = Registry(tmp_path / "node1", registry=conninfo, secret=SECRET)
    two = Registry(tmp_path / "node2", registry=conninfo, secret=SECRET)
    stranger = Registry(tmp_path / "node3", registry=conninfo, secret=b"another secret, 16+")
    blind = Registry(tmp_path / "node4", registry=conninfo)
    try:
        with pytest.raises(RegistryError, match="places its tenants on PostgreSQL"):
            one.add_tenant("local")
        one.add_tenant("acme", pg.dsn, f"hirmem_acme_{secrets.token_hex(4)}")
        key = two.checkpoint_key("acme")  # made by the first node to ask …
        assert one.checkpoint_key("acme").seed() == key.seed()  # … read by every other
        assert not (tmp_path / "node1" / "memory").exists()  # no key file anywhere
        [(kid, sealed)] = one._rows("SELECT kid, sealed FROM checkpoint_keys")
        assert bytes(kid) == key.kid and key.seed() not in bytes(sealed)
        with pytest.raises(SealError, match="does not open"):
            stranger.checkpoint_key("acme")
        with pytest.raises(SealError, match="HIRMEM_FLEET_SECRET"):
            blind.checkpoint_key("acme")
        with pytest.raises(SealError, match="does not open"):  # bound to its tenant
            open_key(SECRET, "other", bytes(sealed))
        # nodes asking for a new tenant's key at once all get the one that was stored
        one.add_tenant("brix", pg.dsn, f"hirmem_brix_{secrets.token_hex(4)}")
        nodes = [Registry(tmp_path / f"n{i}", 1, registry=conninfo, secret=SECRET)
                 for i in range(6)]  # fmt: skip
        seeds: list[bytes] = []
        barrier = threading.Barrier(len(nodes))

        def ask(reg: Registry) -> None:
            barrier.wait()
            seeds.append(reg.checkpoint_key("brix").seed())

        threads = [threading.Thread(target=ask, args=(reg,)) for reg in nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for reg in nodes:
            reg.close()
        assert len(seeds) == len(nodes) and len(set(seeds)) == 1
        assert open_key(SECRET, "x", seal_key(SECRET, "x", key)).seed() == key.seed()
    finally:
        for reg in (one, two, stranger, blind):
            reg.close()


def test_a_fleet_db_is_migrated_and_never_silently_ignored(
    pg: postgres.Primary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = tmp_path / "fleet"
    local = Registry(fleet)
    local.add_tenant("acme", pg.dsn, f"hirmem_acme_{secrets.token_hex(4)}")
    gw = derive_test_key("migrated gateway")
    local.add_gateway("acme", gw.public.raw, "north")
    revoked = derive_test_key("migrated revoked gateway")
    local.add_gateway("acme", revoked.public.raw)
    local.revoke_gateway(revoked.kid.hex())
    dev = Device(bytes([0xA1, 0, 0, 0, 0, 0, 0, 1]), derive_test_key("migrated device"))
    local.add_device("acme", dev.device_id, dev.key.public.raw)
    for i in range(5):
        local.refuse(401, "stale", "", f"#{i}")
    key = local.checkpoint_key("acme")  # the file memory/acme.key
    tokens = token_store(local)
    token, _ = create_token(local, tokens, "acme", "ana", "review")
    tokens.close()
    local.close()
    conninfo = fresh_db(pg, "hirmem_registry")

    with pytest.raises(RegistryError, match="fleet registry migrate"):
        Registry(fleet, registry=conninfo, secret=SECRET)  # not silently an empty fleet
    d = ["--database-dir", str(fleet), "--registry", conninfo]
    code = main(["fleet", "registry", "migrate", *d])
    err = capsys.readouterr().err
    assert code == 2 and "HIRMEM_FLEET_SECRET" in err  # a key file to seal, no secret
    secret_file = tmp_path / "secret"
    secret_file.write_bytes(SECRET + b"\n")
    code = main(["fleet", "registry", "migrate", *d, "--secret-file", str(secret_file), "--json"])
    out = capsys.readouterr().out
    assert code == 0
    assert json.loads(out) == {"tenants": 1, "gateways": 2, "devices": 1, "refusals": 5,
                               "refusal_counts": 1, "api_tokens": 1,
                               "checkpoint_keys": 1}  # fmt: skip
    code = main(["fleet", "registry", "migrate", *d, "--secret-file", str(secret_file)])
    assert code == 2 and "already holds tenants" in capsys.readouterr().err

    (fleet / "memory" / "acme.key").unlink()  # the registry holds it now
    shared = Registry(tmp_path / "elsewhere", registry=conninfo, secret=SECRET)
    try:
        assert shared.checkpoint_key("acme").seed() == key.seed()
        assert shared.gateway_key(gw.kid.hex()) is not None
        assert shared.gateway_key(revoked.kid.hex()) is None
        assert shared.device_tenant(dev.key.kid) == "acme"
        assert shared.refusal_counts() == {"stale": 5}
        shared.refuse(401, "stale", "", "#5")  # the sequence goes on after the copied rows
        assert shared.refusals_kept() == 6
        tokens = token_store(shared)  # in the registry's database, not a file of this node
        try:
            found = tokens.authenticate(token)
            assert found is not None and (found.tenant, found.name) == ("acme", "ana")
        finally:
            tokens.close()
        assert not (tmp_path / "elsewhere" / "fleet.db").exists()
    finally:
        shared.close()


class Node:
    """``hirmem fleet serve`` as a child process: one machine's fleet node."""

    def __init__(self, directory: Path, conninfo: str, secret_file: Path) -> None:
        self.port = free_port()
        env = dict(os.environ, PYTHONPATH=str(ROOT / "host"), HIRMEM_EMBEDDER="hash")
        env.pop("HIRMEM_FLEET_SECRET", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hirmem.cli", "fleet", "serve", "--database-dir",
             str(directory), "--registry", conninfo, "--secret-file", str(secret_file),
             "--port", str(self.port), "--consolidate-every", "0.3", "--create"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            wait_healthy(self.port)
        except TimeoutError:
            self.stop()
            assert self.proc.stderr is not None
            raise AssertionError(self.proc.stderr.read().decode()[-2000:]) from None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)


@pytest.fixture
def two_nodes(
    pg: postgres.Primary, tmp_path: Path
) -> Iterator[tuple[list[Node], str, Path, Path]]:
    conninfo = fresh_db(pg, "hirmem_registry")
    secret_file = tmp_path / "fleet.secret"
    secret_file.write_bytes(SECRET)
    nodes = [Node(tmp_path / f"machine{i}", conninfo, secret_file) for i in (1, 2)]
    try:
        yield nodes, conninfo, secret_file, tmp_path
    finally:
        for node in nodes:
            node.stop()


def test_two_nodes_on_one_registry_sign_one_audit_chain(
    pg: postgres.Primary,
    two_nodes: tuple[list[Node], str, Path, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    nodes, conninfo, secret_file, tmp_path = two_nodes
    admin = ["--database-dir", str(tmp_path / "machine1"), "--registry", conninfo,
             "--secret-file", str(secret_file)]  # fmt: skip
    assert main(["fleet", "tenant", "add", "acme", "--postgres", pg.dsn, "--pg-database",
                 f"hirmem_acme_{secrets.token_hex(4)}", *admin]) == 0  # fmt: skip
    gw = Gateway(derive_test_key("two nodes gateway"))
    reg = Registry(tmp_path / "admin", registry=conninfo, secret=SECRET)
    try:
        reg.add_gateway("acme", gw.key.public.raw)
        devices = [
            Device(bytes([0xB0, 0, 0, 0, 0, 0, 0, d + 1]), derive_test_key(f"two nodes {d}"))
            for d in range(4)
        ]
        for dev in devices:
            reg.add_device("acme", dev.device_id, dev.key.public.raw)
        packs = [dev.pack(4) for _ in range(6) for dev in devices]
        for i, pack in enumerate(packs):  # each node takes every other pack
            reply = gw.put(nodes[i % 2].port, pack)
            assert reply.status == 201, reply.body
            if i % 6 == 5:
                time.sleep(0.4)  # rounds on both nodes between uploads
        store = reg.store("acme")
        deadline = time.monotonic() + 60
        while store.open_jobs() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert store.open_jobs() == 0
        where = reg.postgres_of("acme")
        assert where is not None
        with psycopg.connect(where) as db:
            workers = {str(r[0]).split("-")[0] for r in db.execute(
                "SELECT DISTINCT claimed_by FROM jobs")}  # fmt: skip
        assert workers == {str(n.proc.pid) for n in nodes}  # both consolidated
        # a token made on one machine is accepted by both; both verify the one chain
        assert main(["fleet", "token", "create", "--tenant", "acme", *admin]) == 0
        token = capsys.readouterr().out.strip().splitlines()[-1]
        for node in nodes:
            reply = fleet_kit.request(node.port, "GET", "/v1/audit/verify", headers={
                "Authorization": f"Bearer {token}"})  # fmt: skip
            assert reply.status == 200 and reply.body["ok"] is True, reply.body
            assert reply.body["records"] > 0
        # a gateway revoked on one machine is refused by the other's next request
        assert main(["fleet", "gateway", "revoke", gw.keyid, *admin]) == 0
        late = devices[0].pack(4)
        assert gw.put(nodes[1].port, late).status == 401
    finally:
        reg.close()
    for node in nodes:
        node.stop()  # each signs its head on the way out

    # one chain, every checkpoint signed by the one sealed key: the engine verifies it …
    key_file = tmp_path / "acme.key"
    assert main(["fleet", "tenant", "key", "acme", "--out", str(key_file), *admin]) == 0
    capsys.readouterr()
    key = read_key_file(key_file)
    engine = MemoryEngine(PgTarget(where, "memory"), signing_key=key)
    try:
        result = engine.verify_audit()
        assert result.ok, result
        with engine.store.reading() as db:
            kids = [bytes(r[0]) for r in db.execute("SELECT kid FROM checkpoints")]
        assert len(kids) >= 2 and set(kids) == {key.kid}
        records = [r for pack in packs for r in pack.items if isinstance(r, Record)]
        assert len(records) == len(packs) * 4
        for rec in records:  # every record of both nodes' packs is in the one engine, once
            assert engine.require(rec.id.hex()).source
        with engine.store.reading() as db:
            ids = [str(r[0]) for r in db.execute("SELECT id FROM memories")]
        assert len(ids) == len(set(ids))
    finally:
        engine.close()
    # … and so does the memory command line on the PostgreSQL store
    uri = pg_uri(where) + "?schema=memory"
    assert main(["memory", "verify", "--memory", uri, "--key", str(key_file)]) == 0
    assert "audit chain intact" in capsys.readouterr().out
    other = tmp_path / "other.key"
    write_key_file(other, SigningKey.generate())
    assert main(["memory", "verify", "--memory", uri, "--key", str(other)]) != 0
    shown = capsys.readouterr()
    assert "signed by key" in shown.out + shown.err


def pg_uri(conninfo: str) -> str:
    """A key=value conninfo as a postgresql:// URI."""
    parts = dict(p.split("=", 1) for p in conninfo.split())
    return (f"postgresql://{parts['user']}@{parts['host']}:{parts['port']}/"
            f"{parts['dbname']}")  # fmt: skip


def test_a_registry_down_is_503_and_the_refusal_counted(
    pg: postgres.Primary, tmp_path: Path
) -> None:
    """The registry's own server killed: an upload is 503 storage-unavailable with
    Retry-After (never a 500, nothing stored), and the refusal the registry could not
    record is counted by the node; the server back, the same upload is stored and the
    503s for load kept meanwhile are written."""
    with postgres.Primary("registry") as cluster:
        conninfo = fresh_db(cluster, "hirmem_registry")
        reg = Registry(tmp_path / "admin", registry=conninfo, secret=SECRET)
        reg.add_tenant("acme", pg.dsn, f"hirmem_acme_{secrets.token_hex(4)}")
        gw = Gateway(derive_test_key("outage gateway"))
        reg.add_gateway("acme", gw.key.public.raw)
        dev = Device(bytes([0xB5, 0, 0, 0, 0, 0, 0, 1]), derive_test_key("outage device"))
        reg.add_device("acme", dev.device_id, dev.key.public.raw)
        store_conninfo = reg.postgres_of("acme")
        tokens = token_store(reg)
        token, _ = create_token(reg, tokens, "acme", "ana", "read")
        tokens.close()
        reg.close()
        served = fleet_kit.ServedFleet(
            FleetConfig(tmp_path / "node", registry=conninfo, secret=SECRET)
        )
        try:
            assert gw.put(served.port, dev.pack(2)).status == 201
            cluster.kill()
            late = dev.pack(2)
            reply = gw.put(served.port, late)
            assert reply.status == 503 and reply.body["reason"] == "storage-unavailable"
            assert reply.headers["retry-after"] == "1" and "registry" in reply.body["detail"]
            health = fleet_kit.request(served.port, "GET", "/v1/healthz").body
            assert health["unrecorded_refusals"] == 1
            bearer = {"Authorization": f"Bearer {token}"}
            api = fleet_kit.request(served.port, "GET", "/v1/devices", headers=bearer)
            assert api.status == 503 and api.body["type"].endswith("tokens-unavailable"), api.body
            assert api.headers["retry-after"] == "1"
            node = served.app.state.node  # 503s for load wait for the registry's return
            node._unwritten += 3
            node.flush_overloaded()
            assert node._unwritten == 3
            cluster.restart(keep_port=True)  # back at its address: the pool reconnects
            assert gw.put(served.port, late).status == 201
            api = fleet_kit.request(served.port, "GET", "/v1/devices", headers=bearer)
            assert api.status == 200
            node.flush_overloaded()
            assert node._unwritten == 0
            back = Registry(tmp_path / "admin", registry=conninfo, secret=SECRET)
            try:
                assert back.refusal_counts()["overloaded"] == 3
            finally:
                back.close()
        finally:
            served.stop()
    assert store_conninfo is not None
    with psycopg.connect(store_conninfo) as db:  # the refused upload stored once, when sent again
        assert db.execute("SELECT count(*) FROM packs").fetchone() == (2,)


def test_the_registry_and_secret_come_from_the_config_file(
    pg: postgres.Primary,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    conninfo = fresh_db(pg, "hirmem_registry")
    (tmp_path / "fleet.secret").write_bytes(SECRET)
    config = tmp_path / "hirmem.toml"
    config.write_text(
        f'[fleet]\ndirectory = "node"\nregistry = "{conninfo}"\nsecret_file = "fleet.secret"\n'
    )
    monkeypatch.delenv("HIRMEM_FLEET_REGISTRY", raising=False)
    monkeypatch.delenv("HIRMEM_FLEET_SECRET", raising=False)
    monkeypatch.delenv("HIRMEM_FLEET_DIR", raising=False)
    code = main(["fleet", "tenant", "list", "--config", str(config)])
    assert code == 2 and "no fleet registry here" in capsys.readouterr().err
    assert main(["fleet", "tenant", "add", "acme", "--config", str(config), "--postgres",
                 pg.dsn, "--pg-database", f"hirmem_acme_{secrets.token_hex(4)}"]) == 0  # fmt: skip
    assert main(["fleet", "tenant", "key", "acme", "--config", str(config),
                 "--out", str(tmp_path / "acme.key")]) == 0  # fmt: skip
    capsys.readouterr()
    reg = Registry(tmp_path / "elsewhere", registry=conninfo, secret=SECRET)
    try:
        assert [t.name for t in reg.tenants()] == ["acme"]  # in the registry, not a fleet.db
        assert reg.checkpoint_key("acme").seed() == read_key_file(tmp_path / "acme.key").seed()
    finally:
        reg.close()
    assert not (tmp_path / "node" / "fleet.db").exists()
    monkeypatch.setenv("HIRMEM_FLEET_REGISTRY", fresh_db(pg, "hirmem_registry"))
    assert main(["fleet", "tenant", "list", "--config", str(config), "--create", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []  # the environment before the file


def test_nodes_opening_a_fresh_registry_at_once_all_start(
    pg: postgres.Primary, tmp_path: Path
) -> None:
    """Concurrent CREATE TABLE IF NOT EXISTS races in PostgreSQL's catalogue (a unique
    violation on pg_type); the registry's schema is made under an advisory lock."""
    errors: list[str] = []

    def start_node(directory: Path, conninfo: str, barrier: threading.Barrier) -> None:
        barrier.wait()
        try:
            Registry(directory, 1, registry=conninfo).close()
        except Exception as exc:  # reported below
            errors.append(repr(exc))

    for attempt in range(2):
        conninfo = fresh_db(pg, "hirmem_registry")
        barrier = threading.Barrier(6)
        nodes = [(tmp_path / f"{attempt}-{n}", conninfo, barrier) for n in range(6)]
        threads = [threading.Thread(target=start_node, args=node) for node in nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert errors == []


def test_the_fleet_secret_is_rotated_by_resealing(
    pg: postgres.Primary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conninfo = fresh_db(pg, "hirmem_registry")
    reg = Registry(tmp_path / "a", registry=conninfo, secret=SECRET)
    reg.add_tenant("acme", pg.dsn, f"hirmem_acme_{secrets.token_hex(4)}")
    key = reg.checkpoint_key("acme")
    reg.close()
    old, new, wrong = tmp_path / "old", tmp_path / "new", tmp_path / "wrong"
    old.write_bytes(SECRET)
    new.write_bytes(b"the rotated fleet secret")
    wrong.write_bytes(b"not the fleet's secret at all")
    d = ["--database-dir", str(tmp_path / "b"), "--registry", conninfo]
    code = main(["fleet", "registry", "reseal", *d, "--secret-file", str(wrong),
                 "--new-secret-file", str(new)])  # fmt: skip
    assert code == 2 and "does not open" in capsys.readouterr().err  # and nothing changed

    def opened(secret: bytes) -> bytes:
        node = Registry(tmp_path / "node", 1, registry=conninfo, secret=secret)
        try:
            return node.checkpoint_key("acme").seed()
        finally:
            node.close()

    assert opened(SECRET) == key.seed()
    code = main(["fleet", "registry", "reseal", *d, "--secret-file", str(old),
                 "--new-secret-file", str(new)])  # fmt: skip
    assert code == 0 and "1 checkpoint keys" in capsys.readouterr().out
    with pytest.raises(SealError, match="does not open"):
        opened(SECRET)
    assert opened(new.read_bytes()) == key.seed()
