"""Sealing: queued and new log events appended to the chain, under the log's one lease.

Where the store lets one writer in at a time, a writer seals its own events inside its
deciding transaction (:func:`record_events`); elsewhere events wait in a queue and a
short-lived seal (:func:`seal_now`) or a dedicated :class:`Sealer` appends them, so
writers never queue for the log head. Every append holds the sealer row: a sealer whose
lease ran out is fenced by a fresh token. :func:`recover` seals what a crash left.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from oncebox.domain import SEALER, LeaseState, LogEntry, LogEvent, PendingEvent
from oncebox.engine import fence
from oncebox.engine.log import BATCH, SEALING_STEPS, chain, chain_after, record_state_text
from oncebox.errors import InvalidOperation
from oncebox.store.base import Sealing, Store, Tx


def record_events(tx: Sealing, events: Sequence[LogEvent], seal: bool) -> dict[int, int]:
    """Seal ``events`` in this transaction where ``seal`` asks for it and no live
    dedicated sealer holds the log; queue them for the sealer otherwise. Returns record
    id -> log position for each record sealed here (its revisions are put on the feed).

    Events queued earlier are appended first, so the log keeps queue order. The lease,
    the queue and where the log ends are read at once (:meth:`Sealing.seal_reads`).
    """
    if not seal:
        tx.queue_logs(events)
        return {}
    lease, queued, end = tx.seal_reads(*SEALER)
    if not _may_append(tx, lease):
        tx.queue_logs(events)
        return {}
    if queued:
        while drain(tx):
            pass
        entries = chain(tx, events)  # the head moved: read it again
    else:
        entries = chain_after(tx, end, events)
    # Each entry names the record its event named (LogEntry.record_id is the event's).
    return {entry[5]: entry[0] for entry in entries if entry[5] is not None}


def seal_queued(tx: Sealing) -> None:
    """Append what this transaction (and any before it) queued, in this transaction,
    unless a live dedicated sealer holds the log."""
    if _take_log(tx):
        while drain(tx):
            pass


def seal_in_place(tx: Sealing) -> Sealed:
    """Append what is queued, this transaction's own events included, in this
    transaction, unless a live dedicated sealer holds the log; returns what went where.
    A batch short of ``BATCH`` was the queue's last: no read to find it empty."""
    sealed: Sealed = []
    if _take_log(tx):
        while True:
            done = drain(tx)
            sealed += done
            if len(done) < BATCH:
                break
    return sealed


def _take_log(tx: Sealing) -> bool:
    """Whether this transaction may append to the log: no live dedicated sealer holds it.
    Taking over from one whose lease ran out fences it with a fresh token."""
    return _may_append(tx, fence.held(tx, SEALER))  # held alone: one writer at a time


def _may_append(tx: Sealing, lease: LeaseState | None) -> bool:
    """:func:`_take_log` with the sealer's lease read (and held) already."""
    if not _dedicated(lease):
        return True
    now = tx.now()
    if fence.live(lease, now):
        return False
    fence.supersede(tx, SEALER, now)
    return True


def _dedicated(lease: LeaseState | None) -> bool:
    """Whether a dedicated sealer holds (or held, till it ran out) the log's lease."""
    return lease is not None and lease.holder is not None and lease.released_at is None


class StaleSealer(InvalidOperation):
    """This sealer's lease was superseded or expired; another sealer owns the log now."""


Sealed = list[tuple[PendingEvent, LogEntry]]


def positions(sealed: Sealed) -> dict[int, int]:
    """Record id -> log position of each record whose own entry is among ``sealed``. A
    seal may also append a later entry naming a record (sealed with it, or by an earlier
    seal): the record's position stays its first, its own entry (one of
    :data:`~oncebox.engine.log.SEALING_STEPS`), as the store keeps it."""
    return {p.record_id: e.seq for p, e in sealed if p.record_id and e.step in SEALING_STEPS}


def drain(tx: Sealing, orphans_upto: int = 0, pending: list[PendingEvent] | None = None) -> Sealed:
    """Append queued events (the next ``BATCH`` unless given, read in this transaction)
    to the chain in queue order; returns what went where.

    Seal order is the order the sealer drains the queue, which follows the order events
    were queued, not the order their transactions committed: an event whose transaction
    commits late is sealed in a later batch. A new record's seal that recovery found
    orphaned (queued at or before ``orphans_upto``: its process died between its commit
    and its seal) is a ``recover`` entry; any other event keeps its step (a resolution's
    entry, which seals the revision it accepted, stays that resolution, note and actor).
    """
    if pending is None:
        pending = tx.pending_log(BATCH)
    if not pending:
        return []
    events = [
        LogEvent(
            "recover" if item.id <= orphans_upto and item.step == "accept" else item.step,
            item.state,
            item.record_id,
            item.revision,
            item.inbox_id,
        )
        for item in pending
    ]
    entries = chain(tx, events)
    tx.mark_sealed(
        [
            (e.seq, p.record_id)
            for p, e in zip(pending, entries, strict=True)
            if p.record_id is not None
        ]
    )
    tx.drop_pending([p.id for p in pending])
    return list(zip(pending, entries, strict=True))


def seal_now(store: Store, orphans_upto: int = 0, durable_point: bool = False) -> Sealed:
    """Seal everything queued, as one short-lived sealer.

    It holds the sealer row's lock for one transaction. Taking over from a dedicated
    :class:`Sealer` whose lease ran out, it also takes a fresh token, which fences that
    sealer. If a live sealer holds the lease, it is left to that sealer.

    With ``durable_point``, its first commit writes even when there is nothing to seal,
    so that its flush makes the caller's earlier non-durable commit durable.
    """

    def batch(tx: Tx, first: bool) -> tuple[Sealed, bool]:
        lease = fence.held(tx, SEALER)
        now = tx.now()
        live = _dedicated(lease) and fence.live(lease, now)
        pending = [] if live else tx.pending_log(BATCH)
        if not pending:
            if durable_point and first:
                tx.probe_write(now)
            return [], False
        if _dedicated(lease):
            # Taking over from a dedicated sealer whose lease ran out: a fresh token
            # fences it, so its next append is refused.
            fence.supersede(tx, SEALER, now)
        return drain(tx, orphans_upto, pending), len(pending) == BATCH

    sealed: Sealed = []
    more = True
    while more:
        first = not sealed
        done, more = store.atomic(lambda tx: batch(tx, first))  # noqa: B023 (called at once)
        sealed += done
    return sealed


class Sealer:
    """A long-running sealer that holds the log under a lease with a fencing token.

    Every append checks, in its own transaction, that the token is still the current
    one and the lease has not expired on the server clock; a sealer that paused past
    its lease is refused instead of appending out of turn.
    """

    def __init__(self, store: Store, holder: str, ttl: float = 30.0) -> None:
        self.store = store
        self.holder = holder
        self.ttl = ttl
        self.token: int | None = None

    def acquire(self) -> int:
        def take(tx: Sealing) -> int:
            try:
                return fence.take(tx, SEALER, self.holder, self.ttl, tx.now()).token
            except fence.LeaseHeld as held:
                raise InvalidOperation(
                    f"the log is held by sealer {held.lease.holder} until {held.lease.expires_at}"
                ) from None

        self.token = self.store.atomic(take)
        return self.token

    def seal(self) -> int:
        """Drain the queue under this sealer's lease; returns how many were appended."""

        def batch(tx: Sealing) -> int:
            lease = fence.held(tx, SEALER)
            assert self.token is not None, "acquire() first"
            if fence.renew(tx, lease, self.token, self.ttl, tx.now()) is None:
                raise StaleSealer(
                    f"sealer {self.holder} holds token {self.token}, but the log's current "
                    f"sealer token is {lease.token if lease else None}"
                )
            return len(drain(tx))

        return self.store.atomic(batch)

    def release(self) -> None:
        def give_up(tx: Sealing) -> None:
            if self.token is not None:
                fence.release(tx, fence.held(tx, SEALER), self.token, tx.now())

        self.store.atomic(give_up)
        self.token = None


# How long a queued seal may wait for its own writer before recovery calls it orphaned.
# A live writer seals within milliseconds of its commit (or another writer's seal pass
# takes it along); only a dead one leaves its seal queued this long.
ORPHAN_GRACE = 0.2


def recover(store: Store, grace: float = ORPHAN_GRACE) -> int:
    """Seal every committed record the log does not cover; returns how many.

    Two kinds are left by a crash or an older version: records whose seal is still
    queued (their process died between the commit and the seal) and records with no
    queued seal at all. Both are sealed as ``recover`` entries. A queued seal counts as
    orphaned only if it is still queued ``grace`` seconds after recovery first saw it,
    so that opening a store beside live writers does not relabel their seals.
    """
    recovered = 0
    with store.reading() as tx:
        seen = tx.last_pending_id()
    if seen:
        time.sleep(grace)
        sealed = seal_now(store, orphans_upto=seen)
        recovered = sum(1 for p, _ in sealed if p.step == "accept" and p.id <= seen)
    while True:

        def orphans(tx: Sealing) -> int:
            lease = fence.held(tx, SEALER)
            if _dedicated(lease) and fence.live(lease, tx.now()):
                return 0  # a live sealer owns the log
            records = tx.unsealed_records(BATCH)
            names = {inbox.id: inbox.name for inbox in tx.inboxes()}
            states = [
                record_state_text(
                    names.get(r.inbox_id, str(r.inbox_id)),
                    r.id,
                    r.identity,
                    r.witness.hex(),
                    r.revision,
                    r.snapshot_id,
                )
                for r in records
            ]
            entries = chain(
                tx,
                [
                    LogEvent("recover", state, r.id, r.revision, r.inbox_id)
                    for r, state in zip(records, states, strict=True)
                ],
            )
            tx.mark_sealed([(e.seq, r.id) for r, e in zip(records, entries, strict=True)])
            return len(records)

        done = store.atomic(orphans)
        recovered += done
        if done < BATCH:
            return recovered
