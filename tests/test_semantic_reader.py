"""The deterministic extractive reader: answers only from evidence, abstains otherwise."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hirmem.semantic.reader import ABSTAIN, Evidence, Reader

SAID = int(datetime(2024, 3, 3, 10, 0, tzinfo=UTC).timestamp() * 1000)


def test_the_reply_is_what_the_question_does_not_already_hold() -> None:
    e = [Evidence("Oh wow. Jonas adopted a beagle named Pixel last spring.", SAID, "d1")]
    got = Reader().read("What is the name of the beagle Jonas adopted?", e, "jonas")
    assert not got.abstained and got.source == "d1"
    assert "Pixel" in got.text and "beagle" not in got.text and "wow" not in got.text


def test_support_picks_the_evidence_and_decides_abstention() -> None:
    near = Evidence("I love coffee in the morning.", SAID, "near")
    held = Evidence("The pump at station four failed twice.", SAID, "held")
    got = Reader(0.5).read("Which pump failed?", [near, held])
    assert got.source == "held" and got.support == pytest.approx(1.0)
    missing = Reader(0.5).read("Which pump did the charity race fund?", [near, held])
    assert missing.abstained and missing.text == ABSTAIN and missing.support < 0.5
    assert Reader().read("Anything?", []).abstained


@pytest.mark.parametrize(
    ("sentence", "want"),
    [
        ("I went kayaking yesterday.", "2 March 2024"),
        ("We moved last year, finally.", "2023"),
        ("It was on 14 July 2019, I think.", "14 July 2019"),
        ("I started in 2021.", "2021"),
        ("I went kayaking with my cousin.", "3 March 2024"),  # no time stated: when said
    ],
)
def test_when_questions_get_the_time_stated_or_implied(sentence: str, want: str) -> None:
    assert Reader(0.0).read("When did I go kayaking?", [Evidence(sentence, SAID)]).text == want


def test_a_reply_with_nothing_new_is_no_answer() -> None:
    e = [Evidence("Thanks, Jon!", SAID)]
    assert Reader(0.0).read("What did Jon say?", e, "jon").abstained


def test_min_support_is_a_share() -> None:
    with pytest.raises(ValueError, match="share"):
        Reader(1.5)
