"""``hirmem memory …``: inspect and steer a memory store from the command line.

Wire it in with ``add_parser(subparsers)`` and dispatch ``run(args)``::

    hirmem memory stats --memory mem.sqlite [--json]   # states and layers, with counts
    hirmem memory list --state quarantined --limit 20 [--json]
    hirmem memory show ID                          # every schema field
    hirmem memory history ID                       # versions and audit records
    hirmem memory verify [--anchor LINE]           # chain, checkpoints, rows, triggers
    hirmem memory checkpoint                       # sign the head; print it to keep elsewhere
    hirmem memory check                            # find corrupted hashes (quarantines them)
    hirmem memory admit TEXT --source S [--flags 0x0fff] [--kind action]
    hirmem memory patterns [--episodes] [--json]   # distilled memories, episodes
    hirmem memory recall TEXT [-k 5] [--state consolidated]
    hirmem memory sweep
    hirmem memory repair ID PAYLOAD --reason WHY [--steward NAME] [--flags 0x0fff]
    hirmem memory follow [--database hirmem.db]    # admit what the daemon stored
    hirmem memory review list [--limit 50 | --all] [--json]
    hirmem memory review decide ID --steward NAME --decision promote --reason WHY
    hirmem memory review history [ID]

``--memory`` (the store, default ``hirmem-memory.sqlite``), ``--memory-config``, ``--key``
and ``--create`` are taken before or after the subcommand; ``--db`` and ``--config`` are
the old spellings of the first two.

A store on PostgreSQL is named by a URI, ``--memory
postgresql://USER@HOST:PORT/DATABASE?schema=memory`` (the schema holding the engine's
tables, default ``memory``, as a fleet tenant's database holds its engine; every other
parameter is libpq's). Its checkpoint key is given with ``--key FILE`` (a fleet tenant's:
``hirmem fleet tenant key NAME --out FILE``), since no file sits beside such a store.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from hirmem.memory import distill, evidence, review
from hirmem.memory.config import MemoryConfig
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.model import Layer, Memory, State
from hirmem.memory.observe import KINDS
from hirmem.memory.recall import DEFAULT_STATES, RecallFilter
from hirmem.protocol.errors import HirmemError
from hirmem.protocol.keys import read_key_file
from hirmem.sql import PgTarget

__all__ = ["add_parser", "run"]

_STATES = [s.name.lower() for s in State]
_WRITES = frozenset({"admit", "repair", "sweep", "follow", "check", "checkpoint", "decide"})
_LAYERS = [x.name.lower() for x in Layer if x is not Layer.PROVENANCE]
DEFAULT_MEMORY = Path("hirmem-memory.sqlite")
PG_SCHEMES = ("postgresql://", "postgres://")
DEFAULT_PG_SCHEMA = "memory"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "memory", help="inspect and steer the host memory engine (SQLite store)"
    )
    _store_options(p)
    sub = p.add_subparsers(dest="memory_command", required=True)
    _leaf(sub, "stats", table=True, help="counts per state and per layer")
    ls = _leaf(sub, "list", table=True, help="list memories, filtered")
    _filters(ls)
    ls.add_argument("--limit", type=int, default=50)
    show = _leaf(sub, "show", help="every field of one memory (explicit id: any state)")
    show.add_argument("id")
    hist = _leaf(sub, "history", help="a memory's versions, audit records and strength")
    hist.add_argument("id")
    ver = _leaf(sub, "verify",
                help="the audit chain, its signed checkpoints, every row, the triggers")
    ver.add_argument("--anchor", help="a line `hirmem memory checkpoint` printed earlier")
    _leaf(sub, "checkpoint", help="sign the chain's head now; print it to keep elsewhere")
    _leaf(sub, "check", help="find memories whose hash no longer matches (quarantine them)")
    admit = _leaf(sub, "admit", help="capture and gate one memory")
    admit.add_argument("payload")
    admit.add_argument("--source", default="cli")
    admit.add_argument("--flags", type=lambda s: int(s, 0), default=0x0FFF)
    admit.add_argument("--confidence", type=float, default=1.0)
    admit.add_argument("--provenance", type=float, default=1.0)
    admit.add_argument("--subject", default="")
    admit.add_argument("--attribute", default="")
    admit.add_argument("--value", default="")
    admit.add_argument(
        "--kind", default="fact", choices=[k for k in KINDS if k != "pattern"],
        help="fact (default), event, reading, action (JSON {action, result, outcome}: "
        "repeated successes become a procedure) or procedure (a stated routine)",
    )  # fmt: skip
    pat = _leaf(sub, "patterns", table=True,
                help="distilled memories (patterns, learnt procedures)")
    pat.add_argument("--episodes", action="store_true", help="list the episodes of each")
    rc = _leaf(sub, "recall", help="top-k by Sim·M·Rec·Trust")
    rc.add_argument("query")
    rc.add_argument("-k", type=int, default=5)
    rc.add_argument("--no-touch", action="store_true", help="do not count this as a rehearsal")
    _filters(rc)
    _leaf(sub, "sweep", help="run the decay sweep now")
    _repair_parser(sub)
    fol = _leaf(sub, "follow", help="admit the device packs the daemon stored since last time")
    fol.add_argument("--database", type=Path, default=argparse.SUPPRESS, metavar="FILE",
                     help="the daemon's store (default: $HIRMEM_DB, host.database of "
                     "hirmem --config, hirmem.db)")  # fmt: skip
    fol.add_argument("--intake", dest="database", type=Path, default=argparse.SUPPRESS,
                     help=argparse.SUPPRESS)  # the old spelling  # fmt: skip
    rv = _leaf(sub, "review", help="steward review of quarantined memories")
    rsub = rv.add_subparsers(dest="review_command", required=True)
    rl = _leaf(rsub, "list", table=True,
               help="quarantined memories awaiting review, oldest first")  # fmt: skip
    rl.add_argument("--limit", type=int, default=50, help="at most this many (%(default)s)")
    rl.add_argument("--all", action="store_true", help="every one, however many")
    dec = _leaf(rsub, "decide", help="record a steward decision")
    dec.add_argument("id")
    dec.add_argument("--steward", required=True)
    dec.add_argument("--decision", required=True, choices=review.DECISIONS)
    dec.add_argument("--reason", required=True)
    rh = _leaf(rsub, "history", help="recorded decisions")
    rh.add_argument("id", nargs="?")
    return p


def _repair_parser(sub: Any) -> None:
    rp = _leaf(sub, "repair", help="write a corrected version of a memory (the prior stays)")
    rp.add_argument("id", help="the memory to correct (its latest version)")
    rp.add_argument("payload", help="the corrected content")
    rp.add_argument("--reason", required=True, help="why (kept in the audit chain)")
    rp.add_argument("--steward", help="who repairs (audited as steward:NAME; default system)")
    rp.add_argument("--source", help="new source (default: the prior's)")
    rp.add_argument("--flags", type=lambda s: int(s, 0), help="new sub-check flags")
    rp.add_argument("--confidence", type=float, help="new Q (default: the prior's)")
    rp.add_argument("--provenance", type=float, help="new P (default: the prior's)")
    rp.add_argument("--value", help="structured value, when the payload carries none")


def _leaf(sub: Any, name: str, table: bool = False, **kw: Any) -> argparse.ArgumentParser:
    """A subcommand that also takes the group's options after its name (and ``--json``
    when it prints a table)."""
    p: argparse.ArgumentParser = sub.add_parser(name, **kw)
    _store_options(p)
    if table:
        p.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                       help="machine-readable output (JSON)")  # fmt: skip
    return p


def _store_options(p: argparse.ArgumentParser) -> None:
    """The group's options, accepted before and after the subcommand (defaults filled in by
    :func:`run`, so a later parser never overwrites an earlier spelling)."""
    p.add_argument("--memory", default=argparse.SUPPRESS,
                   metavar="FILE|URI", help=f"the memory store: a SQLite file (default "
                   f"{DEFAULT_MEMORY}) or postgresql://…?schema={DEFAULT_PG_SCHEMA}")  # fmt: skip
    p.add_argument("--db", dest="memory", default=argparse.SUPPRESS,
                   help=argparse.SUPPRESS)  # the old spelling
    p.add_argument("--memory-config", dest="config", default=argparse.SUPPRESS,
                   metavar="JSON", help="JSON file of MemoryConfig overrides")  # fmt: skip
    p.add_argument("--config", dest="config", default=argparse.SUPPRESS,
                   help=argparse.SUPPRESS)  # the old spelling (--config is the TOML file)
    p.add_argument(
        "--key", default=argparse.SUPPRESS,
        help="host key file that signs the audit checkpoints (default: <store>.key beside "
        "the store; give the daemon's host key for a store the daemon keeps)",
    )  # fmt: skip
    p.add_argument("--create", action="store_true", default=argparse.SUPPRESS,
                   help="read commands: create the store if the path does not exist")


def _repair(engine: MemoryEngine, args: argparse.Namespace) -> int:
    new = engine.repair(
        args.id, args.payload, reason=args.reason,
        actor=f"steward:{args.steward}" if args.steward else "system",
        value=args.value, source=args.source, flags=args.flags,
        confidence=args.confidence, provenance=args.provenance,
    )  # fmt: skip
    print(f"v{new.version} " + _line(new) + f"\n    supersedes {new.supersedes}")
    if new.quarantine_reason:
        print(f"  quarantined: {new.quarantine_reason}")
    return 0


def _filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("--state", action="append", choices=_STATES, default=[])
    p.add_argument("--layer", action="append", choices=_LAYERS, default=[])
    p.add_argument("--source", action="append", default=[])
    p.add_argument("--device", action="append", default=[])
    p.add_argument("--subject", action="append", default=[])


def _filter(args: argparse.Namespace, default_states: frozenset[State]) -> RecallFilter:
    states = frozenset(State[s.upper()] for s in args.state) or default_states
    return RecallFilter(
        layers=frozenset(Layer[x.upper()] for x in args.layer),
        states=states,
        sources=frozenset(args.source),
        devices=frozenset(args.device),
        subjects=frozenset(args.subject),
    )


def _line(m: Memory) -> str:
    text = m.payload.decode("utf-8", errors="replace")
    if m.kind in ("pattern", "procedure") and m.value:
        text = f"{text}: {m.value}"
    text = text if len(text) <= 40 else text[:39] + "…"
    return (
        f"{m.id}  {m.state.name.lower():<12} {m.layer.name.lower():<10} M={m.strength:.3f} "
        f"Rn={m.rn:.3f} T={m.trust:.3f} n={m.access_count:<3} {m.source!r:<12} {text}"
    )


def _show(m: Memory) -> None:
    for name in Memory.__dataclass_fields__:
        value = getattr(m, name)
        if name == "embedding":
            value = f"<{len(value) // 4} float32>"
        elif isinstance(value, bytes):
            value = value.hex() if name != "payload" else repr(value)
        elif isinstance(value, (State, Layer)):
            value = value.name.lower()
        print(f"{name:>18}: {value}")


def run(args: argparse.Namespace) -> int:
    for name, default in (("memory", DEFAULT_MEMORY), ("config", None), ("key", None),
                          ("create", False), ("json", False),
                          ("database", Path("hirmem.db"))):  # fmt: skip
        if getattr(args, name, None) is None:
            setattr(args, name, default)
    try:
        store = store_target(str(args.memory))
        if not args.create and _reads(args) and not _exists(store):
            raise HirmemError(
                f"{store}: no memory store here (a mistyped path? give --create to "
                "start an empty one, or admit or follow to fill it)"
            )
        if isinstance(store, PgTarget) and not args.key:
            raise HirmemError(
                f"a memory store on {store} is opened with its checkpoint key: give --key "
                "FILE (a fleet tenant's: hirmem fleet tenant key NAME --out FILE)"
            )
        config = MemoryConfig.load(args.config) if args.config else MemoryConfig()
        key = read_key_file(Path(args.key)) if args.key else None
        engine = MemoryEngine(store, config, signing_key=key)
    except HirmemError as exc:
        print(f"hirmem memory: {exc}", file=sys.stderr)
        return 2
    try:
        if {args.memory_command, getattr(args, "review_command", "")} & _WRITES:
            engine.check_signer()  # before anything is written, not at close
        rc = _run(engine, args)
    except HirmemError as exc:
        print(f"hirmem memory: {exc}", file=sys.stderr)
        rc = 2
    try:
        engine.close()  # signs a checkpoint when the command moved the chain
    except HirmemError as exc:
        print(f"hirmem memory: {exc}", file=sys.stderr)
        rc = 2
    return rc


def store_target(text: str) -> Path | PgTarget:
    """``--memory``'s value: a SQLite file, or a ``postgresql://`` URI whose ``schema``
    parameter (taken out: libpq does not know it) names the engine's schema."""
    if not text.startswith(PG_SCHEMES):
        return Path(text)
    parts = urlsplit(text)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [v for k, v in query if k == "schema"]
    schema = schemas[-1] if schemas else DEFAULT_PG_SCHEMA
    if not schema.isidentifier() or schema.lower() != schema:
        raise HirmemError(
            f"--memory: schema={schema!r}: a lower-case name of letters, digits and _"
        )
    rest = urlencode([(k, v) for k, v in query if k != "schema"])
    return PgTarget(urlunsplit(parts._replace(query=rest)), schema)


def _exists(store: Path | PgTarget) -> bool:
    """Whether the store is there (a read never makes one)."""
    if isinstance(store, Path):
        return store.exists()
    import psycopg

    try:
        with psycopg.connect(store.conninfo, autocommit=True, connect_timeout=10) as db:
            row = db.execute("SELECT to_regclass(%s)", (f"{store.schema}.memories",)).fetchone()
    except psycopg.Error as exc:
        raise HirmemError(f"cannot reach {store}: {str(exc).strip()}") from None
    return row is not None and row[0] is not None


def _reads(args: argparse.Namespace) -> bool:
    """Whether the command only reads the store (then a missing store is a mistake)."""
    return not {args.memory_command, getattr(args, "review_command", "")} & _WRITES


def memory_json(m: Memory) -> dict[str, object]:
    """One memory as the ``--json`` tables print it."""
    return {
        "id": m.id, "state": m.state.name.lower(), "layer": m.layer.name.lower(),
        "kind": m.kind, "strength": m.strength, "rn": m.rn, "trust": m.trust,
        "access_count": m.access_count, "source": m.source,
        "payload": m.payload.decode("utf-8", errors="replace"), "value": m.value,
        "quarantine_reason": m.quarantine_reason, "permanent": m.permanent,
    }  # fmt: skip


def _run(engine: MemoryEngine, args: argparse.Namespace) -> int:
    cmd = args.memory_command
    if cmd == "stats":
        stats = engine.stats()
        if args.json:
            print(json.dumps(stats, indent=2))
            return 0
        for group, counts in stats.items():
            print(group + ": " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        return 0
    if cmd == "list":
        where, params = _filter(args, frozenset()).sql()  # in SQL: a page, not every row
        shown = engine.store.select(where, params,
                                    f"ORDER BY rowid LIMIT {max(args.limit, 0)}")  # fmt: skip
        if args.json:
            print(json.dumps([memory_json(m) for m in shown], indent=2))
        for m in [] if args.json else shown:
            print(_line(m))
        return 0
    if cmd == "show":
        _show(engine.require(args.id))
        episodes = distill.episodes_of(engine, args.id)
        if episodes:
            print(f"{'episodes':>18}: {len(episodes)} (wasDerivedFrom)")
            for eid in episodes:
                print("    " + _line(engine.require(eid)))
        return 0
    if cmd == "patterns" and args.json:
        print(json.dumps([
            dict(memory_json(engine.require(pattern.memory_id)), form=pattern.form,
                 episodes=distill.episodes_of(engine, pattern.memory_id))
            for pattern in distill.patterns(engine)
        ], indent=2))  # fmt: skip
        return 0
    if cmd == "patterns":
        for pattern in distill.patterns(engine):
            p = engine.require(pattern.memory_id)
            episodes = distill.episodes_of(engine, pattern.memory_id)
            print(
                f"{p.id}  {p.state.name.lower():<12} {p.layer.name.lower():<10} "
                f"M={p.strength:.3f} {pattern.form:<7} {len(episodes):>4} episodes  "
                f"{p.payload.decode('utf-8', errors='replace')}: {p.value}"
            )
            if args.episodes:
                for eid in episodes:
                    print("    " + _line(engine.require(eid)))
        return 0
    if cmd == "history":
        for version in engine.history(args.id):
            print(f"v{version.version} " + _line(version))
            for rec in engine.audit.records(version.id):
                print(f"    #{rec.seq} {rec.action:<13} {rec.actor:<16} {rec.detail}")
            points = engine.strength_history(version.id)
            if points:
                print("    strength: " + "  ".join(
                    f"{time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime(t))} {m:.3f} ({cause})"
                    for t, m, cause in points))  # fmt: skip
        return 0
    if cmd == "follow":
        from hirmem.daemon.reader import open_intake
        from hirmem.memory.follow import follow_intake

        with open_intake(args.database) as intake:
            fr = follow_intake(engine, intake)
        print(
            f"{fr.packs} packs: {fr.admitted} admitted, {fr.quarantined} quarantined, "
            f"{fr.duplicates} already held, {fr.mismatched} disagreed with the device, "
            f"{fr.disagreed} with sub-checks the host evaluated otherwise, "
            f"{len(fr.conflicts)} record conflicts"
        )
        if fr.conflicts:
            listed = ", ".join(fr.conflicts[:5]) + (" ..." if len(fr.conflicts) > 5 else "")
            print(f"warning: {len(fr.conflicts)} records not admitted: their id is held by a "
                  f"different record or fall in the host's reserved id space (a device reused "
                  f"ids or is named as the host; hirmem intake lists them): {listed}")
        return 0
    if cmd == "checkpoint":
        engine.checkpoint()
        with engine.store.reading() as db:
            latest = evidence.latest_checkpoint(db)
        print(latest.text() if latest else "the chain is empty: nothing to checkpoint")
        return 0
    if cmd == "verify":
        anchor = evidence.Checkpoint.parse(args.anchor) if args.anchor else None
        result = engine.verify_audit(anchor)
        print(result)
        return 0 if result.ok else 1
    if cmd == "check":
        bad = engine.check_integrity()
        print(f"{len(bad)} corrupted memories quarantined" + "".join(f"\n  {b}" for b in bad))
        return 1 if bad else 0
    if cmd == "admit":
        m = engine.admit(
            args.payload,
            args.source,
            flags=args.flags,
            confidence=args.confidence,
            provenance=args.provenance,
            subject=args.subject,
            attribute=args.attribute,
            value=args.value,
            kind=args.kind,
        )
        print(_line(m))
        if m.quarantine_reason:
            print(f"  quarantined: {m.quarantine_reason}")
        return 0
    if cmd == "recall":
        hits = engine.recall(args.query, args.k, _filter(args, DEFAULT_STATES),
                             touch=not args.no_touch)  # fmt: skip
        for hit in hits:
            print(
                f"{hit.score:.4f} = Sim {hit.sim:.3f} · M {hit.strength:.3f} · "
                f"Rec {hit.recency:.3f} · Trust {hit.trust:.3f}  {hit.id}"
            )
        return 0
    if cmd == "repair":
        return _repair(engine, args)
    if cmd == "sweep":
        r = engine.sweep()
        print(f"swept {r.examined}: {r.changed} changed, {r.archived} archived, "
              f"{r.promoted} promoted")  # fmt: skip
        return 0
    if cmd == "review":
        if args.review_command == "list" and args.json:
            page = review.pending(engine, None if args.all else max(args.limit, 0))
            print(json.dumps([memory_json(m) for m in page], indent=2))
            return 0
        if args.review_command == "list":
            waiting = review.pending(engine, None if args.all else max(args.limit, 0))
            for m in waiting:
                mark = " [permanent]" if m.permanent else ""
                print(_line(m) + f"\n    reason: {m.quarantine_reason}{mark}")
            total = review.pending_count(engine)
            if total > len(waiting):
                print(f"({len(waiting)} of {total} quarantined shown: --limit N or --all for more)")
            return 0
        if args.review_command == "decide":
            d = review.decide(engine, args.id, args.steward, args.decision, args.reason)
            print(f"decision #{d.seq}: {d.steward} {d.decision} {d.memory_id}: {d.reason}")
            print(_line(engine.require(args.id)))
            return 0
        for d in review.decisions(engine, args.id):
            print(f"#{d.seq} {d.memory_id} {d.decision} by {d.steward}: {d.reason}")
        return 0
    return 2
