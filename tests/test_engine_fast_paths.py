"""The per-delivery fast paths give exactly what the plain code they replace gives."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from oncebox.domain import Decision, Verdict
from oncebox.engine import log, merkle
from oncebox.engine.decision import decision_of
from oncebox.formats.cksum import cksum, cksum_bitwise
from oncebox.formats.invalid import Invalid
from oncebox.formats.json_event import (
    FIELDS,
    IDENTITY_FIELDS,
    NOTIFICATION_TYPES,
    WORK_KEY_FIELDS,
    _event_time,
    _plain_string,
    bounded_string,
    identity_key,
    validate_event,
)
from oncebox.formats.jsontext import compact_encoder
from oncebox.formats.strictjson import JsonNumber

texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=20) | st.text(max_size=5)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300)
@given(json_values, st.booleans(), st.booleans())
def test_the_built_once_encoder_writes_the_standard_text(
    value: Any, sort_keys: bool, ensure_ascii: bool
) -> None:
    standard = json.JSONEncoder(
        ensure_ascii=ensure_ascii, sort_keys=sort_keys, separators=(",", ":")
    )
    assert compact_encoder(sort_keys=sort_keys, ensure_ascii=ensure_ascii)(value) == (
        standard.encode(value)
    )


@pytest.mark.parametrize("bad", [{"a": {1, 2}}, {"a": float("nan")}, [b"x"]])
def test_the_built_once_encoder_fails_as_the_standard_one(bad: Any) -> None:
    standard = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=True)
    encode = compact_encoder(sort_keys=True, ensure_ascii=True)
    try:
        expected: Any = standard.encode(bad)
    except Exception as exc:
        expected = (type(exc), str(exc))
    try:
        got: Any = encode(bad)
    except Exception as exc:
        got = (type(exc), str(exc))
    assert got == expected


def test_the_built_once_encoder_refuses_cycles_as_the_standard_one() -> None:
    cyclic: dict[str, Any] = {"a": 1}
    cyclic["self"] = cyclic
    encode = compact_encoder(sort_keys=True, ensure_ascii=True)
    with pytest.raises(ValueError, match="Circular reference detected"):
        encode(cyclic)
    assert encode({"b": [cyclic["a"]]}) == '{"b":[1]}'  # nothing left behind


@settings(max_examples=300)
@given(
    texts,
    st.integers(min_value=0, max_value=2**63),
    st.none() | texts,
    texts,
    st.integers(min_value=0, max_value=2**31),
    st.none() | texts,
)
def test_a_record_state_is_written_as_the_state_encoder_writes_it(
    inbox: str,
    record_id: int,
    identity: str | None,
    witness: str,
    revision: int,
    snapshot_id: str | None,
) -> None:
    expected = log.state_text(
        log.record_state(inbox, record_id, identity, witness, revision, snapshot_id)
    )
    got = log.record_state_text(inbox, record_id, identity, witness, revision, snapshot_id)
    assert got == expected


@settings(max_examples=300)
@given(st.lists(texts, min_size=3, max_size=3))
def test_the_identity_key_is_the_standard_json_array(values: list[str]) -> None:
    fields = dict(zip(IDENTITY_FIELDS, values, strict=True))
    standard = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
    assert identity_key(fields) == standard.encode(values)


def _leaf(i: int) -> bytes:
    return hashlib.sha256(i.to_bytes(4, "big")).digest()


@settings(max_examples=200)
@given(st.integers(min_value=0, max_value=300), st.integers(min_value=0, max_value=70))
def test_appended_nodes_are_the_completed_nodes_of_each_leaf(start: int, count: int) -> None:
    store: dict[tuple[int, int], bytes] = {}
    for index in range(start):
        for level, i, value in merkle.completed_nodes(
            index, _leaf(index), lambda lv, ix: store[(lv, ix)]
        ):
            store[(level, i)] = value
    before = dict(store)
    expected = []
    for index in range(start, start + count):
        nodes = merkle.completed_nodes(index, _leaf(index), lambda lv, ix: store[(lv, ix)])
        expected += nodes
        store.update(((level, i), value) for level, i, value in nodes)
    reads: list[tuple[int, int]] = []

    def get(level: int, index: int) -> bytes:
        reads.append((level, index))
        return before[(level, index)]  # only nodes from before the batch are read

    leaves = [_leaf(index) for index in range(start, start + count)]
    assert merkle.appended_nodes(start, leaves, get) == expected
    assert len(reads) == len(set(reads))


FACTS = {
    "reason": "r",
    "detail": "d",
    "identity": "i",
    "witness": "w",
    "record_id": 7,
    "revision": 2,
    "quarantine_id": 3,
    "first_quarantine": True,
    "dead_letter_id": 4,
    "late_replay": True,
    "log_position": 9,
}


@given(st.sampled_from(list(Verdict)), st.sets(st.sampled_from(sorted(FACTS))))
def test_decision_of_builds_what_the_constructor_builds(verdict: Verdict, names: set[str]) -> None:
    facts = {name: FACTS[name] for name in names}
    made = decision_of("inbox", verdict, **facts)
    expected = Decision("inbox", verdict, False, **facts)
    assert made == expected
    assert made.__dict__ == expected.__dict__
    assert made.to_dict() == expected.to_dict()


@given(
    st.sampled_from(list(Verdict)),
    st.sampled_from([None, "stale_token", "expired_lease", "bad_format", "late_replay"]),
    st.none() | st.integers(min_value=1, max_value=99),
    st.none() | st.integers(min_value=1, max_value=99),
)
def test_committed_is_a_replace(
    verdict: Verdict, reason: str | None, stored: int | None, position: int | None
) -> None:
    decision = Decision("inbox", verdict, False, reason=reason, log_position=stored)
    expected = dataclasses.replace(
        decision,
        may_ack=reason not in ("stale_token", "expired_lease"),
        log_position=position if position is not None else stored,
    )
    got = decision.committed(position)
    assert got == expected
    assert got.__dict__ == expected.__dict__
    assert decision.may_ack is False  # the original is untouched
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.may_ack = False  # type: ignore[misc]


@settings(max_examples=500)
@given(st.binary(max_size=600))
def test_cksum_through_zlib_is_the_bitwise_definition(data: bytes) -> None:
    assert cksum(data) == cksum_bitwise(data)


@pytest.mark.parametrize("length", [0, 1, 255, 256, 257, 65535, 65536, 65537])
def test_cksum_through_zlib_where_the_length_gains_a_byte(length: int) -> None:
    data = bytes(i * 7 % 251 for i in range(length))
    assert cksum(data) == cksum_bitwise(data)


def _validate_reference(event: Any) -> dict[str, Any]:
    """validate_event as it was written before its fast path, rule by rule."""
    if not isinstance(event, dict):
        raise Invalid("bad_shape", "an event must be a JSON object")
    unknown = sorted(set(event) - FIELDS)
    if unknown:
        raise Invalid("unknown_field", f"unknown field(s): {', '.join(unknown)[:200]}")
    missing = sorted(FIELDS - set(event))
    if missing:
        raise Invalid("missing_field", f"missing field(s): {', '.join(missing)}")
    if event["schema_version"] != JsonNumber("1") or not isinstance(
        event["schema_version"], JsonNumber
    ):
        raise Invalid("bad_schema_version", "schema_version must be the integer 1")
    fields = {name: bounded_string(event[name], name) for name in IDENTITY_FIELDS + WORK_KEY_FIELDS}
    kind = event["notification_type"]
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


def _outcome(validate: Any, event: Any) -> Any:
    try:
        return validate(event)
    except Invalid as invalid:
        return (invalid.reason, invalid.detail)


field_values = (
    st.sampled_from(["sp-api", "a", " a", "a ", "\u00a0a", "a\u2028", "a\x1fb", "", "x" * 256])
    | st.text(max_size=10)
    | st.text(min_size=255, max_size=258)
    | st.builds(JsonNumber, st.sampled_from(["1", "1.0", "2"]))
    | st.just({})
    | st.just([])
    | st.none()
)
VALID_EVENT: dict[str, Any] = {
    "schema_version": JsonNumber("1"),
    "source": "sp-api",
    "subscription": "sub-eu-1",
    "notification_id": "n-1",
    "seller_id": "S1",
    "sku": "SKU-1",
    "marketplace_id": "A1",
    "notification_type": "listing_status_changed",
    "event_time": "2026-02-28T03:25:45Z",
    "payload": {},
}


# 300 examples: five mutants of the fast path (a bound off by one, either end's whitespace
# or the control characters unchecked, isinstance for type) are caught at 300 as at 1,000
# where they are caught at all; the bound is pinned by the next test's examples.
@settings(max_examples=300)
@given(
    st.dictionaries(
        st.sampled_from([*sorted(FIELDS), "extra"]), field_values | st.sampled_from(["1"])
    ),
    st.sets(st.sampled_from([*sorted(FIELDS), "extra"])),
)
def test_validate_event_decides_as_rule_by_rule(changes: dict[str, Any], drop: set[str]) -> None:
    event = {**VALID_EVENT, **changes}
    for name in drop:
        event.pop(name, None)
    assert _outcome(validate_event, event) == _outcome(_validate_reference, event)


@settings(max_examples=300)
@given(st.text(max_size=300) | field_values)
@example("x" * 256)
@example("x" * 257)
def test_a_plain_string_is_one_the_rules_accept(value: Any) -> None:
    if _plain_string(value):
        assert bounded_string(value, "source") == value
