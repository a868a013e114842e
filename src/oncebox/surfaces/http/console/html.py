"""The console's HTML primitives: escaping, the page frame, tables, notices.

Pages are plain HTML built with f-strings; every value that comes from the store, a
delivery or a request passes through :func:`e` (:func:`html.escape`) before it reaches
the page. Presentation is by class only (the stylesheet, ``static/console.css``): the
Content-Security-Policy allows no inline style or script.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from html import escape
from typing import Any

from starlette.responses import HTMLResponse

from oncebox.engine.sessions import Session

BASE = "/console"
STYLESHEET = f"{BASE}/static/console.css"
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
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


def content_text(data: bytes | None) -> str:
    if data is None:
        return "(evicted: content no longer kept)"
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "(binary) " + data.hex()


def page(
    title: str, body: str, who: Session | None, status: int = 200, banner: str = ""
) -> HTMLResponse:
    """A whole page: the header (with the navigation and sign-out when signed in)
    and ``body``, HTML already; sent with the console's security headers."""
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
            f'<a href="{e(href)}"{" aria-current=page" if name == title else ""}>{e(name)}</a>'
            for name, href in links
        )
        nav = (
            f"<nav>{items}</nav>"
            f'<form class="signout" method="post" action="{BASE}/signout">{hidden(who)}'
            f"<span>signed in as <b>{e(who.token.name)}</b></span> "
            f'<button type="submit">Sign out</button></form>'
        )
    html = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)} · oncebox console</title>"
        f'<link rel="stylesheet" href="{STYLESHEET}"></head><body>'
        f'<header><a class="brand" href="{BASE}">oncebox console</a>{nav}</header>'
        f"<main><h1>{e(title)}</h1>{banner}{body}</main></body></html>"
    )
    return HTMLResponse(html, status_code=status, headers=HEADERS)


def notice(text: str, kind: str = "ok") -> str:
    return f'<p class="notice {e(kind)}" role="status">{e(text)}</p>'


def table(head: Iterable[str], rows: Iterable[Iterable[str]], cls: str = "") -> str:
    """A table; ``rows`` cells are HTML already (escape before)."""
    th = "".join(f"<th>{e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{e(cls)}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


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
