"""Forwarding (``/v1/forwarding``): destinations and their state, every forward and its
attempts, outbound dead letters, and what operators do: pause, resume, send again."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, Field

from oncebox.domain.forwarding import Attempt, Forward, ForwardFilter, ForwardStatus
from oncebox.engine.forwarding import Standing
from oncebox.engine.tokens import Scope as TokenScope
from oncebox.errors import NotFound
from oncebox.surfaces.forwarding.shown import forward_json, standing_json
from oncebox.surfaces.http.access import Served, Service
from oncebox.surfaces.http.auth import Authed, Caller, needs
from oncebox.surfaces.http.models import STRICT
from oncebox.surfaces.http.openapi import AUTHENTICATED, errors
from oncebox.surfaces.http.problems import ProblemError
from oncebox.surfaces.http.shapes import shaped
from oncebox.surfaces.http.strictbody import StrictJSONRoute
from oncebox.surfaces.http.when import WHEN, WHEN_SCHEMA, seconds
from oncebox.surfaces.views import as_json

TAG = {
    "name": "forwarding",
    "description": "Accepted records and revisions pushed on to each inbox's destinations "
    "through a transactional outbox: destinations' state and backlog, every forward and "
    "attempt, outbound dead letters, pause, resume and retry.",
}
router = APIRouter(tags=["forwarding"], route_class=StrictJSONRoute)
MISSING = "no such destination"
Destination = Annotated[str, Path(min_length=1, max_length=64, description="The destination.")]
ForwardId = Annotated[int, Path(ge=1, lt=2**63, description="The forward's id.")]
When = Annotated[
    str | None,
    WHEN_SCHEMA,
    Query(description=f"Accepted at or after (since) or before (until): {WHEN}."),
]


class SigningOut(BaseModel):
    scheme: Literal["standard-webhooks"] = Field(description="How requests are signed.")
    secret: str = Field(description="Where the secret comes from (inline, env NAME): never it.")


class SettingsOut(BaseModel):
    """A destination's settings as configured (its kind's own, the others null)."""

    name: str = Field(description="The destination's name.")
    kind: Literal["http", "redis-stream", "python"] = Field(description="How it is sent to.")
    url: str | None = Field(default=None, description="http, redis-stream: where (no password).")
    sign: SigningOut | None = Field(default=None, description="http: the signing, if any.")
    stream: str | None = Field(default=None, description="redis-stream: the stream.")
    marker_ttl: str | None = Field(
        default=None, description="redis-stream: how long a revision sent is remembered."
    )
    call: str | None = Field(default=None, description="python: module:function.")
    timeout: str = Field(description="How long one attempt may take.")
    max_in_flight: int = Field(description="Attempts out at once per dispatcher process.")
    rate: str | None = Field(description="Sends a second, minute or hour at most (null: any).")
    ordered: Literal["none", "key"] = Field(description="key: one identity's revisions in order.")
    retry: list[str] = Field(description="The delay before each attempt.")
    retry_on: list[int] = Field(description="4xx statuses retried rather than given up on.")
    circuit_failures: int = Field(description="Failures in a row that open the circuit.")
    circuit_cooldown: str = Field(description="How long an open circuit waits to probe.")


class DestinationOut(BaseModel):
    """A destination: its settings (never a secret), state, backlog and success rate."""

    name: str = Field(description="The destination's name (unique in the store).")
    inbox: str = Field(description="The inbox whose accepted revisions it gets.")
    kind: Literal["http", "redis-stream", "python"] = Field(description="How it is sent to.")
    state: Literal["closed", "open", "half-open", "paused"] = Field(
        description="paused by an operator, else its circuit: closed (sending), open "
        "(a run of failures: waiting to probe), half-open (one probe out)."
    )
    paused_by: str | None = Field(description="Who paused it, if it is.")
    backlog: int = Field(description="Forwards pending or retrying.")
    oldest_pending_seconds: float = Field(description="How long the oldest of them waited.")
    dead: int = Field(description="Outbound dead letters (forwards given up).")
    success_rate: float | None = Field(
        description="Delivered among the last 24 hours' attempts (null: none)."
    )
    settings: SettingsOut = Field(description="Every setting, as configured.")


@shaped(Attempt)
class AttemptOut(BaseModel):
    """One attempt at a forward."""


@shaped(Forward)
class ForwardOut(BaseModel):
    """One accepted revision owed to one destination."""

    attempts_made: list[AttemptOut] | None = Field(
        default=None, description="Its attempts, oldest first (on a single forward's read)."
    )


class ForwardListOut(BaseModel):
    deliveries: list[ForwardOut] = Field(description="The forwards, in id order.")
    next_after: int | None = Field(description="Page on with after=this (null: the last page).")


class DestinationListOut(BaseModel):
    destinations: list[DestinationOut] = Field(description="Each destination, by name.")


class RetryIn(BaseModel):
    """Which of a destination's forwards to send again."""

    model_config = STRICT

    status: Literal["dead", "failed"] = Field(default="dead", description="Which to send again.")
    since: Annotated[str | None, WHEN_SCHEMA] = Field(
        default=None, description="Accepted at or after."
    )
    until: Annotated[str | None, WHEN_SCHEMA] = Field(default=None, description="Accepted before.")


class RetriedOut(BaseModel):
    destination: str = Field(description="The destination.")
    retried: int = Field(description="How many forwards were sent again.")


def _destination_out(standing: Standing) -> DestinationOut:
    shown = standing_json(standing)
    return DestinationOut(
        name=standing.destination.name, inbox=standing.destination.inbox,
        kind=standing.destination.kind,  # type: ignore[arg-type]
        state=standing.circuit,  # type: ignore[arg-type]
        paused_by=standing.state.paused_by, backlog=standing.backlog,
        oldest_pending_seconds=shown["oldest_pending_seconds"], dead=standing.dead,
        success_rate=shown["success_rate"],
        settings=SettingsOut(**standing.destination.describe()),
    )  # fmt: skip


def _standing(svc: Service, who: Caller, name: str) -> Standing:
    """The destination, if the caller's token covers its inbox (404 otherwise, as for an
    absent one)."""
    try:
        [standing] = svc.box.forwarding(name)
    except NotFound:
        raise ProblemError(404, "not-found", MISSING) from None
    who.found(standing.destination.inbox, MISSING)
    return standing


def _forward(svc: Service, who: Caller, forward_id: int) -> tuple[Forward, list[Attempt]]:
    try:
        forward, attempts = svc.box.forward(forward_id)
    except NotFound:
        raise ProblemError(404, "not-found", "no such forward") from None
    _standing(svc, who, forward.destination)
    if not svc.box.destination_owns(forward):  # another inbox's, from before the name was moved
        raise ProblemError(404, "not-found", "no such forward")
    return forward, attempts


@router.get(
    "/v1/forwarding",
    response_model=DestinationListOut,
    summary="Every destination: state, backlog, oldest pending age, success rate",
    response_description="The destinations of the inboxes the token covers",
    responses=errors(*AUTHENTICATED),
)
@needs(TokenScope.READ)
def list_destinations(who: Authed, svc: Served) -> DestinationListOut:
    """Each destination of an inbox the token covers: paused or its circuit, forwards
    pending or retrying and how long the oldest waited, dead letters, and the share of
    the last day's attempts that were delivered."""
    shown = [s for s in svc.box.forwarding() if who.sees(s.destination.inbox)]
    return DestinationListOut(destinations=[_destination_out(s) for s in shown])


@router.get(
    "/v1/forwarding/{destination}/deliveries",
    response_model=ForwardListOut,
    summary="A destination's forwards, by status (dead: its outbound dead letters)",
    response_description="A page of forwards",
    responses=errors(*AUTHENTICATED, 404, 422, e404="No such destination."),
)
@needs(TokenScope.READ)
def list_deliveries(
    destination: Destination,
    who: Authed,
    svc: Served,
    status: Annotated[
        Literal["pending", "delivered", "failed", "dead"] | None, Query(description="Only these.")
    ] = None,
    since: When = None,
    until: When = None,
    after: Annotated[int, Query(ge=0, lt=2**63, description="Page on: ids after this.")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000, description="At most this many.")] = 100,
) -> ForwardListOut:
    """The destination's forwards in id order, filtered by `status` and by when they were
    accepted (`since`, `until`); `status=dead` lists the outbound dead letters."""
    _standing(svc, who, destination)
    chosen = ForwardFilter(destination, ForwardStatus(status) if status else None,
                           seconds("since", since), seconds("until", until))  # fmt: skip
    rows = svc.box.forwards(chosen, after, limit)
    return ForwardListOut(
        deliveries=[ForwardOut(**as_json(f)) for f in rows],
        next_after=rows[-1].id if len(rows) == limit else None,
    )


@router.get(
    "/v1/forwarding/deliveries/{forward_id}",
    response_model=ForwardOut,
    summary="One forward and every attempt at it",
    response_description="The forward, its attempts oldest first",
    responses=errors(*AUTHENTICATED, 404, 422, e404="No such forward."),
)
@needs(TokenScope.READ)
def get_delivery(forward_id: ForwardId, who: Authed, svc: Served) -> ForwardOut:
    """A forward with each attempt: its status, latency, the first 1 KiB of the answer,
    the error, and when the next attempt is due."""
    return ForwardOut(**forward_json(*_forward(svc, who, forward_id)))


@router.post(
    "/v1/forwarding/{destination}/pause",
    response_model=DestinationOut,
    summary="Hold a destination's forwards back",
    response_description="The destination, paused",
    responses=errors(*AUTHENTICATED, 404, 422, e404="No such destination."),
)
@needs(TokenScope.OPERATOR)
def pause(destination: Destination, who: Authed, svc: Served) -> DestinationOut:
    """No forward of the destination is claimed until it is resumed; the pause is in the
    log with the token's name."""
    _standing(svc, who, destination)
    svc.box.pause_destination(destination, who.token.name)
    return _destination_out(_standing(svc, who, destination))


@router.post(
    "/v1/forwarding/{destination}/resume",
    response_model=DestinationOut,
    summary="Send a paused destination's forwards again",
    response_description="The destination, resumed",
    responses=errors(*AUTHENTICATED, 404, 422, e404="No such destination."),
)
@needs(TokenScope.OPERATOR)
def resume(destination: Destination, who: Authed, svc: Served) -> DestinationOut:
    """What was held back is sent, the oldest due first; in the log with the token's name."""
    _standing(svc, who, destination)
    svc.box.resume_destination(destination, who.token.name)
    return _destination_out(_standing(svc, who, destination))


@router.post(
    "/v1/forwarding/deliveries/{forward_id}/retry",
    response_model=ForwardOut,
    summary="Send one dead (or retrying) forward again now",
    response_description="The forward, due now on a fresh schedule",
    responses=errors(
        *AUTHENTICATED, 404, 409, 422,
        e404="No such forward.", e409="It was delivered, or not tried yet.",
    ),
)  # fmt: skip
@needs(TokenScope.OPERATOR)
def retry_one(forward_id: ForwardId, who: Authed, svc: Served) -> ForwardOut:
    """Its attempts so far are kept; the retry is in the log with the token's name."""
    _forward(svc, who, forward_id)
    return ForwardOut(**as_json(svc.box.retry_forward(forward_id, who.token.name)))


@router.post(
    "/v1/forwarding/{destination}/retry",
    response_model=RetriedOut,
    summary="Send again every forward of a destination matching a filter",
    openapi_extra={"requestBody": {"description": "Which: status, since, until."}},
    response_description="How many were sent again",
    responses=errors(*AUTHENTICATED, 400, 404, 413, 422, e404="No such destination."),
)
@needs(TokenScope.OPERATOR)
def retry_many(destination: Destination, who: Authed, svc: Served, asked: RetryIn) -> RetriedOut:
    """Every `dead` (default) or `failed` forward accepted between `since` and `until`
    goes out again now, on a fresh schedule; each batch is one log entry naming the
    token, the filter and the forwards."""
    _standing(svc, who, destination)
    chosen = ForwardFilter(
        destination,
        ForwardStatus(asked.status),
        seconds("since", asked.since, "body"),
        seconds("until", asked.until, "body"),
    )
    return RetriedOut(
        destination=destination, retried=svc.box.retry_forwards(chosen, who.token.name)
    )
