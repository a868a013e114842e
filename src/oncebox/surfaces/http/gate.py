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
request (:mod:`oncebox.surfaces.http.senders`). Such a request must carry every header
its scheme signs with, and everything those headers can be refused for (their syntax,
the signed time, a second upload of a message still arriving, no room left in the
worker's budget of unverified bytes) is refused here, before any of its body is read.
Then its body is read under the same head and body deadlines as any other, its
signature computed as it arrives (:class:`~oncebox.surfaces.http.senders.Signing`),
bounded by what the inbox's codec could take.

On the one-delivery route the body's bound is the inbox codec's own. A body over it,
sent with a token that may write to the inbox (one that does not sign its requests: a
signature cannot be checked without the whole body) or by a webhook sender, is kept as
a ``too_large`` dead letter (``KEEP_OVERSIZE``): the body reader keeps its head and the
length and SHA-256 of all of it as it streams by.

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
from oncebox.surfaces.http.senders import Senders, missing_headers

BODY_LIMIT_KEY = "oncebox.body_limit"  # read by BoundedBody: this request's own bound
KEEP_OVERSIZE_KEY = "oncebox.keep_oversize"  # BoundedBody keeps a body over its bound
SIGNING_KEY = "oncebox.signing"  # a sender-signed request's Signing, fed by BoundedBody
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
        senders: Senders | None = None,
        bounds: Callable[[str], int | None] = lambda _inbox: None,
        cache_seconds: float = 2.0,
        cache_size: int = 4096,
    ) -> None:
        self.app = app
        self.authenticate = authenticate
        self.needs = needs
        self.form_prefix = form_prefix
        self.form_limit = form_limit
        self.senders = senders
        self.bounds = bounds
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
            return await self._unsigned(scope)
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
        bound = self.bounds(need.inbox) if need.signed and need.inbox is not None else None
        if bound is not None:  # the one-delivery route: the inbox's own bound
            scope[BODY_LIMIT_KEY] = bound
            scope[KEEP_OVERSIZE_KEY] = not token.signs
        return None

    async def _unsigned(self, scope: Scope) -> problems.ProblemError | None:
        """Without a token: let a webhook sender's request through to be verified (its
        head checked, its body bounded to what its inbox takes), refuse anything else."""
        need = self.needs(scope)
        inbox = need.inbox if need.signed else None
        webhook = self.senders.webhook(inbox) if self.senders and inbox is not None else None
        if self.senders is None or webhook is None or inbox is None:
            return unauthorized("send Authorization: Bearer <token>")
        present = {name.decode("latin-1") for name, _ in scope["headers"]}
        if not all(present.intersection(names) for names in webhook.headers):
            self.senders.count(inbox, "missing_signature")
            return missing_headers(webhook)
        headers = {}
        declared = 0
        for name, value in scope["headers"]:
            headers[name.decode("latin-1")] = value.decode("latin-1")
            if name == b"content-length" and value.isdigit():
                declared = int(value)
        try:
            scope[SIGNING_KEY] = await self.senders.begin(inbox, webhook, headers, declared)
        except problems.ProblemError as exc:
            return exc
        except OnceboxError as exc:  # the store's clock could not be read
            return problems.from_error(exc)
        scope[BODY_LIMIT_KEY] = self.bounds(inbox)
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
