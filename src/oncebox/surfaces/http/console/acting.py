"""The console's forms on dead letters and conflicts: replay (as kept or corrected),
archive, and the bulk actions whose preview the pages show. Each form carries the
filters of the page it came from, and leads back to that page with what happened said
on it: a failure (a replay refused again, items that failed) in a red notice."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse, Response

from oncebox.domain import NOTE_MAX
from oncebox.domain.bulk import BulkRun
from oncebox.engine.box import Oncebox
from oncebox.engine.operators import BULK_MOST
from oncebox.engine.sessions import Session
from oncebox.engine.tokens import Scope
from oncebox.errors import OnceboxError
from oncebox.surfaces import letters as shared
from oncebox.surfaces.choices import RESOLUTIONS
from oncebox.surfaces.digits import whole
from oncebox.surfaces.http.console import letters
from oncebox.surfaces.http.console.html import BASE, HEADERS
from oncebox.surfaces.http.console.session import Actor, Served, refused

router = APIRouter(prefix=BASE, include_in_schema=False)


def _back(path: str) -> Response:
    """After a form that changed something: to the page that shows it (303)."""
    return RedirectResponse(f"{BASE}{path}", status_code=303, headers=HEADERS)


def _filters(fields: Mapping[str, str]) -> dict[str, str]:
    """The page's filters a form carried (``f_reason`` and so on)."""
    return {name: fields.get(f"f_{name}", "") for name in letters.FILTERS}


def _note(fields: Mapping[str, str], needed: bool) -> str | None:
    note = fields.get("note", "").strip() or None
    if (needed and note is None) or (note is not None and len(note) > NOTE_MAX):
        raise ValueError(f"Write a note saying why (up to {NOTE_MAX:,} characters).")
    return note


def _letter(box: Oncebox, who: Session, letter_id: int) -> str | None:
    """The inbox of a dead letter the session may act on, or None."""
    found = box.get_dead_letter(letter_id) if 1 <= letter_id < 2**63 else None
    if found is None or not who.token.allows(Scope.OPERATOR, found[0]):
        return None
    return found[0]


def letters_banner(box: Oncebox, who: Session, request: Request) -> tuple[str | None, str]:
    """What the form before said happened, read back from the store (never from the
    query's words): a replay's outcome, an archive, a bulk call's counts."""
    params = request.query_params
    for name in ("replayed", "archived"):
        done = whole(params.get(name, ""))
        if done is None:
            continue
        found = box.get_dead_letter(done)
        if found is None or not who.token.covers(found[0]):
            return None, "ok"
        letter = found[1]
        # Replayed already, then replayed again and refused: it stays replayed, and the
        # refusal, after the replay, is what this form did.
        again = letter.replayed_at is not None and (letter.last_tried or 0) > letter.replayed_at
        if letter.status == "open" or (name == "replayed" and again):
            stays = (
                "open" if letter.status == "open" else f"{letter.status} ({letter.replay_verdict})"
            )
            return (
                f"Dead letter #{letter.id} was refused again: {letter.last_reason} "
                f"(attempt {letter.attempts}); it stays {stays}.",
                "bad",
            )
        if letter.status == "archived":
            return f"Dead letter #{letter.id} archived by {letter.archived_by or '-'}.", "ok"
        by = letter.replayed_by or "-"
        return f"Dead letter #{letter.id} replayed by {by}: {letter.replay_verdict}.", "ok"
    action, count, failed = params.get("done", ""), params.get("count", ""), params.get("failed")
    if action in letters.BULK and whole(count) is not None and whole(failed or "0") is not None:
        said = f"Bulk {action}: {count} dead letter(s) acted on"
        more = (
            " A run takes at most 500: preview again to see what is left."
            if params.get("more") == "1"
            else ""
        )
        if failed and failed != "0":
            return f"{said}; {failed} refused again or failed.{more}", "bad"
        return f"{said}.{more}", "ok"
    return None, "ok"


@router.post("/dead-letters/{letter_id}/replay")
async def replay(letter_id: int, form: Actor, svc: Served) -> Response:
    who, fields = form.who, form.fields
    inbox = await run_in_threadpool(_letter, svc.box, who, letter_id)
    if inbox is None:
        return refused(who, f"No dead letter {letter_id} in your inboxes.", 404)
    body = fields["body"].replace("\r\n", "\n").encode() if "body" in fields else None
    key = fields.get("key", "").strip() or None
    try:
        note = _note(fields, needed=body is not None)
    except ValueError as exc:
        return refused(who, str(exc), 422)
    token = fields.get("lease_token", "").strip()
    lease = whole(token)
    if token and lease is None:
        return refused(who, "A lease token is a whole number.", 422)
    try:
        await run_in_threadpool(
            lambda: svc.box.replay(letter_id, who.token.name, lease, note, body=body, key=key)
        )
    except OnceboxError as exc:
        return refused(who, f"Not replayed: {exc}", 409)
    back = _filters(fields)
    back["inbox"] = back["inbox"] or inbox
    return _back(letters.filtered(back, replayed=str(letter_id))[len(BASE) :])


@router.post("/dead-letters/{letter_id}/archive")
async def archive(letter_id: int, form: Actor, svc: Served) -> Response:
    who, fields = form.who, form.fields
    if await run_in_threadpool(_letter, svc.box, who, letter_id) is None:
        return refused(who, f"No dead letter {letter_id} in your inboxes.", 404)
    try:
        note = _note(fields, needed=True) or ""
        await run_in_threadpool(svc.box.archive, letter_id, who.token.name, note)
    except ValueError as exc:
        return refused(who, str(exc), 422)
    except OnceboxError as exc:
        return refused(who, f"Not archived: {exc}", 409)
    return _back(letters.filtered(_filters(fields), archived=str(letter_id))[len(BASE) :])


def _most(fields: Mapping[str, str]) -> int:
    """How many the preview counted (at most :data:`BULK_MOST`): the confirm button acts
    on that many, so what arrived since the preview waits for the next one."""
    most = whole(fields.get("most", ""))
    return most if most is not None and 1 <= most <= BULK_MOST else BULK_MOST


def _failed(run: BulkRun) -> int:
    return sum(i.outcome == "failed" or i.outcome.startswith("rejected") for i in run.items)


@router.post("/dead-letters/bulk")
async def bulk(form: Actor, svc: Served) -> Response:
    """A bulk replay or archive of what the page's filters select (its preview showed
    how many), at most :data:`BULK_MOST` this time."""
    who, fields = form.who, form.fields
    action, kept = fields.get("action", ""), _filters(fields)
    inbox = kept["inbox"]
    if action not in letters.BULK or not who.token.allows(Scope.OPERATOR, inbox):
        return refused(who, "Choose one of your inboxes and replay or archive.", 422)
    ask = letters.asked(kept, [inbox])
    if ask.problems:
        return refused(who, "; ".join(ask.problems), 422)
    try:
        note = _note(fields, needed=action == "archive")
        most = _most(fields)
        run = await run_in_threadpool(_bulk, svc.box, who, ask, action, note, most)
    except ValueError as exc:
        return refused(who, str(exc), 422)
    except OnceboxError as exc:
        return refused(who, f"Not done: {exc}", 409)
    counts = {"done": action, "count": str(run.count), "failed": str(_failed(run))}
    if run.next_after is not None and most == BULK_MOST:
        counts["more"] = "1"
    return _back(letters.filtered(kept)[len(BASE) :] + _joined(kept, counts))


def _joined(kept: Mapping[str, str], more: Mapping[str, str]) -> str:
    return ("&" if any(kept.get(k) for k in letters.FILTERS if k != "after") else "?") + urlencode(
        more
    )


def _bulk(
    box: Oncebox, who: Session, ask: letters.Asked, action: str, note: str | None, most: int
) -> BulkRun:
    chosen = shared.checked(box, ask.inboxes, ask.query)
    if action == "replay":
        return box.bulk_replay(ask.inboxes, chosen, who.token.name, note, most)
    return box.bulk_archive(ask.inboxes, chosen, who.token.name, note or "", most)


@router.post("/quarantine/bulk")
async def resolve_many(form: Actor, svc: Served) -> Response:
    """Keep (or accept) every open conflict of one inbox whose identity starts with a
    prefix, as the quarantine page's preview showed them (as many as it counted)."""
    who, fields = form.who, form.fields
    inbox, action = fields.get("inbox", ""), fields.get("action", "")
    prefix = fields.get("prefix", "").strip()[:1024] or None
    if action not in RESOLUTIONS or not who.token.allows(Scope.OPERATOR, inbox):
        return refused(who, "Choose one of your inboxes and keep or accept.", 422)
    most = _most(fields)
    try:
        note = _note(fields, needed=True) or ""
        run = await run_in_threadpool(
            lambda: svc.box.bulk_resolve(
                inbox, action, note, who.token.name, prefix=prefix, limit=most
            )
        )
    except ValueError as exc:
        return refused(who, str(exc), 422)
    except OnceboxError as exc:
        return refused(who, f"Not resolved: {exc}", 409)
    failed = sum(i.outcome == "failed" for i in run.items)
    query = {"inbox": inbox, "bulk_done": action, "count": run.count, "failed": failed}
    return _back(f"/quarantine?{urlencode(query)}")
