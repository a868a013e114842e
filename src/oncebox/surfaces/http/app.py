"""The HTTP API: ``create_app`` puts the routers, the middleware and the console together.

No rule lives here or in the routers: handlers translate requests into engine calls and
decisions into statuses (the table is in :mod:`oncebox.surfaces.http.routes.deliveries`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from oncebox.engine.box import Oncebox
from oncebox.engine.tokens import ReplayGuard
from oncebox.errors import OnceboxError
from oncebox.surfaces.http import openapi, problems
from oncebox.surfaces.http.access import Service
from oncebox.surfaces.http.auth import Gate
from oncebox.surfaces.http.console import BASE as CONSOLE
from oncebox.surfaces.http.console import MAX_FORM, mount_console
from oncebox.surfaces.http.groupcommit import GroupCommit
from oncebox.surfaces.http.hotroute import HotRoute
from oncebox.surfaces.http.metrics import Metrics
from oncebox.surfaces.http.middleware import BoundedBody, HeadCheck, Timing
from oncebox.surfaces.http.news import News
from oncebox.surfaces.http.problems import ProblemError
from oncebox.surfaces.http.routes import ROUTERS, TAGS
from oncebox.surfaces.http.routes.deliveries import deliver
from oncebox.surfaces.http.routes.health import Readiness
from oncebox.surfaces.http.senders import DEFAULT_BUDGET, Senders
from oncebox.surfaces.http.slashes import redirect_slashes_relatively

DESCRIPTION = (
    "oncebox turns at-least-once, out-of-order and sometimes corrupted deliveries into "
    "exactly-once effects, with nothing lost silently. Every error is an RFC 9457 problem "
    "document (`application/problem+json`); a decision never is one, so `Content-Type` "
    "alone tells them apart. Tokens come from `oncebox token create`; a token created "
    "with `--hmac` signs every request (`Oncebox-Timestamp`, `Oncebox-Signature`)."
)


def _operation_id(route: APIRoute) -> str:
    """The handler's name: stable, short and unique (a test keeps it unique)."""
    return route.name


def create_app(
    box: Oncebox,
    *,
    max_body: int = 1_048_576,
    batch_limit: int = 1000,
    private_key: bytes | None = None,
    clock: Callable[[], float] = time.time,
    group_wait: float = 0.002,
    group_max: int = 256,
    unverified_budget: int = DEFAULT_BUDGET,
) -> FastAPI:
    """The oncebox HTTP API over ``box``.

    ``private_key`` (Ed25519 PEM) signs checkpoints; ``clock`` is the clock HMAC request
    timestamps are checked against; ``group_wait``/``group_max`` tune group commit;
    ``unverified_budget`` bounds the bytes of webhook bodies not verified yet that this
    app holds at once.
    """
    group = GroupCommit(box, max_wait=group_wait, max_batch=group_max)
    metrics = Metrics(box, group)
    gate = Gate(
        box,
        # The routers' own routes: FastAPI 0.165 wraps included routers in a route that
        # matches without giving its path parameters, which would hide every inbox.
        [route for router in ROUTERS for route in router.routes],
        # Kept in the store: every server process (and host) refuses a replayed signature.
        replays=ReplayGuard(clock=clock, store=box.store),
        clock=clock,
        senders=Senders(box, unverified_budget, metrics.refused),
    )
    app = FastAPI(
        title="oncebox",
        version="1",
        summary="Exactly-once intake over HTTP",
        description=DESCRIPTION,
        openapi_url="/openapi.json",
        docs_url=None,
        redoc_url=None,
        servers=[{"url": "/", "description": "The server that serves this document."}],
        license_info={"name": "Apache-2.0", "identifier": "Apache-2.0"},
        openapi_tags=TAGS,
        generate_unique_id_function=_operation_id,
    )
    app.state.service = Service(box, group, metrics, gate, private_key, batch_limit, News(box))
    app.state.gate = gate
    app.state.box = box
    app.state.group_commit = group
    app.state.metrics = metrics
    # box.probe looked up at each probe, not once here: a stand-in set later is used.
    app.state.readiness = Readiness(lambda: box.probe())
    for router in ROUTERS:
        app.include_router(router)
    redirect_slashes_relatively(app.router)  # never to the host a request's head names

    app.add_exception_handler(ProblemError, problems.on_problem)
    app.add_exception_handler(OnceboxError, problems.on_oncebox_error)
    app.add_exception_handler(StarletteHTTPException, problems.on_http_error)
    app.add_exception_handler(RequestValidationError, problems.on_validation_error)
    app.add_exception_handler(Exception, problems.on_unexpected)
    # Each one added wraps the ones before. From the outside in: latency covers
    # everything, the gate refuses from the head alone, the bound runs before any
    # parsing, and the one-delivery route is called as soon as its body is read.
    app.add_middleware(HotRoute, endpoint=deliver, handlers=app.exception_handlers)
    app.add_middleware(BoundedBody, max_body=max_body)
    app.add_middleware(HeadCheck, gate=gate, form_prefix=CONSOLE, form_limit=MAX_FORM)
    app.add_middleware(Timing, metrics=metrics)
    openapi.install(app)
    mount_console(app, box, private_key=private_key)
    return app
