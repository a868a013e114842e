"""Health: is the process up, and does the store take a write (no token needed)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Request

from oncebox.surfaces.http.models import Status
from oncebox.surfaces.http.openapi import PUBLIC, errors

TAG = {"name": "health", "description": "Liveness and readiness probes; no token needed."}
router = APIRouter(tags=["health"])
BODY_NEEDS_TOKEN = (
    "The request carries a body without a live token (on any route, a body needs one); "
    "a request without a body needs none here."
)


class Readiness:
    """The answer of the last readiness probe, kept for ``ttl`` seconds.

    ``/readyz`` needs no token, and each probe is a store write: without this a flood of
    probes was a flood of writes, queued with the deliveries'. Kept either way, ready or
    not, so that a failing store is not probed by every request either; a change is
    seen within ``ttl`` (one second) of the last probe. Concurrent requests wait for the
    probe under way rather than start their own.
    """

    def __init__(
        self,
        probe: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
        ttl: float = 1.0,
    ) -> None:
        self.probe = probe
        self.clock = clock
        self.ttl = ttl
        self._lock = threading.Lock()
        self._until = float("-inf")
        self._failure: Exception | None = None

    def check(self) -> None:
        """Return if the store was ready at the last probe, else raise what it raised."""
        with self._lock:
            if self.clock() >= self._until:
                try:
                    self.probe()
                    self._failure = None
                except Exception as exc:
                    self._failure = exc
                self._until = self.clock() + self.ttl
            failure = self._failure
        if failure is not None:
            # A fresh traceback each time: re-raising one exception object would grow
            # its traceback by a frame chain on every request of the flood.
            raise failure.with_traceback(None)


def readiness(request: Request) -> Readiness:
    found: Readiness = request.app.state.readiness
    return found


Ready = Annotated[Readiness, Depends(readiness)]


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
def readyz(ready: Ready) -> Status:
    """Writes a probe row, so that a full disk or a read-only store shows as not ready;
    at most once a second in each worker (:class:`Readiness`)."""
    ready.check()
    return Status(status="ready")
