"""A columnar statement's arrays, typed before psycopg sees them.

psycopg dumps a plain ``list`` by finding out its element type first: it scans the list
for a non-null element, looks up that element's dumper, then makes an array dumper for
it, twice per list (once for the cache key, once to dump), on every statement, since
each statement gets a fresh adaptation context. A single delivery sends some thirty
one-element arrays, and that search was about a third of what dumping them cost. The
statements already say each array's type (``%b::bigint[]``), so each column is handed
over as a list subclass of that type, whose dumper psycopg takes as it is (an array
dumper with a fixed oid needs no search): the elements are still dumped by psycopg's
own dumpers, and the wire bytes are the same.

The columns are flat lists, so their dumper writes a flat array's header itself
(:class:`ColumnDumper`) instead of psycopg's walk for nested lists, which measures each
level and calls itself per level: a dozen Python calls an array, the same bytes
(tests/test_pg_folds.py compares them).
"""

from __future__ import annotations

import functools
import re
import struct
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.adapt import Dumper
from psycopg.types.array import ListBinaryDumper

# SQL type -> (element oid, array oid), as PostgreSQL numbers them.
OIDS = {
    "bigint": (20, 1016),
    "int": (23, 1007),
    "float8": (701, 1022),
    "text": (25, 1009),
    "bytea": (17, 1001),
}
_ARRAY = re.compile(r"%b::(\w+)\[\]")


_HEAD = struct.Struct("!IIIII")  # dimensions, has a null, element oid, length, lower bound
_EMPTY = struct.Struct("!III")  # no dimension: no length, no lower bound
_HEAD_ONE = struct.Struct("!IIIIIi")  # _HEAD, then the one element's length
_LENGTH = struct.Struct("!i").pack
_NULL = b"\xff\xff\xff\xff"


class ColumnDumper(ListBinaryDumper):
    """A flat list as a one-dimensional binary array, its elements dumped by psycopg's
    own dumper of the element type (the bytes psycopg's dumper writes for a flat list)."""

    def dump(self, obj: list[Any]) -> bytes:
        if not obj:
            return _EMPTY.pack(0, 0, self.element_oid)
        dump = self.sub_dumper.dump  # type: ignore[union-attr]
        if len(obj) == 1:  # a single delivery's columns: most of the arrays it sends
            dumped = dump(obj[0]) if obj[0] is not None else None
            if dumped is None:
                return _HEAD.pack(1, 1, self.element_oid, 1, 1) + _NULL
            return b"".join((_HEAD_ONE.pack(1, 0, self.element_oid, 1, 1, len(dumped)), dumped))
        data: list[Any] = [b""]
        add = data.append
        null = 0
        for item in obj:
            dumped = dump(item) if item is not None else None
            if dumped is not None:
                add(_LENGTH(len(dumped)))
                add(dumped)
            else:
                null = 1
                add(_NULL)
        data[0] = _HEAD.pack(1, null, self.element_oid, len(obj), 1)
        return b"".join(data)


def _typed(sql_type: str) -> tuple[type[list[Any]], type[Dumper]]:
    element, array = OIDS[sql_type]
    column = type(f"{sql_type.title()}Column", (list,), {})
    dumper = type(
        f"{sql_type.title()}ColumnDumper",
        (ColumnDumper,),
        {"oid": array, "element_oid": element},
    )
    return column, dumper


TYPED = {sql_type: _typed(sql_type) for sql_type in OIDS}


def register(conn: psycopg.Connection[Any]) -> None:
    """Teach a connection the typed columns (on each new one)."""
    for column, dumper in TYPED.values():
        conn.adapters.register_dumper(column, dumper)


@functools.lru_cache(maxsize=256)
def column_types(sql: str) -> tuple[type[list[Any]], ...] | None:
    """The list class of each array parameter, in order; None where a statement takes
    one that is not a typed array (its columns then go as plain lists)."""
    found = _ARRAY.findall(sql)
    if not found or any(t not in TYPED for t in found) or sql.count("%") != len(found):
        return None
    return tuple(TYPED[t][0] for t in found)


def columns(sql: str, rows: Sequence[Sequence[Any]]) -> list[Any]:
    """A columnar statement's parameters: one array per column, typed where it says."""
    return typed(sql, list(zip(*rows, strict=True)))


def typed(sql: str, arrays: Sequence[Sequence[Any]]) -> list[Any]:
    """``arrays``, one per parameter of ``sql``, each as the list class its cast names."""
    types = column_types(sql)
    if types is None or len(types) != len(arrays):
        return [list(array) for array in arrays]
    return [kind(array) for kind, array in zip(types, arrays, strict=True)]
