"""The store interface: what the engine asks of storage, in the engine's own words.

The engine never writes SQL. It opens a transaction and calls these methods; each
backend implements them in one module with its SQL kept in one place. The verdict
rules stay in the engine: the store reports facts (what row exists, what it holds)
and records what the engine decided.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class InboxRow:
    id: int
    name: str
    codec: str
    apply: str
    retention_seconds: float | None
    tombstone_seconds: float | None
    fenced: bool = False


@dataclass(frozen=True)
class Arrival:
    """Transport facts kept beside what a delivery left behind; never identity."""

    device_time: str | None = None
    snapshot_id: str | None = None
    delivery_id: str | None = None


@dataclass(frozen=True)
class RecordRow:
    id: int
    inbox_id: int
    ident: bytes
    identity: str | None
    witness: bytes
    revision: int
    content: bytes | None
    fields: str | None
    first_seen: float
    last_seen: float
    seen_count: int
    evicted_at: float | None
    late_replays: int
    device_time: str | None
    snapshot_id: str | None
    delivery_id: str | None
    log_seq: int | None = None
    revised_at: float | None = None

    @property
    def is_tombstone(self) -> bool:
        return self.evicted_at is not None


class NewRecord(NamedTuple):
    """A record about to be inserted (first revision)."""

    ident: bytes
    identity: str
    witness: bytes
    content: bytes
    fields: str
    arrival: Arrival


@dataclass(frozen=True)
class QuarantineRow:
    id: int
    inbox_id: int
    ident: bytes
    identity: str
    record_id: int | None
    witness: bytes
    content: bytes
    fields: str
    reason: str
    status: str
    note: str | None
    first_seen: float
    last_seen: float
    seen_count: int
    resolved_at: float | None
    device_time: str | None
    snapshot_id: str | None
    delivery_id: str | None


@dataclass(frozen=True)
class DeadLetterRow:
    id: int
    inbox_id: int
    reason: str
    detail: str
    head: bytes
    length: int
    sha256: str
    key: str | None
    received_at: float
    device_time: str | None
    snapshot_id: str | None
    delivery_id: str | None


@dataclass(frozen=True)
class RevisionRow:
    record_id: int
    revision: int
    witness: bytes
    content: bytes | None
    fields: str | None
    decided_at: float
    superseded_at: float
    note: str | None


@dataclass(frozen=True)
class LedgerRow:
    record_id: int
    site: str
    need: str
    headcount: int
    pri: int


@dataclass(frozen=True)
class WorkKeyRow:
    seller_id: str
    sku: str
    marketplace_id: str
    generation: int
    applied_generation: int
    document: str | None = None
    document_generation: int | None = None
    applied_token: int | None = None
    refreshed_at: float | None = None
    claim_token: int | None = None
    claim_generation: int | None = None
    claimed_by: str | None = None
    claim_expires: float | None = None
    failures: int = 0
    next_attempt: float = 0.0
    last_error: str | None = None
    in_review: int = 0

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.seller_id, self.sku, self.marketplace_id)

    @property
    def dirty(self) -> bool:
        return self.generation > self.applied_generation


@dataclass(frozen=True)
class Evicted:
    record_id: int
    ident: bytes
    witness: bytes
    first_seen: float


@dataclass(frozen=True)
class LeaseRow:
    inbox_id: int
    scope: str
    token: int
    issued_at: float
    expires_at: float
    released_at: float | None


@dataclass(frozen=True)
class LogEntry:
    seq: int
    step: str
    state: str
    hash: str


@dataclass(frozen=True)
class PendingEvent:
    id: int
    step: str
    state: str
    record_id: int | None


@dataclass(frozen=True)
class SealerRow:
    token: int
    holder: str | None
    expires_at: float


@dataclass(frozen=True)
class EvictionRow:
    id: int
    inbox_id: int
    kind: str
    ident: bytes
    witness: bytes
    first_seen: float
    evicted_at: float


@dataclass(frozen=True)
class TokenRow:
    id: int
    name: str
    secret_hash: bytes
    inboxes: str
    scopes: str
    hmac_key: str | None
    created_at: float
    revoked_at: float | None


class Tx(Protocol):
    """One open transaction. Everything done through it commits or rolls back together."""

    def now(self) -> float:
        """The server clock (on PostgreSQL, the database's clock)."""
        ...

    # -- records -------------------------------------------------------------------
    def lock_identities(self, inbox_id: int, idents: Sequence[bytes]) -> None:
        """Hold these identities against other writers until this transaction ends, taken
        in one global order so that concurrent batches cannot deadlock on each other."""
        ...

    def find_record(self, inbox_id: int, ident: bytes) -> RecordRow | None: ...

    def insert_record(
        self,
        inbox_id: int,
        ident: bytes,
        identity: str,
        witness: bytes,
        content: bytes,
        fields: str,
        arrival: Arrival,
        now: float,
    ) -> int | None:
        """The new record's id, or None when a concurrent writer inserted it first."""
        ...

    def find_records(self, inbox_id: int, idents: Sequence[bytes]) -> dict[bytes, RecordRow]:
        """The stored records among these identities, in one round trip."""
        ...

    def insert_records(
        self, inbox_id: int, records: Sequence[NewRecord], now: float
    ) -> dict[bytes, int]:
        """Insert many new records in order; identity digest -> new id for each inserted
        (one a concurrent writer inserted first is missing from the answer)."""
        ...

    def touch_duplicate(self, record_id: int, now: float) -> bool:
        """Count a duplicate; False when the row vanished (retention dropped it meanwhile)."""
        ...

    def touch_duplicates(self, repeats: dict[int, int], now: float) -> set[int]:
        """Count many duplicates (record id -> how many); the ids whose rows were there."""
        ...

    def touch_late_replay(self, record_id: int, now: float, lateness: float) -> bool: ...

    def revise_record(
        self,
        record: RecordRow,
        witness: bytes,
        content: bytes,
        fields: str,
        now: float,
        note: str | None,
    ) -> int: ...

    def get_record(self, record_id: int) -> RecordRow | None: ...

    def revisions(self, record_id: int) -> list[RevisionRow]: ...

    # -- quarantine and dead letters ---------------------------------------------------
    def quarantine(
        self,
        inbox_id: int,
        ident: bytes,
        identity: str,
        record_id: int | None,
        witness: bytes,
        content: bytes,
        fields: str,
        reason: str,
        arrival: Arrival,
        now: float,
    ) -> tuple[int, bool]:
        """Keep a newcomer; a repeat of one already kept is counted. Returns (id, is_new)."""
        ...

    def get_quarantine(self, quarantine_id: int, lock: bool = False) -> QuarantineRow | None: ...

    def close_quarantine(self, quarantine_id: int, status: str, note: str, now: float) -> bool:
        """Close an open row; False if it was not open any more."""
        ...

    def list_quarantine(
        self, inbox_id: int | None, status: str | None, limit: int
    ) -> list[QuarantineRow]: ...

    def dead_letter(
        self,
        inbox_id: int,
        reason: str,
        detail: str,
        head: bytes,
        length: int,
        sha256: str,
        key: str | None,
        arrival: Arrival,
        now: float,
    ) -> int: ...

    def list_dead_letters(self, inbox_id: int | None, limit: int) -> list[DeadLetterRow]: ...

    # -- counters ----------------------------------------------------------------------
    def count_verdicts(self, inbox_id: int, hour: int, counts: dict[tuple[str, str], int]) -> None:
        """Add to the per-hour counts of (verdict, reason)."""
        ...

    def verdict_counts(self, inbox_id: int) -> dict[tuple[str, str], int]: ...

    def verdict_hours(self, inbox_id: int, since_hour: int) -> list[tuple[int, str, int]]:
        """(hour, verdict, count) from ``since_hour`` on (hours since the epoch), in order."""
        ...

    def inbox_figures(self, inbox_id: int) -> dict[str, Any]:
        """Sizes a stats view needs: records, tombstones, quarantine, dead letters, ..."""
        ...

    # -- apply steps -------------------------------------------------------------------
    def bump_generation(self, inbox_id: int, key: tuple[str, str, str]) -> int: ...

    def bump_generations(self, inbox_id: int, keys: Sequence[tuple[str, str, str]]) -> None:
        """bump_generation once per key, in one round trip."""
        ...

    def work_keys(self, inbox_id: int) -> list[WorkKeyRow]: ...

    # -- the reconciler ------------------------------------------------------------------
    def work_key(
        self, inbox_id: int, key: tuple[str, str, str], lock: bool = False
    ) -> WorkKeyRow | None:
        """A work key; ``lock`` holds it against other writers until this transaction ends."""
        ...

    def dirty_keys(self, inbox_id: int, limit: int) -> list[WorkKeyRow]: ...

    def next_claimable(self, inbox_id: int, now: float) -> WorkKeyRow | None: ...

    def claim_work(
        self, inbox_id: int, key: tuple[str, str, str], token: int, worker: str, expires: float
    ) -> None: ...

    def apply_document(
        self,
        inbox_id: int,
        key: tuple[str, str, str],
        document: str,
        generation: int,
        token: int,
        now: float,
    ) -> None: ...

    def release_claim(self, inbox_id: int, key: tuple[str, str, str], token: int) -> None: ...

    def record_failure(
        self,
        inbox_id: int,
        key: tuple[str, str, str],
        failures: int,
        next_attempt: float,
        error: str,
        in_review: bool,
    ) -> None: ...

    def retry_work(self, inbox_id: int, key: tuple[str, str, str]) -> bool: ...

    def work_figures(self, inbox_id: int, now: float) -> dict[str, int]: ...

    def ledger_insert(self, inbox_id: int, row: LedgerRow) -> None: ...

    def ledger_insert_many(self, inbox_id: int, rows: Sequence[LedgerRow]) -> None:
        """ledger_insert for many new records, the totals moved once per site and need."""
        ...

    def ledger_replace(self, inbox_id: int, row: LedgerRow) -> LedgerRow | None:
        """Replace a record's ledger row, moving totals by the difference; return the old."""
        ...

    def ledger_totals(self, inbox_id: int) -> list[tuple[str, str, int, int]]:
        """(site, need, headcount, cases) per bucket."""
        ...

    def ledger_ranking(self, inbox_id: int) -> list[LedgerRow]: ...

    # -- retention ---------------------------------------------------------------------
    def evict_records(self, inbox_id: int, cutoff: float, now: float, limit: int) -> list[Evicted]:
        """Turn records first seen before ``cutoff`` into tombstones, recording each."""
        ...

    def drop_tombstones(
        self, inbox_id: int, cutoff: float, now: float, limit: int
    ) -> list[Evicted]: ...

    def evictions(self, inbox_id: int | None, limit: int) -> list[EvictionRow]: ...

    def record_retention_override(
        self, inbox_id: int, retention_seconds: float, reason: str, now: float
    ) -> None: ...

    def retention_overrides(self, inbox_id: int) -> list[tuple[float, str, float]]: ...

    # -- inboxes -----------------------------------------------------------------------
    def declare_inbox(
        self,
        name: str,
        codec: str,
        apply: str,
        retention_seconds: float | None,
        tombstone_seconds: float | None,
        fenced: bool,
    ) -> InboxRow: ...

    # -- leases --------------------------------------------------------------------------
    def next_token(self) -> int:
        """The store's next fencing token: strictly greater than every one before."""
        ...

    def put_lease(
        self, inbox_id: int, scope: str, token: int, now: float, expires_at: float
    ) -> None: ...

    def get_lease(self, inbox_id: int, scope: str) -> LeaseRow | None: ...

    def list_leases(self, inbox_id: int) -> list[LeaseRow]: ...

    def release_lease(self, inbox_id: int, scope: str, token: int, now: float) -> bool: ...

    # -- the log -------------------------------------------------------------------------
    def log_head(self) -> LogEntry | None: ...

    def append_log(self, entries: Sequence[LogEntry]) -> None: ...

    def log_entries(self, start: int, end: int) -> list[LogEntry]:
        """Entries with ``start <= seq < end``, in order."""
        ...

    def log_entry(self, seq: int) -> LogEntry | None: ...

    def merkle_node(self, level: int, index: int) -> bytes: ...

    def put_merkle_nodes(self, nodes: Sequence[tuple[int, int, bytes]]) -> None: ...

    def unsealed_records(self, limit: int) -> list[RecordRow]:
        """Records with neither a log entry nor a queued seal (left by older versions)."""
        ...

    def mark_sealed(self, seals: Sequence[tuple[int, int]]) -> None:
        """Record each ``(log position, record id)``."""
        ...

    def record_seals(self) -> list[tuple[int, int | None]]: ...

    def meta(self, key: str) -> str | None: ...

    def claim_signature(self, signature: str, now: float, expires_at: float) -> bool:
        """Record a signed request's first use until ``expires_at``; False if it was
        already used and that use has not expired (a replay)."""
        ...

    def queue_log(self, step: str, state: str, record_id: int | None) -> int:
        """Queue an event for the sealer; writers never touch the log head."""
        ...

    def queue_logs(self, events: Sequence[tuple[str, str, int | None]]) -> None:
        """Queue many (step, state, record id) events, in order."""
        ...

    def pending_log(self, limit: int) -> list[PendingEvent]: ...

    def drop_pending(self, event_ids: Sequence[int]) -> None: ...

    def lock_sealer(self) -> SealerRow:
        """The sealer's lease row, locked until this transaction ends."""
        ...

    def set_sealer(self, token: int, holder: str | None, expires_at: float) -> None: ...

    def inboxes(self) -> list[InboxRow]: ...

    def last_pending_id(self) -> int:
        """The newest queued event's id (ids only grow), or 0 when the queue is empty."""
        ...

    def log_pending_count(self) -> int:
        """Log events queued and not sealed yet (the seal lag)."""
        ...

    def probe_write(self, now: float) -> None:
        """A trivial write: proves the store accepts writes (readiness); its durable
        commit also makes every commit before it durable."""
        ...

    # -- API tokens ----------------------------------------------------------------------
    def insert_token(
        self,
        name: str,
        secret_hash: bytes,
        inboxes: str,
        scopes: str,
        hmac_key: str | None,
        now: float,
    ) -> int | None:
        """The new token's id, or None when a live token already has that name."""
        ...

    def token_by_hash(self, secret_hash: bytes) -> TokenRow | None: ...

    def list_tokens(self) -> list[TokenRow]: ...

    def revoke_token(self, name_or_id: str, now: float) -> bool:
        """Revoke the live token with that name (or id); False if there is none."""
        ...

    # -- a user's own apply step -------------------------------------------------------
    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run the user's own SQL (in this backend's dialect) inside the transaction."""
        ...


class Store(Protocol):
    """A store: transactions, and the server clock that decides time."""

    url: str

    def atomic(self, work: Callable[[Tx], T], durable: bool = True) -> T:
        """Run ``work`` in a write transaction, again from the start if the backend
        reports a retryable conflict (deadlock, serialization failure); bounded.

        ``durable=False`` lets the commit return before it is durable (no flush of its
        own). Only for a caller that makes a durable, writing commit right after and
        answers nobody before it: both backends append to one sequential log (SQLite's
        WAL, PostgreSQL's WAL), so that flush covers this commit too.
        """
        ...

    def transaction(self) -> AbstractContextManager[Tx]:
        """A write transaction; commits on normal exit, rolls back on an exception."""
        ...

    def reading(self) -> AbstractContextManager[Tx]:
        """A read-only snapshot that does not block writers."""
        ...

    def now(self) -> float:
        """The server clock, in seconds since the epoch."""
        ...

    def close(self) -> None: ...
