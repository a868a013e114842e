"""Forwarding in the library's front door: destinations, their forwards and attempts, what
operators do with them, and what dispatchers call (:mod:`oncebox.engine.outbox` has the
rules; the dispatchers that send are :mod:`oncebox.surfaces.forwarding`)."""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, NamedTuple, TypeVar

from oncebox.domain.forwarding import (
    UNFINISHED,
    Attempt,
    DestinationState,
    Forward,
    ForwardFilter,
    ForwardStatus,
)
from oncebox.engine import log, outbox
from oncebox.engine.destinations import Destination
from oncebox.engine.ingest import ActiveInbox
from oncebox.errors import ConfigError, InvalidOperation, NotFound
from oncebox.store.base import Store, Tx

T = TypeVar("T")
RATE_WINDOW_HOURS = 24  # the success rate is over the attempts of the last day
RETRY_PAGE = 500  # forwards one bulk retry sends back per transaction (and log entry)
ATTEMPTS_SHOWN = 100  # a forward's attempts shown at most, the first ones


class Standing(NamedTuple):
    """A destination as operators see it: its settings, its state, its backlog."""

    destination: Destination
    state: DestinationState
    backlog: int  # pending and retrying
    oldest_seconds: float  # how long the oldest of them has waited (0: none waits)
    dead: int  # outbound dead letters
    delivered: int  # attempts delivered over the last day
    failed: int  # attempts that failed over the last day (retried or dead)

    @property
    def success_rate(self) -> float | None:
        """Delivered among the last day's attempts; None when there were none."""
        tried = self.delivered + self.failed
        return self.delivered / tried if tried else None

    @property
    def circuit(self) -> str:
        return "paused" if self.state.paused_at is not None else self.state.circuit


class Forwarding(ABC):
    """Forwarding's part of :class:`oncebox.Oncebox`, which gives the store, the
    inboxes and the write path."""

    store: Store
    _inboxes: dict[str, ActiveInbox]

    @abstractmethod
    def write(self, work: Callable[[Tx], T]) -> T: ...

    @abstractmethod
    def _store_id(self) -> str: ...

    def _check_destinations(self, inbox: str, destinations: Sequence[Destination]) -> None:
        """Destination names are the store's: the API and the console name one alone."""
        for other in self._inboxes.values():
            if other.name == inbox:
                continue
            taken = {d.name for d in other.forward} & {d.name for d in destinations}
            if taken:
                raise ConfigError(
                    f"inbox {inbox}: destination {sorted(taken)[0]} is already inbox "
                    f"{other.name}'s; a destination's name is unique in the store"
                )

    # -- destinations --------------------------------------------------------------------
    def destinations(self) -> list[Destination]:
        """Every declared inbox's destinations, by name."""
        found = [d for active in self._inboxes.values() for d in active.forward]
        return sorted(found, key=lambda d: d.name)

    def destination(self, name: str) -> Destination:
        for found in self.destinations():
            if found.name == name:
                return found
        known = ", ".join(d.name for d in self.destinations()) or "none"
        raise NotFound(f"no destination {name!r} (declared: {known})")

    def forwarding(self, only: str | None = None) -> list[Standing]:
        """Each destination (or the one named ``only``): paused or not, its circuit, its
        backlog and the age of its oldest forward, dead letters, success rate."""
        chosen = [self.destination(only)] if only is not None else self.destinations()
        with self.store.reading() as tx:
            now = tx.now()
            since = int(now // 3600) - RATE_WINDOW_HOURS + 1
            states = {s.name: s for s in tx.destination_states()}
            found = []
            for dest in chosen:
                inbox_id = self._inboxes[dest.inbox].row.id
                backlog, oldest, dead = tx.forward_backlog(dest.name, inbox_id)
                counts = tx.forward_outcomes(dest.name, since)
                state = states.get(dest.name) or DestinationState(inbox_id, dest.name)
                found.append(
                    Standing(dest, state, backlog, max(0.0, now - oldest) if oldest else 0.0,
                             dead, counts.get("delivered", 0),
                             counts.get("retry", 0) + counts.get("dead", 0))
                )  # fmt: skip
        return found

    def attempt_counts(self, name: str) -> dict[str, int]:
        """The destination's attempts ever made, by outcome (every process's)."""
        self.destination(name)
        with self.store.reading() as tx:
            return tx.forward_outcomes(name, 0)

    def _owner(self, name: str | None) -> int | None:
        """The id of the inbox the destination ``name`` is now of (None: no name)."""
        if name is None:
            return None
        return self._inboxes[self.destination(name).inbox].row.id

    def destination_owns(self, forward: Forward) -> bool:
        """Whether ``forward`` is its destination's now: of the inbox the destination is
        of (what another inbox owed before the name was moved to this one is not)."""
        return self._owner(forward.destination) == forward.inbox_id

    # -- forwards --------------------------------------------------------------------------
    def forwards(
        self, filters: ForwardFilter | None = None, after: int = 0, limit: int = 100
    ) -> list[Forward]:
        """Forwards matching ``filters`` (destination, status, accepted since/until, a
        record), in id order after ``after``. A destination's are those of its inbox:
        what another inbox it was moved from still owed is never sent by it."""
        filters = filters or ForwardFilter()
        inbox_id = self._owner(filters.destination)
        with self.store.scanning() as tx:
            return tx.list_forwards(filters, after, limit, inbox_id)

    def forward(self, forward_id: int) -> tuple[Forward, list[Attempt]]:
        """One forward and its attempts, the first :data:`ATTEMPTS_SHOWN` of them."""
        with self.store.reading() as tx:
            found = tx.get_forward(forward_id)
            if found is None:
                raise NotFound(f"no forward {forward_id}")
            return found, tx.attempts(forward_id, ATTEMPTS_SHOWN)

    def forwards_of(self, record_id: int) -> list[tuple[Forward, list[Attempt]]]:
        """A record's forwards, each revision to each destination, with their attempts:
        the record page's forwarding status."""
        with self.store.reading() as tx:
            rows = tx.list_forwards(ForwardFilter(record_id=record_id), 0, 1000)
            return [(row, tx.attempts(row.id, ATTEMPTS_SHOWN)) for row in rows]

    # -- operators -------------------------------------------------------------------------
    def pause_destination(self, name: str, actor: str | None = None) -> DestinationState:
        """Hold a destination's forwards back (none is claimed) until it is resumed."""
        return self._mark(name, actor, paused=True)

    def resume_destination(self, name: str, actor: str | None = None) -> DestinationState:
        """Send a paused destination's forwards again, what was held back first."""
        return self._mark(name, actor, paused=False)

    def _mark(self, name: str, actor: str | None, paused: bool) -> DestinationState:
        dest = self.destination(name)
        inbox_id = self._inboxes[dest.inbox].row.id

        def mark(tx: Tx) -> DestinationState:
            now = tx.now()
            state = tx.destination_state(name) or DestinationState(inbox_id, name)
            state = replace(
                state, paused_at=now if paused else None, paused_by=actor if paused else None
            )
            tx.put_pause(state)
            step = "forward_pause" if paused else "forward_resume"
            log.event(tx, step, {"destination": name, "actor": actor})
            return state

        return self.write(mark)

    def retry_forward(self, forward_id: int, actor: str | None = None) -> Forward:
        """Send a dead forward (or a retrying one) again now, on a fresh schedule."""

        def again(tx: Tx) -> Forward:
            found = tx.get_forward(forward_id, lock=True)  # a settle may be writing it
            if found is None:
                raise NotFound(f"no forward {forward_id}")
            if found.status is ForwardStatus.DELIVERED:
                raise InvalidOperation(f"forward {forward_id} was delivered already")
            if found.status is ForwardStatus.PENDING:
                raise InvalidOperation(f"forward {forward_id} has not been tried yet")
            if not self.destination_owns(found):  # revived, it would wait for good
                raise InvalidOperation(
                    f"forward {forward_id} is another inbox's: {found.destination} is of "
                    f"inbox {self.destination(found.destination).inbox} now, and sends "
                    f"only its forwards"
                )
            [sent] = _revive(tx, [found], tx.now())
            log.event(tx, "forward_retry", {
                "destination": found.destination, "forward": forward_id, "actor": actor,
            })  # fmt: skip
            return sent

        return self.write(again)

    def retry_forwards(self, filters: ForwardFilter, actor: str | None = None) -> int:
        """Send again every forward matching ``filters`` that gave up (status ``dead``,
        the default) or is retrying (``failed``); how many. Each transaction's forwards
        are one log entry, with the actor and the filter."""
        status = filters.status or ForwardStatus.DEAD
        if status not in (ForwardStatus.DEAD, ForwardStatus.FAILED):
            raise InvalidOperation(f"only dead or failed forwards are sent again, not {status}")
        inbox_id = self._owner(filters.destination)
        chosen = replace(filters, status=status)
        shown: dict[str, Any] = {k: v for k, v in chosen.__dict__.items() if v is not None}
        total, after = 0, 0
        while True:

            def page(tx: Tx, start: int = after) -> tuple[int, int, int]:
                rows = tx.list_forwards(chosen, start, RETRY_PAGE, inbox_id)
                revived = _revive(tx, rows, tx.now()) if rows else []
                if revived:  # (one delivered since the listing is not among them)
                    log.event(tx, "forward_retry", {
                        **{k: str(v) for k, v in shown.items()}, "actor": actor,
                        "forwards": [row.id for row in revived],
                    })  # fmt: skip
                return len(rows), len(revived), rows[-1].id if rows else start

            listed, done, after = self.write(page)
            total += done
            if listed < RETRY_PAGE:
                return total

    # -- dispatchers -----------------------------------------------------------------------
    def forwards_due(self, name: str) -> bool:
        """Whether any of the destination's forwards may be claimed now (read only: what
        an idle dispatcher looks at before it takes the write lock to claim): none while
        it is paused or its circuit holds everything back."""
        inbox_id = self._inboxes[self.destination(name).inbox].row.id
        with self.store.reading() as tx:
            now = tx.now()
            if outbox.held_back(tx.destination_state(name), now):
                return False
            return tx.forward_due(name, inbox_id, now)

    def claim_forwards(self, name: str, holder: str, limit: int) -> list[outbox.Claim]:
        """Up to ``limit`` of a destination's due forwards, each claimed by ``holder``
        under a lease of the one fence (what a dispatcher sends next)."""
        dest, store_id = self.destination(name), self._store_id()
        inbox_id = self._inboxes[dest.inbox].row.id

        def claim(tx: Tx) -> list[outbox.Claim]:
            return outbox.claim(tx, dest, dest.inbox, inbox_id, store_id, holder, limit, tx.now())

        return self.write(claim)

    def settle_forwards(
        self,
        name: str,
        results: Sequence[outbox.Sent],
        dispatcher: str,
        rng: Callable[[], float] = random.random,
    ) -> list[Attempt]:
        """Record what the attempts came to, each only under its claim's current lease."""
        dest = self.destination(name)
        return self.write(lambda tx: outbox.settle(tx, dest, results, dispatcher, tx.now(), rng))


def _revive(tx: Tx, rows: Sequence[Forward], now: float) -> list[Forward]:
    """Forwards due now on a fresh schedule (their attempts so far kept). Each is read
    again, held: an attempt settled since the listing (a delivery) is not written over."""
    held = [tx.get_forward(row.id, lock=True) for row in rows]
    revived = [
        replace(row, status=ForwardStatus.FAILED if row.attempts else ForwardStatus.PENDING,
                schedule_at=row.attempts, next_at=now, updated_at=now, finished_at=None)
        for row in held
        if row is not None and row.status in (*UNFINISHED, ForwardStatus.DEAD)
    ]  # fmt: skip
    tx.settle_forwards(revived)
    return revived
