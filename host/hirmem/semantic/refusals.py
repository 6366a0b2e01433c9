"""A bounded refusal list in SQLite (or PostgreSQL): every refusal counted, the latest few listed.

A store that refuses writes (tier 1's memories, tier 2's claims) keeps each refusal as a
row with its reason so it can be shown, but a source that keeps sending refusable input
would grow that table without end. :func:`keep` appends the new rows, adds them to a
counter that is never trimmed, and deletes all but the newest ``kept`` rows, in the
caller's transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

from hirmem.sql import Connection

__all__ = ["KEPT", "count", "keep"]

KEPT = 10_000  # refusal rows listed per store; every refusal is counted


def keep(db: Connection, table: str, meta: str, rows: Sequence[Sequence[object]],
         kept: int) -> None:  # fmt: skip
    """Append ``rows`` to ``table``, count them under ``refused`` in ``meta`` (a key/value
    table) and trim ``table`` to its newest ``kept`` rows."""
    if not rows:
        return
    marks = ",".join("?" * len(rows[0]))
    db.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
    db.execute(f"INSERT INTO {meta} VALUES ('refused', ?) ON CONFLICT(key) DO "
               "UPDATE SET value = CAST(value AS INTEGER) + ?",
               (str(len(rows)), len(rows)))  # fmt: skip
    db.execute(f"DELETE FROM {table} WHERE rowid <= (SELECT max(rowid) FROM {table}) - ?",
               (kept,))  # fmt: skip


def count(db: Connection, meta: str) -> int:
    """How many refusals were ever kept in the table ``meta`` counts for."""
    row = db.execute(f"SELECT value FROM {meta} WHERE key = 'refused'").fetchone()
    return int(row[0]) if row is not None else 0
