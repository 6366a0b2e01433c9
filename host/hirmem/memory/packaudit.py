"""The audit record of a device pack's admission: one ``admit-pack`` entry per pack.

A pack's records that contradict and revise nothing (readings, actions, statements:
:func:`hirmem.memory.intake.admit_pack`) are admitted with one audit entry instead of
four per record. Its detail is deterministic CBOR with fixed keys and fixed shapes —
whole numbers, byte strings and the engine's own short texts, no free field (MEM-INV-8):

``device``, ``kid``
    the signer's device id and key id (hex)
``gate_mode``
    ``"fixed"`` (device records are gated in Q16.16)
``gates``
    the distinct gate results of the pack: ``[flags, h, i, r, f, c, rn, w, verdict,
    hard]`` as Q16.16 and integers (a fleet's readings share a handful)
``scores``
    the distinct device-carried scores ``[h, i, r, f, c, rn, w]`` (Q16.16)
``reasons``
    the distinct quarantine reasons (texts the engine wrote, at most 512 characters)
``admissions``
    one array per record, in order: ``[id, hash, gate, scores, state, reason, pattern,
    agrees]`` — the 16-byte memory id, its 32-byte content hash, the index of its gate
    result, of its device scores (-1: none), the state it was admitted in, the index of
    its quarantine reason (-1: none), the index of the pattern it fed (-1: none) and
    whether it agreed with it (PROV: the pattern ``wasDerivedFrom`` the episode)
``patterns``
    the patterns the pack reinforced: ``[memory id, old strength, strength]``
    (strengths as ``repr`` text: this CBOR carries no floats)

The steps an admission implies are those the one-by-one path writes as ``capture``,
``admit`` and ``transition`` records: captured, gated with that gate result, then
candidate, then consolidated (GREEN) — or quarantined. Verify
(:func:`hirmem.memory.evidence.check_rows`) finds a memory's entry through the
``admissions`` table (memory rowid → entry seq and position) and checks the row's hash
against the one the entry carries; that table is an index, not evidence: a row pointed
elsewhere or removed leaves the memory without an audited hash, which verify names.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from hirmem.protocol import cbor
from hirmem.protocol.errors import HirmemError

__all__ = ["ACTION", "Admission", "PackBody", "decode", "encode"]

ACTION = "admit-pack"
_MAX_TEXT = 512


class Admission(NamedTuple):  # a tuple: built once per record, cheaply
    memory_id: bytes  # 16 bytes
    hash: bytes  # 32 bytes
    gate: int
    scores: int = -1
    state: int = 0
    reason: int = -1
    pattern: int = -1
    agrees: int = 0


@dataclass(frozen=True)
class PackBody:
    device: str
    kid: str
    gates: Sequence[Sequence[int]]
    scores: Sequence[Sequence[int]]
    reasons: Sequence[str]
    admissions: Sequence[Admission]
    patterns: Sequence[tuple[str, str, str]]
    gate_mode: str = "fixed"

    def reason_of(self, a: Admission) -> str:
        return self.reasons[a.reason] if a.reason >= 0 else ""


def _ints(row: Sequence[int], size: int, what: str) -> list[int]:
    if len(row) != size or not all(type(v) is int for v in row):
        raise HirmemError(f"admit-pack {what} must be {size} whole numbers, got {row!r}")
    return list(row)


_ROWS: dict[tuple[int, ...], bytes] = {}  # a checked row of whole numbers -> its CBOR
_ROWS_MAX = 4096  # bounded: emptied when full (a fleet's gate results recur)


def _rows(rows: Sequence[Sequence[int]], size: int, what: str) -> bytes:
    """The CBOR array of ``rows`` (each ``size`` whole numbers, checked), each row's
    encoding remembered: a fleet's packs carry the same few gate results and scores."""
    out = [cbor.head(4, len(rows))]
    for row in rows:
        key = tuple(_ints(row, size, what))  # checked first: 1.0 and True equal 1 as keys
        known = _ROWS.get(key)
        if known is None:
            if len(_ROWS) >= _ROWS_MAX:
                _ROWS.clear()
            known = _ROWS[key] = cbor.encode(list(key))
        out.append(known)
    return b"".join(out)


# a reference's CBOR byte for -24..23 (one byte each: nearly always here, as indexes into
# the entry's small tables, states and -1 for none)
_SMALL = {v: v if v >= 0 else 0x1F - v for v in range(-24, 24)}
_INTS_ONLY = {int}


def _refs(refs: tuple[int, ...]) -> bytes:
    """Whole numbers' CBOR, one after the other."""
    try:
        small = bytes(map(_SMALL.__getitem__, refs))
    except (KeyError, TypeError):  # beyond -24..23, or not a number (TypeError: unhashable)
        small = None
    if small is not None and set(map(type, refs)) == _INTS_ONLY:  # (1.0 and True hash as 1)
        return small
    if not all(type(v) is int for v in refs):
        raise HirmemError(f"admit-pack references must be whole numbers, got {refs!r}")
    return b"".join(cbor.encode(v) for v in refs)


def _admission(a: Admission) -> bytes:
    """One admission's array, written out: [bstr 16, bstr 32, six integers]."""
    if len(a.memory_id) != 16 or len(a.hash) != 32:
        raise HirmemError("admit-pack admissions carry a 16-byte id and a 32-byte hash")
    return b"".join((b"\x88\x50", a.memory_id, b"\x58\x20", a.hash, _refs(a[2:])))


_KEYS = ("device", "kid", "gate_mode", "gates", "scores", "reasons", "admissions", "patterns")
# deterministic order: by the keys' encodings (short texts: by length, then bytes)
_ORDER = sorted((cbor.encode(k), k) for k in _KEYS)


_TEXTS: dict[str, bytes] = {}  # a text -> its CBOR (pattern ids and strengths recur)
_TEXTS_MAX = 4096  # bounded: emptied when full


def _text(value: object) -> bytes:
    """A text's CBOR (every text of the entry is one: anything else is refused)."""
    if type(value) is not str:
        raise HirmemError(f"admit-pack texts must be text, got {value!r}")
    known = _TEXTS.get(value)
    if known is None:
        try:
            data = value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise HirmemError(f"admit-pack text is not UTF-8: {exc.reason}") from None
        if len(_TEXTS) >= _TEXTS_MAX:
            _TEXTS.clear()
        known = _TEXTS[value] = cbor.head(3, len(data)) + data
    return known


def encode(body: PackBody) -> bytes:
    """The entry's detail, checked: every field of the fixed shape, nothing else. The
    same bytes as ``cbor.encode`` of the plain map (a test holds them equal), written
    out directly: its shape is fixed (texts, whole numbers, byte strings)."""
    for text in (*body.reasons, body.device, body.kid, body.gate_mode):
        if type(text) is not str or len(text) > _MAX_TEXT:
            raise HirmemError(f"admit-pack text longer than {_MAX_TEXT} characters: {text!r}")
    patterns = [cbor.head(4, len(body.patterns))]
    for pid, old, new in body.patterns:
        float(old), float(new)  # strengths as text: refuse anything else
        patterns += (b"\x83", _text(pid), _text(old), _text(new))
    members = {
        "device": _text(body.device), "kid": _text(body.kid),
        "gate_mode": _text(body.gate_mode),
        "gates": _rows(body.gates, 10, "gate results"),
        "scores": _rows(body.scores, 7, "device scores"),
        "reasons": b"".join((cbor.head(4, len(body.reasons)), *map(_text, body.reasons))),
        "admissions": b"".join((cbor.head(4, len(body.admissions)),
                                *map(_admission, body.admissions))),
        "patterns": b"".join(patterns),
    }  # fmt: skip
    return b"".join((cbor.head(5, len(_ORDER)), *(k + members[name] for k, name in _ORDER)))


def decode(detail: bytes | dict[str, Any]) -> PackBody:
    """An ``admit-pack`` entry's detail (its bytes, or as :meth:`AuditLog.records`
    decoded it); a malformed one raises :class:`HirmemError`."""
    d = cbor.decode(detail) if isinstance(detail, bytes) else detail
    try:
        admissions = [Admission(bytes(r[0]), bytes(r[1]), *(int(x) for x in r[2:8]))
                      for r in d["admissions"]]  # fmt: skip
        return PackBody(str(d["device"]), str(d["kid"]), d["gates"], d["scores"],
                        [str(x) for x in d["reasons"]], admissions,
                        [(str(p), str(o), str(n)) for p, o, n in d["patterns"]],
                        str(d["gate_mode"]))  # fmt: skip
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise HirmemError(f"admit-pack entry is malformed: {exc}") from None
