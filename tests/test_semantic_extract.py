"""Issue 16: the extractors assert only what a text states, and bound it in time.

The rule extractor takes nothing from a question, a hedge, a condition or a denial, and no
pronoun as a subject; a stated start or end bounds the valid interval. The model extractor
refuses an assertion naming a subject or object its evidence does not hold.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from typing import Any

import pytest

import hirmem.semantic.extract as extract
from hirmem.semantic.extract import ModelExtractor, RuleExtractor, instant
from hirmem.semantic.values import OPEN, Chunk


def _chunk(text: str) -> Chunk:
    return Chunk("d", 0, text, 0, len(text.encode("utf-8")))


def _ms(y: int, m: int = 1, d: int = 1) -> int:
    return int(datetime(y, m, d, tzinfo=UTC).timestamp() * 1000)


def _facts(text: str) -> tuple[list[tuple[str, str, str, int, int]], list[str]]:
    ex = RuleExtractor()
    got = [(t.subject, t.predicate, t.object, t.valid_from, t.valid_until)
           for t in ex.extract(_chunk(text)) if t.predicate != "said"]  # fmt: skip
    return got, [r.reason.split(":")[0] for r in ex.rejected]


CASES: list[tuple[str, list[tuple[str, str, str, int, int]], list[str]]] = [
    ("Alice works at Acme.", [("Alice", "works_at", "Acme", OPEN, OPEN)], []),
    ("Nobody said Alice works at Acme.", [], ["denial"]),
    ("It is not true that Alice works at Acme.", [], ["denial"]),
    ("Alice never said that Bob lives in Paris.", [], ["denial"]),
    ("Bob didn't say Alice works at Acme.", [], ["denial"]),
    ("Alice works at Acme?", [], ["question"]),
    ("Has Alice worked at Acme", [], ["question"]),
    ("Mallory: Alice works at Acme?", [], ["question"]),
    ("Maybe Alice works at Acme.", [], ["hedged"]),
    ("I think Alice works at Acme.", [], ["hedged"]),
    ("Reportedly, Alice lives in Oslo.", [], ["hedged"]),
    ("Alice said Bob might be... no. Bob lives in Rome.", [("Bob", "lives_in", "Rome", 0, 0)],
     []),
    ("If Alice works at Acme, Bob is happy.", [], ["hedged"]),
    ("I wonder whether Alice lives in Oslo.", [], ["hedged"]),
    ("She works at Acme.", [], ["pronoun"]),
    ("They live in Oslo. His Sister lives in Rome.", [], ["pronoun"]),
    ("Bob is not here; Alice works at Acme.", [("Alice", "works_at", "Acme", 0, 0)], []),
    ("Alice lives in Paris, not Oslo.", [("Alice", "lives_in", "Paris", 0, 0)], []),
    ("May Smith works at Acme.", [("May Smith", "works_at", "Acme", 0, 0)], []),
    ("Alice lived in Oslo until 2019.", [("Alice", "lives_in", "Oslo", OPEN, _ms(2019))], []),
    ("Alice lived in Oslo from 2015 until March 2019.",
     [("Alice", "lives_in", "Oslo", _ms(2015), _ms(2019, 3))], []),
    ("Alice worked at Acme between 2010 and 12 May 2012.",
     [("Alice", "works_at", "Acme", _ms(2010), _ms(2012, 5, 12))], []),
    ("Alice lives in Oslo since 2021-06-03.", [("Alice", "lives_in", "Oslo", _ms(2021, 6, 3),
                                                OPEN)], []),
    ("Alice likes jazz until 2019.", [("Alice", "likes", "jazz", OPEN, _ms(2019))], []),
    # an end at or before the start: refused, the assertion kept open at that end
    ("Alice lived in Oslo from 2019 until 2015.",
     [("Alice", "lives_in", "Oslo", _ms(2019), OPEN)], ["interval"]),
    ("Alice lived in Oslo from May 2019 to May 2019.",
     [("Alice", "lives_in", "Oslo", _ms(2019, 5), OPEN)], ["interval"]),
    ("Alice lived in Oslo from 1960 until 1999.",
     [("Alice", "lives_in", "Oslo", OPEN, _ms(1999))], ["interval"]),
    # each clause keeps its own bounds
    ("Alice lived in Oslo until March 12, 2019 and Bob lives in Rome since 2020.",
     [("Alice", "lives_in", "Oslo", OPEN, _ms(2019, 3, 12)),
      ("Bob", "lives_in", "Rome", _ms(2020), OPEN)], []),
]  # fmt: skip


@pytest.mark.parametrize(("text", "want", "why"), CASES, ids=[c[0][:40] for c in CASES])
def test_rule_extractor_asserts_only_what_is_stated(
    text: str, want: list[tuple[str, str, str, int, int]], why: list[str]
) -> None:
    got, reasons = _facts(text)
    assert sorted(got) == sorted(want)
    assert reasons == why


def test_a_turn_records_what_was_said_but_not_a_question_as_fact() -> None:
    ex = RuleExtractor()
    got = ex.extract(_chunk("Maya: Does Jonas live in Berlin?\nJonas: I live in Berlin."))
    assert [(t.subject, t.predicate) for t in got] == [("Maya", "said"), ("Jonas", "said")]


NAMES = ["Alice", "Bob", "Carol Smith", "Dan", "Zoë"]
PLACES = ["Oslo", "Paris", "Rio de Janeiro", "Acme"]


def _random_case(rng: random.Random) -> tuple[str, dict[str, Any]]:
    """A sentence built from parts, and what it states (the oracle is the parts)."""
    pronoun = rng.random() < 0.15
    subject = rng.choice(["She", "They", "He", "Someone"]) if pronoun else rng.choice(NAMES)
    place = rng.choice(PLACES)
    lead = rng.choice(["", "", "", "Maybe ", "Nobody said ", "I doubt that ", "If ",
                       "It is false that ", "Perhaps ", "Bob: "])  # fmt: skip
    y1, y2 = rng.randint(1950, 2030), rng.randint(1950, 2030)
    shape = rng.choice(["", "", "until", "since", "from-to", "between"])
    tail = {"": "", "until": f" until {y2}", "since": f" since {y1}",
            "from-to": f" from {y1} until {y2}", "between": f" between {y1} and {y2}"}[shape]
    question = rng.random() < 0.15
    verb = "lived" if rng.random() < 0.5 else "lives"
    text = f"{lead}{subject} {verb} in {place}{tail}{'?' if question else '.'}"
    stated = not (pronoun or question or lead.strip() not in ("", "Bob:"))
    # a bound at or before the epoch cannot be held (0 is the open bound): refused
    start = _ms(y1) if shape in ("since", "from-to", "between") and y1 > 1970 else OPEN
    end = _ms(y2) if shape in ("until", "from-to", "between") and y2 > 1970 else OPEN
    if start != OPEN and end != OPEN and end <= start:
        end = OPEN
    return text, {"stated": stated, "s": subject, "o": place, "from": start, "until": end}


def test_rule_extractor_against_the_parts_of_thousands_of_random_sentences() -> None:
    rng = random.Random(16)
    for _ in range(3000):
        text, want = _random_case(rng)
        got, _ = _facts(text)
        if not want["stated"]:
            assert got == [], text
        else:
            assert got == [(want["s"], "lives_in", want["o"], want["from"], want["until"])], text


def test_a_stated_date_is_the_first_instant_of_the_period_it_names() -> None:
    rng = random.Random(3)
    months = ["January", "February", "March", "April", "May", "June", "July", "August",
              "September", "October", "November", "December"]  # fmt: skip
    for _ in range(2000):
        y, m, d = rng.randint(1900, 2100), rng.randint(1, 12), rng.randint(1, 28)
        name = months[m - 1]
        short = name[:3]
        for text, when in ((f"{y}", (y, 1, 1)), (f"{name} {y}", (y, m, 1)),
                           (f"{d} {name} {y}", (y, m, d)), (f"{name} {d}, {y}", (y, m, d)),
                           (f"{short}. {y}", (y, m, 1)), (f"{y}-{m:02d}", (y, m, 1)),
                           (f"{y}-{m:02d}-{d:02d}", (y, m, d))):  # fmt: skip
            assert instant(text) == _ms(*when), text
    with pytest.raises(ValueError, match="no such date"):
        instant("2019-02-30")
    got, reasons = _facts("Alice lived in Oslo until 2019-02-30.")
    assert got == [("Alice", "lives_in", "Oslo", OPEN, OPEN)] and reasons == ["interval"]


class _Scripted:
    def __init__(self, answer: Any) -> None:
        self.answer = json.dumps(answer)

    def complete(self, prompt: str, schema: Any) -> str:
        return self.answer


def test_model_extractor_refuses_what_its_evidence_does_not_name() -> None:
    chunk = _chunk("Alice works at Acme Corp. Bob lives in Paris.")
    ex = ModelExtractor(_Scripted([
        {"subject": "Alice", "predicate": "works_at", "object": "acme  corp",
         "evidence": "Alice works at Acme Corp."},
        {"subject": "Carol", "predicate": "works_at", "object": "Acme Corp",
         "evidence": "Alice works at Acme Corp."},
        {"subject": "Bob", "predicate": "lives_in", "object": "London",
         "evidence": "Bob lives in Paris."},
        {"subject": "Mallory", "predicate": "is_admin", "object": "root",
         "evidence": "Bob lives in Paris."},
        {"subject": " ", "predicate": "lives_in", "object": "Paris",
         "evidence": "Bob lives in Paris."},
    ]), "scripted")  # fmt: skip
    got = ex.extract(chunk)
    assert [(t.subject, t.object) for t in got] == [("Alice", "acme  corp")]
    reasons = [r.reason for r in ex.rejected]
    assert "subject 'Carol' not in its evidence" in reasons[0]
    assert "object 'London' not in its evidence" in reasons[1]
    assert "subject 'Mallory' and object 'root' not in its evidence" in reasons[2]
    assert "not blank" in reasons[3]


def test_rejections_are_counted_and_the_kept_list_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(extract, "MAX_KEPT", 5)
    ex = RuleExtractor()
    text = " ".join(f"Alice{i} lives in Oslo?" for i in range(20)) + " She works at Acme."
    assert ex.extract(_chunk(text)) == []
    assert len(ex.rejected) == 5
    assert ex.refusals == {"question": 20, "pronoun": 1}
