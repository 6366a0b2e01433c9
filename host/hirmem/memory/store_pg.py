"""What the memory store needs on PostgreSQL that SQLite has built in.

The tables and indexes come from the store's own migrations, said in PostgreSQL's dialect
(:mod:`hirmem.sql.dialect`); the rest is here:

* **triggers**: every SQLite trigger of :data:`hirmem.memory.store.TRIGGERS`, with the same
  name and the same refusal, as a PL/pgSQL function and a row trigger (the ``WHEN``
  condition inside the function, so the catalogue's text is one this module can
  compare), plus ``*_no_truncate`` statement triggers: ``TRUNCATE`` skips row triggers,
  and would otherwise empty the append-only tables;
* **the tamper check** (:func:`missing_triggers`): a trigger dropped, disabled
  (``ALTER TABLE … DISABLE TRIGGER``, which SQLite has no form of), pointed at another
  function, or whose function's body was replaced, is reported by name;
* **the schema version**: a one-row table ``schema_version`` (SQLite: ``PRAGMA
  user_version``);
* **other writers**: a one-row counter ``writes`` that every transaction which wrote
  bumps just before COMMIT (SQLite: ``PRAGMA data_version``); a store that finds it
  moved since its own last look sees that someone else committed and re-reads its
  caches (audit head, recall index);
* **one writer**: ``pg_advisory_xact_lock`` on the schema's name, taken first in every
  transaction of the writer (SQLite: ``BEGIN IMMEDIATE``), so the audit chain has one
  writer across processes and machines, and the counter read at the start is still
  the latest at COMMIT.
"""

from __future__ import annotations

from hirmem.sql.pgconn import PgConnection

__all__ = ["PG_TRIGGERS", "add_own_triggers", "bootstrap", "bump_writes", "lock",
           "missing_triggers", "restore_triggers", "schema_version", "set_schema_version",
           "trigger_statements"]  # fmt: skip


def lock(db: PgConnection, schema: str) -> None:
    """The write transaction's first statement: the store's single writer, across
    processes and machines (released by COMMIT or ROLLBACK)."""
    db.execute("SELECT pg_advisory_xact_lock(hashtext(?))", (f"hirmem.{schema}",))


def bootstrap(db: PgConnection, schema: str) -> None:
    """The schema and its two bookkeeping tables (version, writes), made once."""
    db.execute("BEGIN")
    try:
        lock(db, schema)
        db.verbatim(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        db.execute("CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)")
        db.execute("CREATE TABLE IF NOT EXISTS writes (n BIGINT NOT NULL)")
        if db.execute("SELECT count(*) FROM schema_version").fetchone()[0] == 0:
            db.execute("INSERT INTO schema_version (version) VALUES (0)")
            db.execute("INSERT INTO writes (n) VALUES (0)")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _refuse(message: str) -> str:
    return f"RAISE EXCEPTION '{message}';"


# name → (event and table, FOR EACH ROW/STATEMENT, the function's body)
PG_TRIGGERS: dict[str, tuple[str, str, str]] = {
    "audit_no_update": ("BEFORE UPDATE ON audit", "ROW",
                        _refuse("audit chain is append-only (MEM-INV-5): no update")),
    "audit_no_delete": ("BEFORE DELETE ON audit", "ROW",
                        _refuse("audit chain is append-only (MEM-INV-5): no delete")),
    "reviews_no_update": ("BEFORE UPDATE ON reviews", "ROW",
                          _refuse("steward decisions are append-only: no update")),
    "reviews_no_delete": ("BEFORE DELETE ON reviews", "ROW",
                          _refuse("steward decisions are append-only: no delete")),
    "memories_no_delete": (
        "BEFORE DELETE ON memories", "ROW",
        "IF OLD.state <> 0 THEN "
        + _refuse("only volatile memories may be evicted (MEM-INV-3)") + " END IF; RETURN OLD;",
    ),
    "memories_content_fixed": (
        "BEFORE UPDATE OF id, payload, source, \"timestamp\", context, prev_hash, hash "
        "ON memories", "ROW",
        _refuse("memory content is immutable: repair writes a new version"),
    ),
    "memories_legal_state": (
        "BEFORE UPDATE OF state ON memories", "ROW",
        "IF NEW.state <> OLD.state AND OLD.state * 10 + NEW.state NOT IN "
        "(1, 3, 12, 13, 14, 23, 24, 31, 34) THEN "
        + _refuse("illegal lifecycle transition (see hirmem.memory.states)")
        + " END IF; RETURN NEW;",
    ),
    "memories_permanent_quarantine": (
        "BEFORE UPDATE OF permanent, state ON memories", "ROW",
        "IF OLD.permanent = 1 AND (NEW.permanent = 0 OR (OLD.state = 3 AND NEW.state <> 3)) "
        "THEN " + _refuse("permanent quarantine cannot be lifted (MEM-INV-2)")
        + " END IF; RETURN NEW;",
    ),
    "checkpoints_no_update": ("BEFORE UPDATE ON checkpoints", "ROW",
                              _refuse("checkpoints are append-only: no update")),
    "checkpoints_no_delete": ("BEFORE DELETE ON checkpoints", "ROW",
                              _refuse("checkpoints are append-only: no delete")),
    "memories_evict_embedding": ("AFTER DELETE ON memories", "ROW",
                                 "DELETE FROM embeddings WHERE memory = OLD.rowid; RETURN OLD;"),
    "embeddings_fixed": ("BEFORE UPDATE ON embeddings", "ROW",
                         _refuse("an embedding is written once, at capture")),
    "embeddings_kept": (
        "BEFORE DELETE ON embeddings", "ROW",
        "IF (SELECT state FROM memories WHERE rowid = OLD.memory) <> 0 THEN "
        + _refuse("a gated memory keeps its embedding (MEM-INV-3)") + " END IF; RETURN OLD;",
    ),
    **{
        f"{table}_no_truncate": (f"BEFORE TRUNCATE ON {table}", "STATEMENT",
                                 _refuse(f"{table} cannot be truncated: {why}"))
        for table, why in (
            ("audit", "the audit chain is append-only (MEM-INV-5)"),
            ("reviews", "steward decisions are append-only"),
            ("checkpoints", "checkpoints are append-only"),
            ("memories", "only volatile memories may be evicted (MEM-INV-3)"),
            ("embeddings", "a gated memory keeps its embedding (MEM-INV-3)"),
        )
    },
}  # fmt: skip
# the table each trigger is on (the word after ON)
_TABLE = {name: event.split(" ON ")[1] for name, (event, _, _) in PG_TRIGGERS.items()}


def _body(name: str) -> str:
    return f" BEGIN {PG_TRIGGERS[name][2]} END "


def _definition(name: str) -> str:
    event, each, _ = PG_TRIGGERS[name]
    return f"CREATE TRIGGER {name} {event} FOR EACH {each} EXECUTE FUNCTION {name}_fn()"


def trigger_statements(name: str) -> list[str]:
    """The statements that (re-)create trigger ``name`` and its function."""
    return [
        f"CREATE OR REPLACE FUNCTION {name}_fn() RETURNS trigger LANGUAGE plpgsql "
        f"AS $fn${_body(name)}$fn$",
        f"DROP TRIGGER IF EXISTS {name} ON {_TABLE[name]}",
        _definition(name),
    ]


def _squeeze(text: str) -> str:
    return " ".join(text.split())


def missing_triggers(db: PgConnection, schema: str, names: list[str]) -> list[str]:
    """Those of ``names`` not in ``schema`` as written here: dropped, disabled, on
    another function, or with another body."""
    rows = db.execute(
        "SELECT t.tgname, pg_get_triggerdef(t.oid), t.tgenabled, p.proname, p.prosrc "
        "FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_proc p ON p.oid = t.tgfoid "
        "WHERE n.nspname = ? AND NOT t.tgisinternal",
        (schema,),
    ).fetchall()
    have = {
        str(name): (_squeeze(str(defn).replace(f"{schema}.", "")), str(enabled), str(fn),
                    _squeeze(str(src)))
        for name, defn, enabled, fn, src in rows
    }  # fmt: skip
    return [
        n for n in names
        if have.get(n) != (_squeeze(_definition(n)), "O", f"{n}_fn", _squeeze(_body(n)))
    ]  # fmt: skip


def restore_triggers(db: PgConnection, names: list[str]) -> None:
    for name in names:
        for statement in trigger_statements(name):
            db.verbatim(statement)


def add_own_triggers(db: PgConnection, sqlite_triggers: set[str]) -> None:
    """The triggers PostgreSQL needs and SQLite has no twin of (``*_no_truncate``), on
    the tables a migration has made so far (a migration's last step)."""
    for name in PG_TRIGGERS:
        if name in sqlite_triggers:
            continue
        if db.execute("SELECT to_regclass(?)", (_TABLE[name],)).fetchone()[0] is not None:
            restore_triggers(db, [name])


def schema_version(db: PgConnection) -> int:
    return int(db.execute("SELECT version FROM schema_version").fetchone()[0])


def set_schema_version(db: PgConnection, version: int) -> None:
    db.execute("UPDATE schema_version SET version = ?", (version,))


def bump_writes(db: PgConnection) -> int | None:
    """Count this transaction if it wrote anything (it has a transaction id then); the
    count after it, None for a transaction that only read."""
    row = db.execute(
        "UPDATE writes SET n = n + 1 WHERE pg_current_xact_id_if_assigned() IS NOT NULL "
        "RETURNING n"
    ).fetchone()
    return None if row is None else int(row[0])
