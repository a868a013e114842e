"""Issue 23, item 5 (access) over HTTP, on both backends: a read token's console session
sees and changes nothing (every console POST answers 403, enumerated from the app so a
new route cannot forget it); expired tokens are refused with the reason said, and their
sessions end; last use is written once for a burst of requests; the tokens page is an
admin's (create with an expiry, the secret shown once, revoke, logged with the actor)
and prints names as text."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute

import oncebox
from conftest import INBOXES
from httpserver import serving
from oncebox import ManualClock, Oncebox
from oncebox.surfaces.http import create_app
from test_security_sessions import COOKIE, client, sign_in
from test_token_listing import LONG, many_tokens

POST = re.compile(r'<form[^>]*method="post"[^>]*action="([^"]+)"')
PAGES = ["", "/records", "/triage", "/quarantine", "/dead-letters", "/forwarding", "/work", "/log"]


@dataclass
class Served:
    box: Oncebox
    app: FastAPI
    url: str


@pytest.fixture
def served(shared_url: str, clock: ManualClock) -> Iterator[Served]:
    box = oncebox.open(shared_url, inboxes=INBOXES, clock=clock)
    app = create_app(box, clock=clock)
    try:
        with serving(app) as url:
            yield Served(box, app, url)
    finally:
        box.close()


def csrf_of(http: httpx.Client, path: str = "/console") -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', http.get(path).text)
    assert found
    return found.group(1)


def routes_of(routes: Sequence[BaseRoute]) -> Iterator[APIRoute]:
    """Every API route, those of included routers too (FastAPI wraps each router)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from routes_of(inner.routes)


def console_posts(app: FastAPI) -> list[str]:
    """Every console route that takes a POST, its path parameters filled in."""
    paths = {
        route.path
        for route in routes_of(app.routes)
        if route.path.startswith("/console") and "POST" in route.methods
    }
    return [re.sub(r"\{[^}]+\}", "1", path) for path in sorted(paths)]


def test_a_read_token_signs_in_sees_everything_and_changes_nothing(served: Served) -> None:
    box = served.box
    secret = box.create_token("auditor", ["*"], ["read"]).secret
    posts = console_posts(served.app)
    assert {"/console/signin", "/console/signout", "/console/tokens"} <= set(posts)
    acting = [p for p in posts if p not in ("/console/signin", "/console/signout")]
    assert len(acting) >= 9  # resolve, retry, verify, replay, archive, bulk x2, tokens x2
    with client(served.url) as http:
        sign_in(http, secret)
        csrf = csrf_of(http)
        for path in PAGES:
            page = http.get(f"/console{path}", follow_redirects=True)
            assert page.status_code == 200 and "Sign out" in page.text, path
            assert POST.findall(page.text) == ["/console/signout"], path  # no form acts
            assert "read-only" in page.text
            assert "and actions" not in page.text, path  # no heading promises any
        for path in acting:
            refused = http.post(path, data={"csrf": csrf, "note": "n", "action": "keep"})
            assert refused.status_code == 403, path
            assert "read-only" in refused.text, path
        assert http.get("/console/tokens").status_code == 403
        # Signing out is not an action on the store: it works.
        out = http.post("/console/signout", data={"csrf": csrf})
        assert out.status_code == 303
        assert http.get("/console").status_code == 303


def test_an_operator_acts_but_does_not_manage_tokens(served: Served) -> None:
    secret = served.box.create_token("ops", ["*"], ["operator"]).secret
    with client(served.url) as http:
        sign_in(http, secret)
        csrf = csrf_of(http)
        assert "/console/log/verify" in POST.findall(http.get("/console/log").text)
        assert "/console/tokens" not in http.get("/console").text  # no link to it
        assert http.get("/console/tokens").status_code == 403
        made = http.post("/console/tokens", data={"csrf": csrf, "name": "x", "inboxes": "*"})
        assert made.status_code == 403
    assert [t.name for t in served.box.list_tokens()] == ["ops"]


def test_only_an_operator_of_every_inbox_verifies_the_whole_log(served: Served) -> None:
    """The log's verify replays every inbox's entries (heavy, and a broken log's answer
    lists records of any inbox): an operator of some inboxes neither sees the form nor
    may post it."""
    inbox = served.box.inboxes[0].name
    secret = served.box.create_token("one-inbox", [inbox], ["operator"]).secret
    with client(served.url) as http:
        sign_in(http, secret)
        csrf = csrf_of(http)
        assert "/console/log/verify" not in POST.findall(http.get("/console/log").text)
        refused = http.post("/console/log/verify", data={"csrf": csrf})
        assert refused.status_code == 403
        assert "every inbox" in refused.text


def test_a_signing_token_still_cannot_sign_in(served: Served) -> None:
    secret = served.box.create_token("signed", ["*"], ["read"], hmac=True).secret
    with client(served.url) as http:
        form = http.get("/console/signin")
        nonce = re.search(r'name="signin" value="([^"]+)"', form.text)
        assert nonce
        refused = http.post("/console/signin", data={"signin": nonce[1], "token": secret})
    assert refused.status_code == 403 and "HMAC" in refused.text


def test_an_expired_token_is_refused_everywhere_with_the_reason(
    served: Served, clock: ManualClock
) -> None:
    box = served.box
    secret = box.create_token("temp", ["*"], ["operator", "write"], expires="1h").secret
    bearer = {"Authorization": f"Bearer {secret}"}
    with client(served.url) as http:
        sign_in(http, secret)
        assert http.get("/v1/log/checkpoint", headers=bearer).status_code == 200
        clock.advance(3600)
        api = http.get("/v1/log/checkpoint", headers=bearer)
        assert api.status_code == 401
        assert re.fullmatch(r"token 'temp' expired at \S+Z", api.json()["detail"])
        delivery = http.post(
            "/v1/inboxes/ussd/deliveries", content=b"H1|1|K1|MED|3|86|#00", headers=bearer
        )
        assert delivery.status_code == 401 and "expired" in delivery.json()["detail"]
        # Its console session has ended: the page is the sign-in form again.
        page = http.get("/console")
        assert page.status_code == 303 and page.headers["location"] == "/console/signin"
        form = http.get("/console/signin")
        nonce = re.search(r'name="signin" value="([^"]+)"', form.text)
        assert nonce
        again = http.post("/console/signin", data={"signin": nonce[1], "token": secret})
        assert again.status_code == 401 and "expired at" in again.text


def test_a_burst_of_requests_writes_last_use_once(served: Served, clock: ManualClock) -> None:
    """Measured through the service: 50 requests, each looking its token up, add one
    write of the token's last use."""
    box = served.box
    secret = box.create_token("poller", ["*"], ["read"]).secret
    touched: list[int] = []
    real = box.store.atomic

    def counting(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        if getattr(fn, "__qualname__", "").startswith("Oncebox.authenticate"):
            touched.append(1)
        return real(fn, *args, **kwargs)

    box.store.atomic = counting  # type: ignore[method-assign]
    try:
        with httpx.Client(base_url=served.url, timeout=30) as http:
            for _ in range(50):
                clock.advance(0.5)
                answer = http.get(
                    "/v1/log/checkpoint", headers={"Authorization": f"Bearer {secret}"}
                )
                assert answer.status_code == 200
    finally:
        box.store.atomic = real  # type: ignore[method-assign]
    assert len(touched) == 1
    assert box.list_tokens()[0].last_used_at == clock.now - 49 * 0.5  # the first request's


def test_the_tokens_page_creates_shows_the_secret_once_and_revokes(served: Served) -> None:
    box = served.box
    admin = box.create_token("root", ["*"], ["admin"]).secret
    with client(served.url) as http:
        sign_in(http, admin)
        assert 'href="/console/tokens"' in http.get("/console").text
        csrf = csrf_of(http, "/console/tokens")
        form = {
            "csrf": csrf, "name": "gateway-2", "inboxes": "ussd, listing",
            "scope_write": "1", "scope_read": "1", "expires": "30d",
        }  # fmt: skip
        made = http.post("/console/tokens", data=form)
        assert made.status_code == 201
        secret = re.search(r'<pre class="secret">(obx_[^<]+)</pre>', made.text)
        assert secret and made.headers["cache-control"] == "no-store"
        token = box.authenticate(secret[1])
        assert token is not None and token.inboxes == ("listing", "ussd")
        assert token.expires_at is not None
        listed = http.get("/console/tokens")
        assert secret[1] not in listed.text and "gateway-2" in listed.text  # never again
        revoke = re.search(r'action="(/console/tokens/(\d+)/revoke)"', listed.text)
        assert revoke and revoke[2] == str(token.id)
        assert http.post(revoke[1], data={"csrf": "wrong"}).status_code == 403  # CSRF
        done = http.post(revoke[1], data={"csrf": csrf}, follow_redirects=True)
        assert done.status_code == 200 and "Token gateway-2 revoked." in done.text
    assert box.authenticate(secret[1]) is None
    states = [json.loads(e.state) for e in box.log_entries() if e.step.startswith("token")]
    assert states[-1] == {"token": "gateway-2", "actor": "root"}
    assert states[-2]["actor"] == "root" and states[-2]["name"] == "gateway-2"


def test_revoke_on_the_tokens_page_revokes_that_row_even_beside_a_name_of_digits(
    served: Served,
) -> None:
    """The row's Revoke revokes the token of that id, not also (or instead) a live
    token whose name is the same number."""
    box = served.box
    admin = box.create_token("root", ["*"], ["admin"])
    target = box.create_token("gw-target", ["ussd"])
    decoy = box.create_token(str(target.token.id), ["ussd"])
    with client(served.url) as http:
        sign_in(http, admin.secret)
        csrf = csrf_of(http, "/console/tokens")
        done = http.post(f"/console/tokens/{target.token.id}/revoke", data={"csrf": csrf})
        assert done.status_code == 303
    assert box.authenticate(target.secret) is None
    assert box.authenticate(decoy.secret) is not None


def test_names_typed_on_the_tokens_page_come_back_as_text(served: Served) -> None:
    hostile = "\"'<script>pwned=1</script><img src=x onerror=pwned=2>"
    admin = served.box.create_token("root", ["*"], ["admin"]).secret
    with client(served.url) as http:
        sign_in(http, admin)
        csrf = csrf_of(http, "/console/tokens")
        form = {"csrf": csrf, "name": hostile, "inboxes": hostile, "scope_read": "1",
                "expires": hostile}  # fmt: skip
        refused = http.post("/console/tokens", data=form)
    assert refused.status_code == 422 and "Not created" in refused.text
    assert "<script>pwned" not in refused.text and "<img src=x" not in refused.text
    assert "&lt;script&gt;pwned=1&lt;/script&gt;" in refused.text
    assert [t.name for t in served.box.list_tokens()] == ["root"]


def test_the_session_cookie_of_a_read_token_opens_no_form(served: Served) -> None:
    """A read session's cookie and CSRF value together still move nothing: the refusal
    is the session's, not the page's."""
    box = served.box
    with client(served.url) as http:
        sign_in(http, box.create_token("auditor", ["*"], ["read"]).secret)
        cookie, csrf = http.cookies[COOKIE], csrf_of(http)
    with client(served.url) as other:
        other.cookies.set(COOKIE, cookie, path="/console")
        answer = other.post("/console/tokens", data={"csrf": csrf, "name": "x", "inboxes": "*"})
    assert answer.status_code == 403
    assert [t.name for t in box.list_tokens()] == ["auditor"]


def test_the_tokens_page_lists_fifty_a_page_newest_first_each_row_bounded(
    served: Served,
) -> None:
    ids = many_tokens(served.box, 69)
    admin = served.box.create_token("root", ["*"], ["admin"])
    seen: list[int] = []
    with client(served.url) as http:
        sign_in(http, admin.secret)
        page = http.get("/console/tokens")
        while True:
            assert page.status_code == 200
            rows = re.findall(r'<tr class="\w+"><td>(\d+)</td>', page.text)
            assert 0 < len(rows) <= 50
            seen += [int(row) for row in rows]
            assert len(page.text) < 100_000  # 200 long inbox names are 12 KB a token
            more = re.search(r'href="(/console/tokens\?after=\d+)">Next page', page.text)
            if more is None:
                break
            page = http.get(more[1])
            assert 'href="/console/tokens">First page' in page.text
    assert seen == [admin.token.id, *ids[::-1]]
    assert "inbox-000-" in page.text and ", … <a href=" in page.text  # a long list, cut


def test_one_token_page_shows_every_inbox_a_listing_cuts(served: Served) -> None:
    ids = many_tokens(served.box, 5)
    admin = served.box.create_token("root", ["*"], ["admin"])
    ops = served.box.create_token("ops", ["*"], ["operator"])
    with client(served.url) as http:
        sign_in(http, admin.secret)
        listed = http.get("/console/tokens").text
        links = re.findall(r'<a href="/console/tokens/(\d+)">all inboxes</a>', listed)
        assert links == [str(ids[3])]  # only the token whose list is cut
        page = http.get(f"/console/tokens/{ids[3]}")
        assert page.status_code == 200
        names = re.findall(r'<li><span class="nb">([^<]+)</span></li>', page.text)
        assert names == LONG and "Inboxes (200)" in page.text
        short = http.get(f"/console/tokens/{ids[0]}")
        assert re.findall(r'<li><span class="nb">([^<]+)</span></li>', short.text) == ["ussd"]
        assert http.get("/console/tokens/999999").status_code == 404
        assert http.get("/console/tokens", params={"revoked": "\u00b2"}).status_code == 200
    with client(served.url) as http:
        sign_in(http, ops.secret)
        assert http.get(f"/console/tokens/{ids[3]}").status_code == 403


def test_a_log_cursor_of_digits_int_cannot_read_is_ignored_not_a_500(served: Served) -> None:
    # str.isdigit() takes "²" for a digit, int() does not: the page answered 500.
    secret = served.box.create_token("ops", ["*"], ["operator"]).secret
    with client(served.url) as http:
        sign_in(http, secret)
        for query in ("before=%C2%B2", "after=%C2%B9%C2%B2"):
            page = http.get(f"/console/log?{query}")
            assert page.status_code == 200, (query, page.status_code)
