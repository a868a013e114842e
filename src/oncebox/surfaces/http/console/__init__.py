"""The operator console: server-rendered HTML pages at ``/console``.

No rule lives here either: every page is one or two engine calls (:mod:`.pages` and
its siblings) rendered by a Jinja2 template (``templates/``, through :mod:`.html`, which
escapes every value); the routes (:mod:`.routes`) take the session and CSRF checks as
dependencies (:mod:`.session`); the stylesheet is a static file (``static/console.css``).

Sign-in and scopes. A person signs in with an API token that has the ``read`` scope
(``operator`` and ``admin`` imply it); the console shows the inboxes that token covers,
and nothing else; it acts on them only for an ``operator`` (a ``read`` token's session is
read-only), and manages tokens only for an ``admin`` (:mod:`.tokens`). Tokens that sign
their requests (HMAC) cannot sign in: a browser cannot sign. The full log (entries) is
shown only to tokens that cover every inbox, since entries of one inbox are not another
inbox's business; the checkpoint is for all. The session itself is kept on the server
(:mod:`.session`).
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.staticfiles import StaticFiles

from oncebox.engine.box import Oncebox
from oncebox.engine.sessions import SESSION_SECONDS, Sessions
from oncebox.surfaces.http.console import acting, day, html, outbound, routes, session, tokens
from oncebox.surfaces.http.console.html import BASE
from oncebox.surfaces.http.console.session import MAX_FORM, Console, signed_in
from oncebox.surfaces.http.problems import on_http_error
from oncebox.surfaces.http.reading import Readers

__all__ = ["BASE", "MAX_FORM", "mount_console"]


class Static(StaticFiles):
    """The console's static files, cached a few minutes and never sniffed."""

    def file_response(self, *args: object, **kwargs: object) -> Response:
        response = super().file_response(*args, **kwargs)  # type: ignore[arg-type]
        response.headers["Cache-Control"] = "max-age=300"
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response


def mount_console(app: FastAPI, box: Oncebox, *, private_key: bytes | None = None) -> None:
    """Add the console to ``app`` (left out of the OpenAPI document)."""
    # The API's readers when there is an API: a worker's searches are counted once.
    service = getattr(app.state, "service", None)
    readers = service.readers if service is not None else Readers()
    app.state.console = Console(box, Sessions(box.store, SESSION_SECONDS), private_key, readers)
    app.include_router(day.router)  # before routes: /dead-letters/counts.part
    app.include_router(routes.router)
    app.include_router(acting.router)
    app.include_router(outbound.router)
    app.include_router(tokens.router)
    app.mount(
        f"{BASE}/static",
        Static(packages=[("oncebox.surfaces.http.console", "static")]),
        name="console-static",
    )
    session.install(app)
    _html_errors(app)


def _html_errors(app: FastAPI) -> None:
    """A console URL that leads nowhere gets an HTML page (with the navigation when
    signed in), not the API's JSON problem; every other path keeps the problem."""

    async def answer(request: Request, exc: Exception) -> Response:
        path = request.url.path
        if not (path == BASE or path.startswith(BASE + "/")) or not isinstance(exc, HTTPException):
            return await on_http_error(request, exc)
        who = await signed_in(request, request.app.state.console)
        if exc.status_code == 404:
            title, text = "Not found", f"There is no console page at {path[:200]}."
        else:
            title, text = "Refused", f"{exc.status_code}: {exc.detail}"
        return html.message(title, text, who, exc.status_code, back=True)

    app.add_exception_handler(HTTPException, answer)
