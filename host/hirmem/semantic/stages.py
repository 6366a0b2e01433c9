"""The five stages of §3 (one method each) and the pipeline that composes them.

Invariants:

- A stage never depends on a later one; only the ingester touches the world.
- A missing stage is skipped, except the ingester: a pipeline without one is an error.
  With no splitter a document is one chunk (which still tiles it); with no extractor there
  are no triples; with no parser or normalizer the text is left as read.
- Every stage run is reported (:class:`StageRun`: which stage, which agent, when, what it
  used and what it generated) so provenance can be written from what actually happened.
- A refusal of one input is reported too (:class:`Rejection` in ``Result.rejected``): what
  an ingester skipped (its ``skipped`` list) and any document a stage refused
  (:class:`~hirmem.semantic.errors.Refused`), which leaves nothing of that document in the
  result while the other documents go on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from hirmem.protocol.clock import now_ms
from hirmem.semantic.errors import PipelineError, Refused
from hirmem.semantic.values import Chunk, Doc, Triple

__all__ = [
    "Extractor",
    "Ingester",
    "Normalizer",
    "Parser",
    "Pipeline",
    "Rejection",
    "Result",
    "Splitter",
    "StageRun",
    "agent_name",
]


@runtime_checkable
class Ingester(Protocol):
    def ingest(self, ref: str) -> list[Doc]: ...


@runtime_checkable
class Parser(Protocol):
    def parse(self, doc: Doc) -> Doc: ...


@runtime_checkable
class Normalizer(Protocol):
    def normalize(self, text: str) -> str: ...


@runtime_checkable
class Splitter(Protocol):
    def split(self, doc: Doc) -> list[Chunk]: ...


@runtime_checkable
class Extractor(Protocol):
    def extract(self, chunk: Chunk) -> list[Triple]: ...


def agent_name(stage: object) -> str:
    """The name a stage is recorded under in provenance: its ``name``, else its class."""
    name = getattr(stage, "name", None)
    return name if isinstance(name, str) and name else type(stage).__name__


@dataclass(frozen=True, slots=True)
class StageRun:
    kind: str  # ingest, parse, normalize, split, extract
    agent: str
    start: int  # ms since the epoch
    end: int
    used: tuple[str, ...]  # ids (a reference, doc ids, chunk ids)
    generated: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Rejection:
    """One input a stage refused: which stage and agent, what (a path, a document), why."""

    kind: str  # ingest, parse, normalize, split, extract
    agent: str
    ref: str
    reason: str
    rule: str = ""  # the rule that refused it, when not the stage's bounds (a tombstone)


@dataclass
class Result:
    docs: list[Doc] = field(default_factory=list)
    chunks: list[Chunk] = field(default_factory=list)
    triples: list[Triple] = field(default_factory=list)
    runs: list[StageRun] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)


_ms = now_ms  # the stage clock: wall-clock milliseconds


def whole(doc: Doc) -> list[Chunk]:
    """The chunking used when no splitter is given: the document as one chunk."""
    return [Chunk(doc.id, 0, doc.text, 0, len(doc.text.encode("utf-8")))]


@dataclass
class Pipeline:
    """``ingest -> parse -> normalize -> split -> extract``; ``None`` stages are skipped."""

    ingester: Ingester | None
    parser: Parser | None = None
    normalizer: Normalizer | None = None
    splitter: Splitter | None = None
    extractor: Extractor | None = None
    clock: Callable[[], int] = _ms

    def run(self, ref: str) -> Result:
        if self.ingester is None:
            raise PipelineError(
                "a pipeline needs an ingester: there is nothing to read without one "
                "(every other stage may be left out)"
            )
        t0 = self.clock()
        skipped = getattr(self.ingester, "skipped", None)
        seen = len(skipped) if isinstance(skipped, list) else 0
        docs = self.ingester.ingest(ref)
        if not isinstance(docs, list) or not all(isinstance(d, Doc) for d in docs):
            raise PipelineError(f"ingester {agent_name(self.ingester)} did not return [Doc]")
        result = Result()
        if isinstance(skipped, list):  # what this run skipped, with the reasons
            result.rejected += [Rejection("ingest", agent_name(self.ingester), str(path),
                                          str(why)) for path, why in skipped[seen:]]  # fmt: skip
        result.runs.append(StageRun("ingest", agent_name(self.ingester), t0, self.clock(),
                                    (ref,), tuple(d.id for d in docs)))  # fmt: skip
        self.process(docs, result)
        return result

    def process(self, docs: Sequence[Doc], result: Result | None = None) -> Result:
        """Run the stages after the ingester over documents already read."""
        out = Result() if result is None else result
        for doc in docs:
            mark = (len(out.docs), len(out.chunks), len(out.triples), len(out.runs))
            at = ["parse", ""]  # the stage running, for the record of a refusal
            try:
                self._stages(doc, out, at)
            except Refused as exc:  # nothing of this document stays; the others go on
                del out.docs[mark[0] :], out.chunks[mark[1] :], out.triples[mark[2] :]
                del out.runs[mark[3] :]
                out.rejected.append(Rejection(at[0], at[1], doc.source, str(exc)))
        return out

    def _stages(self, doc: Doc, out: Result, at: list[str]) -> None:
        if self.parser is not None:
            at[:] = ["parse", agent_name(self.parser)]
            doc = self._timed(out, "parse", self.parser, doc, self.parser.parse)
        if self.normalizer is not None:
            at[:] = ["normalize", agent_name(self.normalizer)]
            doc = self._timed(out, "normalize", self.normalizer, doc, self._normalized)
        out.docs.append(doc)
        t0 = self.clock()
        at[:] = ["split", agent_name(self.splitter) if self.splitter else "split/whole"]
        chunks = whole(doc) if self.splitter is None else self.splitter.split(doc)
        if self.splitter is not None:
            out.runs.append(StageRun("split", agent_name(self.splitter), t0, self.clock(),
                                     (doc.id,), tuple(c.id for c in chunks)))  # fmt: skip
        out.chunks.extend(chunks)
        if self.extractor is None:
            return
        at[:] = ["extract", agent_name(self.extractor)]
        for chunk in chunks:
            t0 = self.clock()
            triples = self.extractor.extract(chunk)
            for t in triples:
                if t.from_chunk != chunk:
                    raise PipelineError(
                        f"extractor {agent_name(self.extractor)} returned an assertion "
                        f"that does not carry the chunk {chunk.id} it read"
                    )
            out.runs.append(StageRun("extract", agent_name(self.extractor), t0,
                                     self.clock(), (chunk.id,),
                                     tuple(t.id for t in triples)))  # fmt: skip
            out.triples.extend(triples)

    def _normalized(self, doc: Doc) -> Doc:
        assert self.normalizer is not None
        return doc.replace(text=self.normalizer.normalize(doc.text))

    def _timed(
        self, out: Result, kind: str, stage: object, doc: Doc, fn: Callable[[Doc], Doc]
    ) -> Doc:
        t0 = self.clock()
        new = fn(doc)
        if not isinstance(new, Doc):
            raise PipelineError(f"{kind} stage {agent_name(stage)} did not return a Doc")
        out.runs.append(StageRun(kind, agent_name(stage), t0, self.clock(), (doc.id,), (new.id,)))
        return new
