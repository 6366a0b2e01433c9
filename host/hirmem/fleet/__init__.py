"""The fleet node: gateways upload their devices' signed packs over HTTP.

* :mod:`~hirmem.fleet.refusals` — the refusal reasons, their HTTP status and wire names
* :mod:`~hirmem.fleet.tenant` — a tenant's store: its device registry with each chain
  head, the packs and records it accepted, the refusals it recorded, the consolidation
  queue; :meth:`~hirmem.fleet.tenant.TenantStore.take` verifies and stores one upload
* :mod:`~hirmem.fleet.registry` — the fleet's own registry (``fleet.db``, or a PostgreSQL
  database every node shares): tenants and where their stores are, gateways (keyid →
  tenant), the device index (which tenant holds a device), refusals that happen before a
  tenant is known, the tenants' checkpoint keys
* :mod:`~hirmem.fleet.sealing` — the fleet secret, and checkpoint keys sealed with it
* :mod:`~hirmem.fleet.app` — the ASGI application (Starlette): ``PUT /v1/packs/{id}``,
  ``GET /v1/healthz``
* :mod:`~hirmem.fleet.view` — a tenant's store read as the HTTP API reads an intake;
  :mod:`~hirmem.fleet.serving` — the API and dashboard of :mod:`hirmem.api` over the
  node's tenants (tokens in the registry, each bound to one tenant), mounted by ``app``
* :mod:`~hirmem.fleet.consolidate` — the worker that runs the memory engine and the
  semantic substrate over a tenant's accepted packs

Its stores' SQL databases are :mod:`hirmem.sql`'s (SQLite, a file per tenant, the
default; or PostgreSQL, a database per tenant, psycopg 3).

May import: :mod:`hirmem.protocol`, :mod:`hirmem.sql`, :mod:`hirmem.memory`, :mod:`hirmem.semantic`,
:mod:`hirmem.api` and of the daemon only :mod:`hirmem.daemon.reader`. The daemon and the
API never import the fleet.
"""
