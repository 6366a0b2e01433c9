"""Memory object, lifecycle state machine and configuration of the memory engine."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import pytest

from hirmem.memory.config import MemoryConfig
from hirmem.memory.model import Layer, Memory, State, layer_for
from hirmem.memory.states import LEGAL, IllegalTransition, check_transition, is_legal
from hirmem.protocol.errors import HirmemError
from hirmem.protocol.records import record_hash

SCHEMA_FIELDS = [
    "id",
    "payload",
    "source",
    "timestamp",
    "context",
    "h",
    "i",
    "r",
    "f",
    "c",
    "rn",
    "confidence",
    "priority",
    "links",
    "access_count",
    "strength",
    "hash",
    "prev_hash",
    "audit_seq",
    "state",
    "layer",
]

EXPECTED_LEGAL = {
    ("volatile", "candidate"),
    ("volatile", "quarantined"),
    ("candidate", "consolidated"),
    ("candidate", "quarantined"),
    ("candidate", "archived"),
    ("consolidated", "quarantined"),
    ("consolidated", "archived"),
    ("quarantined", "candidate"),
    ("quarantined", "archived"),
}


def test_memory_has_every_schema_field() -> None:
    names = {f.name for f in dataclasses.fields(Memory)}
    missing = [f for f in SCHEMA_FIELDS if f not in names]
    assert not missing


def test_state_and_layer_values_match_protocol_section_7_3() -> None:
    assert [s.name.lower() for s in State] == [
        "volatile", "candidate", "consolidated", "quarantined", "archived",
    ]  # fmt: skip
    assert [x.name.lower() for x in Layer] == [
        "working", "episodic", "semantic", "procedural", "provenance",
    ]  # fmt: skip


def test_content_hash_is_the_protocol_record_hash() -> None:
    m = Memory(id="01" * 16, payload=b"{}", source="s", timestamp=5, context=b"\x07" * 32,
               prev_hash=b"\x09" * 32)  # fmt: skip
    want = record_hash(b"\x01" * 16, b"{}", "s", 5, b"\x07" * 32, b"\x09" * 32)
    assert m.content_hash() == want
    assert m.replace(payload=b"{ }").content_hash() != want


@pytest.mark.parametrize(("old", "new"), list(itertools.product(State, State)))
def test_every_transition_pair_is_legal_or_names_both_states(old: State, new: State) -> None:
    legal = (old.name.lower(), new.name.lower()) in EXPECTED_LEGAL
    assert is_legal(old, new) is legal
    if legal:
        check_transition("m1", old, new)
    else:
        with pytest.raises(IllegalTransition) as info:
            check_transition("m1", old, new)
        text = str(info.value)
        assert old.name.lower() in text and new.name.lower() in text and "m1" in text


def test_archived_is_terminal_and_no_self_loops() -> None:
    assert not any(a is State.ARCHIVED for a, _ in LEGAL)
    assert not any(a is b for a, b in LEGAL)


@pytest.mark.parametrize(
    ("state", "kind", "current", "want"),
    [
        (State.VOLATILE, "fact", Layer.WORKING, Layer.WORKING),
        (State.CANDIDATE, "fact", Layer.WORKING, Layer.EPISODIC),
        (State.CONSOLIDATED, "fact", Layer.EPISODIC, Layer.SEMANTIC),
        (State.CONSOLIDATED, "procedure", Layer.EPISODIC, Layer.PROCEDURAL),
        (State.QUARANTINED, "fact", Layer.WORKING, Layer.EPISODIC),
        (State.QUARANTINED, "fact", Layer.SEMANTIC, Layer.SEMANTIC),
        (State.ARCHIVED, "procedure", Layer.PROCEDURAL, Layer.PROCEDURAL),
    ],
)
def test_layer_follows_state(state: State, kind: str, current: Layer, want: Layer) -> None:
    assert layer_for(state, kind, current) is want


def test_config_defaults_are_documented_values() -> None:
    cfg = MemoryConfig()
    assert (cfg.alpha, cfg.beta, cfg.decay_law, cfg.green, cfg.yellow) == (
        0.10, 0.05, "linear", 0.75, 0.50,
    )  # fmt: skip
    assert cfg.archive_strength < cfg.quarantine_strength < cfg.promote_strength


def test_config_loads_overrides_from_json(tmp_path: Path) -> None:
    path = tmp_path / "mem.json"
    path.write_text(json.dumps({"alpha": 0.2, "decay_law": "exponential",
                                "multi_valued_attributes": ["tag"]}))  # fmt: skip
    cfg = MemoryConfig.load(path)
    assert (cfg.alpha, cfg.decay_law, cfg.multi_valued_attributes) == (
        0.2, "exponential", ("tag",),
    )  # fmt: skip
    assert cfg.beta == MemoryConfig().beta
    assert MemoryConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize(
    "bad",
    [{"alpha": -1}, {"decay_law": "cubic"}, {"gate_mode": "approx"}, {"green": 0.4},
     {"decay_tau_s": 0}, {"nonsense": 1}, {"archive_strength": 0.95}],
)  # fmt: skip
def test_config_refuses_bad_values(bad: dict[str, object]) -> None:
    with pytest.raises(HirmemError):
        MemoryConfig.from_dict(bad)
