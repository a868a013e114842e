"""Records you can find: an inbox's records filtered and paged, one record whole with all
that happened to it, and everything kept under one delivery key."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from starlette.responses import Response

from oncebox.engine.finding import ORDERS
from oncebox.engine.reads import SEARCH_BYTES, SEARCH_SECONDS, search_term
from oncebox.engine.tokens import Scope as TokenScope
from oncebox.errors import InvalidOperation
from oncebox.surfaces import listing, records
from oncebox.surfaces.http.access import InboxName, RowId, Served
from oncebox.surfaces.http.auth import Authed, needs
from oncebox.surfaces.http.found import LookupOut, RecordRowOut, RecordWholeOut
from oncebox.surfaces.http.openapi import AUTHENTICATED, errors, inbox_errors
from oncebox.surfaces.http.problems import ProblemError
from oncebox.surfaces.http.reading import SEARCHES, encoded, encoder
from oncebox.surfaces.http.when import WHEN, WHEN_SCHEMA, seconds
from oncebox.surfaces.listing import LIMIT

TAG = {
    "name": "records",
    "description": "What was accepted: an inbox's records filtered and paged, one record "
    "with all that happened to it, and everything kept under one delivery key.",
}
router = APIRouter(tags=["records"])
# Characters of a key or identity a query takes: one past it, written as a URL (up to 12
# bytes a character, percent-encoded), still fits the 64 KiB request line the server
# reads, so it is answered 422 by this API and not 400 by the HTTP parser.
KEY_MAX = 4_096
# No delivery's key or identity holds a NUL (no store keeps one): the engine refuses one
# in a query (422), and the schema says so.
NO_NUL = r"^[^\x00]*$"

Key = Annotated[
    str | None,
    Query(min_length=1, max_length=KEY_MAX, pattern=NO_NUL,
          description="Only the records that came with this delivery key."),
]  # fmt: skip
Identity = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=KEY_MAX,
        pattern=NO_NUL,
        description="Only the record of this identity.",
    ),
]
Since = Annotated[
    str | None, WHEN_SCHEMA, Query(description=f"First seen at or after this: {WHEN}.")
]
Until = Annotated[str | None, WHEN_SCHEMA, Query(description=f"First seen before this: {WHEN}.")]
Search = Annotated[
    str | None,
    Query(
        max_length=SEARCH_BYTES,
        description=f"Only those whose content holds this text (at most {SEARCH_BYTES} bytes "
        f"of UTF-8). A search looks through every content in its range: at most {SEARCHES} "
        f"run at once per worker (one more is answered 503 with Retry-After), each for at "
        f"most {SEARCH_SECONDS:g} s (503: narrow it).",
    ),
]
After = Annotated[
    int,
    Query(ge=0, lt=2**63, description="The last id of the page before (paging, in the order "
          "asked for)."),
]  # fmt: skip
Order = Annotated[
    Literal["newest", "oldest"],
    Query(description="By when each was first seen: the newest first, or the oldest."),
]
assert set(ORDERS) == {"newest", "oldest"}


def _query(
    key: Key = None,
    identity: Identity = None,
    since: Since = None,
    until: Until = None,
    search: Search = None,
    after: After = 0,
    order: Order = "newest",
) -> records.Query:
    """The records listing's filters, as one query."""
    times = seconds("since", since), seconds("until", until)
    try:
        search_term(search)
    except InvalidOperation as exc:
        raise ProblemError(422, "validation", f"query.search: {exc}") from None
    return records.Query(key, identity, *times, search or None, after, order)


Filters = Annotated[records.Query, Depends(_query)]


@router.get(
    "/v1/inboxes/{inbox}/records",
    response_model=list[RecordRowOut],
    summary="The inbox's records, filtered and paged, values cut to a bound",
    response_description="The records, in the order asked for",
    responses=inbox_errors(),
)
@needs(TokenScope.READ, on_inbox=True)
async def list_records(
    inbox: InboxName,
    who: Authed,
    svc: Served,
    query: Filters,
    limit: Annotated[int, Query(ge=1, le=LIMIT, description="At most this many rows.")] = 100,
) -> Response:
    """The inbox's records by when each was first seen, newest first (``order=oldest``:
    the oldest), a page of at most 1,000 (the next: ``after`` the last id): each with its
    id, identity, delivery key, revision, witness, first and last seen, duplicates, log
    position (``log_seq``) and its content cut to its first 1,024 bytes with its length
    and SHA-256 (``cut`` names what is shown only in part). The whole record is ``GET
    /v1/records/{id}``. The answer is written as it is read."""
    pages = records.pages(svc.box, inbox, query, limit)
    chunks = listing.json_array(pages, encoder(RecordRowOut))
    return await svc.readers.stream(encoded(chunks), "application/json", bool(query.search))


@router.get(
    "/v1/records/{record_id}",
    response_model=RecordWholeOut,
    summary="One record whole, with all that happened to it",
    response_description="The record, its revisions, newcomers, log entries and timeline",
    responses=errors(*AUTHENTICATED, 404, 422, e404="No such record."),
)
@needs(TokenScope.READ)
async def show_record(record_id: RowId, who: Authed, svc: Served) -> dict[str, Any]:
    """A record whole (read scope on its inbox): its content, fields and transport
    facts, every superseded revision, its duplicates and late replays, the newcomers
    quarantined beside it and how each was resolved and by whom, the log entries about it
    with their positions, its timeline, and where its inclusion proof is."""
    view = await svc.readers.run(svc.box.record_view, record_id)
    who.found(view.inbox if view is not None else None, f"no record {record_id}")
    assert view is not None
    return records.view_json(view)


@router.get(
    "/v1/inboxes/{inbox}/lookup",
    response_model=LookupOut,
    summary="Everything kept under one delivery key: did it arrive, what was decided",
    response_description="The records, newcomers and dead letters of the key, and its timeline",
    responses=inbox_errors(),
)
@needs(TokenScope.READ, on_inbox=True)
async def lookup(
    inbox: InboxName,
    who: Authed,
    svc: Served,
    key: Annotated[
        str,
        Query(min_length=1, max_length=KEY_MAX, pattern=NO_NUL, description="The delivery key."),
    ],
) -> dict[str, Any]:
    """Everything oncebox keeps under one delivery key of the inbox, across records,
    quarantine and dead letters, in time order: ``arrived`` says whether anything came
    with it; the timeline says what was decided, and by whom, with the log entry of each
    step. A record kept before keys were (migration 19) is found when its identity is the
    key (keyed and ussd-h1 inboxes)."""
    found = await svc.readers.run(svc.box.lookup, inbox, key)
    return records.lookup_json(found)
