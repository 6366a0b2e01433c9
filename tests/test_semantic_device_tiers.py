"""Issue 16, point 2: device records in the same tiers. A reading is a claim of its sensor
(subject device/sensor, predicate ``reading.<field>``, the value with its unit, valid from
the capture time; successive readings a series), every row in the record's container
(tenant/device/source), and the fence between two readers over one store.
"""

from __future__ import annotations

import json
import random
from decimal import Decimal
from pathlib import Path

import pytest

from hirmem.daemon.store import Store
from hirmem.protocol.keys import derive_test_key
from hirmem.protocol.packs import PackKind, sign_pack
from hirmem.protocol.records import GENESIS, Record, record_id
from hirmem.semantic.claims import ClaimRefused, canonical, unit_of
from hirmem.semantic.devices import DeviceFeed
from hirmem.semantic.retrieve import Embedder
from hirmem.semantic.substrate import Substrate

KEY_A = derive_test_key("tiers device a")
KEY_B = derive_test_key("tiers device b")
DEV_A, DEV_B = bytes.fromhex("7101710171017101"), bytes.fromhex("7202720272027202")
T0 = 1_790_000_000_000
CONTEXT = bytes(range(32))


def _pack(store: Store, dev: bytes, key: object, bodies: list[tuple[str, dict[str, object]]],
          seq: int = 1, prev: bytes = GENESIS) -> bytes:  # fmt: skip
    records, link = [], prev
    for n, (source, body) in enumerate(bodies, start=1):
        rec = Record.capture(record_id(dev, seq, n), json.dumps(body).encode(), source,
                             T0 + seq * 100_000 + 1000 * n, CONTEXT, 0x0FFF, 0x10000, 0xE666,
                             0x8000, link)  # fmt: skip
        records.append(rec)
        link = rec.hash
    pack = sign_pack(key, PackKind.MEMORY, dev, (1 << 32) | seq, prev,  # type: ignore[arg-type]
                     T0 + seq * 100_000 + 99_000, records)  # fmt: skip
    taken = store.take_pack(dev, pack.encoded)
    assert taken.status == "accepted", taken.detail
    return pack.hash


def _store(tmp_path: Path) -> Store:
    store = Store(tmp_path / "hirmem.db")
    store.register_device(DEV_A, KEY_A.public.raw, "a")
    store.register_device(DEV_B, KEY_B.public.raw, "b")
    first = _pack(store, DEV_A, KEY_A, [("temp0", {"temp_c": 21.50}), ("temp0", {"temp_c": 22}),
                                        ("plc", {"subject": "valve 7", "attribute": "position",
                                                 "value": "shut"})])  # fmt: skip
    _pack(store, DEV_A, KEY_A, [("temp0", {"temp_c": 23.25, "door": "open"}),
                                ("plc", {"subject": "valve 7", "attribute": "position",
                                         "value": "open"})], seq=2, prev=first)  # fmt: skip
    _pack(store, DEV_B, KEY_B, [("temp0", {"temp_c": 5.0}), ("temp0", {"temp_c": 6.5})])
    return store


def test_readings_are_a_series_of_claims_of_their_sensor(tmp_path: Path) -> None:
    store = _store(tmp_path)
    sub = Substrate.in_memory(passage_embedder=Embedder())
    DeviceFeed(store, sub).pull()
    a = f"local/{DEV_A.hex()}/temp0"
    sensor = f"{DEV_A.hex()}/temp0"
    history = sub.claims.history(sensor, "reading.temp_c", {a})
    assert [r.value for r in history] == ["21.5 degC", "22 degC", "23.25 degC"]
    assert [r.attestations[0].valid_from for r in history] == [
        T0 + 101_000, T0 + 102_000, T0 + 201_000]  # the capture times  # fmt: skip
    now = sub.claims.current(sensor, "reading.temp_c", {a})
    assert [r.value for r in now] == ["23.25 degC"]
    then = sub.claims.current(sensor, "reading.temp_c", {a}, at=T0 + 150_000)
    assert [r.value for r in then] == ["22 degC"]
    assert sub.claims.current(sensor, "reading.temp_c", {a}, at=T0) == []
    assert [r.value for r in sub.claims.current(sensor, "reading.door", {a})] == ["open"]
    # a structured record is a claim of the subject it names, superseded the same way
    plc = {f"local/{DEV_A.hex()}/plc"}
    assert [r.value for r in sub.claims.history("valve 7", "reading.position", plc)] == [
        "shut", "open"]  # fmt: skip
    assert [r.value for r in sub.claims.current("valve 7", "reading.position", plc)] == ["open"]
    # counted in SQL over the rows the reader may read
    assert sub.claims.count("reading.temp_c", {a}) == 1
    b = f"local/{DEV_B.hex()}/temp0"
    assert sub.claims.count("reading.temp_c", {a, b}) == 2
    assert sub.claims.refusals() == []
    store.close()


def test_two_readers_over_one_store_see_only_their_devices(tmp_path: Path) -> None:
    store = _store(tmp_path)
    sub = Substrate.in_memory(passage_embedder=Embedder())
    DeviceFeed(store, sub, tenant="acme").pull()
    a, b = f"acme/{DEV_A.hex()}/temp0", f"acme/{DEV_B.hex()}/temp0"
    sensor_b = f"{DEV_B.hex()}/temp0"
    assert sub.claims.current(sensor_b, "reading.temp_c", {a}) == []
    assert [r.value for r in sub.claims.current(sensor_b, "reading.temp_c", {b})] == ["6.5 degC"]
    _, only_a = sub.remember("temp_c reading", {a}, 20)
    assert only_a and {h.container for h in only_a} == {a}
    _, only_b = sub.remember("temp_c reading", {b}, 20)
    assert only_b and {h.container for h in only_b} == {b}
    assert sub.remember("temp_c reading", set(), 20) == (None, [])
    store.close()


def test_a_reading_keeps_its_unit_and_refuses_one_it_does_not_know() -> None:
    assert unit_of("temp_c") == "degC" and unit_of("battery") == "" and unit_of("p_hpa") == "hPa"
    assert canonical("reading", "21.50 C") == canonical("reading", "21.5 degC") == "21.5 degC"
    assert canonical("reading", "Open") == "open"
    with pytest.raises(ClaimRefused, match="unknown unit"):
        canonical("reading", "21.5 furlongs")
    with pytest.raises(ClaimRefused, match="not a reading"):
        canonical("reading", "about 21 or so")
    # differential: any spelling of a number is the one decimal a Decimal oracle reads
    rng = random.Random(16)
    for _ in range(2000):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 6)))
        value = f"{'-' if rng.random() < 0.3 else ''}{digits}.{'0' * rng.randint(0, 3)}"
        value += "".join(rng.choice("0123456789") for _ in range(rng.randint(0, 3)))
        unit = rng.choice(["", "C", "degC", "%", "hPa", "mV"])
        got = canonical("reading", f"{value.rstrip('.')} {unit}".strip())
        number, _, spelled = got.partition(" ")
        assert Decimal(number) == Decimal(value.rstrip(".")), (value, got)
        assert not (("." in number) and number.endswith("0")) and not number.endswith(".")
        assert spelled == {"": "", "C": "degC", "degC": "degC", "%": "%", "hPa": "hPa",
                           "mV": "mV"}[unit]  # fmt: skip


def test_semantic_devices_keeps_the_engines_distilled_memories(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``hirmem semantic devices --memory``: the engine's pattern over a sensor's readings
    is kept in the substrate's file as a tier-1 memory, and running again updates it."""
    from hirmem.cli.entry import main

    store = Store(tmp_path / "hirmem.db")
    store.register_device(DEV_A, KEY_A.public.raw, "a")
    _pack(store, DEV_A, KEY_A, [("temp0", {"temp_c": v}) for v in (20.5, 21.0, 21.5, 22.0)])
    store.close()
    intake, mem, sem = (str(tmp_path / n) for n in ("hirmem.db", "memory.db", "sem.db"))
    assert main(["memory", "--db", mem, "follow", "--intake", intake]) == 0
    argv = ["semantic", "devices", "--store", intake, "--db", sem, "--memory", mem]
    assert main(argv) == 0
    assert "1 distilled memories kept" in capsys.readouterr().out
    assert main(argv) == 0  # nothing new fed; the pattern's memory rewritten, not doubled
    sub = Substrate.open(sem, passage_embedder=Embedder())
    try:
        [hit] = sub.memories.search("temp0 temp_c readings", 5, {f"local/{DEV_A.hex()}/distill"})
        assert "4 readings" in hit.text and len(sub.memories) == 1
    finally:
        sub.close()
