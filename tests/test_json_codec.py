"""The json codec: JSON Pointer identity, witness_ignore, fields, bounds, pure and stored."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oncebox
from conftest import BoxFactory
from oncebox import ConfigError, Delivery, InboxSpec
from oncebox.formats import Invalid, JsonCodec, get_codec
from oncebox.formats.jsonpointer import MISSING, parse, remove, resolve, spell

PROPERTY = settings(max_examples=80, deadline=None)

# -- RFC 6901, section 5: the RFC's own examples -------------------------------------------
RFC_DOCUMENT = json.loads(
    r'{"foo": ["bar", "baz"], "": 0, "a/b": 1, "c%d": 2, "e^f": 3, "g|h": 4, "i\\j": 5,'
    r' "k\"l": 6, " ": 7, "m~n": 8}'
)
RFC_EXAMPLES = [
    ("", RFC_DOCUMENT),
    ("/foo", ["bar", "baz"]),
    ("/foo/0", "bar"),
    ("/", 0),
    ("/a~1b", 1),
    ("/c%d", 2),
    ("/e^f", 3),
    ("/g|h", 4),
    ("/i\\j", 5),
    ('/k"l', 6),
    ("/ ", 7),
    ("/m~0n", 8),
]


@pytest.mark.parametrize(("pointer", "value"), RFC_EXAMPLES)
def test_rfc6901_examples(pointer: str, value: Any) -> None:
    assert resolve(RFC_DOCUMENT, parse(pointer)) == value
    assert spell(parse(pointer)) == pointer


def test_pointer_edges() -> None:
    assert parse("/~01") == ("~1",)  # ~1 is unescaped first: never "/"
    for missing in ("/foo/-", "/foo/01", "/foo/2", "/foo/0/x", "/nope", "/foo/-1"):
        assert resolve(RFC_DOCUMENT, parse(missing)) is MISSING
    for bad in ("foo", "/a~2", "/a~"):
        with pytest.raises(ValueError):
            parse(bad)
    document = {"a": {"b": 1, "c": 2}, "list": [{"x": 1}]}
    remove(document, parse("/a/b"))
    remove(document, parse("/list/0"))  # an array element: never renumbered
    remove(document, parse("/no/such"))
    assert document == {"a": {"c": 2}, "list": [{"x": 1}]}


# -- the codec, pure -------------------------------------------------------------------------
def codec(**settings: Any) -> JsonCodec:
    return get_codec("json").configure(settings, None)  # type: ignore[attr-defined, no-any-return]


def refused(c: JsonCodec, body: bytes | str, key: str | None = None) -> str:
    data = body.encode() if isinstance(body, str) else body
    with pytest.raises(Invalid) as caught:
        c.decode(Delivery(data, key=key))
    return caught.value.reason


ORDER = codec(identity=["/id", "/kind"], witness_ignore=["/attempt", "/meta/received_at"])


def test_pointer_identity_is_the_values_together_typed() -> None:
    decoded = ORDER.decode(Delivery(b'{"id": "o-1", "kind": 2, "total": 5}'))
    assert decoded.key == '["o-1",2]'
    others = [
        b'{"id": "o-1", "kind": "2"}',
        b'{"id": "o-1", "kind": 2.0}',
        b'{"id": "o-2", "kind": 2}',
    ]
    assert all(ORDER.decode(Delivery(b)).key != decoded.key for b in others)
    assert (
        ORDER.name
        == 'json{"identity":["/id","/kind"],"witness_ignore":["/attempt","/meta/received_at"]}'
    )


@pytest.mark.parametrize(
    "body",
    [
        '{"kind": 1}',  # missing
        '{"id": {"n": 1}, "kind": 1}',  # an object
        '{"id": [1], "kind": 1}',  # an array
        '{"id": null, "kind": 1}',
        '{"id": "", "kind": 1}',
    ],
)
def test_a_missing_or_non_scalar_identity_is_refused(body: str) -> None:
    assert refused(ORDER, body) == "missing_identity"


def test_strict_reader_and_shape() -> None:
    assert refused(ORDER, '{"id": "a", "id": "b", "kind": 1}') == "duplicate_member"
    assert refused(ORDER, '{"id": "a", "kind": NaN}') == "non_finite_number"
    assert refused(ORDER, '{"id": "\\ud800", "kind": 1}') == "invalid_unicode"
    assert refused(ORDER, b'{"id": "\xff"}') == "invalid_unicode"
    assert refused(ORDER, "[1, 2]") == "bad_shape"
    assert refused(ORDER, "{") == "bad_json"


def test_bounds_default_to_json_event_and_are_configurable() -> None:
    deep = '{"id": "x", "kind": 1, "n": ' + "[" * 20 + "]" * 20 + "}"
    assert refused(ORDER, deep) == "too_deep"
    assert codec(identity=["/id"], max_depth=30).decode(Delivery(deep.encode())).key == '["x"]'
    big = json.dumps({"id": "x", "kind": 1, "pad": "p" * 65_536}).encode()
    assert refused(ORDER, big) == "too_large" and ORDER.max_bytes == 65_536
    assert codec(identity=["/id"], max_bytes=200_000).decode(Delivery(big)).key == '["x"]'


def test_content_identity_without_pointers_and_key_identity() -> None:
    content = codec()
    assert content.name == "json" and content.identity == "content"
    one = content.decode(Delivery(b'{"a": 1, "b": [1, 2]}'))
    assert one.key is None and one.content == b'{"a":1,"b":[1,2]}'
    keyed = codec(identity="key")
    assert keyed.name == 'json{"identity":"key"}'
    assert keyed.decode(Delivery(b"{}", key="evt-1")).key == "evt-1"
    assert refused(keyed, b"{}") == "missing_key"


def test_fields_are_plain_values_for_apply_steps() -> None:
    c = codec(identity=["/id"], fields={"site": "/where/site", "headcount": "/n", "tags": "/t"})
    decoded = c.decode(Delivery(b'{"id": "a", "where": {"site": "K1"}, "n": 3, "t": [1.5, true]}'))
    assert decoded.fields == {"site": "K1", "headcount": 3, "tags": [1.5, True]}
    assert type(decoded.fields["site"]) is str and type(decoded.fields["headcount"]) is int
    assert refused(c, '{"id": "a", "n": 3, "t": []}') == "missing_field"
    assert refused(c, '{"id": "a", "where": {"site": "\\u0000"}, "n": 3, "t": []}') == "bad_field"


def test_a_field_with_an_integer_past_the_conversion_limit_is_refused() -> None:
    """Found by reliability/fuzz.py's json-codec target: an integer of more than 4,300
    digits in a field made decode raise ValueError (int()'s limit), not Invalid. The
    identity and the witness keep such a number as spelled; only a field cannot."""
    c = codec(identity=["/id"], fields={"n": "/n", "tags": "/t"})
    big = "7" * 4_301
    assert refused(c, f'{{"id": "a", "n": {big}, "t": []}}') == "bad_field"
    assert refused(c, f'{{"id": "a", "n": 1, "t": [{{"x": -{big}}}]}}') == "bad_field"
    kept = codec(identity=["/n"]).decode(Delivery(f'{{"n": {big}}}'.encode()))
    assert kept.key == f"[{big}]" and kept.content == f'{{"n":{big}}}'.encode()
    decoded = c.decode(Delivery(f'{{"id": "a", "n": {big[:4_300]}, "t": [1e5]}}'.encode()))
    assert decoded.fields == {"n": int(big[:4_300]), "tags": [1e5]}


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"identity": "/id"}, "list of JSON Pointers"),
        ({"identity": ["id"]}, "must be empty or start with '/'"),
        ({"identity": []}, "one or more distinct"),
        ({"identity": ["/id", "/id"]}, "one or more distinct"),
        ({"witness_ignore": [""]}, "whole document"),
        ({"witness_ignore": ["/a~2"]}, "followed by 0 or 1"),
        ({"fields": ["/site"]}, "must be a table"),
        ({"fields": {"bad name": "/x"}}, "not a field name"),
        ({"max_bytes": 0}, "max_bytes"),
        ({"max_depth": 1000}, "max_depth"),
        ({"max_depth": True}, "max_depth"),
        ({"identiy": ["/id"]}, "unknown setting"),
    ],
)
def test_bad_settings_are_config_errors(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        codec(**settings)


# -- properties --------------------------------------------------------------------------------
scalars = st.one_of(
    st.text(max_size=12).filter(bool), st.integers(-(10**12), 10**12), st.booleans()
)
leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8))
values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=10,
)


def respell(document: Any, seed: int) -> bytes:
    """The same JSON, its members in another order and other whitespace."""
    rng = random.Random(seed)

    def shuffle(value: Any) -> Any:
        if isinstance(value, dict):
            items = list(value.items())
            rng.shuffle(items)
            return {k: shuffle(v) for k, v in items}
        if isinstance(value, list):
            return [shuffle(v) for v in value]
        return value

    separators = rng.choice([(",", ":"), (", ", ": "), (" ,\n", " :\t")])
    return json.dumps(
        shuffle(document), separators=separators, indent=rng.choice([None, 2])
    ).encode()


@PROPERTY
@given(
    ident=scalars,
    kind=scalars,
    rest=st.dictionaries(st.text(max_size=6), values, max_size=5),
    seed=st.integers(0, 10**6),
)
def test_pointer_identity_is_stable_under_member_order_and_whitespace(
    ident: Any, kind: Any, rest: dict[str, Any], seed: int
) -> None:
    document = {**rest, "id": ident, "kind": kind}
    first = ORDER.decode(Delivery(json.dumps(document).encode()))
    again = ORDER.decode(Delivery(respell(document, seed)))
    assert (first.key, first.content) == (again.key, again.content)


@PROPERTY
@given(
    body=st.dictionaries(st.text(max_size=6), values, max_size=5),
    noise=st.lists(st.one_of(st.none(), values), min_size=2, max_size=2),
    seed=st.integers(0, 10**6),
)
def test_witness_ignore_members_never_change_the_witness(
    body: dict[str, Any], noise: list[Any], seed: int
) -> None:
    c = codec(identity=["/id"], witness_ignore=["/attempt", "/meta/received_at"])
    base = {k: v for k, v in body.items() if k not in ("attempt", "meta")} | {"id": "evt-1"}
    variants = [{**base, "meta": {"queue": "q1"}}]
    for value in noise:  # present with any value, or absent (None)
        variant = {**base, "meta": {"queue": "q1"}}
        if value is not None:
            variant["attempt"] = value
            variant["meta"]["received_at"] = value
        variants.append(variant)
    decoded = [c.decode(Delivery(respell(v, seed))) for v in variants]
    assert len({(d.key, d.content) for d in decoded}) == 1


# -- stored, on every backend -------------------------------------------------------------------
HOOKS = InboxSpec(
    "orders", codec="json", settings={"identity": ["/id"], "witness_ignore": ["/attempt"]}
)


def test_a_redelivery_with_new_noise_is_a_duplicate_other_content_a_conflict(
    make_box: BoxFactory,
) -> None:
    box = make_box([HOOKS])
    first = box.ingest("orders", b'{"id": "o-1", "total": 5, "attempt": 1}')
    again = box.ingest("orders", b'{"attempt": 2, "total": 5,  "id": "o-1"}')
    other = box.ingest("orders", b'{"id": "o-1", "total": 6, "attempt": 3}')
    assert [str(d.verdict) for d in (first, again, other)] == ["accepted", "duplicate", "conflict"]
    assert first.identity == '["o-1"]' and box.record("orders", '["o-1"]') is not None
    missing = box.ingest("orders", b'{"total": 5}')
    assert (str(missing.verdict), missing.reason, missing.may_ack) == (
        "rejected",
        "missing_identity",
        True,
    )


def test_a_changed_pointer_set_is_refused_other_settings_may_change(make_box: BoxFactory) -> None:
    box = make_box([HOOKS])
    box.ingest("orders", b'{"id": "o-1", "total": 5, "attempt": 1}')
    for changed in (
        {"identity": ["/id", "/kind"], "witness_ignore": ["/attempt"]},
        {"identity": ["/id"]},
        {"witness_ignore": ["/attempt"]},
    ):
        with pytest.raises(ConfigError, match="cannot switch"):
            box.declare(InboxSpec("orders", codec="json", settings=changed))
    # Bounds and fields decide admission and effects, not identity: they may change.
    box.declare(
        InboxSpec(
            "orders",
            codec="json",
            settings={
                "identity": ["/id"],
                "witness_ignore": ["/attempt"],
                "max_bytes": 1000,
                "fields": {"total": "/total"},
            },
        )
    )
    again = box.ingest("orders", b'{"id": "o-1", "total": 5, "attempt": 9}')
    assert str(again.verdict) == "duplicate"


def test_the_triage_and_generation_steps_run_on_json_inboxes(make_box: BoxFactory) -> None:
    box = make_box(
        [
            InboxSpec(
                "sessions",
                codec="json",
                apply="triage",
                settings={
                    "identity": ["/session", "/seq"],
                    "fields": {
                        "site": "/site",
                        "need": "/need",
                        "headcount": "/count",
                        "pri": "/pri",
                    },
                },
            ),
            InboxSpec(
                "listings",
                codec="json",
                apply="generation",
                settings={
                    "identity": ["/event_id"],
                    "fields": {"seller_id": "/seller", "sku": "/sku", "marketplace_id": "/market"},
                },
            ),
        ]
    )
    frames = [
        {"session": "s1", "seq": n, "site": "K1", "need": "MED", "count": 3 + n, "pri": 80}
        for n in (1, 2)
    ]
    for f in frames + frames:  # the session retransmitted: never counted twice
        box.ingest("sessions", json.dumps(f).encode())
    assert box.triage("sessions")["headcount"] == 9
    for n in (1, 2):
        box.ingest(
            "listings",
            json.dumps({"event_id": f"e{n}", "seller": "S1", "sku": "K", "market": "M"}).encode(),
        )
    [work] = box.work_keys("listings")
    assert (work.seller_id, work.sku, work.marketplace_id, work.generation) == ("S1", "K", "M", 2)


EXAMPLES = itertools.count()


@pytest.fixture(scope="module")
def stored() -> Iterator[oncebox.Oncebox]:
    """One store for every example (each has an identity of its own)."""
    box = oncebox.open("sqlite:///:memory:", inboxes=[HOOKS])
    yield box
    box.close()


@PROPERTY
@given(
    total=st.integers(0, 10**6),
    attempts=st.lists(st.one_of(st.none(), values), min_size=1, max_size=3),
    seed=st.integers(0, 10**6),
)
def test_witness_ignore_members_never_change_the_stored_verdict(
    stored: oncebox.Oncebox, total: int, attempts: list[Any], seed: int
) -> None:
    document = {"id": f"p-{next(EXAMPLES)}", "total": total}
    verdicts = []
    for attempt in [None, *attempts]:
        redelivered = dict(document) if attempt is None else {**document, "attempt": attempt}
        verdicts.append(str(stored.ingest("orders", respell(redelivered, seed)).verdict))
    assert verdicts == ["accepted"] + ["duplicate"] * len(attempts)
