"""The assertion ledger: repetition, temporal bounds, retraction and erasure (§2).

Invariants:

- One edge per identity (:func:`hirmem.protocol.identity.triple_id`). The same assertion arriving
  again raises ``count``, keeps the better confidence and records every source; the very
  same source arriving again (the same chunk, span and extractor: a re-ingest) changes
  nothing.
- Each source says what kind it is — ``extracted`` (a chunk and a span), ``supplied`` (who
  supplied it) or ``derived`` (the rule and the antecedent ids) — so what a source asserted,
  what a caller told us and what we concluded never look alike. A derivation with no
  antecedents is refused.
- Three instants stay apart: ``valid_from``/``valid_until`` (when the world was that way),
  ``recorded_at``/``retracted_at`` (when the ledger believed it, stamped by the ledger's own
  clock and never taken from the caller) and the ``as_of`` instant of a read.
- The span is versioned: every change to it (a close, a bound set by a later arrival) is
  kept with the ledger instant it was made at (``Edge.spans``), so an ``as_of`` read sees
  the span as it was believed then — closed later means still open as of before the close.
- :meth:`Ledger.close_span` only ever shortens a span; closing twice cannot revive it. A
  repetition never reopens a closed span either.
- :meth:`Ledger.retract` keeps the record and marks it withdrawn; :meth:`Ledger.erase`
  removes the record and leaves a :class:`Tombstone` (id, when, why — not the content).
- A tombstone stands: the erased assertion arriving again (a re-read source, a caller, a
  rule) is refused (:class:`~hirmem.semantic.errors.Erased`), so an erasure is never
  undone silently. Only :meth:`Ledger.lift` takes a tombstone away, and it leaves a
  :class:`Lifted` record (the tombstone, when it was lifted and why) that is kept.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Literal

from hirmem.protocol.clock import now_ms
from hirmem.protocol.identity import fold, triple_id
from hirmem.semantic import binrow
from hirmem.semantic.errors import Erased, LedgerError, ProvError
from hirmem.semantic.names import NameIndex
from hirmem.semantic.stores.base import check_terms
from hirmem.semantic.stores.db import Where, epoch, has_table, open_db
from hirmem.semantic.values import OPEN, Claim, Triple, confidence

__all__ = ["Edge", "Ledger", "LedgerTriples", "Lifted", "SQLiteLedger", "Source", "Tombstone"]

SourceKind = Literal["extracted", "supplied", "derived"]



@dataclass(frozen=True, slots=True)
class Source:
    """One arrival of an assertion."""

    kind: SourceKind
    ref: str  # extracted: chunk id; supplied: who supplied it; derived: the rule
    doc_id: str = ""
    start: int = -1  # extracted: span byte offsets inside the chunk
    end: int = -1
    agent: str = ""  # extracted: the extractor (and model) that produced it
    antecedents: tuple[str, ...] = ()  # derived: the assertion ids it was derived from
    score: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "ref": self.ref, "doc_id": self.doc_id, "start": self.start,
            "end": self.end, "agent": self.agent, "antecedents": list(self.antecedents),
            "score": self.score,
        }  # fmt: skip

    def to_compact(self, agent_code: Callable[[str], int] | None = None) -> list[Any]:
        """The source as a compact ledger row holds it: ``[kind letter, ref, score, agent,
        start, end, [antecedents], doc_id]``, trailing fields at their defaults left out;
        an extracted source's ``doc_id`` is left out when it is its chunk id's document;
        with ``agent_code``, a named agent is written as its code."""
        agent: str | int = (agent_code(self.agent) if agent_code is not None and self.agent
                            else self.agent)  # fmt: skip
        row: list[Any] = [self.kind[0], self.ref, self.score, agent, self.start, self.end,
                          list(self.antecedents), self.doc_id]  # fmt: skip
        defaults: list[Any] = [None, None, None, "", -1, -1, [], _doc_of(self.kind, self.ref)]
        while len(row) > 2 and row[-1] == defaults[len(row) - 1]:
            row.pop()
        return row

    @classmethod
    def from_compact(cls, row: list[Any], agent_name: Callable[[int], str] | None = None
                     ) -> Source:  # fmt: skip
        """The inverse of :meth:`to_compact` (``agent_name`` reads an agent's code)."""
        kind = _KINDS[row[0]]
        more = row[2:] + [None, "", -1, -1, [], _doc_of(kind, row[1])][len(row) - 2:]
        score, agent, start, end, ante, doc = more
        if isinstance(agent, int) and agent_name is not None:
            agent = agent_name(agent)
        return cls(kind, row[1], doc, start, end, agent, tuple(ante), score)

    def to_packed(self, agent_code: Callable[[str], int] | None = None) -> list[Any]:
        """:meth:`to_compact`'s list as a packed row holds it: an extracted source read from
        its chunk's document, with a span and no antecedents (what an extractor writes), as
        ``[end - start, ref, score, agent, start]`` (the span's length first: a number,
        where any other row begins with its kind letter); any other as :meth:`to_compact`."""
        row = self.to_compact(agent_code)
        if (row[0] == "e" and len(row) == 6 and type(row[4]) is int and type(row[5]) is int
                and row[5] >= row[4]):
            return [row[5] - row[4], *row[1:5]]
        return row

    @classmethod
    def from_packed(cls, row: list[Any], agent_name: Callable[[int], str] | None = None
                    ) -> Source:  # fmt: skip
        """The inverse of :meth:`to_packed`."""
        if isinstance(row[0], int):
            return cls.from_compact(["e", *row[1:], row[4] + row[0]], agent_name)
        return cls.from_compact(row, agent_name)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Source:
        """The inverse of :meth:`to_json`; a field left out has its default."""
        return cls(d["kind"], d["ref"], d.get("doc_id", ""), d.get("start", -1),
                   d.get("end", -1), d.get("agent", ""), tuple(d.get("antecedents", ())),
                   d.get("score"))  # fmt: skip


_KINDS: dict[str, SourceKind] = {"e": "extracted", "s": "supplied", "d": "derived"}


def _chunks_read(edge: Edge) -> list[str]:
    """The chunks an edge's extracted sources were read from, each once."""
    return list(dict.fromkeys(s.ref for s in edge.sources if s.kind == "extracted"))


def _doc_of(kind: str, ref: str) -> str:
    """The document an extracted source's chunk id names ("" for other kinds)."""
    return ref.rpartition("#")[0] if kind == "extracted" else ""


@dataclass(frozen=True, slots=True)
class Edge:
    """One assertion as the ledger holds it."""

    id: str
    subject: str
    predicate: str
    object: str
    count: int
    score: float  # the best confidence seen (an absent score counted as 1.0)
    sources: tuple[Source, ...]
    valid_from: int = OPEN
    valid_until: int = OPEN
    recorded_at: int = 0
    retracted_at: int = 0  # 0: not retracted
    retraction: str = ""  # why it was retracted
    spans: tuple[tuple[int, int, int], ...] = ()  # (ledger instant, from, until), oldest first

    def as_of(self, instant: int) -> Edge | None:
        """The edge as the ledger believed it at ``instant`` (ledger time): None before it
        was recorded; its span as it stood then; not yet retracted if retracted later."""
        if not self.believed_as_of(instant):
            return None
        vf, vu = self.valid_from, self.valid_until
        for at, f, u in self.spans:
            if at > instant:
                break
            vf, vu = f, u
        if (vf, vu) == (self.valid_from, self.valid_until) and not self.retracted_at:
            return self
        return replace(self, valid_from=vf, valid_until=vu, retracted_at=0, retraction="")

    @property
    def extracted(self) -> bool:
        """True when some source asserted it (a chunk and a span back it)."""
        return any(s.kind == "extracted" for s in self.sources)

    def valid_at(self, at: int) -> bool:
        return (self.valid_from == OPEN or self.valid_from <= at) and (
            self.valid_until == OPEN or at < self.valid_until
        )

    def believed_as_of(self, as_of: int) -> bool:
        return self.recorded_at <= as_of and (self.retracted_at == 0 or as_of < self.retracted_at)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "s": self.subject, "p": self.predicate, "o": self.object,
            "count": self.count, "score": self.score,
            "sources": [s.to_json() for s in self.sources], "from": self.valid_from,
            "until": self.valid_until, "recorded": self.recorded_at,
            "retracted": self.retracted_at, "retraction": self.retraction,
            "spans": [list(v) for v in self.spans],
        }  # fmt: skip

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Edge:
        """The inverse of :meth:`to_json`; a field left out has its default (a row of
        :class:`SQLiteLedger` leaves defaults out)."""
        vf, vu = d.get("from", OPEN), d.get("until", OPEN)
        spans = d.get("spans") or [[d["recorded"], vf, vu]]
        return cls(d["id"], d["s"], d["p"], d["o"], d["count"], d["score"],
                   tuple(Source.from_json(s) for s in d["sources"]), vf, vu,
                   d["recorded"], d.get("retracted", 0), d.get("retraction", ""),
                   tuple((a, f, u) for a, f, u in spans))  # fmt: skip

    def _compact(self, agent_code: Callable[[str], int] | None, packed: bool = False
                 ) -> list[Any]:  # fmt: skip
        """The fields of :meth:`to_compact`'s array, as a list (``packed``: each source as
        :meth:`Source.to_packed` writes it)."""
        spans = [list(v) for v in self.spans]
        row: list[Any] = [self.subject, self.predicate, self.object, self.count, self.score,
                          self.recorded_at,
                          [s.to_packed(agent_code) if packed else s.to_compact(agent_code)
                           for s in self.sources],
                          self.valid_from, self.valid_until, self.retracted_at,
                          self.retraction, spans]  # fmt: skip
        if spans == [[self.recorded_at, self.valid_from, self.valid_until]]:
            row.pop()
        while len(row) > 7 and row[-1] in (OPEN, 0, ""):
            row.pop()
        return row

    def to_compact(self, agent_code: Callable[[str], int] | None = None, *,
                   terms: bool = True) -> str:  # fmt: skip
        """The edge as a compact ledger row held it before :meth:`to_packed`, without its id
        (the row's key): a JSON array ``[s, p, o, count, score, recorded, [sources], from,
        until, retracted, retraction, [spans]]``, each source as :meth:`Source.to_compact`
        writes it (with ``agent_code``), trailing fields at their defaults left out (spans
        when they are the one span recorded with the edge); without ``terms``, the array
        begins at ``count`` (the row keeps the terms elsewhere)."""
        row = self._compact(agent_code)
        return json.dumps(row if terms else row[3:], separators=(",", ":"), ensure_ascii=False)

    def to_packed(self, agent_code: Callable[[str], int] | None = None, epoch: int = 0
                  ) -> bytes:  # fmt: skip
        """The array of :meth:`to_compact` without the terms, in :mod:`binrow`'s binary
        form, the score first (chunk ids as integers, instants as varints, a source's score
        equal to the edge's written as a one-byte marker, the instant recorded as its
        distance from ``epoch``: the store's first, so a few bytes): what a ledger row's body
        holds."""
        row = self._compact(agent_code, packed=True)
        return binrow.pack_scored(row[4], [row[3], row[5] - epoch, *row[6:]])

    @classmethod
    def from_packed(cls, id: str, data: bytes, terms: tuple[str, str, str],
                    agent_name: Callable[[int], str] | None = None, epoch: int = 0
                    ) -> Edge:  # fmt: skip
        """The inverse of :meth:`to_packed`, given the row's id, terms and epoch."""
        score, (count, recorded, *rest) = binrow.unpack_scored(data)
        return cls._from_list(id, [*terms, count, score, recorded + epoch, *rest], agent_name,
                              packed=True)  # fmt: skip

    @classmethod
    def from_compact(cls, id: str, text: str, agent_name: Callable[[int], str] | None = None,
                     terms: tuple[str, str, str] | None = None) -> Edge:  # fmt: skip
        """The inverse of :meth:`to_compact`, given the row's id (and its ``terms`` when
        the array leaves them out)."""
        row = json.loads(text)
        return cls._from_list(id, row if terms is None else [*terms, *row], agent_name)

    @classmethod
    def _from_list(cls, id: str, row: list[Any], agent_name: Callable[[int], str] | None,
                   packed: bool = False) -> Edge:  # fmt: skip
        s, p, o, count, score, recorded, sources = row[:7]
        vf, vu, retracted, why, spans = (row[7:] + [OPEN, OPEN, 0, "", None][len(row) - 7:])
        source = Source.from_packed if packed else Source.from_compact
        return cls(id, s, p, o, count, score, tuple(source(x, agent_name) for x in sources),
                   vf, vu, recorded, retracted, why,
                   tuple((a, f, u) for a, f, u in (spans or [[recorded, vf, vu]])))  # fmt: skip

    @classmethod
    def from_row(cls, id: str, text: str | bytes, agent_name: Callable[[int], str] | None = None,
                 terms: tuple[str, str, str] | None = None, epoch: int = 0) -> Edge:  # fmt: skip
        """A stored ledger row of any layout: packed (bytes, :meth:`to_packed`; its
        ``terms`` and ``epoch`` given), compact (an array; its ``terms`` given when the row
        keeps them elsewhere) or the earlier object (:meth:`to_row`)."""
        if not isinstance(text, str):
            if terms is None:
                raise LedgerError(f"the packed row of {id} needs its terms")
            return cls.from_packed(id, bytes(text), terms, agent_name, epoch)
        if text.startswith("["):
            return cls.from_compact(id, text, agent_name, terms)
        return cls.from_json({"id": id, **json.loads(text)})

    def to_row(self) -> str:
        """:meth:`to_json` as a stored row holds it: without the id (the row's key), without
        fields at their defaults, with no spaces (a row per fact, with a source per arrival)."""
        d = self.to_json()
        del d["id"]
        if d["spans"] == [[self.recorded_at, self.valid_from, self.valid_until]]:
            del d["spans"]
        d["sources"] = [{k: v for k, v in src.items() if _SOURCE_DEFAULTS.get(k, ...) != v}
                        for src in d["sources"]]  # fmt: skip
        for k in ("from", "until", "retracted", "retraction"):
            if d[k] in (OPEN, ""):
                del d[k]
        return json.dumps(d, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Tombstone:
    """Proof that an assertion was erased, without the assertion itself."""

    id: str
    erased_at: int
    reason: str


@dataclass(frozen=True, slots=True)
class Lifted:
    """The audit of a tombstone taken away: which, when and why it was lifted."""

    stone: Tombstone
    lifted_at: int
    reason: str


_SOURCE_DEFAULTS: dict[str, Any] = {"doc_id": "", "start": -1, "end": -1, "agent": "",
                                    "antecedents": [], "score": None}  # fmt: skip


def _source_of(a: Triple | Claim) -> Source:
    if isinstance(a, Triple):
        return Source("extracted", a.from_chunk.id, a.from_chunk.doc_id, a.span.start,
                      a.span.end, a.extractor, (), a.score)  # fmt: skip
    return Source("supplied", a.supplied_by, score=a.score)


class Ledger:
    """Assertions by identity, in memory; ``clock`` gives the recording instant in ms."""

    def __init__(self, clock: Callable[[], int] = now_ms) -> None:
        self._clock = clock
        self._edges: dict[str, Edge] = {}
        self._tombstones: dict[str, Tombstone] = {}
        # folded subject -> the ids of the edges naming it (in arrival order)
        self._subjects: dict[str, dict[str, None]] = {}
        self.names = NameIndex()  # the same subjects, found by the words a question holds
        self._lifted: list[Lifted] = []
        # each edge's sources as a set, beside the tuple it was built from: the "same source
        # again" test is a hash lookup, not a scan of every earlier arrival (which made
        # absorbing a corpus quadratic in how often a fact repeats)
        self._source_sets: dict[str, tuple[tuple[Source, ...], set[Source]]] = {}
        # chunk id -> the ids of the edges an extracted source read from it (in arrival
        # order): the assertion index lists a chunk's assertions from here, not a copy
        self._chunks: dict[str, dict[str, None]] = {}

    def __len__(self) -> int:
        return len(self._edges)

    def __iter__(self) -> Iterator[Edge]:
        return iter(list(self._edges.values()))

    # ---- writing --------------------------------------------------------------------------

    def add(self, a: Triple | Claim) -> Edge:
        """Record an extracted triple or a supplied claim; a repetition joins its edge."""
        if not isinstance(a, Triple | Claim):
            raise LedgerError(
                f"the ledger takes a Triple (extracted) or a Claim (supplied), got "
                f"{type(a).__name__}"
            )
        return self._arrive(a.id, a.subject, a.predicate, a.object, _source_of(a),
                            a.valid_from, a.valid_until)  # fmt: skip

    def derive(
        self,
        s: str,
        p: str,
        o: str,
        rule: str,
        antecedents: Iterable[str],
        score: float | None = None,
    ) -> Edge:
        """Record a derived assertion; refused without antecedents or naming unknown ones."""
        ante = tuple(antecedents)
        if not rule:
            raise ProvError(f"derived ({s}, {p}, {o}) names no rule")
        if not ante:
            raise ProvError(
                f"derived ({s}, {p}, {o}) by rule {rule!r} names no antecedents; a derivation "
                "that cannot say what it was derived from is refused"
            )
        unknown = [x for x in ante if x not in self._edges]
        if unknown:
            raise ProvError(f"derived ({s}, {p}, {o}) names unknown antecedents {unknown}")
        src = Source("derived", rule, antecedents=ante, score=score)
        return self._arrive(triple_id(s, p, o), s, p, o, src, OPEN, OPEN)

    def _arrive(
        self, tid: str, s: str, p: str, o: str, src: Source, vf: int, vu: int
    ) -> Edge:
        stone = self._tombstones.get(tid)
        if stone is not None:
            raise Erased(f"assertion ({s}, {p}, {o}) {tid} was erased at {stone.erased_at} "
                         f"({stone.reason}); it is not taken back in silently: lift the "
                         "tombstone first (Ledger.lift), with a reason")  # fmt: skip
        held = self._edges.get(tid)
        seen = None if held is None else self._sources_seen(held)
        if held is not None and seen is not None and src in seen:
            return held  # the same source read again (a re-ingest) is not a new arrival
        if held is None:
            now = self._clock()
            edge = Edge(tid, s, p, o, 1, confidence(src.score), (src,), vf, vu, now,
                        spans=((now, vf, vu),))  # fmt: skip
        else:
            # never reopen: a closed bound stays; an open one may be set by a later arrival
            until = held.valid_until if held.valid_until != OPEN else vu
            start = held.valid_from if held.valid_from != OPEN else vf
            spans = held.spans
            if (start, until) != (held.valid_from, held.valid_until):
                spans = (*spans, (self._clock(), start, until))
            edge = replace(
                held,
                count=held.count + 1,
                score=max(held.score, confidence(src.score)),
                sources=(*held.sources, src),
                valid_from=start,
                valid_until=until,
                spans=spans,
            )
        if seen is not None:
            seen.add(src)
            self._source_sets[tid] = (edge.sources, seen)
        self._store(edge)
        return edge

    def _sources_seen(self, edge: Edge) -> set[Source]:
        """The sources of ``edge`` as a set, rebuilt only when its sources were changed by
        something other than an arrival (a re-read dropping a reading)."""
        held = self._source_sets.get(edge.id)
        if held is None or held[0] is not edge.sources:
            held = self._source_sets[edge.id] = (edge.sources, set(edge.sources))
        return held[1]

    def close_span(self, tid: str, until: int) -> Edge:
        """End the span at ``until``; only ever shortens (an earlier end wins)."""
        edge = self._need(tid)
        if until <= 0:
            raise LedgerError("closing needs an instant (ms since the epoch), not an open bound")
        new = until if edge.valid_until == OPEN else min(edge.valid_until, until)
        if edge.valid_from != OPEN and new < edge.valid_from:
            new = edge.valid_from  # an empty span, never a negative one
        if new != edge.valid_until:
            edge = replace(edge, valid_until=new,
                           spans=(*edge.spans, (self._clock(), edge.valid_from, new)))  # fmt: skip
            self._store(edge)
        return edge

    def retract(self, tid: str, reason: str) -> Edge:
        """Withdraw an assertion: the record stays, marked retracted (the first time wins)."""
        edge = self._need(tid)
        if edge.retracted_at:
            return edge
        edge = replace(edge, retracted_at=self._clock(), retraction=reason)
        self._store(edge)
        return edge

    def reinstate(self, tid: str) -> Edge:
        """Undo a retraction that a newer reading made void (a source reverted to the
        version that asserted it); the span history is kept."""
        edge = self._need(tid)
        if edge.retracted_at:
            edge = replace(edge, retracted_at=0, retraction="")
            self._store(edge)
        return edge

    def forget_reading(self, doc_id: str) -> list[str]:
        """Drop every extracted source read from ``doc_id`` (the document is being read
        again with another chunking, so its old chunk ids name other text now). Returns the
        ids of edges left with no source at all; they stay until the caller decides."""
        bare = []
        for edge in list(self._edges.values()):
            keep = tuple(s for s in edge.sources
                         if not (s.kind == "extracted" and s.doc_id == doc_id))  # fmt: skip
            if len(keep) == len(edge.sources):
                continue
            self._store(replace(edge, sources=keep, count=len(keep)))
            if not keep:
                bare.append(edge.id)
        return bare

    def erase(self, tid: str, reason: str) -> Tombstone:
        """Remove the record and leave a tombstone (a legal deletion, a revoked source)."""
        self._need(tid)
        stone = Tombstone(tid, self._clock(), reason)
        self._drop(stone)
        return stone

    def lift(self, tid: str, reason: str) -> Lifted:
        """Take the tombstone of ``tid`` away, so the assertion may arrive again; the lift is
        kept (:meth:`lifted`)."""
        stone = self._tombstones.get(tid)
        if stone is None:
            raise LedgerError(f"no tombstone for {tid} to lift")
        if not reason.strip():
            raise LedgerError(f"lifting the tombstone of {tid} needs a reason")
        lift = Lifted(stone, self._clock(), reason)
        del self._tombstones[tid]
        self._lifted.append(lift)
        self._record_lift(lift)
        return lift

    def lifted(self) -> list[Lifted]:
        """Every tombstone lifted, oldest first."""
        return list(self._lifted)

    def _record_lift(self, lift: Lifted) -> None:
        """Write-through hook (the SQLite ledger keeps a row)."""

    def _store(self, edge: Edge) -> None:
        held = self._edges.get(edge.id)
        if held is None:
            self._name(edge)
        if held is None or held.sources is not edge.sources:
            self._chunked(held, edge)
        self._edges[edge.id] = edge

    def _chunked(self, old: Edge | None, new: Edge | None) -> None:
        """Keep the chunk index as an edge's sources go from ``old``'s to ``new``'s."""
        before = set() if old is None else set(_chunks_read(old))
        after = [] if new is None else _chunks_read(new)
        tid = new.id if new is not None else old.id if old is not None else ""
        for c in before - set(after):
            held = self._chunks.get(c)
            if held is not None:
                held.pop(tid, None)
                if not held:
                    del self._chunks[c]
        for c in after:
            self._chunks.setdefault(c, {})[tid] = None

    def read_from(self, chunk_id: str) -> list[tuple[str, str, int, int]]:
        """(assertion id, folded subject, start, end) of each assertion read from chunk
        ``chunk_id``, each span once, in the order they arrived (retracted ones too; an
        erased one is gone)."""
        out: dict[tuple[str, str, int, int], None] = {}
        for tid in self._chunks.get(chunk_id, ()):
            e = self._edges[tid]
            subject = fold(e.subject)
            for src in e.sources:
                if src.kind == "extracted" and src.ref == chunk_id:
                    out[(tid, subject, src.start, src.end)] = None
        return list(out)

    def _name(self, edge: Edge) -> None:
        """Count a new edge under its subject (and the subject's words)."""
        key = fold(edge.subject)
        self._subjects.setdefault(key, {})[edge.id] = None
        self.names.add(key)

    def bury(self, id: str, reason: str) -> Tombstone:
        """Leave a tombstone for something erased outside the ledger (a source document)."""
        stone = Tombstone(id, self._clock(), reason)
        self._drop(stone)
        return stone

    def _drop(self, stone: Tombstone) -> None:
        gone = self._edges.pop(stone.id, None)
        self._source_sets.pop(stone.id, None)
        if gone is not None:
            self._chunked(gone, None)
            key = fold(gone.subject)
            del self._subjects[key][gone.id]
            self.names.remove(key)
            if not self._subjects[key]:
                del self._subjects[key]
        self._tombstones[stone.id] = stone

    def subjects(self) -> list[str]:
        """The folded subjects of every edge held (retracted ones too), kept as edges come
        and go rather than gathered from every edge on each read."""
        return sorted(self._subjects)

    def _need(self, tid: str) -> Edge:
        edge = self._edges.get(tid)
        if edge is None:
            gone = self._tombstones.get(tid)
            if gone is not None:
                raise LedgerError(f"assertion {tid} was erased at {gone.erased_at}: {gone.reason}")
            raise LedgerError(f"no assertion with id {tid}")
        return edge

    # ---- reading --------------------------------------------------------------------------

    def get(self, tid: str) -> Edge | None:
        return self._edges.get(tid)

    def tombstone(self, tid: str) -> Tombstone | None:
        return self._tombstones.get(tid)

    def tombstones(self) -> list[Tombstone]:
        return list(self._tombstones.values())

    def edges(
        self,
        *,
        at: int | None = None,
        as_of: int | None = None,
        include_retracted: bool = False,
    ) -> list[Edge]:
        """Edges valid at ``at`` (world time) as believed at ``as_of`` (ledger time).

        With no ``as_of`` the current belief is read: retracted edges are left out unless
        ``include_retracted``. With ``as_of`` each edge is read as it was then believed
        (:meth:`Edge.as_of`): retracted later means not retracted, and its span is the version
        that stood at ``as_of`` — so ``at`` is tested against the span as then believed.
        """
        out = []
        for held in self._edges.values():
            e: Edge | None
            if as_of is not None:
                e = held.as_of(as_of)
                if e is None:
                    continue
            else:
                if held.retracted_at and not include_retracted:
                    continue
                e = held
            if at is not None and not e.valid_at(at):
                continue
            out.append(e)
        return out

    def by_agent(self, agent: str) -> list[Edge]:
        """Edges some source of which came from ``agent`` (an extractor or model name)."""
        return [e for e in self._edges.values() if any(s.agent == agent for s in e.sources)]

    def about(self, subject: str) -> list[Edge]:
        """The edges whose subject folds as ``subject`` does (by the subject index)."""
        return [self._edges[i] for i in self._subjects.get(fold(subject), ())]


class LedgerTriples:
    """The triple store of a substrate as a view of its ledger (§4's ``TripleStore``): the
    triples held are the ledger's edges (retracted ones too, as they were written; an
    erased one is gone), so they are not kept a second time. ``match`` reads the subject
    index when the subject is bound, else every edge; terms are matched by their fold.
    Writing is the ledger's: ``assert_triple`` of a triple the ledger does not hold is
    refused, and ``delete`` of one it still holds (erase it through the ledger)."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def __len__(self) -> int:
        return len(self.ledger)

    def assert_triple(self, s: str, p: str, o: str) -> str:
        check_terms(s, p, o)
        tid = triple_id(s, p, o)
        if self.ledger.get(tid) is None:
            raise LedgerError(f"({s}, {p}, {o}) is not in the ledger: the triples of a "
                              "substrate are its ledger's edges; record it there first")
        return tid

    def assert_many(self, triples: Iterable[tuple[str, str, str]]) -> int:
        """Checks each is held; returns 0 (nothing is written: the ledger holds them)."""
        for s, p, o in triples:
            self.assert_triple(s, p, o)
        return 0

    def match(
        self, s: str | None = None, p: str | None = None, o: str | None = None
    ) -> list[tuple[str, str, str]]:
        check_terms(s, p, o)
        edges = self.ledger.about(s) if s is not None else list(self.ledger)
        fp, fo = (None if p is None else fold(p)), (None if o is None else fold(o))
        return [(e.subject, e.predicate, e.object) for e in edges
                if (fp is None or fold(e.predicate) == fp)
                and (fo is None or fold(e.object) == fo)]  # fmt: skip

    def delete(self, s: str, p: str, o: str) -> bool:
        """Whether the triple is gone (its edge erased from the ledger); refused while the
        ledger still holds it."""
        tid = triple_id(s, p, o)
        if self.ledger.get(tid) is not None:
            raise LedgerError(f"({s}, {p}, {o}) is still in the ledger: erase it there "
                              "(Ledger.erase), and the triple goes with it")
        return True



_HEX_ID = re.compile(r"[0-9a-f]{16}")  # an assertion id as triple_id makes it


def _key(tid: str) -> tuple[int, str | None]:
    """The integer a ledger row is keyed by, and the id text it must hold: a
    16-hex-digit id is its own integer (no text kept), another the 63-bit hash of its text
    (kept, to tell a collision from the edge)."""
    if _HEX_ID.fullmatch(tid):
        v = int(tid, 16)
        return (v - (1 << 64) if v >= 1 << 63 else v), None
    digest = hashlib.blake2b(tid.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1, tid


def _term_hash(text: str) -> int:
    """The 64-bit hash ``ledger_terms`` finds a text by (a unique index on the text would
    keep every text twice; a collision is refused, as :func:`_key`'s is)."""
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


# a row's body is :meth:`Edge.to_packed` (no terms; the terms are codes in ledger_terms,
# found by their hash when written)
_LEDGER_TABLES = (
    "CREATE TABLE IF NOT EXISTS ledger_edges (key INTEGER PRIMARY KEY, name TEXT, "
    "body BLOB NOT NULL, s INTEGER, p INTEGER, o INTEGER)",
    "CREATE TABLE IF NOT EXISTS ledger_terms (code INTEGER PRIMARY KEY AUTOINCREMENT, "
    "hash INTEGER NOT NULL UNIQUE, text TEXT NOT NULL)",
    # 'epoch': the instant the rows' recorded instants are written from (set once, by the
    # first write of a row: every writer reads it back in its transaction)
    "CREATE TABLE IF NOT EXISTS ledger_meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) "
    "WITHOUT ROWID",  # (one page, not a table and its index)
)


def _unkey(key: int, name: str | None) -> str:
    """The id of a ledger row (the inverse of :func:`_key`)."""
    return name if name is not None else f"{key % (1 << 64):016x}"


class SQLiteLedger(Ledger):
    """The ledger written through to SQLite: one row per edge, one per tombstone.

    An edge's row (``ledger_edges``) is keyed by its id as an integer (:func:`_key`) and
    packed (:meth:`Edge.to_packed`: the compact array in :mod:`~hirmem.semantic.binrow`'s
    binary form), each extractor's name written as its code in ``ledger_agents``. Its terms
    (subject, predicate, object) are the codes of their texts in ``ledger_terms`` (columns
    ``s``, ``p``, ``o``; a name said in many edges is kept once, found by its 64-bit hash,
    :func:`_term_hash`, so the text is not kept a second time in an index). The codes are
    the database's: the flush that first needs a text inserts it (a text already there is
    left as it is) and reads its code back, inside its own transaction, so two processes
    writing one ledger (two fleet nodes on one tenant) agree on every code; no process
    keeps a code it did not read back in that transaction. A code is never reused
    (``AUTOINCREMENT``; PostgreSQL: an identity), and a text is deleted when an erasure
    leaves no row naming its code, checked by that same statement (``NOT EXISTS``), so an
    erased name does not stay behind in the dictionary. Stores of the earlier layouts
    (``ledger`` keyed by id text, its rows compact or JSON objects, :meth:`Edge.to_row`;
    ``ledger_edges`` with a JSON body, its terms in the row or coded by text) are
    converted when opened (:meth:`_convert`).

    Erasure is a ``DELETE`` of the edge row (and its sources with it) plus a tombstone row,
    so the erased content does not stay in the table; run ``VACUUM`` to drop free pages.
    """

    def __init__(self, path: Where, clock: Callable[[], int] = now_ms) -> None:
        super().__init__(clock)
        self._db = open_db(path, "ledger")
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(
            ";".join(_LEDGER_TABLES) + ";CREATE TABLE IF NOT EXISTS ledger_agents (code "
            "INTEGER PRIMARY KEY, name TEXT NOT NULL);"
            "CREATE TABLE IF NOT EXISTS tombstones (id TEXT PRIMARY KEY, erased_at INTEGER "
            "NOT NULL, reason TEXT NOT NULL);"
            "CREATE TABLE IF NOT EXISTS lifted (seq INTEGER PRIMARY KEY, id TEXT NOT NULL, "
            "erased_at INTEGER NOT NULL, erasure TEXT NOT NULL, lifted_at INTEGER NOT NULL, "
            "reason TEXT NOT NULL);"
        )
        self._agents: dict[str, int] = {}  # an extractor's name -> its code in the rows
        self._agent_names: dict[int, str] = {}
        for code, name in self._db.execute("SELECT code, name FROM ledger_agents"):
            self._agents[name], self._agent_names[code] = code, name
        self._epoch: int | None = None  # the rows' epoch, once a row is written (ledger_meta)
        self._convert()
        held = self._db.execute("SELECT value FROM ledger_meta WHERE name = 'epoch'").fetchone()
        self._epoch = None if held is None else int(held[0])
        texts = dict(self._db.execute("SELECT code, text FROM ledger_terms").fetchall())
        self._dirty: dict[str, Edge | None] = {}
        for key, name, body, s, p, o in self._db.execute(
                "SELECT key, name, body, s, p, o FROM ledger_edges").fetchall():  # fmt: skip
            e = Edge.from_packed(_unkey(key, name), body, (texts[s], texts[p], texts[o]),
                                 self._agent_names.__getitem__, self._epoch or 0)  # fmt: skip
            self._edges[e.id] = e
            self._name(e)
            self._chunked(None, e)
        self._unnamed: set[str] = set()  # texts of erased edges, to delete if none names them
        for id, at, reason in self._db.execute("SELECT id, erased_at, reason FROM tombstones"):
            self._tombstones[id] = Tombstone(id, at, reason)
        for id, at, erasure, lifted_at, why in self._db.execute(
            "SELECT id, erased_at, erasure, lifted_at, reason FROM lifted ORDER BY seq"
        ):
            self._lifted.append(Lifted(Tombstone(id, at, erasure), lifted_at, why))
        self._lifts: list[Lifted] = []
        if has_table(self._db, "ledger"):  # the earlier layout, keyed by id text: converted
            for id, body in self._db.execute("SELECT id, body FROM ledger").fetchall():
                e = Edge.from_row(id, body)
                self._edges[e.id] = e
                self._name(e)
                self._chunked(None, e)
                self._dirty[e.id] = e
            self._flush(drop_earlier=True)

    def _convert(self) -> None:
        """Rebuild ``ledger_edges`` and ``ledger_terms`` of an earlier layout (a row's body
        as JSON text, its terms inline or coded; the terms found by their text) into the
        packed one, in one transaction that first looks which layout the store holds (one
        process converts; another opening at once finds it done). The terms get new codes:
        every row naming one is written again in the same transaction."""
        agents, epoch = dict(self._agents), self._epoch
        self._db.execute("BEGIN IMMEDIATE")
        try:
            edge_cols = {str(r[1]): str(r[2]).upper()
                         for r in self._db.execute("PRAGMA table_info(ledger_edges)")}
            term_cols = {str(r[1]) for r in self._db.execute("PRAGMA table_info(ledger_terms)")}
            if edge_cols.get("body") in ("BLOB", "BYTEA") and "hash" in term_cols:
                self._db.execute("COMMIT")
                return
            texts = dict(self._db.execute("SELECT code, text FROM ledger_terms").fetchall())
            coded = "s" in edge_cols
            edges = []
            for key, name, body, *spo in self._db.execute(
                    "SELECT key, name, body" + (", s, p, o" if coded else "")
                    + " FROM ledger_edges").fetchall():  # fmt: skip
                terms = None if not spo or spo[0] is None else (
                    texts[spo[0]], texts[spo[1]], texts[spo[2]])
                edges.append(Edge.from_row(_unkey(key, name), body,
                                           self._agent_names.__getitem__, terms))  # fmt: skip
            self._db.execute("DROP TABLE ledger_edges")
            self._db.execute("DROP TABLE ledger_terms")
            for create in _LEDGER_TABLES:  # (not executescript: it would commit)
                self._db.execute(create)
            self._write_edges(edges)
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            self._forget_agents_since(agents, epoch)
            raise

    def drop_tables(self, names: Iterable[str]) -> None:
        """Drop tables of the file (or schema) that an earlier layout kept beside the ledger
        and that the ledger now answers for (the triples: :class:`LedgerTriples`)."""
        self.flush()
        for name in names:
            self._db.execute(f"DROP TABLE IF EXISTS {name}")

    def _record_lift(self, lift: Lifted) -> None:
        self._lifts.append(lift)

    def _store(self, edge: Edge) -> None:
        super()._store(edge)
        self._dirty[edge.id] = edge

    def _drop(self, stone: Tombstone) -> None:
        gone = self._edges.get(stone.id)
        if gone is not None:
            self._unnamed.update((gone.subject, gone.predicate, gone.object))
        super()._drop(stone)
        self._dirty[stone.id] = None

    def _codes(self, texts: Iterable[str]) -> dict[str, int]:
        """The code of each text in ``ledger_terms``, inserted if new: the database's
        answer, read inside the caller's transaction (see the class)."""
        wanted = {_term_hash(t): t for t in texts}
        hashes = list(wanted)
        out: dict[str, int] = {}
        for at in range(0, len(hashes), 500):  # a few statements per flush, each bounded
            part = hashes[at : at + 500]
            marks = ", ".join("(?, ?)" for _ in part)
            self._db.execute(f"INSERT OR IGNORE INTO ledger_terms (hash, text) VALUES {marks}",
                             [x for h in part for x in (h, wanted[h])])  # fmt: skip
            for h, text, code in self._db.execute(
                    "SELECT hash, text, code FROM ledger_terms WHERE hash IN "
                    f"({', '.join('?' * len(part))})", part).fetchall():  # fmt: skip
                if text != wanted[h]:
                    raise LedgerError(f"terms {wanted[h]!r} and {text!r} share a hash; this "
                                      "ledger cannot hold both")  # fmt: skip
                out[str(text)] = int(code)
        return out

    def _agent_code(self, name: str) -> int:
        """The code an extractor's name is written as (kept once in ``ledger_agents``)."""
        code = self._agents.get(name)
        if code is None:
            # another process writing this ledger (two fleet nodes on one tenant) may have
            # coded the name since this one opened: the table, not this process, decides.
            # Two first writers racing for one number: the later's flush fails and is
            # rolled back, and its next flush finds the name
            held = self._db.execute("SELECT code FROM ledger_agents WHERE name = ?",
                                    (name,)).fetchone()  # fmt: skip
            if held is not None:
                code = int(held[0])
            else:
                code = int(self._db.execute(
                    "SELECT coalesce(max(code), 0) + 1 FROM ledger_agents").fetchone()[0])
                self._db.execute("INSERT INTO ledger_agents VALUES (?, ?)", (code, name))
            self._agents[name], self._agent_names[code] = code, name
        return code

    def _forget_agents_since(self, agents: dict[str, int], epoch: int | None) -> None:
        """Back to the agents' codes and the epoch held before a rolled-back transaction
        (what was written in it is gone)."""
        self._agents = agents
        self._agent_names = {c: n for n, c in agents.items()}
        self._epoch = epoch

    def flush(self) -> None:
        """Write what changed since the last flush, in one transaction."""
        self._flush()

    def _flush(self, *, drop_earlier: bool = False) -> None:
        if not self._dirty and not self._lifts and not drop_earlier:
            return
        agents, epoch = dict(self._agents), self._epoch
        self._db.execute("BEGIN IMMEDIATE")  # the codes read back stay true until COMMIT
        try:
            self._write(drop_earlier)
        except BaseException:
            self._db.execute("ROLLBACK")
            self._forget_agents_since(agents, epoch)
            raise
        self._dirty = {}
        self._lifts = []
        self._unnamed = set()

    def _write(self, drop_earlier: bool) -> None:
        for lift in self._lifts:  # before the edges: a lifted id may have arrived again
            st = lift.stone
            self._db.execute("DELETE FROM tombstones WHERE id = ?", (st.id,))
            self._db.execute("INSERT INTO lifted (id, erased_at, erasure, lifted_at, reason) "
                             "VALUES (?, ?, ?, ?, ?)",
                             (st.id, st.erased_at, st.reason, lift.lifted_at, lift.reason))
        for tid, edge in self._dirty.items():
            if edge is None:
                key, _ = _key(tid)
                stone = self._tombstones.get(tid)
                self._db.execute("DELETE FROM ledger_edges WHERE key = ?", (key,))
                if stone is not None:  # else erased, then lifted, within this flush
                    self._db.execute("INSERT OR REPLACE INTO tombstones VALUES (?, ?, ?)",
                                     (tid, stone.erased_at, stone.reason))  # fmt: skip
        named = self._write_edges([e for e in self._dirty.values() if e is not None])
        for text in self._unnamed - named:  # (a text this flush wrote is named)
            # no index on s, p or o (it would cost more than the codes save): an erasure
            # scans the rows, once per text its edges named
            self._db.execute(
                "DELETE FROM ledger_terms WHERE hash = ? AND text = ? AND NOT EXISTS (SELECT 1 "
                "FROM ledger_edges e WHERE e.s = ledger_terms.code OR e.p = ledger_terms.code "
                "OR e.o = ledger_terms.code)", (_term_hash(text), text))  # fmt: skip
        if drop_earlier:
            self._db.execute("DROP TABLE ledger")
        self._db.execute("COMMIT")

    def _write_edges(self, edges: list[Edge]) -> set[str]:
        """Write the rows of ``edges`` (inside the caller's transaction); the texts they
        name."""
        codes = self._codes(dict.fromkeys(t for e in edges
                                          for t in (e.subject, e.predicate, e.object)))
        if edges and self._epoch is None:
            self._epoch = epoch(self._db, "ledger_meta", min(e.recorded_at for e in edges))
        for edge in edges:
            key, name = _key(edge.id)
            held = self._db.execute("SELECT name FROM ledger_edges WHERE key = ?",
                                    (key,)).fetchone()  # fmt: skip
            if held is not None and held[0] != name:
                raise LedgerError(f"assertion ids {edge.id!r} and {held[0]!r} share a key; "
                                  "this ledger cannot hold both")  # fmt: skip
            self._db.execute(
                "INSERT INTO ledger_edges (key, name, body, s, p, o) VALUES (?, ?, ?, ?, "
                "?, ?) ON CONFLICT (key) DO UPDATE SET name = excluded.name, body = "
                "excluded.body, s = excluded.s, p = excluded.p, o = excluded.o",
                (key, name, edge.to_packed(self._agent_code, self._epoch or 0),
                 codes[edge.subject], codes[edge.predicate], codes[edge.object]))  # fmt: skip
        return set(codes)

    def close(self) -> None:
        self.flush()
        self._db.close()
