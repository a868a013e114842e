"""The gate: a request's credential is checked from its head, before any of its body is read.

Without it a body was read in full (up to the 1 MiB bound) before anything looked at the
token, so idle unauthenticated uploads each held a body in memory. Now a request that
carries a body (a ``Content-Length`` above 0, or any ``Transfer-Encoding``) must name a
live token in ``Authorization: Bearer``, one that covers the inbox its path names and has
the scope its route needs; otherwise it is answered 401 or 403 and its connection closed,
and none of its body is read (uvicorn's flow control stops reading the socket once 64 KiB
wait unread, and closing drops those). The console's forms are the one exception: they
are signed in by a form, so their bodies are bounded to a form's size instead.

A webhook inbox's deliveries are the other: their sender holds no token but signs each
request (:mod:`oncebox.surfaces.http.senders`), and a signature can only be checked over
the whole body. Such a request must carry every header its scheme signs with; then its
body is read, bounded by what the inbox's codec could take (and by the server's bound),
under the same head and body deadlines as any other, and the route verifies it.

The gate only keeps unauthenticated bytes out; it does not admit anything. Every request
is still authenticated and authorized where it always was (the route's dependencies, the
group commit turn), so the gate may remember a live token for a moment: a token known to
be live is not looked up again for ``cache_seconds``, which keeps the gate off the store on
the hot path. A token revoked meanwhile gets its body read, and is then refused.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.security.utils import get_authorization_scheme_param
from starlette.concurrency import run_in_threadpool
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from oncebox.engine.tokens import Scope as TokenScope
from oncebox.engine.tokens import Token
from oncebox.errors import OnceboxError
from oncebox.surfaces.http import problems
from oncebox.surfaces.http.senders import Sender, missing_headers

BODY_LIMIT_KEY = "oncebox.body_limit"  # read by BoundedBody: this request's own bound
CLOSE = {"Connection": "close"}


def bearer_secret(authorization: str | None) -> str | None:
    """The secret of an ``Authorization: Bearer <secret>`` header (as HTTPBearer reads it)."""
    scheme, secret = get_authorization_scheme_param(authorization)
    if not (authorization and scheme and secret) or scheme.lower() != "bearer":
        return None
    return secret


def has_body(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip(b" 0")):
            return True
    return False


@dataclass(frozen=True)
class Need:
    """What a route asks of a token, as far as its head tells."""

    scope: TokenScope | None = None
    inbox: str | None = None
    signed: bool = False  # the route takes a webhook sender's signature for a token


class RouteNeeds:
    """The :class:`Need` of a request, from the route it will reach.

    ``required`` maps a route's endpoint, or a dependency it uses, to the scope it
    checks: the same callables that do the checking, so there is no second table of
    rules to keep in step. ``signed`` holds the endpoints that take a webhook sender's
    signature instead of a token.
    """

    def __init__(
        self,
        routes: list[BaseRoute],
        required: Mapping[Callable[..., object], TokenScope],
        signed: Collection[Callable[..., object]] = (),
    ):
        self.routes = routes
        self.required = required
        self.signed = signed
        self._scopes: dict[int, TokenScope | None] = {}

    def __call__(self, scope: Scope) -> Need:
        for route in self.routes:
            match, child = route.matches(scope)
            if match is Match.FULL:
                params = child.get("path_params", {})
                inbox = params.get("inbox")
                signed = isinstance(route, APIRoute) and route.endpoint in self.signed
                return Need(self._scope(route), inbox if isinstance(inbox, str) else None, signed)
        return Need()

    def _scope(self, route: BaseRoute) -> TokenScope | None:
        key = id(route)
        if key not in self._scopes:
            found = None
            if isinstance(route, APIRoute):
                found = self.required.get(route.endpoint) or self._in(route.dependant)
            self._scopes[key] = found
        return self._scopes[key]

    def _in(self, dependant: Dependant) -> TokenScope | None:
        for dependency in dependant.dependencies:
            if dependency.call is not None and dependency.call in self.required:
                return self.required[dependency.call]
            found = self._in(dependency)
            if found is not None:
                return found
        return None


class Gate:
    """ASGI middleware: refuse from the head a body its sender may not send (see module)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        authenticate: Callable[[str], Token | None],
        needs: Callable[[Scope], Need],
        form_prefix: str,
        form_limit: int,
        senders: Callable[[str], Sender | None] = lambda _inbox: None,
        on_refused: Callable[[str, str], None] = lambda _inbox, _reason: None,
        cache_seconds: float = 2.0,
        cache_size: int = 4096,
    ) -> None:
        self.app = app
        self.authenticate = authenticate
        self.needs = needs
        self.form_prefix = form_prefix
        self.form_limit = form_limit
        self.senders = senders
        self.on_refused = on_refused
        self.cache_seconds = cache_seconds
        self.cache_size = cache_size
        self._live: dict[str, tuple[float, Token]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not has_body(scope):
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if path == self.form_prefix or path.startswith(self.form_prefix + "/"):
            scope[BODY_LIMIT_KEY] = self.form_limit
            await self.app(scope, receive, send)
            return
        refusal = await self._refusal(scope)
        if refusal is not None:
            headers = {**refusal.headers, **CLOSE}
            response = problems.problem_response(
                refusal.status, refusal.kind, refusal.detail, headers, **refusal.extra
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _refusal(self, scope: Scope) -> problems.ProblemError | None:
        authorization = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value.decode("latin-1")
        secret = bearer_secret(authorization)
        if secret is None:
            return self._unsigned(scope)
        try:
            token = await self._token(secret)
        except OnceboxError as exc:
            return problems.from_error(exc)
        if token is None:
            return unauthorized("unknown or revoked token")
        need = self.needs(scope)
        if need.scope is not None and not token.has(need.scope):
            return problems.ProblemError(
                403, "forbidden", f"this token lacks the {need.scope} scope"
            )
        if need.inbox is not None and not token.covers(need.inbox):
            return problems.ProblemError(
                403, "forbidden", f"this token may not use inbox {need.inbox!r}"
            )
        return None

    def _unsigned(self, scope: Scope) -> problems.ProblemError | None:
        """Without a token: let a webhook sender's request through to be verified (its
        body bounded to what its inbox takes), refuse anything else."""
        need = self.needs(scope)
        sender = self.senders(need.inbox) if need.signed and need.inbox is not None else None
        if sender is None or need.inbox is None:
            return unauthorized("send Authorization: Bearer <token>")
        present = {name for name, _ in scope["headers"]}
        if not all(name in present for name in sender.headers):
            self.on_refused(need.inbox, "missing_signature")
            return missing_headers(sender)
        scope[BODY_LIMIT_KEY] = sender.max_body
        return None

    async def _token(self, secret: str) -> Token | None:
        now = time.monotonic()
        known = self._live.get(secret)
        if known is not None and known[0] > now:
            return known[1]
        token = await run_in_threadpool(self.authenticate, secret)
        if token is not None:
            if len(self._live) >= self.cache_size:
                self._live.clear()
            self._live[secret] = (now + self.cache_seconds, token)
        return token


def unauthorized(detail: str) -> problems.ProblemError:
    return problems.ProblemError(
        401, "unauthorized", detail, headers={"WWW-Authenticate": "Bearer"}
    )
