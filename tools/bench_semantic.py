"""Semantic substrate figures (HIP-0526): ingest throughput, Match and Near latency.

    .venv/bin/python tools/bench_semantic.py               # full size (a few minutes)
    .venv/bin/python tools/bench_semantic.py --scale 0.05  # a quick run

Prints:

* ingest throughput — documents, chunks and assertions per second for a generated corpus
  of at least 10 MB of English text (deterministic: a seeded generator of people, places,
  employers and conversation turns), read as a directory tree from disk and run through the
  whole path: tree ingester, parser by media type, normalizers, sentence splitter, rule
  extractor, then the substrate (document, triple and vector stores, ledger, PROV log);
  once with the in-memory stores and once with SQLite (and with ``--postgres`` once with
  a substrate in a schema of a PostgreSQL server the tool starts);
* Match latency at 1,000,000 triples for each triple driver (memory, file, sqlite,
  oxigraph), per query shape (s??, ?po, sp?, ??o), median and p95 over many queries;
* ask at 100,000 short documents (one generated line each, one container) in one SQLite
  substrate: the store's size on disk against the text it holds (with its write-ahead log,
  then checkpointed), where those bytes go (each table with its indexes, from SQLite's
  ``dbstat``, and the columns of the largest), and the latency of
  ``Substrate.ask`` (assertion tier), ``Substrate.recall`` (passages, fenced) and
  ``Substrate.answer`` (planner first), median and p95 over 200 questions; then, the
  corpus shaped like the issue's example (as many documents of two or three of the same
  generated lines, ~150 bytes each: 1.5 MB at 10,000), built once for its store's size
  after a checkpoint against its text;
* packed vectors: bytes per vector as float32, float16, int8 and sparse, and the recall@10
  that float16 and int8 give up against float32 (384-d random unit vectors; the passage
  index stores a dense embedding as int8) and that sparse packing of the hashed embedding
  keeps (all);
* Near latency at 100,000 vectors for each vector driver (memory, file, sqlite, usearch),
  top-10, with no filter and with a metadata filter keeping 1% and 10% of the entries,
  against a bare numpy brute force (``E @ q`` + argpartition; the filtered baseline indexes
  a precomputed row set) timed in the same run. The file and oxigraph/usearch stores are
  on disk in the temporary directory. Each driver's filtered top-10 is checked against
  brute force; usearch's unfiltered answer is HNSW, so its recall@10 is printed.

``--scale`` multiplies every size (corpus bytes, triples, vectors).
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from hirmem.semantic.extract import RuleExtractor
from hirmem.semantic.ingest import TreeIngester
from hirmem.semantic.parse import ByMediaType, Chain, CollapseSpaces, StripControl
from hirmem.semantic.retrieve import embedder_identity
from hirmem.semantic.split import SentenceSplitter
from hirmem.semantic.stages import Pipeline
from hirmem.semantic.stores import TripleStore, VectorStore, drivers, open_store
from hirmem.semantic.substrate import Substrate

F32 = npt.NDArray[np.float32]

_FIRST = ("Alice Bob Carol Dave Erin Frank Grace Heidi Ivan Judy Mallory Niaj Olivia Peggy "
          "Rupert Sybil Trent Victor Walter Zoe Amara Bjorn Chen Dmitri Emeka Farah Gustavo "
          "Hana Ines Jomo Kenji Leila")  # fmt: skip
FIRST = _FIRST.split(" ")
_LAST = "Smith Jones Garcia Okafor Tanaka Novak Silva Haddad Kowalski Larsen Moreau"
LAST = _LAST.split(" ")
PEOPLE = [f"{f} {ln}" for f in FIRST for ln in LAST]
ORG = ("Acme Corp", "Initech", "Globex", "Umbrella Labs", "Stark Industries", "Wayne Enterprises",
       "Hooli", "Vandelay Industries", "Soylent", "Tyrell Systems")  # fmt: skip
CITY = ("Berlin", "Paris", "Lagos", "Osaka", "Lima", "Oslo", "Nairobi", "Toronto", "Hanoi",
        "Porto", "Quito", "Tunis")  # fmt: skip
HOBBY = ("jazz music", "mountain hiking", "chess", "pottery", "sailing", "old films",
         "street photography", "baking bread")  # fmt: skip
FILLER = (
    "The weather was mild for the season and the meeting ran long.",
    "Nobody remembered who had booked the room, so the agenda slipped again.",
    "Later that week the numbers were revised twice before anyone signed off.",
    "It rained all afternoon, which suited the indoor plans well enough.",
)


def corpus(root: Path, target_bytes: int, seed: int = 526) -> tuple[int, int]:
    """Write a deterministic corpus of markdown files under ``root``; (files, bytes)."""
    rng = random.Random(seed)
    total = files = 0
    while total < target_bytes:
        lines = [f"# Notes {files}", ""]
        for _ in range(rng.randint(30, 60)):
            a, b = rng.sample(PEOPLE, 2)
            r = rng.random()
            if r < 0.18:
                lines.append(f"{a} works at {rng.choice(ORG)}. {rng.choice(FILLER)}")
            elif r < 0.34:
                lines.append(f"{a} lives in {rng.choice(CITY)}. {b} knows {a}.")
            elif r < 0.46:
                lines.append(f"{a} likes {rng.choice(HOBBY)}. {rng.choice(FILLER)}")
            elif r < 0.56:
                lines.append(f"{rng.choice(CITY)} is located in the region of {rng.choice(CITY)}.")
            elif r < 0.78:
                lines.append(f"{a.split()[0]}: I went to {rng.choice(CITY)} with {b} last "
                             f"{rng.choice(['week', 'month', 'spring'])}.")  # fmt: skip
            else:
                lines.append(" ".join(rng.sample(FILLER, 2)))
        text = "\n".join(lines) + "\n"
        path = root / f"d{files // 1000:03d}" / f"note{files:06d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        total += len(text.encode())
        files += 1
    return files, total


def bench_ingest(root: Path, sub: Substrate, label: str) -> None:
    pipeline = Pipeline(TreeIngester(root), ByMediaType(), Chain(StripControl(), CollapseSpaces()),
                        SentenceSplitter(1024), RuleExtractor())  # fmt: skip
    t0 = time.perf_counter()
    result = pipeline.run(str(root))
    t1 = time.perf_counter()
    sub.absorb(result)
    sub.save()
    t2 = time.perf_counter()
    nd, nc, nt = len(result.docs), len(result.chunks), len(result.triples)
    mb = sum(len(d.text.encode()) for d in result.docs) / 1e6
    for name, secs in (("pipeline only", t1 - t0), (f"pipeline + {label} substrate", t2 - t0)):
        print(f"  {name:<34} {secs:7.2f} s  {nd / secs:9.0f} docs/s  {nc / secs:9.0f} chunks/s  "
              f"{nt / secs:9.0f} triples/s  {mb / secs:6.2f} MB/s")  # fmt: skip
    print(f"  ({nd} documents, {mb:.1f} MB, {nc} chunks, {nt} assertions, "
          f"{len(sub.ledger)} distinct, {len(sub.prov.entities)} PROV entities)")  # fmt: skip


def _line(rng: random.Random) -> str:
    """One generated line about the people, places and employers (a sentence or two)."""
    a, b = rng.sample(PEOPLE, 2)
    r = rng.random()
    if r < 0.3:
        return f"{a} works at {rng.choice(ORG)}. {rng.choice(FILLER)}"
    if r < 0.6:
        return f"{a} lives in {rng.choice(CITY)}. {b} knows {a}."
    if r < 0.8:
        return f"{a} likes {rng.choice(HOBBY)}."
    return f"{a.split()[0]}: I went to {rng.choice(CITY)} with {b}."


def short_docs(n: int, seed: int = 526) -> list[str]:
    """``n`` one-line documents about the generated people, places and employers."""
    rng = random.Random(seed)
    return [_line(rng) for _ in range(n)]


def paragraph_docs(n: int, seed: int = 527) -> list[str]:
    """``n`` documents of two or three generated lines each (~150 bytes: the shape of the
    issue's example, 10,000 documents in 1.5 MB of text)."""
    rng = random.Random(seed)
    return [" ".join(_line(rng) for _ in range(3 if rng.random() < 0.35 else 2))
            for _ in range(n)]  # fmt: skip


def absorb_docs(path: Path, texts: list[str], prefix: str) -> tuple[Substrate, float]:
    """A SQLite substrate at ``path`` holding ``texts`` (one container, absorbed a thousand
    documents at a time through the rule extractor); with the seconds it took."""
    from hirmem.semantic.stages import Result, StageRun
    from hirmem.semantic.values import Doc, Origin, doc_id, with_origin

    sub = Substrate.open(path)
    pipeline = Pipeline(None, extractor=RuleExtractor())
    t0 = time.perf_counter()
    for start in range(0, len(texts), 1000):
        docs = []
        for i, text in enumerate(texts[start : start + 1000], start):
            ref = f"{prefix}{i}"
            org = Origin.of_bytes(ref, text.encode(), "text/plain", 0)
            docs.append(Doc(doc_id(ref, 0, org.sha256), ref, text,
                            with_origin({"container": "bench"}, org)))  # fmt: skip
        result = Result(runs=[StageRun("ingest", "bench", 0, 0, (d.source,), (d.id,))
                              for d in docs])  # fmt: skip
        sub.absorb(pipeline.process(docs, result))
        sub.save()
    return sub, time.perf_counter() - t0


def checkpointed_bytes(path: Path) -> int:
    """The bytes of the SQLite file at ``path`` (and its logs) after a checkpoint."""
    import sqlite3

    db = sqlite3.connect(str(path))
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
    return sum(f.stat().st_size for f in path.parent.glob(path.name + "*"))


def bench_ask(n: int, tmp: Path, queries: int = 200) -> None:
    path = tmp / "ask.db"
    texts = short_docs(n)
    sub, built = absorb_docs(path, texts, "bench://doc/")
    # the cyclic collector's debt from absorbing (a one-off in a long-running process) is
    # paid here, so it is not charged to the first questions timed
    gc.collect()
    text_bytes = sum(len(x.encode()) for x in texts)
    disk = sum(f.stat().st_size for f in tmp.glob("ask.db*"))
    print(f"  {n:,} documents, {text_bytes / 1e6:.2f} MB of text, absorbed in {built:.1f} s "
          f"({n / built:.0f} docs/s); vectors: {embedder_identity(sub.passages.embedder)} "
          f"(passages), {embedder_identity(sub.retriever.embedder)} (assertions)")  # fmt: skip
    print(f"  store on disk {disk / 1e6:.1f} MB = {disk / text_bytes:.1f}x the text, write-ahead "
          f"log included")  # fmt: skip
    breakdown(path, text_bytes)
    disk = sum(f.stat().st_size for f in tmp.glob("ask.db*"))
    # a line of ~63 B is shorter than the documents (two or three lines, ~150 B):
    # what each document costs whatever its length (its keys, codes, place, PROV records)
    # weighs more here; the goal of < 10x is the shape's (the paragraph corpus)
    print(f"  store on disk after a checkpoint {disk / 1e6:.1f} MB = {disk / text_bytes:.1f}x "
          f"the text ({disk / n:.0f} B a document of {text_bytes / n:.0f} B; the < 10x goal "
          f"is measured on the issue's shape, the paragraph corpus below)")  # fmt: skip
    vacuumed = tmp / "ask-vacuumed.db"
    import sqlite3

    con = sqlite3.connect(str(path))
    con.execute("VACUUM INTO ?", (str(vacuumed),))  # a copy: the substrate stays open
    con.close()
    print(f"  (the same, vacuumed into a copy: {vacuumed.stat().st_size / 1e6:.1f} MB = "
          f"{vacuumed.stat().st_size / text_bytes:.1f}x; free pages are not the fix, reported "
          f"for comparison)")  # fmt: skip
    vacuumed.unlink()
    rng = random.Random(7)
    asks = [rng.choice([f"Where does {p} live?", f"Where does {p} work?", f"What does {p} like?"])
            for p in rng.sample(PEOPLE, min(queries, len(PEOPLE)))]  # fmt: skip
    for name, call in (
        ("ask (assertions)", lambda q: sub.ask(q, 5)),
        ("ask (fenced)", lambda q: sub.ask(q, 5, readable={"bench"})),
        ("recall (passages)", lambda q: sub.recall(q, {"bench"}, 10)),
        ("answer (planner first)", lambda q: sub.answer(q, {"bench"})),
    ):
        times, cpu = [], []
        for q in asks:
            s, c = time.perf_counter(), time.process_time()
            call(q)
            times.append(time.perf_counter() - s)
            cpu.append(time.process_time() - c)
        # CPU time is the figure a loaded machine does not inflate; wall time is what a user waits
        print(f"  {name:<24} median {statistics.median(times) * 1e3:8.2f} ms   "
              f"p95 {pct(times, 0.95) * 1e3:8.2f} ms   max {max(times) * 1e3:8.2f} ms "
              f"(the first question loads the index); CPU median "
              f"{statistics.median(cpu) * 1e3:.2f} ms, p95 "
              f"{pct(cpu, 0.95) * 1e3:.2f} ms")  # fmt: skip
    sub.close()
    # the issue's own shape: the same generators, two or three lines a document (one build,
    # its size only; the one-line corpus above is the one timed)
    paras = paragraph_docs(n)
    para_bytes = sum(len(x.encode()) for x in paras)
    sub, built = absorb_docs(tmp / "ask-paragraphs.db", paras, "bench://para/")
    sub.close()
    disk = checkpointed_bytes(tmp / "ask-paragraphs.db")
    print(f"  paragraph corpus: {len(paras):,} documents of two or three lines, "
          f"{para_bytes / 1e6:.2f} MB of text ({para_bytes / len(paras):.0f} B each), absorbed "
          f"in {built:.1f} s; store on disk after a checkpoint {disk / 1e6:.1f} MB = "
          f"{disk / para_bytes:.1f}x the text (goal < 10x)")  # fmt: skip


def bench_packed(n: int, dim: int, queries: int = 200, k: int = 10) -> None:
    """Bytes per vector in each layout, and what float16 costs in recall against float32:
    the share of float32's top-k that the float16 rows return (random unit vectors, the
    hardest case: no cluster structure), and the same for the hashed embedding of the short
    documents, packed sparse (exact by construction, checked here)."""
    from hirmem.semantic.retrieve import Embedder
    from hirmem.semantic.stores.packed import Rows, pack

    rng = np.random.default_rng(16)
    mat = rng.standard_normal((n, dim)).astype(np.float32)
    mat /= np.linalg.norm(mat, axis=1, keepdims=True)
    qs = rng.standard_normal((queries, dim)).astype(np.float32)
    half = Rows([pack(v, half=True) for v in mat], dim)
    quarter = Rows([pack(v, int8=True) for v in mat], dim)

    def overlap(a: F32, b: F32) -> float:
        ta = set(np.argpartition(-a, k - 1)[:k].tolist())
        tb = set(np.argpartition(-b, k - 1)[:k].tolist())
        return len(ta & tb) / k

    r16 = statistics.mean(overlap(mat @ q, half.dot(q)) for q in qs)
    r8 = statistics.mean(overlap(mat @ q, quarter.dot(q) / quarter.norms) for q in qs)
    print(f"  dense, dim {dim}: float32 {4 * dim} B, float16 {len(pack(mat[0], half=True))} B, "
          f"int8 {len(pack(mat[0], int8=True))} B per vector; recall@{k} against float32: "
          f"float16 {r16:.4f}, int8 (cosine) {r8:.4f} ({n:,} random unit vectors, {queries} "
          f"queries)")  # fmt: skip
    e = Embedder()
    texts = short_docs(min(n, 20_000))
    blobs = [pack(e.embed(t)) for t in texts]
    sparse = Rows(blobs, e.dim)
    dense = np.stack([e.embed(t) for t in texts])
    asks = [e.embed(f"Where does {p} live?") for p in PEOPLE[:queries]]
    rs = statistics.mean(overlap(dense @ q, sparse.dot(q)) for q in asks)
    print(f"  hashed embedding (dim {e.dim}) of {len(texts):,} short documents: float32 "
          f"{4 * e.dim} B, sparse {statistics.mean(map(len, blobs)):.0f} B per vector on "
          f"average; sparse recall@{k} against float32 {rs:.4f}")  # fmt: skip


def breakdown(path: Path, text_bytes: int, top: int = 8) -> None:
    """Where the bytes go: each table with its indexes (SQLite's ``dbstat`` pages), largest
    first, as a multiple of the text; for the largest tables, the bytes each column holds."""
    import sqlite3

    db = sqlite3.connect(str(path))
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # count the WAL's pages in the file
        owner = dict(db.execute("SELECT name, tbl_name FROM sqlite_master").fetchall())
        pages: dict[str, int] = {}
        for name, size in db.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"):
            table = owner.get(name, name)
            for suffix in ("_data", "_idx", "_docsize", "_config", "_content"):  # FTS5 shadows
                if table.endswith(suffix) and table[: -len(suffix)] in owner:
                    table = table[: -len(suffix)]
            pages[table] = pages.get(table, 0) + int(size)
        total = sum(pages.values())
        print(f"  where the bytes go ({total / 1e6:.1f} MB in pages; table with its indexes):")
        ranked = sorted(pages.items(), key=lambda kv: -kv[1])
        for table, size in ranked:
            if size * 100 < total:
                continue
            cols = ""
            if table in [t for t, _ in ranked[:top]] and owner.get(table) == table:
                names = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
                if names:
                    sums = db.execute("SELECT " + ", ".join(
                        f"coalesce(sum(length(CAST({c} AS BLOB))), 0)" for c in names)
                        + f" FROM {table}").fetchone()  # fmt: skip
                    held = zip(names, sums, strict=True)
                    cols = "  " + ", ".join(f"{c} {v / 1e6:.2f}" for c, v in held
                                            if v * 50 >= size)  # fmt: skip
            print(f"    {table:<24} {size / 1e6:8.2f} MB {size / text_bytes:7.1f}x "
                  f"{100 * size / total:5.1f} %{cols}")  # fmt: skip
        rest = sum(v for v in pages.values() if v * 100 < total)
        print(f"    {'(tables under 1 % each)':<24} {rest / 1e6:8.2f} MB {rest / text_bytes:7.1f}x")
        shares: dict[str, int] = {}
        for table, size in pages.items():
            part = next((name for name, prefixes in SHARES if table.startswith(prefixes)),
                        "other")  # fmt: skip
            shares[part] = shares.get(part, 0) + size
        print("  shares of the text (each part with its tables and indexes): " + ", ".join(
            f"{part} {size / text_bytes:.1f}x" for part, size in
            sorted(shares.items(), key=lambda kv: -kv[1])))  # fmt: skip
    finally:
        db.close()


# the parts of a substrate file, by the prefixes of their tables (first match wins)
SHARES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("PROV", ("prov",)),
    ("ledger", ("ledger", "tombstones", "lifted")),
    ("docs", ("docs", "doc_chunks", "chunks")),
    ("graph", ("graph_", "nodes", "edges")),
    ("triples", ("triple",)),
    ("assertion vectors", ("vector",)),
    ("passages", ("passage",)),
    ("tier 1", ("tier1",)),
    ("claims", ("claim",)),
    ("entities", ("entit",)),
    ("decisions", ("decisions",)),
    ("source codes", ("source_cod",)),  # the codes every tier's rows hold for a source
)


def pct(xs: list[float], p: float) -> float:
    """The ``p`` quantile (0 < p < 1) of ``xs``."""
    s = sorted(xs)
    return s[min(len(s) - 1, int(p * len(s)))]


def timed(fn: Callable[[], object], n: int) -> list[float]:
    fn()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def bench_match(n: int, tmp: Path, queries: int) -> None:
    rng = random.Random(7)
    n_subj, n_pred = max(1, n // 20), 50

    def term(i: int) -> tuple[str, str, str]:
        # distinct triples: ~20 per subject, n/50 per predicate, one per object
        return f"entity {i % n_subj}", f"rel_{(i // n_subj) % n_pred}", f"value {i}"

    def triples() -> list[tuple[str, str, str]]:
        return [term(i) for i in range(n)]

    for name in drivers("triple"):
        store = open_store("triple", _dsn(name, tmp, "t"))
        t = time.perf_counter()
        store.assert_many(triples())
        load = time.perf_counter() - t
        print(f"  {name:<8} {len(store):>9} triples loaded in {load:6.1f} s")
        for shape in ("s??", "?po", "sp?", "??o"):

            def q(shape: str = shape, store: TripleStore = store) -> list[tuple[str, str, str]]:
                s, p, o = term(rng.randrange(n))
                return store.match(s if "s" in shape else None, p if "p" in shape else None,
                                   o if "o" in shape else None)  # fmt: skip

            rows = len(q())
            xs = timed(q, queries)
            print(f"    Match {shape}  median {statistics.median(xs) * 1e6:9.1f} µs   "
                  f"p95 {pct(xs, 0.95) * 1e6:9.1f} µs   (~{rows} rows)")  # fmt: skip
        close = getattr(store, "close", None)
        if close is not None:
            close()


def _dsn(name: str, tmp: Path, stem: str) -> str:
    fixed = {"memory": "memory:", "sqlite": f"sqlite:{tmp / stem}.db",
             "file": f"file:{tmp / stem}.jsonl"}  # fmt: skip
    return fixed.get(name, f"{name}:{tmp / stem}.{name}")


def interleaved(fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median seconds per function, calling them in turn each round (after a warm-up), so
    that load from elsewhere on the machine hits the baseline and the drivers alike."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: statistics.median(xs) for name, xs in times.items()}


def bench_near(n: int, dim: int, tmp: Path, queries: int) -> None:
    rng = np.random.default_rng(11)
    mat = rng.standard_normal((n, dim)).astype(np.float32)
    mat /= np.linalg.norm(mat, axis=1, keepdims=True)
    qs = rng.standard_normal((queries, dim)).astype(np.float32)
    qs /= np.linalg.norm(qs, axis=1, keepdims=True)
    subj = np.arange(n) % 100  # 1% per subject
    group = np.arange(n) % 10  # 10% per group
    k = 10
    filters: dict[str, dict[str, str] | None] = {
        "none": None, "10%": {"group": "g3"}, "1%": {"subject": "s3"},
    }  # fmt: skip
    rows = {"none": None, "10%": np.flatnonzero(group == 3), "1%": np.flatnonzero(subj == 3)}
    counter = iter(range(10**9))

    def brute(r: npt.NDArray[np.intp] | None) -> Callable[[], object]:
        def run() -> object:
            q = qs[next(counter) % queries]
            m = mat if r is None else mat[r]
            sims = m @ q
            top = np.argpartition(-sims, k - 1)[:k]
            return top[np.argsort(-sims[top])]

        return run

    stores: dict[str, VectorStore] = {}
    for name in drivers("vector"):
        store = open_store("vector", _dsn(name, tmp, "v"))
        items = [(f"v{i}", mat[i], {"subject": f"s{subj[i]}", "group": f"g{group[i]}"})
                 for i in range(n)]  # fmt: skip
        t = time.perf_counter()
        put_many = getattr(store, "put_many", None)
        if put_many is not None:
            put_many(items)
        else:
            for i, v, m in items:
                store.put(i, v, m)
        load = time.perf_counter() - t
        t = time.perf_counter()
        store.near(qs[0], k, {"subject": "s3"})
        cold = time.perf_counter() - t
        got = [m.id for m in store.near(qs[1], k, {"subject": "s3"})]
        r1 = rows["1%"]
        assert r1 is not None
        want = [f"v{r1[j]}" for j in np.argsort(-(mat[r1] @ qs[1]))[:k]]
        same = "filtered top-10 equals brute force" if got == want else "TOP-10 MISMATCH"
        recall = 0
        for qi in range(2, 22):
            truth = set(np.argpartition(-(mat @ qs[qi]), k - 1)[:k].tolist())
            recall += len(truth & {int(m.id[1:]) for m in store.near(qs[qi], k)})
        print(f"  {name:<8} {len(store):>7} vectors loaded in {load:5.1f} s; first query "
              f"{cold * 1e3:6.1f} ms; {same}; unfiltered recall@10 "
              f"{recall / (20 * k):.3f}")  # fmt: skip
        stores[name] = store

    def near(store: VectorStore, flt: dict[str, str] | None) -> Callable[[], object]:
        def run() -> object:
            return store.near(qs[next(counter) % queries], k, flt)

        return run

    fns: dict[str, Callable[[], object]] = {}
    for label in filters:
        fns[f"numpy|{label}"] = brute(rows[label])
        for name, store in stores.items():
            fns[f"{name}|{label}"] = near(store, filters[label])
    med = interleaved(fns, queries)
    print(f"  {'median top-10':<22}" + "".join(f"{'filter ' + lb:>16}" for lb in filters))
    for name in ["numpy", *stores]:
        title = "numpy brute force" if name == "numpy" else f"{name} driver"
        print(f"  {title:<22}" + "".join(f"{med[f'{name}|{lb}'] * 1e3:13.3f} ms"
                                         for lb in filters))  # fmt: skip
    for store in stores.values():
        close = getattr(store, "close", None)
        if close is not None:
            close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every size (default 1)")
    ap.add_argument("--dim", type=int, default=128, help="vector dimension (default 128)")
    ap.add_argument("--postgres", action="store_true",
                    help="ingest into a PostgreSQL substrate too (starts a server)")
    ap.add_argument("--skip", default="", help="comma list of ingest,ask,packed,match,near to skip")
    args = ap.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    mb = max(0.05, 10.0 * args.scale)
    n_triples = max(1000, int(1_000_000 * args.scale))
    n_vectors = max(1000, int(100_000 * args.scale))
    print(f"hirmem semantic bench  (python {sys.version.split()[0]}, numpy {np.__version__}, "
          f"scale {args.scale})")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-semantic-") as d:
        tmp = Path(d)
        if "ingest" not in skip:
            root = tmp / "corpus"
            root.mkdir()
            files, size = corpus(root, int(mb * 1e6))
            print(f"\ningest: {files} files, {size / 1e6:.1f} MB generated")
            bench_ingest(root, Substrate.in_memory(), "in-memory")
            sq = Substrate.open(tmp / "ingest.db")
            bench_ingest(root, sq, "SQLite")
            sq.close()
            if args.postgres:  # a server of its own, fsync on (as the fleet runs it)
                from hirmem.emulation import postgres
                from hirmem.sql import PgTarget

                with postgres.Primary("bench-semantic") as primary:
                    pg = Substrate.open(PgTarget(primary.dsn, "semantic"))
                    bench_ingest(root, pg, "PostgreSQL")
                    pg.close()
        if "ask" not in skip:
            n_docs = max(1000, int(100_000 * args.scale))
            print(f"\nask at {n_docs:,} short documents (SQLite substrate):")
            bench_ask(n_docs, tmp)
        if "packed" not in skip:
            print(f"\npacked vectors (at {n_vectors:,}):")
            bench_packed(n_vectors, 384)
        if "match" not in skip:
            print(f"\nMatch at {n_triples:,} triples (each driver, random bound terms):")
            bench_match(n_triples, tmp, 2000)
        if "near" not in skip:
            print(f"\nNear at {n_vectors:,} vectors, dim {args.dim}, top-10:")
            bench_near(n_vectors, args.dim, tmp, 200)
    return 0


if __name__ == "__main__":
    sys.exit(main())
