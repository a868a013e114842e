"""What an operator reads on stderr: one clean line per new conflict, and none for the
demo's own conflict, which is made on purpose."""

from __future__ import annotations

import logging

import pytest

import oncebox
from conftest import INBOXES
from oncebox import Delivery, InboxSpec
from oncebox.surfaces.demo import load_demo_traffic


def test_a_new_conflict_is_one_line_naming_it(caplog: pytest.LogCaptureFixture) -> None:
    with oncebox.open("sqlite:///:memory:", inboxes=[InboxSpec("k", codec="keyed")]) as box:
        box.ingest("k", Delivery(b"a", key="x"))
        with caplog.at_level(logging.WARNING, logger="oncebox"):
            box.ingest("k", Delivery(b"b", key="x"))
            box.ingest("k", Delivery(b"b", key="x"))  # the same newcomer again: no new line
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ['conflict quarantined: inbox=k identity="x" record=1 quarantine=1']


def test_the_demo_traffic_conflict_is_not_reported_as_a_fault(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine_log = logging.getLogger("oncebox")
    with oncebox.open("sqlite:///:memory:", inboxes=INBOXES) as box:
        with caplog.at_level(logging.WARNING, logger="oncebox"):
            load_demo_traffic(box)
            assert engine_log.level == logging.WARNING  # and logging is back as it was
        assert [r.getMessage() for r in caplog.records] == []
        assert len(box.quarantined("ussd")) == 1  # the conflict is there all the same
