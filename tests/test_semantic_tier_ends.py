"""The tiers' loose ends: bounded refusal lists in every semantic store, entity kinds and
the rule that files an edge as a typed claim only when its ends' kinds fit, hedged edges
and claims kept as hedged (never as asserted), and compact tier-1 rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from hirmem.semantic import claims, devices
from hirmem.semantic.claims import ClaimStore, Statement
from hirmem.semantic.devices import DeviceFeed
from hirmem.semantic.entities import entity_id, kind_cue
from hirmem.semantic.extract import RuleExtractor
from hirmem.semantic.planner import DEFAULT_ONTOLOGY
from hirmem.semantic.relations import RELATIONS, fits
from hirmem.semantic.substrate import Substrate
from hirmem.semantic.values import Chunk
from test_semantic_devices import _store
from test_semantic_tiers import NOW, T0, _say, _substrate

DAY = 86_400_000


def test_claim_refusals_are_all_counted_and_the_latest_listed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(claims, "KEPT_REFUSALS", 5)
    store = ClaimStore(DEFAULT_ONTOLOGY)
    for i in range(12):  # no such predicate: each one refused
        assert store.write(Statement("Alice", f"person.nope{i}", "x", "Alice x", f"d{i}",
                                     "c")) is None  # fmt: skip
    assert store.refused() == 12
    listed = [d for _, d in store.refusals()]
    assert listed == [f"no template: predicate 'person.nope{i}' is in no template"
                      for i in range(7, 12)]  # fmt: skip


def test_claim_refusal_count_survives_reopening(tmp_path: Path) -> None:
    path = str(tmp_path / "c.db")
    store = ClaimStore(DEFAULT_ONTOLOGY, path)
    store.write(Statement("Alice", "person.residence", "Oslo", "Bob lives in Oslo", "d", "c"))
    store.close()
    again = ClaimStore(DEFAULT_ONTOLOGY, path)
    assert again.refused() == 1 and again.refusals()[0][0] == "subject not in source"
    again.close()


def test_a_device_feeds_skipped_records_are_all_counted_and_the_latest_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(devices, "KEPT_SKIPS", 1)
    store = _store(tmp_path / "host.db")
    feed = DeviceFeed(store, Substrate.in_memory())
    for _ in range(3):  # the same records again: the non-UTF-8 one is skipped each time
        feed.pull(0)
    assert feed.skips == 3 and len(feed.skipped) == 1
    assert "not UTF-8" in feed.skipped[0][1]


# ---- entity kinds -----------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "text", "kind"), [
    ("c0ffee00c0ffee00/temp0", "", "device"),
    ("Acme Corp", "", "organisation"),
    ("Initech", "Initech, a software company, hired Bob.", "organisation"),
    ("Lee", "Dr. Lee works at Acme.", "person"),
    ("Dr Lee", "", "person"),
    ("Oslo", "She moved to the city of Oslo.", "place"),
    ("Harbour Street", "", "place"),
    ("Rex", "Rex is a sensor on pump 3.", "device"),
    ("Acme", "Acme works at Initech.", ""),  # nothing stated
    ("Corp", "", ""),  # a suffix alone is no name
])  # fmt: skip
def test_a_kind_is_what_the_source_states(name: str, text: str, kind: str) -> None:
    assert kind_cue(name, text) == kind


def test_fits_files_an_end_by_stated_kinds_or_the_one_kind_its_predicate_takes() -> None:
    employer = RELATIONS["works_at"]
    assert fits(employer.value, frozenset()) == ("organisation", "")  # the template types it
    assert fits(employer.value, frozenset({"organisation"})) == ("organisation", "")
    assert fits(employer.value, frozenset({"place"}))[1]  # known only for other kinds
    assert fits(employer.value, frozenset({"place", "organisation"}))[1]  # stated as both
    located = RELATIONS["located_in"]
    assert fits(located.subject, frozenset())[1]  # untyped, several kinds: stays open
    assert fits(located.subject, frozenset({"device"})) == ("device", "")
    assert fits(None, frozenset()) == ("", "")  # a text value takes anything


def test_an_edge_becomes_a_claim_only_when_its_ends_are_of_the_kinds_its_predicate_takes(
) -> None:
    sub = _substrate()
    _say(sub, "a", "Alice works at Acme Corp. Alice lives in Oslo. "
                   "Harbour Street is located in Oslo. The Depot is located in Oslo.")
    c, team = sub.claims, {"team"}
    assert [r.value for r in c.current("Alice", "person.employer", team)] == ["acme corp"]
    # typed by the templates that filed them: Alice a person, Oslo a place
    assert sub.entities.kinds("Alice", team) == {"person"}
    assert sub.entities.kinds("Oslo", team) == {"place"}
    assert sub.entities.kinds("Acme Corp", team) == {"organisation"}
    # a street is a place the text names as one; "The Depot" has no stated kind and
    # place.location takes several: it stays an open edge, not filed under the first
    assert [r.value for r in c.current("Harbour Street", "place.location", team)] == ["oslo"]
    assert c.current("The Depot", "place.location", team) == []
    [edge] = sub.entities.edges(entity_id("the depot"), team)
    assert (edge.relation, edge.object_name) == ("located_in", "oslo")
    # Alice is a person: "Bob knows Alice" files; Acme Corp is an organisation, so the
    # vocabulary knows "knows" only for other kinds and it stays open
    _say(sub, "b", "Bob knows Alice. Bob knows Acme Corp. Oslo works at Acme Corp.")
    assert [r.value for r in c.current("Bob", "person.knows", team)] == ["alice"]
    assert {e.relation for e in sub.entities.edges(entity_id("acme corp"), team)} == {"knows",
                                                                                      "works_at"}
    assert c.current("Oslo", "person.employer", team) == []  # a place employed by nobody
    # a kind is fenced like an alias: another container knows nothing of Alice's kind
    assert sub.entities.kinds("Alice", {"elsewhere"}) == frozenset()


# ---- hedged edges and claims ------------------------------------------------------------------


def test_the_rule_extractor_reads_what_a_hedged_sentence_would_assert_and_asserts_none() -> None:
    text = ("Alice may work at Acme. I think Bob lives in Oslo. He might live in Rome. "
            "If Carol works at Initech, fine. Dana works at Globex. Maybe Frank knows Grace. "
            "Zed might not live in Lima. Does Yan live in Kyiv?")
    chunk = Chunk("d", 0, text, 0, len(text.encode()))
    rules = RuleExtractor()
    assert [(t.subject, t.object) for t in rules.extract(chunk)] == [("Dana", "Globex")]
    assert [(t.subject, t.predicate, t.object, t.evidence) for t in rules.hedged(chunk)] == [
        ("Alice", "works_at", "Acme", "Alice may work at Acme."),
        ("Bob", "lives_in", "Oslo", "I think Bob lives in Oslo."),
        ("Frank", "knows", "Grace", "Maybe Frank knows Grace."),
    ]  # no pronoun, no condition, no denial, no question


def test_a_hedged_statement_is_kept_as_hedged_and_never_as_asserted() -> None:
    sub = _substrate()
    _say(sub, "a", "Alice may work at Acme. I think Bob lives in Oslo. "
                   "Perhaps The Depot is located in Oslo.")
    c, team = sub.claims, {"team"}
    [work] = c.current("Alice", "person.employer", team)
    assert work.value == "acme" and work.hedged
    assert [a.hedged for a in work.attestations] == [True]
    assert c.count("person.employer", team) == 0  # a hedge is not counted as a fact
    assert sub.answer("Where does Alice work?", team) == (
        "planned", "acme (hedged) (\u201cAlice may work at Acme.\u201d)")
    # the ledger never believed it: no assertion, nothing for ask to serve
    assert all(e.predicate != "works_at" for e in sub.ledger.edges())
    # an open edge keeps its hedge too
    [edge] = sub.entities.edges(entity_id("the depot"), team)
    assert edge.relation == "located_in" and edge.hedged
    # an asserted value is preferred to a hedged one, even an older one, and counts
    _say(sub, "b", "Bob lives in Paris.", at=T0 - DAY)
    assert [r.value for r in c.current("Bob", "person.residence", team)] == ["paris"]
    assert [(r.value, r.hedged) for r in c.history("Bob", "person.residence", team)] == [
        ("paris", False), ("oslo", True)]
    assert c.count("person.residence", team) == 1
    # a later assertion of the same value makes it asserted
    _say(sub, "c", "Alice works at Acme.", at=T0 + DAY)
    [work] = c.current("Alice", "person.employer", team, NOW)
    assert not work.hedged and c.count("person.employer", team) == 1
