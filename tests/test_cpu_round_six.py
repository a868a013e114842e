"""The sixth CPU round (a batch's deliveries decoded and identified in one loop) gives
exactly what the general code gives: ``prepare_all`` against ``prepare`` of each delivery
alone, whose identity is ``identify``'s. Over generated mixed batches (Hypothesis,
derandomized), for every built-in codec, content identity and key identity, and user
codecs that refuse, fail, or give no key, content that is no bytes, or a key that is no
text; with and without an apply step's field check."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import event_body
from oncebox.engine import merkle
from oncebox.engine.ingest import Prepared, prepare, prepare_all
from oncebox.engine.steps.generation import WORK_KEY, Generation, check_each
from oncebox.formats import (
    Decoded,
    Delivery,
    Invalid,
    Oversize,
    Unreadable,
    get_codec,
    identify,
)
from oncebox.formats.strictjson import JsonNumber
from oncebox.formats.ussd_h1 import make_frame
from test_log_edge import leaf_of, tree_and_edge

texts = st.none() | st.sampled_from(["", "a", "é", "a\x00b", "\ud800", "k\udcff", "x" * 70])
keys = st.none() | st.sampled_from(["", "0", "1", "k-2", "é", "a\x00b", "\ud800", "x" * 300])


class _UserCodec:
    """A user's codec, answering by the body's first byte: as it should (its key the
    delivery's), with no key, with content that is no bytes, with a key that is no
    text, refusing, or failing."""

    name = "user"
    max_bytes = 64

    def __init__(self, identity: str) -> None:
        self.identity = identity

    def decode(self, delivery: Delivery) -> Decoded:
        how = delivery.body[:1]
        if how == b"r":
            raise Invalid("bad_format", "refused by the user's codec")
        if how == b"f":
            raise ZeroDivisionError("the user's codec failed")
        if how == b"n":
            return Decoded(delivery.body, None)
        if how == b"s":
            return Decoded(delivery.body.decode("latin-1"), "k")  # type: ignore[arg-type]
        if how == b"u":
            return Decoded(delivery.body, "k\udcff")
        return Decoded(delivery.body, delivery.key, {"n": str(len(delivery.body))})


class _BrokenAttribute(_UserCodec):
    """A user codec whose identity mode, or whose decode, fails to be read."""

    def __init__(self, broken: str) -> None:
        super().__init__("key")
        self.broken = broken

    def __getattribute__(self, name: str) -> Any:
        if name == object.__getattribute__(self, "broken"):
            raise RuntimeError(f"the user's codec has no {name} today")
        return object.__getattribute__(self, name)


def _refuse_long(fields: Any) -> None:
    """An apply step's field check: refuses what it cannot hold."""
    if len(fields.get("n", "")) > 1:
        raise Invalid("bad_field", "n is too long")


CODECS: dict[str, Any] = {
    name: get_codec(name) for name in ("keyed", "json-event", "json", "feed", "ussd-h1")
}
CODECS["user-key"] = _UserCodec("key")
CODECS["user-content"] = _UserCodec("content")
CODECS["user-no-identity"] = _BrokenAttribute("identity")
CODECS["user-no-decode"] = _BrokenAttribute("decode")

_user_bodies = st.sampled_from([b"ok", b"r", b"f", b"n", b"s", b"u", b"o" * 20, b"o" * 80])
_bodies = st.one_of(
    st.sampled_from([b"", b"a", b"\x00", b'{"id": 1}', b'{"id": "x"}', b"{", b"x" * 200]),
    _user_bodies,
    st.integers(0, 3).map(lambda n: event_body(f"n-{n}")),
    st.integers(1, 3).map(lambda n: make_frame(n, "Kakuma1", "MED", n, 86).encode()),
)
_one_delivery = st.one_of(
    st.builds(Delivery, _bodies, key=keys),
    st.builds(Delivery, _bodies, key=keys, snapshot_id=texts, device_time=texts,
              delivery_id=texts),
    st.builds(Oversize, st.just(b"head"), key=keys, length=st.just(99), sha256=st.just("ab")),
    st.builds(Unreadable, _bodies, key=keys, detail=st.just("nested"), reason=st.just("bad")),
)  # fmt: skip


def _seen(item: Prepared) -> tuple[Any, ...]:
    """Everything a prepared delivery holds, its refusal by reason and detail."""
    delivery = dataclasses.astuple(item.delivery)
    invalid = None if item.invalid is None else (item.invalid.reason, item.invalid.detail)
    return (type(item.delivery), delivery, item.decoded, item.identity, invalid, item.ident,
            item.witness)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(sorted(CODECS)), st.lists(_one_delivery, max_size=12), st.booleans())
def test_a_batch_prepared_in_one_loop_is_each_delivery_prepared_alone(
    codec_name: str, deliveries: list[Delivery], checked: bool
) -> None:
    """The same decoded delivery, identity (its key or content hash, both digests, as
    bytes and hex), refusal and detail as ``prepare`` alone: a key that is no text, over
    the size bound, no key, a user codec's refusal or bug, content that cannot be hashed,
    a key that cannot be encoded, an apply step's check refusing the fields."""
    codec = CODECS[codec_name]
    check = _refuse_long if checked else None
    together = prepare_all(codec, deliveries, check)
    alone = [prepare(codec, delivery, check) for delivery in deliveries]
    assert [_seen(item) for item in together] == [_seen(item) for item in alone]
    for item in together:
        if item.identity is not None:
            assert item.decoded is not None
            assert item.identity == identify(codec, item.decoded)
            assert (item.ident, item.witness) == (
                item.identity.digest_bytes,
                item.identity.witness_bytes,
            )


def test_the_one_loop_sees_every_kind_of_delivery() -> None:
    """The generated batches reach each branch the loop writes out: decoded by key and
    by content, refused for no key, for a codec's bug, and by the field check."""
    reasons = set()
    for codec_name, body, key in [
        ("keyed", b"a", "1"),
        ("feed", b"a", None),
        ("keyed", b"a", None),
        ("user-key", b"n", None),
        ("user-key", b"s", None),
        ("user-key", b"u", None),
        ("user-key", b"o" * 20, "1"),
    ]:
        (item,) = prepare_all(CODECS[codec_name], [Delivery(body, key=key)], _refuse_long)
        reasons.add(None if item.invalid is None else item.invalid.reason)
    assert reasons == {None, "missing_key", "codec_error", "bad_field"}


@settings(max_examples=300, deadline=None)
@given(
    st.integers(min_value=0, max_value=300),
    st.lists(st.integers(min_value=0, max_value=70), min_size=1, max_size=5),
    st.sampled_from([0, 1, 2, 4]),
    st.lists(st.integers(min_value=0, max_value=9), max_size=4),
)
def test_nodes_built_a_level_at_a_time_are_those_each_leaf_completes(
    start: int, batches: list[int], stride: int, forgotten: list[int]
) -> None:
    """``appended_nodes`` (each level's pairs hashed at once) lists, batch after batch
    from one edge, the nodes ``completed_nodes`` gives leaf by leaf, in its order, only
    the kept levels' with a stride; reads only siblings the edge lacks, each once; and
    leaves the edge the tree has."""
    store, edge = tree_and_edge(start, forgotten)
    size = start
    for count in batches:
        reads: list[tuple[int, int]] = []
        known = set(edge)  # the levels the edge holds before this batch

        def get(level: int, index: int, reads: Any = reads, known: Any = known) -> bytes:
            reads.append((level, index))
            assert level not in known, "a sibling the edge holds was read"
            return store[(level, index)]

        leaves = [leaf_of(index) for index in range(size, size + count)]
        got = merkle.appended_nodes(size, leaves, get, stride, edge)
        expected = []
        for index in range(size, size + count):
            nodes = merkle.completed_nodes(index, leaf_of(index), lambda lv, ix: store[(lv, ix)])
            expected += [n for n in nodes if not stride or (n[0] and not n[0] % stride)]
            store.update(((level, i), value) for level, i, value in nodes)
        assert got == expected
        assert len(reads) == len(set(reads))
        size += count
        assert all(
            size >> lv & 1 and value == store[(lv, (size >> lv) - 1)] for lv, value in edge.items()
        )


_part = st.one_of(
    st.text(max_size=8),
    st.sampled_from(["A1PA6795UKMFR9", " a", "a ", "a b", "\t", "a\x00", "\x7f", "é", "\u2028"]),
    st.sampled_from(["x" * 256, "x" * 257, "", JsonNumber("1")]),
    st.integers(0, 3),
    st.none(),
)
_work_keys = st.dictionaries(
    st.sampled_from(["seller_id", "sku", "marketplace_id", "other"]), _part, max_size=4
)


_usual_part = st.sampled_from(["A1PA6795UKMFR9", "SKU-1", "x" * 256, "é", "a b", "\u00a0"])


def _one_part_off(usual: list[str], off: Any, where: int) -> dict[str, Any]:
    """A work key whose parts are usual, but for the one at ``where``."""
    parts: list[Any] = list(usual)
    parts[where] = off
    return dict(zip(WORK_KEY, parts, strict=True))


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        _work_keys,
        st.builds(_one_part_off, st.lists(_usual_part, min_size=3, max_size=3), _part,
                  st.integers(0, 2)),
    )
)  # fmt: skip
def test_the_generation_steps_check_at_once_is_its_check_name_by_name(
    fields: dict[str, Any],
) -> None:
    """The work key accepted in one expression, or refused with the same reason and
    detail as ``check_each``: parts missing, empty, over 256 characters, with space at
    either end, control or unprintable characters, numbers read as text, no text."""
    assert _refusal(Generation().check_fields, fields) == _refusal(check_each, fields)
    # A mapping with defaults: a part it lacks is missing, whatever its default says.
    with_defaults = defaultdict(lambda: "A1", fields)
    assert _refusal(Generation().check_fields, with_defaults) == _refusal(check_each, fields)
    assert dict(with_defaults) == fields


def _refusal(check: Any, fields: dict[str, Any]) -> tuple[str, str] | None:
    try:
        check(fields)
    except Invalid as exc:
        return exc.reason, exc.detail
    return None
