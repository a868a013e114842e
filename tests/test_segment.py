"""Issue 21, Prove: a feed segment is checked offline, and every forgery of one is refused
with its reason (pure: an in-memory log kept as the engine keeps it, no store)."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oncebox.domain import LogEntry
from oncebox.engine import merkle
from oncebox.engine.checkpoint import Checkpoint, ProofError, generate_key, sign_checkpoint
from oncebox.engine.log import GENESIS, chain_hash, leaf_of, record_state_text, state_text
from oncebox.engine.segment import (
    CONTENT_BOUND,
    MAX_ENTRIES,
    content_json,
    extend,
    feed_inbox,
    fold,
    frontier,
    parse_state,
    segment_document,
)
from oncebox.engine.segment_check import SegmentReport, verify_segment

PRIVATE, PUBLIC = generate_key()
OTHER_PRIVATE, OTHER_PUBLIC = generate_key()
ORIGIN = "oncebox:segment-test"
Doc = dict[str, Any]


@dataclass
class Log:
    """Entries chained from GENESIS with their Merkle nodes, and the content each feed
    entry seals (by position), as a store would keep them."""

    entries: list[LogEntry] = field(default_factory=list)
    nodes: dict[tuple[int, int], bytes] = field(default_factory=dict)
    contents: dict[int, bytes | None] = field(default_factory=dict)
    records: int = 0

    def get(self, level: int, index: int) -> bytes:
        return self.nodes[(level, index)]

    def append(self, step: str, state: str, content: bytes | None = None) -> LogEntry:
        prev = self.entries[-1].hash if self.entries else GENESIS
        entry = LogEntry(len(self.entries) + 1, step, state, chain_hash(prev, step, state))
        self.entries.append(entry)
        for level, index, value in merkle.completed_nodes(entry.seq - 1, leaf_of(entry), self.get):
            self.nodes[(level, index)] = value
        if content is not None or feed_inbox(step, parse_state(state)):
            self.contents[entry.seq] = content
        return entry

    def accept(self, inbox: str, content: bytes, step: str = "accept") -> LogEntry:
        self.records += 1
        witness = hashlib.sha256(content).hexdigest()
        state = record_state_text(inbox, self.records, f"k{self.records}", witness, 1, None)
        return self.append(step, state, content)

    def resolve(self, inbox: str, content: bytes, action: str = "accept") -> LogEntry:
        state = state_text(
            {
                "inbox": inbox,
                "quarantine": self.records,
                "action": action,
                "note": "checked by hand",
                "actor": "ops",
                "witness": hashlib.sha256(content).hexdigest(),
            }
        )
        return self.append("resolve", state, content if action == "accept" else None)

    def lease(self, inbox: str) -> LogEntry:
        return self.append("lease", state_text({"inbox": inbox, "scope": "S", "token": 1}))

    def checkpoint(self, size: int | None = None, key: bytes | None = PRIVATE) -> Checkpoint:
        size = len(self.entries) if size is None else size
        head = self.entries[size - 1].hash if size else GENESIS
        point = Checkpoint(ORIGIN, size, merkle.tree_root(self.get, size).hex(), head)
        return sign_checkpoint(point, key) if key else point

    def segment(
        self, inbox: str, start: int, end: int, size: int | None = None, whole: bool = False
    ) -> Doc:
        size = len(self.entries) if size is None else size
        doc = segment_document(
            origin=ORIGIN,
            inbox=inbox,
            start=start,
            end=end,
            tree_size=size,
            get=self.get,
            entries=self.entries[start - 1 : end],
            contents=self.contents,
            whole=whole,
        )
        return json.loads(json.dumps(doc))  # as a consumer reads it


def mixed_log() -> Log:
    """Records of ussd and feed between leases, an accepted and a kept resolution, a
    record over the content bound, one in bytes that are not UTF-8, one evicted."""
    log = Log()
    log.accept("ussd", b"H1|1|Kakuma1|MED|3|86|#89")  # 1
    log.lease("feed")  # 2
    log.accept("feed", b"row-A")  # 3
    log.accept("ussd", b"H1|2|Kakuma2|SHE|8|71|#09")  # 4
    log.resolve("ussd", b"H1|2|Kakuma2|SHE|9|71|#xx")  # 5: an accepted revision
    log.resolve("ussd", b"not taken", action="keep")  # 6
    log.accept("ussd", b"x" * (CONTENT_BOUND + 1))  # 7: over the bound
    log.accept("ussd", bytes(range(256)))  # 8: not UTF-8
    log.accept("feed", b"row-B")  # 9
    log.accept("ussd", b"evicted since", step="recover")  # 10
    log.contents[10] = None  # retention evicted it
    for n in range(11, 24):
        if n % 3:
            log.accept("ussd" if n % 2 else "feed", f"row {n}".encode())
        else:
            log.lease("ussd")
    return log


LOG = mixed_log()
SIZE = len(LOG.entries)


def check(doc: Doc, cp: Checkpoint | None = None, **asked: Any) -> SegmentReport:
    asked.setdefault("start", doc.get("from"))
    asked.setdefault("end", doc.get("to"))
    return verify_segment(doc, cp or LOG.checkpoint(), PUBLIC, **asked)


def reason(doc: Any, cp: Checkpoint | None = None, key: bytes | None = PUBLIC, **asked: Any) -> str:
    with pytest.raises(ProofError) as refused:
        verify_segment(doc, cp or LOG.checkpoint(), key, **asked)
    assert refused.value.message
    return refused.value.reason


def forged(doc: Doc, change: Callable[[Doc], object]) -> Doc:
    copied = copy.deepcopy(doc)
    change(copied)
    return copied


def position(doc: Doc, seq: int) -> int:
    return next(i for i, e in enumerate(doc["entries"]) if e["seq"] == seq)


# -- the genuine one ------------------------------------------------------------------------


def test_a_genuine_segment_verifies_and_reports_the_inbox_records_in_order() -> None:
    doc = LOG.segment("ussd", 2, 12)
    report = check(doc, inbox="ussd")
    assert report.signed and (report.start, report.end, report.tree_size) == (2, 12, SIZE)
    assert [r["seq"] for r in report.records] == [4, 5, 7, 8, 10, 11]
    assert report.entries == 11 and report.hidden == 5  # 2, 3, 6, 9, 12
    by_seq = {r["seq"]: r for r in report.records}
    assert by_seq[4]["content"] == {"text": "H1|2|Kakuma2|SHE|8|71|#09"}
    assert by_seq[4]["sealed"]["record"] == 3 and by_seq[4]["kept"]
    assert by_seq[5]["sealed"]["action"] == "accept"  # an accepted revision
    assert by_seq[7]["content"] is None and by_seq[7]["cut"] == ["content"]
    assert by_seq[7]["content_length"] == CONTENT_BOUND + 1 and by_seq[7]["kept"]
    assert by_seq[8]["content"] == content_json(bytes(range(256)))
    assert "base64" in by_seq[8]["content"]
    assert not by_seq[10]["kept"] and by_seq[10]["content"] is None
    assert "by leaf hash only" in report.details


def test_every_range_of_the_log_verifies_for_each_inbox() -> None:
    for inbox in ("ussd", "feed", "nobody"):
        for start in range(1, SIZE + 1):
            for end in range(start, SIZE + 1):
                report = check(LOG.segment(inbox, start, end))
                expected = [
                    e.seq
                    for e in LOG.entries[start - 1 : end]
                    if feed_inbox(e.step, parse_state(e.state)) == inbox
                ]
                assert [r["seq"] for r in report.records] == expected
                assert report.hidden == end - start + 1 - len(expected)


def test_a_segment_proven_to_an_older_checkpoint_verifies_against_it() -> None:
    doc = LOG.segment("ussd", 3, 9, size=12)
    assert check(doc, LOG.checkpoint(12)).tree_size == 12
    assert reason(doc, LOG.checkpoint(), start=3, end=9) == "size_mismatch"


def test_a_whole_segment_shows_every_entry_and_hides_none() -> None:
    doc = LOG.segment("ussd", 1, SIZE, whole=True)
    assert all("leaf" not in e for e in doc["entries"])
    report = check(doc, whole=True)
    assert report.hidden == 0 and "no entry by leaf hash only" in report.details
    # Asked for whole, a segment that hides an entry behind its leaf hash is refused.
    assert reason(LOG.segment("ussd", 1, SIZE), whole=True) == "withheld"


# -- forgeries, each refused with its reason -----------------------------------------------

GENUINE = LOG.segment("ussd", 2, 12)


def drop(seq: int) -> Callable[[Doc], object]:
    return lambda d: d["entries"].pop(position(d, seq))


def test_one_record_dropped_is_withheld() -> None:
    assert reason(forged(GENUINE, drop(7)), start=2, end=12) == "withheld"
    assert reason(forged(GENUINE, drop(12)), start=2, end=12) == "withheld"  # the last one


def test_one_record_dropped_and_the_rest_renumbered_is_withheld_or_not_the_range() -> None:
    def renumber(d: Doc) -> None:
        d["entries"].pop(position(d, 7))
        for e in d["entries"]:
            if e["seq"] > 7:
                e["seq"] -= 1

    doc = forged(GENUINE, renumber)
    assert reason(doc, start=2, end=12) == "withheld"
    doc["to"] = 11
    assert reason(doc, start=2, end=12) == "wrong_range"
    assert reason(doc, start=2, end=11) == "altered"  # renumbered entries hash otherwise


def test_two_records_swapped_are_reordered() -> None:
    def swap(d: Doc) -> None:
        i, j = position(d, 4), position(d, 7)
        d["entries"][i], d["entries"][j] = d["entries"][j], d["entries"][i]

    assert reason(forged(GENUINE, swap), start=2, end=12) == "reordered"

    def swap_and_relabel(d: Doc) -> None:
        swap(d)
        i, j = position(d, 4), position(d, 7)
        d["entries"][i]["seq"], d["entries"][j]["seq"] = 7, 4
        d["entries"].sort(key=lambda e: e["seq"])

    assert reason(forged(GENUINE, swap_and_relabel), start=2, end=12) == "altered"


def test_one_record_altered_in_its_content_or_its_state_is_altered() -> None:
    def content(d: Doc) -> None:
        d["entries"][position(d, 4)]["content"] = {"text": "H1|2|Kakuma2|SHE|80|71|#09"}

    def state(d: Doc) -> None:
        entry = d["entries"][position(d, 4)]
        entry["state"] = entry["state"].replace('"revision":1', '"revision":2')

    def length(d: Doc) -> None:
        d["entries"][position(d, 4)]["content_length"] = 3

    def cut_sha(d: Doc) -> None:
        d["entries"][position(d, 7)]["content_sha256"] = "ab" * 32

    for change in (content, state, length, cut_sha):
        assert reason(forged(GENUINE, change), start=2, end=12) == "altered", change.__name__


def test_an_entry_of_another_inbox_passed_off_as_this_ones_is_foreign() -> None:
    whole = LOG.segment("feed", 2, 12)  # where entry 3 (feed's record) is whole

    def pass_off(seq: int) -> Callable[[Doc], object]:
        def change(d: Doc) -> None:
            d["entries"][position(d, seq)] = whole["entries"][position(whole, seq)]

        return change

    assert reason(forged(GENUINE, pass_off(3)), start=2, end=12) == "foreign_entry"

    # A lease or a kept resolution shown whole with a content is no record either.
    every = LOG.segment("ussd", 2, 12, whole=True)
    for seq in (2, 6):

        def as_record(d: Doc, seq: int = seq) -> None:
            shown = every["entries"][position(every, seq)]
            d["entries"][position(d, seq)] = {
                **shown,
                "content": {"text": "x"},
                "content_length": 1,
                "content_sha256": hashlib.sha256(b"x").hexdigest(),
                "cut": [],
            }

        assert reason(forged(GENUINE, as_record), start=2, end=12) == "foreign_entry"


def test_a_record_left_out_whole_or_its_content_left_out_is_withheld() -> None:
    every = LOG.segment("ussd", 2, 12, whole=True)

    def without_content(d: Doc) -> None:
        entry = d["entries"][position(d, 4)]
        for name in ("content", "content_length", "content_sha256", "cut"):
            del entry[name]

    assert reason(forged(every, without_content), start=2, end=12) == "withheld"

    def cut_small(d: Doc) -> None:
        d["entries"][position(d, 4)].update(content=None, cut=["content"])

    assert reason(forged(GENUINE, cut_small), start=2, end=12) == "withheld"


def test_a_frontier_a_leaf_or_a_proof_doctored_to_fit_is_refused() -> None:
    def frontier_node(d: Doc) -> None:
        d["frontier"][0] = "00" * 32

    def leaf(d: Doc) -> None:
        d["entries"][position(d, 3)]["leaf"] = "11" * 32

    def before(d: Doc) -> None:
        d["before_proof"][0] = "22" * 32

    def end(d: Doc) -> None:
        d["end_proof"][-1] = "33" * 32

    assert reason(forged(GENUINE, frontier_node), start=2, end=12) == "root_mismatch"
    assert reason(forged(GENUINE, before), start=2, end=12) == "root_mismatch"
    assert reason(forged(GENUINE, leaf), start=2, end=12) == "altered"
    assert reason(forged(GENUINE, end), start=2, end=12) == "altered"

    # A record dropped, its place filled by a leaf hash made up to fit the count.
    def filled(d: Doc) -> None:
        d["entries"][position(d, 7)] = {"seq": 7, "leaf": "44" * 32}

    assert reason(forged(GENUINE, filled), start=2, end=12) == "altered"


def test_a_frontier_of_the_wrong_shape_is_malformed() -> None:
    short = forged(GENUINE, lambda d: d["frontier"].pop())
    assert reason(short, start=2, end=12) == "malformed"
    first = LOG.segment("ussd", 1, 5)
    assert first["frontier"] == [] and first["before_proof"] == []
    assert reason(forged(first, lambda d: d["before_proof"].append("55" * 32))) == "malformed"


def test_a_checkpoint_signed_by_another_key_or_not_at_all_is_refused() -> None:
    assert reason(GENUINE, LOG.checkpoint(key=OTHER_PRIVATE)) == "bad_signature"
    assert reason(GENUINE, LOG.checkpoint(), key=OTHER_PUBLIC) == "bad_signature"
    assert reason(GENUINE, LOG.checkpoint(key=None)) == "unsigned"
    # Without a key the segment is checked but not trusted.
    report = verify_segment(GENUINE, LOG.checkpoint(key=None), None, start=2, end=12)
    assert not report.signed and "not checked" in report.details


def test_a_segment_of_another_log_range_or_inbox_is_refused() -> None:
    other = Checkpoint(ORIGIN + "-other", SIZE, LOG.checkpoint().root, LOG.entries[-1].hash)
    assert reason(GENUINE, sign_checkpoint(other, PRIVATE)) == "wrong_tree"
    assert reason(GENUINE, start=1, end=12) == "wrong_range"
    assert reason(GENUINE, start=2, end=13) == "wrong_range"
    assert reason(GENUINE, inbox="feed", start=2, end=12) == "wrong_inbox"
    relabelled = forged(GENUINE, lambda d: d.update(inbox="feed"))
    assert reason(relabelled, start=2, end=12) == "foreign_entry"


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.update(type="oncebox-inclusion-proof"),
        lambda d: d.update(version=2),
        lambda d: d.update(version=True),
        lambda d: d.update(origin=None),
        lambda d: d.update(to=0),
        lambda d: d.update(to=SIZE + 1),
        lambda d: d.update(entries={}),
        lambda d: d.update(frontier="ab"),
        lambda d: d["frontier"].append("AB" * 32),
        lambda d: d["entries"].append(d["entries"][-1]),
        lambda d: d["entries"].append({**d["entries"][-1], "seq": 13}),
        lambda d: d["entries"][0].update(seq="2"),
        lambda d: d["entries"][0].update(extra=1),
        lambda d: d["entries"][0].update(leaf="xyz"),
        lambda d: d["entries"][position(d, 4)].update(step=None),
        lambda d: d["entries"][position(d, 4)].update(content={"text": "a", "base64": "YQ=="}),
        lambda d: d["entries"][position(d, 4)].update(content={"base64": "not base64!"}),
        lambda d: d["entries"][position(d, 10)].update(content_length=5),
        lambda d: d.update(to=2 + MAX_ENTRIES, tree_size=10**12),
        lambda d: d.pop("end_proof"),
    ],
)
def test_a_malformed_segment_is_refused_as_malformed(change: Callable[[Doc], object]) -> None:
    assert reason(forged(GENUINE, change), start=2, end=12) == "malformed"


def test_not_even_an_object_is_malformed() -> None:
    for doc in (None, [], "segment", 3):
        assert reason(doc) == "malformed"


def test_a_range_no_segment_is_made_for_is_refused() -> None:
    for start, end in ((0, 3), (4, 3), (1, SIZE + 1)):
        with pytest.raises(ValueError):
            LOG.segment("ussd", start, end)
    big = Log()
    for _ in range(MAX_ENTRIES + 1):
        big.lease("ussd")
    with pytest.raises(ValueError, match="at most 1,000"):
        big.segment("ussd", 1, MAX_ENTRIES + 1)
    assert check(big.segment("ussd", 2, MAX_ENTRIES + 1), big.checkpoint()).entries == 1000


# -- properties ------------------------------------------------------------------------------

KINDS = st.sampled_from(["ussd", "feed", "lease", "resolve", "keep", "evicted"])


@st.composite
def logs_and_ranges(draw: st.DrawFn) -> tuple[Log, int, int, int]:
    log = Log()
    for kind in draw(st.lists(KINDS, min_size=1, max_size=70)):
        body = draw(st.binary(max_size=40)) if kind != "lease" else b""
        if kind in ("ussd", "feed"):
            log.accept(kind, body)
        elif kind == "lease":
            log.lease(draw(st.sampled_from(["ussd", "feed"])))
        elif kind == "resolve":
            log.resolve("ussd", body)
        elif kind == "keep":
            log.resolve("ussd", body, action="keep")
        else:
            log.contents[log.accept("ussd", body).seq] = None
    size = draw(st.integers(1, len(log.entries)))
    start = draw(st.integers(1, size))
    end = draw(st.integers(start, size))
    return log, start, end, size


@given(logs_and_ranges(), st.booleans())
def test_a_genuine_segment_of_any_log_and_range_always_verifies(
    drawn: tuple[Log, int, int, int], whole: bool
) -> None:
    log, start, end, size = drawn
    doc = log.segment("ussd", start, end, size, whole=whole)
    report = verify_segment(
        doc, log.checkpoint(size), PUBLIC, start=start, end=end, inbox="ussd", whole=whole
    )
    expected = [
        e.seq
        for e in log.entries[start - 1 : end]
        if feed_inbox(e.step, parse_state(e.state)) == "ussd"
    ]
    assert [r["seq"] for r in report.records] == expected


@given(logs_and_ranges(), st.data())
def test_any_one_entry_dropped_from_a_segment_is_refused(
    drawn: tuple[Log, int, int, int], data: st.DataObject
) -> None:
    log, start, end, size = drawn
    doc = log.segment("ussd", start, end, size)
    doc["entries"].pop(data.draw(st.integers(0, len(doc["entries"]) - 1)))
    with pytest.raises(ProofError) as refused:
        verify_segment(doc, log.checkpoint(size), PUBLIC, start=start, end=end)
    assert refused.value.reason == "withheld"


@given(st.integers(0, 300), st.integers(0, 40))
def test_a_frontier_extended_by_leaves_is_the_frontier_of_the_longer_tree(
    before: int, more: int
) -> None:
    log = Log()
    for _ in range(before + more):
        log.lease("ussd")
    nodes = frontier(log.get, before)
    assert fold(nodes) == merkle.tree_root(log.get, before)
    leaves = [leaf_of(e) for e in log.entries[before:]]
    assert extend(nodes, before, leaves) == frontier(log.get, before + more)
    assert fold(extend(nodes, before, leaves)) == merkle.tree_root(log.get, before + more)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 30) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)


def _paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*path, index))
    return found


@given(st.data(), JSON)
def test_any_value_of_a_segment_changed_is_either_the_same_segment_or_refused(
    data: st.DataObject, value: Any
) -> None:
    doc = copy.deepcopy(GENUINE)
    path = data.draw(st.sampled_from(_paths(doc)[1:]))
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = value
    try:
        report = verify_segment(doc, LOG.checkpoint(), PUBLIC, start=2, end=12)
    except ProofError:
        return
    # Accepted only if nothing it reports differs from the genuine segment's.
    assert report == check(GENUINE)
