"""Which known name a question names: a lookup by the question's word runs, not a scan.

A name is matched as whole words: its words (runs of letters and digits of its fold) must
occur, in order and adjacent, among the question's words. The longest such name wins (by
its words), and among names of equal length the one first in code-point order of its fold.

:class:`NameIndex` keys each name by its words, so answering costs the question's word runs
(at most as long as the longest name held), whatever the number of names; it is kept up to
date as names come and go, with a count per name so one name held twice leaves only when
both go.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from hirmem.protocol.identity import fold

__all__ = ["NameIndex", "words_of"]

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def words_of(text: str) -> str:
    """The words of ``text``'s fold, joined by one space."""
    return " ".join(_WORD.findall(fold(text)))


class NameIndex:
    def __init__(self, names: Iterable[str] = ()) -> None:
        self._by_words: dict[str, dict[str, int]] = {}  # words -> folded name -> count
        self._longest = 0  # the most words of any name held
        for n in names:
            self.add(n)

    def add(self, name: str) -> None:
        words = words_of(name)
        if not words:
            return
        held = self._by_words.setdefault(words, {})
        key = fold(name)
        held[key] = held.get(key, 0) + 1
        self._longest = max(self._longest, words.count(" ") + 1)

    def remove(self, name: str) -> None:
        words = words_of(name)
        held = self._by_words.get(words)
        key = fold(name)
        if held is None or key not in held:
            return
        held[key] -= 1
        if not held[key]:
            del held[key]
            if not held:
                del self._by_words[words]

    def matches(self, question: str) -> list[str]:
        """Every folded name held that ``question`` names as whole words."""
        q = _WORD.findall(fold(question))
        out: list[str] = []
        for i in range(len(q)):
            for j in range(i + 1, min(len(q), i + self._longest) + 1):
                out.extend(self._by_words.get(" ".join(q[i:j]), ()))
        return out

    def named(self, question: str) -> str | None:
        """The folded name ``question`` names: the longest by its words, then the first in
        code-point order; None when it names none."""
        found = self.matches(question)
        return min(found, key=lambda k: (-len(words_of(k)), k)) if found else None
