"""Bulk actions by filter, each with its preview: replay or archive an inbox's dead
letters, resolve its open conflicts. A preview (GET) says how many match and shows the
first; the action (POST, the same query) acts on at most ``limit`` of them in id order,
each through the same engine call as one at a time, and is one ``bulk`` log entry."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from oncebox.domain.bulk import BulkRun
from oncebox.engine.tokens import Scope as TokenScope
from oncebox.engine.views import LISTED
from oncebox.surfaces import letters
from oncebox.surfaces.http.access import InboxName, Served
from oncebox.surfaces.http.auth import Authed, needs
from oncebox.surfaces.http.openapi import AUTHENTICATED, errors
from oncebox.surfaces.http.operating import (
    BulkIn,
    BulkResolveIn,
    BulkRunOut,
    ConflictsPreviewOut,
    LettersPreviewOut,
)
from oncebox.surfaces.http.routes.letters import (
    After,
    Selected,
    Since,
    Until,
    known_only,
)
from oncebox.surfaces.http.strictbody import StrictJSONRoute
from oncebox.surfaces.http.when import seconds
from oncebox.surfaces.views import as_json

router = APIRouter(tags=["quarantine"], route_class=StrictJSONRoute)
Prefix = Annotated[
    str | None,
    Query(max_length=1024, description="Only conflicts whose identity starts with this."),
]
UNKNOWN = (
    "An unknown reason, status or query parameter (the detail and `known` name the known "
    "ones), or a body that could not be read."
)
ACTED = errors(
    400,
    *AUTHENTICATED,
    404,
    409,
    413,
    422,
    e400=UNKNOWN,
    e404="No such inbox, or not one the token covers.",
    e409="A note is missing where one is needed.",
)


class ConflictQuery:
    """Which open conflicts of an inbox: an identity prefix, first seen in a range."""

    def __init__(
        self,
        request: Request,
        identity_prefix: Prefix = None,
        since: Since = None,
        until: Until = None,
        after: After = 0,
    ) -> None:
        known_only(request, ("identity_prefix", "since", "until", "after"))
        self.prefix = identity_prefix or None
        self.since, self.until = seconds("since", since), seconds("until", until)
        self.after = after


Conflicts = Annotated[ConflictQuery, Depends(ConflictQuery)]


def _run(run: BulkRun) -> dict[str, Any]:
    return asdict(run)


@router.get(
    "/v1/inboxes/{inbox}/dead-letters/preview",
    response_model=LettersPreviewOut,
    summary="What a bulk replay or archive with these filters would act on",
    response_description="How many match, and the first of them",
    responses=errors(*AUTHENTICATED, 400, 404, 422, e400=UNKNOWN, e404="No such inbox."),
)
@needs(TokenScope.READ, on_inbox=True)
def preview_dead_letters(
    inbox: InboxName, who: Authed, svc: Served, query: Selected
) -> dict[str, Any]:
    """How many of the inbox's dead letters the filters select now, and the first 20
    (as a listing shows them): what ``POST .../dead-letters/replay`` or ``.../archive``
    with the same query would act on."""
    chosen = letters.checked(svc.box, [inbox], query)
    count, first = svc.box.letters_matching([inbox], chosen)
    return {"count": count, "first": [as_json(row, inbox=name) for name, row in first]}


@router.post(
    "/v1/inboxes/{inbox}/dead-letters/replay",
    response_model=BulkRunOut,
    summary="Replay the dead letters the filters select, at most limit this call",
    openapi_extra={"requestBody": {"description": "A note and a limit.", "required": False}},
    response_description="Each dead letter and what it was decided as",
    responses=ACTED,
)
@needs(TokenScope.OPERATOR, on_inbox=True)
def bulk_replay(
    inbox: InboxName, who: Authed, svc: Served, query: Selected, bulk: BulkIn | None = None
) -> dict[str, Any]:
    """Replay each selected dead letter as one replay does (closed as ``replayed`` when
    decided; refused again, one attempt more and outcome ``rejected:REASON``); one log
    entry names the filter, the count, the ids and the token. Go on from ``next_after``."""
    asked = bulk or BulkIn()
    chosen = letters.checked(svc.box, [inbox], query)
    run = svc.box.bulk_replay([inbox], chosen, who.token.name, asked.note, asked.limit)
    return _run(run)


@router.post(
    "/v1/inboxes/{inbox}/dead-letters/archive",
    response_model=BulkRunOut,
    summary="Archive the dead letters the filters select, at most limit this call",
    openapi_extra={"requestBody": {"description": "A note and a limit."}},
    response_description="Each dead letter, archived (or failed: archived already)",
    responses=ACTED,
)
@needs(TokenScope.OPERATOR, on_inbox=True)
def bulk_archive(
    inbox: InboxName, who: Authed, svc: Served, query: Selected, bulk: BulkIn
) -> dict[str, Any]:
    """Archive each selected dead letter with the note, in one transaction with its one
    log entry. Add ``status=open`` to leave out those archived already."""
    chosen = letters.checked(svc.box, [inbox], query)
    note = bulk.note or ""
    return _run(svc.box.bulk_archive([inbox], chosen, who.token.name, note, bulk.limit))


@router.get(
    "/v1/inboxes/{inbox}/quarantine/preview",
    response_model=ConflictsPreviewOut,
    summary="What a bulk resolution with these filters would act on",
    response_description="How many open conflicts match, and the first of them",
    responses=errors(*AUTHENTICATED, 400, 404, 422, e400=UNKNOWN, e404="No such inbox."),
)
@needs(TokenScope.READ, on_inbox=True)
def preview_conflicts(
    inbox: InboxName, who: Authed, svc: Served, query: Conflicts
) -> dict[str, Any]:
    """How many of the inbox's open conflicts match (identity prefix, first seen at or
    after ``since`` and before ``until``), and the first 20 as a listing shows them."""
    box = svc.box
    count, rows = box.conflicts_matching(inbox, query.prefix, query.since, query.until, query.after)
    originals = box.originals(rows, LISTED)
    shown = [as_json(row, inbox=inbox, original=originals.get(row.id)) for row in rows]
    return {"count": count, "first": shown}


@router.post(
    "/v1/inboxes/{inbox}/quarantine/resolve",
    response_model=BulkRunOut,
    summary="Resolve the open conflicts the filters select, keep or accept",
    openapi_extra={"requestBody": {"description": "keep or accept, a note and a limit."}},
    response_description="Each conflict and what became of it",
    responses=ACTED,
)
@needs(TokenScope.OPERATOR, on_inbox=True)
def bulk_resolve(
    inbox: InboxName, who: Authed, svc: Served, query: Conflicts, bulk: BulkResolveIn
) -> dict[str, Any]:
    """Resolve each selected conflict as one resolution does (keep the original, or
    accept the newcomer as the next revision), with the note; one log entry names the
    filter, the count, the ids and the token."""
    run = svc.box.bulk_resolve(
        inbox,
        bulk.action,
        bulk.note,
        who.token.name,
        prefix=query.prefix,
        since=query.since,
        until=query.until,
        after=query.after,
        limit=bulk.limit,
    )
    return _run(run)
