"""The feed hands on what was accepted, in log order, and consumers follow it (issue 21)."""

from __future__ import annotations

import threading
import time

import pytest

from conftest import SESSION, BoxFactory
from oncebox import Delivery, InvalidOperation, ManualClock, Oncebox
from oncebox.engine import feed as feeding
from oncebox.engine.feed import PastHandedOut, StaleCursor
from oncebox.formats.ussd_h1 import make_frame


def frame(seq: int, headcount: int = 3) -> Delivery:
    return Delivery(make_frame(seq, "Kakuma1", "MED", headcount, 86).encode(), key=f"r-{seq}")


def test_the_feed_lists_accepted_records_and_revisions_in_log_order(make_box: BoxFactory) -> None:
    box = make_box()
    box.ingest_batch("ussd", [frame(1), frame(2), frame(1)])  # the repeat is no new entry
    box.ingest("ussd", frame(3))
    conflict = box.ingest("ussd", frame(2, headcount=9))
    box.ingest("ussd", frame(4, headcount=9).body, key="bad key")  # a dead letter: not on it
    entries = box.feed("ussd").entries
    assert [(e.record_id, e.revision) for e in entries] == [(1, 1), (2, 1), (3, 1)]
    positions = [e.position for e in entries]
    assert positions == sorted(positions) and len(set(positions)) == 3
    assert entries[0].content == frame(1).body and entries[0].identity == "r-1"
    assert conflict.quarantine_id is not None
    box.resolve(conflict.quarantine_id, "accept", "the gateway resent it corrected")
    [revised] = box.feed("ussd", after=positions[-1]).entries
    assert (revised.record_id, revised.revision) == (2, 2)
    assert revised.content == frame(2, headcount=9).body
    # The first revision keeps its own content and key on the feed.
    again = box.feed("ussd").entries
    assert again[1].content == frame(2).body and again[1].revision == 1
    keys = [e.idempotency_key for e in [*again, revised]]
    assert keys[:3] == [e.idempotency_key for e in entries]  # the same on every read
    assert len(set(keys)) == 4  # and different for every other revision
    assert box.log_position() >= revised.position
    nothing = box.feed("listing")
    assert nothing.entries == [] and nothing.next_after == box.log_position()


def test_a_page_is_bounded_and_bad_pages_are_refused(make_box: BoxFactory) -> None:
    box = make_box()
    box.ingest_batch("ussd", [frame(n) for n in range(1, 8)])
    first = box.feed("ussd", limit=3)
    assert first.next_after == first.entries[-1].position  # full: read on from the last
    rest = box.feed("ussd", after=first.next_after, limit=100)
    assert len(first.entries) == 3 and len(rest.entries) == 4
    for bad in ({"after": -1}, {"limit": 0}, {"limit": 1001}, {"wait": 31}):
        with pytest.raises(InvalidOperation):
            box.feed("ussd", **bad)  # type: ignore[arg-type]


def test_a_waiting_read_is_woken_by_what_is_sealed(make_box: BoxFactory) -> None:
    box = make_box()
    got: list[int] = []

    def follow() -> None:
        got.extend(e.record_id for e in box.feed("ussd", wait=20).entries)

    reader = threading.Thread(target=follow)
    reader.start()
    time.sleep(0.2)
    box.ingest("ussd", frame(1))
    reader.join(25)
    assert got == [1]


def test_a_consumer_moves_forward_under_its_lease_only(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    box = make_box()
    box.ingest_batch("ussd", [frame(n) for n in range(1, 6)])
    mine = box.consumer("desk", "ussd")
    held = mine.lease("worker-1", ttl=30)
    handed = mine.next(limit=2).entries
    assert [e.record_id for e in handed] == [1, 2]
    assert [e.record_id for e in mine.next(limit=2).entries] == [1, 2]  # not acked: again
    with pytest.raises(PastHandedOut):
        mine.ack(handed[-1].position + 1000)
    assert mine.ack(handed[-1].position).position == handed[-1].position
    assert mine.ack(handed[0].position).position == handed[-1].position  # never backwards
    assert [e.record_id for e in mine.next(limit=10).entries] == [3, 4, 5]
    # Another holder cannot take a live lease; once it runs out it can, and the first
    # holder's token moves nothing any more.
    other = box.consumer("desk", "ussd")
    with pytest.raises(InvalidOperation, match="held by worker-1"):
        other.lease("worker-2")
    clock.advance(31)
    with pytest.raises(StaleCursor) as expired:
        mine.next()
    assert expired.value.reason == "expired_lease"
    taken = other.lease("worker-2")
    assert taken.token > held.token
    with pytest.raises(StaleCursor) as stale:
        mine.ack(handed[-1].position)
    assert stale.value.reason == "stale_token"
    assert other.state().position == handed[-1].position
    [standing] = box.consumers()
    assert standing.consumer.name == "desk" and standing.lease is not None
    assert standing.lease.holder == "worker-2" and standing.lag_entries == 3


def test_a_consumer_can_start_at_the_end_or_a_position(make_box: BoxFactory) -> None:
    box = make_box()
    box.ingest_batch("ussd", [frame(n) for n in range(1, 4)])
    head = box.log_position()
    late = box.consumer("late", "ussd", start="end")
    assert late.state().position == head
    late.lease("w")
    assert late.next().entries == []
    box.ingest("ussd", frame(9))
    assert [e.record_id for e in late.next().entries] == [4]
    with pytest.raises(InvalidOperation, match="another inbox"):
        box.consumer("late", "listing")
    with pytest.raises(InvalidOperation, match="start"):
        box.consumer("odd", "ussd", start="middle")
    assert SESSION  # the shared frames stay the conftest's


def quiet_among_busy(make_box: BoxFactory, monkeypatch: pytest.MonkeyPatch) -> Oncebox:
    """Two ussd frames with twelve listing events between them, read five log positions
    at a time: the quiet inbox's second entry is two windows past its first."""
    from helpers import event_body

    monkeypatch.setattr(feeding, "SCAN", 5)
    box = make_box()
    box.ingest("ussd", frame(1))
    for n in range(12):
        box.ingest("listing", event_body(f"n-{n}"))
    box.ingest("ussd", frame(2))
    return box


def test_a_quiet_inbox_is_read_a_window_at_a_time(
    make_box: BoxFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read looks at a bounded window of the log, whatever the inbox: a reader of a
    quiet inbox among busy ones moves on by ``next_after`` and misses nothing."""
    box = quiet_among_busy(make_box, monkeypatch)
    found, after, reads = [], 0, 0
    while after < box.log_position():
        page = box.feed("ussd", after=after)
        found += [e.identity for e in page.entries]
        assert page.next_after > after
        after, reads = page.next_after, reads + 1
    assert found == ["r-1", "r-2"] and reads >= 3


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda box, mine: box.feed("ussd", after="1"), id="feed-after-text"),
        pytest.param(lambda box, mine: box.feed("ussd", after=1.5), id="feed-after-float"),
        pytest.param(lambda box, mine: box.feed("ussd", limit="5"), id="feed-limit-text"),
        pytest.param(lambda box, mine: box.feed("ussd", limit=2.5), id="feed-limit-float"),
        pytest.param(lambda box, mine: box.feed("ussd", limit=True), id="feed-limit-bool"),
        pytest.param(lambda box, mine: box.feed("ussd", wait="1"), id="feed-wait-text"),
        pytest.param(lambda box, mine: box.consumer(5, "ussd"), id="consumer-name-int"),
        pytest.param(lambda box, mine: mine.lease("w", "5"), id="lease-ttl-text"),
        pytest.param(lambda box, mine: mine.lease("w", True), id="lease-ttl-bool"),
        pytest.param(lambda box, mine: mine.lease(5, 30), id="lease-holder-int"),
        pytest.param(lambda box, mine: mine.lease("w\x00", 30), id="lease-holder-nul"),
        pytest.param(lambda box, mine: mine.next(limit="5"), id="next-limit-text"),
        pytest.param(lambda box, mine: mine.next(wait="1"), id="next-wait-text"),
        pytest.param(lambda box, mine: mine.next(token="1"), id="next-token-text"),
        pytest.param(lambda box, mine: mine.ack("2"), id="ack-text"),
        pytest.param(lambda box, mine: mine.ack(1.5), id="ack-float"),
        pytest.param(lambda box, mine: mine.ack(True), id="ack-bool"),
        pytest.param(lambda box, mine: mine.ack(-1), id="ack-negative"),
        pytest.param(lambda box, mine: box.lease("feed", "s", "5"), id="scope-lease-ttl-text"),
    ],
)
def test_a_bad_argument_to_the_feed_or_a_consumer_is_refused_clearly(
    make_box: BoxFactory, call: object
) -> None:
    """A position, a limit, a wait or a ttl of the wrong kind reached a comparison
    (TypeError), the store (SQLite: "datatype mismatch", a StorageError) or was kept as
    it was: ``ack(1.5)`` left a cursor of 1.5, ``after=1.5`` read from position 1, an
    integer holder was kept as the holder. Each is the caller's error, said as one."""
    box = make_box()
    box.ingest_batch("ussd", [frame(n) for n in range(1, 4)])
    mine = box.consumer("desk", "ussd")
    mine.lease("worker-1", ttl=30)
    mine.next(limit=10)
    assert callable(call)
    with pytest.raises(InvalidOperation):
        call(box, mine)
    assert mine.state().position == 0 and isinstance(mine.state().handed_out, int)
    [standing] = box.consumers()
    assert standing.lease is not None and standing.lease.holder == "worker-1"


def test_a_caught_up_consumer_is_told_its_token_is_stale_or_expired(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    """``next`` looked for news without the write lock and, finding none, answered an
    empty page without asking the fence: a holder whose lease had run out, or been taken
    over, went on polling a quiet feed as if it held it (over HTTP a 200 where the docs
    say 409), and learnt only once something new was sealed."""
    box = make_box()
    box.ingest("ussd", frame(1))
    mine = box.consumer("desk", "ussd")
    mine.lease("worker-1", ttl=30)
    mine.ack(mine.next().next_after)
    assert mine.next().entries == []  # caught up, and holding it: nothing to say
    clock.advance(31)
    with pytest.raises(StaleCursor) as expired:
        mine.next()
    assert expired.value.reason == "expired_lease"
    box.feed_consumer("desk").lease("worker-2")
    with pytest.raises(StaleCursor) as stale:
        mine.next()
    assert stale.value.reason == "stale_token"


def test_a_dropped_consumer_made_again_is_not_moved_by_the_old_holder(
    make_box: BoxFactory,
) -> None:
    """Dropping a consumer forgot its cursor but not its lease: made again under the
    same name (to start it over), the old holder's token still handed out and moved the
    new cursor, and a new holder was refused while the old lease ran."""
    box = make_box()
    box.ingest_batch("ussd", [frame(1), frame(2)])
    old = box.consumer("desk", "ussd")
    old.lease("worker-1", ttl=30)
    old.next()
    box.drop_consumer("desk")
    fresh = box.consumer("desk", "ussd", start="end")
    with pytest.raises(StaleCursor):
        old.next()
    with pytest.raises(StaleCursor):
        old.ack(1)
    assert fresh.lease("worker-2").holder == "worker-2"
    assert fresh.state().position == box.log_position()


def test_a_consumer_cannot_start_past_the_log_s_end(make_box: BoxFactory) -> None:
    """A consumer made after a position the log has not reached (a typo, a position of
    another store) skipped, silently and for good, every entry sealed until the log got
    there. Only a position the log has is a place to start after."""
    box = make_box()
    box.ingest("ussd", frame(1))
    end = box.log_position()
    with pytest.raises(InvalidOperation, match="past the log"):
        box.consumer("far", "ussd", start=end + 1)
    assert box.consumer("here", "ussd", start=end).state().position == end
    assert [s.consumer.name for s in box.consumers()] == ["here"]


def test_a_consumer_of_a_quiet_inbox_gets_past_a_busy_stretch_of_the_log(
    make_box: BoxFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A consumer is handed what follows its cursor among the next window of log
    positions. When the window held none of its inbox's entries the page was empty, and
    its holder (as the docs' loop and ``oncebox consumers read`` do) acknowledged
    nothing: the next read looked at the same window again, empty again, for good. A
    consumer of a quiet inbox in a busy store was never handed another entry."""
    box = quiet_among_busy(make_box, monkeypatch)
    mine = box.consumer("desk", "ussd")
    mine.lease("worker-1", ttl=30)
    found = []
    for _ in range(6):  # the docs' loop: acknowledge a page that had entries
        page = mine.next(limit=100)
        found += [e.identity for e in page.entries]
        if page.entries:
            mine.ack(page.next_after)
    assert found == ["r-1", "r-2"]
    assert mine.state().position == box.log_position()
