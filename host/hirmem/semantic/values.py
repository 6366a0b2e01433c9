"""The three values of HIP-0526 §2 — Doc, Chunk, Triple — and what they carry.

Invariants:

- ``Doc.meta["origin"]`` records where a document came from (reference, byte offset and
  size within it, modification time, SHA-256, media type); :func:`origin` is the one
  accessor that reads it back and :func:`with_origin` the one that writes it.
- A :class:`Chunk` is a byte range ``[start, end)`` of its document's UTF-8 text; with zero
  overlap the chunks of a document concatenate back into ``Doc.text`` byte for byte.
- A :class:`Triple` is an *extracted* assertion: it always carries the chunk it was read from
  and the :class:`Span` (byte offsets inside that chunk) of the text it was read from. Its
  constructor refuses a span that does not resolve to the evidence it names.
- A :class:`Claim` is a *caller-supplied* assertion: it has no chunk and no span, names who
  supplied it, and is a different type, so the two can never be confused.
- Identity is computed: ``Triple.id`` / ``Claim.id`` is :func:`hirmem.protocol.identity.triple_id`.
- An absent score (``None``) is full confidence, never zero.
- Temporal bounds ``valid_from`` / ``valid_until`` are milliseconds since the Unix epoch;
  0 is an open bound (the zero value, as in the reference implementation).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hirmem.protocol.identity import fnv1a64, triple_id
from hirmem.semantic.errors import SemanticError, SpanError

__all__ = [
    "OPEN",
    "Chunk",
    "Claim",
    "Doc",
    "Origin",
    "Span",
    "Triple",
    "confidence",
    "doc_id",
    "lineage",
    "origin",
    "with_origin",
]

OPEN = 0  # an open temporal bound


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a document came from (§2.2)."""

    ref: str  # the reference the ingester resolved (path, URL, mem://name, hirmem://…)
    offset: int  # byte offset of the document within the reference
    size: int  # bytes read
    mtime: int  # modification time, ms since the Unix epoch (0: unknown)
    sha256: str  # hex SHA-256 of the bytes read
    media_type: str

    def to_meta(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "offset": self.offset,
            "size": self.size,
            "mtime": self.mtime,
            "sha256": self.sha256,
            "media_type": self.media_type,
        }

    @classmethod
    def of_bytes(
        cls, ref: str, data: bytes, media_type: str, mtime: int = 0, offset: int = 0
    ) -> Origin:
        return cls(ref, offset, len(data), mtime, hashlib.sha256(data).hexdigest(), media_type)


def with_origin(meta: Mapping[str, Any], org: Origin) -> dict[str, Any]:
    """A copy of ``meta`` with the origin written in (the one writer)."""
    out = dict(meta)
    out["origin"] = org.to_meta()
    return out


def origin(doc: Doc) -> Origin:
    """The origin a document records (the one reader). Raises if it records none."""
    raw = doc.meta.get("origin")
    if not isinstance(raw, Mapping):
        raise SemanticError(
            f"document {doc.id} records no origin; an ingester must write one with with_origin()"
        )
    try:
        return Origin(
            str(raw["ref"]),
            int(raw["offset"]),
            int(raw["size"]),
            int(raw["mtime"]),
            str(raw["sha256"]),
            str(raw["media_type"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise SemanticError(f"document {doc.id} has a malformed origin: {exc}") from None


def doc_id(ref: str, offset: int = 0, digest: str = "") -> str:
    """A document id that changes with content: the same reference, offset and content
    (``digest``, the hex SHA-256 of the bytes read) name the same document; an edited
    source is a new document, a new version of the same :func:`lineage`."""
    key = f"{ref}#{offset}#{digest}" if digest else f"{ref}#{offset}"
    return f"{fnv1a64(key.encode()):016x}"


def lineage(doc: Doc) -> str:
    """The versions of one source place share this key (its reference and offset); a
    document that records no origin is a lineage of its own."""
    raw = doc.meta.get("origin")
    if not isinstance(raw, Mapping):
        return doc.id
    org = origin(doc)
    return doc_id(org.ref, org.offset)


@dataclass(frozen=True, slots=True)
class Doc:
    """One parsed source: ``Doc {ID, Source, Text, Meta}``."""

    id: str
    source: str
    text: str
    meta: dict[str, Any] = field(default_factory=dict)

    def replace(self, *, text: str | None = None, meta: Mapping[str, Any] | None = None) -> Doc:
        """A new document; the metadata is always copied (deeply), never shared with ``self``."""
        return Doc(
            self.id,
            self.source,
            self.text if text is None else text,
            copy.deepcopy(dict(self.meta if meta is None else meta)),
        )


@dataclass(frozen=True, slots=True)
class Chunk:
    """A span of a document sized for extraction: ``Chunk {DocID, Index, Text}`` plus its byte
    range ``[start, end)`` in ``Doc.text`` (UTF-8)."""

    doc_id: str
    index: int
    text: str
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.end - self.start != len(self.text.encode("utf-8")) or self.start < 0:
            raise SpanError(
                f"chunk {self.doc_id}#{self.index}: byte range [{self.start}, {self.end}) does "
                f"not match its text of {len(self.text.encode('utf-8'))} bytes"
            )

    @property
    def id(self) -> str:
        return f"{self.doc_id}#{self.index}"


@dataclass(frozen=True, slots=True)
class Span:
    """Byte offsets ``[start, end)`` inside a chunk's UTF-8 text."""

    start: int
    end: int

    @classmethod
    def locate(cls, chunk: Chunk, evidence: str, after: int = 0) -> Span:
        """The span where ``evidence`` occurs in ``chunk`` (first at or after byte ``after``).

        This is how a span is derived from an extraction: the extractor names the text it read
        and the span is where that text is, never an offset somebody typed.
        """
        raw = chunk.text.encode("utf-8")
        needle = evidence.encode("utf-8")
        at = raw.find(needle, after) if needle else -1
        if at < 0:
            raise SpanError(
                f"evidence {evidence[:60]!r} does not occur in chunk {chunk.id}; an assertion "
                "must be read from its chunk"
            )
        return cls(at, at + len(needle))

    def resolve(self, chunk: Chunk) -> str:
        """The chunk text the span covers; raises when it cuts a UTF-8 sequence or overruns."""
        raw = chunk.text.encode("utf-8")
        if not 0 <= self.start <= self.end <= len(raw):
            raise SpanError(
                f"span [{self.start}, {self.end}) lies outside chunk {chunk.id} "
                f"({len(raw)} bytes)"
            )
        try:
            return raw[self.start : self.end].decode("utf-8")
        except UnicodeDecodeError:
            raise SpanError(
                f"span [{self.start}, {self.end}) cuts a UTF-8 sequence in chunk {chunk.id}"
            ) from None


def confidence(score: float | None) -> float:
    """An absent score is full confidence (§2.4), not zero."""
    return 1.0 if score is None else score


def _check_bounds(what: str, valid_from: int, valid_until: int, score: float | None) -> None:
    if valid_from < 0 or valid_until < 0:
        raise SemanticError(f"{what}: temporal bounds are ms since the epoch, 0 for open")
    if valid_until and valid_from and valid_until < valid_from:
        raise SemanticError(f"{what}: valid_until {valid_until} precedes valid_from {valid_from}")
    if score is not None and not 0.0 <= score <= 1.0:
        raise SemanticError(f"{what}: a score is in [0, 1] or absent, got {score}")


@dataclass(frozen=True, slots=True)
class Triple:
    """An extracted assertion: ``Triple {Subject, Predicate, Object, From Chunk, Score}``.

    ``evidence`` is the text the extractor read; ``span`` is where it sits in ``from_chunk``
    and must resolve to exactly that text. ``extractor`` names the extractor (and model) that
    produced the assertion, so an injected batch can be found and retracted as a set.
    """

    subject: str
    predicate: str
    object: str
    from_chunk: Chunk
    score: float | None = None
    span: Span = field(kw_only=True)
    evidence: str = field(kw_only=True)
    extractor: str = field(default="", kw_only=True)
    valid_from: int = field(default=OPEN, kw_only=True)
    valid_until: int = field(default=OPEN, kw_only=True)
    _id: str = field(init=False, repr=False, compare=False, default="")

    def __post_init__(self) -> None:
        object.__setattr__(self, "_id", triple_id(self.subject, self.predicate, self.object))
        got = self.span.resolve(self.from_chunk)
        if got != self.evidence:
            raise SpanError(
                f"span [{self.span.start}, {self.span.end}) of chunk {self.from_chunk.id} reads "
                f"{got[:60]!r}, not the evidence {self.evidence[:60]!r}: a span is derived from "
                "the extraction (Span.locate), never chosen by the caller"
            )
        _check_bounds(f"triple ({self.subject}, {self.predicate}, {self.object})",
                      self.valid_from, self.valid_until, self.score)  # fmt: skip

    @property
    def id(self) -> str:
        """The computed identity (hirmem.protocol.identity.triple_id), minted once."""
        return self._id

    @property
    def confidence(self) -> float:
        return confidence(self.score)

    @property
    def doc_offset(self) -> tuple[int, int]:
        """The evidence as a byte range of the document text (chunks tile the text)."""
        return self.from_chunk.start + self.span.start, self.from_chunk.start + self.span.end


@dataclass(frozen=True, slots=True)
class Claim:
    """A caller-supplied assertion: no chunk, no span, and the name of who supplied it.

    It resolves to no document, so it is kept apart from what a source asserted (§2.1).
    """

    subject: str
    predicate: str
    object: str
    supplied_by: str
    score: float | None = None
    valid_from: int = OPEN
    valid_until: int = OPEN

    _id: str = field(init=False, repr=False, compare=False, default="")

    def __post_init__(self) -> None:
        object.__setattr__(self, "_id", triple_id(self.subject, self.predicate, self.object))
        if not self.supplied_by:
            raise SemanticError("a caller-supplied claim must name who supplied it")
        _check_bounds(f"claim ({self.subject}, {self.predicate}, {self.object})",
                      self.valid_from, self.valid_until, self.score)  # fmt: skip

    @property
    def id(self) -> str:
        """The computed identity (hirmem.protocol.identity.triple_id), minted once."""
        return self._id

    @property
    def confidence(self) -> float:
        return confidence(self.score)
