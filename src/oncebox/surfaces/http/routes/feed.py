"""``GET /v1/inboxes/{inbox}/feed``: what was accepted, handed on in log order, as JSON
pages (long-polled with ``wait``) or as Server-Sent Events, resumable where they broke."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import StreamingResponse

from oncebox.engine.feed import PAGE_MAX, FeedPage
from oncebox.engine.following import WAIT_MAX
from oncebox.engine.tokens import Scope as TokenScope
from oncebox.surfaces.digits import whole
from oncebox.surfaces.http.access import InboxName, Served
from oncebox.surfaces.http.auth import Authed, needs
from oncebox.surfaces.http.models import FeedEntryOut, FeedPageOut
from oncebox.surfaces.http.news import News, following
from oncebox.surfaces.http.openapi import inbox_errors
from oncebox.surfaces.views import as_json

TAG = {
    "name": "feed",
    "description": "Accepted records and accepted revisions in log order, to follow with a "
    "cursor (a log position): JSON pages, long-polled, or Server-Sent Events; and durable "
    "consumers whose cursors the store keeps.",
}
router = APIRouter(tags=["feed"])
EVENT_STREAM = "text/event-stream"
HEARTBEAT = 15.0  # seconds between SSE comments when nothing happens

After = Annotated[
    int, Query(ge=0, lt=2**63, description="Read after this log position (0: from the start).")
]
Limit = Annotated[int, Query(ge=1, le=PAGE_MAX, description="At most this many entries.")]
Wait = Annotated[
    float,
    Query(ge=0, le=WAIT_MAX, description="Seconds to wait for an entry when none is there."),
]


def entry_json(entry: Any) -> dict[str, Any]:
    return as_json(entry)


@router.get(
    "/v1/inboxes/{inbox}/feed",
    response_model=FeedPageOut,
    summary="Accepted records and revisions after a log position, in log order",
    response_description="A page, and the position to read on after",
    responses={
        **inbox_errors(),
        200: {
            "description": "A page as JSON; with `Accept: text/event-stream`, the same "
            "entries as Server-Sent Events (`event: entry`, `id:` its position) that go on "
            "as new ones are sealed; resume with `Last-Event-ID`.",
            "content": {EVENT_STREAM: {"schema": {"type": "string"}}},
        },
    },
)
@needs(TokenScope.READ, on_inbox=True)
async def feed(
    inbox: InboxName,
    who: Authed,
    svc: Served,
    request: Request,
    after: After = 0,
    limit: Limit = 100,
    wait: Wait = 0.0,
) -> Any:
    """The inbox's accepted records and accepted revisions after log position `after`,
    in log order, each with an idempotency key that is the same on every read of that
    revision. `wait` long-polls up to 30 s when nothing is there. A page answers with
    `next_after`: read on from it (it passes positions of other inboxes too, so a quiet
    inbox's reader never reads the same stretch twice)."""
    box = svc.box
    svc.box.inbox(inbox)  # 404 for an unknown one, before any stream starts

    def read(position: int) -> FeedPage:
        return box.feed(inbox, after=position, limit=limit)

    def live() -> bool:
        return who.still_live(box)

    if EVENT_STREAM in request.headers.get("accept", ""):
        resumed = request.headers.get("last-event-id", "")
        resumed_at = whole(resumed)
        start = after if resumed_at is None else resumed_at
        return StreamingResponse(
            _events(read, svc.news, start, request, live), media_type=EVENT_STREAM,
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )  # fmt: skip
    page = await following(read, svc.news, after, wait, live)
    return FeedPageOut(
        entries=[FeedEntryOut(**entry_json(e)) for e in page.entries], next_after=page.next_after
    )


async def _events(
    read: Callable[[int], FeedPage],
    news: News,
    after: int,
    request: Request,
    live: Callable[[], bool],
) -> AsyncIterator[bytes]:
    """Entries as they are sealed, each an SSE event whose id is its position; a comment
    now and then keeps proxies from closing a quiet stream. The stream is one request
    that lasts as long as the client likes, so its token is asked again (``live``: not
    revoked, not expired) before each page and heartbeat: once it is not, the stream
    ends, and a reconnect is refused as any request of it is."""
    quiet_since = time.monotonic()
    while not await request.is_disconnected():
        page = await following(read, news, after, HEARTBEAT)
        if not await run_in_threadpool(live):
            return
        for entry in page.entries:
            data = json.dumps(entry_json(entry), separators=(",", ":"))
            yield f"event: entry\nid: {entry.position}\ndata: {data}\n\n".encode()
        if page.entries:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= HEARTBEAT:
            yield f": position {page.next_after}\n\n".encode()
            quiet_since = time.monotonic()
        after = page.next_after
