"""Numbers read from queries, headers and arguments are ASCII digits: ``str.isdigit()``
also takes "²", which ``int()`` refuses, so each such place answered 500 (or exit 70)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

import oncebox
from clirun import oncebox_here
from conftest import INBOXES
from httpserver import serving
from oncebox import Oncebox
from oncebox.surfaces.digits import whole
from oncebox.surfaces.forwarding.senders import retry_after
from oncebox.surfaces.http import create_app
from test_security_sessions import client, sign_in

ODD = "\u00b2"  # SUPERSCRIPT TWO: str.isdigit() is True, int() raises


@given(st.text(max_size=24))
def test_whole_reads_ascii_digits_and_nothing_else(text: str) -> None:
    found = whole(text)
    plain = 0 < len(text) <= 18 and all("0" <= c <= "9" for c in text)
    assert (found is not None) == plain
    if found is not None:
        assert found == int(text) and found < 2**63


def test_a_retry_after_of_other_digits_is_ignored_not_a_crash() -> None:
    assert retry_after(ODD, 0.0) is None
    assert retry_after("7", 0.0) == 7.0


@pytest.fixture
def box(shared_url: str) -> Iterator[Oncebox]:
    opened = oncebox.open(shared_url, inboxes=INBOXES)
    try:
        yield opened
    finally:
        opened.close()


def test_console_pages_ignore_numbers_in_other_digits(box: Oncebox) -> None:
    names = ("resolved", "count", "failed", "replayed", "archived", "retried",
             "retried_all", "after", "before", "every")  # fmt: skip
    query = urlencode({**dict.fromkeys(names, ODD), "bulk_done": "accept", "done": "archive"})
    secret = box.create_token("ops", ["*"], ["operator"]).secret
    pages = ("", "/quarantine", "/dead-letters", "/forwarding", "/records", "/log", "/work",
             "/overview.part", "/dead-letters/counts.part")  # fmt: skip
    with serving(create_app(box)) as url, client(url) as http:
        sign_in(http, secret)
        for page in pages:
            answer = http.get(f"/console{page}?{query}")
            assert answer.status_code == 200, (page, answer.status_code)


def test_a_last_event_id_of_other_digits_reads_from_after(box: Oncebox) -> None:
    secret = box.create_token("reader", ["*"], ["read"]).secret
    with serving(create_app(box)) as url:
        headers: dict[str, str | bytes] = {
            "Authorization": f"Bearer {secret}",
            "Accept": "text/event-stream",
            "Last-Event-ID": ODD.encode("latin-1"),
        }
        with httpx.stream(
            "GET", f"{url}/v1/inboxes/ussd/feed", headers=headers, timeout=10
        ) as stream:
            assert stream.status_code == 200


def test_a_consumer_start_of_other_digits_is_a_clear_error(
    box: Oncebox, shared_url: str, tmp_path: Path
) -> None:
    args = ("--db", shared_url, "consumers", "create", "c", "ussd", "--start")
    refused = oncebox_here(tmp_path, *args, ODD)
    assert refused.returncode == 2, refused
    assert "log position" in refused.stderr
    assert oncebox_here(tmp_path, *args, "0").returncode == 0  # the control
