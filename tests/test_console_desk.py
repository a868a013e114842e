"""The console as an intake desk runs a day on it, in Debian's Chromium (Playwright):
the triage ledger with its CSV, dead letters filtered, paged, downloaded and replayed,
quarantine grouped by record with what differs marked, and pages that stay legible on a
420 px screen, in the browser's own time zone. One served app and one browser for the
module; ``ONCEBOX_SCREENSHOTS=dir`` keeps screenshots there (``desk-*``)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

import oncebox
from conftest import INBOXES, SESSION
from httpserver import serving
from oncebox import Delivery, InboxSpec, ManualClock, Oncebox
from oncebox.formats.ussd_h1 import make_frame
from oncebox.surfaces.cli import cli
from oncebox.surfaces.http import create_app
from oncebox.surfaces.views import parse_when
from test_console import browser as browser  # the same Chromium, checked there
from test_console import shot as console_shot

pytestmark = pytest.mark.slow  # browsers: every test drives Chromium

sync_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[dev]'")

ZONE = "Asia/Kolkata"  # UTC+05:30 all year: a local time never reads as UTC
DESK = (*INBOXES, InboxSpec("hooks", codec="keyed"))
HOSTILE = '<img src=x onerror="document.title=1">'


@dataclass
class Desk:
    box: Oncebox
    url: str
    db: str
    operator: str
    start: float  # the server clock when the first dead letters came


@pytest.fixture(scope="module")
def desk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Desk]:
    """A day's traffic: a USSD session sent twice, conflicts on two records, 60 dead
    letters over two hours (one kept only in part), served on a free port."""
    db = f"sqlite:///{tmp_path_factory.mktemp('desk') / 'desk.db'}"
    clock = ManualClock(time.time() - 3 * 3600)
    box = oncebox.open(db, inboxes=DESK, clock=clock)
    session = [Delivery(text.encode(), key=key) for key, text in SESSION]
    box.ingest_batch("ussd", session)
    box.ingest_batch("ussd", session)  # retransmitted: 23 counted, 46 arrived
    for headcount in (9, 7):  # two newcomers on record rec1: 3 -> 9 and 3 -> 7
        frame = make_frame(1, "Kakuma1", "MED", headcount, 86).encode()
        box.ingest("ussd", Delivery(frame, key="rec1"))
    box.ingest("ussd", Delivery(b"H1|3|Kakuma1|WAT|12|69|#1A", key="rec3"))  # the bytes only
    start = clock()
    bad = [Delivery(f"H1|{i}|Kakuma9|MED|{i}|50|#00".encode(), key=f"b-{i}") for i in range(40)]
    box.ingest_batch("ussd", bad)  # bad_checksum, all at the start
    clock.advance(2 * 3600)
    box.ingest_batch("ussd", [Delivery(f"junk {i}".encode(), key=f"j-{i}") for i in range(18)])
    box.ingest("ussd", Delivery(HOSTILE.encode(), key="x-1"))
    box.ingest("hooks", Delivery(b"{" + b"x" * 100_000))  # no key: kept only in part
    operator = box.create_token("desk-anna", ["*"], ["operator"]).secret
    try:
        with serving(create_app(box)) as url:
            yield Desk(box, url, db, operator, start)
    finally:
        box.close()


def open_page(browser: sync_api.Browser, desk: Desk, width: int) -> sync_api.Page:
    context = browser.new_context(viewport={"width": width, "height": 900}, timezone_id=ZONE)
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.goto(f"{desk.url}/console/signin")
    page.fill("input[name=token]", desk.operator)
    with page.expect_navigation():
        page.click("form.signin button[type=submit]")
    return page


@pytest.fixture
def page(browser: sync_api.Browser, desk: Desk) -> Iterator[sync_api.Page]:
    page = open_page(browser, desk, 1280)
    problems: list[str] = []
    page.on("console", lambda message: problems.append(message.text))
    try:
        yield page
    finally:
        page.context.close()
    assert problems == []  # nothing blocked by the Content-Security-Policy, no errors


def shot(page: sync_api.Page, name: str, *, full: bool = True) -> None:
    console_shot(page, f"desk-{name}", full=full)  # kept when ONCEBOX_SCREENSHOTS is set


def cookies(page: sync_api.Page) -> dict[str, str]:
    return {c["name"]: c["value"] for c in page.context.cookies()}


# -- triage -----------------------------------------------------------------------------------
def test_the_triage_page_shows_the_ledger_beside_every_arrival(
    page: sync_api.Page, desk: Desk
) -> None:
    page.click("nav >> text=Triage")
    assert page.url.endswith("/console/triage/ussd")  # the one triage inbox
    figures = page.locator("#ledger .count b").all_inner_texts()
    assert figures[:3] == ["23", "46", "23"]  # headcount, every arrival, suppressed
    med = page.locator("table.totals tr", has_text="MED").inner_text().split("\t")
    assert med == ["Kakuma1", "MED", "3", "1", "6", "2", "3"]
    ranked = page.locator("table.ranking tbody tr").all_inner_texts()
    assert ranked[0].split("\t")[:4] == ["1", "86", "Kakuma1", "MED"]
    shot(page, "01-triage")
    with httpx.Client(base_url=desk.url, cookies=cookies(page)) as http:
        totals = http.get(page.locator("#totals a.download").get_attribute("href") or "")
        ranking = http.get("/console/triage/ussd.csv?table=ranking")
        elsewhere = http.get("/console/triage/listing.csv")
    assert totals.headers["content-type"].startswith("text/csv")
    assert "attachment" in totals.headers["content-disposition"]
    assert totals.text.splitlines()[0] == (
        "site,need,headcount,cases,every_arrival_headcount,arrivals,suppressed_headcount"
    )
    assert "Kakuma1,MED,3,1,6,2,3" in totals.text.splitlines()
    assert ranking.text.splitlines()[1] == "1,86,Kakuma1,MED,3,1"
    assert elsewhere.status_code == 404  # listing keeps no ledger


# -- dead letters -----------------------------------------------------------------------------
def test_dead_letters_filter_page_and_download_as_ingest_lines(
    page: sync_api.Page, desk: Desk, tmp_path: Path
) -> None:
    with page.expect_navigation():  # counted on the new page, not the one before
        page.click("nav >> text=Dead letters")
    rows = page.locator("table.dead-letters tbody tr")
    assert rows.count() == 50  # a page
    shot(page, "02-dead-letters", full=False)
    assert HOSTILE in page.locator("table.dead-letters pre", has_text="img").inner_text()
    assert page.title() != "1" and page.locator("main img").count() == 0  # newest first
    with page.expect_navigation():
        page.click("a:text('Next page')")
    assert rows.count() == 10 and "after=" in page.url

    # Filters: inbox, reason, time, head.
    page.goto(f"{desk.url}/console/dead-letters")
    page.select_option("select[name=inbox]", "ussd")
    page.fill("input[name=reason]", "bad_format")
    page.fill("input[name=search]", "junk 1")
    with page.expect_navigation():
        page.click("form.filters button")
    keys = page.locator("table.dead-letters tbody td:nth-child(5)").all_inner_texts()
    assert sorted(keys) == sorted(["j-1", *(f"j-{i}" for i in range(10, 18))])
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(desk.start + 3600))
    page.goto(f"{desk.url}/console/dead-letters?inbox=ussd&since={since}")
    assert rows.count() == 19  # the junk and the hostile one came an hour later
    # Typed in the form, a time is the browser's local time (UTC+05:30 here).
    page.goto(f"{desk.url}/console/dead-letters?inbox=ussd")
    local = time.strftime("%Y-%m-%dT%H:%M", time.gmtime(desk.start + 3600 + 19_800))
    page.fill("input[name=since]", local)
    with page.expect_navigation():
        page.click("form.filters button")
    assert rows.count() == 19 and "Z" in page.url
    assert page.input_value("input[name=since]") == local  # shown back, local (a date picker)
    page.goto(f"{desk.url}/console/dead-letters?since=yesterday")
    assert "is not a time" in page.locator(".notice.bad").inner_text()

    # Downloaded, then fed back to `oncebox ingest`: the same deliveries again.
    page.goto(f"{desk.url}/console/dead-letters?inbox=ussd&reason=bad_checksum")
    link = page.locator("a.download").get_attribute("href") or ""
    with httpx.Client(base_url=desk.url, cookies=cookies(page)) as http:
        download = http.get(link)
    assert download.headers["content-type"].startswith("application/x-ndjson")
    lines = download.content.splitlines()
    first = desk.box.dead_letters("ussd", reason="bad_checksum", limit=1)[0]
    assert len(lines) == 40 and json.loads(lines[0]) == {
        "frame": "H1|0|Kakuma9|MED|0|50|#00",
        "frame_id": "b-0",
        "dead_letter": first.id,  # fed back, it closes this dead letter or counts on it
    }
    (tmp_path / "again.ndjson").write_bytes(download.content)
    result = CliRunner().invoke(
        cli, ["--db", desk.db, "ingest", "ussd", str(tmp_path / "again.ndjson")]
    )
    assert result.exit_code == 0, result.output
    again = [json.loads(line) for line in result.stdout.splitlines()]
    assert [d["reason"] for d in again] == ["bad_checksum"] * 40
    before = desk.box.dead_letters("ussd", reason="bad_checksum")
    assert len(before) == 40  # the same dead letters, one attempt more each
    assert {d.attempts for d in before} == {1}


def test_a_dead_letter_is_replayed_from_the_page_and_says_who(
    page: sync_api.Page, desk: Desk
) -> None:
    page.goto(f"{desk.url}/console/dead-letters?inbox=hooks")
    kept = page.locator("table.dead-letters tbody tr").first
    assert "cannot be replayed" in kept.locator("p.cannot").inner_text()
    assert kept.locator("form.replay").count() == 0
    assert "100,001 (kept 65,536)" in kept.inner_text()
    shot(page, "03-dead-letter-in-part")

    page.goto(f"{desk.url}/console/dead-letters?inbox=ussd&search=junk+0")
    row = page.locator("table.dead-letters tbody tr").first
    row.locator("form.replay input[name=note]").fill("gateway fixed; sent again")
    with page.expect_navigation():
        row.locator("form.replay button", has_text="Replay").click()
    # Refused again: said as a failure, and the same dead letter stays open.
    said = page.locator(".notice.bad").inner_text()
    assert "refused again: bad_format (attempt 1); it stays open" in said
    assert "bad_format" in page.locator("p.failed").first.inner_text()
    entry = [e for e in desk.box.log_entries() if e.step == "replay"][-1]
    state = json.loads(entry.state)
    assert (state["actor"], state["note"]) == ("desk-anna", "gateway fixed; sent again")
    shot(page, "04-dead-letter-replayed")


# -- quarantine -------------------------------------------------------------------------------
def test_quarantine_groups_by_record_and_marks_what_differs(
    page: sync_api.Page, desk: Desk
) -> None:
    page.click("nav >> text=Quarantine")
    record = desk.box.record("ussd", "rec1")
    assert record is not None
    card = page.locator(f"#record-{record.id}")
    assert card.locator(".side.original").count() == 1
    changes = card.locator("table.changes").all_inner_texts()
    assert [c.split("\t") for c in changes] == [["headcount", "3 -> 9"], ["headcount", "3 -> 7"]]
    same = page.locator(".newcomer", has_text="#1A")
    assert "The fields agree; the bytes differ from byte 25:" in same.inner_text()
    assert same.locator("table.bytes mark").all_inner_texts() == ["a", "A"]
    shot(page, "05-quarantine")
    newcomer = card.locator(".newcomer").first
    newcomer.locator("textarea[name=note]").fill("radio operator confirmed 3")
    with page.expect_navigation():
        newcomer.locator("button", has_text="Resolve").click()
    assert "by desk-anna" in page.locator(".notice").inner_text()
    resolved = page.locator("table.resolved tbody tr").first.inner_text()
    assert "desk-anna" in resolved and "radio operator confirmed 3" in resolved


# -- legibility -------------------------------------------------------------------------------
PAGES = ["", "/triage/ussd", "/quarantine", "/dead-letters", "/work", "/log"]


def test_every_page_fits_a_narrow_screen_and_reads_in_local_time(
    browser: sync_api.Browser, desk: Desk
) -> None:
    page = open_page(browser, desk, 420)
    try:
        for path in PAGES:
            page.goto(f"{desk.url}/console{path}")
            # Nothing wider than the screen but what scrolls inside its card.
            assert page.evaluate("document.documentElement.scrollWidth") <= 420, path
            # Codes, keys, hashes and times never break mid-word.
            wraps = page.evaluate(
                "[...document.querySelectorAll('main code, main time')]"
                ".filter(e => getComputedStyle(e).whiteSpace !== 'nowrap').length"
            )
            assert wraps == 0, path
            shot(page, f"06-narrow{path.replace('/', '-') or '-overview'}", full=False)
        page.goto(f"{desk.url}/console/dead-letters")
        first = page.locator("main time").first
        utc = first.get_attribute("datetime") or ""
        assert first.get_attribute("title") == f"{utc} UTC"
        shown = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(parse_when(utc) + 19_800))
        assert first.inner_text() == f"{shown}+05:30"  # ISO 8601 in UTC+05:30
        assert page.locator("[data-zone]").first.inner_text() in (ZONE, "Asia/Calcutta")
    finally:
        page.context.close()


def test_the_chart_has_an_hour_axis_and_one_scale(page: sync_api.Page, desk: Desk) -> None:
    scales = page.locator(".chart .scale span").all_inner_texts()
    assert len(scales) == 2 * len(DESK) and len(set(scales)) == 2  # one scale for all
    hours = page.locator("#inbox-ussd .chart .hours span").all_inner_texts()
    assert len(hours) == 8 and all(len(h) == 2 and h.isdigit() for h in hours)
    first = page.locator("#inbox-ussd .chart .hours span").first.get_attribute("data-hour") or ""
    local = (int(first[11:13]) * 60 + 330) // 60 % 24  # +05:30: the half hour rounds down
    assert hours[0] == f"{local:02d}"
    shot(page, "07-overview")


def test_the_log_page_says_the_verify_result_in_words(page: sync_api.Page, desk: Desk) -> None:
    page.click("nav >> text=Log")
    with page.expect_navigation():
        page.click("text=Verify the log")
    result = page.locator("#verification").inner_text()
    assert "The log verifies." in result and "intact" in result and "every one" in result
    assert "True" not in result and "None" not in result and "[]" not in result
    empty = page.evaluate(
        "[...document.querySelectorAll('dd')].filter(d => !d.textContent.trim()).length"
    )
    assert empty == 0
    head = page.locator("table.log thead th").all_inner_texts()
    assert head == ["seq", "step", "by", "state", "hash"]
    replays = page.locator("table.log tr", has_text="replay").all_inner_texts()
    assert any("desk-anna" in row for row in replays)
    shot(page, "08-log-verified")


def test_an_unknown_console_url_gets_a_page_and_there_is_a_favicon(
    browser: sync_api.Browser, desk: Desk
) -> None:
    page = open_page(browser, desk, 1280)  # its own: the 404 it asks for is logged
    try:
        answer = page.goto(f"{desk.url}/console/no-such-page")
        assert answer is not None and answer.status == 404
        assert answer.headers["content-type"].startswith("text/html")
        assert "There is no console page at /console/no-such-page" in page.inner_text("main")
        assert page.locator("nav").count() == 1  # signed in: the navigation is there
        shot(page, "09-not-found")
        icon = page.locator("link[rel=icon]").get_attribute("href") or ""
    finally:
        page.context.close()
    with httpx.Client(base_url=desk.url) as http:
        favicon = http.get(icon)
        api = http.get("/v1/nothing-here")
    assert favicon.status_code == 200 and favicon.headers["content-type"] == "image/svg+xml"
    assert api.headers["content-type"] == "application/problem+json"  # the API keeps problems
