"""Many rows of a one-row ``INSERT ... VALUES (?, ...)`` in a few statements on SQLite.

Why: APSW's ``executemany`` runs its statement once a row, and each run costs a cache
lookup of its text, a reset and a start of the program on top of the row's own insert.
One statement of many ``VALUES`` rows pays those once for all of them (about 4% of the
instructions of a batch of new deliveries). The rows go in chunks whose sizes are
powers of two (at most :data:`LONGEST`), so a table has a handful of statement texts,
each prepared once a connection and then found in APSW's statement cache (which keeps
no statement longer than 16 KiB: the longest chunk stays well under that). Longer
chunks run a little less often but cost more to prepare: 32 rows counted fewest
instructions over two batches of 1,000 on a new connection (8, 16, 64 and 128 more).

A statement qualifies by its shape alone (the store's own and an apply step's alike):
one ``VALUES`` tuple of anonymous ``?`` placeholders, no parameter after it (an upsert's
``SET n = n + ?`` would bind one row's value for every row, or fail to bind) and no
``RETURNING``. Its rows go
in in order, one after another, as by ``executemany``: SQLite checks each row's
conflict against the table as the rows before it left it, those of the same statement
included, so ``DO NOTHING`` skips and ``DO UPDATE`` updates exactly as row by row.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from itertools import chain
from typing import Any

# What can be split: INSERT INTO a table (its columns) VALUES one tuple of anonymous
# placeholders, then nothing but an ON CONFLICT clause (no RETURNING: checked apart).
_ONE_TUPLE = re.compile(
    r"""^(\s*INSERT\s+(?:OR\s+\w+\s+)?INTO\s+\w+\s*(?:\([\w\s,]*\))?\s*VALUES\s*)
        \(\s*\?(?:\s*,\s*\?)*\s*\)
        (\s*(?:ON\s+CONFLICT\b.*)?;?\s*)$""",
    re.DOTALL | re.IGNORECASE | re.VERBOSE,
)
LONGEST = 32  # rows in one statement at most (15 columns: 480 parameters, ~1 KiB of text)
KEPT = 512  # one-row texts remembered at most: an apply step may make its SQL as it goes
# SQLite's bound on a statement's parameters (SQLITE_MAX_VARIABLE_NUMBER's default): a
# row wider than this over LONGEST (a table of over 1,023 columns) is left one a row.
MOST_PARAMETERS = 32_766
# A parameter of any kind (?, ?NNN, :name, @name, $name) after the VALUES tuple; a text
# that merely holds one of these characters (in a comment, a string) is not split either.
_PARAMETER_AFTER = re.compile(r"[?:@$]")


class ValuesStatements:
    """The multi-row texts of splittable statements, by their one-row text, each made
    when first asked for."""

    def __init__(self) -> None:
        self._parts: dict[str, tuple[str, str, str] | None] = {}
        self._made: dict[tuple[str, int], str] = {}

    def splits(self, sql: str) -> bool:
        """Whether ``sql`` is a one-row INSERT that can take many rows at once."""
        parts = self._parts.get(sql, False)
        if parts is False:
            if len(self._parts) >= KEPT:  # made again when asked again
                self._parts.clear()
                self._made.clear()
            parts = self._parts[sql] = _split(sql)
        return parts is not None

    def text(self, sql: str, rows: int) -> str:
        """``sql`` (one that :meth:`splits`) with ``rows`` tuples of placeholders."""
        made = self._made.get((sql, rows))
        if made is None:  # split again: another thread may have cleared what it kept
            parts = _split(sql)
            assert parts is not None
            head, row, tail = parts
            made = self._made[(sql, rows)] = head + ",".join([row] * rows) + tail
        return made

    def fits(self, sql: str, rows: Sequence[Sequence[Any]]) -> bool:
        """Whether each row has exactly the parameters of ``sql``'s one tuple: flattened
        into one list, a short row and a long one would shift their neighbours' values
        silently where ``executemany`` refuses the row (checked for an apply step's rows;
        the store's own are made to fit)."""
        width = self.text(sql, 1).count("?")
        lengths = set(map(len, rows))
        return len(lengths) == 1 and lengths.pop() == width

    def chunks(self, sql: str, rows: Sequence[Sequence[Any]]) -> Iterator[tuple[str, list[Any]]]:
        """Each chunk's statement text and its parameters (its rows' in one list), in order."""
        start, total = 0, len(rows)
        while start < total:
            size = min(LONGEST, 1 << ((total - start).bit_length() - 1))
            yield self.text(sql, size), list(chain.from_iterable(rows[start : start + size]))
            start += size


def _split(sql: str) -> tuple[str, str, str] | None:
    """The text before the VALUES tuple, one row's placeholders, and the text after it."""
    lines = sql.splitlines()
    while lines and lines[0].lstrip().startswith("--"):  # what describes it
        lines.pop(0)
    bare = "\n".join(lines)
    found = _ONE_TUPLE.match(bare)
    if found is None:
        return None
    tail = found.group(2).upper()
    if "RETURNING" in tail or ";" in tail.rstrip().rstrip(";"):  # or a statement after it
        return None
    if _PARAMETER_AFTER.search(tail):
        return None
    width = bare[found.end(1) :].split(")", 1)[0].count("?")
    if width * LONGEST > MOST_PARAMETERS:
        return None
    return found.group(1), "(" + ",".join("?" * width) + ")", found.group(2)
