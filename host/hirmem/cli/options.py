"""The command-line convention every ``hirmem`` command follows.

- ``--database FILE`` is the daemon's store wherever a command reads or writes it; its
  default comes from ``HIRMEM_DB``, then ``host.database`` of the TOML file given with
  ``--config``, then ``hirmem.db``. ``--memory`` is the memory engine's store and
  ``--substrate`` the semantic substrate's file.
- The old spellings (``--db``, ``--intake``, ``--store``) still work, hidden from
  ``--help``, and each use prints a one-line deprecation note on stderr.
- Options are accepted before and after subcommands: every option is declared with a
  suppressed default on each parser that accepts it, so the spelling nearest the end of
  the command line wins and nothing is overwritten by a default; defaults are filled in
  once, here, after parsing.
- A database path that does not exist is an error for the commands that read it and for
  the daemon, unless ``--create`` is given: a mistyped path never becomes a fresh store.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tomllib
from pathlib import Path

from hirmem.protocol.errors import HirmemError

ENV_DATABASE = "HIRMEM_DB"
DEFAULT_DATABASE = Path("hirmem.db")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")

# (command, old spelling) -> the spelling that replaces it
DEPRECATED: dict[tuple[str, str], str] = {
    ("memory", "--db"): "--memory",
    ("memory", "--config"): "--memory-config",
    ("memory", "--intake"): "--database",
    ("semantic", "--db"): "--substrate",
    ("semantic", "--store"): "--database",
}

# commands (as "command subcommand") that take --database, and what they do with it
READS = frozenset({"status", "intake", "device list", "device remove", "memory follow",
                   "semantic devices", "daemon", "outbox", "token list",
                   "token revoke"})  # fmt: skip
WRITES = frozenset({"device add", "push", "token create"})  # create the store when it is missing


def add_database(parser: argparse.ArgumentParser, *aliases: str, create: bool = True) -> None:
    """``--database`` (and the hidden old ``aliases``), plus ``--create`` when the command
    refuses a missing store without it."""
    parser.add_argument(
        "--database", type=Path, default=argparse.SUPPRESS, metavar="FILE",
        help=f"the daemon's store (default: ${ENV_DATABASE}, host.database of --config, "
        f"{DEFAULT_DATABASE})",
    )  # fmt: skip
    for alias in aliases:
        parser.add_argument(alias, dest="database", type=Path, default=argparse.SUPPRESS,
                            help=argparse.SUPPRESS)  # fmt: skip
    if create:
        add_create(parser)


def add_create(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--create", action="store_true", default=argparse.SUPPRESS,
        help="create the store if the path does not exist (otherwise a missing path is "
        "an error)",
    )  # fmt: skip


def add_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", dest="config_toml", type=Path, default=argparse.SUPPRESS, metavar="TOML",
        help="the daemon's TOML configuration (its host.database is the default store)",
    )  # fmt: skip


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="machine-readable output (JSON)")  # fmt: skip


def add_log_level(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-level", choices=LOG_LEVELS, default=argparse.SUPPRESS,
                        help="the least severe log lines shown (default warning; the "
                        "daemon: info)")  # fmt: skip


def add_global(parser: argparse.ArgumentParser) -> None:
    """What ``hirmem`` accepts before any command."""
    add_log_level(parser)
    add_config(parser)
    add_database(parser)


def command_path(args: argparse.Namespace) -> str:
    """``"memory follow"``, ``"device list"``, ``"status"``: the command as typed."""
    sub = {"device": "device_command", "memory": "memory_command",
           "semantic": "semantic_command", "token": "token_command"}.get(args.command)  # fmt: skip
    return f"{args.command} {getattr(args, sub)}" if sub else str(args.command)


def note_deprecated(args: argparse.Namespace, argv: list[str]) -> None:
    """One line on stderr for every old spelling on the command line (after the command's
    name: before it, ``--config`` is the global TOML option)."""
    seen: set[str] = set()
    start = argv.index(args.command) if args.command in argv else 0
    for token in argv[start:]:
        if token == "--":
            break
        spelling = token.split("=", 1)[0]
        new = DEPRECATED.get((args.command, spelling))
        if new and spelling not in seen:
            seen.add(spelling)
            print(f"hirmem: {spelling} is deprecated here; use {new}", file=sys.stderr)


def toml_database(config: Path) -> Path | None:
    """``host.database`` of a daemon configuration file (relative to the file's folder)."""
    try:
        doc = tomllib.loads(config.read_text(encoding="utf-8"))
    except OSError as exc:
        raise HirmemError(f"--config {config}: cannot read it: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise HirmemError(f"--config {config}: not valid TOML: {exc}") from None
    host = doc.get("host", {})
    value = host.get("database") if isinstance(host, dict) else None
    if value is None:
        return None
    if not isinstance(value, str):
        raise HirmemError(f"--config {config}: host.database must be a string")
    return config.resolve().parent / value


def resolve(args: argparse.Namespace, environ: dict[str, str] | None = None) -> None:
    """Fill in the defaults after parsing: json, create, log level and, for the commands
    that take it, the database (flag, then environment, then TOML, then hirmem.db)."""
    env = os.environ if environ is None else environ
    for name, default in (("json", False), ("create", False), ("log_level", None),
                          ("config_toml", None)):  # fmt: skip
        if not hasattr(args, name):
            setattr(args, name, default)
    path = command_path(args)
    if path not in READS | WRITES:
        return
    if getattr(args, "database", None) is None:
        if env.get(ENV_DATABASE):
            args.database = Path(env[ENV_DATABASE])
        elif args.config_toml is not None and path != "daemon":  # the daemon reads its file
            args.database = toml_database(args.config_toml) or DEFAULT_DATABASE
        elif path != "daemon":
            args.database = DEFAULT_DATABASE
        else:
            args.database = None
    if path in READS and path != "daemon" and not args.create:
        require_existing(args.database)


def require_existing(path: Path) -> None:
    """A store path that does not exist is a mistake until ``--create`` says otherwise."""
    if not path.exists():
        raise HirmemError(
            f"{path}: no store here (a mistyped path? give --create to start a new "
            f"store there; the default comes from --database, ${ENV_DATABASE}, "
            "host.database of --config, then hirmem.db)"
        )


def level_number(name: str) -> int:
    """``"info"`` → ``logging.INFO``: a name ``--log-level`` accepts."""
    return {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
            "error": logging.ERROR, "critical": logging.CRITICAL}[name]  # fmt: skip


def setup_log_level(level: str | None) -> None:
    """``--log-level`` for the commands that are not the daemon (it sets up its own)."""
    if level is not None:
        logging.basicConfig(level=level_number(level), format="%(levelname)s %(name)s: %(message)s")
