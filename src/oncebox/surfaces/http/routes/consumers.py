"""Durable consumers of an inbox's feed: the store keeps each one's cursor, and only the
holder of its current lease moves it (``/v1/consumers``).

Making a consumer, taking its lease and acknowledging change what every holder of it
shares, so they need the ``write`` scope; looking at one needs ``read``. Being handed its
entries (``next``) needs both: it shows the feed's contents, and it moves how far the
holder may acknowledge."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from oncebox.engine.feed import PAGE_MAX, FeedPage, Standing
from oncebox.engine.following import WAIT_MAX
from oncebox.engine.tokens import Scope as TokenScope
from oncebox.errors import NotFound
from oncebox.surfaces.http.access import Served, Service
from oncebox.surfaces.http.auth import Authed, Caller, needs
from oncebox.surfaces.http.models import (
    AckIn,
    ConsumerIn,
    ConsumerLeaseIn,
    ConsumerLeaseOut,
    ConsumerListOut,
    ConsumerOut,
    FeedEntryOut,
    FeedPageOut,
)
from oncebox.surfaces.http.news import following
from oncebox.surfaces.http.openapi import AUTHENTICATED, errors
from oncebox.surfaces.http.problems import ProblemError
from oncebox.surfaces.http.strictbody import StrictJSONRoute
from oncebox.surfaces.lines import INT64_MAX
from oncebox.surfaces.views import as_json

TAG = {
    "name": "consumers",
    "description": "Durable consumers of a feed: a named cursor the store keeps, handed "
    "entries at least once and moved forward by acknowledgements under the one fence (a "
    "lease whose token a newer holder makes stale).",
}
router = APIRouter(tags=["consumers"], route_class=StrictJSONRoute)
Name = Annotated[str, Path(min_length=1, max_length=128, description="The consumer's name.")]
MISSING = "no such consumer"


def _standing(svc: Service, who: Caller, name: str) -> Standing:
    """The consumer, if the caller's token covers its inbox (404 otherwise, as for an
    absent one: no token learns another inbox's consumers' names)."""
    try:
        standing = svc.box.consumer_standing(name)
    except NotFound:
        raise ProblemError(404, "not-found", MISSING) from None
    who.found(standing.inbox, MISSING)
    return standing


def _out(standing: Standing) -> ConsumerOut:
    lease = standing.lease
    return ConsumerOut(
        **as_json(standing.consumer),
        inbox=standing.inbox,
        holder=lease.holder if lease else None,
        lease_expires_at=lease.expires_at if lease else None,
        lag_entries=standing.lag_entries,
        lag_seconds=round(standing.lag_seconds, 3),
    )


def page_out(page: FeedPage) -> FeedPageOut:
    return FeedPageOut(
        entries=[FeedEntryOut(**as_json(e)) for e in page.entries], next_after=page.next_after
    )


@router.get(
    "/v1/consumers",
    response_model=ConsumerListOut,
    summary="Every consumer, its cursor, its holder and its lag",
    response_description="The consumers of the inboxes the token covers",
    responses=errors(*AUTHENTICATED),
)
@needs(TokenScope.READ)
def list_consumers(who: Authed, svc: Served) -> ConsumerListOut:
    """Each consumer of an inbox the token covers, with how far behind it is: entries
    after its cursor (counted over at most a million log positions on) and the age of
    the oldest."""
    shown = [_out(s) for s in svc.box.consumers() if who.sees(s.inbox)]
    return ConsumerListOut(consumers=shown)


@router.put(
    "/v1/consumers/{name}",
    response_model=ConsumerOut,
    summary="Make a consumer of an inbox's feed (or find the one there is)",
    openapi_extra={"requestBody": {"description": "The inbox it follows, where it starts."}},
    response_description="The consumer was there already: as it is",
    responses={
        201: {"model": ConsumerOut, "description": "The consumer, made now"},
        **errors(
            400, *AUTHENTICATED, 404, 409, 413, 422,
            e404="No such inbox (or not the token's).",
            e409="A consumer of that name follows another inbox, or the start is past the "
            "log's end.",
        ),
    },
)  # fmt: skip
@needs(TokenScope.WRITE)  # it changes what every holder shares: a write
def put_consumer(
    name: Name, who: Authed, svc: Served, made: ConsumerIn, response: Response
) -> ConsumerOut:
    """Make consumer `name` of `inbox`'s feed, starting after `start` (`beginning`,
    `end` or a log position). Putting it again leaves its cursor where it is (201 when
    made, 200 when it was there)."""
    who.found(made.inbox, f"no inbox {made.inbox}")
    made_now = svc.box.consumer(name, made.inbox, made.start).made
    response.status_code = 201 if made_now else 200
    return _out(_standing(svc, who, name))


@router.get(
    "/v1/consumers/{name}",
    response_model=ConsumerOut,
    summary="One consumer: its cursor, holder and lag",
    response_description="The consumer",
    responses=errors(*AUTHENTICATED, 404, 422, e404="No such consumer."),
)
@needs(TokenScope.READ)
def get_consumer(name: Name, who: Authed, svc: Served) -> ConsumerOut:
    """The consumer's cursor (`position`, the last position it acknowledged), what it
    was handed (`handed_out`), its lease's holder and its lag."""
    return _out(_standing(svc, who, name))


@router.delete(
    "/v1/consumers/{name}",
    status_code=204,
    summary="Drop a consumer and its cursor",
    response_description="Dropped",
    responses=errors(*AUTHENTICATED, 404, 422, e404="No such consumer."),
)
@needs(TokenScope.OPERATOR)
def drop_consumer(name: Name, who: Authed, svc: Served) -> Response:
    """Forget the consumer; the feed itself is untouched."""
    _standing(svc, who, name)
    svc.box.drop_consumer(name)
    return Response(status_code=204)


@router.post(
    "/v1/consumers/{name}/lease",
    response_model=ConsumerLeaseOut,
    summary="Take a consumer's lease",
    openapi_extra={"requestBody": {"description": "Who holds it and for how long."}},
    response_description="The lease: the token that moves the cursor",
    responses=errors(
        400, *AUTHENTICATED, 404, 409, 413, 422,
        e404="No such consumer.",
        e409="Another holder's lease is live.",
    ),
)  # fmt: skip
@needs(TokenScope.WRITE)  # it changes what every holder shares: a write
def lease_consumer(
    name: Name, who: Authed, svc: Served, lease: ConsumerLeaseIn
) -> ConsumerLeaseOut:
    """A fencing token for the consumer, valid `ttl` seconds on the server clock;
    refused while another holder's lease is live (the same holder takes it again, and
    every older token is then stale)."""
    _standing(svc, who, name)
    held = svc.box.feed_consumer(name).lease(lease.holder or who.token.name, lease.ttl)
    return ConsumerLeaseOut(
        consumer=name, holder=held.holder, token=held.token, expires_at=held.expires_at
    )


Token = Annotated[
    int, Query(ge=0, lt=INT64_MAX + 1, description="The consumer's current fencing token.")
]


@router.get(
    "/v1/consumers/{name}/next",
    response_model=FeedPageOut,
    summary="The entries after a consumer's cursor, handed out under its lease",
    response_description="A page; acknowledge up to its next_after",
    responses=errors(
        *AUTHENTICATED, 404, 409, 422,
        e404="No such consumer.",
        e409="The token does not hold the consumer's lease (stale or expired).",
    ),
)  # fmt: skip
@needs(TokenScope.READ, also=TokenScope.WRITE)  # it moves what the holder was handed
async def next_entries(
    name: Name,
    who: Authed,
    svc: Served,
    token: Token,
    limit: Annotated[int, Query(ge=1, le=PAGE_MAX, description="At most this many.")] = 100,
    wait: Annotated[
        float, Query(ge=0, le=WAIT_MAX, description="Seconds to wait when nothing is there.")
    ] = 0.0,
) -> FeedPageOut:
    """The entries after the consumer's cursor: those handed out before but not
    acknowledged come again (at least once). `wait` long-polls up to 30 s."""
    _standing(svc, who, name)
    consumer = svc.box.feed_consumer(name)

    def read(_after: int) -> FeedPage:
        return consumer.next(limit=limit, token=token)

    return page_out(await following(read, svc.news, 0, wait, lambda: who.still_live(svc.box)))


@router.post(
    "/v1/consumers/{name}/ack",
    response_model=ConsumerOut,
    summary="Acknowledge up to a position: the cursor moves there",
    openapi_extra={"requestBody": {"description": "The token and the position."}},
    response_description="The consumer, moved",
    responses=errors(
        400, *AUTHENTICATED, 404, 409, 413, 422,
        e404="No such consumer.",
        e409="The token does not hold the consumer's lease (stale or expired).",
        e422="The position is past what the consumer was handed, or the body is invalid.",
    ),
)  # fmt: skip
@needs(TokenScope.WRITE)  # it changes what every holder shares: a write
def ack(name: Name, who: Authed, svc: Served, acked: AckIn) -> ConsumerOut:
    """Move the cursor to `position`, only forward and only up to what was handed out,
    under the current lease (an older position changes nothing)."""
    _standing(svc, who, name)
    svc.box.feed_consumer(name).ack(acked.position, token=acked.token)
    return _out(_standing(svc, who, name))
