"""Issue 23 in the console, in a real Chromium: dead letters replayed, corrected and
archived, bulk replay and archive previewed before they run, conflicts resolved many at
once; a failure is said as a failure and the filters stay as they were.

Set ``ONCEBOX_SCREENSHOTS`` to a directory to keep screenshots at 1280 and 420 px."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oncebox import Delivery
from oncebox.formats.ussd_h1 import make_frame
from test_console import Served, sign_in
from test_console import browser as browser  # the same Chromium fixture
from test_console import page as page
from test_console import served as served

pytestmark = pytest.mark.slow  # browsers: every test drives Chromium

sync_api = pytest.importorskip("playwright.sync_api")
SHOTS = os.environ.get("ONCEBOX_SCREENSHOTS")


def shoot(page: sync_api.Page, name: str) -> None:
    if not SHOTS:
        return
    for width in (1280, 420):
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(Path(SHOTS) / f"{name}-{width}.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})


def _letters(served: Served) -> list[int]:
    ids = []
    for i in range(3):
        refused = served.box.ingest(
            "ussd", Delivery(f"H1|{i}|K1|MED|3|86|#00".encode(), key=f"c{i}-{i}")
        )
        ids.append(refused.dead_letter_id or 0)
    served.box.ingest("ussd", Delivery(b"junk", key="j-1"))
    return ids


def test_bulk_replay_is_previewed_and_a_refusal_again_is_shown_as_one(
    page: sync_api.Page, served: Served
) -> None:
    ids = _letters(served)
    sign_in(page, served, served.operator)
    page.goto(f"{served.url}/console/dead-letters?inbox=ussd&reason=bad_checksum")
    page.click("text=Preview bulk replay")
    assert "3 dead letters in ussd match" in page.inner_text("#bulk")
    assert [d.attempts for d in served.box.dead_letters("ussd")] == [0] * 4  # nothing yet
    shoot(page, "dead-letters-bulk-preview")
    with page.expect_navigation():
        page.click("#bulk form.bulk button")
    notice = page.locator("p.notice.bad")  # a failure, in red
    assert "3 dead letter(s) acted on; 3 refused again" in notice.inner_text()
    # The filters are as they were.
    assert page.input_value("input[name=reason]") == "bad_checksum"
    assert "reason=bad_checksum" in page.url
    shoot(page, "dead-letters-bulk-after")
    assert [d.attempts for d in served.box.dead_letters("ussd", reason="bad_checksum")] == [1] * 3
    # One replayed alone, refused again: a red notice naming the reason, filters kept.
    row = page.locator("table.dead-letters tr", has_text="c0-0").first
    with page.expect_navigation():
        row.locator("form.replay button:text('Replay')").first.click()
    assert "refused again: bad_checksum (attempt 2)" in page.inner_text("p.notice.bad")
    assert page.input_value("input[name=reason]") == "bad_checksum"
    # Corrected, it closes.
    row = page.locator("table.dead-letters tr", has_text="c1-1").first
    row.locator("details.correct summary").click()
    row.locator("textarea[name=body]").fill(make_frame(1, "K1", "MED", 3, 86))
    row.locator("details.correct input[name=note]").fill("trailer recomputed")
    with page.expect_navigation():
        row.locator("details.correct button").click()
    assert "replayed by ops: accepted" in page.inner_text("p.notice.ok")
    assert served.box.get_dead_letter(ids[1])[1].status == "replayed"  # type: ignore[index]
    # Archived alone, and the rest in bulk, previewed first.
    row = page.locator("table.dead-letters tr", has_text="c2-2").first
    row.locator("form.archive input[name=note]").fill("old gateway")
    with page.expect_navigation():
        row.locator("form.archive button").click()
    assert "archived by ops" in page.inner_text("p.notice.ok")
    page.goto(f"{served.url}/console/dead-letters?inbox=ussd&status=open&bulk=archive")
    assert "2 dead letters in ussd match" in page.inner_text("#bulk")
    page.fill("#bulk form.bulk input[name=note]", "drill traffic")
    with page.expect_navigation():
        page.click("#bulk form.bulk button")
    assert "Bulk archive: 2 dead letter(s) acted on." in page.inner_text("p.notice.ok")
    assert page.input_value("select[name=status]") == "open"
    assert [d.status for d in served.box.dead_letters("ussd")] == [
        "archived", "replayed", "archived", "archived"
    ]  # fmt: skip


def test_an_unknown_reason_is_said_with_the_known_ones(page: sync_api.Page, served: Served) -> None:
    _letters(served)
    sign_in(page, served, served.operator)
    page.goto(f"{served.url}/console/dead-letters?inbox=ussd&reason=bad_chksum")
    said = page.inner_text("main")
    assert "did you mean bad_checksum?" in said and "No dead letters" not in said


def test_conflicts_are_resolved_many_at_once_after_a_preview(
    page: sync_api.Page, served: Served
) -> None:
    for i in range(3):
        key = f"rec{i}-{i}" if i < 2 else f"other{i}-{i}"
        served.box.ingest("ussd", Delivery(make_frame(i, "K1", "MED", 3, 86).encode(), key=key))
        served.box.ingest("ussd", Delivery(make_frame(i, "K1", "MED", 9, 86).encode(), key=key))
    sign_in(page, served, served.operator)
    page.goto(f"{served.url}/console/quarantine")
    page.select_option("#bulk select[name=inbox]", "ussd")
    page.fill("#bulk input[name=prefix]", "rec")
    page.select_option("#bulk select[name=bulk]", "keep")
    with page.expect_navigation():
        page.click("#bulk form.filters button")
    assert "2 open conflicts in ussd match" in page.inner_text("#bulk")
    shoot(page, "quarantine-bulk-preview")
    page.fill("#bulk form.bulk input[name=note]", "first counts stand")
    with page.expect_navigation():
        page.click("#bulk form.bulk button")
    assert "Bulk keep: 2 conflict(s) resolved." in page.inner_text("p.notice.ok")
    assert [r.identity for r in served.box.quarantined("ussd")] == ["other2-2"]
    shoot(page, "quarantine-bulk-after")
