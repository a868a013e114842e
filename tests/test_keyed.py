"""The keyed codec: the transport's key is the identity, the exact bytes the witness."""

from __future__ import annotations

from conftest import BoxFactory
from oncebox import Delivery, InboxSpec

KEYED = (InboxSpec("hooks", codec="keyed"),)


def test_same_key_same_bytes_is_a_duplicate_other_bytes_a_conflict(make_box: BoxFactory) -> None:
    box = make_box(KEYED)
    first = box.ingest("hooks", Delivery(b'{"a": 1}', key="evt-1"))
    again = box.ingest("hooks", Delivery(b'{"a": 1}', key="evt-1"))
    # Another spelling of the same JSON is other bytes: keyed reads nothing of the body.
    other = box.ingest("hooks", Delivery(b'{"a":1}', key="evt-1"))
    assert [str(d.verdict) for d in (first, again, other)] == ["accepted", "duplicate", "conflict"]
    assert first.record_id == again.record_id == other.record_id
    assert all(d.may_ack for d in (first, again, other))
    assert box.record("hooks", "evt-1") is not None


def test_a_delivery_without_a_key_is_dead_lettered_as_missing_key(make_box: BoxFactory) -> None:
    box = make_box(KEYED)
    refused = box.ingest("hooks", Delivery(b"payload"))
    assert (str(refused.verdict), refused.reason, refused.may_ack) == (
        "rejected",
        "missing_key",
        True,
    )
    [letter] = box.dead_letters("hooks")
    assert letter.reason == "missing_key" and letter.head == b"payload"
    # The refusal left no dedup state: the keyed resend is accepted.
    assert str(box.ingest("hooks", Delivery(b"payload", key="k")).verdict) == "accepted"


def test_transport_facts_are_recorded_exactly_as_given_and_never_read(
    make_box: BoxFactory,
) -> None:
    box = make_box(KEYED)
    box.ingest("hooks", Delivery(b"x", key="k1", device_time="yesterday", delivery_id=" d 1 "))
    record = box.record("hooks", "k1")
    assert record is not None
    assert (record.device_time, record.delivery_id) == ("yesterday", " d 1 ")
