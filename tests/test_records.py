"""Records you can find (issue 21), through the library on every backend: an inbox's
records by first-seen time, key, identity and content, a page at a time that misses
nothing and repeats nothing; one record with all that happened to it; and everything
kept under one delivery key, told as one timeline."""

from __future__ import annotations

import pytest

from conftest import BoxFactory
from helpers import event_body
from oncebox import Delivery, ManualClock
from oncebox.engine.views import LISTED
from oncebox.errors import InvalidOperation, InvalidQuery, UnknownInbox
from oncebox.formats.ussd_h1 import make_frame


def frame(seq: int, headcount: int = 3, site: str = "Kakuma1") -> Delivery:
    return Delivery(make_frame(seq, site, "MED", headcount, 86).encode(), key=f"gw-{seq}")


def event(n: int, key: str, **changes: object) -> Delivery:
    return Delivery(event_body(f"n-{n}", **changes), key=key)


def test_an_inbox_pages_by_first_seen_in_either_order(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    box = make_box()
    for seq in range(1, 12):
        box.ingest("ussd", frame(seq, site="Kakuma2" if seq % 3 == 0 else "Kakuma1"))
        clock.advance(60)
    start = clock.now - 11 * 60
    newest = [r.id for r in box.records("ussd")]
    assert newest == list(range(11, 0, -1))
    assert [r.id for r in box.records("ussd", order="oldest")] == list(range(1, 12))
    for order in ("newest", "oldest"):
        seen, after = [], 0
        while page := box.records("ussd", order=order, after=after, limit=4):
            seen += [r.id for r in page]
            after = page[-1].id
        assert sorted(seen) == list(range(1, 12)) and len(seen) == 11, order
    # since <= first seen < until, as the dead letters' filter.
    window = box.records("ussd", since=start + 120, until=start + 300, order="oldest")
    assert [r.id for r in window] == [3, 4, 5]
    found = box.records("ussd", search="Kakuma2")
    assert [r.id for r in found] == [9, 6, 3]
    assert [r.id for r in box.records("ussd", search=b"Kakuma2", limit=2, after=9)] == [6, 3]
    assert [r.id for r in box.records("ussd", identity="gw-4")] == [4]
    assert [r.id for r in box.records("ussd", key="gw-5")] == [5]
    assert box.records("ussd", key="gw-99") == [] and box.records("listing") == []


def test_a_key_that_is_not_the_identity_finds_its_records(make_box: BoxFactory) -> None:
    box = make_box()
    box.ingest("listing", event(1, "upload-7"))
    box.ingest("listing", event(2, "upload-7", sku="SKU-2"))
    box.ingest("listing", event(3, "upload-8", sku="SKU-3"))
    keyed = box.records("listing", key="upload-7", order="oldest")
    assert [r.key for r in keyed] == ["upload-7", "upload-7"]
    assert [r.identity for r in keyed] == [f'["listings-feed","sub-main","n-{n}"]' for n in (1, 2)]
    found = box.lookup("listing", "upload-7")
    assert found.arrived and [r.id for r in found.records] == [1, 2]
    assert [str(t.what) for t in found.timeline] == ["accepted", "accepted"]
    identity = keyed[0].identity
    assert identity is not None and box.lookup("listing", identity).records == []  # not a key
    nothing = box.lookup("listing", "never-sent")
    assert not nothing.arrived and nothing.timeline == [] and not nothing.more


def test_a_key_tells_arrivals_duplicates_conflicts_resolutions_and_refusals(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    box = make_box()
    box.ingest("ussd", frame(1))
    clock.advance(10)
    box.ingest("ussd", frame(1))  # a duplicate
    clock.advance(10)
    clash = box.ingest("ussd", frame(1, headcount=9))
    clock.advance(10)
    bad = box.ingest("ussd", b"H1|1|Kakuma1|MED|3|86|#00", key="gw-1")
    assert clash.quarantine_id is not None and bad.reason == "bad_checksum"
    clock.advance(10)
    box.resolve(clash.quarantine_id, "accept", "the gateway re-read 9", actor="ops")
    found = box.lookup("ussd", "gw-1")
    told = [(str(t.what), t.by) for t in found.timeline]
    # Duplicates are counted, not kept one by one: their step is at the record's last
    # seen time, its identity's last arrival (the accepted newcomer's, not the operator's
    # resolution, which is no arrival), the others each at their own.
    assert told[0] == ("accepted", None)
    assert sorted(told[1:3]) == [("conflict", None), ("duplicates", None)]
    assert told[3:] == [("rejected", None), ("resolved", "ops")]
    times = [t.at for t in found.timeline]
    assert times == sorted(times)
    assert len(found.records) == len(found.quarantine) == len(found.dead_letters) == 1
    steps = {str(t.what): t for t in found.timeline}
    assert steps["resolved"].revision == 2 and steps["resolved"].log_position is not None
    assert steps["duplicates"].count == 1
    assert steps["rejected"].dead_letter_id == found.dead_letters[0].id

    view = box.record_view(found.records[0].id)
    assert view is not None and view.inbox == "ussd"
    assert view.record.revision == 2 and view.record.content == frame(1, headcount=9).body
    assert [r.revision for r in view.revisions] == [1]
    assert [q.id for q in view.quarantine] == [clash.quarantine_id] and not view.more_quarantine
    assert [e.step for e in view.log] == ["accept", "quarantine", "resolve"]
    assert sorted(str(t.what) for t in view.timeline) == [
        "accepted", "conflict", "duplicates", "resolved"
    ]  # fmt: skip
    logged = {e.seq for e in view.log}
    assert {t.log_position for t in view.timeline if t.log_position} <= logged
    assert box.record_view(10**9) is None


def test_a_listing_reads_contents_cut_and_a_record_gives_them_whole(
    make_box: BoxFactory,
) -> None:
    box = make_box()
    big = "x" * 5000
    box.ingest("listing", event(1, "upload-1", payload={"status": "ACTIVE", "issues": [big]}))
    [row] = box.records("listing", preview=LISTED)
    assert row.content is not None and len(row.content) == LISTED.content
    assert row.content_length is not None and row.content_length > 5000 and "content" in row.cut
    view = box.record_view(row.id)
    assert view is not None and view.record.content is not None
    assert len(view.record.content) == row.content_length


@pytest.mark.parametrize(
    "bad",
    [
        {"order": "sideways"},
        {"limit": 0},
        {"after": 10**6},  # no such record
        {"key": "a\x00b"},
        {"identity": "\ud800"},
        {"search": "s" * 257},
    ],
)
def test_bad_queries_are_refused_with_what_to_do(make_box: BoxFactory, bad: dict) -> None:
    box = make_box()
    box.ingest("ussd", frame(1))
    with pytest.raises(InvalidOperation):
        box.records("ussd", **bad)


def test_a_page_after_another_inboxs_record_is_refused(make_box: BoxFactory) -> None:
    box = make_box()
    box.ingest("ussd", frame(1))
    box.ingest("listing", event(1, "upload-1"))
    with pytest.raises(InvalidQuery, match="holds no record 2"):
        box.records("ussd", after=2)
    with pytest.raises(UnknownInbox):
        box.lookup("nope", "gw-1")
    with pytest.raises(InvalidQuery):
        box.lookup("ussd", "gw\x00")
