"""Distillation's links as ranges of rowids (issue 13, speed: a pack writes one row per
pattern it fed): what the rows name, written in any batches, is exactly the set of
(distillate, episode) pairs linked — checked both ways (a distillate's episodes, an
episode's distillates) against a plain set, over thousands of random pairs."""

from __future__ import annotations

import random
import sqlite3

import pytest

from hirmem.memory.distill_schema import (
    LINK,
    SCHEMA,
    SPAN,
    distillates_of,
    link_rows,
    linked_rowids,
)


def _db() -> sqlite3.Connection:
    db = sqlite3.connect(":memory:", isolation_level=None)
    for statement in SCHEMA:
        db.execute(statement)
    return db


@pytest.mark.parametrize("seed", range(6))
def test_link_rows_name_exactly_the_pairs_linked_in_any_batches(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(50):
        db = _db()
        spread = rng.choice([8, 64, 200, 5000])  # packs of neighbours … scattered rowids
        pairs = {(rng.randrange(1, 6), rng.randrange(1, spread))
                 for _ in range(rng.randrange(1, 300))}  # fmt: skip
        order = list(pairs)
        rng.shuffle(order)
        k = 0
        while k < len(order):  # in batches, as packs and single episodes come
            n = rng.choice([1, 2, 8, 64])
            rows = link_rows(order[k : k + n])
            assert all(0 < mask < 1 << SPAN for _, _, mask in rows)
            db.executemany(LINK, rows)
            k += n
        count = db.execute("SELECT count(*) FROM distill_links").fetchone()[0]
        assert count <= len(pairs)
        for d in range(0, 7):
            assert linked_rowids(db, d) == sorted(r for x, r in pairs if x == d)
        for rowid in range(0, spread + 1):
            assert distillates_of(db, rowid) == sorted(x for x, r in pairs if r == rowid)


def test_a_packs_neighbours_take_one_row_and_a_wide_pack_more() -> None:
    assert link_rows([(3, 100), (3, 104), (3, 108), (4, 101)]) == [
        (3, 100, 0b100010001), (4, 101, 1)]  # fmt: skip
    assert link_rows([(1, 10), (1, 10 + SPAN - 1), (1, 10 + SPAN)]) == [
        (1, 10, 1 | 1 << (SPAN - 1)), (1, 10 + SPAN, 1)]  # fmt: skip
