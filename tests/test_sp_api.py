"""sp-api-listing: real SP-API envelopes to seed 002's normalized event, rule by rule.

The fixtures (tests/fixtures/sp_api) are synthetic notifications shaped after Amazon's
published schemas in amzn/selling-partner-api-models (schemas/notifications).
"""

from __future__ import annotations

import copy
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import BoxFactory
from oncebox import ConfigError, Delivery, InboxSpec
from oncebox.engine.reconciler import Outcome, ReadResult, WorkKey
from oncebox.formats import Invalid, JsonEventCodec, SpApiListingCodec, get_codec, identify

FIXTURES = Path(__file__).parent / "fixtures" / "sp_api"
APP = "amzn1.sellerapps.app.5f0c2d4e-8b1a-4c3e-9d7f-2a6b8e0c4f19"
STATUS_SUB = "d3b07384-5c2a-4f1e-8a9b-3c4d5e6f7a80"
ISSUES_SUB = "7e2f9a41-0c8d-4b6e-a35f-9d1c7b2e4a66"
SETTINGS = {"expected_application_id": APP, "expected_subscription_id": [STATUS_SUB, ISSUES_SUB]}
SPEC = InboxSpec("amazon", codec="sp-api-listing", apply="generation", settings=SETTINGS)
CODEC: SpApiListingCodec = get_codec("sp-api-listing").configure(SETTINGS, None)  # type: ignore[attr-defined]


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text("utf-8"))  # type: ignore[no-any-return]


def body(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode()


def refusal(message: dict[str, Any] | bytes) -> Invalid:
    data = message if isinstance(message, bytes) else body(message)
    with pytest.raises(Invalid) as caught:
        CODEC.decode(Delivery(data))
    return caught.value


STATUS = fixture("status_change.sqs.json")
ISSUES = fixture("issues_change.sqs.json")
BRIDGED = fixture("status_change.eventbridge.json")


def test_a_status_notification_becomes_the_normalized_event() -> None:
    decoded = CODEC.decode(Delivery(body(STATUS)))
    event = json.loads(decoded.content)
    assert event == {
        "schema_version": 1,
        "source": APP,
        "subscription": STATUS_SUB,
        "notification_id": "0b6f9c3e-7d2a-4e51-9a8c-1f4b2d6e8a37",
        "seller_id": "A2SYNTHSELLER7",
        "sku": "SYN-TEE-0042-BLK-M",
        "marketplace_id": "ATVPDKIKX0DER",
        "notification_type": "listing_status_changed",
        "event_time": "2025-03-14T09:26:53Z",
        "payload": {
            "NotificationVersion": "1.0",
            "PayloadVersion": "1.0",
            "EventTime": "2025-03-14T09:26:53.589Z",
            "Payload": STATUS["Payload"],
        },
    }
    # Exactly a json-event: that codec reads the content to the same identity and witness.
    again = JsonEventCodec().decode(Delivery(decoded.content))
    assert identify(JsonEventCodec(), again) == identify(CODEC, decoded)
    assert decoded.fields["seller_id"] == "A2SYNTHSELLER7"


def test_an_issues_notification_of_either_payload_version() -> None:
    event = json.loads(CODEC.decode(Delivery(body(ISSUES))).content)
    assert (event["notification_type"], event["marketplace_id"]) == (
        "listing_issues_changed",
        "A1PA6795UKMFR9",
    )
    old = copy.deepcopy(ISSUES)
    old["PayloadVersion"] = "1.0"
    assert refusal(old).reason == "bad_payload"  # 1.0 enumerates SEARCH_SUPPRESSED only
    old["Payload"]["EnforcementActions"] = ["SEARCH_SUPPRESSED"]
    assert CODEC.decode(Delivery(body(old))).key


def test_eventbridge_detail_is_the_same_notification_and_its_envelope_is_transport() -> None:
    direct = CODEC.decode(Delivery(body(STATUS)))
    bridged = CODEC.decode(Delivery(body(BRIDGED)))
    assert (bridged.key, bridged.content) == (direct.key, direct.content)
    redelivered = {
        **BRIDGED,
        "id": "2b9e0c1d-0000-4000-8000-000000000001",
        "time": "2025-03-15T00:00:00Z",
    }
    assert CODEC.decode(Delivery(body(redelivered))).content == direct.content
    assert refusal({**BRIDGED, "source": "aws.partner/example.com/app"}).reason == "bad_envelope"
    assert refusal({**BRIDGED, "detail-type": ISSUES["NotificationType"]}).reason == "bad_envelope"


def changed(message: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy with one member set (or deleted, for ``...``)."""
    copied = copy.deepcopy(message)
    *parents, last = path.split(".")
    target = copied
    for name in parents:
        target = target[name]
    if value is ...:
        del target[last]
    else:
        target[last] = value
    return copied


@pytest.mark.parametrize(
    ("path", "value", "reason"),
    [
        ("Payload.MarketplaceId", ..., "missing_scope"),  # optional in the schema: never guessed
        ("Payload.MarketplaceId", "", "missing_scope"),
        ("Payload.SellerId", ..., "missing_scope"),
        ("Payload.Sku", None, "missing_scope"),
        ("Payload.Sku", 42, "bad_payload"),
        ("Payload.Sku", " SYN-TEE ", "bad_field"),  # json-event's string rules still hold
        ("Payload.Status", ["BUYABLE", "BUYABLE"], "bad_payload"),
        ("Payload.Status", ["SHINY"], "bad_payload"),
        ("Payload.Status", ..., "bad_payload"),
        ("Payload.CreatedDate", "yesterday", "bad_payload"),
        ("Payload", [], "bad_payload"),
        ("NotificationMetadata.ApplicationId", "amzn1.sellerapps.app.other", "source_mismatch"),
        ("NotificationMetadata.SubscriptionId", "f00d", "subscription_mismatch"),
        ("NotificationMetadata.SubscriptionId", 7, "subscription_mismatch"),
        ("NotificationMetadata.PublishTime", "soon", "bad_envelope"),
        ("NotificationMetadata.NotificationId", ..., "missing_field"),
        ("NotificationMetadata.NotificationId", "", "bad_field"),
        ("NotificationMetadata.ReceiptHandle", "AQEB...", "unknown_field"),
        ("ApproximateReceiveCount", "2", "unknown_field"),
        ("EventTime", "2025-03-14 09:26:53", "bad_event_time"),
        ("EventTime", "2025-02-30T09:26:53Z", "bad_event_time"),
        ("NotificationVersion", "2.0", "unknown_notification_version"),
        ("PayloadVersion", "2023-12-13", "unknown_payload_version"),
        ("NotificationType", "LISTINGS_ITEM_STATUS_CHANGED", "unknown_notification_type"),
        ("NotificationType", {"x": 1}, "unknown_notification_type"),
    ],
)
def test_each_rule_refuses_with_its_reason(path: str, value: Any, reason: str) -> None:
    assert refusal(changed(STATUS, path, value)).reason == reason


def test_unknown_types_and_versions_are_named() -> None:
    offer = {"notificationVersion": "1.0", "notificationType": "ANY_OFFER_CHANGED", "payload": {}}
    assert "'ANY_OFFER_CHANGED'" in refusal(offer).detail
    assert "'9.9'" in refusal(changed(STATUS, "PayloadVersion", "9.9")).detail
    assert refusal(b"[1]").reason == "bad_envelope"
    assert refusal(
        b'{"NotificationType": "LISTINGS_ITEM_STATUS_CHANGE", "NotificationType": 1}'
    ).reason == ("duplicate_member")


def test_event_time_offsets_are_normalized_to_utc_seconds() -> None:
    shifted = changed(STATUS, "EventTime", "2025-03-14T11:26:53.999+02:00")
    event = json.loads(CODEC.decode(Delivery(body(shifted))).content)
    assert event["event_time"] == "2025-03-14T09:26:53Z"
    assert event["payload"]["EventTime"] == "2025-03-14T11:26:53.999+02:00"


@settings(max_examples=40, deadline=None)
@given(
    publish=st.datetimes(datetime(2000, 1, 1), datetime(2100, 1, 1)).map(
        lambda t: t.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    ),
    spaces=st.sampled_from([None, 1, 4]),
)
def test_publish_time_and_spelling_never_change_the_event(publish: str, spaces: int | None) -> None:
    again = changed(STATUS, "NotificationMetadata.PublishTime", publish)
    text = json.dumps(dict(reversed(list(again.items()))), indent=spaces).encode()
    assert CODEC.decode(Delivery(text)).content == CODEC.decode(Delivery(body(STATUS))).content


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({}, "unknown setting|needs expected_application_id"),
        ({"expected_application_id": APP}, "needs expected_subscription_id"),
        ({"expected_application_id": APP, "expected_subscription_id": []}, "subscription id"),
        (
            {"expected_application_id": "", "expected_subscription_id": "x"},
            "expected_application_id",
        ),
        ({**SETTINGS, "identity": ["/id"]}, "unknown setting"),
    ],
)
def test_configuration_is_checked(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        InboxSpec("amazon", codec="sp-api-listing", settings=settings).check()


def test_a_webhook_cannot_sign_for_an_sqs_codec() -> None:
    spec = InboxSpec(
        "amazon",
        codec="sp-api-listing",
        settings=SETTINGS,
        webhook={"scheme": "github", "secret": "x"},
    )
    with pytest.raises(ConfigError, match="unsigned"):
        spec.check()


# -- stored, on every backend: redelivery, conflict, generation, reconciler -----------------------
def test_redeliveries_are_duplicates_and_another_payload_a_conflict(make_box: BoxFactory) -> None:
    box = make_box([SPEC])
    first = box.ingest("amazon", Delivery(body(STATUS), delivery_id="sqs-msg-1"))
    # SQS redelivers under a new message id; EventBridge wraps the same notification.
    again = box.ingest("amazon", Delivery(body(STATUS), delivery_id="sqs-msg-2"))
    bridged = box.ingest("amazon", Delivery(body(BRIDGED), delivery_id="sqs-msg-3"))
    other = box.ingest("amazon", body(changed(STATUS, "Payload.Status", ["DISCOVERABLE"])))
    assert [str(d.verdict) for d in (first, again, bridged, other)] == [
        "accepted",
        "duplicate",
        "duplicate",
        "conflict",
    ]
    assert first.identity == json.dumps(
        [APP, STATUS_SUB, "0b6f9c3e-7d2a-4e51-9a8c-1f4b2d6e8a37"], separators=(",", ":")
    )
    lost = box.ingest("amazon", body(changed(STATUS, "Payload.MarketplaceId", ...)))
    assert (str(lost.verdict), lost.reason, lost.may_ack) == ("rejected", "missing_scope", True)


def test_generation_and_the_reconciler_work_unchanged(make_box: BoxFactory) -> None:
    box = make_box([SPEC])
    issues_same_key = changed(
        changed(ISSUES, "Payload.MarketplaceId", "ATVPDKIKX0DER"),
        "NotificationMetadata.NotificationId",
        "5d8e2b7a-41c6-4f03-b9e2-7a0c3d5f1e84",
    )
    for message in (STATUS, issues_same_key, ISSUES):
        assert str(box.ingest("amazon", body(message)).verdict) == "accepted"
    key = WorkKey("A2SYNTHSELLER7", "SYN-TEE-0042-BLK-M", "ATVPDKIKX0DER")
    by_key = {tuple(w.key): w for w in box.work_keys("amazon")}
    assert by_key[tuple(key)].generation == 2 and len(by_key) == 2
    recon = box.reconciler("amazon", lambda k: ReadResult(k, {"sku": k.sku, "status": "ok"}))
    assert [recon.refresh_once(), recon.refresh_once(), recon.refresh_once()] == [
        Outcome.APPLIED,
        Outcome.APPLIED,
        Outcome.IDLE,
    ]
    assert all(not w.dirty for w in box.work_keys("amazon"))
