"""Property tests for the pure formats layer: canonical JSON, cksum and H1 frames."""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import string
import subprocess
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from oncebox.formats import Delivery, Invalid, JsonEventCodec, UssdH1Codec
from oncebox.formats.canonical import canonical, canonical_json
from oncebox.formats.cksum import cksum
from oncebox.formats.strictjson import loads
from oncebox.formats.ussd_h1 import make_frame

# Generated values nest well below this; the depth bound has its own tests.
DEPTH = 64
PURE = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SUBPROCESS = settings(max_examples=40, deadline=None)


# --- a model of JSON text: values plus how each number is spelled ----------------------


@dataclass(frozen=True)
class Num:
    """A JSON number leaf, carried by its exact spelling."""

    spelling: str


def _float_spelling(value: float) -> str:
    return repr(value)  # finite floats: "1.5", "-0.0", "1e+16", "5e-324" are all JSON


numbers = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(_float_spelling),
    st.sampled_from(["0", "-0", "1.0", "1e0", "1E0", "1e+0", "1e-0", "0.10", "12.5e3"]),
).map(Num)

leaves = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=12))

json_values = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(max_size=6), children, max_size=4),
    ),
    max_leaves=25,
)

WHITESPACE = [" ", "\t", "\n", "\r"]


def _ws(rnd: random.Random | None) -> str:
    if rnd is None:
        return ""
    return "".join(rnd.choice(WHITESPACE) for _ in range(rnd.choice([0, 0, 1, 2])))


def _string(text: str, rnd: random.Random | None) -> str:
    # Escaping is spelling, not content: sometimes write every non-ASCII code point as
    # \uXXXX (surrogate pairs beyond the BMP), sometimes escape "/" too.
    spelled = json.dumps(text, ensure_ascii=bool(rnd and rnd.random() < 0.5))
    if rnd is not None and rnd.random() < 0.3:
        spelled = spelled.replace("/", "\\/")
    return spelled


def dump(value: Any, rnd: random.Random | None = None) -> str:
    """JSON text for a model value; with ``rnd``, shuffled members and random whitespace."""
    if isinstance(value, Num):
        return value.spelling
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return _string(value, rnd)
    if isinstance(value, list):
        parts = [_ws(rnd) + dump(item, rnd) + _ws(rnd) for item in value]
        return "[" + _ws(rnd) + ",".join(parts) + "]"
    items = list(value.items())
    if rnd is not None:
        rnd.shuffle(items)
    parts = [
        _ws(rnd) + _string(key, rnd) + _ws(rnd) + ":" + _ws(rnd) + dump(member, rnd) + _ws(rnd)
        for key, member in items
    ]
    return "{" + _ws(rnd) + ",".join(parts) + "}"


def canon(text: str) -> bytes:
    return canonical(loads(text.encode("utf-8"), max_depth=DEPTH))


LeafPath = tuple[Any, ...]


def leaf_paths(value: Any, path: LeafPath = ()) -> list[LeafPath]:
    """Paths to every leaf; an empty container counts as a leaf."""
    if isinstance(value, list) and value:
        return [p for i, item in enumerate(value) for p in leaf_paths(item, (*path, i))]
    if isinstance(value, dict) and value:
        return [p for key, item in value.items() for p in leaf_paths(item, (*path, key))]
    return [path]


def replace_at(value: Any, path: LeafPath, new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, list):
        return [replace_at(item, rest, new) if i == head else item for i, item in enumerate(value)]
    return {k: replace_at(item, rest, new) if k == head else item for k, item in value.items()}


def get_at(value: Any, path: LeafPath) -> Any:
    for step in path:
        value = value[step]
    return value


def other_leaf(leaf: Any) -> Any:
    """A leaf that no JSON reader could take for ``leaf``."""
    if isinstance(leaf, Num):
        return Num("1" if leaf.spelling == "0" else "0")
    if isinstance(leaf, str):
        return leaf + "x"
    if leaf is None:
        return False
    if isinstance(leaf, bool):
        return not leaf
    return {} if isinstance(leaf, list) else []


def respelled(number: Num) -> Num:
    """The same numeric value, spelled differently."""
    spelling = number.spelling
    if "e" in spelling or "E" in spelling:
        mantissa, _, exponent = spelling.replace("E", "e").partition("e")
        return Num(f"{mantissa}E{exponent}" if "e" in spelling else f"{mantissa}e{exponent}")
    return Num(spelling + ("0" if "." in spelling else ".0"))


# --- (a) canonical form ignores member order and whitespace, not values ------------------


@PURE
@given(value=json_values, seed=st.integers())
def test_member_order_and_whitespace_do_not_change_canonical_form(value: Any, seed: int) -> None:
    rnd = random.Random(seed)
    assert canon(dump(value, rnd)) == canon(dump(value))


@PURE
@given(value=json_values, data=st.data())
def test_changing_a_leaf_changes_canonical_form(value: Any, data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(leaf_paths(value)))
    changed = replace_at(value, path, other_leaf(get_at(value, path)))
    assert canon(dump(changed)) != canon(dump(value))


@PURE
@given(value=json_values, data=st.data())
def test_respelling_a_number_changes_canonical_form(value: Any, data: st.DataObject) -> None:
    numbers_in = [p for p in leaf_paths(value) if isinstance(get_at(value, p), Num)]
    assume(numbers_in)
    path = data.draw(st.sampled_from(numbers_in))
    number = get_at(value, path)
    changed = replace_at(value, path, respelled(number))
    assert float(respelled(number).spelling) == float(number.spelling)
    assert canon(dump(changed)) != canon(dump(value))


@PURE
@given(
    # Items of distinct canonical forms and an order that moves one: what the property is
    # about, drawn as such (an assume() threw away most draws, seconds of CPU).
    items=st.lists(json_values, min_size=2, max_size=5, unique_by=lambda v: canon(dump(v))),
    data=st.data(),
)
def test_array_order_changes_canonical_form(items: list[Any], data: st.DataObject) -> None:
    order = data.draw(
        st.permutations(range(len(items))).filter(lambda o: o != sorted(o)), label="order"
    )
    shuffled = [items[i] for i in order]
    assert [canon(dump(item)) for item in items] != [canon(dump(item)) for item in shuffled]
    assert canon(dump(shuffled)) != canon(dump(items))


# --- (b) canonical output is a fixed point --------------------------------------------


@PURE
@given(value=json_values, seed=st.integers())
def test_canonical_form_is_idempotent(value: Any, seed: int) -> None:
    once = canon(dump(value, random.Random(seed)))
    assert canonical(loads(once, max_depth=DEPTH)) == once


@PURE
@given(value=json_values, seed=st.integers())
def test_canonical_form_is_never_longer_than_its_source(value: Any, seed: int) -> None:
    # Why json-event's canonical-size rule cannot fire on input within the raw bound.
    text = dump(value, random.Random(seed)).encode("utf-8")
    assert len(canonical(loads(text, max_depth=DEPTH))) <= len(text)


@PURE
@given(value=json_values, seed=st.integers())
def test_the_fast_canonical_path_gives_the_exact_bytes(value: Any, seed: int) -> None:
    text = dump(value, random.Random(seed))
    assert canonical_json(text) == canon(text)


@pytest.mark.parametrize(
    "text",
    [
        '{"a":"\\u00001","b":1}',  # a string spelled like a marked number
        '{"\\ud83d\\ude00":1,"\\uffff":2}',  # keys beyond the BMP sort by UTF-16
        '{"\U0001f600":1,"\uffff":[1.50,-0,2E+3]}',
        '[1e5,"1e5",{"z":null,"a":true}]',
    ],
)
def test_the_fast_canonical_path_on_texts_that_could_fool_it(text: str) -> None:
    assert canonical_json(text) == canon(text)


# --- (c) cksum agrees with the cksum utility ------------------------------------------

CKSUM = shutil.which("cksum")
needs_cksum = pytest.mark.skipif(CKSUM is None, reason="no cksum utility on PATH")


def system_cksum(data: bytes) -> int:
    assert CKSUM is not None
    out = subprocess.run([CKSUM], input=data, capture_output=True, check=True).stdout
    return int(out.split()[0])


@needs_cksum
@SUBPROCESS
@given(body=st.text(alphabet=string.printable, max_size=300).map(str.encode))
@example(body=b"")
@example(body=b"H1|1|Kakuma1|MED|3|86")
def test_cksum_matches_the_utility_on_printable_text(body: bytes) -> None:
    assert cksum(body) == system_cksum(body)


@needs_cksum
@SUBPROCESS
@given(body=st.binary(min_size=257, max_size=5000))
def test_cksum_matches_the_utility_on_bodies_over_256_bytes(body: bytes) -> None:
    assert cksum(body) == system_cksum(body)


@needs_cksum
@pytest.mark.parametrize("length", [0, 1, 255, 256, 257, 65535, 65536, 65537, 1 << 20])
def test_cksum_matches_the_utility_where_the_length_gains_a_byte(length: int) -> None:
    body = bytes(i * 7 % 251 for i in range(length))
    assert cksum(body) == system_cksum(body)


def test_cksum_known_values() -> None:
    assert cksum(b"") == 4294967295
    assert cksum(b"123456789") == 930766865  # the CRC-32/CKSUM check value, with length


# --- (d) H1 frames: make_frame round-trips, one changed character never passes as itself ---

sites = st.text(alphabet=string.ascii_letters + string.digits, min_size=1, max_size=8)
needs = st.text(alphabet=string.ascii_uppercase, min_size=3, max_size=3)
counts = st.integers(min_value=0, max_value=10**9 - 1)
frames = st.builds(make_frame, counts, sites, needs, counts, counts)
replacements = st.one_of(
    st.characters(min_codepoint=0x20, max_codepoint=0x7E),
    st.sampled_from(["é", "\u0661", "\x00", "\n", "\uff11"]),
)

USSD = UssdH1Codec()
JSON_EVENT = JsonEventCodec()


@PURE
@given(seq=counts, site=sites, need=needs, headcount=counts, pri=counts)
def test_make_frame_always_decodes(
    seq: int, site: str, need: str, headcount: int, pri: int
) -> None:
    text = make_frame(seq, site, need, headcount, pri)
    decoded = USSD.decode(Delivery(body=text.encode(), key="rec"))
    assert decoded.content == text.encode()
    assert decoded.fields == {
        "seq": seq,
        "site": site,
        "need": need,
        "headcount": headcount,
        "pri": pri,
    }


@PURE
@given(text=frames, data=st.data())
def test_one_changed_body_character_never_decodes_to_the_same_content(
    text: str, data: st.DataObject
) -> None:
    body_end = text.rindex("|#")
    index = data.draw(st.integers(min_value=0, max_value=body_end - 1))
    new = data.draw(replacements.filter(lambda char: char != text[index]))
    changed = text[:index] + new + text[index + 1 :]
    original = USSD.decode(Delivery(body=text.encode(), key="rec"))
    try:
        decoded = USSD.decode(Delivery(body=changed.encode(), key="rec"))
    except Invalid as exc:
        assert exc.reason in {"bad_format", "bad_checksum"}
    else:
        # Only a cksum-mod-256 collision gets here; it must still be other content.
        assert decoded.content != original.content
        assert decoded.fields != original.fields


# --- robustness: bad input is refused with Invalid, never with another exception --------


@PURE
@given(data=st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode)))
def test_loads_refuses_garbage_only_with_invalid(data: bytes) -> None:
    with contextlib.suppress(Invalid):
        loads(data)


EVENT = {
    "schema_version": 1,
    "source": "s",
    "subscription": "sub",
    "notification_id": "n",
    "seller_id": "A",
    "sku": "K",
    "marketplace_id": "M",
    "notification_type": "listing_status_changed",
    "event_time": "2026-01-01T00:00:00Z",
    "payload": {},
}


@PURE
@given(name=st.sampled_from(sorted(EVENT)), value=json_values, seed=st.integers())
def test_json_event_refuses_any_bad_field_value_only_with_invalid(
    name: str, value: Any, seed: int
) -> None:
    fields = {**EVENT, "schema_version": Num("1"), name: value}
    text = dump(fields, random.Random(seed))
    with contextlib.suppress(Invalid):
        JSON_EVENT.decode(Delivery(body=text.encode("utf-8")))


@PURE
@given(body=st.binary(max_size=170), key=st.one_of(st.none(), st.text(max_size=10)))
def test_ussd_refuses_garbage_only_with_invalid(body: bytes, key: str | None) -> None:
    try:
        USSD.decode(Delivery(body=body, key=key))
    except Invalid as exc:
        assert exc.reason in {"bad_format", "bad_checksum", "too_large"}
