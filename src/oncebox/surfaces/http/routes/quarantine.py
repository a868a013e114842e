"""What an operator looks at: quarantined newcomers, and their resolution."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from starlette.responses import Response

from oncebox.domain import QuarantineStatus
from oncebox.engine.box import Oncebox
from oncebox.engine.tokens import Scope as TokenScope
from oncebox.surfaces import listing
from oncebox.surfaces.choices import StatusChoice, status_filter
from oncebox.surfaces.http.access import InboxName, RowId, Served
from oncebox.surfaces.http.auth import Authed, Caller, needs
from oncebox.surfaces.http.listed import QuarantineListedOut
from oncebox.surfaces.http.models import QuarantineOut, ResolveIn
from oncebox.surfaces.http.openapi import AUTHENTICATED, errors, inbox_errors
from oncebox.surfaces.http.reading import encoded, encoder
from oncebox.surfaces.http.strictbody import StrictJSONRoute
from oncebox.surfaces.listing import LIMIT
from oncebox.surfaces.views import as_json

TAG = {
    "name": "quarantine",
    "description": "Conflicting newcomers kept for an operator beside the original record, "
    "and invalid deliveries kept as dead letters with their reason.",
}
router = APIRouter(tags=["quarantine"], route_class=StrictJSONRoute)
# A page: each row is bounded, and the answer is written as it is read.
Limit = Annotated[int, Query(ge=1, le=LIMIT, description="At most this many rows.")]
After = Annotated[
    int, Query(ge=0, lt=2**63, description="The last id of the page before (paging).")
]


def _shown(box: Oncebox, quarantine_id: int, who: Caller) -> dict[str, Any]:
    found = box.get_quarantine(quarantine_id)
    inbox = who.found(found[0] if found else None, f"no quarantine row {quarantine_id}")
    assert found is not None
    return as_json(found[1], inbox=inbox, original=box.original(found[1]))


@router.get(
    "/v1/inboxes/{inbox}/quarantine",
    response_model=list[QuarantineListedOut],
    summary="Quarantined newcomers, each with the original record, values cut to a bound",
    response_description="The rows in id order, each with its original",
    responses=inbox_errors(),
)
@needs(TokenScope.READ, on_inbox=True)
async def list_quarantine(
    inbox: InboxName,
    who: Authed,
    svc: Served,
    status: Annotated[
        StatusChoice,
        Query(description="Only rows with this resolution (all: every row)."),
    ] = QuarantineStatus.OPEN.value,
    after: After = 0,
    limit: Limit = 100,
) -> Response:
    """The inbox's quarantine rows in id order, each beside the record it conflicts
    with, a page of at most 1,000 (the next: ``after`` the last id). Each content is
    shown cut to its first 1,024 bytes, with its length and SHA-256 (``cut`` names
    what is shown only in part); the whole row is ``GET /v1/quarantine/{id}``. The
    answer is written as it is read, a hundred rows at a time."""
    pages = listing.quarantine_pages(svc.box, inbox, status_filter(status), limit, after)
    chunks = listing.json_array(pages, encoder(QuarantineListedOut))
    return await svc.readers.stream(encoded(chunks), "application/json")


@router.get(
    "/v1/quarantine/{quarantine_id}",
    response_model=QuarantineOut,
    summary="One quarantined newcomer beside the original",
    response_description="The row, with its original",
    responses=errors(*AUTHENTICATED, 404, 422, e404="No such quarantine row."),
)
@needs(TokenScope.READ)
def show_quarantine(quarantine_id: RowId, who: Authed, svc: Served) -> dict[str, Any]:
    """One quarantine row (read scope on its inbox)."""
    return _shown(svc.box, quarantine_id, who)


@router.post(
    "/v1/quarantine/{quarantine_id}/resolve",
    response_model=QuarantineOut,
    summary="Keep the original or accept the newcomer, with a note",
    openapi_extra={"requestBody": {"description": "keep or accept, with a note."}},
    response_description="The row as resolved, with the original",
    responses=errors(
        400,
        *AUTHENTICATED,
        404,
        409,
        413,
        422,
        e400="The body could not be read.",
        e404="No such quarantine row.",
        e409="The row is resolved already.",
    ),
)
@needs(TokenScope.OPERATOR)
def resolve_quarantine(
    quarantine_id: RowId,
    who: Authed,
    svc: Served,
    resolution: ResolveIn,
) -> dict[str, Any]:
    """Resolve a quarantine row (operator scope on its inbox): keep the original as it
    is, or accept the newcomer as the record's next revision. The note is kept, and the
    token's name as who resolved it (on the row and in the log)."""
    _shown(svc.box, quarantine_id, who)
    row = svc.box.resolve(quarantine_id, resolution.action, resolution.note, actor=who.token.name)
    return _shown(svc.box, row.id, who)
