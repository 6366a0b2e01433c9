"""The deterministic extractive reader: an answer composed from retrieved evidence only.

Invariants:

- Nothing is generated: a reply is a span of the evidence (its words, in their order, less
  function words), a date the evidence states, or a date computed from when the evidence
  was said and the relative time it uses ("yesterday", "last year"). No model.
- Support before answer: the reader picks, among the evidence it was handed, the passage
  that holds the largest share of what the question asks about (its content words, less
  the subject the recall was scoped to, less question words), ties going to the one holding
  what the question's type asks for, then to the better ranked. When that share is below
  ``min_support`` the reply is :data:`ABSTAIN`: evidence that does not hold what the
  question asks about is not an answer to it.
- Short spans by answer type: the question's first words say what kind of answer it wants
  (:func:`answer_kind`: a time, a figure, a person, a place, a reason, a list, or a thing).
  In the best sentence of the chosen passage the reader marks the words the question
  holds, and answers with the stretch of words next to them that the question does not
  hold, of the wanted kind where the sentence has one: a figure for "how many", a name for
  "who", a named place or the phrase after "in"/"at"/"to" for "where", the clause after
  "because" for "why". A question asking for several things (a plural head noun, "the
  names of", "both") gets one span from each supporting passage, joined by commas.
- Verified: a reply span that carries a number or a capitalised name its passage does not
  contain is struck (the computed date of a relative time is the one exception, as a
  computed answer appears in no passage); a reply left empty is the abstention.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hirmem.protocol.identity import fold

__all__ = ["ABSTAIN", "Evidence", "Reader", "Reply", "answer_kind"]

ABSTAIN = "No information available"

_WORD = re.compile("[^\\W_]+(?:['\u2019][^\\W_]+)?", re.UNICODE)
_SENT = re.compile(r"[^.!?\n]+[.!?]*")
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
_BEFORE_YEAR = re.compile(r"([A-Z][a-z]+)\s+$")


def _year(text: str) -> re.Match[str] | None:
    """The first year ``text`` states; not a number that ends a name ("Cyberpunk 2077":
    after a capitalised word that neither starts its sentence nor names a month)."""
    for m in _YEAR.finditer(text):
        before = _BEFORE_YEAR.search(text[: m.start()])
        if before is None or fold(before.group(1)) in _MONTHS:
            return m
        lead = text[: before.start(1)].rstrip()
        if not lead or lead[-1] in ".!?":  # "Since 2019": a capital that starts a sentence
            return m
    return None


_MONTHS = tuple(datetime(2000, m, 1).strftime("%B").lower() for m in range(1, 13))
_DATE = re.compile(
    rf"\b(?:\d{{1,2}} )?(?:{'|'.join(_MONTHS)})(?: \d{{1,2}})?(?:,? \d{{4}})?\b", re.IGNORECASE
)
_WHEN = ("when", "what year", "which year", "what month", "what date", "how long ago")
_FIGURE = re.compile(r"\d[\d,.]*")
_DATED = re.compile(
    rf"\b(?:(?:as )?(?:mentioned|said|stated) )?(?:on |in |during |around |as of |by )?"
    rf"(?:the )?(?:\d{{1,2}}(?:st|nd|rd|th)? )?(?:of )?(?:{'|'.join(_MONTHS)})"
    rf"(?: \d{{1,2}}(?:st|nd|rd|th)?)?,? (?:19|20)\d{{2}}\b"
    r"|\b(?:in|during|since) (?:19|20)\d{2}\b",
    re.IGNORECASE,
)
_CAPITAL = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]+\b")
_NUMBER_WORDS = frozenset(
    re.findall(
        r"\w+",
        """one two three four five six seven eight nine ten eleven twelve thirteen fourteen
        fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy
        eighty ninety hundred thousand million once twice couple few several dozen""",
    )
)
# words that open a new clause: a span of an answer stops before them
_CLAUSE = frozenset(
    re.findall(
        r"\w+",
        "because since but so which while although though if when where who "
        "whose whom whereas unless until",
    )
)
_PLACE_PREPOSITIONS = frozenset(
    {"in", "at", "to", "from", "near", "around", "into", "visit", "visited", "visiting"}
)
NAME_WEIGHT = 2.0  # and when it is the name something is given, for a "what" question
VERB_WEIGHT = 2.0  # a span's score when it follows the verb a "what did X do" asks about
SENTENCE_WEIGHT = 0.75  # a span's score per question word its sentence holds
CONTEXT_WEIGHT = 0.5  # and per question word the sentence before it holds
_REASON = frozenset({"because", "since", "so", "to", "for"})
_TOKEN = re.compile(r"[$\u20ac\u00a3]?\d(?:[\d,.:]*\d)?%?|[^\W_]+(?:['\u2019][^\W_]+)*|[^\w\s]")
_BOUNDARY = frozenset(';:()[]"\u201c\u201d\u2014\u2013!?.')


def _day(d: datetime) -> str:
    return f"{d.day} {d.strftime('%B')} {d.year}"


_WEEKDAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_COUNT = {w: i for i, w in enumerate(
    re.findall(r"\w+", "zero one two three four five six seven eight nine ten eleven twelve"))}
_COUNT["a"] = 1


def _ago(d: datetime, m: re.Match[str]) -> str:
    """ "three weeks ago" said on ``d``: the day, the month or the year it points at."""
    n = int(m.group(1)) if m.group(1).isdigit() else _COUNT.get(m.group(1).lower(), 0)
    unit = m.group(2).lower().rstrip("s")
    if not n:
        return f"{m.group(1)} {m.group(2)} before {_day(d)}"
    if unit == "day":
        return _day(d - timedelta(days=n))
    if unit == "week":
        return f"the week of {_day(d - timedelta(weeks=n))}"
    if unit == "month":
        month, year = d.month - n, d.year
        while month < 1:
            month, year = month + 12, year - 1
        return f"{_MONTHS[month - 1].capitalize()} {year}"
    return str(d.year - n)


_Resolve = Callable[[datetime, re.Match[str]], str]
# relative times, resolved against when the evidence was said; the first that matches wins
_RELATIVE: tuple[tuple[re.Pattern[str], _Resolve], ...] = tuple(
    (re.compile(rf"\b{p}\b", re.IGNORECASE), f)
    for p, f in (
        ("yesterday|last night", lambda d, m: _day(d - timedelta(days=1))),
        ("tomorrow", lambda d, m: _day(d + timedelta(days=1))),
        ("today|tonight|this morning|this afternoon|this evening|just now",
         lambda d, m: _day(d)),
        (rf"last ({_WEEKDAYS})|this past ({_WEEKDAYS})|on ({_WEEKDAYS})",
         lambda d, m: f"the {(m.group(1) or m.group(2) or m.group(3)).capitalize()} before "
                      f"{_day(d)}"),
        ("last weekend", lambda d, m: f"the weekend before {_day(d)}"),
        ("this weekend|over the weekend", lambda d, m: f"the weekend of {_day(d)}"),
        ("last week", lambda d, m: f"the week before {_day(d)}"),
        ("next week", lambda d, m: f"the week after {_day(d)}"),
        ("last month",
         lambda d, m: (d.replace(day=1) - timedelta(days=1)).strftime("%B %Y")),
        ("next month",
         lambda d, m: (d.replace(day=28) + timedelta(days=4)).strftime("%B %Y")),
        ("this month", lambda d, m: d.strftime("%B %Y")),
        ("last (summer|winter|spring|fall|autumn)",
         lambda d, m: f"the {m.group(1).lower()} of {d.year - 1}"),
        ("this (summer|winter|spring|fall|autumn)",
         lambda d, m: f"the {m.group(1).lower()} of {d.year}"),
        ("last year", lambda d, m: str(d.year - 1)),
        ("next year", lambda d, m: str(d.year + 1)),
        ("this year", lambda d, m: str(d.year)),
        (r"(\d+|a|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a few|"
         r"a couple of|several) (days?|weeks?|months?|years?) ago", _ago),
    )
)  # fmt: skip
_AGO = re.compile(r"\b(?:\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|"
                  r"twelve|a few|a couple of|several) (?:days?|weeks?|months?|years?) ago\b",
                  re.IGNORECASE)  # fmt: skip


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


# the past forms of common irregular verbs, each to its base: a question asks "what did
# Nate take" of a turn that says "I took"
_IRREGULAR = {
    past: base
    for base, forms in (
        ("be", "was were been"), ("begin", "began begun"), ("bring", "brought"),
        ("build", "built"), ("buy", "bought"), ("catch", "caught"), ("choose", "chose chosen"),
        ("come", "came"), ("do", "did done"), ("draw", "drew drawn"), ("drink", "drank drunk"),
        ("drive", "drove driven"), ("eat", "ate eaten"), ("fall", "fell fallen"),
        ("feel", "felt"), ("find", "found"), ("fly", "flew flown"), ("forget", "forgot"),
        ("get", "got gotten"), ("give", "gave given"), ("go", "went gone"),
        ("grow", "grew grown"), ("have", "had"), ("hear", "heard"), ("hold", "held"),
        ("keep", "kept"), ("know", "knew known"), ("lead", "led"), ("learn", "learnt"),
        ("leave", "left"), ("lose", "lost"), ("make", "made"), ("meet", "met"),
        ("pay", "paid"), ("ride", "rode ridden"), ("run", "ran"), ("say", "said"),
        ("see", "saw seen"), ("sell", "sold"), ("send", "sent"), ("sing", "sang sung"),
        ("sit", "sat"), ("speak", "spoke spoken"), ("spend", "spent"), ("stand", "stood"),
        ("swim", "swam swum"), ("take", "took taken"), ("teach", "taught"),
        ("tell", "told"), ("think", "thought"), ("throw", "threw thrown"),
        ("understand", "understood"), ("wear", "wore worn"), ("win", "won"),
        ("write", "wrote written"),
    )
    for past in forms.split()
}  # fmt: skip


def _stem(w: str) -> str:
    """A light suffix stripper, enough to meet "hiking" with "hike" and "participated"
    with "participate": possessive, plural and verb endings off, then a final "e" and a
    doubled final consonant; an irregular past goes to its base first."""
    w = fold(w).replace("\u2019", "'")
    if w.endswith("'s"):
        w = w[:-2]
    w = _IRREGULAR.get(w, w)
    if len(w) > 4 and w.endswith(("ies", "ied")):
        return w[:-3] + "y"
    for suffix in ("ing", "ed", "es", "s"):
        if len(w) > len(suffix) + 2 and w.endswith(suffix) and not w.endswith("ss"):
            w = w[: -len(suffix)]
            break
    if len(w) > 3 and w.endswith("e") and w.isalpha():
        w = w[:-1]
    if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "aeiouls" and w.isalpha():
        w = w[:-1]
    return w


def _terms(text: str) -> set[str]:
    return {_stem(w) for w in _WORD.findall(text) if fold(w) not in _QUESTION_WORDS}


# words that frame a question rather than say what it is about
_FRAMING = frozenset(
    _stem(w)
    for w in re.findall(
        r"\w+", "mention mentioned recently according say said talk talked tell told describe"
    )
)


_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "when",
        re.compile(
            r"^(?:when|what (?:year|month|date|day|time)|which (?:year|month|day)|"
            r"how long ago)\b"
        ),
    ),
    (
        "figure",
        re.compile(r"^how (?:many|much|long|old|often|far)\b|^what (?:number|amount|price)"),
    ),
    ("person", re.compile(r"^(?:who|whom|whose)\b")),
    (
        "place",
        re.compile(
            r"^where\b|^(?:what|which|in which|in what) (?:city|country|state|place|"
            r"town|park|restaurant|region|location)\b"
        ),
    ),
    ("reason", re.compile(r"^why\b")),
    ("yesno", re.compile(r"^(?:would|did|is|are|does|do|has|have|was|were|can|could|will)\b")),
)
_HEAD = re.compile(r"^(?:what|which) (?:kinds?|types?|sorts?|genres?|forms?) of ([^\W_]+)", re.I)


_ASKS_OBJECT = re.compile(
    r"^(?:what|which \w+|who|whom)\s+(?P<aux>did|does|do|has|have|had|will|would|is|was|are|were)"
    r"\s+(?P<rest>.+)$", re.IGNORECASE)  # fmt: skip


def focus_verb(question: str) -> str:
    """The stem of the verb whose object a "what did <subject> <verb> ..." question asks
    for ("What did Joanna make for ..." -> make; "What is John organizing"); "" for
    other questions. The subject is its leading names and possessives, and what "and"
    joins to them ("Audrey and her friends")."""
    m = _ASKS_OBJECT.match(" ".join(question.strip().rstrip("?").split()))
    if m is None:
        return ""
    words = m.group("rest").split()
    i = 0
    while i < len(words) and (words[i][0].isupper() or fold(words[i]) in ("his", "her", "their")):
        i += 1
        if i < len(words) and fold(words[i]) == "and":  # "Audrey and her friends"
            i += 1
            while i < len(words) and fold(words[i]) in _FUNCTION:
                i += 1
            i += 1
    if i == 0 or i >= len(words) or fold(words[i]) in _FUNCTION:
        return ""
    verb = fold(words[i].strip(",.;:"))
    if fold(m.group("aux")) in ("is", "was", "are", "were") and not verb.endswith(("ing", "ed")):
        return ""  # "what is X's project called": a noun, not a verb of X
    return _stem(verb)


def head_noun(question: str) -> str:
    """The stem of the noun a "what kind of N" question asks a kind of; "" otherwise."""
    m = _HEAD.search(" ".join(question.strip().split()))
    return _stem(m.group(1)) if m else ""


_PLACES = re.compile(r"^(?:what|which|in which|in what) (?:\w+ )?(?:cities|countries|states|"
                     r"places|towns|parks|regions|locations|areas)\b")  # fmt: skip
_AUX = frozenset(re.findall(r"\w+", "has have does do did is are was were can will would"))


def _plural(w: str) -> bool:
    return len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is", "'s"))


def answer_kind(question: str) -> str:
    """What the question asks for: when, figure, person, place, reason, yesno, places (a
    list of places), list (several things: a plural head noun, "the names of", "both"),
    or thing."""
    low = " ".join(question.strip().lower().replace("\u2019", "'").split())
    for kind, pattern in _KINDS:
        if pattern.search(low):
            return kind
    if _PLACES.search(low):
        return "places"
    words = re.findall(r"[\w']+", low)
    if {"names", "both"} & set(words):
        return "list"
    if words and words[0] in ("what", "which"):
        rest = words[1:]
        if rest and rest[0] in ("are", "were"):  # "what are Nate's favourite desserts"
            return "list" if any(_plural(w) for w in rest[1:]) else "thing"
        head = next((i for i, w in enumerate(rest) if w in _AUX), len(rest))
        if any(_plural(w) for w in rest[:head]):  # "what activities has Melanie done"
            return "list"
    return "thing"


# a time said in passing ("yesterday", "last Friday", "a few years back", "in May 2023")
_IN_PASSING = re.compile(
    r"\b(?:(?:just |only )?(?:yesterday|today|tonight|tomorrow|recently|lately|earlier|"
    r"the other day|this (?:morning|afternoon|evening)|last night)"
    rf"|(?:last|next|this|past) (?:{_WEEKDAYS}|week(?:end)?|month|year|summer|winter|spring|"
    r"fall|autumn|time)"
    r"|(?:\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|a few|a couple of|"
    r"several) (?:days?|weeks?|months?|years?) (?:ago|back))\b",
    re.IGNORECASE,
)
# a name the sentence is addressed to after a greeting ("Hey Gina,", "Thanks, Maria!")
_GREETING = (r"(?i:(?:hey|hi|hello|thanks|thank you|wow|whoa|oh|ooh|yeah|yes|yep|haha|aw+|"
             r"congrats|congratulations|sorry|sure|ok|okay|great|cool|nice|good morning|"
             r"morning|dear)[,!]?\s+)")  # fmt: skip
# (one that ends a sentence, "you're right, Caroline.", reads like an apposition, "my
# home country, Sweden.", and is kept)
_VOCATIVE = re.compile(rf"^{_GREETING}+[A-Z][a-z]+(?=\s*[,!.?])")


def _plain(sentence: str, kind: str) -> str:
    """``sentence`` less what answers no question of ``kind``: the name it is addressed to
    and, unless a time or a figure is asked for, the times it mentions in passing (each
    leaves a boundary, so no span runs across it)."""
    sentence = _VOCATIVE.sub(";", sentence)
    if kind in ("when", "figure"):
        return sentence
    return _IN_PASSING.sub(";", _DATED.sub(";", sentence))


@dataclass(frozen=True, slots=True)
class _Tok:
    text: str
    word: bool  # False: punctuation
    asked: bool  # the question holds it
    function: bool  # carries no answer
    name: bool = False  # a capital that does not only start its sentence


def _tokens(sentence: str, asked: set[str]) -> list[_Tok]:
    out: list[_Tok] = []
    for m in _TOKEN.finditer(sentence):
        t = m.group(0)
        word = t[0].isalnum() or t[0] in "$\u20ac\u00a3"
        low = fold(t)
        initial = not any(u.word for u in out) or out[-1].text in (".", "!", "?", ";")
        out.append(_Tok(t, word, word and _stem(t) in asked, word and low in _FUNCTION,
                        word and t[0].isupper() and not initial))  # fmt: skip
    return out


def _figure(t: str) -> bool:
    return t[0].isdigit() or t[0] in "$\u20ac\u00a3" or fold(t) in _NUMBER_WORDS


def _spans(toks: list[_Tok], kind: str, head: str = "",
           verb: str = "") -> list[tuple[float, int, list[str], list[str]]]:  # fmt: skip
    """Every stretch of words the question does not hold, between the words it holds and
    the clause boundaries, scored for the answer kind: (score, position, its words, the
    names among them). A stretch just after the question's verb (``verb``, a stem) is its
    object: favoured."""
    out: list[tuple[float, int, list[str], list[str]]] = []
    start = 0
    n = len(toks)
    while start < n:
        t = toks[start]
        if t.asked or not t.word:
            start += 1
            continue
        if kind != "reason" and fold(t.text) in _CLAUSE and start > 0:
            start += 1
            continue
        end = start
        while end < n:
            u = toks[end]
            if u.asked or (
                not u.word and (u.text in _BOUNDARY or (u.text == "," and kind != "list"))
            ):
                break
            if end > start and u.word and fold(u.text) in _CLAUSE:
                break
            end += 1
        words = [u.text for u in toks[start:end] if u.word and not u.function]
        names = [u.text for u in toks[start:end] if u.name and not u.function]
        if words:
            lead = [fold(u.text) for u in toks[start:end] if u.word][:2]
            # near the words the question holds, just after them most of all; and a span of
            # a few content words before a single one
            score = max(
                [2.0 / (start - j) for j in range(max(0, start - 4), start) if toks[j].asked]
                + [0.0]
            )
            score += max(
                [1.0 / (j - end + 1) for j in range(end, min(n, end + 3)) if toks[j].asked] + [0.0]
            )
            score += 0.25 * min(len(words), 4)
            if verb and any(_stem(toks[j].text) == verb for j in range(max(0, start - 3), start)):
                score += VERB_WEIGHT
            if head and end < n and _stem(toks[end].text) == head:
                # "what kind of art": the words just before "art" say which kind
                score += 3.0
                words = [*words, toks[end].text]
            if (kind == "figure" and any(_figure(w) for w in words)) or (
                kind == "person" and names
            ):
                score += 3.0
            elif kind in ("place", "places") and (
                names or _PLACE_PREPOSITIONS & set(lead)
            ):
                score += 5.0 if names else 2.0  # a named place over a phrase
            elif kind == "reason" and _REASON & set(lead):
                score += 3.0
            elif kind in ("thing", "list") and _titled(toks, start, end):
                score += NAME_WEIGHT
                if fold(words[0]) in _NAMING:  # "called FIFA 23": the name
                    words = words[1:] or words
            score -= 0.15 * max(0, len(words) - 5)
            out.append((score, start, words, names))
        start = max(end, start + 1)
    return out


_QUOTES = frozenset('"\u201c\u201d')
_NAMING = frozenset({"called", "named", "titled"})


def _titled(toks: list[_Tok], start: int, end: int) -> bool:
    """Whether the stretch ``[start, end)`` is a name given to a thing: quoted, or led
    by "called" or "named" ("a game called FIFA 23"), or just after them."""
    if fold(toks[start].text) in _NAMING and end > start + 1:
        return True
    before = toks[start - 1] if start else None
    quoted = (before is not None and before.text in _QUOTES
              and end < len(toks) and toks[end].text in _QUOTES)  # fmt: skip
    return quoted or (before is not None and fold(before.text) in _NAMING) or (
        before is not None and before.text in _QUOTES and start >= 2
        and fold(toks[start - 2].text) in _NAMING)  # fmt: skip


def _narrow(words: list[str], kind: str, names: list[str]) -> list[str]:
    """The part of a chosen span the kind asks for: a figure and its unit; a name."""
    if kind == "figure":
        for i, w in enumerate(words):
            if _figure(w):
                return words[i : i + 2]
    if kind in ("person", "place", "places") and names:
        return names
    return words


def _holds_kind(text: str, kind: str) -> bool:
    """Whether ``text`` has something of the kind asked for (a tie-break between passages
    equally supported)."""
    if kind == "when":
        return bool(_DATE.search(text) or _year(text))
    if kind == "figure":
        return any(_figure(w) for w in _WORD.findall(text))
    if kind in ("person", "place", "places"):
        return bool(_CAPITAL.search(text))
    return False


def _statements(text: str) -> str:
    """``text`` without its questions ("Did you make it?" states nothing)."""
    kept = [s for s in _SENT.findall(text) if not s.rstrip().endswith("?")]
    return " ".join(s.strip() for s in kept)


def _held_together(asked: set[str], text: str) -> set[str]:
    """What ``text`` holds of the question within a sentence and the next: words
    scattered over a long text are not evidence of one thing (the abstention reads this;
    the choice among passages reads all they hold)."""
    sentences = [_terms(s) for s in _SENT.findall(text) if s.strip()] or [_terms(text)]
    return max((asked & (a | b) for a, b in zip(sentences, [*sentences[1:], set()],
                                                 strict=True)),
               key=len, default=set())


class Reader:
    LIST_PARTS = 4  # passages a list answer gathers spans from

    def __init__(self, min_support: float = 0.5) -> None:
        if not 0.0 <= min_support <= 1.0:
            raise ValueError(f"min_support is a share in [0, 1], got {min_support}")
        self.min_support = min_support

    def read(
        self, question: str, evidence: Sequence[Evidence], subject: str | None = None
    ) -> Reply:
        # the time a question names ("in May 2023", "as mentioned on 3 June, 2023") says
        # when to look, which recall has used; it is not what the evidence must hold, and
        # neither are the words that only frame a question ("mentioned", "recently")
        asked = (_terms(_DATED.sub(" ", question)) - _FRAMING
                 - (_terms(subject) if subject else set()))  # fmt: skip
        if not evidence:
            return Reply(ABSTAIN, True, 0.0)
        kind = answer_kind(question)
        # a question asserts nothing: what a passage holds is what its statements hold
        stated = [_statements(e.text) for e in evidence]
        held = [asked & _terms(t) for t in stated]
        together = [_held_together(asked, t) for t in stated]
        # a word the question shares with every passage tells them apart least: the choice
        # weighs each word by how few of the passages hold it
        df = {t: sum(t in h for h in held) for t in asked}
        weight = {t: math.log(1.0 + len(evidence) / df[t]) for t in asked if df[t]}
        total = sum(math.log(1.0 + len(evidence) / 1) for _ in asked) or 1.0
        ranked = sorted(
            (
                (
                    sum(weight[t] for t in h) / total,
                    _holds_kind(t, kind),
                    -i,
                    e,
                    len(g) / len(asked) if asked else 1.0,
                )
                for i, (h, g, t, e) in enumerate(zip(held, together, stated, evidence,
                                                     strict=True))
            ),
            key=lambda r: r[:3],
            reverse=True,
        )
        support = max(r[4] for r in ranked)
        best = ranked[0][3]
        if support < self.min_support:
            return Reply(ABSTAIN, True, support)
        if kind == "when":
            return Reply(
                self._when(self._sentence(asked, _statements(best.text), kind), best, question),
                False,
                support,
                best.source,
            )
        skip = _terms(question) | (_terms(subject) if subject else set())
        parts: list[str] = []
        head = head_noun(question)
        verb = focus_verb(question)
        chosen = [best]
        if kind in ("list", "places"):
            chosen += [r[3] for r in ranked[1:] if r[4] >= max(self.min_support, support * 0.75)]
        for e in chosen[: self.LIST_PARTS]:
            span = self._span(skip, asked, _statements(e.text), kind, head, verb)
            if span and self._verified(span, e.text) and span not in parts:
                parts.append(span)
        if not parts:
            # nothing the question does not already hold, or a figure or name the passage
            # does not carry: no answer
            return Reply(ABSTAIN, True, support, best.source)
        return Reply(", ".join(parts), False, support, best.source)

    @staticmethod
    def _sentence(asked: set[str], text: str, kind: str) -> str:
        sentences: list[str] = [s.strip() for s in _SENT.findall(text) if s.strip()] or [text]
        return max(sentences, key=lambda s: (len(asked & _terms(s)), _holds_kind(s, kind), -len(s)))

    def _span(self, skip: set[str], asked: set[str], text: str, kind: str, head: str,
              verb: str = "") -> str:  # fmt: skip
        # a turn often names what is asked about in one sentence and answers in the next:
        # every sentence's spans compete, weighted by what the sentence and the one before
        # it hold of the question
        sentences = [s.strip() for s in _SENT.findall(text) if s.strip()] or [text]
        held = [len(asked & _terms(s)) for s in sentences]
        best: tuple[float, int, list[str], list[str]] | None = None
        for i, sentence in enumerate(sentences):
            weight = SENTENCE_WEIGHT * held[i] + CONTEXT_WEIGHT * (held[i - 1] if i else 0)
            for score, pos, words, names in _spans(_tokens(_plain(sentence, kind), skip), kind,
                                                   head, verb):  # fmt: skip
                cand = (score + weight, -(i * 10_000 + pos), words, names)
                if best is None or cand[:2] > best[:2]:
                    best = cand
        return "" if best is None else " ".join(_narrow(best[2], kind, best[3]))

    @staticmethod
    def _when(sentence: str, e: Evidence, question: str = "") -> str:
        """The time ``sentence`` (of ``e``) states; else the relative time it, or failing
        that its passage, uses, resolved against when it was said; else that day."""
        if question.strip().lower().startswith("how long ago"):
            ago = _AGO.search(sentence) or _AGO.search(e.text)
            if ago is not None:
                return ago.group(0)
        m = _DATE.search(sentence) or _year(sentence)
        if m is not None:
            return m.group(0)
        if e.said_at:
            said = datetime.fromtimestamp(e.said_at / 1000, tz=UTC)
            for text in (sentence, e.text):
                for pattern, resolve in _RELATIVE:
                    rel = pattern.search(text)
                    if rel is not None:
                        return resolve(said, rel)
            return _day(said)
        return sentence.strip()

    @staticmethod
    def _verified(reply: str, source: str) -> bool:
        """Every figure and capitalised name of the reply stands in its source."""
        return all(f in source for f in _FIGURE.findall(reply)) and all(
            n in source for n in _CAPITAL.findall(reply)
        )
