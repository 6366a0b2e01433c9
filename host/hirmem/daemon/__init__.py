"""Many device lines into one store: the host daemon.

Holds: ``service`` (the daemon: a worker per line, housekeeping, knowledge push,
metrics, logs, SIGTERM), ``intake`` (the session's pack sink over the store), ``store``
(SQLite: registry, packs, records, refusals, knowledge, counters, sessions, the fleet
outbox's queue), ``outbox`` (store-and-forward of accepted packs to a fleet node over
signed HTTP), ``config``
(TOML and command-line settings, checked before anything starts) and ``reader`` (the
read-only interface the memory engine and the semantic substrate use).

May import: :mod:`hirmem.link` and :mod:`hirmem.protocol`. :mod:`hirmem.memory` and
:mod:`hirmem.semantic` import only ``hirmem.daemon.reader`` from here.

Where a module could sit elsewhere: ``config`` is the service's settings, not the
command line's, so it lives here and the CLI passes it through.
"""
