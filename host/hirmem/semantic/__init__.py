"""The semantic substrate (HIP-0526): documents, chunks and assertions with their spans.

Modules, one job each:

- :mod:`~hirmem.semantic.values` — Doc, Chunk, Triple (extracted, with chunk and span),
  Claim (caller-supplied), Origin and its accessor.
- :mod:`~hirmem.semantic.assertions` — the ledger: repetition, temporal bounds, retraction,
  erasure with tombstones.
- :mod:`~hirmem.semantic.stages` — the five stage interfaces and the pipeline.
- :mod:`~hirmem.semantic.ingest`, :mod:`~hirmem.semantic.parse`,
  :mod:`~hirmem.semantic.split`, :mod:`~hirmem.semantic.extract` — the built-in stages.
- :mod:`~hirmem.semantic.stores` — vector, graph, triple and document stores by driver name.
- :mod:`~hirmem.semantic.prov` — PROV-O provenance; :mod:`~hirmem.semantic.reason` — forward
  chaining; :mod:`~hirmem.semantic.decisions` — decisions; :mod:`~hirmem.semantic.retrieve`
  — subject-scoped retrieval; :mod:`~hirmem.semantic.substrate` — all of it kept together;
  :mod:`~hirmem.semantic.devices` — device records in; :mod:`~hirmem.semantic.cli`.
- The tiers: :mod:`~hirmem.semantic.passages` (0, verbatim), :mod:`~hirmem.semantic.memories`
  (1, self-contained facts and distilled patterns), :mod:`~hirmem.semantic.claims` (2,
  typed, by ontology templates; :mod:`~hirmem.semantic.relations` files vocabulary
  relations as claims), :mod:`~hirmem.semantic.entities` (names, source-stated aliases and
  open edges); :mod:`~hirmem.semantic.planner` answers typed questions from claims.

Identity is :func:`hirmem.protocol.identity.triple_id` (the reference implementation's fold and
FNV-1a). The library holds no tenant and no credential and opens no listener (§1, §8): a
served surface resolves the organization from the validated principal before opening a
store, stamps the filing identity itself, and isolates tenants by separate substrates
(separate files), so a cross-tenant read cannot be spelled.

May import: :mod:`hirmem.protocol`, :mod:`hirmem.embed` (the shared embedders),
:mod:`hirmem.sql` (a store on SQLite or PostgreSQL), and of the daemon only
:mod:`hirmem.daemon.reader` (the store, read-only). Not :mod:`hirmem.memory`, the link or
the emulation.
"""

from __future__ import annotations

from hirmem.semantic.values import Chunk, Claim, Doc, Origin, Span, Triple, origin

__all__ = ["Chunk", "Claim", "Doc", "Origin", "Span", "Triple", "origin"]
