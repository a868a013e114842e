"""The OpenAPI document: the error answers each route declares, and the document's frame.

Every error is a problem document (:mod:`oncebox.surfaces.http.problems`); :func:`errors`
declares the ones a route can answer, each with what it means there. Some are answered
by every route: 408, 431 and 503 by ``oncebox serve`` itself (its deadlines, its bound on
a request's head and its bound on connections), 413 for a body over the bound (any route,
before anything is parsed), 500 by any bug. :func:`finish` completes what FastAPI generates: the
``Problem`` schema in place of FastAPI's own validation error, each operation's
``security`` as its route declared what it needs (:func:`oncebox.surfaces.http.auth.needs`;
``[]`` on the public ones), and the signing headers on every authenticated one.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from oncebox.surfaces.http.auth import NEEDS
from oncebox.surfaces.http.problems import MEDIA_TYPE, RETRY_AFTER, Problem
from oncebox.surfaces.http.signing import document_signing

PROBLEM = {MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}
MEANINGS = {
    400: "A malformed header or body; nothing was decided.",
    401: "No token, an unknown or revoked one, or (for a signing token) a bad, stale or "
    "replayed signature; nothing was decided.",
    403: "The token lacks the scope this route needs, or may not use this inbox.",
    404: "No such inbox (or row).",
    408: "The request's head or body did not arrive within `oncebox serve`'s deadline; "
    "the connection is closed.",
    409: "Refused in the current state; nothing changed.",
    413: "The body is over the bound (counted before anything is parsed); the connection "
    "is closed.",
    422: "A malformed request: the rule it broke is in `detail`.",
    431: "The request's line and header fields (or a chunked body's trailer fields) are "
    "over `oncebox serve`'s bound (64 KiB); the connection is closed.",
    500: "An internal error (or an apply step failed): nothing was decided or stored.",
    503: "The store is unavailable (retry after `Retry-After`), or the server holds too "
    "many connections; nothing was decided, do not acknowledge.",
}
EVERY_ROUTE = (408, 413, 431, 500, 503)
AUTHENTICATED = (401, 403)
RETRY_AFTER_HEADER = {
    "Retry-After": {
        "description": f"Seconds to wait before retrying (now {RETRY_AFTER}).",
        "schema": {"type": "integer", "minimum": 0},
    }
}
WWW_AUTHENTICATE = {
    "WWW-Authenticate": {
        "description": "`Bearer`: the scheme to authenticate with.",
        "schema": {"type": "string"},
    }
}


def errors(*statuses: int, **meanings: str) -> dict[int | str, dict[str, Any]]:
    """The problem answers of a route: ``statuses`` and those of every route;
    ``meanings`` (``e409="..."``) says what one means on this route."""
    declared: dict[int | str, dict[str, Any]] = {}
    for status in sorted({*statuses, *EVERY_ROUTE}):
        response: dict[str, Any] = {
            "description": meanings.get(f"e{status}", MEANINGS[status]),
            "content": PROBLEM,
        }
        if status == 503:
            response["headers"] = RETRY_AFTER_HEADER
        elif status == 401:
            response["headers"] = WWW_AUTHENTICATE
        declared[status] = response
    return declared


def inbox_errors() -> dict[int | str, dict[str, Any]]:
    """The problem answers of a route that reads one inbox by name."""
    return errors(*AUTHENTICATED, 404, 422, e404="No such inbox.")


def finish(app: FastAPI) -> dict[str, Any]:
    """The whole document for ``app``, made once."""
    if app.openapi_schema is None:
        schema = get_openapi(
            title=app.title,
            version=app.version,
            summary=app.summary,
            description=app.description,
            routes=app.routes,
            tags=app.openapi_tags,
            servers=app.servers,
            license_info=app.license_info,
        )
        components = schema.setdefault("components", {})
        components.setdefault("schemas", {})["Problem"] = Problem.model_json_schema()
        # FastAPI documents its own validation error shape; ours is a problem document,
        # and every route that validates declares 422 as one.
        components["schemas"].pop("HTTPValidationError", None)
        components["schemas"].pop("ValidationError", None)
        schema["security"] = [{"HTTPBearer": []}]
        declared = {endpoint.__name__ for endpoint in NEEDS}  # operation ids: handler names
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                secured = operation.get("operationId") in declared
                operation["security"] = [{"HTTPBearer": []}] if secured else []
        document_signing(schema)
        app.openapi_schema = schema
    return app.openapi_schema


def install(app: FastAPI) -> None:
    """Serve :func:`finish` as ``/openapi.json``."""
    app.openapi = lambda: finish(app)  # type: ignore[method-assign]
