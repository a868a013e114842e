"""Records: what the first valid arrival of an identity leaves, its revisions, and what
retention leaves of it (a tombstone, then nothing but the counts it had)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, NamedTuple

from oncebox.domain.kinds import Content, Digest, Doc, Instant, JsonText, Signed

SIGNATURE = "The sender's verified webhook signature; null if the sender did not sign it."
LISTED_CUT = "In a listing: the values shown only in part (the whole is one request away)."
KEY = (
    "The key its delivery came with, as sent; null if none came, once evicted, or for one "
    "kept before keys were (migration 19)."
)


@dataclass(frozen=True)
class Inbox:
    """A declared intake as the store keeps it."""

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
class Record:
    """A record: what the first valid arrival of an identity left (or its tombstone)."""

    id: Annotated[int, Doc("The record id.")]
    inbox_id: Annotated[int, Doc("The inbox's id in the store.")]
    ident: Annotated[Digest, Doc("SHA-256 of the identity (hex).")]
    identity: Annotated[str | None, Doc("The identity; null once evicted.")]
    witness: Annotated[Digest, Doc("SHA-256 of the canonical content (hex).")]
    revision: Annotated[int, Doc("The revision (accepted newcomers add one).")]
    content: Annotated[Content | None, Doc("The content; null once evicted.")]
    fields: Annotated[JsonText | None, Doc("The values the inbox's codec named.")]
    first_seen: Annotated[Instant, Doc("When it first arrived (ISO 8601, server clock).")]
    last_seen: Annotated[Instant, Doc("When it last arrived (ISO 8601, server clock).")]
    seen_count: Annotated[int, Doc("How often it arrived.")]
    evicted_at: Annotated[Instant | None, Doc("When retention evicted it (ISO 8601).")]
    late_replays: Annotated[int, Doc("Resends after its eviction.")]
    device_time: Annotated[str | None, Doc("The device's clock, as sent (not trusted).")]
    snapshot_id: Annotated[str | None, Doc("The snapshot it came in.")]
    delivery_id: Annotated[str | None, Doc("The transport's delivery id.")]
    signature: Annotated[Signed | None, Doc(SIGNATURE)] = None
    log_seq: Annotated[int | None, Doc("The log entry that sealed it.")] = None
    revised_at: Annotated[float | None, Doc("When an operator last revised it (unix s).")] = None
    content_length: Annotated[int | None, Doc("Bytes of the content.")] = None
    key: Annotated[str | None, Doc(KEY)] = None
    cut: Annotated[tuple[str, ...], Doc(LISTED_CUT)] = ()

    @property
    def is_tombstone(self) -> bool:
        return self.evicted_at is not None


class Stored(NamedTuple):
    """What a decision needs of a stored record (or tombstone): no content.

    A named tuple: every decision reads one per delivery, and a frozen dataclass costs
    several times more to build."""

    id: int
    ident: bytes
    witness: bytes
    revision: int
    evicted_at: float | None
    first_seen: float
    log_seq: int | None


# A Stored's fields, in its order, as a plain tuple: what SQLite's lookup gives back as
# it reads the row, read by position. Why: a named tuple costs several times a plain one
# to build, and the garbage collector visits it as long as the batch lives (about 4% of
# the instructions of a batch of duplicates). A Stored is one too.
StoredRow = tuple[int, bytes, bytes, int, float | None, float, int | None]


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
    key: str | None = None  # the delivery's key, as sent


# A NewRecord's fields, in its order, as a plain tuple: what the walk makes for each new
# record of a batch, read by position. Why: a named tuple costs several times a plain
# one to build, and the garbage collector visits it as long as the batch lives (about
# 2% of the instructions of a batch of new deliveries). A NewRecord is one too.
NewRecordRow = tuple[int, bytes, str, bytes, bytes, str, Arrival, int | None, str | None]


@dataclass(frozen=True)
class Revision:
    """A revision of a record that an operator's accepted newcomer superseded."""

    record_id: Annotated[int, Doc("The record.")]
    revision: Annotated[int, Doc("The revision's number.")]
    witness: Annotated[Digest, Doc("SHA-256 of its canonical content (hex).")]
    content: Annotated[Content | None, Doc("Its content; null once evicted.")]
    fields: Annotated[JsonText | None, Doc("The values the inbox's codec named.")]
    decided_at: Annotated[Instant, Doc("When it became the record's content (ISO 8601).")]
    superseded_at: Annotated[Instant, Doc("When the next revision replaced it (ISO 8601).")]
    note: Annotated[str | None, Doc("The operator's note on the revision that replaced it.")]


@dataclass(frozen=True)
class Evicted:
    """A record retention just turned into a tombstone, or a tombstone it dropped."""

    record_id: int
    ident: bytes
    witness: bytes
    first_seen: float
    # What a dropped tombstone had counted, carried on its inbox (counts never go down).
    duplicates: int = 0
    late_replays: int = 0
    max_lateness: float = 0.0


@dataclass(frozen=True)
class Eviction:
    """One eviction retention made: a record turned tombstone, or a tombstone dropped."""

    id: int
    inbox_id: int
    kind: str  # record | tombstone
    ident: Digest
    witness: Digest
    first_seen: Instant
    evicted_at: Instant
