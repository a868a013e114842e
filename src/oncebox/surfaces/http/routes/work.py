"""The reconciler's work keys: their figures, the ones in review, and sending one back."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from oncebox.surfaces.http.access import InboxName, Operator, Reader, Served
from oncebox.surfaces.http.models import RetriedOut, WorkKeyIn, WorkKeyOut, WorkOut
from oncebox.surfaces.http.openapi import AUTHENTICATED, errors, inbox_errors
from oncebox.surfaces.http.strictbody import StrictJSONRoute
from oncebox.surfaces.views import work_key_json

TAG = {
    "name": "work",
    "description": "Work keys of the reconciler (`generation` inboxes): dirty keys, keys "
    "that kept failing and wait in review, and sending one back from review.",
}
router = APIRouter(tags=["work"], route_class=StrictJSONRoute)


@router.get(
    "/v1/inboxes/{inbox}/work",
    response_model=WorkOut,
    summary="Work keys and their figures (dirty count, in review)",
    response_description="The figures and the keys",
    responses=inbox_errors(),
)
def work_keys(
    inbox: InboxName,
    who: Reader,
    svc: Served,
    dirty: Annotated[bool, Query(description="Only keys not yet refreshed.")] = False,
) -> dict[str, Any]:
    """The inbox's work keys with their generations, documents and failures."""
    rows = svc.box.work_keys(inbox)
    return {
        "figures": svc.box.work_figures(inbox),
        "keys": [work_key_json(row) for row in rows if row.dirty or not dirty],
    }


@router.get(
    "/v1/inboxes/{inbox}/work/review",
    response_model=list[WorkKeyOut],
    summary="Work keys waiting for an operator, with their last error",
    response_description="The keys in review",
    responses=inbox_errors(),
)
def work_review(inbox: InboxName, who: Reader, svc: Served) -> list[dict[str, Any]]:
    """Keys whose refresh failed too often in a row; they wait for an operator."""
    return [work_key_json(row) for row in svc.box.reconciler(inbox).review()]


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
def work_retry(
    inbox: InboxName,
    who: Operator,
    svc: Served,
    key: WorkKeyIn,
) -> RetriedOut:
    """Send a key that waits in review back to be refreshed again (operator scope); the
    token's name is kept in the log as who sent it."""
    work_key = (key.seller_id, key.sku, key.marketplace_id)
    svc.box.reconciler(inbox).retry(work_key, actor=who.token.name)
    return RetriedOut(retried=key)
