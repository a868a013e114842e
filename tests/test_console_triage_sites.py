"""The triage page lists every site with its last delivery, the quietest first: the
overview shows only the first few and sends an operator here for the rest (issue 23)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

import oncebox
from conftest import INBOXES
from httpserver import serving
from oncebox import Delivery, ManualClock, Oncebox
from oncebox.formats.ussd_h1 import make_frame
from oncebox.surfaces.http import create_app
from oncebox.surfaces.http.console.overview import SITES
from test_security_sessions import client, sign_in

ROW = re.compile(r"<tr><td><code>([^<]+)</code></td><td><time[^>]*>([^<]+)</time>")


@pytest.fixture
def served(shared_url: str, clock: ManualClock) -> Iterator[tuple[Oncebox, str]]:
    box = oncebox.open(shared_url, inboxes=INBOXES, clock=clock)
    try:
        with serving(create_app(box, clock=clock)) as url:
            yield box, url
    finally:
        box.close()


def test_the_triage_page_lists_every_site_the_quietest_first(
    served: tuple[Oncebox, str], clock: ManualClock
) -> None:
    box, url = served
    count = SITES + 5  # more than the overview shows
    for n in range(count):  # Site000 delivers first, so it is the quietest
        frame = make_frame(n + 1, f"Site{n:03d}", "WAT", 1, 50).encode()
        box.ingest("ussd", Delivery(frame, key=f"k{n}"))
        clock.advance(60)
    secret = box.create_token("desk", ["*"], ["read"]).secret
    with client(url) as http:
        sign_in(http, secret)
        overview = http.get("/console").text
        assert "and 5 more on the" in overview
        page = http.get("/console/triage/ussd")
    assert page.status_code == 200
    section = page.text.split('id="sites"', 1)[1]
    rows = ROW.findall(section)
    assert [site for site, _ in rows] == [f"Site{n:03d}" for n in range(count)]
    assert all(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", when) for _, when in rows)
    assert "35 min ago" in section  # Site000: 35 minutes before now, a minute a site
