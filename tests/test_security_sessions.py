"""Issue 13, item 4: console sessions live on the server, and the cookie is only their id.

Before, the console cookie was ``issued.nonce.<API token>``: whoever held it held the
operator's API token (good against the whole API), could make its 8-hour age anything by
rewriting ``issued``, and kept it after signing out (nothing on the server knew of it).
Now the cookie is a random id; the store keeps the session (its hash, the token it
belongs to, its expiry on the server clock), and signing out or revoking the token ends
it at once.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import oncebox
from conftest import INBOXES, BoxFactory
from httpserver import serving
from oncebox import ManualClock, Oncebox
from oncebox.surfaces.http import create_app

COOKIE = "oncebox_console"
EIGHT_HOURS = 8 * 3600


@pytest.fixture
def file_box(tmp_path: Path, clock: ManualClock) -> Iterator[Oncebox]:
    box = oncebox.open(f"sqlite:///{tmp_path / 'sessions.db'}", inboxes=INBOXES, clock=clock)
    yield box
    box.close()


@pytest.fixture
def url(file_box: Oncebox, clock: ManualClock) -> Iterator[str]:
    with serving(create_app(file_box, clock=clock)) as base:
        yield base


def client(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, follow_redirects=False, timeout=30)


def behind_tls(app: Any) -> Any:
    """``app`` as a TLS-terminating server runs it: the request's scheme is https."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        await app({**scope, "scheme": "https"} if scope["type"] == "http" else scope, receive, send)

    return wrapped


def sign_in(http: httpx.Client, secret: str) -> httpx.Response:
    form = http.get("/console/signin")
    found = re.search(r'name="signin" value="([^"]+)"', form.text)
    assert found, form.text
    signed_in = http.post("/console/signin", data={"signin": found.group(1), "token": secret})
    assert signed_in.status_code == 303 and signed_in.headers["location"] == "/console"
    return signed_in


def opens_console(url: str, cookie: str) -> bool:
    """Whether a browser holding only this cookie value gets the console."""
    with client(url) as other:
        page = other.get("/console", headers={"Cookie": f"{COOKIE}={cookie}"})
    if page.status_code == 303:
        assert page.headers["location"] == "/console/signin"
        return False
    assert page.status_code == 200, page.text
    return "Sign out" in page.text


def csrf_of(http: httpx.Client) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', http.get("/console").text)
    assert found
    return found.group(1)


def operator(box: Oncebox, name: str = "ops") -> str:
    return box.create_token(name, ["*"], ["operator"]).secret


def test_the_cookie_carries_no_credential(file_box: Oncebox, url: str) -> None:
    secret = operator(file_box)
    with client(url) as http:
        set_cookie = sign_in(http, secret).headers["set-cookie"]
        value = http.cookies[COOKIE]
        api = http.get("/v1/log/checkpoint", headers={"Authorization": f"Bearer {value}"})
    assert secret not in set_cookie and secret not in value
    # Nothing in the cookie is good against the API: not the whole value, not any part.
    assert api.status_code == 401
    assert all(file_box.authenticate(part) is None for part in [value, *value.split(".")])
    assert opens_console(url, value)


def test_a_credential_put_in_the_cookie_opens_nothing(
    file_box: Oncebox, url: str, clock: ManualClock
) -> None:
    """The old cookie form holding a live operator token, and ids never issued."""
    secret = operator(file_box)
    forged = [
        f"{int(clock())}.{secrets.token_urlsafe(16)}.{secret}",  # the old form
        secret,
        secrets.token_urlsafe(32),
        "",
        "x" * 5000,
    ]
    assert [opens_console(url, value) for value in forged] == [False] * len(forged)


def test_a_session_ends_at_its_expiry_whatever_the_cookie_says(
    file_box: Oncebox, url: str, clock: ManualClock
) -> None:
    with client(url) as http:
        sign_in(http, operator(file_box))
        value = http.cookies[COOKIE]
    clock.advance(EIGHT_HOURS - 60)
    assert opens_console(url, value)  # positive control: still in its 8 hours
    clock.advance(61)
    assert not opens_console(url, value)
    # Its holder rewrites whatever could be an issued time (a leading number) to now:
    # the session's age is the store's, so no rewrite brings it back.
    rewrites = {
        re.sub(r"^\d+", str(int(clock())), value),
        re.sub(r"^\d+", str(int(clock()) - 60), value),
        f"{int(clock())}{value}",
        f"{int(clock())}.{value}",
    }
    assert [opens_console(url, v) for v in rewrites] == [False] * len(rewrites)


def test_signing_out_ends_the_session_for_every_copy_of_the_cookie(
    file_box: Oncebox, url: str
) -> None:
    with client(url) as http:
        sign_in(http, operator(file_box))
        copied = http.cookies[COOKIE]
        assert opens_console(url, copied)
        out = http.post("/console/signout", data={"csrf": csrf_of(http)})
        assert out.status_code == 303 and out.headers["location"] == "/console/signin"
    assert not opens_console(url, copied)


def test_revoking_the_token_ends_its_sessions_at_once(file_box: Oncebox, url: str) -> None:
    with client(url) as http:
        sign_in(http, operator(file_box, "ops"))
        first = http.cookies[COOKIE]
    with client(url) as http:
        sign_in(http, operator(file_box, "other"))
        second = http.cookies[COOKIE]
    file_box.revoke_token("ops")
    assert not opens_console(url, first)
    assert opens_console(url, second)  # another token's session stays
    # A new token under the old name does not bring the old session back.
    operator(file_box, "ops")
    assert not opens_console(url, first)


def test_the_cookie_is_http_only_strict_and_secure_over_tls(
    file_box: Oncebox, url: str, clock: ManualClock
) -> None:
    secret = operator(file_box)
    with client(url) as http:
        plain = sign_in(http, secret).headers["set-cookie"].lower()
    with serving(behind_tls(create_app(file_box, clock=clock))) as tls_url, client(tls_url) as http:
        tls = sign_in(http, secret).headers["set-cookie"].lower()
    for header in (plain, tls):
        assert "httponly" in header and "samesite=strict" in header and "path=/console" in header
    assert "secure" not in plain and "; secure" in tls


def test_sessions_on_every_backend(make_box: BoxFactory, clock: ManualClock) -> None:
    """The engine's sessions on each store: open, find, expire, end, revoke."""
    from oncebox.engine.sessions import Sessions

    box = make_box()
    sessions = Sessions(box.store, lifetime=600)
    token = box.create_token("ops", ["*"], ["operator"]).token
    one, two, three = (sessions.open(token) for _ in range(3))
    assert len({one, two, three}) == 3
    found = sessions.find(one)
    assert found is not None and found.token.id == token.id and found.token.name == "ops"
    assert found.expires_at == clock() + 600
    assert found.csrf != sessions.find(two).csrf  # type: ignore[union-attr]
    sessions.end(one)
    assert sessions.find(one) is None and sessions.find(two) is not None
    clock.advance(601)
    assert sessions.find(two) is None
    four = sessions.open(token)
    assert sessions.find(four) is not None
    box.revoke_token("ops")
    assert sessions.find(four) is None
    assert sessions.find("not-a-session") is None and sessions.find("") is None
