"""Errors as RFC 9457 problem documents, never with a traceback.

A problem document always means: nothing was decided for this request (or, for 5xx,
nothing that may be acknowledged). Decisions are never problem documents: a client can
tell the two apart by ``Content-Type`` (``application/problem+json``) alone.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.routing import Match

from oncebox.engine.checkpoint import ProofError
from oncebox.engine.decision import unapplied
from oncebox.engine.feed import PastHandedOut, StaleCursor
from oncebox.errors import (
    ApplyError,
    InvalidOperation,
    InvalidQuery,
    NotFound,
    OnceboxError,
    StorageError,
    StorageUnavailable,
    UnknownInbox,
    UnknownValue,
)
from oncebox.logtext import escaped

logger = logging.getLogger("oncebox.http")
MEDIA_TYPE = "application/problem+json"
TYPE_BASE = "https://oncebox.invalid/problems/"
RETRY_AFTER = "1"


class Problem(BaseModel):
    """An RFC 9457 problem document."""

    type: str
    title: str
    status: int
    detail: str


class ProblemError(Exception):
    """Raised by handlers and checks; rendered as a problem document."""

    def __init__(
        self,
        status: int,
        kind: str,
        detail: str,
        *,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.kind = kind
        self.detail = detail
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})


def problem_body(status: int, kind: str, detail: str, **extra: Any) -> bytes:
    document = {
        "type": TYPE_BASE + kind,
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        **extra,
    }
    return json.dumps(document).encode()


def problem_response(
    status: int,
    kind: str,
    detail: str,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> Response:
    return Response(
        problem_body(status, kind, detail, **extra),
        status_code=status,
        media_type=MEDIA_TYPE,
        headers=dict(headers or {}),
    )


def from_error(exc: OnceboxError) -> ProblemError:
    """The one place engine errors become HTTP statuses.

    What the store or an apply step said stays in the server's log: a driver's message
    names tables and columns, and a client is told only what it can act on.
    """
    if isinstance(exc, StorageError):
        logger.error("storage failed, nothing decided: %s", escaped(str(exc)))
        kind = "storage-unavailable" if isinstance(exc, StorageUnavailable) else "storage-error"
        return ProblemError(
            503,
            kind,
            "the store could not decide this request; nothing was stored: retry",
            headers={"Retry-After": RETRY_AFTER},
        )
    if isinstance(exc, UnknownInbox | NotFound):
        return ProblemError(404, "not-found", str(exc))
    if isinstance(exc, ApplyError):
        logger.error("apply step failed: %s", escaped(str(exc)))
        return ProblemError(
            500,
            "apply-failed",
            unapplied(exc).detail or "",
            extra={"index": exc.index} if exc.index is not None else None,
        )
    if isinstance(exc, PastHandedOut):
        return ProblemError(422, "past-handed-out", str(exc))
    if isinstance(exc, StaleCursor):
        return ProblemError(409, "stale-token", str(exc), extra={"reason": exc.reason})
    if isinstance(exc, InvalidQuery):
        return ProblemError(422, "validation", str(exc))
    if isinstance(exc, UnknownValue):
        # A typo in a filter or an action: say so, with what is known, never an empty page.
        return ProblemError(400, "unknown-value", str(exc), extra={"known": list(exc.known)})
    if isinstance(exc, InvalidOperation | ProofError):
        return ProblemError(409, "invalid-operation", str(exc))
    return ProblemError(500, "internal", f"{type(exc).__name__}: {exc}")


async def on_problem(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ProblemError)
    return problem_response(exc.status, exc.kind, exc.detail, exc.headers, **exc.extra)


async def on_oncebox_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, OnceboxError)
    return await on_problem(request, from_error(exc))


METHODS = ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")


async def on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    kinds = {404: "not-found", 405: "method-not-allowed"}
    headers = exc.headers
    if exc.status_code == 405:
        headers = {**(headers or {}), "Allow": allowed_methods(request)}
    return problem_response(
        exc.status_code,
        kinds.get(exc.status_code, "http-error"),
        str(exc.detail),
        headers,
    )


def allowed_methods(request: Request) -> str:
    """Every method some route takes at this path: each method is a route of its own,
    and Starlette's 405 names only the first route whose path matched."""
    routes = request.app.router.routes
    return ", ".join(
        method
        for method in METHODS
        if any(r.matches({**request.scope, "method": method})[0] is Match.FULL for r in routes)
    )


async def on_validation_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error.get("loc", ()))
        cause = (error.get("ctx") or {}).get("error")  # why a JSON body was refused
        message = error.get("msg", "invalid")
        if isinstance(cause, str):
            message = f"{message}: {cause}"
        parts.append(f"{where}: {message}")
    return problem_response(422, "validation", "; ".join(parts) or "invalid request")


async def on_unexpected(_request: Request, exc: Exception) -> Response:
    logger.error("internal error: %s: %s", type(exc).__name__, escaped(str(exc)))
    return problem_response(500, "internal", "internal error; nothing was acknowledged")
