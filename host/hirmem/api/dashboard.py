"""The operator dashboard: server-rendered pages (Jinja2) under ``/ui``, htmx for the live
parts (polled fragments) and the review buttons, SVG charts from :mod:`.charts`.

The pages read through the same :mod:`.views` as the API and sign in with the same
tokens: ``/ui/login`` takes a token once and keeps it in an HttpOnly, SameSite=Strict
cookie; every page then acts as that principal (scope and tenant). Every form works
without JavaScript too (a plain POST answered with a redirect); with htmx it swaps the
part it changed.
"""

from __future__ import annotations

import time
import urllib.parse
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from prometheus_client.parser import text_string_to_metric_families

from hirmem.api import charts, views
from hirmem.api.app import COOKIE, Api, create_app
from hirmem.api.problems import Problem
from hirmem.api.sources import Sources
from hirmem.api.tokens import Principal, TokenStore
from hirmem.memory import distill, evidence, review
from hirmem.memory.engine import MemoryEngine
from hirmem.protocol.clock import now_ms
from hirmem.protocol.errors import HirmemError

HERE = Path(__file__).parent
POLL_S = 5  # seconds between the live parts' refreshes
REVIEW_PAGE = 50

templates = Jinja2Templates(directory=str(HERE / "templates"))
templates.env.globals.update(charts=charts, poll_s=POLL_S)
templates.env.filters["when"] = lambda ms: (
    "-" if ms is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + "Z"
)
templates.env.filters["ago"] = lambda ms: (
    "never" if ms is None else f"{max(0.0, (now_ms() - ms) / 1000):.0f} s ago"
)


class SignIn(Exception):
    """The page needs a signed-in principal (or a wider scope): say so, send to login."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _who(request: Request, needed: str = "read") -> Principal:
    api: Api = request.app.state.api
    try:
        who = api.authenticate(request, None)
    except Problem as p:
        if p.status == 401:
            raise SignIn(p.detail) from None
        raise
    if not who.allows(needed):
        raise Problem(403, "scope", f"this needs the {needed!r} scope; you have {who.scope!r}")
    return who


def _engine(request: Request, who: Principal) -> MemoryEngine | None:
    """The tenant's memory engine, None when there is none yet (the page says so)."""
    api: Api = request.app.state.api
    try:
        return api.sources.memory(who.tenant)
    except Problem as p:
        if p.status == 503:
            return None
        raise


def _page(request: Request, name: str, who: Principal, **ctx: Any) -> HTMLResponse:
    return templates.TemplateResponse(request, name, {"who": who, **ctx})


def intake_p99(metrics_text: bytes) -> tuple[int, float | None]:
    """(accepted offers, p99 seconds as the bucket bound it falls under) from the daemon's
    ``hirmem_intake_seconds`` histogram, every line added up."""
    cumulative: dict[float, float] = {}
    for family in text_string_to_metric_families(metrics_text.decode()):
        if family.name != "hirmem_intake_seconds":
            continue
        for s in family.samples:
            if s.name.endswith("_bucket") and s.labels.get("outcome") == "accepted":
                le = float(s.labels["le"])
                cumulative[le] = cumulative.get(le, 0.0) + s.value
    if not cumulative:
        return 0, None
    bounds = sorted(cumulative)
    total = cumulative[bounds[-1]]
    if not total:
        return 0, None
    return int(total), next(b for b in bounds if cumulative[b] >= 0.99 * total)


def _overview(request: Request, who: Principal) -> dict[str, Any]:
    api: Api = request.app.state.api
    now = now_ms()
    with api.sources.fleet(who.tenant) as reader:
        fleet = views.fleet_summary(reader.devices(), now)
        refusals = views.refusals_by_reason(reader)
        rate = views.intake_rate(reader, now)
    try:
        offers, p99 = intake_p99(api.sources.metrics())
        latency: dict[str, Any] = {"offers": offers, "p99_s": p99, "available": True}
    except Problem:
        latency = {"offers": 0, "p99_s": None, "available": False}
    engine = _engine(request, who)
    memory = None
    if engine is not None:
        memory = {"by_layer": views.layer_state_counts(engine),
                  "verdicts": views.verdicts_over_time(engine),
                  "pending": review.pending_count(engine)}  # fmt: skip
    return {"fleet": fleet, "refusals": refusals, "rate": rate, "latency": latency,
            "memory": memory, "updated": now}  # fmt: skip


def _devices(request: Request, who: Principal) -> dict[str, Any]:
    api: Api = request.app.state.api
    with api.sources.fleet(who.tenant) as reader:
        ctx = views.FleetContext.read(reader)
        devices = reader.devices()
        rows = views.device_rows(reader, devices[:500], ctx)
        return {"rows": rows, "more": max(0, len(devices) - 500),
                "fleet": views.fleet_summary(devices, ctx.now), "updated": ctx.now}


def mount(app: FastAPI) -> None:
    """Add the dashboard's pages to ``app`` (not in its OpenAPI document)."""
    app.mount("/ui/static", StaticFiles(directory=str(HERE / "static")), name="static")

    @app.exception_handler(SignIn)
    async def sign_in(request: Request, exc: Exception) -> Response:
        if request.headers.get("hx-request"):
            return HTMLResponse("", headers={"HX-Redirect": "/ui/login"})
        return RedirectResponse("/ui/login", status_code=303)

    @app.get("/ui", include_in_schema=False)
    def ui_root() -> RedirectResponse:
        return RedirectResponse("/ui/", status_code=307)

    @app.get("/ui/login", include_in_schema=False, response_class=HTMLResponse)
    def login_form(request: Request) -> HTMLResponse:
        return templates.TemplateResponse(request, "login.html", {"who": None, "error": ""})

    @app.post("/ui/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        form = urllib.parse.parse_qs((await request.body()).decode("utf-8", "replace"))
        token = (form.get("token") or [""])[0].strip()
        api: Api = request.app.state.api
        if api.tokens.authenticate(token) is None:
            return templates.TemplateResponse(
                request, "login.html",
                {"who": None, "error": "That token is not valid (unknown, revoked or mistyped)."},
                status_code=401,
            )  # fmt: skip
        page = RedirectResponse("/ui/", status_code=303)
        page.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/",
                        secure=request.url.scheme == "https")  # fmt: skip
        return page

    @app.post("/ui/logout", include_in_schema=False)
    def logout() -> Response:
        page = RedirectResponse("/ui/login", status_code=303)
        page.delete_cookie(COOKIE, path="/")
        return page

    @app.get("/ui/", include_in_schema=False, response_class=HTMLResponse)
    def overview(request: Request) -> HTMLResponse:
        who = _who(request)
        return _page(request, "overview.html", who, **_overview(request, who))

    @app.get("/ui/part/overview", include_in_schema=False, response_class=HTMLResponse)
    def overview_part(request: Request) -> HTMLResponse:
        who = _who(request)
        return _page(request, "overview_part.html", who, **_overview(request, who))

    @app.get("/ui/devices", include_in_schema=False, response_class=HTMLResponse)
    def devices(request: Request) -> HTMLResponse:
        who = _who(request)
        return _page(request, "devices.html", who, **_devices(request, who))

    @app.get("/ui/part/devices", include_in_schema=False, response_class=HTMLResponse)
    def devices_part(request: Request) -> HTMLResponse:
        who = _who(request)
        return _page(request, "devices_part.html", who, **_devices(request, who))

    @app.get("/ui/devices/{device}", include_in_schema=False, response_class=HTMLResponse)
    def device(request: Request, device: str) -> HTMLResponse:
        who = _who(request)
        api: Api = request.app.state.api
        try:
            raw = bytes.fromhex(device)
        except ValueError:
            raise Problem(404, "no-device", f"{device!r} is not a device id") from None
        with api.sources.fleet(who.tenant) as reader:
            d = reader.device(raw)
            if d is None:
                raise Problem(404, "no-device", f"no device {device} is registered")
            detail = views.device_detail(reader, d, views.FleetContext.read(reader))
            events = views.timeline(reader, raw)
            refusals = views.refusal_views(reader, raw)
        return _page(request, "device.html", who, d=detail, events=events, refusals=refusals)

    @app.get("/ui/memories", include_in_schema=False, response_class=HTMLResponse)
    def memories(request: Request, q: str = "") -> HTMLResponse:
        who = _who(request)
        engine = _engine(request, who)
        hits: list[dict[str, Any]] = []
        patterns: list[dict[str, Any]] = []
        if engine is not None:
            if q.strip():
                found = engine.recall(q[:1024], 20, touch=False)
                hits = [{"hit": h, "m": engine.require(h.id)} for h in found if h.trust > 0]
            with engine.store.writing():
                patterns = [{"d": d, "episodes": len(distill.episodes_of(engine, d.memory_id))}
                            for d in distill.patterns(engine)[-100:]]  # fmt: skip
        return _page(request, "memories.html", who, q=q, hits=hits, patterns=patterns,
                     engine=engine is not None)  # fmt: skip

    @app.get("/ui/memories/{memory_id}", include_in_schema=False, response_class=HTMLResponse)
    def memory(request: Request, memory_id: str) -> HTMLResponse:
        who = _who(request)
        engine = _engine(request, who)
        m = engine.get(memory_id) if engine is not None else None
        if engine is None or m is None:
            raise Problem(404, "no-memory", f"no memory {memory_id}")
        into = views.distilled_into(engine, memory_id)
        with engine.store.writing():
            episodes = distill.episodes_of(engine, memory_id)
        series = {f"this memory ({m.kind})": [(t, s) for t, s, _ in
                                              engine.strength_history(memory_id)]}
        if into:
            series[f"distilled {into[0][-6:]}"] = [(t, s) for t, s, _ in
                                                    engine.strength_history(into[0])]
        return _page(request, "memory.html", who, m=views.memory_view(m), into=into,
                     episodes=episodes[-50:], n_episodes=len(episodes), series=series,
                     history=engine.strength_history(memory_id)[-50:])  # fmt: skip

    @app.get("/ui/review", include_in_schema=False, response_class=HTMLResponse)
    def review_page(request: Request) -> HTMLResponse:
        who = _who(request)
        engine = _engine(request, who)
        queue = review.pending(engine, REVIEW_PAGE) if engine is not None else []
        pending = review.pending_count(engine) if engine is not None else 0
        return _page(request, "review.html", who, queue=[views.memory_view(m) for m in queue],
                     pending=pending, engine=engine is not None)  # fmt: skip

    @app.post("/ui/review/{memory_id}", include_in_schema=False)
    async def decide(request: Request, memory_id: str) -> Response:
        who = _who(request, "review")
        form = urllib.parse.parse_qs((await request.body()).decode("utf-8", "replace"))
        decision = (form.get("decision") or [""])[0]
        reason = (form.get("reason") or [""])[0].strip()
        engine = _engine(request, who)
        if engine is None:
            raise Problem(503, "no-memory", "no memory store yet")
        error, done = "", None
        try:
            done = review.decide(engine, memory_id, who.name, decision, reason)
        except HirmemError as exc:
            error = str(exc)
        if not request.headers.get("hx-request"):
            if error:
                raise Problem(409, "refused", error)
            return RedirectResponse("/ui/review", status_code=303)
        m = engine.get(memory_id)
        return _page(request, "review_row.html", who, m=views.memory_view(m) if m else None,
                     memory_id=memory_id, error=error, done=done)  # fmt: skip

    @app.get("/ui/audit", include_in_schema=False, response_class=HTMLResponse)
    def audit(request: Request) -> HTMLResponse:
        who = _who(request)
        engine = _engine(request, who)
        verification, checkpoint = None, None
        if engine is not None:
            verification = views.verification_view(engine.verify_audit())
            with engine.store.reading() as db:
                checkpoint = evidence.latest_checkpoint(db)
        return _page(request, "audit.html", who, v=verification, cp=checkpoint,
                     engine=engine is not None)  # fmt: skip


def application(sources: Sources, tokens: TokenStore, **options: Any) -> FastAPI:
    """The API with the dashboard mounted: what the daemon and the demo serve."""
    return create_app(sources, tokens, mounts=(mount,), **options)
