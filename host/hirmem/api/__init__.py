"""The HTTP API and the operator dashboard: one ASGI application (FastAPI on uvicorn).

Modules, one job each:

- :mod:`~hirmem.api.sources` — what the application reads and writes, per tenant: the
  intake reader, the memory engine, the semantic substrate (an interface: the daemon
  gives local files, a fleet node its own).
- :mod:`~hirmem.api.tokens` — bearer tokens with scopes, kept hashed in SQLite;
  :mod:`~hirmem.api.ratelimit` — a token bucket per principal.
- :mod:`~hirmem.api.problems` — RFC 9457 problem details; :mod:`~hirmem.api.paging` —
  opaque cursors.
- :mod:`~hirmem.api.views` — the JSON shapes (devices, timeline, memories), shared by
  the API and the dashboard; :mod:`~hirmem.api.charts` — server-rendered SVG.
- :mod:`~hirmem.api.app` — :func:`~hirmem.api.app.create_app`, the routes;
  :mod:`~hirmem.api.dashboard` — the HTML pages (Jinja2, htmx vendored in ``static/``).
- :mod:`~hirmem.api.server` — uvicorn on a thread, for the daemon and the demo.

The tenant comes from the principal only (the token's tenant): no route takes one.

May import: :mod:`hirmem.protocol`, :mod:`hirmem.daemon.reader` (the store, read-only),
:mod:`hirmem.memory` and :mod:`hirmem.semantic`. Not the daemon's service, store or
endpoint: the daemon hands its health and metrics in as callables (see ``sources``).
"""
