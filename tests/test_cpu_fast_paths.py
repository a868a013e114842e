"""Issue 24's CPU fast paths give exactly what the general code beside them gives: the
decisions of accepted deliveries and plain duplicates, a delivery prepared without the
checks its plain shape needs none of, the one-identity record lookup, the log's entries
hashed in line, and the canonical form written from what the strict reader read (no
second parse), over generated texts and the whole JSONTestSuite corpus."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oncebox
from oncebox.domain import Decision, LogEntry, LogEvent, Stored, Verdict
from oncebox.engine import decide, log, merkle
from oncebox.engine.decide import Walk
from oncebox.engine.decided import Decided
from oncebox.engine.ingest import prepare
from oncebox.formats import Delivery, Invalid, get_codec
from oncebox.formats.canonical import canonical, canonical_json, canonical_read
from oncebox.formats.json_event import MAX_DEPTH
from oncebox.formats.strictjson import loads

facts_text = st.none() | st.sampled_from(["", "a", "é", "a\x00b", "\ud800", "k\udcff", "x" * 70])


@settings(max_examples=200)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.sampled_from([b"a", b"b"])), max_size=12),
    st.dictionaries(
        st.integers(0, 3),
        st.tuples(st.sampled_from([b"a", b"b"]), st.none() | st.integers(1, 99), st.booleans()),
    ),
    st.booleans(),
)
def test_quick_decisions_are_the_general_ones(
    deliveries: list[tuple[int, bytes]],
    stored_as: dict[int, tuple[bytes, int | None, bool]],
    sealed_after: bool,
) -> None:
    """An accepted delivery's and a plain duplicate's decision, made in line over the
    verdict's template (``quick_decisions``), is the one the general ``_decision`` makes:
    the same facts in the same order (the HTTP answer writes them as they are held)."""
    codec = get_codec("keyed")
    stored = {}
    for key, (body, log_seq, evicted) in stored_as.items():
        item = prepare(codec, Delivery(body, key=str(key)))
        assert item.ident is not None and item.witness is not None
        stored[item.ident] = Stored(100 + key, item.ident, item.witness, 1 + key % 2,
                                    5.0 if evicted else None, 1.0, log_seq)  # fmt: skip
    walk = Walk(stored, range(1000, 1100))
    for index, (key, body) in enumerate(deliveries):
        walk.decide(index, prepare(codec, Delivery(body, key=str(key))), 10.0)
    kept = [(500 + row, True) for row in range(len(walk.newcomers))]
    decided = Decided("k", walk, kept, [], set(), {})
    sealed = {s.id: 9000 + s.id for s in stored.values() if s.log_seq is None}
    if sealed_after:
        sealed.update({r[0]: 7000 + r[0] for r in walk.records})  # by record id
    quick = decided.decisions(sealed)
    general = [decided._decision(i, o, sealed) for i, o in enumerate(walk.outcomes)]
    assert [list(d.__dict__.items()) for d in quick] == [list(d.__dict__.items()) for d in general]
    assert quick == [Decision(**d.__dict__) for d in general]


@dataclasses.dataclass(frozen=True)
class _Other(Delivery):
    """A delivery of another type: :func:`prepare` takes its general path."""


def _prepared(item: Any) -> tuple[Any, ...]:
    delivery = dataclasses.astuple(item.delivery)
    invalid = None if item.invalid is None else (item.invalid.reason, item.invalid.detail)
    return (delivery, item.decoded, item.identity, invalid, item.ident, item.witness)


@settings(max_examples=300)
@given(
    st.sampled_from(["keyed", "json-event", "json"]),
    st.binary(max_size=40) | st.sampled_from([b'{"id": 1}', b"x" * 70_000]),
    facts_text,
    facts_text,
    facts_text,
    facts_text,
)
def test_prepare_decides_as_its_general_path(
    codec_name: str,
    body: bytes,
    key: str | None,
    snapshot_id: str | None,
    device_time: str | None,
    delivery_id: str | None,
) -> None:
    codec = get_codec(codec_name)
    facts: dict[str, Any] = {"key": key, "snapshot_id": snapshot_id, "device_time": device_time,
             "delivery_id": delivery_id}  # fmt: skip
    fast = prepare(codec, Delivery(body, **facts))
    general = prepare(codec, _Other(body, **facts))
    assert _prepared(fast) == _prepared(general)


def test_single_and_batched_lookups_decide_alike() -> None:
    """A batch of one finds its record by the identity itself (SQLite's ``find_record``),
    a larger batch through the JSON array: the same decisions and counts either way."""
    box = oncebox.open("sqlite:///:memory:", inboxes=[oncebox.InboxSpec("k", codec="keyed")])
    try:
        first = box.ingest("k", oncebox.Delivery(b"a", key="1"))
        again = box.ingest("k", oncebox.Delivery(b"a", key="1"))
        other = box.ingest("k", oncebox.Delivery(b"b", key="1"))
        batch = box.ingest_batch("k", [oncebox.Delivery(b"a", key="1"),
                                       oncebox.Delivery(b"c", key="2")])  # fmt: skip
        assert first.verdict is Verdict.ACCEPTED
        assert again.verdict is Verdict.DUPLICATE and again.record_id == first.record_id
        assert again.log_position == first.log_position is not None
        assert other.verdict is Verdict.CONFLICT and other.record_id == first.record_id
        assert [d.verdict for d in batch] == [Verdict.DUPLICATE, Verdict.ACCEPTED]
        assert batch[0].record_id == first.record_id
        assert box.ingest("k", oncebox.Delivery(b"c", key="2")).record_id == batch[1].record_id
        assert first.record_id is not None
        stored = box.record(first.record_id)
        assert stored is not None and stored.seen_count == 3
    finally:
        box.close()


class _Chain:
    """The log's port in memory, for :func:`log.chain` alone."""

    log_edge: Any = None
    log_block_at_hand = False

    def __init__(self) -> None:
        self.entries: list[LogEntry] = []
        self.nodes: dict[tuple[int, int], bytes] = {}

    def log_head(self) -> LogEntry | None:
        return self.entries[-1] if self.entries else None

    def append_log(self, entries: Sequence[LogEntry]) -> None:
        self.entries += entries

    def log_entries(self, start: int, end: int) -> list[LogEntry]:
        return [e for e in self.entries if start <= e.seq < end]

    def merkle_nodes(self, level: int, start: int, end: int) -> list[bytes]:
        return [self.nodes[(level, i)] for i in range(start, end)]

    def put_merkle_nodes(self, nodes: Sequence[tuple[int, int, bytes]]) -> None:
        self.nodes.update(((level, index), node) for level, index, node in nodes)


@settings(max_examples=60)
@given(
    st.lists(
        st.lists(st.tuples(st.sampled_from(["accept", "lease"]), st.text(max_size=8)),
                 min_size=1, max_size=40),
        min_size=1, max_size=5,
    )
)  # fmt: skip
def test_chained_entries_hash_as_their_definitions(batches: list[list[tuple[str, str]]]) -> None:
    """Each appended entry's chain hash is ``chain_hash`` of the one before, its leaf is
    ``leaf_of``, and the kept Merkle nodes are those of the tree over those leaves."""
    tx = _Chain()
    for batch in batches:
        log.chain(tx, [LogEvent(step, state) for step, state in batch])  # type: ignore[arg-type]
    prev = log.GENESIS
    for seq, entry in enumerate(tx.entries, 1):
        assert entry.seq == seq
        assert entry.hash == log.chain_hash(prev, entry.step, entry.state)
        prev = entry.hash
    leaves = [log.leaf_of(entry) for entry in tx.entries]
    for (level, index), node in tx.nodes.items():
        assert node == merkle.root_of(leaves[index << level : (index + 1) << level])


@settings(max_examples=60)
@given(
    st.lists(
        st.lists(st.sampled_from(["accept", "lease"]), min_size=1, max_size=40),
        min_size=1, max_size=6,
    )
)  # fmt: skip
def test_an_edge_begun_on_the_whole_block_is_filled_whole(batches: list[list[str]]) -> None:
    """Where the log's last block and kept nodes are at hand (a PostgreSQL seal sent
    them), an append whose memo was lost (another connection appended) leaves an edge
    that lacks nodes, and the next, whose memo holds, fills it whole: one node per bit
    of the log's size, each the root of its leaves, so that the seal after it may be
    sent the log's head alone. The log and nodes are those of appends that kept their
    memo."""
    kept, filled = _Chain(), _Chain()
    filled.log_block_at_hand = True
    for batch in batches:
        events = [LogEvent(step, "s") for step in batch]
        log.chain(kept, events[:1])  # type: ignore[arg-type]
        log.chain(kept, events[1:])  # type: ignore[arg-type]
        filled.log_edge = None  # lost: another connection appended, say
        log.chain(filled, events[:1])  # type: ignore[arg-type]
        # Not filled where the memo did not hold: only the node the new leaf closes.
        assert len(filled.log_edge[2]) == 1
        log.chain(filled, events[1:])  # type: ignore[arg-type]
        size, _, edge = filled.log_edge
        leaves = [log.leaf_of(entry) for entry in filled.entries]
        assert sorted(edge) == [level for level in range(size.bit_length()) if size >> level & 1]
        for level, node in edge.items():
            index = (size >> level) - 1
            assert node == merkle.root_of(leaves[index << level : (index + 1) << level])
    assert filled.entries == kept.entries and filled.nodes == kept.nodes


class _Num(str):
    """A number as it is to be spelled in a generated text."""


_numbers = st.one_of(
    st.integers(min_value=-(10**25), max_value=10**25).map(str),
    st.sampled_from(["0", "-0", "1.0", "1.50", "1e0", "1E+2", "-2.5e-3", "0.10", "1e999"]),
).map(_Num)
_texts = st.text(max_size=5) | st.sampled_from(["\U0001f600", "\uffff", "a\u2028", "\x00", "é"])
_values = st.recursive(
    st.none() | st.booleans() | _numbers | _texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_texts, inner, max_size=4),
    max_leaves=20,
)


def _dump(value: Any, ascii_only: bool) -> str:
    if isinstance(value, _Num):
        return str(value)
    if isinstance(value, dict):
        members = [f"{_dump(k, ascii_only)} : {_dump(v, ascii_only)}" for k, v in value.items()]
        return "{ " + ", ".join(members) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_dump(v, ascii_only) for v in value) + " ]"
    return json.dumps(value, ensure_ascii=ascii_only)


def _canonical_both(text: str) -> tuple[Any, Any]:
    """(canonical_read, canonical) of what the strict reader reads from ``text``, or the
    reader's refusal twice."""
    try:
        value = loads(text, max_depth=64)
    except Invalid as invalid:
        return invalid.reason, invalid.reason
    return canonical_read(value, text), canonical(value)


@settings(max_examples=400)
@given(_values, st.booleans())
def test_the_canonical_form_of_what_was_read_is_the_exact_one(value: Any, ascii_only: bool) -> None:
    text = _dump(value, ascii_only)
    fast, exact = _canonical_both(text)
    assert fast == exact
    if isinstance(exact, bytes):
        assert canonical_json(text) == exact  # the path it replaces in the codecs


@pytest.mark.parametrize(
    "text",
    [
        '{"a":"\\u00001","b":1}',
        '{"\\ud83d\\ude00":1,"\\uffff":2}',  # keys beyond the BMP sort by UTF-16
        '{"\U0001f600":1,"\uffff":[1.50,-0,2E+3]}',
        '[1e5,"1e5",{"z":null,"a":true}]',
        '"1"',
        "1.0",
        '{"b":{"d":[],"c":{}},"a":"\\/\\"\\\\\\b\\f\\n\\r\\t\\u001f\\u007f"}',
    ],
)
def test_the_canonical_form_of_what_was_read_on_texts_that_could_fool_it(text: str) -> None:
    fast, exact = _canonical_both(text)
    assert fast == exact == canonical_json(text)


CORPUS = Path(__file__).resolve().parents[2] / "shared" / "testdata" / "JSONTestSuite"


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the JSONTestSuite corpus is shared test data")
def test_the_canonical_form_of_what_was_read_over_the_json_test_suite() -> None:
    """Every text of the corpus the strict reader accepts (parsing and transform files)
    gets the exact canonical form; the refused ones are refused as before."""
    texts = sorted(CORPUS.glob("test_parsing/*.json")) + sorted(
        CORPUS.glob("test_transform/*.json")
    )
    assert len(texts) > 300
    accepted = 0
    for path in texts:
        try:
            value = loads(path.read_bytes(), max_depth=MAX_DEPTH)
        except Invalid:
            continue
        text = path.read_bytes().decode("utf-8")
        assert canonical_read(value, text) == canonical(value), path.name
        assert canonical_read(value, text) == canonical_json(text), path.name
        accepted += 1
    assert accepted > 90  # the y_ files but those a rule refuses, and some i_ files


_steps = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(0, 2), st.sampled_from([b"a", b"b"])),
        st.tuples(st.just("tick"), st.sampled_from([1.0, 3600.0, 100.0 * 86400])),
        st.just(("evict",)),
        st.just(("bad",)),  # a keyed delivery without its key: a dead letter
        st.tuples(st.just("again"), st.sampled_from([b"a", b"b"])),  # from the last one
    ),
    max_size=25,
)


def _run_steps(steps: list[Any], seal: bool, url: str = "sqlite:///:memory:") -> list[Any]:
    now = [1_800_000_000.0]
    box = oncebox.open(url, clock=lambda: now[0], seal=seal,
                       inboxes=[oncebox.InboxSpec("k", codec="keyed", retention=3600.0,
                                                   retention_override="a test")])  # fmt: skip
    seen: list[Any] = []
    letter: int | None = None
    try:
        for step in steps:
            if step[0] == "tick":
                now[0] += step[1]
                continue
            if step[0] == "evict":
                box.evict("k")
                continue
            if step[0] == "send":
                delivery = Delivery(step[2], key=str(step[1]))
            elif step[0] == "bad":
                delivery = Delivery(b"x")
            else:
                delivery = Delivery(step[1], key="0", dead_letter=letter)
            decision = box.ingest("k", delivery)
            letter = decision.dead_letter_id or letter
            seen.append(dataclasses.asdict(decision))
        with box.store.reading() as tx:
            for table in ("records", "verdict_counts", "log", "dead_letters", "quarantine"):
                seen.append(tx.execute(f"SELECT * FROM {table} ORDER BY 1, 2, 3"))  # type: ignore[attr-defined]
    finally:
        box.close()
    return seen


@settings(max_examples=80)
@given(_steps, st.booleans())
def test_one_duplicate_decides_and_writes_as_the_walk(steps: list[Any], seal: bool) -> None:
    """A single plain duplicate skips the walk (``decide._one_duplicate``): the same
    decisions, counts, records, log and dead letters as with every delivery walked."""
    fast = _run_steps(steps, seal)
    with mock.patch.object(decide, "_plain_repeat", lambda item, seen: False):
        general = _run_steps(steps, seal)
    assert fast == general
