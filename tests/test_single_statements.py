"""SQLite's statements for a single delivery (issue 24) read and write exactly what the
batch statements beside them do: one record id reserved without the recursive count, one
lease looked up by its key instead of through a JSON array, one delivery's record read
without a batch's steps (with the id a new one takes, in the same statement), one
duplicate's count and one verdict count run as their one
row; and the transaction objects each thread reuses begin at the level asked for."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oncebox
from oncebox.domain import LeaseState
from oncebox.store import open_store
from oncebox.store.sqlite import SQLiteStore
from oncebox.store.sqlitetx import SQLiteTx
from oncebox.store.sqltx import SqlTx
from test_cpu_fast_paths import _run_steps, _steps

T = 1_800_000_000.0
# The batch statements the single-row ones stand beside.
GENERAL = {
    name: getattr(SqlTx, name)
    for name in ("reserve_record_ids", "held", "count_duplicates", "count_verdicts")
}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    opened = open_store(f"sqlite:///{tmp_path / 's.db'}")
    assert isinstance(opened, SQLiteStore)
    yield opened
    opened.close()


def _filled(store: SQLiteStore, records: int, dropped: int | None) -> None:
    box = oncebox.Oncebox(store, [oncebox.InboxSpec("k", codec="keyed")])
    for i in range(records):
        box.ingest("k", oncebox.Delivery(b"x", key=str(i)))
    if dropped is not None:  # retention remembers the highest id it dropped
        store.atomic(lambda tx: tx._run("remember_dropped_id", (dropped,)))  # type: ignore[attr-defined]


@pytest.mark.parametrize(("records", "dropped"), [(0, None), (3, None), (3, 50), (3, 2), (0, 7)])
def test_one_record_id_is_the_batch_statements_first(
    store: SQLiteStore, records: int, dropped: int | None
) -> None:
    _filled(store, records, dropped)

    def both(tx: Any) -> tuple[list[int], list[int]]:
        return tx.reserve_record_ids(1), GENERAL["reserve_record_ids"](tx, 1)

    fast, general = store.atomic(both)
    assert fast == general == [max(records, dropped or 0) + 1]


@pytest.mark.parametrize("durable", [True, False])
@pytest.mark.parametrize(("records", "dropped"), [(0, None), (3, None), (3, 50), (3, 2), (0, 7)])
def test_one_record_or_the_next_id_is_the_two_reads(
    store: SQLiteStore, records: int, dropped: int | None, durable: bool
) -> None:
    """A single delivery's record read with the id a new one would take
    (``find_record_or_next_id``, in a transaction begun flushed, for a likely new record;
    one begun relaxed reads the record alone): the record ``find_records`` gives where
    there is one (kept or a tombstone), else the id ``reserve_record_ids(1)`` gives."""
    _filled(store, records, dropped)
    if records:  # the first record a tombstone
        store.atomic(lambda tx: tx.evict_records(1, T * 2, T, 1))
    with store.reading() as tx:
        idents = [bytes(row[0]) for row in tx.execute("SELECT ident FROM records ORDER BY id")]
    asked = [*idents, b"\x00" * 32, b"\xff" * 32]

    def both(tx: Any) -> list[tuple[Any, Any]]:
        return [
            (
                tx.decision_reads(1, [ident], None)[2:],
                (
                    # the batch statement (several identities: one absent beside it)
                    found := tx.find_records(1, [ident, b"absent"]),
                    None if found else GENERAL["reserve_record_ids"](tx, 1),
                ),
            )
            for ident in asked
        ]

    pairs = store.atomic(both, durable=durable)
    for fast, general in pairs:
        if not durable:  # the record alone: the id is reserved later, where it is needed
            general = (general[0], None)
        assert fast == general
    if not durable:
        return
    assert [fast[1] for fast, _ in pairs] == [None] * records + [
        [max(records, dropped or 0) + 1]
    ] * 2
    assert records == 0 or pairs[0][0][0][idents[0]][4] is not None  # evicted_at


def test_one_lease_is_read_as_through_the_array(store: SQLiteStore) -> None:
    leases = [
        LeaseState("scope", 1, "a", 4, None, T, T + 60, None),
        LeaseState("scope", 1, "b", 5, "worker", T, T + 60, T + 1),
        LeaseState("sealer", 0, "", 6, "sealer-1", T, T + 60, None),
        LeaseState("scope", 2, "a", 7, None, T, T + 60, None),
    ]

    def put(tx: Any) -> None:
        for lease in leases:
            tx.put_lease(lease)

    store.atomic(put)
    asked = [("scope", 1, "a"), ("scope", 1, "b"), ("scope", 1, "c"), ("scope", 2, "a"),
             ("sealer", 0, ""), ("sealer", 1, ""), ("work", 1, "a")]  # fmt: skip

    def both(tx: Any) -> list[tuple[Any, Any]]:
        return [
            (tx.held(kind, owner, [name], flag), GENERAL["held"](tx, kind, owner, [name], flag))
            for kind, owner, name in asked
            for flag in (False, True)  # exclusive or not
        ]  # fmt: skip

    pairs = store.atomic(both)
    for fast, general in pairs:
        assert fast == general
    assert sum(1 for fast, _ in pairs if fast) == 8  # four of the names held, each asked twice


def _counted(store: SQLiteStore, count: Callable[[Any], Any]) -> tuple[Any, list[Any]]:
    result = store.atomic(count)
    with store.reading() as tx:
        tables = [tx.execute(f"SELECT * FROM {t} ORDER BY 1, 2, 3, 4")
                  for t in ("records", "verdict_counts")]  # fmt: skip
    return result, tables


@pytest.mark.parametrize("repeats", [1, 3])
def test_one_rows_counts_are_the_batch_statements(tmp_path: Path, repeats: int) -> None:
    """The same changes and the same rows after, on two stores made alike; an id that
    is not there changes nothing either way."""
    seen: list[tuple[Any, list[Any]]] = []
    for name, general in (("fast", False), ("general", True)):
        store = open_store(f"sqlite:///{tmp_path / f'{name}.db'}", clock=lambda: T)
        assert isinstance(store, SQLiteStore)
        _filled(store, 2, None)

        def count(tx: Any, general: bool = general) -> tuple[int, int]:
            dup = GENERAL["count_duplicates"] if general else type(tx).count_duplicates
            verdicts = GENERAL["count_verdicts"] if general else type(tx).count_verdicts
            verdicts(tx, 1, 500_000, {("duplicate", ""): repeats})
            verdicts(tx, 1, 500_001, {("duplicate", "late_replay"): repeats + 1})
            return dup(tx, {2: repeats}, T + 5), dup(tx, {99: repeats}, T + 5)

        seen.append(_counted(store, count))
        store.close()
    assert seen[0] == seen[1]
    assert seen[0][0] == (1, 0)


@settings(max_examples=60, deadline=None)
@given(_steps, st.booleans())
def test_single_statements_decide_and_store_as_the_batch_ones(steps: list[Any], seal: bool) -> None:
    """Whole runs of single ingests (new records, duplicates, conflicts, dead letters and
    deliveries again from them, evictions): the same decisions and the same tables with
    the single-row statements as with the batch statements only."""
    fast = _run_steps(steps, seal)
    with mock.patch.multiple(SQLiteTx, decision_reads=SQLiteTx._reads, **GENERAL):
        general = _run_steps(steps, seal)
    assert fast == general


def test_each_thread_reuses_a_transaction_per_level(store: SQLiteStore) -> None:
    """A transaction begun relaxed is the one that says so (its counts commit at NORMAL),
    one begun flushed is not, however they alternate; each level's object is made once."""

    def level(tx: Any) -> tuple[bool, int, int]:
        return tx.relax(), tx.execute("PRAGMA synchronous")[0][0], id(tx)

    seen = [store.atomic(level, durable=durable) for durable in (True, False, False, True)]
    full, normal = 2, 1
    assert [(relaxed, sync) for relaxed, sync, _ in seen] == [
        (False, full), (True, normal), (True, normal), (False, full)
    ]  # fmt: skip
    assert seen[0][2] == seen[3][2] != seen[1][2] == seen[2][2]
    with store.transaction() as tx:
        assert tx.relax() is False
