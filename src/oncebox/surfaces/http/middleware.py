"""ASGI middleware of the service: the gate's head check, the body bound (read before
anything parses a body), and request latency by route."""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from oncebox.formats import Overflow, Unverified
from oncebox.surfaces.http import problems
from oncebox.surfaces.http.auth import (
    BODY_KEY,
    BODY_LIMIT_KEY,
    KEEP_OVERSIZE_KEY,
    OVERSIZE_KEY,
    SIGNING_KEY,
    VERIFIED_KEY,
    Gate,
)
from oncebox.surfaces.http.metrics import Metrics
from oncebox.surfaces.http.senders import Signing, over_budget


class HeadCheck:
    """Refuse from its head a request's body its sender may not send, and set the bound
    it is read to (:meth:`Gate.head <oncebox.surfaces.http.auth.Gate.head>`). The
    console's forms carry no token in their head: their bodies are bounded to a form's
    size instead."""

    def __init__(self, app: ASGIApp, *, gate: Gate, form_prefix: str, form_limit: int) -> None:
        self.app = app
        self.gate = gate
        self.form_prefix = form_prefix
        self.form_limit = form_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not has_body(scope):
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if path == self.form_prefix or path.startswith(self.form_prefix + "/"):
            scope[BODY_LIMIT_KEY] = self.form_limit
            await self.app(scope, receive, send)
            return
        refusal = await self.gate.head(scope)
        if refusal is None:
            await self.app(scope, receive, send)
        else:
            await _answer(refusal, scope, receive, send)


def has_body(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip(b" 0")):
            return True
    return False


class BoundedBody:
    """Reads at most ``max_body + 1`` bytes before anything parses the body; 413 beyond.

    The body is kept for the request (signature checks and handlers read it from there)
    and replayed to the app, so nothing downstream reads an unbounded stream. The gate
    may set a smaller bound for a request (``BODY_LIMIT_KEY``). A 413 closes the
    connection: the rest of that body is never read.

    Two kinds of request the gate marks are read differently:

    - a sender-signed one (``SIGNING_KEY``): each chunk goes into its signature as it
      arrives, and its body is held only within the worker's budget of unverified bytes
      (503 past it); its verdict is left for the route (``VERIFIED_KEY``), and the body
      of one that failed it is dropped at once;
    - one whose body over the bound is kept (``KEEP_OVERSIZE_KEY``, and every signed
      one): past the bound, only its head and the length and SHA-256 of all of it are
      kept as the rest streams by (``OVERSIZE_KEY``, an empty body replayed), for the
      route to dead-letter.
    """

    def __init__(self, app: ASGIApp, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        signing: Signing | None = scope.get(SIGNING_KEY)
        try:
            await self._bounded(scope, receive, send, signing)
        finally:
            if signing is not None:
                signing.release()

    async def _bounded(
        self, scope: Scope, receive: Receive, send: Send, signing: Signing | None
    ) -> None:
        limit: int = scope.get(BODY_LIMIT_KEY) or self.max_body
        keep = signing is not None or scope.get(KEEP_OVERSIZE_KEY, False)
        declared = dict(scope["headers"]).get(b"content-length")
        over = declared is not None and declared.isdigit() and int(declared) > limit
        if over and not keep:
            await _answer(
                problems.ProblemError(413, "too-large", _over(limit)), scope, receive, send
            )
            return
        chunks: list[bytes] = []
        overflow = Overflow() if over else None  # known to be over: keep the head only
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            more = message.get("more_body", False)
            if signing is not None:
                signing.update(chunk)
            size += len(chunk)
            if overflow is not None:
                overflow.update(chunk)
            elif size <= limit:
                if signing is None:
                    chunks.append(chunk)
                elif not signing.add(chunk):
                    await _answer(over_budget(), scope, receive, send)
                    return
            elif keep:  # past the bound: from now on only the head is kept
                overflow = Overflow(signing.spill() if signing else b"".join(chunks))
                overflow.update(chunk)
                chunks = []
            else:
                await _answer(
                    problems.ProblemError(413, "too-large", _over(limit)), scope, receive, send
                )
                return
        if signing is not None:
            verdict, body = signing.finish()
            scope[VERIFIED_KEY] = verdict
            if isinstance(verdict, Unverified):
                overflow = None  # nothing of it is kept
        else:
            body = b"".join(chunks)
        if overflow is not None:
            scope[OVERSIZE_KEY] = overflow
        scope[BODY_KEY] = body
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def _over(limit: int) -> str:
    return f"the request body exceeds {limit} bytes"


async def _answer(
    refusal: problems.ProblemError, scope: Scope, receive: Receive, send: Send
) -> None:
    """Refuse a request whose body is not (all) read: the connection is closed."""
    headers = {**refusal.headers, "Connection": "close"}
    response = problems.problem_response(
        refusal.status, refusal.kind, refusal.detail, headers, **refusal.extra
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
