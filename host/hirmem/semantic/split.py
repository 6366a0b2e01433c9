"""Splitters: chunks that tile the text.

Invariants: with zero overlap the chunks of a document concatenate back into ``Doc.text``
byte for byte, each chunk's ``[start, end)`` is its byte range in the document's UTF-8
text, and no boundary falls inside a UTF-8 sequence (boundaries are between code points).
A chunk is at most ``max_bytes`` long unless a single code point is longer.
"""

from __future__ import annotations

import re

from hirmem.semantic.errors import SemanticError
from hirmem.semantic.values import Chunk, Doc

__all__ = ["FixedSplitter", "SentenceSplitter", "tile"]

# A boundary after sentence-ending punctuation and the white space that follows it, or after
# a run of line breaks. The white space stays with the piece before it, so pieces tile.
_BOUNDARY = re.compile(r"[.!?][\"')\]]*[ \t]+|\n+")


def _cut(piece: str, max_bytes: int) -> list[str]:
    """Cut a piece longer than ``max_bytes`` at code-point boundaries."""
    out: list[str] = []
    start = 0
    size = 0
    for i, ch in enumerate(piece):
        n = len(ch.encode("utf-8"))
        if size + n > max_bytes and i > start:
            out.append(piece[start:i])
            start, size = i, 0
        size += n
    out.append(piece[start:])
    return out


def tile(doc: Doc, pieces: list[str], overlap: int = 0) -> list[Chunk]:
    """Chunks from consecutive pieces of ``doc.text``; checks they tile it."""
    if "".join(pieces) != doc.text:
        raise SemanticError(f"splitting {doc.id}: the pieces do not tile the text")
    chunks: list[Chunk] = []
    at = 0
    prev = ""
    for i, piece in enumerate(pieces):
        n = len(piece.encode("utf-8"))
        if overlap and prev:
            back = _tail(prev, overlap)
            b = len(back.encode("utf-8"))
            chunks.append(Chunk(doc.id, i, back + piece, at - b, at + n))
        else:
            chunks.append(Chunk(doc.id, i, piece, at, at + n))
        at += n
        prev = piece
    return chunks


def _tail(text: str, max_bytes: int) -> str:
    """The longest suffix of ``text`` of at most ``max_bytes`` bytes (whole code points)."""
    size = 0
    i = len(text)
    while i > 0:
        n = len(text[i - 1].encode("utf-8"))
        if size + n > max_bytes:
            break
        size += n
        i -= 1
    return text[i:]


class SentenceSplitter:
    """Sentences and paragraphs packed greedily into chunks of at most ``max_bytes``.

    ``overlap`` (bytes, default 0) prefixes each chunk with the end of the previous one;
    tiling is then by ``[start, end)`` ranges rather than by concatenation.
    """

    name = "split/sentence"

    def __init__(self, max_bytes: int = 1024, overlap: int = 0) -> None:
        if max_bytes < 1 or overlap < 0 or overlap >= max_bytes:
            raise SemanticError("max_bytes must be >= 1 and 0 <= overlap < max_bytes")
        self.max_bytes = max_bytes
        self.overlap = overlap

    def split(self, doc: Doc) -> list[Chunk]:
        text = doc.text
        if not text:
            return []
        pieces: list[str] = []
        last = 0
        for m in _BOUNDARY.finditer(text):
            pieces.append(text[last : m.end()])
            last = m.end()
        if last < len(text):
            pieces.append(text[last:])
        packed: list[str] = []
        cur: list[str] = []
        size = 0
        limit = self.max_bytes
        for piece in pieces:
            n = len(piece.encode("utf-8"))
            if n > limit:
                if cur:
                    packed.append("".join(cur))
                    cur, size = [], 0
                packed.extend(_cut(piece, limit))
                continue
            if size + n > limit and cur:
                packed.append("".join(cur))
                cur, size = [], 0
            cur.append(piece)
            size += n
        if cur:
            packed.append("".join(cur))
        return tile(doc, packed, self.overlap)


class FixedSplitter:
    """Chunks of ``size`` bytes, each boundary moved back to the nearest code point start."""

    name = "split/fixed"

    def __init__(self, size: int = 512) -> None:
        if size < 4:
            raise SemanticError("a fixed chunk is at least 4 bytes (one code point)")
        self.size = size

    def split(self, doc: Doc) -> list[Chunk]:
        raw = doc.text.encode("utf-8")
        pieces: list[str] = []
        at = 0
        while at < len(raw):
            end = min(at + self.size, len(raw))
            while end < len(raw) and (raw[end] & 0xC0) == 0x80:
                end -= 1  # a continuation byte: the boundary would cut a sequence
            pieces.append(raw[at:end].decode("utf-8"))
            at = end
        return tile(doc, pieces)
