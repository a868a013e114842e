"""``POST /v1/inboxes/{inbox}/deliveries``: one delivery in, its decision out.

The hot route. It takes the raw request, so that no per-request validation runs, and
answers with a pre-encoded body; its parameters are documented here by hand. What a
status means for a client:

| status | verdict | may_ack | meaning |
| --- | --- | --- | --- |
| 201 | accepted | true | a new record |
| 200 | duplicate | true | seen before; safe to ack |
| 200 | conflict | true | quarantined for an operator; safe to ack |
| 422 | rejected (bad input) | true | dead-lettered; safe to ack, resending will not help |
| 413 | rejected (too_large) | true | over the inbox's bound: dead-lettered in part |
| 409 | rejected (stale_token, expired_lease) | false | not stored: take a new lease |
| 503 | (problem document) | - | storage unavailable: retry after Retry-After |

A body over the inbox codec's bound is read as it streams by, keeping only its head and
the length and SHA-256 of all of it (:class:`~oncebox.surfaces.http.middleware.BoundedBody`),
and decided as a ``too_large`` dead letter: 413 with the decision. Only an authenticated
request leaves one (a token that may write to the inbox and does not sign its requests,
or a webhook whose signature verified over the whole body); any other is refused as it
would be anyway, and nothing is stored.

On an inbox whose codec declares a webhook, a request without a bearer token is
authenticated by its sender's signature instead (:mod:`oncebox.surfaces.http.senders`):
a missing, malformed, stale or wrong one is 401 with its ``reason``, and nothing is
stored. A bearer token still works there (an operator's own resend, a test): it is our
own credential, it must cover the inbox with the write scope, and what it delivers is
recorded without a signature, so the two stay apart.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response
from starlette.types import Scope

from oncebox.domain import UNSTORED, Decision, Verdict
from oncebox.engine.tokens import Scope as TokenScope
from oncebox.errors import OnceboxError
from oncebox.formats import Delivery, Overflow, needs_key
from oncebox.formats.jsontext import compact_encoder
from oncebox.surfaces.http.access import Service
from oncebox.surfaces.http.auth import OVERSIZE_KEY, needs
from oncebox.surfaces.http.models import DecisionOut
from oncebox.surfaces.http.openapi import AUTHENTICATED, errors
from oncebox.surfaces.http.problems import ProblemError
from oncebox.surfaces.http.senders import Sender

TAG = {
    "name": "deliveries",
    "description": "One delivery at a time, decided exactly once; the answer says whether "
    "the sender may acknowledge it.",
}
JSON = "application/json"
TOO_LARGE = "too_large"
HEADERS = {
    "Oncebox-Key": "The identity key the transport gives (a USSD frame id, a message key).",
    "Oncebox-Snapshot": "The snapshot (export) the delivery came in; recorded, not identity.",
    "Oncebox-Lease-Token": "The fencing token of the scope's lease (lease-fenced inboxes): "
    "a non-negative integer.",
    "Oncebox-Device-Time": "The device's clock, as it said; recorded, never trusted.",
    "Oncebox-Delivery-Id": "The transport's own delivery id; recorded.",
}
# What a webhook sender sends instead of a token, on an inbox that declares its scheme.
WEBHOOK_HEADERS = {
    "webhook-id": "standard-webhooks: the message id, the same on every retry; the key "
    "(unless the inbox's identity says otherwise), and signed.",
    "webhook-timestamp": "standard-webhooks: unix seconds, signed; refused "
    "(stale_signature) beyond the inbox's tolerance of the server clock, 300 s by default.",
    "webhook-signature": "standard-webhooks: space-separated `v1,<base64>` values, "
    "HMAC-SHA256 over `id.timestamp.body` with the base64 secret after `whsec_`; any one "
    "matching any of the inbox's secrets will do.",
    "svix-id": "standard-webhooks, as Svix sends it: read before `webhook-id`.",
    "svix-timestamp": "standard-webhooks, as Svix sends it: read before `webhook-timestamp`.",
    "svix-signature": "standard-webhooks, as Svix sends it: read before `webhook-signature`.",
    "X-Hub-Signature-256": "github: `sha256=` and the lower-case hex HMAC-SHA256 of the body.",
    "X-GitHub-Delivery": "github: the delivery's GUID; the key (not signed).",
    "Stripe-Signature": "stripe: `t=<unix>,v1=<lower-case hex>[,v1=...]` (split on bare "
    "commas), HMAC-SHA256 over `t.body`; `t` at most the inbox's tolerance old, any time "
    "ahead; the event's `id` is the identity.",
}
SENDER_ONLY = " Read only on a webhook inbox, from a request without a bearer token."
BINARY = {"schema": {"type": "string", "format": "binary"}}
DOCUMENTED: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "The delivery exactly as received, in the inbox codec's form "
        "(a json-event object, an H1 frame, a feed payload). Its Content-Type is not "
        "interpreted.",
        "content": {media: BINARY for media in (JSON, "text/plain", "application/octet-stream")},
    },
    "parameters": [
        {
            "in": "path",
            "name": "inbox",
            "required": True,
            "description": "The inbox's name, as declared.",
            "schema": {"type": "string"},
        },
        *(
            {
                "in": "header",
                "name": name,
                "required": False,
                "description": description,
                "schema": {"type": "string"},
            }
            for name, description in HEADERS.items()
        ),
        *(
            {
                "in": "header",
                "name": name,
                "required": False,
                "description": description + SENDER_ONLY,
                "schema": {"type": "string"},
            }
            for name, description in WEBHOOK_HEADERS.items()
        ),
    ],
}

router = APIRouter(tags=["deliveries"])
_ENCODE = compact_encoder(sort_keys=False, ensure_ascii=False)


def decision_json(decision: Decision) -> bytes:
    """``decision.to_dict()`` as JSON (as JSONResponse encodes it), without the deep copy."""
    data = dict(vars(decision))
    data["verdict"] = decision.verdict.value
    return _ENCODE(data).encode()


OURS = frozenset(name.lower().encode("latin-1") for name in HEADERS)


def ours(scope: Scope) -> dict[bytes, str]:
    """The request's first value of each of :data:`HEADERS` (as ``request.headers.get``
    reads them), in one pass over its headers rather than one a header."""
    found: dict[bytes, str] = {}
    for name, value in scope["headers"]:
        if name in OURS and name not in found:
            found[name] = value.decode("latin-1")
    return found


def parse_lease_token(value: str | None) -> int | None:
    if value is None:
        return None
    digits = value.strip()
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 19:
        raise ProblemError(400, "bad-header", "Oncebox-Lease-Token must be a non-negative integer")
    return int(digits)


def status_for(decision: Decision) -> int:
    if decision.verdict is Verdict.ACCEPTED:
        return 201
    if decision.verdict is Verdict.REJECTED:
        if decision.reason == TOO_LARGE:
            return 413  # dead-lettered, but a sender must hear that its body is too big
        return 409 if decision.reason in UNSTORED else 422
    return 200  # duplicate, conflict: stored (or counted), safe to ack


RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": DecisionOut, "description": "duplicate or conflict: safe to ack"},
    409: {
        "model": DecisionOut,
        "description": "stale token or expired lease: not stored, may_ack false; take a "
        "new lease and resend",
    },
    422: {"model": DecisionOut, "description": "invalid: dead-lettered, safe to ack"},
    **errors(
        400,
        *AUTHENTICATED,
        404,
        413,
        503,
        e400="A malformed Oncebox-Lease-Token header, or no Oncebox-Key for an inbox "
        "identified by it; nothing was decided or stored.",
        e401="No token, an unknown or revoked one, or (for a signing token) a bad, stale "
        "or replayed signature; on a webhook inbox without a token, a missing, malformed, "
        "stale or wrong sender signature, named by the problem's `reason` "
        "(missing_signature, bad_signature_header, stale_signature, bad_signature). "
        "Nothing was decided or stored.",
        e404="No such inbox.",
        e413="The body is over the inbox codec's bound. From a token that may write to "
        "the inbox and does not sign its requests, or a webhook sender whose signature "
        "verified, the answer is the decision: rejected `too_large`, dead-lettered with "
        "its first 64 KiB, length and SHA-256, safe to ack. From a signing token, a "
        "problem document: the connection is closed and nothing was stored.",
        e503="Storage unavailable; or, for a webhook sender, too many unverified bodies "
        "arriving at once on this worker, or an upload of the same message still "
        "arriving: nothing was stored, retry after Retry-After.",
    ),
}
# A body over the bound from an authenticated sender is dead-lettered: its 413 is a decision.
RESPONSES[413] = {**RESPONSES[413], "model": DecisionOut}


@router.post(
    "/v1/inboxes/{inbox}/deliveries",
    status_code=201,
    response_model=DecisionOut,
    summary="Deliver one message; answers with its decision",
    response_description="accepted: a new record; safe to ack",
    responses=RESPONSES,
    openapi_extra=DOCUMENTED,
)
@needs(TokenScope.WRITE, on_inbox=True, signed=True)
async def deliver(request: Request) -> Response:
    """Decide one delivery exactly once: a new record (201), a duplicate or a conflict
    (200), or a rejection (422: dead-lettered; 409: fenced, not stored). Concurrent
    deliveries to one inbox are decided together in one transaction (group commit), each
    answered only after that commit. On an inbox that declares a webhook, its sender may
    authenticate with its signature instead of a bearer token (Standard Webhooks,
    GitHub or Stripe headers, below): a good one is decided like any delivery, keyed by
    the webhook's own id, with the signature recorded (never the secret); a missing,
    bad or stale one is 401 and nothing is stored."""
    # Refusals come in the order of the other routes: 401, 403, then 404 (unknown inbox)
    # or 400 (bad header). The group commit turn checks the token again as it decides.
    svc: Service = request.app.state.service
    scope = request.scope
    inbox: str = scope["path_params"]["inbox"]

    def count(reason: str) -> None:
        svc.metrics.refused(inbox, reason)

    who = await svc.gate.admit_delivery(scope, count)
    if isinstance(who, Sender):  # its key and body are what its signature stands for
        decision = await svc.group.submit(inbox, Delivery(body=who.body), who)
        return Response(decision_json(decision), status_for(decision), media_type=JSON)
    headers = ours(scope)
    try:
        codec = svc.box.inbox(inbox).codec
        lease_token = parse_lease_token(headers.get(b"oncebox-lease-token"))
        if not headers.get(b"oncebox-key") and needs_key(codec):
            # The sender's misconfiguration, not bad content: refused, nothing stored.
            detail = f"inbox {inbox} is identified by the Oncebox-Key header: send it"
            raise ProblemError(400, "missing-key", detail)
    except (OnceboxError, ProblemError):
        await svc.gate.confirm(scope)  # no turn will check the token: 401 comes first
        raise
    delivery = Delivery(
        body=who.body,
        key=headers.get(b"oncebox-key"),
        snapshot_id=headers.get(b"oncebox-snapshot"),
        device_time=headers.get(b"oncebox-device-time"),
        delivery_id=headers.get(b"oncebox-delivery-id"),
        lease_token=lease_token,
    )
    overflow: Overflow | None = scope.get(OVERSIZE_KEY)
    if overflow is not None:  # over the inbox's bound: its head, length and SHA-256
        delivery = overflow.instead_of(delivery)
    decision = await svc.group.submit(inbox, delivery, who)
    return Response(decision_json(decision), status_for(decision), media_type=JSON)
