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
    # The record revision it sealed, if it sealed one: its seq is that revision's feed
    # position. Not hashed: the chain covers step and state, which name them already.
    inbox_id: Annotated[int | None, Doc("The inbox of the revision it sealed, if any.")] = None
    record_id: Annotated[int | None, Doc("The record whose revision it sealed, if any.")] = None
    revision: Annotated[int | None, Doc("The revision it sealed, if any.")] = None


class LogEvent(NamedTuple):
    """An event to append to the log. One that seals a record's revision names the
    record, its revision and its inbox: sealing it also gives it its feed position."""

    step: str
    state: str
    record_id: int | None = None
    revision: int | None = None
    inbox_id: int | None = None


class PendingEvent(NamedTuple):
    """An event queued for the sealer: what it will append, and the record revision it
    seals (if it seals one)."""

    id: int
    step: str
    state: str
    record_id: int | None
    revision: int | None = None
    inbox_id: int | None = None
