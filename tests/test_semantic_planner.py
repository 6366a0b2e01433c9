"""The three tiers fused on the way out: typed questions from claims, the rest recalled."""

from __future__ import annotations

from hirmem.semantic.extract import RuleExtractor
from hirmem.semantic.planner import Planner
from hirmem.semantic.split import SentenceSplitter
from hirmem.semantic.stages import Pipeline, Result, StageRun
from hirmem.semantic.substrate import Substrate
from hirmem.semantic.values import Doc, Origin, doc_id, with_origin

DAY = 86_400_000
T0 = 1_600_000_000_000


def _say(sub: Substrate, ref: str, text: str, at: int, container: str = "team") -> None:
    data = text.encode()
    org = Origin.of_bytes(ref, data, "text/plain", at)
    doc = Doc(doc_id(ref, 0, org.sha256), ref, text, with_origin({"container": container}, org))
    pipeline = Pipeline(None, splitter=SentenceSplitter(512), extractor=RuleExtractor())
    result = Result(runs=[StageRun("ingest", "test", at, at, (ref,), (doc.id,))])
    sub.absorb(pipeline.process([doc], result))


def _substrate() -> Substrate:
    sub = Substrate.in_memory(clock=lambda: T0 + 100 * DAY)
    _say(sub, "mem://a", "Bob lives in Oslo. Alice works at Acme Corp.", T0)
    _say(sub, "mem://b", "Bob lives in Paris. Carol lives in Paris.", T0 + 10 * DAY)
    _say(sub, "mem://c", "Dora lives in Paris. The lantern market opens at dusk.", T0 + DAY,
         container="other")  # fmt: skip
    return sub


def test_typed_questions_compile_to_plans() -> None:
    planner = Planner(_substrate().claims)
    plan = planner.plan("Where does Bob live?")
    assert plan is not None and (plan.kind, plan.subject) == ("lookup", "Bob")
    dated = planner.plan("Where did Bob live in 2015?")
    assert dated is not None and dated.at is not None
    assert planner.plan("What is the mood of the lantern market?") is None


def test_a_lookup_reads_the_current_value_with_its_quote() -> None:
    sub = _substrate()
    how, text = sub.answer("Where does Bob live?", {"team"})
    assert how == "planned" and text.startswith("paris") and "Bob lives in Paris." in text
    assert sub.answer("Where has Bob lived?", {"team"}) == ("planned", "oslo, then paris")


def test_counts_are_counted_and_fenced() -> None:
    sub = _substrate()
    assert sub.answer("How many people live in Paris?", {"team"}) == ("planned", "2")
    assert sub.answer("How many people live in Paris?", {"team", "other"}) == ("planned", "3")
    assert sub.answer("How many people live in Paris?", set())[0] != "planned"


def test_who_said_it() -> None:
    sub = _substrate()
    how, text = sub.answer("Who said Bob lives in Paris?", {"team"})
    assert how == "planned" and text == sub.recall("Bob Paris", {"team"}, 1)[1][0].doc


def test_untyped_questions_are_recalled_or_declined() -> None:
    sub = _substrate()
    how, text = sub.answer("Which market opens at dusk?", {"other"})
    assert how == "recalled" and text == "lantern"
    assert sub.answer("Which market opens at dusk?", {"team"})[0] == "abstained"


def test_a_superseded_document_takes_its_claims_with_it() -> None:
    sub = _substrate()
    _say(sub, "mem://a", "Alice works at Globex.", T0 + 20 * DAY)
    how, text = sub.answer("Where does Alice work?", {"team"})
    assert how == "planned" and text.startswith("globex")
    assert sub.answer("Where does Bob live?", {"team"})[1].startswith("paris")
    assert sub.answer("Where has Bob lived?", {"team"}) == ("planned", "paris")
