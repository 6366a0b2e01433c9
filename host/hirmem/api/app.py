"""The application factory: :func:`create_app` over a :class:`~hirmem.api.sources.Sources`.

Every ``/v1`` route needs a bearer token (``Authorization: Bearer hm_…``; the dashboard's
pages send the same token from an HttpOnly cookie) with the route's scope, is rate
limited per token, and answers errors as problem details. The tenant is the token's.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field

from hirmem.api import paging, problems, views
from hirmem.api.batching import RecallBatcher
from hirmem.api.problems import Problem
from hirmem.api.ratelimit import RateLimiter, retry_after
from hirmem.api.sources import Sources
from hirmem.api.tokens import Principal, TokenStore, TokensUnavailable
from hirmem.daemon.reader import FleetReader
from hirmem.memory import distill, evidence, review
from hirmem.memory.engine import MemoryEngine
from hirmem.protocol.clock import now_ms
from hirmem.protocol.keys import ID_SIZE
from hirmem.semantic.errors import ProvError

API_VERSION = "1.0.0"
COOKIE = "hirmem_token"
DEFAULT_RATE, DEFAULT_BURST = 50.0, 100

_bearer = HTTPBearer(auto_error=False, description="a token from `hirmem token create`")


class AdmitRequest(BaseModel):
    text: str = Field(min_length=1, max_length=65536, description="what to remember")
    source: str = Field(default="api", max_length=256)
    subject: str = Field(default="", max_length=256)
    attribute: str = Field(default="", max_length=256)
    value: str = Field(default="", max_length=1024)
    kind: str = Field(default="fact", max_length=32)
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)
    provenance: float = Field(default=1.0, ge=0.0, le=1.0)
    flags: int = Field(default=0xFFF, ge=0, le=0xFFF,
                       description="the sub-check results (ACTION_FLAGS, bit set = passed)")


class RecallRequest(BaseModel):
    query: str = Field(min_length=1, max_length=4096)
    k: int = Field(default=10, ge=1, le=100)
    touch: bool = Field(default=True, description="count the hits as a use (rehearsal)")


class DecideRequest(BaseModel):
    decision: Literal["promote", "retire", "keep"]
    reason: str = Field(min_length=1, max_length=512, description="why the steward decided")


class Api:
    """What the routes share: the sources, the tokens, the rate limiter, and a recall
    batcher per memory engine."""

    def __init__(self, sources: Sources, tokens: TokenStore, limiter: RateLimiter) -> None:
        self.sources, self.tokens, self.limiter = sources, tokens, limiter
        self._batchers: dict[int, tuple[MemoryEngine, RecallBatcher]] = {}
        self._batchers_lock = threading.Lock()

    def batcher_list(self) -> list[tuple[MemoryEngine, RecallBatcher]]:
        with self._batchers_lock:
            return list(self._batchers.values())

    def batcher(self, engine: MemoryEngine) -> RecallBatcher:
        with self._batchers_lock:
            held = self._batchers.get(id(engine))
            if held is None or held[0] is not engine:  # bounded: one per engine served
                held = (engine, RecallBatcher(engine))
                self._batchers[id(engine)] = held
            return held[1]

    def authenticate(self, request: Request, token: str | None) -> Principal:
        """The principal of ``token`` (or of the dashboard's cookie), rate limited."""
        via_cookie = token is None
        token = token or request.cookies.get(COOKIE)
        if not token:
            raise Problem(401, "no-token",
                          "this needs a bearer token: Authorization: Bearer <token from "
                          "`hirmem token create`>", {"WWW-Authenticate": "Bearer"})  # fmt: skip
        try:
            who = self.tokens.authenticate(token)
        except TokensUnavailable as exc:
            raise Problem(503, "tokens-unavailable", f"{exc}; retry later",
                          {"Retry-After": "1"}) from None  # fmt: skip
        if who is None:
            raise Problem(401, "bad-token", "the token is not valid (unknown, revoked or "
                          "mistyped)", {"WWW-Authenticate": 'Bearer error="invalid_token"'})
        if via_cookie and request.method not in ("GET", "HEAD") and \
                request.headers.get("sec-fetch-site", "same-origin") not in (
                    "same-origin", "none"):  # fmt: skip
            raise Problem(403, "cross-site", "a cookie-authenticated change must come from "
                          "this site's own pages")  # fmt: skip
        wait = self.limiter.take(who.token_id)
        if wait:
            raise Problem(429, "rate-limited",
                          f"token {who.token_id} is over its rate limit "
                          f"({self.limiter.rate:g}/s, bursts of {self.limiter.burst:g}); "
                          f"retry in {wait:.2f} s", {"Retry-After": retry_after(wait)})  # fmt: skip
        request.state.principal = who
        return who


def scope(needed: str) -> Callable[..., Principal]:
    """A dependency: the request's principal, which must hold ``needed``."""

    def dependency(
        request: Request,
        creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> Principal:
        api: Api = request.app.state.api
        who = api.authenticate(request, creds.credentials if creds else None)
        if not who.allows(needed):
            raise Problem(403, "scope",
                          f"this needs the {needed!r} scope; token {who.token_id} has "
                          f"{who.scope!r}")  # fmt: skip
        return who

    dependency.__name__ = f"scope_{needed}"
    return dependency


Read = Annotated[Principal, Depends(scope("read"))]
Review = Annotated[Principal, Depends(scope("review"))]
Admin = Annotated[Principal, Depends(scope("admin"))]
Cursor = Annotated[str | None, Query(description="`next` of the previous page")]
Limit = Annotated[int, Query(ge=1, le=paging.MAX_LIMIT)]
DeviceId = Annotated[str, Path(pattern=f"^[0-9a-f]{{{ID_SIZE * 2}}}$",
                               description="device id, 16 hex digits")]  # fmt: skip
MemoryId = Annotated[str, Path(pattern="^[0-9a-f]{32}$", description="memory id, 32 hex")]


def _api(request: Request) -> Api:
    api: Api = request.app.state.api
    return api


@contextlib.contextmanager
def fleet(request: Request, who: Principal) -> Iterator[FleetReader]:
    with _api(request).sources.fleet(who.tenant) as reader:
        yield reader


def engine_of(request: Request, who: Principal) -> MemoryEngine:
    return _api(request).sources.memory(who.tenant)


def _memory(engine: MemoryEngine, memory_id: str) -> Any:
    m = engine.get(memory_id)
    if m is None:
        raise Problem(404, "no-memory", f"no memory {memory_id}")
    return m


def _device(reader: FleetReader, device: str) -> Any:
    d = reader.device(bytes.fromhex(device))
    if d is None:
        raise Problem(404, "no-device", f"no device {device} is registered")
    return d


def create_app(
    sources: Sources,
    tokens: TokenStore,
    *,
    rate: float = DEFAULT_RATE,
    burst: int = DEFAULT_BURST,
    mounts: tuple[Callable[[FastAPI], None], ...] = (),
) -> FastAPI:
    """The API, and whatever ``mounts`` add to it (the dashboard's pages)."""
    app = FastAPI(
        docs_url=None,  # the interactive pages load their scripts from a CDN: not here
        redoc_url=None,
        title="hirmem",
        version=API_VERSION,
        description="The edge-memory host: devices, intake, memory, review, audit, "
        "semantics. Bearer tokens with scopes read < review < admin; errors are RFC 9457 "
        "problem details; listings page by cursor.",
    )
    app.state.api = Api(sources, tokens, RateLimiter(rate, burst))
    problems.install(app)
    _device_routes(app)
    _memory_routes(app)
    _other_routes(app)
    for mount in mounts:
        mount(app)
    return app


def _device_routes(app: FastAPI) -> None:
    @app.get("/v1/fleet", tags=["devices"], summary="active, silent and never-seen devices")
    def fleet_summary(request: Request, who: Read) -> dict[str, Any]:
        with fleet(request, who) as reader:
            return views.fleet_summary(reader.devices(), now_ms())

    @app.get("/v1/devices", tags=["devices"], summary="the device table, paged")
    def devices(request: Request, who: Read, cursor: Cursor = None, limit: Limit = 100
                ) -> dict[str, Any]:  # fmt: skip
        after = paging.decode("devices", cursor) or ""
        with fleet(request, who) as reader:
            rows = [d for d in reader.devices() if d.device_id.hex() > after]
            page = rows[:limit]
            ctx = views.FleetContext.read(reader)
            items = views.device_rows(reader, page, ctx)
        more = len(rows) > limit
        return {"items": items,
                "next": paging.encode("devices", page[-1].device_id.hex()) if more else None}

    @app.get("/v1/devices/{device}", tags=["devices"],
             summary="one device: counters, packs, refusals, knowledge state")  # fmt: skip
    def device(request: Request, who: Read, device: DeviceId) -> dict[str, Any]:
        with fleet(request, who) as reader:
            d = _device(reader, device)
            return views.device_detail(reader, d, views.FleetContext.read(reader))

    @app.get("/v1/devices/{device}/packs", tags=["devices"], summary="a device's packs")
    def device_packs(request: Request, who: Read, device: DeviceId, cursor: Cursor = None,
                     limit: Limit = 100) -> dict[str, Any]:  # fmt: skip
        after = paging.decode_int("device-packs", cursor)
        with fleet(request, who) as reader:
            _device(reader, device)
            rows = [p for p in reader.packs(bytes.fromhex(device)) if p.seq > after]
        page = rows[:limit]
        more = len(rows) > limit
        return {"items": [views.pack_view(p) for p in page],
                "next": paging.encode("device-packs", page[-1].seq) if more else None}

    @app.get("/v1/devices/{device}/refusals", tags=["devices"], summary="a device's refusals")
    def device_refusals(request: Request, who: Read, device: DeviceId) -> dict[str, Any]:
        with fleet(request, who) as reader:
            _device(reader, device)
            return {"items": views.refusal_views(reader, bytes.fromhex(device))}

    @app.get("/v1/devices/{device}/timeline", tags=["devices"],
             summary="packs, refusals, reboots and gaps, oldest first")  # fmt: skip
    def device_timeline(request: Request, who: Read, device: DeviceId) -> dict[str, Any]:
        with fleet(request, who) as reader:
            _device(reader, device)
            return {"items": views.timeline(reader, bytes.fromhex(device))}

    @app.get("/v1/intake/packs", tags=["intake"], summary="accepted packs in arrival order")
    def intake_packs(request: Request, who: Read, cursor: Cursor = None, limit: Limit = 100
                     ) -> dict[str, Any]:  # fmt: skip
        after = paging.decode_int("packs", cursor)
        with fleet(request, who) as reader:
            rows = reader.packs_since(after, limit + 1)
        page = rows[:limit]
        items = [{"cursor": c, "pack": p.pack_id.hex(), "device": p.signer.hex(), "seq": p.seq,
                  "created": p.created, "records": len(p.items), "hash": p.hash.hex()}
                 for c, p in page]  # fmt: skip
        more = len(rows) > limit
        return {"items": items, "next": paging.encode("packs", page[-1][0]) if more else None}

    @app.get("/v1/intake/records", tags=["intake"], summary="stored records in arrival order")
    def intake_records(request: Request, who: Read, cursor: Cursor = None, limit: Limit = 100
                       ) -> dict[str, Any]:  # fmt: skip
        after = paging.decode_int("records", cursor)
        with fleet(request, who) as reader:
            rows = reader.records(after, limit + 1)
        page = rows[:limit]
        items = [{"cursor": c, "id": r.id.hex(), "pack": pid.hex(), "source": r.source,
                  "timestamp": r.timestamp, "payload_hex": r.payload.hex(), "flags": r.flags,
                  "rn": r.rn / 65536, "w": r.w / 65536, "state": r.state}
                 for c, r, pid in page]  # fmt: skip
        more = len(rows) > limit
        return {"items": items, "next": paging.encode("records", page[-1][0]) if more else None}

    @app.get("/v1/intake/refusals", tags=["intake"], summary="refused offers by reason")
    def intake_refusals(request: Request, who: Read) -> dict[str, Any]:
        with fleet(request, who) as reader:
            return {"by_reason": views.refusals_by_reason(reader)}


def _memory_routes(app: FastAPI) -> None:
    @app.post("/v1/memories", tags=["memory"], status_code=201,
              summary="admit a memory (capture, gate, weight, consolidate)")  # fmt: skip
    def admit(request: Request, who: Admin, body: AdmitRequest) -> dict[str, Any]:
        engine = engine_of(request, who)
        m = engine.admit(body.text, body.source, subject=body.subject,
                         attribute=body.attribute, value=body.value, kind=body.kind,
                         confidence=body.confidence, provenance=body.provenance,
                         flags=body.flags)  # fmt: skip
        return views.memory_view(m)

    @app.post("/v1/memories/recall", tags=["memory"],
              summary="top-k by Sim x M x Rec x Trust, with each factor")  # fmt: skip
    def recall(request: Request, who: Read, body: RecallRequest) -> dict[str, Any]:
        engine = engine_of(request, who)
        hits = _api(request).batcher(engine).recall(body.query, body.k, body.touch)
        # a Trust = 0 memory is reached by its id only, never by a search
        shown = [h for h in hits if h.trust > 0]
        return {
            "query": body.query,
            "withheld": len(hits) - len(shown),
            "items": [{"id": h.id, "score": h.score, "sim": h.sim, "strength": h.strength,
                       "recency": h.recency, "trust": h.trust,
                       "memory": views.memory_view(_memory(engine, h.id))}
                      for h in shown],
        }  # fmt: skip

    @app.get("/v1/memories/stats", tags=["memory"], summary="memories by layer and state")
    def stats(request: Request, who: Read) -> dict[str, Any]:
        engine = engine_of(request, who)
        return {"by_layer": views.layer_state_counts(engine), **engine.stats()}

    @app.get("/v1/memories/{memory_id}", tags=["memory"],
             summary="one memory by id (the only way to a Trust = 0 memory)")  # fmt: skip
    def get_memory(request: Request, who: Read, memory_id: MemoryId) -> dict[str, Any]:
        return views.memory_view(_memory(engine_of(request, who), memory_id))

    @app.get("/v1/memories/{memory_id}/history", tags=["memory"],
             summary="its versions and its audit records")  # fmt: skip
    def history(request: Request, who: Read, memory_id: MemoryId) -> dict[str, Any]:
        engine = engine_of(request, who)
        _memory(engine, memory_id)
        return {
            "versions": [views.memory_view(m) for m in engine.history(memory_id)],
            "audit": [{"seq": a.seq, "ts_ms": a.ts, "action": a.action, "actor": a.actor,
                       "detail": _jsonable(a.detail), "hash": a.hash.hex()}
                      for a in engine.audit.records(memory_id, limit=500)],
        }  # fmt: skip

    @app.get("/v1/memories/{memory_id}/strength", tags=["memory"],
             summary="strength over time (time, strength, cause)")  # fmt: skip
    def strength(request: Request, who: Read, memory_id: MemoryId) -> dict[str, Any]:
        engine = engine_of(request, who)
        _memory(engine, memory_id)
        return {"id": memory_id, "points": [
            {"t": t, "strength": s, "cause": c} for t, s, c in engine.strength_history(memory_id)
        ]}  # fmt: skip

    @app.get("/v1/memories/{memory_id}/distilled", tags=["memory"],
             summary="a derived memory's episodes, or an episode's derived memories")  # fmt: skip
    def distilled(request: Request, who: Read, memory_id: MemoryId) -> dict[str, Any]:
        engine = engine_of(request, who)
        _memory(engine, memory_id)
        with engine.store.writing():
            episodes = distill.episodes_of(engine, memory_id)
        return {"id": memory_id, "episodes": episodes,
                "distilled_into": views.distilled_into(engine, memory_id)}

    @app.get("/v1/distilled", tags=["memory"], summary="distilled memories, paged")
    def distilled_list(request: Request, who: Read, cursor: Cursor = None, limit: Limit = 100
                       ) -> dict[str, Any]:  # fmt: skip
        after = paging.decode_int("distilled", cursor)
        engine = engine_of(request, who)
        with engine.store.writing():
            rows = [d for d in distill.patterns(engine) if d.rowid > after]
            page = rows[:limit]
            items = [{"id": d.memory_id, "form": d.form, "device": d.device,
                      "subject": d.subject, "attribute": d.attribute,
                      "episodes": len(distill.episodes_of(engine, d.memory_id))}
                     for d in page]  # fmt: skip
        more = len(rows) > limit
        return {"items": items,
                "next": paging.encode("distilled", page[-1].rowid) if more else None}

    @app.get("/v1/review", tags=["review"], summary="the quarantine queue, oldest first")
    def review_queue(request: Request, who: Read, cursor: Cursor = None, limit: Limit = 100
                     ) -> dict[str, Any]:  # fmt: skip
        after = paging.decode_int("review", cursor)
        engine = engine_of(request, who)
        page = review.pending(engine, limit + 1, after)
        more = len(page) > limit
        page = page[:limit]
        last = engine.store.rowid(page[-1].id) if page and more else None
        return {"items": [views.memory_view(m) for m in page],
                "pending": review.pending_count(engine),
                "next": paging.encode("review", last) if last is not None else None}

    @app.post("/v1/review/{memory_id}", tags=["review"],
              summary="a steward's decision (the steward is the token's name)")  # fmt: skip
    def decide(request: Request, who: Review, memory_id: MemoryId, body: DecideRequest
               ) -> dict[str, Any]:  # fmt: skip
        engine = engine_of(request, who)
        _memory(engine, memory_id)
        d = review.decide(engine, memory_id, who.name, body.decision, body.reason)
        return {"memory": memory_id, "steward": d.steward, "decision": d.decision,
                "reason": d.reason, "audit_seq": d.audit_seq,
                "now": views.memory_view(engine.require(memory_id))}  # fmt: skip


def api_metrics(app: FastAPI) -> bytes:
    """The API's own families in the Prometheus text format: problems answered (by
    status and kind, rate limiting among them) and recall batches."""
    api: Api = app.state.api
    counts: problems.ProblemCounts = app.state.problems
    lines = ["# HELP hirmem_api_problems_total Problem documents answered, by status and kind.",
             "# TYPE hirmem_api_problems_total counter"]  # fmt: skip
    for (status, kind), n in sorted(counts.snapshot().items()):
        lines.append(f'hirmem_api_problems_total{{status="{status}",kind="{kind}"}} {n}')
    batches = sum(b.batches for _, b in api.batcher_list())
    lines += ["# HELP hirmem_api_recall_batches_total Recall batches run (one index pass each).",
              "# TYPE hirmem_api_recall_batches_total counter",
              f"hirmem_api_recall_batches_total {batches}"]  # fmt: skip
    return ("\n".join(lines) + "\n").encode()


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _other_routes(app: FastAPI) -> None:
    @app.get("/v1/audit/verify", tags=["audit"],
             summary="the chain's links, checkpoints and rows, checked")  # fmt: skip
    def audit_verify(request: Request, who: Read) -> dict[str, Any]:
        return views.verification_view(engine_of(request, who).verify_audit())

    @app.get("/v1/audit/checkpoint", tags=["audit"], summary="the latest signed checkpoint")
    def audit_checkpoint(request: Request, who: Read) -> dict[str, Any]:
        engine = engine_of(request, who)
        with engine.store.reading() as db:
            cp = evidence.latest_checkpoint(db)
        if cp is None:
            raise Problem(404, "no-checkpoint", "no checkpoint has been signed yet")
        return {"seq": cp.seq, "audit_seq": cp.audit_seq, "head": cp.head.hex(),
                "ts_ms": cp.ts, "kid": cp.kid.hex(), "signature": cp.signature.hex(),
                "line": cp.text()}  # fmt: skip

    @app.get("/v1/semantic/ask", tags=["semantic"],
             summary="evidence for a question, believed as of a ledger time")  # fmt: skip
    def ask(request: Request, who: Read,
            q: Annotated[str, Query(min_length=1, max_length=1024)],
            k: Annotated[int, Query(ge=1, le=50)] = 5,
            as_of: Annotated[int | None, Query(description="ledger time, ms")] = None,
            at: Annotated[int | None, Query(description="world time, ms")] = None,
            ) -> dict[str, Any]:  # fmt: skip
        with _api(request).sources.substrate(who.tenant) as sub:
            ans = sub.ask(q, k, at=at, as_of=as_of)
            items = []
            for h in ans.hits:
                e = sub.ledger.get(h.triple)
                items.append({"triple": h.triple, "score": h.score, "evidence": h.evidence,
                              "chunk": h.chunk, "doc": h.doc,
                              "subject": e.subject if e else None,
                              "predicate": e.predicate if e else None,
                              "object": e.object if e else None})  # fmt: skip
        return {"question": ans.question, "subject": ans.subject, "as_of": as_of, "at": at,
                "items": items}  # fmt: skip

    @app.get("/v1/semantic/trace/{triple}", tags=["semantic"],
             summary="an assertion's provenance as PROV-JSON or Turtle",
             response_class=Response,
             responses={200: {"content": {"application/json": {}, "text/turtle": {}}}})
    def trace(request: Request, who: Read,
              triple: Annotated[str, Path(min_length=1, max_length=256)],
              format: Annotated[Literal["provjson", "turtle"], Query()] = "provjson",
              ) -> Response:  # fmt: skip
        eid = triple if ":" in triple else f"assertion:{triple}"
        with _api(request).sources.substrate(who.tenant) as sub:
            try:
                sub.prov.lineage(eid)
            except ProvError:
                raise Problem(404, "no-assertion", f"no provenance for {eid}") from None
            if format == "turtle":
                return Response(sub.prov.to_turtle([eid]), media_type="text/turtle")
            return Response(sub.prov.to_provjson([eid]), media_type="application/json")

    @app.get("/v1/metrics", tags=["operations"], response_class=PlainTextResponse,
             summary="the daemon's Prometheus metrics and the API's own")  # fmt: skip
    def metrics(request: Request, who: Read) -> PlainTextResponse:
        api = _api(request)
        try:
            daemon = api.sources.metrics()
        except Problem:
            daemon = b""  # no daemon in this process: the API's figures alone
        return PlainTextResponse(daemon + api_metrics(request.app),
                                 media_type="text/plain; version=0.0.4")

    @app.get("/v1/health", tags=["operations"], summary="the daemon's health document")
    def health(request: Request, who: Read) -> JSONResponse:
        healthy, doc = _api(request).sources.health()
        return JSONResponse(doc, status_code=200 if healthy else 503)

    @app.get("/healthz", tags=["operations"], summary="up or not (no token needed)")
    def healthz(request: Request) -> JSONResponse:
        healthy, _ = _api(request).sources.health()
        return JSONResponse({"status": "ok" if healthy else "unhealthy"},
                            status_code=200 if healthy else 503)
