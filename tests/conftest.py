"""Shared test helpers: the committed wire vectors and the generator's test keys."""

from __future__ import annotations

import importlib.util
import json
import os
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import settings

from hirmem.protocol.keys import derive_test_key

# The test command is a gate: the same examples on every run, no wall-clock deadline on
# shared machines. HIRMEM_EXPLORE=1 draws fresh examples (and keeps failures in
# .hypothesis/ as usual) for hunting.
settings.register_profile("gate", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("explore", deadline=None, print_blob=True)
settings.load_profile("explore" if os.environ.get("HIRMEM_EXPLORE") else "gate")

ROOT = Path(__file__).resolve().parent.parent
VECTORS = ROOT / "protocol" / "vectors"
CDDL = ROOT / "protocol" / "hirmem.cddl"
GEN_VECTORS = ROOT / "tools" / "gen_vectors.py"


@cache
def load_vectors(name: str) -> dict[str, Any]:
    """One committed vector file, e.g. ``load_vectors("frames")``."""
    data: dict[str, Any] = json.loads((VECTORS / f"{name}.json").read_text(encoding="utf-8"))
    return data


def vector_params(name: str, section: str) -> list[Any]:
    """The cases of one section as ``pytest.param``s, each named after its case."""
    cases: list[dict[str, Any]] = load_vectors(name)[section]
    return [pytest.param(case, id=str(case.get("name", index))) for index, case in enumerate(cases)]


DEVICE_KEY = derive_test_key("device 0102030405060708")
OTHER_KEY = derive_test_key("device 1112131415161718")
HOST_KEY = derive_test_key("host a1a2a3a4a5a6a7a8")
DEVICE_ID = bytes.fromhex("0102030405060708")
OTHER_ID = bytes.fromhex("1112131415161718")
HOST_ID = bytes.fromhex("a1a2a3a4a5a6a7a8")


@pytest.fixture(scope="session")
def gen_vectors() -> ModuleType:
    """tools/gen_vectors.py, imported from its path (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location("gen_vectors", GEN_VECTORS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
