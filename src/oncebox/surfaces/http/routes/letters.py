"""Dead letters: filtered and paged, downloaded as ``oncebox ingest`` lines, replayed."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Query, Request
from pydantic import WithJsonSchema
from starlette.responses import Response, StreamingResponse

from oncebox.domain import LetterStatus
from oncebox.engine.reads import SEARCH_BYTES, SEARCH_SECONDS, search_term
from oncebox.engine.tokens import Scope as TokenScope
from oncebox.errors import InvalidOperation
from oncebox.surfaces import letters, listing
from oncebox.surfaces.http.access import InboxName, RowId, Served
from oncebox.surfaces.http.auth import Authed, needs
from oncebox.surfaces.http.listed import DeadLetterListedOut
from oncebox.surfaces.http.models import DeadLetterOut, DecisionOut
from oncebox.surfaces.http.openapi import AUTHENTICATED, errors
from oncebox.surfaces.http.operating import ArchiveIn, ReplayedOut, ReplayIn
from oncebox.surfaces.http.problems import ProblemError
from oncebox.surfaces.http.reading import SEARCHES, encoded, encoder, joined
from oncebox.surfaces.http.strictbody import StrictJSONRoute
from oncebox.surfaces.http.when import WHEN, WHEN_SCHEMA, seconds
from oncebox.surfaces.listing import LIMIT
from oncebox.surfaces.views import as_json

router = APIRouter(tags=["quarantine"], route_class=StrictJSONRoute)
NDJSON = "application/x-ndjson"
Reason = Annotated[
    str | None, Query(max_length=64, description="Only dead letters refused for this reason.")
]
# A string read by the same rule as the CLI and the console (views.parse_when), and
# published as exactly what that rule takes (surfaces/http/when.py).
Since = Annotated[str | None, WHEN_SCHEMA, Query(description=f"Received at or after this: {WHEN}.")]
Until = Annotated[str | None, WHEN_SCHEMA, Query(description=f"Received before this: {WHEN}.")]
Search = Annotated[
    str | None,
    Query(
        max_length=SEARCH_BYTES,
        description=f"Only those whose kept head holds this text (at most {SEARCH_BYTES} "
        f"bytes of UTF-8). A search looks through every kept head in its range: at most "
        f"{SEARCHES} run at once per worker (one more is answered 503 with Retry-After), "
        f"each for at most {SEARCH_SECONDS:g} s (503: narrow it).",
    ),
]
After = Annotated[
    int, Query(ge=0, lt=2**63, description="The last id of the page before (paging).")
]
# Published as the enum it is, read as a string so that another value is the 400 naming
# the known ones (as the CLI and the console say it), not a bare validation error.
STATUSES = [s.value for s in LetterStatus]
Status = Annotated[
    str | None,
    WithJsonSchema({"anyOf": [{"type": "string", "enum": STATUSES}, {"type": "null"}]}),
    Query(
        max_length=16,
        description="Only those in this state: open, replayed or archived (another: 400).",
    ),
]


FILTERED = errors(
    *AUTHENTICATED,
    400,
    404,
    422,
    e400="An unknown reason, status or query parameter: the detail and `known` name the "
    "known ones.",
    e404="No such inbox.",
)
FILTER_NAMES = ("reason", "status", "since", "until", "search", "after")


def known_only(request: Request, known: Sequence[str]) -> None:
    """A query parameter a route does not take is a typo of one it does (``reasn``):
    400 naming them, rather than a filter silently not applied."""
    for name in request.query_params:
        if name not in known:
            close = difflib.get_close_matches(name, known, 1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ProblemError(
                400,
                "unknown-value",
                f"unknown query parameter {name!r}{hint}; known: {', '.join(known)}",
                extra={"known": list(known)},
            )


def _filters(known: tuple[str, ...]) -> Callable[..., letters.Query]:
    """The dependency that reads the dead-letter filters as one query, refusing any query
    parameter but ``known`` (400)."""

    def read(
        request: Request,
        reason: Reason = None,
        since: Since = None,
        until: Until = None,
        search: Search = None,
        after: After = 0,
        status: Status = None,
    ) -> letters.Query:
        known_only(request, known)
        times = seconds("since", since), seconds("until", until)
        try:
            search_term(search)
        except InvalidOperation as exc:
            raise ProblemError(422, "validation", f"query.search: {exc}") from None
        # An empty reason or search is no filter, as the console's form reads them.
        return letters.Query(reason or None, *times, search or None, after, status)

    return read


# The filters of the listing and its lines, which page by ``?limit=``.
Filters = Annotated[letters.Query, Depends(_filters((*FILTER_NAMES, "limit")))]
# The filters of the preview and the bulk actions, which take no ``?limit=`` (a bulk
# action's limit is in its body): one there would be accepted and not applied, and a
# bulk replay would act on its body's default of 100 instead.
Selected = Annotated[letters.Query, Depends(_filters(FILTER_NAMES))]


@router.get(
    "/v1/inboxes/{inbox}/dead-letters",
    response_model=list[DeadLetterListedOut],
    summary="Invalid deliveries kept with their reason, filtered and paged",
    response_description="The dead letters, in id order",
    responses=FILTERED,
)
@needs(TokenScope.READ, on_inbox=True)
async def dead_letters(
    inbox: InboxName,
    who: Authed,
    svc: Served,
    query: Filters,
    limit: Annotated[int, Query(ge=1, le=LIMIT, description="At most this many rows.")] = 100,
) -> Response:
    """The inbox's dead letters, oldest first, a page of at most 1,000 (the next:
    ``after`` the last id): the first 1,024 bytes of the kept head (``kept`` bytes of
    ``length`` that arrived, with the SHA-256 of all that arrived), and why it was
    refused; ``cut`` names what is shown only in part, and the whole is
    ``GET /v1/dead-letters/{id}``. The answer is written as it is read."""
    pages = listing.letter_pages(svc.box, [inbox], query, limit)
    chunks = listing.json_array(pages, encoder(DeadLetterListedOut))
    return await svc.readers.stream(encoded(chunks), "application/json", bool(query.search))


@router.get(
    "/v1/dead-letters/{letter_id}",
    response_model=DeadLetterOut,
    summary="One dead letter, its kept head whole",
    response_description="The dead letter",
    responses=errors(*AUTHENTICATED, 404, 422, e404="No such dead letter."),
)
@needs(TokenScope.READ)
def show_dead_letter(letter_id: RowId, who: Authed, svc: Served) -> dict[str, Any]:
    """One dead letter with all of its kept head (read scope on its inbox)."""
    found = svc.box.get_dead_letter(letter_id)
    inbox = who.found(found[0] if found else None, _missing(letter_id))
    assert found is not None
    return as_json(found[1], inbox=inbox)


@router.get(
    "/v1/inboxes/{inbox}/dead-letters/lines",
    summary="Dead letters as NDJSON lines that oncebox ingest reads",
    description="The dead letters the filters select, one NDJSON line each in the line "
    "form of the inbox's codec (those of `oncebox ingest` and the batch route): fed back, "
    "each line re-delivers the delivery a replay would decide (body, key, device time, "
    "snapshot and delivery ids). One kept only in part, or one its codec's line cannot "
    "carry, is left out.",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "The lines",
            "content": {NDJSON: {"schema": {"type": "string"}}},
        },
        **FILTERED,
    },
)
@needs(TokenScope.READ, on_inbox=True)
async def dead_letter_lines(
    inbox: InboxName,
    who: Authed,
    svc: Served,
    query: Filters,
    limit: Annotated[int, Query(ge=1, le=1_000_000, description="At most this many.")] = 100_000,
) -> StreamingResponse:
    svc.box.inbox(inbox)  # an unknown inbox is a 404 before the answer starts
    found = letters.lines(svc.box, [inbox], query, limit, [])
    disposition = f'attachment; filename="{inbox}-dead-letters.ndjson"'
    return await svc.readers.stream(
        joined(found, letters.PAGE),
        NDJSON,
        bool(query.search),
        headers={"Content-Disposition": disposition},
    )


def _missing(letter_id: int) -> str:
    return f"no dead letter {letter_id}"


@router.post(
    "/v1/dead-letters/{letter_id}/replay",
    response_model=ReplayedOut,
    summary="Deliver a dead letter again, as kept or corrected",
    openapi_extra={
        "requestBody": {
            "description": "An optional note and lease token; a corrected body or key.",
            "required": False,
        }
    },
    response_description="The decision, and the dead letter with its replay recorded",
    responses=errors(
        400,
        *AUTHENTICATED,
        404,
        409,
        413,
        422,
        e400="The body could not be read.",
        e404="No such dead letter.",
        e409="The dead letter was kept only in part, so it cannot be replayed as it was "
        "(its detail says so: replay it with a corrected body), or a correction came "
        "without a note.",
    ),
)
@needs(TokenScope.OPERATOR)
def replay_dead_letter(
    letter_id: RowId,
    who: Authed,
    svc: Served,
    replay: Annotated[ReplayIn | None, Body()] = None,
) -> ReplayedOut:
    """Decide a dead letter's delivery again now, like any delivery (operator scope on
    its inbox). Decided, the dead letter closes as ``replayed``; refused again, the same
    dead letter counts one attempt more (``attempts``, ``last_reason``, ``last_tried``)
    and the decision says ``rejected``. A ``body`` or ``key`` corrects what it kept (a
    note is then needed); the log keeps the old and the new SHA-256, the token's name and
    the note."""
    box = svc.box
    found = box.get_dead_letter(letter_id)
    who.found(found[0] if found else None, _missing(letter_id))
    asked = replay or ReplayIn()
    body = asked.body.encode("utf-8") if asked.body is not None else None
    decision = box.replay(
        letter_id, who.token.name, asked.lease_token, asked.note, body=body, key=asked.key
    )
    after = box.get_dead_letter(letter_id)
    assert after is not None
    return ReplayedOut(
        decision=DecisionOut(**decision.to_dict()),
        dead_letter=DeadLetterOut(**as_json(after[1], inbox=after[0])),
    )


@router.post(
    "/v1/dead-letters/{letter_id}/archive",
    response_model=DeadLetterOut,
    summary="Put a dead letter aside, with a note",
    openapi_extra={"requestBody": {"description": "Why it is put aside."}},
    response_description="The dead letter, archived",
    responses=errors(
        400,
        *AUTHENTICATED,
        404,
        409,
        413,
        422,
        e400="The body could not be read.",
        e404="No such dead letter.",
        e409="It is archived already.",
    ),
)
@needs(TokenScope.OPERATOR)
def archive_dead_letter(
    letter_id: RowId, who: Authed, svc: Served, archive: ArchiveIn
) -> dict[str, Any]:
    """Archive a dead letter (operator scope on its inbox): it leaves the open ones and
    is kept; the token's name and the note are kept on it and in the log."""
    found = svc.box.get_dead_letter(letter_id)
    inbox = who.found(found[0] if found else None, _missing(letter_id))
    return as_json(svc.box.archive(letter_id, who.token.name, archive.note), inbox=inbox)
