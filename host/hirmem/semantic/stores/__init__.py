"""Stores opened by driver name from a data source name, at run time (§4.2).

``open_store("triple", "sqlite:/var/lib/hirmem/semantic.db")``; ``"memory:"`` for the
in-memory drivers. A name registered with no implementation in this build raises
:class:`~hirmem.semantic.errors.NotBuilt`; a name nobody has heard of raises
:class:`~hirmem.semantic.errors.UnknownDriver`.

Built in: ``memory``, ``file`` (a fsync'ed JSON-lines journal per store,
``file:/path/store.jsonl``) and ``sqlite`` for the vector, graph, triple and document
stores; ``oxigraph`` (pyoxigraph, SPARQL 1.1 over what was asserted) for triples and
``usearch`` (HNSW, exact when filtered) for vectors. Their engines are imported when a store
is opened, so a missing package reports :class:`NotBuilt` rather than breaking the import.
Known but not built here: the engines a deployment might name (``qdrant``, ``sparql``,
``neo4j``, …).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from hirmem.semantic.errors import NotBuilt, UnknownDriver
from hirmem.semantic.stores.base import (
    DocStore,
    GraphStore,
    Match,
    TripleStore,
    VectorStore,
)
from hirmem.semantic.stores.file import FileDocs, FileGraph, FileTriples, FileVectors, file_path
from hirmem.semantic.stores.memory import MemoryDocs, MemoryGraph, MemoryTriples, MemoryVectors
from hirmem.semantic.stores.sqlite import SQLiteDocs, SQLiteGraph, SQLiteTriples, SQLiteVectors

__all__ = [
    "DocStore",
    "GraphStore",
    "Match",
    "TripleStore",
    "VectorStore",
    "drivers",
    "open_store",
    "register",
]

Kind = Literal["vector", "graph", "triple", "doc"]
KINDS: tuple[Kind, ...] = ("vector", "graph", "triple", "doc")

_DRIVERS: dict[tuple[str, str], Callable[[str], Any]] = {}

KNOWN_UNBUILT: dict[str, dict[str, str]] = {
    "vector": {
        "qdrant": "Qdrant over its HTTP API: a service, not part of this library build",
        "pgvector": "PostgreSQL with pgvector: not built in",
        "milvus": "not built in",
        "weaviate": "not built in",
        "chroma": "not built in",
    },
    "graph": {
        "neo4j": "not built in",
        "memgraph": "not built in",
        "age": "PostgreSQL AGE: not built in",
        "neptune": "not built in",
    },
    "triple": {
        "sparql": "a SPARQL 1.1 endpoint is a network service: not built into this library",
    },
    "doc": {"postgres": "not built in"},
}


def register(kind: Kind, name: str, factory: Callable[[str], Any]) -> None:
    """Register ``factory(rest_of_dsn)`` as driver ``name`` for stores of ``kind``."""
    _DRIVERS[(kind, name)] = factory


def drivers(kind: Kind) -> list[str]:
    return sorted(n for k, n in _DRIVERS if k == kind)


def _sqlite_path(rest: str) -> str:
    if rest in ("", ":memory:"):
        return ":memory:"
    return rest[2:] if rest.startswith("//") else rest


def open_store(kind: Kind, dsn: str) -> Any:
    """Open a store of ``kind`` from ``driver:rest``."""
    if kind not in KINDS:
        raise UnknownDriver(f"no store kind {kind!r}; kinds are {list(KINDS)}")
    name, _, rest = dsn.partition(":")
    factory = _DRIVERS.get((kind, name))
    if factory is not None:
        return factory(rest)
    why = KNOWN_UNBUILT.get(kind, {}).get(name)
    if why is not None:
        raise NotBuilt(f"{kind} driver {name!r} is known, but this build cannot serve it: {why}")
    raise UnknownDriver(f"no {kind} driver named {name!r}; this build has {drivers(kind)}")


register("triple", "memory", lambda rest: MemoryTriples())
register("vector", "memory", lambda rest: MemoryVectors())
register("graph", "memory", lambda rest: MemoryGraph())
register("doc", "memory", lambda rest: MemoryDocs())
register("triple", "sqlite", lambda rest: SQLiteTriples(_sqlite_path(rest)))
register("vector", "sqlite", lambda rest: SQLiteVectors(_sqlite_path(rest)))
register("graph", "sqlite", lambda rest: SQLiteGraph(_sqlite_path(rest)))
register("doc", "sqlite", lambda rest: SQLiteDocs(_sqlite_path(rest)))
register("triple", "file", lambda rest: FileTriples(file_path(rest)))
register("vector", "file", lambda rest: FileVectors(file_path(rest)))
register("graph", "file", lambda rest: FileGraph(file_path(rest)))
register("doc", "file", lambda rest: FileDocs(file_path(rest)))


def _oxigraph(rest: str) -> Any:
    try:
        from hirmem.semantic.stores.oxigraph import OxigraphTriples
    except ImportError as exc:
        raise NotBuilt(f"triple driver 'oxigraph' is known, but this build cannot serve it: "
                       f"the pyoxigraph package is missing ({exc})") from None  # fmt: skip
    path = rest[2:] if rest.startswith("//") else rest
    return OxigraphTriples(path or None)


def _usearch(rest: str) -> Any:
    try:
        from hirmem.semantic.stores.usearch import UsearchVectors
    except ImportError as exc:
        raise NotBuilt(f"vector driver 'usearch' is known, but this build cannot serve it: "
                       f"the usearch package is missing ({exc})") from None  # fmt: skip
    path = rest[2:] if rest.startswith("//") else rest
    return UsearchVectors(path or None)


register("triple", "oxigraph", _oxigraph)
register("vector", "usearch", _usearch)
