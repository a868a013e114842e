"""What every role of a SQL transaction is written in terms of: a backend's primitives.

Each backend runs the same statement names (``sql/common/queries.sql`` for what both
run as written, ``sql/<backend>/queries.sql`` for what differs) and gives these few
primitives over its driver; each role of the store interface is written once, in its
own module of this package, on top of them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields, is_dataclass
from functools import partial
from typing import Any, TypeVar

from oncebox.errors import StorageError
from oncebox.store.sqlfile import Query

Params = Sequence[Any] | Mapping[str, Any]
Statement = str | Query  # the store's own statement by name, or a step's own
R = TypeVar("R")

_SHAPES: dict[tuple[Statement, type], Callable[[Sequence[Any]], Any]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    if is_dataclass(cls):
        return tuple(f.name for f in fields(cls))
    return tuple(cls._fields)  # type: ignore[attr-defined]  # a NamedTuple


def shape(
    statement: Statement, cls: type[R], columns: Sequence[str]
) -> Callable[[Sequence[Any]], R]:
    """How to build ``cls`` from a row of ``statement``, matched by column name once per
    statement: a column the type lacks, or a field no column fills, is an error here
    rather than a value in the wrong field."""
    key = (statement, cls)
    make = _SHAPES.get(key)
    if make is None:
        names = _field_names(cls)
        columns = tuple(columns)
        if set(columns) - set(names) or len(columns) != len(set(columns)):
            raise StorageError(
                f"{statement}: columns {columns} do not all name {cls.__name__} fields"
            )
        if columns == names[: len(columns)]:
            # The usual case: the columns are the fields, in order (trailing ones defaulted).
            # A named tuple filled whole is the row's values as they are: built by
            # tuple.__new__ itself, what its Python-level _make calls, at C speed.
            whole = len(columns) == len(names) and hasattr(cls, "_make")
            make = partial(tuple.__new__, cls) if whole else (lambda row: cls(*row))  # type: ignore[type-var]
        else:

            def make(row: Sequence[Any]) -> Any:
                return cls(**dict(zip(columns, row, strict=True)))

        _SHAPES[key] = make
    return make


class SqlBase(ABC):
    """One transaction of a SQL backend: the primitives the roles are written with."""

    @abstractmethod
    def _described(self, name: Statement, params: Params = ()) -> tuple[Sequence[str], list[Any]]:
        """A named statement's column names and rows."""

    @abstractmethod
    def _one(self, name: Statement, params: Params = ()) -> Any:
        """The first row of a named statement, or None."""

    @abstractmethod
    def _all(self, name: Statement, params: Params = ()) -> list[Any]:
        """Every row of a named statement."""

    @abstractmethod
    def _run(self, name: Statement, params: Params = ()) -> int:
        """Run a named statement; how many rows it changed."""

    @abstractmethod
    def _many(self, name: Statement, rows: Sequence[Sequence[Any]]) -> int:
        """Run a named statement once per row of parameters (or once, over columns);
        how many rows it changed in all."""

    @abstractmethod
    def _many_rows(self, name: Statement, rows: Sequence[Sequence[Any]]) -> list[Any]:
        """Run a named statement once per row of parameters; every row it returned."""

    def _rows(self, name: Statement, params: Params, cls: type[R]) -> list[R]:
        """Every row of a named statement, each built as ``cls`` by column name."""
        columns, rows = self._described(name, params)
        if not rows:
            return []
        make = shape(name, cls, columns)
        return [make(row) for row in rows]

    def _row(self, name: Statement, params: Params, cls: type[R]) -> R | None:
        found = self._rows(name, params, cls)
        return found[0] if found else None
