"""What an apply step is: the effects of a record, run inside the transaction that decides
it, so that a record and its effects commit or roll back together (I5).

A step is an object with a ``name`` and an ``apply(tx, changes)`` method; everything
else is optional. The built-in steps (``triage``, ``generation``) are written against
exactly this interface, so a user's step can do what they do:

- ``apply(tx, changes)`` gets every change the transaction makes, a batch at once (a
  single delivery is a batch of one). ``tx`` is a :class:`~oncebox.store.base.StepTx`:
  the step's own statements (:class:`~oncebox.store.sqlfile.Query`, read from its package
  with :func:`~oncebox.store.sqlfile.read_queries`) in the backend's ``dialect``, or raw
  SQL. Raising anything fails the changes; a step that takes one change at a time raises
  :class:`StepFailed` to name which one.
- ``migrations(dialect)``: the numbered migrations of the tables it owns, applied once
  per store when an inbox using it is declared (recorded per step, apart from the
  store's own schema).
- ``needs_fields`` and ``check_fields(fields)``: the fields it cannot run without (checked
  against the codec when the inbox is declared), and what it can take of them (checked
  at decode: a value it cannot take is the delivery's ``bad_field`` dead letter, never a
  failure inside the deciding transaction).

A plain function ``step(tx, change)`` is a step too (see :class:`FunctionStep`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

from oncebox.store.base import StepTx


class Change(NamedTuple):
    """A record's new content: its first revision, or one an operator accepted.

    ``previous`` holds the fields of the revision it replaces (None for the first), so
    a step can move its effects by the difference instead of adding the whole again.
    A named tuple: a batch builds one per record, and a dataclass costs several times
    more to build.
    """

    inbox: str
    inbox_id: int
    record_id: int
    identity: str
    revision: int
    fields: Mapping[str, Any]
    previous: Mapping[str, Any] | None = None


FieldCheck = Callable[[Mapping[str, Any]], None]


@runtime_checkable
class Step(Protocol):
    """The interface every apply step implements (see the module docstring)."""

    name: str

    def apply(self, tx: StepTx, changes: Sequence[Change]) -> None: ...


class StepFailed(Exception):
    """A step's failure on one of the changes it was given: ``index`` names which."""

    def __init__(self, index: int, cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.index = index
        self.cause = cause


class FunctionStep:
    """A plain function ``step(tx, change)`` as a step: called once per change, its
    failure naming the change it failed on. A ``check_fields`` or ``needs_fields``
    attribute on the function is the step's."""

    def __init__(self, function: Callable[[Any, Change], None], name: str) -> None:
        self.function = function
        self.name = name
        self.needs_fields: tuple[str, ...] = tuple(getattr(function, "needs_fields", ()))
        check = getattr(function, "check_fields", None)
        if check is not None:
            self.check_fields: FieldCheck = check

    def apply(self, tx: StepTx, changes: Sequence[Change]) -> None:
        for index, change in enumerate(changes):
            try:
                self.function(tx, change)
            except Exception as exc:
                raise StepFailed(index, exc) from exc


class NoEffect:
    """``none``: keep the record only."""

    name = "none"

    def apply(self, tx: StepTx, changes: Sequence[Change]) -> None:
        pass


def migrations_of(step: Step, dialect: str) -> Sequence[tuple[int, str]]:
    """The migrations of the tables ``step`` owns in ``dialect`` (none for most)."""
    found = getattr(step, "migrations", None)
    return found(dialect) if found is not None else ()


def field_check(step: Step) -> FieldCheck | None:
    """How ``step``'s fields are checked at decode, if it says."""
    check: FieldCheck | None = getattr(step, "check_fields", None)
    return check


def needed_fields(step: Step) -> tuple[str, ...]:
    """The fields a step cannot run without."""
    return tuple(getattr(step, "needs_fields", ()))
