"""Unit tests for the pure formats layer: codecs, field rules, identity. No database."""

from __future__ import annotations

import json
from typing import Any

import pytest

from oncebox.formats import (
    Codec,
    Delivery,
    FeedCodec,
    Invalid,
    JsonEventCodec,
    UssdH1Codec,
    get_codec,
    identify,
    json_event,
)
from oncebox.formats.canonical import canonical, canonical_read
from oncebox.formats.cksum import cksum
from oncebox.formats.codec import Decoded
from oncebox.formats.identity import sha256_hex
from oncebox.formats.json_event import MAX_BYTES
from oncebox.formats.strictjson import loads
from oncebox.formats.ussd_h1 import make_frame, trailer

JSON_EVENT = JsonEventCodec()
USSD = UssdH1Codec()
FEED = FeedCodec()

STRING_FIELDS = ("source", "subscription", "notification_id", "seller_id", "sku", "marketplace_id")


def event(**changes: Any) -> dict[str, Any]:
    """A valid json-event as a Python dict; ``changes`` replace fields."""
    base: dict[str, Any] = {
        "schema_version": 1,
        "source": "sp-api",
        "subscription": "sub-eu-1",
        "notification_id": "n-0001",
        "seller_id": "SELLER1",
        "sku": "SKU-42",
        "marketplace_id": "A1PA6795UKMFR9",
        "notification_type": "listing_status_changed",
        "event_time": "2026-02-28T12:30:00Z",
        "payload": {"status": "BUYABLE", "issues": [], "price": 1},
    }
    base.update(changes)
    return base


def encode(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode("utf-8")


def decode_event(body: bytes | dict[str, Any]) -> Decoded:
    raw = body if isinstance(body, bytes) else encode(body)
    return JSON_EVENT.decode(Delivery(body=raw))


def refusal(codec: Codec, delivery: Delivery) -> str:
    with pytest.raises(Invalid) as refused:
        codec.decode(delivery)
    return refused.value.reason


def event_refusal(body: bytes | dict[str, Any]) -> str:
    raw = body if isinstance(body, bytes) else encode(body)
    return refusal(JSON_EVENT, Delivery(body=raw))


# --- json-event: the valid case -------------------------------------------------------


def test_valid_event_decodes_to_fields_key_and_canonical_content() -> None:
    decoded = decode_event(event())
    assert decoded.fields == {
        "source": "sp-api",
        "subscription": "sub-eu-1",
        "notification_id": "n-0001",
        "seller_id": "SELLER1",
        "sku": "SKU-42",
        "marketplace_id": "A1PA6795UKMFR9",
        "notification_type": "listing_status_changed",
        "event_time": "2026-02-28T12:30:00Z",
    }
    assert decoded.key == '["sp-api","sub-eu-1","n-0001"]'
    assert decoded.content == canonical(loads(encode(event())))


def test_both_notification_types_are_accepted() -> None:
    for kind in ("listing_status_changed", "listing_issues_changed"):
        assert decode_event(event(notification_type=kind)).fields["notification_type"] == kind


def test_codecs_are_registered_by_name() -> None:
    assert get_codec("json-event").name == "json-event"
    assert get_codec("ussd-h1").name == "ussd-h1"
    assert get_codec("feed").name == "feed"


# --- json-event: one test per field rule ----------------------------------------------


def test_unknown_field_is_refused() -> None:
    assert event_refusal(event(receipt_handle="AQEB...")) == "unknown_field"


@pytest.mark.parametrize("name", sorted(json_event.FIELDS))
def test_missing_field_is_refused(name: str) -> None:
    body = event()
    del body[name]
    assert event_refusal(body) == "missing_field"


@pytest.mark.parametrize("raw", ["true", "1.0", '"1"', "2", "0", "-1", "1e0", "null", "[1]"])
def test_schema_version_must_be_integer_one(raw: str) -> None:
    text = encode(event()).decode().replace('"schema_version": 1', f'"schema_version": {raw}')
    assert f'"schema_version": {raw}' in text
    assert event_refusal(text.encode()) == "bad_schema_version"


@pytest.mark.parametrize("name", STRING_FIELDS)
@pytest.mark.parametrize(
    "value",
    [
        "",
        "x" * 257,
        " leading",
        "trailing ",
        "\tTAB",
        "in\x00side",
        "in\x1fside",
        "new\nline",
        1,
        None,
        ["a"],
        {"a": "b"},
    ],
    ids=repr,
)
def test_identity_and_scope_strings_are_bounded(name: str, value: Any) -> None:
    assert event_refusal(event(**{name: value})) == "bad_field"


@pytest.mark.parametrize("name", STRING_FIELDS)
def test_identity_and_scope_strings_at_their_bounds_pass(name: str) -> None:
    for value in ("x", "x" * 256, "é" * 256, "inner space", "del\x7fis not below U+0020"):
        assert decode_event(event(**{name: value})).fields[name] == value


@pytest.mark.parametrize(
    "value", ["listing_changed", "LISTING_STATUS_CHANGED", "", 1, None, {}, [], True]
)
def test_notification_type_is_one_of_two(value: Any) -> None:
    assert event_refusal(event(notification_type=value)) == "bad_notification_type"


@pytest.mark.parametrize(
    "value",
    [
        "2026-02-30T00:00:00Z",  # no such day
        "2025-02-29T00:00:00Z",  # not a leap year
        "2026-13-01T00:00:00Z",
        "2026-01-01T24:00:00Z",
        "2026-01-01T23:59:60Z",  # a leap second is not a time Python can hold
        "0000-01-01T00:00:00Z",
        "2026-01-01T00:00:00",
        "2026-01-01T00:00:00+00:00",
        "2026-01-01 00:00:00Z",
        "2026-01-01t00:00:00z",
        "2026-1-01T00:00:00Z",
        "2026-01-01T00:00:00.5Z",
        " 2026-01-01T00:00:00Z",
        "\u0662\u0660\u0662\u0666-01-01T00:00:00Z",  # Arabic-Indic digits
        "\uff12\uff10\uff12\uff16-01-01T00:00:00Z",  # fullwidth digits
        1767225600,
        None,
    ],
    ids=repr,
)
def test_event_time_must_be_a_real_utc_time(value: Any) -> None:
    assert event_refusal(event(event_time=value)) == "bad_event_time"


def test_event_time_accepts_a_leap_day() -> None:
    assert decode_event(event(event_time="2024-02-29T23:59:59Z")).fields["event_time"] == (
        "2024-02-29T23:59:59Z"
    )


@pytest.mark.parametrize("value", [[], [{}], "{}", 1, None, True])
def test_payload_must_be_an_object(value: Any) -> None:
    assert event_refusal(event(payload=value)) == "bad_payload"


@pytest.mark.parametrize("text", ["[]", '"event"', "1", "null"])
def test_event_must_be_an_object(text: str) -> None:
    assert event_refusal(text.encode()) == "bad_shape"


def test_duplicate_top_level_member_is_refused() -> None:
    text = encode(event()).decode()
    assert event_refusal((text[:-1] + ', "sku": "SKU-42"}').encode()) == "duplicate_member"


def test_duplicate_member_inside_payload_is_refused() -> None:
    text = encode(event(payload={})).decode()
    text = text.replace('"payload": {}', '"payload": {"a": 1, "a": 1}')
    assert event_refusal(text.encode()) == "duplicate_member"


@pytest.mark.parametrize("escape", ["\\ud800", "\\udfff", "\\ude00\\ud83d", "\\ud83dx"])
def test_lone_surrogate_escape_is_refused(escape: str) -> None:
    text = encode(event(payload={"note": "MARK"})).decode().replace("MARK", escape)
    assert event_refusal(text.encode()) == "invalid_unicode"


def test_surrogate_pair_escape_is_accepted() -> None:
    text = encode(event(payload={"note": "MARK"})).decode().replace("MARK", "\\ud83d\\ude00")
    assert b"\xf0\x9f\x98\x80" in decode_event(text.encode()).content


@pytest.mark.parametrize(
    "bad", [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe9", b"\xf4\x90\x80\x80"], ids=repr
)
def test_invalid_utf8_is_refused(bad: bytes) -> None:
    raw = encode(event(payload={"note": "MARK"})).replace(b"MARK", bad)
    assert event_refusal(raw) == "invalid_unicode"


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999", "-1e400"])
def test_non_finite_number_is_refused(number: str) -> None:
    text = encode(event(payload={"n": 0})).decode().replace('"n": 0', f'"n": {number}')
    assert event_refusal(text.encode()) == "non_finite_number"


def _nested_payload(levels: int) -> dict[str, Any]:
    """A payload that puts the deepest container at nesting ``levels`` (event = 1)."""
    inner: dict[str, Any] = {}
    for _ in range(levels - 2):
        inner = {"d": inner}
    return inner


def test_nesting_twenty_passes_and_twenty_one_is_too_deep() -> None:
    assert decode_event(event(payload=_nested_payload(20)))
    assert event_refusal(event(payload=_nested_payload(21))) == "too_deep"


def _event_of_size(size: int) -> bytes:
    head = encode(event(payload={"pad": ""}))
    raw = head.replace(b'"pad": ""', b'"pad": "' + b"p" * (size - len(head)) + b'"')
    assert len(raw) == size
    return raw


def test_raw_event_at_the_bound_passes() -> None:
    raw = _event_of_size(MAX_BYTES)
    decoded = decode_event(raw)
    assert len(decoded.content) <= MAX_BYTES


def test_raw_event_one_byte_over_the_bound_is_too_large() -> None:
    assert event_refusal(_event_of_size(MAX_BYTES + 1)) == "too_large"


def test_oversized_body_is_refused_before_parsing() -> None:
    # Not JSON at all: the size rule must answer before the parser sees it.
    assert event_refusal(b"\xff" * (MAX_BYTES + 1)) == "too_large"


def test_canonical_form_over_the_bound_is_too_large(monkeypatch: pytest.MonkeyPatch) -> None:
    # Canonical JSON is never longer than the raw text it came from (it drops whitespace
    # and only ever shortens escapes), so real input cannot reach this rule; it stays as
    # defence in depth, exercised here by widening the canonical form.
    def wide(value: Any, text: str) -> str:
        return canonical_read(value, text).decode() + " " * MAX_BYTES

    monkeypatch.setattr(json_event, "canonical_read_text", wide)
    # The one-pass decode proves its canonical form as long as the text; widened, it
    # fails that proof and leaves the body to the general path.
    monkeypatch.setattr(json_event, "quick_canonical_text", lambda value, *_: wide(value, ""))
    assert event_refusal(event()) == "too_large"


# --- json-event identity and witness ---------------------------------------------------


def ident(body: bytes | dict[str, Any]) -> tuple[str, str]:
    found = identify(JSON_EVENT, decode_event(body))
    return found.identity, found.witness


def test_identity_is_the_source_subscription_notification_tuple() -> None:
    identity, _ = ident(event())
    assert identity == canonical(["sp-api", "sub-eu-1", "n-0001"]).decode()
    for name in ("source", "subscription", "notification_id"):
        other, _ = ident(event(**{name: "other"}))
        assert other != identity, name


def test_identity_tuple_cannot_be_forged_by_joining_fields() -> None:
    a, _ = ident(event(source="a|b", subscription="c"))
    b, _ = ident(event(source="a", subscription="b|c"))
    assert a != b


@pytest.mark.parametrize(
    "change",
    [
        {"payload": {"status": "INACTIVE"}},
        {"notification_type": "listing_issues_changed"},
        {"event_time": "2026-03-01T00:00:00Z"},
        {"seller_id": "SELLER2"},
        {"sku": "SKU-43"},
        {"marketplace_id": "ATVPDKIKX0DER"},
    ],
    ids=lambda change: next(iter(change)),
)
def test_same_tuple_different_content_is_same_identity_different_witness(
    change: dict[str, Any],
) -> None:
    identity, witness = ident(event())
    other_identity, other_witness = ident(event(**change))
    assert other_identity == identity
    assert other_witness != witness


def test_member_order_and_whitespace_do_not_change_the_witness() -> None:
    original = event(payload={"b": [1, {"y": 2, "x": 1}], "a": "z"})
    reordered = dict(reversed(list(original.items())))
    reordered["payload"] = {"a": "z", "b": [1, {"x": 1, "y": 2}]}
    spaced = json.dumps(reordered, indent=3, separators=(" ,  ", " :\n")).encode()
    compact = json.dumps(original, separators=(",", ":")).encode()
    assert ident(spaced) == ident(compact)
    assert ident(compact)[1] == sha256_hex(decode_event(compact).content)


def test_array_order_changes_the_witness() -> None:
    assert ident(event(payload={"a": [1, 2]}))[1] != ident(event(payload={"a": [2, 1]}))[1]


def test_one_and_one_point_zero_are_different_content() -> None:
    one = encode(event(payload={"n": 1}))
    one_point_zero = one.replace(b'"n": 1', b'"n": 1.0')
    assert one != one_point_zero
    assert ident(one)[0] == ident(one_point_zero)[0]
    assert ident(one)[1] != ident(one_point_zero)[1]


def test_escaped_and_literal_spellings_of_a_string_are_the_same_content() -> None:
    literal = encode(event(payload={"s": "é/"}))
    escaped = literal.replace("é/".encode(), b"\\u00e9\\/")
    assert ident(literal) == ident(escaped)


# --- ussd-h1 ---------------------------------------------------------------------------

DEMO_FRAMES = [
    ("rec1-1", "H1|1|Kakuma1|MED|3|86|#89", (1, "Kakuma1", "MED", 3, 86)),
    ("rec2-2", "H1|2|Kakuma2|SHE|8|71|#09", (2, "Kakuma2", "SHE", 8, 71)),
    ("rec3-3", "H1|3|Kakuma1|WAT|12|69|#1a", (3, "Kakuma1", "WAT", 12, 69)),
]


def frame(text: str | bytes, key: str | None = "rec1") -> Delivery:
    body = text.encode() if isinstance(text, str) else text
    return Delivery(body=body, key=key)


@pytest.mark.parametrize(("frame_id", "text", "parts"), DEMO_FRAMES)
def test_demo_frames_decode_byte_exact(
    frame_id: str, text: str, parts: tuple[int, str, str, int, int]
) -> None:
    decoded = USSD.decode(frame(text, frame_id))
    assert decoded.content == text.encode()
    assert decoded.key == frame_id
    seq, site, need, headcount, pri = parts
    assert decoded.fields == {
        "seq": seq,
        "site": site,
        "need": need,
        "headcount": headcount,
        "pri": pri,
    }
    assert make_frame(*parts) == text


def test_demo_session_headcount_is_twenty_three() -> None:
    total = sum(USSD.decode(frame(text, fid)).fields["headcount"] for fid, text, _ in DEMO_FRAMES)
    assert total == 23


def test_trailer_is_cksum_of_the_body_modulo_256() -> None:
    body = b"H1|1|Kakuma1|MED|3|86"
    assert trailer(body) == f"{cksum(body) % 256:02x}" == "89"


def test_upper_case_trailer_is_accepted_and_kept_as_sent() -> None:
    decoded = USSD.decode(frame("H1|3|Kakuma1|WAT|12|69|#1A", "rec3-3"))
    assert decoded.fields["headcount"] == 12
    assert decoded.content == b"H1|3|Kakuma1|WAT|12|69|#1A"


@pytest.mark.parametrize("text", ["H1|1|Kakuma1|MED|3|86|#00", "H1|1|Kakuma1|MED|3|87|#89"])
def test_bad_trailer_is_refused(text: str) -> None:
    assert refusal(USSD, frame(text)) == "bad_checksum"


@pytest.mark.parametrize(
    "text",
    [
        "H1|9|Kakuma1|MED|3",
        "",
        "H2|1|Kakuma1|MED|3|86|#89",
        "H1|1|Kakuma1|MED|3|86|89",
        "H1|1|Kakuma1|MED|3|86|#8",
        "H1|1|Kakuma1|MED|3|86|#89\n",
        " H1|1|Kakuma1|MED|3|86|#89",
        "H1|1|Kakuma1|med|3|86|#89",
        "H1|1|Kakuma1|MEDS|3|86|#89",
        "H1|1|Kakuma1xx|MED|3|86|#89",
        "H1|1||MED|3|86|#89",
        "H1|-1|Kakuma1|MED|3|86|#89",
        "H1|1|Kakuma1|MED|3|86|#zz",
        "H1|1|Kakuma1|MED|3|86|7|#89",
        "H1|\u0661|Kakuma1|MED|3|86|#89",  # an Arabic-Indic digit
    ],
    ids=repr,
)
def test_malformed_frame_is_bad_format(text: str) -> None:
    assert refusal(USSD, frame(text)) == "bad_format"


@pytest.mark.parametrize(
    "key,reason",
    [(None, "missing_key"), ("", "missing_key"), ("rec 1", "bad_key"), ("rec1/1", "bad_key"),
     ("x" * 129, "bad_key"), ("rec1-é", "bad_key")],
)  # fmt: skip
def test_a_frame_id_that_is_missing_or_outside_its_alphabet_names_the_key(
    key: str | None, reason: str
) -> None:
    assert refusal(USSD, frame("H1|1|Kakuma1|MED|3|86|#89", key)) == reason


@pytest.mark.parametrize("key", ["rec1-2", "rec1-01", "site-1-10", "rec1-11"])
def test_a_frame_id_whose_seq_is_not_the_frames_is_a_key_mismatch(key: str) -> None:
    assert refusal(USSD, frame("H1|1|Kakuma1|MED|3|86|#89", key)) == "key_mismatch"


@pytest.mark.parametrize("key", ["rec1-1", "site-7-1", "rec1", "r.1:a_b"])
def test_a_frame_id_with_the_frames_seq_or_none_is_taken(key: str) -> None:
    assert USSD.decode(frame("H1|1|Kakuma1|MED|3|86|#89", key)).key == key


def test_a_corrupted_frame_is_refused_for_its_trailer_before_its_key() -> None:
    bad = "H1|1|Kakuma1|MED|3|86|#00"
    assert refusal(USSD, frame(bad, "rec1-2")) == "bad_checksum"


def test_format_is_checked_before_the_trailer() -> None:
    # Seed 003 R1 order: a frame that is malformed and has a wrong trailer is bad_format.
    assert refusal(USSD, frame("H1|1|Kakuma1|MED|3|#00")) == "bad_format"


def test_frame_over_the_bound_is_too_large() -> None:
    long_frame = make_frame(1, "Kakuma1", "MED", 10**150, 86)
    assert len(long_frame) > USSD.max_bytes
    assert refusal(USSD, frame(long_frame)) == "too_large"


def test_the_widest_frame_passes_and_wider_numbers_are_refused() -> None:
    widest = make_frame(10**9 - 1, "Kakuma12", "MED", 10**9 - 1, 10**9 - 1)
    assert USSD.decode(frame(widest)).fields["headcount"] == 10**9 - 1
    # Ten digits could overflow a store's integers: refused before anything is applied.
    assert refusal(USSD, frame(make_frame(1, "Kakuma1", "MED", 10**9, 86))) == "bad_format"
    assert refusal(USSD, frame(make_frame(1, "Kakuma1", "MED", 3, 10**40))) == "bad_format"


def test_frame_identity_is_the_frame_id_and_witness_the_exact_bytes() -> None:
    first = identify(USSD, USSD.decode(frame("H1|1|Kakuma1|MED|3|86|#89", "rec1-1")))
    again = identify(USSD, USSD.decode(frame("H1|1|Kakuma1|MED|3|86|#89", "rec1-1")))
    changed = identify(USSD, USSD.decode(frame(make_frame(1, "Kakuma1", "MED", 9, 86), "rec1-1")))
    upper = identify(USSD, USSD.decode(frame("H1|3|Kakuma1|WAT|12|69|#1A", "rec1-3")))
    lower = identify(USSD, USSD.decode(frame("H1|3|Kakuma1|WAT|12|69|#1a", "rec1-3")))
    assert first == again
    assert first.identity == changed.identity == "rec1-1"
    assert first.witness == sha256_hex(b"H1|1|Kakuma1|MED|3|86|#89")
    assert changed.witness != first.witness
    # For frames the exact bytes are the content: a re-cased trailer is other content.
    assert upper.witness != lower.witness


# --- feed ------------------------------------------------------------------------------


def test_feed_identity_is_content_not_snapshot() -> None:
    row = b'{"row": 7, "value": "x"}'
    first = FEED.decode(Delivery(body=row, snapshot_id="snap-1"))
    again = FEED.decode(Delivery(body=row, snapshot_id="snap-2"))
    assert first.fields == {"snapshot_id": "snap-1"}
    assert identify(FEED, first) == identify(FEED, again)
    assert identify(FEED, first).identity == identify(FEED, first).witness == sha256_hex(row)


def test_feed_payload_is_opaque_bytes() -> None:
    a = identify(FEED, FEED.decode(Delivery(body=b'{"a":1,"b":2}')))
    b = identify(FEED, FEED.decode(Delivery(body=b'{"b":2,"a":1}')))
    assert a.identity != b.identity


def test_empty_feed_row_is_bad_format() -> None:
    assert refusal(FEED, Delivery(body=b"", snapshot_id="snap-1")) == "bad_format"


def test_feed_row_over_the_bound_is_too_large() -> None:
    assert refusal(FEED, Delivery(body=b"x" * (FEED.max_bytes + 1))) == "too_large"


# --- identity without a key ------------------------------------------------------------


def test_key_mode_without_a_key_is_refused() -> None:
    with pytest.raises(Invalid) as refused:
        identify(USSD, Decoded(content=b"H1|1|Kakuma1|MED|3|86|#89", key=None))
    assert refused.value.reason == "missing_key"


def test_identity_digest_is_sha256_of_the_identity() -> None:
    found = identify(USSD, USSD.decode(frame("H1|1|Kakuma1|MED|3|86|#89", "rec1-1")))
    assert found.digest == sha256_hex(b"rec1-1")
