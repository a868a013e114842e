"""The log read a page at a time, newest first, filtered by step, actor and inbox.

The step, the actor and the inbox are in each entry's state (JSON text, which the
chain hashes as it is), so a filter is applied to the entries as they are read, not by
the store: each page reads at most :data:`SCAN` entries, and says how far it read, so
that a filter few entries match costs a bounded read per page instead of the whole log.
An unknown step is refused naming the known ones, as every filter is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

from oncebox.domain import LogEntry
from oncebox.engine.checks import unknown

# Every step the engine writes to the log (engine/log.py event and the sealer).
LOG_STEPS = (
    "accept", "archive", "bulk", "complete", "evict", "forward_dead", "forward_pause",
    "forward_resume", "forward_retry", "lease", "quarantine", "recover", "release",
    "replay", "resolve", "retention_override", "retry", "review", "token", "token_revoke",
)  # fmt: skip
SCAN = 5000  # entries one page reads at most
CHUNK = 500  # entries read at once


class LogReading(Protocol):
    def log_head(self) -> LogEntry | None: ...

    def log_entries(self, start: int, end: int) -> list[LogEntry]: ...


@dataclass(frozen=True)
class LogFilter:
    """Which entries: each unset filter lets any through."""

    step: str | None = None
    actor: str | None = None
    inbox: str | None = None

    def __post_init__(self) -> None:
        if self.step is not None and self.step not in LOG_STEPS:
            raise unknown("step", self.step, LOG_STEPS)

    def matches(self, entry: LogEntry) -> bool:
        if self.step is not None and entry.step != self.step:
            return False
        if self.actor is None and self.inbox is None:
            return True
        try:
            state = json.loads(entry.state)
        except ValueError:
            return False
        if not isinstance(state, dict):
            return False
        if self.actor is not None and state.get("actor") != self.actor:
            return False
        named = state.get("inboxes")
        named = named if isinstance(named, list) else []
        return self.inbox is None or state.get("inbox") == self.inbox or self.inbox in named


@dataclass(frozen=True)
class LogPage:
    """A page of entries, newest first; ``older`` and ``newer`` are the cursors of the
    pages beside it (``before=older``, ``after=newer``; None: there is none); ``read`` is
    the lowest and highest seq this page read, ``size`` the log's."""

    entries: list[LogEntry]
    older: int | None
    newer: int | None
    read: tuple[int, int] | None
    size: int


def page(
    tx: LogReading,
    wanted: LogFilter,
    limit: int,
    *,
    before: int | None = None,
    after: int | None = None,
) -> LogPage:
    """Up to ``limit`` matching entries below seq ``before`` (default: from the newest)
    or, given ``after``, the ones just above it; newest first either way."""
    head = tx.log_head()
    size = head.seq if head is not None else 0
    if after is not None:
        return _upward(tx, wanted, limit, max(after, 0), size)
    top = size if before is None else min(before - 1, size)
    found: list[LogEntry] = []
    low, high = top + 1, top
    while high >= 1 and len(found) < limit and top - high < SCAN:
        start = max(1, high - CHUNK + 1)
        for entry in reversed(tx.log_entries(start, high + 1)):
            low = entry.seq
            if wanted.matches(entry):
                found.append(entry)
                if len(found) == limit:
                    break
        high = start - 1 if len(found) < limit else low - 1
    read = (low, top) if low <= top else None
    return LogPage(found, low if low > 1 else None, top if top < size else None, read, size)


def _upward(tx: LogReading, wanted: LogFilter, limit: int, after: int, size: int) -> LogPage:
    found: list[LogEntry] = []
    low = low_read = after + 1
    while low <= size and len(found) < limit and low - after <= SCAN:
        high = low
        for entry in tx.log_entries(low, min(low + CHUNK, size + 1)):
            high = entry.seq
            if wanted.matches(entry):
                found.append(entry)
                if len(found) == limit:
                    break
        low = high + 1
    top = low - 1
    read = (low_read, top) if low_read <= top else None
    older = low_read if low_read > 1 else None
    return LogPage(found[::-1], older, top if top < size else None, read, size)
