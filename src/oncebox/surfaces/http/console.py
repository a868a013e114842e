"""The operator console: server-rendered HTML pages at ``/console``.

No rule lives here either: every page is one or two engine calls, rendered. Pages are
plain HTML built with f-strings; every value that comes from the store, a delivery or
a request passes through :func:`html.escape` (``_e``) before it reaches the page.

Sign-in and scopes. A person signs in with an API token that has the ``operator`` scope
(which implies ``read``); the console shows and acts on the inboxes that token covers,
and nothing else. Tokens that sign their requests (HMAC) cannot sign in: a browser
cannot sign, and letting such a token in would drop the protection its owner asked for.
The full log (entries) is shown only to tokens that cover every inbox, since entries
of one inbox are not another inbox's business; the checkpoint and verify are for all.

The session is kept on the server (:mod:`oncebox.engine.sessions`): the cookie
(``HttpOnly``, ``SameSite=Strict``, ``Path=/console``, and ``Secure`` over https) holds
only a random session id, never a credential. The store keeps the session with its
token and its expiry (:data:`SESSION_SECONDS` on the server clock); signing out ends it
for every copy of the cookie, and revoking the token ends all of its sessions at once.

CSRF. Every form that changes something (resolve, retry, verify, sign-out) carries a
token: HMAC-SHA256 keyed by the session's secret id, so it is tied to this one sign-in
and cannot be computed without the cookie. A POST without it, or with another
session's, is refused with 403 before anything runs. The sign-in form itself carries a
random value that must match a short-lived ``SameSite=Strict`` cookie (login CSRF).
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Iterable, Mapping
from html import escape
from typing import Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, FastAPI, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import HTMLResponse, RedirectResponse, Response

from oncebox.engine.box import Oncebox
from oncebox.engine.sessions import SESSION_SECONDS, Session, Sessions
from oncebox.engine.sessions import refusal as sign_in_refusal
from oncebox.engine.tokens import Scope
from oncebox.engine.views import Quarantined, Record, WorkItem, fields_of
from oncebox.errors import OnceboxError
from oncebox.surfaces.views import iso

BASE = "/console"
COOKIE = "oncebox_console"
SIGNIN_COOKIE = "oncebox_console_signin"
HOURS = 24
VERDICTS = ("accepted", "duplicate", "conflict", "rejected")
MAX_FORM = 16_384
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def _e(value: object) -> str:
    """Escape anything for HTML text and (quoted) attribute values."""
    return escape("" if value is None else str(value), quote=True)


def _hidden(who: Session) -> str:
    """The CSRF field of a form that changes something."""
    return f'<input type="hidden" name="csrf" value="{_e(who.csrf)}">'


def _content(data: bytes | None) -> str:
    if data is None:
        return "(evicted: content no longer kept)"
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "(binary) " + data.hex()


def _page(
    title: str, body: str, who: Session | None, status: int = 200, notice: str = ""
) -> HTMLResponse:
    nav = ""
    if who is not None:
        links = [
            ("Overview", BASE),
            ("Quarantine", f"{BASE}/quarantine"),
            ("Dead letters", f"{BASE}/dead-letters"),
            ("Work keys", f"{BASE}/work"),
            ("Log", f"{BASE}/log"),
        ]
        items = "".join(
            f'<a href="{_e(href)}"{" aria-current=page" if name == title else ""}>{_e(name)}</a>'
            for name, href in links
        )
        nav = (
            f"<nav>{items}</nav>"
            f'<form class="signout" method="post" action="{BASE}/signout">{_hidden(who)}'
            f"<span>signed in as <b>{_e(who.token.name)}</b></span> "
            f'<button type="submit">Sign out</button></form>'
        )
    html = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)} · oncebox console</title>"
        f'<link rel="stylesheet" href="{BASE}/console.css"></head><body>'
        f'<header><a class="brand" href="{BASE}">oncebox console</a>{nav}</header>'
        f"<main><h1>{_e(title)}</h1>{notice}{body}</main></body></html>"
    )
    return HTMLResponse(html, status_code=status, headers=HEADERS)


def _notice(text: str, kind: str = "ok") -> str:
    return f'<p class="notice {_e(kind)}" role="status">{_e(text)}</p>'


def _table(head: Iterable[str], rows: Iterable[Iterable[str]], cls: str = "") -> str:
    """A table; ``rows`` cells are HTML already (escape before)."""
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{_e(cls)}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def _fields_table(fields: Mapping[str, Any], other: Mapping[str, Any] | None) -> str:
    if not fields:
        return ""
    rows = []
    for name, value in fields.items():
        differs = other is not None and other.get(name) != value
        mark = ' class="differs"' if differs else ""
        rows.append(f"<tr{mark}><th>{_e(name)}</th><td>{_e(value)}</td></tr>")
    return f'<table class="fields">{"".join(rows)}</table>'


def _link(href: str, text: object) -> str:
    return f'<a href="{_e(href)}">{_e(text)}</a>'


# -- rendering ---------------------------------------------------------------------------
def _chart(history: list[tuple[int, dict[str, int]]]) -> str:
    """Stacked bars per hour as inline SVG (presentation by class; no inline styles)."""
    width, height, bar = 24, 120, 18
    peak = max([sum(c.values()) for _, c in history] + [1])
    bars = []
    for i, (start, counts) in enumerate(history):
        y = height
        total = sum(counts.values())
        label = f"{iso(start)}: " + (
            ", ".join(f"{v} {counts[v]}" for v in VERDICTS if counts.get(v)) or "nothing"
        )
        parts = [f"<title>{_e(label)}</title>"]
        for verdict in VERDICTS:
            n = counts.get(verdict, 0)
            if not n:
                continue
            h = max(1, round(n * (height - 10) / peak))
            y -= h
            parts.append(
                f'<rect class="v-{verdict}" x="{i * width + 3}" y="{y}" '
                f'width="{bar}" height="{h}"></rect>'
            )
        if not total:
            parts.append(
                f'<rect class="v-none" x="{i * width + 3}" y="{height - 1}" '
                f'width="{bar}" height="1"></rect>'
            )
        bars.append(f"<g>{''.join(parts)}</g>")
    first = iso(history[0][0]) if history else ""
    last = iso(history[-1][0]) if history else ""
    legend = "".join(f'<span class="key v-{v}">{v}</span>' for v in VERDICTS)
    return (
        f'<figure class="chart"><svg viewBox="0 0 {width * len(history)} {height}" '
        'preserveAspectRatio="none" '
        f'role="img" aria-label="deliveries per hour by verdict">{"".join(bars)}</svg>'
        f"<figcaption>per hour, {_e(first)} to {_e(last)} (server clock) {legend}"
        f"</figcaption></figure>"
    )


def _overview(box: Oncebox, who: Session, inboxes: list[str]) -> str:
    sections = []
    for name in inboxes:
        stats = box.stats(name)
        history = box.verdict_history(name, HOURS)
        verdicts = stats["verdicts"]
        totals = "".join(
            f'<div class="count v-{v}"><span>{_e(v)}</span><b>{_e(verdicts.get(v, 0))}</b></div>'
            for v in VERDICTS
        )
        facts = _table(
            ["records", "open quarantine", "dead letters", "duplicates", "codec", "apply"],
            [
                [
                    _e(stats["records"]),
                    _link(f"{BASE}/quarantine?inbox={quote(name)}", stats["quarantine_open"]),
                    _link(f"{BASE}/dead-letters?inbox={quote(name)}", stats["dead_letters"]),
                    _e(stats["duplicates"]),
                    _e(stats["codec"]),
                    _e(stats["apply"]),
                ]
            ],
        )
        sections.append(
            f'<section class="inbox" id="inbox-{_e(name)}"><h2>{_e(name)}</h2>'
            f'<div class="counts">{totals}</div>{_chart(history)}{facts}</section>'
        )
    return "".join(sections) or "<p>This token covers no declared inbox.</p>"


def _side(title: str, content: str, fields: str, facts: list[tuple[str, object]]) -> str:
    dl = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in facts)
    return (
        f'<div class="side"><h3>{_e(title)}</h3><dl>{dl}</dl><pre>{_e(content)}</pre>{fields}</div>'
    )


def _quarantine_card(
    inbox: str, row: Quarantined, original: Record | None, who: Session
) -> str:
    theirs = fields_of(row)
    if original is not None:
        ours = fields_of(original)
        left = _side(
            f"Original: record {original.id}",
            _content(original.content),
            _fields_table(ours, theirs),
            [
                ("revision", original.revision),
                ("first seen", iso(original.first_seen)),
                ("seen", original.seen_count),
                ("witness", original.witness.hex()[:16]),
                ("snapshot", original.snapshot_id or "-"),
                ("delivery id", original.delivery_id or "-"),
            ],
        )
    else:
        ours = {}
        left = '<div class="side"><h3>Original</h3><p>The original record was evicted.</p></div>'
    right = _side(
        "Newcomer (quarantined)",
        _content(row.content),
        _fields_table(theirs, ours if original is not None else None),
        [
            ("first seen", iso(row.first_seen)),
            ("last seen", iso(row.last_seen)),
            ("seen", row.seen_count),
            ("witness", row.witness.hex()[:16]),
            ("snapshot", row.snapshot_id or "-"),
            ("delivery id", row.delivery_id or "-"),
        ],
    )
    form = ""
    if who.token.allows(Scope.OPERATOR, inbox):
        form = (
            f'<form class="resolve" method="post" action="{BASE}/quarantine/{row.id}/resolve">'
            f"{_hidden(who)}"
            "<fieldset><legend>Resolve</legend>"
            '<label><input type="radio" name="action" value="keep" checked> keep the original'
            "</label>"
            '<label><input type="radio" name="action" value="accept"> accept the newcomer as '
            "the next revision</label>"
            '<label class="note">Note <textarea name="note" required maxlength="4096" '
            'rows="2"></textarea></label>'
            '<button type="submit">Resolve</button></fieldset></form>'
        )
    return (
        f'<article class="conflict" id="q-{row.id}" data-quarantine-id="{row.id}">'
        f"<h2>#{row.id} · {_e(inbox)} · {_e(row.identity)} "
        f'<small>{_e(row.reason)}</small></h2><div class="pair">{left}{right}</div>{form}'
        "</article>"
    )


def _quarantine(box: Oncebox, who: Session, inboxes: list[str]) -> str:
    cards = []
    resolved = []
    for name in inboxes:
        for row in box.quarantined(name, "open", 200):
            cards.append(_quarantine_card(name, row, box.original(row), who))
        for row in box.quarantined(name, None, 500):
            if row.status != "open":
                resolved.append((name, row))
    resolved.sort(key=lambda pair: pair[1].resolved_at or 0.0, reverse=True)
    open_html = "".join(cards) or '<p class="empty">No open conflicts.</p>'
    done = _table(
        ["id", "inbox", "identity", "status", "resolved", "note"],
        [
            [
                _e(row.id),
                _e(name),
                _e(row.identity),
                _e(row.status),
                _e(iso(row.resolved_at)),
                _e(row.note),
            ]
            for name, row in resolved[:50]
        ],
        "resolved",
    )
    return (
        f'<section id="open"><h2>Open ({len(cards)})</h2>{open_html}</section>'
        f'<section id="resolved"><h2>Recently resolved</h2>{done}</section>'
    )


def _dead_letters(box: Oncebox, inboxes: list[str]) -> str:
    rows = []
    for name in inboxes:
        for row in box.dead_letters(name, 500):
            rows.append(
                (
                    row.received_at,
                    [
                        _e(row.id),
                        _e(name),
                        _e(iso(row.received_at)),
                        f"<code>{_e(row.reason)}</code>",
                        _e(row.detail),
                        _e(row.key or "-"),
                        _e(row.length),
                        f"<pre>{_e(_content(row.head))}</pre>",
                    ],
                )
            )
    if not rows:
        return '<p class="empty">No dead letters.</p>'
    rows.sort(key=lambda r: r[0], reverse=True)
    return _table(
        ["id", "inbox", "received", "reason", "detail", "key", "bytes", "head"],
        [cells for _, cells in rows],
        "dead-letters",
    )


def _work_row(name: str, row: WorkItem, who: Session, retry: bool) -> list[str]:
    key = f"{row.seller_id} / {row.sku} / {row.marketplace_id}"
    cells = [
        _e(key),
        _e(row.generation),
        _e(row.applied_generation),
        _e(row.failures),
        _e(row.last_error or "-"),
    ]
    if retry:
        button = ""
        if who.token.allows(Scope.OPERATOR, name):
            button = (
                f'<form method="post" action="{BASE}/work/retry">{_hidden(who)}'
                f'<input type="hidden" name="inbox" value="{_e(name)}">'
                f'<input type="hidden" name="seller_id" value="{_e(row.seller_id)}">'
                f'<input type="hidden" name="sku" value="{_e(row.sku)}">'
                f'<input type="hidden" name="marketplace_id" value="{_e(row.marketplace_id)}">'
                '<button type="submit">Retry</button></form>'
            )
        cells.append(button)
    return cells


def _work(box: Oncebox, who: Session, inboxes: list[str]) -> str:
    sections = []
    head = ["key (seller / sku / marketplace)", "generation", "applied", "failures", "last error"]
    for name in inboxes:
        keys = box.work_keys(name)
        if not keys and box.inbox(name).row.apply != "generation":
            continue
        figures = box.work_figures(name)
        review = [r for r in keys if r.in_review]
        dirty = [r for r in keys if r.dirty and not r.in_review]
        summary = " · ".join(f"{k.replace('_', ' ')} {v}" for k, v in figures.items())
        review_html = (
            _table([*head, ""], [_work_row(name, r, who, True) for r in review], "review")
            if review
            else '<p class="empty">Nothing in review.</p>'
        )
        dirty_html = (
            _table(head, [_work_row(name, r, who, False) for r in dirty[:500]], "dirty")
            if dirty
            else '<p class="empty">No dirty keys.</p>'
        )
        sections.append(
            f'<section class="inbox" id="work-{_e(name)}"><h2>{_e(name)}</h2>'
            f"<p>{_e(summary)}</p><h3>In review</h3>{review_html}"
            f"<h3>Dirty</h3>{dirty_html}</section>"
        )
    return "".join(sections) or '<p class="empty">No inbox here keeps work keys.</p>'


def _log(box: Oncebox, who: Session, private_key: bytes | None, verified: str) -> str:
    point = box.checkpoint(private_key)
    lag = box.seal_lag()
    facts = [
        ("origin", point.origin),
        ("tree size", point.tree_size),
        ("root", point.root),
        ("log head", point.log_head),
        ("signed", f"yes (key {point.key_id})" if point.signature else "no (no key configured)"),
        ("waiting to be sealed", lag),
    ]
    dl = "".join(f"<dt>{_e(k)}</dt><dd><code>{_e(v)}</code></dd>" for k, v in facts)
    verify = (
        f'<form method="post" action="{BASE}/log/verify">{_hidden(who)}'
        '<button type="submit">Verify the log</button></form>'
    )
    if "*" in who.token.inboxes:
        start = max(1, point.tree_size - 24)
        entries = list(reversed(box.log_entries(start, 25)))
        rows = [
            [
                _e(x.seq),
                _e(x.step),
                f"<code>{_e(x.state[:240])}</code>",
                f"<code>{_e(x.hash[:16])}</code>",
            ]
            for x in entries
        ]
        tail = _table(["seq", "step", "state", "hash"], rows, "log") if rows else "<p>Empty.</p>"
    else:
        tail = "<p>The entries are shown only to tokens that cover every inbox.</p>"
    return (
        f'<section id="checkpoint"><h2>Latest checkpoint</h2><dl class="facts">{dl}</dl>'
        f"{verify}{verified}</section><section><h2>Log head</h2>{tail}</section>"
    )


def _verification(result: dict[str, Any]) -> str:
    ok = bool(result.get("ok"))
    rows = "".join(f"<dt>{_e(k)}</dt><dd><code>{_e(v)}</code></dd>" for k, v in result.items())
    verdict = "The log verifies." if ok else "The log does NOT verify."
    return (
        f'<div class="verification {"ok" if ok else "bad"}" id="verification" role="status">'
        f'<p><b>{verdict}</b></p><dl class="facts">{rows}</dl></div>'
    )


# -- the routes --------------------------------------------------------------------------
def mount_console(
    app: FastAPI,
    box: Oncebox,
    *,
    private_key: bytes | None = None,
) -> None:
    """Add the console's routes to ``app`` (left out of the OpenAPI document)."""
    router = APIRouter(prefix=BASE, include_in_schema=False)
    sessions = Sessions(box.store, SESSION_SECONDS)

    def covered(who: Session) -> list[str]:
        return [a.name for a in box.inboxes if who.token.covers(a.name)]

    def chosen(who: Session, request: Request) -> list[str]:
        wanted = request.query_params.get("inbox")
        names = covered(who)
        return [wanted] if wanted in names else names

    async def session(request: Request) -> Session | None:
        raw = request.cookies.get(COOKIE)
        if not raw:
            return None
        return await run_in_threadpool(sessions.find, raw)

    async def form(request: Request) -> dict[str, str]:
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media != "application/x-www-form-urlencoded":
            return {}
        body = await request.body()
        if len(body) > MAX_FORM:
            return {}
        try:
            parsed = parse_qs(
                body.decode("utf-8", "replace"), keep_blank_values=True, max_num_fields=20
            )
        except ValueError:  # more fields than any console form has
            return {}
        return {k: v[0] for k, v in parsed.items()}

    def signed_out() -> Response:
        response = RedirectResponse(f"{BASE}/signin", status_code=303, headers=HEADERS)
        response.delete_cookie(COOKIE, path=BASE, httponly=True, samesite="strict")
        return response

    def refused(who: Session | None, detail: str, status: int = 403) -> HTMLResponse:
        return _page("Refused", f'<p class="notice bad">{_e(detail)}</p>', who, status)

    async def acting(request: Request) -> tuple[Session | None, dict[str, str], Response | None]:
        """The session and form of a state-changing POST, or the response refusing it."""
        who = await session(request)
        if who is None:
            return None, {}, refused(None, "You are not signed in.", 401)
        fields = await form(request)
        given = fields.get("csrf", "")
        if not hmac.compare_digest(given.encode(), who.csrf.encode()):
            return (
                who,
                fields,
                refused(
                    who, "The form's CSRF token is missing or wrong; reload the page and try again."
                ),
            )
        return who, fields, None

    # -- sign-in -------------------------------------------------------------------------
    def signin_page(message: str = "", status: int = 200) -> Response:
        nonce = secrets.token_urlsafe(16)
        body = (
            f"{message}"
            f'<form class="signin" method="post" action="{BASE}/signin">'
            f'<input type="hidden" name="signin" value="{_e(nonce)}">'
            '<label>Operator token <input type="password" name="token" autocomplete="off" '
            'required autofocus></label><button type="submit">Sign in</button></form>'
            "<p>Create one with <code>oncebox token create NAME --inbox '*' "
            "--scope operator</code>.</p>"
        )
        response = _page("Sign in", body, None, status)
        response.set_cookie(
            SIGNIN_COOKIE, nonce, max_age=900, path=BASE, httponly=True, samesite="strict"
        )
        return response

    @router.get("/signin")
    async def signin_form(request: Request) -> Response:
        if await session(request) is not None:
            return RedirectResponse(BASE, status_code=303)
        return signin_page()

    @router.post("/signin")
    async def signin(request: Request) -> Response:
        fields = await form(request)
        expected = request.cookies.get(SIGNIN_COOKIE, "")
        given = fields.get("signin", "")
        if not expected or not hmac.compare_digest(given.encode(), expected.encode()):
            return signin_page(_notice("The sign-in form expired; try again.", "bad"), 403)
        secret = fields.get("token", "").strip()
        token = await run_in_threadpool(box.authenticate, secret) if secret else None
        if token is None:
            return signin_page(_notice("Unknown or revoked token.", "bad"), 401)
        why = sign_in_refusal(token)
        if why is not None:
            return signin_page(_notice(f"Refused: {why}.", "bad"), 403)
        previous = request.cookies.get(COOKIE)
        if previous:  # signing in again replaces the browser's session, not adds one
            await run_in_threadpool(sessions.end, previous)
        session_id = await run_in_threadpool(sessions.open, token)
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
    async def signout(request: Request) -> Response:
        who, _fields, refusal = await acting(request)
        if refusal is not None and who is not None:
            return refusal
        if who is not None:
            await run_in_threadpool(sessions.end, request.cookies.get(COOKIE, ""))
        return signed_out()

    # -- pages ---------------------------------------------------------------------------
    @router.get("")
    async def overview(request: Request) -> Response:
        who = await session(request)
        if who is None:
            return signed_out()
        body = await run_in_threadpool(_overview, box, who, chosen(who, request))
        return _page("Overview", body, who)

    @router.get("/quarantine")
    async def quarantine(request: Request) -> Response:
        who = await session(request)
        if who is None:
            return signed_out()
        notice = ""
        done = request.query_params.get("resolved", "")
        if done.isdigit() and len(done) < 19:
            found = await run_in_threadpool(box.get_quarantine, int(done))
            if found is not None and who.token.covers(found[0]):
                notice = _notice(f"Quarantine #{found[1].id} resolved: {found[1].status}.")
        body = await run_in_threadpool(_quarantine, box, who, chosen(who, request))
        return _page("Quarantine", body, who, notice=notice)

    @router.post("/quarantine/{quarantine_id}/resolve")
    async def resolve(request: Request, quarantine_id: int) -> Response:
        who, fields, refusal = await acting(request)
        if refusal is not None or who is None:
            return refusal or signed_out()
        found = None
        if 1 <= quarantine_id < 2**63:
            found = await run_in_threadpool(box.get_quarantine, quarantine_id)
        if found is None or not who.token.covers(found[0]):
            return refused(who, f"No quarantine row {quarantine_id} in your inboxes.", 404)
        action, note = fields.get("action", ""), fields.get("note", "").strip()
        if action not in ("keep", "accept") or not note or len(note) > 4096:
            return refused(who, "Choose keep or accept and write a note (up to 4096 chars).", 422)
        try:
            await run_in_threadpool(box.resolve, quarantine_id, action, note)
        except OnceboxError as exc:
            return refused(who, f"Not resolved: {exc}", 409)
        return RedirectResponse(
            f"{BASE}/quarantine?resolved={quarantine_id}", status_code=303, headers=HEADERS
        )

    @router.get("/dead-letters")
    async def dead_letters(request: Request) -> Response:
        who = await session(request)
        if who is None:
            return signed_out()
        body = await run_in_threadpool(_dead_letters, box, chosen(who, request))
        return _page("Dead letters", body, who)

    @router.get("/work")
    async def work(request: Request) -> Response:
        who = await session(request)
        if who is None:
            return signed_out()
        body = await run_in_threadpool(_work, box, who, chosen(who, request))
        notice = _notice("Sent back from review.") if request.query_params.get("retried") else ""
        return _page("Work keys", body, who, notice=notice)

    @router.post("/work/retry")
    async def retry(request: Request) -> Response:
        who, fields, refusal = await acting(request)
        if refusal is not None or who is None:
            return refusal or signed_out()
        inbox = fields.get("inbox", "")
        if inbox not in covered(who):
            return refused(who, "That inbox is not yours.", 404)
        key = (fields.get("seller_id", ""), fields.get("sku", ""), fields.get("marketplace_id", ""))
        try:
            await run_in_threadpool(box.reconciler(inbox).retry, key)
        except OnceboxError as exc:
            return refused(who, f"Not retried: {exc}", 409)
        return RedirectResponse(f"{BASE}/work?retried=1", status_code=303, headers=HEADERS)

    @router.get("/log")
    async def log_page(request: Request) -> Response:
        who = await session(request)
        if who is None:
            return signed_out()
        body = await run_in_threadpool(_log, box, who, private_key, "")
        return _page("Log", body, who)

    @router.post("/log/verify")
    async def verify(request: Request) -> Response:
        who, _fields, refusal = await acting(request)
        if refusal is not None or who is None:
            return refusal or signed_out()
        result = await run_in_threadpool(box.verify)
        shown = _verification(result.to_dict())
        body = await run_in_threadpool(_log, box, who, private_key, shown)
        return _page("Log", body, who)

    @router.get("/console.css")
    async def stylesheet() -> Response:
        return Response(
            CSS,
            media_type="text/css; charset=utf-8",
            headers={"Cache-Control": "max-age=300", "X-Content-Type-Options": "nosniff"},
        )

    app.include_router(router)


CSS = """
:root { --ink: #1d232b; --muted: #5b6673; --line: #d6dbe1; --bg: #f6f7f9;
  --accepted: #2f8f5b; --duplicate: #6b7f99; --conflict: #c9821b; --rejected: #c0392b; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, sans-serif; color: var(--ink); background: var(--bg); }
header { display: flex; gap: 1.5rem; align-items: center; padding: .6rem 1.2rem;
  background: #1d232b; color: #fff; flex-wrap: wrap; }
header a { color: #dfe6ee; text-decoration: none; }
header a.brand { font-weight: 700; color: #fff; }
nav { display: flex; gap: 1rem; flex: 1; }
nav a[aria-current] { color: #fff; border-bottom: 2px solid #fff; }
form.signout { display: flex; gap: .6rem; align-items: center; margin: 0; }
main { padding: 1rem 1.2rem 3rem; max-width: 1200px; }
h1 { margin: .3rem 0 1rem; font-size: 1.5rem; }
h2 { font-size: 1.15rem; margin: 1.2rem 0 .5rem; }
h2 small { color: var(--muted); font-weight: 400; }
section.inbox, article.conflict, .verification, form.signin {
  background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: .8rem 1rem;
  margin-bottom: 1rem; }
.counts { display: flex; gap: .8rem; flex-wrap: wrap; }
.count { border-left: 4px solid; padding: .2rem .7rem; min-width: 7rem; }
.count span { display: block; color: var(--muted); font-size: .8rem; }
.count b { font-size: 1.3rem; }
.count.v-accepted, .key.v-accepted { border-color: var(--accepted); }
.count.v-duplicate, .key.v-duplicate { border-color: var(--duplicate); }
.count.v-conflict, .key.v-conflict { border-color: var(--conflict); }
.count.v-rejected, .key.v-rejected { border-color: var(--rejected); }
.chart { margin: .8rem 0; }
.chart svg { width: 100%; max-width: 720px; height: 120px; background: #fafbfc;
  border: 1px solid var(--line); }
rect.v-accepted { fill: var(--accepted); } rect.v-duplicate { fill: var(--duplicate); }
rect.v-conflict { fill: var(--conflict); } rect.v-rejected { fill: var(--rejected); }
rect.v-none { fill: var(--line); }
figcaption { color: var(--muted); font-size: .8rem; }
.key { border-left: 10px solid; padding-left: .3rem; margin-left: .6rem; }
table { border-collapse: collapse; width: 100%; background: #fff; margin: .4rem 0; }
th, td { text-align: left; vertical-align: top; padding: .3rem .5rem;
  border-bottom: 1px solid var(--line); font-size: .9rem; }
thead th { background: #eef1f4; }
pre, code { font: 13px/1.35 ui-monospace, monospace; white-space: pre-wrap;
  word-break: break-all; margin: 0; }
.pair { display: grid; grid-template-columns: 1fr 1fr; gap: 1rem; }
.side { border: 1px solid var(--line); border-radius: 4px; padding: .5rem .7rem; }
.side h3 { margin: 0 0 .4rem; font-size: 1rem; }
.side pre { background: #f3f5f7; padding: .4rem; margin: .4rem 0; }
.side dl, dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: .1rem .8rem;
  margin: 0; font-size: .85rem; }
dt { color: var(--muted); }
dd { margin: 0; }
table.fields th { width: 30%; background: none; }
tr.differs td, tr.differs th { background: #fff3dc; }
form.resolve fieldset { border: 1px solid var(--line); display: flex; gap: 1rem;
  flex-wrap: wrap; align-items: center; margin-top: .7rem; }
label.note { display: flex; gap: .4rem; align-items: center; flex: 1; }
label.note textarea { flex: 1; min-width: 14rem; }
button { font: inherit; padding: .3rem .9rem; border-radius: 4px; border: 1px solid #2c4a6b;
  background: #2c5d8f; color: #fff; cursor: pointer; }
.notice { padding: .5rem .8rem; border-radius: 4px; background: #e3f4ea;
  border: 1px solid var(--accepted); }
.notice.bad, .verification.bad { background: #fbe6e3; border-color: var(--rejected); }
.verification.ok { border-color: var(--accepted); }
.empty { color: var(--muted); }
form.signin { max-width: 34rem; display: flex; gap: .8rem; align-items: end; }
form.signin label { flex: 1; display: flex; flex-direction: column; }
@media (max-width: 800px) { .pair { grid-template-columns: 1fr; } }
"""
