"""The tables of distillation (:mod:`.distill`) and the store migration that gave its
statistics their own columns.

``distillates`` holds one row per key and window: its key, whether the window is open,
the pattern memory it became, and its running statistics — one column per field of
:class:`hirmem.memory.distill.Stats` (:data:`STATS_COLUMNS`), so that a pack's step
writes numbers, not a JSON document it must encode (and a read decode) every time.
``distill_links`` holds which episodes each distillate rests on.

Until store schema 7 the statistics were one JSON column (``stats``): :func:`stats_as_columns`
is the migration that moves them into the columns, on SQLite and on PostgreSQL alike (in
Python, not SQL: the documents hold ``Infinity`` for the range of a distillate without a
reading, which neither SQLite 3.40's JSON functions nor PostgreSQL's ``json`` accept).
"""

from __future__ import annotations

import json
import math

from hirmem.protocol.errors import HirmemError
from hirmem.sql import Connection
from hirmem.sql.pgconn import PgConnection

__all__ = ["SCHEMA", "STATS_COLUMNS", "STATS_NAMES", "stats_as_columns"]

# (name, type, default) of each statistic, in the order of the fields of Stats
STATS_COLUMNS: tuple[tuple[str, str, object], ...] = (
    ("n", "INTEGER", 0),
    ("first_ms", "INTEGER", 0),
    ("last_ms", "INTEGER", 0),
    ("sum_h", "REAL", 0.0),
    ("sum_i", "REAL", 0.0),
    ("sum_r", "REAL", 0.0),
    ("sum_w", "REAL", 0.0),
    ("sum_v", "REAL", 0.0),
    ("sum_vv", "REAL", 0.0),
    ("min_v", "REAL", math.inf),
    ("max_v", "REAL", -math.inf),
    ("sum_t", "REAL", 0.0),
    ("sum_tt", "REAL", 0.0),
    ("sum_tv", "REAL", 0.0),
    ("value", "TEXT", ""),
    ("since_ms", "INTEGER", 0),
    ("held_n", "INTEGER", 0),
    ("changes", "INTEGER", 0),
    ("successes", "INTEGER", 0),
    ("failures", "INTEGER", 0),
    ("result", "TEXT", ""),
    ("prev", "TEXT", ""),
)
STATS_NAMES = tuple(name for name, _, _ in STATS_COLUMNS)


def _sql_default(value: object) -> str:
    """A column default as SQL (a row written by distillation gives every value; the
    default serves the migration's ADD COLUMN, filled in right after)."""
    if isinstance(value, str):
        return f"'{value}'"
    if isinstance(value, float) and math.isinf(value):
        return "0"  # ±infinity has no literal on both: the migration writes it
    return repr(value)


_STATS_DDL = ",\n        ".join(
    f"{name} {kind} NOT NULL" for name, kind, _ in STATS_COLUMNS
)

SCHEMA = (
    f"""CREATE TABLE IF NOT EXISTS distillates (
        rowid INTEGER PRIMARY KEY,
        memory_id TEXT NOT NULL,
        form TEXT NOT NULL,
        device TEXT NOT NULL, subject TEXT NOT NULL, attribute TEXT NOT NULL,
        value_key TEXT NOT NULL,
        open INTEGER NOT NULL,
        {_STATS_DDL}
    )""",
    "CREATE INDEX IF NOT EXISTS distillates_key "
    "ON distillates(device, subject, attribute, value_key, open)",
    "CREATE INDEX IF NOT EXISTS distillates_memory ON distillates(memory_id)",
    """CREATE TABLE IF NOT EXISTS distill_links (
        episode_id TEXT PRIMARY KEY,
        distillate INTEGER NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS distill_links_of ON distill_links(distillate)",
)

# what hirmem.sql.dialect makes of these types in a CREATE TABLE
_PG_TYPES = {"INTEGER": "BIGINT", "REAL": "DOUBLE PRECISION", "TEXT": 'TEXT COLLATE "C"'}
_CHUNK = 1000  # rows converted per statement (the migration holds no more in memory)


def _columns(db: Connection, table: str) -> list[str]:
    return [str(r[1]) for r in db.execute(f"PRAGMA table_info({table})").fetchall()]


def stats_as_columns(db: Connection) -> None:
    """Store migration 7: a ``distillates`` table that keeps its statistics as one JSON
    column gets a column per statistic, filled from the JSON row by row, and the JSON
    column is dropped. A store whose distillation never ran has no such table (the
    engine makes it, with the columns, when it opens); one already migrated has no
    ``stats`` column: both are left as they are. A document that says something the
    columns cannot hold is refused, the store unchanged (the caller's transaction)."""
    have = _columns(db, "distillates")
    if "stats" not in have:
        return
    pg = isinstance(db, PgConnection)  # the dialect says CREATE TABLE's types, not ALTER's
    for name, kind, default in STATS_COLUMNS:
        if name not in have:
            said = _PG_TYPES[kind] if pg else kind
            db.execute(f"ALTER TABLE distillates ADD COLUMN {name} {said} NOT NULL "
                       f"DEFAULT {_sql_default(default)}")  # fmt: skip
    setting = ", ".join(f"{name} = ?" for name in STATS_NAMES)
    after = 0
    while True:
        rows = db.execute(
            "SELECT rowid, stats FROM distillates WHERE rowid > ? ORDER BY rowid LIMIT ?",
            (after, _CHUNK),
        ).fetchall()
        if not rows:
            break
        values = []
        for rowid, text in rows:
            values.append((*_stats_values(int(rowid), str(text)), int(rowid)))
        db.executemany(f"UPDATE distillates SET {setting} WHERE rowid = ?", values)
        after = int(rows[-1][0])
    db.execute("ALTER TABLE distillates DROP COLUMN stats")


def _stats_values(rowid: int, text: str) -> tuple[object, ...]:
    """The statistics of one old row's JSON document, in :data:`STATS_COLUMNS` order."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise HirmemError(f"distillate {rowid}: its statistics are not JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise HirmemError(f"distillate {rowid}: its statistics are not a JSON object")
    unknown = set(doc) - set(STATS_NAMES) - {"extra"}
    if unknown or doc.get("extra"):
        raise HirmemError(
            f"distillate {rowid}: statistics this hirmem has no column for "
            f"({', '.join(sorted(unknown)) or 'extra ' + json.dumps(doc['extra'])})"
        )
    out: list[object] = []
    for name, kind, default in STATS_COLUMNS:
        v = doc.get(name, default)
        if kind == "TEXT":
            good = isinstance(v, str)
        elif isinstance(v, bool) or not isinstance(v, int | float):
            good = False
        elif kind == "INTEGER":  # a whole number (a float's is_integer() is False for ±inf)
            good = isinstance(v, int) or v.is_integer()
            v = int(v) if good else v
        else:
            good, v = True, float(v)
        if not good:
            raise HirmemError(f"distillate {rowid}: statistic {name} is {v!r}, not {kind}")
        out.append(v)
    return tuple(out)
