"""Issue 16: ingest bounded in kind, depth, bytes and time; path bounds read as a server
reads them; every refusal recorded; one generating activity per PROV entity."""

from __future__ import annotations

import http.server
import ipaddress
import json
import os
import random
import sqlite3
import ssl
import threading
import time
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from prov.model import ProvDocument

from hirmem.semantic.errors import IngestError, OutOfBounds, ProvError
from hirmem.semantic.extract import RuleExtractor
from hirmem.semantic.ingest import Bounds, FileIngester, HTTPIngester, TreeIngester
from hirmem.semantic.parse import ByMediaType, Chain, CollapseSpaces, StripControl, nesting
from hirmem.semantic.prov import Log
from hirmem.semantic.reason import Reasoner, symmetric
from hirmem.semantic.split import SentenceSplitter
from hirmem.semantic.stages import Pipeline
from hirmem.semantic.substrate import Substrate


def _pipeline(tree: TreeIngester) -> Pipeline:
    return Pipeline(tree, ByMediaType(), Chain(StripControl(), CollapseSpaces()),
                    SentenceSplitter(256), RuleExtractor())  # fmt: skip


def _refusals(sub: Substrate) -> list[tuple[str, str, str]]:
    agents = ("software:ingest/tree", "software:parse/by-media-type")
    return [(d.choice, d.rule, d.reason) for a in agents for d in sub.decisions.by(a)
            if not d.allowed]  # fmt: skip


# ---- kind: only regular files are read --------------------------------------------------------


def test_a_named_pipe_in_a_tree_is_skipped_with_its_reason(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Alice works at Acme.")
    pipes = [tmp_path / "pipe.txt", tmp_path / "pipe"]
    for p in pipes:
        os.mkfifo(p)
    sub = Substrate.in_memory()
    tree = TreeIngester(tmp_path)
    out: list[Any] = []
    worker = threading.Thread(target=lambda: out.append(sub.ingest(_pipeline(tree),
                                                                   str(tmp_path))), daemon=True)
    worker.start()
    worker.join(10)
    hung = worker.is_alive()
    if hung:  # let a reader blocked on a pipe go: open the write end and close it
        for p in pipes:
            os.close(os.open(p, os.O_WRONLY | os.O_NONBLOCK))
    assert not hung, "the ingest hangs on a named pipe"
    assert [d.text for d in out[0].docs] == ["Alice works at Acme."]
    reasons = dict(tree.skipped)
    assert set(reasons) == {str(p) for p in pipes}
    assert all("not a regular file (a named pipe)" in why for why in reasons.values())
    # the refusals are recorded as decisions of the ingester, with the reasons
    got = _refusals(sub)
    assert sorted(c for c, _, _ in got) == sorted(f"admit {p}" for p in pipes)
    assert all(rule == "bounds:ingest" and "named pipe" in why for _, rule, why in got)
    # one file named directly: refused at once, not waited on
    t0 = time.monotonic()
    with pytest.raises(IngestError, match="not a regular file"):
        FileIngester(tmp_path).ingest("pipe.txt")
    with pytest.raises(IngestError, match="named pipe"):
        TreeIngester(tmp_path).ingest("pipe.txt")
    assert time.monotonic() - t0 < 5


# ---- depth: a deep JSON file is refused, the others go on -------------------------------------


def test_json_nested_990_deep_is_refused_and_the_rest_of_the_ingest_goes_on(
    tmp_path: Path,
) -> None:
    (tmp_path / "deep.json").write_text("[" * 990 + "]" * 990)
    (tmp_path / "deeper.json").write_text('{"a":' * 5000 + "1" + "}" * 5000)
    (tmp_path / "ok.json").write_text(json.dumps({"note": "Bob lives in Paris."}))
    (tmp_path / "z.txt").write_text("Alice works at Acme.")
    sub = Substrate.in_memory()
    result = sub.ingest(_pipeline(TreeIngester(tmp_path)), str(tmp_path))
    assert sorted(Path(d.source).name for d in result.docs) == ["ok.json", "z.txt"]
    assert {(t.subject, t.object) for t in result.triples} == {("Bob", "Paris"),
                                                               ("Alice", "Acme")}  # fmt: skip
    refused = {Path(r.ref).name: r for r in result.rejected}
    assert set(refused) == {"deep.json", "deeper.json"}
    assert all(r.kind == "parse" and "deeper than 100 levels" in r.reason
               for r in refused.values())  # fmt: skip
    # nothing of a refused document reached the stores, and the refusal is a decision
    assert all(f"doc:{d.id}" in sub.prov.entities for d in result.docs)
    assert len(sub.docs) == 2
    got = _refusals(sub)
    assert len(got) == 2 and all(rule == "bounds:parse" for _, rule, _ in got)


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def test_json_nesting_is_measured_as_the_parser_sees_it() -> None:
    """``nesting`` against the depth of what ``json.loads`` builds, over random documents
    whose strings hold brackets, quotes and escapes."""
    rng = random.Random(16)
    pieces = ["[", "]", "{", "}", '"', "\\", "a", " ", "\\u005b"]

    def value(depth: int) -> Any:
        r = rng.random()
        if depth > 0 and r < 0.35:
            return [value(depth - 1) for _ in range(rng.randint(0, 3))]
        if depth > 0 and r < 0.7:
            return {"".join(rng.choices(pieces, k=3)): value(depth - 1)
                    for _ in range(rng.randint(0, 3))}  # fmt: skip
        return rng.choice([1, None, "".join(rng.choices(pieces, k=rng.randint(0, 6)))])

    for _ in range(3000):
        doc = value(rng.randint(0, 12))
        text = json.dumps(doc, ensure_ascii=rng.random() < 0.5)
        want = _depth(json.loads(text))
        assert nesting(text, 100) == want, text
        if want > 2:
            assert nesting(text, 2) == 3  # counted only as far as the limit needs


# ---- bytes: per file and per tree, and memory proportional to them --------------------------


def _text(size: int, seed: int) -> str:
    rng = random.Random(seed)
    names, places = ["Alice", "Bob", "Carol", "Dan", "Eve"], ["Paris", "Oslo", "Berlin"]
    out: list[str] = []
    n = 0
    while n < size:
        s = f"{rng.choice(names)} lives in {rng.choice(places)}. Some words follow it here. "
        out.append(s)
        n += len(s)
    return "".join(out)[:size]


def test_ingest_bytes_are_capped_and_memory_stays_proportional(tmp_path: Path) -> None:
    cap = 500_000
    (tmp_path / "a.txt").write_text(_text(cap - 1000, 1))  # near the cap
    (tmp_path / "b.txt").write_text(_text(cap + 1, 2))  # over the cap for one file
    (tmp_path / "c.txt").write_text(_text(cap // 2, 3))  # over the cap for the tree
    tree = TreeIngester(tmp_path, max_bytes=cap, max_total_bytes=cap + cap // 4)
    pipe = _pipeline(tree)
    tracemalloc.start()
    try:
        result = pipe.run(str(tmp_path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [Path(d.source).name for d in result.docs] == ["a.txt"]
    assert len(result.triples) > 2500
    why = dict((Path(p).name, w) for p, w in tree.skipped)
    assert "the limit is 500000" in why["b.txt"]
    assert "would pass the tree's total of 625000 bytes" in why["c.txt"]
    print(f"ingest of {cap - 1000} bytes: peak {peak / 1e6:.1f} MB traced "
          f"({peak / (cap - 1000):.1f} x the text)")  # fmt: skip
    assert peak < 32 * cap


# ---- time: a total deadline, however slowly the server drips -------------------------------


def _tls(tmp: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A self-signed certificate for 127.0.0.1: the server's context and a client's."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))  # fmt: skip
    pem = tmp / "cert.pem"
    pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    keyfile = tmp / "key.pem"
    keyfile.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))  # fmt: skip
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(pem, keyfile)
    return server, ssl.create_default_context(cafile=str(pem))


class _Drip:
    """A real local HTTP(S) server: ``/slow-body`` sends its headers, then one byte of its
    body every ``every`` seconds; ``/slow-head`` drips its status line and headers;
    ``/redirect`` sends the client on to ``/slow-body``; ``/fast`` answers at once."""

    def __init__(self, every: float, tls: ssl.SSLContext | None = None) -> None:
        self.hits: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.hits.append(self.path)
                try:
                    if self.path in ("/docs/redirect", "/docs/fast"):
                        slow = self.path == "/docs/redirect"
                        body = b"" if slow else b"Alice works at Acme."
                        self.send_response(302 if slow else 200)
                        if slow:
                            self.send_header("Location", "/docs/slow-body")
                        self.send_header("Content-Length", str(len(body)))
                        self.end_headers()
                        self.wfile.write(body)
                        return
                    if self.path.startswith("/docs/slow-head"):
                        for b in b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok":
                            self.wfile.write(bytes([b]))
                            self.wfile.flush()
                            time.sleep(every)
                        return
                    body = b"Alice works at Acme. " * 5
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    for b in body:
                        self.wfile.write(bytes([b]))
                        self.wfile.flush()
                        time.sleep(every)
                except OSError:
                    pass  # the client gave up, as it should

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def drip() -> Iterator[_Drip]:
    server = _Drip(every=0.2)
    yield server
    server.close()


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_server_dripping_bytes_is_cut_off_at_the_total_deadline(
    scheme: str, tmp_path: Path
) -> None:
    server_tls, client_tls = _tls(tmp_path)
    drip = _Drip(every=0.2, tls=server_tls if scheme == "https" else None)
    try:
        bounds = Bounds(frozenset({scheme}), frozenset({f"127.0.0.1:{drip.port}"}), ("/docs",))
        ing = HTTPIngester(bounds, timeout=1.0, context=client_tls)  # a byte every 0.2 s
        base = f"{scheme}://127.0.0.1:{drip.port}"
        assert ing.ingest(f"{base}/docs/fast")[0].text == "Alice works at Acme."
        for path in ("/docs/slow-body", "/docs/slow-head", "/docs/redirect"):
            t0 = time.monotonic()
            with pytest.raises(IngestError, match=r"total deadline of 1\.0 s"):
                ing.ingest(base + path)
            took = time.monotonic() - t0
            print(f"{scheme} {path}: given up after {took:.2f} s (deadline 1.0 s)")
            assert took < 5.0  # the old per-read timeout let the body run for 21 s
        assert drip.hits == ["/docs/fast", "/docs/slow-body", "/docs/slow-head",
                             "/docs/redirect", "/docs/slow-body"]  # fmt: skip
    finally:
        drip.close()


# ---- paths: read as a server reads them --------------------------------------------------------


def test_path_bounds_hold_after_percent_decoding_and_on_semicolons_and_backslashes(
    drip: _Drip,
) -> None:
    host = f"127.0.0.1:{drip.port}"
    bounds = Bounds(frozenset({"http"}), frozenset({host}), ("/docs",))
    base = f"http://{host}"
    for path in ("/docs/..;/secret", "/docs/..%5csecret", "/docs/..\\secret",
                 "/docs/%2e%2e/secret", "/docs/%252e%252e/secret", "/docs/..%2fsecret",
                 "/docs/..;x=1/..;/secret", "/docs/a/..%5c..%5csecret", "/docs/a%00",
                 "/docs%2f..%2fsecret", "/docs/%25252525252e%25252525252e/x"):  # fmt: skip
        with pytest.raises(OutOfBounds):
            bounds.check(base + path)
        with pytest.raises(OutOfBounds):
            HTTPIngester(bounds, timeout=1.0).ingest(base + path)
    assert drip.hits == []  # refused before any request
    for path in ("/docs/a", "/docs/a;v=1", "/docs/a%20b", "/docs/x/../y", "/docs"):
        bounds.check(base + path)


# ---- PROV: one generating activity per entity ------------------------------------------------


def test_every_prov_entity_has_at_most_one_generating_activity(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Notes\n\nAlice knows Bob. Bob lives in Paris.\n")
    (tmp_path / "b.md").write_text("Alice knows Bob.\n")  # the same assertion, another chunk
    db = tmp_path / "s.db"
    sub = Substrate.open(db)
    for _ in range(2):  # the same tree read twice
        result = sub.ingest(_pipeline(TreeIngester(tmp_path)), str(tmp_path))
    sub.reason(Reasoner([symmetric("knows")]))
    sub.close()
    sub = Substrate.open(db)  # what was persisted reads back the same
    doc = ProvDocument.deserialize(content=sub.prov.to_provjson(), format="json")
    generated: dict[str, list[str]] = {}
    for rec in doc.get_records():
        if rec.get_type().localpart == "Generation":
            ent = str(rec.get_attribute("prov:entity").pop())
            generated.setdefault(ent, []).append(str(rec.get_attribute("prov:activity").pop()))
    assert generated and all(len(acts) == 1 for acts in generated.values()), {
        e: a for e, a in generated.items() if len(a) > 1}  # fmt: skip
    # each stage that made a document's text generated its own version of it
    d = result.docs[0].id
    chain = [e.id for e in sub.prov.lineage(f"doc:{d}") if e.kind == "doc"]
    assert chain == [f"doc:{d}", f"doc:{d}~parse", f"doc:{d}~ingest"]
    kinds = [sub.prov.activities[sub.prov.generation(e)].kind for e in chain]
    assert kinds == ["normalize", "parse", "ingest"]
    # the assertion read from two chunks keeps one generation and both derivations
    knows = next(t for t in result.triples if t.predicate == "knows")
    held = sub.prov.entities[f"assertion:{knows.id}"]
    assert len(held.generated_by) == 1 and len(held.derived_from) == 2
    assert [a.kind for a in sub.trace(knows.id)][:2] == ["extract", "split"]
    sub.close()
    # the log refuses a second generation outright
    log = Log()
    log.agent("software:x", "software")
    for a in ("act:1", "act:2"):
        log.activity(a, "parse", "software:x", 0, 0)
    log.entity("thing:1", "thing", "act:1")
    log.entity("thing:1", "thing", "act:1")  # the same generation again is no change
    with pytest.raises(ProvError, match="one generating activity"):
        log.entity("thing:1", "thing", "act:2")


def test_a_prov_entity_derived_many_times_is_persisted_once_per_derivation(
    tmp_path: Path,
) -> None:
    """Each write persists what it adds: 2,000 derivations of one entity cost about 2,000
    ids on disk, not 2,000²/2 (the old whole-entity rewrite)."""
    db = tmp_path / "s.db"
    sub = Substrate.open(db)
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.txt").write_text("Alice knows Bob. " * 2000)
    tree = TreeIngester(tmp_path / "t")
    sub.ingest(Pipeline(tree, None, None, SentenceSplitter(17), RuleExtractor()),
               str(tmp_path / "t"))  # fmt: skip
    sub.close()
    con = sqlite3.connect(db)
    # the whole log (each flush one compressed segment of records)
    rows = con.execute("SELECT body FROM prov UNION ALL SELECT body FROM prov_segments"
                       ).fetchall()  # fmt: skip
    con.close()
    size = sum(len(r[0]) for r in rows)
    print(f"one assertion from 2,000 chunks: {size} bytes of PROV rows")
    assert size < 2000 * 200  # the whole-entity rewrite wrote about 60 MB here
    again = Substrate.open(db)
    ent = next(e for e in again.prov.entities.values() if e.kind == "assertion")
    assert len(ent.derived_from) == 2000 and len(ent.generated_by) == 1
    again.close()
