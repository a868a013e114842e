"""The log's appends without reading what they wrote before (issue 24): the right edge of
the Merkle tree a connection's last append left, trusted only where the log still ends
where that append ended it, and a seal's reads (the sealer's lease, the queue, the head)
in one SQLite statement. Each is held against the general path beside it: the nodes read
from the store, the reads one after another."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oncebox
from oncebox.domain import SEALER, LogEvent
from oncebox.engine import log, merkle, sealing
from oncebox.engine.verify import verify
from oncebox.errors import StorageError
from oncebox.store import open_store
from oncebox.store.sqlite import SQLiteStore
from oncebox.store.sqltx import SqlTx

PAYLOAD = b"p" * 40


def leaf_of(index: int) -> bytes:
    return merkle.leaf_hash(f"leaf {index}".encode())


def tree_and_edge(
    start: int, forgotten: list[int]
) -> tuple[dict[tuple[int, int], bytes], dict[int, bytes]]:
    """The stored nodes of a tree of ``start`` leaves (``leaf_of``'s), and its edge (the
    complete subtree at each set bit) less the ``forgotten`` levels."""
    store: dict[tuple[int, int], bytes] = {}
    for index in range(start):
        for level, i, value in merkle.completed_nodes(
            index, leaf_of(index), lambda lv, ix: store[(lv, ix)]
        ):
            store[(level, i)] = value
    edge = {
        level: store[(level, (start >> level) - 1)]
        for level in range(start.bit_length())
        if start >> level & 1 and level not in forgotten
    }
    return store, edge


@settings(max_examples=200, derandomize=True)
@given(
    st.integers(min_value=0, max_value=200),
    st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=6),
    st.lists(st.integers(min_value=0, max_value=9), max_size=4),
)
def test_appends_from_a_kept_edge_complete_the_nodes_each_leaf_completes(
    start: int, batches: list[int], forgotten: list[int]
) -> None:
    """Batch after batch from one edge, some of its levels forgotten before the first
    (as a fresh connection knows none): the nodes are :func:`merkle.completed_nodes`'
    of each leaf, and only siblings the edge lacks are read, each at most once."""
    store, edge = tree_and_edge(start, forgotten)
    size = start
    reads: list[tuple[int, int]] = []
    for count in batches:
        reads.clear()

        def get(level: int, index: int) -> bytes:
            reads.append((level, index))
            assert level not in edge, "a sibling the edge holds was read"
            return store[(level, index)]

        leaves = [leaf_of(index) for index in range(size, size + count)]
        got = merkle.appended_nodes(size, leaves, get, edge=edge)
        expected = []
        for index in range(size, size + count):
            nodes = merkle.completed_nodes(index, leaf_of(index), lambda lv, ix: store[(lv, ix)])
            expected += nodes
            store.update(((level, i), value) for level, i, value in nodes)
        assert got == expected
        assert len(reads) == len(set(reads))
        size += count
        # What the edge holds is the tree's edge (levels it never needed stay unknown).
        assert all(
            size >> lv & 1 and value == store[(lv, (size >> lv) - 1)] for lv, value in edge.items()
        )


@pytest.fixture
def path(tmp_path: Path) -> Iterator[str]:
    yield str(tmp_path / "one.db")


def _open(path: str) -> oncebox.Oncebox:
    return oncebox.open(f"sqlite:///{path}", inboxes=[oncebox.InboxSpec("k", codec="keyed")])


def _stored_nodes_are_the_trees(path: str) -> int:
    """Every stored Merkle node is the root of the leaves it covers, every node the log
    should hold is there, and the log verifies; the number of entries."""
    store = open_store(f"sqlite:///{path}")
    try:
        assert verify(store).ok
        with store.reading() as tx:
            head = tx.log_head()
            entries = tx.log_entries(1, (head.seq if head else 0) + 1)
            stored = {(lv, ix): bytes(h) for lv, ix, h in tx.execute("SELECT * FROM merkle_nodes")}
        leaves = [log.leaf_of(entry) for entry in entries]
        expected = {}
        for level in range(log.NODE_STRIDE, len(leaves).bit_length(), log.NODE_STRIDE):
            for index in range(len(leaves) >> level):
                expected[(level, index)] = merkle.root_of(
                    leaves[index << level : (index + 1) << level]
                )
        assert stored == expected
        return len(entries)
    finally:
        store.close()


@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.booleans(), st.integers(min_value=1, max_value=40)), max_size=12))
def test_two_stores_appending_to_one_file_alternately_write_the_trees_nodes(
    tmp_path_factory: pytest.TempPathFactory, turns: list[tuple[bool, int]]
) -> None:
    """Two store objects on one file (as two processes would be), each appending runs of
    single deliveries and batches in turn: each one's kept edge goes stale whenever the
    other appended, and not one stored node may come from a stale edge."""
    path = str(tmp_path_factory.mktemp("two") / "one.db")
    boxes = [_open(path), _open(path)]
    try:
        n = 0
        for turn, (second, count) in enumerate(turns):
            box = boxes[second]
            if turn % 3 == 2:
                box.ingest_batch(
                    "k", [oncebox.Delivery(PAYLOAD, key=f"{n + i}") for i in range(count)]
                )
            else:
                for i in range(count):
                    box.ingest("k", oncebox.Delivery(PAYLOAD, key=f"{n + i}"))
            n += count
        for box in boxes:
            box.close()
        assert _stored_nodes_are_the_trees(path) == n
    finally:
        for box in boxes:
            box.close()


@pytest.mark.parametrize("others", [0, 3])
def test_a_rolled_back_append_leaves_no_edge_to_trust(path: str, others: int) -> None:
    """An append whose transaction rolls back leaves its edge on the connection; when
    the log then ends at the same position with other entries (another store appended
    as many), that edge is not the tree's and nothing may be built on it."""
    box, other = _open(path), _open(path)
    store = box.store
    try:
        for i in range(16):
            box.ingest("k", oncebox.Delivery(PAYLOAD, key=f"before {i}"))

        def appended_then_failed(tx: Any) -> None:
            events = [LogEvent("lease", f"rolled back {i}") for i in range(3)]
            sealing.record_events(tx, events, True)
            raise RuntimeError("rolled back")

        with pytest.raises(RuntimeError):
            store.atomic(appended_then_failed)
        for i in range(others):
            other.ingest("k", oncebox.Delivery(PAYLOAD, key=f"other {i}"))
        for i in range(32 - 16 - others):  # up to the next kept node, built on that edge
            box.ingest("k", oncebox.Delivery(PAYLOAD, key=f"after {i}"))
        box.close()
        other.close()
        assert _stored_nodes_are_the_trees(path) == 32
    finally:
        box.close()
        other.close()


def test_an_append_that_fails_half_way_leaves_no_edge(path: str) -> None:
    """A node missing from the store fails the append that needs it; the edge it was
    building is gone with it, so a later append reads again (and fails the same way)
    rather than trusting half of one."""
    box = _open(path)
    store = box.store
    try:
        for i in range(16 * 3):
            box.ingest("k", oncebox.Delivery(PAYLOAD, key=str(i)))
        store.atomic(lambda tx: tx.execute("DELETE FROM merkle_nodes WHERE level = 4 AND idx = 2"))
        tx = store._session().flushed  # type: ignore[attr-defined]
        tx.log_edge = None  # as a fresh connection would start
        for i in range(16):  # the next node of level 4 (index 3) is built on index 2
            try:
                box.ingest("k", oncebox.Delivery(PAYLOAD, key=f"more {i}"))
            except StorageError:
                break
        else:
            pytest.fail("the missing node was never needed")
        assert tx.log_edge is None
    finally:
        box.close()


def _reads(store: SQLiteStore) -> tuple[Any, Any]:
    def both(tx: Any) -> tuple[Any, Any]:
        return tx.seal_reads(*SEALER), SqlTx.seal_reads(tx, *SEALER)

    return store.atomic(both)


def test_the_seal_reads_in_one_statement_are_the_three_reads(path: str) -> None:
    box = _open(path)
    store = box.store
    assert isinstance(store, SQLiteStore)
    try:
        fast, general = _reads(store)  # an empty log, nothing queued, the sealer's row as made
        assert fast == general and fast[1:] == (False, None)
        box.ingest("k", oncebox.Delivery(PAYLOAD, key="a"))
        fast, general = _reads(store)
        assert fast == general and fast[2] is not None and fast[2][0] == 1
        # A dedicated sealer holds the log: events queue behind it.
        sealer = sealing.Sealer(store, "sealer-1", ttl=60)
        sealer.acquire()
        box.ingest("k", oncebox.Delivery(PAYLOAD, key="b"))
        fast, general = _reads(store)
        assert fast == general and fast[0] is not None and fast[0].holder == "sealer-1"
        assert fast[1] is True
        sealer.seal()
        sealer.release()
        fast, general = _reads(store)
        assert fast == general and fast[1] is False and fast[0].released_at is not None
        # Without the sealer's row (a store that lost it): read one after another.
        store.atomic(lambda tx: tx.execute("DELETE FROM fences WHERE kind = 'sealer'"))
        fast, general = _reads(store)
        assert fast == general and fast[0] is None
    finally:
        box.close()


def test_a_single_delivery_appends_after_what_is_queued(path: str) -> None:
    """Events queued while a sealer held the log come first once a single delivery
    appends again: the queue's order is the log's."""
    box = _open(path)
    store = box.store
    try:
        sealer = sealing.Sealer(store, "sealer-1", ttl=60)
        sealer.acquire()
        queued = box.ingest("k", oncebox.Delivery(PAYLOAD, key="queued"))
        sealer.release()
        after = box.ingest("k", oncebox.Delivery(PAYLOAD, key="after"))
        with store.reading() as tx:
            entries = tx.log_entries(1, 10)
        sealed = [json.loads(e.state)["identity"] for e in entries if e.step == "accept"]
        assert sealed == ["queued", "after"]
        assert queued.record_id is not None and after.log_position == entries[-1].seq
        box.close()
        _stored_nodes_are_the_trees(path)
    finally:
        box.close()
