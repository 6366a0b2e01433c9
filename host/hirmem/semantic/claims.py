"""Tier 2: claims — typed statements about a subject, shaped by ontology templates.

A claim is (subject, predicate, value) with the times and the sources that state it. Its
shape comes from the :class:`Template` of its predicate: single-valued or accumulating,
the kind of value and how it is canonicalised, which values are legal. Adding a domain is
adding templates (:class:`Ontology`), never editing this module.

Invariants:

- Written only when honest: the predicate has a template; the subject, an entity value and
  every figure or year of the value appear in the quote the claim cites; the value is
  legal once canonicalised. A denial is never written as its positive. Each refusal is
  counted (:meth:`ClaimStore.refused`) and the latest :data:`KEPT_REFUSALS` are listed with
  their reasons (:meth:`ClaimStore.refusals`); the sentence itself stays a passage.
- Canonical values: "21.8" and "21.80" are one number; "$410k a year" and "410000/yr" one
  amount; "8 May 2023" and "2023-05-08" one date. One claim row per canonical
  (subject, predicate, value); each statement of it is an attestation (container, source,
  quote, valid from, invalid at, when said).
- Never true for zero time: an end at or before its beginning is refused and the
  attestation kept open (an unknown end means still true, which is what the source said).
- Supersession is computed at read time from what the reader may read: for a
  single-valued predicate the value at ``at`` is the one whose latest readable statement
  valid at ``at`` is the newest; the others are history. So a container the reader cannot
  read never retires, revives or dates a claim the reader sees.
- Certainty: a statement made with a hedge ("Alice may work at Acme") is kept as a hedged
  attestation, never as asserted. A claim is hedged when every statement the reader can
  read of it is; an asserted value is preferred to a hedged one (a hedge never supersedes
  what was asserted), and a count counts asserted claims only.
- The fence: every read takes the readable containers and applies them in SQL to the
  attestations before anything is ordered, counted or limited. No containers, no claims.
- Counts are SQL over claim rows, never a count of retrieved evidence.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation

from hirmem.protocol.clock import now_ms
from hirmem.protocol.identity import fnv1a64, fold
from hirmem.semantic import refusals
from hirmem.semantic.dictionary import SourceRows, Sources, Words, source_key
from hirmem.semantic.errors import SemanticError
from hirmem.semantic.spans import span_text
from hirmem.semantic.stores.db import Where, epoch, has_table, open_db
from hirmem.semantic.stores.sqlite import earlier_table
from hirmem.sql.pgconn import PgConnection

__all__ = [
    "KEPT_REFUSALS",
    "READING",
    "Attestation",
    "ClaimRefused",
    "ClaimRow",
    "ClaimStore",
    "Ontology",
    "Statement",
    "Template",
    "canonical",
    "reading_template",
    "unit_of",
]

KEPT_REFUSALS = refusals.KEPT  # the latest refusals listed; every one is counted
KINDS = ("text", "entity", "number", "money", "date", "reading")


class ClaimRefused(SemanticError):
    """A statement that may not be written as a claim; ``reason`` says why."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


# ---- canonical values -------------------------------------------------------------------------

_MULT = {"k": Decimal(1000), "m": Decimal(1_000_000), "bn": Decimal(1_000_000_000),
         "b": Decimal(1_000_000_000)}  # fmt: skip
_CURRENCY = {"$": "USD", "usd": "USD", "€": "EUR", "eur": "EUR", "£": "GBP", "gbp": "GBP"}
_PERIOD = {"year": "year", "yr": "year", "annually": "year", "annual": "year", "pa": "year",
           "month": "month", "mo": "month", "monthly": "month", "week": "week",
           "weekly": "week", "day": "day", "daily": "day"}  # fmt: skip
_NUMBER = re.compile(r"(?P<n>-?\d[\d,]*(?:\.\d+)?)\s*(?P<m>k|m|bn|b)?\b", re.IGNORECASE)


def _decimal(text: str) -> str:
    m = _NUMBER.search(text)
    if m is None:
        raise ClaimRefused("not a number", repr(text))
    try:
        n = Decimal(m.group("n").replace(",", ""))
    except InvalidOperation:
        raise ClaimRefused("not a number", repr(text)) from None
    if m.group("m"):
        n *= _MULT[m.group("m").lower()]
    out = format(n.normalize(), "f")
    return out.rstrip("0").rstrip(".") if "." in out else out


def _money(text: str) -> str:
    low = text.lower()
    currency = next((c for s, c in _CURRENCY.items() if s in low), "")
    period = next((p for w, p in _PERIOD.items() if re.search(rf"\b{w}\b|/{w}\b", low)), "")
    out = _decimal(text)
    return " ".join(x for x in (out, currency, f"per {period}" if period else "") if x)


def _date(text: str) -> str:
    t = " ".join(text.replace(",", " ").split())
    for fmt in ("%Y-%m-%d", "%d %B %Y", "%B %d %Y", "%d %b %Y", "%b %d %Y", "%Y"):
        try:
            d = datetime.strptime(t, fmt)
        except ValueError:
            continue
        return str(d.year) if fmt == "%Y" else d.date().isoformat()
    raise ClaimRefused("not a date", repr(text))


# a sensor reading's unit, by how an attribute or a payload spells it
_UNITS = {"c": "degC", "degc": "degC", "°c": "degC", "celsius": "degC", "f": "degF",
          "degf": "degF", "°f": "degF", "k": "K", "v": "V", "mv": "mV", "a": "A", "ma": "mA",
          "w": "W", "kw": "kW", "pct": "%", "percent": "%", "%": "%", "rh": "%RH",
          "hpa": "hPa", "pa": "Pa", "kpa": "kPa", "bar": "bar", "ppm": "ppm", "db": "dB",
          "dbm": "dBm", "s": "s", "ms": "ms", "m": "m", "cm": "cm", "mm": "mm", "kg": "kg",
          "g": "g", "l": "L", "lux": "lx", "lx": "lx", "hz": "Hz", "rpm": "rpm"}  # fmt: skip
_READING = re.compile(r"^\s*(?P<n>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*(?P<u>\S*)\s*$")


def unit_of(attribute: str) -> str:
    """The unit an attribute's name ends in (``temp_c`` → ``degC``), "" when none."""
    tail = attribute.rsplit("_", 1)[-1].lower() if "_" in attribute else ""
    return _UNITS.get(tail, "")


def _reading(text: str) -> str:
    """A number with its unit ("21.50 C" → "21.5 degC"); a reading that is no number (a
    state: "open") is its folded words. An unknown unit is refused, not guessed."""
    m = _READING.match(text)
    if m is None:
        if any(c.isdigit() for c in text):
            raise ClaimRefused("not a reading", f"{text!r} is neither a number with a unit "
                                                "nor a state")  # fmt: skip
        return " ".join(fold(text).split())
    n = format(Decimal(m.group("n")).normalize(), "f")
    n = n.rstrip("0").rstrip(".") if "." in n else n
    unit = m.group("u")
    if unit and unit.lower() not in _UNITS:
        raise ClaimRefused("unknown unit", f"{unit!r} of {text!r} is in no unit table")
    return f"{n} {_UNITS[unit.lower()]}" if unit else n


def canonical(kind: str, value: str) -> str:
    """The one spelling of ``value`` for a value of ``kind``."""
    if kind == "number":
        return _decimal(value)
    if kind == "money":
        return _money(value)
    if kind == "date":
        return _date(value)
    if kind == "reading":
        return _reading(value)
    if kind in ("text", "entity"):
        return " ".join(fold(value).split())
    raise SemanticError(f"no value kind {kind!r}; the kinds are {', '.join(KINDS)}")


# ---- templates --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Template:
    """The shape of one predicate."""

    predicate: str
    single_valued: bool
    kind: str = "text"
    legal: frozenset[str] | None = None  # canonical values allowed; None: any
    normalise: Callable[[str], str] | None = None  # before canonicalisation (synonyms)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise SemanticError(f"template {self.predicate}: no value kind {self.kind!r}")

    def value(self, raw: str) -> str:
        v = canonical(self.kind, self.normalise(raw) if self.normalise else raw)
        if self.legal is not None and v not in self.legal:
            raise ClaimRefused("illegal value", f"{raw!r} is not one of {sorted(self.legal)} "
                                                f"for {self.predicate}")  # fmt: skip
        return v


class Ontology:
    """Templates by predicate, and template families by prefix (``reading.`` gives every
    sensor attribute its template: adding a domain is adding a family, not a pipeline)."""

    def __init__(
        self,
        templates: Iterable[Template] = (),
        families: Mapping[str, Callable[[str], Template]] | None = None,
    ) -> None:
        self._by: dict[str, Template] = {}
        self._families = dict(families or {})
        for t in templates:
            self.add(t)

    def add(self, t: Template) -> None:
        if t.predicate in self._by and self._by[t.predicate] != t:
            raise SemanticError(f"predicate {t.predicate} already has another template")
        self._by[t.predicate] = t

    def get(self, predicate: str) -> Template:
        t = self._by.get(predicate)
        if t is None:
            t = self._family(predicate)
        if t is None:
            raise ClaimRefused("no template", f"predicate {predicate!r} is in no template")
        return t

    def _family(self, predicate: str) -> Template | None:
        for prefix, make in self._families.items():
            if predicate.startswith(prefix) and len(predicate) > len(prefix):
                return make(predicate)
        return None

    def __contains__(self, predicate: str) -> bool:
        return predicate in self._by or self._family(predicate) is not None


READING = "reading."  # the predicate prefix of a device's readings


def reading_template(predicate: str) -> Template:
    """A sensor attribute: single-valued (successive readings are a series, the newest is
    current, the others history), its value a number with the unit the attribute's name
    ends in (``reading.temp_c``: degC) or a state."""
    unit = unit_of(predicate.removeprefix(READING))

    def with_unit(raw: str) -> str:
        m = _READING.match(raw)
        return f"{raw} {unit}" if m is not None and not m.group("u") else raw

    return Template(predicate, True, "reading", normalise=with_unit if unit else None)


# ---- rows -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Statement:
    """One source stating a claim, as an extractor hands it in."""

    subject: str
    predicate: str
    value: str
    quote: str  # the text it was read from
    source: str  # the document (or record) it was read from
    container: str
    valid_from: int = 0  # ms; 0: as of when it was said
    invalid_at: int = 0  # ms; 0: open
    said_at: int = 0
    negated: bool = False
    hedged: bool = False  # stated with a hedge ("may", "I think"): kept, never as asserted


@dataclass(frozen=True, slots=True)
class Attestation:
    container: str
    source: str
    quote: str
    valid_from: int
    invalid_at: int
    said_at: int
    hedged: bool = False


@dataclass(frozen=True, slots=True)
class ClaimRow:
    id: str
    subject: str
    predicate: str
    value: str
    attestations: tuple[Attestation, ...] = field(default=())

    @property
    def hedged(self) -> bool:
        """Whether every statement read of it is hedged: a reader is told so, and an
        asserted value is preferred to it."""
        return bool(self.attestations) and all(a.hedged for a in self.attestations)

    @property
    def since(self) -> int:
        """The newest statement's valid-from among the attestations read."""
        return max((a.valid_from for a in self.attestations), default=0)


_WORDS = re.compile(r"[^\W_]+", re.UNICODE)
_FIGURES = re.compile(r"\d+(?:[.,]\d+)*")


def _preferred(row: ClaimRow) -> tuple[bool, int, str]:
    """The order in which a single-valued predicate's live values compete: an asserted
    value before a hedged one (a hedge never supersedes what was asserted), then the
    newest statement."""
    return (not row.hedged, row.since, row.id)


def _claim_id(subject: str, predicate: str, value: str) -> str:
    """A claim's id: FNV-1a of its canonical (subject, predicate, value)."""
    return f"{fnv1a64(chr(0).join((subject, predicate, value)).encode()):016x}"


def _names(text: str) -> str:
    return f" {' '.join(_WORDS.findall(fold(text)))} "


def _appears(part: str, quote: str) -> bool:
    words = " ".join(_WORDS.findall(fold(part)))
    return bool(words) and f" {words} " in _names(quote)


# Dictionary-encoded: a subject, a predicate, a value and a container are integers of
# ``claim_words``; a claim's hex id is the hash of its canonical (subject, predicate, value)
# and is not stored (the unique key finds it). An attestation's quote is a span (start,
# end) of its source's text when the store can read that text (``ClaimStore.texts``) and
# the quote is in it (``quote`` then ''); ``quote`` holds the text only otherwise (a device
# reading's quote is composed, not cut). Attestations are a WITHOUT ROWID table keyed by
# the statement itself (claim, container, source, span, quote): the key finds a claim's
# statements in the readable containers (the reads) and refuses a repeated statement, with
# no rowid and no second index holding the claim again; a withdrawal finds them through
# ``claim_attestations_by`` (:class:`~hirmem.semantic.dictionary.SourceRows`: each source's
# (claim, container)s, whose statements of that source are all it wrote there), not an
# index by source that would hold every key again.
# Valid from is ``said_at + since`` (:data:`_VALID_FROM`); ``recorded`` is when the
# statement was recorded, as an offset from the store's epoch (``claim_meta``,
# :func:`~hirmem.semantic.stores.db.epoch`): two or three bytes, not six.
# A source is the small code of its 64-bit key (a document id its own number), shared by
# the file's tiers: :class:`~hirmem.semantic.dictionary.Sources`.
_ATTESTATIONS = """CREATE TABLE claim_attestations (
    claim INTEGER NOT NULL, container INTEGER NOT NULL, source INTEGER NOT NULL,
    quote TEXT NOT NULL, start INTEGER NOT NULL, end_ INTEGER NOT NULL,
    since INTEGER NOT NULL, invalid_at INTEGER NOT NULL, said_at INTEGER NOT NULL,
    recorded INTEGER NOT NULL, hedged INTEGER NOT NULL,
    PRIMARY KEY (claim, container, source, start, end_, quote)) WITHOUT ROWID"""
_ATTESTATION_COLUMNS = ("claim, container, source, quote, start, end_, since, invalid_at, "
                        "said_at, recorded, hedged")  # fmt: skip
_META = "CREATE TABLE IF NOT EXISTS claim_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
_LISTED = "claim, container"  # what a source's list holds of each statement it made
# what ``since`` holds: when a statement became true, as an offset from when it was said
# (0, held in no bytes, for the usual statement that states no beginning of its own)
_VALID_FROM = "(a.said_at + a.since)"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS claims (
    id INTEGER PRIMARY KEY, subject INTEGER NOT NULL, predicate INTEGER NOT NULL,
    value INTEGER NOT NULL, UNIQUE (subject, predicate, value));
CREATE INDEX IF NOT EXISTS claims_pv ON claims(predicate, value);
DROP INDEX IF EXISTS claims_value;
CREATE TABLE IF NOT EXISTS claim_refusals (
    at INTEGER NOT NULL, container TEXT NOT NULL, source TEXT NOT NULL,
    reason TEXT NOT NULL, detail TEXT NOT NULL);
"""

# (claim key, container, source, quote, valid from, invalid at, said at, recorded at, hedged)
_Held = tuple[tuple[str, str, str], str, str, str, int, int, int, int, int]


class ClaimStore:
    """Claims and their attestations in SQLite (``path``, or in memory). A file of the
    earlier layout (text keys, quotes copied) is converted when opened."""

    def __init__(
        self, ontology: Ontology, path: Where = ":memory:", clock: Callable[[], int] | None = None
    ) -> None:
        self.ontology = ontology
        self.clock = clock if clock is not None else now_ms
        # the names a subject is known by to a reader (its entity's aliases in the readable
        # containers); the composing substrate sets it, alone a name is only itself
        self.names: Callable[[str, Collection[str]], Collection[str]] | None = None
        # the text of a source document, where a quote is cut from (the composing
        # substrate reads its document store); alone, quotes are kept as text
        self.texts: Callable[[str], str | None] | None = None
        self._lock = threading.RLock()
        self._db = open_db(path, "claims")
        earlier = self._earlier_rows()
        self._words = Words(self._db, "claim_words")
        self._db.execute(_META)
        self._epoch: int | None = None  # the rows' epoch, once a statement is written
        self._attestations_keyed()
        self._db.executescript(_SCHEMA)
        self._sources = Sources(self._db, "claim_sources", source_key)
        self._sources.codes.adopt("claim_attestations", "source")
        # what each source stated, its (claim, container)s packed: a withdrawal finds them
        # without an index that holds every attestation's key again
        self._by_source = SourceRows(self._db, "claim_attestations", 2)
        self._listed()
        held = self._db.execute("SELECT value FROM claim_meta WHERE key = 'epoch'").fetchone()
        self._epoch = None if held is None else int(held[0])
        if earlier:
            self._db.execute("BEGIN")
            for (subject, predicate, value), *rest in earlier:
                self._insert(ClaimRow(_claim_id(subject, predicate, value), subject,
                                      predicate, value), *rest)  # type: ignore[arg-type]
            self._db.execute("COMMIT")

    def _listed(self) -> None:
        """Make the sources' lists; lists of before (a (claim, container, start, end) a
        statement, or an index by source) are made again from the rows, once (marked
        ``listed`` in ``claim_meta``)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            if self._db.execute("SELECT 1 FROM claim_meta WHERE key = 'listed'").fetchone(
            ) is None or not has_table(self._db, self._by_source.table):  # fmt: skip
                self._db.execute(f"DROP TABLE IF EXISTS {self._by_source.table}")
                self._by_source.made(_LISTED)
                self._db.execute("DROP INDEX IF EXISTS attestations_source")
                self._db.execute("INSERT INTO claim_meta (key, value) VALUES ('listed', ?)",
                                 (_LISTED,))  # fmt: skip
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _recorded(self, at: int) -> int:
        """``at`` as the offset a row holds (in the caller's transaction: the epoch is set
        by the store's first statement, or read back as another writer set it)."""
        if self._epoch is None:
            self._epoch = epoch(self._db, "claim_meta", at, key="key")
        return at - self._epoch

    def _earlier_rows(self) -> list[_Held]:
        """The statements of a file of the earlier layout (text claim ids, quotes copied),
        read out and their tables dropped, to be written again."""
        held = earlier_table(self._db, "claims")
        if held is None or not re.search(r"\bid\s+TEXT\b", held, re.I):
            return []
        cols = {r[1] for r in self._db.execute("PRAGMA table_info(claim_attestations)")}
        hedged = "a.hedged" if "hedged" in cols else "0"
        rows = self._db.execute(
            "SELECT c.subject, c.predicate, c.value, a.container, a.source, a.quote, "
            f"a.valid_from, a.invalid_at, a.said_at, a.recorded_at, {hedged} FROM claims c "
            "JOIN claim_attestations a ON a.claim = c.id ORDER BY a.rowid").fetchall()
        self._db.execute("BEGIN")
        self._db.execute("DROP TABLE claim_attestations")
        self._db.execute("DROP TABLE claims")
        self._db.execute("COMMIT")
        return [((str(s), str(p), str(v)), str(c), str(src), str(q), int(vf), int(ia),
                 int(said), int(rec), int(h))
                for s, p, v, c, src, q, vf, ia, said, rec, h in rows]  # fmt: skip

    def _attestations_keyed(self) -> None:
        """Make ``claim_attestations`` the keyed table of offsets; one of a layout of before
        (a file or a server schema) is rebuilt into it, rows and all: the rowid layout
        (rowid, ``quote`` NULL for a span, an index by claim) or the keyed one that held
        ``valid_from`` itself; the keyed one that held ``recorded_at`` itself (not as an
        offset from the epoch) has that column turned into the offset."""
        db = self._db
        if isinstance(db, PgConnection):
            cols = {str(r[0]) for r in db.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = "
                "current_schema() AND table_name = 'claim_attestations'")}  # fmt: skip
            rowid = "rowid" in cols
        else:
            held = earlier_table(db, "claim_attestations")
            cols = set() if held is None else {
                str(r[1]) for r in db.execute("PRAGMA table_info(claim_attestations)")}
            rowid = held is not None and "WITHOUT ROWID" not in held.upper()
        if not cols or "recorded" in cols:
            db.execute(_ATTESTATIONS.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1))
            return
        db.execute("BEGIN IMMEDIATE")
        try:
            first = db.execute("SELECT min(recorded_at) FROM claim_attestations").fetchone()[0]
            at = 0 if first is None else epoch(db, "claim_meta", int(first), key="key")
            if "since" in cols:  # keyed: only the recorded instant is an offset now
                db.execute("ALTER TABLE claim_attestations RENAME COLUMN recorded_at TO "
                           "recorded")  # fmt: skip
                db.execute("UPDATE claim_attestations SET recorded = recorded - ?", (at,))
            else:
                db.execute("ALTER TABLE claim_attestations RENAME TO "
                           "claim_attestations_earlier")  # fmt: skip
                for index in ("attestations_claim", "attestations_source"):  # (_SCHEMA's)
                    db.execute(f"DROP INDEX IF EXISTS {index}")
                db.execute(_ATTESTATIONS)
                old = _ATTESTATION_COLUMNS.replace("quote", "coalesce(quote, '')").replace(
                    "since", "valid_from - said_at").replace(
                    "recorded", f"recorded_at - {int(at)}")  # fmt: skip
                order = " ORDER BY rowid" if rowid else ""  # (a repeated statement's first)
                db.execute(f"INSERT OR IGNORE INTO claim_attestations ({_ATTESTATION_COLUMNS}) "
                           f"SELECT {old} FROM claim_attestations_earlier{order}")  # fmt: skip
                db.execute("DROP TABLE claim_attestations_earlier")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ---- writing --------------------------------------------------------------------------

    def write(self, s: Statement) -> ClaimRow | None:
        """Write ``s`` as a claim (or one more attestation of it); None when refused, the
        refusal kept with its reason."""
        try:
            row = self._check(s)
            text = self.texts(s.source) if self.texts is not None else None
        except ClaimRefused as exc:
            with self._lock:
                self._db.execute("BEGIN")
                refusals.keep(self._db, "claim_refusals", "claim_meta",
                              [(self.clock(), s.container, s.source, exc.reason, str(exc))],
                              KEPT_REFUSALS)  # fmt: skip
                self._db.execute("COMMIT")
            return None
        start = s.valid_from or s.said_at
        end = s.invalid_at if s.invalid_at > start else 0  # never true for zero time
        with self._lock:
            self._db.execute("BEGIN")
            held = self._epoch
            try:
                self._insert(row, s.container, s.source, s.quote, start, end, s.said_at,
                             self.clock(), int(s.hedged), text)  # fmt: skip
            except BaseException:
                self._db.execute("ROLLBACK")
                self._epoch = held  # (one set in the transaction rolled back with it)
                raise
            self._db.execute("COMMIT")
        return row

    def _wid(self, word: str) -> int:
        wid = self._words.id(word)
        assert wid is not None
        return wid

    def _insert(self, row: ClaimRow, container: str, source: str, quote: str, start: int,
                end: int, said: int, recorded: int, hedged: int,
                text: str | None = None) -> None:  # fmt: skip
        """One attestation of ``row`` (and the claim, when new); a statement already held
        (same claim, container, source and quote) is not written twice. The quote is kept
        as its span of ``text`` (the source's) when it is in it."""
        key = (self._wid(row.subject), self._wid(row.predicate), self._wid(row.value))
        self._db.execute("INSERT OR IGNORE INTO claims (subject, predicate, value) "
                         "VALUES (?, ?, ?)", key)  # fmt: skip
        cid = int(self._db.execute("SELECT id FROM claims WHERE subject = ? AND predicate = ? "
                                   "AND value = ?", key).fetchone()[0])  # fmt: skip
        cont = self._wid(container)
        skey = self._sources.code(source)
        at = -1 if text is None else text.find(quote)
        held = "" if at >= 0 else quote  # '': the span of the source's text
        lo, hi = (at, at + len(quote)) if at >= 0 else (0, 0)
        # a statement already held is its key again, and is not written twice; so is one
        # held with its quote as text (written before its source's text could be read)
        if not held and self._db.execute(
            "SELECT 1 FROM claim_attestations WHERE claim = ? AND container = ? AND source = ? "
            "AND quote = ?", (cid, cont, skey, quote)).fetchone() is not None:  # fmt: skip
            return
        if self._db.execute(
            f"INSERT OR IGNORE INTO claim_attestations ({_ATTESTATION_COLUMNS}) VALUES "
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (cid, cont, skey, held, lo, hi, start - said, end, said, self._recorded(recorded),
             hedged)).rowcount > 0:  # fmt: skip
            self._by_source.add(skey, (cid, cont), once=True)

    def _check(self, s: Statement) -> ClaimRow:
        if not s.container:
            raise ClaimRefused("no container", "a claim without a container has no fence")
        if s.negated:
            raise ClaimRefused("denial", f"{s.subject} {s.predicate} {s.value!r} was denied; "
                                         "a denial is not stored as its positive")  # fmt: skip
        t = self.ontology.get(s.predicate)
        if not _appears(s.subject, s.quote):
            raise ClaimRefused("subject not in source",
                               f"{s.subject!r} does not appear in {s.quote[:80]!r}")  # fmt: skip
        if t.kind == "entity" and not _appears(s.value, s.quote):
            raise ClaimRefused("entity not in source",
                               f"{s.value!r} does not appear in {s.quote[:80]!r}")  # fmt: skip
        missing = [f for f in _FIGURES.findall(s.value) if f not in s.quote]
        if missing:
            raise ClaimRefused("figure not in source",
                               f"{missing} of {s.value!r} do not appear in the quote")  # fmt: skip
        value = t.value(s.value)
        subject = " ".join(fold(s.subject).split())
        return ClaimRow(_claim_id(subject, s.predicate, value), subject, s.predicate, value)

    def withdraw(self, source: str) -> int:
        """Forget every statement read from ``source`` (a superseded or erased document);
        a claim no statement is left behind goes with them."""
        with self._lock:
            self._db.execute("BEGIN")
            key = self._sources.code(source, create=False)
            stated = sorted(set(self._by_source.take(key)))
            claims = sorted({cid for cid, _ in stated})
            n = 0
            for cid, cont in stated:  # every statement the source made of it there
                n += self._db.execute("DELETE FROM claim_attestations WHERE claim = ? AND "
                                      "container = ? AND source = ?",
                                      (cid, cont, key)).rowcount  # fmt: skip
            self._sources.forget(source)
            for cid in claims:
                self._db.execute("DELETE FROM claims WHERE id = ? AND NOT EXISTS (SELECT 1 "
                                 "FROM claim_attestations WHERE claim = ?)", (cid, cid))
            self._db.execute("COMMIT")
        return n

    # ---- reading ----------------------------------------------------------------------------

    def refused(self) -> int:
        """How many statements were ever refused (beyond those still listed)."""
        with self._lock:
            return refusals.count(self._db, "claim_meta")

    def refusals(self) -> list[tuple[str, str]]:
        """(reason, detail) of the latest :data:`KEPT_REFUSALS` statements refused, oldest
        first (every one is counted by :meth:`refused`)."""
        with self._lock:
            rows = self._db.execute("SELECT reason, detail FROM claim_refusals ORDER BY rowid")
            return [(r, d) for r, d in rows]

    def subjects(self) -> list[str]:
        """Every subject a claim is held of (no fence: for the store's owner)."""
        with self._lock:
            return [str(r[0]) for r in self._db.execute(
                "SELECT DISTINCT w.word FROM claims c JOIN claim_words w ON w.id = c.subject")]

    def containers(self) -> list[str]:
        """Every container a statement was made in (no fence: for the store's owner)."""
        with self._lock:
            return [str(r[0]) for r in self._db.execute(
                "SELECT DISTINCT w.word FROM claim_attestations a JOIN claim_words w ON "
                "w.id = a.container")]  # fmt: skip

    def _ids(self, words: Collection[str]) -> list[int]:
        with self._lock:
            return self._words.ids(words)

    def _rows(self, where: str, args: list[object], readable: Collection[str],
              at: int | None) -> list[ClaimRow]:  # fmt: skip
        """The claims matching ``where`` (over ``c``'s integer columns, with ``args``), with
        their statements the reader may read, valid at ``at`` when given."""
        fence = self._ids(readable)
        if not fence:
            return []
        marks = ",".join("?" * len(fence))
        # claims first (CROSS JOIN fixes the order): ``where`` names a subject or a
        # predicate, which the claims' indexes find; leading with the container would read
        # every attestation of it. The fence is still in the WHERE, before any ORDER BY.
        sql = ("SELECT c.subject, c.predicate, c.value, a.container, sk.key, s.name, "
               f"a.quote, a.start, a.end_, {_VALID_FROM}, a.invalid_at, a.said_at, a.hedged FROM "
               "claims c CROSS JOIN claim_attestations a ON a.claim = c.id "
               f"{self._sources.joined('a.source', 's')} WHERE a.container IN ({marks}) "
               f"AND {where}")  # fmt: skip
        params: list[object] = [*fence, *args]
        if at is not None:
            sql += f" AND {_VALID_FROM} <= ? AND (a.invalid_at = 0 OR ? < a.invalid_at)"
            params += [at, at]
        # ties in time broken by when each was recorded, then by the key: an order of its
        # own, not the table's storage order (the source by its 64-bit key, not its code:
        # the order a store of before gave)
        sql += (f" ORDER BY c.id, {_VALID_FROM}, a.said_at, a.recorded, a.container, "
                "sk.key, a.start, a.end_, a.quote")  # fmt: skip
        with self._lock:
            got = self._db.execute(sql, params).fetchall()
            words = self._spelled({int(w) for r in got for w in (r[0], r[1], r[2], r[3])})
        texts: dict[str, str | None] = {}
        rows: dict[str, ClaimRow] = {}
        for subj, pred, value, cont, skey, spelled, quote, lo, hi, vf, ia, said, hedged in got:
            s, p, v = words[subj], words[pred], words[value]
            source = Sources.spelled(int(skey), spelled)
            cid = _claim_id(s, p, v)
            held = rows.get(cid) or ClaimRow(cid, s, p, v)
            if not quote:
                quote = self._cut(str(source), int(lo), int(hi), texts)
            att = Attestation(words[cont], source, quote, vf, ia, said, bool(hedged))
            rows[cid] = ClaimRow(cid, s, p, v, (*held.attestations, att))
        return sorted(rows.values(), key=lambda r: r.id)

    def _spelled(self, ids: Collection[int]) -> dict[int, str]:
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        return {int(i): str(w) for i, w in self._db.execute(
            f"SELECT id, word FROM claim_words WHERE id IN ({marks})", sorted(ids))}

    def _cut(self, source: str, lo: int, hi: int, texts: dict[str, str | None]) -> str:
        """The quote a statement keeps as a span of its source's text."""
        return span_text(self.texts, texts, source, lo, hi, "a claim quotes")

    def current(self, subject: str, predicate: str, readable: Collection[str],
                at: int | None = None) -> list[ClaimRow]:  # fmt: skip
        """What is true of ``subject``'s ``predicate`` at ``at`` (default now) by what the
        reader may read: one row for a single-valued predicate (the newest statement
        wins), every live row for an accumulating one."""
        at = self.clock() if at is None else at
        t = self.ontology.get(predicate)
        where, args = self._subject(subject, readable)
        live = self._rows(f"{where} AND c.predicate = ?", [*args, self._pid(predicate)],
                          readable, at)  # fmt: skip
        live.sort(key=_preferred, reverse=True)
        return live[:1] if t.single_valued else live

    def _subject(self, subject: str, readable: Collection[str]) -> tuple[str, list[object]]:
        """The claims' subject predicate for ``subject`` and every name it is known by."""
        names = {" ".join(fold(subject).split())}
        if self.names is not None:
            names |= {" ".join(fold(n).split()) for n in self.names(subject, readable)}
        ids = self._ids(names)
        if not ids:
            return "0 = 1", []
        return f"c.subject IN ({','.join('?' * len(ids))})", list(sorted(ids))

    def about(self, subject: str, readable: Collection[str], at: int | None = None
              ) -> list[ClaimRow]:  # fmt: skip
        """Every claim true at ``at`` (default now) of ``subject`` or with it as the value
        (by any name it is known by: one stored fact answers both directions), supersession
        applied per subject and predicate; newest statement first."""
        at = self.clock() if at is None else at
        where, args = self._subject(subject, readable)
        # the value leg through ``claims_pv`` (predicate, value), one seek per predicate
        # held: a few, where an index by value alone would hold every claim again
        held = self._predicates()
        marks = ",".join("?" * len(held)) or "NULL"
        either = (f"({where} OR (c.predicate IN ({marks}) AND "
                  f"{where.replace('c.subject', 'c.value')}))")  # fmt: skip
        by_key: dict[tuple[str, str], list[ClaimRow]] = {}
        for r in self._rows(either, [*args, *held, *args], readable, at):
            by_key.setdefault((r.subject, r.predicate), []).append(r)
        out: list[ClaimRow] = []
        for (_, predicate), rows in by_key.items():
            rows.sort(key=_preferred, reverse=True)
            single = predicate in self.ontology and self.ontology.get(predicate).single_valued
            out += rows[:1] if single else rows
        return sorted(out, key=lambda r: (-r.since, r.id))

    def _predicates(self) -> list[int]:
        """The integer of every predicate a claim holds: ``claims_pv`` skipped through, one
        seek a predicate (not a read of every claim)."""
        with self._lock:
            return [int(r[0]) for r in self._db.execute(
                "WITH RECURSIVE p(x) AS (SELECT (SELECT min(predicate) FROM claims) UNION ALL "
                "SELECT (SELECT min(predicate) FROM claims WHERE predicate > p.x) FROM p "
                "WHERE p.x IS NOT NULL) SELECT x FROM p WHERE x IS NOT NULL")]  # fmt: skip

    def history(
        self, subject: str, predicate: str, readable: Collection[str]
    ) -> list[ClaimRow]:
        """Every value the reader may read, oldest statement first."""
        where, args = self._subject(subject, readable)
        rows = self._rows(f"{where} AND c.predicate = ?", [*args, self._pid(predicate)],
                          readable, None)  # fmt: skip
        return sorted(rows, key=lambda r: (min(a.valid_from for a in r.attestations), r.id))

    def count(self, predicate: str, readable: Collection[str], value: str | None = None,
              at: int | None = None) -> int:  # fmt: skip
        """How many subjects hold ``predicate`` (= ``value``) at ``at``: SQL over the claim
        rows the reader may read, with supersession applied, not a count of evidence."""
        t = self.ontology.get(predicate)
        want = t.value(value) if value is not None else None
        rows = self._rows("c.predicate = ?", [self._pid(predicate)], readable,
                          self.clock() if at is None else at)  # fmt: skip
        by_subject: dict[str, list[ClaimRow]] = {}
        for r in rows:
            by_subject.setdefault(r.subject, []).append(r)
        n = 0
        for held in by_subject.values():
            if t.single_valued:
                held = [max(held, key=_preferred)]
            n += any((want is None or r.value == want) and not r.hedged for r in held)
        return n

    def holders(self, predicate: str, value: str, readable: Collection[str],
                at: int | None = None) -> list[ClaimRow]:  # fmt: skip
        """The claims of ``predicate`` whose current value at ``at`` is ``value`` (by any
        name it is known by): one stored fact read from its other end ("who reports to
        Priya?" reads every person.manager claim whose value is Priya)."""
        t = self.ontology.get(predicate)
        where, args = self._subject(value, readable)
        where = where.replace("c.subject", "c.value")
        at = self.clock() if at is None else at
        named = self._rows(f"{where} AND c.predicate = ?", [*args, self._pid(predicate)],
                           readable, at)  # fmt: skip
        values = {r.value for r in named}
        out = []
        for subject in sorted({r.subject for r in named}):
            now = self.current(subject, predicate, readable, at) if t.single_valued else [
                r for r in named if r.subject == subject]  # fmt: skip
            out += [r for r in now if r.value in values]
        return out

    def _pid(self, predicate: str) -> int:
        """The integer of ``predicate`` (0, which no word has, when no claim holds it)."""
        held = self._ids([predicate])
        return held[0] if held else 0

    def sources(self, claim: ClaimRow) -> list[tuple[str, str, str]]:
        """(container, source, quote) of each readable statement of ``claim``: who told us."""
        return [(a.container, a.source, a.quote) for a in claim.attestations]
