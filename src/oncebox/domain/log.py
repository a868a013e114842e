"""The log's entries: the append-only chain every state change that matters goes into."""

from __future__ import annotations

from typing import Annotated, NamedTuple

from oncebox.domain.kinds import Doc


class LogEntry(NamedTuple):
    """One log entry: ``hash = SHA-256(prev | step | state)``."""

    seq: Annotated[int, Doc("Its position (from 1).")]
    step: Annotated[str, Doc("What happened (accept, resolve, lease, ...).")]
    state: Annotated[str, Doc("The entry's state, as canonical JSON text.")]
    hash: Annotated[str, Doc("The chain hash (hex).")]


class PendingEvent(NamedTuple):
    """An event queued for the sealer: what it will append, and the record it seals."""

    id: int
    step: str
    state: str
    record_id: int | None
