#!/usr/bin/env python3
"""The LoCoMo harness: memories from a conversation's turns, every question asked, scored.

    tools/locomo.py /work/shared/data/locomo/locomo-dev7.json [-k 10] [--abstain 0.2]

The file has the layout of LoCoMo's ``locomo10.json``: a list of conversations, each with
``conversation`` (``speaker_a``, ``speaker_b``, ``session_N`` lists of turns with
``speaker``, ``dia_id``, ``text`` and sometimes ``blip_caption``, and ``session_N_date_time``)
and ``qa`` (``question``, ``answer`` or ``adversarial_answer``, ``evidence`` dia ids,
``category`` 1-5).

Every conversation gets its own memory, in a container of its own: each turn is one
document (its words; a shared photo adds its caption) whose subject is its speaker, said at
its session's date and time, read by the substrate's own pipeline into the three tiers the
way any text enters them: passages (tier 0), self-contained sentences as memories (tier 1),
typed claims (tier 2). Every question is answered by :meth:`Substrate.respond` as of the
day after the last session: the planner over the claims for a typed question, else the
reader over fused recall (:meth:`Substrate.remember`: passages, memories and the claims of
the subject the question names, fused by reciprocal rank). Arms:

- ``flat``: ``scoped=False`` (passages naming the question's subject are only ranked up);
- ``scoped``: the same memory and question with ``scoped=True`` (hip-0526 §7: the passages
  and memories filtered to the subject the question names, by the names a passage holds
  and its speaker). The two arms differ in that one thing.
- ``bm25``: a plain BM25 over the turns as ``"<speaker>: <text>"`` (SQLite FTS5), as the
  retrieval baseline for evidence recall, read by the same reader.

Evidence recall counts a memory or a claim as the turn it cites.

The vectors come from the substrate's default embedder: all-MiniLM-L6-v2 where it is
installed, else the hashed fallback; ``--embedder minilm`` or ``--embedder hash`` picks one.

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
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import numpy.typing as npt

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "host"))
sys.path.insert(0, str(ROOT / "tools"))

from hirmem.semantic.extract import RuleExtractor  # noqa: E402
from hirmem.semantic.passages import (  # noqa: E402
    PassageEmbedder,
    default_embedder,
    embedder_identity,
)
from hirmem.semantic.reader import ABSTAIN, Reader  # noqa: E402
from hirmem.semantic.reader import Evidence as ReaderEvidence  # noqa: E402
from hirmem.semantic.retrieve import Embedder  # noqa: E402
from hirmem.semantic.stages import Pipeline, Result, StageRun  # noqa: E402
from hirmem.semantic.substrate import Recalled, Substrate  # noqa: E402
from hirmem.semantic.values import Doc, Origin, doc_id, with_origin  # noqa: E402
from locomo_score import score  # noqa: E402

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


_PHOTO_OF = re.compile(r"^(?:(?:a |an )?(?:photo|photograph|photography|picture|image) of )+",
                       re.IGNORECASE)  # fmt: skip


def caption(text: str) -> str:
    """A shared photo's caption as what it shows: an image captioner's "a photo of a
    photo of ..." says only that it is a photo, which the turn says already."""
    return _PHOTO_OF.sub("", " ".join(text.split())) or text


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
                    text = f"{text} [photo: {caption(str(t['blip_caption']))}]"
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
    subject: str | None = None  # the subject the latest retrieval was scoped to

    def build(self, turns: Sequence[Turn]) -> None:
        raise NotImplementedError

    def retrieve(self, question: str, k: int) -> list[Evidence]:
        raise NotImplementedError

    def answer(self, question: str, k: int, reader: Reader) -> tuple[str, list[Evidence]]:
        """The reply to ``question`` and the evidence it was read from (the top ``k``)."""
        found = self.retrieve(question, k)
        return read(reader, question, found, self.subject), found


CONTAINER = "conversation"


def turn_doc(turn: Turn) -> Doc:
    """A turn as a document: its words, its speaker as subject, in the conversation."""
    ref = f"locomo://turn/{turn.dia_id}"
    data = turn.text.encode("utf-8")
    org = Origin.of_bytes(ref, data, "text/plain", _ms(turn.when))
    meta = with_origin({"container": CONTAINER, "subject": turn.speaker}, org)
    return Doc(doc_id(ref, 0, org.sha256), ref, turn.text, meta)


class Remembered:
    """An embedder that embeds a turn's text once for every arm that builds a memory of
    it (the flat and the scoped arm hold the same turns). Only while building: a question
    is embedded afresh by each arm, so its time per question is its own. Bounded: the
    memory is dropped when it holds :data:`bound` texts."""

    def __init__(self, inner: PassageEmbedder, bound: int = 50_000) -> None:
        self.inner, self.bound = inner, bound
        self.name = getattr(inner, "name", type(inner).__qualname__)
        self.building = False
        self._held: dict[str, npt.NDArray[np.float32]] = {}

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, text: str) -> npt.NDArray[np.float32]:
        if not self.building:
            return self.inner.embed(text)
        held = self._held.get(text)
        if held is None:
            if len(self._held) >= self.bound:
                self._held.clear()
            held = self._held[text] = self.inner.embed(text)
        return held


class SubstrateArm(Arm):
    """The semantic substrate: turns through its pipeline into the three tiers, questions
    through :meth:`Substrate.respond` (fused recall and the planner)."""

    def __init__(self, scoped: bool, embedder: PassageEmbedder | None = None) -> None:
        self.scoped = scoped
        self.embedder = embedder
        self.name = "scoped" if scoped else "flat"

    def build(self, turns: Sequence[Turn]) -> None:
        if isinstance(self.embedder, Remembered):
            self.embedder.building = True
        try:
            self._build(turns)
        finally:
            if isinstance(self.embedder, Remembered):
                self.embedder.building = False

    def _build(self, turns: Sequence[Turn]) -> None:
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
        # questions are asked as of just after the conversation's last session: what it
        # said is valid then, whatever today's date is
        stamps = [_ms(t.when) for t in turns if t.when is not None]
        self.at = max(stamps) + 86_400_000 if stamps else None

    def retrieve(self, question: str, k: int) -> list[Evidence]:
        self.subject, hits = self.sub.remember(question, {CONTAINER}, k, scoped=self.scoped,
                                               at=self.at)  # fmt: skip
        return self._turns(hits)

    def answer(self, question: str, k: int, reader: Reader) -> tuple[str, list[Evidence]]:
        """Through :meth:`Substrate.respond`: the planner over the claims, else the reader
        over the fused tiers, with the harness's abstention threshold."""
        self.sub.reader = reader
        r = self.sub.respond(question, {CONTAINER}, k, scoped=self.scoped, at=self.at)
        self.subject = r.subject
        return r.text, self._turns(r.evidence)

    def _turns(self, hits: Iterable[Recalled]) -> list[Evidence]:
        """The turns the evidence came from, best first: a passage, a memory or a claim
        counts as the turn it cites."""
        seen: dict[str, Evidence] = {}
        for h in hits:
            turn = self.by_doc.get(h.source)
            if turn is not None and turn.dia_id not in seen:
                seen[turn.dia_id] = Evidence(turn, h.score)
        return list(seen.values())


_FTS_TERM = re.compile(r"\w+")


class Bm25Arm(Arm):
    """Plain BM25 over the turn documents (SQLite FTS5, Porter tokenizer)."""

    name = "bm25"

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


def read(reader: Reader, question: str, found: Sequence[Evidence], subject: str | None) -> str:
    """The substrate's extractive reader over what an arm retrieved, best first."""
    evidence = [ReaderEvidence(e.turn.text, _ms(e.turn.when), e.turn.dia_id) for e in found]
    return reader.read(question, evidence, subject).text


def _ms(when: datetime | None) -> int:
    return int(when.replace(tzinfo=UTC).timestamp() * 1000) if when is not None else 0


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
    outcomes: list[Outcome] = field(default_factory=list)


def evidence_recall(found: Iterable[Evidence], evidence: Sequence[str]) -> float | None:
    want = set(evidence)
    if not want:
        return None
    got = {e.turn.dia_id for e in found}
    return len(got & want) / len(want)


def run(
    conversations: Sequence[Conversation], arms: Sequence[Arm], k: int, support: float
) -> list[ArmResult]:
    reader = Reader(support)
    results = [ArmResult(a.name) for a in arms]
    for conv in conversations:
        for arm, res in zip(arms, results, strict=True):
            arm.build(conv.turns)
            for q in conv.questions:
                t0 = time.perf_counter()
                reply, found = arm.answer(q.text, k, reader)
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
        f"{n5} adversarial); top k = {k}; the reader abstains when the evidence holds less "
        f"than {threshold:.2f} of what a question asks",
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
               f"{_ci(bootstrap(r.outcomes, adversarial)):<24} ")  # fmt: skip
        cats = " ".join(f"{x:5.3f}" for x in per_cat)
        lines.append(f"{r.name:<8} {f1s}{_ci(bootstrap(r.outcomes, recall)):<24} {cats}  "
                     f"{ms:8.2f}")  # fmt: skip
    lines.append("categories: " + ", ".join(f"c{c} {n}" for c, n in CATEGORY_NAMES.items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", type=Path, help="a file in the layout of LoCoMo's locomo10.json")
    ap.add_argument("-k", type=int, default=10, help="evidence retrieved per question")
    ap.add_argument("--abstain", type=float, default=0.5,
                    help="the reader answers 'No information available' when the best "
                         "evidence holds less than this share of what the question asks "
                         "(one threshold for every arm)")  # fmt: skip
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


def pick_embedder(choice: str | None) -> tuple[PassageEmbedder, str]:
    """The substrate's own default (MiniLM where installed) unless one is asked for."""
    if choice == "minilm":
        from hirmem.embed.minilm import MiniLMEmbedder

        embedder: PassageEmbedder = MiniLMEmbedder()
    elif choice == "hash":
        embedder = Embedder()
    else:
        embedder = default_embedder()
    if isinstance(embedder, Embedder):
        return embedder, "hashed terms (the substrate's fallback)"
    return Remembered(embedder), f"{embedder_identity(embedder)} (the substrate's default)"


if __name__ == "__main__":
    sys.exit(main())
