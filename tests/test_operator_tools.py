"""What an intake desk does with what oncebox kept: the triage ledger beside what every
arrival would have counted, dead letters filtered, paged and replayed, and who resolved
what. Every backend."""

from __future__ import annotations

import json
from typing import ClassVar

import pytest

from conftest import INBOXES, SESSION, BoxFactory
from oncebox import Delivery, InboxSpec, ManualClock, register
from oncebox.errors import InvalidOperation
from oncebox.formats import Decoded, Invalid
from oncebox.formats.ussd_h1 import make_frame


class Picky:
    """A user's codec with a bug that a later release fixes (``fixed``)."""

    name = "picky-test"
    identity = "key"
    max_bytes = 200_000
    fixed: ClassVar[bool] = False

    def decode(self, delivery: Delivery) -> Decoded:
        if not Picky.fixed and delivery.body.startswith(b"new"):
            raise Invalid("unsupported", "this release does not read the new layout")
        return Decoded(content=delivery.body, key=delivery.key)


register(Picky())  # type: ignore[arg-type]
PICKY = (InboxSpec("picky", codec="picky-test"),)


def test_triage_shows_what_counting_every_arrival_would_have_given(make_box: BoxFactory) -> None:
    box = make_box()
    session = [Delivery(text.encode(), key=key) for key, text in SESSION]
    box.ingest_batch("ussd", session)
    box.ingest_batch("ussd", session)  # the whole session retransmitted
    triage = box.triage("ussd")
    # Seed 003, R9: 3 + 8 + 12 = 23, which counting every arrival would make 46.
    assert (triage["headcount"], triage["every_arrival_headcount"]) == (23, 46)
    assert triage["suppressed_headcount"] == 23
    med = next(t for t in triage["totals"] if t["need"] == "MED")
    assert (med["headcount"], med["every_arrival_headcount"], med["arrivals"]) == (3, 6, 2)


def test_dead_letters_filter_by_reason_time_and_content_and_page(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    box = make_box()
    start = clock()
    box.ingest("ussd", Delivery(b"H1|1|K1|MED|3|86|#00", key="a-1"))  # bad_checksum
    box.ingest("ussd", Delivery(b"garbage", key="a-2"))  # bad_format
    clock.advance(3600)
    box.ingest("ussd", Delivery(b"more garbage", key="a-3"))  # bad_format, an hour later
    reasons = [d.reason for d in box.dead_letters("ussd")]
    assert reasons == ["bad_checksum", "bad_format", "bad_format"]
    assert [d.key for d in box.dead_letters("ussd", reason="bad_format")] == ["a-2", "a-3"]
    assert [d.key for d in box.dead_letters("ussd", since=start + 60)] == ["a-3"]
    assert [d.key for d in box.dead_letters("ussd", until=start + 60)] == ["a-1", "a-2"]
    assert [d.key for d in box.dead_letters("ussd", search="garbage")] == ["a-2", "a-3"]
    first = box.dead_letters("ussd", limit=2)
    rest = box.dead_letters("ussd", limit=2, after=first[-1].id)
    assert [d.key for d in first + rest] == ["a-1", "a-2", "a-3"]
    assert box.dead_letters("listing") == []


def test_a_dead_letter_is_replayed_after_a_fix_and_the_log_names_who(
    make_box: BoxFactory,
) -> None:
    box = make_box(PICKY)
    Picky.fixed = False
    try:
        refused = box.ingest("picky", Delivery(b"new layout", key="m-1", device_time="t0"))
        assert refused.reason == "unsupported" and refused.may_ack
        Picky.fixed = True  # the release that reads the new layout is deployed
        replayed = box.replay(refused.dead_letter_id or 0, actor="ops-anna")
        # A second replay is decided like any resend: a duplicate, applied nothing twice.
        again = box.replay(refused.dead_letter_id or 0, actor="ops-anna")
    finally:
        Picky.fixed = False
    assert str(again.verdict) == "duplicate"
    assert str(replayed.verdict) == "accepted" and replayed.may_ack
    record = box.record("picky", "m-1")
    assert record is not None and record.device_time == "t0"  # its facts came along
    [letter] = box.dead_letters("picky")
    assert (letter.replayed_by, letter.replay_verdict) == ("ops-anna", "duplicate")
    entry, _ = [e for e in box.log_entries() if e.step == "replay"]
    state = json.loads(entry.state)
    assert (state["dead_letter"], state["actor"], state["verdict"]) == (
        letter.id, "ops-anna", "accepted"
    )  # fmt: skip
    assert state["record"] == replayed.record_id and box.verify().ok
    assert box.stats("picky")["records"] == 1


def test_a_dead_letter_kept_only_in_part_cannot_be_replayed(make_box: BoxFactory) -> None:
    box = make_box(PICKY)
    Picky.fixed = False
    refused = box.ingest("picky", Delivery(b"new" + b"x" * 100_000, key="big"))
    [letter] = box.dead_letters("picky")
    assert letter.length == 100_003 and len(letter.head) == 65_536
    with pytest.raises(InvalidOperation, match="kept only in part"):
        box.replay(refused.dead_letter_id or 0, actor="ops")
    assert box.dead_letters("picky")[0].replayed_at is None


def test_a_resolution_names_its_actor_on_the_row_and_in_the_log(make_box: BoxFactory) -> None:
    box = make_box(INBOXES)
    box.ingest("ussd", Delivery(make_frame(1, "K1", "MED", 3, 86).encode(), key="r-1"))
    box.ingest("ussd", Delivery(make_frame(1, "K1", "MED", 9, 86).encode(), key="r-1"))
    [row] = box.quarantined("ussd")
    closed = box.resolve(row.id, "keep", "the first count stands", actor="desk-ben")
    assert (closed.status, closed.resolved_by) == ("kept", "desk-ben")
    [entry] = [e for e in box.log_entries() if e.step == "resolve"]
    assert json.loads(entry.state)["actor"] == "desk-ben"
