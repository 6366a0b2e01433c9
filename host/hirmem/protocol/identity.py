"""Semantic identity of triples, shared bit-for-bit with the Go reference implementation.

``fold`` normalises one part of a triple the way the Go code does
(``strings.ToLower(strings.Join(strings.Fields(s), " "))`` over Go strings):

1. Bytes are decoded like Go's ``utf8.DecodeRune``: well-formed UTF-8 (no overlongs, no
   surrogates, nothing above U+10FFFF) decodes normally; every byte that does not start a
   well-formed sequence becomes ONE U+FFFD and decoding resumes at the next byte.  Python's
   ``errors="replace"`` replaces maximal subparts instead (``b"\\xe2\\x82"`` gives one U+FFFD,
   Go gives two), so a dedicated codecs error handler is used.  Lone surrogates in a ``str``
   become U+FFFD, as they would after a round trip through Go.
2. The text is split on runs of white space as Go's ``unicode.IsSpace`` defines it, empty
   fields are dropped and the rest are joined with one space.  ``str.split()`` is not used
   because it also splits on U+001C..U+001F, which Go does not.
3. Runes are lower-cased with the SIMPLE case mapping (Go's ``unicode.ToLower``), without
   normalisation.  ``str.lower()`` applies the full mapping (U+0130 -> "i" + U+0307) and the
   final-sigma rule (U+03A3 -> U+03C2 at word end); both are neutralised by mapping U+0130 to
   "i" and U+03A3 to U+03C3 first.  For every other code point full and simple lower-case
   mappings coincide (checked by the tests).

``triple_id`` is 64-bit FNV-1a over ``fold(s) 0x00 fold(p) 0x00 fold(o) 0x00`` (UTF-8),
rendered as 16 lower-case hex digits.
"""

from __future__ import annotations

import codecs
import re
from typing import Final

__all__ = ["EDGE_CASES", "fnv1a64", "fold", "triple_id"]

FNV64_OFFSET: Final = 0xCBF29CE484222325
FNV64_PRIME: Final = 0x100000001B3
_MASK64: Final = 0xFFFFFFFFFFFFFFFF

_ERROR_HANDLER: Final = "hirmem.protocol.identity.go_utf8"


def _go_replace(exc: UnicodeError) -> tuple[str, int]:
    """Replace the single byte at ``exc.start`` with U+FFFD and resume at the next byte."""
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    return "\ufffd", exc.start + 1


codecs.register_error(_ERROR_HANDLER, _go_replace)

# Go unicode.IsSpace: Latin-1 "\t\n\v\f\r", " ", U+0085, U+00A0; beyond Latin-1 the
# White_Space property: U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000.
_SPACE_RUN: Final = re.compile(
    "[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+"
)
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def _to_text(s: str | bytes) -> str:
    if isinstance(s, bytes):
        return s.decode("utf-8", errors=_ERROR_HANDLER)
    if _SURROGATE.search(s) is None:
        return s
    return _SURROGATE.sub("\ufffd", s)


def fold(s: str | bytes) -> str:
    """Normalise one triple part: Go-style decode, collapse white space, simple lower-case."""
    if s.isascii():
        # bytes.split() splits on exactly Go's ASCII white space (no U+001C..U+001F).
        raw = s if isinstance(s, bytes) else s.encode("ascii")
        return b" ".join(raw.split()).lower().decode("ascii")
    text = _SPACE_RUN.sub(" ", _to_text(s)).strip(" ")
    if text.isascii():
        return text.lower()
    return text.replace("\u0130", "i").replace("\u03a3", "\u03c3").lower()


def fnv1a64(data: bytes) -> int:
    """64-bit FNV-1a of ``data``."""
    h = FNV64_OFFSET
    prime = FNV64_PRIME
    mask = _MASK64
    for byte in data:
        h = ((h ^ byte) * prime) & mask
    return h


def triple_id(s: str | bytes, p: str | bytes, o: str | bytes) -> str:
    """Identity of a (subject, predicate, object) triple as 16 lower-case hex digits."""
    data = b"".join(fold(part).encode("utf-8") + b"\x00" for part in (s, p, o))
    return f"{fnv1a64(data):016x}"


# Interesting inputs for cross-implementation test vectors (raw bytes, may be invalid UTF-8).
EDGE_CASES: Final[tuple[tuple[bytes, bytes, bytes], ...]] = (
    # The reference ids.
    (b"Alice", b"knows", b"Bob"),
    (b"  Alice  Smith ", b"WORKS_AT", b"Acme\tCorp"),
    ("é".encode(), "ß".encode(), "İ".encode()),
    (b"", b"", b""),
    # Case mapping: U+0130 is simple-mapped to "i"; no final-sigma rule.
    ("\u0130stanbul".encode(), "KAP\u0130".encode(), "\u0130".encode()),
    ("ΟΔΟΣ".encode(), "ΟΔΟΣ ΟΔΟΣ".encode(), "Σ".encode()),
    ("ΣΟΦΟΣ".encode(), "ὈΔΥΣΣΕΎΣ".encode(), "aΣ".encode()),
    # Mixed-case Greek / Cyrillic / others.
    ("ΑθΗνΑ".encode(), "МоСкВа".encode(), "ЁЖИК Ǆ ǅ ẞ".encode()),
    # Unicode white space that splits.
    ("a\u00a0b".encode(), "a\u3000b".encode(), "\u3000a\u00a0\u00a0b\u3000".encode()),
    ("a\u0085b".encode(), "a\u1680b\u2000c\u200ad".encode(), "a\u2028b\u2029c".encode()),
    ("a\u202fb".encode(), "a\u205fb".encode(), b"a\x0bb\x0cc\rd\ne"),
    # Not white space for Go (Python's str.split disagrees on U+001C..U+001F).
    (b"a\x1cb", b"a\x1db", b"a\x1eb\x1fc"),
    ("a\u200bb".encode(), "\u200b".encode(), "a \u200b b".encode()),
    ("a\u180eb".encode(), "a\ufeffb".encode(), b"a\x00b"),
    # Invalid UTF-8: every offending byte becomes its own U+FFFD.
    (b"\x80", b"\xe2\x82", b"\xc0\xaf"),
    (b"\xed\xa0\x80", b"\xff", b"a\xe2\x82b\xf0\x9f\x98"),
    (b"\xf4\x90\x80\x80", b"\xfe\xff", b"\xe0\x80\x80"),
    (b"A\x80B \xc3", b"\xc3\x28", b"\xf0\x28\x8c\xbc"),
    # A genuine U+FFFD and its invalid-byte look-alike.
    ("\ufffd".encode(), b"\xef\xbf\xbd\x80", "X\ufffdY".encode()),
    # White-space mixes: leading, trailing, internal, only white space.
    (b" \t\n lead", b"trail \r\n\t ", b"in \t\n\x0b\x0c\r  ternal"),
    (b"   ", "\u00a0\u3000\t".encode(), b"a  b\t\tc\n\nd"),
    ("  Ünïcödé \u2003 Wörds ".encode(), b"MiXeD CaSe", "Ωmega\u2009ΩMEGA".encode()),
)
