"""The fifth CPU round (SQLite's batch statements) writes exactly what the general
statements beside it write: a batch's duplicate counts as one ``UPDATE`` over an array of
ids against one ``UPDATE`` a record, and the lookup's plain rows against records made by
their columns' names. Each over generated batches (Hypothesis, derandomized), directly and
through whole runs of batched ingests."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oncebox
from helpers import event_body
from oncebox.domain import Stored
from oncebox.store import open_store
from oncebox.store.sqlite import SQLiteStore
from oncebox.store.sqlitetx import SQLiteTx
from oncebox.store.sqltx import SqlTx

T = 1_800_000_000.0
TABLES = ("records", "verdict_counts", "log", "log_pending", "merkle_nodes", "dead_letters",
          "quarantine")  # fmt: skip


class _General:
    """The fast paths off, as a context manager."""

    def __enter__(self) -> None:
        self._patches = [
            mock.patch.object(SQLiteTx, "count_duplicates", _count_duplicates_each),
            mock.patch.object(SQLiteTx, "find_records", _found_as_stored),
        ]
        for patch in self._patches:
            patch.start()

    def __exit__(self, *exc: object) -> None:
        for patch in reversed(self._patches):
            patch.stop()


def _count_duplicates_each(tx: Any, repeats: Any, now: float) -> int:
    """The general count: one UPDATE a record, run by ``executemany``."""
    return SqlTx.count_duplicates(tx, repeats, now)


def _found_as_stored(tx: Any, inbox_id: int, idents: Any) -> dict[bytes, Stored]:
    """The general lookup: each row made a Stored by its columns' names."""
    if not idents:
        return {}
    params = (inbox_id, apsw.carray(tuple(idents)))
    return {row.ident: row for row in tx._rows("find_records", params, Stored)}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    opened = open_store(f"sqlite:///{tmp_path / 's.db'}", clock=lambda: T)
    assert isinstance(opened, SQLiteStore)
    yield opened
    opened.close()


def _tables(store: SQLiteStore) -> list[Any]:
    with store.reading() as tx:
        return [tx.execute(f"SELECT * FROM {t} ORDER BY 1, 2, 3") for t in TABLES]


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.integers(1, 12), st.integers(1, 3), max_size=10))
def test_duplicates_counted_at_once_are_those_counted_each(repeats: dict[int, int]) -> None:
    """The same count of rows changed and the same rows after, on two stores made alike:
    records repeated once, several times, or not there at all (ids over 8)."""
    seen = []
    for general in (False, True):
        store = open_store("sqlite:///:memory:", clock=lambda: T)
        assert isinstance(store, SQLiteStore)
        box = oncebox.Oncebox(store, [oncebox.InboxSpec("k", codec="keyed")])
        box.ingest_batch("k", [oncebox.Delivery(b"x", key=str(i)) for i in range(8)])
        count: Callable[[Any], int] = lambda tx: tx.count_duplicates(repeats, T + 5)  # noqa: E731
        if general:
            with _General():
                changed = store.atomic(count)
        else:
            changed = store.atomic(count)
        seen.append((changed, _tables(store)))
        box.close()
    assert seen[0] == seen[1]
    assert seen[0][0] == sum(1 for record_id in repeats if record_id <= 8)


_batches = st.lists(
    st.one_of(
        # A batch: each delivery a key (a few, so they repeat) and a body (two: conflicts).
        st.tuples(
            st.just("batch"),
            st.lists(st.tuples(st.integers(0, 5), st.sampled_from([b"a", b"b", b""])), max_size=12),
        ),
        # Many new keys at once, from an offset (past a chunk's length, a remainder).
        st.tuples(st.just("many"), st.integers(0, 3), st.integers(0, 140)),
        st.tuples(st.just("tick"), st.sampled_from([1.0, 3600.0, 100.0 * 86400])),
        st.just(("evict",)),
    ),
    max_size=8,
)


def _run_batches(steps: list[Any], seal: bool) -> list[Any]:
    now = [T]
    box = oncebox.open("sqlite:///:memory:", clock=lambda: now[0], seal=seal,
                       inboxes=[oncebox.InboxSpec("k", codec="keyed", retention=3600.0,
                                                   retention_override="a test")])  # fmt: skip
    seen: list[Any] = []
    try:
        for step in steps:
            if step[0] == "tick":
                now[0] += step[1]
                continue
            if step[0] == "evict":
                box.evict("k")
                continue
            if step[0] == "batch":
                # An empty body under a key: a keyed delivery without a key instead (a
                # dead letter among the others).
                deliveries = [oncebox.Delivery(body or b"x", key=str(key) if body else None)
                              for key, body in step[1]]  # fmt: skip
            else:
                offset, n = step[1] * 50, step[2]
                deliveries = [oncebox.Delivery(b"m", key=f"m{offset + i}") for i in range(n)]
            decided = box.ingest_batch("k", deliveries)
            seen.append([dataclasses.asdict(d) for d in decided])
        with box.store.reading() as tx:
            for table in TABLES:
                seen.append(tx.execute(f"SELECT * FROM {table} ORDER BY 1, 2, 3"))  # type: ignore[attr-defined]
    finally:
        box.close()
    return seen


@settings(max_examples=60, deadline=None)
@given(_batches, st.booleans())
def test_batches_decide_and_store_as_with_the_general_statements(
    steps: list[Any], seal: bool
) -> None:
    """Whole runs of batched ingests (new records, repeats in the batch and of stored
    ones, conflicts, dead letters, evictions and late replays; sealed in the batch or
    queued): the same decisions and the same tables with both fast paths as without."""
    fast = _run_batches(steps, seal)
    with _General():
        general = _run_batches(steps, seal)
    assert fast == general


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 4), st.sampled_from([b"a", b"b", b""])), max_size=14),
    st.lists(st.tuples(st.integers(0, 4), st.sampled_from([b"a", b"b"])), max_size=4),
)
def test_a_batch_decides_as_its_deliveries_one_by_one(
    batch: list[tuple[int, bytes]], before: list[tuple[int, bytes]]
) -> None:
    """A batch that repeats or contradicts a record it accepts itself (the walk makes that
    record's Stored only then) decides and stores as its deliveries ingested one at a time."""

    def deliveries() -> list[oncebox.Delivery]:
        return [oncebox.Delivery(body or b"x", key=str(key) if body else None)
                for key, body in batch]  # fmt: skip

    seen = []
    for together in (True, False):
        box = oncebox.open("sqlite:///:memory:", clock=lambda: T,
                           inboxes=[oncebox.InboxSpec("k", codec="keyed")])  # fmt: skip
        try:
            for key, body in before:
                box.ingest("k", oncebox.Delivery(body, key=str(key)))
            if together:
                decided = box.ingest_batch("k", deliveries())
            else:
                decided = [box.ingest("k", delivery) for delivery in deliveries()]
            with box.store.reading() as tx:
                tables = [tx.execute(f"SELECT * FROM {t} ORDER BY 1, 2, 3")  # type: ignore[attr-defined]
                          for t in ("records", "quarantine", "dead_letters", "log")]  # fmt: skip
            seen.append(([dataclasses.asdict(d) for d in decided], tables))
        finally:
            box.close()
    assert seen[0] == seen[1]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 3), st.booleans()),
                         max_size=70), max_size=3))  # fmt: skip
def test_a_steps_batch_statements_apply_as_the_general_ones(
    batches: list[list[tuple[int, int, bool]]],
) -> None:
    """The generation step's work keys (its upsert), bumped by batches of
    events (new, repeated, conflicting, several on one key): the same decisions and
    tables with the fast paths as without."""

    def run() -> list[Any]:
        box = oncebox.open("sqlite:///:memory:", clock=lambda: T,
                           inboxes=[oncebox.InboxSpec("g", codec="json-event",
                                                      apply="generation")])  # fmt: skip
        seen: list[Any] = []
        try:
            for batch in batches:
                deliveries = [
                    oncebox.Delivery(event_body(f"n-{n}", sku=f"SKU-{sku}",
                                                payload={"status": "A" if other else "B"}))
                    for n, sku, other in batch
                ]  # fmt: skip
                seen.append([dataclasses.asdict(d) for d in box.ingest_batch("g", deliveries)])
            with box.store.reading() as tx:
                for table in ("work_keys", *TABLES):
                    seen.append(tx.execute(f"SELECT * FROM {table} ORDER BY 1, 2, 3"))  # type: ignore[attr-defined]
        finally:
            box.close()
        return seen

    fast = run()
    with _General():
        general = run()
    assert fast == general


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 9), st.sampled_from([b"a", b"b"])), max_size=12),
    st.lists(st.integers(0, 12), min_size=2, max_size=12),
    st.booleans(),
)
def test_rows_found_are_the_stored_records_by_name(
    before: list[tuple[int, bytes]], asked: list[int], evict: bool
) -> None:
    """The lookup's plain rows are the Stored records made from them by column name
    (records, tombstones, identities not there), field for field."""
    now = [T]
    box = oncebox.open("sqlite:///:memory:", clock=lambda: now[0],
                       inboxes=[oncebox.InboxSpec("k", codec="keyed", retention=3600.0,
                                                   retention_override="a test")])  # fmt: skip
    try:
        for key, body in before:
            box.ingest("k", oncebox.Delivery(body, key=str(key)))
        if evict:
            now[0] += 7200.0
            box.evict("k")
        idents = list(dict.fromkeys(hashlib.sha256(str(k).encode()).digest() for k in asked))
        with box.store.reading() as tx:
            plain = tx.find_records(1, idents)  # type: ignore[attr-defined]
            named = _found_as_stored(tx, 1, idents)
        assert plain == named
        if len(idents) > 1:  # a batch's (one identity is looked up apart, as a Stored)
            assert all(type(row) is tuple for row in plain.values())
        assert {ident: Stored(*row) for ident, row in plain.items()} == named
    finally:
        box.close()
