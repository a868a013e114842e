"""The gate: who a request comes from, looked up once, and what it may do.

Every way in is decided here: a bearer token (and its request signature, for a token made
with ``--hmac``), a webhook sender's signature, a console session. A request's credential
is read from the store at most once: whatever asks first (the head check of a body, or the
route) looks it up and keeps it in the request's ASGI scope, and every later question
(the route's scope check, the group commit, the metrics filter) takes that :class:`Caller`.

**What a route needs** is declared at the route, ``@needs(Scope.READ, on_inbox=True)``,
and read by the head check, the route's dependency (:data:`Authed`) and the OpenAPI
``security``; a route without one is public. Refusals come in one order: 401 (no token,
an unknown, revoked or expired one, a bad or replayed signature), then 403 (the scope, the path's
inbox), then the route's own; a row found by id in an inbox the token does not cover is
answered 404, as an absent one is (:meth:`Caller.found`).

**Bodies are refused from their head** (:meth:`Gate.head`): without a live token that may
use the route, 401 or 403, the connection closed, none of the body read. A webhook sender
holds no token: what its head can be refused for is refused from it (:mod:`.senders`), and
its body is signed as it arrives. On the one-delivery route a body's bound is the inbox
codec's own, and one over it from an unsigning token or a webhook sender becomes a
``too_large`` dead letter. The head check remembers a live token for ``cache_seconds``, so
that a stream of deliveries costs no lookup each; what it remembers only keeps bodies out.
Any other route looks its token up for the request unless the head check just did, and a
delivery takes the remembered one, because its group commit turn checks it again:

**Revocation and expiry.** A delivery is decided in a turn after its head was checked,
so the turn asks again, in one read for all its requests (:func:`in_turn`), whether each
token is live (not revoked, not expired): at most one lookup a delivery, one indexed read
a token a turn. A webhook sender's signed time is checked again in the turn. An expired
token's 401 says so; a lookup keeps the token's last use (at most a write a minute).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, TypeVar

from fastapi import Depends, Request
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.routing import BaseRoute, Match
from starlette.types import Scope

from oncebox.engine import tokens
from oncebox.engine.box import Oncebox
from oncebox.engine.sessions import Session, Sessions
from oncebox.engine.sessions import refusal as sign_in_refusal
from oncebox.engine.tokens import ReplayGuard, Token
from oncebox.engine.tokens import Scope as TokenScope
from oncebox.errors import OnceboxError, TokenExpired
from oncebox.formats import Delivery, Unverified
from oncebox.surfaces.digits import whole
from oncebox.surfaces.http import problems
from oncebox.surfaces.http.problems import ProblemError
from oncebox.surfaces.http.senders import Sender, Senders, bound_of, missing_headers, refused
from oncebox.surfaces.http.signing import request_target

# What the gate and the body reader leave in a request's ASGI scope.
BODY_KEY = "oncebox.body"  # the request body, as BoundedBody read it
OVERSIZE_KEY = "oncebox.oversize"  # a body over its bound, as BoundedBody kept it (Overflow)
VERIFIED_KEY = "oncebox.verified"  # a webhook body's verdict (Verified or Unverified)
BODY_LIMIT_KEY = "oncebox.body_limit"  # this request's own bound, for BoundedBody
KEEP_OVERSIZE_KEY = "oncebox.keep_oversize"  # BoundedBody keeps a body over its bound
SIGNING_KEY = "oncebox.signing"  # a webhook request's Signing, fed by BoundedBody
LOOKED_UP_KEY = "oncebox.token"  # the request's token, once looked up
SESSION_KEY = "oncebox.session"  # the request's console session, once looked up
MATCHED_KEY = "oncebox.matched"  # the route the head check matched, and its child scope
SEND_TOKEN = "send Authorization: Bearer <token>"


@dataclass(frozen=True)
class Need:
    """What a route asks of its caller's token."""

    scope: TokenScope | None = None  # None: any live token
    on_inbox: bool = False  # it must cover the inbox of the route's path
    signed: bool = False  # on a webhook inbox, a sender's signature will do instead
    also: TokenScope | None = None  # a second scope it needs as well


ANY = Need()  # a body on a public route, or on none, needs a live token all the same
NEEDS: dict[Callable[..., object], Need] = {}
Endpoint = TypeVar("Endpoint", bound=Callable[..., object])
Checked = Delivery | ProblemError | None  # a request as the group commit turn found it


def needs(
    scope: TokenScope | None = None,
    *,
    on_inbox: bool = False,
    signed: bool = False,
    also: TokenScope | None = None,
) -> Callable[[Endpoint], Endpoint]:
    """Declare what a route needs of its caller (written under the route's decorator)."""
    need = Need(scope, on_inbox, signed, also)

    def declare(endpoint: Endpoint) -> Endpoint:
        NEEDS[endpoint] = need
        return endpoint

    return declare


@dataclass(frozen=True)
class Caller:
    """A request admitted by its token: the token as looked up, its secret's SHA-256
    (the group commit re-checks revocation by it), and the request's body as read."""

    token: Token
    digest: bytes
    body: bytes = b""

    def found(self, inbox: str | None, missing: str) -> str:
        """The inbox of a row looked up by its id (None: no such row), if the token
        covers it. Another inbox's row is answered as an absent one is (404,
        ``missing``), so that no token tells another inbox's ids from absent ones."""
        if inbox is None or not self.token.covers(inbox):
            raise ProblemError(404, "not-found", missing)
        return inbox

    def sees(self, inbox: str) -> bool:
        """Whether figures of ``inbox`` are this caller's to see (metrics)."""
        return self.token.covers(inbox)

    def still_live(self, box: Oncebox) -> bool:
        """Whether its token is still live (not revoked, not expired since it was
        admitted): asked again by a request that outlasts its admission (a long poll, a
        stream)."""
        return bool(tokens.still_live(box.store, (self.digest,)))

    @property
    def sees_all(self) -> bool:
        """Whether figures summed over all inboxes are: only for a token for ``*``, not
        one that lists inboxes, even if the list is all of today's."""
        return tokens.ALL_INBOXES in self.token.inboxes


@dataclass(frozen=True)
class _LookedUp:
    given: bool  # whether the request named a token at all
    token: Token | None  # the live token it named
    digest: bytes = b""  # its secret's SHA-256
    fresh: bool = True  # looked up for this request (False: the head's cache)
    why: str = "unknown or revoked token"  # the 401's reason when there is no token


class Gate:
    """The one entry point: every request's credential is looked up and checked here.
    ``routes``: the routers' own (FastAPI wraps an included router in a route that matches
    without giving its path parameters); ``clock``: what signed timestamps are checked by."""

    def __init__(
        self,
        box: Oncebox,
        routes: Sequence[BaseRoute],
        *,
        replays: ReplayGuard,
        clock: Callable[[], float],
        senders: Senders,
        cache_seconds: float = 2.0,
        cache_size: int = 4096,
    ) -> None:
        self.box = box
        self.routes = [route for route in routes if isinstance(route, APIRoute)]
        self.replays = replays
        self.clock = clock
        self.senders = senders
        self.cache_seconds = cache_seconds
        self.cache_size = cache_size
        self._live: dict[bytes, tuple[float, Token]] = {}  # by digest: (until, token)

    async def looked_up(self, scope: Scope, *, cached: bool = False) -> _LookedUp:
        """The request's bearer token, from the store the first time it is asked for;
        with ``cached``, a token the head check found live a moment ago will do."""
        found: _LookedUp | None = scope.get(LOOKED_UP_KEY)
        if found is not None and (found.fresh or cached):
            return found
        secret = bearer_secret(Headers(scope=scope).get("authorization"))
        if secret is None:
            found = _LookedUp(False, None)
        else:
            digest = tokens.secret_hash(secret)
            known = self._live.get(digest) if cached else None
            if known is not None and known[0] > time.monotonic():
                found = _LookedUp(True, known[1], digest, fresh=False)
            else:
                token, why = None, _LookedUp.why
                try:
                    token = await run_in_threadpool(self.box.authenticate, secret)
                except TokenExpired as exc:  # refused, and told why
                    why = str(exc)
                if token is not None:
                    if len(self._live) >= self.cache_size:
                        self._live.clear()
                    self._live[digest] = (time.monotonic() + self.cache_seconds, token)
                found = _LookedUp(True, token, digest, why=why)
        scope[LOOKED_UP_KEY] = found
        return found

    async def admit(self, scope: Scope, *, rechecked: bool = False) -> Caller:
        """The caller of a routed request, by its route's declared need: 401, then 403.
        ``rechecked``: the group commit turn checks the token again, so the head check's
        cached one will do."""
        need = NEEDS[scope["endpoint"]]
        found = await self.looked_up(scope, cached=rechecked)
        token = _live(found)
        body: bytes = scope.get(BODY_KEY, b"")
        if token.signs:  # in a worker thread: the replay guard writes to the store
            await run_in_threadpool(self._check_signature, token, scope, body)
        _allow(token, need, _inbox(scope.get("path_params", {}), need))
        return Caller(token, found.digest, body)

    async def confirm(self, scope: Scope) -> None:
        """401 unless the request's token is live now (looked up unless it just was)."""
        _live(await self.looked_up(scope))

    async def admit_delivery(self, scope: Scope, count: Callable[[str], None]) -> Caller | Sender:
        """The one-delivery route's caller: a token's, or without one, a webhook sender
        whose signature verified as its body arrived (``count`` hears each refusal's
        reason, for operators: nothing else records it)."""
        if (await self.looked_up(scope, cached=True)).given:
            return await self.admit(scope, rechecked=True)
        inbox: str = scope["path_params"]["inbox"]
        webhook = self.senders.webhook(inbox)
        if webhook is None:
            raise unauthorized(SEND_TOKEN)
        verdict = scope.get(VERIFIED_KEY)
        if isinstance(verdict, Unverified):
            count(verdict.reason)
            raise refused(verdict.reason, verdict.detail)
        body = scope.get(BODY_KEY, b"")
        return Sender(webhook, Headers(scope=scope), body, verdict, scope.get(OVERSIZE_KEY), count)

    async def head(self, scope: Scope) -> ProblemError | None:
        """Why a request with a body is refused from its head alone (see module), or
        None; sets the bound its body is read to."""
        need, inbox = self._route(scope)
        try:
            found = await self.looked_up(scope, cached=True)
        except OnceboxError as exc:
            return problems.from_error(exc)
        if not found.given:
            return await self._sender_head(scope, need, inbox)
        try:
            token = _live(found)
            _allow(token, need, inbox)
        except ProblemError as exc:
            return exc
        bound = bound_of(self.box, inbox) if need.signed and inbox is not None else None
        if bound is not None:  # the one-delivery route: the inbox's own bound
            scope[BODY_LIMIT_KEY] = bound
            scope[KEEP_OVERSIZE_KEY] = not token.signs
        return None

    async def _sender_head(
        self, scope: Scope, need: Need, inbox: str | None
    ) -> ProblemError | None:
        """Without a token: let a webhook sender's request through to be verified (its
        head checked, its body bounded to what its inbox takes), refuse anything else."""
        senders = self.senders
        webhook = senders.webhook(inbox) if need.signed and inbox is not None else None
        if webhook is None or inbox is None:
            return unauthorized(SEND_TOKEN)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        if not all(set(headers).intersection(names) for names in webhook.headers):
            senders.count(inbox, "missing_signature")
            return missing_headers(webhook)
        declared = headers.get("content-length", "")
        try:
            scope[SIGNING_KEY] = await senders.begin(
                inbox, webhook, headers, whole(declared, 19) or 0
            )
        except ProblemError as exc:
            return exc
        except OnceboxError as exc:  # the store's clock could not be read
            return problems.from_error(exc)
        scope[BODY_LIMIT_KEY] = bound_of(self.box, inbox)
        return None

    def _route(self, scope: Scope) -> tuple[Need, str | None]:
        """The declared need of the route a request will reach, and its path's inbox."""
        for route in self.routes:
            match, child = route.matches(scope)
            if match is Match.FULL:
                scope[MATCHED_KEY] = (route, child)
                need = NEEDS.get(route.endpoint, ANY)
                return need, _inbox(child.get("path_params", {}), need)
        return ANY, None

    def _check_signature(self, token: Token, scope: Scope, body: bytes) -> None:
        """A signing token's request: its signature good and never seen before."""
        key, target = str(token.hmac_key), request_target(scope)
        try:
            signature = tokens.check_signature(
                key, scope["headers"], scope["method"], target, body, self.clock()
            )
        except tokens.SignatureRefused as exc:
            raise unauthorized(str(exc)) from None
        if not self.replays.first_use(signature):
            raise unauthorized("this signed request was seen before (replay)")


def in_turn(box: Oncebox, credentials: Sequence[Caller | Sender | None]) -> list[Checked]:
    """The group commit turn's check of the requests it is about to decide, in its
    worker thread (see module): for each, None to decide it as submitted, the delivery
    a webhook sender's signature stands for, or the :class:`ProblemError` to answer.
    Raises if the store cannot be read; then nothing of the turn may be decided."""
    digests = {each.digest for each in credentials if isinstance(each, Caller)}
    live = tokens.still_live(box.store, digests) if digests else set()
    now = box.store.now() if any(isinstance(each, Sender) for each in credentials) else 0.0
    checked: list[Checked] = []
    for each in credentials:
        if isinstance(each, Caller) and each.digest not in live:
            checked.append(unauthorized("unknown, revoked or expired token"))
        elif isinstance(each, Sender):
            try:
                checked.append(each.delivery(now))
            except ProblemError as exc:
                checked.append(exc)
        else:
            checked.append(None)
    return checked


bearer = HTTPBearer(
    auto_error=False,
    description="An API token (`oncebox token create`). A token created with `--hmac` "
    "also signs every request: see `Oncebox-Signature`.",
)


async def _caller(
    request: Request,
    _documented: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Caller:
    gate: Gate = request.app.state.gate
    return await gate.admit(request.scope)


Authed = Annotated[Caller, Depends(_caller)]
"""The admitted caller of a route that declared its :func:`needs`."""


# -- the console ------------------------------------------------------------------------------
@dataclass
class SignInRefused(Exception):
    """A console sign-in refused: the status to answer, and why, for the person."""

    status: int
    detail: str


async def session(scope: Scope, cookie: str | None, sessions: Sessions) -> Session | None:
    """The live console session a request's cookie names, looked up once per request."""
    if SESSION_KEY not in scope:
        scope[SESSION_KEY] = await run_in_threadpool(sessions.find, cookie) if cookie else None
    return scope[SESSION_KEY]  # type: ignore[no-any-return]


async def sign_in(box: Oncebox, sessions: Sessions, secret: str, previous: str | None) -> str:
    """A new console session for the token a person typed (its id, for the cookie);
    the browser's previous session ends, so that signing in again replaces it."""
    secret = secret.strip()
    try:
        token = await run_in_threadpool(box.authenticate, secret) if secret else None
    except TokenExpired as exc:
        raise SignInRefused(401, f"Refused: {exc}.") from None
    if token is None:
        raise SignInRefused(401, "Unknown or revoked token.")
    why = sign_in_refusal(token)
    if why is not None:
        raise SignInRefused(403, f"Refused: {why}.")
    if previous:
        await run_in_threadpool(sessions.end, previous)
    return await run_in_threadpool(sessions.open, token)


def bearer_secret(authorization: str | None) -> str | None:
    """The secret of an ``Authorization: Bearer <secret>`` header (as HTTPBearer reads it)."""
    scheme, secret = get_authorization_scheme_param(authorization)
    if not (authorization and scheme and secret) or scheme.lower() != "bearer":
        return None
    return secret


def unauthorized(detail: str) -> ProblemError:
    return ProblemError(401, "unauthorized", detail, headers={"WWW-Authenticate": "Bearer"})


def _live(found: _LookedUp) -> Token:
    if not found.given:
        raise unauthorized(SEND_TOKEN)
    if found.token is None:
        raise unauthorized(found.why)
    return found.token


def _allow(token: Token, need: Need, inbox: str | None) -> None:
    for scope in (need.scope, need.also):
        if scope is not None and not token.has(scope):
            raise ProblemError(403, "forbidden", f"this token lacks the {scope} scope")
    if inbox is not None and not token.covers(inbox):
        raise ProblemError(403, "forbidden", f"this token may not use inbox {inbox!r}")


def _inbox(path_params: dict[str, object], need: Need) -> str | None:
    inbox = path_params.get("inbox") if need.on_inbox else None
    return inbox if isinstance(inbox, str) else None
