"""Hostile values on the console come out as text, never as markup (issue 20, item 7).

The console's pages are Jinja2 templates that escape every value they print. Here one
value holding a script, an image with an ``onerror``, both quotes and ``&`` (and
``&amp;``, which must read as typed, not as ``&``) goes in as a key, an identity, a dead
letter's head, a note, a snapshot id, a work key, an error and filter values, and a
``javascript:`` URL goes in wherever the console builds a link or a field from data. In
a real Chromium, every page that shows one shows it verbatim as text; the page's own
bytes hold it escaped; no element appears that the page did not make; and every link
and form stays on the console.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import quote, urlencode

import pytest
from jinja2 import UndefinedError
from markupsafe import escape

import oncebox
from conftest import INBOXES
from helpers import event_body
from httpserver import serving
from oncebox import Delivery, InboxSpec, ManualClock, Oncebox
from oncebox.surfaces.http import create_app
from oncebox.surfaces.http.console.html import ENV, render
from test_console import browser as browser  # the same Chromium, checked there
from test_console import shot

sync_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[dev]'")

HOSTILE = "\"'&amp;<script>pwned=1</script><img src=x onerror=pwned=2>"
LINK = "javascript:pwned=3"
BOXES = (*INBOXES, InboxSpec("hooks", codec="keyed"))


@dataclass
class Hostile:
    box: Oncebox
    url: str
    operator: str


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    """Every kind of value the console prints, each holding :data:`HOSTILE` (or
    :data:`LINK`), served on a free port."""
    db = tmp_path_factory.mktemp("hostile") / "hostile.db"
    box = oncebox.open(f"sqlite:///{db}", inboxes=BOXES, clock=ManualClock(time.time()))
    # A dead letter whose key and head are hostile.
    box.ingest("ussd", Delivery(HOSTILE.encode(), key=HOSTILE))
    # An open conflict on a hostile identity, with hostile transport facts and contents.
    facts = {"snapshot_id": HOSTILE, "delivery_id": LINK, "device_time": HOSTILE}
    for body in (f"first {HOSTILE}", f"second {HOSTILE}"):
        box.ingest("hooks", Delivery(body.encode(), key=HOSTILE, **facts))
    # A conflict on a `javascript:` identity, resolved with a hostile note.
    box.ingest("hooks", Delivery(b"one", key=LINK))
    clash = box.ingest("hooks", Delivery(b"two", key=LINK))
    assert clash.quarantine_id is not None
    box.resolve(clash.quarantine_id, "keep", HOSTILE, "ops")
    # A work key made of hostile fields, sent to review by a hostile error.
    event = event_body("n1", seller_id=HOSTILE, sku=LINK)
    assert box.ingest("listing", Delivery(event)).verdict == "accepted"

    def failing(_key: object) -> object:
        raise RuntimeError(HOSTILE)

    box.reconciler("listing", reader=failing, max_failures=1).refresh_once()  # type: ignore[arg-type]
    # The dead letter replayed with a hostile note (it is refused again).
    [letter] = box.dead_letters("ussd")
    box.replay(letter.id, "ops", None, HOSTILE)
    operator = box.create_token("ops", ["*"], ["operator"]).secret
    try:
        with serving(create_app(box)) as url:
            yield Hostile(box, url, operator)
    finally:
        box.close()


@pytest.fixture
def page(browser: sync_api.Browser, hostile: Hostile) -> Iterator[sync_api.Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.goto(f"{hostile.url}/console/signin")
    page.fill("input[name=token]", hostile.operator)
    with page.expect_navigation():
        page.click("form.signin button[type=submit]")
    problems: list[str] = []
    page.on("console", lambda message: problems.append(message.text))
    try:
        yield page
    finally:
        context.close()
    # An injected inline script or handler would be blocked by the CSP, and logged.
    assert not [p for p in problems if "Content Security Policy" in p], problems


# Each page, and the hostile values it shows as text.
LETTERS = "/console/dead-letters?inbox=ussd"
FILTERED = "/console/dead-letters?" + urlencode(
    {"inbox": "ussd", "reason": LINK, "search": HOSTILE, "after": "1"}
)
SEARCHED = "/console/dead-letters?" + urlencode({"inbox": "ussd", "search": LINK, "after": "1"})
PAGES = {
    LETTERS: [HOSTILE],  # the key and the head, and the replay's verdict beside them
    FILTERED: [],  # shown back in the form's fields (checked below)
    "/console/quarantine": [HOSTILE, LINK, f"first {HOSTILE}", f"second {HOSTILE}"],
    "/console/log": [HOSTILE, LINK],  # identities and notes in the entries' states
    "/console/work": [HOSTILE, f"{HOSTILE} / {LINK} /", f"RuntimeError: {HOSTILE}"],
    f"/console/no-such-page/{quote(HOSTILE)}": [HOSTILE],  # the path, said back
}

# What the browser would have made of HOSTILE, had it been markup.
INJECTED = """() => {
    const main = document.querySelector("main");
    const made = main.querySelectorAll("script, img, iframe, object, embed").length;
    const handlers = [...main.querySelectorAll("*")].filter(
        (e) => [...e.attributes].some((a) => a.name.startsWith("on"))).length;
    return {made, handlers, scripts: document.scripts.length, pwned: window.pwned ?? null};
}"""
# Every address the page holds: links, forms, the stylesheet, the icon and the script.
ADDRESSES = """() => [...document.querySelectorAll("[href], [action], [src]")].map(
    (e) => e.getAttribute("href") ?? e.getAttribute("action") ?? e.getAttribute("src"))"""


def same_spelling(html: str) -> str:
    """``html`` with each quote's entity spelled as markupsafe spells it."""
    for other, ours in (("&quot;", "&#34;"), ("&#x22;", "&#34;"), ("&#x27;", "&#39;")):
        html = html.replace(other, ours)
    return html


@pytest.mark.slow
@pytest.mark.parametrize("path", list(PAGES))
def test_a_hostile_value_is_shown_as_text_on_every_page(
    page: sync_api.Page, hostile: Hostile, path: str
) -> None:
    answer = page.goto(hostile.url + path)
    assert answer is not None
    body = answer.text()
    text = page.inner_text("main")
    for value in PAGES[path]:
        assert value in text, (path, value)  # verbatim: "&amp;" reads "&amp;", not "&"
        assert str(escape(value)) in same_spelling(body), (path, value)
    assert "<script>pwned" not in body and "<img src=x" not in body
    assert page.evaluate(INJECTED) == {"made": 0, "handlers": 0, "scripts": 2, "pwned": None}
    addresses = page.evaluate(ADDRESSES)
    assert addresses and all(a.startswith("/console") for a in addresses), addresses


@pytest.mark.slow
def test_hostile_fields_keep_their_values_and_links_stay_on_the_console(
    page: sync_api.Page, hostile: Hostile
) -> None:
    """Where a value goes into an attribute (a field shown back, a hidden field, a link
    built from the filters), it stays the same value, and stays in its attribute."""
    page.goto(hostile.url + FILTERED)
    assert page.input_value("input[name=reason]") == LINK
    assert page.input_value("input[name=search]") == HOSTILE
    # No such reason: refused, naming the known ones, so nothing is listed or linked.
    assert "unknown reason" in page.locator(".notice").inner_text()
    assert page.locator("p.paging a").count() == 0
    page.goto(hostile.url + SEARCHED)
    assert page.input_value("input[name=search]") == LINK
    links = page.locator("p.paging a").evaluate_all("(links) => links.map((a) => a.href)")
    assert len(links) == 3  # the other order, the first page, and the inbox's lines
    for href in links:
        assert href.startswith(f"{hostile.url}/console/dead-letters")
        assert "search=javascript%3Apwned%3D3" in href
    page.goto(hostile.url + "/console/work")
    form = page.locator("table.review form")
    assert form.locator("input[name=seller_id]").input_value() == HOSTILE
    assert form.locator("input[name=sku]").input_value() == LINK
    with page.expect_navigation():  # the values go back as they came: the retry finds the key
        form.locator("button").click()
    assert "Sent back from review by ops." in page.locator(".notice").inner_text()
    assert hostile.box.reconciler("listing").review() == []
    page.goto(hostile.url + "/console/quarantine")
    shot(page, "hostile-quarantine")  # kept when ONCEBOX_SCREENSHOTS is set


def test_a_value_a_template_was_not_given_fails_instead_of_rendering_blank() -> None:
    for name in ENV.list_templates():  # each compiles
        ENV.get_template(name)
    assert 'value="n"' in render("signin.html", None, "Sign in", nonce="n", refusal=None)
    with pytest.raises(UndefinedError):
        render("signin.html", None, "Sign in", refusal=None)  # no nonce
    with pytest.raises(UndefinedError):
        render("message.html", None, "Refused", text="no")  # no back
