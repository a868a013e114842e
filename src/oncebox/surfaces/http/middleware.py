"""ASGI middleware of the service: the body bound, read before anything parses a body,
and request latency by route."""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from oncebox.surfaces.http import problems
from oncebox.surfaces.http.access import BODY_KEY
from oncebox.surfaces.http.gate import BODY_LIMIT_KEY
from oncebox.surfaces.http.metrics import Metrics


class BoundedBody:
    """Reads at most ``max_body + 1`` bytes before anything parses the body; 413 beyond.

    The body is kept for the request (signature checks and handlers read it from there)
    and replayed to the app, so nothing downstream reads an unbounded stream. The gate
    may set a smaller bound for a request (``BODY_LIMIT_KEY``). A 413 closes the
    connection: the rest of that body is never read.
    """

    def __init__(self, app: ASGIApp, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit: int = scope.get(BODY_LIMIT_KEY, self.max_body)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._too_large(limit, scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await self._too_large(limit, scope, receive, send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        scope[BODY_KEY] = body
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, limit: int, scope: Scope, receive: Receive, send: Send) -> None:
        response = problems.problem_response(
            413, "too-large", f"the request body exceeds {limit} bytes", {"Connection": "close"}
        )
        await response(scope, receive, send)


class Timing:
    """Request latency by method, route template and status."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [500]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self.metrics.latency.labels(scope["method"], template, str(status[0])).observe(
                time.perf_counter() - start
            )
