"""The tiers' loose ends: bounded refusal lists in every semantic store, entity kinds and
the rule that files an edge as a typed claim only when its ends' kinds fit, hedged edges
and claims kept as hedged (never as asserted), and compact tier-1 rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from hirmem.semantic import claims, devices
from hirmem.semantic.claims import ClaimStore, Statement
from hirmem.semantic.devices import DeviceFeed
from hirmem.semantic.planner import DEFAULT_ONTOLOGY
from hirmem.semantic.substrate import Substrate
from test_semantic_devices import _store


def test_claim_refusals_are_all_counted_and_the_latest_listed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(claims, "KEPT_REFUSALS", 5)
    store = ClaimStore(DEFAULT_ONTOLOGY)
    for i in range(12):  # no such predicate: each one refused
        assert store.write(Statement("Alice", f"person.nope{i}", "x", "Alice x", f"d{i}",
                                     "c")) is None  # fmt: skip
    assert store.refused() == 12
    listed = [d for _, d in store.refusals()]
    assert listed == [f"no template: predicate 'person.nope{i}' is in no template"
                      for i in range(7, 12)]  # fmt: skip


def test_claim_refusal_count_survives_reopening(tmp_path: Path) -> None:
    path = str(tmp_path / "c.db")
    store = ClaimStore(DEFAULT_ONTOLOGY, path)
    store.write(Statement("Alice", "person.residence", "Oslo", "Bob lives in Oslo", "d", "c"))
    store.close()
    again = ClaimStore(DEFAULT_ONTOLOGY, path)
    assert again.refused() == 1 and again.refusals()[0][0] == "subject not in source"
    again.close()


def test_a_device_feeds_skipped_records_are_all_counted_and_the_latest_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(devices, "KEPT_SKIPS", 1)
    store = _store(tmp_path / "host.db")
    feed = DeviceFeed(store, Substrate.in_memory())
    for _ in range(3):  # the same records again: the non-UTF-8 one is skipped each time
        feed.pull(0)
    assert feed.skips == 3 and len(feed.skipped) == 1
    assert "not UTF-8" in feed.skipped[0][1]
