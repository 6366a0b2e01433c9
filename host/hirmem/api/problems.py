"""Errors as RFC 9457 problem details (``application/problem+json``).

Every error the API answers — a bad parameter, a missing token, a memory not found, a
refused review — is one :class:`Problem` with a ``type`` URI under ``PROBLEM_BASE``, a
short ``title``, the HTTP ``status`` and a ``detail`` that says what was wrong.
"""

from __future__ import annotations

import threading
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from hirmem.protocol.errors import HirmemError

PROBLEM_BASE = "https://hirmem.dev/problems/"
MEDIA_TYPE = "application/problem+json"

TITLES = {
    400: "Bad request", 401: "Unauthorized", 403: "Forbidden", 404: "Not found",
    405: "Method not allowed", 409: "Conflict", 422: "Invalid request",
    429: "Too many requests", 500: "Internal error", 503: "Unavailable",
}  # fmt: skip


class Problem(Exception):
    """Raise to answer a problem document."""

    def __init__(
        self,
        status: int,
        kind: str,
        detail: str,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail)
        self.status, self.kind, self.detail = status, kind, detail
        self.headers = headers or {}
        self.extra = extra


class ProblemCounts:
    """Every problem answered, by status and kind (the API's refusals, for /v1/metrics)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[tuple[int, str], int] = {}

    def add(self, status: int, kind: str) -> None:
        with self._lock:
            self.counts[(status, kind)] = self.counts.get((status, kind), 0) + 1

    def snapshot(self) -> dict[tuple[int, str], int]:
        with self._lock:
            return dict(self.counts)


def problem_response(
    request: Request, status: int, kind: str, detail: str,
    headers: dict[str, str] | None = None, **extra: Any,
) -> JSONResponse:  # fmt: skip
    counts = getattr(request.app.state, "problems", None)
    if isinstance(counts, ProblemCounts):
        counts.add(status, kind)
    body = {
        "type": PROBLEM_BASE + kind,
        "title": TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
        "instance": request.url.path,
        **extra,
    }
    return JSONResponse(body, status_code=status, headers=headers, media_type=MEDIA_TYPE)


def install(app: FastAPI) -> None:
    """Every error path of ``app`` answers a problem document, counted."""
    app.state.problems = ProblemCounts()

    async def on_problem(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, Problem)
        return problem_response(request, exc.status, exc.kind, exc.detail, exc.headers,
                                **exc.extra)  # fmt: skip

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        kind = {404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "http")
        return problem_response(request, exc.status_code, kind, str(exc.detail),
                                dict(exc.headers or {}))  # fmt: skip

    async def on_invalid(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = [
            {"where": ".".join(str(p) for p in e.get("loc", ())), "problem": e.get("msg", "")}
            for e in exc.errors()
        ]
        detail = "; ".join(f"{e['where']}: {e['problem']}" for e in errors)
        return problem_response(request, 422, "invalid-request", detail, errors=errors)

    async def on_refused(request: Request, exc: Exception) -> JSONResponse:
        # the engine's own refusals (a review of a memory not quarantined, …) say why
        return problem_response(request, 409, "refused", str(exc))

    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(RequestValidationError, on_invalid)
    app.add_exception_handler(HirmemError, on_refused)
