"""Fuzz targets for reliability/fuzz.py: the JSON event codec, the H1 codec, the HMAC check,
the NDJSON line adapter in front of every codec, the configured json codec,
sp-api-listing and the webhook signature verifiers.

Why a module of its own: the same byte-level targets run under atheris (libFuzzer,
coverage-guided, in a subprocess) and under the seeded mutation fuzzer below (for when
atheris is not installed, and for the bounded run in the test suite). Each target takes
one input and returns an outcome label; anything else it raises is a crash: a codec may
refuse only with :class:`Invalid` and a documented reason, and every target also checks
an oracle on what it accepts (canonical form is a fixed point, the strict reader is never
laxer than the standard one, a frame's trailer really is its cksum, the signature check
accepts exactly the fresh, matching signatures, a line is never lost to the adapter).
The newer targets check against a model of their own: the document as the standard
library reads it, with the JSON Pointers resolved by hand, and each webhook scheme as
its documentation defines it, with the HMAC recomputed here.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import random
import re
import signal
import string
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oncebox.engine.tokens import SIGNATURE_WINDOW, SignatureRefused, check_signature, sign
from oncebox.formats import (
    Delivery,
    Invalid,
    JsonEventCodec,
    KeyedCodec,
    Unreadable,
    Unverified,
    UssdH1Codec,
    Verified,
    WebhookConfig,
    get_codec,
    json_event,
    parse_webhook,
)
from oncebox.formats.canonical import canonical
from oncebox.formats.cksum import cksum
from oncebox.formats.strictjson import loads
from oncebox.formats.ussd_h1 import MAX_BYTES as H1_MAX_BYTES
from oncebox.formats.ussd_h1 import make_frame
from oncebox.surfaces.lines import delivery_from_line

JSON_EVENT = JsonEventCodec()
USSD = UssdH1Codec()
HERE = Path(__file__).resolve().parent
CORPUS = HERE.parent.parent / "shared" / "testdata" / "JSONTestSuite" / "test_parsing"
# An input that takes more than this of CPU time is a hang. CPU time, not the wall
# clock: on a busy machine (a test run on several workers) a quick input can wait for
# the CPU for seconds, and that is not the input's doing.
HANG_SECONDS = 1.0


class _Absent:
    """What a pointer names in the oracles' model when there is no such member."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()

# The documented rejection reasons (README "Rules, in brief"), plus bad_shape, which the
# codec raises for a JSON text that is not an object.
JSON_REASONS = frozenset(
    {
        "unknown_field",
        "missing_field",
        "bad_schema_version",
        "bad_field",
        "bad_notification_type",
        "bad_event_time",
        "bad_payload",
        "duplicate_member",
        "invalid_unicode",
        "non_finite_number",
        "too_deep",
        "too_large",
        "bad_json",
        "bad_shape",
    }
)
H1_REASONS = frozenset(
    {"bad_format", "bad_checksum", "too_large", "missing_key", "bad_key", "key_mismatch"}
)


class OracleFailure(AssertionError):
    """A target accepted or refused something it must not have."""


def _oracle(ok: bool, why: str) -> None:
    if not ok:
        raise OracleFailure(why)


# -- the JSON event codec -------------------------------------------------------------------
def _stdlib_accepts(data: bytes) -> bool:
    """Whether ``data`` is JSON to the standard library's grammar (NaN and friends refused;
    numbers kept as text, so Python's 4,300-digit int limit is not mistaken for grammar)."""

    def refuse(name: str) -> Any:
        raise ValueError(name)

    try:
        json.loads(data.decode("utf-8"), parse_constant=refuse, parse_int=str, parse_float=str)
    except (ValueError, RecursionError):
        return False
    return True


def json_target(data: bytes) -> str:
    """The strict reader and the json-event codec on one input."""
    try:
        value = loads(data, max_depth=64)
    except Invalid as exc:
        _oracle(exc.reason in JSON_REASONS, f"strict reader refused with {exc.reason!r}")
    else:
        # Never laxer than the standard library, and canonical form is a fixed point.
        _oracle(_stdlib_accepts(data), "the strict reader took what json.loads refuses")
        once = canonical(value)
        _oracle(canonical(loads(once, max_depth=64)) == once, "canonical form moved")
    try:
        decoded = JSON_EVENT.decode(Delivery(body=data))
    except Invalid as exc:
        _oracle(exc.reason in JSON_REASONS, f"json-event refused with {exc.reason!r}")
        _oracle(str(exc).startswith(exc.reason), "Invalid's message does not lead with its reason")
        return f"invalid:{exc.reason}"
    again = JSON_EVENT.decode(Delivery(body=decoded.content))
    _oracle(again == decoded, "decoding the canonical content gave something else")
    _oracle(len(decoded.content) <= len(data), "canonical content longer than its source")
    return "accepted"


# -- the H1 codec ------------------------------------------------------------------------------
def h1_target(data: bytes) -> str:
    """``frame_id`` line, newline, frame: the gateway's two facts."""
    raw_key, newline, frame = data.partition(b"\n")
    if not newline:
        raw_key, frame = b"rec1-1", data
    key = raw_key.decode("latin-1")  # an HTTP header value, as the service reads it
    try:
        decoded = USSD.decode(Delivery(body=frame, key=key))
    except Invalid as exc:
        _oracle(exc.reason in H1_REASONS, f"ussd-h1 refused with {exc.reason!r}")
        return f"invalid:{exc.reason}"
    body = frame[: frame.rindex(b"|#")]
    _oracle(decoded.content == frame and decoded.key == key, "content or key changed")
    _oracle(len(frame) <= H1_MAX_BYTES, "a frame over the bound passed")
    _oracle(int(frame[-2:], 16) == cksum(body) % 256, "a trailer that is not the cksum passed")
    tag, seq, site, need, headcount, pri = body.split(b"|")
    f = decoded.fields
    spelled = (tag, int(seq), site.decode(), need.decode(), int(headcount), int(pri))
    _oracle(
        spelled == (b"H1", f["seq"], f["site"], f["need"], f["headcount"], f["pri"]),
        "the fields do not spell the frame",
    )
    return "accepted"


# -- the HMAC signature check --------------------------------------------------------------------
KEY = "fuzzing-key-not-a-secret"
NOW = 1_800_000_000.0


def signature_target(data: bytes) -> str:
    """A mode byte, then timestamp, signature, method, target, Oncebox-Key and body on lines.

    Mode bits: 1 a timestamp near the server's (within or past the window), 2 the correct
    signature, 4 the correct signature with one character changed, 8/16 no timestamp/no
    signature header, 32 the correct signature with the signature line's bytes after it
    (a respelling: trailing whitespace, ``\\xa0``, a second value), 64 an Oncebox-Key
    header. Header values and the target are the raw bytes the service would see.
    """
    mode = data[0] if data else 0
    parts = data[1:].split(b"\n", 5)
    parts += [b""] * (6 - len(parts))
    ts_raw, sig_raw, method_raw, target_raw, key_raw, body = parts
    timestamp: bytes | None = ts_raw
    if mode & 1:
        offset = int.from_bytes(ts_raw[:2].ljust(2, b"\0"), "big", signed=True) // 64
        timestamp = str(int(NOW) + offset).encode()  # -512..511 s: either side of the window
    method = method_raw.decode("latin-1") or "POST"
    target = target_raw or b"/v1/inboxes/ussd/deliveries"
    facts = {"oncebox-key": key_raw} if mode & 64 else {}
    good = sign(KEY, (timestamp or b"").decode("latin-1"), method, target.decode("latin-1"),
                body, facts).encode()  # fmt: skip
    signature: bytes | None = sig_raw
    if mode & 2:
        signature = good
    elif mode & 4:
        at = 7 + (sig_raw[0] if sig_raw else 0) % (len(good) - 7)
        signature = good[:at] + (b"0" if good[at : at + 1] != b"0" else b"1") + good[at + 1 :]
    elif mode & 32:
        signature = good + sig_raw
    headers = [(b"oncebox-key", key_raw)] if mode & 64 else []
    if timestamp is not None and not mode & 8:
        headers.append((b"oncebox-timestamp", timestamp))
    if signature is not None and not mode & 16:
        headers.append((b"oncebox-signature", signature))
    try:
        digest: bytes | None = check_signature(KEY, headers, method, target, body, NOW)
        refused = ""
    except SignatureRefused as exc:
        digest, refused = None, str(exc)
    fresh = (
        not mode & 8
        and timestamp is not None
        and re.fullmatch(rb"[0-9]{1,12}", timestamp) is not None
        and abs(NOW - int(timestamp)) <= SIGNATURE_WINDOW
    )
    matches = not mode & 16 and signature == good  # byte for byte: one spelling only
    _oracle(
        (digest is not None) == (fresh and matches),
        f"check_signature said {refused or 'good'!r} for fresh={fresh} matching={matches}",
    )
    if digest is not None:
        _oracle(digest == bytes.fromhex(good[7:].decode()), "the decoded signature is not it")
        return "accepted"
    return "refused:" + (
        "missing"
        if "need" in refused
        else "timestamp"
        if "Timestamp" in refused
        else "spelling"
        if "lowercase hex" in refused
        else "mismatch"
    )


# -- a shared model of JSON, for the oracles ---------------------------------------------------
class Num(str):
    """A JSON number in the oracles' model, kept as spelled (never equal to a string)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return type(other) is Num and str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return str.__hash__(self)


class Obj(list):  # type: ignore[type-arg]
    """A JSON object in the model: its members in the order they came (for respelling)."""

    def as_dict(self) -> dict[str, Any]:
        return dict(self)


def model(text: bytes | str) -> Any:
    """``text`` read by the standard library into the oracles' model: objects keep their
    member order, numbers their spelling. Only for texts the strict reader accepted."""

    def refuse(name: str) -> Any:
        raise ValueError(name)

    return json.loads(text, object_pairs_hook=Obj, parse_int=Num, parse_float=Num,
                      parse_constant=refuse)  # fmt: skip


def plain_model(value: Any) -> Any:
    """The model with objects as dicts (order no longer matters), for comparison."""
    if isinstance(value, Obj):
        return {k: plain_model(v) for k, v in value}
    if isinstance(value, list):
        return [plain_model(v) for v in value]
    return value


def write_model(value: Any, rnd: random.Random | None = None, ascii_only: bool = False) -> str:
    """A JSON text of a model value; with ``rnd``, members reordered and whitespace
    sprinkled between tokens (what a sender's serializer might do)."""

    def gap() -> str:
        return "" if rnd is None else rnd.choice(["", "", " ", "\n", "\t", "\r\n  "])

    if isinstance(value, Num):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=ascii_only)
    if value is True or value is False or value is None:
        return json.dumps(value)
    if isinstance(value, Obj):
        members = list(value)
        if rnd is not None:
            rnd.shuffle(members)
        inner = ",".join(
            f"{gap()}{json.dumps(k, ensure_ascii=ascii_only)}{gap()}:{gap()}"
            f"{write_model(v, rnd, ascii_only)}{gap()}"
            for k, v in members
        )
        return "{" + inner + gap() + "}"
    return "[" + ",".join(gap() + write_model(v, rnd, ascii_only) + gap() for v in value) + "]"


def _member(value: Any, token: str) -> Any:
    """RFC 6901 evaluation of one reference token (the oracles' own, not jsonpointer.py)."""
    if isinstance(value, Obj):
        for k, v in value:
            if k == token:
                return v
        return ABSENT
    if isinstance(value, list) and re.fullmatch(r"0|[1-9][0-9]*", token):
        return value[int(token)] if int(token) < len(value) else ABSENT
    return ABSENT


def _at(value: Any, tokens: tuple[str, ...]) -> Any:
    for token in tokens:
        value = _member(value, token)
        if value is ABSENT:
            break
    return value


def _without(value: Any, tokens: tuple[str, ...]) -> Any:
    """A copy of the model without the object member ``tokens`` names (if there is one)."""
    if not tokens or not isinstance(value, Obj):
        return value
    head, rest = tokens[0], tokens[1:]
    if not rest:
        return Obj((k, v) for k, v in value if k != head)
    return Obj((k, _without(v, rest) if k == head else v) for k, v in value)


def _with(value: Obj, tokens: tuple[str, ...], new: Any) -> Obj:
    """A copy of the model with the object member ``tokens`` names set to ``new`` (its
    parent must be an object); ``ABSENT`` removes it."""
    head, rest = tokens[0], tokens[1:]
    if rest:
        inner = _at(value, (head,))
        assert isinstance(inner, Obj)
        return Obj((k, _with(inner, rest, new) if k == head else v) for k, v in value)
    kept = Obj((k, v) for k, v in value if k != head)
    if new is not ABSENT:
        kept.append((head, new))
    return kept


def _respelled(data: bytes) -> random.Random:
    """A generator seeded by the input, so a failing respelling replays."""
    return random.Random(hashlib.sha256(data).digest())


# -- the configured json codec ---------------------------------------------------------------------
# Two identity pointers, one with both escapes: "~01" must read as "~1" (not "/"), so a
# reader that unescapes in the wrong order names another member. The oracle spells the
# tokens out itself instead of parsing the pointers.
JSON_SETTINGS: dict[str, Any] = {
    "identity": ["/id", "/ref/a~01b~1c"],
    "witness_ignore": ["/attempt", "/meta/seen~1at"],
    "fields": {"site": "/site", "first": "/items/0"},
}
IDENTITY_TOKENS = (("id",), ("ref", "a~1b/c"))
IGNORED_TOKENS = (("attempt",), ("meta", "seen/at"))
FIELD_TOKENS = {"site": ("site",), "first": ("items", "0")}
JSON_CODEC: Any = get_codec("json").configure(JSON_SETTINGS, None)
# The strict reader's reasons, then the json codec's own (README "Codecs configured").
READER_REASONS = frozenset(
    {"bad_json", "duplicate_member", "invalid_unicode", "non_finite_number", "too_deep"}
)
JSON_CODEC_REASONS = READER_REASONS | {
    "too_large", "bad_shape", "missing_identity", "missing_field", "bad_field"
}  # fmt: skip
_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]*)")
INT_DIGITS = sys.get_int_max_str_digits() or 4300


def _identity_value(value: Any) -> bool:
    """What may be part of an identity: a number, a boolean or a non-empty string."""
    return isinstance(value, bool) or (isinstance(value, str) and value != "")


def _too_long(value: Any) -> bool:
    """Whether a field value holds an integer past Python's conversion limit."""
    if isinstance(value, Num):
        return bool(_INTEGER.fullmatch(value)) and len(value.lstrip("-")) > INT_DIGITS
    if isinstance(value, Obj):
        return any(_too_long(v) for _, v in value)
    if isinstance(value, list):
        return any(_too_long(v) for v in value)
    return False


def _plain_field(value: Any) -> Any:
    if isinstance(value, Num):
        return int(value) if _INTEGER.fullmatch(value) else float(value)
    if isinstance(value, Obj):
        return {k: _plain_field(v) for k, v in value}
    if isinstance(value, list):
        return [_plain_field(v) for v in value]
    return value


def _expected_json(doc: Any) -> str:
    """What the configured codec must answer for a document the strict reader took:
    ``accepted`` or the reason it must refuse with (the order the README gives)."""
    if not isinstance(doc, Obj):
        return "bad_shape"
    if not all(_identity_value(_at(doc, t)) for t in IDENTITY_TOKENS):
        return "missing_identity"
    for tokens in FIELD_TOKENS.values():  # field by field, in the order configured
        value = _at(doc, tokens)
        if value is ABSENT:
            return "missing_field"
        if (isinstance(value, str) and "\x00" in value) or _too_long(value):
            return "bad_field"
    return "accepted"


def json_codec_target(data: bytes) -> str:
    """The configured json codec on one input, against a model of the document."""
    codec = JSON_CODEC
    try:
        decoded = codec.decode(Delivery(body=data))
    except Invalid as exc:
        _oracle(exc.reason in JSON_CODEC_REASONS, f"json refused with {exc.reason!r}")
        _oracle(str(exc).startswith(exc.reason), "Invalid's message does not lead with its reason")
        refused: str | None = exc.reason
    else:
        refused = None
    # Never laxer than the strict reader json-event uses, nor than the standard grammar.
    try:
        loads(data, max_depth=json_event.MAX_DEPTH)
    except Invalid as exc:
        if len(data) <= codec.max_bytes:
            _oracle(refused == exc.reason, f"the reader said {exc.reason}, json said {refused}")
        else:
            _oracle(refused == "too_large", f"{len(data)} bytes and json said {refused}")
        return f"invalid:{refused}"
    if len(data) > codec.max_bytes:
        _oracle(refused == "too_large", f"{len(data)} bytes and json said {refused}")
        return "invalid:too_large"
    _oracle(_stdlib_accepts(data), "the json codec took what json.loads refuses")
    doc = model(data.decode("utf-8"))
    expected = _expected_json(doc)
    said = refused or "accepted"
    _oracle(said == expected, f"json said {said}, not {expected}")
    if refused is not None:
        return f"invalid:{refused}"
    assert isinstance(doc, Obj)
    # The identity: the values at the pointers, typed, in the order of the pointers.
    key = model(decoded.key)
    _oracle(
        plain_model(key) == [plain_model(_at(doc, t)) for t in IDENTITY_TOKENS],
        f"identity {decoded.key[:200]!r} is not the pointers' values",
    )
    # The witness: the document without the ignored members, and nothing else removed.
    kept = doc
    for tokens in IGNORED_TOKENS:
        kept = _without(kept, tokens)
    _oracle(plain_model(model(decoded.content)) == plain_model(kept), "content is not the document")
    fields = {name: _plain_field(_at(doc, t)) for name, t in FIELD_TOKENS.items()}
    _oracle(dict(decoded.fields) == fields, "the fields are not the values at their pointers")
    _oracle(codec.decode(Delivery(body=decoded.content)) == decoded, "content not a fixed point")
    # The same object re-serialized: members reordered, whitespace and escaping changed.
    rnd = _respelled(data)
    again = write_model(doc, rnd, ascii_only=rnd.random() < 0.5).encode()
    if len(again) <= codec.max_bytes:
        _oracle(codec.decode(Delivery(body=again)) == decoded, "a respelling moved identity")
    # Only an ignored member changed (or added, or removed): the same witness and identity.
    noise = rnd.choice([Num(str(rnd.randrange(10**6))), "x" * rnd.randrange(9), None, Obj(),
                        Obj([("n", [Num("1")])]), ABSENT])  # fmt: skip
    changed = _with(doc, IGNORED_TOKENS[0], noise)
    if isinstance(_at(doc, ("meta",)), Obj):
        changed = _with(changed, IGNORED_TOKENS[1], Num(str(rnd.randrange(10**9))))
    text = write_model(changed, rnd).encode()
    if len(text) <= codec.max_bytes:
        other = codec.decode(Delivery(body=text))
        _oracle(other.content == decoded.content, "an ignored member changed the witness")
        _oracle(other.key == decoded.key, "an ignored member changed the identity")
    # Any other member changed: another witness, the same identity.
    name = "zz\u00e9-not-ignored"
    while _at(doc, (name,)) is not ABSENT:
        name += "+"
    text = write_model(_with(doc, (name,), Num("1")), rnd).encode()
    if len(text) <= codec.max_bytes:
        other = codec.decode(Delivery(body=text))
        _oracle(other.content != decoded.content, "a member outside witness_ignore was ignored")
        _oracle(other.key == decoded.key, "a member outside the identity changed it")
    return "accepted"


# -- the sp-api-listing codec ------------------------------------------------------------------
SP_FIXTURES = HERE.parent / "tests" / "fixtures" / "sp_api"
SP_APP = "amzn1.sellerapps.app.5f0c2d4e-8b1a-4c3e-9d7f-2a6b8e0c4f19"
SP_SUBS = ("d3b07384-5c2a-4f1e-8a9b-3c4d5e6f7a80", "7e2f9a41-0c8d-4b6e-a35f-9d1c7b2e4a66")
SP_SETTINGS = {"expected_application_id": SP_APP, "expected_subscription_id": list(SP_SUBS)}
SP_CODEC: Any = get_codec("sp-api-listing").configure(SP_SETTINGS, None)
# The same codec expecting another application, and the same application's other
# subscriptions: neither may take what the real one takes.
SP_OTHER_APP: Any = get_codec("sp-api-listing").configure(
    {**SP_SETTINGS, "expected_application_id": SP_APP.replace("5f0c", "0000")}, None
)
SP_OTHER_SUB: Any = get_codec("sp-api-listing").configure(
    {**SP_SETTINGS, "expected_subscription_id": ["3f2a-other-subscription"]}, None
)
SP_TYPES = {"LISTINGS_ITEM_STATUS_CHANGE": {"1.0"},
            "LISTINGS_ITEM_ISSUES_CHANGE": {"1.0", "2023-12-13"}}  # fmt: skip
SP_BRIDGE = "aws.partner/sellingpartnerapi.amazon.com"
# README "Codecs configured": the codec's own reasons, the strict reader's, and the
# json-event rules the normalized event must pass.
SP_REASONS = READER_REASONS | {
    "too_large", "bad_envelope", "unknown_field", "missing_field", "source_mismatch",
    "subscription_mismatch", "missing_scope", "unknown_notification_type",
    "unknown_notification_version", "unknown_payload_version", "bad_payload",
    "bad_event_time", "bad_field",
}  # fmt: skip
# What a transport adds and a redelivery changes: never identity, never witness.
TRANSPORT = {
    "id": "8c1d-redelivered",
    "time": "2031-01-02T03:04:05Z",
    "account": "999988887777",
    "region": "eu-west-1",
    "resources": ["arn:aws:redelivery"],
    "version": "0",
}


def _text(value: Any) -> bool:
    return isinstance(value, str) and not isinstance(value, Num)


def sp_api_target(data: bytes) -> str:
    """The sp-api-listing codec on one envelope, against a model of it."""
    try:
        decoded = SP_CODEC.decode(Delivery(body=data))
    except Invalid as exc:
        _oracle(exc.reason in SP_REASONS, f"sp-api-listing refused with {exc.reason!r}")
        _oracle(str(exc).startswith(exc.reason), "Invalid's message does not lead with its reason")
        return f"invalid:{exc.reason}"
    _oracle(len(data) <= SP_CODEC.max_bytes, "an envelope over the bound passed")
    _oracle(_stdlib_accepts(data), "sp-api-listing took what json.loads refuses")
    message = model(data.decode("utf-8"))
    _oracle(isinstance(message, Obj), "a notification that is not an object passed")
    detail = _at(message, ("detail",))
    bridged = detail is not ABSENT and _at(message, ("NotificationType",)) is ABSENT
    notification = detail if bridged else message
    if bridged:
        source = _at(message, ("source",))
        _oracle(_text(source) and f"{source}/".startswith(SP_BRIDGE + "/"), "not SP-API's bus")
        _oracle(_at(message, ("detail-type",)) == _at(notification, ("NotificationType",)),
                "detail-type is not the detail's type")  # fmt: skip
    kind = _at(notification, ("NotificationType",))
    _oracle(_text(kind) and kind in SP_TYPES, f"notification type {kind!r:.80} passed")
    _oracle(_at(notification, ("NotificationVersion",)) == "1.0", "another NotificationVersion")
    _oracle(_at(notification, ("PayloadVersion",)) in SP_TYPES[kind], "another PayloadVersion")
    meta = _at(notification, ("NotificationMetadata",))
    application = _at(meta, ("ApplicationId",))
    subscription = _at(meta, ("SubscriptionId",))
    _oracle(_text(application) and application == SP_APP, f"ApplicationId {application!r:.80}")
    _oracle(_text(subscription) and subscription in SP_SUBS, f"SubscriptionId {subscription!r:.80}")
    # The identity is (application, subscription, NotificationId): never a transport id.
    notification_id = _at(meta, ("NotificationId",))
    _oracle(
        model(decoded.key) == [SP_APP, subscription, notification_id],
        f"identity {decoded.key[:200]!r} is not the NotificationId's",
    )
    event = plain_model(model(decoded.content))
    payload = _at(notification, ("Payload",))
    _oracle(event["payload"]["Payload"] == plain_model(payload), "the Payload changed")
    scope = [event[n] for n in ("seller_id", "sku", "marketplace_id")]
    wanted = [_at(payload, (n,)) for n in ("SellerId", "Sku", "MarketplaceId")]
    _oracle(scope == wanted, "the work key is not the Payload's")
    again = JSON_EVENT.decode(Delivery(body=decoded.content))
    _oracle((again.content, again.key) == (decoded.content, decoded.key), "not a json-event")
    for other in (SP_OTHER_APP, SP_OTHER_SUB):
        try:
            other.decode(Delivery(body=data))
        except Invalid as exc:
            want = "source_mismatch" if other is SP_OTHER_APP else "subscription_mismatch"
            _oracle(exc.reason == want, f"another inbox refused it with {exc.reason}, not {want}")
        else:
            _oracle(False, "an inbox expecting another application or subscription took it")
    # Redelivered: new transport facts, members reordered, whitespace changed.
    rnd = _respelled(data)
    moved = _with(meta, ("PublishTime",), f"2031-0{rnd.randrange(1, 10)}-11T12:13:14.5Z")
    redelivered = _with(notification, ("NotificationMetadata",), moved)
    if bridged:
        outer = _with(message, ("detail",), redelivered)
        for name, value in TRANSPORT.items():
            if rnd.random() < 0.5:
                outer = _with(outer, (name,), value)
        redelivered = outer
    text = write_model(redelivered, rnd, ascii_only=rnd.random() < 0.5).encode()
    if len(text) <= SP_CODEC.max_bytes:
        _oracle(SP_CODEC.decode(Delivery(body=text)) == decoded, "a redelivery read differently")
    return "accepted"


def _sp_fixtures() -> list[dict[str, Any]]:
    found = [json.loads(p.read_text("utf-8")) for p in sorted(SP_FIXTURES.glob("*.json"))]
    if not found:  # the fixtures live in tests/; without them, one built here
        found = [{
            "NotificationVersion": "1.0", "NotificationType": "LISTINGS_ITEM_STATUS_CHANGE",
            "PayloadVersion": "1.0", "EventTime": "2025-03-14T09:26:53.589Z",
            "Payload": {"SellerId": "A2SYNTH", "MarketplaceId": "ATVPDKIKX0DER",
                        "Sku": "SYN-1", "Status": ["BUYABLE"]},
            "NotificationMetadata": {"ApplicationId": SP_APP, "SubscriptionId": SP_SUBS[0],
                                     "PublishTime": "2025-03-14T09:26:54.102Z",
                                     "NotificationId": "0b6f9c3e-synthetic"},
        }]  # fmt: skip
    return found


# -- the webhook signature verifiers ----------------------------------------------------------
WEBHOOK_NOW = 1_800_000_000
WEBHOOK_SCHEMES = ("standard-webhooks", "github", "stripe")
_RAW_SECRETS = (b"fuzz-secret-one-not-a-secret", b"fuzz-secret-two-rotated-in")
WRONG_SECRET = b"fuzz-secret-never-configured"


def _webhook_config(scheme: str, tolerance: int) -> WebhookConfig:
    if scheme == "standard-webhooks":
        texts = ["whsec_" + base64.b64encode(s).decode() for s in _RAW_SECRETS]
    else:
        texts = [s.decode() for s in _RAW_SECRETS]
    table: dict[str, Any] = {"scheme": scheme, "secret": texts}
    if scheme != "github":
        table["tolerance"] = tolerance
    return parse_webhook(table, {})


WEBHOOKS = {(s, t): _webhook_config(s, t) for s in WEBHOOK_SCHEMES for t in (300, 5)}
WEBHOOK_REASONS = frozenset(
    {"missing_signature", "bad_signature_header", "stale_signature", "bad_signature"}
)
WEBHOOK_HEADERS = {
    "standard-webhooks": ("webhook-id", "webhook-timestamp", "webhook-signature"),
    "github": ("x-hub-signature-256", "x-github-delivery"),
    "stripe": ("stripe-signature",),
}
# The header names that come before each one above, as the senders' libraries read them
# (Svix's for Standard Webhooks).
WEBHOOK_ALIASES = {"webhook-id": "svix-id", "webhook-timestamp": "svix-timestamp",
                   "webhook-signature": "svix-signature"}  # fmt: skip
_LOWER_HEX = frozenset("0123456789abcdef")
# The json codec a Stripe inbox gets by default (identified by the event's /id), and
# keyed for the schemes that send a message id: what serve decodes a verified body with.
STRIPE_JSON: Any = get_codec("json").configure({}, WEBHOOKS[("stripe", 300)])
_B64 = string.ascii_uppercase + string.ascii_lowercase + string.digits + "+/"


def _mac(secret: bytes, message: bytes) -> bytes:
    return hmac.new(secret, message, hashlib.sha256).digest()


def _b64(text: str) -> bytes | None:
    """RFC 4648 base64 with its padding, decoded by hand (None if it is not that)."""
    body = text.rstrip("=")
    pad = len(text) - len(body)
    if not text or len(text) % 4 or pad > 2 or any(c not in _B64 for c in body):
        return None
    bits = "".join(f"{_B64.index(c):06b}" for c in body)
    size = len(bits) // 8
    return int(bits[: size * 8] or "0", 2).to_bytes(size, "big")


def _plain_id(value: str) -> bool:
    return (
        1 <= len(value) <= 256
        and value == value.strip()
        and not any(ord(c) < 0x20 or c == "\x7f" for c in value)
    )


def _unix(text: str) -> bool:
    """A unix time as ``str(int)`` spells it, in at most 12 digits."""
    return len(text) <= 12 and text.isascii() and text.isdigit() and str(int(text)) == text


def reference_verdict(
    scheme: str, headers: dict[str, str], body: bytes, now: float, tolerance: int
) -> tuple[str, str | None, int | None]:
    """The scheme as its documentation defines it, checked with hmac here: (``good`` or
    the kind of failure, the message id, the signed time)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    need = WEBHOOK_HEADERS[scheme]
    # Each header under the first of its names present (Svix's before Standard Webhooks').
    found = {}
    for name in need:
        alias = WEBHOOK_ALIASES.get(name)
        if alias is not None and alias in lowered:
            found[name] = lowered[alias]
        elif name in lowered:
            found[name] = lowered[name]
    if not all(found.get(name) for name in need):
        return "missing", None, None
    secrets = _RAW_SECRETS
    if scheme == "github":
        signature, delivery = found[need[0]], found[need[1]]
        hexed = signature[7:]
        # octokit compares the header as sent: sha256= and lower-case hex only.
        if not (_plain_id(delivery) and signature.startswith("sha256=") and len(hexed) == 64
                and set(hexed) <= _LOWER_HEX):  # fmt: skip
            return "malformed", None, None
        good = any(hmac.compare_digest(_mac(s, body), bytes.fromhex(hexed)) for s in secrets)
        return ("good" if good else "mismatch"), delivery, None
    if scheme == "standard-webhooks":
        msg_id, stamp, signature = (found[n] for n in need)
        if not _plain_id(msg_id) or "." in msg_id or not _unix(stamp):
            return "malformed", None, None
        if abs(now - int(stamp)) > tolerance:
            return "stale", None, None
        signed = f"{msg_id}.{stamp}.".encode() + body
        given = [_b64(e[3:]) for e in signature.split(" ") if e.startswith("v1,")]
        good = any(_mac(s, signed) == g for s in secrets for g in given)
        return ("good" if good else "mismatch"), msg_id, int(stamp)
    # Stripe's libraries split on bare commas (", v1=" names " v1"), compare v1 as
    # lower-case hex, and bound only the past.
    elements = [e.partition("=") for e in found[need[0]].split(",")]
    stamps = [value for name, _, value in elements if name == "t"]
    if len(stamps) != 1 or not _unix(stamps[0]):
        return "malformed", None, None
    if now - int(stamps[0]) > tolerance:
        return "stale", None, None
    signed = f"{stamps[0]}.".encode() + body
    given = [v for name, _, v in elements if name == "v1"]
    good = any(_mac(s, signed).hex() in given for s in secrets)
    return ("good" if good else "mismatch"), None, int(stamps[0])


def _signed_request(
    scheme: str, secret: bytes, msg_id: str, stamp: int, body: bytes
) -> dict[str, str]:
    """A request as the sender signs it (computed here, not with the module's helpers)."""
    if scheme == "github":
        digest = _mac(secret, body).hex()
        return {"X-Hub-Signature-256": "sha256=" + digest, "X-GitHub-Delivery": msg_id}
    if scheme == "stripe":
        digest = _mac(secret, f"{stamp}.".encode() + body).hex()
        return {"Stripe-Signature": f"t={stamp},v1={digest}"}
    mac = _mac(secret, f"{msg_id}.{stamp}.".encode() + body)
    return {"webhook-id": msg_id, "webhook-timestamp": str(stamp),
            "webhook-signature": "v1," + base64.b64encode(mac).decode()}  # fmt: skip


def webhook_target(data: bytes) -> str:
    """A scheme byte, a mode byte, two offset bytes, then message id, body and a spare
    on lines: a correctly signed request, then changed as the mode says.

    Mode bits: 1 signed with a secret not configured, 2 with the rotated-in one, 4 the
    body changed after signing, 8 the signature header replaced by the spare, 16 the
    spare spliced into the signature header, 32 a header dropped, 64 header names in
    other cases, 128 the signed time (GitHub: the delivery id) respelled as the spare.
    The offset bytes move the signed time either side of the tolerance (and the clock
    by half a second); the last one's bit 8 sends Standard Webhooks' headers under
    Svix's names, and its bit 16 also the Standard Webhooks names with the spare as
    their values. Header values are text as an ASGI server decodes them (latin-1).
    """
    head = data[:4].ljust(4, b"\0")
    scheme = WEBHOOK_SCHEMES[head[0] % 3]
    mode = head[1]
    tolerance = 5 if head[0] & 128 else 300
    parts = data[4:].split(b"\n", 2)
    parts += [b""] * (3 - len(parts))
    id_raw, body, spare_raw = parts
    spare = spare_raw.decode("latin-1")
    spread = tolerance * 2 + 40
    stamp = WEBHOOK_NOW + int.from_bytes(head[2:4], "big") % spread - spread // 2
    now = WEBHOOK_NOW + (0.5 if head[3] & 1 else 0.0)
    secret = WRONG_SECRET if mode & 1 else _RAW_SECRETS[1] if mode & 2 else _RAW_SECRETS[0]
    msg_id = id_raw.decode("latin-1") or "msg_2mYfuzz"
    headers = _signed_request(scheme, secret, msg_id, stamp, body)
    names = list(headers)
    sig_name = names[0] if scheme != "standard-webhooks" else "webhook-signature"
    if mode & 4:
        at = (head[2] % len(body)) if body else 0
        body = body[:at] + bytes([(body[at] ^ 1) if body else 0x41]) + body[at + 1 :]
    if mode & 8:
        headers[sig_name] = spare
    if mode & 16:
        glue = " " if scheme == "standard-webhooks" else "," if scheme == "stripe" else ""
        headers[sig_name] = (spare + glue + headers[sig_name] if head[3] & 2
                             else headers[sig_name] + glue + spare)  # fmt: skip
    if mode & 128:
        if scheme == "standard-webhooks":
            headers["webhook-timestamp"] = spare
        elif scheme == "stripe":
            headers[sig_name] = re.sub(r"^t=[0-9]*", lambda _: "t=" + spare, headers[sig_name])
        else:
            headers["X-GitHub-Delivery"] = spare
    if mode & 32:
        del headers[names[head[2] % len(names)]]
    if scheme == "standard-webhooks" and head[3] & 8:
        svixed = {WEBHOOK_ALIASES.get(k, k): v for k, v in headers.items()}
        headers = {**({k: spare for k in headers} if head[3] & 16 else {}), **svixed}
    if mode & 64:
        headers = {(k.upper() if head[3] & 4 else k.title()): v for k, v in headers.items()}
    config = WEBHOOKS[(scheme, tolerance)]
    try:
        verified: Verified | None = config.verify(headers, body, now)
        reason = ""
    except Unverified as exc:
        verified, reason = None, exc.reason
        _oracle(reason in WEBHOOK_REASONS, f"{scheme} refused with {reason!r}")
        _oracle(str(exc).startswith(reason), "Unverified's message does not lead with its reason")
    want, want_key, want_stamp = reference_verdict(scheme, headers, body, now, tolerance)
    _oracle(
        (verified is not None) == (want == "good"),
        f"{scheme} said {reason or 'good'} where the reference says {want}",
    )
    if verified is None:
        # A header missing is missing_signature, unless one checked before it is malformed.
        consistent = {"missing": {"missing_signature", "bad_signature_header"},
                      "stale": {"stale_signature"}, "mismatch": {"bad_signature"}}  # fmt: skip
        _oracle(reason in consistent.get(want, WEBHOOK_REASONS - {"missing_signature"}),
                f"{scheme} refused {reason} where the reference says {want}")  # fmt: skip
        return f"{scheme}:refused:{reason}"
    _oracle(
        verified == Verified(scheme, want_key, want_stamp, scheme == "standard-webhooks"),
        f"verified {verified} is not the request's",
    )
    # What serve then decodes: keyed by the verified id, or Stripe's event /id.
    delivery = Delivery(body=body, key=verified.key, signature=verified)
    if scheme == "stripe":
        try:
            decoded = STRIPE_JSON.decode(delivery)
        except Invalid as exc:
            _oracle(exc.reason in JSON_CODEC_REASONS, f"stripe's json refused {exc.reason}")
        else:
            event = model(body.decode("utf-8"))
            _oracle(model(decoded.key) == [_at(event, ("id",))], "stripe identity is not /id")
    else:
        decoded = KeyedCodec(config).decode(delivery)
        _oracle((decoded.content, decoded.key) == (body, verified.key), "keyed moved the id")
    return f"{scheme}:accepted"


# -- the NDJSON line adapter ---------------------------------------------------------------------
# custom: the generic form; then a configured json inbox (its codec is json{...}) and SP-API.
LINE_CODECS = ("ussd-h1", "feed", "keyed", "json-event", "custom", JSON_CODEC.name,
               "sp-api-listing")  # fmt: skip
LINE_DECODERS: dict[str, Any] = {
    **{name: get_codec(name) for name in ("ussd-h1", "feed", "keyed", "json-event")},
    "custom": get_codec("keyed"),
    JSON_CODEC.name: JSON_CODEC,
    "sp-api-listing": SP_CODEC,
}
LINE_REASONS: dict[str, frozenset[str]] = {
    "ussd-h1": H1_REASONS,
    "feed": frozenset({"bad_format", "too_large"}),
    "keyed": frozenset({"missing_key"}),
    "custom": frozenset({"missing_key"}),
    "json-event": JSON_REASONS,
    JSON_CODEC.name: JSON_CODEC_REASONS,
    "sp-api-listing": SP_REASONS,
}
LINE_FIELDS = ("frame", "frame_id", "payload", "payload_b64", "body", "body_b64", "key",
               "lease_token", "snapshot_id", "device_time", "delivery_id")  # fmt: skip


def _storable(text: str | None) -> bool:
    """Text every store holds: UTF-8 (no lone surrogate) without NUL (PostgreSQL)."""
    if text is None:
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def lines_target(data: bytes) -> str:
    """A codec byte, then one NDJSON line: the adapter, then the codec behind it.

    The adapter must not raise; what it gives must be storable (key and facts as text a
    store holds, a lease token of 0 to 2**63 - 1); an unreadable line is kept whole; and
    the codec may refuse only with Invalid. (Surfaces strip the newline themselves.)
    """
    codec = LINE_CODECS[data[0] % len(LINE_CODECS)] if data else "ussd-h1"
    line = data[1:]
    delivery = delivery_from_line(codec, line)
    _oracle(isinstance(delivery, Delivery), "the adapter gave no delivery")
    facts = (delivery.key, delivery.snapshot_id, delivery.device_time, delivery.delivery_id)
    _oracle(all(_storable(f) for f in facts), f"a fact no store can hold: {facts!r:.200}")
    token = delivery.lease_token
    _oracle(token is None or (type(token) is int and 0 <= token < 2**63), f"token {token!r}")
    if isinstance(delivery, Unreadable):
        _oracle(delivery.body == line.rstrip(b"\r\n"), "an unreadable line was not kept whole")
        return "unreadable"
    try:
        LINE_DECODERS[codec].decode(delivery)
    except Invalid as exc:
        _oracle(exc.reason in LINE_REASONS[codec], f"{codec} refused a line with {exc.reason!r}")
        return f"invalid:{exc.reason}"
    return "accepted"


TARGETS: dict[str, Callable[[bytes], str]] = {
    "json-event": json_target,
    "ussd-h1": h1_target,
    "hmac-signature": signature_target,
    "ndjson-lines": lines_target,
    "json-codec": json_codec_target,
    "sp-api": sp_api_target,
    "webhook-signatures": webhook_target,
}


# -- seed corpora and dictionaries -----------------------------------------------------------------
def _event(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "schema_version": 1,
        "source": "fuzz",
        "subscription": "sub-1",
        "notification_id": "n-1",
        "seller_id": "S1",
        "sku": "SKU-1",
        "marketplace_id": "M1",
        "notification_type": "listing_issues_changed",
        "event_time": "2030-06-15T08:09:10Z",
        "payload": {"status": "ACTIVE", "issues": [{"code": 7, "ratio": 0.5}], "ok": True},
    }
    base.update(changes)
    return base


def _json_doc(**changes: Any) -> dict[str, Any]:
    """A document for the configured json codec: both identity pointers, the ignored
    members and the fields there; "ref" also holds the members a wrong unescaping of
    "/ref/a~01b~1c" would name, each with another value."""
    base: dict[str, Any] = {
        "id": "order-1",
        "ref": {"a~1b/c": 7, "a/b/c": "wrong", "a~1b~1c": "wrong too", "a/b~c": False},
        "attempt": 3,
        "meta": {"seen/at": "2030-01-01T00:00:00Z", "seen~1at": "not ignored"},
        "site": "Kakuma1",
        "items": [{"n": 1}, 2],
        "extra": [1.0, -0.0, 1e300, "\u00e9\U0001f600", None, True],
    }
    base.update(changes)
    return base


def _json_codec_seeds() -> list[bytes]:
    docs = [
        _json_doc(),
        _json_doc(id=1),
        _json_doc(id=True, items=["first"]),
        _json_doc(ref={"a~1b/c": "x"}, meta="not an object"),
        _json_doc(id=""),
        _json_doc(id=None),
        _json_doc(ref={"a/b/c": 1}),
        _json_doc(items={"0": "an object member named 0"}),
        _json_doc(items=[]),
        _json_doc(site="nul\u0000inside"),
        _json_doc(attempt={"deep": [[[]]]}),
    ]
    out = [json.dumps(d).encode() for d in docs]
    out.append(json.dumps(_json_doc(), indent=2, ensure_ascii=False).encode())
    text = json.dumps(_json_doc(items=[0]))
    out.append(text.replace('"items": [0]', '"items": [' + "7" * 4_301 + "]").encode())
    out.append(text.replace('"id": "order-1"', '"id": "order-1", "id": "order-2"').encode())
    # The reader's own corpus (JSONTestSuite) is json-event's: these reach the pointers.
    return [*out, b"[]", b'"x"', b'{"id": NaN}', b"{" * 30, b'{"id": "\\ud800"}']


def _sp_api_seeds() -> list[bytes]:
    found = _sp_fixtures()
    sqs = [m for m in found if "NotificationType" in m]
    variants: list[Any] = list(found)
    for message in sqs:
        meta = message["NotificationMetadata"]
        variants += [
            {**message, "NotificationMetadata": {**meta, "ApplicationId": "amzn1.other"}},
            {**message, "NotificationMetadata": {**meta, "SubscriptionId": SP_SUBS[::-1][0]}},
            {**message, "NotificationMetadata": {**meta, "SubscriptionId": 7}},
            {**message, "NotificationMetadata": {**meta, "NotificationId": "\u00e9" * 257}},
            {**message, "EventTime": "2025-03-14T09:26:53+05:30"},
            {**message, "EventTime": "2025-02-29T09:26:53Z"},
            {**message, "NotificationVersion": "2.0"},
            {**message, "PayloadVersion": "1.0"},
            {**message, "Payload": {**message["Payload"], "MarketplaceId": None}},
            {**message, "Unexpected": 1},
            {"notificationType": "ANY_OFFER_CHANGED", "payload": {}},
            {
                "version": "0",
                "id": "0f3e-transport-id",
                "detail-type": message["NotificationType"],
                "source": f"{SP_BRIDGE}/{SP_APP}",
                "detail": message,
            },
        ]
    out = [json.dumps(v).encode() for v in variants]
    out += [json.dumps(v, indent=1).encode() for v in found]
    return out + [p.read_bytes() for p in sorted(SP_FIXTURES.glob("*.json"))]


def _webhook_seeds() -> list[bytes]:
    out = []
    bodies = [b'{"id":"evt_1NfuzzStripe","type":"charge.succeeded","data":{}}', b"", b"x" * 300]
    spares = ["v1,AAAA", "t=1800000000", "v1=" + "0" * 64, " ", "\xa0", "0123", "1800000000 "]
    for scheme in range(3):
        for tolerance_bit in (0, 128):
            spread = (5 if tolerance_bit else 300) * 2 + 40
            for delta in (0, 1, -1, 5, -5, 6, 300, -300, 301, -301):
                offset = (spread // 2 + delta) % spread
                for mode in (0, 2, 1, 4, 16, 32, 64, 128, 8):
                    spare = spares[(mode + delta) % len(spares)]
                    body = bodies[(mode + abs(delta)) % len(bodies)]
                    out.append(
                        bytes([scheme | tolerance_bit, mode, offset >> 8, offset & 0xFF])
                        + b"msg_2mYfuzz\n"
                        + body
                        + b"\n"
                        + spare.encode("latin-1")
                    )
    return out


def seeds(target: str) -> list[bytes]:
    """A small seed corpus per target (JSONTestSuite files are read where they lie)."""
    if target == "json-event":
        out = [
            json.dumps(_event()).encode(),
            json.dumps(_event(payload={}), indent=2).encode(),
            json.dumps(_event(payload={"n": [1, -0.0, 1e300, "\u00e9\ud83d\ude00"]})).encode(),
            json.dumps(_event(payload={"deep": [[[[{"a": [[[]]]}]]]]})).encode(),
            json.dumps(_event(notification_type="listing_status_changed")).encode(),
        ]
        if CORPUS.is_dir():
            out += [p.read_bytes() for p in sorted(CORPUS.glob("*.json"))]
        return out
    if target == "ussd-h1":
        return [
            f"rec{seq}-{seq}\n{make_frame(seq, site, need, count, pri)}".encode()
            for seq, site, need, count, pri in [
                (1, "Kakuma1", "MED", 3, 86),
                (2, "Dadaab", "SHE", 8, 71),
                (999999999, "Z", "WAT", 999999999, 0),
                (7, "a1B2c3D4", "FOO", 0, 999999999),
            ]
        ] + [b"k\nH1|1|x|ABC|1|1|#ZZ", b"H1|", b"rec-1\nH1|01|S|MED|3|86|#00"]
    if target == "json-codec":
        return _json_codec_seeds()
    if target == "sp-api":
        return _sp_api_seeds()
    if target == "webhook-signatures":
        return _webhook_seeds()
    if target == "ndjson-lines":
        frame = make_frame(1, "Kakuma1", "MED", 3, 86)
        lines = [
            json.dumps({"frame_id": "rec1-1", "frame": frame, "device_time": "t"}),
            json.dumps({"payload": "row-A", "snapshot_id": "S1", "lease_token": 7}),
            json.dumps({"body_b64": "eA==", "key": "k1", "delivery_id": "d"}),
            json.dumps(_event()),
            frame,
            "[" * 3_000,
            '{"frame_id": "r\\u0000", "frame": "x", "payload": "\\ud800"}',
            json.dumps(_json_doc()),
            json.dumps(_sp_fixtures()[-1]),
        ]
        return [bytes([i]) + line.encode() for i in range(len(LINE_CODECS)) for line in lines]
    body = b'{"scope": "S1", "ttl": 60}'
    return [
        bytes([mode]) + b"1800000000\nsha256=00\nPOST\n/v1/inboxes/feed/leases\nrec1-1\n" + body
        for mode in (0, 1, 2, 3, 4, 5, 9, 18, 31, 33, 35, 67, 99)
    ]


SP_WORDS = (
    *("NotificationVersion", "NotificationType", "PayloadVersion", "EventTime", "Payload"),
    *("NotificationMetadata", "ApplicationId", "SubscriptionId", "PublishTime"),
    *("NotificationId", "SellerId", "Sku", "MarketplaceId", "Status", "Severities"),
    *("EnforcementActions", "detail", "detail-type", "source", "id", "notificationType"),
    *(SP_APP, *SP_SUBS, *SP_TYPES, SP_BRIDGE, "1.0", "2023-12-13", "BUYABLE", "DELETED"),
    *("ERROR", "SEARCH_SUPPRESSED"),
)

DICTIONARY: dict[str, list[bytes]] = {
    "json-event": [
        *(f'"{name}"'.encode() for name in _event()),
        b'"listing_status_changed"',
        b'"2024-02-29T23:59:59Z"',
        b"NaN",
        b"-Infinity",
        b"1e999",
        b"-0",
        b"1.0",
        b'"\\ud800"',
        b'"\\ud83d\\ude00"',
        b"\\u0000",
        b"[[[[[[[[[[[[[[[[[[[[[",
        b"{}",
        b"[]",
        b"null",
        b"\xef\xbb\xbf",
        b"\xed\xa0\x80",
        b"9" * 64,
    ],
    "ussd-h1": [b"H1|", b"|#", b"|MED|", b"\n", b"|00", b"999999999", b"1000000000"],
    "hmac-signature": [b"sha256=", b"\n", b" ", b"\xa0", b"GET", b"?a=1", b"1800000300"],
    "json-codec": [
        *(f'"{name}"'.encode() for name in _json_doc()),
        *(f'"{name}"'.encode() for name in _json_doc()["ref"]),
        b'"seen/at"',
        b'"seen~1at"',
        b'"0"',
        b"~0",
        b"~1",
        b"null",
        b"true",
        b'""',
        b"1.0",
        b"-0",
        b"1e999",
        b'"\\u0000"',
        b'"\\ud800"',
        b"{}",
        b"[]",
        b"9" * 4_301,
    ],
    "sp-api": [
        *(f'"{word}"'.encode() for word in SP_WORDS),
        b'"2025-03-14T09:26:53.589Z"',
        b'"2025-03-14T09:26:53-23:59"',
        b'"9999-12-31T23:59:59+00:00"',
        b"null",
        b'""',
        b"[]",
        b"{}",
    ],
    "webhook-signatures": [
        b"v1,",
        b"v1a,",
        b" ",
        b",",
        b"t=",
        b"v1=",
        b"v0=",
        b"sha256=",
        b"=",
        b"==",
        b".",
        b"\xa0",
        b"\x85",
        b"\x7f",
        b"1800000000",
        b"0" * 64,
    ],
    "ndjson-lines": [
        *(f'"{name}":'.encode() for name in LINE_FIELDS),
        b"[[[[[[[[[[[[[[[[[[[[[",
        b'"\\u0000"',
        b'"\\ud800"',
        b"NaN",
        b"9223372036854775808",
        b"\xff",
        b"\r\n",
    ],
}


def libfuzzer_dictionary(target: str) -> str:
    """DICTIONARY[target] in libFuzzer's ``-dict`` format."""

    def quote(token: bytes) -> str:
        return "".join(
            chr(b) if 0x20 <= b < 0x7F and b not in b'"\\' else f"\\x{b:02X}" for b in token
        )

    return "".join(f'kw{i}="{quote(t)}"\n' for i, t in enumerate(DICTIONARY[target]))


# -- running a target and keeping figures ---------------------------------------------------------
@dataclass
class Stats:
    """Executions and what they came to; crashes and hangs keep their first inputs."""

    target: str
    executions: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    crashes: int = 0
    crash_kinds: Counter[str] = field(default_factory=Counter)
    hangs: int = 0
    slowest: float = 0.0
    first_crash: str | None = None  # repr of the input, then the error
    first_hang: str | None = None

    def run(self, fn: Callable[[bytes], str], data: bytes) -> str | None:
        """One execution; its outcome label, or None for a crash."""
        self.executions += 1
        started = time.thread_time()
        outcome: str | None = None
        try:
            outcome = fn(data)
            self.outcomes[outcome] += 1
        except Exception as exc:  # any of them is a crash: that is the point
            self.crashes += 1
            kind = f"{type(exc).__name__}: {str(exc)[:120]}"
            self.crash_kinds[kind] += 1
            if self.first_crash is None:
                self.first_crash = f"{data[:2000]!r} -> {kind}"
        elapsed = time.thread_time() - started
        self.slowest = max(self.slowest, elapsed)
        if elapsed > HANG_SECONDS:
            self.hangs += 1
            if self.first_hang is None:
                self.first_hang = f"{data[:2000]!r} took {elapsed:.2f} s of CPU"
        return outcome

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "executions": self.executions,
            "outcomes": dict(self.outcomes),
            "crashes": self.crashes,
            "crash_kinds": dict(self.crash_kinds),
            "hangs": self.hangs,
            "slowest": self.slowest,
            "first_crash": self.first_crash,
            "first_hang": self.first_hang,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Stats:
        return cls(
            target=data["target"],
            executions=data["executions"],
            outcomes=Counter(data["outcomes"]),
            crashes=data["crashes"],
            crash_kinds=Counter(data["crash_kinds"]),
            hangs=data["hangs"],
            slowest=data["slowest"],
            first_crash=data["first_crash"],
            first_hang=data["first_hang"],
        )


# -- the fallback: a seeded mutation fuzzer ----------------------------------------------------
INTERESTING = [b"0", b"-1", b"1e999", b"NaN", b"9" * 4301, b"\x00", b"\xff", b"\n", b'"', b"\\"]


class Mutator:
    """A seeded byte mutator with a little feedback: an input whose outcome label was not
    seen before joins the corpus. Deterministic for a seed, so a crash replays."""

    def __init__(self, seed: int, corpus: list[bytes], dictionary: list[bytes]) -> None:
        self.rnd = random.Random(seed)
        self.corpus = list(corpus) or [b""]
        self.dictionary = dictionary + INTERESTING
        self.seen: set[str] = set()

    def inputs(self, count: int) -> Iterator[bytes]:
        for i in range(count):
            if i < len(self.corpus):
                yield self.corpus[i]
            else:
                yield self.mutate(self.rnd.choice(self.corpus))

    def learn(self, data: bytes, outcome: str) -> None:
        if outcome not in self.seen:
            self.seen.add(outcome)
            self.corpus.append(data)

    def mutate(self, data: bytes) -> bytes:
        rnd = self.rnd
        out = bytearray(data)
        for _ in range(rnd.choice([1, 1, 2, 3, 4, 8])):
            op = rnd.randrange(9)
            at = rnd.randrange(len(out) + 1)
            if op == 0 and out:
                i = rnd.randrange(len(out))
                out[i] ^= 1 << rnd.randrange(8)
            elif op == 1 and out:
                out[rnd.randrange(len(out))] = rnd.randrange(256)
            elif op == 2:
                out[at:at] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 4)))
            elif op == 3 and out:
                end = min(len(out), at + rnd.randint(1, 16))
                del out[at:end]
            elif op == 4 and out:
                start = rnd.randrange(len(out))
                chunk = out[start : start + rnd.randint(1, 64)]
                out[at:at] = chunk * rnd.choice([1, 2, 16])
            elif op in (5, 6):
                out[at:at] = rnd.choice(self.dictionary)
            elif op == 7:
                other = rnd.choice(self.corpus)
                cut = rnd.randrange(len(other) + 1)
                out = out[:at] + bytearray(other[cut:])
            elif op == 8 and out:
                del out[rnd.randrange(len(out)) :]
        return bytes(out[:70_000])


class _Hang(Exception):
    """Raised by the backstop alarm inside a target that runs far too long."""


def mutation_fuzz(target: str, executions: int, seed: int) -> Stats:
    """Run ``target`` ``executions`` times on seeded mutations of its seed corpus."""
    fn = TARGETS[target]
    stats = Stats(target)
    mutator = Mutator(seed, seeds(target), DICTIONARY[target])

    def alarm(_signum: int, _frame: Any) -> None:
        raise _Hang

    # A backstop against a real infinite loop (the per-input timer counts anything over
    # HANG_SECONDS); an input that trips it is counted as a crash and as a hang.
    previous = signal.signal(signal.SIGALRM, alarm)
    try:
        for data in mutator.inputs(executions):
            signal.setitimer(signal.ITIMER_REAL, 30.0)
            try:
                outcome = stats.run(fn, data)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            if outcome is not None:
                mutator.learn(data, outcome)
    finally:
        signal.signal(signal.SIGALRM, previous)
    return stats
