"""The tables of distillation (:mod:`.distill`) and the store migration that gave its
statistics their own columns.

``distillates`` holds one row per key and window: its key, whether the window is open,
the pattern memory it became, and its running statistics — one column per field of
:class:`hirmem.memory.distill.Stats` (:data:`STATS_COLUMNS`), so that a pack's step
writes numbers, not a JSON document it must encode (and a read decode) every time.
``distill_links`` holds which episodes each distillate rests on, as ranges of their
memories' rowids: a row (distillate, base, mask) names the memories at ``base + k`` for
every bit ``k`` set in ``mask`` (k < :data:`SPAN`). A device pack's episodes have
neighbouring rowids, so a pack writes one row per pattern it fed, not one per episode;
an episode's row is found by the range its rowid falls in (index on ``base``). A
memory that fed a distillate is never deleted (only volatile ones are), so its rowid
stays its own.

Until the store migration :func:`upgrade_distillation` the statistics were one JSON
column (``stats``) and the links one row per episode id; it moves them, on SQLite and
on PostgreSQL alike (in Python, not SQL: the documents hold ``Infinity`` for the range
of a distillate without a reading, which neither SQLite 3.40's JSON functions nor
PostgreSQL's ``json`` accept).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence

from hirmem.protocol.errors import HirmemError
from hirmem.sql import Connection
from hirmem.sql.pgconn import PgConnection

__all__ = ["LINK", "SCHEMA", "SPAN", "STATS_COLUMNS", "STATS_NAMES", "distillates_of",
           "link_rows", "linked_rowids", "upgrade_distillation"]  # fmt: skip

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


_LINKS_TABLE = """CREATE TABLE IF NOT EXISTS distill_links (
        distillate INTEGER NOT NULL,
        base INTEGER NOT NULL,
        mask INTEGER NOT NULL,
        PRIMARY KEY (distillate, base)
    ) WITHOUT ROWID"""

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
    _LINKS_TABLE,
    "CREATE INDEX IF NOT EXISTS distill_links_base ON distill_links(base)",
)

SPAN = 63  # memories one link row can name: bits 0..62 of a signed 64-bit integer
LINK = (
    "INSERT INTO distill_links (distillate, base, mask) VALUES (?, ?, ?) "
    "ON CONFLICT (distillate, base) DO UPDATE SET mask = distill_links.mask | excluded.mask"
)


def link_rows(pairs: Iterable[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """The (distillate, base, mask) rows that name (distillate, memory rowid) ``pairs``:
    per distillate, its rowids in order, a new row whenever one is :data:`SPAN` or more
    past the row's base."""
    by: dict[int, list[int]] = {}
    for distillate, rowid in pairs:
        rowids = by.get(distillate)
        if rowids is None:
            by[distillate] = [rowid]
        else:
            rowids.append(rowid)
    out = []
    for distillate, rowids in by.items():
        rowids.sort()
        base, mask = rowids[0], 0
        for rowid in rowids:
            k = rowid - base
            if k >= SPAN:
                out.append((distillate, base, mask))
                base, mask, k = rowid, 0, 0
            mask |= 1 << k
        out.append((distillate, base, mask))
    return out


def _bits(base: int, mask: int) -> list[int]:
    return [base + k for k in range(SPAN) if mask >> k & 1]


def linked_rowids(db: Connection, distillate: int) -> list[int]:
    """The rowids of the memories distillate ``distillate`` rests on, in order."""
    out: list[int] = []
    for base, mask in db.execute(
        "SELECT base, mask FROM distill_links WHERE distillate = ?", (distillate,)
    ):
        out += _bits(int(base), int(mask))
    return sorted(out)


def ids_at(db: Connection, rowids: Sequence[int], where: str = "") -> list[str]:
    """The ids of the memories at ``rowids`` (and matching ``where``, an SQL condition
    on ``memories``), in rowid order: a pattern's episodes, from its link ranges."""
    out: list[str] = []
    for k in range(0, len(rowids), 500):
        chunk = list(rowids[k : k + 500])
        out += [str(x[0]) for x in db.execute(
            f"SELECT id FROM memories WHERE rowid IN ({','.join('?' * len(chunk))})"
            f"{' AND ' + where if where else ''} ORDER BY rowid", chunk)]  # fmt: skip
    return out


def distillates_of(db: Connection, rowid: int) -> list[int]:
    """The distillates the memory at ``rowid`` fed (one, unless a store says otherwise)."""
    rows = db.execute(
        "SELECT distillate, base, mask FROM distill_links WHERE base BETWEEN ? AND ? "
        "ORDER BY distillate", (rowid - SPAN + 1, rowid),
    ).fetchall()  # fmt: skip
    return [int(d) for d, base, mask in rows if int(mask) >> (rowid - int(base)) & 1]

# what hirmem.sql.dialect makes of these types in a CREATE TABLE
_PG_TYPES = {"INTEGER": "BIGINT", "REAL": "DOUBLE PRECISION", "TEXT": 'TEXT COLLATE "C"'}
_UPGRADING = "upgrading the distillation tables: "  # what a refusal of the migration says
_CHUNK = 1000  # rows converted per statement (the migration holds no more in memory)


def _columns(db: Connection, table: str) -> list[str]:
    return [str(r[1]) for r in db.execute(f"PRAGMA table_info({table})").fetchall()]


def upgrade_distillation(db: Connection) -> None:
    """A store migration: the statistics in columns (:func:`stats_as_columns`), the
    links as ranges of rowids (:func:`links_as_ranges`)."""
    stats_as_columns(db)
    links_as_ranges(db)


def stats_as_columns(db: Connection) -> None:
    """A ``distillates`` table that keeps its statistics as one JSON
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
        raise HirmemError(f"{_UPGRADING}distillate {rowid}: its statistics are not JSON "
                          f"({exc}); the store is unchanged") from exc
    if not isinstance(doc, dict):
        raise HirmemError(f"{_UPGRADING}distillate {rowid}: its statistics are not a JSON "
                          "object; the store is unchanged")
    unknown = set(doc) - set(STATS_NAMES) - {"extra"}
    if unknown or doc.get("extra"):
        raise HirmemError(
            f"{_UPGRADING}distillate {rowid}: statistics this hirmem has no column for "
            f"({', '.join(sorted(unknown)) or 'extra ' + json.dumps(doc['extra'])}); the "
            "store is unchanged"
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
            raise HirmemError(f"{_UPGRADING}distillate {rowid}: statistic {name} is {v!r}, "
                              f"not {kind}; the store is unchanged")
        out.append(v)
    return tuple(out)


def links_as_ranges(db: Connection) -> None:
    """A ``distill_links`` table of one row per episode id becomes one of rowid ranges:
    each distillate's episodes found in ``memories`` by id, their rowids written as
    :func:`link_rows`. An episode that is not in ``memories`` (none can be: a memory
    that fed a distillate is never deleted) is refused by name, the store unchanged."""
    if "episode_id" not in _columns(db, "distill_links"):
        return
    new = "distill_links_v7"  # filled beside the old one, then put in its place
    db.execute(_LINKS_TABLE.replace("distill_links", new))
    distillates = [int(r[0]) for r in db.execute(
        "SELECT DISTINCT distillate FROM distill_links ORDER BY distillate")]  # fmt: skip
    for k in range(0, len(distillates), 100):  # at most 100 windows' episodes at once
        chunk = distillates[k : k + 100]
        rows = db.execute(
            "SELECT l.distillate, m.rowid, l.episode_id FROM distill_links l "
            "LEFT JOIN memories m ON m.id = l.episode_id "
            f"WHERE l.distillate IN ({','.join('?' * len(chunk))})", chunk,
        ).fetchall()  # fmt: skip
        for distillate, rowid, episode in rows:
            if rowid is None:
                raise HirmemError(
                    f"{_UPGRADING}distillate {distillate} rests on episode {episode}, "
                    "which is not among the memories; the store is unchanged"
                )
        db.executemany(f"INSERT INTO {new} (distillate, base, mask) VALUES (?, ?, ?)",
                       link_rows((int(d), int(r)) for d, r, _ in rows))  # fmt: skip
    db.execute("DROP TABLE distill_links")
    db.execute(f"ALTER TABLE {new} RENAME TO distill_links")
    db.execute(SCHEMA[-1])  # the index on base
