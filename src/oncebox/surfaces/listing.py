"""Listings as every surface sends them: a page at a time, each row bounded in bytes.

A listing never holds more than one page, and never a whole large value: the engine
reads each row cut to :data:`~oncebox.engine.views.LISTED` (a content or kept head to
its first 1,024 bytes, with its whole length and SHA-256; a text to 512 characters;
fields up to 2,048 characters, else left out) and names in ``cut`` what it shows only
in part. The whole row is one request away (``oncebox quarantine show``, ``GET
/v1/quarantine/{id}``). The HTTP service and the CLI write each page out as it comes
(:func:`json_array`), so an answer of many rows is never built whole in memory.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from oncebox.domain import Quarantined
from oncebox.engine.box import Oncebox
from oncebox.engine.tokens import Token
from oncebox.engine.views import LISTED
from oncebox.surfaces import letters
from oncebox.surfaces.paging import pages_after, row_id
from oncebox.surfaces.views import as_json

PAGE = 100  # rows read (and written out) at a time
LIMIT = 1000  # the most rows one listing gives (the API's, the console's pages are less)
Rows = list[dict[str, Any]]


def quarantine_pages(
    box: Oncebox, inbox: str | None, status: str | None, limit: int, after: int = 0
) -> Iterator[Rows]:
    """Up to ``limit`` quarantine rows of ``inbox`` (every inbox: None) after id
    ``after``, as JSON, a page at a time, each beside its original record."""
    names = {active.row.id: active.name for active in box.inboxes}
    if inbox is not None:
        box.inbox(inbox)  # an unknown inbox fails here, before any page

    def read(after: int, size: int) -> list[Quarantined]:
        return box.quarantined(inbox, status, size, after=after, preview=LISTED)

    for rows in pages_after(read, limit, after, PAGE, row_id):
        originals = box.originals(rows, LISTED)
        yield [
            as_json(row, inbox=names.get(row.inbox_id, f"#{row.inbox_id}"),
                    original=originals.get(row.id))
            for row in rows
        ]  # fmt: skip


def letter_pages(
    box: Oncebox, inboxes: Sequence[str], query: letters.Query, limit: int
) -> Iterator[Rows]:
    """Up to ``limit`` dead letters of ``inboxes`` that ``query`` selects, as JSON, a
    page at a time."""
    for found in letters.pages(box, inboxes, query, limit, PAGE):
        yield [as_json(letter, inbox=name) for name, letter in found]


def token_pages(box: Oncebox, limit: int, after: int = 0) -> Iterator[Rows]:
    """Up to ``limit`` tokens after id ``after``, as JSON, a page at a time; each inbox
    list cut to :data:`LISTED`'s text (never a secret nor an HMAC key)."""

    def read(after: int, size: int) -> list[Token]:
        return box.list_tokens(after, size, preview=LISTED)

    for found in pages_after(read, limit, after, PAGE, row_id):
        yield [token.to_dict() for token in found]


def json_array(
    pages: Iterator[Rows], encode: Callable[[dict[str, Any]], str], indent: str = ""
) -> Iterator[str]:
    """A JSON array of every row of ``pages``, a chunk per page (each row encoded by
    ``encode``; with ``indent``, one row a line, indented): ``[]`` for none."""
    first = True
    sep = f",\n{indent}" if indent else ","
    for rows in pages:
        if not rows:
            continue
        encoded = sep.join(encode(row) for row in rows)
        yield (f"[\n{indent}" if indent else "[") + encoded if first else sep + encoded
        first = False
    yield "[]" if first else ("\n]" if indent else "]")


def pretty(row: dict[str, Any]) -> str:
    """A row as ``json.dumps(rows, indent=2)`` writes it inside an array."""
    return json.dumps(row, indent=2, default=str).replace("\n", "\n  ")
