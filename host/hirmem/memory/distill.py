"""Distillation: episodes about one thing become one semantic memory that states the pattern.

Grouping is by **key**, not by embedding cluster: (device, subject, attribute) as read by
:mod:`.observe` — for multi-valued attributes and events the value is part of the key,
for action chains the steps are the subject. Why a key and not similarity: the key
is exact, explainable and cheap (one indexed lookup per episode); an embedding cluster
would merge ``temp0`` and ``temp1`` (their texts differ by one character) and split one
sensor whose readings drift, and it would make the pattern depend on the embedder.

One **distillate** row per key and window accumulates running statistics; once it rests
on ``distill_min_episodes`` episodes a memory is created for it:

* **reading** (numeric series) → ``kind="pattern"``, semantic: range, mean, trend
  (least-squares slope per second) and count over the window;
* **state** (a single-valued fact) → pattern: the stable value, since when it held and
  how long, the number of observations and changes of state;
* **event** → pattern: the count and the rate;
* **action** (action taken → result observed, with outcome) → ``kind="procedure"``,
  procedural, once it succeeded ``procedure_min_successes`` times at a success rate of
  at least ``procedure_min_rate``: its steps and success rate.

The derived memory carries ``links`` to every episode it rests on (kept in the
``distill_links`` table, as ranges of the episodes' rowids — a device pack writes one
row per pattern it fed (:mod:`.distill_schema`) — and joined in when the memory is read:
its row holds only the window it continues, so a step never rewrites up to
``distill_max_episodes`` ids), is derived in PROV terms — the audit records one
``derive`` (``activity``: ``distill``, ``wasDerivedFrom``: the episode, ``agrees``) for
every episode, at creation and for each later one; a device pack's episodes say it in
the pack's one ``admit-pack`` record instead (:mod:`.packaudit`: the pattern each fed,
whether it agreed, and each pattern's step of strength) — and
has its own gate scores: the means of its episodes' H, I, R and W, with F, C, Rn
derived from them as the gate does. A new episode that agrees (a reading within three
standard deviations of the mean, the same state, an event, a success) *reinforces*
it — one rehearsal in the strength equation — and updates the statement; it is never
copied. Episodes stay
episodic and decay on their own timescale (``MemoryConfig.episodic_tau_s``).

An episode quarantined later (a contradiction it lost, a corrupted hash, a steward) is
withdrawn: the pattern is rebuilt from the episodes still live (:func:`reconsider`), and
rebuilt again if a steward promotes the episode.

Bounds: a distillate takes at most ``distill_max_episodes`` episodes and, except for an
action chain (a routine is learnt over weeks), only for ``distill_window_s`` from its
first one; the next episode opens a new window, whose memory
links to the closed one.
"""

from __future__ import annotations

import functools
import json
import math
import operator
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Protocol

from hirmem.memory.audit import Entry
from hirmem.memory.contradiction import same_value, single_valued
from hirmem.memory.distill_schema import (
    LINK,
    SCHEMA,
    STATS_NAMES,
    distillates_of,
    ids_at,
    link_rows,
    linked_rowids,
)
from hirmem.memory.dynamics import decay_between, strength_step
from hirmem.memory.model import Memory, State
from hirmem.memory.observe import OUTCOMES_OK, is_episode, number
from hirmem.protocol.errors import HirmemError
from hirmem.protocol.fixedpoint import to_q
from hirmem.protocol.gate import verdict_of
from hirmem.protocol.identity import fold


class Episode(Protocol):
    """What distillation reads of an episode (a :class:`Memory` is one; device intake
    hands lighter ones, :class:`hirmem.memory.intake.Admitted`)."""

    @property
    def id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def subject(self) -> str: ...
    @property
    def attribute(self) -> str: ...
    @property
    def value(self) -> str: ...
    @property
    def negated(self) -> bool: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def payload(self) -> bytes: ...
    @property
    def h(self) -> float: ...
    @property
    def i(self) -> float: ...
    @property
    def r(self) -> float: ...
    @property
    def w(self) -> float: ...
    @property
    def state(self) -> State: ...
    @property
    def flagged(self) -> bool: ...


if TYPE_CHECKING:  # the engine imports this module
    from hirmem.memory.engine import MemoryEngine
    from hirmem.memory.store import Store

__all__ = [
    "SCHEMA",
    "Baseline",
    "Distillate",
    "Episode",
    "PackDistillation",
    "PatternStep",
    "Stats",
    "baseline",
    "baseline_aligned",
    "derived_from",
    "distillate_of",
    "episodes_of",
    "on_episode",
    "on_episodes",
    "patterns",
    "reconsider",
    "write_steps",
]  # fmt: skip

FORMS = {"reading": "reading", "fact": "state", "event": "event", "action": "action"}
_LIVE = frozenset({State.CANDIDATE, State.CONSOLIDATED})  # the states an episode feeds from
_LIVE_CODES = frozenset(int(state) for state in _LIVE)  # as the rows hold them
# a pure function, and a sensor's readings recur (a pack's each read twice: baseline, absorb)
_number = functools.lru_cache(maxsize=4096)(number)


@dataclass
class Stats:
    """Running statistics of one distillate (kept in its row, a column each:
    :data:`hirmem.memory.distill_schema.STATS_COLUMNS`, in this order)."""

    n: int = 0
    first_ms: int = 0
    last_ms: int = 0
    sum_h: float = 0.0
    sum_i: float = 0.0
    sum_r: float = 0.0
    sum_w: float = 0.0
    # readings (t in seconds from first_ms)
    sum_v: float = 0.0
    sum_vv: float = 0.0
    min_v: float = math.inf
    max_v: float = -math.inf
    sum_t: float = 0.0
    sum_tt: float = 0.0
    sum_tv: float = 0.0
    # states
    value: str = ""
    since_ms: int = 0
    held_n: int = 0
    changes: int = 0
    # actions
    successes: int = 0
    failures: int = 0
    result: str = ""
    prev: str = ""  # memory id of the closed window this one continues

    @property
    def mean(self) -> float:
        return self.sum_v / self.n if self.n else 0.0

    @property
    def sd(self) -> float:
        if self.n < 2:
            return 0.0
        return math.sqrt(max(0.0, self.sum_vv / self.n - self.mean**2))

    @property
    def slope(self) -> float:
        """Least-squares trend of the readings, per second (0 with fewer than 2 times)."""
        den = self.n * self.sum_tt - self.sum_t**2
        return (self.n * self.sum_tv - self.sum_t * self.sum_v) / den if den > 0 else 0.0

    @property
    def span_s(self) -> float:
        return (self.last_ms - self.first_ms) / 1000.0


@dataclass(frozen=True)
class Distillate:
    rowid: int
    memory_id: str
    form: str
    device: str
    subject: str
    attribute: str
    value_key: str
    open: bool
    stats: Stats


def ensure_schema(engine: MemoryEngine) -> None:
    for statement in SCHEMA:
        engine.store.db.execute(statement)


if tuple(f.name for f in fields(Stats)) != STATS_NAMES:  # the row's columns, in order
    raise ImportError("distill.Stats and distill_schema.STATS_COLUMNS disagree")


def _row(r: Sequence[Any]) -> Distillate:
    return Distillate(int(r[0]), str(r[1]), str(r[2]), str(r[3]), str(r[4]), str(r[5]),
                      str(r[6]), bool(r[7]), Stats(*r[8:]))  # fmt: skip


_SELECT = (
    "SELECT rowid, memory_id, form, device, subject, attribute, value_key, open, "
    + ", ".join(STATS_NAMES) + " FROM distillates"
)  # fmt: skip
_STATS_SET = ", ".join(f"{name} = ?" for name in STATS_NAMES)
# the statistics an episode moves (_absorb), by form: what a step writes back
_MOVED_ALWAYS = ("n", "first_ms", "last_ms", "sum_h", "sum_i", "sum_r", "sum_w")
_MOVED_BY_FORM = {
    "reading": ("sum_v", "sum_vv", "min_v", "max_v", "sum_t", "sum_tt", "sum_tv"),
    "state": ("value", "since_ms", "held_n", "changes"),
    "event": (),
    "action": ("successes", "failures", "result"),
}
if set(_MOVED_ALWAYS).union(*_MOVED_BY_FORM.values(), ("prev",)) != set(STATS_NAMES):
    raise ImportError("distill: the statistics a step writes back are not the columns")
# per form: the UPDATE of those columns, and what reads them off a Stats, in that order
_STEP_STATS = {
    form: (
        "UPDATE distillates SET "
        + ", ".join(f"{name} = ?" for name in (*_MOVED_ALWAYS, *more)) + " WHERE rowid = ?",
        operator.attrgetter(*_MOVED_ALWAYS, *more),
    )
    for form, more in _MOVED_BY_FORM.items()
}  # fmt: skip


def _values(stats: Stats) -> tuple[Any, ...]:
    """The statistics as their columns take them (vars(), not astuple(): no deep copy)."""
    return tuple(vars(stats).values())


def distillate_of(engine: MemoryEngine, memory_id: str) -> Distillate | None:
    """The distillate behind a pattern or learnt procedure memory."""
    r = engine.store.db.execute(_SELECT + " WHERE memory_id = ?", (memory_id,)).fetchone()
    return None if r is None else _row(r)


def episodes_of(engine: MemoryEngine, memory_id: str) -> list[str]:
    """Every episode a derived memory rests on, in the order they came."""
    d = distillate_of(engine, memory_id)
    return [] if d is None else episodes_of_row(engine, d.rowid)


def patterns(engine: MemoryEngine) -> list[Distillate]:
    """Every distillate that has become a memory, oldest first."""
    rows = engine.store.db.execute(_SELECT + " WHERE memory_id != '' ORDER BY rowid")
    return [_row(r) for r in rows]


def _key(engine: MemoryEngine, m: Episode) -> Key:
    form = FORMS[m.kind]
    if form == "reading" or form == "action":  # keyed without their value
        return form, m.device, m.subject, m.attribute, ""
    value_key = ""
    if form == "event" or (form == "state" and not single_valued(m.attribute, engine.config)):
        value_key = fold(m.value)
    return form, m.device, m.subject, m.attribute, value_key


def _open_distillate(
    engine: MemoryEngine, m: Episode, read: Read | None = None, key: Key | None = None
) -> Distillate:
    """The open window episode ``m`` feeds (``key``: its :func:`_key`, when known)."""
    key = _key(engine, m) if key is None else key
    form, device, subject, attribute, value_key = key
    found = _read_open(engine, key, read, keep=False)
    prev = ""
    if found is not None:
        d = found
        if _fits(d, m, engine):
            return d
        engine.store.db.execute("UPDATE distillates SET open = 0 WHERE rowid = ?", (d.rowid,))
        prev = d.memory_id
    open_cache(engine).rows.pop(key, None)  # a window opens: the next pack reads its row
    stats = Stats(first_ms=m.timestamp, last_ms=m.timestamp, since_ms=m.timestamp, prev=prev)
    cur = engine.store.db.execute(
        "INSERT INTO distillates (memory_id, form, device, subject, attribute, value_key, "
        f"open, {', '.join(STATS_NAMES)}) VALUES ('', ?, ?, ?, ?, ?, 1"
        + ", ?" * len(STATS_NAMES) + ")",
        (form, device, subject, attribute, value_key, *_values(stats)),
    )
    return Distillate(int(cur.lastrowid or 0), "", form, device, subject, attribute,
                      value_key, True, stats)  # fmt: skip


def _absorb(d: Distillate, m: Episode, engine: MemoryEngine) -> bool:
    """Add episode ``m`` to the statistics; whether it agrees with the pattern so far."""
    s = d.stats
    agrees = True
    form = d.form
    if form == "reading":
        v = _number(m.value)
        if v is None:
            return False
        if s.n >= 2:  # whether it lies within the band of the readings so far
            mean, band = _band(s, engine)
            agrees = abs(v - mean) <= band
        t = (m.timestamp - s.first_ms) / 1000.0
        s.sum_v += v
        s.sum_vv += v * v
        if v < s.min_v:  # as min() and max(): a tie keeps the held one
            s.min_v = v
        if v > s.max_v:
            s.max_v = v
        s.sum_t += t
        s.sum_tt += t * t
        s.sum_tv += t * v
    elif form == "state":
        said = f"not {m.value}" if m.negated else m.value
        if s.n == 0:
            s.value, s.since_ms, s.held_n = said, m.timestamp, 1
        elif same_value(s.value, said, engine.config):
            s.held_n += 1
        elif m.timestamp >= s.since_ms:  # a change of state: the pattern starts over
            agrees = False
            s.value, s.since_ms, s.held_n = said, m.timestamp, 1
            s.changes += 1
        else:
            agrees = False  # an older, different value: history, the current one holds
    elif form == "action":
        ok = m.value in OUTCOMES_OK
        s.successes += ok
        s.failures += not ok
        agrees = ok
        s.result = _result_of(m) or s.result
    s.n += 1
    ts = m.timestamp
    if ts < s.first_ms:
        s.first_ms = ts
    if ts > s.last_ms:
        s.last_ms = ts
    s.sum_h += m.h
    s.sum_i += m.i
    s.sum_r += m.r
    s.sum_w += m.w
    return agrees


def _band(s: Stats, engine: MemoryEngine) -> tuple[float, float]:
    """The mean of the readings so far and how far from it a reading may lie and still
    agree: ``baseline_sigmas`` standard deviations, at least ``value_abs_tolerance``
    (see MemoryConfig)."""
    cfg = engine.config
    n = s.n
    mean = s.sum_v / n if n else 0.0  # Stats.mean and Stats.sd, inline: a call per reading
    sd = math.sqrt(max(0.0, s.sum_vv / n - mean * mean)) if n >= 2 else 0.0
    return mean, max(cfg.baseline_sigmas * sd, cfg.value_abs_tolerance)


@dataclass(frozen=True, slots=True)
class Baseline:
    """A sensor's baseline as it was read (:func:`baseline`): what a reading is aligned
    against, whatever distillation does to the pattern afterwards."""

    n: int  # the readings it rests on
    mean: float
    band: float  # how far from the mean a reading may lie (:func:`_band`)


Key = tuple[str, str, str, str, str]  # form, device, subject, attribute, value_key
Read = dict[Key, "Distillate | None"]  # open distillates one pack has read, by key


OPEN_CACHE_BOUND = 65_536  # keys; past it the cache starts afresh


class _OpenCache:
    """The open distillates the writer has read or written, by key, across packs (None:
    the key has no open row), so a pack's sensors are not read and JSON-decoded again.

    Why it stays right: every row it holds is the object distillation itself keeps
    mutating and then writes back (:func:`_absorb` then :func:`_save_stats` or
    :func:`_steps_of`, in the same transaction). Any other write of a distillate — a
    window closed or opened (:func:`_open_distillate`), a pattern created (its row
    names its memory now), a rebuild from the live episodes (a new object) — drops
    the key, so the next read goes to the row. The store has one writer; its rollback
    hook drops everything (the mutated objects hold what was undone), and so does its
    reload hook, run when another connection or process committed since this one last
    looked (``PRAGMA data_version`` on SQLite, the ``writes`` counter on PostgreSQL),
    and so does an exception out of distillation itself (a caller that catches it
    inside its transaction would not roll back)."""

    def __init__(self, store: Store) -> None:
        self.rows: dict[Key, Distillate | None] = {}
        self.drops = 0  # times everything was dropped (rollback, another writer, error)
        store.rollback_hooks.append(self.clear)
        store.reload_hooks.append(self.clear)

    def clear(self) -> None:
        self.rows.clear()
        self.drops += 1

    def keep(self, key: Key, d: Distillate | None) -> None:
        if len(self.rows) >= OPEN_CACHE_BOUND:
            self.rows.clear()
        self.rows[key] = d

    def written(self, d: Distillate) -> None:
        """Row ``d`` was written: kept only when the cache holds that very object."""
        key = _key_of(d)
        if self.rows.get(key, d) is not d:
            del self.rows[key]


_CACHES: weakref.WeakKeyDictionary[Store, _OpenCache] = weakref.WeakKeyDictionary()


def open_cache(engine: MemoryEngine) -> _OpenCache:
    """The process cache of open distillates of ``engine``'s store."""
    cache = _CACHES.get(engine.store)
    if cache is None:
        cache = _CACHES[engine.store] = _OpenCache(engine.store)
    return cache


def close_windows(engine: MemoryEngine, memory_ids: Sequence[str]) -> None:
    """Patterns ``memory_ids`` left the live states (archived, superseded, quarantined):
    their open windows close, so a later episode of the same key opens a new window
    (``prev`` naming the old pattern) instead of feeding a pattern that takes no new
    support. A promoted pattern keeps its episodes; its window stays closed."""
    for k in range(0, len(memory_ids), 500):
        chunk = list(memory_ids[k : k + 500])
        marks = ",".join("?" * len(chunk))
        cur = engine.store.db.execute(
            f"UPDATE distillates SET open = 0 WHERE open = 1 AND memory_id IN ({marks})", chunk
        )
        if cur.rowcount:
            open_cache(engine).clear()  # its objects may name a window now closed


def _key_of(d: Distillate) -> Key:
    return d.form, d.device, d.subject, d.attribute, d.value_key


def _read_open(engine: MemoryEngine, key: Key, read: Read | None, keep: bool) -> Distillate | None:
    """The open distillate of ``key``: from ``read`` when this pack read it already
    (taken out unless ``keep``: the next use must see what distillation wrote), else
    from the :class:`_OpenCache`, else from its row."""
    if read is not None and key in read:
        return read[key] if keep else read.pop(key)
    cache = open_cache(engine)
    if key in cache.rows:
        d = cache.rows[key]
    else:
        form, device, subject, attribute, value_key = key
        r = engine.store.db.execute(
            _SELECT + " WHERE device = ? AND subject = ? AND attribute = ? AND value_key = ? "
            "AND form = ? AND open = 1",
            (device, subject, attribute, value_key, form),
        ).fetchone()
        d = None if r is None else _row(r)
        cache.keep(key, d)
    if read is not None and keep:
        read[key] = d
    return d


def read_open_many(engine: MemoryEngine, keys: Iterable[Key], read: Read) -> None:
    """Put the open distillates of ``keys`` into ``read`` (None for a key that has none):
    from the :class:`_OpenCache`, and for what it lacks one statement per device: what
    :func:`_read_open` would find key by key (of several open rows of a key, the first
    by rowid, as its index gives)."""
    cache = open_cache(engine)
    wanted: dict[str, set[Key]] = {}
    for key in keys:
        if key in read:
            continue
        if key in cache.rows:
            read[key] = cache.rows[key]
        else:
            wanted.setdefault(key[1], set()).add(key)
    for device, of_device in wanted.items():
        subjects = sorted({key[2] for key in of_device})
        for k in range(0, len(subjects), 500):
            chunk = subjects[k : k + 500]
            rows = engine.store.db.execute(
                _SELECT + f" WHERE device = ? AND subject IN ({','.join('?' * len(chunk))}) "
                "AND open = 1 ORDER BY rowid", (device, *chunk),
            ).fetchall()  # fmt: skip
            for r in rows:
                key = (str(r[2]), str(r[3]), str(r[4]), str(r[5]), str(r[6]))
                if key in of_device and key not in read:
                    read[key] = _row(r)
        for key in of_device:
            cache.keep(key, read.setdefault(key, None))


def baseline(
    engine: MemoryEngine, device: str, subject: str, attribute: str, read: Read | None = None
) -> Baseline | None:
    """The baseline of a sensor: from the statistics of the distilled pattern of (device,
    subject, attribute) in its open window, once it rests on ``baseline_min_episodes``
    readings (None before). ``read``: the rows a pack has read (its distillation then
    starts from the same one, not reading it again). Its mean and band as they are now
    (distillation goes on updating the cached distillate), worked out once, not once
    per reading aligned against it."""
    d = _read_open(engine, ("reading", device, subject, attribute, ""), read, keep=True)
    if d is None or not d.memory_id or d.stats.n < engine.config.baseline_min_episodes:
        return None
    return Baseline(d.stats.n, *_band(d.stats, engine))


def baseline_aligned(engine: MemoryEngine, base: Baseline | None, value: str) -> bool | None:
    """Sub-check baseline_aligned of a reading against its sensor's :func:`baseline`:
    None when there is none or the value is not a number, else whether it agrees."""
    v = _number(value)
    return None if base is None or v is None else abs(v - base.mean) <= base.band


def _result_of(m: Episode) -> str:
    try:
        data = json.loads(m.payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return ""
    result = data.get("result") if isinstance(data, dict) else None
    return result if isinstance(result, str) else ""


def _fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 0.01 and x != 0 else f"{x:.1f}"


def statement(d: Distillate) -> str:
    """The pattern in words (what the CLI and the demo print). Rendered at every step
    of a pattern: its figures are worked out here, as :class:`Stats` would (span_s,
    mean, slope), not through its properties."""
    s = d.stats
    n = s.n
    form = d.form
    over = f"over {(s.last_ms - s.first_ms) / 1000.0:.0f} s"
    if form == "reading":
        sum_t, sum_v = s.sum_t, s.sum_v
        den = n * s.sum_tt - sum_t**2
        slope = (n * s.sum_tv - sum_t * sum_v) / den if den > 0 else 0.0
        return (
            f"{_fmt(s.min_v)}\N{EN DASH}{_fmt(s.max_v)}, mean {_fmt(sum_v / n if n else 0.0)}, "
            f"trend {slope:+.3g}/s, {n} readings {over}"
        )
    if form == "state":
        held = (s.last_ms - s.since_ms) / 1000.0
        return (
            f"{s.value} (held {held:.0f} s, {s.held_n} of {n} observations, "
            f"{s.changes} change{'s' if s.changes != 1 else ''} {over})"
        )
    if form == "event":
        span = s.span_s
        rate = n / span if span > 0 else 0.0
        return f"{n} events {over} ({rate:.3g}/s)"
    rate = s.successes / n if n else 0.0
    then = f" → {s.result}" if s.result else ""
    return f"steps {d.subject}{then}; {s.successes} of {n} succeeded ({rate:.0%})"


def _payload(d: Distillate) -> str:
    where = f" on device {d.device}" if d.device else ""
    if d.form == "reading":
        return f"sensor {d.subject} {d.attribute} readings{where}"
    if d.form == "state":
        return f"{d.subject} {d.attribute}{where}"
    if d.form == "event":
        return f"events {d.value_key} from {d.subject}{where}"
    return f"procedure: {d.subject}{where}"


def _ready(d: Distillate, engine: MemoryEngine) -> bool:
    cfg = engine.config
    s = d.stats
    if d.form == "action":
        return s.successes >= cfg.procedure_min_successes and (
            s.successes / s.n >= cfg.procedure_min_rate
        )
    return s.n >= cfg.distill_min_episodes


@functools.lru_cache(maxsize=4096)  # a pure function; patterns' Rn recur (1.0 most of all)
def _verdict(rn: float) -> int:
    return int(verdict_of(to_q(rn)))


def _scored(m: Memory, s: Stats, engine: MemoryEngine, **changes: object) -> Memory:
    """Gate scores of a derived memory: the means of its episodes' (with ``changes``,
    in the same copy)."""
    h, i, r, w = (x / s.n for x in (s.sum_h, s.sum_i, s.sum_r, s.sum_w))
    f, c = math.sqrt(h * i), math.sqrt(r * i)
    rn = math.sqrt(f * c)
    return m.replace(h=h, i=i, r=r, f=f, c=c, rn=rn, w=w, trust=h * i * r,
                     verdict=_verdict(rn), gate_mode="derived",
                     **changes)  # fmt: skip


def _save_stats(engine: MemoryEngine, d: Distillate, memory_id: str | None = None) -> None:
    engine.store.db.execute(
        f"UPDATE distillates SET {_STATS_SET}, memory_id = ? WHERE rowid = ?",
        (*_values(d.stats), d.memory_id if memory_id is None else memory_id, d.rowid),
    )
    cache = open_cache(engine)
    if memory_id is not None and memory_id != d.memory_id:
        cache.rows.pop(_key_of(d), None)  # the row names its memory now, ``d`` does not
    else:
        cache.written(d)


def _create(engine: MemoryEngine, d: Distillate, pack: PackDistillation | None) -> Memory:
    episodes = episodes_of_row(engine, d.rowid)
    if pack is not None:  # and those of this pack, linked once they are stored
        episodes += [mid for rowid, mid in pack.links if rowid == d.rowid]
    links = ([d.stats.prev] if d.stats.prev else []) + episodes
    kind = "procedure" if d.form == "action" else "pattern"
    # the row links only the window it continues: its episodes are in distill_links
    m = engine.capture(
        _payload(d), "distill", kind=kind, subject=d.subject, attribute=d.attribute,
        value=statement(d), links=links[: len(links) - len(episodes)], _insert=False,
    )  # fmt: skip
    _save_stats(engine, d, m.id)
    now = engine.clock()
    m = _scored(m, d.stats, engine, device=d.device, strength=d.stats.sum_w / d.stats.n,
                last_access=now, decayed_at=now)
    # one PROV wasDerivedFrom per record (audit details are scalars)
    derived = [Entry("derive", m.id, {"activity": "distill", "form": d.form,
                                      "wasDerivedFrom": source, "agrees": 1, "rn": m.rn,
                                      "w": m.w}) for source in links]  # fmt: skip
    steps = [(State.CANDIDATE, f"distilled from {len(episodes)} episodes")]
    if m.rn >= engine.config.green and m.h > 0:
        steps.append((State.CONSOLIDATED, "distilled pattern: Rn ≥ green"))
    # captured, derived, candidate (→ consolidated): audited as one by one, written once
    return engine.insert_settled(m, steps, derived, now)


def episodes_of_row(engine: MemoryEngine, rowid: int) -> list[str]:
    """The ids of the episodes distillate ``rowid`` rests on, in the order they came."""
    db = engine.store.db
    return ids_at(db, linked_rowids(db, rowid))


def derived_from(engine: MemoryEngine, episode_id: str) -> list[str]:
    """The derived memories (patterns, procedures) an episode is one of the grounds of
    (a reader's call: through the store's read connection)."""
    with engine.store.reading() as db:
        row = db.execute("SELECT rowid FROM memories WHERE id = ?", (episode_id,)).fetchone()
        found = [] if row is None else distillates_of(db, int(row[0]))
        if not found:
            return []
        rows = db.execute(
            f"SELECT memory_id FROM distillates WHERE rowid IN ({','.join('?' * len(found))}) "
            "AND memory_id != '' ORDER BY rowid", found,
        ).fetchall()  # fmt: skip
    return [str(r[0]) for r in rows]


def _distillate_of_episode(engine: MemoryEngine, episode_id: str) -> int | None:
    """The distillate a stored episode fed (None: none)."""
    rowid = engine.store.rowid(episode_id)
    found = [] if rowid is None else distillates_of(engine.store.db, rowid)
    return found[0] if found else None


def on_episode(engine: MemoryEngine, m: Episode) -> None:
    """Distil a freshly admitted live episode into the pattern it supports."""
    on_episodes(engine, [m])


@dataclass
class PackDistillation:
    """What distilling a pack's episodes (not stored yet) leaves to write once they are
    (:func:`write_steps`): each live pattern's step, and which episode fed which
    distillate — by id here, by rowid in ``distill_links``."""

    steps: list[PatternStep] = field(default_factory=list)
    links: list[tuple[int, str]] = field(default_factory=list)  # (distillate, episode id)
    positions: dict[str, int] = field(default_factory=dict)  # episode id → place in pack


def on_episodes(
    engine: MemoryEngine, ms: Sequence[Episode], pack: PackDistillation | None = None,
    *, fresh: bool = False, read: Read | None = None,
) -> None:  # fmt: skip
    """Distil live episodes admitted together (one device pack), in their order: the
    episodes of one key are absorbed one by one, and the pattern they support is
    written once — its statement, its links, and one step of the strength equation in
    which every agreeing episode is a rehearsal (U = their number, as the sweep folds
    pending rehearsals). Audited here, one ``derive`` record per episode; or, given
    ``pack`` (the episodes of a device pack, not stored yet), each live pattern's step
    and the episodes' links are handed back unwritten, for the caller's one audit
    record of the pack and :func:`write_steps` once the episodes are stored. ``fresh``:
    the episodes were never distilled (none can have fed a pattern yet) and no id comes
    twice (a pack's fresh records); ``read``: the
    open distillates their pack already read (:func:`baseline`)."""
    live = [
        m for m in ms
        if m.state in _LIVE and not m.flagged  # a disputed claim waits
        and m.kind in FORMS and is_episode(m.kind, m.subject, m.attribute)
    ]  # fmt: skip
    if not live:
        return
    groups: dict[Key, list[Episode]] = {}
    if not fresh:  # each once, and none that fed a pattern already
        done = _distilled(engine, [m.id for m in live])
        once = []
        for m in live:
            if m.id not in done:
                done.add(m.id)
                once.append(m)
        live = once
    for m in live:
        key = _key(engine, m)
        group = groups.get(key)
        if group is None:
            groups[key] = [m]
        else:
            group.append(m)
    deferred: Deferred | None = None
    if pack is not None:
        deferred = []
        pack.positions = {m.id: k for k, m in enumerate(ms)}
    try:
        for key, group in groups.items():
            _distil_group(engine, key, group, pack, deferred, read)
        if pack is not None and deferred:
            pack.steps += _steps_of(engine, pack, deferred)
    except BaseException:
        open_cache(engine).clear()  # its objects may hold statistics never written
        raise


def _distilled(engine: MemoryEngine, ids: list[str]) -> set[str]:
    """Which of ``ids`` (stored episodes) already fed a distillate."""
    return {mid for mid in ids if _distillate_of_episode(engine, mid) is not None}


def _fits(d: Distillate, m: Episode, engine: MemoryEngine) -> bool:
    """Whether episode ``m`` belongs in the open window of ``d`` (not full, not late)."""
    cfg = engine.config
    if d.stats.n >= cfg.distill_max_episodes:
        return False
    # a routine is learnt over weeks: only the count bounds an action chain's window
    return d.form == "action" or m.timestamp - d.stats.first_ms <= cfg.distill_window_s * 1000


def _distil_group(
    engine: MemoryEngine, key: Key, group: list[Episode], pack: PackDistillation | None,
    deferred: Deferred | None, read: Read | None,
) -> None:  # fmt: skip
    """Episodes of one ``key``, in order (see :func:`on_episodes`)."""
    d: Distillate | None = None
    pending: list[tuple[Episode, bool]] = []  # absorbed, their pattern not yet written
    for m in group:
        if d is not None and not _fits(d, m, engine):
            _save_stats(engine, d)  # now: the window is read again to be closed
            _reinforce(engine, d, pending, deferred)
            d, pending = None, []
        if d is None:
            d = _open_distillate(engine, m, read, key)  # closes a full or late window
        agrees = _absorb(d, m, engine)
        if d.memory_id:
            pending.append((m, agrees))
            continue
        _link(engine, d, [m], pack)
        _save_stats(engine, d)
        if _ready(d, engine):
            _create(engine, d, pack)
            d = None  # re-read: the row now names its memory
    if d is not None:
        _reinforce(engine, d, pending, deferred)


def _link(
    engine: MemoryEngine, d: Distillate, episodes: Sequence[Episode],
    pack: PackDistillation | None,
) -> None:  # fmt: skip
    """Episodes fed ``d``: noted in ``pack`` (its episodes are not stored yet), or
    written (stored episodes, found by id)."""
    if pack is not None:
        pack.links += [(d.rowid, m.id) for m in episodes]
        return
    rowids = [engine.store.rowid(m.id) for m in episodes]
    if None in rowids:
        raise HirmemError(f"distillate {d.rowid}: an episode to link is not stored")
    engine.store.db.executemany(LINK, link_rows((d.rowid, int(r or 0)) for r in rowids))


@dataclass
class PatternStep:
    """What new episodes did to a live pattern: its new scores, statement and strength
    (written by :func:`write_steps` once the audit record that says so has its seq)."""

    rowid: int
    memory_id: str
    form: str
    old: float
    new: float
    columns: tuple[Any, ...]  # the values of _PATTERN_COLUMNS, in their order
    episodes: list[tuple[str, bool]]  # (episode id, whether it agreed)


_PATTERN_COLUMNS = ("h", "i", "r", "f", "c", "rn", "w", "trust", "verdict", "gate_mode",
                    "value", "strength", "last_access", "decayed_at")  # fmt: skip
_AT_TRUST, _AT_LAST_ACCESS, _AT_DECAYED_AT = (
    _PATTERN_COLUMNS.index(c) for c in ("trust", "last_access", "decayed_at"))  # fmt: skip
_WRITE_STEP = (
    "UPDATE memories SET " + ", ".join(f"{c} = ?" for c in _PATTERN_COLUMNS)
    + ", audit_seq = ? WHERE rowid = ?"
)  # fmt: skip


_STEP_COLUMNS = "id, rowid, state, strength, last_access, decayed_at, layer, priority"


def _pattern_rows(engine: MemoryEngine, ids: Sequence[str]) -> dict[str, Sequence[Any]]:
    """The columns a step reads of each pattern (never the whole memory), by id."""
    marks = ",".join("?" * len(ids))
    rows = engine.store.db.execute(
        f"SELECT {_STEP_COLUMNS} FROM memories WHERE id IN ({marks})", tuple(ids)
    )
    return {str(r[0]): r[1:] for r in rows}


def _step(
    engine: MemoryEngine, d: Distillate, pending: Sequence[tuple[Episode, bool]], now: float,
    row: Sequence[Any] | None,
) -> PatternStep | None:  # fmt: skip
    """The pattern of ``d`` after episodes ``pending`` (None when it is not live: a
    quarantined or archived pattern takes no new support); ``row``: its
    :func:`_pattern_rows`."""
    if row is None or row[1] not in _LIVE_CODES:
        return None
    rowid, _, strength, last_access, decayed_at, layer, priority = row
    cfg = engine.config
    episodes = [(m.id, agrees) for m, agrees in pending]
    agreeing = sum(agrees for _, agrees in pending)
    # settle the decay owed so far, then count each agreeing episode as a rehearsal
    owed = decay_between(last_access, decayed_at, now, cfg, cfg.tau_for(int(layer)))
    s = d.stats
    n = s.n
    h, i, r, w = s.sum_h / n, s.sum_i / n, s.sum_r / n, s.sum_w / n
    f, c = math.sqrt(h * i), math.sqrt(r * i)
    rn = math.sqrt(f * c)
    new = strength_step(float(strength), float(agreeing), float(priority), rn, owed, 0.0, cfg)
    # in the order of _PATTERN_COLUMNS
    columns = (h, i, r, f, c, rn, w, h * i * r, _verdict(rn), "derived", statement(d), new,
               now if agreeing else float(last_access), max(float(decayed_at), now))
    return PatternStep(int(rowid), d.memory_id, d.form, float(strength), new, columns,
                       episodes)  # fmt: skip


def write_steps(
    engine: MemoryEngine, pack: PackDistillation, seq: int, now: float, rowids: Sequence[int],
) -> None:  # fmt: skip
    """Once a pack's episodes are stored (``rowids``: theirs, in the pack's order): their
    links, and the patterns' steps, citing audit record ``seq``, with their strength
    points."""
    if pack.links:
        where = pack.positions
        engine.store.db.executemany(LINK, link_rows(
            (distillate, rowids[where[mid]]) for distillate, mid in pack.links))  # fmt: skip
    _write_steps(engine, pack.steps, seq, now)


def _write_steps(engine: MemoryEngine, steps: Sequence[PatternStep], seq: int, now: float) -> None:
    if not steps:
        return
    engine.store.db.executemany(_WRITE_STEP, [(*st.columns, seq, st.rowid) for st in steps])
    # the columns the recall index holds, of _PATTERN_COLUMNS: trust, last_access, decayed_at
    engine.strengths_moved([(st.rowid, st.memory_id, st.new, st.columns[_AT_LAST_ACCESS],
                             st.columns[_AT_DECAYED_AT], st.columns[_AT_TRUST])
                            for st in steps], now)  # fmt: skip


Deferred = list[tuple[Distillate, list[tuple[Episode, bool]]]]


def _reinforce(
    engine: MemoryEngine, d: Distillate, pending: list[tuple[Episode, bool]],
    deferred: Deferred | None,
) -> None:  # fmt: skip
    """Write what episodes ``pending`` did to the pattern of ``d``: its statistics, the
    links, and one step of strength, audited here (one ``derive`` record per episode,
    then the step's ``strength`` record when it is large). Given ``deferred`` (a
    pack's distillation), it is only noted there, for :func:`_steps_of` to write with
    the other patterns the pack reinforced."""
    if not pending:
        return
    if deferred is not None:
        deferred.append((d, pending))
        return
    _link(engine, d, [m for m, _ in pending], None)
    _save_stats(engine, d)
    now = engine.clock()
    step = _step(engine, d, pending, now, _pattern_rows(engine, [d.memory_id]).get(d.memory_id))
    if step is None:
        return
    entries = [
        Entry("derive", step.memory_id, {"activity": "distill", "form": d.form,
                                         "wasDerivedFrom": mid, "agrees": int(agrees)})
        for mid, agrees in step.episodes]  # fmt: skip
    if abs(step.new - step.old) >= engine.config.audit_strength_delta:
        entries.append(Entry("strength", step.memory_id, {
            "old_strength": step.old, "strength": step.new, "x": 0.0,
            "reason": "distilled episode"}))  # fmt: skip
    _write_steps(engine, [step], engine.audit.append_entries(entries, ts=now)[-1], now)


def _steps_of(
    engine: MemoryEngine, pack: PackDistillation, deferred: Deferred
) -> list[PatternStep]:
    """The patterns a pack reinforced: their statistics written with one statement,
    their links noted in ``pack``, their rows read with one statement, their steps
    returned unwritten."""
    if not deferred:
        return []
    pack.links += [(d.rowid, m.id) for d, pending in deferred for m, _ in pending]
    forms = {d.form for d, _ in deferred}  # nearly always one: a pack's readings
    for form in forms:
        update, moved = _STEP_STATS[form]
        engine.store.db.executemany(update, [(*moved(d.stats), d.rowid) for d, _ in deferred
                                             if d.form == form])  # fmt: skip
    cache = open_cache(engine)
    for d, _ in deferred:
        cache.written(d)
    now = engine.clock()
    rows = _pattern_rows(engine, [d.memory_id for d, _ in deferred])
    steps = [_step(engine, d, pending, now, rows.get(d.memory_id)) for d, pending in deferred]
    return [st for st in steps if st is not None]


def reconsider(engine: MemoryEngine, m: Memory) -> Memory | None:
    """Episode ``m`` entered or left quarantine: rebuild the pattern it fed from the
    episodes live now, so nothing quarantined stays in what the pattern states (a
    pattern left with no live episode is quarantined too); an episode a steward
    promoted that never fed one is distilled now. Returns the pattern, if any."""
    distillate = _distillate_of_episode(engine, m.id)
    if distillate is None:
        on_episode(engine, m)
        return None
    return _rebuild(engine, m, distillate)


def _rebuild(engine: MemoryEngine, m: Memory, distillate: int) -> Memory | None:
    r = engine.store.db.execute(_SELECT + " WHERE rowid = ?", (distillate,)).fetchone()
    old = _row(r)
    live = [
        e for e in (engine.get(x) for x in episodes_of_row(engine, old.rowid))
        if e is not None and e.state in (State.CANDIDATE, State.CONSOLIDATED)
    ]  # fmt: skip
    live.sort(key=lambda e: (e.timestamp, e.id))
    first = live[0].timestamp if live else old.stats.first_ms
    d = Distillate(old.rowid, old.memory_id, old.form, old.device, old.subject,
                   old.attribute, old.value_key, old.open,
                   Stats(first_ms=first, last_ms=first, since_ms=first,
                         prev=old.stats.prev))  # fmt: skip
    for e in live:
        _absorb(d, e, engine)
    _save_stats(engine, d)
    p = engine.get(d.memory_id) if d.memory_id else None
    if p is None or p.state not in (State.CANDIDATE, State.CONSOLIDATED):
        return p
    now = engine.clock()
    seq = engine.audit.append(
        "derive", p.id,
        {"activity": "distill", "form": d.form, "wasDerivedFrom": m.id, "agrees": 0,
         "reason": f"rebuilt: the episode is {m.state.name.lower()}"},
        ts=now,
    )  # fmt: skip
    if not live:
        return engine.transition(p.replace(audit_seq=seq), State.QUARANTINED,
                                 "every episode it rested on was quarantined")  # fmt: skip
    links = [d.stats.prev] if d.stats.prev else []  # its live episodes: episode_links
    p = _scored(p, d.stats, engine, value=statement(d), links=tuple(links), audit_seq=seq)
    return engine._save(p)
