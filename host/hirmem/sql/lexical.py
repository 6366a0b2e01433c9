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
* :class:`PgText` — PostgreSQL: a table of (rowid, ``tsvector``, length) with a GIN
  index, the text weighted ``D`` and the subject ``C`` (``english`` configuration:
  Snowball stemming, English stop words dropped), beside the term statistics BM25 needs
  (rows per lexeme, rows and tokens in all), kept as rows come and go; matched by ``@@``
  and ranked by **BM25 computed in SQL from those statistics**, with FTS5's formula and
  constants (idf = ln((N - n + 0.5)/(n + 0.5)), at least 1e-6; k1 = 1.2, b = 0.75; a
  hit counts at its column's weight; length against the index's mean length).
  **How the ranking differs**: only by the tokenisers — Porter (FTS5) and Snowball stem
  nearly alike, but PostgreSQL drops English stop words, so a row's length and a stop
  word's statistics differ (a stop word matches nothing there); on words both keep, the
  ranks are the same (``tools/lexical_ranking.py``: the same rows, the same top 10).
  ``ts_rank_cd`` (cover density) was measured too and not kept: with no inverse
  document frequency it put a common word's rows above a rare word's (3 % top-10
  overlap with FTS5 on a rare-OR-common query).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from hirmem.sql import Connection
from hirmem.sql.pgconn import PgConnection

__all__ = ["Fts5", "Lexical", "PgText", "Ranked", "lexical_of", "members_of"]

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

    def members(self, name: str) -> str:
        """A SELECT of the key (as ``id``) of every row index ``name`` holds, from a table
        keyed by it: a partition's rows listed in key order, found without an index of
        the content table by partition."""


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

    def members(self, name: str) -> str:
        # FTS5 keeps a row of token counts per indexed row, keyed by its rowid
        return f"SELECT id FROM {_checked(name)}_docsize"


_VECTOR = ("SELECT setweight(to_tsvector('english', ?), 'D') || "
           "setweight(to_tsvector('english', ?), 'C') AS v")  # fmt: skip
K1, B = 1.2, 0.75  # BM25's constants, as FTS5's bm25() has them


class PgText:
    """PostgreSQL ``tsvector`` indexes (see the module doc) on ``db``'s schema: per index
    ``<name>`` (rowid, tsvector, length in tokens), ``<name>_df`` (rows per lexeme) and
    ``<name>_n`` (rows and tokens in all), kept by :meth:`add` and :meth:`remove`."""

    def __init__(self, db: PgConnection) -> None:
        self.db = db

    def create(self, name: str) -> None:
        name = _checked(name)
        for statement in (
            f"CREATE TABLE IF NOT EXISTS {name} (rowid BIGINT PRIMARY KEY, "
            "tsv tsvector NOT NULL, len BIGINT NOT NULL)",
            f"CREATE INDEX IF NOT EXISTS {name}_tsv ON {name} USING gin (tsv)",
            f'CREATE TABLE IF NOT EXISTS {name}_df (lexeme TEXT COLLATE "C" PRIMARY KEY, '
            "n BIGINT NOT NULL)",
            f"CREATE TABLE IF NOT EXISTS {name}_n (rows BIGINT NOT NULL, tokens BIGINT NOT NULL)",
            f"INSERT INTO {name}_n SELECT 0, 0 WHERE NOT EXISTS (SELECT 1 FROM {name}_n)",
        ):
            self.db.verbatim(statement)

    def add(self, name: str, rowid: int, text: str, subject: str) -> None:
        name = _checked(name)
        self.db.execute(
            f"INSERT INTO {name} (rowid, tsv, len) SELECT ?, s.v, (SELECT COALESCE(sum("
            f"array_length(x.positions, 1)), 0) FROM unnest(s.v) AS x) FROM ({_VECTOR}) AS s",
            (rowid, text, subject))  # fmt: skip
        self.db.execute(
            f"INSERT INTO {name}_df (lexeme, n) SELECT x.lexeme, 1 FROM unnest((SELECT tsv "
            f"FROM {name} WHERE rowid = ?)) AS x ON CONFLICT (lexeme) DO UPDATE SET "
            f"n = {name}_df.n + 1", (rowid,))  # fmt: skip
        self.db.execute(f"UPDATE {name}_n SET rows = rows + 1, tokens = tokens + "
                        f"(SELECT len FROM {name} WHERE rowid = ?)", (rowid,))  # fmt: skip

    def remove(self, name: str, rowid: int, text: str, subject: str) -> None:
        name = _checked(name)
        held = f"(SELECT tsv FROM {name} WHERE rowid = ?)"
        self.db.execute(f"UPDATE {name}_df SET n = n - 1 WHERE lexeme IN "
                        f"(SELECT x.lexeme FROM unnest({held}) AS x)", (rowid,))  # fmt: skip
        self.db.execute(f"DELETE FROM {name}_df WHERE n <= 0")
        self.db.execute(f"UPDATE {name}_n SET rows = rows - 1, tokens = tokens - r.len FROM "
                        f"(SELECT len FROM {name} WHERE rowid = ?) AS r", (rowid,))  # fmt: skip
        self.db.execute(f"DELETE FROM {name} WHERE rowid = ?", (rowid,))

    def query(self, terms: Sequence[str]) -> str:
        return " ".join(sorted(set(terms)))  # parsed and stemmed by to_tsvector: no operators

    def ranked(self, name: str, weights: tuple[float, float] = (1.0, 1.0)) -> Ranked:
        name = _checked(name)
        text, subject = weights
        # the query's lexemes (stemmed as the rows were), and their OR as a tsquery
        source = (
            f"{name} CROSS JOIN (SELECT w.words, COALESCE((SELECT string_agg(quote_literal(x), "
            "' | ') FROM unnest(w.words) AS x), '')::tsquery AS q FROM (SELECT "
            f"tsvector_to_array(to_tsvector('english', ?)) AS words) AS w) AS {name}_q"
        )
        # BM25 as FTS5 computes it: idf = ln((N - n + 0.5) / (n + 0.5)) (at least 1e-6);
        # a term's frequency counts each hit at its column's weight
        tf = (f"(SELECT sum(CASE w WHEN 'C' THEN {subject} ELSE {text} END) "
              "FROM unnest(x.weights) AS w)")  # fmt: skip
        idf = "GREATEST(ln((s.rows - d.n + 0.5)::float8 / (d.n + 0.5)), 1e-6)"
        mean = "GREATEST(s.tokens::float8 / GREATEST(s.rows, 1), 1e-9)"
        norm = f"(1 - {B} + {B} * {name}.len / {mean})"
        rank = (
            f"(-(SELECT COALESCE(sum({idf} * u.tf * {K1 + 1} / (u.tf + {K1} * {norm})), 0) "
            f"FROM (SELECT x.lexeme, {tf} AS tf FROM unnest({name}.tsv) AS x "
            f"WHERE x.lexeme = ANY({name}_q.words)) AS u JOIN {name}_df AS d "
            f"ON d.lexeme = u.lexeme CROSS JOIN {name}_n AS s))"
        )
        return Ranked(source, f"{name}.rowid", f"{name}.tsv @@ {name}_q.q", rank)

    def members(self, name: str) -> str:
        return f"SELECT rowid AS id FROM {_checked(name)}"


def members_of(lex: Lexical, names: Sequence[str]) -> str:
    """A SELECT of the ids (``id``) of the rows any of indexes ``names`` holds (each row is
    in one index: the store's partitions are disjoint); one that holds none when empty."""
    if not names:
        return "SELECT 0 AS id WHERE 1 = 0"
    parts = [lex.members(n) for n in names]
    # SQLite takes at most 500 terms in one compound SELECT: a reader of more containers
    # reads them in nested groups
    while len(parts) > _GROUP:
        parts = [f"SELECT g.id FROM ({' UNION ALL '.join(parts[i : i + _GROUP])}) AS g"
                 for i in range(0, len(parts), _GROUP)]  # fmt: skip
    return " UNION ALL ".join(parts)


_GROUP = 100  # the members' SELECTs in one compound SELECT


def lexical_of(db: Connection, content: str, key: str) -> Lexical:
    """The full-text indexes for a store on ``db`` whose rows are in ``content``."""
    if isinstance(db, PgConnection):
        return PgText(db)
    if isinstance(db, sqlite3.Connection):
        return Fts5(db, content, key)
    raise TypeError(f"no full-text index for a {type(db).__name__}")
