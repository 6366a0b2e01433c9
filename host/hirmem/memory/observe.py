"""What an episode is about: one reading of the payload, shared by capture and intake.

An *episode* is a gated memory that observes one thing. Its form is read from the
payload (and the caller's ``kind``), once, when the memory is built:

==========  =====================================================================
form        payload                                 → subject, attribute, value
==========  =====================================================================
state       JSON ``{"subject", "attribute", "value"[, "negated"]}``
            (or the structured fields of the capture API): a fact about one
            attribute → the triple as given
reading     JSON object with a numeric field (not a counter: ``n``, ``seq``,
            ``count``): a sensor sample → subject = the ``sensor`` key, else the
            last ``/`` segment of the source; attribute = the first numeric field;
            value = the number as written
action      JSON ``{"action": str | [str, …], "result": str, "outcome": str}``:
            an action taken and the result observed → subject = the steps joined
            by " → ", attribute = ``outcome``, value = the outcome folded
event       ``kind="event"``: something happened → subject = the source,
            attribute = ``event``, value = the payload text folded
==========  =====================================================================

The stored ``kind`` says the form (``fact`` for a state, ``reading``, ``action``,
``event``); a plain ``fact`` without subject and attribute observes nothing in
particular and is a *statement*, not an episode. ``pattern`` (a distilled semantic
memory) and ``procedure`` (a learnt or stated routine) are derived, never episodes.
"""

from __future__ import annotations

import functools
import json
import math
from typing import NamedTuple

from hirmem.protocol.errors import HirmemError
from hirmem.protocol.identity import fold

__all__ = [
    "COUNTER_FIELDS", "EPISODE_KINDS", "KINDS", "OUTCOMES_OK", "Described", "describe",
    "describe_parsed", "is_episode", "number",
]  # fmt: skip

KINDS = ("fact", "event", "procedure", "reading", "action", "pattern")
EPISODE_KINDS = ("reading", "action", "event")  # plus a fact with subject and attribute
COUNTER_FIELDS = frozenset({"n", "seq", "count"})
OUTCOMES_OK = frozenset({"success", "succeeded", "ok", "done", "fixed", "true"})


class Described(NamedTuple):  # a tuple: built once per record, cheaply
    kind: str
    subject: str
    attribute: str
    value: str
    negated: bool = False


def number(text: str) -> float | None:
    """The value as a finite number, or None when it is not one (``"21.80"`` → 21.8)."""
    try:
        v = float(text.strip())
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _json_object(payload: bytes) -> dict[str, object] | None:
    try:
        data = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _scalar(v: object) -> bool:
    return isinstance(v, (str, int, float)) and not isinstance(v, bool)


def describe(payload: bytes, source: str, kind: str = "fact") -> Described:
    """Read the form of a memory from its payload (see the module table). The default
    kind reads whatever the payload is; an explicit ``action`` or ``reading`` must be
    one, or the error says what the payload lacks."""
    if kind not in KINDS:
        raise HirmemError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if kind in ("procedure", "pattern"):
        return Described(kind, "", "", "")
    if kind == "event":
        text = payload.decode("utf-8", errors="replace")
        return Described("event", fold(source or "event"), "event", fold(text))
    return _checked(_json_object(payload), source, kind)


def describe_parsed(data: dict[str, object] | None, source: str) -> Described:
    """:func:`describe` (the default kind) of a payload whose JSON object the caller has
    parsed already (``data``: what ``json.loads`` gives for it when that is an object,
    else None — :func:`hirmem.protocol.records.read_payload` gives it), so the payload
    is not parsed again."""
    return _checked(data, source, "fact")


def _checked(data: dict[str, object] | None, source: str, kind: str) -> Described:
    """The form read from the payload's JSON object, held to an explicit kind."""
    seen = _read(data, source) if data is not None else None
    if kind == "action" and (seen is None or seen.kind != "action"):
        raise HirmemError(
            'an action needs a JSON object payload with "action" (a step or a list of '
            'steps) and an "outcome" string (success or failure), and may name a "result"'
        )
    if kind == "reading" and (seen is None or seen.kind != "reading"):
        raise HirmemError("a reading needs a JSON object payload with a numeric field")
    return seen or Described("fact", "", "", "")


@functools.lru_cache(maxsize=4096)  # bounded: sensors, fields and subjects recur
def _name(text: str) -> str:
    """A subject's or a field's name, folded (:func:`fold`), remembered."""
    return fold(text)


def _read(data: dict[str, object], source: str) -> Described | None:
    if "subject" in data:  # (a reading or an action has none)
        parts = [data.get(k) for k in ("subject", "attribute", "value")]
        if all(_scalar(p) for p in parts):
            s, a, v = (str(p) for p in parts)
            return Described("fact", _name(s), _name(a), v, data.get("negated") is True)
    action = data.get("action")
    if action is not None:  # (a reading has none: one look-up)
        outcome = data.get("outcome")
        steps = [action] if isinstance(action, str) else action
        if (
            isinstance(steps, list) and steps and all(isinstance(x, str) for x in steps)
            and isinstance(outcome, str) and outcome.strip()
        ):  # fmt: skip
            return Described("action", " → ".join(fold(x) for x in steps), "outcome",
                             fold(outcome))  # fmt: skip
    for key, field_value in data.items():
        if key in COUNTER_FIELDS or isinstance(field_value, bool):
            continue
        if not isinstance(field_value, (int, float)) or not math.isfinite(float(field_value)):
            continue
        sensor = data.get("sensor")
        subject = str(sensor) if _scalar(sensor) else source.rsplit("/", 1)[-1]
        return Described(
            "reading", _name(subject or "reading"), _name(key), repr(float(field_value))
        )
    return None


def is_episode(kind: str, subject: str, attribute: str) -> bool:
    """Whether a memory observes one thing (and so is distilled, not relabelled)."""
    return kind in EPISODE_KINDS or (kind == "fact" and bool(subject and attribute))
