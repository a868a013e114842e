"""The operator console in a real headless Chromium (Debian's ``chromium``, via Playwright).

The service runs in uvicorn on 127.0.0.1; deliveries go in through the HTTP API with
httpx, then a browser signs in, sees the conflict (original and newcomer side by side),
resolves it, and sees it leave the list. ``ONCEBOX_SCREENSHOTS=dir`` keeps a screenshot
of each page in ``dir``.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

import oncebox
from conftest import INBOXES, BoxFactory
from helpers import event_body
from httpserver import serving
from oncebox import Delivery, ManualClock, Oncebox
from oncebox.formats.ussd_h1 import make_frame
from oncebox.surfaces.http import create_app

sync_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[dev]'")

# Debian's chromium-headless-shell, which test.sh installs: the browser without the
# windowing of the full one (what Playwright itself runs headless), a third of the CPU per
# page, its own browser process a seventh; Debian's chromium where only that is installed.
HEADLESS_SHELL = "/usr/bin/chromium-headless-shell"
CHROMIUM = os.environ.get("ONCEBOX_TEST_CHROMIUM") or (
    HEADLESS_SHELL if os.access(HEADLESS_SHELL, os.X_OK) else "/usr/bin/chromium"
)
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    *os.environ.get("XTRA_ARGS", "").split(),
]
# Screenshots only on request: Chromium encoding a whole page as PNG is most of a second of
# CPU, and shows a person what the assertions beside it have checked already.
SHOTS = os.environ.get("ONCEBOX_SCREENSHOTS")


@dataclass
class Served:
    box: Oncebox
    url: str
    writer: str  # write + read on every inbox, for the API
    operator: str  # operator on every inbox, for the console

    def api(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.writer}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """The service over a SQLite file, on a free port, in a background thread."""
    clock = ManualClock(time.time())
    box = oncebox.open(f"sqlite:///{tmp_path / 'console.db'}", inboxes=INBOXES, clock=clock)
    app = create_app(box)
    writer = box.create_token("api", ["*"], ["read", "write"]).secret
    operator = box.create_token("ops", ["*"], ["operator"]).secret
    try:
        with serving(app) as url:
            yield Served(box, url, writer, operator)
    finally:
        box.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[sync_api.Browser]:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"{CHROMIUM} not found: `bash test.sh` installs Debian's chromium-headless-shell "
            "(apt-get install chromium-headless-shell), or set ONCEBOX_TEST_CHROMIUM"
        )
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: sync_api.Browser) -> Iterator[sync_api.Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    problems: list[str] = []
    page.on("console", lambda message: problems.append(message.text))
    try:
        yield page
    finally:
        context.close()
    # The pages work under their Content-Security-Policy: nothing blocked, no errors.
    assert not [p for p in problems if "Content Security Policy" in p or "Refused" in p]


def shot(page: sync_api.Page, name: str, *, full: bool = True) -> None:
    """A screenshot of the page in ``ONCEBOX_SCREENSHOTS``, when it is set."""
    if not SHOTS:
        return
    Path(SHOTS).mkdir(parents=True, exist_ok=True)
    path = Path(SHOTS) / f"{name}.png"
    page.screenshot(path=str(path), full_page=full)
    assert path.stat().st_size > 1000


def sign_in(page: sync_api.Page, served: Served, secret: str) -> sync_api.Response | None:
    page.goto(f"{served.url}/console/signin")
    page.fill("input[name=token]", secret)
    with page.expect_navigation() as navigation:
        page.click("form.signin button[type=submit]")
    return navigation.value


def frame(seq: int, headcount: int) -> bytes:
    return make_frame(seq, "Kakuma1", "MED", headcount, 86).encode()


HOSTILE = '<img src=x onerror="document.title=1">'


def deliver_traffic(served: Served) -> int:
    """An accepted record, a conflicting newcomer, dead letters, a work key in review."""
    with served.api() as http:
        url = "/v1/inboxes/ussd/deliveries"
        first = http.post(url, content=frame(1, 3), headers={"Oncebox-Key": "rec1-1"})
        assert first.status_code == 201, first.text
        http.post(url, content=frame(2, 8), headers={"Oncebox-Key": "rec1-2"})
        clash = http.post(url, content=frame(1, 9), headers={"Oncebox-Key": "rec1-1"})
        assert clash.status_code == 200 and clash.json()["verdict"] == "conflict"
        bad = http.post(url, content=HOSTILE.encode(), headers={"Oncebox-Key": "x-1"})
        assert bad.status_code == 422 and bad.json()["reason"] == "bad_format"
        for n in ("n1", "n2"):
            event = event_body(n, seller_id="A1", sku=f"SKU-{n}", marketplace_id="M1")
            made = http.post(
                "/v1/inboxes/listing/deliveries",
                content=event,
                headers={"Content-Type": "application/json"},
            )
            assert made.status_code == 201, made.text
    quarantine_id = int(clash.json()["quarantine_id"])

    def broken(_key: object) -> object:
        raise ConnectionError("the listing service is down")

    worker = served.box.reconciler("listing", reader=broken, max_failures=1)  # type: ignore[arg-type]
    worker.refresh_once()
    assert len(worker.review()) == 1
    return quarantine_id


# -- the operator's walk ---------------------------------------------------------------------
@pytest.mark.slow
def test_operator_resolves_a_conflict_in_the_browser(page: sync_api.Page, served: Served) -> None:
    quarantine_id = deliver_traffic(served)

    # Not signed in: every page leads to the sign-in form.
    page.goto(f"{served.url}/console/quarantine")
    assert page.url.endswith("/console/signin")
    shot(page, "01-signin")

    response = sign_in(page, served, served.operator)
    assert response is not None and response.ok
    assert page.url == f"{served.url}/console"
    cookie = next(c for c in page.context.cookies() if c["name"] == "oncebox_console")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/console"

    # Overview: counts by verdict, per inbox, with the hourly chart.
    ussd = page.locator("#inbox-ussd")
    assert ussd.locator(".count.v-accepted b").inner_text() == "2"
    assert ussd.locator(".count.v-conflict b").inner_text() == "1"
    assert ussd.locator(".count.v-rejected b").inner_text() == "1"
    assert ussd.locator("svg rect.v-accepted").count() >= 1
    assert page.locator("#inbox-listing .count.v-accepted b").inner_text() == "2"
    shot(page, "02-overview")

    # Quarantine: the original and the newcomer side by side.
    page.click("nav >> text=Quarantine")
    card = page.locator(f"#q-{quarantine_id}")
    assert card.is_visible()
    original = page.locator("article.conflict", has=card).locator(".side.original")
    assert "Original" in original.locator("h3").inner_text()
    assert "H1|1|Kakuma1|MED|3|86|" in original.locator("pre").inner_text()
    assert "Newcomer" in card.locator("h3").inner_text()
    assert "H1|1|Kakuma1|MED|9|86|" in card.locator("pre").inner_text()
    # The differing field is marked with its old and new value.
    assert card.locator("table.changes").inner_text().split("\t") == ["headcount", "3 -> 9"]
    shot(page, "03-quarantine")

    # Resolve: keep the original, with a note; the row leaves the open list.
    card.locator("input[value=keep]").check()
    card.locator("textarea[name=note]").fill("radio operator confirmed 3 <b>not</b> 9")
    with page.expect_navigation():
        card.locator("button[type=submit]").click()
    assert page.url.endswith(f"/console/quarantine?resolved={quarantine_id}")
    assert "resolved: kept" in page.locator(".notice").inner_text()
    assert page.locator(f"#q-{quarantine_id}").count() == 0
    assert page.locator("#open").inner_text().count("No open conflicts.") == 1
    resolved = page.locator("table.resolved tbody tr").first.inner_text()
    assert str(quarantine_id) in resolved and "radio operator confirmed 3 <b>not</b> 9" in resolved
    shot(page, "04-quarantine-resolved")
    with served.api() as http:
        row = http.get(f"/v1/quarantine/{quarantine_id}").json()
        assert row["status"] == "kept" and row["note"].startswith("radio operator")
        assert row["resolved_by"] == "ops"
    assert served.box.stats("ussd")["quarantine_open"] == 0

    # Dead letters: what arrived is shown as text, never as markup.
    page.click("nav >> text=Dead letters")
    table = page.locator("table.dead-letters")
    assert "bad_format" in table.inner_text()
    assert HOSTILE in table.locator("pre").first.inner_text()
    assert page.locator("main img").count() == 0 and page.title() != "1"
    shot(page, "05-dead-letters")

    # Work keys: one dirty, one in review; retry sends it back.
    page.click("nav >> text=Work keys")
    review = page.locator("#work-listing table.review")
    assert "ConnectionError: the listing service is down" in review.inner_text()
    assert page.locator("#work-listing table.dirty tbody tr").count() == 1
    shot(page, "06-work")
    with page.expect_navigation():
        review.locator("button", has_text="Retry").click()
    assert "Sent back from review by ops." in page.locator(".notice").inner_text()
    [retried] = [e for e in served.box.log_entries() if e.step == "retry"]
    assert json.loads(retried.state)["actor"] == "ops"  # the token's name
    assert page.locator("#work-listing table.review").count() == 0
    assert page.locator("#work-listing table.dirty tbody tr").count() == 2
    assert served.box.reconciler("listing").review() == []
    shot(page, "07-work-retried")

    # The log: head, checkpoint, and a verify that runs box.verify().
    page.click("nav >> text=Log")
    size = served.box.checkpoint().tree_size
    assert size > 0
    facts = page.locator("#checkpoint dl").inner_text()
    assert str(size) in facts and served.box.checkpoint().root in facts
    assert page.locator("table.log tbody tr").count() >= 1
    shot(page, "08-log")
    with page.expect_navigation():
        page.click("text=Verify the log")
    verification = page.locator("#verification")
    assert "The log verifies." in verification.inner_text()
    assert re.search(r"entries replayed\s+\d+", verification.inner_text())
    shot(page, "09-log-verified")

    # Sign out: the cookie is gone and the pages lead to the sign-in form again.
    with page.expect_navigation():
        page.click("form.signout button")
    assert page.url.endswith("/console/signin")
    assert not [c for c in page.context.cookies() if c["name"] == "oncebox_console"]
    page.goto(f"{served.url}/console")
    assert page.url.endswith("/console/signin")
    names = ["01-signin", "02-overview", "03-quarantine", "04-quarantine-resolved",
             "05-dead-letters", "06-work", "07-work-retried", "08-log",
             "09-log-verified"]  # fmt: skip
    assert not SHOTS or all((Path(SHOTS) / f"{name}.png").is_file() for name in names)


# -- who may sign in -------------------------------------------------------------------------
@pytest.mark.slow
def test_wrong_or_insufficient_tokens_cannot_sign_in(page: sync_api.Page, served: Served) -> None:
    reader = served.box.create_token("reader", ["*"], ["read"]).secret
    writer_only = served.box.create_token("writer", ["*"], ["write"]).secret
    signing = served.box.create_token("signer", ["*"], ["operator"], hmac=True).secret
    revoked = served.box.create_token("gone", ["*"], ["operator"]).secret
    served.box.revoke_token("gone")
    cases = [
        ("obx_not-a-real-token", 401, "Unknown or revoked token."),
        (revoked, 401, "Unknown or revoked token."),
        (writer_only, 403, "lacks the read scope"),  # a read token signs in, read-only
        (signing, 403, "signs its requests"),
    ]
    for secret, status, message in cases:
        response = sign_in(page, served, secret)
        assert response is not None and response.status == status
        assert message in page.locator(".notice").inner_text()
        assert not [c for c in page.context.cookies() if c["name"] == "oncebox_console"]
        page.goto(f"{served.url}/console")
        assert page.url.endswith("/console/signin")
    shot(page, "10-signin-refused")

    # A forged cookie holding a read token does not open the console either.
    forged = {"oncebox_console": f"{int(time.time())}.n.{reader}"}
    with httpx.Client(base_url=served.url, cookies=forged, follow_redirects=False) as http:
        refused = http.get("/console")
        assert refused.status_code == 303 and refused.headers["location"] == "/console/signin"
        # The sign-in form needs its own one-time value (login CSRF).
        blind = http.post("/console/signin", data={"token": served.operator})
        assert blind.status_code == 403 and "oncebox_console=" not in blind.headers.get(
            "set-cookie", ""
        )


# -- CSRF ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_post_without_the_csrf_token_is_refused(page: sync_api.Page, served: Served) -> None:
    quarantine_id = deliver_traffic(served)
    sign_in(page, served, served.operator)
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    assert "oncebox_console" in cookies
    page.goto(f"{served.url}/console/quarantine")
    csrf = page.locator(f"#q-{quarantine_id} input[name=csrf]").get_attribute("value")
    assert csrf

    url = f"/console/quarantine/{quarantine_id}/resolve"
    form = {"action": "accept", "note": "forged"}
    with httpx.Client(base_url=served.url, cookies=cookies, follow_redirects=False) as http:
        missing = http.post(url, data=form)
        assert missing.status_code == 403 and "CSRF" in missing.text
        wrong = http.post(url, data={**form, "csrf": "0" * 64})
        assert wrong.status_code == 403
        # Another sign-in's token does not fit this session either.
        other = page.context.browser
        assert other is not None
        second = other.new_context()
        try:
            page2 = second.new_page()
            sign_in(page2, served, served.operator)
            page2.goto(f"{served.url}/console/quarantine")
            foreign = page2.locator("input[name=csrf]").first.get_attribute("value")
        finally:
            second.close()
        assert foreign and foreign != csrf
        assert http.post(url, data={**form, "csrf": foreign}).status_code == 403
        for path in ("/console/log/verify", "/console/work/retry", "/console/signout"):
            assert http.post(path, data={}).status_code == 403, path
        assert served.box.stats("ussd")["quarantine_open"] == 1  # nothing was resolved

        # Without a session at all: refused too, with nothing done.
        anonymous = httpx.post(served.url + url, data={**form, "csrf": csrf})
        assert anonymous.status_code == 401
        # With the session's own token it goes through.
        done = http.post(url, data={**form, "csrf": csrf})
        assert done.status_code == 303, done.text
    assert served.box.stats("ussd")["quarantine_open"] == 0
    page.goto(f"{served.url}/console/quarantine")
    assert page.locator(f"#q-{quarantine_id}").count() == 0


# -- the overview's figures (every store backend) --------------------------------------------
def test_verdict_history_counts_by_hour_on_the_server_clock(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    box = make_box()
    box.ingest("ussd", Delivery(frame(1, 3), key="a-1"))
    box.ingest("ussd", Delivery(b"junk", key="a-2"))
    clock.advance(3600)
    box.ingest("ussd", Delivery(frame(1, 3), key="a-1"))
    box.ingest("ussd", Delivery(frame(1, 9), key="a-1"))
    box.ingest("ussd", Delivery(frame(2, 9), key="b-2"))
    history = box.verdict_history("ussd", 3)
    hour = int(clock() // 3600) * 3600
    assert [start for start, _ in history] == [hour - 7200, hour - 3600, hour]
    assert [counts for _, counts in history] == [
        {},
        {"accepted": 1, "rejected": 1},
        {"accepted": 1, "conflict": 1, "duplicate": 1},
    ]
    assert box.verdict_history("listing", 2) == [(hour - 3600, {}), (hour, {})]


# -- the stylesheet --------------------------------------------------------------------------
def test_the_stylesheet_is_a_static_file(served: Served) -> None:
    with httpx.Client(base_url=served.url) as http:
        css = http.get("/console/static/console.css")
        missing = http.get("/console/static/nothing.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert css.headers["x-content-type-options"] == "nosniff"
    assert "max-age=300" in css.headers["cache-control"] and "--accepted" in css.text
    assert missing.status_code == 404
