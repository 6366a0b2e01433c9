"""The ``oxigraph`` triple store: assertions in a pyoxigraph store, queryable by SPARQL 1.1.

``open_store("triple", "oxigraph:")`` holds the store in memory;
``"oxigraph:/var/lib/hirmem/triples.oxigraph"`` opens (or creates) an on-disk store there.

Layout (what a SPARQL query sees):

- The default graph holds exactly what was asserted, one RDF triple per assertion, every
  term an IRI ``urn:hirmem:term:<fold(term), percent-encoded>``; the prefix ``t:`` is bound
  to that namespace in :meth:`OxigraphTriples.sparql`. So
  ``SELECT ?who WHERE { ?who t:knows t:bob }`` asks who knows Bob, and terms that fold
  alike are one node, as in every other driver.
- The named graph ``urn:hirmem:spelling`` maps each assertion (``urn:hirmem:assertion:<id>``,
  the §2.3 id) to the spelling it was first asserted with, so :meth:`match` returns the
  terms as written, like the memory driver. The spelling is the three terms joined by
  U+0000, or, when a term itself holds a U+0000, a JSON array of them (JSON text holds no
  raw U+0000, so the two forms cannot be confused and any term may be spelled).
- A blank term is refused, as by every driver (:func:`~.base.check_terms`).

``match`` is a pattern lookup on the store's own indexes (no SPARQL parsing per call).
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyoxigraph as ox

from hirmem.protocol.identity import fold, triple_id
from hirmem.semantic.stores.base import check_terms

__all__ = ["ASSERTION", "SPELLING", "TERM", "OxigraphTriples", "term_iri"]

TERM = "urn:hirmem:term:"
ASSERTION = "urn:hirmem:assertion:"
SPELLING = "urn:hirmem:spelling"
_SPELLED = ox.NamedNode("urn:hirmem:vocab#spelling")
_GRAPH = ox.NamedNode(SPELLING)
_SEP = "\x00"


def term_iri(term: str) -> str:
    """The IRI a term is stored under (its fold, percent-encoded)."""
    return TERM + urllib.parse.quote(fold(term), safe="")


def _node(term: str) -> ox.NamedNode:
    return ox.NamedNode(term_iri(term))


def _value(term: Any) -> Any:
    """A SPARQL result term as a Python value: a term IRI as its folded term, another IRI as
    itself, a literal as its lexical value, a nested triple as a tuple."""
    if isinstance(term, ox.NamedNode):
        v = term.value
        return urllib.parse.unquote(v[len(TERM):]) if v.startswith(TERM) else v
    if isinstance(term, ox.Triple):
        return (_value(term.subject), _value(term.predicate), _value(term.object))
    return None if term is None else term.value


def _spelled(text: str) -> tuple[str, str, str]:
    """The three terms of a spelling literal: joined by U+0000, or a JSON array."""
    if _SEP not in text:
        s, p, o = json.loads(text)
        return str(s), str(p), str(o)
    s, p, o = text.split(_SEP)
    return s, p, o


class OxigraphTriples:
    def __init__(self, path: str | Path | None = None) -> None:
        self.path = None if path is None else str(path)
        self.store = ox.Store() if path is None else ox.Store(str(path))

    def __len__(self) -> int:
        res = self.store.query(f"SELECT (COUNT(*) AS ?n) WHERE {{ GRAPH <{SPELLING}> "
                               "{ ?a ?p ?o } }")  # fmt: skip
        assert isinstance(res, ox.QuerySolutions)
        n = next(iter(res))["n"]
        assert isinstance(n, ox.Literal)
        return int(n.value)

    @staticmethod
    def _quads(s: str, p: str, o: str, tid: str) -> tuple[ox.Quad, ox.Quad]:
        terms = (s, p, o)
        plain = not any(_SEP in t for t in terms)
        spelled = ox.Literal(_SEP.join(terms) if plain else json.dumps(terms, ensure_ascii=False))
        return (ox.Quad(_node(s), _node(p), _node(o), ox.DefaultGraph()),
                ox.Quad(ox.NamedNode(ASSERTION + tid), _SPELLED, spelled, _GRAPH))  # fmt: skip

    def assert_triple(self, s: str, p: str, o: str) -> str:
        check_terms(s, p, o)
        tid = triple_id(s, p, o)
        fact, spelling = self._quads(s, p, o, tid)
        if fact not in self.store:
            self.store.extend([fact, spelling])
        return tid

    def assert_many(self, triples: Iterable[tuple[str, str, str]]) -> int:
        quads: list[ox.Quad] = []
        seen: set[str] = set()
        for s, p, o in triples:
            check_terms(s, p, o)
            tid = triple_id(s, p, o)
            if tid in seen:
                continue
            seen.add(tid)
            fact, spelling = self._quads(s, p, o, tid)
            if fact not in self.store:
                quads += (fact, spelling)
        self.store.extend(quads)
        return len(quads) // 2

    def _spelling(self, tid: str) -> tuple[str, str, str]:
        for q in self.store.quads_for_pattern(ox.NamedNode(ASSERTION + tid), _SPELLED, None,
                                              _GRAPH):  # fmt: skip
            assert isinstance(q.object, ox.Literal)
            return _spelled(q.object.value)
        raise KeyError(tid)  # an assertion without its spelling: the store was edited by hand

    def match(
        self, s: str | None = None, p: str | None = None, o: str | None = None
    ) -> list[tuple[str, str, str]]:
        check_terms(s, p, o)
        ps, pp, po = (None if t is None else _node(t) for t in (s, p, o))
        out = []
        n = len(TERM)
        for q in self.store.quads_for_pattern(ps, pp, po, ox.DefaultGraph()):
            terms = (q.subject, q.predicate, q.object)
            assert all(isinstance(t, ox.NamedNode) for t in terms)
            parts = tuple(t.value[n:] for t in terms if isinstance(t, ox.NamedNode))
            tid = triple_id(*(urllib.parse.unquote(x) for x in parts))
            out.append(self._spelling(tid))
        return out

    def delete(self, s: str, p: str, o: str) -> bool:
        fact, spelling = self._quads(s, p, o, triple_id(s, p, o))
        if fact not in self.store:
            return False
        for q in self.store.quads_for_pattern(spelling.subject, _SPELLED, None, _GRAPH):
            self.store.remove(q)
        self.store.remove(fact)
        return True

    def sparql(self, query: str, **kwargs: Any) -> Any:
        """Run a SPARQL 1.1 query over what was asserted (prefix ``t:`` is bound).

        SELECT: a list of ``{variable: value}`` (term IRIs read back as folded terms);
        ASK: a bool; CONSTRUCT/DESCRIBE: a list of ``(s, p, o)`` values.
        """
        prefixes = {"t": TERM, "a": ASSERTION, **kwargs.pop("prefixes", {})}
        res = self.store.query(query, prefixes=prefixes, **kwargs)
        if isinstance(res, ox.QueryBoolean):
            return bool(res)
        if isinstance(res, ox.QuerySolutions):
            names = [v.value for v in res.variables]
            return [{n: _value(row[n]) for n in names if row[n] is not None} for row in res]
        return [(_value(t.subject), _value(t.predicate), _value(t.object)) for t in res]

    def flush(self) -> None:
        if self.path is not None:
            self.store.flush()

    def close(self) -> None:
        """Flush and release the store (an on-disk store is locked while open)."""
        if hasattr(self, "store"):
            self.flush()
            del self.store
