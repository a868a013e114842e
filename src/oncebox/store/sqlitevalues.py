"""Many rows of a one-row ``INSERT ... VALUES (?, ...)`` in a few statements on SQLite.

Why: APSW's ``executemany`` runs its statement once a row, and each run costs a cache
lookup of its text, a reset and a start of the program on top of the row's own insert.
One statement of many ``VALUES`` rows pays those once for all of them (about 5% of the
instructions of a batch of new deliveries). The rows go in chunks whose sizes are
powers of two (at most :data:`LONGEST`), so a table has a handful of statement texts,
each prepared once a connection and then found in APSW's statement cache (which keeps
no statement longer than 16 KiB: the longest chunk stays well under that). Longer
chunks run a little less often but cost more to prepare: 32 rows counted fewest
instructions over two batches of 1,000 on a new connection (8, 16, 64 and 128 more).

A statement qualifies by its shape alone: one ``VALUES`` tuple of anonymous ``?``
placeholders, no ``RETURNING`` and no ``DO UPDATE`` (kept to one row a run, though
SQLite would upsert row by row). Its rows are inserted in order, one after another, as
by ``executemany``; ``DO NOTHING`` skips each row that conflicts as it comes, an earlier
row of the same statement's included.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from itertools import chain
from typing import Any

# What can be split: the text before the one VALUES tuple, its placeholders, what follows.
_ONE_TUPLE = re.compile(r"^(.*\bVALUES\s*)\(\s*\?(?:\s*,\s*\?)*\s*\)(.*)$", re.DOTALL)
LONGEST = 32  # rows in one statement at most (15 columns: 480 parameters, ~1 KiB of text)


class ValuesStatements:
    """The multi-row texts of the store's splittable statements, made when first asked."""

    def __init__(self, texts: Mapping[str, str]) -> None:
        self._parts: dict[str, tuple[str, str, str]] = {}
        for name, text in texts.items():
            found = _ONE_TUPLE.match(text)
            tail = found.group(2).upper() if found is not None else ""
            if found is not None and "RETURNING" not in tail and "DO UPDATE" not in tail:
                width = text[found.end(1) :].split(")", 1)[0].count("?")
                row = "(" + ",".join("?" * width) + ")"
                self._parts[name] = (found.group(1), row, found.group(2))
        self._made: dict[tuple[str, int], str] = {}

    def __contains__(self, name: object) -> bool:
        return name in self._parts

    def text(self, name: str, rows: int) -> str:
        """``name``'s statement with ``rows`` tuples of placeholders."""
        made = self._made.get((name, rows))
        if made is None:
            head, row, tail = self._parts[name]
            made = self._made[(name, rows)] = head + ",".join([row] * rows) + tail
        return made

    def chunks(self, name: str, rows: Sequence[Sequence[Any]]) -> Iterator[tuple[str, list[Any]]]:
        """Each chunk's statement text and its parameters (its rows' in one list), in order."""
        start, total = 0, len(rows)
        while start < total:
            size = min(LONGEST, 1 << ((total - start).bit_length() - 1))
            yield self.text(name, size), list(chain.from_iterable(rows[start : start + size]))
            start += size
