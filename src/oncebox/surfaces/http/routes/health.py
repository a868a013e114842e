"""Health: is the process up, and does the store take a write (no token needed)."""

from __future__ import annotations

from fastapi import APIRouter

from oncebox.surfaces.http.access import Served
from oncebox.surfaces.http.models import Status
from oncebox.surfaces.http.openapi import PUBLIC, errors

TAG = {"name": "health", "description": "Liveness and readiness probes; no token needed."}
router = APIRouter(tags=["health"])
BODY_NEEDS_TOKEN = (
    "The request carries a body without a live token (on any route, a body needs one); "
    "a request without a body needs none here."
)


@router.get(
    "/healthz",
    response_model=Status,
    summary="The process is up (no auth)",
    response_description="Up",
    responses=errors(401, e401=BODY_NEEDS_TOKEN),
    openapi_extra=PUBLIC,
)
def healthz() -> Status:
    """Answers while the process serves requests; it does not touch the store."""
    return Status(status="ok")


@router.get(
    "/readyz",
    response_model=Status,
    summary="The store is reachable and takes a write (no auth)",
    response_description="Ready",
    responses=errors(
        401,
        e401=BODY_NEEDS_TOKEN,
        e503="The store does not answer or does not take a write.",
    ),
    openapi_extra=PUBLIC,
)
def readyz(svc: Served) -> Status:
    """Writes a probe row, so that a full disk or a read-only store shows as not ready."""
    svc.box.probe()
    return Status(status="ready")
