"""An apply step's integer that does not fit its statement's ``int`` column is refused on
PostgreSQL, never written as another number.

A columnar statement's arrays are typed before psycopg sees them (store/pgarrays.py) and
a one-element one is sent as its element (store/pgscalars.py). psycopg's int4 dumper,
which both use for an ``%b::int[]`` column, writes the low 32 bits of whatever it is
given: psycopg itself only picks it for a value it measured to fit. A plain list, as
psycopg dumps it, reaches the server as the number it is, and the cast to ``int[]`` is
refused (``integer out of range``). So must the typed column and the scalar be: a value
wrapped to 32 bits would be stored as a number nobody sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
import pytest
from psycopg.adapt import Transformer
from psycopg.errors import NumericValueOutOfRange

import oncebox
from oncebox import ApplyError, Delivery, InboxSpec
from oncebox.store import pgarrays
from oncebox.store.pgarrays import TYPED
from oncebox.store.pgscalars import compact
from oncebox.store.sqlfile import parse_queries

TOO_BIG = 3_000_000_000  # over 2**31 - 1: wrapped to 32 bits it is -1,294,967,296
QUERIES = parse_queries(
    """
-- name: put_amounts
-- columnar
INSERT INTO amounts (record_id, amount) SELECT * FROM unnest(%b::bigint[], %b::int[]);
"""
)


class Amounts:
    """A user's step: one row a new record, its amount in an ``integer`` column."""

    name = "amounts"

    def __init__(self, amount: int) -> None:
        self.amount = amount

    def apply(self, tx: Any, changes: Sequence[Any]) -> None:
        tx.many(QUERIES["put_amounts"], [(c.record_id, self.amount) for c in changes])


def _stored(url: str) -> list[tuple[int, int]]:
    with psycopg.connect(url) as conn:
        return [tuple(row) for row in conn.execute("SELECT * FROM amounts ORDER BY 1")]


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize("amount", [TOO_BIG, -TOO_BIG, 2**31, -(2**31) - 1])
@pytest.mark.parametrize("size", [1, 3])  # one: sent as a scalar; three: an array
def test_an_int_out_of_range_fails_the_step_and_stores_nothing(
    pg_url: str, amount: int, size: int
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE amounts (record_id bigint PRIMARY KEY, amount integer)")
    spec = InboxSpec("amounts", codec="keyed", apply=Amounts(amount))
    with oncebox.open(pg_url, inboxes=[spec]) as box:
        deliveries = [Delivery(b"x%d" % i, key=f"k{i}") for i in range(size)]
        with pytest.raises(ApplyError):
            box.ingest_batch("amounts", deliveries)
        assert _stored(pg_url) == []
        assert box.stats("amounts")["records"] == 0
    # The same step with a value that fits stores it as it is.
    ok = InboxSpec("amounts", codec="keyed", apply=Amounts(2**31 - 1))
    with oncebox.open(pg_url, inboxes=[ok]) as box:
        box.ingest_batch("amounts", [Delivery(b"y%d" % i, key=f"y{i}") for i in range(size)])
    assert [amount for _, amount in _stored(pg_url)] == [2**31 - 1] * size


OUT_OF_RANGE = [[TOO_BIG], [1, TOO_BIG], [TOO_BIG, 2, 3], [None, -TOO_BIG], [2**31, None, 1]]


@pytest.mark.parametrize("values", OUT_OF_RANGE)
def test_an_int_column_refuses_what_its_dumper_would_wrap(values: list[Any]) -> None:
    """Every path of the column dumper (one element, the whole column, element by
    element) and the scalar a one-element column becomes."""
    column, dumper = TYPED["int"]
    with pytest.raises(NumericValueOutOfRange):
        dumper(column, Transformer()).dump(column(values))
    if len(values) == 1:  # sent as a scalar
        with pytest.raises(NumericValueOutOfRange):
            compact("SELECT %b::int[]", [column(values)])
    fits = [None if value is None else 2**31 - 1 for value in values]  # the edge: kept
    assert dumper(column, Transformer()).dump(column(fits))


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize("values", OUT_OF_RANGE)
def test_the_server_never_gets_a_wrapped_int(pg_url: str, values: list[Any]) -> None:
    """What reaches the server for an int column: the numbers given, or nothing."""
    with psycopg.connect(pg_url) as conn:
        pgarrays.register(conn)
        with pytest.raises(psycopg.DataError):
            sql, params = compact("SELECT %b::int[]", [TYPED["int"][0](values)])
            conn.execute(sql, params).fetchone()
