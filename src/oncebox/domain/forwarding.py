"""Forwarding: accepted revisions pushed on to configured destinations, through an outbox.

A forward is one revision owed to one destination: written in the transaction that
accepted the revision, claimed by a dispatcher under a lease of the one fence, sent with
the revision's idempotency key on every attempt, and kept with every attempt it took. One
that gave up is an outbound dead letter, for an operator to send again.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

from oncebox.domain.kinds import Content, Doc, Instant


class ForwardStatus(StrEnum):
    """Where a forward stands."""

    PENDING = "pending"  # waiting for its first attempt
    FAILED = "failed"  # an attempt failed; the next one is scheduled
    DELIVERED = "delivered"  # the destination took it
    DEAD = "dead"  # given up: an outbound dead letter, sent again only by an operator


UNFINISHED = (ForwardStatus.PENDING, ForwardStatus.FAILED)


class Outcome(StrEnum):
    """What one attempt came to."""

    DELIVERED = "delivered"  # taken (2xx, the stream's entry, the call returned)
    RETRY = "retry"  # failed in a way worth retrying (408, 425, 429, 5xx, timeout, ...)
    DEAD = "dead"  # failed for good (another 4xx), or the schedule ran out
    STALE = "stale"  # its claim was no longer current: another dispatcher owns it now


class Circuit(StrEnum):
    """A destination's circuit breaker."""

    CLOSED = "closed"  # sending
    OPEN = "open"  # a run of failures: nothing is sent until it may probe
    HALF_OPEN = "half-open"  # one probe out: its answer closes or opens it again


@dataclass(frozen=True)
class Forward:
    """One accepted revision owed to one destination (an outbox row)."""

    id: Annotated[int, Doc("The forward's id.")]
    inbox_id: Annotated[int, Doc("The inbox's id in the store.")]
    destination: Annotated[str, Doc("The destination's name.")]
    record_id: Annotated[int, Doc("The record forwarded.")]
    revision: Annotated[int, Doc("The revision forwarded (1: as first accepted).")]
    order_key: Annotated[
        str | None, Doc("What orders it under ordered = key (the record's identity).")
    ]
    status: Annotated[ForwardStatus, Doc("pending, failed (retrying), delivered or dead.")]
    attempts: Annotated[int, Doc("Attempts made so far.")]
    schedule_at: Annotated[
        int, Doc("Attempts made before its current schedule began (a retry starts one).")
    ]
    next_at: Annotated[Instant, Doc("When it is due next (ISO 8601).")]
    created_at: Annotated[Instant, Doc("When the revision was accepted (ISO 8601).")]
    updated_at: Annotated[Instant, Doc("When it last changed (ISO 8601).")]
    last_status: Annotated[int | None, Doc("The last answer's HTTP status, if any.")] = None
    last_error: Annotated[str | None, Doc("The last attempt's error, if it failed.")] = None
    finished_at: Annotated[Instant | None, Doc("When it was delivered or given up (ISO 8601).")] = (
        None
    )


@dataclass(frozen=True)
class Attempt:
    """One try at sending a forward, as it went."""

    forward_id: Annotated[int, Doc("The forward.")]
    number: Annotated[int, Doc("Its place among the forward's attempts (1: the first).")]
    at: Annotated[Instant, Doc("When its answer (or failure) was recorded (ISO 8601).")]
    outcome: Annotated[Outcome, Doc("delivered, retry, dead, or stale (its claim was lost).")]
    status: Annotated[int | None, Doc("The HTTP status answered, if any.")]
    latency: Annotated[float, Doc("Seconds from sending to the answer.")]
    answer: Annotated[Content | None, Doc("The first 1 KiB of the answer's body.")]
    error: Annotated[str | None, Doc("What went wrong, if it did.")]
    next_at: Annotated[Instant | None, Doc("When the next attempt is due, if one is.")]
    dispatcher: Annotated[str, Doc("The dispatcher that made it.")]


@dataclass(frozen=True)
class DestinationState:
    """What is kept of a destination beside its configuration: whether an operator
    paused it, and its circuit breaker (shared by every dispatcher of the store)."""

    inbox_id: int
    name: str
    paused_at: float | None = None
    paused_by: str | None = None
    circuit: str = Circuit.CLOSED.value
    failures: int = 0  # failed attempts in a row
    open_until: float | None = None  # open: when it may probe; half-open: the probe's end


@dataclass(frozen=True)
class Backlog:
    """A destination's forwards that are not finished, counted."""

    destination: str
    pending: int  # pending and failed (retrying) together
    oldest: float | None  # when the oldest of them was accepted
    delivered: int  # delivered in the window the figures cover
    failed_attempts: int  # attempts that failed in the same window
    dead: int  # given up, all time


@dataclass(frozen=True)
class ForwardFilter:
    """Which forwards an operator means: by destination, status, and when accepted."""

    destination: str | None = None
    status: ForwardStatus | None = None
    since: float | None = None
    until: float | None = None
    record_id: int | None = None
