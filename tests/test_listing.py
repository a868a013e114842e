"""Seed 002's ingest cases, each its own test, on every backend: the listing inbox."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import BoxFactory
from helpers import event, event_body
from oncebox import ApplyError, Change, InboxSpec, Oncebox
from oncebox.engine.steps.generation import GENERATION
from oncebox.store import Tx

PRIMARY = ("SELLER-A", "SKU-1", "ATVPDKIKX0DER")


def generations(box: Oncebox) -> dict[tuple[str, str, str], tuple[int, int]]:
    return {
        (k.seller_id, k.sku, k.marketplace_id): (k.generation, k.applied_generation)
        for k in box.work_keys("listing")
    }


def test_new_event_is_accepted_and_bumps_its_work_key(box: Oncebox) -> None:
    decision = box.ingest("listing", event_body("n-1"))
    assert str(decision.verdict) == "accepted" and decision.may_ack
    assert decision.identity == '["listings-feed","sub-main","n-1"]'
    assert generations(box) == {PRIMARY: (1, 0)}


def test_redelivery_is_a_duplicate_even_after_work_is_clean(box: Oncebox) -> None:
    box.ingest("listing", event_body("n-1"))
    # Mark the key clean as a completed refresh would (the reconciler is a later issue).
    with box.store.transaction() as tx:
        tx.execute("UPDATE work_keys SET applied_generation = generation")
    decision = box.ingest("listing", event_body("n-1"))
    assert str(decision.verdict) == "duplicate"
    assert generations(box) == {PRIMARY: (1, 1)}, "a duplicate must not dirty clean work"


def test_member_order_and_whitespace_do_not_make_a_new_event(box: Oncebox) -> None:
    box.ingest("listing", event_body("n-1"))
    reordered = json.dumps(dict(reversed(list(event("n-1").items()))), indent=3).encode()
    assert str(box.ingest("listing", reordered).verdict) == "duplicate"


@pytest.mark.parametrize("field", ["source", "subscription"])
def test_identity_namespaces_keep_equal_ids_apart(box: Oncebox, field: str) -> None:
    box.ingest("listing", event_body("n-1"))
    other = box.ingest("listing", json.dumps(event("n-1", **{field: "other"})).encode())
    assert str(other.verdict) == "accepted"
    assert generations(box)[PRIMARY] == (2, 0)


@pytest.mark.parametrize(
    "change",
    [
        {"payload": {"status": "INACTIVE", "issues": []}},
        {"sku": "SKU-OTHER"},
        {"notification_type": "listing_issues_changed"},
        {"event_time": "2026-11-01T10:00:01Z"},
        {"payload": {"status": "ACTIVE", "issues": [], "price": 1.0}},
    ],
    ids=["payload", "work-key", "type", "time", "extra-payload"],
)
def test_conflicting_content_under_one_identity_is_quarantined(
    box: Oncebox, change: dict[str, Any]
) -> None:
    first = box.ingest("listing", event_body("n-1"))
    decision = box.ingest("listing", json.dumps(event("n-1", **change)).encode())
    assert str(decision.verdict) == "conflict"
    assert decision.record_id == first.record_id
    record = box.record("listing", '["listings-feed","sub-main","n-1"]')
    assert record is not None and record.witness.hex() == first.witness
    assert generations(box) == {PRIMARY: (1, 0)}, "the original's work must stay intact"
    assert len(box.quarantined("listing")) == 1


def test_number_spelling_is_content(box: Oncebox) -> None:
    box.ingest("listing", event_body("n-1", payload={"price": 1}))
    spelled = event_body("n-1").replace(b'"status": "ACTIVE", "issues": []', b'"price": 1.0')
    assert str(box.ingest("listing", spelled).verdict) == "conflict"


def test_older_event_still_bumps_the_generation(box: Oncebox) -> None:
    box.ingest("listing", event_body("n-1", event_time="2026-11-01T10:00:00Z"))
    older = box.ingest("listing", event_body("n-2", event_time="2026-10-01T10:00:00Z"))
    assert str(older.verdict) == "accepted"
    assert generations(box)[PRIMARY] == (2, 0)


def test_independent_keys_stay_independent(box: Oncebox) -> None:
    box.ingest("listing", event_body("n-1"))
    box.ingest("listing", event_body("n-2", seller_id="SELLER-B"))
    box.ingest("listing", event_body("n-3", sku="SKU-2"))
    box.ingest("listing", event_body("n-4", marketplace_id="A1F83G8C2ARO7P"))
    assert set(generations(box).values()) == {(1, 0)}
    assert len(generations(box)) == 4


def test_failing_apply_step_rolls_back_record_and_work_together(make_box: BoxFactory) -> None:
    def bump_then_fail(tx: Tx, change: Change) -> None:
        GENERATION.apply(tx, [change])
        raise RuntimeError("work store aborted")

    failing = make_box([InboxSpec("listing", codec="json-event", apply=bump_then_fail)])
    with pytest.raises(ApplyError, match="work store aborted"):
        failing.ingest("listing", event_body("n-1"))
    assert failing.record("listing", '["listings-feed","sub-main","n-1"]') is None
    assert generations(failing) == {}
    assert failing.stats("listing")["verdicts"] == {}
    healthy = make_box([InboxSpec("listing", codec="json-event", apply="generation")])
    assert str(healthy.ingest("listing", event_body("n-1")).verdict) == "accepted"
    assert generations(healthy) == {PRIMARY: (1, 0)}


STRICT_REJECTIONS = {
    "duplicate_member": b'{"schema_version": 1, "schema_version": 1}',
    "invalid_unicode": event_body("n-\\ud800").replace(b"\\\\ud800", b"\\ud800"),
    "non_finite_number": event_body("n-1").replace(b'"issues": []', b'"issues": NaN'),
    "too_deep": event_body("n-1").replace(b'"issues": []', b'"issues": ' + b"[" * 20 + b"]" * 20),
    "too_large": event_body("n-1").replace(b'"issues": []', b'"issues": "' + b"x" * 65536 + b'"'),
    "unknown_field": json.dumps({**event("n-1"), "receipt_handle": "abc"}).encode(),
    "missing_field": json.dumps({k: v for k, v in event("n-1").items() if k != "sku"}).encode(),
    "bad_schema_version": json.dumps(event("n-1", schema_version=True)).encode(),
    "bad_field": json.dumps(event(" n-1")).encode(),
    "bad_notification_type": json.dumps(event("n-1", notification_type="x")).encode(),
    "bad_event_time": json.dumps(event("n-1", event_time="2026-02-30T00:00:00Z")).encode(),
    "bad_payload": json.dumps(event("n-1", payload=[])).encode(),
    "bad_json": b'{"schema_version": 1,',
}


@pytest.mark.parametrize("reason", sorted(STRICT_REJECTIONS))
def test_strict_input_is_rejected_and_dead_lettered(box: Oncebox, reason: str) -> None:
    body = STRICT_REJECTIONS[reason]
    decision = box.ingest("listing", body)
    assert (str(decision.verdict), decision.reason) == ("rejected", reason)
    assert decision.may_ack, "a dead-lettered delivery is kept, so it may be acked"
    assert generations(box) == {}
    assert box.stats("listing")["records"] == 0
    [letter] = box.dead_letters("listing")
    assert letter.reason == reason and letter.length == len(body)
    assert letter.head == body[:65536]
