"""Who is signed in to the console, as FastAPI dependencies: written once, used by every
page (:data:`Viewer`) and every form that changes something (:data:`Actor`).

The session lives on the server (:mod:`oncebox.engine.sessions`): the cookie
(``HttpOnly``, ``SameSite=Strict``, ``Path=/console``, ``Secure`` over https) holds only a
random session id, never a credential. A page asked for without a live session answers
with the sign-in form (:class:`SignedOut`); a form posted without one, or without the
session's CSRF value, is refused before anything runs (:class:`Refused`).

Read-only. A session whose token has only the ``read`` scope sees every page of its
inboxes and acts on nothing: :data:`Actor` refuses it (403) before any form runs, so a
route cannot forget to, and the pages render no form for it (``who.may_act``).

CSRF. Every form that changes something (resolve, retry, verify, sign-out) carries the
session's CSRF value: HMAC-SHA256 keyed by the session's secret id, so it is tied to this
one sign-in and cannot be computed without the cookie. The sign-in form itself carries a
random value that must match a short-lived ``SameSite=Strict`` cookie (login CSRF).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from typing import Annotated
from urllib.parse import parse_qs

from fastapi import Depends, FastAPI, Request
from starlette.responses import RedirectResponse, Response

from oncebox.engine.box import Oncebox
from oncebox.engine.sessions import Session, Sessions
from oncebox.surfaces.http import auth
from oncebox.surfaces.http.console import html as h
from oncebox.surfaces.http.console.html import BASE, HEADERS
from oncebox.surfaces.http.reading import Readers

COOKIE = "oncebox_console"
SIGNIN_COOKIE = "oncebox_console_signin"
MAX_FORM = 16_384  # the gate bounds console bodies to this (no token in their head)


@dataclass(frozen=True)
class Console:
    """What the console's routes work with (on ``app.state.console``)."""

    box: Oncebox
    sessions: Sessions
    private_key: bytes | None
    readers: Readers = field(default_factory=Readers)  # the API's: one per worker

    def covered(self, who: Session) -> list[str]:
        """The declared inboxes the session's token covers: all the console shows."""
        return [a.name for a in self.box.inboxes if who.token.covers(a.name)]

    def triage_inboxes(self, who: Session) -> list[str]:
        """The covered inboxes that keep a triage ledger."""
        return [
            a.name for a in self.box.inboxes if who.token.covers(a.name) and a.row.apply == "triage"
        ]

    def chosen(self, who: Session, request: Request) -> list[str]:
        """The one inbox asked for (``?inbox=``) if covered, else every covered one."""
        wanted = request.query_params.get("inbox")
        names = self.covered(who)
        return [wanted] if wanted in names else names


def console(request: Request) -> Console:
    found: Console = request.app.state.console
    return found


Served = Annotated[Console, Depends(console)]


class SignedOut(Exception):
    """A page asked for without a live session: the answer is the sign-in form."""


class Refused(Exception):
    """A form refused before anything ran; the answer is a page saying why."""

    def __init__(self, status: int, detail: str, who: Session | None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.who = who


async def signed_in(request: Request, svc: Served) -> Session | None:
    """The live session of the request's cookie (looked up once a request: the gate's)."""
    return await auth.session(request.scope, request.cookies.get(COOKIE), svc.sessions)


Current = Annotated[Session | None, Depends(signed_in)]


async def viewer(who: Current) -> Session:
    if who is None:
        raise SignedOut()
    return who


Viewer = Annotated[Session, Depends(viewer)]


async def read_form(request: Request) -> dict[str, str]:
    """A urlencoded form's fields (the first of each); nothing for anything else."""
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


def check_csrf(who: Session, fields: dict[str, str]) -> None:
    given = fields.get("csrf", "")
    if not hmac.compare_digest(given.encode(), who.csrf.encode()):
        raise Refused(
            403, "The form's CSRF token is missing or wrong; reload the page and try again.", who
        )


@dataclass(frozen=True)
class Acting:
    """A state-changing form from a live session, its CSRF value checked."""

    who: Session
    fields: dict[str, str]


async def acting(request: Request, who: Current) -> Acting:
    if who is None:
        raise Refused(401, "You are not signed in.", None)
    if not who.may_act:  # the one place a read-only session is kept from acting
        raise Refused(403, "This session is read-only: its token has no operator scope.", who)
    fields = await read_form(request)
    check_csrf(who, fields)
    return Acting(who, fields)


Actor = Annotated[Acting, Depends(acting)]


def signed_out() -> Response:
    """To the sign-in form, the session cookie cleared."""
    response = RedirectResponse(f"{BASE}/signin", status_code=303, headers=HEADERS)
    response.delete_cookie(COOKIE, path=BASE, httponly=True, samesite="strict")
    return response


def refused(
    who: Session | None, detail: str, status: int = 403, headers: dict[str, str] | None = None
) -> Response:
    page = h.message("Refused", detail, who, status)
    page.headers.update(headers or {})
    return page


async def _on_signed_out(_request: Request, _exc: Exception) -> Response:
    return signed_out()


async def _on_refused(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Refused)
    return refused(exc.who, exc.detail, exc.status)


def install(app: FastAPI) -> None:
    """Answer :class:`SignedOut` and :class:`Refused` as the console does."""
    app.add_exception_handler(SignedOut, _on_signed_out)
    app.add_exception_handler(Refused, _on_refused)
