"""File drivers of all four stores: the in-memory stores, journalled to one file each.

``open_store("triple", "file:/var/lib/hirmem/triples.jsonl")``. The file is a JSON-lines
journal of the writes, replayed at open into the in-memory driver, so a file store answers
exactly as the memory store does.

Invariants:

- A write is appended and ``fsync``'ed before the call returns (a batch — ``assert_many``,
  ``put_many`` — is one append and one ``fsync``), and only then applied in memory.
- A torn last line (a crash inside a write) is cut off at the next open: the state is the
  writes that completed.
- A delete is erasure, not a tombstone in the journal: the file is rewritten from the
  current state (to a temporary file, ``fsync``, atomic rename), so the deleted record no
  longer exists anywhere in it. Deletes are therefore O(size of the store).
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hirmem.protocol.identity import triple_id
from hirmem.semantic.errors import SemanticError
from hirmem.semantic.stores.base import Vec, as_unit, check_terms
from hirmem.semantic.stores.memory import MemoryDocs, MemoryGraph, MemoryTriples, MemoryVectors
from hirmem.semantic.values import Chunk, Doc

__all__ = ["FileDocs", "FileGraph", "FileTriples", "FileVectors", "Journal", "file_path"]

Op = list[Any]


def file_path(rest: str) -> Path:
    """The path of a ``file:`` DSN (``file:/x``, ``file:///x`` or ``file:rel/x``)."""
    path = rest[2:] if rest.startswith("//") else rest
    if not path:
        raise SemanticError("a file store needs a path: file:/path/to/store.jsonl")
    return Path(path)


class Journal:
    """An append-only JSON-lines file: ``ops`` are the complete lines found at open."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = self.path.read_bytes() if self.path.exists() else b""
        keep = data.rfind(b"\n") + 1
        if keep != len(data):  # a torn write: keep the lines that completed
            with open(self.path, "r+b") as f:
                f.truncate(keep)
                os.fsync(f.fileno())
        try:
            self.ops: list[Op] = [json.loads(line) for line in data[:keep].splitlines() if line]
        except json.JSONDecodeError as exc:
            raise SemanticError(f"{self.path}: not a store journal: {exc}") from None
        self._f = open(self.path, "ab")  # noqa: SIM115 (held open for the store's life)

    @staticmethod
    def _encode(ops: Iterable[Op]) -> bytes:
        return b"".join(json.dumps(op, separators=(",", ":"), ensure_ascii=False).encode()
                        + b"\n" for op in ops)  # fmt: skip

    def append(self, ops: Sequence[Op]) -> None:
        if not ops:
            return
        self._f.write(self._encode(ops))
        self._f.flush()
        os.fsync(self._f.fileno())

    def rewrite(self, ops: Iterable[Op]) -> None:
        """Replace the journal by ``ops`` (the current state), atomically."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(self._encode(ops))
            f.flush()
            os.fsync(f.fileno())
        self._f.close()
        os.replace(tmp, self.path)
        dfd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        self._f = open(self.path, "ab")  # noqa: SIM115

    def close(self) -> None:
        self._f.close()


class FileTriples(MemoryTriples):
    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.journal = Journal(path)
        for op in self.journal.ops:
            MemoryTriples.assert_triple(self, op[0], op[1], op[2])

    def assert_triple(self, s: str, p: str, o: str) -> str:
        check_terms(s, p, o)  # before the journal: a refused write leaves no line
        tid = triple_id(s, p, o)
        if tid not in self._t:
            self.journal.append([[s, p, o]])
            super().assert_triple(s, p, o)
        return tid

    def assert_many(self, triples: Iterable[tuple[str, str, str]]) -> int:
        new: dict[str, tuple[str, str, str]] = {}
        for s, p, o in triples:
            check_terms(s, p, o)
            tid = triple_id(s, p, o)
            if tid not in self._t and tid not in new:
                new[tid] = (s, p, o)
        self.journal.append([list(t) for t in new.values()])
        for s, p, o in new.values():
            super().assert_triple(s, p, o)
        return len(new)

    def delete(self, s: str, p: str, o: str) -> bool:
        if not super().delete(s, p, o):
            return False
        self.journal.rewrite([list(t) for t in self._t.values()])
        return True

    def close(self) -> None:
        self.journal.close()


def _vec_op(id: str, vec: Any, meta: Mapping[str, Any]) -> Op:
    raw = np.asarray(vec, dtype=np.float32).tobytes()
    return ["put", id, base64.b64encode(raw).decode(), dict(meta)]


class FileVectors(MemoryVectors):
    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.journal = Journal(path)
        for op in self.journal.ops:
            vec = np.frombuffer(base64.b64decode(op[2]), dtype=np.float32)
            MemoryVectors.put(self, op[1], vec, op[3])

    def put(self, id: str, vec: Vec, meta: Mapping[str, Any]) -> None:
        self.put_many([(id, vec, meta)])

    def put_many(self, items: Iterable[tuple[str, Vec, Mapping[str, Any]]]) -> None:
        rows = []
        dim = self.dim
        for id, vec, meta in items:
            v = as_unit(vec, dim)  # check the dimension before anything is written
            dim = int(v.shape[0])
            rows.append((id, v, dict(meta)))
        self.journal.append([_vec_op(i, v, m) for i, v, m in rows])
        for i, v, m in rows:
            super().put(i, v, m)

    def _live(self) -> Iterator[Op]:
        for id, row in self._row.items():
            yield _vec_op(id, self._mat[row], self._meta[row] or {})

    def delete(self, id: str) -> bool:
        if not super().delete(id):
            return False
        self.journal.rewrite(self._live())
        return True

    def close(self) -> None:
        self.journal.close()


class FileGraph(MemoryGraph):
    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.journal = Journal(path)
        for op in self.journal.ops:
            if op[0] == "node":
                MemoryGraph.node(self, op[1], op[2])
            else:
                MemoryGraph.edge(self, op[1], op[2], op[3])

    def node(self, id: str, props: Mapping[str, Any]) -> None:
        self.journal.append([["node", id, dict(props)]])
        super().node(id, props)

    def edge(self, src: str, dst: str, label: str) -> None:
        if (dst, label) in self._out.get(src, {}):
            return
        self.journal.append([["edge", src, dst, label]])
        super().edge(src, dst, label)

    def delete(self, id: str) -> bool:
        if not super().delete(id):
            return False
        ops: list[Op] = [["node", n, p] for n, p in self._props.items()]
        ops += [["edge", s, d, lab] for s, out in self._out.items() for d, lab in out]
        self.journal.rewrite(ops)
        return True

    def close(self) -> None:
        self.journal.close()


def _doc_op(doc: Doc, chunks: Sequence[Chunk]) -> Op:
    return ["put", [doc.id, doc.source, doc.text, doc.meta],
            [[c.doc_id, c.index, c.text, c.start, c.end] for c in chunks]]  # fmt: skip


class FileDocs(MemoryDocs):
    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.journal = Journal(path)
        for op in self.journal.ops:
            MemoryDocs.put(self, Doc(*op[1]), [Chunk(*c) for c in op[2]])

    def put(self, doc: Doc, chunks: Sequence[Chunk]) -> None:
        self.journal.append([_doc_op(doc, chunks)])
        super().put(doc, chunks)

    def delete(self, doc_id: str) -> bool:
        if not super().delete(doc_id):
            return False
        self.journal.rewrite(_doc_op(d, self._chunks.get(i, [])) for i, d in self._docs.items())
        return True

    def close(self) -> None:
        self.journal.close()
