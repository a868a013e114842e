"""A statement's one-element columns sent as scalars, its empty ones written into it.

A columnar statement (``unnest(%b::bigint[], ...)``, store/pgarrays.py) takes a batch as
one array per column. A single delivery's arrays have one element each, some thirty of
them a delivery, and psycopg makes each its own array dumper for the statement and calls
two Python methods per array (its key, its dump): about 500 K client instructions a
single delivery, a quarter of its whole cost. Sent as a scalar, an element is dumped by
psycopg's C dumper of its type, and the server builds the array: ``ARRAY[%b::bigint]``
in place of ``%b::bigint[]``, the literal ``'{}'::bigint[]`` for an empty one. The same
rows reach the same SQL (tests/test_pg_scalars.py compares what both leave), and a
batch's long columns are sent as they were.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from oncebox.store.pgarrays import TYPED, BigintScalar, IntScalar, check_int4

# A placeholder as psycopg reads it (every % of the text, in comments too), and a typed
# array's (%b::type[]) type.
_PLACEHOLDER = re.compile(r"%%|%\(\w+\)[sbt]|%[sbt](?:::(\w+)\[\])?")


def _int_scalar(value: int) -> IntScalar:
    """An int column's one element as a scalar. Its dumper (psycopg's int4, in C) writes
    the low 32 bits of any int: one out of range is refused, as the server refuses it."""
    check_int4(value)
    return IntScalar(value)


# An array type -> its typed column's class, the Python type its one element must be to
# travel as a scalar, and what makes it one whose dumper names the element's type.
_SCALARS: dict[str | None, tuple[type[list[Any]], type[Any], Callable[[Any], Any]]] = {
    "bigint": (TYPED["bigint"][0], int, BigintScalar),
    "int": (TYPED["int"][0], int, _int_scalar),
    "float8": (TYPED["float8"][0], float, float),
    "text": (TYPED["text"][0], str, str),
    "bytea": (TYPED["bytea"][0], bytes, bytes),
}


@functools.lru_cache(maxsize=512)
def _array_types(sql: str) -> tuple[str | None, ...]:
    """Each placeholder's array type, in order (None: not a typed array)."""
    return tuple(m.group(1) for m in _PLACEHOLDER.finditer(sql) if m.group(0) != "%%")


@functools.lru_cache(maxsize=512)
def _reshaped(sql: str, shape: str) -> str:
    """``sql`` with its placeholders as ``shape`` says, one letter each in order: ``k``
    kept, ``1`` a typed array of one element made ``ARRAY[%b::type]``, ``0`` an empty
    one made the literal ``'{}'::type[]`` (no parameter)."""
    kinds = iter(shape)

    def placeholder(match: re.Match[str]) -> str:
        if match.group(0) == "%%":
            return "%%"
        kind = next(kinds)
        if kind == "1":
            return f"ARRAY[%b::{match.group(1)}]"
        if kind == "0":
            return f"'{{}}'::{match.group(1)}[]"
        return match.group(0)

    return _PLACEHOLDER.sub(placeholder, sql)


def compact(sql: str, params: Any) -> tuple[str, Any]:
    """``sql`` and ``params`` with each typed column of one element sent as that element
    (its array built by the server) and each empty one written into the text. psycopg
    dumps a scalar with a dumper of its own written in C; a column of one takes a dumper
    made for the statement and two Python calls, about a statement's worth of work for
    every few columns a single delivery sends. The same rows reach the same SQL."""
    if type(params) is not list:
        return sql, params
    types = _array_types(sql)
    if len(types) != len(params):  # psycopg says what is wrong
        return sql, params
    shape: list[str] = []
    out: list[Any] = []
    for param, sql_type in zip(params, types, strict=True):
        scalar = _SCALARS.get(sql_type)
        if scalar is None or type(param) is not scalar[0] or len(param) > 1:
            shape.append("k")
            out.append(param)
        elif not param:
            shape.append("0")
        elif param[0] is None:
            shape.append("1")
            out.append(None)
        elif type(param[0]) is scalar[1]:
            shape.append("1")
            out.append(scalar[2](param[0]))
        else:  # not what the element's own dumper takes as it is: the array keeps it
            shape.append("k")
            out.append(param)
    return _reshaped(sql, "".join(shape)), out
