"""A batch's columns as PostgreSQL binary arrays, packed by the C loops of ``struct``,
``map`` and ``bytes.join`` instead of psycopg's array dumper, which visits each element
in Python (a quarter of a batch's client time on PostgreSQL before).

A columnar statement (store/sql/postgres/queries.sql) names each array's type in its
cast, ``%b::bigint[]``; :func:`pack_columns` packs each column as that type says. The
bytes are those psycopg would send for the same values (the binary array format:
a header, then each element's length and its value in network order, -1 for a NULL),
so what is stored does not change. A column it cannot pack exactly (a value of another
type than its cast says, an integer out of range) goes to psycopg as a plain list, as
before.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Sequence
from functools import cache
from itertools import chain, repeat
from typing import Any

import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format

_CAST = re.compile(r"%b::(\w+)\[\]")
_HEADER = struct.Struct(">iiiii")  # dimensions, has NULLs, element type, length, lower bound
_EMPTY = struct.Struct(">iii")
_LENGTH = struct.Struct(">i")
_NULL = b"\xff\xff\xff\xff"


class _Packed:
    """One column, already in PostgreSQL's binary array format."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


Packer = Callable[[Sequence[Any]], tuple[bytes, bool]]  # a column's bytes, and any NULL


def _fixed(code: str, size: int) -> Packer:
    """Elements of one width (integers, doubles): one struct call for the column."""
    one = struct.Struct(">i" + code)

    def pack(column: Sequence[Any]) -> tuple[bytes, bool]:
        if None not in column:
            layout = ">" + ("i" + code) * len(column)
            return struct.pack(layout, *chain.from_iterable(zip(repeat(size), column))), False
        return b"".join(_NULL if v is None else one.pack(size, v) for v in column), True

    return pack


def _varying(encode: Callable[[Any], bytes] | None) -> Packer:
    """Elements of their own lengths (bytes, text): lengths and values interleaved."""

    def pack(column: Sequence[Any]) -> tuple[bytes, bool]:
        values = list(map(encode, column)) if encode is not None else column
        if None not in column:
            lengths = map(_LENGTH.pack, map(len, values))
            return b"".join(chain.from_iterable(zip(lengths, values, strict=True))), False
        return b"".join(_NULL if v is None else _LENGTH.pack(len(v)) + v for v in values), True

    return pack


def _encode_text(value: Any) -> Any:
    return None if value is None else value.encode()


# Element type: (its oid, its array's oid, how a column of it is packed).
_TYPES: dict[str, tuple[int, int, Packer]] = {
    "bigint": (20, 1016, _fixed("q", 8)),
    "int": (23, 1007, _fixed("i", 4)),
    "float8": (701, 1022, _fixed("d", 8)),
    "bytea": (17, 1001, _varying(None)),
    "text": (25, 1009, _varying(_encode_text)),
}
_KINDS: dict[str, type[_Packed]] = {}


def _register() -> None:
    """One wrapper type per array type, each with a dumper that hands its bytes over as
    they are (registered once, process-wide: only the store makes these wrappers)."""
    for name, (_, array_oid, _) in _TYPES.items():
        kind = type(f"Packed_{name}", (_Packed,), {"__slots__": ()})
        dumper = type(
            f"Packed_{name}_Dumper",
            (Dumper,),
            {"format": Format.BINARY, "oid": array_oid, "dump": lambda self, obj: obj.data},
        )
        psycopg.adapters.register_dumper(kind, dumper)
        _KINDS[name] = kind


_register()


@cache
def column_types(sql: str) -> tuple[str, ...]:
    """The element type of each array a columnar statement takes, in order."""
    return tuple(_CAST.findall(sql))


def pack(element: str, column: Sequence[Any]) -> Any:
    """``column`` as a binary array of ``element`` (a type ``_TYPES`` knows), or the plain
    list where it cannot be packed exactly (psycopg then dumps and casts it)."""
    known = _TYPES.get(element)
    if known is None:
        return list(column)
    oid, _, packer = known
    if not column:  # no dimensions at all: how PostgreSQL writes an empty array
        return _KINDS[element](_EMPTY.pack(0, 0, oid))
    try:
        body, nulls = packer(column)
    except (struct.error, TypeError, AttributeError, UnicodeEncodeError):
        return list(column)  # psycopg's dumper decides, or says what is wrong, as before
    return _KINDS[element](_HEADER.pack(1, int(nulls), oid, len(column), 1) + body)


def pack_columns(sql: str, rows: Sequence[Sequence[Any]], utf8: bool = True) -> list[Any]:
    """A batch's rows as one array per column, each packed as the statement casts it
    (text as UTF-8: on a connection of another encoding, every column goes as a list)."""
    columns = list(zip(*rows, strict=True))
    types = column_types(sql)
    if len(types) != len(columns) or not utf8:
        return [list(column) for column in columns]
    return [pack(element, column) for element, column in zip(types, columns, strict=True)]


def pack_parts(sql: str, parts: Sequence[tuple[int, Sequence[Sequence[Any]]]]) -> list[Any]:
    """The arrays of a statement made of several columnar parts, each given as (how many
    columns, its rows; none makes each of its arrays empty), in the statement's order."""
    types = iter(column_types(sql))
    packed: list[Any] = []
    for width, rows in parts:
        columns = list(zip(*rows, strict=True)) if rows else [()] * width
        packed += [pack(next(types), column) for column in columns]
    return packed
