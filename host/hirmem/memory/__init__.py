"""The host memory engine: layers, lifecycle, HIR gate, dynamics, repair, audit, recall.

Implements the memory model of ``shared/specs/memory-layer-stack.txt`` on SQLite:

* :mod:`~hirmem.memory.model` — the memory object (every schema field), states, layers
* :mod:`~hirmem.memory.states` — the lifecycle state machine (legal transitions only)
* :mod:`~hirmem.memory.config` — alpha, β, the decay law and every threshold, as defaults
* :mod:`~hirmem.memory.store` — SQLite (WAL) persistence with migrations and one writer,
  or a PostgreSQL schema (:mod:`~hirmem.memory.store_pg`: PL/pgSQL triggers, advisory lock)
* :mod:`~hirmem.memory.audit` — the append-only SHA-256 audit chain (provenance layer)
* :mod:`~hirmem.memory.dynamics` — write gate, strength equation, decay, the sweep
* :mod:`~hirmem.memory.contradiction` — conflict and corruption detection
* :mod:`~hirmem.memory.observe` — what an episode observes (reading, fact, event, action)
* :mod:`~hirmem.memory.distill` — episodes distilled into patterns and procedures
* :mod:`~hirmem.memory.revision` — revision by time: supersession, validity, flags that clear
* :mod:`~hirmem.memory.paths` — a steward's review or repair path as an action episode
* :mod:`~hirmem.memory.review` — quarantine review by a human steward
* :mod:`~hirmem.memory.embed` — the deterministic built-in embedder
* :mod:`~hirmem.memory.recall` — Sim · M · Rec · Trust ranking over an in-memory index
* :mod:`~hirmem.memory.engine` — the seven stages, tied together
* :mod:`~hirmem.memory.intake` — records from device packs, re-checked on the host
* :mod:`~hirmem.memory.cli` — ``hirmem memory …``
* :mod:`~hirmem.memory.follow` — the daemon's intake followed from a cursor
* :mod:`~hirmem.memory.keeper` — follow and the decay scheduler on the daemon's interval
* :mod:`~hirmem.memory.evidence` — signed checkpoints, rows against their records, triggers

May import: :mod:`hirmem.protocol`, :mod:`hirmem.embed` (the shared embedders),
:mod:`hirmem.sql` (a store on SQLite or PostgreSQL), and of the daemon only
:mod:`hirmem.daemon.reader` (the store, read-only). Not :mod:`hirmem.semantic`, the link or
the emulation.
"""

from __future__ import annotations

from hirmem.memory.config import MemoryConfig
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.model import Layer, Memory, State
from hirmem.memory.states import IllegalTransition

__all__ = ["IllegalTransition", "Layer", "Memory", "MemoryConfig", "MemoryEngine", "State"]
