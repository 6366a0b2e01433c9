"""The LoCoMo harness (tools/locomo.py) and its port of the official scorer.

The scorer cases are worked out by hand from the scorer's rules; the conversation is a
small hand-written one in the layout of LoCoMo's locomo10.json (the dataset's own text is
never copied into the project), run end to end through the harness.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))

import locomo
from hirmem.semantic.reader import Reader
from hirmem.semantic.retrieve import Embedder
from locomo_score import multi_f1, normalise, score, token_f1


def test_normalisation_follows_the_scorer() -> None:
    # commas, case, punctuation, a/an/the/and, white space, in that order
    assert normalise("The cat, and the Hat!") == "cat hat"
    assert normalise("  An  apple-pie  ") == "applepie"
    assert normalise("a,b") == "ab"  # the comma goes before the article rule sees 'a'


@pytest.mark.parametrize(
    ("category", "reply", "answer", "want"),
    [
        (4, "running dogs", "the dog runs", 1.0),  # Porter stems: run, dog
        (2, "7 May 2023", "8 May 2023", 2 / 3),
        (2, "2022", 2022, 1.0),  # numeric answers are compared as text
        (4, "", "Paris", 0.0),
        (4, "Paris France", "Paris", 2 * (1 / 2) * 1 / (1 / 2 + 1)),
        (1, "Paris, London", "London, Berlin", 0.5),  # best match per reference part
        (1, "London", "London, Berlin", 0.5),
        (3, "psychology", "psychology; counseling certification", 1.0),  # cut at ';'
        (5, "No information available.", "anything", 1.0),
        (5, "That was not mentioned", "anything", 1.0),
        (5, "Paris", "Paris", 0.0),
    ],
)
def test_score_by_category(category: int, reply: str, answer: object, want: float) -> None:
    assert score(category, reply, answer) == pytest.approx(want)


def test_unknown_category_is_refused() -> None:
    with pytest.raises(ValueError, match="categories 1 to 5"):
        score(6, "x", "y")


def test_multi_f1_is_an_average_over_reference_parts() -> None:
    assert multi_f1("a cat, a dog", "cat, dog, bird") == pytest.approx(2 / 3)
    assert token_f1("dog", "cat") == 0.0


CONVERSATION = {
    "sample_id": "fixture-1",
    "conversation": {
        "speaker_a": "Ines",
        "speaker_b": "Tomas",
        "session_1_date_time": "10:00 am on 3 March, 2024",
        "session_1": [
            {"speaker": "Ines", "dia_id": "D1:1", "text": "Morning Tomas! How was the weekend?"},
            {"speaker": "Tomas", "dia_id": "D1:2",
             "text": "Great. I went kayaking on the fjord yesterday with my cousin."},
            {"speaker": "Ines", "dia_id": "D1:3",
             "text": "Lovely. I started learning Portuguese last month."},
            {"speaker": "Tomas", "dia_id": "D1:4", "text": "Here is my new bike.",
             "blip_caption": "a red bicycle leaning on a fence"},
        ],
        "session_2_date_time": "6:30 pm on 20 April, 2024",
        "session_2": [
            {"speaker": "Ines", "dia_id": "D2:1",
             "text": "My Portuguese teacher is called Beatriz."},
            {"speaker": "Tomas", "dia_id": "D2:2", "text": "I adopted a beagle named Pixel."},
        ],
    },
    "qa": [
        {"question": "When did Tomas go kayaking?", "answer": "2 March 2024",
         "evidence": ["D1:2"], "category": 2},
        {"question": "What language is Ines learning?", "answer": "Portuguese",
         "evidence": ["D1:3", "D2:1"], "category": 4},
        {"question": "What is the name of the beagle Tomas adopted?", "answer": "Pixel",
         "evidence": ["D2:2"], "category": 4},
        {"question": "What colour is the bicycle?", "answer": "red",
         "evidence": ["D1:4"], "category": 4},
        {"question": "What did Ines say about her violin recital?", "evidence": [],
         "adversarial_answer": "it went well", "category": 5},
    ],
    "event_summary": {}, "observation": {}, "session_summary": {},
}  # fmt: skip


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([CONVERSATION]), encoding="utf-8")
    return path


def test_load_reads_the_locomo_layout(data: Path) -> None:
    [conv] = locomo.load(data)
    assert conv.sample_id == "fixture-1"
    assert [t.dia_id for t in conv.turns] == ["D1:1", "D1:2", "D1:3", "D1:4", "D2:1", "D2:2"]
    assert "red bicycle" in conv.turns[3].text  # a shared photo's caption is part of the turn
    assert conv.turns[4].when is not None and conv.turns[4].when.month == 4
    assert conv.questions[4].answer == "it went well" and conv.questions[4].category == 5


def test_a_relative_time_is_resolved_against_the_session(data: Path) -> None:
    [conv] = locomo.load(data)
    found = [locomo.Evidence(conv.turns[1], 1.0)]
    reader = Reader(0.5)
    assert locomo.read(reader, "When did Tomas go kayaking?", found, "tomas") == "2 March 2024"


def test_the_reader_abstains_on_nothing_and_on_evidence_that_misses_the_question(
    data: Path,
) -> None:
    [conv] = locomo.load(data)
    reader = Reader(0.5)
    assert locomo.read(reader, "Who?", [], None) == locomo.ABSTAIN
    greeting = [locomo.Evidence(conv.turns[0], 0.9)]
    assert locomo.read(reader, "What is the weather in Oslo?", greeting, None) == locomo.ABSTAIN
    beagle = [locomo.Evidence(conv.turns[5], 0.1)]
    assert "Pixel" in locomo.read(reader, "What is the beagle called?", beagle, None)


def test_bm25_finds_the_turn_that_holds_a_rare_word(data: Path) -> None:
    [conv] = locomo.load(data)
    arm = locomo.Bm25Arm()
    arm.build(conv.turns)
    assert arm.retrieve("beagle", 3)[0].turn.dia_id == "D2:2"
    assert arm.retrieve("?!", 3) == []


def test_bootstrap_interval_holds_the_mean() -> None:
    outcomes = [locomo.Outcome(f"c{i % 3}", 4, float(i % 2), None, 0.0) for i in range(30)]
    mean, lo, hi = locomo.bootstrap(outcomes, lambda o: o.f1)
    assert lo <= mean <= hi and mean == pytest.approx(0.5)


def test_the_harness_end_to_end(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert locomo.main([str(data), "-k", "3", "--embedder", "hash"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("LoCoMo: 1 conversations, 5 questions (4 answerable, 1 adversarial)")
    assert "embedder: hashed terms" in out
    rows = {line.split()[0]: line for line in out.splitlines()[2:5]}
    assert set(rows) == {"bm25", "flat", "scoped"}
    results = locomo.run(locomo.load(data), [locomo.Bm25Arm(), locomo.SubstrateArm(True)], 3,
                         0.2)  # fmt: skip
    bm25, scoped = results
    # BM25 finds every evidence turn of the rare-word questions in its top 3
    assert [o.recall for o in bm25.outcomes][2:4] == [1.0, 1.0]
    assert all(0.0 <= o.f1 <= 1.0 for o in scoped.outcomes)
    assert len(scoped.outcomes) == 5


class _Counting:
    name = "counting"
    dim = 8

    def __init__(self) -> None:
        self.seen: list[str] = []

    def embed(self, text: str) -> np.ndarray:
        self.seen.append(text)
        return np.ones(self.dim, dtype=np.float32)


def test_the_arms_embed_a_turn_once_and_each_question_afresh(data: Path) -> None:
    [conv] = locomo.load(data)
    inner = _Counting()
    shared = locomo.Remembered(inner)
    flat, scoped = locomo.SubstrateArm(False, shared), locomo.SubstrateArm(True, shared)
    flat.build(conv.turns)
    built = len(inner.seen)
    scoped.build(conv.turns)
    assert len(inner.seen) == built and built >= len(conv.turns)  # the second build: none
    flat.retrieve("What is the name of the beagle?", 3)
    scoped.retrieve("What is the name of the beagle?", 3)
    assert inner.seen[built:].count("What is the name of the beagle?") == 2
    small = locomo.Remembered(inner, bound=2)
    small.building = True
    for text in ("a", "b", "c", "a"):
        small.embed(text)
    assert len(small._held) <= 2  # bounded



def _with_session_3() -> dict[str, object]:
    """The fixture with a third session: a statement the claims tier types (where Tomas
    lives, said by Ines) and a relative time the memories tier keeps (Tomas's marathon)."""
    conv: dict[str, object] = copy.deepcopy(dict(CONVERSATION))
    talk = conv["conversation"]
    assert isinstance(talk, dict)
    talk["session_3_date_time"] = "2:00 pm on 1 May, 2024"
    talk["session_3"] = [
        {"speaker": "Ines", "dia_id": "D3:1", "text": "Tomas lives in Bergen."},
        {"speaker": "Tomas", "dia_id": "D3:2",
         "text": "Yes! And yesterday I ran my first marathon along the harbour."},
    ]  # fmt: skip
    return conv


def test_the_substrate_arms_answer_through_the_fused_tiers(tmp_path: Path) -> None:
    path = tmp_path / "three.json"
    path.write_text(json.dumps([_with_session_3()]), encoding="utf-8")
    [conv] = locomo.load(path)
    reader = Reader(0.5)
    scoped, flat = locomo.SubstrateArm(True, Embedder()), locomo.SubstrateArm(False, Embedder())
    for arm in (scoped, flat):
        arm.build(conv.turns)
        # every turn went into the three tiers: passages, memories, claims
        assert len(arm.sub.passages) == len(conv.turns)
        assert len(arm.sub.memories) >= 4
        assert [r.value for r in arm.sub.claims.about("Tomas", {locomo.CONTAINER})] == ["bergen"]
        # a typed question is planned from the claim; its evidence is the turn it quotes
        reply, found = arm.answer("Where does Tomas live?", 5, reader)
        assert reply.lower().startswith("bergen") and found[0].turn.dia_id == "D3:1"
        # a time said relatively is resolved against the session's date
        reply, found = arm.answer("When did Tomas run his first marathon?", 5, reader)
        assert reply == "30 April 2024"
        assert "D3:2" in [e.turn.dia_id for e in found]
    # the memory tier is among what is fused, and a memory counts as the turn it cites
    r = scoped.sub.respond("When did Tomas run his first marathon?", {locomo.CONTAINER}, 5,
                           at=scoped.at)  # fmt: skip
    assert r.how == "recalled" and r.subject == "tomas"
    assert any(h.tier == "memory" for h in r.evidence)
    assert scoped.by_doc[r.source].dia_id == "D3:2"
    # the two arms differ in the scoping only: flat names no subject
    assert scoped.answer("What did Ines say about her violin recital?", 5, reader)[0] == (
        locomo.ABSTAIN)
    assert flat.subject is None and scoped.subject == "ines"
    # the harness's figures come from the fused path: the typed question scores in full
    results = locomo.run([conv], [scoped], 5, 0.5)
    assert len(results[0].outcomes) == len(conv.questions)


def test_a_photo_caption_says_what_it_shows() -> None:
    assert locomo.caption("a photo of a photo of a dog on a bed") == "a dog on a bed"
    assert locomo.caption("A photography of  a shelf of books") == "a shelf of books"
    assert locomo.caption("photo of ") == "photo of"  # nothing else: kept as it is
