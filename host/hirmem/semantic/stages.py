"""The five stages of §3 (one method each) and the pipeline that composes them.

Invariants:

- A stage never depends on a later one; only the ingester touches the world.
- A missing stage is skipped, except the ingester: a pipeline without one is an error.
  With no splitter a document is one chunk (which still tiles it); with no extractor there
  are no triples; with no parser or normalizer the text is left as read.
- Every stage run is reported (:class:`StageRun`: which stage, which agent, when, what it
  used and what it generated) so provenance can be written from what actually happened.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from hirmem.semantic.errors import PipelineError
from hirmem.semantic.values import Chunk, Doc, Triple

__all__ = [
    "Extractor",
    "Ingester",
    "Normalizer",
    "Parser",
    "Pipeline",
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


@dataclass
class Result:
    docs: list[Doc] = field(default_factory=list)
    chunks: list[Chunk] = field(default_factory=list)
    triples: list[Triple] = field(default_factory=list)
    runs: list[StageRun] = field(default_factory=list)


def _ms() -> int:
    return time.time_ns() // 1_000_000


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
        docs = self.ingester.ingest(ref)
        if not isinstance(docs, list) or not all(isinstance(d, Doc) for d in docs):
            raise PipelineError(f"ingester {agent_name(self.ingester)} did not return [Doc]")
        result = Result()
        result.runs.append(StageRun("ingest", agent_name(self.ingester), t0, self.clock(),
                                    (ref,), tuple(d.id for d in docs)))  # fmt: skip
        self.process(docs, result)
        return result

    def process(self, docs: Sequence[Doc], result: Result | None = None) -> Result:
        """Run the stages after the ingester over documents already read."""
        out = Result() if result is None else result
        for doc in docs:
            if self.parser is not None:
                doc = self._timed(out, "parse", self.parser, doc, self.parser.parse)
            if self.normalizer is not None:
                doc = self._timed(out, "normalize", self.normalizer, doc, self._normalized)
            out.docs.append(doc)
            t0 = self.clock()
            chunks = whole(doc) if self.splitter is None else self.splitter.split(doc)
            if self.splitter is not None:
                out.runs.append(StageRun("split", agent_name(self.splitter), t0, self.clock(),
                                         (doc.id,), tuple(c.id for c in chunks)))  # fmt: skip
            out.chunks.extend(chunks)
            if self.extractor is None:
                continue
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
        return out

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
