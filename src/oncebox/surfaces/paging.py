"""Reading a listing by id, one page after another, up to a limit."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol, TypeVar

Row = TypeVar("Row")


class Identified(Protocol):
    @property
    def id(self) -> int: ...


def row_id(row: Identified) -> int:
    """The id a page of rows that carry their own ends at."""
    return row.id


def pages_after(
    read: Callable[[int, int], list[Row]],
    limit: int,
    after: int,
    size: int,
    last_id: Callable[[Row], int],
) -> Iterator[list[Row]]:
    """Up to ``limit`` rows in pages of at most ``size``, each read on its own by
    ``read(after, size)`` from the id the page before ended at (``last_id`` of its last
    row); a short page is the last, so no read finds nothing after it."""
    sent = 0
    while sent < limit:
        want = min(size, limit - sent)
        page = read(after, want)
        if not page:
            return
        yield page
        sent, after = sent + len(page), last_id(page[-1])
        if len(page) < want:
            return
