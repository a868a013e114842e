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

A batch's columns are long, and an element dumped by a Python step each (a dumper's
call, its length packed, two appends) cost a batched delivery some 60 K instructions.
A column of numbers without a null is packed by one struct call; a column of text or
bytes is its elements' lengths and bytes interleaved by slices and joined once; a
column of nulls only is its header and the null marker repeated. Anything else (a null
among values, a value of another type) takes the element-by-element path, which
writes psycopg's bytes or raises psycopg's error.

psycopg's int4 dumper writes the low 32 bits of any int it is given (psycopg itself only
picks it for a value it measured to fit), so an ``int`` column checks its elements: one
out of range is refused as the server refuses it (``integer out of range``), never sent
as another number.
"""

from __future__ import annotations

import functools
import re
import struct
from collections.abc import Callable, Sequence
from types import NoneType
from typing import Any

import psycopg
from psycopg import abc
from psycopg.adapt import Dumper
from psycopg.errors import NumericValueOutOfRange
from psycopg.types.array import ListBinaryDumper
from psycopg.types.numeric import Int4BinaryDumper, Int8BinaryDumper

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
INT4_MIN, INT4_MAX = -(2**31), 2**31 - 1


def check_int4(value: Any) -> None:
    """Refuse an int that an ``int`` column cannot hold, as the server would: psycopg's
    int4 dumper would write its low 32 bits instead. Other values are left to it."""
    if isinstance(value, int) and not INT4_MIN <= value <= INT4_MAX:
        raise NumericValueOutOfRange("integer out of range")


class ColumnDumper(ListBinaryDumper):
    """A flat list as a one-dimensional binary array, its elements dumped by psycopg's
    own dumper of the element type (the bytes psycopg's dumper writes for a flat list).
    A column of one Python type and no null, or of nulls only, is written whole in C
    calls (``whole``), without a Python step per element."""

    whole: Whole | None = None  # how a whole column of its type is written, if it can be
    check: Callable[[Any], None] | None = None  # refuses an element its dumper would mangle

    def dump(self, obj: list[Any]) -> bytes:
        if not obj:
            return _EMPTY.pack(0, 0, self.element_oid)
        dump = self.sub_dumper.dump  # type: ignore[union-attr]
        check = self.check
        if len(obj) == 1:  # a single delivery's columns: most of the arrays it sends
            if check is not None:
                check(obj[0])
            dumped = dump(obj[0]) if obj[0] is not None else None
            if dumped is None:
                return _HEAD.pack(1, 1, self.element_oid, 1, 1) + _NULL
            return b"".join((_HEAD_ONE.pack(1, 0, self.element_oid, 1, 1, len(dumped)), dumped))
        whole = self.whole
        if whole is not None and (whole is not _texts or _utf8(self.sub_dumper)):
            if obj[0] is None and set(map(type, obj)) == {NoneType}:
                return _HEAD.pack(1, 1, self.element_oid, len(obj), 1) + _NULL * len(obj)
            body = whole(obj)
            if body is not None:
                return _HEAD.pack(1, 0, self.element_oid, len(obj), 1) + body
        if check is not None:  # the whole path packed none: struct refuses what is out of range
            for item in obj:
                check(item)
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


Whole = Callable[[list[Any]], "bytes | None"]  # a column's elements, or None: not this way
_SAMPLE = "\u00e9"  # not ASCII: its bytes tell UTF-8 from another encoding


def _utf8(dumper: abc.Dumper | None) -> bool:
    """Whether psycopg writes text as UTF-8 here (the connection's encoding)."""
    try:
        return dumper is not None and dumper.dump(_SAMPLE) == _SAMPLE.encode()
    except UnicodeEncodeError:  # an encoding without it: not UTF-8 either
        return False


@functools.lru_cache(maxsize=64)
def _packer(code: str, count: int) -> Callable[..., bytes]:
    """One struct for ``count`` elements of a fixed width: each its length, its value."""
    return struct.Struct("!" + ("i" + code) * count).pack


def _fixed(code: str, width: int) -> Whole:
    """The elements of a column of fixed-width numbers, each its length and its value,
    packed at once; None where struct cannot pack one (a null among them, a value out of
    range or of another type): the general path then dumps them, or raises what
    psycopg raises. struct converts a value as psycopg's C dumpers do (``__index__``,
    ``__float__``), so the bytes are theirs."""

    def whole(obj: list[Any]) -> bytes | None:
        interleaved = [width] * (2 * len(obj))
        interleaved[1::2] = obj
        try:
            return _packer(code, len(obj))(*interleaved)
        except (struct.error, TypeError, OverflowError):
            return None

    return whole


class _Prefixes(dict[int, bytes]):
    """An element's length as the four bytes before it, kept for the usual lengths."""

    def __missing__(self, length: int) -> bytes:
        prefix = _LENGTH(length)
        if length < 4096:
            self[length] = prefix
        return prefix


_PREFIX = _Prefixes().__getitem__


def _prefixed(parts: list[bytes]) -> bytes:
    """Each part after its length, all in C calls (no Python step per element)."""
    out: list[bytes | None] = [None] * (2 * len(parts))
    out[1::2] = parts
    out[0::2] = map(_PREFIX, map(len, parts))
    return b"".join(out)  # type: ignore[arg-type]


def _texts(obj: list[Any]) -> bytes | None:
    """A column of text, each element its length and its UTF-8 bytes (what psycopg's
    text dumper writes on a UTF-8 connection); None where any is not a str (a null), or
    has no UTF-8 form."""
    try:
        return _prefixed(list(map(str.encode, obj)))
    except (TypeError, UnicodeEncodeError):
        return None


def _bytes(obj: list[Any]) -> bytes | None:
    """A column of bytes, each element its length and itself (psycopg dumps bytes as
    they are); None where any is not a bytes (a null, a Binary wrapper, a memoryview)."""
    if set(map(type, obj)) != {bytes}:
        return None
    return _prefixed(obj)


# Element oid -> how a whole column of it is written (see ColumnDumper.dump).
_WHOLE: dict[int, Whole] = {
    20: _fixed("q", 8),
    23: _fixed("i", 4),
    701: _fixed("d", 8),
    25: _texts,
    17: _bytes,
}


def _typed(sql_type: str) -> tuple[type[list[Any]], type[Dumper]]:
    element, array = OIDS[sql_type]
    column = type(f"{sql_type.title()}Column", (list,), {})
    dumper = type(
        f"{sql_type.title()}ColumnDumper",
        (ColumnDumper,),
        {
            "oid": array,
            "element_oid": element,
            "whole": staticmethod(_WHOLE[element]),
            "check": staticmethod(check_int4) if sql_type == "int" else None,
        },
    )
    return column, dumper


TYPED = {sql_type: _typed(sql_type) for sql_type in OIDS}


def register(conn: psycopg.Connection[Any]) -> None:
    """Teach a connection the typed columns and scalars (on each new one)."""
    for column, dumper in TYPED.values():
        conn.adapters.register_dumper(column, dumper)
    conn.adapters.register_dumper(BigintScalar, Int8BinaryDumper)
    conn.adapters.register_dumper(IntScalar, Int4BinaryDumper)


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


class BigintScalar(int):
    """An int that travels as a bigint, on its own (:mod:`oncebox.store.pgscalars`):
    psycopg's C dumper of int8 is registered for it (psycopg's own ``Int8`` is built by
    a Python ``__new__``, several times the cost)."""


class IntScalar(int):
    """An int that travels as an int (int4), on its own."""
