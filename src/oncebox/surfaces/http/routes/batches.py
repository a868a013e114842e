"""``POST /v1/inboxes/{inbox}/batch``: many deliveries, one transaction, one decision each.

A batch is a thousand deliveries or so, and the event loop serves every other request of
the worker meanwhile: so everything done per line (splitting the body, reading each
line's envelope) and per decision (the answer's JSON) happens in the worker thread that
decides the batch, not on the loop. The answer is written straight from the decisions,
each value by the standard library's C JSON writers, in :class:`DecisionOut`'s member
order, rather than through a pydantic model per decision (``Decision.to_dict``'s deep
copy and the model's validation cost about as much as deciding the batch: bench/README.md,
"HTTP"). The bytes are the model's (``tests/test_batch_answer.py``); a decision the
writers cannot write is answered by the model, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from json.encoder import encode_basestring
from operator import attrgetter
from types import NoneType, UnionType
from typing import Any, get_args, get_type_hints

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from oncebox.domain import Decision, Verdict
from oncebox.engine.box import Oncebox
from oncebox.engine.tokens import Scope as TokenScope
from oncebox.surfaces import letters
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
JSON = "application/json"
# A decision's members, in the order the response model writes them, and how each one's
# value is written there, by its type (as the model writes it: strings escaped as JSON's,
# UTF-8 left as it is). Each writer is a C function: no Python call per value. A value of
# a type its member does not declare (a bool for an id) is the model's to convert.
MEMBERS = tuple(DecisionOut.model_fields)
_MEMBERS_OF = attrgetter(*MEMBERS)
_OBJECT = "{" + ",".join(f'"{name}":%s' for name in MEMBERS) + "}"
_WRITE: dict[type, Callable[[Any], str]] = {
    str: encode_basestring,
    Verdict: encode_basestring,  # a StrEnum: its text is its value
    int: int.__repr__,
    bool: ("false", "true").__getitem__,
    NoneType: {None: "null"}.__getitem__,
}


def _writers(declared: Any) -> dict[type, Callable[[Any], str]]:
    types = get_args(declared) if isinstance(declared, UnionType) else (declared,)
    return {kind: _WRITE[kind] for kind in types}


_WRITERS = tuple(_writers(get_type_hints(Decision)[name]) for name in MEMBERS)


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
async def deliver_batch(
    inbox: InboxName, who: Authed, svc: Served, request: Request
) -> Response | BatchOut:
    """Decide a batch of deliveries in one transaction; each gets the decision it would
    have got alone, in the batch's order. A delivery whose apply step fails is answered
    `rejected`, reason `apply_failed`, `may_ack` false (nothing of it stored); the others
    are decided all the same."""
    codec = svc.box.inbox(inbox).codec.name
    media = request.headers.get("content-type", NDJSON).split(";")[0].strip().lower()
    # Closing a dead letter with other bytes than it kept is an operator's replay.
    corrects = who.token.has(TokenScope.OPERATOR)
    decisions, answer = await run_in_threadpool(
        decide_body, svc.box, inbox, codec, media, who.body, svc.batch_limit, corrects
    )
    if answer is None:  # a value batch_json does not write: the response model's turn
        return BatchOut(decisions=[DecisionOut(**d.to_dict()) for d in decisions])
    return Response(answer, media_type=JSON)


def decide_body(
    box: Oncebox,
    inbox: str,
    codec: str,
    media: str,
    body: bytes,
    limit: int,
    corrects: bool,
) -> tuple[list[Decision], bytes | None]:
    """In a worker thread: the body's lines, their decisions, and the answer's bytes
    (None where :func:`batch_json` cannot write them). ``corrects``: a line naming a dead
    letter delivers it again whatever its bytes (the caller may replay); else only one
    that re-delivers what the dead letter kept does (:func:`letters.resent_only`)."""
    if media == "application/json":
        try:
            lines = split_json_array(body)
        except ValueError as exc:
            raise ProblemError(400, "bad-batch", str(exc)) from None
    else:
        lines = [line for line in body.split(b"\n") if line.strip()]
    if len(lines) > limit:
        raise ProblemError(
            413, "too-many", f"{len(lines)} deliveries; a batch holds at most {limit}"
        )
    deliveries = [delivery_from_line(codec, line) for line in lines]
    if not corrects:
        deliveries = letters.resent_only(box, inbox, deliveries)
    decisions = box.ingest_all(inbox, deliveries)
    return decisions, batch_json(decisions)


def batch_json(decisions: Sequence[Decision]) -> bytes | None:
    """``BatchOut`` of these decisions as the response model writes it; None where a
    value is of a type its member does not declare, or a text cannot be written as
    UTF-8 (a lone surrogate), for the model to answer as it did."""
    try:
        objects = ",".join([_object(decision) for decision in decisions])
        return ('{"decisions":[' + objects + "]}").encode()
    except (KeyError, UnicodeEncodeError):
        return None


def _object(decision: Decision) -> str:
    values = zip(_WRITERS, _MEMBERS_OF(decision), strict=True)
    return _OBJECT % tuple([writers[type(value)](value) for writers, value in values])
