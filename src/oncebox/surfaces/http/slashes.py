"""Trailing-slash redirects that name no host.

Starlette answers ``/healthz/`` with a redirect to ``/healthz`` (and the other way round),
but builds an absolute ``Location`` from the request's ``Host`` header (and, behind a
trusted proxy, ``X-Forwarded-Proto``): anyone could have oncebox send a client, or a
cache that keys by path, to a host of their choosing. Here the redirect names the path
and query alone; it resolves against wherever the client already is.
"""

from __future__ import annotations

from urllib.parse import quote, quote_from_bytes

from starlette.responses import RedirectResponse
from starlette.routing import Match, Router
from starlette.types import Receive, Scope, Send

# Kept as they are in a query: its separators, and escapes already made.
_QUERY_SAFE = "/?&=+%:@!$'()*,;"


def redirect_slashes_relatively(router: Router) -> None:
    """Make ``router`` answer a path that matches no route, but would with one trailing
    slash more or less, with a 307 to that spelling as a relative reference."""
    router.redirect_slashes = False
    not_found = router.default

    async def default(scope: Scope, receive: Receive, send: Send) -> None:
        location = _other_spelling(router, scope) if scope["type"] == "http" else None
        if location is None:
            await not_found(scope, receive, send)
            return
        await RedirectResponse(location, status_code=307)(scope, receive, send)

    router.default = default


def _other_spelling(router: Router, scope: Scope) -> str | None:
    path: str = scope["path"]
    if path == "/":
        return None
    other = path.rstrip("/") if path.endswith("/") else path + "/"
    trial = {**scope, "path": other}
    if all(route.matches(trial)[0] is Match.NONE for route in router.routes):
        return None
    # One leading slash, always: "//host/..." would be a reference to another host.
    location = "/" + quote(other.lstrip("/"), safe="/")
    if scope.get("query_string"):
        location += "?" + quote_from_bytes(scope["query_string"], safe=_QUERY_SAFE)
    return location
