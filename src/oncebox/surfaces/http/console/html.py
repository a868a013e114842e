"""The console's HTML primitives: escaping, the page frame, tables, notices.

Pages are plain HTML built with f-strings; every value that comes from the store, a
delivery or a request passes through :func:`e` (:func:`html.escape`) before it reaches
the page. Presentation is by class only (the stylesheet, ``static/console.css``): the
Content-Security-Policy allows no inline style or script. One small script
(``static/console.js``) shows times in the browser's own zone; without it every time
reads in UTC, as served.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from html import escape
from typing import Any

from starlette.responses import HTMLResponse

from oncebox.engine.sessions import Session
from oncebox.surfaces.views import iso

NAV = (
    ("Overview", ""),
    ("Triage", "/triage"),
    ("Quarantine", "/quarantine"),
    ("Dead letters", "/dead-letters"),
    ("Work keys", "/work"),
    ("Log", "/log"),
)

BASE = "/console"
STATIC = f"{BASE}/static"
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
    "script-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def e(value: object) -> str:
    """Escape anything for HTML text and (quoted) attribute values."""
    return escape("" if value is None else str(value), quote=True)


def hidden(who: Session) -> str:
    """The CSRF field of a form that changes something."""
    return f'<input type="hidden" name="csrf" value="{e(who.csrf)}">'


def content_text(data: bytes | None, cut: bool = False) -> str:
    """Content as text, or hex if it is not UTF-8; a ``cut`` one's last character may
    have lost bytes to the cut, and is left out rather than show it all as hex."""
    if data is None:
        return "(evicted: content no longer kept)"
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if cut and exc.reason == "unexpected end of data":
            return data[: exc.start].decode("utf-8")
        return "(binary) " + data.hex()


def page(
    title: str, body: str, who: Session | None, status: int = 200, banner: str = ""
) -> HTMLResponse:
    """A whole page: the header (with the navigation and sign-out when signed in)
    and ``body``, HTML already; sent with the console's security headers."""
    nav = ""
    if who is not None:
        items = "".join(
            f'<a href="{BASE}{path}"{" aria-current=page" if title.startswith(name) else ""}>'
            f"{e(name)}</a>"
            for name, path in NAV
        )
        nav = (
            f"<nav>{items}</nav>"
            f'<form class="signout" method="post" action="{BASE}/signout">{hidden(who)}'
            f'<span>signed in as <b class="nb">{e(who.token.name)}</b></span> '
            f'<button type="submit">Sign out</button></form>'
        )
    html = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)} · oncebox console</title>"
        f'<link rel="icon" href="{STATIC}/favicon.svg" type="image/svg+xml">'
        f'<link rel="stylesheet" href="{STATIC}/console.css">'
        f'<script src="{STATIC}/console.js" defer></script></head><body>'
        f'<header><a class="brand" href="{BASE}">oncebox console</a>{nav}</header>'
        f"<main><h1>{e(title)}</h1>{banner}{body}"
        '<p class="zone">Times in <span data-zone>UTC</span>; UTC on hover.</p>'
        "</main></body></html>"
    )
    return HTMLResponse(html, status_code=status, headers=HEADERS)


def notice(text: str, kind: str = "ok") -> str:
    return f'<p class="notice {e(kind)}" role="status">{e(text)}</p>'


def table(head: Iterable[str], rows: Iterable[Iterable[str]], cls: str = "") -> str:
    """A table that scrolls sideways inside its card on a narrow screen; ``rows``
    cells are HTML already (escape before)."""
    th = "".join(f"<th>{e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return (
        f'<div class="scroll"><table class="{e(cls)}"><thead><tr>{th}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def when(seconds: float | None) -> str:
    """A time: in UTC as served, in the browser's own zone once the script ran, with
    UTC on hover either way; never broken across lines."""
    if seconds is None:
        return "-"
    at = iso(seconds)
    return f'<time datetime="{at}" title="{at} UTC">{at}</time>'


def name(value: object) -> str:
    """A name (a token's, an actor's), never broken at its hyphens ("-" for none)."""
    return "-" if value is None or value == "" else f'<span class="nb">{e(value)}</span>'


def code(value: object) -> str:
    """A reason code, key or hash: monospace, never broken mid-word ("-" for none)."""
    return "-" if value is None or value == "" else f"<code>{e(value)}</code>"


def fields_table(fields: Mapping[str, Any], other: Mapping[str, Any] | None) -> str:
    if not fields:
        return ""
    rows = []
    for name, value in fields.items():
        differs = other is not None and other.get(name) != value
        mark = ' class="differs"' if differs else ""
        rows.append(f"<tr{mark}><th>{e(name)}</th><td>{e(value)}</td></tr>")
    return f'<table class="fields">{"".join(rows)}</table>'


def link(href: str, text: object) -> str:
    return f'<a href="{e(href)}">{e(text)}</a>'
