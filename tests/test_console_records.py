"""Issue 21, "Find", in the console: a Records page that finds records by delivery key,
identity or content, a page at a time, and a record's page with its timeline (arrival,
duplicates, conflicts, resolutions, log entries) and its proof. In a real Chromium, as
an operator sees it, at a desktop's width and a phone's; ``ONCEBOX_SCREENSHOTS=dir`` keeps
a screenshot of each there (records-*.png).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import event_body
from oncebox.engine.checkpoint import Checkpoint
from oncebox.engine.proofs import verify_inclusion_document
from test_console import HOSTILE, Served, frame, shot, sign_in
from test_console import browser as browser  # the same Chromium fixture
from test_console import page as page
from test_console import served as served

pytestmark = pytest.mark.slow  # browsers: every test drives Chromium

sync_api = pytest.importorskip("playwright.sync_api")
WIDTHS = {"wide": 1280, "narrow": 420}


def traffic(served: Served) -> dict[str, int]:
    """Frames under gateway keys (one sent twice, one contradicted and resolved, one
    refused under the same key), and a listing event under a hostile key."""
    with served.api() as http:
        url = "/v1/inboxes/ussd/deliveries"
        for seq in range(1, 8):
            made = http.post(url, content=frame(seq, seq + 2), headers={"Oncebox-Key": f"gw-{seq}"})
            assert made.status_code == 201, made.text
        again = http.post(url, content=frame(1, 3), headers={"Oncebox-Key": "gw-1"})
        assert again.json()["verdict"] == "duplicate"
        clash = http.post(url, content=frame(1, 9), headers={"Oncebox-Key": "gw-1"})
        assert clash.json()["verdict"] == "conflict"
        bad = http.post(url, content=b"H1|1|Kakuma1|MED|3|86|#00", headers={"Oncebox-Key": "gw-1"})
        assert bad.json()["reason"] == "bad_checksum"
        event = event_body("n-1", payload={"status": "ACTIVE", "issues": [HOSTILE]})
        listed = http.post(
            "/v1/inboxes/listing/deliveries",
            content=event,
            headers={"Content-Type": "application/json", "Oncebox-Key": HOSTILE},
        )
    quarantine_id = int(clash.json()["quarantine_id"])
    served.box.resolve(quarantine_id, "accept", "the gateway re-read <b>9</b>", actor="ops")
    return {"record": int(clash.json()["record_id"]), "quarantine": quarantine_id,
            "listing": listed.status_code}  # fmt: skip


def both_widths(page: sync_api.Page, name: str) -> None:
    for label, width in WIDTHS.items():
        page.set_viewport_size({"width": width, "height": 900})
        # Nothing wider than the screen but what scrolls inside its own card.
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{name} at {width}px is {overflow}px too wide"
        shot(page, f"records-{name}-{label}")
    page.set_viewport_size({"width": 1280, "height": 900})


def test_an_operator_finds_a_delivery_and_reads_its_timeline(
    page: sync_api.Page, served: Served
) -> None:
    made = traffic(served)
    sign_in(page, served, served.operator)
    page.click("nav >> text=Records")
    assert page.url.endswith("/console/records")
    # The first of the token's inboxes by name (feed: nothing in it yet), then ussd.
    assert "0 records of feed" in page.locator("#records").inner_text()
    page.select_option("select[name=inbox]", "ussd")
    with page.expect_navigation():
        page.click("form.filters button[type=submit]")
    assert page.locator("table.records tbody tr").count() == 7
    first = page.locator("table.records tbody tr").first
    assert first.locator("td").nth(3).inner_text() == "gw-7"  # newest first
    both_widths(page, "list")

    # Did gw-1 arrive, and what was decided? The key finds its record, and everything
    # under it: the arrival, the duplicate, the conflict, its resolution, the refusal.
    page.fill("input[name=key]", "gw-1")
    with page.expect_navigation():
        page.click("form.filters button[type=submit]")
    assert page.locator("table.records tbody tr").count() == 1
    told = page.locator("#lookup ol.timeline li")
    whats = [told.nth(i).locator("b.what").inner_text() for i in range(told.count())]
    assert set(whats) == {"accepted", "duplicates", "conflict", "resolved", "rejected"}
    assert "by ops" in page.locator("#lookup li.s-resolved").inner_text()
    both_widths(page, "key")

    # By content, then one page at a time.
    page.goto(f"{served.url}/console/records?inbox=ussd&search=MED%7C5%7C")
    assert page.locator("table.records tbody tr").count() == 1
    page.goto(f"{served.url}/console/records?inbox=ussd&order=oldest")
    assert page.locator("table.records tbody tr").first.locator("td").nth(3).inner_text() == "gw-1"

    # The record's page: its facts, content, timeline, newcomers and log entries.
    page.goto(f"{served.url}/console/records?inbox=ussd&key=gw-1")
    with page.expect_navigation():
        page.locator("table.records tbody tr a").first.click()
    assert page.url.endswith(f"/console/records/{made['record']}")
    assert "H1|1|Kakuma1|MED|9|86|" in page.locator("pre.content").inner_text()  # revision 2
    steps = page.locator("#timeline ol.timeline li")
    assert [steps.nth(i).locator("b.what").inner_text() for i in range(steps.count())] == [
        "accepted", "duplicates", "conflict", "resolved",
    ]  # fmt: skip
    resolved = page.locator("#timeline li.s-resolved")
    assert "revision 2" in resolved.inner_text() and "the gateway re-read <b>9</b>" in (
        resolved.inner_text()
    )
    assert page.locator(f"#newcomers tr#q-{made['quarantine']}").is_visible()
    assert page.locator("#log table.log tbody tr").count() == 3  # accept, quarantine, resolve
    assert page.locator("#revisions tbody tr").count() == 1
    both_widths(page, "record")

    # The timeline links to its log entries; the proof downloads and verifies.
    resolved.locator("a[href^='#log-']").click()
    with page.expect_download() as download:
        page.click("a.download")
    proof = json.loads(Path(download.value.path()).read_text())
    checkpoint = Checkpoint.from_json(served.box.checkpoint().to_json())
    report = verify_inclusion_document(proof, checkpoint)  # raises if it does not hold
    assert report.record is not None and report.record["id"] == made["record"]


def test_records_pages_escape_what_senders_chose_and_hide_other_inboxes(
    page: sync_api.Page, served: Served
) -> None:
    traffic(served)
    other = served.box.create_token("ussd-only", ["ussd"], ["operator"]).secret
    sign_in(page, served, other)
    answer = page.goto(f"{served.url}/console/records?inbox=listing")
    assert answer is not None and answer.ok
    # Only the token's inboxes are offered, and a record of another inbox is not there.
    assert page.locator("select[name=inbox] option").all_inner_texts() == ["ussd"]
    listing_record = served.box.records("listing")[0].id
    gone = page.goto(f"{served.url}/console/records/{listing_record}")
    assert gone is not None and gone.status == 404
    # The operator of every inbox sees the hostile key as text, never as markup.
    page.context.clear_cookies()
    sign_in(page, served, served.operator)
    page.goto(f"{served.url}/console/records?inbox=listing")
    assert HOSTILE in page.locator("table.records").inner_text()
    assert page.title() != "1" and page.locator("table.records img").count() == 0
    page.goto(f"{served.url}/console/records/{listing_record}")
    assert HOSTILE in page.locator("#facts").inner_text()
    assert page.locator("main img").count() == 0 and page.title() != "1"
    # A bad filter is said so on the page, and nothing is listed.
    page.goto(f"{served.url}/console/records?inbox=ussd&since=yesterday")
    assert "since: 'yesterday' is not a time" in page.inner_text("main")
    page.goto(f"{served.url}/console/records?inbox=ussd&search={'b' * 300}")
    assert "at most 256 bytes" in page.inner_text("main")
