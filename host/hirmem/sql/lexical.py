"""Full-text indexes of two columns (a row's text and its subject), on SQLite or
PostgreSQL, behind one small interface (:class:`Lexical`).

A store keeps its rows in a table of its own (the *content* table, keyed by an integer
column) and one full-text index per partition of them, named by the store; it writes
each row's words into the index itself (:meth:`Lexical.add`, :meth:`Lexical.remove`) and
ranks in its own SQL with the fragments :meth:`Lexical.ranked` gives::

    r = lex.ranked(name, (1.0, 2.0))
    f"SELECT {r.rank}, c.id FROM {r.source} JOIN content c ON c.id = {r.key} "
    f"WHERE {r.match} AND <the store's own conditions> ORDER BY {r.rank} LIMIT ?"

with :meth:`Lexical.query` (the terms, OR-ed) as the statement's first parameter: the
select list and the join must hold no placeholder before it. A lower rank is better.

* :class:`Fts5` — SQLite FTS5, an external-content virtual table over the content table
  (``porter unicode61`` tokens), ranked by ``bm25()`` with the two columns' weights:
  BM25 over the index's own statistics (how rare a term is among the partition's rows,
  how long a row is against the partition's mean).
* :class:`PgText` — PostgreSQL: a table of (rowid, ``tsvector``) with a GIN index, the
  text weighted ``D`` and the subject ``C`` (``english`` configuration: Snowball
  stemming, English stop words dropped), matched by ``@@`` against
  ``websearch_to_tsquery`` and ranked by ``ts_rank_cd`` (cover density, normalised by
  ``1 + log(length)``) with the same two weights scaled to at most 1. **How the ranking
  differs**: ``ts_rank_cd`` has no inverse document frequency — a row matching a common
  term weighs as much as one matching a rare one, where BM25 favours the rare — and it
  rewards matched terms that stand close together, which BM25 ignores; length is
  normalised by the row's own length only, not against the partition's mean. The rows
  that match are the same up to the tokenisers (Porter and Snowball stem nearly alike;
  PostgreSQL also drops English stop words, which FTS5 matches).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from hirmem.sql import Connection
from hirmem.sql.pgconn import PgConnection

__all__ = ["Fts5", "Lexical", "PgText", "Ranked", "lexical_of"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class Ranked:
    """SQL fragments that rank one index: the FROM item (``source``), the column of the
    matched row's key (``key``), the match condition (``match``) and the rank (``rank``,
    lower is better). The query's placeholder is in ``source`` or ``match``."""

    source: str
    key: str
    match: str
    rank: str


class Lexical(Protocol):
    """One store's full-text indexes on its connection."""

    def create(self, name: str) -> None:
        """Make index ``name`` if it does not exist."""

    def add(self, name: str, rowid: int, text: str, subject: str) -> None:
        """Index row ``rowid`` of the content table (its text and subject)."""

    def remove(self, name: str, rowid: int, text: str, subject: str) -> None:
        """Take row ``rowid`` (indexed with this text and subject) out of the index."""

    def query(self, terms: Sequence[str]) -> str:
        """The parameter that matches a row holding any of ``terms``."""

    def ranked(self, name: str, weights: tuple[float, float] = (1.0, 1.0)) -> Ranked:
        """The fragments that match and rank index ``name``, the text weighing
        ``weights[0]`` and the subject ``weights[1]``."""


def _checked(name: str) -> str:
    if not _NAME.match(name):
        raise ValueError(f"{name!r} is not a plain SQL name")
    return name


class Fts5:
    """SQLite FTS5 external-content indexes over ``content`` (keyed by ``key``)."""

    def __init__(self, db: Connection, content: str, key: str) -> None:
        self.db, self.content, self.key = db, _checked(content), _checked(key)

    def create(self, name: str) -> None:
        self.db.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {_checked(name)} USING fts5(text, "
                        f"subject, content='{self.content}', content_rowid='{self.key}', "
                        "tokenize='porter unicode61')")  # fmt: skip

    def add(self, name: str, rowid: int, text: str, subject: str) -> None:
        self.db.execute(f"INSERT INTO {_checked(name)}(rowid, text, subject) VALUES (?, ?, ?)",
                        (rowid, text, subject))  # fmt: skip

    def remove(self, name: str, rowid: int, text: str, subject: str) -> None:
        name = _checked(name)
        self.db.execute(f"INSERT INTO {name}({name}, rowid, text, subject) "
                        "VALUES ('delete', ?, ?, ?)", (rowid, text, subject))  # fmt: skip

    def query(self, terms: Sequence[str]) -> str:
        return " OR ".join('"' + t.replace('"', '""') + '"' for t in sorted(set(terms)))

    def ranked(self, name: str, weights: tuple[float, float] = (1.0, 1.0)) -> Ranked:
        name = _checked(name)
        text, subject = weights
        rank = f"bm25({name})" if weights == (1.0, 1.0) else f"bm25({name}, {text}, {subject})"
        return Ranked(name, f"{name}.rowid", f"{name} MATCH ?", rank)


_WORD = re.compile(r"\w+", re.UNICODE)
_VECTOR = ("setweight(to_tsvector('english', ?), 'D') || "
           "setweight(to_tsvector('english', ?), 'C')")  # fmt: skip


class PgText:
    """PostgreSQL ``tsvector`` indexes (see the module doc) on ``db``'s schema."""

    def __init__(self, db: PgConnection) -> None:
        self.db = db

    def create(self, name: str) -> None:
        name = _checked(name)
        self.db.verbatim(f"CREATE TABLE IF NOT EXISTS {name} "
                         "(rowid BIGINT PRIMARY KEY, tsv tsvector NOT NULL)")  # fmt: skip
        self.db.verbatim(f"CREATE INDEX IF NOT EXISTS {name}_tsv ON {name} USING gin (tsv)")

    def add(self, name: str, rowid: int, text: str, subject: str) -> None:
        self.db.execute(f"INSERT INTO {_checked(name)} (rowid, tsv) VALUES (?, {_VECTOR})",
                        (rowid, text, subject))  # fmt: skip

    def remove(self, name: str, rowid: int, text: str, subject: str) -> None:
        self.db.execute(f"DELETE FROM {_checked(name)} WHERE rowid = ?", (rowid,))

    def query(self, terms: Sequence[str]) -> str:
        # each term a quoted phrase of its words, OR-ed: nothing in a term is an operator
        words = (" ".join(_WORD.findall(t)) for t in sorted(set(terms)))
        return " or ".join(f'"{w}"' for w in words if w)

    def ranked(self, name: str, weights: tuple[float, float] = (1.0, 1.0)) -> Ranked:
        name = _checked(name)
        top = max(weights) or 1.0
        text, subject = (w / top for w in weights)
        # {D, C, B, A}: the text is D, the subject C
        scale = f"'{{{text}, {subject}, {subject}, {subject}}}'::float4[]"
        source = f"{name} CROSS JOIN websearch_to_tsquery('english', ?) AS {name}_q(q)"
        return Ranked(source, f"{name}.rowid", f"{name}.tsv @@ {name}_q.q",
                      f"(-ts_rank_cd({scale}, {name}.tsv, {name}_q.q, 1))")  # fmt: skip


def lexical_of(db: Connection, content: str, key: str) -> Lexical:
    """The full-text indexes for a store on ``db`` whose rows are in ``content``."""
    if isinstance(db, PgConnection):
        return PgText(db)
    if isinstance(db, sqlite3.Connection):
        return Fts5(db, content, key)
    raise TypeError(f"no full-text index for a {type(db).__name__}")
