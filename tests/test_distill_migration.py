"""The distillation tables' store migration (issue 13, speed): a distillate's statistics
in a column each, its links as rowid ranges. A store written at the schema before it —
the statistics one JSON document per row, ``Infinity`` in the range of every
distillate without a reading — opens migrated with the same statistics and links, and
then goes on exactly as a store that never was at the old schema (a twin fed the same
episodes). On SQLite (files) and on PostgreSQL (schemas of the throwaway server).
"""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from hirmem.memory import distill
from hirmem.memory.distill_schema import STATS_COLUMNS, STATS_NAMES, upgrade_distillation
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.store import MIGRATIONS, SCHEMA_VERSION
from hirmem.protocol.errors import HirmemError
from hirmem.protocol.keys import SigningKey
from hirmem.sql import PgTarget
from hirmem.sql.pgconn import PgConnection
from memory_backends import memory_backend, memory_server  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("memory_backend")

T0 = 1_780_000_000.0
BEFORE = MIGRATIONS.index(upgrade_distillation)  # the schema version before it (now 6)
KEY = SigningKey.generate()  # a store on PostgreSQL keeps no key beside it

# the layout of schema 6, as distillation made it then
OLD_DISTILLATES = """CREATE TABLE distillates (
    rowid INTEGER PRIMARY KEY,
    memory_id TEXT NOT NULL,
    form TEXT NOT NULL,
    device TEXT NOT NULL, subject TEXT NOT NULL, attribute TEXT NOT NULL,
    value_key TEXT NOT NULL,
    open INTEGER NOT NULL,
    stats TEXT NOT NULL
)"""
OLD_LINKS = """CREATE TABLE distill_links (
    episode_id TEXT PRIMARY KEY,
    distillate INTEGER NOT NULL
)"""
OLD_INDEXES = (
    "CREATE INDEX distillates_key ON distillates(device, subject, attribute, value_key, open)",
    "CREATE INDEX distillates_memory ON distillates(memory_id)",
    "CREATE INDEX distill_links_of ON distill_links(distillate)",
)


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _server() -> str | None:
    """The PostgreSQL server this run's throwaway engines live on (None: SQLite)."""
    probe = MemoryEngine(":memory:", signing_key=KEY)
    dsn = None if probe.store.pg is None else probe.store.pg.conninfo
    probe.close()
    return dsn


def _place(tmp_path: Path, name: str) -> str | Path | PgTarget:
    """Where a store that is opened twice lives: a file, or a schema of the server."""
    dsn = _server()
    if dsn is None:
        return tmp_path / f"{name}.sqlite"
    return PgTarget(dsn, f"{name}_{tmp_path.name.lower().replace('-', '_')}"[:60])


def _feed(e: MemoryEngine, clock: Clock, start: int, count: int) -> None:
    """Readings of two sensors, a door's state, events and an action chain: every form."""
    for k in range(start, start + count):
        clock.t = T0 + 30 * k
        e.admit(json.dumps({"t": 20 + (k * 7 % 5) / 10, "n": k}), f"sensor/temp{k % 2}")
        e.admit(json.dumps({"subject": "door 4", "attribute": "state",
                            "value": "open" if k % 9 < 6 else "closed"}), "cam")  # fmt: skip
        if k % 3 == 0:
            e.admit("door forced", "door/4", kind="event")
        if k % 4 == 0:
            e.admit(json.dumps({"action": ["close V3", "open V4"], "result": "flow restored",
                                "outcome": "failure" if k % 12 == 0 else "success"}), "ops")


def _distillates(e: MemoryEngine) -> list[tuple[Any, ...]]:
    with e.store.reading() as db:
        return [tuple(r) for r in db.execute(
            "SELECT rowid, memory_id, form, device, subject, attribute, value_key, open, "
            f"{', '.join(STATS_NAMES)} FROM distillates ORDER BY rowid")]  # fmt: skip


def _links(e: MemoryEngine) -> dict[int, list[str]]:
    """Each distillate's episodes, in order."""
    return {r[0]: distill.episodes_of_row(e, r[0]) for r in _distillates(e)}


def _to_schema_6(e: MemoryEngine) -> list[tuple[Any, ...]]:
    """Rewrite ``e``'s store as the schema before the migration left it: its
    distillates' statistics as the JSON document each row held (``extra`` and all),
    its links one row per episode id;
    returns the distillates it rewrote."""
    rows = _distillates(e)
    links = _links(e)
    with e.store.transaction():
        db = e.store.db
        db.execute("DROP TABLE distillates")
        db.execute("DROP TABLE distill_links")
        db.execute(OLD_DISTILLATES)
        db.execute(OLD_LINKS)
        for statement in OLD_INDEXES:
            db.execute(statement)
        for r in rows:  # in rowid order, numbered by the table as they were
            doc = dict(zip(STATS_NAMES, r[8:], strict=True)) | {"extra": {}}
            db.execute("INSERT INTO distillates (memory_id, form, device, subject, attribute, "
                       "value_key, open, stats) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       (*r[1:8], json.dumps(doc)))  # fmt: skip
        db.executemany("INSERT INTO distill_links (episode_id, distillate) VALUES (?, ?)",
                       [(mid, d) for d, ids in links.items() for mid in ids])  # fmt: skip
        if isinstance(db, PgConnection):
            db.execute("UPDATE schema_version SET version = ?", (BEFORE,))
        else:
            db.execute(f"PRAGMA user_version={BEFORE}")
    with e.store.reading() as db:
        rowids = [int(x[0]) for x in db.execute("SELECT rowid FROM distillates ORDER BY rowid")]
        stats = [str(x[0]) for x in db.execute("SELECT stats FROM distillates ORDER BY rowid")]
    assert rowids == [r[0] for r in rows]
    assert any("Infinity" in s for s in stats)  # a state's, an event's, a procedure's range
    return rows


def test_a_schema_6_store_migrates_and_goes_on_as_one_that_never_was(tmp_path: Path) -> None:
    clock_a, clock_b = Clock(), Clock()
    a = MemoryEngine(_place(tmp_path, "old"), clock=clock_a, signing_key=KEY)
    b = MemoryEngine(_place(tmp_path, "twin"), clock=clock_b, signing_key=KEY)
    for e, clock in ((a, clock_a), (b, clock_b)):
        _feed(e, clock, 0, 40)
    links = _links(a)
    assert sum(map(len, links.values())) > 100
    before = _to_schema_6(a)
    assert {r[2] for r in before} == {"reading", "state", "event", "action"}
    where = a.store.pg or a.store.path
    a.close()
    a = MemoryEngine(where, clock=clock_a, signing_key=KEY)  # opening migrates
    assert a.store.schema_version == SCHEMA_VERSION
    with a.store.reading() as db:
        columns = [str(r[1]) for r in db.execute("PRAGMA table_info(distillates)")]
    assert "stats" not in columns and set(STATS_NAMES) <= set(columns)
    after = _distillates(a)
    assert after == before
    assert _links(a) == links
    with a.store.reading() as db:  # one row per window of 63 rowids, not one per episode
        assert db.execute("SELECT count(*) FROM distill_links").fetchone()[0] < len(links) * 3
    infinite = [r for r in after if math.isinf(r[8 + STATS_NAMES.index("min_v")])]
    assert infinite and all(r[2] != "reading" for r in infinite)
    # the patterns read as before, and the store goes on as its twin does
    assert [distill.statement(d) for d in distill.patterns(a)] == [
        distill.statement(d) for d in distill.patterns(b)]  # fmt: skip
    for e, clock in ((a, clock_a), (b, clock_b)):
        _feed(e, clock, 40, 30)
    assert _distillates(a) == _distillates(b)
    assert _links(a) == _links(b)
    values = {e: [(m.kind, m.value, m.strength, m.links) for m in
                  e.store.select("kind IN ('pattern', 'procedure')", tail="ORDER BY rowid")]
              for e in (a, b)}  # fmt: skip
    assert values[a] == values[b] and len(values[a]) >= 5
    assert a.verify_audit().ok
    a.close()
    b.close()


@pytest.mark.parametrize(("doc", "why"), [
    ({"n": 2, "colour": "red"}, "no column for \\(colour\\)"),
    ({"n": 2, "extra": {"k": "v"}}, "no column for \\(extra"),
    ({"n": 2.5}, "statistic n is 2.5, not INTEGER"),
    ({"n": 2, "min_v": "low"}, "statistic min_v is 'low', not REAL"),
    ({"n": 2, "value": 7}, "statistic value is 7, not TEXT"),
])  # fmt: skip
def test_statistics_the_columns_cannot_hold_are_refused_and_the_file_kept(
    tmp_path: Path, doc: dict[str, Any], why: str
) -> None:
    if _server() is not None:
        pytest.skip("the refusal is the migration's, not the backend's: one file shows it")
    path = tmp_path / "bad.sqlite"
    e = MemoryEngine(path, clock=Clock())
    _feed(e, Clock(), 0, 3)
    _to_schema_6(e)
    e.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE distillates SET stats = ? WHERE rowid = 1", (json.dumps(doc),))
    db.commit()
    with pytest.raises(HirmemError, match=f"distillate 1: .*{why}"):
        MemoryEngine(path, clock=Clock())
    assert db.execute("PRAGMA user_version").fetchone()[0] == BEFORE
    assert [r[1] for r in db.execute("PRAGMA table_info(distillates)")][-1] == "stats"
    db.close()


def test_the_columns_are_the_fields_of_stats() -> None:
    assert tuple(vars(distill.Stats())) == STATS_NAMES
    fresh = distill.Stats()
    assert [getattr(fresh, name) for name, _, _ in STATS_COLUMNS] == [
        default for _, _, default in STATS_COLUMNS]  # fmt: skip


def test_a_link_to_an_episode_that_is_not_stored_is_refused_and_the_file_kept(
    tmp_path: Path,
) -> None:
    if _server() is not None:
        pytest.skip("the refusal is the migration's, not the backend's: one file shows it")
    path = tmp_path / "lost.sqlite"
    e = MemoryEngine(path, clock=Clock())
    _feed(e, Clock(), 0, 3)
    _to_schema_6(e)
    e.close()
    db = sqlite3.connect(path)
    db.execute("INSERT INTO distill_links (episode_id, distillate) VALUES (?, 1)", ("ab" * 16,))
    db.commit()
    with pytest.raises(HirmemError, match=f"distillate 1 rests on episode {'ab' * 16}, which "
                                          "is not among the memories"):  # fmt: skip
        MemoryEngine(path, clock=Clock())
    assert db.execute("PRAGMA user_version").fetchone()[0] == BEFORE
    assert db.execute("SELECT count(*) FROM distill_links WHERE episode_id = ?",
                      ("ab" * 16,)).fetchone()[0] == 1  # fmt: skip
    db.close()
