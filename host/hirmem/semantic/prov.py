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
- The Turtle, JSON-LD, PROV-JSON and PROV-N writers are written by hand (the ``prov``
  package is not a dependency).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

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
    ) -> Entity:
        """Record an entity, or add a generation/derivation to one already recorded."""
        with self._lock:
            ante = tuple(derived_from)
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
                ent = Entity(id, kind, gen, ante, attributed_to)
            else:
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
                )  # fmt: skip
                if ent == held:
                    return held
            self.entities[id] = ent
            self._persist("entity", id, {"kind": kind, "generated_by": list(ent.generated_by),
                                         "derived_from": list(ent.derived_from),
                                         "attributed_to": ent.attributed_to})  # fmt: skip
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

    def to_turtle(self, ids: Iterable[str] | None = None) -> str:
        """PROV-O in Turtle; with ``ids``, only their lineage."""
        ents, acts, agents = self._subset(ids)
        lines = [f"@prefix prov: <{PROV}> .", f"@prefix xsd: <{XSD}> .",
                 "@prefix hm: <urn:hirmem:vocab#> .", ""]  # fmt: skip
        for e in ents:
            props = ["a prov:Entity", f"hm:kind {_lit(e.kind)}"]
            props += [f"prov:wasGeneratedBy {_iri(g)}" for g in e.generated_by]
            props += [f"prov:wasDerivedFrom {_iri(d)}" for d in e.derived_from]
            if e.attributed_to:
                props.append(f"prov:wasAttributedTo {_iri(e.attributed_to)}")
            lines.append(f"{_iri(e.id)} " + " ;\n    ".join(props) + " .")
        for a in acts:
            props = ["a prov:Activity", f"hm:kind {_lit(a.kind)}",
                     f"prov:wasAssociatedWith {_iri(a.agent)}",
                     f'prov:startedAtTime "{_when(a.start)}"^^xsd:dateTime',
                     f'prov:endedAtTime "{_when(a.end)}"^^xsd:dateTime']  # fmt: skip
            props += [f"prov:used {_iri(u)}" for u in a.used]
            lines.append(f"{_iri(a.id)} " + " ;\n    ".join(props) + " .")
        for g in agents:
            lines.append(f"{_iri(g.id)} a prov:Agent, prov:{_AGENT_CLASS[g.kind]} .")
        return "\n".join(lines) + "\n"

    def to_jsonld(self, ids: Iterable[str] | None = None) -> dict[str, Any]:
        """PROV-O as a JSON-LD document; with ``ids``, only their lineage."""
        ents, acts, agents = self._subset(ids)
        graph: list[dict[str, Any]] = []
        for e in ents:
            node: dict[str, Any] = {"@id": _urn(e.id), "@type": "prov:Entity", "hm:kind": e.kind}
            if e.generated_by:
                node["prov:wasGeneratedBy"] = [{"@id": _urn(g)} for g in e.generated_by]
            if e.derived_from:
                node["prov:wasDerivedFrom"] = [{"@id": _urn(d)} for d in e.derived_from]
            if e.attributed_to:
                node["prov:wasAttributedTo"] = {"@id": _urn(e.attributed_to)}
            graph.append(node)
        for a in acts:
            graph.append({
                "@id": _urn(a.id), "@type": "prov:Activity", "hm:kind": a.kind,
                "prov:wasAssociatedWith": {"@id": _urn(a.agent)},
                "prov:startedAtTime": {"@value": _when(a.start), "@type": "xsd:dateTime"},
                "prov:endedAtTime": {"@value": _when(a.end), "@type": "xsd:dateTime"},
                "prov:used": [{"@id": _urn(u)} for u in a.used],
            })  # fmt: skip
        for g in agents:
            kinds = ["prov:Agent", f"prov:{_AGENT_CLASS[g.kind]}"]
            graph.append({"@id": _urn(g.id), "@type": kinds})
        return {"@context": {"prov": PROV, "xsd": XSD, "hm": "urn:hirmem:vocab#"},
                "@graph": graph}  # fmt: skip

    def to_provjson(self, ids: Iterable[str] | None = None) -> dict[str, Any]:
        """PROV-JSON (the W3C member submission's layout): one map per PROV type and
        relation, relations named by blank ids."""
        ents, acts, agents = self._subset(ids)
        out: dict[str, Any] = {"prefix": {"hm": HM, "prov": PROV, "xsd": XSD}}
        out["entity"] = {_pj(e.id): {"prov:type": e.kind} for e in ents}
        out["activity"] = {_pj(a.id): {"prov:startTime": _when(a.start),
                                        "prov:endTime": _when(a.end), "prov:type": a.kind}
                           for a in acts}  # fmt: skip
        out["agent"] = {_pj(g.id): {"prov:type": f"prov:{_AGENT_CLASS[g.kind]}"} for g in agents}
        rel: dict[str, dict[str, dict[str, str]]] = {
            "wasGeneratedBy": {}, "used": {}, "wasDerivedFrom": {}, "wasAssociatedWith": {},
            "wasAttributedTo": {},
        }  # fmt: skip

        def add(kind: str, body: dict[str, str]) -> None:
            rel[kind][f"_:{kind}{len(rel[kind]) + 1}"] = body

        for e in ents:
            for g in e.generated_by:
                add("wasGeneratedBy", {"prov:entity": _pj(e.id), "prov:activity": _pj(g)})
            for d in e.derived_from:
                add("wasDerivedFrom", {"prov:generatedEntity": _pj(e.id),
                                       "prov:usedEntity": _pj(d)})  # fmt: skip
            if e.attributed_to:
                add("wasAttributedTo", {"prov:entity": _pj(e.id),
                                        "prov:agent": _pj(e.attributed_to)})  # fmt: skip
        for a in acts:
            add("wasAssociatedWith", {"prov:activity": _pj(a.id), "prov:agent": _pj(a.agent)})
            for u in a.used:
                add("used", {"prov:activity": _pj(a.id), "prov:entity": _pj(u)})
        out.update({k: v for k, v in rel.items() if v})
        return out

    def to_provn(self, ids: Iterable[str] | None = None) -> str:
        """PROV-N (the W3C notation), for readers that speak it."""
        ents, acts, agents = self._subset(ids)
        out = ["document", "  prefix hm <urn:hirmem:>"]
        for g in agents:
            out.append(f"  agent({_qn(g.id)}, [prov:type='prov:{_AGENT_CLASS[g.kind]}'])")
        for a in acts:
            out.append(f"  activity({_qn(a.id)}, {_when(a.start)}, {_when(a.end)}, "
                       f"[prov:type=\"{a.kind}\"])")  # fmt: skip
            out.append(f"  wasAssociatedWith({_qn(a.id)}, {_qn(a.agent)}, -)")
            out.extend(f"  used({_qn(a.id)}, {_qn(u)}, -)" for u in a.used)
        for e in ents:
            out.append(f"  entity({_qn(e.id)}, [prov:type=\"{e.kind}\"])")
            out.extend(f"  wasGeneratedBy({_qn(e.id)}, {_qn(g)}, -)" for g in e.generated_by)
            out.extend(f"  wasDerivedFrom({_qn(e.id)}, {_qn(d)})" for d in e.derived_from)
            if e.attributed_to:
                out.append(f"  wasAttributedTo({_qn(e.id)}, {_qn(e.attributed_to)})")
        out.append("endDocument")
        return "\n".join(out) + "\n"


_AGENT_CLASS = {"person": "Person", "software": "SoftwareAgent", "organization": "Organization"}


def _urn(id: str) -> str:
    return HM + urllib.parse.quote(id, safe=":/@!$&'()*+,;=-._~")


def _iri(id: str) -> str:
    return f"<{_urn(id)}>"


def _pj(id: str) -> str:
    return "hm:" + urllib.parse.quote(id, safe=":/@!$&'()*+,;=-._~")


def _qn(id: str) -> str:
    return "hm:" + "".join(c if c.isalnum() or c in "_:.-" else "\\" + c if c in "~!$&'()*+,;=/?#@"
                           else f"%{ord(c):02X}" for c in id)  # fmt: skip


def _lit(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z"
    )


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
                self.entities[id] = Entity(id, b["kind"], gen, der, b["attributed_to"])
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
