"""json-event's one-pass decode (``_quick_decode``) gives exactly what the general path
gives: the same canonical bytes, identity key, fields in order and stored fields' text,
or the same refusal, over generated bodies (any member order, spaces and line breaks,
escapes, every spelling of a number, repeated members, deep payloads, keys beyond the
Basic Multilingual Plane, bad times); the reader it rests on trusts no text of the
JSONTestSuite corpus that the strict reader reads otherwise."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncebox.engine.ingest import _FIELDS_ENCODE, fields_json
from oncebox.formats import Delivery, Invalid
from oncebox.formats import json_event as je
from oncebox.formats.canonical import canonical, kept_every_member, quick_canonical_text
from oncebox.formats.strictjson import JsonNumber, loads, quick_read

sys.path.append(str(Path(__file__).resolve().parents[1] / "bench"))  # as test_write_budget.py
from synthetic import json_body

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "testdata" / "JSONTestSuite"
CODEC = je.JsonEventCodec()


class Pairs(list[tuple[str, Any]]):
    """An object written member by member, so that a name may repeat."""


def _string(text: str, escape: bool) -> str:
    out = ['"']
    for char in text:
        if char in '"\\' or char < " ":
            out.append(f"\\u{ord(char):04x}" if escape or char not in '"\\' else "\\" + char)
        elif escape and ord(char) > 0x7E:
            units = char.encode("utf-16-be", "surrogatepass")
            for unit in range(0, len(units), 2):
                out.append(f"\\u{int.from_bytes(units[unit : unit + 2], 'big'):04x}")
        else:
            out.append(char)
    return "".join([*out, '"'])


def write(value: Any, item: str = ",", key: str = ":", escape: bool = False) -> str:
    """A JSON text of ``value`` with the separators asked for, strings escaped beyond
    ASCII or not, numbers as spelled."""
    if isinstance(value, JsonNumber):
        return str(value)
    if isinstance(value, str):
        return _string(value, escape)
    if value is True or value is False or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, dict):
        value = Pairs(value.items())
    if isinstance(value, Pairs):
        members = (write(k, item, key, escape) + key + write(v, item, key, escape)
                   for k, v in value)  # fmt: skip
        return "{" + item.join(members) + "}"
    return "[" + item.join(write(v, item, key, escape) for v in value) + "]"


def _outcome(body: bytes) -> Any:
    try:
        decoded = CODEC.decode(Delivery(body))
    except Invalid as invalid:
        return ("invalid", invalid.reason, invalid.detail)
    # The stored fields, whoever wrote them, are what the engine's encoder writes.
    assert fields_json(decoded) == _FIELDS_ENCODE(dict(decoded.fields))
    return ("ok", decoded.content, decoded.key, list(decoded.fields.items()), decoded.fields_text)


def _general_outcome(body: bytes) -> Any:
    saved = je._quick_decode
    je._quick_decode = lambda text: None
    try:
        return _outcome(body)
    finally:
        je._quick_decode = saved


def _same(body: bytes) -> bool:
    """Assert the two paths agree on ``body``; whether the one-pass decode took it."""
    fast = _outcome(body)
    assert fast == _general_outcome(body)
    try:
        return je._quick_decode(body.decode("utf-8")) is not None
    except UnicodeDecodeError:
        return False


_GOOD: dict[str, Any] = {
    "schema_version": JsonNumber("1"),
    "source": "sp-api",
    "subscription": "sub-eu-1",
    "notification_id": "n-1",
    "seller_id": "SELLER01",
    "sku": "SKU-00001",
    "marketplace_id": "A1PA6795UKMFR9",
    "notification_type": "listing_status_changed",
    "event_time": "2026-02-28T12:00:00Z",
    "payload": {"status": "BUYABLE", "price": JsonNumber("3"), "issues": []},
}

_NUMBERS = ["0", "-0", "7", "-12", "1.0", "-0.0", "2.50", "1e5", "2E+3", "1E-2", "0.1",
            "123456789012345678901234567890", "1e999", "01", "1" * 4400]  # fmt: skip
_EDGES = ["", " ", " a", "a ", "a b", "\x00", "\x1f", "\x7f", "\xa0x", "x\u2028", "é", "\\",
          '"', "/", "\U0001f600", "x" * 256, "x" * 257, "y" * 200, "-0", "a:b", "{[", "\ud800",
          "\U0001f600k", "\uffffk"]  # fmt: skip
_strings = st.one_of(
    st.text("abcXYZ-_:0", min_size=1, max_size=5), st.text(max_size=5), st.sampled_from(_EDGES)
)
_times = st.one_of(
    st.sampled_from(
        [
            "2026-02-28T12:00:00Z",
            "2026-02-30T00:00:00Z",
            "2024-02-29T23:59:59Z",
            "2026-02-28T24:00:00Z",
            "2026-02-28T23:59:60Z",
            "0000-01-01T00:00:00Z",
            "9999-12-31T23:59:59Z",
            "2026-02-28 12:00:00Z",
            "2026-02-28T12:00:00",
            "2026-02-28T12:00:00z",
            "20260228T120000Z....",
            "2026-02-28T12:00:00.5",
            "2026-W09-6T12:00:00Z",
            "2026-02-28T12:00:0\u0663Z",
            "\uff12026-02-28T12:00:00Z",
            "2026-02-28T12:0000+Z",
            "2026-02-28T1200:00Z",
            "2026-02-28T12:00:00+00:00",
        ]
    ),
    st.builds(
        "{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}Z".format,
        st.integers(0, 9999),
        st.integers(0, 99),
        st.integers(0, 35),
        st.integers(0, 30),
        st.integers(0, 61),
        st.integers(0, 61),
    ),
)
_scalars = st.one_of(st.none(), st.booleans(), st.sampled_from(_NUMBERS).map(JsonNumber), _strings)
_values_in = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(_strings, inner, max_size=3)
        | st.lists(
            st.tuples(st.sampled_from([*"abcdefgh", "\U0001f600", "\uffff"]), inner), max_size=3
        ).map(Pairs)
    ),
    max_leaves=8,
)
_objects = st.dictionaries(_strings, _values_in, max_size=4)
# Mostly objects (as a payload must be); now and then anything else.
_payloads = st.one_of(_objects, _objects, _values_in)
_values = st.one_of(
    _strings,
    _times,
    _scalars,
    st.sampled_from(sorted(je.NOTIFICATION_TYPES)),
    st.sampled_from([[], {}, ["a"], JsonNumber("1.0")]),
    st.just(("drop",)),
)
_changes = st.one_of(
    st.just({}),
    st.dictionaries(st.sampled_from([*sorted(je.FIELDS), "extra"]), _values, max_size=2),
)
# A member repeated now and then (a third of the bodies).
_repeats = st.sampled_from([None] * 20 + sorted(je.FIELDS))
_styles = st.sampled_from(
    [(",", ":"), (",", ":"), (",", ":"), (", ", ": "), (",\n", ":"), (",", ":\t"), ("\r\n,", ":")]
)


def _body(
    changes: dict[str, Any], payload: Any, order: list[str], repeat: str | None, style: Any,
    escape: bool,
) -> bytes:  # fmt: skip
    event = dict(_GOOD, payload=payload)
    for name, value in changes.items():
        if value == ("drop",):
            event.pop(name, None)
        else:
            event[name] = value
    members = Pairs((name, event[name]) for name in order if name in event)
    if repeat is not None and repeat in event:  # a member repeated, maybe with the same value
        members.insert(0, (repeat, _GOOD.get(repeat, "x")))
    text = write(members, *style, escape)
    return text.encode("utf-8", "surrogatepass")


@settings(max_examples=600, deadline=None)
@given(
    _changes,
    _payloads,
    st.permutations(sorted(je.FIELDS)),
    _repeats,
    _styles,
    st.booleans(),
)
def test_the_one_pass_decode_is_the_general_decode(
    changes: dict[str, Any], payload: Any, order: list[str], repeat: str | None, style: Any,
    escape: bool,
) -> None:  # fmt: skip
    _same(_body(changes, payload, order, repeat, style, escape))


@settings(max_examples=300, deadline=None)
@given(
    _objects,
    st.permutations(sorted(je.FIELDS)),
    st.one_of(st.just("SKU-1"), st.sampled_from(_EDGES)),
)
def test_usual_bodies_take_the_one_pass_decode(payload: Any, order: list[str], edge: str) -> None:
    """Compact bodies without a backslash: mostly taken by the one-pass decode, always
    as the general path decodes them (and a field of edge characters with them)."""
    event = dict(_GOOD, payload=payload, sku=edge)
    _same(write({name: event[name] for name in order}).encode("utf-8", "surrogatepass"))


def test_the_benchmarks_bodies_take_the_one_pass_decode() -> None:
    for i in range(200):
        assert _same(json_body(i)), i


def _event_text(payload: str, *, tail: str = "", **members: str) -> str:
    event = dict(_GOOD, **members)
    head = write({k: v for k, v in event.items() if k != "payload"})[:-1]
    return f'{head},"payload":{payload}{tail}}}'


# Texts where a repeated member or ``-0`` would change the canonical form by as many
# characters as the whitespace, escapes or quoted numbers beside it: the proof must see
# through each.
_CRAFTED = [
    _event_text('{"k":1,"k":2}'),
    _event_text('{"k":1,      "k":2}'),  # six spaces, the six characters of `"k":1,`
    _event_text('{"k":1,\n\n\n\n\n\n"k":2}'),
    _event_text('{"k":1,\t\t\t\t\t\t"k":2}'),
    _event_text('{"k":"\\u0041","k":2}'),
    _event_text('{"k":[1.0,2.0,3.0],"k":[1.0,2.0,3.0]}'),
    _event_text("[-0]"),
    _event_text('{"a":-0}'),
    _event_text('{"a":-0,"b":1.5}'),  # one character fewer, beside a float
    _event_text('{"a":[-0,-0],"b":"\\/"}'),
    _event_text('{"a":-0.0,"b":-0e1,"c":0}'),
    _event_text("{}", tail=',"source":"sp-api"'),  # a field repeated at the top
    _event_text("{}", tail=',"payload":{}'),
    _event_text("{}", tail=',"schema_version":1'),
    _event_text("{}", tail=',"schema_version":1.0'),
    _event_text('{"\U0001f600":1,"\uffff":2}'),
    _event_text('{"\ud83d\ude00":1,"\uffff":2}'.encode("utf-16", "surrogatepass").decode("utf-16")),
    _event_text('{"a":' + "[" * 18 + "]" * 18 + "}"),  # depth 20: the bound
    _event_text('{"a":' + "[" * 19 + "]" * 19 + "}"),  # depth 21
    _event_text('{"a":' + "{}," * 19 + "[]}"),  # many brackets, not deep
    _event_text('["[[[[[[[[[[[[[[[[[[[[[["]'),  # brackets in a string
    _event_text("{}", event_time="2026-02-28 12:00:00Z"),
    _event_text("{}", event_time="2026-02-29T12:00:00Z"),
    _event_text("{}", event_time="2024-02-29T12:00:00Z"),
    _event_text("{}", sku="a\x7fb"),
    _event_text("{}", sku="caf\u00e9"),
    _event_text("{}", sku="caf\u00e9 "),
    _event_text("{}", sku="a\u2028b"),
    _event_text("{}", sku="x" * 217),  # the six strings 256 characters together
    _event_text("{}", sku="x" * 218),
    _event_text("{}", sku="x" * 256),
    _event_text("{}", sku="x" * 257),
    *(_event_text("{}", schema_version=JsonNumber(n)) for n in ["0", "-0", "2", "10", "1.0"]),
    _event_text("{}", source=""),
    _event_text("[1e999]"),
    _event_text("[NaN]"),
    _event_text("{}", tail=" "),
    " " + _event_text("{}"),
    "\ufeff" + _event_text("{}"),
]


@pytest.mark.parametrize("text", _CRAFTED)
def test_crafted_bodies_decode_as_the_general_path(text: str) -> None:
    _same(text.encode("utf-8", "surrogatepass"))


def test_the_stored_fields_come_written_where_they_need_no_escape() -> None:
    decoded = CODEC.decode(Delivery(json_body(3)))
    assert decoded.fields_text == _FIELDS_ENCODE(decoded.fields)
    for sku in ["caf\u00e9", "a\x7fb", 'a"b', "a\\b"]:  # stored with an escape
        body = write(dict(_GOOD, sku=sku)).encode()
        assert CODEC.decode(Delivery(body)).fields_text is None


def _trusted(text: str) -> str | None:
    """What the one-pass decode would take from ``text`` as its canonical form, or None."""
    read = quick_read(text)
    if read is None:
        return None
    written = quick_canonical_text(read[0], read[1], text)
    if written is None or not kept_every_member(text, written):
        return None
    return written


def _strict(text: str) -> Any:
    try:
        return ("ok", canonical(loads(text, max_depth=10_000)))
    except Invalid as invalid:
        return ("invalid", invalid.reason)


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the JSONTestSuite corpus is shared test data")
def test_the_quick_reader_trusts_only_what_the_strict_reader_reads_alike() -> None:
    paths = sorted(CORPUS.glob("test_parsing/*.json")) + sorted(
        CORPUS.glob("test_transform/*.json")
    )
    assert len(paths) > 300
    trusted = 0
    for path in paths:
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            continue
        written = _trusted(text)
        if written is not None:
            trusted += 1
            assert _strict(text) == ("ok", written.encode("utf-8")), path.name
    assert trusted > 50


@pytest.mark.parametrize(
    "text",
    ['{"a":1,"a":2}', '{"a":1,"a":1}', '{"a":1,  "a":1}', '{"a":1,"b":{"c":1,"c":1}}',
     "[-0]", "[-0,1.5]", "[1.0]", "[-0.0]", '{"a":"-0"}', "[NaN]", "[1e999]", '["\\ud800"]',
     " [1]", "[1] ", "[1]x", "", "\ufeff[1]", '{"\U0001f600":1,"\uffff":2}', '"a"', "-0", "0",
     "[" * 30 + "]" * 30, '{"a":\n1}', "[\t1]"],
)  # fmt: skip
def test_the_quick_reader_on_adversarial_texts(text: str) -> None:
    written = _trusted(text)
    if written is not None:
        assert _strict(text) == ("ok", written.encode("utf-8"))


def _checked(value: Any) -> Any:
    try:
        return ("ok", je.bounded_string(value, "sku"))
    except Invalid as invalid:
        return ("invalid", invalid.reason, invalid.detail)


def _checked_by_rule(value: Any) -> Any:
    try:
        return ("ok", je._bounded_string_by_rule(value, "sku"))
    except Invalid as invalid:
        return ("invalid", invalid.reason, invalid.detail)


_SPACES = [" ", "\t", "\n", "\x0b", "\x1c", "\x85", "\xa0", "\u2000", "\u2028", "\u3000"]


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        _strings,
        st.builds("".join, st.lists(st.sampled_from(["a", "é", *_SPACES, "\x00", "\x7f"]))),
        st.sampled_from([JsonNumber("1"), None, 1, ["a"], "x" * 256 + " "]),
    )
)
def test_a_bounded_string_is_checked_as_rule_by_rule(value: Any) -> None:
    """The apply steps' check of each work key part (every delivery's) accepts at once
    only what the rules one by one accept."""
    assert _checked(value) == _checked_by_rule(value)


@pytest.mark.parametrize("space", _SPACES)
def test_whitespace_around_a_bounded_string_is_refused(space: str) -> None:
    for value in [space + "a", "a" + space, space, "a" + space + "b"]:
        assert _checked(value) == _checked_by_rule(value)
