"""What the console's working day reads, on every store backend: what needs attention
(open conflicts, open dead letters, silence derived from the inbox's own traffic), the
triage sites' last deliveries, the log a page at a time with filters, and the dead
letters newest first."""

from __future__ import annotations

import pytest

from conftest import BoxFactory
from oncebox import Delivery, ManualClock
from oncebox.engine.attention import DAY, SILENCE_FLOOR, ordered, silent_after
from oncebox.engine.journal import LogFilter
from oncebox.errors import UnknownValue
from oncebox.formats.ussd_h1 import make_frame


def test_silence_is_derived_from_the_inbox_own_traffic() -> None:
    assert silent_after(0) == DAY  # a day without a delivery is silence
    assert silent_after(3) == DAY  # never more than a day
    assert silent_after(24) == 3 * 3600  # one an hour: silent after three hours
    assert silent_after(100_000) == SILENCE_FLOOR  # a burst: never under 15 minutes


def test_attention_orders_conflicts_then_dead_letters_then_silence(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    box = make_box()
    assert box.attention("feed").last_delivery is None  # never: not silent
    assert not box.attention("feed").needs_attention
    for i in range(24):  # one an hour for a day
        box.ingest("ussd", Delivery(make_frame(i, "Kakuma1", "MED", 3, 86).encode(), key=f"r{i}"))
        clock.advance(3600)
    quiet = box.attention("ussd")
    # The last 24 hours (by the hour, the current one included) hold 23 of them.
    assert quiet.silent_after == silent_after(23) and not quiet.silent
    assert quiet.last_delivery == clock() - 3600
    clock.advance(3 * 3600)
    assert box.attention("ussd").silent  # four hours without one
    box.ingest("listing", Delivery(b"not json", key="x"))  # an open dead letter
    order = ordered(box.attention(name) for name in ("feed", "listing", "ussd"))
    assert [a.inbox for a in order] == ["listing", "ussd", "feed"]
    box.ingest("ussd", Delivery(make_frame(1, "Kakuma1", "MED", 9, 86).encode(), key="r1"))
    order = ordered(box.attention(name) for name in ("feed", "listing", "ussd"))
    assert [(a.inbox, a.conflicts, a.dead_letters) for a in order] == [
        ("ussd", 1, 0), ("listing", 0, 1), ("feed", 0, 0)
    ]  # fmt: skip
    assert not order[0].silent  # the conflict was a delivery


def test_each_triage_site_says_when_it_last_delivered(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    box = make_box()
    box.ingest("ussd", Delivery(make_frame(1, "Kakuma1", "MED", 3, 86).encode(), key="a-1"))
    first = clock()
    clock.advance(600)
    box.ingest("ussd", Delivery(make_frame(2, "Dadaab", "WAT", 5, 40).encode(), key="b-2"))
    assert box.triage_sites("ussd") == [("Dadaab", first + 600), ("Kakuma1", first)]
    clock.advance(60)  # a duplicate is an arrival too
    box.ingest("ussd", Delivery(make_frame(1, "Kakuma1", "MED", 3, 86).encode(), key="a-1"))
    assert dict(box.triage_sites("ussd"))["Kakuma1"] == first + 660


def test_an_operator_accepting_a_conflict_is_no_delivery(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    """A record's ``last_seen`` is when it last arrived (docs: the overview's last
    delivery, a site's last delivery, the lookup timeline's duplicates): an operator who
    accepts a newcomer hours later makes it no arrival, so a silent gateway stays silent."""
    box = make_box()
    box.ingest("ussd", Delivery(make_frame(1, "Kakuma1", "MED", 3, 86).encode(), key="a-1"))
    clock.advance(60)
    other = box.ingest("ussd", Delivery(make_frame(1, "Kakuma1", "MED", 9, 86).encode(), key="a-1"))
    arrived = clock()
    clock.advance(DAY + 3600)  # the operator accepts it a day and an hour later
    assert other.quarantine_id is not None
    box.resolve(other.quarantine_id, "accept", "the site confirmed 9", actor="op")
    record = box.record("ussd", "a-1")
    assert record is not None and record.revision == 2
    assert record.last_seen == arrived
    assert box.attention("ussd").last_delivery == arrived
    assert box.attention("ussd").silent
    assert box.triage_sites("ussd") == [("Kakuma1", arrived)]


def test_the_log_pages_by_seq_and_filters_by_step_actor_and_inbox(
    make_box: BoxFactory,
) -> None:
    box = make_box()
    for i in range(12):
        box.ingest("ussd", Delivery(make_frame(i, "K1", "MED", 3, 86).encode(), key=f"r{i}"))
    box.ingest("ussd", Delivery(make_frame(1, "K1", "MED", 9, 86).encode(), key="r1"))
    conflict = box.quarantined("ussd")[0]
    box.resolve(conflict.id, "keep", "checked", "anna")
    box.seal()
    newest = box.log_page(LogFilter(), 5)
    seqs = [e.seq for e in newest.entries]
    assert seqs == list(range(newest.size, newest.size - 5, -1)) and newest.newer is None
    older = box.log_page(LogFilter(), 5, before=newest.older)
    assert [e.seq for e in older.entries] == [s - 5 for s in seqs]
    back = box.log_page(LogFilter(), 5, after=older.newer)
    assert [e.seq for e in back.entries] == seqs
    resolved = box.log_page(LogFilter("resolve", "anna", "ussd"), 5)
    assert [e.step for e in resolved.entries] == ["resolve"] and resolved.older is None
    assert box.log_page(LogFilter("resolve", "bob"), 5).entries == []
    assert box.log_page(LogFilter("accept", inbox="feed"), 5).entries == []
    with pytest.raises(UnknownValue, match="did you mean accept"):
        LogFilter("acept")


def test_dead_letters_come_newest_first_a_page_at_a_time(make_box: BoxFactory) -> None:
    box = make_box()
    for i in range(7):
        box.ingest("ussd", Delivery(f"junk {i}".encode(), key=f"j{i}"))
    first = [d.id for d in box.dead_letters("ussd", 3, newest=True)]
    assert first == sorted(first, reverse=True) and len(first) == 3
    second = [d.id for d in box.dead_letters("ussd", 3, newest=True, after=first[-1])]
    assert second == [first[-1] - 1, first[-1] - 2, first[-1] - 3]
    oldest = [d.id for d in box.dead_letters("ussd", 3)]
    assert oldest == sorted(oldest) and oldest[0] < second[-1]
