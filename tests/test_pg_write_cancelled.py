"""A write PostgreSQL cancels (its statement_timeout, a cancel request) is said to be one.

It was answered as :class:`ReadTimedOut` ("a read ... ran past its time budget"), the
error of a listing or search stopped at its budget: right to retry, wrong about what
happened, for an operator reading it. A write's cancelled statement is
:class:`StorageUnavailable` that says a write was cancelled and nothing of it committed;
a scan's stays :class:`ReadTimedOut`."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

import oncebox
from oncebox import Delivery, InboxSpec
from oncebox.errors import ReadTimedOut, StorageUnavailable

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


@pytest.fixture
def timed_url(pg_url: str) -> Iterator[str]:
    """The test's database, every connection of the store with a 300 ms statement_timeout."""
    joiner = "&" if "?" in pg_url else "?"
    yield f"{pg_url}{joiner}options=-c%20statement_timeout%3D300"


def test_a_write_cancelled_by_statement_timeout_is_not_called_a_read(
    pg_url: str, timed_url: str
) -> None:
    box = oncebox.open(timed_url, inboxes=[InboxSpec("k", codec="keyed")])
    try:
        assert box.ingest("k", Delivery(b"one", key="a")).verdict == "accepted"
        with psycopg.connect(pg_url) as holder:  # takes every lock a write needs first
            holder.execute("LOCK TABLE records IN ACCESS EXCLUSIVE MODE")
            with pytest.raises(StorageUnavailable) as raised:
                box.ingest("k", Delivery(b"two", key="b"))
            holder.rollback()
        assert not isinstance(raised.value, ReadTimedOut)
        assert "cancelled a statement" in str(raised.value)
        # Nothing of it was kept: it is decided anew, and accepted.
        assert box.ingest("k", Delivery(b"two", key="b")).verdict == "accepted"
        assert sorted(r.identity for r in box.records("k")) == ["a", "b"]
    finally:
        box.close()


def test_a_scan_cancelled_by_statement_timeout_is_still_a_read_past_its_budget(
    pg_url: str, timed_url: str
) -> None:
    box = oncebox.open(timed_url, inboxes=[InboxSpec("k", codec="keyed")])
    try:
        box.ingest("k", Delivery(b"one", key="a"))
        with psycopg.connect(pg_url) as holder:
            holder.execute("LOCK TABLE records IN ACCESS EXCLUSIVE MODE")
            with pytest.raises(ReadTimedOut):
                box.records("k")
            holder.rollback()
    finally:
        box.close()
