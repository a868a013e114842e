"""The console's routes for a working day: the overview (and its part that refreshes in
place), the dead letters' counts by reason (which refresh the same way), and the log a
page at a time. Gathering is in :mod:`.overview`, :mod:`.letters` and :mod:`.pages`."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import HTMLResponse, Response

from oncebox.surfaces.http.console import html as h
from oncebox.surfaces.http.console import letters, overview, pages
from oncebox.surfaces.http.console.html import BASE
from oncebox.surfaces.http.console.session import Actor, Refused, Served, Viewer

router = APIRouter(prefix=BASE, include_in_schema=False)


@router.get("")
async def overview_page(request: Request, who: Viewer, svc: Served) -> Response:
    ask = overview.asked(request.query_params)
    chosen = svc.chosen(who, request)
    page = await run_in_threadpool(overview.page, svc.box, who, chosen, ask)
    return h.respond(page, 400 if ask.problem else 200)


@router.get("/overview.part")
async def overview_part(request: Request, who: Viewer, svc: Served) -> Response:
    """The overview's inboxes alone: what ``static/live.js`` puts in place."""
    ask = overview.asked(request.query_params)
    chosen = svc.chosen(who, request)
    return _part(await run_in_threadpool(overview.part, svc.box, chosen, ask))


@router.get("/dead-letters/counts.part")
async def letter_counts_part(request: Request, who: Viewer, svc: Served) -> Response:
    """The dead letters' totals and counts by reason alone, for ``static/live.js``."""
    ask = letters.asked(request.query_params, svc.covered(who))
    return _part(await run_in_threadpool(letters.counts_part, svc.box, ask))


def _part(text: str) -> HTMLResponse:
    return HTMLResponse(text, headers=h.HEADERS)


@router.get("/log")
async def log(request: Request, who: Viewer, svc: Served) -> Response:
    ask = pages.log_asked(request.query_params)
    page, status = await run_in_threadpool(pages.log, svc.box, who, svc.private_key, None, ask)
    return h.respond(page, status)


@router.post("/log/verify")
async def verify(form: Actor, svc: Served) -> Response:
    if not form.who.may_verify_log:
        raise Refused(403, "The whole log is verified by an operator of every inbox.", form.who)
    result = await run_in_threadpool(svc.box.verify)
    shown = pages.verification(result.to_dict())
    page, status = await run_in_threadpool(pages.log, svc.box, form.who, svc.private_key, shown)
    return h.respond(page, status)
