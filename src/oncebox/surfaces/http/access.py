"""Who may call a route: the FastAPI dependencies every router shares.

A route names what it needs (``Writer``, ``Reader``, ``Operator`` on the inbox of its
path, ``AnyReader`` for the log and metrics) and gets the admitted :class:`Caller`. The
scope each check asks for is kept in :data:`REQUIRED` too, by the very callable that
checks it, so that the gate (which refuses a body from its head) reads the same rule
instead of a second table of it.

The service's state (the box, group commit, replay guard, keys) is one :class:`Service`
on ``app.state``, which :func:`service` hands to routes: routers are module-level, and
one process may serve several apps.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.types import Scope

from oncebox.engine.box import Oncebox
from oncebox.engine.tokens import ReplayGuard, SignatureRefused, Token, check_signature
from oncebox.engine.tokens import Scope as TokenScope
from oncebox.surfaces.http.gate import unauthorized
from oncebox.surfaces.http.groupcommit import GroupCommit
from oncebox.surfaces.http.metrics import Metrics
from oncebox.surfaces.http.problems import ProblemError
from oncebox.surfaces.http.reading import Readers
from oncebox.surfaces.http.signing import request_target
from oncebox.surfaces.lines import INT64_MAX  # ids and tokens: 64-bit in both stores

BODY_KEY = "oncebox.body"  # the request body, as BoundedBody read it
OVERSIZE_KEY = "oncebox.oversize"  # a body over its bound, as BoundedBody kept it (Overflow)
VERIFIED_KEY = "oncebox.verified"  # a signed body's verdict (Verified or Unverified)


@dataclass
class Service:
    """What the routes of one app work with."""

    box: Oncebox
    group: GroupCommit
    metrics: Metrics
    replays: ReplayGuard
    clock: Callable[[], float]
    private_key: bytes | None
    batch_limit: int
    readers: Readers = field(default_factory=Readers)  # listings and searches


def service(request: Request) -> Service:
    found: Service = request.app.state.service
    return found


Served = Annotated[Service, Depends(service)]
InboxName = Annotated[str, Path(description="The inbox's name, as declared.")]
# Published as below 2**63, a bound a double holds exactly (2**63 - 1 reads as 2**63).
RowId = Annotated[int, Path(ge=1, lt=INT64_MAX + 1, description="The row's id.")]

bearer = HTTPBearer(
    auto_error=False,
    description="An API token (`oncebox token create`). A token created with `--hmac` "
    "also signs every request: see `Oncebox-Signature`.",
)


@dataclass(frozen=True)
class Caller:
    """An admitted request: its live token, and its body as read."""

    token: Token
    body: bytes

    def require(self, scope: TokenScope, inbox: str) -> None:
        if not self.token.has(scope):
            raise ProblemError(403, "forbidden", f"this token lacks the {scope} scope")
        if not self.token.covers(inbox):
            raise ProblemError(403, "forbidden", f"this token may not use inbox {inbox!r}")

    def found(self, scope: TokenScope, inbox: str | None, missing: str) -> str:
        """The inbox of a row looked up by its id (None: no such row), if this token
        may use it. A row of an inbox the token does not cover is answered as an
        absent one is (404, ``missing``), so that no token tells another inbox's ids
        from absent ones; the scope is asked first, whatever the row."""
        if not self.token.has(scope):
            raise ProblemError(403, "forbidden", f"this token lacks the {scope} scope")
        if inbox is None or not self.token.covers(inbox):
            raise ProblemError(404, "not-found", missing)
        return inbox


def admitted(svc: Service, token: Token | None, scope: Scope) -> Caller:
    """The caller, if ``token`` is live and a signing token's signature is good (in a
    worker thread: a signed request's replay check writes to the store)."""
    if token is None:
        raise unauthorized("unknown or revoked token")
    body: bytes = scope.get(BODY_KEY, b"")
    if token.hmac_key is not None:
        try:
            signature = check_signature(
                token.hmac_key,
                scope["headers"],
                scope["method"],
                request_target(scope),
                body,
                svc.clock(),
            )
        except SignatureRefused as exc:
            raise unauthorized(str(exc)) from None
        if not svc.replays.first_use(signature):
            raise unauthorized("this signed request was seen before (replay)")
    return Caller(token, body)


async def caller(
    request: Request,
    svc: Served,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Caller:
    if credentials is None:
        raise unauthorized("send Authorization: Bearer <token>")
    token = await run_in_threadpool(svc.box.authenticate, credentials.credentials)
    return await run_in_threadpool(admitted, svc, token, request.scope)


Authed = Annotated[Caller, Depends(caller)]

# The scope each check asks for, by the callable that checks it (routes and dependencies).
REQUIRED: dict[Callable[..., object], TokenScope] = {}
# The routes that take a webhook sender's signature instead of a token (webhook inboxes).
SIGNED: set[Callable[..., object]] = set()


def _on_inbox(scope: TokenScope) -> Callable[[str, Caller], Awaitable[Caller]]:
    async def check(inbox: InboxName, who: Authed) -> Caller:
        who.require(scope, inbox)
        return who

    REQUIRED[check] = scope
    return check


async def _any_reader(who: Authed) -> Caller:
    if not who.token.has(TokenScope.READ):
        raise ProblemError(403, "forbidden", "this token lacks the read scope")
    return who


REQUIRED[_any_reader] = TokenScope.READ


Writer = Annotated[Caller, Depends(_on_inbox(TokenScope.WRITE))]
Reader = Annotated[Caller, Depends(_on_inbox(TokenScope.READ))]
Operator = Annotated[Caller, Depends(_on_inbox(TokenScope.OPERATOR))]
AnyReader = Annotated[Caller, Depends(_any_reader)]
