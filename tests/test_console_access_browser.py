"""Issue 23, item 5 (access) in a real Chromium: a read token signs in and sees every
page with no form that acts; an admin creates a token with an expiry on the tokens
page, sees its secret once, revokes it, and pages on to the oldest tokens.

Set ``ONCEBOX_SCREENSHOTS`` to a directory to keep screenshots at 1280 and 420 px."""

from __future__ import annotations

import pytest

from oncebox import Delivery
from oncebox.formats.ussd_h1 import make_frame
from test_console import Served, sign_in
from test_console import browser as browser  # the same Chromium fixture
from test_console import page as page
from test_console import served as served
from test_console_bulk import _letters, shoot
from test_token_listing import many_tokens

pytestmark = pytest.mark.slow  # browsers: every test drives Chromium

sync_api = pytest.importorskip("playwright.sync_api")
ACTIONS = ["Replay", "Archive", "Resolve", "Retry", "Verify the log", "now", "Revoke"]


def test_a_read_token_sees_everything_and_no_form_that_acts(
    page: sync_api.Page, served: Served
) -> None:
    _letters(served)
    for revision in (3, 9):  # an open conflict
        frame = make_frame(7, "K1", "MED", revision, 86).encode()
        served.box.ingest("ussd", Delivery(frame, key="k7-7"))
    reader = served.box.create_token("auditor", ["*"], ["read"]).secret
    sign_in(page, served, reader)
    assert "read-only" in page.inner_text("header")
    for path, shown in [
        ("", "ussd"),
        ("/dead-letters?inbox=ussd&bulk=replay", "bad_checksum"),
        ("/quarantine", "k7-7"),
        ("/work", "Work keys"),
        ("/log", "Latest checkpoint"),
    ]:
        page.goto(f"{served.url}/console{path}")
        assert shown in page.inner_text("main"), path
        assert page.locator("form[method=post]").count() == 1, path  # sign-out only
        buttons = page.locator("main button").all_inner_texts()
        assert not [b for b in buttons if any(a in b for a in ACTIONS)], (path, buttons)
        assert page.locator("nav a", has_text="Tokens").count() == 0
        name = path.strip("/").split("?")[0] or "overview"
        if name in ("dead-letters", "quarantine"):
            shoot(page, f"readonly-{name}")


def test_an_admin_creates_a_token_sees_its_secret_once_and_revokes_it(
    page: sync_api.Page, served: Served
) -> None:
    admin = served.box.create_token("root", ["*"], ["admin"]).secret
    sign_in(page, served, admin)
    with page.expect_navigation():
        page.click("nav a:text('Tokens')")
    page.fill("form.new-token input[name=name]", "gateway-2")
    page.fill("form.new-token input[name=inboxes]", "ussd")
    page.check("form.new-token input[name=scope_write]")
    page.fill("form.new-token input[name=expires]", "30d")
    with page.expect_navigation():
        page.click("form.new-token button")
    secret = page.inner_text("#secret pre.secret").strip()
    assert secret.startswith("obx_")
    assert "Copy its secret now" in page.inner_text("p.notice.ok")
    token = served.box.authenticate(secret)
    assert token is not None and token.inboxes == ("ussd",) and token.expires_at is not None
    shoot(page, "tokens-created")
    page.goto(f"{served.url}/console/tokens")
    assert secret not in page.content()  # never shown again
    row = page.locator("table.tokens tr", has_text="gateway-2")
    assert "write" in row.inner_text() and "ussd" in row.inner_text()
    shoot(page, "tokens")
    with page.expect_navigation():
        row.locator("form.revoke button").click()
    assert "Token gateway-2 revoked." in page.inner_text("p.notice.ok")
    assert "revoked" in page.locator("table.tokens tr", has_text="gateway-2").inner_text()
    assert served.box.authenticate(secret) is None
    shoot(page, "tokens-revoked")
    many_tokens(served.box, 50)  # 54 now: a second page of the 4 oldest
    page.goto(f"{served.url}/console/tokens")
    assert page.locator("table.tokens tbody tr").count() == 50
    with page.expect_navigation():
        page.click("a:text('Next page')")
    names = page.locator("table.tokens tbody tr td:nth-child(2)").all_inner_texts()
    assert names == ["gateway-2", "root", "ops", "api"]
