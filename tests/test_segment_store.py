"""Issue 21, Prove: segments made from a real store (SQLite and PostgreSQL) verify, with
each record's content at the revision its entry sealed."""

from __future__ import annotations

import json

import pytest

import oncebox
from conftest import BoxFactory
from oncebox import Delivery, ManualClock, Oncebox
from oncebox.engine.checkpoint import generate_key
from oncebox.engine.segment import CONTENT_BOUND
from oncebox.engine.segment_check import SegmentReport, verify_segment
from oncebox.formats.ussd_h1 import make_frame

PRIVATE, PUBLIC = generate_key()
DAY = 86_400.0


def frame(frame_id: str, seq: int, headcount: int) -> Delivery:
    return Delivery(make_frame(seq, "Kakuma1", "MED", headcount, 86).encode(), key=frame_id)


def verified(box: Oncebox, inbox: str, start: int, end: int, **options: bool) -> SegmentReport:
    doc = json.loads(json.dumps(box.segment(inbox, start, end, **options)))
    return verify_segment(
        doc, box.checkpoint(PRIVATE), PUBLIC, start=start, end=end, inbox=inbox, **options
    )


def fill(box: Oncebox) -> dict[str, int]:
    """Records of two inboxes, a lease, a revision accepted and one kept; their seqs."""
    seqs: dict[str, int] = {}
    seqs["rec1"] = box.ingest("ussd", frame("rec1-1", 1, 3)).log_position or 0
    token = box.lease("feed", "S1", 600).token
    big = Delivery(b"r" * (CONTENT_BOUND + 500), snapshot_id="S1", lease_token=token)
    seqs["big"] = box.ingest("feed", big).log_position or 0
    seqs["rec2"] = box.ingest("ussd", frame("rec2-2", 2, 8)).log_position or 0
    conflict = box.ingest("ussd", frame("rec1-1", 1, 5))  # rec1 again, other content
    kept = box.ingest("ussd", frame("rec2-2", 2, 9))
    assert conflict.quarantine_id and kept.quarantine_id
    box.resolve(conflict.quarantine_id, "accept", "the gateway's correction")
    box.resolve(kept.quarantine_id, "keep", "a garbled resend")
    seqs["rec3"] = box.ingest("ussd", frame("rec3-3", 3, 12)).log_position or 0
    return seqs


def test_a_segment_from_the_store_verifies_with_each_revision_as_sealed(box: Oncebox) -> None:
    seqs = fill(box)
    size = box.checkpoint().tree_size
    report = verified(box, "ussd", 1, size)
    steps = [(r["step"], r["sealed"].get("record"), r["content"]) for r in report.records]
    assert steps == [
        ("accept", 1, {"text": make_frame(1, "Kakuma1", "MED", 3, 86)}),  # revision 1 still
        ("accept", 3, {"text": make_frame(2, "Kakuma1", "MED", 8, 86)}),
        ("resolve", None, {"text": make_frame(1, "Kakuma1", "MED", 5, 86)}),  # revision 2
        ("accept", 4, {"text": make_frame(3, "Kakuma1", "MED", 12, 86)}),
    ]
    assert [r["seq"] for r in report.records][:2] == [seqs["rec1"], seqs["rec2"]]
    assert report.records[-1]["seq"] == seqs["rec3"]
    assert report.hidden == size - 4  # the lease, feed's record, two quarantines, keep

    feed = verified(box, "feed", 1, size)
    [big] = feed.records
    assert big["seq"] == seqs["big"] and big["content"] is None and big["cut"] == ["content"]
    assert big["content_length"] == CONTENT_BOUND + 500 and big["kept"]

    whole = verified(box, "ussd", 1, size, whole=True)
    assert whole.hidden == 0 and whole.records == report.records


def test_a_segment_of_an_evicted_record_still_proves_its_entry(
    box: Oncebox, clock: ManualClock
) -> None:
    seq = box.ingest("ussd", frame("rec1-1", 1, 3)).log_position
    clock.advance(31 * DAY)
    box.evict("ussd")
    assert seq is not None
    [record] = verified(box, "ussd", seq, seq).records
    assert not record["kept"] and record["content"] is None
    assert record["sealed"]["identity"] == "rec1-1"


def test_a_segment_can_be_proven_to_an_older_checkpoint(box: Oncebox) -> None:
    fill(box)
    old = box.checkpoint(PRIVATE)
    box.ingest("ussd", frame("rec4-4", 4, 1))
    doc = box.segment("ussd", 2, old.tree_size, tree_size=old.tree_size)
    report = verify_segment(doc, old, PUBLIC, start=2, end=old.tree_size)
    assert report.tree_size == old.tree_size < box.checkpoint().tree_size


def test_a_range_no_segment_is_made_for_is_refused(box: Oncebox) -> None:
    fill(box)
    size = box.checkpoint().tree_size
    for start, end, options in (
        (0, 1, {}),
        (3, 2, {}),
        (1, size + 1, {}),
        (1, 2, {"tree_size": size + 1}),
        (1, size, {"tree_size": size - 1}),
    ):
        with pytest.raises(oncebox.InvalidOperation):
            box.segment("ussd", start, end, **options)
    with pytest.raises(oncebox.UnknownInbox):
        box.segment("nope", 1, 1)


def test_a_segment_is_bounded_to_a_thousand_entries(make_box: BoxFactory) -> None:
    box = make_box()
    token = box.lease("feed", "S1", 600).token
    rows = [Delivery(f"row {i}".encode(), snapshot_id="S1", lease_token=token) for i in range(1001)]
    box.ingest_batch("feed", rows)
    size = box.checkpoint().tree_size
    assert size == 1002
    with pytest.raises(oncebox.InvalidOperation, match="at most 1,000"):
        box.segment("feed", 1, size)
    report = verified(box, "feed", 3, size)
    assert report.entries == 1000 and len(report.records) == 1000
