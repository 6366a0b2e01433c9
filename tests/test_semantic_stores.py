"""The stores (§4): every built-in driver behind the same interface, opened by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prov.model import ProvDocument

from hirmem.protocol.identity import triple_id
from hirmem.semantic.decisions import DenyChoices
from hirmem.semantic.errors import NotBuilt, SemanticError, StoreError, UnknownDriver
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
from semantic_backends import semantic_backend, semantic_server  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("semantic_backend")

ALL = ["memory", "file", "sqlite"]
TRIPLE_DRIVERS = [*ALL, "oxigraph", "oxigraph-disk"]
VECTOR_DRIVERS = [*ALL, "usearch", "usearch-disk"]


def _dsn(name: str, tmp_path: Path, kind: str = "store") -> str:
    """The DSN of driver ``name``; the same ``tmp_path`` and ``kind`` give the same store."""
    return {
        "memory": "memory:",
        "file": f"file:{tmp_path / kind}.jsonl",
        "sqlite": f"sqlite:{tmp_path / 'stores.db'}",
        "oxigraph": "oxigraph:",
        "oxigraph-disk": f"oxigraph:{tmp_path / kind}.oxigraph",
        "usearch": "usearch:",
        "usearch-disk": f"usearch:{tmp_path / kind}.usearch",
    }[name]


def _reopen(kind: str, name: str, tmp_path: Path, store: Any) -> Any:
    close = getattr(store, "close", None)
    if close is not None:
        close()
    del store
    return open_store(kind, _dsn(name, tmp_path, kind))  # type: ignore[arg-type]


def test_drivers_are_chosen_at_run_time_with_two_distinct_errors() -> None:
    assert drivers("triple") == ["file", "memory", "oxigraph", "sqlite"]
    assert drivers("vector") == ["file", "memory", "sqlite", "usearch"]
    for kind in ("graph", "doc"):
        assert drivers(kind) == ["file", "memory", "sqlite"]
    with pytest.raises(NotBuilt, match="qdrant"):
        open_store("vector", "qdrant://localhost:6333")
    with pytest.raises(NotBuilt, match="neo4j"):
        open_store("graph", "neo4j://localhost")
    with pytest.raises(SemanticError, match="needs a path"):
        open_store("triple", "file:")
    with pytest.raises(NotBuilt, match="network service"):
        open_store("triple", "sparql://example/sparql")
    with pytest.raises(UnknownDriver, match="no vector driver named 'faiss2'"):
        open_store("vector", "faiss2:")
    with pytest.raises(UnknownDriver):
        open_store("blobs", "memory:")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", TRIPLE_DRIVERS)
def test_triple_store_matches_folded_terms_and_deletes(name: str, tmp_path: Path) -> None:
    ts = open_store("triple", _dsn(name, tmp_path, "triple"))
    assert ts.assert_triple("Alice", "knows", "Bob") == "f7e43c882ab02b80"
    ts.assert_triple(" ALICE ", "KNOWS", "bob")  # the same triple, folded
    n = ts.assert_many([("Alice", "works_at", "Acme Corp"), ("Bob", "knows", "Carol"),
                        ("Carol", "knows", "Alice")])  # fmt: skip
    assert n == 3 and len(ts) == 4
    assert sorted(ts.match("alice", None, None)) == [
        ("Alice", "knows", "Bob"), ("Alice", "works_at", "Acme Corp")]  # fmt: skip
    assert sorted(ts.match(None, "Knows", None)) == [("Alice", "knows", "Bob"),
                                                     ("Bob", "knows", "Carol"),
                                                     ("Carol", "knows", "Alice")]  # fmt: skip
    assert ts.match(None, None, "acme  corp") == [("Alice", "works_at", "Acme Corp")]
    assert ts.match("bob", "knows", "carol") == [("Bob", "knows", "Carol")]
    assert ts.match("nobody", None, None) == []
    assert len(ts.match()) == 4
    assert ts.delete("ALICE", "knows", "BOB") and not ts.delete("Alice", "knows", "Bob")
    assert ts.match("alice", "knows", None) == [] and len(ts) == 3
    # a spelling is the one the triple was first asserted with, per triple
    ts.assert_triple("ALICE", "Likes", "Jazz Music")
    assert ts.match(None, "likes", None) == [("ALICE", "Likes", "Jazz Music")]
    assert ts.match("alice", "works_at", None) == [("Alice", "works_at", "Acme Corp")]
    assert ts.assert_many([("x", "y", "z"), ("X", "Y", "Z"), ("alice", "likes", "jazz music")]) == 1
    if name not in ("memory", "oxigraph"):  # the persistent ones: reopen, same state
        ts = _reopen("triple", name, tmp_path, ts)
    assert len(ts) == 5 and ts.match("x") == [("x", "y", "z")]
    assert sorted(ts.match(None, None, None)) == [
        ("ALICE", "Likes", "Jazz Music"), ("Alice", "works_at", "Acme Corp"),
        ("Bob", "knows", "Carol"), ("Carol", "knows", "Alice"), ("x", "y", "z")]  # fmt: skip
    assert ts.match("alice", "knows", "bob") == []  # the delete held across the reopen


@pytest.mark.parametrize("name", VECTOR_DRIVERS)
def test_vector_store_near_with_and_without_a_filter(name: str, tmp_path: Path) -> None:
    vs = open_store("vector", _dsn(name, tmp_path, "vector"))
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
    if name not in ("memory", "usearch"):
        vs = _reopen("vector", name, tmp_path, vs)
    assert len(vs) == 299 and "v42" not in [m.id for m in vs.near(q, 300)]
    again = vs.near(q, 5, {"subject": "s1"})
    assert [m.id for m in again] == [m.id for m in scoped]
    assert [m.meta for m in again] == [m.meta for m in scoped]
    assert [m.id for m in vs.near(q, 5)] == [f"v{i}" for i in np.argsort(-sims)[:6] if i != 42]


@pytest.mark.parametrize("name", ALL)
def test_graph_and_document_stores(name: str, tmp_path: Path) -> None:
    g = open_store("graph", _dsn(name, tmp_path, "graph"))
    g.node("a", {"kind": "doc"})
    g.edge("a", "b", "has_chunk")
    g.edge("a", "c", "has_chunk")
    g.edge("a", "d", "cites")
    assert g.out("a") == ["b", "c", "d"] and g.out("a", "cites") == ["d"]
    assert g.props("a") == {"kind": "doc"} and g.props("b") == {}
    assert g.delete("c") and g.out("a") == ["b", "d"] and g.props("zz") is None
    g.node("a", {"size": 3})
    if name != "memory":
        g = _reopen("graph", name, tmp_path, g)
    assert g.out("a") == ["b", "d"] and g.props("a") == {"kind": "doc", "size": 3}
    assert g.props("c") is None
    ds = open_store("doc", _dsn(name, tmp_path, "doc"))
    doc = Doc("d1", "mem://x", "Hello. World.", {"origin": {"ref": "mem://x"}})
    chunks = [Chunk("d1", 0, "Hello. ", 0, 7), Chunk("d1", 1, "World.", 7, 13)]
    ds.put(doc, chunks)
    assert ds.get("d1") == doc and ds.chunks("d1") == chunks and ds.chunk("d1#1") == chunks[1]
    assert ds.chunk("d1#9") is None and ds.chunk("nope") is None and len(ds) == 1
    ds.put(Doc("d2", "mem://y", "Bye.", {}), [Chunk("d2", 0, "Bye.", 0, 4)])
    assert ds.delete("d1") and ds.get("d1") is None and ds.chunks("d1") == []
    if name != "memory":
        ds = _reopen("doc", name, tmp_path, ds)
    assert ds.get("d1") is None and len(ds) == 1 and ds.chunk("d2#0") == Chunk("d2", 0, "Bye.",
                                                                               0, 4)


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


# ---- the engines: SPARQL over oxigraph, exact filtered top-k over usearch, the file journal -----


def test_oxigraph_assertions_answer_a_real_sparql_select(tmp_path: Path) -> None:
    ts = open_store("triple", f"oxigraph:{tmp_path / 'kb.oxigraph'}")
    ts.assert_many([("Alice", "knows", "Bob"), ("Bob", "knows", "Carol"),
                    ("Carol", "knows", "Dave"), ("Alice", "works_at", "Acme Corp"),
                    ("Bob", "works_at", "Acme Corp"),
                    ("Carol", "works_at", "Initech")])  # fmt: skip
    rows = ts.sparql("""
        SELECT ?a ?c WHERE { ?a t:knows ?b . ?b t:knows ?c . ?a t:works_at t:acme%20corp }
        ORDER BY ?a""")
    assert rows == [{"a": "alice", "c": "carol"}, {"a": "bob", "c": "dave"}]
    count = ts.sparql("SELECT ?org (COUNT(?who) AS ?n) WHERE { ?who t:works_at ?org } "
                      "GROUP BY ?org ORDER BY DESC(?n)")  # fmt: skip
    assert count == [{"org": "acme corp", "n": "2"}, {"org": "initech", "n": "1"}]
    assert ts.sparql("ASK { t:alice t:knows t:bob }") is True
    # the default graph is exactly what was asserted: a retraction from the store shows
    ts.delete("alice", "knows", "bob")
    assert ts.sparql("ASK { t:alice t:knows t:bob }") is False
    assert ts.sparql("SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }") == [{"n": "5"}]
    # each assertion is addressable by its §2.3 id in the spelling graph
    tid = triple_id("Carol", "works_at", "Initech")
    spelled = ts.sparql(f"SELECT ?v WHERE {{ GRAPH <urn:hirmem:spelling> {{ a:{tid} ?p ?v }} }}")
    assert spelled == [{"v": "Carol\x00works_at\x00Initech"}]
    ts.close()
    again = open_store("triple", f"oxigraph:{tmp_path / 'kb.oxigraph'}")
    assert again.sparql("SELECT ?x WHERE { ?x t:knows t:dave }") == [{"x": "carol"}]


def test_usearch_filtered_top_k_is_exact_against_brute_force() -> None:
    rng = np.random.default_rng(526)
    n, dim = 6000, 32
    mat = rng.standard_normal((n, dim)).astype(np.float32)
    unit = mat / np.linalg.norm(mat, axis=1, keepdims=True)
    subject, group = np.arange(n) % 50, rng.integers(0, 4, n)
    vs = open_store("vector", "usearch:")
    vs.put_many((f"v{i}", mat[i], {"subject": f"s{subject[i]}", "group": int(group[i])})
                for i in range(n))  # fmt: skip
    for trial in range(40):
        q = rng.standard_normal(dim).astype(np.float32)
        qu = q / np.linalg.norm(q)
        flt: dict[str, object] = {"subject": f"s{trial % 50}"}
        if trial % 2:
            flt["group"] = trial % 4
        rows = np.flatnonzero((subject == trial % 50) & ((group == trial % 4) | (trial % 2 == 0)))
        sims = unit[rows] @ qu
        want = [f"v{rows[j]}" for j in np.argsort(-sims, kind="stable")[:10]]
        got = vs.near(q, 10, flt)
        assert [m.id for m in got] == want
        assert [m.score for m in got] == pytest.approx(sorted(sims, reverse=True)[:10], abs=1e-5)
    # unfiltered is the HNSW graph: approximate, but at this size it finds nearly everything
    hits = 0
    for _ in range(20):
        q = rng.standard_normal(dim).astype(np.float32)
        want_set = set(np.argsort(-(unit @ (q / np.linalg.norm(q))))[:10].tolist())
        hits += len(want_set & {int(m.id[1:]) for m in vs.near(q, 10)})
    assert hits / 200 >= 0.9


def test_a_file_store_is_an_fsynced_journal_that_erases_on_delete(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    ts = open_store("triple", f"file:{path}")
    ts.assert_many([("Alice", "knows", "Bob"), ("Mallory", "said", "secret plan")])
    ts.assert_triple("Bob", "knows", "Carol")
    assert path.read_text().count("\n") == 3
    assert ts.delete("mallory", "said", "secret plan")
    assert b"secret plan" not in path.read_bytes()  # erased from the file, not tombstoned
    ts.close()
    with open(path, "ab") as f:
        f.write(b'["Carol","knows","Da')  # a crash inside a write
    again = open_store("triple", f"file:{path}")
    assert sorted(again.match()) == [("Alice", "knows", "Bob"), ("Bob", "knows", "Carol")]
    again.assert_triple("Carol", "knows", "Dave")
    again.close()
    assert len(open_store("triple", f"file:{path}")) == 3
    (tmp_path / "bad.jsonl").write_text("not json\n")
    with pytest.raises(SemanticError, match="not a store journal"):
        open_store("triple", f"file:{tmp_path / 'bad.jsonl'}")


# ---- decisions (§6), durable and in PROV ----------------------------------------------------


def test_decisions_and_refusals_survive_a_reopen_and_chain_through_prov(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    sub = Substrate.open(db)
    bob = sub.claim(Claim("Bob", "lives_in", "Paris", supplied_by="op"))
    deny = DenyChoices("no-erase", {"erase"}, "erasure needs a legal request")
    decider = sub.decider([deny])
    ok = decider.decide("agent:planner", "visit Paris", [bob.id])
    refused = decider.decide("agent:planner", "erase", [ok.id, bob.id])  # recorded, not raised
    with pytest.raises(SemanticError, match="nobody minted"):
        decider.decide("agent:planner", "go", ["0000000000000000"])
    sub.close()

    again = Substrate.open(db)
    assert again.decisions.by("agent:planner") == [ok, refused]
    got = again.decisions.get(refused.id)
    assert got is not None and not got.allowed
    assert (got.rule, got.reason) == ("no-erase", "erasure needs a legal request")
    # the walk is over PROV: decision -> wasDerivedFrom -> decision / assertion
    ent = again.prov.entities[f"decision:{refused.id}"]
    assert ent.derived_from == (f"decision:{ok.id}", f"assertion:{bob.id}")
    assert dict(ent.attrs)["allowed"] == "false" and dict(ent.attrs)["rule"] == "no-erase"
    act = again.prov.activities[ent.generated_by[0]]
    assert act.kind == "refuse:no-erase" and act.agent == "agent:planner"
    assert act.used == ent.derived_from
    assert [d.id for d in again.cause(refused.id)] == [refused.id, ok.id]
    lineage = {e.id for e in again.prov.lineage(f"decision:{refused.id}")}
    assert f"claim:{bob.id}:op" in lineage  # down to who supplied the evidence
    # and it exports as PROV like everything else
    doc = ProvDocument.deserialize(content=again.prov.to_provjson([f"decision:{refused.id}"]),
                                   format="json")  # fmt: skip
    assert any("decision" in str(r.identifier) for r in doc.get_records() if r.identifier)
    # a later decision after the reopen rests on the earlier ones
    later = again.decider([deny]).decide("agent:auditor", "report", [refused.id])
    assert [d.id for d in again.cause(later.id)] == [later.id, refused.id, ok.id]
    again.close()
    third = Substrate.open(db)
    assert len(third.decisions) == 3 and third.cause(later.id)[-1] == ok
    third.close()


# ---- issue 16: one filter rule for every driver, blank terms, U+0000, neighbours once --------

FILTER_POOL: list[Any] = [True, False, 0, 1, 1.0, -0.0, 2, 2.5, -1, 2**53 + 1, float(2**53), "1",
                          "a", "b", "ab", "", None, float("nan"), {"x": 1}]  # fmt: skip


def _term_equal(have: Any, want: Any) -> bool:
    """The oracle of equality, written apart from the drivers: JSON's rule."""
    if isinstance(have, bool) or isinstance(want, bool):
        return isinstance(have, bool) and isinstance(want, bool) and have == want
    if isinstance(have, int | float) and isinstance(want, int | float):
        return bool(have == want)  # Python compares int with float exactly; NaN equals nothing
    if isinstance(have, str) and isinstance(want, str):
        return have == want
    return have is None and want is None


def _in_range(have: Any, cond: dict[str, Any]) -> bool:
    bounds = list(cond.values())
    if isinstance(bounds[0], str):
        if not isinstance(have, str):
            return False
    elif isinstance(have, bool) or not isinstance(have, int | float) or have != have:
        return False
    ops = {"gt": lambda a, b: a > b, "ge": lambda a, b: a >= b, "lt": lambda a, b: a < b,
           "le": lambda a, b: a <= b}  # fmt: skip
    return all(ops[op](have, bound) for op, bound in cond.items())


def _oracle(meta: dict[str, Any], flt: dict[str, Any]) -> bool:
    for key, cond in flt.items():
        if key not in meta:
            return False
        held = meta[key]
        values = held if isinstance(held, list) else [held]
        if isinstance(cond, dict) and "in" in cond:
            ok = any(_term_equal(v, w) for v in values for w in cond["in"])
        elif isinstance(cond, dict):
            ok = any(_in_range(v, cond) for v in values)
        else:
            ok = any(_term_equal(v, cond) for v in values)
        if not ok:
            return False
    return True


def _random_filter(rng: np.random.Generator) -> dict[str, Any]:
    scalars = [v for v in FILTER_POOL if not isinstance(v, dict) and v == v]
    flt: dict[str, Any] = {}
    for key in rng.choice(["k", "j"], size=int(rng.integers(1, 3)), replace=False):
        shape = int(rng.integers(0, 3))
        if shape == 0:
            flt[str(key)] = scalars[int(rng.integers(len(scalars)))]
        elif shape == 1:
            flt[str(key)] = {"in": [scalars[int(i)] for i in rng.integers(len(scalars), size=3)]}
        else:
            kind = [-1, 0, 1, 2, 2.5, 2**53] if rng.random() < 0.6 else ["", "a", "ab", "b"]
            lo, hi = sorted(rng.choice(len(kind), size=2))
            flt[str(key)] = {str(rng.choice(["gt", "ge"])): kind[int(lo)],
                             str(rng.choice(["lt", "le"])): kind[int(hi)]}  # fmt: skip
    return flt


@pytest.mark.parametrize("name", VECTOR_DRIVERS)
def test_filter_equality_and_operators_mean_one_thing_in_every_driver(
    name: str, tmp_path: Path
) -> None:
    vs = open_store("vector", _dsn(name, tmp_path, "vector"))
    # the same hand-made cases for every driver: True, 1 and 1.0 are not all one value
    cases = {"t": True, "i": 1, "f": 1.0, "s": "1", "n": None, "big": 2**53 + 1,
             "bigf": float(2**53), "l": [2, True, "x"]}  # fmt: skip
    for i, (id, v) in enumerate(cases.items()):
        vs.put(id, [1.0, float(i + 1)], {"k": v})

    def ids(flt: dict[str, Any]) -> set[str]:
        return {m.id for m in vs.near([1.0, 0.0], 100, flt)}

    assert ids({"k": True}) == {"t", "l"}
    assert ids({"k": 1}) == ids({"k": 1.0}) == {"i", "f"}
    assert ids({"k": "1"}) == {"s"} and ids({"k": None}) == {"n"}
    assert ids({"k": 2**53 + 1}) == {"big"} and ids({"k": float(2**53)}) == {"bigf"}
    assert ids({"k": {"in": [True, "1", 2]}}) == {"t", "s", "l"}
    assert ids({"k": {"ge": 1, "lt": 2}}) == {"i", "f"}  # a range never admits True
    assert ids({"k": {"gt": 1}}) == {"big", "bigf", "l"}
    assert ids({"k": {"ge": "0", "le": "1"}}) == {"s"}
    # what a filter cannot mean is refused, with the key and the way to say it
    for bad, why in (({"k": [1, 2]}, "'in'"), ({"k": {"x": 1}}, "not known"),
                     ({"k": float("nan")}, "NaN"), ({"k": {"gt": 1, "lt": "z"}}, "all numbers"),
                     ({"k": {"in": 3}}, "list"), ({"k": {"a": 1}}, "operators")):  # fmt: skip
        with pytest.raises(StoreError, match=why):
            vs.near([1.0, 0.0], 5, bad)
    # a differential run against the oracle above, over random metadata and filters
    rng = np.random.default_rng(16)
    held: dict[str, dict[str, Any]] = {}
    for i in range(400):
        meta: dict[str, Any] = {}
        for key in ("k", "j"):
            r = rng.random()
            if r < 0.7:
                meta[key] = FILTER_POOL[int(rng.integers(len(FILTER_POOL)))]
            elif r < 0.85:
                meta[key] = [FILTER_POOL[int(j)] for j in rng.integers(len(FILTER_POOL) - 1,
                                                                       size=2)]  # fmt: skip
        held[f"r{i}"] = meta
        vs.put(f"r{i}", rng.standard_normal(2) + 3.0, meta)
    if name not in ("memory", "usearch"):  # what a reopened store answers is the same
        vs = _reopen("vector", name, tmp_path, vs)
    for _ in range(300):
        flt = _random_filter(rng)
        want = {i for i, m in held.items() if _oracle(m, flt)}
        got = {m.id for m in vs.near([1.0, 1.0], 1000, flt)} - set(cases)
        assert got == want, flt


@pytest.mark.sqlite_only("PostgreSQL's text holds no NUL character: the store refuses the "
                         "row with PostgreSQL's error")
@pytest.mark.parametrize("name", TRIPLE_DRIVERS)
def test_triple_terms_may_hold_nul_and_may_not_be_blank(name: str, tmp_path: Path) -> None:
    ts = open_store("triple", _dsn(name, tmp_path, "triple"))
    ts.assert_triple("Alice\x00Smith", "knows", "Bob")
    ts.assert_many([("a", "b\x00", "\x00"), ("Carol", "knows", "Dan")])
    assert sorted(ts.match()) == [("Alice\x00Smith", "knows", "Bob"), ("Carol", "knows", "Dan"),
                                  ("a", "b\x00", "\x00")]  # fmt: skip
    assert ts.match("alice\x00smith") == [("Alice\x00Smith", "knows", "Bob")]
    assert ts.match(None, None, "\x00") == [("a", "b\x00", "\x00")]
    for blank in ("", "  ", "\t\u3000"):
        with pytest.raises(StoreError, match="blank"):
            ts.assert_triple(blank, "knows", "Bob")
        with pytest.raises(StoreError, match="blank"):
            ts.assert_many([("Eve", "knows", "Bob"), ("Eve", blank, "Bob")])
        with pytest.raises(StoreError, match="blank"):
            ts.match(None, blank, None)
    assert len(ts) == 3 and ts.match("eve") == []  # a refused batch wrote nothing
    if name not in ("memory", "oxigraph"):
        ts = _reopen("triple", name, tmp_path, ts)
        assert len(ts) == 3 and ts.match("a") == [("a", "b\x00", "\x00")]


@pytest.mark.parametrize("name", ALL)
def test_graph_out_lists_each_neighbour_once(name: str, tmp_path: Path) -> None:
    g = open_store("graph", _dsn(name, tmp_path, "graph"))
    g.edge("a", "b", "cites")
    g.edge("a", "c", "cites")
    g.edge("a", "b", "has_chunk")
    g.edge("a", "b", "cites")
    assert g.out("a") == ["b", "c"]
    assert g.out("a", "has_chunk") == ["b"] and g.out("a", "cites") == ["b", "c"]
    if name != "memory":
        g = _reopen("graph", name, tmp_path, g)
        assert g.out("a") == ["b", "c"]


@pytest.mark.parametrize("where", ["memory", "sqlite"])
def test_an_erased_assertion_stays_erased_until_its_tombstone_is_lifted(
    where: str, tmp_path: Path
) -> None:
    from hirmem.semantic.errors import Erased
    from hirmem.semantic.extract import RuleExtractor
    from hirmem.semantic.ingest import MemoryIngester
    from hirmem.semantic.stages import Pipeline

    db = tmp_path / "s.db"
    sub = Substrate.in_memory() if where == "memory" else Substrate.open(db)
    text = "Alice knows Bob. Eve lives in Oslo."
    pipe = Pipeline(MemoryIngester({"a": text}), extractor=RuleExtractor())
    sub.ingest(pipe, "mem://a")
    eve = triple_id("Eve", "lives_in", "Oslo")
    knows = triple_id("Alice", "knows", "Bob")
    stone = sub.erase(eve, "legal deletion request #7")
    # the source read again, a caller, a rule: none brings it back, and none is silent
    again = sub.ingest(pipe, "mem://a")
    assert [t.id for t in again.triples] == [knows]
    assert [r.reason.split(" (")[0] for r in again.rejected] == [f"erased at {stone.erased_at}"]
    assert sub.ledger.get(eve) is None and sub.ledger.tombstone(eve) == stone
    assert sub.triples.match("eve") == [] and sub.vectors.near([1.0] * 1024, 9,
                                                               {"triple": eve}) == []
    with pytest.raises(Erased, match="lift the tombstone"):
        sub.claim(Claim("Eve", "lives_in", "Oslo", supplied_by="op"))
    refused = [d for d in sub.decisions.by("software:extract/rules-1") if not d.allowed]
    assert len(refused) == 1 and "legal deletion request #7" in refused[0].reason
    assert refused[0].rule == "tombstone"
    sub.erase(knows, "wrong")
    sub.claim(Claim("Bob", "knows", "Alice", supplied_by="op"))
    assert sub.reason(Reasoner([symmetric("knows")])) == []  # (Alice knows Bob) stays erased
    assert any(d.rule.startswith("tombstone:") for d in sub.decisions.by("software:reasoner"))
    # lifting is explicit, needs a reason, and is kept
    with pytest.raises(SemanticError, match="needs a reason"):
        sub.lift(eve, " ", by="alice")
    lift = sub.lift(eve, "the request was withdrawn", by="alice")
    assert lift.stone == stone and sub.ledger.tombstone(eve) is None
    assert [t.id for t in sub.ingest(pipe, "mem://a").triples] == [eve]
    assert sub.ledger.get(eve) is not None and sub.triples.match("eve")
    assert [d.choice for d in sub.decisions.by("person:alice")] == [f"lift tombstone {eve}"]
    if where == "sqlite":
        sub.close()
        sub = Substrate.open(db)
    assert sub.ledger.lifted() == [lift] and sub.ledger.tombstone(eve) is None
    assert sub.ledger.get(eve) is not None and sub.ledger.tombstone(knows) is not None
    with pytest.raises(SemanticError, match="no tombstone"):
        sub.ledger.lift(eve, "again")


@pytest.mark.sqlite_only("it writes an old layout into the SQLite file itself")
def test_a_sqlite_vector_file_from_before_the_filter_rule_is_reindexed(tmp_path: Path) -> None:
    """A file whose filter index holds bare values (``1``, ``"a"``: the old layout, where 1
    and 1.0 differed) is rebuilt from the metadata when opened."""
    import sqlite3

    db = tmp_path / "v.db"
    vs = open_store("vector", f"sqlite:{db}")
    vs.put("i", [1.0, 0.0], {"k": 1, "tags": ["a", True]})
    vs.put("f", [0.0, 1.0], {"k": 1.0})
    vs.close()
    con = sqlite3.connect(db)
    con.execute("DROP TABLE vector_posts")  # the layout of then: key and value in every row
    con.execute("CREATE TABLE vector_meta (id TEXT NOT NULL, key TEXT NOT NULL, "
                "value TEXT NOT NULL, PRIMARY KEY (key, value, id)) WITHOUT ROWID")
    con.executemany("INSERT INTO vector_meta VALUES (?, ?, ?)",
                    [("i", "k", "1"), ("i", "tags", '"a"'), ("i", "tags", "true"),
                     ("f", "k", "1.0")])  # fmt: skip
    con.commit()
    con.close()
    vs = open_store("vector", f"sqlite:{db}")
    assert {m.id for m in vs.near([1.0, 1.0], 5, {"k": 1})} == {"i", "f"}
    assert [m.id for m in vs.near([1.0, 1.0], 5, {"tags": True})] == ["i"]
    assert [m.id for m in vs.near([1.0, 1.0], 5, {"tags": {"in": ["a", "z"]}})] == ["i"]


def test_sqlite_filtered_rows_follow_every_write() -> None:
    """The rows a filter (and each of its conditions) admits are kept between queries;
    every write must drop them: a fenced query after a put or a delete sees it."""
    from hirmem.semantic.stores.sqlite import SQLiteVectors

    store = SQLiteVectors()
    flt = {"container": {"in": ["x"]}, "subject": "s"}
    store.put("a", [1.0, 0.0], {"container": "x", "subject": "s"})
    store.put("b", [1.0, 0.1], {"container": "x", "subject": "t"})
    assert [m.id for m in store.near([1.0, 0.0], 10, flt)] == ["a"]
    assert [m.id for m in store.near([1.0, 0.0], 10, {"subject": "t"})] == ["b"]
    store.put("c", [0.9, 0.1], {"container": "x", "subject": "s"})
    assert [m.id for m in store.near([1.0, 0.0], 10, flt)] == ["a", "c"]
    store.delete("a")
    assert [m.id for m in store.near([1.0, 0.0], 10, flt)] == ["c"]
    store.put("c", [0.9, 0.1], {"container": "y", "subject": "s"})  # moved out of the fence
    assert store.near([1.0, 0.0], 10, flt) == []
