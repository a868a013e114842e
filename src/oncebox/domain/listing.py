"""What a listing asks of the store: which rows (a filter), and how much of each value
(a preview), so that no large value is read whole to list it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeadLetterFilter:
    """Which dead letters to list: each unset filter lets any through. ``since`` and
    ``until`` are server-clock seconds; ``search`` is bytes the stored head contains;
    ``after`` is the last id of the page before; ``status``: open, replayed or archived;
    ``newest``: newest first (``after``, when set, is then the lowest id shown before)."""

    reason: str | None = None
    since: float | None = None
    until: float | None = None
    search: bytes | None = None
    after: int = 0
    status: str | None = None
    newest: bool = False


@dataclass(frozen=True)
class Preview:
    """How much of each value a listing reads: ``content`` bytes of a content or a kept
    head, ``text`` characters of each text a sender chose (identity, key, detail,
    transport facts, note), ``fields`` characters of the named fields' JSON text. A
    listing reads rows cut so that no large value is read whole; their whole lengths
    come with them (``content_length``, ``kept``)."""

    content: int
    text: int
    fields: int


_ALL = 2**31 - 1
WHOLE = Preview(_ALL, _ALL, _ALL)  # every value whole


@dataclass(frozen=True)
class RecordWindow:
    """Which of an inbox's records a listing page reads, in first-seen order (``newest``:
    the newest first): first seen from ``low`` to ``high``, both included, and past the
    row the page before ended on (first seen at ``at``, id ``id``; ties go by id)."""

    low: float
    high: float
    at: float
    id: int
    newest: bool
