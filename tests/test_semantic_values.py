"""Values, the ledger (repetition, temporal bounds), the stages and the pipeline."""

from __future__ import annotations

import copy
import io
import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hirmem.semantic.assertions import Ledger, SQLiteLedger
from hirmem.semantic.errors import (
    IngestError,
    LedgerError,
    NotBuilt,
    PipelineError,
    SemanticError,
    UnknownDriver,
)
from hirmem.semantic.extract import (
    DEFAULT_PREDICATES,
    Fallback,
    ModelExtractor,
    ModelUnavailable,
    RuleExtractor,
    Schema,
)
from hirmem.semantic.ingest import FileIngester, MemoryIngester, Registry, TreeIngester
from hirmem.semantic.parse import (
    NFC,
    ByMediaType,
    Chain,
    CollapseSpaces,
    HTMLParser,
    JSONParser,
    MarkdownParser,
    StripControl,
)
from hirmem.semantic.split import FixedSplitter, SentenceSplitter
from hirmem.semantic.stages import Parser, Pipeline
from hirmem.semantic.values import (
    OPEN,
    Chunk,
    Claim,
    Doc,
    Origin,
    Span,
    Triple,
    origin,
    with_origin,
)

DAY = 86_400_000


def _ticks(start: int = 10_000) -> object:
    t = [start]

    def tick() -> int:
        t[0] += 1
        return t[0]

    return tick


def _triple(text: str, s: str, p: str, o: str, score: float | None = None) -> Triple:
    chunk = Chunk("doc", 0, text, 0, len(text.encode()))
    return Triple(s, p, o, chunk, score, span=Span.locate(chunk, text), evidence=text)


# ---- values -------------------------------------------------------------------------------------


def test_origin_is_written_and_read_through_one_accessor() -> None:
    org = Origin.of_bytes("file:///x.md", b"hello", "text/markdown", mtime=123)
    doc = Doc("d", "file:///x.md", "hello", with_origin({"k": 1}, org))
    assert origin(doc) == org and org.size == 5 and len(org.sha256) == 64
    assert doc.meta["k"] == 1
    with pytest.raises(SemanticError, match="records no origin"):
        origin(Doc("e", "x", "t"))


def test_an_absent_score_is_full_confidence_and_repetition_is_one_edge() -> None:
    ledger = Ledger(_ticks())  # type: ignore[arg-type]
    a = ledger.add(_triple("Bob lives in Paris.", "Bob", "lives_in", "Paris", 0.4))
    b = ledger.add(_triple("BOB  lives in Paris!", "BOB ", "Lives_In", "paris", None))
    c = ledger.add(Claim("Bob", "lives_in", "Paris", supplied_by="op", score=0.9))
    assert a.id == b.id == c.id and len(ledger) == 1
    assert (a.score, b.score, c.score) == (0.4, 1.0, 1.0)
    assert c.count == 3 and [s.kind for s in c.sources] == ["extracted", "extracted", "supplied"]
    assert (c.subject, c.object) == ("Bob", "Paris")  # the first spelling is kept
    assert c.recorded_at == a.recorded_at
    assert Claim("x", "y", "z", supplied_by="op").confidence == 1.0
    # re-reading the very same source is not a repetition
    assert ledger.add(_triple("Bob lives in Paris.", "Bob", "lives_in", "Paris", 0.4)) == c
    with pytest.raises(SemanticError):
        Claim("x", "y", "z", supplied_by="")
    with pytest.raises(SemanticError):
        Claim("x", "y", "z", supplied_by="op", score=1.5)


def test_temporal_bounds_closing_only_shortens_and_three_instants_stay_apart() -> None:
    ledger = Ledger(_ticks(50 * DAY))  # type: ignore[arg-type]
    e = ledger.add(Claim("Alice", "works_at", "Acme", supplied_by="hr", valid_from=10 * DAY))
    assert e.valid_at(11 * DAY) and not e.valid_at(9 * DAY) and e.valid_at(10**15)
    assert ledger.close_span(e.id, 20 * DAY).valid_until == 20 * DAY
    # closing again later cannot revive; earlier shortens further
    assert ledger.close_span(e.id, 40 * DAY).valid_until == 20 * DAY
    assert ledger.close_span(e.id, 15 * DAY).valid_until == 15 * DAY
    # closing before the start gives an empty span, never a negative one
    assert ledger.close_span(e.id, 5 * DAY).valid_until == 10 * DAY
    # a repetition that brings an open or later end does not reopen it
    again = ledger.add(Claim("Alice", "works_at", "Acme", supplied_by="payroll"))
    assert again.valid_until == 10 * DAY and again.count == 2
    # world time and belief time are separate questions
    f = ledger.add(Claim("Alice", "lives_in", "Rome", supplied_by="hr", valid_until=30 * DAY))
    assert [x.id for x in ledger.edges(at=25 * DAY)] == [f.id]
    assert ledger.edges(at=25 * DAY, as_of=f.recorded_at - 1) == []
    r = ledger.retract(f.id, "wrong city")
    assert ledger.retract(f.id, "again").retracted_at == r.retracted_at  # first wins
    assert ledger.edges(at=25 * DAY) == []
    assert [x.retracted_at for x in ledger.edges(at=25 * DAY, as_of=r.retracted_at - 1)] == [0]
    assert ledger.edges(include_retracted=True, at=25 * DAY) == [r]
    with pytest.raises(LedgerError):
        ledger.close_span("0123456789abcdef", 1)
    with pytest.raises(SemanticError, match="precedes"):
        Claim("a", "b", "c", supplied_by="x", valid_from=5, valid_until=2)


def test_a_closed_span_is_versioned_so_an_as_of_read_sees_it_as_it_was(tmp_path: Path) -> None:
    now = [1000]
    ledger = SQLiteLedger(tmp_path / "l.db", lambda: now[0])
    e = ledger.add(Claim("Alice", "works_at", "Acme", supplied_by="hr", valid_from=10 * DAY))
    now[0] = 2000  # ledger time moves on; the close is believed from here
    ledger.close_span(e.id, 20 * DAY)
    now[0] = 3000
    ledger.close_span(e.id, 15 * DAY)
    ledger.close_span(e.id, 40 * DAY)  # does not lengthen, and is no new version
    # three instants: world time (at), ledger time (as_of), and the span's own bounds
    before = ledger.edges(as_of=1500)
    assert [(x.valid_from, x.valid_until) for x in before] == [(10 * DAY, OPEN)]
    assert ledger.edges(at=30 * DAY, as_of=1500) == before  # then believed still true
    assert [x.valid_until for x in ledger.edges(as_of=2500)] == [20 * DAY]
    assert ledger.edges(at=18 * DAY, as_of=2500) != []
    assert ledger.edges(at=18 * DAY, as_of=3000) == []  # shortened to 15 days at 3000
    assert [x.valid_until for x in ledger.edges()] == [15 * DAY]  # now
    assert ledger.edges(as_of=999) == []  # before it was recorded
    # a later arrival that sets an open bound is a version too
    f = ledger.add(Claim("Bob", "lives_in", "Oslo", supplied_by="hr"))
    now[0] = 4000
    ledger.add(Claim("Bob", "lives_in", "Oslo", supplied_by="tax", valid_until=25 * DAY))
    assert [x.valid_until for x in ledger.edges(as_of=3500) if x.id == f.id] == [OPEN]
    assert [x.valid_until for x in ledger.edges(as_of=4000) if x.id == f.id] == [25 * DAY]
    ledger.close()
    # the versions survive a reopen
    again = SQLiteLedger(tmp_path / "l.db", lambda: now[0])
    assert [(x.valid_until) for x in again.edges(as_of=1500) if x.id == e.id] == [OPEN]
    held = again.get(e.id)
    assert held is not None and held == ledger.get(e.id)
    assert [v[2] for v in held.spans] == [OPEN, 20 * DAY, 15 * DAY]


# ---- stages -------------------------------------------------------------------------------------


def test_a_pipeline_without_an_ingester_is_an_error_and_other_stages_are_skipped() -> None:
    with pytest.raises(PipelineError, match="needs an ingester"):
        Pipeline(None, splitter=SentenceSplitter()).run("mem://a")
    ing = MemoryIngester({"a": "Bob lives in Paris. Eve knows Bob."})
    only = Pipeline(ing).run("mem://a")
    assert [c.text for c in only.chunks] == ["Bob lives in Paris. Eve knows Bob."]
    assert only.triples == [] and [r.kind for r in only.runs] == ["ingest"]
    split = Pipeline(ing, splitter=SentenceSplitter(20)).run("a")
    assert len(split.chunks) == 2 and split.triples == []
    full = Pipeline(ing, splitter=SentenceSplitter(20), extractor=RuleExtractor()).run("a")
    assert {t.predicate for t in full.triples} == {"lives_in", "knows"}
    assert [r.kind for r in full.runs] == ["ingest", "split", "extract", "extract"]


def test_parsers_never_mutate_their_input_and_never_touch_files(tmp_path: Path) -> None:
    md = "# Title\n\nSee [the site](http://x) for **Bob** lives in _Paris_.\n"
    html = "<html><head><title> T </title><style>p{}</style></head><body><p>A &amp; B</p>" \
           "<script>steal()</script></body></html>"  # fmt: skip
    cases: list[tuple[Parser, Doc]] = [
        (MarkdownParser(), Doc("m", str(tmp_path / "gone.md"), md, {"origin": {"x": 1}})),
        (HTMLParser(), Doc("h", "/nonexistent.html", html, {"tags": ["a"]})),
        (JSONParser(), Doc("j", "/nonexistent.json", '{"a": {"b": [1, "x"]}, "c": true}', {})),
    ]
    for parser, doc in cases:
        before = copy.deepcopy(doc)
        out = parser.parse(doc)
        assert doc == before and out.meta is not doc.meta  # input untouched, meta copied
        out.meta["new"] = 1
        assert "new" not in doc.meta
    assert MarkdownParser().parse(cases[0][1]).text.startswith("Title.\n\nSee the site for Bob")
    h = HTMLParser().parse(cases[1][1])
    assert h.text == "A & B" and h.meta["title"] == "T"
    j = JSONParser().parse(cases[2][1])
    assert j.text == 'a.b[0]: 1\na.b[1]: "x"\nc: true' and j.meta["fields"] == {"c": True}
    assert "parse_error" in JSONParser().parse(Doc("k", "x", "not json")).meta
    org = Origin.of_bytes("x.html", html.encode(), "text/html")
    routed = ByMediaType().parse(Doc("r", "x.html", html, with_origin({}, org)))
    assert routed.meta["parser"] == "parse/html"
    norm = Chain(StripControl(), NFC(), CollapseSpaces())
    assert norm.normalize("a\x00b  \t c\u0065\u0301\nd") == "ab c\u00e9\nd"


def test_ingest_drivers_extend_by_registration(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Bob lives in Paris.")
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe")
    reg = Registry()
    reg.register("file", FileIngester(tmp_path))
    reg.register("mem", lambda: MemoryIngester({"n": io.BytesIO(b"Eve knows Bob.")}))
    assert reg.ingest("a.txt")[0].text == "Bob lives in Paris."
    assert reg.ingest(f"file://{tmp_path}/a.txt")[0].meta["origin"]["size"] == 19
    assert reg.ingest("mem://n")[0].text == "Eve knows Bob."
    with pytest.raises(IngestError, match="not utf-8"):
        reg.ingest("bad.txt")
    with pytest.raises(NotBuilt, match="known source"):
        reg.ingest("s3://bucket/key")
    with pytest.raises(UnknownDriver, match="no ingester knows"):
        reg.ingest("gopher://x/y")
    tree = TreeIngester(tmp_path)
    assert [d.text for d in tree.ingest(".")] == ["Bob lives in Paris."]
    assert tree.skipped and "not utf-8" in tree.skipped[0][1]


# ---- splitting ----------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=400),
       st.integers(1, 64), st.integers(4, 64))  # fmt: skip
def test_chunks_tile_any_text_and_never_cut_a_utf8_sequence(
    text: str, size: int, fixed: int
) -> None:
    doc = Doc("d", "x", text)
    raw = text.encode("utf-8")
    for splitter in (SentenceSplitter(size), FixedSplitter(fixed)):
        chunks = splitter.split(doc)
        assert b"".join(c.text.encode() for c in chunks) == raw
        for c in chunks:
            assert raw[c.start : c.end].decode("utf-8") == c.text  # boundaries are rune starts
            biggest = max((len(ch.encode()) for ch in c.text), default=0)
            assert len(c.text.encode()) <= max(getattr(splitter, "max_bytes", fixed), biggest)


def test_overlap_prefixes_the_previous_chunk_and_ranges_still_tile() -> None:
    text = "One two three. Four five six. Seven eight nine. Ten."
    chunks = SentenceSplitter(16, overlap=6).split(Doc("d", "x", text))
    raw = text.encode()
    for prev, cur in itertools.pairwise(chunks):
        assert raw[cur.start : cur.end].decode() == cur.text and cur.start < prev.end
    zero = SentenceSplitter(16).split(Doc("d", "x", text))
    assert [(c.start, c.end) for c in zero][-1][1] == chunks[-1].end


# ---- extraction ---------------------------------------------------------------------------------


def test_schema_check_and_confidence_floor_are_separate_settings() -> None:
    text = "Alice Smith works at Acme Corp. Alice Smith is a engineer. Bob likes jazz music."
    chunk = Chunk("d", 0, text, 0, len(text))
    every = {(t.predicate, t.score) for t in RuleExtractor().extract(chunk)}
    assert every == {("works_at", 0.9), ("is_a", 0.6), ("likes", 0.7)}
    schema = Schema(frozenset({"works_at", "is_a"}))
    only_schema = RuleExtractor(schema=schema)
    assert {t.predicate for t in only_schema.extract(chunk)} == {"works_at", "is_a"}
    assert [r.reason.split(":")[0] for r in only_schema.rejected] == ["schema"]
    only_floor = RuleExtractor(floor=0.65)
    assert {t.predicate for t in only_floor.extract(chunk)} == {"works_at", "likes"}
    assert [r.reason.split(":")[0] for r in only_floor.rejected] == ["floor"]
    both = RuleExtractor(schema=schema, floor=0.65)
    assert {t.predicate for t in both.extract(chunk)} == {"works_at"}
    assert sorted(r.reason.split(":")[0] for r in both.rejected) == ["floor", "schema"]


class _Down:
    def complete(self, prompt: str, schema: object) -> str:
        raise ModelUnavailable("gateway unreachable")


class _Echo:
    def complete(self, prompt: str, schema: object) -> str:
        return '{"triples": [{"subject": "Bob", "predicate": "lives_in", "object": "Paris", ' \
               '"evidence": "Bob lives in Paris.", "score": 0.3}]}'  # fmt: skip


def test_the_model_path_and_its_fallback_to_rules() -> None:
    chunk = Chunk("d", 0, "Bob lives in Paris.", 0, 19)
    model = ModelExtractor(_Echo(), "echo", schema=Schema(DEFAULT_PREDICATES))
    [t] = model.extract(chunk)
    assert (t.score, t.extractor, t.span) == (0.3, "extract/model:echo", Span(0, 19))
    floored = ModelExtractor(_Echo(), "echo", floor=0.5)
    assert floored.extract(chunk) == [] and "floor" in floored.rejected[0].reason
    fb = Fallback(ModelExtractor(_Down(), "down"), RuleExtractor())
    assert [t.extractor for t in fb.extract(chunk)] == ["extract/rules-1"] and fb.fell_back == 1
