"""The entities' said rows counted (issue 16 §5): one row per (entity, container, kind) with
how many statements of it the sources' lists hold, where a row per source held each source
again. Reads are as before, a withdrawal still takes every statement its source made, and a
store of the row-per-source layout converts when opened. On SQLite and PostgreSQL."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from hirmem.semantic.dictionary import unpack_ints
from hirmem.semantic.entities import EntityIndex
from hirmem.sql import Connection
from semantic_backends import semantic_backend, semantic_server  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("semantic_backend")

# plain names and alias phrases whose aliases are never said plainly: what a name resolves
# to does not depend on which documents are still held
NAMES = ["Heidi Jones", "Ada Reyes", "Klaus Berg", "Acme Corp", "Robert (Bob) Smith",
         "Ivosidenib (Tibsovo)", "Maya Lind"]  # fmt: skip
ASKED = ["Heidi Jones", "Ada Reyes", "Klaus Berg", "Acme Corp", "Bob", "Robert Smith",
         "Tibsovo", "Ivosidenib", "Maya Lind"]  # fmt: skip
KINDS = ["", "", "person", "organisation"]
READERS = ({"a"}, {"b"}, {"a", "b"})

_BEFORE = """CREATE TABLE entity_said (
    entity INTEGER NOT NULL, container INTEGER NOT NULL, source INTEGER NOT NULL,
    kind INTEGER NOT NULL, PRIMARY KEY (entity, container, source, kind)) WITHOUT ROWID"""

Said = tuple[str, str, str, str]  # (name, container, source, kind)


def _reads(index: EntityIndex) -> list[object]:
    return [(index.resolve(n, r), sorted(index.names(n, r)), sorted(index.kinds(n, r)))
            for r in READERS for n in ASKED]  # fmt: skip


def _listed(db: Connection) -> Counter[tuple[int, int, int]]:
    """Every (entity, container, kind) the sources' lists hold, with how often."""
    out: Counter[tuple[int, int, int]] = Counter()
    for (blob,) in db.execute("SELECT rows FROM entity_said_by"):
        flat = unpack_ints(bytes(blob))
        out.update(tuple(flat[i : i + 3]) for i in range(0, len(flat), 3))  # type: ignore[misc]
    return out


def _counted(db: Connection) -> dict[tuple[int, int, int], int]:
    return {(int(e), int(c), int(k)): int(n)
            for e, c, k, n in db.execute("SELECT entity, container, kind, n FROM entity_said")}


def _replayed(tmp_path: Path, said: list[Said], name: str) -> EntityIndex:
    index = EntityIndex(tmp_path / name)
    for n, c, s, k in said:
        index.note(n, c, s, k)
    return index


def test_counted_said_rows_read_as_a_replay_of_the_documents_still_held(
    tmp_path: Path,
) -> None:
    """Random notes (a name said again by one document, by many, with and without a kind)
    and withdrawals: after each withdrawal every read equals a store that only ever held the
    documents still held, each row's count is what the lists hold of it, and a row is kept
    exactly while some list holds it."""
    rng = random.Random(1606)
    index = EntityIndex(tmp_path / "e.db")
    said: list[Said] = []
    for step in range(6):
        for _ in range(60):
            s = (rng.choice(NAMES), rng.choice("ab"), f"d{rng.randrange(12)}",
                 rng.choice(KINDS))  # fmt: skip
            said.append(s)
            index.note(*s)
        gone = f"d{rng.randrange(12)}"
        made = sum(1 for s in said if s[2] == gone)
        assert (index.withdraw(gone) > 0) == (made > 0)
        said = [s for s in said if s[2] != gone]
        db = index._db
        counted = _counted(db)
        assert counted == dict(_listed(db)) and all(n > 0 for n in counted.values())
        replay = _replayed(tmp_path, said, f"r{step}.db")
        assert _reads(index) == _reads(replay)
        replay.close()
    for d in range(12):
        index.withdraw(f"d{d}")
    assert _counted(index._db) == {} and _listed(index._db) == Counter()
    assert all(r == ([], [], []) for r in _reads(index))
    index.close()


def test_a_said_table_of_a_row_per_source_converts_on_open(tmp_path: Path) -> None:
    """A store whose said table held a row per source (and the lists beside it, one entry
    a row) reads the same once converted, counts each row by its sources, and withdraws each
    document's statements, the last one taking the row."""
    rng = random.Random(16)
    path = tmp_path / "e.db"
    index = EntityIndex(path)
    said = [(rng.choice(NAMES), rng.choice("ab"), f"d{rng.randrange(6)}", rng.choice(KINDS))
            for _ in range(80)]  # fmt: skip
    for s in said:
        index.note(*s)
    before = _reads(index)
    db = index._db
    rows = [(e, c, src, k) for (src, blob) in db.execute(
        "SELECT source, rows FROM entity_said_by").fetchall()
        for flat in [unpack_ints(bytes(blob))]
        for e, c, k in (flat[i : i + 3] for i in range(0, len(flat), 3))]  # fmt: skip
    assert len(rows) == len(set(rows))  # one document's statements listed once each here
    db.execute("BEGIN")
    db.execute("DROP TABLE entity_said")
    db.execute(_BEFORE)
    db.executemany("INSERT INTO entity_said (entity, container, source, kind) VALUES "
                   "(?, ?, ?, ?)", rows)  # fmt: skip
    db.execute("COMMIT")
    index.close()
    index = EntityIndex(path)
    db = index._db
    assert "source" not in {str(r[1]) for r in db.execute("PRAGMA table_info(entity_said)")}
    assert _reads(index) == before
    assert _counted(db) == dict(Counter((e, c, k) for e, c, _, k in rows))
    for d in range(6):
        index.withdraw(f"d{d}")
        held = [s for s in said if int(s[2][1:]) > d]
        replay = _replayed(tmp_path, held, f"r{d}.db")
        assert _reads(index) == _reads(replay)
        replay.close()
    assert _counted(db) == {}
    index.close()
