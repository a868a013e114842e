"""What SQLite's multi-row ``VALUES`` statements (:mod:`oncebox.store.sqlitevalues`) must
leave to ``executemany``: an apply step's statement with a parameter after its ``VALUES``
tuple (one row's value would be bound for every row, or the chunk would not bind), an
apply step's rows that do not each fill the tuple (flattened, they would shift their
neighbours' values instead of being refused), and a row so wide that a chunk of them
would pass SQLite's bound on parameters. Each compared with the general path."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from unittest import mock

import apsw
import pytest

import oncebox
from oncebox.engine.step import Change
from oncebox.store import sqlitetx
from oncebox.store.sqlfile import Query
from oncebox.store.sqlite import SQLiteStore

T = 1_800_000_000.0
# Upserts whose ON CONFLICT clause takes a parameter of its own: numbered (SQLite binds
# ?2 to the second value of the statement, which a multi-row text gives the first row),
# anonymous (one more placeholder than the rows' values) and named.
# Each with the values a row of it takes.
AFTER_THE_TUPLE = (
    ("INSERT INTO counted (k, n) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET n = n + ?2", 2),
    ("INSERT INTO counted (k, n, m) VALUES (?, ?, ?) ON CONFLICT (k) DO UPDATE SET n = n + ?", 4),
    ("INSERT INTO counted (k, n) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET n = n + :n", 2),
)


class _Counting:
    """An apply step that adds up each record's id on its identity's first letter with
    ``sql``, whose rows take ``width`` values."""

    name = "counting"

    def __init__(self, sql: str, width: int) -> None:
        self.query, self.width = Query("count", sql), width

    def apply(self, tx: Any, changes: Sequence[Change]) -> None:
        tx.execute("CREATE TABLE IF NOT EXISTS counted (k TEXT PRIMARY KEY, n INTEGER, m INTEGER)")
        rows = [(c.identity[0], c.record_id, c.record_id, c.record_id) for c in changes]
        tx.many(self.query, [row[: self.width] for row in rows])


def test_a_parameter_after_the_tuple_is_not_split() -> None:
    values = sqlitetx._VALUES
    for sql, _ in AFTER_THE_TUPLE:
        assert not values.splits(sql), sql
    assert values.splits("INSERT INTO counted (k, n) VALUES (?, ?) ON CONFLICT (k) "
                         "DO UPDATE SET n = n + excluded.n")  # fmt: skip


@pytest.mark.parametrize(("sql", "width"), AFTER_THE_TUPLE[:2])
def test_an_upsert_with_a_parameter_after_its_tuple_applies_as_one_by_one(
    sql: str, width: int
) -> None:
    """A batch applies what its deliveries ingested one at a time apply (a single
    delivery's one row is never split), not an error and not the first row's value."""
    seen = []
    for together in (True, False):
        inbox = oncebox.InboxSpec("s", codec="keyed", apply=_Counting(sql, width))
        box = oncebox.open("sqlite:///:memory:", clock=lambda: T, inboxes=[inbox])
        try:
            deliveries = [oncebox.Delivery(b"x", key=key) for key in ("a1", "a2", "b1", "a3")]
            if together:
                decided = box.ingest_batch("s", deliveries)
            else:
                decided = [box.ingest("s", delivery) for delivery in deliveries]
            with box.store.reading() as tx:
                counted = tx.execute("SELECT * FROM counted ORDER BY k")  # type: ignore[attr-defined]
            seen.append(([d.verdict for d in decided], counted))
        finally:
            box.close()
    assert seen[0] == seen[1]
    assert seen[0][1][0][:2] == ("a", 1 + 2 + 4)  # record ids 1, 2 and 4 counted on "a"


def _many(store: SQLiteStore, rows: list[tuple[Any, ...]]) -> tuple[str, list[Any]]:
    """An apply step's statement over ``rows``: the error it ends in, the rows left."""
    query = Query("pairs", "INSERT INTO pairs (a, b) VALUES (?, ?)")
    store.atomic(lambda tx: tx.execute("CREATE TABLE IF NOT EXISTS pairs (a, b)"))  # type: ignore[attr-defined]
    store.atomic(lambda tx: tx.execute("DELETE FROM pairs"))  # type: ignore[attr-defined]
    error = ""
    try:
        store.atomic(lambda tx: tx.many(query, rows))  # type: ignore[attr-defined]
    except (apsw.Error, oncebox.StorageError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    with store.reading() as tx:
        return error, tx.execute("SELECT * FROM pairs ORDER BY a")  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "rows",
    [
        [(1, 2, 3), (4,)],  # as many values as two rows: flattened, (1, 2) and (3, 4)
        [(1,), (2, 3, 4)],
        [(1, 2), (3, 4), (5,), (6, 7, 8)],
        [(1, 2, 3), (4, 5, 6)],  # each one too long
        [(1, 2), (3, 4), (5, 6)],  # these fit
    ],
)
def test_an_apply_steps_rows_are_refused_as_executemany_refuses_them(
    rows: list[tuple[Any, ...]],
) -> None:
    store = oncebox.open_store("sqlite:///:memory:", clock=lambda: T)
    assert isinstance(store, SQLiteStore)
    try:
        fast = _many(store, rows)
        with mock.patch.object(sqlitetx._VALUES, "splits", lambda sql: False):
            general = _many(store, rows)
    finally:
        store.close()
    assert fast == general
    assert bool(general[0]) == (len(set(map(len, rows))) != 1 or len(rows[0]) != 2)


def test_rows_too_wide_for_a_chunk_go_in_one_by_one() -> None:
    """A table of 1,100 columns: 32 of its rows would bind 35,200 parameters, over
    SQLite's 32,766; one a row, as executemany runs them, they all go in."""
    columns = [f"c{i}" for i in range(1100)]
    sql = f"INSERT INTO wide ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
    assert not sqlitetx._VALUES.splits(sql)
    store = oncebox.open_store("sqlite:///:memory:", clock=lambda: T)
    assert isinstance(store, SQLiteStore)
    try:
        store.atomic(lambda tx: tx.execute(f"CREATE TABLE wide ({', '.join(columns)})"))  # type: ignore[attr-defined]
        rows = [tuple(range(i, i + len(columns))) for i in range(40)]
        assert store.atomic(lambda tx: tx.many(Query("wide", sql), rows)) == 40  # type: ignore[attr-defined]
    finally:
        store.close()
