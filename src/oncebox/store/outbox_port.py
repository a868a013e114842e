"""Forwarding's port: what the outbox asks of a transaction (beside the others in
:mod:`oncebox.store.ports`), in the engine's own words."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from oncebox.domain import FeedEntry
from oncebox.domain.forwarding import Attempt, DestinationState, Forward, ForwardFilter
from oncebox.store.ports import Clock


class Outbox(Clock, Protocol):
    """Forwarding: the outbox rows written beside the decisions, their attempts, and the
    destinations' shared state (:mod:`oncebox.engine.outbox`)."""

    def queue_forwards(
        self, rows: Sequence[tuple[int, str, int, int, str | None, float, float, float]]
    ) -> None:
        """Write forwards: (inbox id, destination, record id, revision, order key, due
        at, now, now) each, in the deciding transaction."""
        ...

    def due_forwards(
        self, destination: str, inbox_id: int, now: float, limit: int, ordered: bool
    ) -> list[Forward]:
        """A destination's forwards of its inbox that may be claimed now, the earliest
        due first (under ``ordered``, only each key's head); rows another transaction is
        claiming right now are skipped."""
        ...

    def forward_due(self, destination: str, inbox_id: int, now: float) -> bool:
        """Whether any of the destination's unfinished forwards of its inbox is due
        (claimed or not)."""
        ...

    def get_forward(self, forward_id: int, lock: bool = False) -> Forward | None:
        """A forward; with ``lock``, held until the transaction ends (one read to be
        written back, so no other writer's change in between is written over)."""
        ...

    def forward_revision(self, record_id: int, revision: int) -> FeedEntry | None:
        """What a forward carries: the revision whole (its ``position`` left 0)."""
        ...

    def settle_forwards(self, forwards: Sequence[Forward]) -> None:
        """Write each forward's status, attempts, schedule, due time and last answer."""
        ...

    def add_attempts(self, attempts: Sequence[Attempt]) -> None: ...

    def attempts(self, forward_id: int, limit: int) -> list[Attempt]: ...

    def drop_claims(self, claims: Sequence[tuple[int, int]]) -> None:
        """Forget the leases of these settled forwards: (inbox id, forward id) each."""
        ...

    def destination_state(self, name: str) -> DestinationState | None: ...

    def destination_states(self) -> list[DestinationState]: ...

    def put_pause(self, state: DestinationState) -> None:
        """Write whether the destination is paused, and by whom; nothing of its circuit."""
        ...

    def put_circuit(self, state: DestinationState, before: DestinationState | None) -> bool:
        """Write the destination's circuit if it is still as ``before`` was read (None:
        it had no row); False, writing nothing, when another dispatcher wrote it since
        (read it again). Nothing of an operator's pause (each is written alone, so
        neither overwrites the other from a state read before it)."""
        ...

    def count_forward_outcomes(
        self, destination: str, hour: int, counts: Mapping[str, int]
    ) -> None:
        """Add to the per-hour counts of attempts by outcome."""
        ...

    def forward_outcomes(self, destination: str, since_hour: int) -> dict[str, int]: ...

    def forward_backlog(self, destination: str, inbox_id: int) -> tuple[int, float | None, int]:
        """(unfinished, when the oldest of them was accepted, dead), of the destination's
        forwards of its inbox."""
        ...

    def list_forwards(
        self, filters: ForwardFilter, after: int, limit: int, inbox_id: int | None = None
    ) -> list[Forward]:
        """Forwards matching ``filters`` (and of inbox ``inbox_id``, if given) after id
        ``after``, in id order."""
        ...
