"""The fourth CPU round (a batch's own loops) gives exactly what the general code gives:
the walk's loop against each delivery fenced, refused or decided on its own; a batch
prepared in one loop against each delivery prepared alone; the new records' state texts
against ``record_state_text``; a batch's seal events made at once against the general
loop over its outcomes; record rows with their log positions against the records
rebuilt with them. Each over generated batches (Hypothesis, derandomized)."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import oncebox
from helpers import event_body
from oncebox.domain import Arrival, NewRecord, Stored, Verdict
from oncebox.engine import decide, leases, log, replay
from oncebox.engine.ingest import _FIELDS_ENCODE, Prepared, prepare, prepare_all
from oncebox.engine.walk import Walk
from oncebox.formats import Delivery, Oversize, Unreadable, get_codec
from oncebox.formats.jsontext import sorted_ascii_strings
from oncebox.formats.webhooks import Verified
from oncebox.store import open_store
from oncebox.store.sqltx import SqlTx
from oncebox.store.sqltx.records import RecordsSql

texts = st.none() | st.sampled_from(["", "a", "é", "a\x00b", "\ud800", "k\udcff", "x" * 70])
keys = st.integers(0, 4).map(str)
bodies = st.sampled_from([b"a", b"b", b"", b"\x00", b'{"id": 1}', b"ccc", b"dddd"])


def _walk_state(walk: Walk) -> tuple[Any, ...]:
    return (walk.outcomes, walk.records, walk.firsts, walk.repeats, walk.late,
            walk.newcomers, walk.letters, walk.seen)  # fmt: skip


_FACTS: list[dict[str, Any]] = [
    {},
    {"snapshot_id": "s"},
    {"device_time": "t"},
    {"delivery_id": "d"},
    {"signature": Verified("github", None, None, False)},
]


def _item(codec_name: str, key: str | None, body: bytes) -> Prepared:
    """A keyed delivery (with one transport fact or none, by its body), or a json-event
    one (its notification id the key, ``body`` its payload's status, one that is no text
    an invalid event): events have fields."""
    if codec_name == "keyed":
        facts = _FACTS[len(body) % len(_FACTS)] if body != b"a" else {}
        return prepare(get_codec("keyed"), Delivery(body, key=key, **facts))
    status = body.decode("latin-1")
    text = event_body(key or "", payload={"status": status}) if body != b"\x00" else b"{"
    return prepare(get_codec("json-event"), Delivery(text))


@settings(max_examples=300)
@given(
    st.sampled_from(["keyed", "json-event"]),
    st.lists(st.tuples(st.none() | keys, bodies, st.booleans()), max_size=14),
    st.dictionaries(
        keys,
        st.tuples(bodies, st.none() | st.integers(1, 99), st.booleans()),
    ),
    st.sampled_from(["stale_token", "expired_lease"]),
)
def test_the_walks_loop_decides_as_each_delivery_alone(
    codec_name: str,
    deliveries: list[tuple[str | None, bytes, bool]],
    stored_as: dict[str, tuple[bytes, int | None, bool]],
    reason: str,
) -> None:
    """``Walk.walk`` (new deliveries and plain repeats in line) leaves what ``fence``,
    ``reject`` and ``decide`` leave called one by one: new (with fields or none),
    repeated in the batch, repeating a stored record or a tombstone (a late replay),
    conflicting, refused, fenced out."""
    stored = {}
    for key, (body, log_seq, evicted) in stored_as.items():
        item = _item(codec_name, key, body)
        if item.ident is None or item.witness is None:
            continue
        stored[item.ident] = Stored(100 + int(key), item.ident, item.witness, 1,
                                    5.0 if evicted else None, 1.0, log_seq)  # fmt: skip
    items = [_item(codec_name, key, body) for key, body, _ in deliveries]
    fenced = {i: reason for i, (_, _, out) in enumerate(deliveries) if out}
    together = Walk(stored, range(1000, 1100))
    together.walk(items, fenced, 10.0)
    alone = Walk(stored, range(1000, 1100))
    for index, item in enumerate(items):
        if index in fenced:
            alone.fence(item, reason, leases.fence_detail(reason, item.delivery))
        elif item.ident is None:
            alone.reject(index, item)
        else:
            alone.decide(index, item, 10.0)
    assert _walk_state(together) == _walk_state(alone)
    if codec_name == "json-event" and together.records:
        assert NewRecord(*together.records[0]).fields != "{}"


@dataclasses.dataclass(frozen=True)
class _Other(Delivery):
    """A delivery of another type: :func:`prepare` takes its general path."""


def _prepared(item: Any) -> tuple[Any, ...]:
    delivery = dataclasses.astuple(item.delivery)
    invalid = None if item.invalid is None else (item.invalid.reason, item.invalid.detail)
    return (type(item.delivery), delivery, item.decoded, item.identity, invalid, item.ident,
            item.witness)  # fmt: skip


class _Broken:
    """A user codec with a bug: its decode raises something other than Invalid."""

    name = "broken"
    identity = "key"
    max_bytes = 10

    def decode(self, delivery: Delivery) -> Any:
        raise KeyError(delivery.body)


_one_delivery = st.one_of(
    st.builds(Delivery, bodies | st.binary(max_size=30), key=texts, snapshot_id=texts,
              device_time=texts, delivery_id=texts),
    st.builds(Delivery, bodies, key=keys, snapshot_id=texts),
    st.builds(Delivery, bodies, key=keys, device_time=texts),
    st.builds(Delivery, bodies, key=keys, delivery_id=texts),
    st.builds(Delivery, st.sampled_from([b"x" * 11, b"x" * 70_000, b"{}" * 6]), key=keys),
    st.builds(lambda n: Delivery(event_body(n)), keys),
    st.builds(Oversize, st.just(b"head"), key=keys, length=st.just(99), sha256=st.just("ab")),
    st.builds(Unreadable, bodies, key=keys, detail=st.just("nested"), reason=st.just("bad")),
    st.builds(_Other, bodies, key=texts),
)  # fmt: skip


@settings(max_examples=300)
@given(st.sampled_from(["keyed", "json-event", "json", "broken"]), st.lists(_one_delivery))
def test_a_batch_is_prepared_as_each_delivery_alone(
    codec_name: str, deliveries: list[Delivery]
) -> None:
    """``prepare_all`` (the usual deliveries decoded in its own loop) gives what
    ``prepare`` gives each delivery: decoded, refused (bad format, a missing key, over
    the bound, a key or fact that is no text, a codec's own bug), escaped, in order."""
    codec: Any = _Broken() if codec_name == "broken" else get_codec(codec_name)
    together = prepare_all(codec, deliveries)
    alone = [prepare(codec, delivery) for delivery in deliveries]
    assert [_prepared(i) for i in together] == [_prepared(i) for i in alone]


_names = st.text(max_size=6) | st.sampled_from(['a"b', "50%", "%s", "\\", "\u2028", "\ud800x"])


@settings(max_examples=300)
@given(
    _names,
    st.lists(
        st.tuples(
            st.integers(0, 2**63) | st.sampled_from([True, 1.0]),
            st.none() | _names,
            st.binary(min_size=32, max_size=32),
            st.none() | _names,
        ),
        max_size=6,
    ),
)
def test_first_revision_states_are_the_record_state_texts(
    inbox: str, records: list[tuple[Any, str | None, bytes, str | None]]
) -> None:
    """A batch's new records' state texts, written with the inbox quoted once, are
    ``record_state_text``'s (and so ``state_text``'s) for each: names with quotes,
    percent signs, backslashes, separators, lone surrogates; ids that are not ints."""
    made = [NewRecord(record_id, b"", identity, witness, b"", "{}", Arrival(snapshot_id=snap))
            for record_id, identity, witness, snap in records]  # fmt: skip
    texts = [log.record_state_text(inbox, r.id, r.identity, r.witness.hex(), 1,
                                   r.arrival.snapshot_id) for r in made]  # fmt: skip
    assert log.first_revision_states(inbox, made) == texts
    for record, text in zip(made, texts, strict=True):
        if type(record.id) is int:
            state = log.record_state(inbox, record.id, record.identity, record.witness.hex(),
                                     1, record.arrival.snapshot_id)  # fmt: skip
            assert text == log.state_text(state)


@settings(max_examples=200)
@given(st.lists(st.tuples(keys, bodies), max_size=14), st.integers(1, 9))
def test_a_batchs_seal_events_are_the_general_loops(
    deliveries: list[tuple[str, bytes]], inbox_id: int
) -> None:
    """Where a batch has no newcomer and no delivery again, its seal events, made at
    once from the new records (one each, in record order), are the ones the general loop
    over its outcomes makes: the same steps, states, records and order."""
    codec = get_codec("keyed")
    walk = Walk({}, range(1000, 1100))
    walk.walk([prepare(codec, Delivery(body, key=key)) for key, body in deliveries], {}, 1.0)
    if walk.newcomers:
        return  # a conflict inside the batch: the general loop's alone
    states = log.first_revision_states("k", walk.records)
    at_once = decide._seal_events(inbox_id, walk.records, states)
    general = decide._events(None, inbox_id, "k", walk, states, [], set(), 1.0, None)  # type: ignore[arg-type]
    assert at_once == general
    assert [e.record_id for e in at_once] == [NewRecord(*r).id for r in walk.records]


_arrivals = st.sampled_from(
    [Arrival(), Arrival("t", "s", "d", "g"), Arrival(None, "s"), Arrival(signature="g")]
)


@settings(max_examples=200)
@given(
    st.lists(st.tuples(_arrivals, st.none() | st.integers(1, 9)), max_size=8),
    st.none() | st.dictionaries(st.integers(0, 9), st.integers(100, 200)),
)
def test_record_rows_with_positions_are_the_rebuilt_records_rows(
    records: list[tuple[Arrival, int | None]], positions: dict[int, int] | None
) -> None:
    """``_record_rows`` given the log positions (read once per run of one arrival) gives
    the rows of the records rebuilt with them as their ``log_seq``, as before."""
    made = [NewRecord(i, b"i", f"k{i}", b"w", b"c", "{}", arrival, log_seq, f"key{i}")
            for i, (arrival, log_seq) in enumerate(records)]  # fmt: skip
    rebuilt = made if positions is None else [r._replace(log_seq=positions.get(r.id)) for r in made]
    expected = [
        (r.id, 7, r.ident, r.identity, r.witness, r.content, r.fields, 2.0, 2.0,
         r.arrival.device_time, r.arrival.snapshot_id, r.arrival.delivery_id,
         r.arrival.signature, r.log_seq, r.key)
        for r in rebuilt
    ]  # fmt: skip
    assert RecordsSql._record_rows(7, made, 2.0, positions) == expected


def test_an_event_states_text_is_json() -> None:
    """The template's text reads back as the state it writes."""
    record = NewRecord(5, b"", '["a","\\"b"]', b"\x01" * 32, b"", "{}", Arrival(None, "s%1"))
    (text,) = log.first_revision_states('in"box%', [record])
    assert json.loads(text) == {
        "identity": '["a","\\"b"]',
        "inbox": 'in"box%',
        "record": 5,
        "revision": 1,
        "snapshot_id": "s%1",
        "witness": "01" * 32,
    }


class _Letters:
    """The dead letters a batch may name: ids 1 to 6, of inbox 1 (odd) or 2 (even)."""

    def get_dead_letter(self, letter_id: int) -> Any:
        return SimpleNamespace(id=letter_id, inbox_id=2 - letter_id % 2) if letter_id <= 6 else None


@settings(max_examples=200)
@given(st.lists(st.none() | st.integers(1, 8), max_size=10))
def test_the_dead_letters_a_batch_names_are_found_among_its_others(
    named: list[int | None],
) -> None:
    """``replay.held`` (which looks for named dead letters at C speed) finds every
    delivery again of this inbox, at its index, however many others the batch holds."""
    codec = get_codec("keyed")
    items = [prepare(codec, Delivery(b"a", key="k", dead_letter=n)) for n in named]
    expected = {i: n for i, n in enumerate(named) if n is not None and n <= 6 and n % 2}
    held = replay.held(_Letters(), 1, items)  # type: ignore[arg-type]
    assert {i: letter.id for i, letter in held.items()} == expected


def test_the_stored_fields_writers_beyond_their_bound() -> None:
    """Past the 256 name sets the writers are kept for, and for name sets of one length,
    the stored fields are the encoder's still."""
    for n in range(300):
        fields = {f"a{n}": "x", f"b{n % 7}": f"y{n}", "c": "z%s"}
        assert sorted_ascii_strings(fields) == _FIELDS_ENCODE(fields)
        assert sorted_ascii_strings(dict(reversed(fields.items()))) == _FIELDS_ENCODE(fields)


@settings(max_examples=30)
@given(st.lists(st.tuples(keys, bodies), min_size=1, max_size=12), st.integers(1, 3))
def test_a_batchs_decisions_and_records_name_their_seals(
    deliveries: list[tuple[str, bytes]], batches: int
) -> None:
    """Each accepted delivery's log position, given by the seal its batch appended, is
    the log entry sealing its record, and the record keeps it: what a feed reader and a
    proof start from."""
    box = oncebox.open("sqlite:///:memory:", inboxes=[oncebox.InboxSpec("k", codec="keyed")])
    try:
        for _ in range(batches):
            batch = [Delivery(body, key=key) for key, body in deliveries]
            for decision in box.ingest_batch("k", batch):
                if decision.verdict is not Verdict.ACCEPTED:
                    continue
                assert decision.log_position is not None
                with box.store.reading() as tx:
                    (entry,) = tx.log_entries(decision.log_position, decision.log_position + 1)
                    record = tx.get_record(decision.record_id)
                assert entry.step == "accept"
                assert json.loads(entry.state)["record"] == decision.record_id
                assert record is not None and record.log_seq == decision.log_position
    finally:
        box.close()


@settings(max_examples=50)
@given(
    st.lists(st.integers(1, 60), unique=True, max_size=5),
    st.none() | st.integers(0, 90),
    st.integers(1, 40),
)
def test_sqlite_reserves_the_ids_its_statement_made(
    ids: list[int], dropped: int | None, n: int
) -> None:
    """SQLite's ``reserve_record_ids`` (the first id read, the others counted on in
    Python) gives the ids the general statement makes one row each: after the records
    there are, and after the highest one retention dropped."""
    store = open_store("sqlite:///:memory:")
    try:

        def reserve(tx: Any) -> tuple[list[int], list[int]]:
            tx.execute("INSERT INTO inboxes (name, codec, apply) VALUES ('a', 'keyed', 'none')")
            for i in ids:
                tx.execute(
                    "INSERT INTO records (id, inbox_id, ident, identity, witness, content, "
                    "fields, first_seen, last_seen) VALUES (?, 1, ?, 'k', x'00', x'', '{}', 1, 1)",
                    (i, i.to_bytes(32, "big")),
                )
            if dropped is not None:
                tx.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES ('record_ids_used', ?)",
                    (str(dropped),),
                )
            return tx.reserve_record_ids(n), SqlTx.reserve_record_ids(tx, n)

        reserved, made = store.atomic(reserve)
        assert reserved == made
    finally:
        store.close()
