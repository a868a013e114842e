"""What oncebox shows of one delivery key or one record over time: a timeline, each entry
one thing that happened, with the log entry that records it where there is one."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

from oncebox.domain.kinds import Doc, Instant


class Happened(StrEnum):
    """What a timeline entry says happened."""

    ACCEPTED = "accepted"  # the first valid delivery: the record
    DUPLICATES = "duplicates"  # the same content again (counted, with the last time)
    LATE_REPLAYS = "late_replays"  # resends after retention evicted it
    CONFLICT = "conflict"  # another content under its identity, kept in quarantine
    RESOLVED = "resolved"  # an operator kept the original or accepted the newcomer
    REJECTED = "rejected"  # invalid: kept as a dead letter
    REPLAYED = "replayed"  # a dead letter delivered again
    EVICTED = "evicted"  # retention dropped its content, keeping a tombstone


@dataclass(frozen=True)
class TimelineEntry:
    """One thing that happened to a record or under a delivery key."""

    at: Annotated[Instant | None, Doc("When (ISO 8601, server clock).")]
    what: Annotated[Happened, Doc("What happened.")]
    record_id: Annotated[int | None, Doc("The record it concerns, if one.")] = None
    revision: Annotated[int | None, Doc("The record's revision it made, if one.")] = None
    quarantine_id: Annotated[int | None, Doc("The quarantine row it concerns, if one.")] = None
    dead_letter_id: Annotated[int | None, Doc("The dead letter it concerns, if one.")] = None
    log_position: Annotated[int | None, Doc("The log entry that records it, if one.")] = None
    by: Annotated[str | None, Doc("Who did it (an operator's token name), if anyone.")] = None
    count: Annotated[int | None, Doc("How many times, where it counts arrivals.")] = None
    detail: Annotated[str | None, Doc("What else there is to say, in words.")] = None
