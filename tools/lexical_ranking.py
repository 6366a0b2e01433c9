"""How the two full-text rankings of :mod:`hirmem.sql.lexical` compare, in figures.

    .venv/bin/python tools/lexical_ranking.py            # 3,000 rows, 300 queries
    .venv/bin/python tools/lexical_ranking.py --small    # 500 rows, 100 queries

One synthetic corpus (words drawn Zipf-like from a vocabulary both stemmers keep whole,
a subject on a third of the rows) is indexed by SQLite FTS5 (``bm25()``) and, on a
PostgreSQL server this tool starts, by the ``tsvector`` index (BM25 in SQL from its
term statistics); the same OR-queries of one to three words run on both. Printed: how
often the matched rows are the same set, the mean overlap of the two top-10 lists, how
often the top hit is the same, and the same figures for queries that mix a rare word
with a common one (where a ranking without inverse document frequency, such as
``ts_rank_cd``, lifts the common word's rows: 3 % overlap when it was measured).
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "host"))

from hirmem.emulation import postgres
from hirmem.sql.lexical import Fts5, Lexical, PgText
from hirmem.sql.pgconn import PgConnection

CONSONANTS, VOWELS, ENDS = "bdfgkmnprtvz", "aiou", "bdgkmnprt"


def vocabulary(rng: random.Random, n: int) -> list[str]:
    """``n`` made-up words of consonant-vowel-consonant-vowel-consonant: no stemmer
    shortens them, none is a stop word."""
    words: set[str] = set()
    while len(words) < n:
        words.add(rng.choice(CONSONANTS) + rng.choice(VOWELS) + rng.choice(CONSONANTS)
                  + rng.choice(VOWELS) + rng.choice(ENDS))  # fmt: skip
    return sorted(words)


def top(lex: Lexical, db: sqlite3.Connection | PgConnection, terms: list[str],
        k: int) -> tuple[set[int], list[int]]:  # fmt: skip
    r = lex.ranked("terms", (1.0, 2.0))
    rows = db.execute(f"SELECT c.id, {r.rank} FROM {r.source} JOIN content c ON c.id = {r.key} "
                      f"WHERE {r.match} ORDER BY {r.rank}, c.id", [lex.query(terms)]).fetchall()
    return {int(i) for i, _ in rows}, [int(i) for i, _ in rows[:k]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true")
    args = parser.parse_args()
    rows, queries = (500, 100) if args.small else (3000, 300)
    rng = random.Random(17)
    vocab = vocabulary(rng, 400)
    weights = [1.0 / (i + 1) for i in range(len(vocab))]  # Zipf: a few words are common
    docs = [(" ".join(rng.choices(vocab, weights, k=rng.randint(4, 30))),
             rng.choice(vocab[:50]) if rng.random() < 0.33 else "") for _ in range(rows)]
    lite = sqlite3.connect(":memory:", isolation_level=None)
    with postgres.Primary("lexical") as primary:
        pg = PgConnection(primary.dsn, "public")
        indexes: list[tuple[Lexical, sqlite3.Connection | PgConnection]] = [
            (Fts5(lite, "content", "id"), lite), (PgText(pg), pg)]
        for lex, db in indexes:
            db.execute("CREATE TABLE content (id INTEGER PRIMARY KEY, text TEXT, subject TEXT)")
            lex.create("terms")
            db.execute("BEGIN")
            for n, (text, subject) in enumerate(docs, 1):
                db.execute("INSERT INTO content (id, text, subject) VALUES (?, ?, ?)",
                           (n, text, subject))  # fmt: skip
                lex.add("terms", n, text, subject)
            db.execute("COMMIT")
        for label, mixed in (("random queries", False), ("a rare word OR a common one", True)):
            same_set = same_first = 0
            overlap = 0.0
            for _ in range(queries):
                if mixed:
                    terms = [rng.choice(vocab[:10]), rng.choice(vocab[200:])]
                else:
                    terms = rng.choices(vocab[:200], k=rng.randint(1, 3))
                (lset, ltop), (pset, ptop) = (top(lex, db, terms, 10) for lex, db in indexes)
                same_set += lset == pset
                same_first += bool(ltop) and bool(ptop) and ltop[0] == ptop[0]
                overlap += len(set(ltop) & set(ptop)) / max(1, min(10, len(ltop)))
            print(f"{label:30s} {queries} queries over {rows} rows: same matched rows "
                  f"{same_set / queries:6.1%}, top-10 overlap {overlap / queries:6.1%}, "
                  f"same top hit {same_first / queries:6.1%}")
        pg.close()
    lite.close()


if __name__ == "__main__":
    main()
