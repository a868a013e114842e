"""Health: is the process up, and does the store take a write (no token needed)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from oncebox.surfaces.http.models import Status
from oncebox.surfaces.http.openapi import errors

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
    probe under way rather than start their own. A fresh answer is read without a lock
    or a thread (:meth:`cached`), so a flood of probes costs less than ``/healthz``.
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
        # (fresh until, the failure or None), replaced whole: read without the lock.
        self._last: tuple[float, Exception | None] = (float("-inf"), None)

    def cached(self) -> bool:
        """True if the last answer is fresh and was ready; raise it if it was a failure;
        False if it is stale. Never blocks (the event loop may call it)."""
        until, failure = self._last
        if self.clock() >= until:
            return False
        if failure is not None:
            # A fresh traceback each time: re-raising one exception object would grow
            # its traceback on every request of the flood.
            raise failure.with_traceback(None)
        return True

    def check(self) -> None:
        """Return if the store is ready, else raise what its probe raised: the last
        answer while it is fresh, else a new probe's (may block: call it in a thread)."""
        with self._lock:
            if self.cached():  # another request probed while this one waited
                return
            try:
                self.probe()
            except Exception as exc:
                self._last = (self.clock() + self.ttl, exc)
                raise
            self._last = (self.clock() + self.ttl, None)


async def readiness(request: Request) -> Readiness:
    found: Readiness = request.app.state.readiness
    return found


Ready = Annotated[Readiness, Depends(readiness)]


@router.get(
    "/healthz",
    response_model=Status,
    summary="The process is up (no auth)",
    response_description="Up",
    responses=errors(401, e401=BODY_NEEDS_TOKEN),
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
)
async def readyz(ready: Ready) -> Status:
    """Writes a probe row, so that a full disk or a read-only store shows as not ready;
    at most once a second in each worker (:class:`Readiness`)."""
    if not ready.cached():
        await run_in_threadpool(ready.check)
    return Status(status="ready")
