"""``GET /v1/inboxes/{inbox}/triage``: the headcount ledger of a triage inbox."""

from __future__ import annotations

from fastapi import APIRouter

from oncebox.engine.tokens import Scope as TokenScope
from oncebox.surfaces.http.access import InboxName, Served
from oncebox.surfaces.http.auth import Authed, needs
from oncebox.surfaces.http.models import TriageOut
from oncebox.surfaces.http.openapi import AUTHENTICATED, errors

TAG = {
    "name": "triage",
    "description": "The headcount ledger of `triage` inboxes: totals per site and need, the "
    "priority ranking, and what counting every arrival would have given.",
}
router = APIRouter(tags=["triage"])


@router.get(
    "/v1/inboxes/{inbox}/triage",
    response_model=TriageOut,
    summary="The headcount ledger: totals per site and need, and the priority ranking",
    response_description="The ledger",
    responses=errors(
        *AUTHENTICATED,
        404,
        409,
        422,
        e404="No such inbox.",
        e409="The inbox keeps no triage ledger (its apply step is not triage).",
    ),
)
@needs(TokenScope.READ, on_inbox=True)
def triage(inbox: InboxName, who: Authed, svc: Served) -> TriageOut:
    """Totals per site and need, each beside what counting every arrival would have
    given (a retransmitted session counted twice: 46, not 23), and every record ranked
    by priority."""
    return TriageOut(inbox=inbox, **svc.box.triage(inbox))
