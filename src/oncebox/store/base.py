"""The store interface: what the engine asks of storage, in the engine's own words.

The engine never writes SQL. It opens a transaction and calls these methods; each
backend implements them in one module per role with its SQL kept in one place. The
verdict rules stay in the engine: the store reports facts (what row exists, what it
holds) and records what the engine decided.

A transaction (:class:`Tx`) plays a few small roles, each readable at once: records,
rejects (quarantine and dead letters), leases, the log, the seal queue, work keys, the
triage ledger, and (off the decision path, in :mod:`oncebox.store.admin`) retention,
tokens and inboxes. An engine module names the role it uses.
Every write that can concern many rows takes them all at once: a single delivery is a
batch of one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Protocol, TypeVar

from oncebox.domain import (
    WHOLE,
    Arrival,
    DeadLetter,
    DeadLetterFilter,
    Evicted,
    Eviction,
    Inbox,
    LeaseState,
    LedgerRow,
    Letter,
    LogEntry,
    Newcomer,
    NewRecord,
    PendingEvent,
    Preview,
    Quarantined,
    Record,
    Revision,
    SealerState,
    SessionRow,
    Stored,
    TokenRow,
    WorkItem,
)
from oncebox.store.admin import Inboxes, Retention, Tokens

T = TypeVar("T")


WorkKey = tuple[str, str, str]


class Records(Protocol):
    """One row per identity per inbox (I1); tombstones once retention evicts them."""

    def lock_identities(
        self, inbox_id: int, idents: Sequence[bytes], exclusive: bool = False
    ) -> None:
        """Hold these identities until this transaction ends. A batch deciding against
        them holds them shared: deciders never queue for each other here (they cannot
        deadlock on each other either: what they write, they write in one order). A
        change to a stored record (adjudication) holds them ``exclusive``: it waits for
        the deciders that hold them, and keeps new ones out until it commits, so that no
        resend decides against a record that is being revised."""
        ...

    def reserve_record_ids(self, n: int) -> list[int]:
        """``n`` fresh record ids, ascending; never one a record (even a dropped one) had."""
        ...

    def find_records(self, inbox_id: int, idents: Sequence[bytes]) -> dict[bytes, Stored]:
        """The stored records and tombstones among these identity digests."""
        ...

    def insert_records(self, inbox_id: int, records: Sequence[NewRecord], now: float) -> int:
        """Insert in order; how many went in (one a concurrent writer inserted first is
        left out, and the caller decides again)."""
        ...

    def count_duplicates(self, repeats: Mapping[int, int], now: float) -> int:
        """Count duplicates (record id -> how many) and touch ``last_seen``; how many of
        the records were still there."""
        ...

    def count_late_replays(self, late: Mapping[int, tuple[int, float]], now: float) -> int:
        """Count resends that reached a tombstone (id -> (count, greatest lateness))."""
        ...

    def get_record(self, record_id: int) -> Record | None: ...

    def revise_record(
        self,
        record: Record,
        witness: bytes,
        content: bytes,
        fields: str,
        now: float,
        note: str | None,
    ) -> int:
        """Keep the current revision and make this content the next; its number."""
        ...  # fmt: skip

    def revisions(self, record_id: int) -> list[Revision]: ...


class Rejects(Protocol):
    """Quarantine (conflicting newcomers) and dead letters (invalid deliveries)."""

    def quarantine(
        self, inbox_id: int, newcomers: Sequence[Newcomer], reason: str, now: float
    ) -> list[tuple[int, bool]]:
        """Keep each newcomer once, counting repeats; per newcomer (row id, newly kept)."""
        ...

    def get_quarantine(self, quarantine_id: int, lock: bool = False) -> Quarantined | None: ...

    def close_quarantine(
        self, quarantine_id: int, status: str, note: str, now: float, by: str | None = None
    ) -> bool:
        """Close an open row, naming who did; False if it was not open any more."""
        ...

    def list_quarantine(
        self, inbox_id: int | None, status: str | None, limit: int, after: int = 0,
        preview: Preview = WHOLE,
    ) -> list[Quarantined]:
        """Rows after id ``after``, in id order, each value read cut to ``preview``."""
        ...  # fmt: skip

    def originals(self, quarantine_ids: Sequence[int], preview: Preview) -> dict[int, Record]:
        """The records these quarantine rows conflict with, by quarantine row id, each
        value read cut to ``preview``."""
        ...

    def dead_letter(self, inbox_id: int, letters: Sequence[Letter], now: float) -> list[int]:
        """Keep each letter; their ids, in order."""
        ...

    def list_dead_letters(
        self, inbox_id: int | None, limit: int, filters: DeadLetterFilter | None = None,
        preview: Preview = WHOLE,
    ) -> list[DeadLetter]:
        """Each value read cut to ``preview`` (the search looks at the whole kept head)."""
        ...  # fmt: skip

    def get_dead_letter(self, letter_id: int) -> DeadLetter | None:
        """A dead letter, held against a second replay until this transaction ends."""
        ...

    def mark_replayed(self, letter_id: int, now: float, by: str | None, verdict: str) -> None: ...


class Leases(Protocol):
    """Leases with fencing tokens from one counter per store (seed 000)."""

    def next_token(self) -> int:
        """The store's next fencing token: strictly greater than every one before."""
        ...

    def put_lease(
        self, inbox_id: int, scope: str, token: int, now: float, expires_at: float
    ) -> None: ...

    def leases_for(self, inbox_id: int, scopes: Sequence[str]) -> dict[str, LeaseState]:
        """These scopes' current leases, held until this transaction ends so that no new
        lease can slip in between a fence check and what it admits."""
        ...

    def list_leases(self, inbox_id: int) -> list[LeaseState]: ...

    def release_lease(self, inbox_id: int, scope: str, token: int, now: float) -> bool: ...


class Log(Protocol):
    """The append-only chain and its Merkle nodes (I4)."""

    def log_head(self) -> LogEntry | None: ...

    def append_log(self, entries: Sequence[LogEntry]) -> None: ...

    def log_entries(self, start: int, end: int) -> list[LogEntry]:
        """Entries with ``start <= seq < end``, in order."""
        ...

    def merkle_nodes(self, level: int, start: int, end: int) -> list[bytes]:
        """Stored nodes of ``level`` with ``start <= index < end``, in order."""
        ...

    def put_merkle_nodes(self, nodes: Sequence[tuple[int, int, bytes]]) -> None: ...

    def meta(self, key: str) -> str | None: ...


class SealQueue(Protocol):
    """Log events waiting for the sealer, and which records their seals cover."""

    def queue_logs(self, events: Sequence[tuple[str, str, int | None]]) -> None:
        """Queue (step, state, record id) events, in order; writers never touch the head."""
        ...

    def pending_log(self, limit: int) -> list[PendingEvent]: ...

    def drop_pending(self, event_ids: Sequence[int]) -> None: ...

    def lock_sealer(self) -> SealerState:
        """The sealer's lease row, locked until this transaction ends."""
        ...

    def set_sealer(self, token: int, holder: str | None, expires_at: float) -> None: ...

    def mark_sealed(self, seals: Sequence[tuple[int, int]]) -> None:
        """Record each ``(log position, record id)``."""
        ...

    def unsealed_records(self, limit: int) -> list[Record]:
        """Records with neither a log entry nor a queued seal (left by older versions)."""
        ...

    def record_seals(self) -> list[tuple[int, int | None]]: ...

    def last_pending_id(self) -> int:
        """The newest queued event's id (ids only grow), or 0 when the queue is empty."""
        ...

    def log_pending_count(self) -> int:
        """Log events queued and not sealed yet (the seal lag)."""
        ...


class WorkKeys(Protocol):
    """Seed 002's work keys: generations bumped by ingest, refreshed by reconcilers."""

    def bump_generations(self, inbox_id: int, keys: Sequence[WorkKey]) -> None:
        """One generation more per occurrence of a key."""
        ...

    def list_work_keys(
        self, inbox_id: int, limit: int, after: WorkKey | None = None, *, dirty: bool = False,
        review: bool = False, preview: Preview = WHOLE,
    ) -> list[WorkItem]:
        """A page in key order after ``after``: only dirty keys, or only those in
        review, if asked; documents and errors read cut to ``preview``."""
        ...  # fmt: skip

    def work_key(self, inbox_id: int, key: WorkKey, lock: bool = False) -> WorkItem | None:
        """A work key; ``lock`` holds it against other writers until this transaction ends."""
        ...

    def dirty_keys(self, inbox_id: int, limit: int) -> list[WorkItem]: ...

    def next_claimable(self, inbox_id: int, now: float) -> WorkItem | None: ...

    def claim_work(
        self, inbox_id: int, key: WorkKey, token: int, worker: str, expires: float
    ) -> None: ...

    def apply_document(
        self, inbox_id: int, key: WorkKey, document: str, generation: int, token: int, now: float
    ) -> None: ...

    def release_claim(self, inbox_id: int, key: WorkKey, token: int) -> None: ...

    def record_failure(
        self, inbox_id: int, key: WorkKey, failures: int, next_attempt: float, error: str,
        in_review: bool,
    ) -> None: ...  # fmt: skip

    def retry_work(self, inbox_id: int, key: WorkKey) -> bool: ...

    def work_figures(self, inbox_id: int, now: float) -> dict[str, int]: ...


class Ledger(Protocol):
    """Seed 003's headcount ledger: a row per applied frame, totals per site and need."""

    def ledger_insert(self, inbox_id: int, rows: Sequence[LedgerRow]) -> None:
        """New records' rows; the totals move once per site and need."""
        ...

    def ledger_replace(self, inbox_id: int, row: LedgerRow) -> LedgerRow | None:
        """Replace a record's row, moving totals by the difference; return the old."""
        ...

    def ledger_totals(self, inbox_id: int) -> list[tuple[str, str, int, int]]:
        """(site, need, headcount, cases) per bucket."""
        ...

    def ledger_ranking(self, inbox_id: int) -> list[LedgerRow]: ...

    def ledger_arrivals(self, inbox_id: int) -> list[tuple[str, str, int, int]]:
        """(site, need, headcount, arrivals) per bucket had every arrival been counted:
        each record's headcount as often as it arrived (duplicates included)."""
        ...


class Tx(
    Records,
    Rejects,
    Leases,
    Log,
    SealQueue,
    WorkKeys,
    Ledger,
    Retention,
    Tokens,
    Inboxes,
    Protocol,
):
    """One open transaction, in every role. Everything done through it commits or rolls
    back together."""  # fmt: skip


class Store(Protocol):
    """A store: transactions, and the server clock that decides time."""

    url: str
    single_writer: bool
    """True when the backend lets one writer in at a time (SQLite): a writer then loses
    no concurrency by appending its own log entries inside its deciding transaction."""

    def atomic(self, work: Callable[[Tx], T], durable: bool = True) -> T:
        """Run ``work`` in a write transaction, again from the start if the backend or
        the engine reports a retryable conflict (deadlock, serialization failure,
        :class:`oncebox.errors.RetryTransaction`); bounded.

        ``durable=False`` lets the commit return before it is durable (no flush of its
        own). Only for a caller that makes a durable, writing commit right after and
        answers nobody before it: both backends append to one sequential log (SQLite's
        WAL, PostgreSQL's WAL), so that flush covers this commit too. On PostgreSQL only
        on the same server run: if the server restarted in between, the durable commit
        raises :class:`oncebox.errors.StorageUnavailable` instead.
        """
        ...

    def transaction(self) -> AbstractContextManager[Tx]:
        """A write transaction; commits on normal exit, rolls back on an exception."""
        ...

    def reading(self) -> AbstractContextManager[Tx]:
        """A read-only snapshot that does not block writers."""
        ...

    def scanning(self, budget: float | None = None) -> AbstractContextManager[Tx]:
        """A read-only snapshot for a listing or a search: on connections no writer
        waits for; past ``budget`` seconds it stops (:class:`~oncebox.errors.ReadTimedOut`)."""
        ...

    def now(self) -> float:
        """The server clock, in seconds since the epoch."""
        ...

    def close(self) -> None: ...


__all__ = [
    "WHOLE",
    "Arrival",
    "DeadLetter",
    "DeadLetterFilter",
    "Evicted",
    "Eviction",
    "Inbox",
    "Inboxes",
    "LeaseState",
    "Leases",
    "Ledger",
    "LedgerRow",
    "Letter",
    "Log",
    "LogEntry",
    "NewRecord",
    "Newcomer",
    "PendingEvent",
    "Preview",
    "Quarantined",
    "Record",
    "Records",
    "Rejects",
    "Retention",
    "Revision",
    "SealQueue",
    "SealerState",
    "SessionRow",
    "Store",
    "Stored",
    "T",
    "TokenRow",
    "Tokens",
    "Tx",
    "WorkItem",
    "WorkKey",
    "WorkKeys",
]
