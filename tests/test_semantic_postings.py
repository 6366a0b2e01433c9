"""Mentions as posting lists (issue 16 §5): a name's passages (tier 0) and memories (tier 1)
as gap-coded ids in bounded parts (:mod:`hirmem.semantic.postings`).

Checked against a plain dict over many random adds and removes (ids in any order, lists
long enough to split), on SQLite and PostgreSQL; the id sets a scoped read uses against
the mentions recomputed from the live passages' and memories' text; two writers on one
store; and stores of the row layout (``passage_mentions``, ``tier1_mentions``) converted
when opened.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from hirmem.protocol.identity import fold
from hirmem.semantic.dictionary import pack_ints
from hirmem.semantic.memories import MemoryIndex, Note, _named
from hirmem.semantic.names import words_of
from hirmem.semantic.passages import PassageIndex, mentions_of, passages_of
from hirmem.semantic.postings import PART_BYTES, Postings, varints
from hirmem.semantic.retrieve import Embedder
from semantic_backends import semantic_backend, semantic_server  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("semantic_backend")

PEOPLE = ["Ada Reyes", "Bo Nair", "Cy Lind", "Dee Moreau", "Eli Tanaka", "Fay", "Gus",
          "Tom O'Neil", "Jean-Luc Picard", "Oslo", "Acme Corp"]  # fmt: skip


def test_varints_decode_what_pack_ints_packs() -> None:
    rng = random.Random(3)
    for _ in range(200):
        vals = [rng.choice([0, 1, 127, 128, 16_383, 16_384, rng.randrange(1 << 55)])
                for _ in range(rng.randrange(0, 50))]  # fmt: skip
        assert varints(pack_ints(vals)).tolist() == vals
    for cut in (b"\x80", b"\x01\xff"):
        with pytest.raises(ValueError):
            varints(cut)


def _state(p: Postings) -> dict[int, dict[int, int]]:
    keys, ids, flags = p.everything()
    out: dict[int, dict[int, int]] = {}
    for k, i, f in zip(keys.tolist(), ids.tolist(), flags.tolist(), strict=True):
        assert i not in out.setdefault(k, {}), (k, i)
        out[k][i] = f
    return out


@pytest.mark.parametrize("flagged", [True, False])
def test_posting_lists_hold_what_a_dict_holds_over_random_adds_and_removes(
    flagged: bool,
) -> None:
    """Ids mostly growing (the usual write), some below the last (a rewrite of the part
    that holds their place), duplicates (ignored, the first flag kept), removals of held and
    unheld ids; some keys long enough for many parts. After every step the lists, read
    whole and by key sets, equal the dict's."""
    rng = random.Random(16 + flagged)
    owner = PassageIndex(Embedder())  # its connection: SQLite, or a PostgreSQL schema
    db = owner._db
    p = Postings(db, "t_lists", flagged=flagged)
    p.create()
    oracle: dict[int, dict[int, int]] = {}
    top = 1
    for step in range(1_500):
        db.execute("BEGIN IMMEDIATE")
        if rng.random() < 0.7:
            rows = []
            for _ in range(rng.randrange(1, 8)):
                key = rng.choice([1, 2, 3, rng.randrange(4, 40)])
                if rng.random() < 0.8:
                    top += rng.choice([1, 1, 2, 70, 300, 20_000])
                    rid = top
                else:
                    rid = rng.randrange(1, top + 1)
                rows.append((key, rid, rng.randrange(2)))
            p.add(rows)
            for key, rid, flag in rows:
                oracle.setdefault(key, {}).setdefault(rid, flag if flagged else 0)
        else:
            gone = []
            for _ in range(rng.randrange(1, 6)):
                key = rng.choice([*oracle, 99]) if oracle else 99
                held = list(oracle.get(key, {}))
                rid = rng.choice(held) if held and rng.random() < 0.8 else rng.randrange(1, top + 2)
                gone.append((key, rid))
            p.remove(gone)
            for key, rid in gone:
                oracle.get(key, {}).pop(rid, None)
        db.execute("COMMIT")
        oracle = {k: v for k, v in oracle.items() if v}
        if step % 50 == 0 or step > 1_450:
            assert _state(p) == oracle
            keys = rng.sample(range(1, 40), 3)
            want = sorted({i for k in keys for i in oracle.get(k, {})})
            assert p.ids(keys).tolist() == want
    # the long lists are in many parts, none over the bound
    parts = db.execute("SELECT key, last, length(ids) FROM t_lists").fetchall()
    assert max(n for _, _, n in parts) <= PART_BYTES
    assert sum(k == 1 for k, _, _ in parts) > 2
    assert all(last in oracle[k] for k, last, _ in parts)
    owner.close()


# ---- the tiers' id sets -------------------------------------------------------------------


def _text(rng: random.Random) -> str:
    a, b = rng.sample(PEOPLE, 2)
    return rng.choice([f"{a} works with {b}.", f"{a} lives in Oslo. {b} sails often.",
                       f"Yesterday {a} met {b} at Acme Corp (aka Acme).",
                       f"{a.split()[0]}: I went to Lima with {b}.", "nothing named here.",
                       f"Thanks, {a}! " + " ".join(f"{b} rows {i} km." for i in range(40))])


def test_passage_and_memory_naming_sets_equal_the_mentions_of_the_live_texts(
    tmp_path: Path,
) -> None:
    """Random documents added, replaced and removed in two containers: the passages naming
    any of a random set of names are those whose recomputed mentions hold one (a dict
    oracle); the listing of strong names per readable set, and tier 1's own lists, too."""
    rng = random.Random(7)
    e = Embedder()
    idx = PassageIndex(e, tmp_path / "p.db")
    mem = MemoryIndex(e, tmp_path / "m.db")
    live: dict[str, tuple[str, str, str]] = {}  # doc -> (text, container, subject)
    doc_of: dict[int, str] = {}  # passage -> its document
    names = sorted({fold(n) for p in PEOPLE for n in (p, p.split()[0])} | {"nobody", "acme"})
    for step in range(160):
        doc = f"d{rng.randrange(60)}"
        if doc in live and rng.random() < 0.3:
            idx.remove(doc)
            mem.remove(doc)
            del live[doc]
        else:
            text, where = _text(rng), rng.choice(["team", "club"])
            subject = rng.choice(["", "Maya", "Ada Reyes"])
            doc_of.update((pid, doc) for pid in idx.add(doc, text, where, subject=subject))
            mem.remove(doc)
            mem.write_many([Note(s.strip(), where, doc, subject) for s in text.split(".")
                            if len(s.split()) >= 4])  # fmt: skip
            live[doc] = (text, where, subject)
        if step % 8:
            continue
        held = [(int(pid), doc_of[int(pid)], str(t)) for pid, t in idx._db.execute(
            "SELECT id, text FROM passages").fetchall()]  # fmt: skip
        # each passage's mentions, from its text and its document's subject
        mentions = {int(pid): mentions_of(str(t), live[str(d)][2]) for pid, d, t in held}
        assert len(held) == sum(len(passages_of(t)) for t, _, _ in live.values())
        for _ in range(6):
            pick = rng.sample(names, rng.randrange(1, 4))
            want = sorted(pid for pid, m in mentions.items() if set(m) & set(pick))
            assert idx._named(pick).tolist() == want, pick
        for readable in ({"team"}, {"club"}, {"team", "club"}):
            docs = {d for d, (_, w, _) in live.items() if w in readable}
            strong = {n for pid, d, _ in held if str(d) in docs
                      for n, st in mentions[int(pid)].items() if st}  # fmt: skip
            assert sorted(idx.entities(readable)) == sorted(strong)
        rows = mem._db.execute("SELECT m.id, m.text, coalesce(n.name, '') FROM tier1_memories "
                               "m LEFT JOIN tier1_names n ON n.id = m.subject").fetchall()
        for _ in range(6):
            pick = sorted({words_of(n) for n in rng.sample(names, rng.randrange(1, 4))})
            want = sorted(int(i) for i, t, s in rows if _named(str(t), str(s)) & set(pick))
            assert mem._naming(pick).tolist() == want, pick
    idx.close()
    mem.close()


def test_two_writers_on_one_passage_store_keep_every_list_true(tmp_path: Path) -> None:
    """Two indexes on one store write in turn (two fleet nodes on one tenant): a list one
    of them appended to, the other extends or rewrites; a third opened afresh finds, for
    every name, exactly the passages whose text mentions it."""
    rng = random.Random(11)
    e = Embedder()
    path = tmp_path / "two.db"
    writers = [PassageIndex(e, path), PassageIndex(e, path)]
    live: dict[str, str] = {}
    for _ in range(80):
        w = writers[rng.randrange(2)]
        doc = f"d{rng.randrange(25)}"
        if doc in live and rng.random() < 0.3:
            w.remove(doc)
            del live[doc]
        else:
            live[doc] = _text(rng)
            w.add(doc, live[doc], "team")
    fresh = PassageIndex(e, path)
    held = fresh._db.execute("SELECT id, text FROM passages").fetchall()
    for name in sorted({fold(n) for p in PEOPLE for n in (p, p.split()[0])}):
        want = sorted(int(pid) for pid, t in held if name in mentions_of(str(t), ""))
        assert fresh._named([name]).tolist() == want, name
    for x in (*writers, fresh):
        x.close()


# ---- stores of the row layout -------------------------------------------------------------

_ROWS = {
    "passage_mention_lists": ("passage_mentions", "entity INTEGER NOT NULL, passage INTEGER "
                              "NOT NULL, strong INTEGER NOT NULL, PRIMARY KEY (entity, passage)"),
    "tier1_mention_lists": ("tier1_mentions", "entity INTEGER NOT NULL, memory INTEGER NOT "
                            "NULL, PRIMARY KEY (entity, memory)"),
}  # fmt: skip


def _as_rows(db: object, lists: str) -> int:
    """Put the store's mention lists back in the row layout they replace (as a store written
    before them holds it); the rows written."""
    table, columns = _ROWS[lists]
    keys, ids, flags = Postings(db, lists, flagged=lists.startswith("passage")).everything()  # type: ignore[arg-type]
    rows = list(zip(keys.tolist(), ids.tolist(), flags.tolist(), strict=True))
    db.execute("BEGIN")  # type: ignore[attr-defined]
    db.execute(f"CREATE TABLE {table} ({columns}) WITHOUT ROWID")  # type: ignore[attr-defined]
    marks = "?, ?, ?" if table == "passage_mentions" else "?, ?"
    db.executemany(f"INSERT INTO {table} VALUES ({marks})",  # type: ignore[attr-defined]
                   [r if table == "passage_mentions" else r[:2] for r in rows])
    db.execute(f"DROP TABLE {lists}")  # type: ignore[attr-defined]
    db.execute("COMMIT")  # type: ignore[attr-defined]
    return len(rows)


def test_stores_of_the_row_layout_are_converted_when_opened(tmp_path: Path) -> None:
    """A passage store and a memory store whose mentions are rows: opened, each converts
    them into lists once (the row tables dropped), and every scoped search, the listing of
    names and the naming sets answer as the store did before it was turned back."""
    from hirmem.semantic.substrate import Substrate

    rng = random.Random(2)
    path = tmp_path / "old.db"
    sub = Substrate.open(path, passage_embedder=Embedder())
    for i in range(40):
        text = _text(rng)
        sub.passages.add(f"d{i}", text, "team", subject=rng.choice(["", "Maya"]))
        sub.memories.write_many([Note(s.strip(), "team", f"d{i}") for s in text.split(".")
                                 if len(s.split()) >= 4])  # fmt: skip
    asks = [("Who sails often?", "ada reyes"), ("Where did they go?", "bo nair"),
            ("works with", "oslo"), ("rows km", "fay")]

    def answers(s: Substrate) -> list[object]:
        got: list[object] = []
        for q, name in asks:
            got.append([(h.id, round(h.score, 12)) for h in s.passages.search(
                q, 5, {"team"}, subject=name)])  # fmt: skip
            got.append([(h.id, round(h.score, 12)) for h in s.passages.search(
                q, 5, {"team"}, named=name)])  # fmt: skip
            got.append([(h.id, round(h.score, 12)) for h in s.memories.search(
                q, 5, {"team"}, names=[name])])  # fmt: skip
            got.append(s.memories._naming([words_of(name)]).tolist())
        got.append(sorted(s.passages.entities({"team"})))
        return got

    before = answers(sub)
    assert any(before[i] for i in range(0, len(before) - 1, 4))  # some scoped search finds
    sub.close()
    sub = Substrate.open(path, passage_embedder=Embedder())
    assert _as_rows(sub.passages._db, "passage_mention_lists") > 50
    assert _as_rows(sub.memories._db, "tier1_mention_lists") > 50
    sub.close()
    sub = Substrate.open(path, passage_embedder=Embedder())
    assert answers(sub) == before
    from hirmem.semantic.stores.db import has_table

    db = sub.passages._db
    assert not has_table(db, "passage_mentions") and not has_table(db, "tier1_mentions")
    assert has_table(db, "passage_mention_lists") and has_table(db, "tier1_mention_lists")
    # and written to as lists afterwards
    sub.passages.add("d99", "Ada Reyes sails with Gus.", "team")
    assert sub.passages._named(["gus"]).size and np.all(np.diff(sub.passages._named(["gus"])) > 0)
    sub.close()
