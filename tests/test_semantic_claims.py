"""Tier 2 claims: honest writes, canonical values, supersession by time, the fence, counts."""

from __future__ import annotations

import pytest

from hirmem.semantic.claims import (
    ClaimRefused,
    ClaimStore,
    Ontology,
    Statement,
    Template,
    canonical,
)
from semantic_backends import semantic_backend, semantic_server  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("semantic_backend")

ONTOLOGY = Ontology([
    Template("door.state", True, "text", frozenset({"open", "closed"})),
    Template("person.residence", True, "entity"),
    Template("person.hobby", False, "text"),
    Template("sensor.reading", True, "number"),
    Template("deal.value", True, "money"),
    Template("person.birthday", True, "date"),
])  # fmt: skip


class Clock:
    def __init__(self) -> None:
        self.now = 10_000

    def __call__(self) -> int:
        return self.now


def _store() -> tuple[ClaimStore, Clock]:
    clock = Clock()
    return ClaimStore(ONTOLOGY, clock=clock), clock


def say(store: ClaimStore, subject: str, predicate: str, value: str, quote: str, at: int,
        container: str = "a", **kw: object) -> object:  # fmt: skip
    return store.write(Statement(subject, predicate, value, quote, f"doc{at}", container,
                                 valid_from=at, said_at=at, **kw))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kind", "a", "b"),
    [
        ("number", "21.8", "21.80"),
        ("number", "12k", "12,000"),
        ("money", "$410k a year", "USD 410000/yr"),
        ("money", "€1.5m", "1,500,000 EUR"),
        ("date", "8 May 2023", "2023-05-08"),
        ("date", "May 8, 2023", "2023-05-08"),
        ("entity", "  Lake  Como ", "lake como"),
    ],
)
def test_one_spelling_per_value(kind: str, a: str, b: str) -> None:
    assert canonical(kind, a) == canonical(kind, b)


def test_different_values_stay_different() -> None:
    assert canonical("number", "21.8") != canonical("number", "21.08")
    assert canonical("money", "$410k a year") != canonical("money", "$410k a month")
    with pytest.raises(ClaimRefused, match="not a date"):
        canonical("date", "someday")


@pytest.mark.parametrize(
    ("statement", "reason"),
    [
        (Statement("Bob", "person.residence", "Paris", "Alice lives in Paris.", "d", "a"),
         "subject not in source"),
        (Statement("Bob", "person.residence", "Paris", "Bob went home.", "d", "a"),
         "entity not in source"),
        (Statement("temp0", "sensor.reading", "21.5", "temp0 read 21 degrees", "d", "a"),
         "figure not in source"),
        (Statement("Priya", "person.residence", "Oslo", "Priya does not live in Oslo.", "d",
                   "a", negated=True), "denial"),
        (Statement("Bob", "person.shoe_size", "44", "Bob wears 44.", "d", "a"), "no template"),
        (Statement("front", "door.state", "ajar", "the front door is ajar", "d", "a"),
         "illegal value"),
        (Statement("Bob", "person.residence", "Paris", "Bob lives in Paris.", "d", ""),
         "no container"),
    ],
)  # fmt: skip
def test_dishonest_statements_are_refused_and_kept(statement: Statement, reason: str) -> None:
    store, _ = _store()
    assert store.write(statement) is None
    assert store.refusals()[-1][0] == reason
    assert store.current(statement.subject, "person.residence", {"a"}) == []


def test_a_newer_value_supersedes_and_the_old_stays_history() -> None:
    store, clock = _store()
    say(store, "front", "door.state", "open", "front door open", 1000)
    say(store, "front", "door.state", "closed", "front door closed", 2000)
    say(store, "front", "door.state", "Open", "front door open again", 3000)
    clock.now = 4000
    [now] = store.current("front", "door.state", {"a"})
    assert now.value == "open"
    assert store.current("front", "door.state", {"a"}, at=2500)[0].value == "closed"
    assert store.current("front", "door.state", {"a"}, at=1500)[0].value == "open"
    assert store.current("front", "door.state", {"a"}, at=500) == []
    assert [r.value for r in store.history("front", "door.state", {"a"})] == ["open", "closed"]
    # the same value said twice is one claim with two attestations
    assert len(now.attestations) == 2


def test_accumulating_predicates_accumulate() -> None:
    store, clock = _store()
    say(store, "Maya", "person.hobby", "chess", "Maya plays chess", 1000)
    say(store, "Maya", "person.hobby", "climbing", "Maya took up climbing", 2000)
    clock.now = 3000
    hobbies = {r.value for r in store.current("Maya", "person.hobby", {"a"})}
    assert hobbies == {"chess", "climbing"}


def test_an_empty_interval_is_kept_open() -> None:
    store, clock = _store()
    say(store, "Bob", "person.residence", "Oslo", "Bob lived in Oslo", 5000, invalid_at=5000)
    clock.now = 9000
    assert store.current("Bob", "person.residence", {"a"})[0].value == "oslo"


def test_an_ended_claim_is_not_current() -> None:
    store, clock = _store()
    say(store, "Bob", "person.residence", "Oslo", "Bob lived in Oslo until 2019", 1000,
        invalid_at=2000)  # fmt: skip
    clock.now = 3000
    assert store.current("Bob", "person.residence", {"a"}) == []
    assert store.current("Bob", "person.residence", {"a"}, at=1500)[0].value == "oslo"


def test_the_fence_decides_what_is_current() -> None:
    store, clock = _store()
    say(store, "Bob", "person.residence", "Oslo", "Bob lives in Oslo", 1000, container="a")
    say(store, "Bob", "person.residence", "Paris", "Bob moved: Bob lives in Paris", 2000,
        container="b")  # fmt: skip
    clock.now = 3000
    # a reader of "a" alone: nothing from "b" retires, dates or reveals anything
    [mine] = store.current("Bob", "person.residence", {"a"})
    assert mine.value == "oslo" and {a.container for a in mine.attestations} == {"a"}
    assert [r.value for r in store.history("Bob", "person.residence", {"a"})] == ["oslo"]
    assert store.current("Bob", "person.residence", {"a", "b"})[0].value == "paris"
    assert store.current("Bob", "person.residence", set()) == []
    assert store.count("person.residence", {"a"}, "Paris") == 0
    assert store.count("person.residence", {"a", "b"}, "Paris") == 1


def test_counts_are_counted_over_every_row() -> None:
    store, clock = _store()
    for i in range(250):
        say(store, f"door{i}", "door.state", "open", f"door{i} is open", 1000)
    for i in range(0, 250, 5):
        say(store, f"door{i}", "door.state", "closed", f"door{i} is closed", 2000)
    clock.now = 3000
    assert store.count("door.state", {"a"}, "open") == 200
    assert store.count("door.state", {"a"}, "closed") == 50
    assert store.count("door.state", {"a"}) == 250
    assert store.count("door.state", {"a"}, "open", at=1500) == 250
