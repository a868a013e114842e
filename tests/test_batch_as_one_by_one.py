"""A batch decides and writes what deciding its deliveries one by one does (the decision
path's contract, docs/architecture.md#decision-path), in the cases a review found it did
not: the same dead letter delivered again twice in one batch."""

from __future__ import annotations

import json
from typing import Any

import pytest

import oncebox
from oncebox import Delivery, InboxSpec, ManualClock
from oncebox.formats.ussd_h1 import make_frame

BROKEN = b"H1|1|K1|MED|3|50|#zz"  # a broken trailer: bad_format
GOOD = make_frame(1, "K1", "MED", 3, 50).encode()


def _replays(batched: bool, second: bytes) -> tuple[list[Any], list[dict[str, Any]], int]:
    """A dead letter, then two deliveries naming it (the first refused again): their
    decisions, the replay entries of the log, and the dead letter's attempts."""
    inboxes = [InboxSpec("ussd", codec="ussd-h1", apply="triage")]
    with oncebox.open("sqlite:///:memory:", inboxes=inboxes, clock=ManualClock()) as box:
        letter = box.ingest("ussd", Delivery(BROKEN, key="r-1")).dead_letter_id
        assert letter is not None
        again = [
            Delivery(BROKEN, key="r-1", dead_letter=letter),
            Delivery(second, key="r-1", dead_letter=letter),
        ]
        if batched:
            decisions = box.ingest_batch("ussd", again)
        else:
            decisions = [box.ingest_batch("ussd", [one])[0] for one in again]
        entries = [json.loads(e.state) for e in box.log_entries() if e.step == "replay"]
        found = box.get_dead_letter(letter)
        assert found is not None
        return decisions, entries, found[1].attempts


@pytest.mark.parametrize("second", [BROKEN, GOOD], ids=["refused-again", "accepted"])
def test_one_dead_letter_twice_in_a_batch_logs_each_attempt_as_one_by_one(second: bytes) -> None:
    batch, batch_entries, batch_attempts = _replays(True, second)
    alone, alone_entries, alone_attempts = _replays(False, second)
    assert batch == alone
    assert batch_attempts == alone_attempts == 2
    # The log says which attempt each one was: the first, then the second.
    assert [e["attempts"] for e in alone_entries] == [1, 2]
    assert batch_entries == alone_entries
