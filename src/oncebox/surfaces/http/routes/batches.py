"""``POST /v1/inboxes/{inbox}/batch``: many deliveries, one transaction, one decision each."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from oncebox.engine.tokens import Scope as TokenScope
from oncebox.surfaces.http.access import InboxName, Served
from oncebox.surfaces.http.auth import Authed, needs
from oncebox.surfaces.http.models import BatchOut, DecisionOut
from oncebox.surfaces.http.openapi import AUTHENTICATED, errors
from oncebox.surfaces.http.problems import ProblemError
from oncebox.surfaces.lines import delivery_from_line, split_json_array

TAG = {
    "name": "batches",
    "description": "Many deliveries decided in one transaction, in the line forms of "
    "`oncebox ingest`; a line that cannot be read is its own dead letter.",
}
NDJSON = "application/x-ndjson"
LINE_FORMS = (
    "one delivery per line in the inbox codec's line form: json-event, the event itself; "
    'ussd-h1, `{"frame_id": "rec1-1", "frame": "H1|..."}`; feed, `{"payload": "...", '
    '"snapshot_id": "S1"}` (or `payload_b64`, or the bare payload); any other codec, '
    '`{"body": "...", "key": "..."}` (or `body_b64`). Envelopes may carry `device_time`, '
    "`snapshot_id`, `delivery_id` and `lease_token`."
)
router = APIRouter(tags=["batches"])


DOCUMENTED = {
    "requestBody": {
        "required": True,
        "description": f"NDJSON ({NDJSON}) or (application/json) a JSON array of the same "
        f"lines, at most the service's batch limit (1,000 by default): {LINE_FORMS}",
        "content": {
            NDJSON: {"schema": {"type": "string", "format": "binary"}},
            "application/json": {
                "schema": {
                    "type": "array",
                    "items": {"description": "One line, as in the NDJSON form."},
                }
            },
        },
    }
}


@router.post(
    "/v1/inboxes/{inbox}/batch",
    response_model=BatchOut,
    summary="Deliver many messages in one transaction; one decision each, in order",
    response_description="The decisions, one per delivery, in order",
    responses=errors(
        400,
        *AUTHENTICATED,
        404,
        413,
        422,
        e400="The body is not a JSON array (application/json).",
        e404="No such inbox.",
        e413="The body is over the bound, or holds more deliveries than a batch may.",
    ),
    openapi_extra=DOCUMENTED,
)
@needs(TokenScope.WRITE, on_inbox=True)
async def deliver_batch(inbox: InboxName, who: Authed, svc: Served, request: Request) -> BatchOut:
    """Decide a batch of deliveries in one transaction; each gets the decision it would
    have got alone, in the batch's order. A delivery whose apply step fails is answered
    `rejected`, reason `apply_failed`, `may_ack` false (nothing of it stored); the others
    are decided all the same."""
    codec = svc.box.inbox(inbox).codec.name
    media = request.headers.get("content-type", NDJSON).split(";")[0].strip().lower()
    if media == "application/json":
        try:
            lines = split_json_array(who.body)
        except ValueError as exc:
            raise ProblemError(400, "bad-batch", str(exc)) from None
    else:
        lines = [line for line in who.body.split(b"\n") if line.strip()]
    if len(lines) > svc.batch_limit:
        raise ProblemError(
            413,
            "too-many",
            f"{len(lines)} deliveries; a batch holds at most {svc.batch_limit}",
        )
    deliveries = [delivery_from_line(codec, line) for line in lines]
    decisions = await run_in_threadpool(svc.box.ingest_all, inbox, deliveries)
    return BatchOut(decisions=[DecisionOut(**d.to_dict()) for d in decisions])
