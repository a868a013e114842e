"""The feed: an inbox's accepted records and accepted revisions in log order, handed on.

A revision's place on the feed is the log position of the entry that sealed it
(:mod:`oncebox.engine.sealing` gives it at seal time), so a reader that saw position P
has seen every revision up to P: one whose transaction commits late is sealed late and
comes after. Each entry carries an idempotency key, the same on every read of that
revision and different for every other, which is what a downstream system dedups by.

A consumer is a named cursor over one inbox's feed, kept in the store: it is handed the
entries after what it acknowledged, and its cursor moves only forward, only up to what
it was handed, and only under its lease of the one fence (:mod:`oncebox.engine.fence`),
so a paused consumer whose lease another took over can no longer move it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace
from typing import NamedTuple, Protocol

from oncebox.domain import Consumer, FeedEntry, Fenced, LeaseState, Resource
from oncebox.engine import fence
from oncebox.engine.checks import whole_number
from oncebox.errors import InvalidOperation, NotFound
from oncebox.store.base import Feeding, FencePort

PAGE_MAX = 1_000  # entries a page may hold
CONTENT_MAX = 1_048_576  # a content longer is cut (``cut``): the record route has it whole
PAGE_BYTES = 8 * 1_048_576  # contents a page holds, at least one entry whatever its size
SCAN = 10_000  # log positions one read looks at, whatever the inbox: a quiet inbox's
# reader moves on by them (``next_after``) instead of reading the whole log at once
LAG_SCAN = 1_000_000  # positions a consumer's lag is counted over (at least, past it)


class FeedPage(NamedTuple):
    """A page of the feed: its entries, and the position to read on after (past the
    last entry, or past every position looked at when the page is not full: a reader
    never needs to look at those again)."""

    entries: list[FeedEntry]
    next_after: int


class FeedTx(Feeding, FencePort, Protocol):
    """What following the feed takes: the feed and consumers, and the fence."""


class StaleCursor(InvalidOperation):
    """A consumer's cursor moves only under its current lease."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class PastHandedOut(InvalidOperation):
    """An acknowledgement may not pass what the consumer was handed."""


def idempotency_key(store_id: str, inbox_id: int, record_id: int, revision: int) -> str:
    """The key a downstream system dedups a revision by: stable for it across reads and
    processes (the store's own id, the inbox, the record, the revision), unique to it."""
    spelled = f"oncebox|{store_id}|{inbox_id}|{record_id}|{revision}".encode()
    return "obx_" + hashlib.sha256(spelled).hexdigest()[:32]


def page(tx: Feeding, store_id: str, inbox_id: int, after: int, limit: int) -> FeedPage:
    """The entries after position ``after``: at most ``limit`` (and :data:`PAGE_MAX`),
    no more contents than :data:`PAGE_BYTES` once the first is in, and found among the
    next :data:`SCAN` positions of the log."""
    whole_number(after, "a feed position")
    if not 1 <= whole_number(limit, "a page's limit") <= PAGE_MAX:
        raise InvalidOperation(f"a feed page holds 1 to {PAGE_MAX:,} entries, not {limit}")
    until = tx.feed_window(after, SCAN)
    rows = tx.feed_entries(inbox_id, after, until, limit, CONTENT_MAX)
    found: list[FeedEntry] = []
    size = 0
    for row in rows:
        size += len(row.content or b"")
        if found and size > PAGE_BYTES:
            break
        shown = len(row.content or b"")
        cut = ("content",) if (row.content_length or 0) > shown else ()
        key = idempotency_key(store_id, inbox_id, row.record_id, row.revision)
        found.append(replace(row, idempotency_key=key, cut=cut))
    full = len(found) < len(rows) or len(found) == limit
    return FeedPage(found, found[-1].position if full else until)


# -- consumers -----------------------------------------------------------------------------
def consumer_resource(name: str) -> Resource:
    return Resource(Fenced.CONSUMER, 0, name)


def create(
    tx: FeedTx, name: str, inbox_id: int, start: str | int, now: float
) -> tuple[Consumer, bool]:
    """A consumer starting at ``beginning`` (0), ``end`` (the feed's last position) or
    a position, and whether it was made now: one of that name already over this inbox
    is left as it is."""
    check_name(name)
    if start == "beginning":
        position = 0
    elif start == "end":
        position = tx.log_position()
    elif isinstance(start, int) and not isinstance(start, bool) and start >= 0:
        position = start
        end = tx.log_position()
        if position > end:  # it would skip, for good, all that is sealed until the log is there
            raise InvalidOperation(
                f"start {position} is past the log's end ({end}): start at a position it has"
            )
    else:
        raise InvalidOperation(f"start is beginning, end or a position, not {start!r:.40}")
    new = tx.put_consumer(name, inbox_id, position, now)
    made = tx.get_consumer(name)
    assert made is not None
    if made.inbox_id != inbox_id:
        raise InvalidOperation(f"consumer {name} follows another inbox; choose another name")
    return made, new


def check_name(name: str) -> None:
    if not isinstance(name, str):
        raise InvalidOperation(f"a consumer's name is text, not {name!r:.40}")
    if not (1 <= len(name) <= 128 and name.isprintable() and name == name.strip()):
        raise InvalidOperation(
            f"consumer name {name[:40]!r}: use 1 to 128 printable characters, no surrounding "
            f"whitespace"
        )


def found(tx: Feeding, name: str) -> Consumer:
    consumer = tx.get_consumer(name)
    if consumer is None:
        raise NotFound(f"no consumer {name}")
    return consumer


def lease(tx: FeedTx, name: str, holder: str, ttl: float, now: float) -> LeaseState:
    """The consumer's lease for ``holder``: a fencing token, valid ``ttl`` seconds on
    the server clock; refused while another holder's lease is live."""
    if not (isinstance(holder, str) and 1 <= len(holder) <= 256 and holder.isprintable()):
        raise InvalidOperation(
            f"a consumer's holder is 1 to 256 printable characters, not {holder!r:.40}"
        )
    found(tx, name)
    try:
        return fence.take(tx, consumer_resource(name), holder, ttl, now)
    except fence.LeaseHeld as held:
        raise InvalidOperation(
            f"consumer {name} is held by {held.lease.holder} until {held.lease.expires_at}"
        ) from None


def _fenced(tx: FeedTx, name: str, token: int, now: float) -> Consumer:
    whole_number(token, "a consumer's token")  # True would pass for token 1
    consumer = found(tx, name)
    _refuse(name, token, fence.refused(fence.held(tx, consumer_resource(name)), token, now))
    return consumer


def _refuse(name: str, token: int, said: str | None) -> None:
    if said is not None:
        raise StaleCursor(
            said,
            f"token {token} does not hold consumer {name} ({said}): take its lease again",
        )


def check_token(tx: FeedTx, name: str, token: int, now: float) -> None:
    """The fence's word on ``token`` without holding the lease, for a read that found
    nothing new and takes no write lock: a stale or expired token is told so all the
    same, not answered an empty page as if it held the consumer."""
    whole_number(token, "a consumer's token")
    current = next((held for held in tx.list_leases(Fenced.CONSUMER, 0) if held.name == name), None)
    _refuse(name, token, fence.refused(current, token, now))


def drop(tx: FeedTx, name: str, now: float) -> bool:
    """Forget the consumer, and fence its lease: a consumer made again under the name
    starts with no holder, and the old holder's token moves nothing."""
    if not tx.drop_consumer(name):
        return False
    fence.supersede(tx, consumer_resource(name), now)
    return True


def hand_out(tx: FeedTx, store_id: str, name: str, token: int, limit: int, now: float) -> FeedPage:
    """The entries after what the consumer acknowledged (again, if it was handed them
    and has not acknowledged them: at least once), under its current lease; it may then
    acknowledge up to the page's ``next_after``."""
    consumer = _fenced(tx, name, token, now)
    found = page(tx, store_id, consumer.inbox_id, consumer.position, limit)
    # A window with none of its inbox's entries has nothing to hand out again, ever (a
    # position is given at seal time): the cursor moves past it. Left where it was, the
    # next read would look at the same window, find nothing again, and a holder that
    # acknowledges only what it was handed would never get past it.
    position = consumer.position if found.entries else found.next_after
    handed_out = max(consumer.handed_out, found.next_after)
    if (position, handed_out) != (consumer.position, consumer.handed_out):
        tx.move_consumer(name, position, handed_out, now)
    return found


def acknowledge(tx: FeedTx, name: str, token: int, position: int, now: float) -> Consumer:
    """Move the cursor to ``position``: only forward (an older one changes nothing),
    only up to what was handed out, only under the current lease."""
    whole_number(position, "a position acknowledged")
    consumer = _fenced(tx, name, token, now)
    if position > consumer.handed_out:
        raise PastHandedOut(
            f"position {position} is past what consumer {name} was handed ({consumer.handed_out})"
        )
    if position <= consumer.position:
        return consumer
    tx.move_consumer(name, position, consumer.handed_out, now)
    return replace(consumer, position=position, updated_at=now)


class Standing(NamedTuple):
    """A consumer as operators see it: its cursor, its lease, and how far behind it is."""

    consumer: Consumer
    inbox: str  # the name of the inbox it follows
    lease: LeaseState | None
    lag_entries: int  # entries after its cursor
    lag_seconds: float  # since the oldest of them was decided (0 when none)


def standings(
    tx: FeedTx, now: float, named: Callable[[int], str], only: str | None = None
) -> list[Standing]:
    """Every consumer (or the one named ``only``), its lease and its lag; ``named``
    gives an inbox's name from its id."""
    held = {lease.name: lease for lease in tx.list_leases(Fenced.CONSUMER, 0)}
    found_ = []
    for consumer in tx.consumers():
        if only is not None and consumer.name != only:
            continue
        behind = tx.feed_count(consumer.inbox_id, consumer.position, LAG_SCAN)
        oldest: list[FeedEntry] = []
        if behind:
            until = tx.feed_window(consumer.position, LAG_SCAN)
            oldest = tx.feed_entries(consumer.inbox_id, consumer.position, until, 1, 0)
        lag = max(0.0, now - oldest[0].decided_at) if oldest else 0.0
        lease = held.get(consumer.name)
        found_.append(
            Standing(
                consumer,
                named(consumer.inbox_id),
                lease if fence.live(lease, now) else None,
                behind,
                lag,
            )
        )
    return found_
