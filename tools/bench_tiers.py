"""What the tiers cost: ingest time, rows and bytes per tier, and the time of a fused recall.

Builds a substrate file from synthetic short documents (names, relations, hedges, stated
ends, aliases; spread over containers), then asks questions through
:meth:`Substrate.remember` (passages, memories and claims fused) and through
:meth:`Substrate.recall` (passages alone) for comparison, and prints the figures.

    PYTHONPATH=host python tools/bench_tiers.py [--docs 5000] [--questions 300]
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from hirmem.semantic.extract import RuleExtractor
from hirmem.semantic.retrieve import Embedder
from hirmem.semantic.split import SentenceSplitter
from hirmem.semantic.stages import Pipeline, Result, StageRun
from hirmem.semantic.substrate import Substrate
from hirmem.semantic.values import Doc, Origin, doc_id, with_origin

T0 = 1_700_000_000_000
DAY = 86_400_000
FIRST = ["Ada", "Bo", "Cy", "Dana", "Eli", "Fay", "Gus", "Hal", "Ivy", "Jo", "Kai", "Lu"]
LAST = ["Reyes", "Nair", "Lind", "Okafor", "Smith", "Berg", "Haas", "Moreau"]
ORGS = ["Acme", "Initech", "Globex", "Umbrella", "Hooli", "Vandelay"]
TAILS = ["pushing for net-45 payment terms", "rowing on weekends", "shipping late again",
         "learning Japanese", "fixing the boiler", "closing the store early",
         "renegotiating the lease", "hiring two welders"]  # fmt: skip


def _person(rng: random.Random) -> str:
    return f"{rng.choice(FIRST)} {rng.choice(LAST)}"


def _text(rng: random.Random) -> str:
    out = []
    for _ in range(rng.randint(1, 3)):
        p, form = _person(rng), rng.randrange(6)
        if form == 0:
            out.append(f"{p} works at {rng.choice(ORGS)}.")
        elif form == 1:
            out.append(f"{p} reports to {_person(rng)}.")
        elif form == 2:
            out.append(f"Maybe {p} is {rng.choice(TAILS)}.")
        elif form == 3:
            out.append(f"{p} was {rng.choice(TAILS)} until {rng.randint(2015, 2024)}.")
        elif form == 4:
            first, last = p.split()
            out.append(f"{first} ({first[:2]}) {last} is {rng.choice(TAILS)}.")
        else:
            out.append(f"{p} is {rng.choice(TAILS)}.")
    return " ".join(out)


def _say(sub: Substrate, pipeline: Pipeline, ref: str, text: str, container: str, at: int) -> None:
    org = Origin.of_bytes(ref, text.encode(), "text/plain", at)
    doc = Doc(doc_id(ref, 0, org.sha256), ref, text, with_origin({"container": container}, org))
    result = Result(runs=[StageRun("ingest", "bench", at, at, (ref,), (doc.id,))])
    sub.absorb(pipeline.process([doc], result))


def _ms(xs: list[float]) -> str:
    xs = sorted(xs)
    return (f"median {statistics.median(xs) * 1000:.2f} ms, "
            f"p95 {xs[int(0.95 * (len(xs) - 1))] * 1000:.2f} ms")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=5000)
    ap.add_argument("--questions", type=int, default=300)
    ap.add_argument("--seed", type=int, default=16)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tiers.db"
        sub = Substrate.open(path, clock=lambda: T0 + 4000 * DAY, passage_embedder=Embedder())
        pipeline = Pipeline(None, splitter=SentenceSplitter(512), extractor=RuleExtractor())
        text_bytes = 0
        t = time.perf_counter()
        for i in range(args.docs):
            text = _text(rng)
            text_bytes += len(text.encode())
            _say(sub, pipeline, f"mem://bench/{i}", text, f"room{i % 8}", T0 + i * 60_000)
        ingest = time.perf_counter() - t
        sub.save()
        readable = {f"room{i}" for i in range(4)}
        questions = [rng.choice([f"What is {_person(rng)} doing?",
                                 f"Where does {_person(rng)} work?",
                                 f"Who does {_person(rng)} report to?",
                                 f"Who is {rng.choice(TAILS)}?"])
                     for _ in range(args.questions)]  # fmt: skip
        fused, passages, answers = [], [], []
        for q in questions:
            t = time.perf_counter()
            sub.remember(q, readable, 10)
            fused.append(time.perf_counter() - t)
            t = time.perf_counter()
            sub.recall(q, readable, 10)
            passages.append(time.perf_counter() - t)
            t = time.perf_counter()
            sub.answer(q, readable)
            answers.append(time.perf_counter() - t)
        rows = {"passages": len(sub.passages), "memories": len(sub.memories)}
        sub.close()
        db = sqlite3.connect(path)
        rows["claims"] = db.execute("SELECT count(*) FROM claims").fetchone()[0]
        rows["entities"] = db.execute("SELECT count(*) FROM entities").fetchone()[0]
        # a name said by a document is an entity_said row; entity_aliases holds only the
        # other names an entity is known by
        rows["names said"] = db.execute("SELECT count(*) FROM entity_said").fetchone()[0]
        rows["aliases"] = db.execute("SELECT count(*) FROM entity_aliases").fetchone()[0]
        try:
            # an index (SQLite's own unique indexes too) counts with the table it indexes
            sizes = dict(db.execute(
                "SELECT CASE WHEN t LIKE 'tier1%' THEN 'tier 1 (memories)' "
                "WHEN t LIKE 'passage%' THEN 'tier 0 (passages)' "
                "WHEN t LIKE 'claim%' THEN 'tier 2 (claims)' "
                "WHEN t LIKE 'entit%' THEN 'entities' ELSE 'other' END, sum(pgsize) "
                "FROM (SELECT coalesce(m.tbl_name, d.name) AS t, d.pgsize FROM dbstat d "
                "LEFT JOIN sqlite_master m ON m.name = d.name) GROUP BY 1").fetchall()
            )  # fmt: skip
        except sqlite3.OperationalError:
            sizes = {}
        db.close()
        total = path.stat().st_size
    print(f"{args.docs} documents, {text_bytes} bytes of text; ingest {ingest:.1f} s "
          f"({ingest / args.docs * 1000:.2f} ms per document, every tier)")
    print("rows: " + ", ".join(f"{k} {v}" for k, v in rows.items()))
    print(f"file {total / 1e6:.2f} MB ({total / text_bytes:.1f}x the text)")
    for part, size in sorted(sizes.items()):
        print(f"  {part}: {size / 1e6:.2f} MB")
    print(f"remember (passages+memories+claims fused), {args.questions} questions: {_ms(fused)}")
    print(f"recall (passages only): {_ms(passages)}")
    print(f"answer (plan, else fused recall and the reader): {_ms(answers)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
