"""The rows a store hands the engine: one type per shape of result.

Rows are built by column name (see :mod:`oncebox.store.sqltx`): each field names the
column it comes from, so a query that selects columns in another order, or misses one,
fails at once instead of shifting values into the wrong fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


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
    """Transport facts kept beside what a delivery left behind; never identity.
    ``signature`` is what a sender's verified webhook signature vouched for (JSON text
    the engine writes), never the secret."""

    device_time: str | None = None
    snapshot_id: str | None = None
    delivery_id: str | None = None
    signature: str | None = None


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
    signature: str | None = None
    log_seq: int | None = None
    revised_at: float | None = None

    @property
    def is_tombstone(self) -> bool:
        return self.evicted_at is not None


class Stored(NamedTuple):
    """What a decision needs of a stored record (or tombstone): no content."""

    id: int
    ident: bytes
    witness: bytes
    revision: int
    evicted_at: float | None
    first_seen: float
    log_seq: int | None


class NewRecord(NamedTuple):
    """A record about to be inserted (first revision), its id already reserved;
    ``log_seq`` is set when its seal was appended in the same transaction."""

    id: int
    ident: bytes
    identity: str
    witness: bytes
    content: bytes
    fields: str
    arrival: Arrival
    log_seq: int | None = None


class Newcomer(NamedTuple):
    """A conflicting newcomer to keep in quarantine, and how often the batch brought it."""

    ident: bytes
    identity: str
    record_id: int
    witness: bytes
    content: bytes
    fields: str
    arrival: Arrival
    times: int


class Letter(NamedTuple):
    """A dead letter to keep: a bounded copy of what arrived and why it was refused."""

    reason: str
    detail: str
    head: bytes
    length: int
    sha256: str
    key: str | None
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
    signature: str | None = None
    resolved_by: str | None = None  # the actor: an API token's name


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
    signature: str | None = None
    replayed_at: float | None = None
    replayed_by: str | None = None
    replay_verdict: str | None = None


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
    # What a dropped tombstone had counted, carried on its inbox (counts never go down).
    duplicates: int = 0
    late_replays: int = 0
    max_lateness: float = 0.0


@dataclass(frozen=True)
class LeaseRow:
    inbox_id: int
    scope: str
    token: int
    issued_at: float
    expires_at: float
    released_at: float | None


class LogEntry(NamedTuple):
    seq: int
    step: str
    state: str
    hash: str


class PendingEvent(NamedTuple):
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


@dataclass(frozen=True)
class SessionRow(TokenRow):
    """A live console session: the token it belongs to, and when it ends."""

    expires_at: float
