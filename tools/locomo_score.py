"""The LoCoMo question-answering score, ported from the rules the dataset's scorer applies.

LoCoMo (Maharana et al., 2024) scores a reply against the reference answer with token F1
after normalisation, on Porter-stemmed tokens (NLTK's Porter stemmer, as the official
scorer uses). The rules, per question category:

- 1 multi-hop: both sides are split on commas; each reference part takes its best F1
  against any reply part, and the parts' scores are averaged;
- 2 temporal, 4 single-hop: plain token F1;
- 3 open-domain: the reference is cut at its first ';' before plain token F1;
- 5 adversarial (no answer in the conversation): 1 when the reply says
  "no information available" or "not mentioned" (case-insensitive), else 0.

Normalisation, in this order: drop commas, lower-case, drop ASCII punctuation, drop the
words a/an/the/and, collapse white space.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from functools import cache

from nltk.stem import PorterStemmer

ABSTAIN = "No information available"
_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_STEMMER = PorterStemmer()


def normalise(text: str) -> str:
    text = text.replace(",", "").lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


@cache
def _stem(word: str) -> str:
    return str(_STEMMER.stem(word))


def tokens(text: str) -> list[str]:
    return [_stem(w) for w in normalise(text).split()]


def token_f1(reply: str, reference: str) -> float:
    got, want = tokens(reply), tokens(reference)
    same = sum((Counter(got) & Counter(want)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(got), same / len(want)
    return 2 * precision * recall / (precision + recall)


def multi_f1(reply: str, reference: str) -> float:
    """Category 1: each comma-separated reference part, best-matched, averaged."""
    replies = [r.strip() for r in reply.split(",")]
    parts = [g.strip() for g in reference.split(",")]
    return sum(max(token_f1(r, g) for r in replies) for g in parts) / len(parts)


def abstains(reply: str) -> bool:
    low = reply.lower()
    return "no information available" in low or "not mentioned" in low


def score(category: int, reply: str, answer: object) -> float:
    """The official score of ``reply`` for a question of ``category`` with ``answer``."""
    if category == 5:
        return 1.0 if abstains(reply) else 0.0
    reference = str(answer)
    if category == 1:
        return multi_f1(reply, reference)
    if category == 3:
        reference = reference.split(";")[0].strip()
    if category in (2, 3, 4):
        return token_f1(reply, reference)
    raise ValueError(f"LoCoMo has question categories 1 to 5, not {category!r}")
