"""Device records from the daemon's intake flow through the pipeline into assertions, and
every assertion traces, through PROV, to the record, the pack, the device and its key.

The store is real: a device registered with its public key, packs signed with
:func:`hirmem.protocol.packs.sign_pack` over records built with :meth:`Record.capture`, taken
(verified and stored) with :meth:`Store.take_pack`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import rdflib

from hirmem.daemon.store import Store
from hirmem.protocol.keys import derive_test_key
from hirmem.protocol.packs import PackKind, sign_pack
from hirmem.protocol.records import GENESIS, Record, record_id
from hirmem.semantic import cli
from hirmem.semantic.devices import DeviceFeed, record_ref
from hirmem.semantic.prov import Log
from hirmem.semantic.substrate import Substrate
from hirmem.semantic.values import origin

DEV = bytes.fromhex("5e5e5e5e5e5e5e01")
KEY = derive_test_key("semantic device 5e5e5e5e5e5e5e01")
T0 = 1_790_000_000_000
CONTEXT = bytes(range(32))

PAYLOADS = (
    [b'{"temp_c": 21.5, "door": "open"}', b"Alice lives in Berlin. Alice works at Acme."],
    [b"battery=3.71 rssi=-67", b"\xff\xfe not text"],
)


def _store(path: Path) -> Store:
    store = Store(path)
    store.register_device(DEV, KEY.public.raw, "mps2-an385")
    prev = GENESIS
    n = 0
    for seq, payloads in enumerate(PAYLOADS, start=1):
        records = []
        link = prev  # a pack's first record links to the signer's previous pack
        for p in payloads:
            n += 1
            rec = Record.capture(record_id(DEV, 1, n), p, "sensor0", T0 + n, CONTEXT, 0x0FFF,
                                 0x10000, 0xE666, 0x8000, link)  # fmt: skip
            records.append(rec)
            link = rec.hash
        pack = sign_pack(KEY, PackKind.MEMORY, DEV, (1 << 32) | seq, prev, T0 + 100 * seq,
                         records)  # fmt: skip
        taken = store.take_pack(DEV, pack.encoded)
        assert taken.status == "accepted", taken.detail
        prev = pack.hash
    return store


def test_device_records_become_assertions_with_a_full_prov_trace(tmp_path: Path) -> None:
    store = _store(tmp_path / "host.db")
    sub = Substrate.in_memory()
    feed = DeviceFeed(store, sub)
    cursor, result = feed.pull()
    stored = store.records()
    assert cursor == stored[-1][0]
    # the non-UTF-8 payload is skipped with its reason, not faked into a document
    assert len(result.docs) == 3 and len(feed.skipped) == 1
    assert "not UTF-8" in feed.skipped[0][1]
    got = {(t.subject, t.predicate, t.object) for t in result.triples}
    subject = f"{DEV.hex()}/sensor0"
    assert {(subject, "temp_c", "21.5"), (subject, "door", "open"),
            (subject, "battery", "3.71"), (subject, "rssi", "-67"),
            ("Alice", "lives_in", "Berlin"), ("Alice", "works_at", "Acme")} == got  # fmt: skip
    packs = {p.pack_id: p for p in store.packs()}
    kid = store.device(DEV).kid  # type: ignore[union-attr]
    by_ref = {record_ref(DEV, rec.id): (rec, pid) for _, rec, pid in stored}
    for t in result.triples:
        doc = next(d for d in result.docs if d.id == t.from_chunk.doc_id)
        rec, pid = by_ref[doc.source]
        # Meta: the origin is the record; the device block names record, pack, device, key
        org = origin(doc)
        assert (org.ref, org.size, org.mtime) == (doc.source, len(rec.payload), rec.timestamp)
        assert doc.meta["device"] == {
            "record": rec.id.hex(), "pack": pid.hex(), "device": DEV.hex(), "kid": kid.hex(),
            "record_hash": rec.hash.hex(), "source": "sensor0", "timestamp": rec.timestamp,
        }  # fmt: skip
        # the span is evidence in the payload, and the assertion is valid from capture time
        assert t.evidence.encode() in rec.payload and t.valid_from == rec.timestamp
        # PROV: assertion -> chunk -> doc -> record -> pack, key; the device signed, the host
        # verified; nothing in the lineage is missing
        lineage = {e.id: e for e in sub.lineage(t.id)}
        for want in (f"chunk:{t.from_chunk.id}", f"doc:{doc.id}", f"record:{rec.id.hex()}",
                     f"pack:{pid.hex()}", f"key:{kid.hex()}"):  # fmt: skip
            assert want in lineage, (want, sorted(lineage))
        assert lineage[f"record:{rec.id.hex()}"].derived_from == (f"pack:{pid.hex()}",)
        assert lineage[f"pack:{pid.hex()}"].attributed_to == f"device:{DEV.hex()}"
        assert lineage[f"key:{kid.hex()}"].attributed_to == f"device:{DEV.hex()}"
        acts = {a.kind: a for a in sub.trace(t.id)}
        assert {"extract", "split", "ingest", "verify", "sign"} <= set(acts)
        assert acts["sign"].agent == f"device:{DEV.hex()}"
        assert acts["sign"].start == packs[pid].created
        assert acts["verify"].used == (f"pack:{pid.hex()}", f"key:{kid.hex()}")
        agents = {a.id for a in sub.prov.agents_of(f"assertion:{t.id}")}
        assert f"device:{DEV.hex()}" in agents
    # the same records again: nothing new is pulled after the cursor
    assert feed.pull(cursor)[1].docs == []
    # a scoped question over device data
    ans = sub.ask(f"what is the door of {subject}?")
    assert ans.subject == subject and ans.hits[0].evidence == '"door": "open"'
    store.close()


def test_the_trace_exports_as_prov_o(tmp_path: Path) -> None:
    store = _store(tmp_path / "host.db")
    sub = Substrate.in_memory()
    _, result = DeviceFeed(store, sub).pull()
    t = result.triples[0]
    ttl = sub.prov.to_turtle([f"assertion:{t.id}"])
    rid = next(r for _, r, _ in store.records() if record_ref(DEV, r.id) == result.docs[0].source)
    g = rdflib.Graph().parse(data=ttl, format="turtle")
    prov = rdflib.Namespace("http://www.w3.org/ns/prov#")
    record = rdflib.URIRef(f"urn:hirmem:record:{rid.id.hex()}")
    device = rdflib.URIRef(f"urn:hirmem:device:{DEV.hex()}")
    assert (record, rdflib.RDF.type, prov.Entity) in g
    assert (None, prov.wasAttributedTo, device) in g
    assert (None, prov.wasAssociatedWith, rdflib.URIRef("urn:hirmem:software:hirmem-host")) in g
    assert {(device, rdflib.RDF.type, prov.Agent), (device, rdflib.RDF.type,
                                                    prov.SoftwareAgent)} <= set(g)  # fmt: skip
    store.close()


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="hirmem")
    sub = parser.add_subparsers(dest="command", required=True)
    cli.add_parser(sub)
    return cli.run(parser.parse_args(argv))


def test_cli_ingests_a_directory_asks_a_scoped_question_and_prints_the_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "corpus"
    (corpus / "notes").mkdir(parents=True)
    (corpus / "people.md").write_text("# People\n\nBob lives in Paris. Alice lives in Berlin.\n")
    (corpus / "notes" / "work.html").write_text(
        "<html><title>Work</title><script>Bob lives in Nowhere.</script>"
        "<p>Bob works at Initech.</p></html>"
    )
    (corpus / "blob.bin").write_bytes(b"\x00\x01")
    db = str(tmp_path / "s.db")
    assert _cli(["semantic", "ingest", str(corpus), "--db", db]) == 0
    assert "ingested 2 documents" in capsys.readouterr().out
    assert _cli(["semantic", "ask", "Where does Bob live?", "--db", db, "--trace"]) == 0
    out = capsys.readouterr().out
    assert "scope: subject 'bob'" in out and "(Bob, lives_in, Paris)" in out
    assert "Nowhere" not in out  # script text is not document text
    assert "wasDerivedFrom chunk:" in out and f"source:{corpus / 'people.md'}" in out
    assert _cli(["semantic", "ask", "Where does Zed live?", "--db", db]) == 0  # flat
    assert _cli(["semantic", "ask", "What does Alice think of Initech?", "--db", db]) == 1
    assert "no answer" in capsys.readouterr().out
    tid = "a6c91dd394639b78"  # (Bob, lives_in, Paris), minted by the shared identity
    assert _cli(["semantic", "trace", tid, "--db", db, "--format", "turtle"]) == 0
    g = rdflib.Graph().parse(data=capsys.readouterr().out, format="turtle")
    assert (rdflib.URIRef(f"urn:hirmem:assertion:{tid}"), rdflib.RDF.type,
            rdflib.URIRef("http://www.w3.org/ns/prov#Entity")) in g  # fmt: skip
    assert _cli(["semantic", "trace", tid, "--db", db, "--format", "provjson"]) == 0
    assert f"hm:assertion:{tid}" in json.loads(capsys.readouterr().out)["entity"]
    assert _cli(["semantic", "trace", "ffffffffffffffff", "--db", db]) == 2
    assert "no entity" in capsys.readouterr().err
    # devices into the same substrate file
    store = _store(tmp_path / "host.db")
    store.close()
    assert _cli(["semantic", "devices", "--store", str(tmp_path / "host.db"), "--db", db]) == 0
    assert "fed 3 records, 6 assertions" in capsys.readouterr().out
    log = Substrate.open(db)
    assert isinstance(log.prov, Log) and any(k.startswith("key:") for k in log.prov.entities)
    log.close()


def test_cli_feeds_every_record_past_a_thousand_and_keeps_its_cursor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`semantic devices` read at most 1,000 records and started from 0 again next time
    (feeding the first thousand twice). It feeds everything, and a second run nothing."""
    path = tmp_path / "host.db"
    with Store(path) as store:
        store.register_device(DEV, KEY.public.raw, "mps2-an385")
        prev, n = GENESIS, 0
        for seq in range(1, 13):  # 12 packs of 100 records: 1,200
            records, link = [], prev
            for _ in range(100):
                n += 1
                rec = Record.capture(record_id(DEV, 1, n), b'{"n": %d}' % n, "sensor0", T0 + n,
                                     CONTEXT, 0x0FFF, 0x10000, 0xE666, 0x8000, link)  # fmt: skip
                records.append(rec)
                link = rec.hash
            pack = sign_pack(KEY, PackKind.MEMORY, DEV, (1 << 32) | seq, prev, T0, records)
            assert store.take_pack(DEV, pack.encoded).status == "accepted"
            prev = pack.hash
        last = store.records(0, 5000)[-1][0]
    db = str(tmp_path / "sem.db")
    argv = ["semantic", "devices", "--store", str(path), "--db", db]
    assert _cli(argv) == 0
    assert f"fed 1200 records, 1200 assertions; cursor {last}" in capsys.readouterr().out
    assert _cli(argv) == 0
    assert f"fed 0 records, 0 assertions; cursor {last}" in capsys.readouterr().out
    assert _cli([*argv, "--after", str(last - 5)]) == 0  # an explicit cursor still wins
    assert "fed 5 records" in capsys.readouterr().out
