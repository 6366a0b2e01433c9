"""The stores (§4): every built-in driver behind the same interface, opened by name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hirmem.identity import triple_id
from hirmem.semantic.errors import NotBuilt, SemanticError, UnknownDriver
from hirmem.semantic.reason import (
    Reasoner,
    Rule,
    inverse,
    subclass,
    subproperty,
    symmetric,
    transitive,
)
from hirmem.semantic.stores import drivers, open_store
from hirmem.semantic.substrate import Substrate
from hirmem.semantic.values import Chunk, Claim, Doc


def _dsn(name: str, tmp_path: Path) -> str:
    return "memory:" if name == "memory" else f"sqlite:{tmp_path / 'stores.db'}"


def test_drivers_are_chosen_at_run_time_with_two_distinct_errors() -> None:
    for kind in ("vector", "graph", "triple", "doc"):
        assert drivers(kind) == ["memory", "sqlite"]
    with pytest.raises(NotBuilt, match="pyoxigraph"):
        open_store("triple", "oxigraph:/tmp/x")
    with pytest.raises(NotBuilt, match="usearch"):
        open_store("vector", "usearch:/tmp/x")
    with pytest.raises(NotBuilt, match="network service"):
        open_store("triple", "sparql://example/sparql")
    with pytest.raises(UnknownDriver, match="no vector driver named 'faiss2'"):
        open_store("vector", "faiss2:")
    with pytest.raises(UnknownDriver):
        open_store("blobs", "memory:")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["memory", "sqlite"])
def test_triple_store_matches_folded_terms_and_deletes(name: str, tmp_path: Path) -> None:
    ts = open_store("triple", _dsn(name, tmp_path))
    assert ts.assert_triple("Alice", "knows", "Bob") == "f7e43c882ab02b80"
    ts.assert_triple(" ALICE ", "KNOWS", "bob")  # the same triple, folded
    n = ts.assert_many([("Alice", "works_at", "Acme Corp"), ("Bob", "knows", "Carol"),
                        ("Carol", "knows", "Alice")])  # fmt: skip
    assert n == 3 and len(ts) == 4
    assert ts.match("alice", None, None) == [("Alice", "knows", "Bob"),
                                             ("Alice", "works_at", "Acme Corp")]  # fmt: skip
    assert sorted(ts.match(None, "Knows", None)) == [("Alice", "knows", "Bob"),
                                                     ("Bob", "knows", "Carol"),
                                                     ("Carol", "knows", "Alice")]  # fmt: skip
    assert ts.match(None, None, "acme  corp") == [("Alice", "works_at", "Acme Corp")]
    assert ts.match("bob", "knows", "carol") == [("Bob", "knows", "Carol")]
    assert ts.match("nobody", None, None) == []
    assert len(ts.match()) == 4
    assert ts.delete("ALICE", "knows", "BOB") and not ts.delete("Alice", "knows", "Bob")
    assert ts.match("alice", "knows", None) == [] and len(ts) == 3


@pytest.mark.parametrize("name", ["memory", "sqlite"])
def test_vector_store_near_with_and_without_a_filter(name: str, tmp_path: Path) -> None:
    vs = open_store("vector", _dsn(name, tmp_path))
    rng = np.random.default_rng(7)
    mat = rng.standard_normal((300, 16)).astype(np.float32)
    for i, v in enumerate(mat):
        vs.put(f"v{i}", v, {"subject": f"s{i % 3}", "tags": ["even" if i % 2 == 0 else "odd"]})
    q = mat[42] + 0.01
    unit = mat / np.linalg.norm(mat, axis=1, keepdims=True)
    sims = unit @ (q / np.linalg.norm(q))
    want = [f"v{i}" for i in np.argsort(-sims)[:5]]
    got = vs.near(q, 5)
    assert [m.id for m in got] == want
    assert got[0].score == pytest.approx(float(sims.max()), abs=1e-5)
    scoped = vs.near(q, 5, {"subject": "s1"})
    rows = [i for i in range(300) if i % 3 == 1]
    assert [m.id for m in scoped] == [f"v{rows[j]}" for j in np.argsort(-sims[rows])[:5]]
    assert all(m.meta["subject"] == "s1" for m in scoped)
    both = vs.near(q, 50, {"subject": "s1", "tags": "even"})
    assert both and all(int(m.id[1:]) % 6 == 4 for m in both)
    assert vs.near(q, 5, {"subject": "nobody"}) == []
    # overwrite moves an entry between scopes; delete removes it
    vs.put("v42", mat[42], {"subject": "s9"})
    assert [m.id for m in vs.near(q, 5, {"subject": "s9"})] == ["v42"]
    assert vs.delete("v42") and not vs.delete("v42")
    assert "v42" not in [m.id for m in vs.near(q, 300)] and len(vs) == 299
    with pytest.raises(SemanticError, match="dimension"):
        vs.put("bad", [1.0, 2.0], {})


@pytest.mark.parametrize("name", ["memory", "sqlite"])
def test_graph_and_document_stores(name: str, tmp_path: Path) -> None:
    g = open_store("graph", _dsn(name, tmp_path))
    g.node("a", {"kind": "doc"})
    g.edge("a", "b", "has_chunk")
    g.edge("a", "c", "has_chunk")
    g.edge("a", "d", "cites")
    assert g.out("a") == ["b", "c", "d"] and g.out("a", "cites") == ["d"]
    assert g.props("a") == {"kind": "doc"} and g.props("b") == {}
    assert g.delete("c") and g.out("a") == ["b", "d"] and g.props("zz") is None
    ds = open_store("doc", _dsn(name, tmp_path))
    doc = Doc("d1", "mem://x", "Hello. World.", {"origin": {"ref": "mem://x"}})
    chunks = [Chunk("d1", 0, "Hello. ", 0, 7), Chunk("d1", 1, "World.", 7, 13)]
    ds.put(doc, chunks)
    assert ds.get("d1") == doc and ds.chunks("d1") == chunks and ds.chunk("d1#1") == chunks[1]
    assert ds.chunk("d1#9") is None and ds.chunk("nope") is None and len(ds) == 1
    assert ds.delete("d1") and ds.get("d1") is None and ds.chunks("d1") == []


def test_a_sqlite_substrate_survives_a_reopen(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    sub = Substrate.open(db)
    edge = sub.claim(Claim("Alice", "lives_in", "Berlin", supplied_by="op"))
    sub.close()
    again = Substrate.open(db)
    assert again.ledger.get(edge.id) == edge
    assert again.triples.match("alice", None, None) == [("Alice", "lives_in", "Berlin")]
    assert again.prov.entities[f"claim:{edge.id}:op"].attributed_to == "person:op"
    again.close()


# ---- forward chaining ---------------------------------------------------------------------------


def test_forward_chaining_to_a_fixpoint_names_rules_and_antecedents() -> None:
    sub = Substrate.in_memory()
    for s, p, o in [("a", "part_of", "b"), ("b", "part_of", "c"), ("c", "part_of", "d"),
                    ("ann", "married_to", "bo"), ("ann", "parent_of", "cy"),
                    ("rex", "is_a", "dog"), ("dog", "subclass_of", "mammal"),
                    ("mammal", "subclass_of", "animal"), ("ann", "mother_of", "cy"),
                    ("mother_of", "subproperty_of", "parent_of"),
                    ("cy", "lives_in", "oslo"), ("oslo", "located_in", "norway")]:  # fmt: skip
        sub.claim(Claim(s, p, o, supplied_by="kb"))
    horn = Rule("lives_in_country", (("?x", "lives_in", "?c"), ("?c", "located_in", "?n")),
                ("?x", "lives_in", "?n"))  # fmt: skip
    rules = [transitive("part_of"), symmetric("married_to"), inverse("parent_of", "child_of"),
             subclass(), subproperty(), horn]  # fmt: skip
    derived = {(e.subject, e.predicate, e.object): e for e in sub.reason(Reasoner(rules))}
    assert set(derived) == {
        ("a", "part_of", "c"), ("b", "part_of", "d"), ("a", "part_of", "d"),
        ("bo", "married_to", "ann"), ("cy", "child_of", "ann"),
        ("rex", "is_a", "mammal"), ("rex", "is_a", "animal"),
        ("cy", "lives_in", "norway"),
    }  # fmt: skip
    far = derived[("a", "part_of", "d")].sources[0]
    assert far.ref == "transitive(part_of)" and len(far.antecedents) == 2
    for e in derived.values():
        src = e.sources[0]
        assert src.kind == "derived" and src.antecedents
        assert all(sub.ledger.get(a) is not None for a in src.antecedents)
        lineage = {x.id for x in sub.lineage(e.id)}
        assert all(f"assertion:{a}" in lineage for a in src.antecedents)
    assert derived[("cy", "lives_in", "norway")].sources[0].antecedents == (
        triple_id("cy", "lives_in", "oslo"), triple_id("oslo", "located_in", "norway"))
    # nothing new on a second run: a fixpoint
    assert sub.reason(Reasoner(rules)) == []
    # the depth bound stops a long chain early
    chain = Substrate.in_memory()
    for i in range(10):
        chain.claim(Claim(f"n{i}", "before", f"n{i + 1}", supplied_by="kb"))
    shallow = chain.reason(Reasoner([transitive("before")], max_depth=1))
    assert len(shallow) == 9  # only the two-step facts
    with pytest.raises(ValueError, match="unbound"):
        Rule("bad", (("?x", "p", "?y"),), ("?x", "q", "?z"))
