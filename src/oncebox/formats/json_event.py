"""``json-event``: the strict normalized listing event (docs/codecs.md#json-event).

Identity is the tuple (source, subscription, notification_id); the witness covers the
whole canonical event, so a different payload, work key, type or event time under the
same identity is a conflict. Transport facts (receipt handles, receive times, attempt
counters) do not belong in the event: they would change a repeated notification.
"""

from __future__ import annotations

import re
from datetime import datetime
from json.encoder import encode_basestring
from typing import Any

from oncebox.formats.canonical import canonical_read_text, kept_every_member, quick_canonical_text
from oncebox.formats.codec import Decoded, Delivery, IdentityMode, decoded_of
from oncebox.formats.invalid import Invalid
from oncebox.formats.strictjson import JsonNumber, loads, loads_utf8, quick_read

MAX_BYTES = 65_536
MAX_DEPTH = 20
IDENTITY_FIELDS = ("source", "subscription", "notification_id")
WORK_KEY_FIELDS = ("seller_id", "sku", "marketplace_id")
NOTIFICATION_TYPES = frozenset({"listing_status_changed", "listing_issues_changed"})
FIELDS = frozenset(
    {
        "schema_version",
        *IDENTITY_FIELDS,
        *WORK_KEY_FIELDS,
        "notification_type",
        "event_time",
        "payload",
    }
)
STRING_FIELDS = IDENTITY_FIELDS + WORK_KEY_FIELDS
_ONE = JsonNumber("1")
# ASCII digits only: a str pattern's \d would also take other scripts' digits, which
# strptime then reads as numbers, so two spellings of one instant would both pass.
_EVENT_TIME = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})Z")
_CONTROL = re.compile(r"[\x00-\x1f]")


def bounded_string(value: Any, name: str) -> str:
    """``value`` if it is a string a work key or a ledger can hold as text and index:
    1 to 256 characters, no surrounding whitespace, no control characters; else
    ``bad_field`` naming ``name``."""
    # The usual string, accepted at once (apply steps check every delivery's fields):
    # a printable one has no control character and no whitespace but the space.
    if (
        type(value) is str
        and 0 < len(value) <= 256
        and value.isprintable()
        and value[0] != " "
        and value[-1] != " "
    ):
        return value
    return _bounded_string_by_rule(value, name)


def _bounded_string_by_rule(value: Any, name: str) -> str:
    """:func:`bounded_string`, each rule in turn, a refusal with its reason."""
    if not isinstance(value, str) or isinstance(value, JsonNumber):
        raise Invalid("bad_field", f"{name} must be a string")
    if not 1 <= len(value) <= 256:
        raise Invalid("bad_field", f"{name} must have 1 to 256 characters")
    if value != value.strip():
        raise Invalid("bad_field", f"{name} has surrounding whitespace")
    if _CONTROL.search(value):
        raise Invalid("bad_field", f"{name} holds a control character")
    return value


def _plain_string(value: Any) -> bool:
    """Whether :func:`bounded_string` surely accepts ``value``: the usual case, checked
    in one expression; anything else takes the rule-by-rule path for its reason."""
    return (
        type(value) is str
        and 0 < len(value) <= 256
        and not value[0].isspace()  # as ``value == value.strip()`` for a non-empty string
        and not value[-1].isspace()
        # A printable string holds no control character; only others are searched.
        and (value.isprintable() or _CONTROL.search(value) is None)
    )


def _event_time(value: Any) -> str:
    if not isinstance(value, str) or isinstance(value, JsonNumber):
        raise Invalid("bad_event_time", "event_time must be a string")
    match = _EVENT_TIME.fullmatch(value)
    if not match:
        raise Invalid("bad_event_time", "event_time must be YYYY-MM-DDTHH:MM:SSZ")
    try:
        year, month, day, hour, minute, second = map(int, match.groups())
        datetime(year, month, day, hour, minute, second)
    except ValueError:
        raise Invalid("bad_event_time", f"{value} is not a real date and time") from None
    return value


def validate_event(event: Any) -> dict[str, Any]:
    """Check a parsed event against every field rule; return the fields apply steps use."""
    fields = _plain_event(event)
    return fields if fields is not None else _validate_event(event)


_FROM_ISO = datetime.fromisoformat


def _plain_event(event: Any) -> dict[str, Any] | None:
    """:func:`_validate_event`'s fields for an event that surely passes every rule (the
    usual one), checked in line; None for any other, which the rule-by-rule path refuses
    with its reason (or accepts)."""
    plain = _plain_members(event, _SCHEMA_ONE, escaped=True)
    return None if plain is None else plain[0]


# How the schema version 1 reads: spelled by the strict reader, an int by the quick one.
_SCHEMA_ONE = JsonNumber("1")


def _plain_members(
    event: Any, one: str | int, *, escaped: bool
) -> tuple[dict[str, str], dict[str, Any], str, str, bool] | None:
    """The fields and the payload of an event that surely passes every rule, whose
    schema version reads as ``one``; its members before the payload and after the
    schema version, each string written as it stands (:func:`_head_and_tail`), and
    whether they are ASCII; None for any other event. ``escaped``: its strings may hold
    escapes (a control character among them)."""
    if type(event) is not dict or len(event) != len(FIELDS):
        return None
    try:  # ten members, each of them one of the ten names: exactly the fields
        source = event["source"]
        subscription = event["subscription"]
        notification_id = event["notification_id"]
        seller_id = event["seller_id"]
        sku = event["sku"]
        marketplace_id = event["marketplace_id"]
        version = event["schema_version"]
        kind = event["notification_type"]
        time = event["event_time"]
        payload = event["payload"]
    except KeyError:
        return None
    if type(version) is not type(one) or version != one or type(payload) is not dict:
        return None
    # Eight plain strings (the type first: an object or array is unhashable and must not
    # reach the set lookup), a known notification type, six of them not empty.
    if not (type(source) is type(subscription) is type(notification_id) is str
            and type(seller_id) is type(sku) is type(marketplace_id) is type(kind)
            is type(time) is str) or kind not in NOTIFICATION_TYPES:  # fmt: skip
        return None
    if not (source and subscription and notification_id and seller_id and sku
            and marketplace_id):  # fmt: skip
        return None
    # YYYY-MM-DDTHH:MM:SSZ: its six separators every third character from the fifth,
    # and fromisoformat, which reads each other character as an ASCII digit and refuses
    # what datetime() refuses, but for an hour of 24, which newer Pythons take for the
    # next day's midnight ("T24" can only be the hour, the separators in place).
    if len(time) != 20 or time[4::3] != "--T::Z" or not time.isascii() or "T24" in time:
        return None
    try:
        _FROM_ISO(time)
    except ValueError:
        return None
    # (_head_and_tail, in line)
    head = (f'{{"event_time":"{time}","marketplace_id":"{marketplace_id}"'
            f',"notification_id":"{notification_id}","notification_type":"{kind}"')  # fmt: skip
    tail = (f'"seller_id":"{seller_id}","sku":"{sku}","source":"{source}"'
            f',"subscription":"{subscription}"}}')  # fmt: skip
    # The six strings at once, in the members that hold them: at most 256 characters
    # together, without a space (so no whitespace at all) and printable (so no control
    # character). Read without escapes, they hold no control character: in ASCII only
    # DEL is not printable then.
    if len(head) + len(tail) > _WRITTEN_MAX or " " in head or " " in tail:
        return None
    ascii_only = head.isascii() and tail.isascii()
    if not (
        (ascii_only and not escaped and "\x7f" not in head and "\x7f" not in tail)
        or (head.isprintable() and tail.isprintable())
    ):
        return None
    fields = {"source": source, "subscription": subscription,
              "notification_id": notification_id, "seller_id": seller_id, "sku": sku,
              "marketplace_id": marketplace_id, "notification_type": kind,
              "event_time": time}  # fmt: skip
    return fields, payload, head, tail, ascii_only


def _validate_event(event: Any) -> dict[str, Any]:
    """Every rule one by one, each refusal with its reason: the general path."""
    if not isinstance(event, dict):
        raise Invalid("bad_shape", "an event must be a JSON object")
    if event.keys() != FIELDS:
        unknown = sorted(set(event) - FIELDS)
        if unknown:
            raise Invalid("unknown_field", f"unknown field(s): {', '.join(unknown)[:200]}")
        missing = sorted(FIELDS - set(event))
        raise Invalid("missing_field", f"missing field(s): {', '.join(missing)}")
    if event["schema_version"] != _ONE or not isinstance(event["schema_version"], JsonNumber):
        raise Invalid("bad_schema_version", "schema_version must be the integer 1")
    fields: dict[str, Any] = {}
    for name in STRING_FIELDS:
        value = event[name]
        fields[name] = value if _plain_string(value) else bounded_string(value, name)
    kind = event["notification_type"]
    # Type first: an object or array is unhashable and must not reach the set lookup.
    if not isinstance(kind, str) or isinstance(kind, JsonNumber) or kind not in NOTIFICATION_TYPES:
        raise Invalid(
            "bad_notification_type",
            f"notification_type must be one of {', '.join(sorted(NOTIFICATION_TYPES))}",
        )
    fields["notification_type"] = kind
    fields["event_time"] = _event_time(event["event_time"])
    if not isinstance(event["payload"], dict):
        raise Invalid("bad_payload", "payload must be a JSON object")
    return fields


def identity_key(fields: dict[str, Any]) -> str:
    """The identity tuple as one unambiguous string (a canonical JSON array)."""
    # Plain strings: each written as the standard encoder (ensure_ascii=False) writes it.
    return (
        f"[{encode_basestring(fields['source'])},{encode_basestring(fields['subscription'])},"
        f"{encode_basestring(fields['notification_id'])}]"
    )


def canonical_event(event: dict[str, Any], fields: dict[str, Any], text: str) -> bytes:
    """``canonical(event)`` for an event :func:`validate_event` accepted (``fields``),
    read from ``text``. Its members are known, so their order is too: only the payload
    goes through the general writer; every other member is a plain string (the schema
    version is the integer 1), written as that writer writes one."""
    payload = canonical_read_text(event["payload"], text)
    return (
        f'{{"event_time":{encode_basestring(fields["event_time"])}'
        f',"marketplace_id":{encode_basestring(fields["marketplace_id"])}'
        f',"notification_id":{encode_basestring(fields["notification_id"])}'
        f',"notification_type":{encode_basestring(fields["notification_type"])}'
        f',"payload":{payload},"schema_version":1'
        f',"seller_id":{encode_basestring(fields["seller_id"])}'
        f',"sku":{encode_basestring(fields["sku"])}'
        f',"source":{encode_basestring(fields["source"])}'
        f',"subscription":{encode_basestring(fields["subscription"])}}}'
    ).encode()


class JsonEventCodec:
    name = "json-event"
    identity: IdentityMode = "key"
    max_bytes = MAX_BYTES

    def decode(self, delivery: Delivery) -> Decoded:
        body = delivery.body
        if len(body) > MAX_BYTES:
            raise Invalid("too_large", f"{len(body)} bytes exceeds {MAX_BYTES}")
        try:
            text = body.decode()  # UTF-8, strict
        except UnicodeDecodeError:
            loads(body)  # refused there, with the strict reader's reason
            raise
        quick = _quick_decode(text)
        if quick is not None:
            return quick
        event = loads_utf8(text, MAX_DEPTH)
        fields = validate_event(event)
        content = canonical_event(event, fields, text)
        if len(content) > MAX_BYTES:
            raise Invalid("too_large", f"canonical form is {len(content)} bytes, over {MAX_BYTES}")
        return decoded_of((content, identity_key(fields), fields, _fields_text(fields)))


def _head_and_tail(fields: dict[str, str]) -> tuple[str, str]:
    """The members before the payload and those after the schema version, each string
    written as it stands between quotes (for one with nothing to escape, as the encoders
    write it): the canonical form's and the stored fields' alike."""
    head = (f'{{"event_time":"{fields["event_time"]}"'
            f',"marketplace_id":"{fields["marketplace_id"]}"'
            f',"notification_id":"{fields["notification_id"]}"'
            f',"notification_type":"{fields["notification_type"]}"')  # fmt: skip
    tail = (f'"seller_id":"{fields["seller_id"]}","sku":"{fields["sku"]}"'
            f',"source":"{fields["source"]}"'
            f',"subscription":"{fields["subscription"]}"}}')  # fmt: skip
    return head, tail


# The most characters :func:`_plain_members` lets the members it writes (the head and
# the tail) have: those of six strings with 256 characters together, an event time
# (20) and the shorter notification type (a longer one only makes the bound stricter,
# and sends its event to the rules).
_WRITTEN_MAX = (
    sum(map(len, _head_and_tail(dict.fromkeys(FIELDS, ""))))
    + 20
    + min(map(len, NOTIFICATION_TYPES))
    + 256
)


def _fields_text(fields: dict[str, Any]) -> str | None:
    """The stored fields' text (what the engine's ASCII-only encoder writes) where each
    value is written as it stands: printable ASCII, no quote, no backslash; else None."""
    flat = "".join(fields.values())
    if not (flat.isascii() and flat.isprintable()) or '"' in flat or "\\" in flat:
        return None
    head, tail = _head_and_tail(fields)
    return f"{head},{tail}"


def _quick_decode(text: str) -> Decoded | None:
    """:meth:`JsonEventCodec.decode` of a usual body in one pass, or None for any body
    where it could differ, which the general path reads, checks and writes instead.

    The usual body has no backslash, so each of its strings is written as it stands,
    between quotes, with nothing to escape: the members of the canonical form, the
    identity key and the stored fields are put together from the strings read, and the
    stored fields are written once, beside the canonical form they are a part of. The
    text is read without the duplicate-member hook; the canonical form, as long as the
    text without its spaces, proves that no member was dropped and no ``-0`` respelled.
    """
    read = quick_read(text)
    if read is None:
        return None
    event, spelled = read
    plain = _plain_members(event, 1, escaped=False)
    if plain is None:
        return None
    fields, payload, head, tail, ascii_only = plain
    written = quick_canonical_text(payload, spelled, text)
    # Depth: the event's is one more than its payload's, which is at most the payload's
    # count of brackets (those inside strings counted too).
    if written is None or written.count("{") + written.count("[") >= MAX_DEPTH:
        return None
    canonical_text = f'{head},"payload":{written},"schema_version":1,{tail}'
    if not kept_every_member(text, canonical_text):
        return None
    content = canonical_text.encode()
    if len(content) > MAX_BYTES:
        return None
    # The stored fields are these members as the canonical form has them, unless they
    # need escapes there (ASCII only): then the engine's encoder writes them.
    stored = f"{head},{tail}" if ascii_only else None
    key = f'["{fields["source"]}","{fields["subscription"]}","{fields["notification_id"]}"]'
    return decoded_of((content, key, fields, stored))
