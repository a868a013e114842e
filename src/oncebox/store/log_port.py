"""The log's ports: the chain with its Merkle nodes, and the seal queue appended to it
under the sealer's lease; apart from the other ports (:mod:`oncebox.store.ports`, which
names them too) because the log is a concept of its own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from oncebox.domain import Inbox, LeaseState, LogEntry, PendingEvent, Record
from oncebox.store.ports import Clock, Events, FencePort


class Chain(Protocol):
    """The append-only chain and its Merkle nodes (I4)."""

    log_edge: Any
    """The log's own memo (:func:`oncebox.engine.log.chain_after`), kept from one of
    this object's transactions to the next; the store never reads it."""

    log_block_at_hand: bool
    """Whether this transaction read, with the log, the log's last block of 16 entries
    and the kept Merkle nodes beside it: the tree's whole right edge is then rebuilt
    without a read (a seal's reads on PostgreSQL, :mod:`oncebox.store.pgseal`)."""

    def log_head(self) -> LogEntry | None: ...

    def append_log(self, entries: Sequence[LogEntry]) -> None: ...

    def log_entries(self, start: int, end: int) -> list[LogEntry]:
        """Entries with ``start <= seq < end``, in order."""
        ...

    def log_rows(self, start: int, end: int) -> list[LogEntry]:
        """:meth:`log_entries` with the revision each puts on the feed (its inbox, record
        and revision, which the chain does not hash), for a full verification."""
        ...

    def merkle_nodes(self, level: int, start: int, end: int) -> list[bytes]:
        """Stored nodes of ``level`` with ``start <= index < end``, in order."""
        ...

    def put_merkle_nodes(self, nodes: Sequence[tuple[int, int, bytes]]) -> None: ...

    def meta(self, key: str) -> str | None: ...

    def record_seals(self) -> list[tuple[int, int | None]]:
        """(record id, log position) of every record, for a full verification."""
        ...

    def queued_seals(self) -> list[tuple[int, float]]:
        """(record id, when it was accepted) of every record whose seal is queued."""
        ...

    def get_record(self, record_id: int) -> Record | None: ...


class Sealing(Chain, Events, FencePort, Clock, Protocol):
    """The queue of events waiting for the sealer, appended to the chain under the
    sealer's lease (:mod:`oncebox.engine.sealing`)."""

    def seal_reads(
        self, kind: str, owner: int, name: str
    ) -> tuple[LeaseState | None, bool, tuple[int, str] | None]:
        """What appending in this transaction reads first: the sealer's lease (``kind``,
        ``owner``, ``name``), held alone as :meth:`held` holds it, whether any event is
        queued, and where the log ends (its last entry's seq and hash; None: empty); in
        one statement where the store can."""
        ...

    def pending_log(self, limit: int) -> list[PendingEvent]: ...

    def drop_pending(self, event_ids: Sequence[int]) -> None: ...

    def mark_sealed(self, seals: Sequence[tuple[int, int]]) -> None:
        """Record each ``(log position, record id)``."""
        ...

    def unsealed_records(self, limit: int) -> list[Record]:
        """Records with neither a log entry nor a queued seal (left by older versions)."""
        ...

    def last_pending_id(self) -> int:
        """The newest queued event's id (ids only grow), or 0 when the queue is empty."""
        ...

    def inboxes(self) -> list[Inbox]: ...
