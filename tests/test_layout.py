"""The host package is grouped by the flow, and its import rules stay true.

Each package of ``hirmem`` says in its ``__init__`` what it may import; this test reads
every module's imports (at any depth, ``TYPE_CHECKING`` blocks included) with :mod:`ast`
and fails on the first import that crosses a line the layout draws:

    protocol   ← nothing of hirmem
    link       ← protocol
    daemon     ← link, protocol
    emulation  ← link, protocol
    embed      ← protocol
    memory     ← protocol, embed, daemon.reader (the store, read-only)
    semantic   ← protocol, embed, daemon.reader
    fleet      ← protocol, memory, semantic, daemon.reader, api
    api        ← protocol, daemon.reader, memory, semantic
    cli        ← anything
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import ROOT

PACKAGE = ROOT / "host" / "hirmem"

# For each package, the hirmem modules it may import (a package name allows all of it).
ALLOWED: dict[str, frozenset[str]] = {
    "protocol": frozenset({"protocol"}),
    "link": frozenset({"protocol", "link"}),
    "daemon": frozenset({"protocol", "link", "daemon"}),
    "emulation": frozenset({"protocol", "link", "emulation"}),
    "embed": frozenset({"protocol", "embed"}),
    # SQL databases behind small interfaces (SQLite or PostgreSQL): for memory, semantic, fleet
    "sql": frozenset({"protocol", "sql"}),
    "memory": frozenset({"protocol", "embed", "sql", "memory", "daemon.reader"}),
    "semantic": frozenset({"protocol", "embed", "sql", "semantic", "daemon.reader"}),
    # the fleet node serves the API's application over its tenants (api never imports fleet)
    "fleet": frozenset(
        {"protocol", "sql", "memory", "semantic", "daemon.reader", "api", "fleet"}
    ),
    # the HTTP API: over the read door, the engine and the substrate; the daemon hands
    # its health and metrics in as callables (hirmem.api.sources)
    "api": frozenset({"protocol", "daemon.reader", "memory", "semantic", "api"}),
    "cli": frozenset(
        {"protocol", "link", "daemon", "emulation", "embed", "sql", "memory", "semantic",
         "fleet", "api", "cli"}
    ),
    # hirmem/__init__.py re-exports the error family and nothing else
    "": frozenset({"protocol.errors"}),
}


def _module_name(path: Path, package_root: Path) -> str:
    parts = list(path.relative_to(package_root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def hirmem_imports(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """Every hirmem module ``source`` imports, as (line, dotted name under hirmem)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                anchor = module.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # `from hirmem import cbor` names a module; `from hirmem.x import f` names x
            names = [f"{base}.{a.name}" for a in node.names] if base == "hirmem" else [base]
        else:
            continue
        found += [(node.lineno, n) for n in names if n == "hirmem" or n.startswith("hirmem.")]
    return found


def _allowed(package: str, target: str) -> bool:
    """``target`` is a dotted name under hirmem ("daemon.reader", "protocol.cbor", ...)."""
    return any(target == a or target.startswith(a + ".") for a in ALLOWED[package])


def violations(path: Path, package_root: Path = PACKAGE) -> list[str]:
    """Where ``path`` (a module under ``package_root``) breaks the rules, one line each."""
    module = _module_name(path, package_root)
    shown = path.relative_to(package_root.parent.parent)
    parts = module.split(".")
    package = parts[1] if len(parts) > 1 else ""
    if package not in ALLOWED:
        return [f"{shown}: hirmem.{package} is in no package of the layout"]
    out = []
    for line, name in hirmem_imports(path.read_text(), module, path.name == "__init__.py"):
        target = name.removeprefix("hirmem").removeprefix(".")
        if not _allowed(package, target):
            out.append(f"{shown}:{line}: {module} imports {name}")
    return out


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_every_module_keeps_the_import_rules() -> None:
    bad = [v for path in _modules() for v in violations(path)]
    assert not bad, "imports that cross the layout's lines:\n" + "\n".join(bad)


def test_only_the_packages_of_the_layout_at_the_top() -> None:
    top = {p.name for p in PACKAGE.iterdir() if not p.name.startswith(("_", "."))}
    assert top == {"protocol", "link", "daemon", "emulation", "embed", "sql", "memory",
                   "semantic", "fleet", "api",
                   "cli", "py.typed"}  # fmt: skip


@pytest.mark.parametrize("package", sorted(p for p in ALLOWED if p))
def test_each_package_says_what_it_may_import(package: str) -> None:
    doc = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text()))
    assert doc and "May import" in doc, f"hirmem/{package}/__init__.py: say what it may import"


@pytest.mark.parametrize(
    ("module", "source", "bad"),
    [
        ("hirmem.protocol.packs", "from hirmem.link.session import Session\n", True),
        ("hirmem.protocol.packs", "from hirmem import store\n", True),
        ("hirmem.protocol.packs", "from . import cbor\nfrom .keys import PublicKey\n", False),
        ("hirmem.link.line", "from ..daemon import store\n", True),
        ("hirmem.memory.follow", "from hirmem.daemon.reader import IntakeReader\n", False),
        ("hirmem.memory.follow", "from hirmem.daemon.store import Store\n", True),
        ("hirmem.semantic.cli", "def f():\n    import hirmem.daemon.service\n", True),
        ("hirmem.semantic.cli", "from hirmem.memory import MemoryEngine\n", True),
        ("hirmem.emulation.rogue", "import hirmem.protocol.packs as p\n", False),
        ("hirmem.cli.demo", "from hirmem.daemon.service import Daemon\n", False),
        ("hirmem.semantic.passages", "from hirmem.embed.minilm import MiniLMEmbedder\n", False),
        ("hirmem.memory.embed", "from hirmem.embed.minilm import MiniLMEmbedder\n", False),
        ("hirmem.embed.minilm", "from hirmem.memory.embed import HashEmbedder\n", True),
        ("hirmem.embed.minilm", "from hirmem.semantic.retrieve import Embedder\n", True),
        ("hirmem.fleet.tenant", "from hirmem.daemon.store import Store\n", True),
        ("hirmem.fleet.consolidate", "from hirmem.memory.follow import intake_records\n", False),
        ("hirmem.daemon.service", "from hirmem.fleet.app import create_app\n", True),
        ("hirmem.api.app", "from hirmem.memory.engine import MemoryEngine\n", False),
        ("hirmem.api.app", "from hirmem.daemon.store import Store\n", True),
        ("hirmem.api.app", "from hirmem.daemon.health import health_report\n", True),
    ],
)
def test_the_checker_sees_a_crossing(tmp_path: Path, module: str, source: str, bad: bool) -> None:
    """The rule check itself: a planted crossing is caught, a legal import is not."""
    root = tmp_path / "host" / "hirmem"
    path = root.joinpath(*module.split(".")[1:]).with_suffix(".py")
    path.parent.mkdir(parents=True)
    path.write_text(source)
    assert bool(violations(path, root)) is bad


def test_the_read_door_never_creates_a_store(tmp_path: Path) -> None:
    """memory and semantic read the daemon's store through hirmem.daemon.reader; a path
    with nothing there is refused, and nothing is created at it."""
    from hirmem.daemon.reader import open_intake
    from hirmem.protocol.errors import HirmemError

    missing = tmp_path / "typo.db"
    with pytest.raises(HirmemError, match="no daemon store here"), open_intake(missing):
        pass
    assert not missing.exists()
