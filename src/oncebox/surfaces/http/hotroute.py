"""The one-delivery route, called straight from the middleware once the gate matched it.

The head check (:meth:`Gate.head <oncebox.surfaces.http.auth.Gate.head>`) already walks
the routes to find what a request with a body needs, and keeps the match in its scope
(``MATCHED_KEY``). For ``POST /v1/inboxes/{inbox}/deliveries`` this middleware takes
that match and calls the route's handler itself, instead of letting the framework's
router match the path again, build its exit stacks and solve the (empty) dependencies:
about a third of the event loop's time for a delivery under load (bench/README.md,
"HTTP"). The handler is the same function, given the same scope keys the router sets
(``endpoint``, ``path_params``, ``route``); its errors go through the app's own
exception handlers; so the answers, statuses, headers and metrics are the router's
(``tests/test_hotroute.py`` compares them byte for byte).

Anything else goes the usual way: a request without a body (the gate never matched it),
another route, and any request FastAPI's own telemetry follows (its span is named from
the router's choice).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from oncebox.surfaces.http.auth import MATCHED_KEY

TELEMETRY_KEY = "fastapi.telemetry"  # set by FastAPI when OpenTelemetry is configured
Handler = Callable[[Request], Awaitable[Response]]


class HotRoute:
    """Call ``endpoint`` for the requests the gate matched to its route (see module).
    ``handlers``: the app's exception handlers, as the app's router is wrapped in them
    (those for 500 and ``Exception`` stay with the outermost middleware, as there)."""

    def __init__(self, app: ASGIApp, *, endpoint: Handler, handlers: Mapping[Any, Any]) -> None:
        self.app = app
        self.endpoint = endpoint
        inner = {key: h for key, h in handlers.items() if key not in (500, Exception)}
        self.handled = ExceptionMiddleware(self._answer, handlers=inner)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        matched = scope.get(MATCHED_KEY)
        if (
            matched is None
            or matched[0].endpoint is not self.endpoint
            or scope.get(TELEMETRY_KEY) is not None
        ):
            await self.app(scope, receive, send)
            return
        scope.update(matched[1])  # endpoint, path_params and route, as the router sets them
        await self.handled(scope, receive, send)

    async def _answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self.endpoint(Request(scope, receive, send))
        await response(scope, receive, send)
