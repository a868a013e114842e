"""A batch's columns packed as binary arrays by the store (store/pgarrays.py) reach
PostgreSQL as the same values psycopg's own array dumper sends: every type a columnar
statement casts to, with NULLs, empty strings, non-ASCII text and extreme numbers; an
empty column is an empty array; a column of another type than its cast goes to psycopg
as a plain list, which says what is wrong as before."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from oncebox.store.pgarrays import pack, pack_columns, pack_parts

SQL = (
    "SELECT * FROM unnest(%b::bigint[], %b::int[], %b::float8[], %b::bytea[], %b::text[])"
    " WITH ORDINALITY ORDER BY ordinality"
)
ROWS: list[tuple[Any, ...]] = [
    (1, 2, 1.5, b"\x00\xff", "plain"),
    (2**63 - 1, -(2**31), -0.0, b"", ""),
    (-(2**63), 2**31 - 1, 1e308, b"x" * 300, "héllo ☃ \U0001f600"),
    (None, None, None, None, None),
    (0, 0, 2.0000000001, b"\x00", "a\tb\nc\\d\"e'f"),
]


def plain(rows: list[tuple[Any, ...]]) -> list[list[Any]]:
    return [list(column) for column in zip(*rows, strict=True)]


def test_packed_columns_read_back_as_psycopg_sends_them(pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        packed = conn.execute(SQL, pack_columns(SQL, ROWS)).fetchall()
        dumped = conn.execute(SQL, plain(ROWS)).fetchall()
        assert packed == dumped
        assert [row[:5] for row in packed] == ROWS
        no_nulls = ROWS[:3] + ROWS[4:]
        assert conn.execute(SQL, pack_columns(SQL, no_nulls)).fetchall() == conn.execute(
            SQL, plain(no_nulls)
        ).fetchall()
        empty = pack_parts(SQL, [(5, [])])
        assert conn.execute(SQL, empty).fetchall() == []


def test_a_column_of_another_type_goes_as_a_plain_list(pg_url: str) -> None:
    assert isinstance(pack("bigint", [1.5]), list)
    assert isinstance(pack("text", [b"bytes"]), list)
    assert isinstance(pack("text", ["\ud800"]), list)  # a lone surrogate: not UTF-8
    assert isinstance(pack("bigint", [2**63]), list)
    with psycopg.connect(pg_url) as conn, pytest.raises(psycopg.DataError):
        conn.execute(SQL, pack_columns(SQL, [(2**63, 1, 1.0, b"", "")]))
