"""The HTTP API: handlers translate requests into engine calls and decisions into statuses.

No rule lives here. What a status means for a client:

| status | verdict | may_ack | meaning |
| --- | --- | --- | --- |
| 201 | accepted | true | a new record |
| 200 | duplicate | true | seen before; safe to ack |
| 200 | conflict | true | quarantined for an operator; safe to ack |
| 422 | rejected (bad input) | true | dead-lettered; safe to ack, resending will not help |
| 409 | rejected (stale_token, expired_lease) | false | not stored: take a new lease |
| 503 | (problem document) | - | storage unavailable: retry after Retry-After |
"""

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from oncebox.engine.box import Oncebox
from oncebox.engine.decision import UNSTORED, Decision, Verdict
from oncebox.engine.tokens import (
    ALL_INBOXES,
    ReplayGuard,
    SignatureRefused,
    Token,
    check_signature,
)
from oncebox.engine.tokens import Scope as TokenScope
from oncebox.errors import OnceboxError
from oncebox.formats import Delivery
from oncebox.formats.jsontext import compact_encoder
from oncebox.surfaces.http import problems
from oncebox.surfaces.http.console import BASE as CONSOLE
from oncebox.surfaces.http.console import MAX_FORM, mount_console
from oncebox.surfaces.http.gate import BODY_LIMIT_KEY, Gate, RouteNeeds, bearer_secret
from oncebox.surfaces.http.groupcommit import Credential, GroupCommit
from oncebox.surfaces.http.metrics import Metrics
from oncebox.surfaces.http.problems import Problem, ProblemError
from oncebox.surfaces.http.signing import document_signing, request_target
from oncebox.surfaces.http.strictbody import StrictJSONRoute
from oncebox.surfaces.lines import delivery_from_line, split_json_array
from oncebox.surfaces.views import as_json, work_key_json

BODY_KEY = "oncebox.body"
INT64_MAX = 2**63 - 1  # ids and tokens are 64-bit in both stores; larger ones are refused
RowId = Annotated[int, Path(ge=1, le=INT64_MAX)]
NDJSON = "application/x-ndjson"
JSON = "application/json"
DELIVERY_HEADERS = (
    "Oncebox-Key",
    "Oncebox-Snapshot",
    "Oncebox-Lease-Token",
    "Oncebox-Device-Time",
    "Oncebox-Delivery-Id",
)


# -- response and request models (the OpenAPI document) ----------------------------------
class DecisionOut(BaseModel):
    inbox: str
    verdict: Literal["accepted", "duplicate", "conflict", "rejected"]
    may_ack: bool
    reason: str | None = None
    detail: str | None = None
    identity: str | None = None
    witness: str | None = None
    record_id: int | None = None
    revision: int | None = None
    quarantine_id: int | None = None
    first_quarantine: bool = False
    dead_letter_id: int | None = None
    late_replay: bool = False
    log_position: int | None = None


class BatchOut(BaseModel):
    decisions: list[DecisionOut]


class LeaseIn(BaseModel):
    scope: str = Field(min_length=1, max_length=256)
    ttl: float = Field(default=60.0, gt=0, le=86_400 * 366)


class LeaseOut(BaseModel):
    inbox: str
    scope: str
    token: int
    expires_at: float


class ReleasedOut(BaseModel):
    inbox: str
    scope: str
    released: int


class ResolveIn(BaseModel):
    action: Literal["keep", "accept"]
    note: str = Field(min_length=1, max_length=4096)


class WorkKeyIn(BaseModel):
    seller_id: str
    sku: str
    marketplace_id: str


class Status(BaseModel):
    status: str


def _problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {
        status: {
            "model": Problem,
            "content": {problems.MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }


AUTH_PROBLEMS = (401, 403, 413, 422, 503)
BODY_PROBLEMS = (400, *AUTH_PROBLEMS)  # 400: a JSON body that is not even UTF-8


_DECISION_ENCODE = compact_encoder(sort_keys=False, ensure_ascii=False)


def decision_json(decision: Decision) -> bytes:
    """``decision.to_dict()`` as JSON (as JSONResponse encodes it), without the deep copy."""
    data = dict(vars(decision))
    data["verdict"] = decision.verdict.value
    return _DECISION_ENCODE(data).encode()


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
        return 409 if decision.reason in UNSTORED else 422
    return 200  # duplicate, conflict: stored (or counted), safe to ack


# -- body bound ----------------------------------------------------------------------------
class BoundedBody:
    """Reads at most ``max_body + 1`` bytes before anything parses the body; 413 beyond.

    The body is kept for the request (signature checks and handlers read it from there)
    and replayed to the app, so nothing downstream reads an unbounded stream. The gate
    may set a smaller bound for a request (``BODY_LIMIT_KEY``). A 413 closes the
    connection: the rest of that body is never read.
    """

    def __init__(self, app: ASGIApp, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit: int = scope.get(BODY_LIMIT_KEY, self.max_body)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._too_large(limit, scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await self._too_large(limit, scope, receive, send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        scope[BODY_KEY] = body
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, limit: int, scope: Scope, receive: Receive, send: Send) -> None:
        response = problems.problem_response(
            413, "too-large", f"the request body exceeds {limit} bytes", {"Connection": "close"}
        )
        await response(scope, receive, send)


class Timing:
    """Request latency by method, route template and status."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [500]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self.metrics.latency.labels(scope["method"], template, str(status[0])).observe(
                time.perf_counter() - start
            )


# -- authentication and authorization ---------------------------------------------------------
bearer = HTTPBearer(auto_error=False, description="An API token: `oncebox token create`.")


@dataclass(frozen=True)
class Caller:
    token: Token
    body: bytes

    def require(self, scope: TokenScope, inbox: str) -> None:
        if not self.token.has(scope):
            raise ProblemError(403, "forbidden", f"this token lacks the {scope} scope")
        if not self.token.covers(inbox):
            raise ProblemError(403, "forbidden", f"this token may not use inbox {inbox!r}")


def _unauthorized(detail: str) -> ProblemError:
    return ProblemError(401, "unauthorized", detail, headers={"WWW-Authenticate": "Bearer"})


def create_app(
    box: Oncebox,
    *,
    max_body: int = 1_048_576,
    batch_limit: int = 1000,
    private_key: bytes | None = None,
    clock: Callable[[], float] = time.time,
    group_wait: float = 0.002,
    group_max: int = 256,
) -> FastAPI:
    """The oncebox HTTP API over ``box``.

    ``private_key`` (Ed25519 PEM) signs checkpoints; ``clock`` is the clock HMAC request
    timestamps are checked against; ``group_wait``/``group_max`` tune group commit.
    """
    group = GroupCommit(box, max_wait=group_wait, max_batch=group_max)
    metrics = Metrics(box, group)
    # Kept in the store: every server process (and host) refuses a replayed signature.
    replays = ReplayGuard(clock=clock, store=box.store)
    app = FastAPI(
        title="oncebox",
        version="1",
        summary="Exactly-once intake over HTTP",
        openapi_url="/openapi.json",
        docs_url=None,
        redoc_url=None,
    )
    # Control bodies (leases, resolutions, work keys) are read by the strict JSON reader.
    app.router.route_class = StrictJSONRoute
    app.state.box = box
    app.state.group_commit = group
    app.state.metrics = metrics

    app.add_exception_handler(ProblemError, problems.on_problem)
    app.add_exception_handler(OnceboxError, problems.on_oncebox_error)
    app.add_exception_handler(StarletteHTTPException, problems.on_http_error)
    app.add_exception_handler(RequestValidationError, problems.on_validation_error)
    app.add_exception_handler(Exception, problems.on_unexpected)
    # The scope each route's check asks for (see needs()), for the gate to check early.
    required: dict[Callable[..., object], TokenScope] = {}
    # Outermost first: latency covers everything, the gate refuses from the head alone,
    # the bound runs before any parsing.
    app.add_middleware(BoundedBody, max_body=max_body)
    app.add_middleware(
        Gate,
        authenticate=box.authenticate,
        needs=RouteNeeds(app.router.routes, required),
        form_prefix=CONSOLE,
        form_limit=MAX_FORM,
    )
    app.add_middleware(Timing, metrics=metrics)

    def admitted(token: Token | None, scope: Scope) -> Caller:
        """The caller, if ``token`` is live and a signing token's signature is good."""
        if token is None:
            raise _unauthorized("unknown or revoked token")
        body: bytes = scope.get(BODY_KEY, b"")
        if token.hmac_key is not None:
            try:
                signature = check_signature(
                    token.hmac_key,
                    scope["headers"],
                    scope["method"],
                    request_target(scope),
                    body,
                    clock(),
                )
            except SignatureRefused as exc:
                raise _unauthorized(str(exc)) from None
            if not replays.first_use(signature):
                raise _unauthorized("this signed request was seen before (replay)")
        return Caller(token, body)

    async def caller(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> Caller:
        if credentials is None:
            raise _unauthorized("send Authorization: Bearer <token>")
        token = await run_in_threadpool(box.authenticate, credentials.credentials)
        # Off the event loop: a signed request's replay check writes to the store.
        return await run_in_threadpool(admitted, token, request.scope)

    Authed = Annotated[Caller, Depends(caller)]

    def needs(scope: TokenScope) -> Callable[[str, Caller], Awaitable[Caller]]:
        async def check(inbox: str, who: Authed) -> Caller:
            who.require(scope, inbox)
            return who

        required[check] = scope
        return check

    Writer = Annotated[Caller, Depends(needs(TokenScope.WRITE))]
    Reader = Annotated[Caller, Depends(needs(TokenScope.READ))]
    Operator = Annotated[Caller, Depends(needs(TokenScope.OPERATOR))]

    def reader_of_anything(who: Caller) -> None:
        if not who.token.has(TokenScope.READ):
            raise ProblemError(403, "forbidden", "this token lacks the read scope")

    # -- deliveries ----------------------------------------------------------------------
    raw_body = {
        "requestBody": {
            "required": True,
            "description": "The delivery exactly as received, in the inbox codec's form "
            "(a json-event object, an H1 frame, a feed payload).",
            "content": {
                "application/json": {"schema": {"type": "string", "format": "binary"}},
                "text/plain": {"schema": {"type": "string", "format": "binary"}},
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
            },
        }
    }

    # The hot route takes the raw request, so that no per-request validation runs; its
    # parameters are documented here by hand, and it answers with a pre-encoded body.
    deliver_doc = {
        **raw_body,
        "parameters": [
            {"in": "path", "name": "inbox", "required": True, "schema": {"type": "string"}},
            *(
                {"in": "header", "name": name, "required": False, "schema": {"type": "string"}}
                for name in DELIVERY_HEADERS
            ),
        ],
        "security": [{"HTTPBearer": []}],
    }

    @app.post(
        "/v1/inboxes/{inbox}/deliveries",
        status_code=201,
        response_model=DecisionOut,
        summary="Deliver one message; answers with its decision",
        responses={
            200: {"model": DecisionOut, "description": "duplicate or conflict: safe to ack"},
            409: {
                "model": DecisionOut,
                "description": "stale token or expired lease: not "
                "stored, may_ack false; take a new lease",
            },
            422: {"model": DecisionOut, "description": "invalid: dead-lettered, safe to ack"},
            **_problems(400, 401, 403, 404, 413, 500, 503),
        },
        openapi_extra=deliver_doc,
    )
    async def deliver(request: Request) -> Response:
        # Refusals come in the order of the other routes: 401, 403, then 404 (unknown
        # inbox) or 400 (bad header). The regular case, a declared inbox and good
        # headers, is authenticated in the group commit turn that decides it (see
        # groupcommit); any other case authenticates here first, then refuses.
        scope = request.scope
        inbox: str = scope["path_params"]["inbox"]
        headers = request.headers
        secret = bearer_secret(headers.get("authorization"))
        if secret is None:
            raise _unauthorized("send Authorization: Bearer <token>")
        try:
            box.inbox(inbox)
            lease_token = parse_lease_token(headers.get("oncebox-lease-token"))
        except (OnceboxError, ProblemError):
            token = await run_in_threadpool(box.authenticate, secret)
            caller = await run_in_threadpool(admitted, token, scope)
            caller.require(TokenScope.WRITE, inbox)
            raise

        def admit(token: Token | None) -> None:
            admitted(token, scope).require(TokenScope.WRITE, inbox)

        delivery = Delivery(
            body=scope.get(BODY_KEY, b""),
            key=headers.get("oncebox-key"),
            snapshot_id=headers.get("oncebox-snapshot"),
            device_time=headers.get("oncebox-device-time"),
            delivery_id=headers.get("oncebox-delivery-id"),
            lease_token=lease_token,
        )
        decision = await group.submit(inbox, delivery, Credential(secret, admit))
        return Response(decision_json(decision), status_for(decision), media_type=JSON)

    required[deliver] = TokenScope.WRITE

    @app.post(
        "/v1/inboxes/{inbox}/batch",
        response_model=BatchOut,
        summary="Deliver many messages in one transaction; one decision each, in order",
        responses=_problems(400, 401, 403, 404, 413, 500, 503),
        openapi_extra={
            "requestBody": {
                "required": True,
                "description": f"NDJSON ({NDJSON}), one delivery per line in the line "
                f"forms of `oncebox ingest`, or (application/json) a JSON array of such "
                f"line objects; at most {batch_limit} deliveries.",
                "content": {
                    NDJSON: {"schema": {"type": "string", "format": "binary"}},
                    "application/json": {"schema": {"type": "array", "items": {}}},
                },
            }
        },
    )
    async def deliver_batch(inbox: str, who: Writer, request: Request) -> BatchOut:
        codec = box.inbox(inbox).codec.name
        media = request.headers.get("content-type", NDJSON).split(";")[0].strip().lower()
        if media == "application/json":
            try:
                lines = split_json_array(who.body)
            except ValueError as exc:
                raise ProblemError(400, "bad-batch", str(exc)) from None
        else:
            lines = [line for line in who.body.split(b"\n") if line.strip()]
        if len(lines) > batch_limit:
            raise ProblemError(
                413, "too-many", f"{len(lines)} deliveries; a batch holds at most {batch_limit}"
            )
        deliveries = [delivery_from_line(codec, line) for line in lines]
        decisions = await run_in_threadpool(box.ingest_batch, inbox, deliveries)
        return BatchOut(decisions=[DecisionOut(**d.to_dict()) for d in decisions])

    # -- leases --------------------------------------------------------------------------
    @app.post(
        "/v1/inboxes/{inbox}/leases",
        status_code=201,
        response_model=LeaseOut,
        summary="Take the next fencing token for a scope",
        responses=_problems(*BODY_PROBLEMS, 404, 409),
    )
    def take_lease(inbox: str, who: Writer, lease: LeaseIn) -> LeaseOut:
        return LeaseOut(**box.lease(inbox, lease.scope, lease.ttl).to_dict())

    @app.delete(
        "/v1/inboxes/{inbox}/leases/{scope:path}",
        response_model=ReleasedOut,
        summary="Give a lease up early",
        responses=_problems(*AUTH_PROBLEMS, 404, 409),
    )
    def release_lease(
        inbox: str, scope: str, who: Writer, token: Annotated[int, Query(ge=0, le=INT64_MAX)]
    ) -> ReleasedOut:
        box.release(inbox, scope, token)
        return ReleasedOut(inbox=inbox, scope=scope, released=token)

    # -- the log -------------------------------------------------------------------------
    @app.get(
        "/v1/log/checkpoint",
        summary="The latest checkpoint (signed when the service has a key)",
        responses=_problems(*AUTH_PROBLEMS),
    )
    def checkpoint(who: Authed) -> dict[str, Any]:
        reader_of_anything(who)
        return box.checkpoint(private_key).to_json()

    @app.get(
        "/v1/log/proofs/records/{record_id}",
        summary="An inclusion proof for a record's seal",
        responses=_problems(*AUTH_PROBLEMS, 404, 409),
    )
    def prove_record(record_id: RowId, who: Authed) -> dict[str, Any]:
        inbox = box.record_inbox(record_id)
        if inbox is None:
            raise ProblemError(404, "not-found", f"no record {record_id}")
        who.require(TokenScope.READ, inbox)
        return box.prove(record_id)

    @app.get(
        "/v1/log/proofs/consistency",
        summary="A consistency proof between two tree sizes",
        responses=_problems(*AUTH_PROBLEMS, 409),
    )
    def prove_consistency(
        who: Authed,
        old: Annotated[int, Query(ge=0)],
        new: Annotated[int | None, Query(ge=0)] = None,
    ) -> dict[str, Any]:
        reader_of_anything(who)
        return box.prove_consistency(old, new)

    # -- operators -----------------------------------------------------------------------
    def quarantine_json(inbox: str, row: Any) -> dict[str, Any]:
        return as_json(row, inbox=inbox, original=box.original(row))

    @app.get(
        "/v1/inboxes/{inbox}/quarantine",
        summary="Quarantined newcomers, each with the original record",
        responses=_problems(*AUTH_PROBLEMS, 404),
    )
    def list_quarantine(
        inbox: str,
        who: Reader,
        status: Literal["open", "kept", "accepted", "all"] = "open",
        limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
    ) -> list[dict[str, Any]]:
        rows = box.quarantined(inbox, None if status == "all" else status, limit)
        return [quarantine_json(inbox, row) for row in rows]

    def visible_quarantine(quarantine_id: int, who: Caller, scope: TokenScope) -> None:
        found = box.get_quarantine(quarantine_id)
        if found is None:
            raise ProblemError(404, "not-found", f"no quarantine row {quarantine_id}")
        who.require(scope, found[0])

    @app.get(
        "/v1/quarantine/{quarantine_id}",
        summary="One quarantined newcomer beside the original",
        responses=_problems(*AUTH_PROBLEMS, 404),
    )
    def show_quarantine(quarantine_id: RowId, who: Authed) -> dict[str, Any]:
        visible_quarantine(quarantine_id, who, TokenScope.READ)
        found = box.get_quarantine(quarantine_id)
        assert found is not None
        return quarantine_json(*found)

    @app.post(
        "/v1/quarantine/{quarantine_id}/resolve",
        summary="Keep the original or accept the newcomer, with a note",
        responses=_problems(*BODY_PROBLEMS, 404, 409),
    )
    def resolve_quarantine(
        quarantine_id: RowId, who: Authed, resolution: ResolveIn
    ) -> dict[str, Any]:
        visible_quarantine(quarantine_id, who, TokenScope.OPERATOR)
        row = box.resolve(quarantine_id, resolution.action, resolution.note)
        found = box.get_quarantine(row.id)
        assert found is not None
        return quarantine_json(*found)

    @app.get(
        "/v1/inboxes/{inbox}/dead-letters",
        summary="Invalid deliveries kept with their reason",
        responses=_problems(*AUTH_PROBLEMS, 404),
    )
    def dead_letters(
        inbox: str, who: Reader, limit: Annotated[int, Query(ge=1, le=10_000)] = 100
    ) -> list[dict[str, Any]]:
        return [as_json(row, inbox=inbox) for row in box.dead_letters(inbox, limit)]

    @app.get(
        "/v1/inboxes/{inbox}/work",
        summary="Work keys and their figures (dirty count, in review)",
        responses=_problems(*AUTH_PROBLEMS, 404),
    )
    def work_keys(inbox: str, who: Reader, dirty: bool = False) -> dict[str, Any]:
        rows = box.work_keys(inbox)
        return {
            "figures": box.work_figures(inbox),
            "keys": [work_key_json(row) for row in rows if row.dirty or not dirty],
        }

    @app.get(
        "/v1/inboxes/{inbox}/work/review",
        summary="Work keys waiting for an operator, with their last error",
        responses=_problems(*AUTH_PROBLEMS, 404),
    )
    def work_review(inbox: str, who: Reader) -> list[dict[str, Any]]:
        return [work_key_json(row) for row in box.reconciler(inbox).review()]

    @app.post(
        "/v1/inboxes/{inbox}/work/retry",
        summary="Send a work key back from review",
        responses=_problems(*BODY_PROBLEMS, 404, 409),
    )
    def work_retry(inbox: str, who: Operator, key: WorkKeyIn) -> dict[str, Any]:
        box.reconciler(inbox).retry((key.seller_id, key.sku, key.marketplace_id))
        return {"retried": key.model_dump()}

    # -- health and metrics --------------------------------------------------------------
    @app.get("/healthz", response_model=Status, summary="The process is up (no auth)")
    def healthz() -> Status:
        return Status(status="ok")

    @app.get(
        "/readyz",
        response_model=Status,
        summary="The store is reachable and takes a write (no auth)",
        responses=_problems(503),
    )
    def readyz() -> Status:
        box.probe()
        return Status(status="ready")

    @app.get(
        "/metrics",
        summary="Prometheus metrics (a read token; figures of the inboxes it covers)",
        description="Per-inbox series for the inboxes the token covers; the series "
        "without an inbox label (seal lag, group commit, request latency by route) only "
        "for a token for every inbox (`*`). OpenMetrics with "
        "`Accept: application/openmetrics-text`, else the Prometheus text format 0.0.4.",
        response_class=Response,
        responses={
            200: {
                "content": {
                    "text/plain": {"schema": {"type": "string"}},
                    "application/openmetrics-text": {"schema": {"type": "string"}},
                }
            },
            **_problems(401, 403, 413, 503),
        },
    )
    def prometheus(who: Authed, request: Request) -> Response:
        reader_of_anything(who)
        everything = ALL_INBOXES in who.token.inboxes
        body, media = metrics.render(who.token.covers, everything, request.headers.get("accept"))
        return Response(body, headers={"Content-Type": media})

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title, version=app.version, summary=app.summary, routes=app.routes
            )
            _problem_validation(schema)
            document_signing(schema)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    mount_console(app, box, private_key=private_key)
    return app


def _problem_validation(schema: dict[str, Any]) -> None:
    """FastAPI documents its own validation error shape; ours is a problem document."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components["Problem"] = Problem.model_json_schema()
    components.pop("HTTPValidationError", None)
    components.pop("ValidationError", None)
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.get("responses", {})
            for status, response in responses.items():
                content = response.get("content", {})
                if "application/json" in content and "HTTPValidationError" in str(content):
                    response["content"] = {
                        problems.MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}
                    }
                    response["description"] = "The request is malformed"
                elif status in {"400", "401", "403", "404", "413", "500", "503"} and (
                    "Problem" in str(content)
                ):
                    response["content"] = {
                        problems.MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}
                    }
