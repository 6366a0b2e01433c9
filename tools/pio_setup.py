"""Prepare a PlatformIO core folder so that `pio run` builds the local boards offline.

    .venv/bin/python tools/pio_setup.py [--core-dir DIR]

PlatformIO downloads what it lacks from its registry, which the project's machines
cannot reach. Everything the local dev-platform (boards/platformio) needs is made
here instead, from what is installed (TOOLCHAIN.md, "PlatformIO offline"):

- the toolchain packages boards/platformio/packages/toolchain-<triplet>/: their
  bin/ gets links to /usr/bin/<triplet>-* (the Debian cross compilers). The links
  are made here, not committed: they would dangle wherever the compilers are not
  installed, and a missing compiler is reported by name instead;
- $PLATFORMIO_CORE_DIR/packages/tool-scons: a package.json, a .piopm that names the
  owner and the version the installed PlatformIO core requires, and a scons.py that
  runs SCons from the PyPI `scons` package (in this Python environment);
- $PLATFORMIO_CORE_DIR/platforms/platformio.pio-link: the dev-platform installed as
  a link to boards/platformio (what `pio run` would do on its first build), so that
  `pio device monitor` finds the platform, and its monitor filter, before any build;
- $PLATFORMIO_CORE_DIR/appstate.json: telemetry off, no upgrade check, and the core
  version recorded (a version change would make PlatformIO update its packages
  from the registry on the next command).

The core folder is, in order: --core-dir, $PLATFORMIO_CORE_DIR, <repo>/.pio-core
(platformio.ini's core_dir). Idempotent: a file is written only when it differs; run
it again after upgrading platformio or scons. Exit status 1 if PlatformIO would still
need its registry for tool-scons; a missing cross compiler is only reported (the
boards of the other architecture still build).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLATFORM_DIR = ROOT / "boards" / "platformio"
TOOLCHAINS_DIR = PLATFORM_DIR / "packages"
SYSTEM_BIN = Path("/usr/bin")
NEVER_DAYS = 36500  # check_platformio_interval: no upgrade check (it would go online)

SCONS_PY = '''\
"""tool-scons for PlatformIO, made by hirmem's tools/pio_setup.py: runs SCons from
the PyPI scons package installed in this Python environment (no registry download)."""
import sys

from SCons.Script.Main import main

sys.exit(main())
'''


class SetupError(Exception):
    """The core folder could not be prepared; the message says what to do."""


@dataclass(frozen=True)
class Result:
    core_dir: Path
    scons_version: str
    tool_scons_version: str
    toolchains: dict[str, list[str]]  # package name -> missing programs ([] = complete)
    changed: list[Path]


def default_core_dir() -> Path:
    env = os.environ.get("PLATFORMIO_CORE_DIR")
    return Path(env) if env else ROOT / ".pio-core"


def _write(path: Path, text: str, changed: list[Path]) -> None:
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    changed.append(path)


def _json(data: object) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def platformio_version() -> str:
    version: str = importlib.import_module("platformio").__version__
    return version


def scons_requirement() -> str:
    """The tool-scons requirement of the installed PlatformIO core, e.g. '~4.41101.0'."""
    deps = importlib.import_module("platformio.dependencies").get_core_dependencies()
    requirement = deps.get("tool-scons")
    if not isinstance(requirement, str):
        raise SetupError("this PlatformIO core names no tool-scons version")
    return requirement


def tool_scons_version(requirement: str) -> str:
    """The version to declare: the base of the core's requirement (~X, ^X, X)."""
    match = re.fullmatch(r"[~^=>]*\s*(\d+\.\d+\.\d+)", requirement.strip())
    if match is None:
        raise SetupError(f"cannot read the tool-scons requirement {requirement!r}")
    return match.group(1)


def installed_scons() -> str:
    try:
        version = importlib.metadata.version("scons")
    except importlib.metadata.PackageNotFoundError:
        raise SetupError(
            "the PyPI package scons is not installed in this Python environment: "
            "pip install -e '.[test]' (or tools/run setup)"
        ) from None
    major = version.split(".", 1)[0]
    if major != "4":
        raise SetupError(f"SCons {version} is installed; PlatformIO 6 runs SCons 4.x")
    return version


def setup_tool_scons(core_dir: Path, changed: list[Path]) -> tuple[str, str]:
    scons = installed_scons()
    requirement = scons_requirement()
    version = tool_scons_version(requirement)
    pkg = core_dir / "packages" / "tool-scons"
    manifest = {
        "name": "tool-scons",
        "version": version,
        "description": f"SCons {scons} from PyPI, in {sys.prefix} (hirmem tools/pio_setup.py)",
        "keywords": ["build tools"],
        "system": "*",
    }
    piopm = {
        "type": "tool",
        "name": "tool-scons",
        "version": version,
        "spec": {
            "owner": "platformio",
            "id": None,
            "name": "tool-scons",
            "requirements": requirement,
            "uri": None,
        },
    }
    _write(pkg / "package.json", _json(manifest), changed)
    _write(pkg / ".piopm", _json(piopm), changed)
    _write(pkg / "scons.py", SCONS_PY, changed)
    return scons, version


def setup_appstate(core_dir: Path, changed: list[Path]) -> None:
    path = core_dir / "appstate.json"
    state: dict[str, object] = {}
    if path.is_file():
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            loaded = {}
        if isinstance(loaded, dict):
            state = loaded
    settings = state.get("settings")
    settings = dict(settings) if isinstance(settings, dict) else {}
    settings.update(enable_telemetry=False, check_platformio_interval=NEVER_DAYS)
    wanted = {**state, "settings": settings, "last_version": platformio_version()}
    if wanted != state:  # PlatformIO rewrites the file in its own layout: compare values
        _write(path, json.dumps(wanted, sort_keys=True), changed)


def setup_toolchains(changed: list[Path]) -> dict[str, list[str]]:
    """Links bin/<triplet>-* -> /usr/bin/<triplet>-* in each toolchain package."""
    report: dict[str, list[str]] = {}
    for manifest in sorted(TOOLCHAINS_DIR.glob("toolchain-*/package.json")):
        pkg = manifest.parent
        triplet = pkg.name.removeprefix("toolchain-")
        bin_dir = pkg / "bin"
        bin_dir.mkdir(exist_ok=True)
        wanted = {p.name: p for p in sorted(SYSTEM_BIN.glob(f"{triplet}-*")) if p.is_file()}
        for link in bin_dir.iterdir():
            if link.is_symlink() and link.name not in wanted:
                link.unlink()  # its program was removed from /usr/bin
                changed.append(link)
        for name, target in wanted.items():
            link = bin_dir / name
            if link.is_symlink() and Path(os.readlink(link)) == target:
                continue
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(target)
            changed.append(link)
        report[pkg.name] = [
            f"{triplet}-{tool}"
            for tool in ("gcc", "gcc-ar", "objcopy", "size")
            if f"{triplet}-{tool}" not in wanted
        ]
    return report


def setup_platform(core_dir: Path, changed: list[Path]) -> None:
    """Install boards/platformio into the core as a link, through PlatformIO itself
    (a symlink:// package: nothing is downloaded)."""
    code = (
        "import sys\n"
        "from platformio.package.manager.platform import PlatformPackageManager\n"
        "pm = PlatformPackageManager()\n"
        "spec = 'symlink://' + sys.argv[1]\n"
        "if pm.get_package(spec) is None:\n"
        "    pm.set_log_level(40)\n"
        "    pm.install(spec, skip_dependencies=True)\n"
        "    print('HM-LINKED')\n"
    )
    env = dict(os.environ, PLATFORMIO_CORE_DIR=str(core_dir))
    proc = subprocess.run(
        [sys.executable, "-c", code, str(PLATFORM_DIR)],
        capture_output=True, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SetupError(f"PlatformIO could not link {PLATFORM_DIR}: {proc.stderr.strip()}")
    if "HM-LINKED" in proc.stdout.split():
        changed.append(core_dir / "platforms")


def check_core(core_dir: Path) -> str:
    """Ask PlatformIO itself, without installing anything, where tool-scons is."""
    code = (
        "from platformio.package.manager.core import get_core_package_dir as g\n"
        "print(g('tool-scons', auto_install=False) or '')\n"
    )
    env = dict(os.environ, PLATFORMIO_CORE_DIR=str(core_dir))
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT
    )
    found = proc.stdout.strip().splitlines()[-1:] if proc.returncode == 0 else []
    if not found or Path(found[0]).resolve() != (core_dir / "packages" / "tool-scons").resolve():
        raise SetupError(
            f"PlatformIO does not accept {core_dir}/packages/tool-scons "
            f"(it would download it): {proc.stderr.strip() or proc.stdout.strip()}"
        )
    return found[0]


def setup(core_dir: Path) -> Result:
    core_dir = core_dir.resolve()
    changed: list[Path] = []
    (core_dir / "packages").mkdir(parents=True, exist_ok=True)
    scons, version = setup_tool_scons(core_dir, changed)
    setup_appstate(core_dir, changed)
    toolchains = setup_toolchains(changed)
    setup_platform(core_dir, changed)
    check_core(core_dir)
    return Result(core_dir, scons, version, toolchains, changed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--core-dir",
        type=Path,
        default=None,
        help="the PlatformIO core folder (default: $PLATFORMIO_CORE_DIR or <repo>/.pio-core)",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="print only problems")
    args = parser.parse_args(argv)
    try:
        result = setup(args.core_dir or default_core_dir())
    except SetupError as exc:
        print(f"pio_setup: {exc}", file=sys.stderr)
        return 1
    for pkg, missing in result.toolchains.items():
        if missing:
            print(
                f"pio_setup: {pkg}: {', '.join(missing)} not in {SYSTEM_BIN} "
                "(Debian: gcc-arm-none-eabi / gcc-riscv64-unknown-elf); "
                "its boards will not build",
                file=sys.stderr,
            )
    if not args.quiet:
        state = "updated" if result.changed else "already up to date"
        print(
            f"pio_setup: {result.core_dir} {state}: tool-scons {result.tool_scons_version} "
            f"(SCons {result.scons_version} from PyPI), telemetry off, "
            f"toolchains {', '.join(result.toolchains)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
