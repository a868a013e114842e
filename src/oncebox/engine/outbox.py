"""The outbox: forwards written with the decisions, claimed under the one fence, settled.

- **Written in the deciding transaction** (:func:`enqueue`): every accepted record and
  every accepted revision gets one forward per destination of its inbox, so a record and
  what it owes downstream commit together or not at all. An inbox without destinations
  writes nothing more.
- **Claimed under the one fence** (:func:`claim`): a claim is a lease of kind
  ``forward`` on the one row (:mod:`oncebox.engine.fence`), for longer than the request's
  timeout. Whatever the dispatcher then learns is written by :func:`settle` only while
  that lease is still the row's current one and has not run out by the server clock: a
  dispatcher paused past its lease cannot mark done (or failed) what another dispatcher
  has claimed and sent again since; its answer is kept as a ``stale`` attempt and
  changes nothing.
- **Retried as the destination says** (:func:`judge`, :func:`next_delay`): 2xx delivered;
  408, 425, 429, 5xx, timeouts and connection errors retried on the schedule with ±20%
  jitter, ``Retry-After`` honoured up to the schedule's longest delay; any other answer
  dead at once unless its status is in ``retry_on``; dead when the schedule runs out.
- **A circuit per destination** (:func:`breaker`), shared by every dispatcher through the
  store: a run of failures opens it; after the cooldown one probe goes out (half-open);
  its success closes it, its failure opens it again.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import NamedTuple, Protocol

from oncebox.domain import FeedEntry, Fenced, Resource
from oncebox.domain.forwarding import (
    UNFINISHED,
    Attempt,
    Circuit,
    DestinationState,
    Forward,
    ForwardStatus,
    Outcome,
)
from oncebox.engine import fence, log
from oncebox.engine.destinations import Destination
from oncebox.engine.feed import idempotency_key
from oncebox.engine.ingest import ActiveInbox
from oncebox.store.base import Events, FencePort, Outbox

ANSWER_HEAD = 1024  # bytes of an answer kept with its attempt
ERROR_MAX = 1000  # characters of an error kept
RETRIED = frozenset({408, 425, 429})  # besides 5xx: worth another attempt
JITTER = 0.2  # each scheduled delay is moved by up to this fraction, either way
HOUR = 3600


class OutboxTx(Outbox, FencePort, Events, Protocol):
    """What claiming and settling forwards takes: the outbox, the fence its claims are
    leases of, and the log (dead forwards, operators' actions)."""


def resource(forward: Forward) -> Resource:
    """The fence's resource a claim on ``forward`` is a lease of."""
    return Resource(Fenced.FORWARD, forward.inbox_id, str(forward.id))


# -- written with the decision ------------------------------------------------------------
def enqueue(
    tx: Outbox, inbox: ActiveInbox, revisions: Sequence[tuple[int, int, str | None]], now: float
) -> None:
    """One forward per revision and destination, in the deciding transaction:
    ``revisions`` are (record id, revision, identity) each."""
    if not inbox.forward or not revisions:
        return
    inbox_id = inbox.row.id
    tx.queue_forwards(
        [
            (inbox_id, dest.name, record_id, revision, identity if dest.ordered else None,
             now + dest.retry[0], now, now)
            for dest in inbox.forward
            for record_id, revision, identity in revisions
        ]
    )  # fmt: skip


# -- claimed ------------------------------------------------------------------------------
class Claim(NamedTuple):
    """A forward a dispatcher holds: what it carries, under which lease, and the key
    every attempt at it is sent with."""

    forward: Forward
    entry: FeedEntry
    key: str  # the revision's idempotency key
    token: int
    expires_at: float
    body: bytes


def held_back(state: DestinationState | None, now: float) -> bool:
    """Whether nothing of the destination may be claimed at ``now``: it is paused, or its
    circuit is open and cooling down, or half-open with its probe out."""
    if state is None:
        return False
    if state.paused_at is not None:
        return True
    return (
        state.circuit != Circuit.CLOSED and state.open_until is not None and now < state.open_until
    )


def claim(
    tx: OutboxTx,
    destination: Destination,
    inbox: str,
    inbox_id: int,
    store_id: str,
    holder: str,
    limit: int,
    now: float,
) -> list[Claim]:
    """Up to ``limit`` of the destination's due forwards, each under a new lease held by
    ``holder`` for :attr:`Destination.lease` seconds; none while the destination is
    paused or its circuit open (one, as the probe, once it may probe). Only its inbox's
    (``inbox``, ``inbox_id``): a name the configuration moved to another inbox is not
    sent what the first one still owed."""
    state = tx.destination_state(destination.name)
    if held_back(state, now):
        return []
    probing = None
    if state is not None and state.circuit != Circuit.CLOSED:
        limit = 1  # the probe: its answer closes the circuit or opens it again
        probing = replace(
            state, circuit=Circuit.HALF_OPEN.value, open_until=now + destination.lease
        )
        if not tx.put_circuit(probing, state):
            return []  # another dispatcher took the probe (or settled one) since the read
    found: list[Claim] = []
    gone: list[Forward] = []
    for row in tx.due_forwards(destination.name, inbox_id, now, limit, destination.ordered):
        try:
            lease = fence.take(tx, resource(row), holder, destination.lease, now)
        except fence.LeaseHeld:
            continue  # claimed meanwhile by another dispatcher: it is theirs
        entry = tx.forward_revision(row.record_id, row.revision)
        if entry is None or entry.content is None:
            gone.append(row)
            continue
        key = idempotency_key(store_id, row.inbox_id, row.record_id, row.revision)
        body = body_of(inbox, entry, key)
        found.append(Claim(row, entry, key, lease.token, lease.expires_at, body))
    if gone:
        # Retention dropped the record before it could be sent: nothing is left to send.
        dead = [
            replace(f, status=ForwardStatus.DEAD, updated_at=now, finished_at=now,
                    last_error="the record was evicted by retention before it was sent")
            for f in gone
        ]  # fmt: skip
        tx.settle_forwards(dead)
        tx.drop_claims([(f.inbox_id, f.id) for f in dead])
        for forward in dead:  # dead as any other: an outbound dead letter, in the log
            _log_dead(tx, forward, forward.last_error or "dead")
    if probing is not None and state is not None and not found:
        # No probe went: the circuit is left as it was (this transaction holds its row),
        # so what comes due next is the probe, not held back for a lease.
        tx.put_circuit(state, probing)
    return found


def body_of(inbox: str, entry: FeedEntry, key: str) -> bytes:
    """What is sent for a revision: the same bytes on every attempt (a receiver that
    compares what it got twice under one key finds them equal), in canonical JSON."""
    content = entry.content or b""
    try:
        shown: dict[str, str] = {"text": content.decode("utf-8")}
    except UnicodeDecodeError:
        import base64

        shown = {"base64": base64.b64encode(content).decode("ascii")}
    document = {
        "type": "oncebox.revision",
        "idempotency_key": key,
        "inbox": inbox,
        "record_id": entry.record_id,
        "revision": entry.revision,
        "identity": entry.identity,
        "witness": entry.witness.hex(),
        "fields": json.loads(entry.fields) if entry.fields else None,
        "content": shown,
        "first_seen": _iso(entry.first_seen),
        "decided_at": _iso(entry.decided_at),
        "device_time": entry.device_time,
        "snapshot_id": entry.snapshot_id,
        "delivery_id": entry.delivery_id,
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _iso(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    shown = datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")
    return shown.replace("+00:00", "Z")


# -- judged ---------------------------------------------------------------------------------
class Sent(NamedTuple):
    """What one attempt saw: the answer's status (None: none came), the first bytes of
    its body, the error (a timeout, a refused connection, an exception), how long it
    took, and ``Retry-After`` in seconds where the answer gave one."""

    claim: Claim
    status: int | None
    latency: float
    answer: bytes | None = None
    error: str | None = None
    retry_after: float | None = None
    taken: bool | None = None  # a non-HTTP destination's own word (None: judge the status)


def judge(destination: Destination, sent: Sent) -> Outcome:
    """Delivered, retried or dead, by the answer alone."""
    if sent.taken is not None:
        return Outcome.DELIVERED if sent.taken else Outcome.RETRY
    status = sent.status
    if status is None:
        return Outcome.RETRY  # a timeout or a connection error: nothing was said
    if 200 <= status <= 299:
        return Outcome.DELIVERED
    if status in RETRIED or 500 <= status <= 599 or status in destination.retry_on:
        return Outcome.RETRY
    return Outcome.DEAD  # any other 4xx (and 1xx, 3xx): sending it again changes nothing


def next_delay(
    destination: Destination,
    made: int,
    retry_after: float | None,
    rng: Callable[[], float] = random.random,
) -> float | None:
    """Seconds until the next attempt, after ``made`` attempts of the current schedule,
    or None when the schedule has run out (the forward is dead). The scheduled delay is
    jittered ±20%; a ``Retry-After`` may put it later, never past the schedule's longest
    delay."""
    if made >= len(destination.retry):
        return None
    delay = destination.retry[made] * (1 - JITTER + 2 * JITTER * rng())
    if retry_after is not None and retry_after > delay:
        delay = min(retry_after, max(destination.retry))
    return delay


# -- settled ------------------------------------------------------------------------------
def settle(
    tx: OutboxTx,
    destination: Destination,
    results: Sequence[Sent],
    dispatcher: str,
    now: float,
    rng: Callable[[], float] = random.random,
) -> list[Attempt]:
    """Record what each attempt came to, under its claim's lease: a claim that is no
    longer current (superseded, run out, or its forward settled by another) changes
    nothing and is kept as a ``stale`` attempt. Updates the destination's circuit."""
    attempts: list[Attempt] = []
    judged: list[Outcome] = []  # as answered, a failure whose schedule ran out a retry
    settled: list[Forward] = []
    dead: list[tuple[Forward, str]] = []
    for sent in results:
        held = sent.claim
        row = tx.get_forward(held.forward.id, lock=True)  # an operator's retry may be writing
        lease = fence.held(tx, resource(held.forward))
        refused = fence.refused(lease, held.token, now)
        answer = sent.answer[:ANSWER_HEAD] if sent.answer is not None else None
        error = sent.error[:ERROR_MAX] if sent.error is not None else None
        if row is None or refused is not None or row.status not in UNFINISHED:
            attempts.append(
                Attempt(held.forward.id, 0, now, Outcome.STALE, sent.status, sent.latency,
                        answer, error or f"claim {held.token} lost ({refused or 'settled'})",
                        None, dispatcher)
            )  # fmt: skip
            continue
        outcome = judge(destination, sent)
        judged.append(outcome)
        made = row.attempts + 1
        delay = None
        if outcome is Outcome.RETRY:
            delay = next_delay(destination, made - row.schedule_at, sent.retry_after, rng)
            if delay is None:
                outcome = Outcome.DEAD
        why = error or (f"HTTP {sent.status}" if outcome is not Outcome.DELIVERED else None)
        status = {Outcome.DELIVERED: ForwardStatus.DELIVERED, Outcome.DEAD: ForwardStatus.DEAD}
        changed = replace(
            row,
            status=status.get(outcome, ForwardStatus.FAILED),
            attempts=made,
            next_at=now + delay if delay is not None else row.next_at,
            updated_at=now,
            last_status=sent.status,
            last_error=why,
            finished_at=now if outcome is not Outcome.RETRY else None,
        )
        settled.append(changed)
        if outcome is Outcome.DEAD:
            dead.append((changed, why or "dead"))
        attempts.append(
            Attempt(row.id, made, now, outcome, sent.status, sent.latency, answer, why,
                    changed.next_at if delay is not None else None, dispatcher)
        )  # fmt: skip
    if settled:
        tx.settle_forwards(settled)
        tx.drop_claims([(f.inbox_id, f.id) for f in settled])
    tx.add_attempts(attempts)
    for forward, why in dead:
        _log_dead(tx, forward, why)
    counts = Counter(a.outcome.value for a in attempts)
    tx.count_forward_outcomes(destination.name, int(now // HOUR), counts)
    if settled:
        breaker(tx, destination, settled[0].inbox_id, judged, now)
    return attempts


def _log_dead(tx: OutboxTx, forward: Forward, why: str) -> None:
    log.event(tx, "forward_dead", {
        "destination": forward.destination, "forward": forward.id,
        "record": forward.record_id, "revision": forward.revision,
        "attempts": forward.attempts, "error": why[:200],
    })  # fmt: skip


def breaker(
    tx: OutboxTx, destination: Destination, inbox_id: int, judged: Sequence[Outcome], now: float
) -> None:
    """The destination's circuit after attempts answered as ``judged``: any delivery
    closes it; failures worth a retry (the receiver is down or overloaded, not refusing),
    whether or not the forward's schedule had one left, add to the run, and a run of
    ``circuit_failures``, or a failed probe, opens it for the cooldown. A refused probe
    lets the next claim probe again."""
    counted = [o for o in judged if o in (Outcome.DELIVERED, Outcome.RETRY)]
    while True:  # written only over what was read: another settle's count is never lost
        before = tx.destination_state(destination.name)
        read = before or DestinationState(inbox_id, destination.name)
        if counted:
            state = _after(read, destination, counted, now)
        elif read.circuit == Circuit.HALF_OPEN:
            # A refused probe says nothing of an outage, but it is back: the next claim
            # sends another, rather than waiting out this one's lease.
            state = replace(read, open_until=now)
        else:
            return
        if state == read or tx.put_circuit(state, before):
            return


def _after(
    state: DestinationState, destination: Destination, counted: Sequence[Outcome], now: float
) -> DestinationState:
    """The circuit ``state`` becomes through the ``counted`` answers, in order."""
    for outcome in counted:
        if outcome is Outcome.DELIVERED:
            state = replace(state, circuit=Circuit.CLOSED.value, failures=0, open_until=None)
        elif (
            state.circuit == Circuit.HALF_OPEN or state.failures + 1 >= destination.circuit_failures
        ):
            state = replace(state, circuit=Circuit.OPEN.value, failures=state.failures + 1,
                            open_until=now + destination.circuit_cooldown)  # fmt: skip
        else:
            state = replace(state, failures=state.failures + 1)
    return state
