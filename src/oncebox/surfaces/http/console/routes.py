"""The console's routes: sign-in and sign-out, the pages, and the forms that act.

Each page takes a :data:`~session.Viewer` and each form an :data:`~session.Actor`, so the
session and CSRF checks are written once (:mod:`.session`); no rule lives here.
"""

from __future__ import annotations

import hmac
import secrets

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse, Response

from oncebox.engine.sessions import SESSION_SECONDS
from oncebox.engine.sessions import refusal as sign_in_refusal
from oncebox.errors import OnceboxError
from oncebox.surfaces.http.console import html as h
from oncebox.surfaces.http.console import pages
from oncebox.surfaces.http.console.html import BASE, HEADERS
from oncebox.surfaces.http.console.session import (
    COOKIE,
    SIGNIN_COOKIE,
    Actor,
    Current,
    Served,
    Viewer,
    check_csrf,
    read_form,
    refused,
    signed_out,
)

router = APIRouter(prefix=BASE, include_in_schema=False)


def _done(path: str) -> Response:
    """After a form that changed something: to the page that shows it (303)."""
    return RedirectResponse(f"{BASE}{path}", status_code=303, headers=HEADERS)


# -- sign-in and sign-out ---------------------------------------------------------------------
def signin_page(message: str = "", status: int = 200) -> Response:
    nonce = secrets.token_urlsafe(16)
    body = (
        f"{message}"
        f'<form class="signin" method="post" action="{BASE}/signin">'
        f'<input type="hidden" name="signin" value="{h.e(nonce)}">'
        '<label>Operator token <input type="password" name="token" autocomplete="off" '
        'required autofocus></label><button type="submit">Sign in</button></form>'
        "<p>Create one with <code>oncebox token create NAME --inbox '*' "
        "--scope operator</code>.</p>"
    )
    response = h.page("Sign in", body, None, status)
    response.set_cookie(
        SIGNIN_COOKIE, nonce, max_age=900, path=BASE, httponly=True, samesite="strict"
    )
    return response


@router.get("/signin")
async def signin_form(who: Current) -> Response:
    if who is not None:
        return RedirectResponse(BASE, status_code=303)
    return signin_page()


@router.post("/signin")
async def signin(request: Request, svc: Served) -> Response:
    fields = await read_form(request)
    expected = request.cookies.get(SIGNIN_COOKIE, "")
    given = fields.get("signin", "")
    if not expected or not hmac.compare_digest(given.encode(), expected.encode()):
        return signin_page(h.notice("The sign-in form expired; try again.", "bad"), 403)
    secret = fields.get("token", "").strip()
    token = await run_in_threadpool(svc.box.authenticate, secret) if secret else None
    if token is None:
        return signin_page(h.notice("Unknown or revoked token.", "bad"), 401)
    why = sign_in_refusal(token)
    if why is not None:
        return signin_page(h.notice(f"Refused: {why}.", "bad"), 403)
    previous = request.cookies.get(COOKIE)
    if previous:  # signing in again replaces the browser's session, not adds one
        await run_in_threadpool(svc.sessions.end, previous)
    session_id = await run_in_threadpool(svc.sessions.open, token)
    response = RedirectResponse(BASE, status_code=303, headers=HEADERS)
    response.set_cookie(
        COOKIE,
        session_id,
        max_age=SESSION_SECONDS,
        path=BASE,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    response.delete_cookie(SIGNIN_COOKIE, path=BASE, httponly=True, samesite="strict")
    return response


@router.post("/signout")
async def signout(request: Request, who: Current, svc: Served) -> Response:
    """Ends the session on the server, for every copy of its cookie."""
    if who is not None:
        check_csrf(who, await read_form(request))
        await run_in_threadpool(svc.sessions.end, request.cookies.get(COOKIE, ""))
    return signed_out()


# -- pages ------------------------------------------------------------------------------------
@router.get("")
async def overview(request: Request, who: Viewer, svc: Served) -> Response:
    body = await run_in_threadpool(pages.overview, svc.box, who, svc.chosen(who, request))
    return h.page("Overview", body, who)


@router.get("/quarantine")
async def quarantine(request: Request, who: Viewer, svc: Served) -> Response:
    banner = ""
    done = request.query_params.get("resolved", "")
    if done.isdigit() and len(done) < 19:
        found = await run_in_threadpool(svc.box.get_quarantine, int(done))
        if found is not None and who.token.covers(found[0]):
            banner = h.notice(f"Quarantine #{found[1].id} resolved: {found[1].status}.")
    body = await run_in_threadpool(pages.quarantine, svc.box, who, svc.chosen(who, request))
    return h.page("Quarantine", body, who, banner=banner)


@router.get("/dead-letters")
async def dead_letters(request: Request, who: Viewer, svc: Served) -> Response:
    body = await run_in_threadpool(pages.dead_letters, svc.box, svc.chosen(who, request))
    return h.page("Dead letters", body, who)


@router.get("/work")
async def work(request: Request, who: Viewer, svc: Served) -> Response:
    body = await run_in_threadpool(pages.work, svc.box, who, svc.chosen(who, request))
    banner = h.notice("Sent back from review.") if request.query_params.get("retried") else ""
    return h.page("Work keys", body, who, banner=banner)


@router.get("/log")
async def log(who: Viewer, svc: Served) -> Response:
    body = await run_in_threadpool(pages.log, svc.box, who, svc.private_key, "")
    return h.page("Log", body, who)


# -- forms that act ---------------------------------------------------------------------------
@router.post("/quarantine/{quarantine_id}/resolve")
async def resolve(quarantine_id: int, form: Actor, svc: Served) -> Response:
    who, fields = form.who, form.fields
    found = None
    if 1 <= quarantine_id < 2**63:
        found = await run_in_threadpool(svc.box.get_quarantine, quarantine_id)
    if found is None or not who.token.covers(found[0]):
        return refused(who, f"No quarantine row {quarantine_id} in your inboxes.", 404)
    action, note = fields.get("action", ""), fields.get("note", "").strip()
    if action not in ("keep", "accept") or not note or len(note) > 4096:
        return refused(who, "Choose keep or accept and write a note (up to 4096 chars).", 422)
    try:
        await run_in_threadpool(svc.box.resolve, quarantine_id, action, note)
    except OnceboxError as exc:
        return refused(who, f"Not resolved: {exc}", 409)
    return _done(f"/quarantine?resolved={quarantine_id}")


@router.post("/work/retry")
async def retry(form: Actor, svc: Served) -> Response:
    who, fields = form.who, form.fields
    inbox = fields.get("inbox", "")
    if inbox not in svc.covered(who):
        return refused(who, "That inbox is not yours.", 404)
    key = (fields.get("seller_id", ""), fields.get("sku", ""), fields.get("marketplace_id", ""))
    try:
        await run_in_threadpool(svc.box.reconciler(inbox).retry, key)
    except OnceboxError as exc:
        return refused(who, f"Not retried: {exc}", 409)
    return _done("/work?retried=1")


@router.post("/log/verify")
async def verify(form: Actor, svc: Served) -> Response:
    result = await run_in_threadpool(svc.box.verify)
    shown = pages.verification(result.to_dict())
    body = await run_in_threadpool(pages.log, svc.box, form.who, svc.private_key, shown)
    return h.page("Log", body, form.who)
