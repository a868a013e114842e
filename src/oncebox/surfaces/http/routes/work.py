"""The reconciler's work keys: their figures, the ones in review, and sending one back."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from oncebox.engine.tokens import Scope as TokenScope
from oncebox.engine.views import LISTED
from oncebox.surfaces.http.access import InboxName, Served
from oncebox.surfaces.http.auth import Authed, needs
from oncebox.surfaces.http.listed import WorkKeyListedOut, WorkListedOut
from oncebox.surfaces.http.models import RetriedOut, WorkKeyIn, WorkKeyOut
from oncebox.surfaces.http.openapi import AUTHENTICATED, errors, inbox_errors
from oncebox.surfaces.http.problems import ProblemError
from oncebox.surfaces.http.strictbody import StrictJSONRoute
from oncebox.surfaces.listing import LIMIT
from oncebox.surfaces.views import work_key_json

TAG = {
    "name": "work",
    "description": "Work keys of the reconciler (`generation` inboxes): dirty keys, keys "
    "that kept failing and wait in review, and sending one back from review.",
}
router = APIRouter(tags=["work"], route_class=StrictJSONRoute)
Limit = Annotated[int, Query(ge=1, le=LIMIT, description="At most this many keys.")]
AfterPart = Annotated[
    str | None,
    Query(max_length=1024, description="Part of the last key of the page before (paging)."),
]


@router.get(
    "/v1/inboxes/{inbox}/work",
    response_model=WorkListedOut,
    summary="Work keys and their figures (dirty count, in review)",
    response_description="The figures and the keys",
    responses=inbox_errors(),
)
@needs(TokenScope.READ, on_inbox=True)
async def work_keys(
    inbox: InboxName,
    who: Authed,
    svc: Served,
    dirty: Annotated[bool, Query(description="Only keys not yet refreshed.")] = False,
    after_seller_id: AfterPart = None,
    after_sku: AfterPart = None,
    after_marketplace_id: AfterPart = None,
    limit: Limit = 100,
) -> dict[str, Any]:
    """The inbox's work keys in key order with their generations, documents and
    failures, a page of at most 1,000 (the next: ``after_seller_id``, ``after_sku`` and
    ``after_marketplace_id`` of the last key; a part not given counts as empty). A
    document longer than 2,048 characters of JSON is left out (null, ``cut`` says so,
    ``document_length`` its length)."""
    # A part not given is empty, the least of its kind: any of them names a place in
    # key order, so every request the schema allows is one the route answers.
    after = None
    if (after_seller_id, after_sku, after_marketplace_id) != (None, None, None):
        after = (after_seller_id or "", after_sku or "", after_marketplace_id or "")

    def read() -> dict[str, Any]:
        rows = svc.box.work_keys(inbox, limit=limit, after=after, dirty=dirty, preview=LISTED)
        return {"figures": svc.box.work_figures(inbox), "keys": [work_key_json(r) for r in rows]}

    return await svc.readers.run(read)


@router.get(
    "/v1/inboxes/{inbox}/work/key",
    response_model=WorkKeyOut,
    summary="One work key, its document whole",
    response_description="The key",
    responses=errors(*AUTHENTICATED, 404, 422, e404="No such inbox or work key."),
)
@needs(TokenScope.READ, on_inbox=True)
def work_key(
    inbox: InboxName,
    who: Authed,
    svc: Served,
    seller_id: Annotated[str, Query(max_length=1024, description="The seller.")],
    sku: Annotated[str, Query(max_length=1024, description="The SKU.")],
    marketplace_id: Annotated[str, Query(max_length=1024, description="The marketplace.")],
) -> dict[str, Any]:
    """One work key with all of its document (a listing leaves a long one out)."""
    found = svc.box.work_key(inbox, (seller_id, sku, marketplace_id))
    if found is None:
        raise ProblemError(404, "not-found", f"no work key {seller_id}/{sku}/{marketplace_id}")
    return work_key_json(found)


@router.get(
    "/v1/inboxes/{inbox}/work/review",
    response_model=list[WorkKeyListedOut],
    summary="Work keys waiting for an operator, with their last error",
    response_description="The keys in review",
    responses=inbox_errors(),
)
@needs(TokenScope.READ, on_inbox=True)
async def work_review(
    inbox: InboxName, who: Authed, svc: Served, limit: Limit = 100
) -> list[dict[str, Any]]:
    """Keys whose refresh failed too often in a row; they wait for an operator. In key
    order, documents as ``/work`` shows them."""

    def read() -> list[dict[str, Any]]:
        keys = svc.box.reconciler(inbox).review(limit, preview=LISTED)
        return [work_key_json(row) for row in keys]

    return await svc.readers.run(read)


@router.post(
    "/v1/inboxes/{inbox}/work/retry",
    response_model=RetriedOut,
    summary="Send a work key back from review",
    openapi_extra={"requestBody": {"description": "The work key to send back."}},
    response_description="The key was sent back",
    responses=errors(
        400,
        *AUTHENTICATED,
        404,
        409,
        413,
        422,
        e400="The body could not be read.",
        e404="No such inbox.",
        e409="The key is not in review.",
    ),
)
@needs(TokenScope.OPERATOR, on_inbox=True)
def work_retry(
    inbox: InboxName,
    who: Authed,
    svc: Served,
    key: WorkKeyIn,
) -> RetriedOut:
    """Send a key that waits in review back to be refreshed again (operator scope); the
    token's name is kept in the log as who sent it."""
    work_key = (key.seller_id, key.sku, key.marketplace_id)
    svc.box.reconciler(inbox).retry(work_key, actor=who.token.name)
    return RetriedOut(retried=key)
