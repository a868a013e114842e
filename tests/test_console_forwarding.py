"""Issue 22, item 6, in the console: the Forwarding page (each destination's state and
backlog, pause and resume), a destination's forwards filtered by status with a bulk retry
previewed before it runs, one forward's attempts, and a record's forwards on its page.

The browser walk (marked slow) forwards to a local receiver that answers 500 and to a
closed port, runs the dispatcher once through the library, and drives Chromium at 1280
and 420 px; set ``ONCEBOX_SCREENSHOTS`` to a directory to keep its screenshots. The quick
tests go through the app in-process: a hostile answer is shown as text, and a session
that may not act sees no button."""

from __future__ import annotations

import html
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from markupsafe import escape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import oncebox
from httpserver import serving
from oncebox import Delivery, InboxSpec, ManualClock, Oncebox
from oncebox.engine.outbox import Sent
from oncebox.engine.sessions import Session
from oncebox.surfaces.forwarding.dispatcher import Dispatcher
from oncebox.surfaces.http import create_app
from oncebox.surfaces.http.console import forwarding
from test_console import Served, sign_in
from test_console import browser as browser  # the same Chromium fixture
from test_console import page as page
from test_console_bulk import shoot

sync_api = pytest.importorskip("playwright.sync_api")
HOSTILE = "\"'&amp;<script>pwned=1</script><img src=x onerror=pwned=2>"
CLOSED = "http://127.0.0.1:9/hooks"  # the discard port: nothing listens, connection refused


def payments(ledger: str) -> InboxSpec:
    """An inbox forwarding to ``ledger`` (two attempts, then dead) and to a closed port
    (retried in an hour: its forwards stay in the backlog)."""
    return InboxSpec("payments", codec="keyed", forward={
        "ledger": {"url": ledger, "retry": ["0s", "0s"], "circuit_failures": 1000},
        "audit": {"url": CLOSED, "retry": ["0s", "1h"], "timeout": "2s"},
    })  # fmt: skip


def ingest(box: Oncebox, n: int) -> None:
    box.ingest_batch("payments", [Delivery(f"pay {i}".encode(), key=f"p-{i}") for i in range(n)])


# -- quick: through the app in-process ----------------------------------------------------------
@pytest.fixture
def quiet(shared_url: str, clock: ManualClock) -> Iterator[Oncebox]:
    """Forwards whose one attempt was answered 500 with a hostile body and error,
    recorded through the library as a dispatcher records them (nothing is sent); on
    SQLite and PostgreSQL."""
    box = oncebox.open(shared_url, inboxes=[payments(CLOSED)], clock=clock)
    ingest(box, 2)
    claims = box.claim_forwards("ledger", "test", 10)
    answer = (HOSTILE * 40).encode()  # more than 1 KiB: kept cut
    box.settle_forwards("ledger", [Sent(c, 500, 0.02, answer, HOSTILE) for c in claims], "test")
    try:
        yield box
    finally:
        box.close()


def _signed_in(box: Oncebox) -> TestClient:
    http = TestClient(create_app(box), follow_redirects=False)
    form = http.get("/console/signin")
    found = re.search(r'name="signin" value="([^"]+)"', form.text)
    assert found, form.text
    secret = box.create_token("ops", ["*"], ["operator"]).secret
    done = http.post("/console/signin", data={"signin": found.group(1), "token": secret})
    assert done.status_code == 303
    return http


def test_a_hostile_answer_and_error_are_shown_as_text(quiet: Oncebox) -> None:
    http = _signed_in(quiet)
    [first, _] = quiet.forwards(oncebox.ForwardFilter("ledger"))
    pages = (
        f"/console/forwarding/deliveries/{first.id}",
        "/console/forwarding/ledger/deliveries?status=failed",
        f"/console/records/{first.record_id}",
    )
    for path in pages:
        shown = http.get(path)
        assert shown.status_code == 200, (path, shown.text)
        assert "<script>pwned" not in shown.text and "<img src=x" not in shown.text
        assert str(escape(HOSTILE)) in shown.text, path
    # The answer's first 1 KiB is kept, and shown as text.
    attempts = http.get(f"/console/forwarding/deliveries/{first.id}").text
    [answer] = re.findall(r'<pre class="answer">(.*?)</pre>', attempts, re.S)
    assert html.unescape(answer).encode() == (HOSTILE * 40).encode()[:1024]


def test_a_form_without_the_csrf_value_changes_nothing(quiet: Oncebox) -> None:
    http = _signed_in(quiet)
    refused = http.post("/console/forwarding/ledger/pause", data={"csrf": "nope"})
    assert refused.status_code == 403
    assert quiet.forwarding("ledger")[0].state.paused_at is None
    page = http.get("/console/forwarding").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf
    done = http.post("/console/forwarding/ledger/pause", data={"csrf": csrf.group(1)})
    assert (
        done.status_code == 303 and done.headers["location"] == "/console/forwarding?paused=ledger"
    )
    assert quiet.forwarding("ledger")[0].state.paused_by == "ops"
    unknown = http.post("/console/forwarding/nowhere/pause", data={"csrf": csrf.group(1)})
    assert unknown.status_code == 404


def test_a_session_that_may_not_act_sees_no_button(quiet: Oncebox) -> None:
    """A read-only session (the role another part adds; today a session needs the
    operator scope) sees the pages without a single form that acts; an operator sees
    every button."""
    reader = quiet.authenticate(quiet.create_token("r", ["*"], ["read"]).secret)
    ops = quiet.authenticate(quiet.create_token("ops", ["*"], ["operator"]).secret)
    assert reader is not None and ops is not None
    [one, _] = quiet.forwards(oncebox.ForwardFilter("ledger"))

    def shown(session: Session) -> str:
        found = forwarding.standing(quiet, session, "ledger")
        assert found is not None
        ask = forwarding.asked("ledger", {"status": "failed"})
        forward, attempts = quiet.forward(one.id)
        return "".join((
            forwarding.overview(quiet, session, ["payments"]),
            forwarding.deliveries(quiet, session, found, ask, bulk=True),
            forwarding.forward_page(quiet, session, forward, attempts, "/back"),
        ))  # fmt: skip

    text = shown(Session(reader, "c", 0.0))
    assert all(
        'method="post"' not in part.split("</header>", 1)[1] for part in text.split("<!doctype")[1:]
    )
    assert '<form class="act' not in text and "Preview retry" not in text
    text = shown(Session(ops, "c", 0.0))
    for button in ("Pause</button>", "Retry</button>", "Retry now</button>", "Retry all 2 now"):
        assert button in text


# -- the browser walk ---------------------------------------------------------------------------
@pytest.fixture
def fwd(tmp_path: Path) -> Iterator[Served]:
    """The service over SQLite with forwards dispatched once: two records dead at the
    ledger (500 twice), and waiting at the audit destination (a closed port)."""
    answered = 0

    async def hook(_request: Request) -> Response:
        nonlocal answered
        answered += 1
        return Response(b'{"error": "ledger down"}', status_code=500)

    receiver = Starlette(routes=[Route("/hooks", hook, methods=["POST"])])
    with serving(receiver) as base:
        box = oncebox.open(f"sqlite:///{tmp_path / 'fw.db'}", inboxes=[payments(f"{base}/hooks")],
                           clock=ManualClock(time.time()))  # fmt: skip
        ingest(box, 2)
        # In a thread of its own: Playwright's loop runs in this one.
        once = threading.Thread(target=Dispatcher(box, poll=0.02).run,
                                args=(threading.Event(), True))  # fmt: skip
        once.start()
        once.join()
    assert answered == 4
    writer = box.create_token("api", ["*"], ["read", "write"]).secret
    operator = box.create_token("ops", ["*"], ["operator"]).secret
    try:
        with serving(create_app(box)) as url:
            yield Served(box, url, writer, operator)
    finally:
        box.close()


@pytest.mark.slow
def test_an_operator_pauses_resumes_and_retries_in_the_browser(
    page: sync_api.Page, fwd: Served
) -> None:
    box = fwd.box
    sign_in(page, fwd, fwd.operator)
    page.click("nav >> text=Forwarding")
    audit, ledger = (page.locator(f"tr[data-destination={n}]") for n in ("audit", "ledger"))
    assert audit.locator("td.backlog").inner_text() == "2"  # waiting on the closed port
    assert "running" in audit.inner_text() and "circuit closed" in audit.inner_text()
    assert ledger.locator("td.backlog").inner_text() == "0"
    assert "retry=2" in ledger.inner_text() and "dead=2" in ledger.inner_text()
    shoot(page, "forwarding")

    # Pause, at 420 px: the row's button is on the screen.
    page.set_viewport_size({"width": 420, "height": 900})
    button = audit.locator("form.pause button")
    assert _on_screen(page, button)
    with page.expect_navigation():
        button.click()
    assert "audit is paused (by ops" in page.inner_text("p.notice")
    assert "paused" in audit.inner_text() and "ops" in audit.inner_text()
    assert box.forwarding("audit")[0].state.paused_by == "ops"
    shoot(page, "forwarding-paused")
    with page.expect_navigation():
        audit.locator("form.resume button").click()
    assert "audit is sending again: 2 forward(s) waiting" in page.inner_text("p.notice")
    assert "running" in audit.inner_text()
    page.goto(f"{fwd.url}/console/log")
    log = page.inner_text("table.log")
    assert re.search(r"forward_pause\s+ops", log) and re.search(r"forward_resume\s+ops", log)

    # The ledger's dead forwards, filtered; a bulk retry previewed, then run.
    page.goto(f"{fwd.url}/console/forwarding")
    with page.expect_navigation():
        ledger.locator("a", has_text="ledger").click()
    page.select_option("form.filters select[name=status]", "dead")
    with page.expect_navigation():
        page.click("form.filters button")
    assert "status=dead" in page.url
    assert page.locator("tr[data-forward]").count() == 2
    assert "500" in page.inner_text("#forwards")
    shoot(page, "forwarding-dead")
    page.click("text=Preview retry all matching")
    assert "2 dead forwards of ledger match" in page.inner_text("#bulk")
    assert [f.status.value for f in box.forwards(oncebox.ForwardFilter("ledger"))] == ["dead"] * 2
    shoot(page, "forwarding-preview")
    page.set_viewport_size({"width": 420, "height": 900})
    assert _on_screen(page, page.locator("tr[data-forward] form.retry button").last)
    bulk = page.locator("#bulk form.bulk button")
    assert bulk.inner_text() == "Retry all 2 now" and _on_screen(page, bulk)
    with page.expect_navigation():
        bulk.click()
    assert "2 forward(s) sent again" in page.inner_text("p.notice")
    assert page.input_value("select[name=status]") == "dead"  # the filters as they were
    assert "No forwards dead" in page.inner_text("#forwards")
    statuses = [f.status.value for f in box.forwards(oncebox.ForwardFilter("ledger"))]
    assert statuses == ["failed"] * 2
    entry = [e for e in box.log_entries() if e.step == "forward_retry"][-1]
    assert '"actor":"ops"' in entry.state.replace(" ", "")
    page.set_viewport_size({"width": 1280, "height": 900})

    # A record's page: its forwards, each destination's status and last answer.
    [first, *_] = box.forwards(oncebox.ForwardFilter("audit"))
    page.goto(f"{fwd.url}/console/records/{first.record_id}")
    forwards = page.locator("#forwards")
    assert forwards.locator("tr[data-forward]").count() == 2
    ledger_row = forwards.locator("tr", has_text="ledger")
    assert "failed" in ledger_row.inner_text() and "ledger down" in ledger_row.inner_text()
    assert "ConnectError" in forwards.locator("tr", has_text="audit").inner_text()
    shoot(page, "forwarding-record")
    # One forward's page: every attempt, and a retry that works one at a time.
    with page.expect_navigation():
        ledger_row.locator("a", has_text="attempts").click()
    assert page.locator("table.attempts tbody tr").count() == 2
    assert "ledger down" in page.inner_text("table.attempts")
    shoot(page, "forwarding-forward")
    with page.expect_navigation():
        page.click("form.retry button")
    assert "sent again: failed, next attempt" in page.inner_text("p.notice")


def _on_screen(page: sync_api.Page, button: sync_api.Locator) -> bool:
    """Whether the button lies wholly within the page's width (no sideways scroll)."""
    box = button.bounding_box()
    width = page.viewport_size["width"] if page.viewport_size else 0
    return box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width
