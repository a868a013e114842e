"""Every body the HTTP API sends or takes, as a pydantic model: what ``/openapi.json``
declares, so that no success body is a free-form object.

The domain's entities (a decision, a record, a quarantined newcomer, a dead letter, a
log entry) are not described here again: their models are made from the entity types
(:func:`~oncebox.surfaces.http.shapes.shaped`), as
:func:`oncebox.surfaces.views.as_json` shows them (digests in hex, times in ISO 8601,
content as text or base64). Two members hold JSON that the API does not own: a record's
``fields`` (the values its codec named) and a work key's ``document`` (what the trusted
reader returned); both are declared as JSON objects whose values may be any JSON.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from oncebox.domain import (
    NOTE_MAX,
    Consumer,
    DeadLetter,
    Decision,
    FeedEntry,
    LogEntry,
    Quarantined,
    Record,
)
from oncebox.surfaces.choices import ResolutionChoice
from oncebox.surfaces.http.shapes import Content, Hex, JsonObject, shaped

# Request bodies take exactly the JSON types they declare: no 26059.0 for an integer,
# no "60" for a number (pydantic's lax mode converts both).
STRICT = ConfigDict(strict=True)


# -- decisions -------------------------------------------------------------------------------
@shaped(Decision)
class DecisionOut(BaseModel):
    """What oncebox decided for one delivery (the JSON of ``oncebox ingest``)."""


class BatchOut(BaseModel):
    """One decision per delivery of a batch, in the batch's order."""

    decisions: list[DecisionOut] = Field(description="The decisions, in order.")


# -- leases ----------------------------------------------------------------------------------
class LeaseIn(BaseModel):
    """A lease request: the scope to fence, and for how long."""

    model_config = STRICT

    scope: str = Field(min_length=1, max_length=256, description="The scope to lease.")
    ttl: float = Field(default=60.0, gt=0, le=86_400 * 366, description="Seconds the lease lasts.")


class LeaseOut(BaseModel):
    """A lease: the fencing token a writer sends as ``Oncebox-Lease-Token``."""

    inbox: str = Field(description="The inbox.")
    scope: str = Field(description="The leased scope.")
    token: int = Field(description="The fencing token; every older token is fenced.")
    expires_at: float = Field(description="Unix seconds on the server clock.")


class ReleasedOut(BaseModel):
    """A lease given up: its token is stale from now on."""

    inbox: str = Field(description="The inbox.")
    scope: str = Field(description="The scope released.")
    released: int = Field(description="The token released.")


# -- records, quarantine and dead letters ------------------------------------------------------
@shaped(Record)
class RecordOut(BaseModel):
    """A record: what the first valid arrival of an identity left (or its tombstone)."""


@shaped(Quarantined)
class QuarantineOut(BaseModel):
    """A conflicting newcomer kept for an operator, with the original record beside it."""

    inbox: str = Field(description="The inbox's name.")
    original: RecordOut | None = Field(description="The original record; null if evicted.")


class ResolveIn(BaseModel):
    """An operator's resolution of a quarantine row."""

    model_config = STRICT

    action: ResolutionChoice = Field(
        description="keep the original, or accept the newcomer as the next revision."
    )
    note: str = Field(min_length=1, max_length=NOTE_MAX, description="Why; kept with it.")


@shaped(DeadLetter)
class DeadLetterOut(BaseModel):
    """An invalid delivery, kept with its reason: a bounded copy, its length and digest."""

    inbox: str = Field(description="The inbox's name.")


# -- triage ----------------------------------------------------------------------------------
class TriageTotal(BaseModel):
    """The headcount of one site and need, beside what counting every arrival gives."""

    site: str = Field(description="The site.")
    need: str = Field(description="The need (MED, SHE, WAT, ...).")
    headcount: int = Field(description="The headcount, each record counted once.")
    cases: int = Field(description="Records counted.")
    every_arrival_headcount: int = Field(
        description="What counting every arrival (retransmissions too) would have given."
    )
    arrivals: int = Field(description="Arrivals of those records, retransmissions too.")


class TriageRank(BaseModel):
    """One record in the priority ranking (highest pri first, then headcount)."""

    record_id: int = Field(description="The record.")
    site: str = Field(description="The site.")
    need: str = Field(description="The need.")
    headcount: int = Field(description="Its headcount.")
    pri: int = Field(description="Its priority.")


class TriageOut(BaseModel):
    """A triage inbox's headcount ledger: totals and the priority ranking."""

    inbox: str = Field(description="The inbox's name.")
    headcount: int = Field(description="The total headcount, each record counted once.")
    cases: int = Field(description="Records counted.")
    every_arrival_headcount: int = Field(
        description="What counting every arrival would have given (a session sent twice: "
        "46, not 23)."
    )
    suppressed_headcount: int = Field(
        description="Headcount that deduplication kept from being counted twice."
    )
    totals: list[TriageTotal] = Field(description="Per site and need, by site then need.")
    ranking: list[TriageRank] = Field(description="Every record, highest priority first.")


# -- work keys -------------------------------------------------------------------------------
class WorkKeyIn(BaseModel):
    """A work key: (seller_id, sku, marketplace_id)."""

    model_config = STRICT

    seller_id: str = Field(description="The seller.")
    sku: str = Field(description="The SKU.")
    marketplace_id: str = Field(description="The marketplace.")


class WorkKeyOut(BaseModel):
    """A work key and the reconciler's state on it."""

    key: WorkKeyIn = Field(description="The key.")
    generation: int = Field(description="Bumped by every accepted event for the key.")
    applied_generation: int = Field(description="The generation last refreshed.")
    dirty: bool = Field(description="generation > applied_generation.")
    failures: int = Field(description="Failed refreshes in a row.")
    last_error: str | None = Field(description="The last refresh's error.")
    in_review: bool = Field(description="Waiting for an operator after too many failures.")
    claimed_by: str | None = Field(description="The worker holding a claim on it.")
    document: JsonObject | None = Field(description="The last document the reader returned.")
    document_generation: int | None = Field(description="The generation it was read for.")


class WorkFigures(BaseModel):
    """Counts of an inbox's work keys."""

    keys: int = Field(description="Work keys.")
    dirty: int = Field(description="Keys with a generation not yet refreshed.")
    in_review: int = Field(description="Keys waiting for an operator.")
    claimed: int = Field(description="Keys a worker holds a live claim on.")


class WorkOut(BaseModel):
    """An inbox's work keys with their figures."""

    figures: WorkFigures = Field(description="Counts over all the inbox's keys.")
    keys: list[WorkKeyOut] = Field(description="The keys (only dirty ones if asked).")


class RetriedOut(BaseModel):
    """A work key sent back from review."""

    retried: WorkKeyIn = Field(description="The key.")


# -- the log -------------------------------------------------------------------------------------
class CheckpointOut(BaseModel):
    """The log's checkpoint: tree size, Merkle root and chain head, signed with a key."""

    origin: str = Field(description="The log's name (`oncebox:` and the store's id).")
    tree_size: int = Field(description="Log entries covered.")
    root: Hex = Field(description="The Merkle root (RFC 6962 hashing, hex).")
    log_head: Hex = Field(description="The chain hash of the last entry (hex).")
    signature: str | None = Field(
        default=None, description="Ed25519 signature (base64); absent without a key."
    )
    key_id: str | None = Field(default=None, description="The signing key's id; absent unsigned.")


@shaped(LogEntry)
class EntryOut(BaseModel):
    """One log entry: ``hash = SHA-256(prev | step | state)``."""


class ProvenRecord(BaseModel):
    """The record fields the sealed entry covers; only these are shown as proven."""

    inbox: str | None = Field(default=None, description="The inbox's name.")
    id: int | None = Field(default=None, description="The record id.")
    identity: str | None = Field(default=None, description="The identity.")
    revision: int | None = Field(default=None, description="The revision sealed.")
    witness: Hex | None = Field(default=None, description="The witness sealed (hex).")
    snapshot_id: str | None = Field(default=None, description="The snapshot id sealed.")


class InclusionProofOut(BaseModel):
    """An inclusion proof for a record's seal, checkable offline (``oncebox verify-proof``)."""

    type: Literal["oncebox-inclusion-proof"] = Field(description="The document type.")
    version: int = Field(description="The document version.")
    tree_size: int = Field(description="The tree the proof is for.")
    leaf_index: int = Field(description="The entry's leaf (seq - 1).")
    entry: EntryOut = Field(description="The sealing log entry.")
    path: list[Hex] = Field(description="The audit path, leaf to root (hex).")
    record: ProvenRecord | None = Field(
        default=None, description="What the entry says about its record."
    )


class ConsistencyProofOut(BaseModel):
    """A proof that the tree of ``new_size`` entries extends that of ``old_size``."""

    type: Literal["oncebox-consistency-proof"] = Field(description="The document type.")
    version: int = Field(description="The document version.")
    old_size: int = Field(description="The older tree's size.")
    new_size: int = Field(description="The newer tree's size.")
    path: list[Hex] = Field(description="The consistency path (hex).")


class SegmentEntryOut(BaseModel):
    """One log entry of a segment: the inbox's record whole (``step``, ``state``,
    ``hash`` and its content), or another entry as its ``leaf`` hash only (whole, without
    content, in a segment asked for ``whole``). Absent members are absent, not null."""

    seq: int = Field(description="The entry's log position.")
    leaf: Hex | None = Field(
        default=None, description="Another entry's leaf hash (hex): all that is shown of it."
    )
    step: str | None = Field(default=None, description="What happened (accept, resolve, ...).")
    state: str | None = Field(default=None, description="The entry's state, as sealed (JSON).")
    hash: Hex | None = Field(default=None, description="The entry's chain hash (hex).")
    content: Content | None = Field(
        default=None,
        description="A record's content at the revision sealed; null when left out for its "
        "size (see cut) or not kept any more (evicted).",
    )
    content_length: int | None = Field(
        default=None, description="A record's content, in bytes; null when not kept any more."
    )
    content_sha256: Hex | None = Field(
        default=None, description="SHA-256 of the whole content (hex; the sealed witness)."
    )
    cut: list[str] | None = Field(
        default=None,
        description='["content"] when the content is over 1,024 bytes and left out.',
    )


class SegmentOut(BaseModel):
    """A feed segment: every log entry of a range, checkable offline against a signed
    checkpoint (``oncebox verify-feed``)."""

    type: Literal["oncebox-feed-segment"] = Field(description="The document type.")
    version: int = Field(description="The document version.")
    origin: str = Field(description="The log's name, as its checkpoints give it.")
    inbox: str = Field(description="The inbox whose records are given whole.")
    from_: int = Field(alias="from", description="The first log position of the range.")
    to: int = Field(description="The last log position of the range.")
    tree_size: int = Field(description="The tree (checkpoint size) the segment is proven to.")
    frontier: list[Hex] = Field(
        description="The roots of the perfect subtrees of the tree before the range (hex)."
    )
    entries: list[SegmentEntryOut] = Field(description="Every entry of the range, in order.")
    before_proof: list[Hex] = Field(
        description="Consistency proof from the tree before the range to tree_size (hex)."
    )
    end_proof: list[Hex] = Field(
        description="Consistency proof from the tree at the range's end to tree_size (hex)."
    )


# -- health ----------------------------------------------------------------------------------
class Status(BaseModel):
    """A health answer."""

    status: Literal["ok", "ready"] = Field(description="ok: up; ready: the store takes writes.")


# -- the feed and its consumers ----------------------------------------------------------------
@shaped(FeedEntry)
class FeedEntryOut(BaseModel):
    """An accepted record, or an accepted revision of it, as the feed hands it on."""


class FeedPageOut(BaseModel):
    """A page of the feed."""

    entries: list[FeedEntryOut] = Field(description="The entries, in position order.")
    next_after: int = Field(
        description="Read on after this position: past the last entry, or past every "
        "position looked at when the page is not full (none of those is this inbox's)."
    )


class ConsumerIn(BaseModel):
    """A consumer to make: the inbox it follows and where it starts."""

    model_config = STRICT

    inbox: str = Field(description="The inbox whose feed it follows.")
    start: Literal["beginning", "end"] | Annotated[int, Field(ge=0, lt=2**63)] = Field(
        default="beginning",
        description="beginning, end (the log's last position now) or a position.",
    )


class ConsumerLeaseIn(BaseModel):
    """Who takes a consumer's lease, and for how long."""

    model_config = STRICT

    holder: str | None = Field(
        default=None, max_length=256, description="Who holds it (default: the token's name)."
    )
    ttl: float = Field(default=30.0, gt=0, le=3600, description="Seconds the lease lasts.")


class ConsumerLeaseOut(BaseModel):
    """A consumer's lease: the fencing token its holder moves the cursor with."""

    consumer: str = Field(description="The consumer.")
    holder: str | None = Field(description="Who holds it.")
    token: int = Field(description="The fencing token; every older one is fenced.")
    expires_at: float = Field(description="Unix seconds on the server clock.")


class AckIn(BaseModel):
    """An acknowledgement: everything up to ``position`` was handled."""

    model_config = STRICT

    token: int = Field(ge=0, lt=2**63, description="The consumer's current fencing token.")
    position: int = Field(ge=0, lt=2**63, description="The position handled up to.")


@shaped(Consumer)
class ConsumerOut(BaseModel):
    """A consumer: its cursor, who holds it, and how far behind it is."""

    inbox: str = Field(description="The inbox's name.")
    holder: str | None = Field(default=None, description="Who holds its live lease, if any.")
    lease_expires_at: float | None = Field(
        default=None, description="When that lease runs out (unix seconds), if any."
    )
    lag_entries: int = Field(description="Entries on its inbox's feed after its cursor.")
    lag_seconds: float = Field(
        description="Seconds since the oldest of them was decided (0 when none)."
    )


class ConsumerListOut(BaseModel):
    """The consumers of the inboxes a token covers."""

    consumers: list[ConsumerOut] = Field(description="Each consumer, by name.")
