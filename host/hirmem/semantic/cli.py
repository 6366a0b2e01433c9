"""``hirmem semantic …``: ingest a directory, ask a scoped question, print a PROV trace.

Wire it with ``add_parser(subparsers)``; dispatch with ``run(args)`` when
``args.command == "semantic"``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from hirmem.protocol.errors import HirmemError
from hirmem.semantic.extract import RuleExtractor
from hirmem.semantic.ingest import TreeIngester
from hirmem.semantic.parse import ByMediaType, Chain, CollapseSpaces, StripControl
from hirmem.semantic.split import SentenceSplitter
from hirmem.semantic.stages import Pipeline
from hirmem.semantic.substrate import Substrate

__all__ = ["add_parser", "run"]

DEFAULT_DB = "semantic.db"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "semantic", help="the semantic substrate: ingest, ask, trace (HIP-0526)"
    )
    sub = p.add_subparsers(dest="semantic_command", required=True)
    ing = sub.add_parser("ingest", help="ingest the text files of a directory tree")
    ing.add_argument("directory", type=Path)
    ing.add_argument("--db", default=DEFAULT_DB, help=f"substrate file (default {DEFAULT_DB})")
    ing.add_argument("--chunk-bytes", type=int, default=1024, help="chunk size (default 1024)")
    ask = sub.add_parser("ask", help="ask a question, scoped by the subject it names")
    ask.add_argument("question")
    ask.add_argument("--db", default=DEFAULT_DB)
    ask.add_argument("-k", type=int, default=5, help="answers to return (default 5)")
    ask.add_argument("--flat", action="store_true", help="do not scope by subject")
    ask.add_argument("--trace", action="store_true", help="print the PROV trace of the answer")
    tr = sub.add_parser("trace", help="print the PROV-O lineage of an assertion id")
    tr.add_argument("id", help="a triple id (16 hex digits) or an entity id (kind:local)")
    tr.add_argument("--db", default=DEFAULT_DB)
    tr.add_argument("--format", choices=("text", "turtle", "jsonld", "provn", "provjson"),
                    default="text")  # fmt: skip
    dev = sub.add_parser("devices", help="feed device records from the host store")
    dev.add_argument("--store", required=True, type=Path, help="the host daemon's database")
    dev.add_argument("--db", default=DEFAULT_DB)
    dev.add_argument("--after", type=int, default=0, help="record cursor to start after")
    return p


SHOWN_CONFLICTS = 20  # record conflicts listed by `semantic devices`; the count is whole


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except HirmemError as exc:
        print(f"hirmem semantic: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    cmd = args.semantic_command
    sub = Substrate.open(args.db)
    try:
        if cmd == "ingest":
            root = args.directory.resolve()
            tree = TreeIngester(root)
            pipeline = Pipeline(tree, ByMediaType(), Chain(StripControl(), CollapseSpaces()),
                                SentenceSplitter(args.chunk_bytes), RuleExtractor())  # fmt: skip
            result = sub.ingest(pipeline, str(root))
            print(f"ingested {len(result.docs)} documents, {len(result.chunks)} chunks, "
                  f"{len(result.triples)} assertions into {args.db}")  # fmt: skip
            for path, why in tree.skipped:
                print(f"skipped {path}: {why}")
            return 0
        if cmd == "ask":
            ans = sub.ask(args.question, args.k, scoped=not args.flat)
            scope = f"subject {ans.subject!r}" if ans.subject else "flat (no subject named)"
            print(f"question: {ans.question}\nscope: {scope}")
            if not ans.hits:
                print("no answer: nothing in scope")
                return 1
            for h in ans.hits:
                e = sub.ledger.get(h.triple)
                spo = f"({e.subject}, {e.predicate}, {e.object})" if e else "(erased)"
                print(f"{h.score:.3f}  {h.triple}  {spo}\n       evidence: {h.evidence!r} "
                      f"[{h.chunk}]")  # fmt: skip
            if args.trace:
                print()
                _print_trace(sub, ans.hits[0].triple, "text")
            return 0
        if cmd == "trace":
            _print_trace(sub, args.id, args.format)
            return 0
        if cmd == "devices":
            from hirmem.daemon.reader import open_intake
            from hirmem.semantic.devices import DeviceFeed

            with open_intake(args.store) as store:
                feed = DeviceFeed(store, sub)
                cursor, result = feed.pull(args.after)
                conflicts = feed.conflicts()
            print(f"fed {len(result.docs)} records, {len(result.triples)} assertions; "
                  f"cursor {cursor}")  # fmt: skip
            for ref, why in feed.skipped:
                print(f"skipped {ref}: {why}")
            if conflicts:
                print(f"warning: {len(conflicts)} records of the store are not fed (record "
                      "conflicts; hirmem intake lists them):")
                for ref, why in conflicts[:SHOWN_CONFLICTS]:
                    print(f"  not fed {ref}: {why}")
                if len(conflicts) > SHOWN_CONFLICTS:
                    print(f"  ... and {len(conflicts) - SHOWN_CONFLICTS} more")
            return 0
    finally:
        sub.close()
    return 2


def _print_trace(sub: Substrate, id: str, fmt: str) -> None:
    eid = id if ":" in id else f"assertion:{id}"
    if fmt == "turtle":
        print(sub.prov.to_turtle([eid]), end="")
    elif fmt == "jsonld":
        print(json.dumps(sub.prov.to_jsonld([eid]), indent=1))
    elif fmt == "provn":
        print(sub.prov.to_provn([eid]), end="")
    elif fmt == "provjson":
        print(sub.prov.to_provjson([eid]))
    else:
        print(f"PROV trace of {eid}:")
        for ent in sub.prov.lineage(eid):
            gen = ", ".join(ent.generated_by) or "-"
            der = ", ".join(ent.derived_from) or "-"
            print(f"  entity {ent.id} ({ent.kind})\n    wasGeneratedBy {gen}\n"
                  f"    wasDerivedFrom {der}")  # fmt: skip
            if ent.attributed_to:
                print(f"    wasAttributedTo {ent.attributed_to}")
        for act in sub.prov.trace(eid):
            print(f"  activity {act.id} ({act.kind}) wasAssociatedWith {act.agent}; "
                  f"used {', '.join(act.used) or '-'}")  # fmt: skip
