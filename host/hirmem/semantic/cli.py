"""``hirmem semantic …``: ingest a directory, ask a scoped question, print a PROV trace.

Wire it with ``add_parser(subparsers)``; dispatch with ``run(args)`` when
``args.command == "semantic"``.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hirmem.protocol.errors import HirmemError
from hirmem.semantic.extract import RuleExtractor
from hirmem.semantic.ingest import TreeIngester
from hirmem.semantic.parse import ByMediaType, Chain, CollapseSpaces, StripControl
from hirmem.semantic.split import SentenceSplitter
from hirmem.semantic.stages import Pipeline
from hirmem.semantic.substrate import Substrate

if TYPE_CHECKING:  # the device feed (and the daemon's reader) load only when used
    from collections.abc import Callable, Iterable

    from hirmem.semantic.devices import Distilled, Verdict

    Patterns = Callable[[], Iterable[Distilled]]

__all__ = ["add_parser", "run"]

DEFAULT_DB = "semantic.db"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "semantic", help="the semantic substrate: ingest, ask, trace (HIP-0526)"
    )
    sub = p.add_subparsers(dest="semantic_command", required=True)
    ing = sub.add_parser("ingest", help="ingest the text files of a directory tree")
    ing.add_argument("directory", type=Path)
    _substrate(ing)
    ing.add_argument("--chunk-bytes", type=int, default=1024, help="chunk size (default 1024)")
    ask = sub.add_parser("ask", help="ask a question, scoped by the subject it names")
    ask.add_argument("question")
    _substrate(ask, reads=True)
    ask.add_argument("-k", type=int, default=5, help="answers to return (default 5)")
    ask.add_argument("--flat", action="store_true", help="do not scope by subject")
    ask.add_argument("--trace", action="store_true", help="print the PROV trace of the answer")
    tr = sub.add_parser("trace", help="print the PROV-O lineage of an assertion id")
    tr.add_argument("id", help="a triple id (16 hex digits) or an entity id (kind:local)")
    _substrate(tr, reads=True)
    tr.add_argument("--format", choices=("text", "turtle", "jsonld", "provn", "provjson"),
                    default="text")  # fmt: skip
    dev = sub.add_parser("devices", help="feed device records from the host store")
    dev.add_argument("--database", type=Path, default=argparse.SUPPRESS, metavar="FILE",
                     help="the daemon's store (default: $HIRMEM_DB, host.database of "
                     "hirmem --config, hirmem.db)")  # fmt: skip
    dev.add_argument("--store", dest="database", type=Path, default=argparse.SUPPRESS,
                     help=argparse.SUPPRESS)  # the old spelling
    _substrate(dev)
    dev.add_argument("--json", action="store_true", help="machine-readable output (JSON)")
    dev.add_argument(
        "--after",
        type=int,
        default=None,
        help="record cursor to start after (default: where the last run on this store ended)",
    )
    dev.add_argument("--memory", type=Path,
                     help="the memory engine's store: what it quarantined stays out, and "
                     "what it quarantined since it was fed is retracted (default: "
                     "hirmem-memory.sqlite beside the database, when there is one)")  # fmt: skip
    return p


def _substrate(p: argparse.ArgumentParser, reads: bool = False) -> None:
    """``--substrate`` (``--db``, its old spelling); ``--create`` where the command only
    reads it, so that a mistyped path is not a fresh empty substrate."""
    p.add_argument("--substrate", default=DEFAULT_DB, metavar="FILE",
                   help=f"the substrate file (default {DEFAULT_DB})")
    p.add_argument("--db", dest="substrate", help=argparse.SUPPRESS)  # the old spelling
    if reads:
        p.add_argument("--create", action="store_true",
                       help="start an empty substrate if the path does not exist")


SHOWN_CONFLICTS = 20  # record conflicts listed by `semantic devices`; the count is whole


def run(
    args: argparse.Namespace, verdict: Verdict | None = None, distilled: Patterns | None = None
) -> int:
    """``verdict`` (the memory engine's, wired in by ``hirmem`` for ``devices --memory``)
    keeps what the engine quarantined out of the graph; ``distilled`` reads the engine's
    distilled memories, which ``devices`` keeps as tier-1 memories."""
    try:
        return _run(args, verdict, distilled)
    except HirmemError as exc:
        print(f"hirmem semantic: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace, verdict: Verdict | None, distilled: Patterns | None) -> int:
    cmd = args.semantic_command
    if cmd in ("ask", "trace") and not args.create and not Path(args.substrate).exists():
        raise HirmemError(
            f"{args.substrate}: no substrate here (a mistyped path? `hirmem semantic ingest` "
            "or `semantic devices` fill one; --create starts an empty one)"
        )
    sub = Substrate.open(args.substrate)
    try:
        if cmd == "ingest":
            root = args.directory.resolve()
            tree = TreeIngester(root)
            pipeline = Pipeline(tree, ByMediaType(), Chain(StripControl(), CollapseSpaces()),
                                SentenceSplitter(args.chunk_bytes), RuleExtractor())  # fmt: skip
            result = sub.ingest(pipeline, str(root))
            print(f"ingested {len(result.docs)} documents, {len(result.chunks)} chunks, "
                  f"{len(result.triples)} assertions into {args.substrate}")  # fmt: skip
            for r in result.rejected:  # files skipped, documents and assertions refused
                print(f"skipped {r.ref}: {r.reason}")
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

            database = getattr(args, "database", None) or Path("hirmem.db")
            key = str(database.resolve())
            cursor = args.after if args.after is not None else _kept_cursor(args.substrate, key)
            docs = triples = 0
            with open_intake(database) as store:
                feed = DeviceFeed(store, sub, verdict=verdict)
                while True:  # every record after the cursor, a batch at a time
                    after = cursor
                    cursor, result = feed.pull(after, FEED_BATCH)
                    docs, triples = docs + len(result.docs), triples + len(result.triples)
                    sub.save()
                    _keep_cursor(args.substrate, key, cursor)
                    if cursor == after:
                        break
                conflicts = feed.conflicts()
                taken_back = feed.recheck()  # quarantined by the memory engine since fed
                patterns = feed.distilled(distilled()) if distilled is not None else 0
                if taken_back or patterns:
                    sub.save()
            if args.json:
                print(json.dumps({
                    "fed": docs, "assertions": triples, "cursor": cursor,
                    "withheld": sum(feed.withheld.values()), "retracted": taken_back,
                    "patterns": patterns,
                    "skipped": [{"ref": ref, "reason": why} for ref, why in feed.skipped],
                    "skipped_total": feed.skips,
                    "conflicts": [{"ref": ref, "reason": why} for ref, why in conflicts],
                }, indent=2))  # fmt: skip
                return 0
            print(f"fed {docs} records, {triples} assertions; cursor {cursor}; "
                  f"withheld {sum(feed.withheld.values())}"
                  + (f" ({taken_back} fed earlier, retracted now)" if taken_back else "")
                  + (f"; {patterns} distilled memories kept" if patterns else ""))
            for ref, why in feed.skipped:
                print(f"skipped {ref}: {why}")
            if feed.skips > len(feed.skipped):
                print(f"skipped {feed.skips} records in all (the latest {len(feed.skipped)} "
                      "listed)")
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


FEED_BATCH = 1000  # records per pull of `semantic devices`


def _cursor_db(db: str) -> sqlite3.Connection:
    con = sqlite3.connect(db, isolation_level=None, timeout=30)
    con.execute(
        "CREATE TABLE IF NOT EXISTS device_feed_cursors "
        "(store TEXT PRIMARY KEY, cursor INTEGER NOT NULL)"
    )
    return con


def _kept_cursor(db: str, store: str) -> int:
    """Where the last `semantic devices` run on ``store`` ended (0: never fed)."""
    con = _cursor_db(db)
    try:
        row = con.execute(
            "SELECT cursor FROM device_feed_cursors WHERE store = ?", (store,)
        ).fetchone()
    finally:
        con.close()
    return 0 if row is None else int(row[0])


def _keep_cursor(db: str, store: str, cursor: int) -> None:
    con = _cursor_db(db)
    try:
        con.execute(
            "INSERT INTO device_feed_cursors VALUES (?, ?) "
            "ON CONFLICT (store) DO UPDATE SET cursor = excluded.cursor",
            (store, cursor),
        )
    finally:
        con.close()


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
