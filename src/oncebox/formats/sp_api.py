"""``sp-api-listing``: a Selling Partner API listing notification, as Amazon sends it.

Seed 002's normalized event is no raw Amazon parser; it names what one must check
before it makes an event. This codec is that adapter: it takes the notification as an
SQS message body carries it, or the ``detail`` of the EventBridge event that carries
it, checks it against the published schemas of ``LISTINGS_ITEM_STATUS_CHANGE``
(payload 1.0) and ``LISTINGS_ITEM_ISSUES_CHANGE`` (payload 1.0 and 2023-12-13), and
hands on exactly the json-event it stands for, so the ``generation`` step and the
reconciler see no difference.

The rules, each a refusal with its own reason:

- the source and subscription are the inbox's configured ``expected_application_id``
  and ``expected_subscription_id`` (one per notification type, usually), and the
  envelope must name them (``source_mismatch``, ``subscription_mismatch``);
- a missing seller, SKU or marketplace is never guessed (``missing_scope``): the
  status schema leaves ``MarketplaceId`` optional, the work key cannot;
- the identity is ``NotificationId``, never a transport id (SQS MessageId, EventBridge
  id): those change on redelivery. Receipt handles, receive counts, ``PublishTime`` and
  the EventBridge envelope's own fields are transport and stay out of the event, or a
  repeated notification would read as a conflict;
- an unknown ``NotificationType`` is refused by name, and so are a
  ``NotificationVersion`` or ``PayloadVersion`` this codec was not written against, and
  envelope members the schemas do not have: a new shape is a new version to support,
  not a guess. (The status schema's enum spells the type ``..._CHANGED``; its own
  example, the notification type values and the subscriptions say ``..._CHANGE``,
  which is what is accepted.)

Trust in the envelope's application id comes from the queue or bus it was read from:
Amazon does not sign these notifications.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from oncebox.errors import ConfigError
from oncebox.formats import json_event
from oncebox.formats.canonical import canonical
from oncebox.formats.codec import Decoded, Delivery, IdentityMode, check_settings
from oncebox.formats.invalid import Invalid
from oncebox.formats.strictjson import JsonNumber, loads
from oncebox.formats.webhook_config import WebhookConfig

MAX_BYTES = 262_144  # the largest SQS message and EventBridge event
MAX_DEPTH = 20
EVENTBRIDGE_SOURCE = "aws.partner/sellingpartnerapi.amazon.com"
NOTIFICATION_VERSIONS = frozenset({"1.0"})
STATUS, ISSUES = "LISTINGS_ITEM_STATUS_CHANGE", "LISTINGS_ITEM_ISSUES_CHANGE"
# notification type -> (normalized type, payload versions written against)
TYPES: dict[str, tuple[str, frozenset[str]]] = {
    STATUS: ("listing_status_changed", frozenset({"1.0"})),
    ISSUES: ("listing_issues_changed", frozenset({"1.0", "2023-12-13"})),
}
ENVELOPE = frozenset(
    {
        "NotificationVersion",
        "NotificationType",
        "PayloadVersion",
        "EventTime",
        "Payload",
        "NotificationMetadata",
    }
)
METADATA = frozenset({"ApplicationId", "SubscriptionId", "PublishTime", "NotificationId"})
SCOPE = (("SellerId", "seller_id"), ("Sku", "sku"), ("MarketplaceId", "marketplace_id"))
STATUSES = frozenset({"BUYABLE", "DISCOVERABLE", "DELETED"})
SEVERITIES = frozenset({"NONE", "ERROR", "WARNING"})
ENFORCEMENT_1_0 = frozenset({"SEARCH_SUPPRESSED"})
SETTINGS = frozenset({"expected_application_id", "expected_subscription_id"})
_ONE = JsonNumber("1")
_DATE_TIME = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]{1,9})?"
    r"(Z|[+-][0-9]{2}:[0-9]{2})"
)


def _text(value: Any) -> bool:
    return isinstance(value, str) and not isinstance(value, JsonNumber)


def _named(value: Any) -> str:
    """A received value, safe to put in a refusal's detail."""
    return repr(value)[:80] if _text(value) else type(value).__name__


def _instant(value: Any) -> datetime | None:
    """An RFC 3339 date-time (the schemas' ``format: date-time``) in UTC, or None."""
    match = _DATE_TIME.fullmatch(value) if _text(value) else None
    if match is None:
        return None
    year, month, day, hour, minute, second = map(int, match.groups()[:6])
    zone = match.group(8)
    offset = timedelta(0)
    if zone != "Z":
        hours, minutes = int(zone[1:3]), int(zone[4:6])
        if hours > 23 or minutes > 59:
            return None
        offset = timedelta(hours=hours, minutes=minutes) * (1 if zone[0] == "+" else -1)
    try:
        local = datetime(year, month, day, hour, minute, second, tzinfo=timezone(offset))
        return local.astimezone(UTC)
    except (ValueError, OverflowError):
        return None


def _members(value: Any, known: frozenset[str], where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Invalid("bad_envelope", f"{where} must be a JSON object")
    unknown = sorted(set(value) - known)
    if unknown:
        raise Invalid("unknown_field", f"{where}: unknown member(s) {', '.join(unknown)[:200]}")
    missing = sorted(known - set(value))
    if missing:
        raise Invalid("missing_field", f"{where}: missing {', '.join(missing)}")
    return value


def _string_set(payload: dict[str, Any], name: str, allowed: frozenset[str] | None) -> None:
    """A schema array of unique strings, from its enum when it has one."""
    value = payload[name]
    if not isinstance(value, list) or not all(_text(item) for item in value):
        raise Invalid("bad_payload", f"Payload.{name} must be an array of strings")
    if len(set(value)) != len(value):
        raise Invalid("bad_payload", f"Payload.{name} repeats a value")
    strange = sorted(set(value) - allowed) if allowed is not None else []
    if strange:
        raise Invalid("bad_payload", f"Payload.{name}: unknown value(s) {', '.join(strange)[:120]}")


def _check_payload(kind: str, version: str, payload: Any) -> dict[str, str]:
    """The schema's rules for ``Payload``, then its work key, never guessed."""
    if not isinstance(payload, dict):
        raise Invalid("bad_payload", "Payload must be a JSON object")
    scope = {}
    for member, field in SCOPE:
        value = payload.get(member)
        if value is None or value == "":
            raise Invalid("missing_scope", f"Payload.{member} is missing; it is never guessed")
        if not _text(value):
            raise Invalid("bad_payload", f"Payload.{member} must be a string")
        scope[field] = value
    for optional in ("Asin", "CreatedDate"):
        if optional in payload and not _text(payload[optional]):
            raise Invalid("bad_payload", f"Payload.{optional} must be a string")
    if "CreatedDate" in payload and _instant(payload["CreatedDate"]) is None:
        raise Invalid("bad_payload", "Payload.CreatedDate is not an RFC 3339 date-time")
    required = "Status" if kind == STATUS else "Severities"
    if required not in payload:
        raise Invalid("bad_payload", f"Payload.{required} is missing")
    if kind == STATUS:
        _string_set(payload, "Status", STATUSES)
    else:
        _string_set(payload, "Severities", SEVERITIES)
        if "EnforcementActions" in payload:
            # 1.0 enumerates its one action; 2023-12-13 leaves the list open.
            actions = ENFORCEMENT_1_0 if version == "1.0" else None
            _string_set(payload, "EnforcementActions", actions)
    return scope


def _subscriptions(value: Any) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(i, str) and i for i in items):
        raise ConfigError(
            "codec sp-api-listing: expected_subscription_id must be a subscription id "
            "or a list of them (one per notification type)"
        )
    return tuple(items)


def _versions(kind: str, notification: dict[str, Any]) -> tuple[str, str]:
    """The notification and payload versions, if this codec was written against them."""
    version, payload_version = notification["NotificationVersion"], notification["PayloadVersion"]
    if not _text(version) or version not in NOTIFICATION_VERSIONS:
        raise Invalid("unknown_notification_version", f"NotificationVersion {_named(version)}")
    if not _text(payload_version) or payload_version not in TYPES[kind][1]:
        raise Invalid("unknown_payload_version", f"{kind} PayloadVersion {_named(payload_version)}")
    return version, payload_version


class SpApiListingCodec:
    """``SpApiListingCodec()`` is the registered, unconfigured codec: every inbox of it
    needs :meth:`configure` with its expected application and subscriptions."""

    name = "sp-api-listing"
    identity: IdentityMode = "key"
    max_bytes = MAX_BYTES

    def __init__(self, application_id: str = "", subscription_ids: tuple[str, ...] = ()) -> None:
        self.application_id = application_id
        self.subscription_ids = subscription_ids

    @property
    def settings(self) -> dict[str, Any]:
        return {
            "expected_application_id": self.application_id,
            "expected_subscription_id": list(self.subscription_ids),
        }

    def configure(
        self, settings: Mapping[str, Any], webhook: WebhookConfig | None
    ) -> SpApiListingCodec:
        check_settings(self.name, settings, SETTINGS)
        if webhook is not None:
            raise ConfigError("codec sp-api-listing: notifications come unsigned, from a queue")
        application = settings.get("expected_application_id")
        if not isinstance(application, str) or not application:
            raise ConfigError("codec sp-api-listing needs expected_application_id")
        if "expected_subscription_id" not in settings:
            raise ConfigError("codec sp-api-listing needs expected_subscription_id")
        return SpApiListingCodec(application, _subscriptions(settings["expected_subscription_id"]))

    def _notification(self, message: Any) -> dict[str, Any]:
        """The notification itself: the SQS body, or an EventBridge event's ``detail``."""
        if not isinstance(message, dict):
            raise Invalid("bad_envelope", "a notification must be a JSON object")
        if "detail" not in message or "NotificationType" in message:
            return message  # an SQS message body: the notification itself
        source = message.get("source")
        if not _text(source) or not f"{source}/".startswith(EVENTBRIDGE_SOURCE + "/"):
            raise Invalid("bad_envelope", f"EventBridge source {_named(source)} is not SP-API's")
        detail = message["detail"]
        if not isinstance(detail, dict) or message.get("detail-type") != detail.get(
            "NotificationType"
        ):
            raise Invalid("bad_envelope", "EventBridge detail-type must name the detail's type")
        return detail

    def _metadata(self, value: Any) -> dict[str, Any]:
        """``NotificationMetadata``, naming the application and a subscription expected."""
        meta = _members(value, METADATA, "NotificationMetadata")
        application, subscription = meta["ApplicationId"], meta["SubscriptionId"]
        # Type first: a JSON number is kept as its spelling, a str that could compare equal.
        if not _text(application) or application != self.application_id:
            raise Invalid("source_mismatch", f"ApplicationId {_named(application)} is not expected")
        if not _text(subscription) or subscription not in self.subscription_ids:
            raise Invalid(
                "subscription_mismatch", f"SubscriptionId {_named(subscription)} is not expected"
            )
        if _instant(meta["PublishTime"]) is None:
            raise Invalid("bad_envelope", "PublishTime is not an RFC 3339 date-time")
        return meta

    def event(self, message: Any) -> dict[str, Any]:
        """The normalized json-event this message stands for, or :class:`Invalid`."""
        if not self.application_id:
            raise Invalid("bad_config", "sp-api-listing inboxes need configure()")
        notification = self._notification(message)
        # Other notifications spell their members in camelCase: name their type all the same.
        kind = notification.get("NotificationType", notification.get("notificationType"))
        if not _text(kind) or kind not in TYPES:
            named = "no NotificationType" if kind is None else f"notification type {_named(kind)}"
            raise Invalid(
                "unknown_notification_type", f"{named}: not one of {', '.join(sorted(TYPES))}"
            )
        _members(notification, ENVELOPE, "notification")
        version, payload_version = _versions(kind, notification)
        meta = self._metadata(notification["NotificationMetadata"])
        scope = _check_payload(kind, payload_version, notification["Payload"])
        when = _instant(notification["EventTime"])
        if when is None:
            raise Invalid("bad_event_time", "EventTime is not an RFC 3339 date-time")
        return {
            "schema_version": _ONE,
            "source": self.application_id,
            "subscription": meta["SubscriptionId"],
            "notification_id": meta["NotificationId"],
            **scope,
            "notification_type": TYPES[kind][0],
            # Whole seconds, as json-event spells it; the exact text stays in payload.
            "event_time": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "payload": {
                "NotificationVersion": version,
                "PayloadVersion": payload_version,
                "EventTime": notification["EventTime"],
                "Payload": notification["Payload"],
            },
        }

    def decode(self, delivery: Delivery) -> Decoded:
        if len(delivery.body) > MAX_BYTES:
            raise Invalid("too_large", f"{len(delivery.body)} bytes exceeds {MAX_BYTES}")
        event = self.event(loads(delivery.body, max_depth=MAX_DEPTH))
        fields = json_event.validate_event(event)  # every rule of json-event
        content = canonical(event)
        if len(content) > json_event.MAX_BYTES:
            raise Invalid("too_large", f"the normalized event is {len(content)} bytes")
        return Decoded(content=content, key=json_event.identity_key(fields), fields=fields)
