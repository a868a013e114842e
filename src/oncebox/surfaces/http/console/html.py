"""The console's HTML: one Jinja2 environment over the package's ``templates/``.

Every page is a template that extends ``base.html`` (the header, the navigation and the
frame); what repeats (tables, facts, times, codes, paging, the filters, the quarantine's
side-by-side diff) is a macro in ``macros.html`` or a template of its own. The Python
beside them only gathers what a page shows, as plain values: no markup is written in
Python. The environment escapes every value a template prints (autoescape on for every
template, whatever its name), so nothing from the store, a delivery or a request can
reach the page as markup; and it fails on a name a template was not given
(``StrictUndefined``), so a missing value breaks the tests rather than rendering blank.

Presentation is by class only (``static/console.css``): the Content-Security-Policy
allows no inline style or script. One small script (``static/console.js``) shows times
in the browser's own zone; without it every time reads in UTC, as served.
"""

from __future__ import annotations

from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from starlette.responses import HTMLResponse

from oncebox.domain import NOTE_MAX
from oncebox.engine.sessions import Session
from oncebox.surfaces.views import iso

NAV = (
    ("Overview", ""),
    ("Records", "/records"),
    ("Triage", "/triage"),
    ("Quarantine", "/quarantine"),
    ("Dead letters", "/dead-letters"),
    ("Forwarding", "/forwarding"),
    ("Work keys", "/work"),
    ("Log", "/log"),
)

BASE = "/console"
STATIC = f"{BASE}/static"
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
    "script-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def _blank(value: Any) -> Any:
    """What ``{{ value }}`` prints: nothing for None (never the word "None")."""
    return "" if value is None else value


ENV = Environment(
    loader=PackageLoader("oncebox.surfaces.http.console", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    undefined=StrictUndefined,
    finalize=_blank,
    trim_blocks=True,
    lstrip_blocks=True,
    auto_reload=False,
)
ENV.globals.update(BASE=BASE, STATIC=STATIC, NAV=NAV, NOTE_MAX=NOTE_MAX)
ENV.filters["iso"] = iso


def render(template: str, who: Session | None, title: str, **values: Any) -> str:
    """A whole page: ``template`` (which extends ``base.html``) with ``values``; the
    header shows the navigation and sign-out when ``who`` is signed in. ``banner`` is
    a notice above the page's own content (what a form just did), or None."""
    values.setdefault("banner", None)
    values.setdefault("banner_kind", "ok")
    return ENV.get_template(template).render(who=who, title=title, **values)


def respond(page: str, status: int = 200) -> HTMLResponse:
    """A rendered page, sent with the console's security headers."""
    return HTMLResponse(page, status_code=status, headers=HEADERS)


def page(
    template: str, who: Session | None, title: str, status: int = 200, **values: Any
) -> HTMLResponse:
    """:func:`render` and :func:`respond` at once, for the small pages."""
    return respond(render(template, who, title, **values), status)


def message(
    title: str, text: str, who: Session | None, status: int, *, back: bool = False
) -> HTMLResponse:
    """A page that only says something went wrong (``back``: with a link to the
    overview)."""
    return page("message.html", who, title, status, text=text, back=back)


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
