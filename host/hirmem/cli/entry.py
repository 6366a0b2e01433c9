# PYTHON_ARGCOMPLETE_OK  (argcomplete: this entry point completes; see `hirmem completion`)
"""The ``hirmem`` command line: each command group lives in the module that does the work."""

from __future__ import annotations

import argparse
import sqlite3
import sys
from importlib import metadata
from pathlib import Path

import argcomplete
from argcomplete import shell_integration

from hirmem.cli import commands, options
from hirmem.cli import fleet as fleet_cli
from hirmem.emulation import provision as provision_module
from hirmem.memory import cli as memory_cli
from hirmem.protocol import identity
from hirmem.protocol.errors import HirmemError
from hirmem.semantic import cli as semantic_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hirmem", description="hirmem edge-memory host tools")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    options.add_global(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    comp = sub.add_parser("completion", help="print the shell completion script")
    comp.add_argument("shell", choices=("bash", "zsh", "fish"), help="the shell it is for")
    demo = sub.add_parser(
        "demo", help="three emulated boards, the daemon, memory and semantics, checked"
    )
    demo.add_argument("--seconds", type=float, default=15.0, help="how long the boards run")
    demo.add_argument("--sensor-ms", type=int, default=50, help="sensor period on the boards")
    demo.add_argument(
        "--simulated", action="store_true", help="the wire contract alone over a simulated line"
    )
    demo.add_argument(
        "--serve", nargs="?", const="127.0.0.1:8080", default=None, metavar="ADDR:PORT",
        help="afterwards, serve the dashboard over the demo's stores until interrupted "
        "(default 127.0.0.1:8080)",
    )
    demo.add_argument("--seed", type=int, default=2026, help="(--simulated) noise seed")
    # a message is retransmitted whole (all its frame pieces, SPEC §6.8): noise that
    # damages one byte in 2,000 lets a 3 KB pack offer through in about 1 try in 4
    demo.add_argument("--flip", type=float, default=0.0003, help="(--simulated) bit flips/byte")
    demo.add_argument("--drop", type=float, default=0.0001, help="(--simulated) byte drop rate")
    demo.add_argument("--garbage", type=float, default=0.0001, help="(--simulated) garbage rate")
    demo.add_argument("--max-frame", type=int, default=512, help="(--simulated) frame size")
    ident = sub.add_parser("id", help="print fold(s, p, o) and the triple id")
    ident.add_argument("subject")
    ident.add_argument("predicate")
    ident.add_argument("object")
    provision_module.add_arguments(
        sub.add_parser("provision", help="create a device key; provision a board image's key slot")
    )
    commands.add_parsers(sub)
    memory_cli.add_parser(sub)
    semantic_cli.add_parser(sub)
    fleet_cli.add_parser(sub)
    return parser


def version() -> str:
    """The installed distribution's version (the source tree's when it is not installed)."""
    try:
        return metadata.version("hirmem")
    except metadata.PackageNotFoundError:
        return "0.1.0 (not installed)"


def completion_script(shell: str) -> str:
    """What ``eval "$(hirmem completion bash)"`` (or a file in bash-completion's folder)
    needs: argcomplete's hook calling back into ``hirmem``."""
    return str(shell_integration.shellcode(["hirmem"], shell=shell))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argcomplete.autocomplete(parser)  # returns at once unless a shell asks for completions
    raw = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(raw)
    options.note_deprecated(args, raw)
    try:
        options.resolve(args)
        if args.command != "daemon":  # the daemon sets up its own logging
            options.setup_log_level(args.log_level)
        if args.command == "completion":
            print(completion_script(args.shell), end="")
            return 0
        if args.command == "demo" and args.simulated:
            from hirmem.cli import wire_demo

            return wire_demo.run(args.seed, args.flip, args.drop, args.garbage, args.max_frame)
        if args.command == "demo":
            from hirmem.cli import demo as demo_module

            return demo_module.run(args.seconds, args.sensor_ms, serve=args.serve)
        if args.command == "provision":
            return provision_module.run_cli(args)
        if args.command == "id":
            parts = (args.subject, args.predicate, args.object)
            print(" | ".join(identity.fold(p) for p in parts))
            print(identity.triple_id(*parts))
            return 0
        if args.command == "memory":
            return memory_cli.run(args)
        if args.command == "fleet":
            return fleet_cli.run(args)
        if args.command == "semantic":
            if args.semantic_command == "devices":
                if args.memory is None:
                    args.memory = _default_memory(args)
                if args.memory is not None:
                    return _devices_with_memory(args)
            return semantic_cli.run(args)
        return commands.run(args)
    except HirmemError as exc:
        print(f"hirmem: {exc}", file=sys.stderr)
        return 2
    except sqlite3.DatabaseError as exc:  # a damaged database file, met past its opening
        print(
            f"hirmem: the database cannot be read: {exc} (a damaged file? check it with "
            "`sqlite3 FILE 'PRAGMA integrity_check'`, restore it from a copy)",
            file=sys.stderr,
        )
        return 2


def _default_memory(args: argparse.Namespace) -> Path | None:
    """``semantic devices`` without ``--memory``: the memory engine's store where the
    daemon keeps it (``hirmem-memory.sqlite`` beside the intake database), when there is
    one; else None, and a note (not with ``--json``) that only the record-level guard
    applies."""
    database = Path(getattr(args, "database", None) or "hirmem.db")
    beside = database.parent / "hirmem-memory.sqlite"
    if beside.exists():
        return beside
    if not args.json:
        print(f"guard: record-level only (no memory store at {beside}; --memory names one)")
    return None


def _devices_with_memory(args: argparse.Namespace) -> int:
    """``hirmem semantic devices --memory DB``: the memory engine's verdicts guard the feed
    (composed here: the semantic layer does not import the engine)."""
    from hirmem.memory.engine import MemoryEngine
    from hirmem.memory.model import Memory

    if not args.memory.exists():
        raise HirmemError(f"no memory store at {args.memory} (run hirmem memory follow first)")
    engine = MemoryEngine(args.memory)
    try:

        def patterns() -> list[Memory]:
            """The engine's distilled memories, as store rows (tier 1 of the substrate)."""
            return engine.store.select("kind IN (?, ?)", ("pattern", "procedure"))

        return semantic_cli.run(args, verdict=engine.withheld, distilled=patterns)
    finally:
        engine.close()


if __name__ == "__main__":
    sys.exit(main())
