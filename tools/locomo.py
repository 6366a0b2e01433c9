#!/usr/bin/env python3
"""The LoCoMo harness: memories from a conversation's turns, every question asked, scored.

    tools/locomo.py /work/shared/data/locomo/locomo-dev7.json [-k 10] [--abstain 0.2]

The file has the layout of LoCoMo's ``locomo10.json``: a list of conversations, each with
``conversation`` (``speaker_a``, ``speaker_b``, ``session_N`` lists of turns with
``speaker``, ``dia_id``, ``text`` and sometimes ``blip_caption``, and ``session_N_date_time``)
and ``qa`` (``question``, ``answer`` or ``adversarial_answer``, ``evidence`` dia ids,
``category`` 1-5).

Every conversation gets its own memory, in a container of its own: each turn is one
document (its words; a shared photo adds its caption) whose subject is its speaker, read by
the substrate's own pipeline and kept as passages (tier 0). Arms:

- ``flat``: :meth:`Substrate.recall` (hybrid: BM25 and vectors, fused by reciprocal rank)
  with ``scoped=False``;
- ``scoped``: the same memory and question with ``scoped=True`` (hip-0526 §7: recall
  filtered to the subject the question names, by the names a passage holds and its
  speaker). The two arms differ in that one thing.
- ``bm25``: a plain BM25 over the turns as ``"<speaker>: <text>"`` (SQLite FTS5), as the
  retrieval baseline for evidence recall.

The vectors come from all-MiniLM-L6-v2 where it is installed (``--embedder minilm``, the
default then), else from the substrate's hashed embedder (``--embedder hash``).

One deterministic extractive reader (:func:`read`) answers from what an arm retrieved, with
one abstention threshold for every arm that scores by similarity. No model is called.
Reported per arm: F1 (the official scorer's rules, :mod:`locomo_score`) for answerable
questions (categories 1-4) and adversarial ones (5) separately and per category, evidence
recall (the share of a question's annotated evidence turns among the top k), each with a
95 % bootstrap interval over conversations, and the time per question.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sqlite3
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "host"))
sys.path.insert(0, str(ROOT / "tools"))

from hirmem.semantic.extract import RuleExtractor  # noqa: E402
from hirmem.semantic.passages import PassageEmbedder  # noqa: E402
from hirmem.semantic.stages import Pipeline, Result, StageRun  # noqa: E402
from hirmem.semantic.substrate import Substrate  # noqa: E402
from hirmem.semantic.values import Doc, Origin, doc_id, with_origin  # noqa: E402
from locomo_score import ABSTAIN, score  # noqa: E402

__all__ = ["ABSTAIN", "load", "main", "read", "run"]

CATEGORIES = (1, 2, 3, 4, 5)
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop",
                  5: "adversarial"}  # fmt: skip


# ---- the data -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Turn:
    dia_id: str
    speaker: str
    text: str
    when: datetime | None  # the session's date and time

    def document(self) -> str:
        return f"{self.speaker}: {self.text}"


@dataclass(frozen=True, slots=True)
class Question:
    text: str
    answer: str
    category: int
    evidence: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Conversation:
    sample_id: str
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]


_SESSION = re.compile(r"^session_(\d+)$")


def parse_when(text: str) -> datetime | None:
    """LoCoMo's session stamps: ``1:56 pm on 8 May, 2023``."""
    try:
        return datetime.strptime(" ".join(text.split()), "%I:%M %p on %d %B, %Y")
    except ValueError:
        return None


def load(path: Path) -> list[Conversation]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(raw, list):
        raise SystemExit(f"{path}: expected a list of conversations (locomo10.json layout)")
    out: list[Conversation] = []
    for item in raw:
        conv = item["conversation"]
        sessions = sorted(
            (int(m.group(1)), key) for key in conv if (m := _SESSION.match(key))
        )
        turns = []
        for n, key in sessions:
            when = parse_when(str(conv.get(f"session_{n}_date_time", "")))
            for t in conv[key]:
                text = str(t.get("text", ""))
                if t.get("blip_caption"):
                    text = f"{text} [shares a photo of {t['blip_caption']}]"
                turns.append(Turn(str(t["dia_id"]).strip(), str(t["speaker"]), text, when))
        questions = tuple(
            Question(
                str(q["question"]),
                str(q.get("answer", q.get("adversarial_answer", ""))),
                int(q["category"]),
                tuple(str(e).strip() for e in q.get("evidence", [])),
            )
            for q in item["qa"]
        )
        out.append(Conversation(str(item.get("sample_id", len(out))), tuple(turns), questions))
    return out


# ---- what an arm retrieves ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Evidence:
    turn: Turn
    score: float


class Arm:
    name = ""
    reads = True  # whether its scores are similarities the reader's threshold applies to

    def build(self, turns: Sequence[Turn]) -> None:
        raise NotImplementedError

    def retrieve(self, question: str, k: int) -> list[Evidence]:
        raise NotImplementedError


CONTAINER = "conversation"


def turn_doc(turn: Turn) -> Doc:
    """A turn as a document: its words, its speaker as subject, in the conversation."""
    ref = f"locomo://turn/{turn.dia_id}"
    data = turn.text.encode("utf-8")
    when = int(turn.when.timestamp() * 1000) if turn.when is not None else 0
    org = Origin.of_bytes(ref, data, "text/plain", when)
    meta = with_origin({"container": CONTAINER, "subject": turn.speaker}, org)
    return Doc(doc_id(ref, 0, org.sha256), ref, turn.text, meta)


class SubstrateArm(Arm):
    """The semantic substrate: turns through its pipeline, questions through ``recall``."""

    def __init__(self, scoped: bool, embedder: PassageEmbedder | None = None) -> None:
        self.scoped = scoped
        self.embedder = embedder
        self.name = "scoped" if scoped else "flat"

    def build(self, turns: Sequence[Turn]) -> None:
        self.sub = Substrate.in_memory(passage_embedder=self.embedder)
        pipeline = Pipeline(None, extractor=RuleExtractor())
        self.by_doc: dict[str, Turn] = {}
        for t in turns:
            doc = turn_doc(t)
            now = self.sub.clock()
            result = Result(runs=[StageRun("ingest", "locomo", now, now, (doc.source,),
                                           (doc.id,))])  # fmt: skip
            self.sub.absorb(pipeline.process([doc], result))
            self.by_doc[doc.id] = t

    def retrieve(self, question: str, k: int) -> list[Evidence]:
        _, hits = self.sub.recall(question, {CONTAINER}, k, scoped=self.scoped)
        seen: dict[str, Evidence] = {}
        for h in hits:
            turn = self.by_doc.get(h.doc)
            if turn is not None and turn.dia_id not in seen:
                seen[turn.dia_id] = Evidence(turn, h.similarity)
        return list(seen.values())


_FTS_TERM = re.compile(r"\w+")


class Bm25Arm(Arm):
    """Plain BM25 over the turn documents (SQLite FTS5, Porter tokenizer)."""

    name = "bm25"
    reads = False  # BM25 scores are not on the similarity scale of the threshold

    def build(self, turns: Sequence[Turn]) -> None:
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE turns USING fts5(body, tokenize='porter unicode61')")
        self.turns = list(turns)
        self.db.executemany("INSERT INTO turns(rowid, body) VALUES (?, ?)",
                            [(i, t.document()) for i, t in enumerate(self.turns)])  # fmt: skip

    def retrieve(self, question: str, k: int) -> list[Evidence]:
        terms = sorted({w.lower() for w in _FTS_TERM.findall(question)})
        if not terms:
            return []
        query = " OR ".join(f'"{t}"' for t in terms)
        rows = self.db.execute(
            "SELECT rowid, bm25(turns) FROM turns WHERE turns MATCH ? ORDER BY bm25(turns) "
            "LIMIT ?",
            (query, k),
        ).fetchall()
        return [Evidence(self.turns[i], -float(s)) for i, s in rows]


# ---- the deterministic reader ---------------------------------------------------------------

_WORD = re.compile("[\\w'\u2019-]+")
_SENT = re.compile(r"[^.!?]+[.!?]*")
_STOP = frozenset(
    re.findall(
        r"\w+",
        """a an the and or but of to in on at for with from by is are was were be been
    being do does did has have had i you he she it we they me him her us them my your his its
    our their what which who whom whose when where why how that this these those there here so
    as if than then too very just also not no yes""",
    )
)
_YEAR = re.compile(r"\b(19|20)\d{2}\b")
_MONTHS = tuple(datetime(2000, m, 1).strftime("%B").lower() for m in range(1, 13))


def _day(d: datetime) -> str:
    return f"{d.day} {d.strftime('%B')} {d.year}"


_RELATIVE: tuple[tuple[str, Callable[[datetime], str]], ...] = (
    ("yesterday", lambda d: _day(d - timedelta(days=1))),
    ("today", _day),
    ("last night", lambda d: _day(d - timedelta(days=1))),
    ("last week", lambda d: f"the week before {_day(d)}"),
    ("last weekend", lambda d: f"the weekend before {_day(d)}"),
    ("last month", lambda d: (d.replace(day=1) - timedelta(days=1)).strftime("%B %Y")),
    ("last year", lambda d: str(d.year - 1)),
    ("next month", lambda d: (d.replace(day=28) + timedelta(days=4)).strftime("%B %Y")),
    ("this month", lambda d: d.strftime("%B %Y")),
    ("this year", lambda d: str(d.year)),
)


def _content(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)} - _STOP


def _best_sentence(question: str, text: str) -> str:
    """The sentence of ``text`` that shares the most content words with the question."""
    want = _content(question)
    sentences: list[str] = [s.strip() for s in _SENT.findall(text) if s.strip()] or [text]
    return max(sentences, key=lambda s: (len(_content(s) & want), -len(s)))


def _when(sentence: str, turn: Turn) -> str:
    """A time for a 'when' question: stated in the sentence, or relative to the session."""
    low = sentence.lower()
    for month in _MONTHS:
        m = re.search(rf"\b(\d{{1,2}} )?{month}( \d{{4}})?\b", low)
        if m:
            return str(m.group(0))
    if (y := _YEAR.search(sentence)) is not None:
        return y.group(0)
    if turn.when is not None:
        for phrase, resolve in _RELATIVE:
            if phrase in low:
                return resolve(turn.when)
        return _day(turn.when)
    return sentence


def read(question: str, found: Sequence[Evidence], threshold: float | None) -> str:
    """An extractive answer from the best evidence, or the abstention.

    Abstains when nothing was retrieved or (``threshold`` set) when the best evidence scores
    below it. Otherwise the sentence of the best turn closest to the question; for a 'when'
    question the time it states or implies; for any other, that sentence without the words
    the question already holds (an answer is what the question does not know).
    """
    if not found or (threshold is not None and found[0].score < threshold):
        return ABSTAIN
    best = found[0].turn
    sentence = _best_sentence(question, best.text)
    if question.strip().lower().startswith(("when", "what year", "which year", "how long ago")):
        return _when(sentence, best)
    asked = _content(question) | {w.lower() for w in _WORD.findall(best.speaker)}
    left = [w for w in _WORD.findall(sentence) if w.lower() not in asked]
    return " ".join(left) if left else sentence


# ---- scoring --------------------------------------------------------------------------------


@dataclass
class Outcome:
    conversation: str
    category: int
    f1: float
    recall: float | None  # None when the question names no evidence
    seconds: float


@dataclass
class ArmResult:
    name: str
    reads: bool
    outcomes: list[Outcome] = field(default_factory=list)


def evidence_recall(found: Iterable[Evidence], evidence: Sequence[str]) -> float | None:
    want = set(evidence)
    if not want:
        return None
    got = {e.turn.dia_id for e in found}
    return len(got & want) / len(want)


def run(
    conversations: Sequence[Conversation], arms: Sequence[Arm], k: int, threshold: float
) -> list[ArmResult]:
    results = [ArmResult(a.name, a.reads) for a in arms]
    for conv in conversations:
        for arm, res in zip(arms, results, strict=True):
            arm.build(conv.turns)
            for q in conv.questions:
                t0 = time.perf_counter()
                found = arm.retrieve(q.text, k)
                reply = read(q.text, found, threshold if arm.reads else None)
                spent = time.perf_counter() - t0
                res.outcomes.append(Outcome(conv.sample_id, q.category,
                                            score(q.category, reply, q.answer),
                                            evidence_recall(found, q.evidence), spent))  # fmt: skip
    return results


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def bootstrap(
    outcomes: Sequence[Outcome], value: Callable[[Outcome], float | None],
    rounds: int = 1000, seed: int = 26,
) -> tuple[float, float, float]:
    """The mean of ``value`` over questions, and its 95 % interval from resampling whole
    conversations with replacement (questions within a conversation are not independent)."""
    by_conv: dict[str, list[float]] = {}
    for o in outcomes:
        v = value(o)
        if v is not None:
            by_conv.setdefault(o.conversation, []).append(v)
    everything = [v for vs in by_conv.values() for v in vs]
    if not everything:
        return float("nan"), float("nan"), float("nan")
    convs = sorted(by_conv)
    rng = random.Random(seed)
    means = []
    for _ in range(rounds):
        sample = [v for c in rng.choices(convs, k=len(convs)) for v in by_conv[c]]
        means.append(_mean(sample))
    means.sort()
    return _mean(everything), means[int(0.025 * rounds)], means[int(0.975 * rounds) - 1]


def _ci(m: tuple[float, float, float]) -> str:
    return f"{m[0]:.3f} [{m[1]:.3f}, {m[2]:.3f}]"


def report(results: Sequence[ArmResult], conversations: Sequence[Conversation], k: int,
           threshold: float) -> str:  # fmt: skip
    nq = sum(len(c.questions) for c in conversations)
    n5 = sum(q.category == 5 for c in conversations for q in c.questions)
    lines = [
        f"LoCoMo: {len(conversations)} conversations, {nq} questions ({nq - n5} answerable, "
        f"{n5} adversarial); top k = {k}; the reader abstains below {threshold:.2f} similarity",
        f"{'arm':<8} {'answerable F1 [95% CI]':<24} {'adversarial F1 [95% CI]':<24} "
        f"{'evidence r, 1-4 [95% CI]':<24} "
        + " ".join(f"{'c' + str(c):>5}" for c in CATEGORIES) + "  ms/question",
    ]
    for r in results:
        def answerable(o: Outcome) -> float | None:
            return o.f1 if o.category != 5 else None

        def adversarial(o: Outcome) -> float | None:
            return o.f1 if o.category == 5 else None

        def recall(o: Outcome) -> float | None:
            return o.recall if o.category != 5 else None

        per_cat = [_mean([o.f1 for o in r.outcomes if o.category == c]) for c in CATEGORIES]
        ms = 1000 * _mean([o.seconds for o in r.outcomes])
        f1s = (f"{_ci(bootstrap(r.outcomes, answerable)):<24} "
               f"{_ci(bootstrap(r.outcomes, adversarial)):<24} ") if r.reads else (
               f"{'(retrieval only)':<24} {'':<24} ")  # fmt: skip
        cats = " ".join(f"{x:5.3f}" for x in per_cat) if r.reads else " ".join(
            f"{'-':>5}" for _ in CATEGORIES)  # fmt: skip
        lines.append(f"{r.name:<8} {f1s}{_ci(bootstrap(r.outcomes, recall)):<24} {cats}  "
                     f"{ms:8.2f}")  # fmt: skip
    lines.append("categories: " + ", ".join(f"c{c} {n}" for c, n in CATEGORY_NAMES.items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", type=Path, help="a file in the layout of LoCoMo's locomo10.json")
    ap.add_argument("-k", type=int, default=10, help="evidence retrieved per question")
    ap.add_argument("--abstain", type=float, default=0.2,
                    help="the reader answers 'No information available' below this "
                         "similarity (one threshold for every arm)")  # fmt: skip
    ap.add_argument("--conversations", type=int, default=0, help="only the first N")
    ap.add_argument("--embedder", choices=("minilm", "hash"), default=None,
                    help="vectors for the passages (default: minilm where installed)")
    args = ap.parse_args(argv)
    conversations = load(args.data)
    if args.conversations:
        conversations = conversations[: args.conversations]
    embedder, name = pick_embedder(args.embedder)
    arms: list[Arm] = [Bm25Arm(), SubstrateArm(False, embedder), SubstrateArm(True, embedder)]
    results = run(conversations, arms, args.k, args.abstain)
    print(report(results, conversations, args.k, args.abstain))
    print(f"embedder: {name}")
    return 0


def pick_embedder(choice: str | None) -> tuple[PassageEmbedder | None, str]:
    """MiniLM when asked for or (no choice) installed; else the substrate's hashed one."""
    if choice in (None, "minilm"):
        from hirmem.memory.minilm import MiniLMEmbedder, MiniLMUnavailable

        try:
            return _Sized(MiniLMEmbedder(), 384), "all-MiniLM-L6-v2 (384-d)"
        except MiniLMUnavailable:
            if choice == "minilm":
                raise
    return None, "hashed terms (the substrate's fallback)"


class _Sized:
    """An embedder with its dimension, as the passage index wants it."""

    def __init__(self, inner: object, dim: int) -> None:
        self.inner = inner
        self.dim = dim

    def embed(self, text: str) -> Any:
        return self.inner.embed(text)  # type: ignore[attr-defined]


if __name__ == "__main__":
    sys.exit(main())
