"""The dashboard's parts without a browser: the SVG charts over random data, the intake
p99 from the daemon's histogram against a sort of the raw observations, and the
vendored htmx file against its record."""

from __future__ import annotations

import hashlib
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from hirmem.api import charts
from hirmem.api.dashboard import HERE, intake_p99
from hirmem.daemon.metrics import INTAKE_BUCKETS, LatencyHistogram
from hirmem.memory.recall import RecallHit

SVG = "{http://www.w3.org/2000/svg}"
names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1,
                max_size=12)  # fmt: skip
numbers = st.floats(0, 1e6, allow_nan=False)


def _parsed(svg: str) -> ET.Element:
    root = ET.fromstring(svg)  # well-formed, whatever the labels held
    assert root.tag == SVG + "svg" and root.get("role") == "img"
    assert root.find(SVG + "title") is not None and root.find(SVG + "desc") is not None
    return root


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(names, numbers, max_size=8))
def test_bars_are_well_formed_and_say_their_numbers(values: dict[str, float]) -> None:
    root = _parsed(charts.bars(values, "<refusals & more>"))
    desc = root.find(SVG + "desc")
    assert desc is not None and desc.text is not None
    for name in values:
        assert name in desc.text


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(names, st.lists(st.integers(0, 1000), max_size=30), max_size=4))
def test_columns_are_well_formed(series: dict[str, list[int]]) -> None:
    root = _parsed(charts.columns(series, "verdicts"))
    drawn = sum(1 for r in root.iter(SVG + "rect") if r.find(SVG + "title") is not None)
    assert drawn == sum(1 for s in series.values() for v in s if v)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(names, st.lists(st.tuples(st.floats(0, 1e9), st.floats(0, 1)),
                                       max_size=20), max_size=3))  # fmt: skip
def test_lines_are_well_formed_with_a_mark_per_point(
    series: dict[str, list[tuple[float, float]]],
) -> None:
    root = _parsed(charts.lines(series, "strength"))
    marks = len(list(root.iter(SVG + "circle"))) + sum(
        1 for r in root.iter(SVG + "rect"))  # fmt: skip
    assert marks == sum(len(p) for p in series.values())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["pack", "reboot", "gap", "refusal"]),
                          st.integers(0, 10**13), names), max_size=40))  # fmt: skip
def test_the_timeline_marks_every_event(events: list[tuple[str, int, str]]) -> None:
    evs = [{"kind": k, "at_ms": t, "detail": d} for k, t, d in events]
    root = _parsed(charts.timeline(evs, "device"))
    marks = [t for t in root.iter(SVG + "text") if t.find(SVG + "title") is not None]
    assert len(marks) == len(evs)


class _Histograms(Collector):
    def __init__(self, by_line: list[LatencyHistogram]) -> None:
        self.by_line = by_line

    def collect(self):  # type: ignore[no-untyped-def]
        family = HistogramMetricFamily("hirmem_intake_seconds", "h",
                                       labels=["device", "outcome"])  # fmt: skip
        for n, h in enumerate(self.by_line):
            buckets, total = h.snapshot()
            family.add_metric([str(n), "accepted"], buckets, total)
            family.add_metric([str(n), "refused"], [(b, 0.0) for b, _ in buckets], 0.0)
        yield family


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.floats(0, 20, allow_nan=False), max_size=60), min_size=1,
                max_size=4))  # fmt: skip
def test_intake_p99_is_the_bucket_the_99th_percentile_falls_in(lines: list[list[float]]) -> None:
    hists = []
    for obs in lines:
        h = LatencyHistogram()
        for x in obs:
            h.observe(x)
        hists.append(h)
    registry = CollectorRegistry()
    registry.register(_Histograms(hists))
    offers, p99 = intake_p99(generate_latest(registry))
    everything = sorted(x for obs in lines for x in obs)
    assert offers == len(everything)
    if not everything:
        assert p99 is None
        return
    # the oracle: the smallest bound with at least 99 % of the observations at or below
    bounds = [*INTAKE_BUCKETS, float("inf")]
    want = next(b for b in bounds if sum(1 for x in everything if x <= b) >= 0.99 * len(
        everything))  # fmt: skip
    assert p99 == want


def test_the_vendored_htmx_is_the_recorded_file() -> None:
    record = (HERE / "static" / "VENDORED.md").read_text(encoding="utf-8")
    digest = re.search(r"`htmx\.min\.js` \|.*\| ([0-9a-f]{64}) \|", record)
    assert digest, "VENDORED.md records htmx.min.js with its sha256"
    data = (HERE / "static" / "htmx.min.js").read_bytes()
    assert hashlib.sha256(data).hexdigest() == digest.group(1)
    assert b'version:"2.0.11"' in data and "2.0.11" in record
    assert "Zero-Clause BSD" in (HERE / "static" / "htmx.LICENSE").read_text(encoding="utf-8")


def test_recalls_answered_together_are_what_each_would_get_alone(tmp_path: Path) -> None:
    """A differential test: 200 random queries (k of 1, 5 or 10; the texts share words,
    so scores tie) from 16 threads through the batcher against the same queries one by
    one (touch off, so neither changes the memory)."""
    import random
    import threading

    from hirmem.api.batching import RecallBatcher
    from hirmem.memory.engine import MemoryEngine

    rng = random.Random(18)
    words = ["pump", "valve", "zone", "hall", "fan", "motor", "line", "door", "level",
             "alarm", "flow", "temp", "pressure", "north", "south"]  # fmt: skip
    engine = MemoryEngine(tmp_path / "m.db", clock=lambda: 1_780_000_000.0)
    try:
        for n in range(300):
            engine.admit(" ".join(rng.sample(words, 4)) + f" {n}", "test")
        asks = [(" ".join(rng.sample(words, 3)), rng.choice([1, 5, 10])) for _ in range(200)]
        alone = [engine.recall(q, k, touch=False) for q, k in asks]
        batcher = RecallBatcher(engine, max_batch=16)
        got: dict[int, list[RecallHit]] = {}
        start = threading.Barrier(16)

        def ask(mine: list[int]) -> None:
            start.wait()
            for i in mine:
                got[i] = batcher.recall(asks[i][0], asks[i][1], False)

        threads = [threading.Thread(target=ask, args=(list(range(t, 200, 16)),))
                   for t in range(16)]  # fmt: skip
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        for i, want in enumerate(alone):
            # the same scores in the same order; which of two memories tied at the k-th
            # score comes back may differ (the batch ranks more candidates), every
            # memory scored above the last one is the same
            assert [round(h.score, 9) for h in got[i]] == [round(h.score, 9) for h in want]
            if want:
                floor = round(want[-1].score, 9)
                assert {h.id for h in got[i] if round(h.score, 9) > floor} == {
                    h.id for h in want if round(h.score, 9) > floor}  # fmt: skip
        assert batcher.batches < 200 and batcher.largest > 1  # they were answered together
    finally:
        engine.close()
