"""A single delivery's one-element columns sent as scalars (store/pgscalars.py) and the
decision's and the seal's reads answered in binary (store/pgpipe.py), each against the
path beside it: the typed arrays as they were, the answers in text.

What must hold: the statement's text changes only where a typed column has one element
or none, the rows that reach the SQL are the same (on PostgreSQL, for every type, with
nulls), and a store deciding with both leaves what it left without them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import oncebox
from oncebox.store import pgarrays, pgpipe, pgscalars
from oncebox.store.pgarrays import TYPED, BigintScalar, IntScalar
from test_pg_folds import LISTING, _history, _state

Bigints, Ints, Floats, Texts, Byteas = (
    TYPED[t][0] for t in ("bigint", "int", "float8", "text", "bytea")
)
SQL = "SELECT * FROM unnest(%b::bigint[], %b::text[], %b::float8[]) -- 100%% %s"


# -- pure: the text and the parameters ---------------------------------------------------


def test_one_element_columns_become_scalars_and_empty_ones_literals() -> None:
    sql, params = pgscalars.compact(SQL, [Bigints([7]), Texts([]), Floats([1.5, 2.5]), "x"])
    assert sql == (
        "SELECT * FROM unnest(ARRAY[%b::bigint], '{}'::text[], %b::float8[]) -- 100%% %s"
    )
    assert params == [7, [1.5, 2.5], "x"]
    assert type(params[0]) is BigintScalar
    assert type(params[1]) is Floats


def test_a_null_element_travels_as_a_null_scalar() -> None:
    sql, params = pgscalars.compact(SQL, [Bigints([None]), Texts([None]), Floats([None]), "x"])
    assert sql.startswith("SELECT * FROM unnest(ARRAY[%b::bigint], ARRAY[%b::text], ARRAY[")
    assert params == [None, None, None, "x"]


@pytest.mark.parametrize(
    "params",
    [
        [Bigints([True]), Texts(["a", "b"]), Floats([1.0, 2.0]), "x"],  # a bool: not an int
        [Bigints([1.0]), Texts(["a", "b"]), Floats([1.0, 2.0]), "x"],  # psycopg's error
        [Bigints([1, 2]), Texts(["a", "b"]), Floats([1, 2]), "x"],  # many: as they were
        [[1], ["a"], [1.0], "x"],  # plain lists, not typed columns
        [Ints([1]), Texts(["a", "b"]), Floats([1.0, 2.0]), "x"],  # not the cast's type
    ],
)
def test_anything_else_is_sent_as_it_was(params: list[Any]) -> None:
    assert pgscalars.compact(SQL, params) == (SQL, params)


def test_parameters_by_name_or_miscounted_are_left_to_psycopg() -> None:
    named = {"a": Bigints([1])}
    assert pgscalars.compact("SELECT %(a)s::bigint[]", named) == ("SELECT %(a)s::bigint[]", named)
    short = [Bigints([1])]
    assert pgscalars.compact(SQL, short) == (SQL, short)


# -- on PostgreSQL -----------------------------------------------------------------------

COLUMNS = [
    ("bigint", Bigints, [2**62], BigintScalar),
    ("int", Ints, [-(2**31)], IntScalar),
    ("float8", Floats, [0.1], float),
    ("text", Texts, ["caf\u00e9"], str),
    ("bytea", Byteas, [b"\x00\xff"], bytes),
]


@pytest.mark.parametrize(("sql_type", "column", "one", "scalar"), COLUMNS)
def test_the_server_gets_the_rows_the_arrays_give(
    pg_url: str, sql_type: str, column: type[list[Any]], one: list[Any], scalar: type[Any]
) -> None:
    sql = f"SELECT x, pg_typeof(x)::text FROM unnest(%b::{sql_type}[]) WITH ORDINALITY AS t(x, n)"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        pgarrays.register(conn)
        for values in (one, [None], []):
            sent, params = pgscalars.compact(sql, [column(values)])
            assert sent != sql
            assert all(type(p) is scalar for p in params if p is not None)
            for _ in range(6):  # past psycopg's prepare threshold too
                assert (
                    conn.execute(sent, params).fetchall()
                    == conn.execute(sql, [column(values)]).fetchall()
                )


@pytest.fixture
def plain_url(pg_server: Any, pg_template: str) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield pg_server.create_database(name, template=pg_template)
    pg_server.drop_database(name)


def test_scalars_and_binary_answers_leave_what_arrays_and_text_leave(
    pg_url: str, plain_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same deliveries (new, duplicate, conflict, dead letter, a batch of each) on
    two stores: one as the store runs, one with every column sent as an array and every
    answer read as text. The same decisions, and the same rows and log."""
    with oncebox.open(pg_url, inboxes=[LISTING]) as box:
        now = _history(box)
    monkeypatch.setattr(pgpipe, "compact", lambda sql, params: (sql, params))
    monkeypatch.setattr(pgpipe, "_BINARY", frozenset())
    with oncebox.open(plain_url, inboxes=[LISTING]) as box:
        before = _history(box)
    assert now == before
    assert _state(pg_url) == _state(plain_url)
