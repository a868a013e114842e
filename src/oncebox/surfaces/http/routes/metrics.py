"""``GET /metrics``: Prometheus figures of the inboxes the token covers."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from oncebox.engine.tokens import Scope as TokenScope
from oncebox.surfaces.http.access import Served
from oncebox.surfaces.http.auth import Authed, needs
from oncebox.surfaces.http.openapi import AUTHENTICATED, errors

TAG = {"name": "metrics", "description": "Prometheus and OpenMetrics exposition."}
router = APIRouter(tags=["metrics"])
TEXT = {"schema": {"type": "string"}}


@router.get(
    "/metrics",
    summary="Prometheus metrics (a read token; figures of the inboxes it covers)",
    description="Per-inbox series for the inboxes the token covers; the series "
    "without an inbox label (seal lag, group commit, request latency by route) only "
    "for a token for every inbox (`*`). OpenMetrics with "
    "`Accept: application/openmetrics-text`, else the Prometheus text format 0.0.4.",
    response_class=Response,
    responses={
        200: {
            "description": "The exposition",
            "content": {"text/plain": TEXT, "application/openmetrics-text": TEXT},
        },
        **errors(*AUTHENTICATED, 413),
    },
)
@needs(TokenScope.READ)
def prometheus(who: Authed, svc: Served, request: Request) -> Response:
    body, media = svc.metrics.render(who, request.headers.get("accept"))
    return Response(body, headers={"Content-Type": media})
