"""SQLite statements said in PostgreSQL's dialect.

The memory engine (and the stores beside it) write their statements once, as SQLite
takes them; on PostgreSQL :func:`to_postgres` rewrites each one (cached: the engine uses
a few hundred distinct statements) before psycopg runs it:

* placeholders: ``?`` → ``%s``, ``:name`` → ``%(name)s``, a literal ``%`` → ``%%``
  (nothing inside a quoted string or identifier is touched);
* ``INSERT OR IGNORE INTO`` → ``INSERT INTO … ON CONFLICT DO NOTHING``;
* a subquery in ``FROM``/``JOIN`` without a name gets one (``AS _subquery1``);
* in ``CREATE TABLE``: ``BLOB`` → ``BYTEA``, ``REAL`` → ``DOUBLE PRECISION`` (PostgreSQL's
  ``REAL`` is 4 bytes; SQLite's is 8), ``INTEGER`` → ``BIGINT``, ``TEXT`` → ``TEXT
  COLLATE "C"`` (byte order, as SQLite's ``BINARY`` compares); SQLite's rowid made
  explicit: an ``INTEGER PRIMARY KEY`` column becomes a ``BIGINT`` identity (it takes
  given values too, as a rowid alias does), and a table without one gets a ``rowid``
  identity column (statements that say ``ORDER BY rowid`` keep working); ``WITHOUT
  ROWID`` is dropped (PostgreSQL tables have no hidden key).

* the tables' shapes are learned from the ``CREATE TABLE`` statements translated here
  (:class:`Shape`: columns, primary key, unique keys), and what a statement leaves to the
  table's shape is said from it: ``INSERT OR REPLACE`` → ``INSERT … ON CONFLICT (<the
  table's one key>) DO UPDATE SET c = excluded.c, …`` (SQLite deletes the old row and
  inserts a new one, a new rowid; here the row is updated in place and keeps its rowid);
  an ``INSERT`` without a column list gets the table's (so the ``rowid`` column the
  dialect added is left to its identity), ``SELECT * FROM t`` the table's columns; a
  NULL given for an ``INTEGER PRIMARY KEY`` takes the column's next value, as SQLite
  gives a new rowid (one more than the largest held);
* ``X'..'`` blob literals → ``'\\x..'::bytea``; ``typeof(col)`` → SQLite's type names
  from ``pg_typeof``; ``CROSS JOIN t ON …`` (SQLite: an inner join in a fixed order) →
  ``JOIN t ON …``; ``PRAGMA table_info(t)`` → the same six columns from the catalogue;
  the ``PRAGMA``s that only tune SQLite's own file (:data:`NO_OP_PRAGMAS`) → a statement
  that reads nothing.

What has no mechanical translation is refused with the statement named
(:class:`DialectError`): triggers (each store writes its own in PL/pgSQL), other
``PRAGMA``s, ``sqlite_master``, FTS5 virtual tables (the stores reach full text through
:mod:`hirmem.sql.lexical`), ``INSERT OR REPLACE`` into a table whose shape the dialect has
not seen, has seen twice differently, or that has more than one key (SQLite would delete
the rows conflicting on each; one ``ON CONFLICT`` names one).
"""

from __future__ import annotations

import functools
import re
import threading
from dataclasses import dataclass

from hirmem.protocol.errors import HirmemError

__all__ = ["NO_OP_PRAGMAS", "DialectError", "Shape", "inserted_table", "shape_of",
           "to_postgres"]  # fmt: skip


class DialectError(HirmemError):
    """A SQLite statement that has no mechanical PostgreSQL form."""


_REFUSED = (
    (re.compile(r"^\s*CREATE\s+TRIGGER\b", re.I), "a SQLite trigger (write it in PL/pgSQL)"),
    (re.compile(r"^\s*PRAGMA\b", re.I), "a PRAGMA"),
    (re.compile(r"\bsqlite_(master|schema)\b", re.I), "the SQLite catalogue"),
    (re.compile(r"^\s*CREATE\s+VIRTUAL\s+TABLE\b", re.I),
     "a virtual table (full text: use hirmem.sql.lexical)"),
)  # fmt: skip
# PRAGMAs that tune SQLite's own file or connection: PostgreSQL has nothing to tune
# there (its WAL, fsync and foreign keys are always on), so they read nothing
NO_OP_PRAGMAS = frozenset({"journal_mode", "synchronous", "foreign_keys", "busy_timeout",
                           "temp_store", "cache_size", "mmap_size", "wal_autocheckpoint"})
_PRAGMA = re.compile(r"^\s*PRAGMA\s+(\w+)\s*(?:=\s*[\w'\"-]+|\(\s*(\w+)\s*\))?\s*;?\s*$", re.I)
_NOTHING = "SELECT NULL WHERE false"
# PRAGMA table_info(t): (cid, name, type, notnull, dflt_value, pk) as SQLite gives them,
# less the rowid column the dialect added (a key's column reads notnull: PostgreSQL makes
# it so; the type is PostgreSQL's name for it)
_TABLE_INFO = (
    "SELECT (row_number() OVER (ORDER BY a.attnum)) - 1, a.attname::text, "
    "upper(format_type(a.atttypid, a.atttypmod)), a.attnotnull::int, "
    "pg_get_expr(d.adbin, d.adrelid), "
    "COALESCE((SELECT k.n FROM unnest(i.indkey) WITH ORDINALITY AS k(att, n) "
    "WHERE k.att = a.attnum), 0) "
    "FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid "
    "AND d.adnum = a.attnum LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary "
    "WHERE a.attrelid = to_regclass('{table}') AND a.attnum > 0 AND NOT a.attisdropped "
    "AND NOT (a.attname = 'rowid' AND a.attidentity = 'a') ORDER BY a.attnum"
)
_OR_IGNORE = re.compile(r"\bINSERT\s+OR\s+IGNORE\s+INTO\b", re.I)
_RETURNING = re.compile(r"\bRETURNING\b", re.I)
_CREATE_TABLE = re.compile(r"^\s*CREATE\s+TABLE\b", re.I)
_INT_PK = re.compile(r"\bINTEGER\s+PRIMARY\s+KEY\b(\s+AUTOINCREMENT\b)?", re.I)
_WITHOUT_ROWID = re.compile(r"\)\s*WITHOUT\s+ROWID\s*$", re.I)
_TYPES = ((re.compile(r"\bBLOB\b", re.I), "BYTEA"),
          (re.compile(r"\bREAL\b", re.I), "DOUBLE PRECISION"),
          (re.compile(r"\bINTEGER\b", re.I), "BIGINT"),
          # SQLite compares text byte by byte (BINARY); so does PostgreSQL's "C"
          (re.compile(r"\bTEXT\b", re.I), 'TEXT COLLATE "C"'))  # fmt: skip
_ROWID_COLUMN = re.compile(r"[(,]\s*rowid\s", re.I)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _placeholders(sql: str) -> str:
    """``?``/``:name``/``%`` outside quotes in psycopg's form."""
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if (ch in "xX" and i + 1 < n and sql[i + 1] == "'"
                and (i == 0 or not (sql[i - 1].isalnum() or sql[i - 1] == "_"))):
            end = sql.find("'", i + 2)  # a blob literal: hex digits only, no quote inside
            end = n if end == -1 else end
            out.append("'\\x" + sql[i + 2 : end] + "'::bytea")
            i = end + 1
            continue
        if ch in ("'", '"'):
            end = sql.find(ch, i + 1)
            while end != -1 and end + 1 < n and sql[end + 1] == ch:  # a doubled quote
                end = sql.find(ch, end + 2)
            end = n - 1 if end == -1 else end
            out.append(sql[i : end + 1].replace("%", "%%"))
            i = end + 1
            continue
        if ch == "?":
            out.append("%s")
        elif ch == "%":
            out.append("%%")
        elif ch == ":" and i + 1 < n and sql[i + 1] == ":":  # a PostgreSQL cast
            out.append("::")
            i += 2
            continue
        elif ch == ":" and (m := _NAME.match(sql, i + 1)):
            out.append(f"%({m.group()})s")
            i = m.end()
            continue
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _adds_rowid(sql: str) -> bool:
    """Whether the table ``sql`` makes gets a ``rowid`` column here: it has no rowid alias,
    no ``rowid`` of its own, and no composite key (SQLite: ``WITHOUT ROWID``)."""
    has_key = _INT_PK.search(sql) is not None
    return not has_key and not _ROWID_COLUMN.search(sql) and "PRIMARY KEY (" not in sql.upper()


def _column(item: str) -> str:
    """One column definition with its type said in PostgreSQL's words (the name kept: a
    column may be called ``text``)."""
    parts = item.split(None, 1)
    name, rest = parts[0], parts[1] if len(parts) > 1 else ""
    rest = _INT_PK.sub("BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY", rest)
    for pattern, word in _TYPES:
        rest = pattern.sub(word, rest)
    return f"{name} {rest.strip()}".rstrip()


def _create_table(sql: str) -> str:
    sql = _WITHOUT_ROWID.sub(")", sql)
    head = _TABLE_HEAD.match(sql)
    if head is None:
        raise DialectError(f"a CREATE TABLE the dialect cannot read: {sql.strip()[:200]}")
    open_at = head.end() - 1
    close = _closing(sql, open_at)
    items = [i if _CONSTRAINT.match(i) else _column(i)
             for i in _top_level(sql[open_at + 1 : close])]  # fmt: skip
    # a composite key (SQLite: WITHOUT ROWID) has no hidden row number to give
    if _adds_rowid(sql):
        items.insert(0, "rowid BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE")
    return f"{sql[: open_at + 1]}{', '.join(items)}{sql[close:]}"


_FROM_SUBQUERY = re.compile(r"\b(FROM|JOIN)\s*\(\s*SELECT\b", re.I)
_ALIAS = re.compile(r"\s*(AS\b|[A-Za-z_][A-Za-z0-9_]*)", re.I)
_NOT_ALIAS = {"where", "group", "order", "limit", "join", "left", "inner", "cross", "union",
              "on", "having", "window", "offset", "natural", "full", "right", "except",
              "intersect", "returning"}  # fmt: skip


def _alias_subqueries(sql: str) -> str:
    """Name every unnamed subquery in FROM/JOIN (SQLite allows them; PostgreSQL 15 not)."""
    out, pos, n = [], 0, 0
    for m in _FROM_SUBQUERY.finditer(sql):
        if m.start() < pos:
            continue  # inside a subquery already copied (its own are named below)
        open_at = sql.index("(", m.start())
        depth, i = 0, open_at
        while i < len(sql):
            depth += {"(": 1, ")": -1}.get(sql[i], 0)
            if depth == 0:
                break
            i += 1
        inner = _alias_subqueries(sql[open_at + 1 : i])
        out.append(sql[pos:open_at] + "(" + inner + ")")
        pos = i + 1
        after = _ALIAS.match(sql, pos)
        if after is None or after.group(1).lower() in _NOT_ALIAS:
            n += 1
            out.append(f" AS _subquery{n}")
    out.append(sql[pos:])
    return "".join(out)


@dataclass(frozen=True)
class Shape:
    """A table as its ``CREATE TABLE`` said it: columns in order (without a ``rowid`` the
    dialect added), its keys (the primary key first, then each ``UNIQUE``), and its
    ``INTEGER PRIMARY KEY`` column (SQLite's rowid alias), if any."""

    columns: tuple[str, ...]
    keys: tuple[tuple[str, ...], ...]
    rowid_alias: str | None
    added_rowid: bool


_shapes: dict[str, Shape | None] = {}  # table → its shape; None: seen twice, differently
_shapes_lock = threading.Lock()
_TABLE_HEAD = re.compile(r"^\s*CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?([A-Za-z_]\w*)\s*\(",
                         re.I)  # fmt: skip
_CONSTRAINT = re.compile(r"^(PRIMARY\s+KEY|UNIQUE|CHECK|FOREIGN\s+KEY|CONSTRAINT)\b", re.I)


def _top_level(body: str) -> list[str]:
    """``body`` split at the commas outside parentheses and quotes."""
    parts, depth, start, quote = [], 0, 0, ""
    for i, ch in enumerate(body):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(body[start:i].strip())
            start = i + 1
    parts.append(body[start:].strip())
    return [p for p in parts if p]


def _closing(sql: str, open_at: int) -> int:
    """The index of the parenthesis closing the one at ``open_at``."""
    depth, quote = 0, ""
    for i in range(open_at, len(sql)):
        ch = sql[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        else:
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if depth == 0:
                return i
    raise DialectError(f"unbalanced parentheses: {sql.strip()[:200]}")


def _names(text: str) -> tuple[str, ...]:
    inner = text[text.index("(") + 1 : text.rindex(")")]
    return tuple(c.strip().strip('"').lower() for c in inner.split(","))


def _learn(sql: str) -> None:
    """Keep the shape of the table ``sql`` (a SQLite ``CREATE TABLE``) makes."""
    head = _TABLE_HEAD.match(sql)
    if head is None:
        return
    open_at = head.end() - 1
    columns: list[str] = []
    primary: tuple[str, ...] = ()
    unique: list[tuple[str, ...]] = []
    alias = None
    for item in _top_level(sql[open_at + 1 : _closing(sql, open_at)]):
        m = _CONSTRAINT.match(item)
        if m is not None:
            word = m.group(1).upper()
            if word.startswith("PRIMARY"):
                primary = _names(item)
            elif word == "UNIQUE":
                unique.append(_names(item))
            continue
        name = item.split()[0].strip('"').lower()
        columns.append(name)
        if re.search(r"\bPRIMARY\s+KEY\b", item, re.I):
            primary = (name,)
            if _INT_PK.search(item):
                alias = name
        elif re.search(r"\bUNIQUE\b", item, re.I):
            unique.append((name,))
    added = _adds_rowid(sql)
    shape = Shape(tuple(columns), ((primary,) if primary else ()) + tuple(unique), alias, added)
    table = head.group(1).lower()
    with _shapes_lock:
        if table in _shapes and _shapes[table] != shape:
            _shapes[table] = None  # two tables of one name: nothing left to the shape
        else:
            _shapes[table] = shape


def shape_of(table: str) -> Shape | None:
    """The shape the dialect learned for ``table``; None when unseen or ambiguous."""
    with _shapes_lock:
        return _shapes.get(table.lower())


_INSERT = re.compile(r"^\s*INSERT\s+(OR\s+(?:REPLACE|IGNORE)\s+)?INTO\s+([A-Za-z_]\w*)\s*", re.I)
_VALUES = re.compile(r"\s*VALUES\s*\(", re.I)


def _replace_into(sql: str, table: str, columns: tuple[str, ...], rest: str) -> str:
    """``INSERT OR REPLACE`` said as an upsert on the table's one key (SQLite takes this
    form too)."""
    shape = shape_of(table)
    if shape is None:
        raise DialectError(f"INSERT OR REPLACE into {table}, a table whose shape the dialect "
                           f"has not learned (or learned twice, differently), has no "
                           f"PostgreSQL form here: {sql.strip()[:200]}")  # fmt: skip
    if len(shape.keys) > 1:
        raise DialectError(f"INSERT OR REPLACE into {table}, a table of {len(shape.keys)} keys, "
                           f"has no PostgreSQL form here (one ON CONFLICT names one key): "
                           f"{sql.strip()[:200]}")  # fmt: skip
    ret = _RETURNING.search(rest)
    tail = rest[ret.start() :] if ret else ""
    rest = rest[: ret.start()].rstrip() if ret else rest
    head = f"INSERT INTO {table} ({', '.join(columns)}) {rest}"
    if not shape.keys:
        return f"{head} {tail}".rstrip()
    key = shape.keys[0]
    updates = [f"{c} = excluded.{c}" for c in columns if c not in key]
    action = f"DO UPDATE SET {', '.join(updates)}" if updates else "DO NOTHING"
    return f"{head} ON CONFLICT ({', '.join(key)}) {action} {tail}".rstrip()


def _values_with_alias(table: str, columns: tuple[str, ...], rest: str) -> str:
    """``VALUES (…)`` with the rowid alias's value, when NULL, one more than the largest
    held, as SQLite picks it (an ``INSERT`` that leaves the column out takes the identity's
    next value instead: a table should not mix the two, nor writers without a lock)."""
    shape = shape_of(table)
    if shape is None or shape.rowid_alias not in columns:
        return rest
    m = _VALUES.match(rest)
    if m is None:
        return rest
    close = _closing(rest, m.end() - 1)
    values = _top_level(rest[m.end() : close])
    if len(values) != len(columns):
        return rest
    at = columns.index(shape.rowid_alias or "")
    alias = shape.rowid_alias
    values[at] = (f"COALESCE({values[at]}, (SELECT COALESCE(max({alias}), 0) + 1 "
                  f"FROM {table}))")  # fmt: skip
    return f"{rest[: m.end()]}{', '.join(values)}{rest[close:]}"


_DO_UPDATE = re.compile(r"\bDO\s+UPDATE\s+SET\b", re.I)
_UPDATE_END = re.compile(r"\b(WHERE|RETURNING)\b", re.I)


def _qualified(expr: str, table: str, columns: tuple[str, ...]) -> str:
    """``expr`` with each bare column of ``table`` named ``table.column`` (outside quotes)."""
    names = re.compile(r"(?<![.\w])(" + "|".join(map(re.escape, columns)) + r")\b(?!\s*\()",
                       re.I)  # fmt: skip
    pieces = re.split(r"('(?:[^']|'')*'|\"[^\"]*\")", expr)
    return "".join(p if i % 2 else names.sub(rf"{table}.\1", p) for i, p in enumerate(pieces))


def _upsert_names(sql: str, table: str) -> str:
    """In ``ON CONFLICT … DO UPDATE SET c = expr``, a bare column in ``expr`` is the row
    already stored (SQLite); PostgreSQL calls that ambiguous beside ``excluded``, so it is
    named by its table."""
    m = _DO_UPDATE.search(sql)
    shape = shape_of(table)
    if m is None or shape is None or not shape.columns:
        return sql
    tail = sql[m.end() :]
    end = _UPDATE_END.search(tail)
    sets, rest = (tail[: end.start()], tail[end.start() :]) if end else (tail, "")
    items = []
    for item in _top_level(sets):
        column, eq, expr = item.partition("=")
        items.append(f"{column.strip()} = {_qualified(expr.strip(), table, shape.columns)}"
                     if eq else item)  # fmt: skip
    if rest[:5].upper() == "WHERE":
        ret = _RETURNING.search(rest)
        cut = ret.start() if ret else len(rest)
        rest = _qualified(rest[:cut], table, shape.columns) + rest[cut:]
    return f"{sql[: m.end()]} {', '.join(items)} {rest}".rstrip()


def _insert(sql: str) -> str:
    """An ``INSERT`` with what its table's shape implies said (see the module doc)."""
    m = _INSERT.match(sql)
    if m is None:
        return sql
    table, rest = m.group(2).lower(), sql[m.end() :]
    replace = bool(m.group(1)) and m.group(1).split()[1].upper() == "REPLACE"
    if rest.startswith("("):
        close = _closing(rest, 0)
        columns = tuple(c.strip().strip('"').lower() for c in rest[1:close].split(","))
        rest = rest[close + 1 :].lstrip()
    else:
        shape = shape_of(table)
        if shape is None:
            if replace:
                return _replace_into(sql, table, (), rest)  # refuses
            return sql
        columns = shape.columns
    rest = _upsert_names(_values_with_alias(table, columns, rest), table)
    if replace:
        return _replace_into(sql, table, columns, rest)
    verb = m.group(0)[: m.start(2) - m.start(0)]
    return f"{verb}{table} ({', '.join(columns)}) {rest}"


_SELECT_ALL = re.compile(r"^\s*SELECT\s+\*\s+FROM\s+([A-Za-z_]\w*)\b(?!\s*[.(])", re.I)
_TYPEOF = re.compile(r"\btypeof\(\s*([A-Za-z_][\w.]*)\s*\)", re.I)
_CROSS_ON = re.compile(r"\bCROSS\s+JOIN\s+([A-Za-z_]\w*(?:\s+(?:AS\s+)?[A-Za-z_]\w*)?)\s+ON\b",
                       re.I)  # fmt: skip


def _select_all(sql: str) -> str:
    m = _SELECT_ALL.match(sql)
    shape = shape_of(m.group(1)) if m else None
    if m is None or shape is None or not shape.added_rowid:
        return sql
    return f"SELECT {', '.join(shape.columns)} FROM {m.group(1)}{sql[m.end() :]}"


def _typeof(m: re.Match[str]) -> str:
    col = m.group(1)
    return (f"(CASE WHEN {col} IS NULL THEN 'null' ELSE CASE pg_typeof({col})::text "
            "WHEN 'bigint' THEN 'integer' WHEN 'integer' THEN 'integer' "
            "WHEN 'smallint' THEN 'integer' WHEN 'double precision' THEN 'real' "
            "WHEN 'real' THEN 'real' WHEN 'numeric' THEN 'real' WHEN 'bytea' THEN 'blob' "
            "ELSE 'text' END END)")  # fmt: skip


def _pragma(sql: str) -> str | None:
    """A PRAGMA's PostgreSQL form, None for one that has none."""
    m = _PRAGMA.match(sql)
    if m is None:
        return None
    name = m.group(1).lower()
    if name in NO_OP_PRAGMAS:
        return _NOTHING
    if name == "table_info" and m.group(2):
        return _TABLE_INFO.format(table=m.group(2).lower())
    return None


def to_postgres(sql: str) -> str:
    """``sql`` (as SQLite takes it) in PostgreSQL's dialect, placeholders in psycopg's.

    A ``CREATE TABLE`` teaches the dialect its table's shape (:func:`shape_of`); the
    statements that leave something to a table's shape are said again from it."""
    if _CREATE_TABLE.match(sql):
        _learn(sql)
        return _translate(sql)
    table = _INSERT.match(sql) or _SELECT_ALL.match(sql)
    if table is None:
        return _translate(sql)
    # cached per statement and the shape it was said from (a shape learned later, or
    # made ambiguous, says it again)
    return _shaped(sql, shape_of(table.group(table.lastindex or 0)))


@functools.lru_cache(maxsize=4096)
def _shaped(sql: str, shape: Shape | None) -> str:
    return _translate(_insert(sql) if _INSERT.match(sql) else _select_all(sql))


@functools.lru_cache(maxsize=4096)
def _translate(sql: str) -> str:
    pragma = _pragma(sql)
    if pragma is not None:
        return pragma
    for pattern, what in _REFUSED:
        if pattern.search(sql):
            raise DialectError(f"{what} has no PostgreSQL form here: {sql.strip()[:200]}")
    sql = sql.strip().rstrip(";").rstrip()
    if _CREATE_TABLE.match(sql):
        sql = _create_table(sql)
    if _OR_IGNORE.search(sql):
        sql = _OR_IGNORE.sub("INSERT INTO", sql)
        ret = _RETURNING.search(sql)
        if ret:
            sql = sql[: ret.start()] + "ON CONFLICT DO NOTHING " + sql[ret.start() :]
        else:
            sql += " ON CONFLICT DO NOTHING"
    sql = _TYPEOF.sub(_typeof, sql)
    sql = _CROSS_ON.sub(r"JOIN \1 ON", sql)
    return _placeholders(_alias_subqueries(sql))


_INSERT_INTO = re.compile(r"^\s*INSERT\s+(?:OR\s+IGNORE\s+)?INTO\s+([A-Za-z_][A-Za-z0-9_]*)", re.I)


def inserted_table(sql: str) -> str | None:
    """The table an ``INSERT`` (without ``RETURNING``) writes, else None: the statements
    whose ``lastrowid`` a caller may ask for."""
    m = _INSERT_INTO.match(sql)
    if m is None or _RETURNING.search(sql):
        return None
    return m.group(1).lower()
