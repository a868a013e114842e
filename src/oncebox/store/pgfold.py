"""Writes nobody reads back, held and sent to PostgreSQL as one statement.

psycopg handles each statement apart (a cursor, its parameters, its answer read), so a
decision's writes that wait for nothing (its records, its apply step's rows, its
counts) are held and go out as one statement when the next one does: each a
data-modifying ``WITH`` part ending ``RETURNING 1``, the main query counting each part's
rows. PostgreSQL runs the parts a main query does not read after it, last first; the
main query's counts read them in the order written, so the parts run in the order they
were held, as separate statements would run, and lock rows in the order that keeps
concurrent deciders from deadlocking (:meth:`PostgresTx.lock_identities`). Each count
is what the part's own statement would have answered as its row count.

Every part reads the snapshot the statement began with, so a part never sees what an
earlier part of the same statement wrote: a part whose table an earlier part writes (a
repeat counted on a record the same batch inserts) begins a statement of its own. Only
statements marked ``-- foldable`` are held, those that read nothing but their
parameters and their own table.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any, NamedTuple

_COMMENT = re.compile(r"^\s*--[^\n]*\n?", re.MULTILINE)
_TARGET = re.compile(r"(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+(\w+)", re.IGNORECASE)


class Held(NamedTuple):
    """A write held back: its statement, its parameters, and the rows it must change
    (checked before the commit; None where nothing is expected)."""

    sql: str
    params: Sequence[Any]
    expected: int | None = None
    why: str = ""


@functools.lru_cache(maxsize=256)
def bare(sql: str) -> str:
    """``sql`` without its comment lines and its closing semicolon."""
    return _COMMENT.sub("", sql).strip().rstrip(";").rstrip()


@functools.lru_cache(maxsize=256)
def target(sql: str) -> str | None:
    """The table a write changes; None where ``sql`` is not one plain write (or already
    returns rows of its own)."""
    match = _TARGET.match(bare(sql))
    if match is None or re.search(r"\bRETURNING\b", sql, re.IGNORECASE):
        return None
    return match.group(1).lower()


def groups(held: Sequence[Held]) -> list[list[Held]]:
    """``held`` in order, cut into statements: a write whose table an earlier one of its
    statement writes (or that names no table) begins the next."""
    out: list[list[Held]] = []
    written: set[str | None] = set()
    for write in held:
        table = target(write.sql)
        if not out or table is None or None in written or table in written:
            out.append([])
            written = set()
        out[-1].append(write)
        written.add(table)
    return out


@functools.lru_cache(maxsize=256)
def folded(parts: tuple[str, ...], then: str | None = None) -> str:
    """One statement running ``parts`` in their order; its one row: each part's count.
    With ``then``, a query over ``counts`` (each part's count, ``c0`` on, and their sum,
    ``written``) whose rows are the statement's instead: where it must run after the
    parts, it waits for ``written`` (a function's argument, say)."""
    writes = ",\n".join(f"w{i} AS (\n{bare(sql)}\nRETURNING 1)" for i, sql in enumerate(parts))
    counts = ", ".join(f"(SELECT count(*) FROM w{i}) AS c{i}" for i in range(len(parts)))
    if then is None:
        return f"WITH {writes}\nSELECT {counts}"
    names = ", ".join(f"c{i}" for i in range(len(parts)))
    total = " + ".join(f"c{i}" for i in range(len(parts)))
    summed = f"counts AS (SELECT {names}, {total} AS written FROM (SELECT {counts}) AS n)"
    return f"WITH {writes},\n{summed}\n{bare(then)}"
