"""The deterministic extractive reader: an answer composed from retrieved evidence only.

Invariants:

- Nothing is generated: a reply is a sentence of the evidence with the words the question
  already holds and the words that carry no answer (function words, fillers) taken out, a
  date the evidence states, or a date computed from when the evidence was said and the
  relative time it uses ("yesterday", "last year"). No model.
- Support before answer: the reader picks, among the evidence it was handed, the passage
  that holds the largest share of what the question asks about (its content words, less
  the subject the recall was scoped to, less question words), ties going to the better
  ranked. When that share is below ``min_support`` the reply is :data:`ABSTAIN`: evidence
  that does not hold what the question asks about is not an answer to it.
- Verified: a reply sentence that carries a number or a capitalised name its passage does
  not contain is struck (the computed date of a relative time is the one exception, as a
  computed answer appears in no passage); a reply left empty is the abstention.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hirmem.protocol.identity import fold

__all__ = ["ABSTAIN", "Evidence", "Reader", "Reply"]

ABSTAIN = "No information available"

_WORD = re.compile("[^\\W_]+(?:['\u2019][^\\W_]+)?", re.UNICODE)
_SENT = re.compile(r"[^.!?]+[.!?]*")
_QUESTION_WORDS = frozenset(
    re.findall(
        r"\w+",
        """a an the and or but of to in on at for with from by about into as is are was were
        be been being do does did done has have had having i you he she it we they me him her
        us them my your his its our their what which who whom whose when where why how that
        this these those there here so if than then too very just also not no yes any some
        would could should will shall can may might must kind type sort much many""",
    )
)
# words that carry no answer: the question words, and what conversation pads a reply with
_FUNCTION = _QUESTION_WORDS | frozenset(
    re.findall(
        r"[\w']+",
        """i'm i've i'll i'd you're you've we're we've they're it's that's there's let's
        am oh hey hi wow yeah yes yep ok okay lol haha omg um uh hmm well really totally
        thanks thank so such just like""",
    )
)
_YEAR = re.compile(r"\b(?:19|20)\d{2}\b")
_MONTHS = tuple(datetime(2000, m, 1).strftime("%B").lower() for m in range(1, 13))
_DATE = re.compile(
    rf"\b(?:\d{{1,2}} )?(?:{'|'.join(_MONTHS)})(?: \d{{1,2}})?(?:,? \d{{4}})?\b", re.IGNORECASE
)
_WHEN = ("when", "what year", "which year", "what month", "what date", "how long ago")
_FIGURE = re.compile(r"\d[\d,.]*")
_CAPITAL = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]+\b")


def _day(d: datetime) -> str:
    return f"{d.day} {d.strftime('%B')} {d.year}"


_RELATIVE: tuple[tuple[str, Callable[[datetime], str]], ...] = (
    ("yesterday", lambda d: _day(d - timedelta(days=1))),
    ("last night", lambda d: _day(d - timedelta(days=1))),
    ("today", _day),
    ("tonight", _day),
    ("this morning", _day),
    ("last weekend", lambda d: f"the weekend before {_day(d)}"),
    ("last week", lambda d: f"the week before {_day(d)}"),
    ("last month", lambda d: (d.replace(day=1) - timedelta(days=1)).strftime("%B %Y")),
    ("last year", lambda d: str(d.year - 1)),
    ("next month", lambda d: (d.replace(day=28) + timedelta(days=4)).strftime("%B %Y")),
    ("next year", lambda d: str(d.year + 1)),
    ("this month", lambda d: d.strftime("%B %Y")),
    ("this year", lambda d: str(d.year)),
)


@dataclass(frozen=True, slots=True)
class Evidence:
    """One retrieved passage as the reader sees it."""

    text: str
    said_at: int = 0  # ms since the epoch; 0: unknown
    source: str = ""  # the passage's document, for the reply to cite


@dataclass(frozen=True, slots=True)
class Reply:
    text: str
    abstained: bool
    support: float  # the share of the question the chosen evidence holds
    source: str = ""


def _stem(w: str) -> str:
    w = fold(w).replace("\u2019", "'")
    if w.endswith("'s"):
        w = w[:-2]
    for suffix in ("ing", "ed", "es", "s"):
        if len(w) > len(suffix) + 2 and w.endswith(suffix) and not w.endswith("ss"):
            return w[: -len(suffix)]
    return w


def _terms(text: str) -> set[str]:
    return {_stem(w) for w in _WORD.findall(text) if fold(w) not in _QUESTION_WORDS}


class Reader:
    def __init__(self, min_support: float = 0.5) -> None:
        if not 0.0 <= min_support <= 1.0:
            raise ValueError(f"min_support is a share in [0, 1], got {min_support}")
        self.min_support = min_support

    def read(
        self, question: str, evidence: Sequence[Evidence], subject: str | None = None
    ) -> Reply:
        asked = _terms(question) - (_terms(subject) if subject else set())
        if not evidence:
            return Reply(ABSTAIN, True, 0.0)
        best, support = evidence[0], -1.0
        for e in evidence:
            held = len(asked & _terms(e.text)) / len(asked) if asked else 1.0
            if held > support:
                best, support = e, held
        if support < self.min_support:
            return Reply(ABSTAIN, True, support)
        sentence = self._sentence(asked, best.text)
        low = question.strip().lower()
        if low.startswith(_WHEN):
            text = self._when(sentence, best)
        else:
            skip = _terms(question) | (_terms(subject) if subject else set())
            left = [w for w in _WORD.findall(sentence)
                    if _stem(w) not in skip and fold(w) not in _FUNCTION]  # fmt: skip
            text = " ".join(left)
            if not text or not self._verified(text, best.text):
                # nothing the question does not already hold, or a figure or name the passage
                # does not carry: no answer
                return Reply(ABSTAIN, True, support, best.source)
        return Reply(text, False, support, best.source)

    @staticmethod
    def _sentence(asked: set[str], text: str) -> str:
        sentences: list[str] = [s.strip() for s in _SENT.findall(text) if s.strip()] or [text]
        return max(sentences, key=lambda s: (len(asked & _terms(s)), -len(s)))

    @staticmethod
    def _when(sentence: str, e: Evidence) -> str:
        m = _DATE.search(sentence) or _YEAR.search(sentence)
        if m is not None:
            return m.group(0)
        if e.said_at:
            said = datetime.fromtimestamp(e.said_at / 1000, tz=UTC)
            low = sentence.lower()
            for phrase, resolve in _RELATIVE:
                if phrase in low:
                    return resolve(said)
            return _day(said)
        return sentence.strip()

    @staticmethod
    def _verified(reply: str, source: str) -> bool:
        """Every figure and capitalised name of the reply stands in its source."""
        return all(f in source for f in _FIGURE.findall(reply)) and all(
            n in source for n in _CAPITAL.findall(reply)
        )
