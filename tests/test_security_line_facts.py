"""The NDJSON line adapter's bounds, read exactly: a lease token or dead letter id up to
the 64-bit bound and none past it, a NUL in any field a store keeps as text, an envelope
nested up to the depth bound and no deeper. Lines are built from the fields themselves,
so each example reaches the check it is about (random text almost never spells a key,
let alone a token), and each bound is tried at its value and one past it.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncebox import Delivery
from oncebox.formats import Unreadable
from oncebox.surfaces.lines import delivery_from_line

CODECS = ["custom", "feed", "json-event", "keyed", "ussd-h1"]

TOKEN_MAX = 2**63 - 1  # lease tokens and dead letter ids are 64-bit in both stores
DEPTH_MAX = 20  # an envelope nested deeper is unreadable
KEY_FIELD = {"ussd-h1": "frame_id"}  # every other codec's key is "key"
FACTS = ("snapshot_id", "device_time", "delivery_id")
NUMBERS = ("lease_token", "dead_letter")
clean_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=6)
# Mostly storable and in range, so that most envelopes are read and their numbers seen.
fact_values = st.none() | clean_text | st.integers() | st.sampled_from(["S\x00", "\x00", "1", "x"])
number_values = (
    st.none()
    | st.integers(-3, 2**64)
    | st.sampled_from([TOKEN_MAX, TOKEN_MAX + 1])
    | st.sampled_from([0, 10**19, -1, "7", 7.0, True])
)


def nested(value: object, depth: int) -> object:
    for _ in range(depth):
        value = [value]
    return value


@st.composite
def fact_envelopes(draw: st.DrawFn) -> dict[str, object]:
    """An envelope every codec finds its body in, carrying keys, facts and numbers."""
    body = draw(clean_text)
    envelope: dict[str, object] = {"frame": body, "payload": body, "body": body}
    for name in ("frame_id", "key", *FACTS, *NUMBERS):
        value = draw(number_values if name in NUMBERS else fact_values)
        if value is not None:
            envelope[name] = value
    nesting = draw(st.sampled_from([0, 0, DEPTH_MAX - 1, DEPTH_MAX]))
    if nesting:  # the envelope's own object is one level more
        envelope["x"] = nested(body, nesting)
    return envelope


def depth_of(value: object) -> int:
    if isinstance(value, dict):
        value = list(value.values())
    return 1 + max(map(depth_of, value), default=0) if isinstance(value, list) else 0


def read_as(codec: str, envelope: dict[str, object], line: bytes) -> Delivery | None:
    """What the adapter must make of a fact envelope's line; None: unreadable."""
    if codec == "json-event":
        return Delivery(body=line)  # the line is the event itself
    texts = {name: envelope.get(name) for name in (KEY_FIELD.get(codec, "key"), *FACTS)}
    facts = [str(value) if value is not None else None for value in texts.values()]
    if depth_of(envelope) > DEPTH_MAX or any("\x00" in (fact or "") for fact in facts):
        return None
    numbers = [envelope.get(name) for name in NUMBERS]
    token, letter = [n if type(n) is int and 0 <= n <= TOKEN_MAX else None for n in numbers]
    body = str(envelope["body"]).encode()
    return Delivery(body, *facts, lease_token=token, dead_letter=letter)


def assert_read_as_it_must_be(codec: str, envelope: dict[str, object]) -> None:
    line = json.dumps(envelope).encode()
    delivery, wanted = delivery_from_line(codec, line), read_as(codec, envelope, line)
    if wanted is None:
        assert type(delivery) is Unreadable and delivery.body == line, (codec, delivery)
    else:
        assert delivery == wanted, (codec, envelope)


@settings(max_examples=150, deadline=None)
@given(codec=st.sampled_from(CODECS), envelope=fact_envelopes())
def test_an_envelope_gives_exactly_the_key_facts_and_numbers_it_carries(
    codec: str, envelope: dict[str, object]
) -> None:
    assert_read_as_it_must_be(codec, envelope)


AT_THE_BOUNDS = {
    **{f"{name} {n}": {name: n} for name in NUMBERS for n in (TOKEN_MAX, TOKEN_MAX + 1)},
    **{f"NUL in {name}": {name: "a\x00"} for name in ("frame_id", "key", *FACTS)},
    **{f"depth {d + 1}": {"x": nested("b", d)} for d in (DEPTH_MAX - 1, DEPTH_MAX)},
}


@pytest.mark.parametrize("members", AT_THE_BOUNDS.values(), ids=AT_THE_BOUNDS)
def test_the_line_adapter_at_its_bounds(members: dict[str, object]) -> None:
    """At each bound and one past it (a NUL in each field that may carry one), for
    every codec: a key field of one codec (frame_id) is a mere member to the others."""
    for codec in ("ussd-h1", "feed", "keyed", "custom"):
        assert_read_as_it_must_be(codec, {"frame": "b", "payload": "b", "body": "b", **members})


NOT_TEXT = {"an object": {"a": 1}, "an array": ["1"], "true": True, "false": False}


@pytest.mark.parametrize("value", NOT_TEXT.values(), ids=NOT_TEXT)
def test_a_key_or_fact_that_is_no_string_nor_number_is_unreadable(value: object) -> None:
    """A key or fact is text (a number counts as its spelling). An object, an array or a
    boolean was written as Python writes it (``{'a': '1'}``, ``True``): a key spelled
    by no sender, the same for ``{"a": 1}`` and ``{"a": "1"}``, so two messages shared
    one identity (a conflict quarantined). Such a line cannot be read."""
    for codec in ("ussd-h1", "feed", "keyed", "custom"):
        for name in (KEY_FIELD.get(codec, "key"), *FACTS):
            envelope = {"frame": "b", "payload": "b", "body": "b", name: value}
            line = json.dumps(envelope).encode()
            delivery = delivery_from_line(codec, line)
            assert type(delivery) is Unreadable and delivery.body == line, (codec, name)
