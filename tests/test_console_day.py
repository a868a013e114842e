"""A working day in the console, in Debian's Chromium (Playwright): the overview puts
what needs attention first, says when each inbox and triage site last delivered,
refreshes itself and changes its chart's range; dead letters with counts by reason,
newest or oldest first, date pickers; the log a page at a time, filtered; and every
per-row button inside a 420 px screen. One served app (the desk's day) and one browser
for the module. Set ``ONCEBOX_SCREENSHOTS`` to a directory to keep screenshots at 1280
and 420 px."""

from __future__ import annotations

import re
import time

import pytest

from oncebox import Delivery
from oncebox.formats.ussd_h1 import make_frame
from test_console import browser as browser  # the same Chromium, checked there
from test_console_bulk import shoot
from test_console_desk import ZONE, Desk, open_page
from test_console_desk import desk as desk  # the desk's day: conflicts, 60 dead letters

pytestmark = pytest.mark.slow  # browsers: every test drives Chromium

sync_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[dev]'")
FIRST_COLUMN = "table.dead-letters tbody td:first-child"
ISO_LOCAL = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+05:30$")  # ZONE is UTC+05:30


@pytest.fixture
def page(browser: sync_api.Browser, desk: Desk) -> sync_api.Page:
    page = open_page(browser, desk, 1280)
    problems: list[str] = []
    page.on("console", lambda message: problems.append(message.text))
    yield page  # type: ignore[misc]
    page.context.close()
    # Nothing blocked by the Content-Security-Policy, no errors (the 400s asked for aside).
    assert [p for p in problems if "status of 400" not in p] == []


def test_the_overview_puts_attention_first_and_refreshes_itself(
    page: sync_api.Page, desk: Desk
) -> None:
    page.goto(f"{desk.url}/console?every=2")
    order = page.eval_on_selector_all("section.inbox", "all => all.map(s => s.id)")
    # ussd has open conflicts; hooks an open dead letter; the quiet ones after, by name.
    assert order == ["inbox-ussd", "inbox-hooks", "inbox-feed", "inbox-listing"]
    ussd = page.locator("#inbox-ussd")
    assert ussd.locator(".figure.conflicts b").inner_text() == "3"
    assert "needs attention" in ussd.locator("h2").inner_text()
    assert page.locator("#inbox-listing .flag").count() == 0
    # The last delivery: ISO 8601 in the browser's zone, UTC on hover, and how long ago.
    last = ussd.locator(".figure.delivery time")
    assert ISO_LOCAL.match(last.inner_text()), last.inner_text()
    assert (last.get_attribute("title") or "").endswith("Z UTC")
    assert ussd.locator(".figure.delivery b").inner_text().endswith(" ago")
    assert page.locator("#inbox-feed .figure.delivery b").inner_text() == "never"
    site = ussd.locator("table.sites tr", has_text="Kakuma1")
    assert ISO_LOCAL.match(site.locator("time").inner_text())
    shoot(page, "overview")

    # Live: a delivery after the page loaded changes the figure, with no navigation.
    page.evaluate("window.stillHere = true")
    before = int(ussd.locator(".figure.letters b").inner_text())
    desk.box.ingest("ussd", Delivery(b"junk after load", key="late-1"))
    page.wait_for_function(
        "n => document.querySelector('#inbox-ussd .figure.letters b').textContent == n",
        arg=str(before + 1),
        timeout=20_000,
    )
    assert page.evaluate("window.stillHere") is True  # the same document
    assert ISO_LOCAL.match(page.locator("#overview p.refreshed time").inner_text())

    # The chart's range, kept in the URL.
    hours = page.locator("#inbox-ussd .chart .hours span")
    assert hours.count() == 8 and page.locator("nav.ranges a[aria-current]").inner_text() == "24h"
    with page.expect_navigation():
        page.click("nav.ranges >> text=7d")
    assert "range=7d" in page.url
    assert "over the last 7 days" in page.locator("#inbox-ussd figcaption").inner_text()
    assert hours.count() == 7 and re.match(r"^\d\d-\d\d$", hours.first.inner_text())
    assert page.locator("#overview").get_attribute("data-live").endswith("range=7d&every=2")
    page.goto(f"{desk.url}/console?range=1y")
    assert "unknown range '1y'; known: 6h, 24h, 7d, 30d" in page.inner_text(".notice.bad")


def test_dead_letters_count_by_reason_and_sort_and_pick_dates(
    page: sync_api.Page, desk: Desk
) -> None:
    page.goto(f"{desk.url}/console/dead-letters?inbox=ussd")
    counts = page.locator("#letter-counts")
    reasons = counts.locator("ul.reasons li").all_inner_texts()
    assert reasons[0].startswith("bad_checksum 40 open of 40"), reasons
    assert any(r.startswith("bad_format") for r in reasons)
    # Newest first by default, oldest first a click away; the filters are kept.
    ids = [int(i) for i in page.locator(FIRST_COLUMN).all_inner_texts()]
    assert ids == sorted(ids, reverse=True) and "newest first" in page.inner_text("#letters")
    with page.expect_navigation():
        counts.locator("a", has_text="bad_checksum").click()
    assert "reason=bad_checksum" in page.url and "inbox=ussd" in page.url
    with page.expect_navigation():
        page.click("a:text('Oldest first')")
    ids = [int(i) for i in page.locator(FIRST_COLUMN).all_inner_texts()]
    assert ids == sorted(ids) and len(ids) == 40 and "order=oldest" in page.url
    assert page.input_value("input[name=reason]") == "bad_checksum"
    # Date pickers, no placeholder that reads like a value.
    assert page.get_attribute("input[name=since]", "type") == "datetime-local"
    placeholders = page.eval_on_selector_all(
        "form.filters input", "all => all.map(i => i.placeholder).filter(p => p)"
    )
    assert placeholders == []
    local = time.strftime("%Y-%m-%dT%H:%M", time.gmtime(desk.start + 3600 + 19_800))
    page.goto(f"{desk.url}/console/dead-letters?inbox=ussd&order=oldest")
    page.fill("input[name=since]", local)
    with page.expect_navigation():
        page.click("form.filters button")
    assert "order=oldest" in page.url and "Z" in page.url
    rows = page.locator("table.dead-letters tbody tr")
    assert rows.count() >= 19 and "bad_checksum" not in page.inner_text("table.dead-letters")
    assert page.input_value("input[name=since]").startswith(local)  # shown back, local


def test_the_log_is_paged_and_filtered(page: sync_api.Page, desk: Desk) -> None:
    frames = [make_frame(i, "Kakuma2", "WAT", 1, 50).encode() for i in range(60)]
    desk.box.ingest_batch("ussd", [Delivery(f, key=f"day-{i}") for i, f in enumerate(frames)])
    conflict = desk.box.quarantined("ussd")[0]
    desk.box.resolve(conflict.id, "keep", "checked by radio", "desk-anna")
    desk.box.seal()
    page.goto(f"{desk.url}/console/log")
    rows = page.locator("table.log tbody tr")
    assert rows.count() == 50
    newest = int(rows.first.locator("td").first.inner_text())
    with page.expect_navigation():
        page.click("p.paging a:text('Older')")
    older = [int(s) for s in page.locator("table.log tbody td:first-child").all_inner_texts()]
    assert older[0] == newest - 50 and older == sorted(older, reverse=True)
    with page.expect_navigation():
        page.click("p.paging a:text('Newer')")
    assert int(rows.first.locator("td").first.inner_text()) == newest
    # Filtered by step, actor and inbox, with the form shown back.
    page.select_option("select[name=step]", "resolve")
    page.fill("input[name=actor]", "desk-anna")
    page.select_option("#entries select[name=inbox]", "ussd")
    with page.expect_navigation():
        page.click("#entries form.filters button")
    assert rows.count() == 1 and "desk-anna" in rows.first.inner_text()
    assert "step=resolve" in page.url and "actor=desk-anna" in page.url
    shoot(page, "log")
    answer = page.goto(f"{desk.url}/console/log?step=acept")
    assert answer is not None and answer.status == 400
    said = page.inner_text(".notice.bad")
    assert "unknown step 'acept' (did you mean accept?); known: accept," in said
    page.goto(f"{desk.url}/console/log?step=accept&inbox=hooks")
    assert rows.count() == 0 and "No entries match here." in page.inner_text("#entries")


def test_every_row_button_is_on_a_420px_screen(browser: sync_api.Browser, desk: Desk) -> None:
    page = open_page(browser, desk, 420)
    try:
        for path in ["/dead-letters?inbox=ussd", "/quarantine", "/records?inbox=ussd", "/log"]:
            page.goto(f"{desk.url}/console{path}")
            assert page.evaluate("document.documentElement.scrollWidth") <= 420, path
            buttons = page.locator("main button, table.cards td.row-acts a")
            seen = 0
            for i in range(buttons.count()):
                box = buttons.nth(i).bounding_box()
                if box is None:  # inside a closed <details>
                    continue
                seen += 1
                assert box["x"] >= 0 and box["x"] + box["width"] <= 420, (path, i, box)
            assert seen > 0, path
        page.goto(f"{desk.url}/console/dead-letters?inbox=ussd")
        first = page.locator("table.dead-letters tbody tr").first
        first.locator("form.replay button").scroll_into_view_if_needed()
        assert first.locator("form.replay button").is_visible()
        assert first.locator("td[data-label=reason]").is_visible()
        assert page.locator("[data-zone]").first.inner_text() in (ZONE, "Asia/Calcutta")
    finally:
        page.context.close()
