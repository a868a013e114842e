"""Leases: take the next fencing token for a scope, or give one up early."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from oncebox.engine.tokens import Scope as TokenScope
from oncebox.surfaces.http.access import InboxName, Served
from oncebox.surfaces.http.auth import Authed, needs
from oncebox.surfaces.http.models import LeaseIn, LeaseOut, ReleasedOut
from oncebox.surfaces.http.openapi import AUTHENTICATED, errors
from oncebox.surfaces.http.strictbody import StrictJSONRoute
from oncebox.surfaces.lines import INT64_MAX

TAG = {
    "name": "leases",
    "description": "Fencing tokens for lease-fenced inboxes: a newer lease fences every "
    "older token, and only the server clock decides expiry.",
}
router = APIRouter(tags=["leases"], route_class=StrictJSONRoute)


@router.post(
    "/v1/inboxes/{inbox}/leases",
    status_code=201,
    response_model=LeaseOut,
    summary="Take the next fencing token for a scope",
    openapi_extra={"requestBody": {"description": "The scope to lease and for how long."}},
    response_description="The lease: its token and expiry",
    responses=errors(
        400,
        *AUTHENTICATED,
        404,
        409,
        413,
        422,
        e400="The body could not be read.",
        e404="No such inbox.",
        e409="The inbox is not lease-fenced.",
    ),
)
@needs(TokenScope.WRITE, on_inbox=True)
def take_lease(
    inbox: InboxName,
    who: Authed,
    svc: Served,
    lease: LeaseIn,
) -> LeaseOut:
    """Issue the next token for the scope (one counter per store, strictly increasing),
    valid `ttl` seconds on the server clock; every older token on the scope is fenced."""
    return LeaseOut(**svc.box.lease(inbox, lease.scope, lease.ttl).to_dict())


@router.delete(
    "/v1/inboxes/{inbox}/leases/{scope:path}",
    response_model=ReleasedOut,
    summary="Give a lease up early",
    response_description="The lease was released",
    responses=errors(
        *AUTHENTICATED,
        404,
        409,
        413,
        422,
        e404="No such inbox.",
        e409="The token does not hold the scope's lease.",
    ),
)
@needs(TokenScope.WRITE, on_inbox=True)
def release_lease(
    inbox: InboxName,
    scope: Annotated[str, Path(description="The leased scope.")],
    who: Authed,
    svc: Served,
    token: Annotated[
        int, Query(ge=0, lt=INT64_MAX + 1, description="The token that holds the lease.")
    ],
) -> ReleasedOut:
    """Release the lease that `token` holds; the token is stale from now on."""
    svc.box.release(inbox, scope, token)
    return ReleasedOut(inbox=inbox, scope=scope, released=token)
