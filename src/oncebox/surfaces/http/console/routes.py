"""The console's routes: sign-in and sign-out, the pages, and the forms that act.

Each page takes a :data:`~session.Viewer` and each form an :data:`~session.Actor`, so the
session and CSRF checks are written once (:mod:`.session`); no rule lives here.
"""

from __future__ import annotations

import hmac
import json
import secrets
from urllib.parse import quote

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse, Response

from oncebox.domain import NOTE_MAX
from oncebox.engine.finding import RecordView
from oncebox.engine.sessions import SESSION_SECONDS, Session
from oncebox.errors import OnceboxError, ReadTimedOut
from oncebox.surfaces import letters as shared
from oncebox.surfaces.choices import RESOLUTIONS
from oncebox.surfaces.digits import whole
from oncebox.surfaces.http.auth import SignInRefused, sign_in
from oncebox.surfaces.http.console import (
    acting,
    forwarding,
    letters,
    pages,
    quarantine,
    records,
    triage,
)
from oncebox.surfaces.http.console import html as h
from oncebox.surfaces.http.console.html import BASE, HEADERS
from oncebox.surfaces.http.console.session import (
    COOKIE,
    SIGNIN_COOKIE,
    Actor,
    Console,
    Current,
    Served,
    Viewer,
    check_csrf,
    read_form,
    refused,
    signed_out,
)
from oncebox.surfaces.http.problems import RETRY_AFTER, ProblemError
from oncebox.surfaces.http.reading import joined
from oncebox.surfaces.views import TRIAGE_TABLES, csv_text, triage_table

router = APIRouter(prefix=BASE, include_in_schema=False)
DOWNLOAD_LIMIT = 100_000  # dead letters in one download


def _done(path: str) -> Response:
    """After a form that changed something: to the page that shows it (303)."""
    return RedirectResponse(f"{BASE}{path}", status_code=303, headers=HEADERS)


# -- sign-in and sign-out ---------------------------------------------------------------------
def signin_page(refusal: str | None = None, status: int = 200) -> Response:
    nonce = secrets.token_urlsafe(16)
    response = h.page("signin.html", None, "Sign in", status, nonce=nonce, refusal=refusal)
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
        return signin_page("The sign-in form expired; try again.", 403)
    try:
        session_id = await sign_in(
            svc.box, svc.sessions, fields.get("token", ""), request.cookies.get(COOKIE)
        )
    except SignInRefused as exc:
        return signin_page(exc.detail, exc.status)
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
@router.get("/triage")
async def triage_inboxes(who: Viewer, svc: Served) -> Response:
    names = svc.triage_inboxes(who)
    if len(names) == 1:
        return RedirectResponse(f"{BASE}/triage/{quote(names[0])}", status_code=303)
    return h.page("triage_choose.html", who, "Triage", inboxes=names)


@router.get("/triage/{inbox}.csv")
async def triage_csv(inbox: str, request: Request, who: Viewer, svc: Served) -> Response:
    """A table of the ledger as CSV: ``?table=ranking``, else per site and need."""
    if inbox not in svc.triage_inboxes(who):
        return refused(who, f"No triage inbox {inbox} in your inboxes.", 404)
    table = request.query_params.get("table", "totals")
    table = table if table in TRIAGE_TABLES else "totals"
    ledger = await run_in_threadpool(svc.box.triage, inbox)
    disposition = f'attachment; filename="{inbox}-triage-{table}.csv"'
    return Response(
        csv_text(*triage_table(ledger, table)),
        media_type="text/csv; charset=utf-8",
        headers={**HEADERS, "Content-Disposition": disposition},
    )


@router.get("/triage/{inbox}")
async def triage_page(inbox: str, who: Viewer, svc: Served) -> Response:
    if inbox not in svc.triage_inboxes(who):
        return refused(who, f"No triage inbox {inbox} in your inboxes.", 404)
    ledger, sites, more = await run_in_threadpool(triage.read, svc.box, inbox)
    return h.respond(triage.page(who, inbox, ledger, sites, more))


@router.get("/quarantine")
async def quarantine_page(request: Request, who: Viewer, svc: Served) -> Response:
    banner, kind = None, "ok"
    params = request.query_params
    done = whole(params.get("resolved", ""))
    if done is not None:
        found = await run_in_threadpool(svc.box.get_quarantine, done)
        if found is not None and who.token.covers(found[0]):
            row = found[1]
            banner = f"Quarantine #{row.id} resolved: {row.status}, by {row.resolved_by or '-'}."
    count, failed = params.get("count", ""), params.get("failed", "0")
    counted = whole(count) is not None and whole(failed) is not None
    if params.get("bulk_done") in RESOLUTIONS and counted:
        banner = f"Bulk {params['bulk_done']}: {count} conflict(s) resolved"
        banner, kind = (
            (f"{banner}; {failed} failed.", "bad") if failed != "0" else (banner + ".", "ok")
        )
    wanted = quarantine.Bulk(
        params.get("bulk", ""), params.get("inbox", ""), params.get("prefix", "")[:1024]
    )
    chosen = svc.chosen(who, request)
    page = await svc.readers.run(quarantine.page, svc.box, who, chosen, banner, kind, wanted)
    return h.respond(page)


@router.get("/quarantine/{quarantine_id}/{part}")
async def quarantine_content(quarantine_id: int, part: str, who: Viewer, svc: Served) -> Response:
    """All of a newcomer's content (``content``) or of its original's (``original``):
    the page shows their first bytes."""
    found = None
    if 1 <= quarantine_id < 2**63 and part in ("content", "original"):
        found = await run_in_threadpool(svc.box.get_quarantine, quarantine_id)
    if found is None or not who.token.covers(found[0]):
        return refused(who, f"No quarantine row {quarantine_id} in your inboxes.", 404)
    data: bytes | None = found[1].content
    if part == "original":
        record = await run_in_threadpool(svc.box.original, found[1])
        data = record.content if record is not None else None
    if data is None:
        return refused(who, "The original record was evicted: its content is not kept.", 404)
    return _download(data, f"quarantine-{quarantine_id}-{part}.bin")


@router.get("/dead-letters/{letter_id}/head")
async def dead_letter_head(letter_id: int, who: Viewer, svc: Served) -> Response:
    """All of a dead letter's kept head: the page shows its first bytes."""
    found = None
    if 1 <= letter_id < 2**63:
        found = await run_in_threadpool(svc.box.get_dead_letter, letter_id)
    if found is None or not who.token.covers(found[0]):
        return refused(who, f"No dead letter {letter_id} in your inboxes.", 404)
    return _download(found[1].head, f"dead-letter-{letter_id}.bin")


def _download(data: bytes, filename: str, media_type: str = "application/octet-stream") -> Response:
    """Bytes a sender sent, as a file to save, never as a page to render."""
    disposition = f'attachment; filename="{filename}"'
    return Response(
        data,
        media_type=media_type,
        headers={**HEADERS, "Content-Disposition": disposition},
    )


@router.get("/records")
async def records_page(request: Request, who: Viewer, svc: Served) -> Response:
    ask = records.asked(request.query_params, svc.covered(who))
    searching = bool(ask.query.search) and not ask.problems
    try:
        if searching:
            svc.readers.take_search()
    except ProblemError as exc:
        return refused(who, exc.detail, 503, exc.headers)
    try:
        page = await svc.readers.run(records.page, svc.box, who, svc.covered(who), ask)
    except ReadTimedOut as exc:
        return refused(who, str(exc), 503, {"Retry-After": RETRY_AFTER})
    except OnceboxError as exc:  # a page after a record no longer there
        return refused(who, str(exc), 422)
    finally:
        if searching:
            svc.readers.give_search()
    return h.respond(page)


async def _record(record_id: int, who: Session, svc: Console) -> RecordView | None:
    """The record with all that happened to it, if it is in the session's inboxes."""
    if not 1 <= record_id < 2**63:
        return None
    view = await svc.readers.run(svc.box.record_view, record_id)
    return view if view is not None and who.token.covers(view.inbox) else None


@router.get("/records/{record_id}")
async def record_page(record_id: int, who: Viewer, svc: Served) -> Response:
    view = await _record(record_id, who, svc)
    if view is None:
        return refused(who, f"No record {record_id} in your inboxes.", 404)
    more = await svc.readers.run(forwarding.on_record, svc.box, record_id)
    return h.respond(records.record_page(who, view, **more))


@router.get("/records/{record_id}/content")
async def record_content(record_id: int, who: Viewer, svc: Served) -> Response:
    """All of a record's content: the page shows its first bytes."""
    view = await _record(record_id, who, svc)
    if view is None or view.record.content is None:
        return refused(who, f"No record {record_id} with its content in your inboxes.", 404)
    return _download(view.record.content, f"record-{record_id}.bin")


@router.get("/records/{record_id}/proof")
async def record_proof(record_id: int, who: Viewer, svc: Served) -> Response:
    """The inclusion proof of a record's seal, as a file ``oncebox verify-proof`` reads."""
    view = await _record(record_id, who, svc)
    if view is None or view.record.log_seq is None:
        return refused(who, f"No sealed record {record_id} in your inboxes.", 404)
    proof = await run_in_threadpool(svc.box.prove, record_id)
    body = json.dumps(proof, indent=2).encode()
    return _download(body, f"record-{record_id}-proof.json", "application/json")


@router.get("/dead-letters")
async def dead_letters(request: Request, who: Viewer, svc: Served) -> Response:
    covered = svc.covered(who)
    ask = letters.asked(request.query_params, covered)
    banner, kind = await run_in_threadpool(acting.letters_banner, svc.box, who, request)
    searching = bool(ask.query.search) and not ask.problems
    try:
        if searching:
            svc.readers.take_search()
    except ProblemError as exc:
        return refused(who, exc.detail, 503, exc.headers)
    try:
        bulk = request.query_params.get("bulk", "")
        page = await svc.readers.run(letters.page, svc.box, who, covered, ask, banner, kind, bulk)
    except ReadTimedOut as exc:
        return refused(who, str(exc), 503, {"Retry-After": RETRY_AFTER})
    finally:
        if searching:
            svc.readers.give_search()
    return h.respond(page)


@router.get("/dead-letters.ndjson")
async def dead_letter_lines(request: Request, who: Viewer, svc: Served) -> Response:
    """The chosen inbox's dead letters as the lines ``oncebox ingest`` reads."""
    covered = svc.covered(who)
    ask = letters.asked(request.query_params, covered)
    if len(ask.inboxes) != 1 or ask.problems:
        return refused(who, "Choose one inbox (and times that read) to download.", 422)
    found = shared.lines(svc.box, ask.inboxes, ask.query, DOWNLOAD_LIMIT, [])
    disposition = f'attachment; filename="{ask.inboxes[0]}-dead-letters.ndjson"'
    try:
        return await svc.readers.stream(
            joined(found, shared.PAGE),
            "application/x-ndjson",
            bool(ask.query.search),
            headers={**HEADERS, "Content-Disposition": disposition},
        )
    except ProblemError as exc:
        return refused(who, exc.detail, exc.status, exc.headers)
    except ReadTimedOut as exc:
        return refused(who, str(exc), 503, {"Retry-After": RETRY_AFTER})


@router.get("/work")
async def work(request: Request, who: Viewer, svc: Served) -> Response:
    by = request.query_params.get("retried", "")
    banner = f"Sent back from review by {who.token.name}." if by else None
    chosen = svc.chosen(who, request)
    return h.respond(await run_in_threadpool(pages.work, svc.box, who, chosen, banner))


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
    if action not in RESOLUTIONS or not note or len(note) > NOTE_MAX:
        return refused(
            who, f"Choose keep or accept and write a note (up to {NOTE_MAX:,} chars).", 422
        )
    try:
        await run_in_threadpool(svc.box.resolve, quarantine_id, action, note, who.token.name)
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
        await run_in_threadpool(svc.box.reconciler(inbox).retry, key, who.token.name)
    except OnceboxError as exc:
        return refused(who, f"Not retried: {exc}", 409)
    return _done("/work?retried=1")
