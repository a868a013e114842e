"""Every body the HTTP API sends or takes, as a pydantic model: what ``/openapi.json``
declares, so that no success body is a free-form object.

The views are shaped by :func:`oncebox.surfaces.views.as_json` (digests in hex, times
in ISO 8601, content as text or base64); these models declare that shape, and a test
keeps their fields equal to the engine views' (``tests/test_openapi.py``). Two members
hold JSON that the API does not own: a record's ``fields`` (the values its codec
named) and a work key's ``document`` (what the trusted reader returned); both are
declared as JSON objects whose values may be any JSON.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

Hex = str  # documented per field: SHA-256 digests as 64 lowercase hex digits
JsonObject = dict[str, JsonValue]
# Request bodies take exactly the JSON types they declare: no 26059.0 for an integer,
# no "60" for a number (pydantic's lax mode converts both).
STRICT = ConfigDict(strict=True)


# -- decisions -------------------------------------------------------------------------------
class DecisionOut(BaseModel):
    """What oncebox decided for one delivery (the JSON of ``oncebox ingest``)."""

    inbox: str = Field(description="The inbox that decided.")
    verdict: Literal["accepted", "duplicate", "conflict", "rejected"] = Field(
        description="accepted: a new record; duplicate: seen before; conflict: same "
        "identity, other content (quarantined); rejected: not stored as a record."
    )
    may_ack: bool = Field(description="Whether the sender may acknowledge the delivery.")
    reason: str | None = Field(
        default=None, description="Why (rejected: bad_format, stale_token, ...; conflict)."
    )
    detail: str | None = Field(default=None, description="What exactly was wrong, for people.")
    identity: str | None = Field(default=None, description="The delivery's identity.")
    witness: Hex | None = Field(
        default=None, description="SHA-256 of the canonical content (64 hex digits)."
    )
    record_id: int | None = Field(default=None, description="The record (new or existing).")
    revision: int | None = Field(default=None, description="The record's revision.")
    quarantine_id: int | None = Field(default=None, description="The quarantine row (conflict).")
    first_quarantine: bool = Field(
        default=False, description="Whether this conflict opened its quarantine row."
    )
    dead_letter_id: int | None = Field(default=None, description="The dead letter (rejected).")
    late_replay: bool = Field(
        default=False, description="A resend of a record retention already evicted."
    )
    log_position: int | None = Field(
        default=None, description="The log entry that seals the record, once sealed."
    )


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
class TextContent(BaseModel):
    """Content that is UTF-8 text."""

    text: str = Field(description="The content as text.")


class Base64Content(BaseModel):
    """Content that is not UTF-8 text."""

    base64: str = Field(description="The content's bytes in base64.")


Content = TextContent | Base64Content


class SignatureOut(BaseModel):
    """What the sender's webhook signature vouched for when it was verified on arrival
    (never the secret, nor the signature)."""

    scheme: Literal["github", "standard-webhooks", "stripe"] = Field(
        description="The signing scheme the inbox declares."
    )
    signed_at: int | None = Field(
        description="The unix time the sender signed; null for github, which signs none."
    )
    key_signed: bool = Field(
        description="Whether the signature covers the message id used as the key "
        "(standard-webhooks: yes; github's X-GitHub-Delivery: no)."
    )


SIGNATURE = "The sender's verified webhook signature; null if the sender did not sign it."


class RecordOut(BaseModel):
    """A record: what the first valid arrival of an identity left (or its tombstone)."""

    id: int = Field(description="The record id.")
    inbox_id: int = Field(description="The inbox's id in the store.")
    ident: Hex = Field(description="SHA-256 of the identity (hex).")
    identity: str | None = Field(description="The identity; null once evicted.")
    witness: Hex = Field(description="SHA-256 of the canonical content (hex).")
    revision: int = Field(description="The revision (accepted newcomers add one).")
    content: Content | None = Field(description="The content; null once evicted.")
    fields: JsonObject | None = Field(description="The values the inbox's codec named.")
    first_seen: str = Field(description="When it first arrived (ISO 8601, server clock).")
    last_seen: str = Field(description="When it last arrived (ISO 8601, server clock).")
    seen_count: int = Field(description="How often it arrived.")
    evicted_at: str | None = Field(description="When retention evicted it (ISO 8601).")
    late_replays: int = Field(description="Resends after its eviction.")
    device_time: str | None = Field(description="The device's clock, as sent (not trusted).")
    snapshot_id: str | None = Field(description="The snapshot it came in.")
    delivery_id: str | None = Field(description="The transport's delivery id.")
    signature: SignatureOut | None = Field(default=None, description=SIGNATURE)
    log_seq: int | None = Field(description="The log entry that sealed it.")
    revised_at: float | None = Field(description="When an operator last revised it (unix s).")
    content_length: int | None = Field(default=None, description="Bytes of the content.")


class QuarantineOut(BaseModel):
    """A conflicting newcomer kept for an operator, with the original record beside it."""

    id: int = Field(description="The quarantine row's id.")
    inbox_id: int = Field(description="The inbox's id in the store.")
    ident: Hex = Field(description="SHA-256 of the identity (hex).")
    identity: str = Field(description="The identity it shares with the original.")
    record_id: int | None = Field(description="The original record.")
    witness: Hex = Field(description="SHA-256 of the newcomer's canonical content (hex).")
    content: Content = Field(description="The newcomer's content.")
    fields: JsonObject = Field(description="The values the inbox's codec named.")
    reason: str = Field(description="Why it was quarantined.")
    status: Literal["open", "kept", "accepted"] = Field(description="Its resolution so far.")
    note: str | None = Field(description="The operator's note.")
    first_seen: str = Field(description="When it first arrived (ISO 8601).")
    last_seen: str = Field(description="When it last arrived (ISO 8601).")
    seen_count: int = Field(description="How often it arrived.")
    resolved_at: str | None = Field(description="When it was resolved (ISO 8601).")
    device_time: str | None = Field(description="The device's clock, as sent.")
    snapshot_id: str | None = Field(description="The snapshot it came in.")
    delivery_id: str | None = Field(description="The transport's delivery id.")
    signature: SignatureOut | None = Field(default=None, description=SIGNATURE)
    resolved_by: str | None = Field(
        default=None, description="Who resolved it: the API token's name, or null."
    )
    content_length: int | None = Field(default=None, description="Bytes of the content.")
    inbox: str = Field(description="The inbox's name.")
    original: RecordOut | None = Field(description="The original record; null if evicted.")


class ResolveIn(BaseModel):
    """An operator's resolution of a quarantine row."""

    model_config = STRICT

    action: Literal["keep", "accept"] = Field(
        description="keep the original, or accept the newcomer as the next revision."
    )
    note: str = Field(min_length=1, max_length=4096, description="Why; kept with it.")


class DeadLetterOut(BaseModel):
    """An invalid delivery, kept with its reason: a bounded copy, its length and digest."""

    id: int = Field(description="The dead letter's id.")
    inbox_id: int = Field(description="The inbox's id in the store.")
    reason: str = Field(description="Why it was refused (bad_format, bad_checksum, ...).")
    detail: str = Field(description="What exactly was wrong.")
    head: Content = Field(description="The first bytes of what arrived.")
    length: int = Field(description="How many bytes arrived.")
    sha256: Hex = Field(description="SHA-256 of all that arrived (hex).")
    key: str | None = Field(description="The transport's key, as sent.")
    received_at: str = Field(description="When it arrived (ISO 8601, server clock).")
    device_time: str | None = Field(description="The device's clock, as sent.")
    snapshot_id: str | None = Field(description="The snapshot it came in.")
    delivery_id: str | None = Field(description="The transport's delivery id.")
    signature: SignatureOut | None = Field(default=None, description=SIGNATURE)
    replayed_at: str | None = Field(
        default=None, description="When it was last replayed (ISO 8601), or null."
    )
    replayed_by: str | None = Field(
        default=None, description="Who replayed it last: the API token's name, or null."
    )
    replay_verdict: str | None = Field(
        default=None, description="What its last replay was decided as, such as accepted."
    )
    kept: int | None = Field(default=None, description="Bytes kept (all if equal to length).")
    inbox: str = Field(description="The inbox's name.")


class ReplayIn(BaseModel):
    """An operator's replay of a dead letter, after a sender or configuration fix."""

    model_config = STRICT

    note: str | None = Field(
        default=None, max_length=4096, description="Why it is replayed; kept in the log."
    )
    lease_token: int | None = Field(
        default=None,
        ge=0,
        # Published as below 2**63, a bound a double holds exactly: 2**63 - 1 does not,
        # and a client reading the schema with doubles may send 2**63 as "at most" it.
        lt=2**63,
        description="A current fencing token of the inbox's lease (lease-fenced inboxes: "
        "dead letters keep no token).",
    )


class ReplayedOut(BaseModel):
    """A dead letter replayed: what it was decided as now, and the dead letter after."""

    decision: DecisionOut = Field(description="The decision, as for any delivery.")
    dead_letter: DeadLetterOut = Field(description="The dead letter, its replay recorded.")


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
    """A triage inbox's headcount ledger (seed 003): totals and the priority ranking."""

    inbox: str = Field(description="The inbox's name.")
    headcount: int = Field(description="The total headcount, each record counted once.")
    cases: int = Field(description="Records counted.")
    every_arrival_headcount: int = Field(
        description="What counting every arrival would have given (seed 003: 46, not 23)."
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


class EntryOut(BaseModel):
    """One log entry: ``hash = SHA-256(prev | step | state)``."""

    seq: int = Field(description="Its position (from 1).")
    step: str = Field(description="What happened (accept, resolve, lease, ...).")
    state: str = Field(description="The entry's state, as canonical JSON text.")
    hash: Hex = Field(description="The chain hash (hex).")


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


# -- health ----------------------------------------------------------------------------------
class Status(BaseModel):
    """A health answer."""

    status: Literal["ok", "ready"] = Field(description="ok: up; ready: the store takes writes.")
