"""Provenance in W3C PROV-O terms, verbatim (§5).

Entity {ID, GeneratedBy, DerivedFrom}, Activity {ID, Kind, Agent, Start, End, Used},
Agent {ID, Kind} with kind person, software or organization. Exports use the PROV-O
properties as they stand: prov:wasGeneratedBy, prov:wasDerivedFrom, prov:used,
prov:wasAssociatedWith, prov:startedAtTime, prov:endedAtTime (and prov:wasAttributedTo).

Invariants:

- The log is append-only: an id, once written, keeps what it said; a later write may only
  add (another derivation, another generation) and never remove or change.
- A derived entity (an assertion, a chunk, a document) must name its antecedents; a write
  without them is refused (:class:`ProvError`). An assertion derived by a rule also names
  the rule: the generating activity's kind is ``rule:<name>``.
- Ids are ``kind:local`` strings; exports render them as ``urn:hirmem:kind:local``.
- Every export goes through one ``prov.model.ProvDocument`` (:meth:`Log.to_prov`): PROV-JSON
  and PROV-N are the ``prov`` package's serializers, Turtle its RDF serializer (rdflib),
  JSON-LD that RDF graph compacted. Kinds and decision fields are ``hm:`` attributes.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import urllib.parse
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import rdflib
from prov.constants import PROV as PROV_NS
from prov.model import ProvDocument

from hirmem.semantic.errors import ProvError

__all__ = ["Activity", "Agent", "Entity", "Log", "SQLiteLog"]

AgentKind = Literal["person", "software", "organization"]
PROV = "http://www.w3.org/ns/prov#"
XSD = "http://www.w3.org/2001/XMLSchema#"
HM = "urn:hirmem:"

# Entity kinds that are derivations and must say what they were derived from.
DERIVED_KINDS = frozenset({"assertion", "chunk", "doc", "record"})


@dataclass(frozen=True, slots=True)
class Agent:
    id: str
    kind: AgentKind


@dataclass(frozen=True, slots=True)
class Activity:
    id: str
    kind: str
    agent: str
    start: int  # ms since the epoch
    end: int
    used: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Entity:
    id: str
    kind: str
    generated_by: tuple[str, ...] = ()
    derived_from: tuple[str, ...] = ()
    attributed_to: str = ""
    attrs: tuple[tuple[str, str], ...] = ()  # further facts (a decision's choice, rule, …)


class Log:
    """An append-only provenance log held in memory."""

    def __init__(self) -> None:
        self.entities: dict[str, Entity] = {}
        self.activities: dict[str, Activity] = {}
        self.agents: dict[str, Agent] = {}
        self._lock = threading.RLock()

    # ---- writing --------------------------------------------------------------------------

    def agent(self, id: str, kind: AgentKind) -> Agent:
        with self._lock:
            held = self.agents.get(id)
            a = Agent(id, kind)
            if held is not None:
                if held != a:
                    raise ProvError(f"agent {id} is already recorded as {held.kind}, not {kind}")
                return held
            self.agents[id] = a
            self._persist("agent", id, {"kind": kind})
            return a

    def activity(
        self, id: str, kind: str, agent: str, start: int, end: int, used: Iterable[str] = ()
    ) -> Activity:
        with self._lock:
            if agent not in self.agents:
                raise ProvError(f"activity {id}: agent {agent} is not recorded; record it first")
            act = Activity(id, kind, agent, start, end, tuple(used))
            missing = [u for u in act.used if u not in self.entities]
            if missing:
                raise ProvError(f"activity {id} used unrecorded entities {missing[:3]}")
            held = self.activities.get(id)
            if held is not None:
                if held != act:
                    raise ProvError(f"activity {id} is already recorded differently (append-only)")
                return held
            self.activities[id] = act
            self._persist("activity", id, {"kind": kind, "agent": agent, "start": start,
                                           "end": end, "used": list(act.used)})  # fmt: skip
            return act

    def entity(
        self,
        id: str,
        kind: str,
        generated_by: str = "",
        derived_from: Iterable[str] = (),
        attributed_to: str = "",
        attrs: Mapping[str, str] | None = None,
    ) -> Entity:
        """Record an entity, or add a generation/derivation to one already recorded.
        ``attrs`` are set once: a later write may repeat them, never change them."""
        with self._lock:
            ante = tuple(derived_from)
            facts = tuple(sorted((attrs or {}).items()))
            if kind in DERIVED_KINDS and not ante:
                raise ProvError(
                    f"{kind} {id} names no antecedents: every derived {kind} must say what it "
                    "was derived from"
                )
            missing = [a for a in ante if a not in self.entities]
            if missing:
                raise ProvError(f"{kind} {id} is derived from unrecorded entities {missing[:3]}")
            if generated_by and generated_by not in self.activities:
                raise ProvError(f"{kind} {id}: activity {generated_by} is not recorded")
            if attributed_to and attributed_to not in self.agents:
                raise ProvError(f"{kind} {id}: agent {attributed_to} is not recorded")
            gen = (generated_by,) if generated_by else ()
            held = self.entities.get(id)
            if held is None:
                ent = Entity(id, kind, gen, ante, attributed_to, facts)
            else:
                if facts and held.attrs not in ((), facts):
                    raise ProvError(f"entity {id} already has other attributes (append-only)")
                if held.kind != kind:
                    raise ProvError(f"entity {id} is recorded as a {held.kind}, not a {kind}")
                if attributed_to and held.attributed_to not in ("", attributed_to):
                    raise ProvError(f"entity {id} is already attributed to {held.attributed_to}")
                ent = replace(
                    held,
                    generated_by=held.generated_by + tuple(g for g in gen
                                                           if g not in held.generated_by),
                    derived_from=held.derived_from + tuple(a for a in ante
                                                           if a not in held.derived_from),
                    attributed_to=held.attributed_to or attributed_to,
                    attrs=held.attrs or facts,
                )  # fmt: skip
                if ent == held:
                    return held
            self.entities[id] = ent
            self._persist("entity", id, {"kind": kind, "generated_by": list(ent.generated_by),
                                         "derived_from": list(ent.derived_from),
                                         "attributed_to": ent.attributed_to,
                                         "attrs": dict(ent.attrs)})  # fmt: skip
            return ent

    def _persist(self, table: str, id: str, body: dict[str, Any]) -> None:
        """Write-through hook (the SQLite log appends a row)."""

    # ---- reading --------------------------------------------------------------------------

    def lineage(self, id: str) -> list[Entity]:
        """The entity and every entity it rests on: what generated it used, what it was
        derived from, transitively (breadth first, each once)."""
        if id not in self.entities:
            raise ProvError(f"no entity {id} in the provenance log")
        seen: dict[str, Entity] = {}
        queue = [id]
        while queue:
            cur = queue.pop(0)
            if cur in seen or cur not in self.entities:
                continue
            ent = self.entities[cur]
            seen[cur] = ent
            queue.extend(ent.derived_from)
            for g in ent.generated_by:
                queue.extend(self.activities[g].used)
        return list(seen.values())

    def trace(self, id: str) -> list[Activity]:
        """``Trace(id)``: the activities the entity rests on, nearest first."""
        out: dict[str, Activity] = {}
        for ent in self.lineage(id):
            for g in ent.generated_by:
                out.setdefault(g, self.activities[g])
        return list(out.values())

    def agents_of(self, id: str) -> list[Agent]:
        names: dict[str, None] = {}
        for ent in self.lineage(id):
            if ent.attributed_to:
                names[ent.attributed_to] = None
        for act in self.trace(id):
            names[act.agent] = None
        return [self.agents[n] for n in names]

    # ---- export ---------------------------------------------------------------------------

    def _subset(
        self, ids: Iterable[str] | None
    ) -> tuple[list[Entity], list[Activity], list[Agent]]:
        if ids is None:
            return (list(self.entities.values()), list(self.activities.values()),
                    list(self.agents.values()))  # fmt: skip
        ents: dict[str, Entity] = {}
        for i in ids:
            for e in self.lineage(i):
                ents[e.id] = e
        acts = {g: self.activities[g] for e in ents.values() for g in e.generated_by}
        agent_ids = {a.agent for a in acts.values()} | {
            e.attributed_to for e in ents.values() if e.attributed_to
        }
        return list(ents.values()), list(acts.values()), [self.agents[a] for a in sorted(agent_ids)]

    def to_prov(self, ids: Iterable[str] | None = None) -> ProvDocument:
        """The log (with ``ids``, only their lineage) as a ``prov.model.ProvDocument``:
        the one path every export takes."""
        ents, acts, agents = self._subset(ids)
        doc = ProvDocument()
        hm = doc.add_namespace("hm", HM)
        doc.add_namespace("xsd", XSD)
        for g in agents:
            doc.agent(hm[_local(g.id)], {"prov:type": PROV_NS[_AGENT_CLASS[g.kind]],
                                         "hm:kind": g.kind})  # fmt: skip
        for e in ents:
            doc.entity(hm[_local(e.id)], {"hm:kind": e.kind, **{f"hm:{k}": v for k, v in e.attrs}})
        for a in acts:
            doc.activity(hm[_local(a.id)], _instant(a.start), _instant(a.end), {"hm:kind": a.kind})
            doc.wasAssociatedWith(hm[_local(a.id)], hm[_local(a.agent)])
            for u in a.used:
                doc.used(hm[_local(a.id)], hm[_local(u)])
        for e in ents:
            for gen in e.generated_by:
                doc.wasGeneratedBy(hm[_local(e.id)], hm[_local(gen)])
            for d in e.derived_from:
                doc.wasDerivedFrom(hm[_local(e.id)], hm[_local(d)])
            if e.attributed_to:
                doc.wasAttributedTo(hm[_local(e.id)], hm[_local(e.attributed_to)])
        return doc

    def to_provjson(self, ids: Iterable[str] | None = None) -> str:
        """PROV-JSON text, written by the ``prov`` package."""
        return str(self.to_prov(ids).serialize(format="json"))

    def to_provn(self, ids: Iterable[str] | None = None) -> str:
        """PROV-N text, written by the ``prov`` package."""
        return self.to_prov(ids).get_provn() + "\n"

    def to_turtle(self, ids: Iterable[str] | None = None) -> str:
        """PROV-O in Turtle, written by the ``prov`` package's RDF serializer (rdflib)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # prov 3.2 on rdflib 7.2+
            return str(self.to_prov(ids).serialize(format="rdf", rdf_format="turtle"))

    def to_jsonld(self, ids: Iterable[str] | None = None) -> dict[str, Any]:
        """PROV-O as JSON-LD: the same RDF graph as :meth:`to_turtle`, compacted with the
        ``prov``, ``xsd`` and ``hm`` prefixes."""
        graph = rdflib.Graph().parse(data=self.to_turtle(ids), format="turtle")
        text = graph.serialize(format="json-ld", context={"prov": PROV, "xsd": XSD, "hm": HM})
        out: dict[str, Any] = json.loads(text)
        return out


_AGENT_CLASS = {"person": "Person", "software": "SoftwareAgent", "organization": "Organization"}


def _local(id: str) -> str:
    """The local part (under ``hm:``, i.e. ``urn:hirmem:``) an id is exported as: an IRI
    and a PROV-N name both, so everything outside ``:/-._~@`` and alphanumerics is
    percent-encoded."""
    return urllib.parse.quote(id, safe=":/-._~@")


def _instant(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


class SQLiteLog(Log):
    """The log written through to a SQLite table (append-only: rows are only ever added)."""

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS prov (seq INTEGER PRIMARY KEY, "
                         "tbl TEXT NOT NULL, id TEXT NOT NULL, body TEXT NOT NULL)")  # fmt: skip
        self._loading = True
        for tbl, id, body in self._db.execute("SELECT tbl, id, body FROM prov ORDER BY seq"):
            b = json.loads(body)
            if tbl == "agent":
                self.agents[id] = Agent(id, b["kind"])
            elif tbl == "activity":
                self.activities[id] = Activity(id, b["kind"], b["agent"], b["start"], b["end"],
                                               tuple(b["used"]))  # fmt: skip
            else:
                gen, der = tuple(b["generated_by"]), tuple(b["derived_from"])
                facts = tuple(sorted(b.get("attrs", {}).items()))
                self.entities[id] = Entity(id, b["kind"], gen, der, b["attributed_to"], facts)
        self._loading = False
        self._pending: list[tuple[str, str, str]] = []

    def _persist(self, table: str, id: str, body: dict[str, Any]) -> None:
        if not self._loading:
            self._pending.append((table, id, json.dumps(body)))

    def flush(self) -> None:
        with self._lock:
            if self._pending:
                self._db.execute("BEGIN")
                self._db.executemany("INSERT INTO prov (tbl, id, body) VALUES (?, ?, ?)",
                                     self._pending)  # fmt: skip
                self._db.execute("COMMIT")
                self._pending = []

    def close(self) -> None:
        self.flush()
        self._db.close()
