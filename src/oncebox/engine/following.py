"""The pull hand-off of the library's front door: the feed, and consumers that follow it
(:mod:`oncebox.engine.feed` has the rules)."""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TypeVar

from oncebox.domain import Consumer, LeaseState
from oncebox.engine import feed as feeding
from oncebox.engine.checks import whole_number
from oncebox.engine.ingest import ActiveInbox
from oncebox.errors import InvalidOperation, NotFound
from oncebox.store.base import Store, Tx

T = TypeVar("T")
WAIT_MAX = 30.0  # the longest a read waits for something to hand on
POLL = 0.05  # how often a waiting read looks again for what other processes sealed


class Following(ABC):
    """The feed and its consumers; :class:`oncebox.Oncebox` gives the store, its inboxes,
    its write path, and tells :meth:`_sealed` when something of its own was sealed."""

    store: Store
    _news: threading.Condition
    _listeners: list[Callable[[], None]]
    # How many reads of this process are in :meth:`_waiting`, changed with ``_news`` held.
    _readers = 0

    @abstractmethod
    def inbox(self, name: str) -> ActiveInbox: ...

    @abstractmethod
    def write(self, work: Callable[[Tx], T]) -> T: ...

    @abstractmethod
    def _by_id(self, inbox_id: int) -> ActiveInbox: ...

    def _inbox_name(self, inbox_id: int) -> str:
        return self._by_id(inbox_id).name

    def _sealed(self) -> None:
        """Wake the reads waiting in this process for news, and its listeners. Called
        after every commit that sealed something, so with nobody to tell it takes no
        lock: a read counts itself before it first reads, so one not yet counted here
        reads after this commit and sees it."""
        if self._readers:
            with self._news:
                self._news.notify_all()
        if self._listeners:
            for listener in list(self._listeners):
                listener()

    def listen(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (from the writing thread; it must not block) whenever this
        process seals something: a reader elsewhere, an event loop, waits on it instead
        of polling alone (what other processes seal is polled for)."""
        self._listeners.append(listener)

    def _store_id(self) -> str:
        found: str | None = getattr(self, "_store_id_cache", None)
        if found is None:
            with self.store.reading() as tx:
                found = tx.meta("store_id") or ""
            self._store_id_cache = found
        return found

    def _waiting(self, read: Callable[[], T], empty: Callable[[T], bool], wait: float) -> T:
        """``read()``, again as news comes, until it has something or ``wait`` seconds
        (at most :data:`WAIT_MAX`) have passed."""
        if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait <= WAIT_MAX:
            raise InvalidOperation(f"wait is 0 to {WAIT_MAX:g} seconds, not {wait}")
        deadline = time.monotonic() + wait
        with self._news:
            self._readers += 1
        try:
            while True:
                found = read()
                left = deadline - time.monotonic()
                if not empty(found) or left <= 0:
                    return found
                with self._news:
                    self._news.wait(min(left, POLL))
        finally:
            with self._news:
                self._readers -= 1

    def feed(
        self, inbox: str, after: int = 0, limit: int = 100, wait: float = 0.0
    ) -> feeding.FeedPage:
        """The inbox's accepted records and accepted revisions after log position
        ``after``, in log order (read on from the page's ``next_after``); waits up to
        ``wait`` seconds for one when there is none."""
        inbox_id = self.inbox(inbox).row.id
        store_id = self._store_id()
        seen = [after]

        def read() -> feeding.FeedPage:
            with self.store.reading() as tx:
                found = feeding.page(tx, store_id, inbox_id, seen[0], limit)
            seen[0] = found.next_after  # waiting, look on from what was looked at
            return found

        found = self._waiting(read, lambda page: not page.entries, wait)
        return found

    def log_position(self) -> int:
        """The log's last position (0: nothing yet): where a reader starting at the end
        starts."""
        with self.store.reading() as tx:
            return tx.log_position()

    def consumer(self, name: str, inbox: str, start: str | int = "beginning") -> FeedConsumer:
        """The consumer ``name`` of ``inbox``'s feed, made at ``start`` (``beginning``,
        ``end`` or a position) unless it exists."""
        inbox_id = self.inbox(inbox).row.id
        _, made = self.write(lambda tx: feeding.create(tx, name, inbox_id, start, tx.now()))
        return FeedConsumer(self, name, made=made)

    def consumers(self) -> list[feeding.Standing]:
        """Every consumer with its lease and how far behind it is."""
        with self.store.reading() as tx:
            return feeding.standings(tx, tx.now(), self._inbox_name)

    def consumer_standing(self, name: str) -> feeding.Standing:
        """One consumer, its lease and its lag (:class:`NotFound` when there is none)."""
        with self.store.reading() as tx:
            found = feeding.standings(tx, tx.now(), self._inbox_name, only=name)
        if not found:
            raise NotFound(f"no consumer {name}")
        return found[0]

    def feed_consumer(self, name: str) -> FeedConsumer:
        """The consumer ``name`` as it is, to lease, read and acknowledge."""
        self.consumer_standing(name)
        return FeedConsumer(self, name)

    def drop_consumer(self, name: str) -> None:
        if not self.write(lambda tx: feeding.drop(tx, name, tx.now())):
            raise NotFound(f"no consumer {name}")


class FeedConsumer:
    """One consumer, as its holder uses it: take the lease, be handed entries, ack."""

    def __init__(self, box: Following, name: str, *, made: bool = False) -> None:
        self.box = box
        self.name = name
        self.made = made  # whether this call made it (it existed otherwise)
        self.token: int | None = None

    def lease(self, holder: str, ttl: float = 30.0) -> LeaseState:
        """Take (or take again) the consumer's lease: its token moves the cursor."""
        held = self.box.write(lambda tx: feeding.lease(tx, self.name, holder, ttl, tx.now()))
        self.token = held.token
        return held

    def _token(self, token: int | None) -> int:
        chosen = self.token if token is None else token
        if chosen is None:
            raise InvalidOperation(f"take consumer {self.name}'s lease first")
        return chosen

    def next(
        self, limit: int = 100, wait: float = 0.0, token: int | None = None
    ) -> feeding.FeedPage:
        """The entries after what it acknowledged, handed out under its lease (acknowledge
        up to the page's ``next_after``)."""
        held, store_id = self._token(token), self.box._store_id()
        if not 1 <= whole_number(limit, "a page's limit") <= feeding.PAGE_MAX:
            raise InvalidOperation(f"a page holds 1 to {feeding.PAGE_MAX:,} entries, not {limit}")

        def read() -> feeding.FeedPage:
            # Looked at first without the write lock: a waiting consumer polls.
            with self.box.store.reading() as tx:
                consumer = feeding.found(tx, self.name)
                if tx.log_position() <= consumer.position:  # nothing new at all
                    feeding.check_token(tx, self.name, held, tx.now())
                    return feeding.FeedPage([], consumer.position)
            return self.box.write(
                lambda tx: feeding.hand_out(tx, store_id, self.name, held, limit, tx.now())
            )

        return self.box._waiting(read, lambda found: not found.entries, wait)

    def ack(self, position: int, token: int | None = None) -> Consumer:
        """Acknowledge everything up to ``position``: the cursor moves there."""
        held = self._token(token)
        return self.box.write(
            lambda tx: feeding.acknowledge(tx, self.name, held, position, tx.now())
        )

    def state(self) -> Consumer:
        with self.box.store.reading() as tx:
            return feeding.found(tx, self.name)
