"""The console's tokens page: for a session whose token has the ``admin`` scope only.

It lists the tokens newest first, 50 a page (name, scopes, inboxes cut as listings cut
them, created, expires, last used, revoked), shows one with its whole inbox list,
creates one with scopes, inboxes and an expiry, and revokes one. A new token's secret
is shown once, on the page the creating form answers with (never kept, never redirected
to, never cached), and nowhere again.
Creating and revoking are forms like any other (:data:`~.session.Actor`: a live session,
its CSRF value, not read-only), logged with the admin's token name as the actor. No rule
lives here: the engine checks names, scopes, inboxes and expiry (:mod:`oncebox.engine.tokens`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse, Response

from oncebox.engine.sessions import Session
from oncebox.engine.token_times import state
from oncebox.engine.tokens import Created, Scope, Token
from oncebox.engine.views import LISTED
from oncebox.errors import NotFound, OnceboxError
from oncebox.surfaces.http.console import asking
from oncebox.surfaces.http.console import html as h
from oncebox.surfaces.http.console.html import BASE, HEADERS
from oncebox.surfaces.http.console.session import (
    Actor,
    Console,
    Refused,
    Served,
    Viewer,
    refused,
)

router = APIRouter(prefix=BASE, include_in_schema=False)
TITLE = "Tokens"
PAGE = 50  # tokens a page shows
Paging = tuple[str | None, str, str]  # a link (href, text, class), as macros.paging takes
_SPLIT = re.compile(r"[\s,]+")


@dataclass(frozen=True)
class Row:
    """A token as the page lists it."""

    token: Token
    state: str  # live, expired or revoked

    @property
    def scopes(self) -> str:
        return ", ".join(sorted(s.value for s in self.token.scopes))

    @property
    def inboxes(self) -> str:
        shown = ", ".join(self.token.inboxes)
        return f"{shown}, …" if "inboxes" in self.token.cut else shown


def _admin(who: Session) -> Session:
    if not who.may_manage_tokens:
        raise Refused(403, "Tokens are managed by a token with the admin scope.", who)
    return who


def _rows(svc: Console, after: int) -> tuple[list[Row], list[Paging]]:
    """A page of tokens, newest first, below id ``after`` (0: from the newest), and its
    links to the first and next pages."""
    now = svc.box.store.now()  # the server clock decides what has expired
    found = svc.box.list_tokens(after, PAGE + 1, newest=True, preview=LISTED)
    more, found = len(found) > PAGE, found[:PAGE]
    paging: list[Paging] = []
    if after:
        paging.append((f"{BASE}/tokens", "First page", ""))
    if more:
        paging.append((f"{BASE}/tokens?after={found[-1].id}", "Next page", ""))
    return [Row(t, state(t.revoked_at, t.expires_at, now)) for t in found], paging


async def _page(
    svc: Console,
    who: Session,
    status: int = 200,
    *,
    created: Created | None = None,
    banner: str | None = None,
    kind: str = "ok",
    asked: dict[str, str] | None = None,
    after: int = 0,
) -> Response:
    rows, paging = await run_in_threadpool(_rows, svc, after)
    return h.page(
        "tokens.html",
        who,
        TITLE,
        status,
        rows=rows,
        paging=paging,
        created=created,
        banner=banner,
        banner_kind=kind,
        asked=asked or {},
        scopes=[s.value for s in Scope],
        inboxes=["*", *(a.name for a in svc.box.inboxes)],
    )


@router.get("/tokens")
async def tokens_page(
    who: Viewer, svc: Served, revoked: str | None = None, after: str = ""
) -> Response:
    _admin(who)
    banner = None if revoked is None else await run_in_threadpool(_revoked, svc, revoked)
    return await _page(svc, who, banner=banner, after=asking.after_of({"after": after}))


def _by_id(svc: Console, token_id: int, whole: bool = False) -> Token | None:
    """The token with this id (``whole``: its inbox list uncut), or None."""
    found = svc.box.list_tokens(token_id - 1, 1, preview=None if whole else LISTED)
    return found[0] if found and found[0].id == token_id else None


@router.get("/tokens/{token_id}")
async def one_token(token_id: int, who: Viewer, svc: Served) -> Response:
    """One token with every inbox it names: the listing cuts a long list."""
    _admin(who)
    row = await run_in_threadpool(_one_row, svc, token_id)
    if row is None:
        return refused(who, f"No token {token_id}.", 404)
    return h.page("token.html", who, f"Token {row.token.name}", row=row)


def _one_row(svc: Console, token_id: int) -> Row | None:
    """The token whole, with its state on the server clock (a read on PostgreSQL: off
    the event loop, like the store's other reads)."""
    token = _by_id(svc, token_id, whole=True)
    if token is None:
        return None
    return Row(token, state(token.revoked_at, token.expires_at, svc.box.store.now()))


def _revoked(svc: Console, asked: str) -> str | None:
    """What the revoking form did, read back from the store (not the query's words)."""
    digits = asked.isascii() and asked.isdigit() and len(asked) < 19  # int() takes them
    token = _by_id(svc, int(asked)) if digits else None
    if token is not None and token.revoked_at is not None:
        return f"Token {token.name} revoked."
    return None


@router.post("/tokens")
async def create(form: Actor, svc: Served) -> Response:
    """Answers with the page itself: the one place the new secret is shown."""
    who, fields = _admin(form.who), form.fields
    name = fields.get("name", "").strip()
    scopes = [s.value for s in Scope if fields.get(f"scope_{s.value}")]
    inboxes = [part for part in _SPLIT.split(fields.get("inboxes", "")) if part]
    expires = fields.get("expires", "").strip() or None
    try:
        created = await run_in_threadpool(
            lambda: svc.box.create_token(
                name, inboxes, scopes, expires=expires, actor=who.token.name
            )
        )
    except OnceboxError as exc:
        return await _page(svc, who, 422, banner=f"Not created: {exc}", kind="bad", asked=fields)
    said = f"Token {created.token.name} created. Copy its secret now: it is not shown again."
    return await _page(svc, who, 201, created=created, banner=said)


@router.post("/tokens/{token_id}/revoke")
async def revoke(token_id: int, form: Actor, svc: Served) -> Response:
    who = _admin(form.who)
    try:
        await run_in_threadpool(_revoke, svc, token_id, who.token.name)
    except OnceboxError as exc:
        return await _page(svc, who, 404, banner=f"Not revoked: {exc}", kind="bad")
    return RedirectResponse(f"{BASE}/tokens?revoked={token_id}", status_code=303, headers=HEADERS)


def _revoke(svc: Console, token_id: int, actor: str) -> None:
    """The live token of this id, revoked by its name: a name is unique among live
    tokens, where a number given as name or id could name two."""
    live = _by_id(svc, token_id)
    if live is None or live.revoked_at is not None:
        raise NotFound(f"no live token with id {token_id}")
    svc.box.revoke_token(live.name, actor)
