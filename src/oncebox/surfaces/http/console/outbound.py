"""The Forwarding pages' routes and forms: the destinations, a destination's forwards,
one forward; pause, resume, send one again, send again all that match.

Each form is an :data:`~session.Actor` (a live session, its CSRF value checked) and acts
only on a destination whose inbox the session's token has the operator scope for; the
engine does it as the token's name, so the log names who did it. After a form, the
answer is 303 to the page that shows what happened, with its filters kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse, Response

from oncebox.domain.forwarding import ForwardStatus
from oncebox.engine.box import Oncebox
from oncebox.engine.sessions import Session
from oncebox.errors import OnceboxError, ReadTimedOut
from oncebox.surfaces.http.console import forwarding
from oncebox.surfaces.http.console import html as h
from oncebox.surfaces.http.console.html import BASE, HEADERS
from oncebox.surfaces.http.console.session import Actor, Served, Viewer, refused
from oncebox.surfaces.http.problems import RETRY_AFTER

router = APIRouter(prefix=BASE, include_in_schema=False)
MISSING = "No destination {} in your inboxes."


def _to(href: str) -> Response:
    return RedirectResponse(href, status_code=303, headers=HEADERS)


def _kept(fields: Mapping[str, str]) -> dict[str, str]:
    """The deliveries page's filters a form carried (``f_status`` and so on)."""
    return {name: fields.get(f"f_{name}", "") for name in forwarding.FILTERS}


# -- pages ---------------------------------------------------------------------------------------
@router.get("/forwarding")
async def destinations(request: Request, who: Viewer, svc: Served) -> Response:
    def page() -> str:
        banner = forwarding.overview_banner(svc.box, who, request.query_params)
        return forwarding.overview(svc.box, who, svc.covered(who), banner)

    return h.respond(await run_in_threadpool(page))


@router.get("/forwarding/deliveries/{forward_id:int}")
async def one_forward(forward_id: int, request: Request, who: Viewer, svc: Served) -> Response:
    found = await run_in_threadpool(forwarding.shown_forward, svc.box, who, forward_id)
    if found is None:
        return refused(who, f"No forward {forward_id} in your inboxes.", 404)
    back = forwarding.filtered(found[0].destination, request.query_params)
    page = await run_in_threadpool(forwarding.forward_page, svc.box, who, *found, back)
    return h.respond(page)


@router.get("/forwarding/{destination}/deliveries")
async def deliveries(destination: str, request: Request, who: Viewer, svc: Served) -> Response:
    params = request.query_params
    ask = forwarding.asked(destination, params)

    def page() -> str | None:
        found = forwarding.standing(svc.box, who, destination)
        if found is None:
            return None
        said = forwarding.deliveries_banner(svc.box, who, params)
        wanted = params.get("bulk") == "retry"
        return forwarding.deliveries(svc.box, who, found, ask, said, wanted)

    try:
        shown = await svc.readers.run(page)
    except ReadTimedOut as exc:
        return refused(who, str(exc), 503, {"Retry-After": RETRY_AFTER})
    if shown is None:
        return refused(who, MISSING.format(destination[:64]), 404)
    return h.respond(shown)


# -- forms ---------------------------------------------------------------------------------------
def _acting(box: Oncebox, who: Session, destination: str) -> bool:
    found = forwarding.standing(box, who, destination)
    return found is not None and forwarding.may_act(who, found.destination.inbox)


@router.post("/forwarding/{destination}/pause")
async def pause(destination: str, form: Actor, svc: Served) -> Response:
    return await _mark(destination, form, svc, paused=True)


@router.post("/forwarding/{destination}/resume")
async def resume(destination: str, form: Actor, svc: Served) -> Response:
    return await _mark(destination, form, svc, paused=False)


async def _mark(destination: str, form: Actor, svc: Served, paused: bool) -> Response:
    who = form.who
    if not await run_in_threadpool(_acting, svc.box, who, destination):
        return refused(who, MISSING.format(destination[:64]), 404)
    act = svc.box.pause_destination if paused else svc.box.resume_destination
    await run_in_threadpool(act, destination, who.token.name)
    said = "paused" if paused else "resumed"
    return _to(f"{BASE}/forwarding?{said}={quote(destination, safe='')}")


@router.post("/forwarding/deliveries/{forward_id:int}/retry")
async def retry_one(forward_id: int, form: Actor, svc: Served) -> Response:
    who = form.who
    found = await run_in_threadpool(forwarding.shown_forward, svc.box, who, forward_id)
    if found is None or not forwarding.may_act(who, _inbox(svc.box, found[0].destination)):
        return refused(who, f"No forward {forward_id} in your inboxes.", 404)
    try:
        await run_in_threadpool(svc.box.retry_forward, forward_id, who.token.name)
    except OnceboxError as exc:
        return refused(who, f"Not sent again: {exc}", 409)
    back = forwarding.filtered(found[0].destination, _kept(form.fields), retried=str(forward_id))
    return _to(back)


def _inbox(box: Oncebox, destination: str) -> str:
    return box.destination(destination).inbox


@router.post("/forwarding/{destination}/retry")
async def retry_all(destination: str, form: Actor, svc: Served) -> Response:
    """Every forward the page's filters select (dead or failed) sent again, as the
    preview counted them (and any that matched since)."""
    who, kept = form.who, _kept(form.fields)
    if not await run_in_threadpool(_acting, svc.box, who, destination):
        return refused(who, MISSING.format(destination[:64]), 404)
    ask = forwarding.asked(destination, kept)
    if ask.chosen is None or ask.fields["status"] not in forwarding.RETRIABLE:
        problems = "; ".join(ask.problems) or "Choose the dead or the failed ones to send again."
        return refused(who, problems, 422)
    chosen = ask.chosen
    assert chosen.status in (ForwardStatus.DEAD, ForwardStatus.FAILED)
    try:
        sent = await run_in_threadpool(svc.box.retry_forwards, chosen, who.token.name)
    except OnceboxError as exc:
        return refused(who, f"Not sent again: {exc}", 409)
    return _to(forwarding.filtered(destination, kept, retried_all=str(sent)))
