"""The fleet node's HTTP interface (Starlette on uvicorn).

``PUT /v1/packs/{pack_id}`` — body: one device pack, COSE_Sign1 bytes
(``Content-Type: application/cose; cose-type="cose-sign1"``), signed by a gateway per
:mod:`hirmem.protocol.httpsig`. In order: the content type (415), the body read up to
``max_body`` bytes (413, counted while reading: a lying or missing Content-Length changes
nothing), the gateway's signature (401), then the tenant — the gateway's, from the fleet
registry, and nothing else: no path, query, header or body field names one, and any that
tries is ignored — and the pack itself (:meth:`hirmem.fleet.tenant.TenantStore.take`).
201 with ``{"pack_id", "device", "seq", "records", "stored_at"}`` after the commit that
stored it, 200 with the same answer for a repeat, otherwise an RFC 9457 problem
(``application/problem+json``) whose ``reason`` is a key of
:data:`hirmem.fleet.refusals.STATUS`. Every refusal is recorded before it is answered,
except backpressure (503): those are counted in memory and written to the registry once
a second, so an overloaded node does not write per refusal.

Backpressure: at most ``max_inflight`` uploads are judged at once; one more is answered
503 with ``Retry-After`` at once, before its body is read.

A failure of the tenant's database is 503 ``storage-unavailable`` with ``Retry-After``
(recorded in the registry): nothing was stored, the gateway sends again. So is a failure
of the registry's own database (a PostgreSQL registry's server down): that refusal
cannot be written there, so it is counted in the process (``unrecorded_refusals`` of
``/v1/healthz`` and the metrics) and logged.

The nonce cache of the signature check is per process: with ``--workers N`` a request
replayed to another process passes it, and is harmless there (an upload is idempotent:
the same pack gets the original answer and nothing is stored twice).

``GET /v1/healthz`` — 200 ``{"ok": true, "inflight", "overloaded",
"consolidation_failures", "unrecorded_refusals"}``.

Every other path is the HTTP API and dashboard of :mod:`hirmem.api` (the daemon's
application, :mod:`hirmem.fleet.serving`): bearer tokens from ``hirmem fleet token
create``, the tenant the token's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from hirmem.fleet.refusals import STATUS, TITLES
from hirmem.fleet.registry import ENV_REGISTRY, Registry
from hirmem.fleet.tenant import Accepted, Refused
from hirmem.protocol.httpsig import HttpSignatureError, NonceCache, verify_request
from hirmem.protocol.packs import MAX_PACK

if TYPE_CHECKING:
    from hirmem.fleet.consolidate import Consolidator

__all__ = ["FleetConfig", "create_app"]

log = logging.getLogger("hirmem.fleet")

MEDIA_TYPE = 'application/cose; cose-type="cose-sign1"'
PACK_PATH = "/v1/packs/{pack_id}"


@dataclass(frozen=True, slots=True)
class FleetConfig:
    directory: Path
    max_body: int = MAX_PACK
    max_inflight: int = 64
    retry_after: int = 1  # seconds, the Retry-After of a 503
    max_skew: int = 300
    pg_pool: int = 8
    consolidate_every: float = 0.0  # seconds between consolidation rounds here; 0: none
    registry: str | None = None  # a PostgreSQL registry's conninfo; None: directory/fleet.db
    secret: bytes | None = None  # the fleet secret (seals checkpoint keys in a PG registry)


def _is_cose(content_type: str | None) -> bool:
    if content_type is None:
        return False
    parts = [p.strip() for p in content_type.split(";")]
    if parts[0].lower() != "application/cose":
        return False
    params = {
        k.strip().lower(): v.strip().strip('"') for k, _, v in (p.partition("=") for p in parts[1:])
    }
    return params.get("cose-type", "cose-sign1") == "cose-sign1"


def problem(reason: str, detail: str, **extra: object) -> Response:
    status = STATUS[reason]
    body = {
        "type": f"urn:hirmem:fleet:{reason}",
        "title": TITLES[status],
        "status": status,
        "reason": reason,
        "detail": detail,
    }
    headers = {"Retry-After": str(extra.pop("retry_after"))} if "retry_after" in extra else {}
    return Response(json.dumps(body), status, headers, media_type="application/problem+json")


class _TooLarge(Exception):
    pass


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _TooLarge(f"Content-Length {declared} is over the limit of {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _TooLarge(f"the body passed the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


class FleetNode:
    """The state one fleet-node process holds: the registry, the nonces, the counters."""

    def __init__(self, config: FleetConfig) -> None:
        self.config = config
        self.registry = Registry(
            config.directory, config.pg_pool, registry=config.registry, secret=config.secret
        )
        self.nonces = NonceCache()
        self.inflight = 0
        self.overloaded = 0  # 503s answered since start
        self._unwritten = 0  # 503s not yet added to the registry's counts
        self.worker_id = f"{os.getpid()}-{secrets.token_hex(4)}"
        self.consolidator: Consolidator | None = None
        self._consolidator_lock = threading.Lock()
        self.consolidation_failures = 0
        self.unrecorded_refusals = 0  # refusals the registry could not take (it was down)

    def worker(self) -> Consolidator:
        """This process's consolidator (the rounds and the API share its engines)."""
        from hirmem.fleet.consolidate import Consolidator

        with self._consolidator_lock:
            if self.consolidator is None:
                self.consolidator = Consolidator(
                    self.config.directory,
                    self.worker_id,
                    locate=self.registry.postgres_of,
                    key_of=self.registry.checkpoint_key,
                )
            return self.consolidator

    def consolidate(self) -> None:
        """One consolidation round over every tenant (a worker thread)."""
        worker = self.worker()
        for tenant in self.registry.tenants():
            store = self.registry.store(tenant.name)
            while worker.run(tenant.name, store).packs:
                pass

    def refuse(self, reason: str, gateway: str, detail: str, **extra: object) -> Response:
        try:
            self.registry.refuse(STATUS[reason], reason, gateway, detail)
        except Exception as exc:  # the registry's database is down: counted here instead
            self.unrecorded_refusals += 1
            log.warning("refusal %s not recorded: the registry failed: %s", reason, exc)
        return problem(reason, detail, **extra)

    def flush_overloaded(self) -> None:
        count, self._unwritten = self._unwritten, 0
        if count:
            try:
                self.registry.refuse(
                    503,
                    "overloaded",
                    "",
                    f"{count} uploads over the in-flight bound of {self.config.max_inflight}",
                    count,
                )
            except Exception as exc:  # the registry is down: kept for the next flush
                self._unwritten += count
                log.warning("%d overloaded refusals not yet recorded: %s", count, exc)

    def judge(
        self,
        method: str,
        authority: str,
        path: str,
        headers: dict[str, str],
        pack_id: str,
        body: bytes,
    ) -> Response:
        """Everything after the body was read: signature, tenant, pack (a worker thread)."""
        tenant_of: dict[str, str] = {}

        def public_key_for(keyid: str) -> Ed25519PublicKey | None:
            found = self.registry.gateway_key(keyid)
            if found is None:
                return None
            tenant_of[keyid] = found[1]
            return found[0]

        try:
            keyid = verify_request(
                method,
                authority,
                path,
                headers,
                body,
                public_key_for,
                int(time.time()),
                self.nonces,
                self.config.max_skew,
            )
        except HttpSignatureError as exc:
            return self.refuse(exc.reason, "", exc.detail)
        except Exception as exc:  # the registry's database, not the upload: retry later
            log.warning("the fleet registry failed: %s", exc)
            return self.refuse(
                "storage-unavailable",
                "",
                f"fleet registry: {type(exc).__name__}; nothing was stored",
                retry_after=self.config.retry_after,
            )
        tenant = tenant_of[keyid]

        def elsewhere(kid: bytes) -> bool:
            holder = self.registry.device_tenant(kid)
            return holder is not None and holder != tenant

        try:
            outcome = self.registry.store(tenant).take(pack_id, body, keyid, elsewhere)
        except Exception as exc:  # the tenant's database, not the upload: retry later
            log.warning("tenant %s: the store failed: %s", tenant, exc)
            return self.refuse(
                "storage-unavailable",
                keyid,
                f"tenant store: {type(exc).__name__}; nothing was stored",
                retry_after=self.config.retry_after,
            )
        if isinstance(outcome, Refused):  # recorded by the store
            if STATUS[outcome.reason] == 503:
                return problem(outcome.reason, outcome.detail, retry_after=self.config.retry_after)
            return problem(outcome.reason, outcome.detail)
        assert isinstance(outcome, Accepted)
        return JSONResponse(outcome.answer(), 201 if outcome.first else 200)


def create_app(config: FleetConfig) -> Starlette:
    """The upload routes, and under them the HTTP API and dashboard of :mod:`hirmem.api`
    (every other path: ``/v1/…``, ``/ui/…``, ``/openapi.json``) over the node's tenants."""
    from hirmem.fleet.serving import api_app, token_store

    node = FleetNode(config)
    tokens = token_store(node.registry)

    async def put_pack(request: Request) -> Response:
        if node.inflight >= config.max_inflight:
            node.overloaded += 1
            node._unwritten += 1
            return problem(
                "overloaded",
                f"{node.inflight} uploads in flight; retry later",
                retry_after=config.retry_after,
            )
        node.inflight += 1
        try:
            return await _upload(request)
        finally:
            node.inflight -= 1

    async def _upload(request: Request) -> Response:
        if not _is_cose(request.headers.get("content-type")):
            return await run_in_threadpool(
                node.refuse,
                "unsupported-media-type",
                "",
                f"Content-Type must be {MEDIA_TYPE}, got {request.headers.get('content-type')}",
            )
        try:
            body = await _read_body(request, config.max_body)
        except _TooLarge as exc:
            return await run_in_threadpool(node.refuse, "too-large", "", str(exc))
        pack_id = request.path_params["pack_id"]
        headers = dict(request.headers.items())
        authority = request.headers.get("host", "")
        path = request.url.path  # the signature covers the path: a query changes nothing
        return await run_in_threadpool(
            node.judge, request.method, authority, path, headers, pack_id, body
        )

    async def healthz(request: Request) -> Response:
        return JSONResponse(
            {
                "ok": True,
                "inflight": node.inflight,
                "overloaded": node.overloaded,
                "consolidation_failures": node.consolidation_failures,
                "unrecorded_refusals": node.unrecorded_refusals,
            }
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async def flusher() -> None:
            while True:
                await asyncio.sleep(1)
                await run_in_threadpool(node.flush_overloaded)

        async def consolidating() -> None:
            while True:
                await asyncio.sleep(config.consolidate_every)
                try:
                    await run_in_threadpool(node.consolidate)
                except Exception:  # counted and logged; the next round retries (leases)
                    node.consolidation_failures += 1
                    log.exception("consolidation round failed")

        tasks = [asyncio.create_task(flusher())]
        if config.consolidate_every > 0:
            tasks.append(asyncio.create_task(consolidating()))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            node.flush_overloaded()
            if node.consolidator is not None:
                node.consolidator.close()
            tokens.close()
            node.registry.close()

    app = Starlette(
        routes=[
            Route(PACK_PATH, put_pack, methods=["PUT"]),
            Route("/v1/healthz", healthz, methods=["GET"]),
            Mount("", app=api_app(node, tokens)),
        ],
        lifespan=lifespan,
    )
    app.state.node = node
    return app


def app_from_env() -> Starlette:
    """The app factory uvicorn's workers call (``hirmem fleet serve --workers N``)."""
    env: Callable[[str, str], str] = lambda k, d: os.environ.get(k, d)  # noqa: E731
    from hirmem.fleet.sealing import read_secret

    return create_app(
        FleetConfig(
            directory=Path(env("HIRMEM_FLEET_DIR", "fleet")),
            max_body=int(env("HIRMEM_FLEET_MAX_BODY", str(MAX_PACK))),
            max_inflight=int(env("HIRMEM_FLEET_MAX_INFLIGHT", "64")),
            pg_pool=int(env("HIRMEM_FLEET_PG_POOL", "8")),
            registry=env(ENV_REGISTRY, "") or None,
            secret=read_secret(),
            consolidate_every=float(env("HIRMEM_FLEET_CONSOLIDATE_EVERY", "0")),
        )
    )
