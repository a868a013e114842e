"""The console's bulk actions act on what their preview counted: a conflict or dead letter
arriving between the preview and the confirm button is left for the next preview (a
bulk accept never takes a newcomer no one was shown). Over HTTP, on both backends."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from oncebox import Delivery
from oncebox.formats.ussd_h1 import make_frame
from test_console_access import Served, csrf_of
from test_console_access import served as served
from test_security_sessions import client, sign_in

BAD = "H1|{}|K1|MED|3|86|#00"  # a wrong trailer: bad_checksum
HIDDEN = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)">')


def _confirm_form(page: str) -> dict[str, str]:
    """The hidden fields of the preview's confirm form (``form.bulk``)."""
    found = re.search(r'<form class="bulk"[^>]*>(.*?)</form>', page, re.S)
    assert found, page
    return dict(HIDDEN.findall(found.group(1)))


@pytest.fixture
def operator(served: Served) -> Iterator[httpx.Client]:
    secret = served.box.create_token("desk", ["*"], ["read", "operator"]).secret
    with client(served.url) as http:
        sign_in(http, secret)
        yield http


def _conflict(served: Served, i: int) -> None:
    for headcount in (3, 4):  # the first a record, the second its conflicting newcomer
        frame = make_frame(i, "K1", "MED", headcount, 86)
        served.box.ingest("ussd", Delivery(frame.encode(), key=f"r{i}-{i}"))


def test_a_bulk_accept_takes_only_the_conflicts_its_preview_counted(
    served: Served, operator: httpx.Client
) -> None:
    for i in range(3):
        _conflict(served, i)
    page = operator.get("/console/quarantine?inbox=ussd&bulk=accept")
    assert "Accept 3 now" in page.text
    form = _confirm_form(page.text)
    for i in range(3, 5):  # two more arrive before the button is pressed
        _conflict(served, i)
    done = operator.post("/console/quarantine/bulk", data={**form, "note": "the new counts"})
    assert done.status_code == 303
    still_open = served.box.quarantined("ussd", "open", 100)
    assert [row.identity for row in still_open] == ["r3-3", "r4-4"]
    assert "count=3" in done.headers["location"]


def test_a_bulk_archive_takes_only_the_dead_letters_its_preview_counted(
    served: Served, operator: httpx.Client
) -> None:
    for i in range(2):
        served.box.ingest("ussd", Delivery(BAD.format(i).encode(), key=f"d{i}-{i}"))
    page = operator.get("/console/dead-letters?inbox=ussd&bulk=archive")
    assert "Archive 2 now" in page.text
    form = _confirm_form(page.text)
    served.box.ingest("ussd", Delivery(BAD.format(9).encode(), key="d9-9"))  # after it
    csrf = csrf_of(operator)
    done = operator.post(
        "/console/dead-letters/bulk", data={**form, "csrf": csrf, "note": "sender retired"}
    )
    assert done.status_code == 303
    assert [d.key for d in served.box.dead_letters("ussd", status="open")] == ["d9-9"]
    assert "count=2" in done.headers["location"] and "more=" not in done.headers["location"]
