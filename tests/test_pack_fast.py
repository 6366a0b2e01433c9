"""The pack verifier's fast path against the strict one, over thousands of packs.

:func:`hirmem.protocol.packs.verify_pack` reads a pack with one cbor2 decode of the
envelope and one of the payload, checks the canonical form once for the whole payload,
and checks each record with :func:`~hirmem.protocol.records.wire_shaped` and
:func:`~hirmem.protocol.records.wire_sound` instead of building and checking it field by
field; where it cannot vouch, the strict reader and ``Record.check`` decide. With
``fast=False`` only the strict path runs: that is the oracle here. For every input both
must give the same outcome: the same accepted pack (every field, every record), or the
same refusal (reason, message, pack id and seq). The inputs are valid packs, packs with
one byte changed, and packs whose payload was altered and signed again (so the checks
behind the signature are reached): records with a wrong score, link, hash, flag, type or
size, non-deterministic encodings, extra or missing fields.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

import cbor2
import pytest

from hirmem.protocol import cbor, packs
from hirmem.protocol.cbor import Tag
from hirmem.protocol.errors import HirmemError, PackError
from hirmem.protocol.gate import FLAGS_MASK
from hirmem.protocol.keys import derive_test_key
from hirmem.protocol.packs import (
    COSE_SIGN1_TAG,
    ChainHead,
    PackKind,
    TrustedKey,
    pack_id,
    protected_header,
    read_unverified,
    sig_structure,
    sign_pack,
    verify_pack,
)
from hirmem.protocol.records import (
    GENESIS,
    Record,
    record_id,
    wire_shaped,
    wire_sound,
)

KEY = derive_test_key("fast path device")
SIGNER = bytes.fromhex("f0f1f2f3f4f5f6f7")
KEYS = {KEY.kid: TrustedKey(KEY.public, SIGNER, PackKind.MEMORY)}
ONE = 0x10000


def outcome(fn: Any, *args: Any, **kw: Any) -> tuple[object, ...]:
    """What a caller can observe: the accepted pack's every field, or the refusal."""
    try:
        got = fn(*args, **kw)
    except PackError as exc:
        return ("refused", exc.reason, str(exc), exc.pack_id, exc.seq)
    pack = got.pack if isinstance(got, packs.Verified) else got
    items = tuple(
        (type(it).__name__, tuple(it.to_wire()) if isinstance(it, Record) else it)
        for it in pack.items
    )
    dup = (got.duplicate,) if isinstance(got, packs.Verified) else ()
    return ("ok", *dup, pack.kind, pack.pack_id, pack.signer, pack.seq, pack.prev,
            pack.created, items, pack.kid, pack.encoded, pack.hash)  # fmt: skip


def random_source(rng: random.Random) -> str:
    alphabet = "abcxyz0/_-é€𝄞"
    return "".join(rng.choice(alphabet) for _ in range(rng.choice([0, 1, 5, 16, 17, 20, 40])))


def random_record(rng: random.Random, n: int, link: bytes) -> Record:
    """A record as a device captures it (consistent), sometimes at an edge of a field."""
    payload = rng.choice([b"", b"x", b'{"t": 21.5}', rng.randbytes(256),
                          rng.randbytes(rng.randrange(257))])
    flags = rng.choice([FLAGS_MASK, 0, 0x07FF, 0x0C53, rng.randrange(0x1000)])
    q = rng.choice([0, 1, 181, 0x8000, ONE, rng.randrange(ONE + 1)])
    p = rng.choice([0, ONE, rng.randrange(ONE + 1)])
    ts = rng.choice([0, 1, 23, 24, 1_780_000_000_000 + n, (1 << 64) - 1])
    source = random_source(rng)
    while len(source.encode()) > 64:
        source = source[:-1]
    context = rng.choice([bytes(32), rng.randbytes(32)])
    return Record.capture(record_id(SIGNER, 1, n), payload, source, ts, context, flags, q, p,
                          rng.randrange(ONE + 1), link)  # fmt: skip


def sign_payload(payload: bytes, kid: bytes = KEY.kid) -> bytes:
    """A COSE_Sign1 around any payload bytes, signed with the device key."""
    protected = protected_header(kid)
    signature = KEY.sign(sig_structure(protected, payload))
    return cbor.encode(Tag(COSE_SIGN1_TAG, [protected, {}, payload, signature]))


def wire_of(rng: random.Random, seq: int, prev: bytes, count: int) -> list[Any]:
    link, items = prev, []
    for j in range(count):
        rec = random_record(rng, seq * 100 + j, link)
        items.append(rec.to_wire())
        link = rec.hash
    return [1, pack_id(SIGNER, seq), SIGNER, seq, prev, 1_780_000_000_000, items]


def mutate_value(rng: random.Random, payload: list[Any]) -> None:
    """Change one thing behind the signature: a record field (value, type or size), the
    number of fields, or a pack field."""
    items = payload[6]
    if not items or rng.random() < 0.15:
        j = rng.randrange(6)
        payload[j] = rng.choice([None, True, -1, 1 << 64, b"", "x", payload[j], 2, [], {}])
        return
    item = items[rng.randrange(len(items))]
    k = rng.randrange(20)
    old = item[k]
    choices: list[Any] = [True, False, None, -1, 0, 1, 3, 4, 5, ONE, ONE + 1, 0xFFF, 0x1000,
                          (1 << 64) - 1, 1 << 64, b"", bytes(16), bytes(32), bytes(33), "",
                          "x" * 65, "é" * 32, "é" * 33, [], {1: 2}, Tag(24, b"")]  # fmt: skip
    if isinstance(old, int):
        choices += [old + 1, old - 1, old ^ 1, old ^ 0x8, old ^ 0x4]
    if isinstance(old, bytes):
        choices += [old[:-1], old + b"\0", bytes([old[0] ^ 1]) + old[1:] if old else b"\1"]
    roll = rng.random()
    if roll < 0.05:
        item.append(0)
    elif roll < 0.1:
        item.pop()
    else:
        item[k] = rng.choice(choices)


def non_deterministic(rng: random.Random, payload: bytes) -> bytes:
    """The payload with one head written longer than it need be, or an indefinite-length
    string or array (well-formed CBOR that cbor2 reads, hirmem refuses)."""
    value = cbor2.loads(payload)
    roll = rng.random()
    if roll < 0.5:
        # the created time (index 5) as a 9-byte head even when it fits in fewer
        head = b"\x1b" + value[5].to_bytes(8, "big")
        prefix = cbor.encode(value[:5])[1:]
        rest = b"".join(cbor.encode(v) for v in value[6:])
        return bytes(b"\x87" + prefix + head + rest)
    if roll < 0.75:
        # the items array indefinite
        return payload[: -len(cbor.encode(value[6]))] + b"\x9f" + b"".join(
            cbor.encode(it) for it in value[6]) + b"\xff"  # fmt: skip
    return payload + b"\x00"  # trailing bytes


def cases(seed: int, count: int) -> list[tuple[bytes, ChainHead | None]]:
    rng = random.Random(seed)
    out: list[tuple[bytes, ChainHead | None]] = []
    while len(out) < count:
        seq = rng.randrange(1, 50)
        prev = rng.choice([GENESIS, rng.randbytes(32)])
        payload = wire_of(rng, seq, prev, rng.choice([0, 1, 2, 8]))
        head = rng.choice([None, ChainHead(seq - 1, prev), ChainHead(seq + 1, prev),
                           ChainHead(seq, prev), ChainHead(seq - 1, rng.randbytes(32))])
        kind = rng.random()
        if kind < 0.3:
            data = sign_payload(cbor.encode(payload))
        elif kind < 0.7:
            mutate_value(rng, payload)
            try:
                data = sign_payload(cbor.encode(payload))
            except Exception:  # a value hirmem CBOR cannot write: write it with cbor2
                data = sign_payload(cbor2.dumps(payload))
        elif kind < 0.85:
            flipped = bytearray(sign_payload(cbor.encode(payload)))
            k = rng.randrange(len(flipped))
            flipped[k] ^= 1 << rng.randrange(8)
            data = bytes(flipped)
        else:
            data = sign_payload(non_deterministic(rng, cbor.encode(payload)))
        if head is not None and head.seq == seq and rng.random() < 0.5:
            head = ChainHead(seq, hashlib.sha256(data).digest())  # the head itself again
        out.append((data, head))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_fast_and_strict_verification_agree(seed: int) -> None:
    vouched = refused = 0
    for data, head in cases(seed, 1000):
        fast = outcome(verify_pack, data, KEYS, head, PackKind.MEMORY)
        strict = outcome(verify_pack, data, KEYS, head, PackKind.MEMORY, fast=False)
        assert fast == strict, (data.hex(), head)
        vouched += packs._read_fast(data, PackKind.MEMORY) is not None
        refused += fast[0] == "refused"
    # both sides of the comparison were exercised
    assert vouched > 300 and refused > 300, (vouched, refused)


def strict_read(data: bytes, kind: PackKind) -> packs.Pack:
    """read_unverified as it was: the strict reader only."""
    _, payload, _, kid = packs._envelope(data)
    return packs._parse_payload(payload, kind, kid, data)


@pytest.mark.parametrize("seed", range(2))
def test_fast_and_strict_reading_agree(seed: int) -> None:
    """read_unverified (the memory side's reader) takes the fast path too."""
    for data, _ in cases(100 + seed, 1000):
        assert outcome(read_unverified, data, PackKind.MEMORY) == outcome(
            strict_read, data, PackKind.MEMORY)


def test_every_valid_pack_is_vouched_for_by_the_fast_path() -> None:
    """The fast path is not a path that always declines: a device's packs take it."""
    rng = random.Random(7)
    prev, head = GENESIS, None
    for seq in range(1, 200):
        link, recs = prev, []
        for j in range(rng.choice([1, 8, 32])):
            rec = random_record(rng, seq * 100 + j, link)
            recs.append(rec)
            link = rec.hash
        pack = sign_pack(KEY, PackKind.MEMORY, SIGNER, seq, prev, seq, recs)
        read = packs._read_fast(pack.encoded, PackKind.MEMORY)
        assert read is not None and read.sound
        assert verify_pack(pack.encoded, KEYS, head, PackKind.MEMORY).pack == pack
        prev, head = pack.hash, ChainHead(seq, pack.hash)


def random_wire(rng: random.Random) -> list[Any]:
    link = rng.choice([GENESIS, rng.randbytes(32)])
    item = random_record(rng, rng.randrange(1 << 20), link).to_wire()
    if rng.random() < 0.8:
        mutate_value(rng, [0, 0, 0, 0, 0, 0, [item]])
    return item


def test_record_predicates_match_from_wire_and_check() -> None:
    """wire_shaped is from_wire's acceptance and wire_sound check()'s (with the id the
    signer's), over records with one field changed in value, type or size."""
    rng = random.Random(3)
    shaped = sound = 0
    for _ in range(20000):
        item = random_wire(rng)
        try:
            rec = Record.from_wire(item)
        except HirmemError:
            assert not wire_shaped(item), item
            continue
        assert wire_shaped(item), item
        shaped += 1
        link = item[19] if rng.random() < 0.9 else rng.randbytes(32)
        signer = SIGNER if rng.random() < 0.95 else rng.randbytes(8)
        try:
            rec.check(link)
            passes = rec.id[:8] == signer
        except HirmemError:
            passes = False
        assert wire_sound(item, signer, link) == passes, item
        sound += passes
    assert shaped > 5000 and sound > 2000, (shaped, sound)


def test_knowledge_packs_read_alike() -> None:
    """Knowledge packs (the host's, read back by the session) take the same fast path."""
    from hirmem.protocol.packs import KnowledgeItem

    rng = random.Random(11)
    host = derive_test_key("fast path host")
    keys = {host.kid: TrustedKey(host.public, SIGNER, PackKind.KNOWLEDGE)}
    for seq in range(1, 400):
        items = [
            KnowledgeItem(rng.randbytes(8), random_source(rng), "p", random_source(rng),
                          rng.randrange(ONE + 1))
            for _ in range(rng.randrange(4))
        ]  # fmt: skip
        data = sign_pack(host, PackKind.KNOWLEDGE, SIGNER, seq, GENESIS, seq, items).encoded
        if rng.random() < 0.5:
            flipped = bytearray(data)
            flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
            data = bytes(flipped)
        for kind in (PackKind.KNOWLEDGE, PackKind.MEMORY):
            assert outcome(verify_pack, data, keys, None, kind, require_chain=False) == outcome(
                verify_pack, data, keys, None, kind, require_chain=False, fast=False)
            assert outcome(read_unverified, data, kind) == outcome(strict_read, data, kind)


def strict_structure(payload: bytes) -> bool | None:
    """Bit 7 by the rule of SPEC and records.py, restated as the oracle."""
    import json

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        if len(dict(pairs)) != len(pairs):
            raise ValueError("a key twice")
        return dict(pairs)

    def no_constant(name: str) -> Any:
        raise ValueError(name)

    if payload.lstrip()[:1] not in (b"{", b"["):
        return None
    try:
        data = json.loads(payload.decode("utf-8"), object_pairs_hook=unique,
                          parse_constant=no_constant)  # fmt: skip
    except (UnicodeDecodeError, ValueError):
        return False
    if not isinstance(data, dict):
        return True
    form = [data.get(k) for k in ("subject", "attribute", "value")]
    scalar = all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in form)
    if any(k in data for k in ("subject", "attribute", "value")) and not scalar:
        return False
    if "action" in data or "outcome" in data:
        steps = data.get("action")
        steps = [steps] if isinstance(steps, str) else steps
        if not (isinstance(steps, list) and steps and all(isinstance(x, str) for x in steps)
                and isinstance(data.get("outcome"), str)):  # fmt: skip
            return False
    return True


def test_one_read_of_the_payload_gives_both_readers_their_answer() -> None:
    """read_payload: bit 7 exactly as the strict parse found it (the rule as it was,
    restated here), and the JSON object exactly as the memory engine's plain
    ``json.loads`` reads it, over payloads near JSON: keys twice, NaN, lists, scalars,
    structured forms whole and in part, broken UTF-8, odd white space."""
    import json

    from hirmem.protocol.records import read_payload, structurally_consistent

    def plain(payload: bytes) -> object:
        try:
            data = json.loads(payload.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    parts = ['"t": 21.5', '"t": NaN', '"t": Infinity', '"subject": "door"', '"attribute": "open"',
             '"value": 1', '"value": [1]', '"value": true', '"action": "open"',
             '"action": ["a", "b"]', '"action": []', '"outcome": "success"', '"outcome": 1',
             '"t": 1', '"x": {"y": 2}']  # fmt: skip
    rng = random.Random(13)
    seen = set()
    for _ in range(5000):
        body = ", ".join(rng.choice(parts) for _ in range(rng.randrange(5)))
        shape = rng.choice(["{%s}", "[%s]", " \t{%s}\n", "%s", "{%s", "\x0b{%s}", "21.5%s"])
        text = shape % body
        payload = text.encode()
        if rng.random() < 0.05:
            payload += b"\xff"
        consistent, data = read_payload(payload)
        assert consistent is structurally_consistent(payload) is strict_structure(payload)
        assert data == plain(payload), payload
        seen.add((consistent, data is None))
    assert len(seen) == 5  # every combination the readers can see was exercised


def test_wire_read_writes_the_deterministic_encoding() -> None:
    """wire_read's encoding (the verifier compares it with the bytes the record came
    from) is ``cbor.encode(item)`` for every item it vouches for: records with a field
    changed in value, type or size, over more distinct score rows than its memo keeps."""
    from hirmem.protocol import records

    rng = random.Random(17)
    vouched = 0
    for _ in range(12000):
        item = random_wire(rng)
        link = item[19] if len(item) == 20 else GENESIS
        read = records.wire_read(item, SIGNER, link)
        if read is None:
            continue
        vouched += 1
        assert read[0] == cbor.encode(item), item
        assert read[1] == wire_sound(item, SIGNER, link)
    assert vouched > 3000, vouched
    assert len(records._INTS) <= records._INTS_KEPT


def test_an_integer_row_seen_before_does_not_vouch_for_a_bool_or_a_float() -> None:
    """True == 1 and 1.0 == 1 as keys of the memo of integer rows: the types are checked
    before it is asked, so a row of bools or floats is never taken for the ints."""
    rng = random.Random(19)
    item = random_record(rng, 1, GENESIS).to_wire()
    assert wire_shaped(item)  # its integer row is in the memo now
    for k in range(5, 18):
        for other in (bool(item[k]) if item[k] in (0, 1) else None, float(item[k])):
            if other is None:
                continue
            changed = list(item)
            changed[k] = other
            assert not wire_shaped(changed), (k, other)
            data = sign_payload(cbor2.dumps([1, pack_id(SIGNER, 1), SIGNER, 1, GENESIS, 1,
                                             [changed]]))  # fmt: skip
            assert outcome(verify_pack, data, KEYS, None, PackKind.MEMORY) == outcome(
                verify_pack, data, KEYS, None, PackKind.MEMORY, fast=False)


def test_records_made_from_the_wire_are_records_in_every_respect() -> None:
    """shaped_records (the twin class's objects turned into Records) against Record(*item):
    equal, same hash and repr, frozen, copied, pickled and replaced alike."""
    import copy
    import dataclasses
    import pickle

    from hirmem.protocol.records import shaped_records

    rng = random.Random(23)
    items = [random_record(rng, n, GENESIS).to_wire() for n in range(200)]
    made = shaped_records(items)
    for item, rec in zip(items, made, strict=True):
        plain = Record(*item)
        assert type(rec) is Record
        assert rec == plain and hash(rec) == hash(plain) and repr(rec) == repr(plain)
        assert rec.to_wire() == item
        with pytest.raises(dataclasses.FrozenInstanceError):
            rec.payload = b"changed"  # type: ignore[misc]
        assert copy.copy(rec) == plain and pickle.loads(pickle.dumps(rec)) == plain
        assert dataclasses.replace(rec, source="x") == dataclasses.replace(plain, source="x")
    assert shaped_records([]) == ()


def test_verified_wire_is_the_pack_records_as_decoded() -> None:
    """Verified.wire (the store's rows) holds each record's fields in wire order, when
    the fast path read the pack; the strict path leaves it None. The pack's own hash,
    handed over as ``data_hash``, gives the same result."""
    rng = random.Random(29)
    prev = GENESIS
    for seq in range(1, 40):
        payload = wire_of(rng, seq, prev, rng.choice([0, 1, 8, 40]))
        data = sign_payload(cbor.encode(payload))
        got = verify_pack(data, KEYS, None if seq == 1 else ChainHead(seq - 1, prev),
                          PackKind.MEMORY)  # fmt: skip
        assert got.wire is not None
        assert [Record(*row) for row in got.wire] == list(got.pack.items)
        assert got.wire == payload[6]
        head = None if seq == 1 else ChainHead(seq - 1, prev)
        strict = verify_pack(data, KEYS, head, PackKind.MEMORY, fast=False)
        assert strict.wire is None and strict.pack == got.pack
        hashed = verify_pack(data, KEYS, head, PackKind.MEMORY,
                             data_hash=hashlib.sha256(data).digest())  # fmt: skip
        assert hashed.pack == got.pack and hashed.wire == got.wire
        prev = got.pack.hash


def test_sig_structure_is_the_encoded_array() -> None:
    rng = random.Random(31)
    for size in (0, 1, 23, 24, 255, 256, 1000, 65535, 65536):
        protected, payload = rng.randbytes(size % 50), rng.randbytes(size)
        assert sig_structure(protected, payload) == cbor.encode(
            ["Signature1", protected, b"", payload])
