"""Issue 19, item 3, in the console: large conflicts and dead letters make small pages.

Before, the quarantine page held every content whole (300 conflicts of 1 MiB made 201 MiB
of HTML in 24 s); now it shows each content's first 1,024 bytes with its length and
SHA-256, and all of it is a link away, as is a dead letter's whole kept head. In a real
Chromium, as an operator sees it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from helpers import event_body
from test_console import Served, sign_in
from test_console import browser as browser  # the same Chromium fixture
from test_console import page as page
from test_console import served as served

pytestmark = pytest.mark.slow  # browsers: every test drives Chromium

sync_api = __import__("pytest").importorskip("playwright.sync_api")
BIG = 30_000  # characters of a field, in contents of about 30 KB


def _conflict(served: Served) -> tuple[bytes, bytes]:
    first = event_body("n1", payload={"status": "ACTIVE", "issues": [{"code": "x" * BIG}]})
    second = event_body("n1", payload={"status": "ACTIVE", "issues": [{"code": "y" * BIG}]})
    with served.api() as http:
        url = "/v1/inboxes/listing/deliveries"
        json = {"Content-Type": "application/json"}
        assert http.post(url, content=first, headers=json).status_code == 201
        clash = http.post(url, content=second, headers=json)
        assert clash.json()["verdict"] == "conflict", clash.text
        bad = http.post(url, content=b"a" * 65_000, headers=json)
        assert bad.json()["verdict"] == "rejected", bad.text
    return first, second


def _downloaded(page: sync_api.Page, selector: str) -> bytes:
    with page.expect_download() as download:
        page.click(selector)
    return Path(download.value.path()).read_bytes()


def test_the_quarantine_page_shows_contents_cut_and_all_of_them_a_link_away(
    page: sync_api.Page, served: Served
) -> None:
    _conflict(served)
    sign_in(page, served, served.operator)
    answer = page.goto(f"{served.url}/console/quarantine?inbox=listing")
    assert answer is not None and answer.ok
    html = answer.body()
    assert len(html) < 24_000, len(html)  # before: both contents whole, over 60 KB
    newcomer = page.locator("section.newcomer").first
    shown = newcomer.locator("pre").inner_text()
    assert len(shown) <= 1025 and shown.endswith("…")
    whole = served.box.quarantined("listing")[0].content
    assert (
        newcomer.locator("p.cut")
        .inner_text()
        .startswith(
            f"The first 1,024 of {len(whole):,} bytes, SHA-256 {hashlib.sha256(whole).hexdigest()}"
        )
    )
    assert _downloaded(page, "section.newcomer p.cut a") == whole
    original = served.box.original(served.box.quarantined("listing")[0])
    assert original is not None and original.content is not None
    assert _downloaded(page, "div.original p.cut a") == original.content
    # Past their first bytes, the contents differ (their fields are too long to compare).
    assert "too long to compare" in newcomer.inner_text() or "differ" in newcomer.inner_text()


def test_the_dead_letters_page_shows_heads_cut_and_the_whole_head_a_link_away(
    page: sync_api.Page, served: Served
) -> None:
    _conflict(served)
    sign_in(page, served, served.operator)
    answer = page.goto(f"{served.url}/console/dead-letters?inbox=listing")
    assert answer is not None and answer.ok
    assert len(answer.body()) < 16_000
    assert _downloaded(page, "table.dead-letters a[href$='/head']") == b"a" * 65_000
    # A search term is bounded, and said so on the page.
    page.goto(f"{served.url}/console/dead-letters?inbox=listing&search={'b' * 300}")
    assert "at most 256 bytes" in page.inner_text("main")
