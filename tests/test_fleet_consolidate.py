"""Fleet consolidation: a tenant's packs from all its devices into one memory engine and
one semantic substrate, each answer traced to its record, pack, device and key; the job
queue shared by workers (SKIP LOCKED on PostgreSQL) and safe against a worker that dies
before it marks its jobs done."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import fleet_kit
from fleet_kit import BACKENDS
from hirmem.emulation import postgres
from hirmem.fleet.consolidate import Consolidator
from hirmem.fleet.registry import Registry
from hirmem.fleet.tenant import Accepted, TenantStore
from hirmem.protocol.keys import derive_test_key
from hirmem.semantic.substrate import Substrate
from test_store import Device

pg = fleet_kit.pg  # the PostgreSQL primary of the module (a fixture)


@pytest.fixture(params=BACKENDS)
def tenant(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Registry, str]]:
    reg = Registry(tmp_path / "fleet")
    if request.param == "postgres":
        pg = request.getfixturevalue("pg")
        reg.add_tenant("acme", pg.dsn, f"hirmem_acme_{secrets.token_hex(4)}")
    else:
        reg.add_tenant("acme")
    yield reg, "acme"
    reg.close()


def fill(reg: Registry, name: str, devices: int = 3, packs: int = 4) -> list[Device]:
    store = reg.store(name)
    out = []
    for d in range(devices):
        dev = Device(bytes([0xC0, 0, 0, 0, 0, 0, 0, d + 1]), derive_test_key(f"consolidate {d}"))
        reg.add_device(name, dev.device_id, dev.key.public.raw)
        for _ in range(packs):
            pack = dev.pack(5)
            assert isinstance(store.take(pack.pack_id.hex(), pack.encoded, "gw"), Accepted)
        out.append(dev)
    return out


def assert_engine_placed(reg: Registry, name: str, worker: Consolidator, fleet: Path) -> None:
    """The tenant's memory engine is where its packs are: in its own PostgreSQL
    database (no file beside the registry), or a SQLite file for a SQLite tenant."""
    engine = worker.engine(name)
    where = reg.postgres_of(name)
    assert (engine.store.pg is not None) == (where is not None)
    assert (fleet / "memory" / f"{name}.db").exists() == (where is None)
    if where is not None:
        with psycopg.connect(where) as db:
            row = db.execute("SELECT count(*) FROM memory.memories").fetchone()
        assert row is not None and row[0] == engine.store.count() > 0
    assert engine.verify_audit().ok


def test_recall_at_the_fleet_traces_every_answer_to_device_pack_and_key(
    tenant: tuple[Registry, str], tmp_path: Path
) -> None:
    reg, name = tenant
    devices = fill(reg, name)
    store = reg.store(name)
    # the store reads as the daemon's intake does (the IntakeReader the engine follows)
    recs = store.records(0, 1000)
    assert len(recs) == 60 and [n for n, _, _ in recs] == sorted(n for n, _, _ in recs)
    assert all(rec.id[:8] == pid[:8] for _, rec, pid in recs)
    assert len({rec.id for _, rec, _ in recs}) == 60 and store.record_conflicts() == []
    assert [n for n, _ in store.packs_since(0, 5)] == [n for n, _ in store.packs_since(0, 100)][:5]
    worker = Consolidator(tmp_path / "fleet", "w1", locate=reg.postgres_of)
    try:
        assert worker.served_engine(name) is None  # a read makes no store
        report = worker.run(name, store, limit=100)
        assert (report.packs, report.admitted + report.quarantined) == (12, 60)
        assert_engine_placed(reg, name, worker, tmp_path / "fleet")
        assert store.open_jobs() == 0
        hits = worker.recall(name, store, "temp0", k=20)
        assert len(hits) == 20
        kids = {d.device_id.hex(): d.key.kid.hex() for d in devices}
        seen_devices = set()
        for hit in hits:
            assert hit.record.startswith(hit.device)  # a record id begins with its device
            assert hit.kid == kids[hit.device]
            assert hit.pack[:16] == hit.device
            held = {p.pack_id.hex() for p in store.packs(bytes.fromhex(hit.device))}
            assert hit.pack in held
            seen_devices.add(hit.device)
        assert len(seen_devices) == 3  # across devices
        # the substrate holds the PROV trace of a record back to its key
        sub = worker.substrate(name)
        entities = sub.prov.entities
        for hit in hits:
            assert f"record:{hit.record}" in entities and f"key:{hit.kid}" in entities
            assert entities[f"record:{hit.record}"].derived_from == (f"pack:{hit.pack}",)
            assert entities[f"key:{hit.kid}"].attributed_to == f"device:{hit.device}"
        assert report.assertions > 0
    finally:
        worker.close()


def test_a_worker_that_dies_before_finishing_repeats_nothing(
    tenant: tuple[Registry, str], tmp_path: Path
) -> None:
    reg, name = tenant
    fill(reg, name, devices=2, packs=3)
    store = reg.store(name)
    dead = store.claim("dead worker", limit=4, lease_ms=0)  # claimed, never finished
    assert len(dead) == 4
    worker = Consolidator(tmp_path / "fleet", "w2", locate=reg.postgres_of)
    try:
        # the dead worker's half-done work: its first job reached the engine, not "done"
        first_pack, _ = store.pack_by_n(dead[0].pack_n)
        from hirmem.memory.intake import intake_records
        from hirmem.protocol.records import Record

        recs = [r for r in first_pack.items if isinstance(r, Record)]
        intake_records(
            worker.engine(name), recs, first_pack.signer, first_pack.kid, first_pack.prev
        )
        report = worker.run(name, store, limit=100)
        assert report.packs == 6 and report.duplicates == 5
        assert report.admitted + report.quarantined == 25
        assert store.open_jobs() == 0
        engine = worker.engine(name)
        n = engine.store.db.execute("SELECT count(*) FROM memories").fetchone()[0]
        assert n >= 30
    finally:
        worker.close()


def test_workers_claim_disjoint_jobs(tenant: tuple[Registry, str]) -> None:
    reg, name = tenant
    fill(reg, name, devices=4, packs=10)
    store: TenantStore = reg.store(name)
    claimed: list[int] = []
    lock = threading.Lock()

    def work(w: int) -> None:
        while jobs := store.claim(f"w{w}", limit=3):
            with lock:
                claimed.extend(j.n for j in jobs)
            store.finish(jobs)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(claimed) == sorted(set(claimed)) and len(claimed) == 40


@fleet_kit.pg_skip()
def test_the_engine_is_on_the_standby_after_failover_and_follows_the_move(
    tmp_path: Path,
) -> None:
    """The engine's and the substrate's state are in the tenant's database: the
    synchronous standby has every round that finished; after the promotion and ``tenant
    move`` the consolidator opens both there, the chain goes on from the same head, and
    the substrate recalls the same answers, each traced record → pack → key → device."""
    with (
        postgres.Primary("cons-primary") as primary,
        postgres.Standby(primary, "cons_standby") as standby,
    ):
        reg = Registry(tmp_path / "fleet")
        reg.add_tenant("acme", primary.dsn, "hirmem_acme_fo")
        try:
            devices = fill(reg, "acme", devices=2, packs=2)
            worker = Consolidator(tmp_path / "fleet", "w", locate=reg.postgres_of)
            assert worker.run("acme", reg.store("acme"), limit=100).packs == 4
            before = worker.engine("acme")
            head = before.audit.head_seq
            held = before.store.count()
            assert held >= 20  # the records, and what distillation derived from them
            # the substrate is in the tenant's database too: no file beside the registry
            assert not (tmp_path / "fleet" / "semantic").exists()
            readable = {f"acme/{d.device_id.hex()}/temp0" for d in devices}
            sub_before = worker.substrate("acme")
            recalled = sub_before.remember("temp0", readable, 8)
            assert recalled[1] and {r.container for r in recalled[1]} <= readable
            traced = _traces(sub_before, devices)
            primary.kill()
            standby.promote()
            location = reg.postgres_of("acme")
            assert location is not None
            dbname = location.split("dbname=")[1].split()[0]
            reg.move_tenant(
                "acme", f"host=127.0.0.1 port={standby.port} user=hirmem dbname={dbname}"
            )
            after = worker.engine("acme")  # reopened on the promoted standby
            assert after is not before and after.store.pg is not None
            assert after.store.count() == held
            assert after.audit.head_seq >= head and after.verify_audit().ok
            hits = worker.recall("acme", reg.store("acme"), "temp0", k=5)
            assert hits and all(h.kid for h in hits)
            sub_after = worker.substrate("acme")  # reopened on the promoted standby
            assert sub_after is not sub_before
            assert sub_after.remember("temp0", readable, 8) == recalled
            assert _traces(sub_after, devices) == traced
            for hit in hits:  # the engine's answers trace to their keys in the substrate
                assert traced[f"record:{hit.record}"] == (hit.pack, hit.kid, hit.device)
            # consolidation goes on there: new packs join the same chain
            fill_more(reg, "acme")
            assert worker.run("acme", reg.store("acme"), limit=100).packs == 1
            assert after.store.count() >= held + 5 and after.verify_audit().ok
            worker.close()
        finally:
            reg.close()


def _traces(sub: Substrate, devices: list[Device]) -> dict[str, tuple[str, str, str]]:
    """Each record the substrate's PROV log holds, traced by the log alone to (pack, key,
    device): record derived from pack, pack generated by a signing that used the key, key
    attributed to the device."""
    log = sub.prov
    out = {}
    for eid, ent in log.entities.items():
        if not eid.startswith("record:"):
            continue
        (pack,) = ent.derived_from
        (sign,) = log.entities[pack].generated_by
        (key,) = [u for u in log.activities[sign].used if u.startswith("key:")]
        device = log.entities[key].attributed_to
        assert log.entities[pack].attributed_to == device
        out[eid] = (pack.removeprefix("pack:"), key.removeprefix("key:"),
                    device.removeprefix("device:"))  # fmt: skip
    assert {d for _, _, d in out.values()} == {d.device_id.hex() for d in devices}
    return out


def fill_more(reg: Registry, name: str) -> None:
    dev = Device(bytes([0xC0, 0, 0, 0, 0, 0, 0, 9]), derive_test_key("consolidate late"))
    reg.add_device(name, dev.device_id, dev.key.public.raw)
    pack = dev.pack(5)
    assert isinstance(reg.store(name).take(pack.pack_id.hex(), pack.encoded, "gw"), Accepted)


def test_a_fleet_tenants_device_rows_carry_its_tenant_and_another_tenant_reads_nothing(
    tmp_path: Path,
) -> None:
    """Every row a tenant's packs leave in its substrate (claims, memories, passages) is in
    the container ``<tenant>/<device>/<source>``; a reader holding the same device's
    containers under another tenant's name reads none of them."""
    reg = Registry(tmp_path / "fleet")
    reg.add_tenant("acme")
    worker = Consolidator(tmp_path / "fleet", "w-tenant")
    try:
        devices = fill(reg, "acme", devices=2, packs=2)
        assert worker.run("acme", reg.store("acme"), limit=100).packs == 4
        sub = worker.substrate("acme")
        mine = {f"acme/{d.device_id.hex()}/temp0" for d in devices}
        theirs = {f"local/{d.device_id.hex()}/temp0" for d in devices} | {
            f"other/{d.device_id.hex()}/temp0" for d in devices}  # fmt: skip
        subjects = set(sub.claims.subjects())
        held = set(sub.claims.containers())
        assert subjects and held == mine
        for subject in subjects:
            claims = sub.claims.about(subject, mine)
            assert claims and all(a.container in mine for c in claims for a in c.attestations)
            assert sub.claims.about(subject, theirs) == []
        assert sub.passages.search("temp0", 10, mine)
        assert sub.passages.search("temp0", 10, theirs) == []
    finally:
        worker.close()
        reg.close()
