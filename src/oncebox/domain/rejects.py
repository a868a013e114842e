"""What is kept of a delivery that did not become a record: a conflicting newcomer in
quarantine, for an operator, or an invalid delivery as a dead letter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, NamedTuple

from oncebox.domain.kinds import Content, Digest, Doc, Instant, JsonText, Signed
from oncebox.domain.records import LISTED_CUT, SIGNATURE, Arrival
from oncebox.domain.vocabulary import LetterStatus, QuarantineStatus


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
    key: str | None = None  # the delivery's key, as sent


@dataclass(frozen=True)
class Quarantined:
    """A conflicting newcomer kept for an operator, with how often it came."""

    id: Annotated[int, Doc("The quarantine row's id.")]
    inbox_id: Annotated[int, Doc("The inbox's id in the store.")]
    ident: Annotated[Digest, Doc("SHA-256 of the identity (hex).")]
    identity: Annotated[str, Doc("The identity it shares with the original.")]
    record_id: Annotated[int | None, Doc("The original record.")]
    witness: Annotated[Digest, Doc("SHA-256 of the newcomer's canonical content (hex).")]
    content: Annotated[Content, Doc("The newcomer's content.")]
    # None only in a listing, when too long to list (see cut).
    fields: Annotated[JsonText | None, Doc("The values the inbox's codec named.")]
    reason: Annotated[str, Doc("Why it was quarantined.")]
    status: Annotated[QuarantineStatus, Doc("Its resolution so far.")]
    note: Annotated[str | None, Doc("The operator's note.")]
    first_seen: Annotated[Instant, Doc("When it first arrived (ISO 8601).")]
    last_seen: Annotated[Instant, Doc("When it last arrived (ISO 8601).")]
    seen_count: Annotated[int, Doc("How often it arrived.")]
    resolved_at: Annotated[Instant | None, Doc("When it was resolved (ISO 8601).")]
    device_time: Annotated[str | None, Doc("The device's clock, as sent.")]
    snapshot_id: Annotated[str | None, Doc("The snapshot it came in.")]
    delivery_id: Annotated[str | None, Doc("The transport's delivery id.")]
    signature: Annotated[Signed | None, Doc(SIGNATURE)] = None
    resolved_by: Annotated[str | None, Doc("Who resolved it: the API token's name, or null.")] = (
        None
    )
    content_length: Annotated[int | None, Doc("Bytes of the content.")] = None
    key: Annotated[
        str | None,
        Doc(
            "The key its delivery came with, as sent; null if none came (or kept before "
            "migration 19)."
        ),
    ] = None
    cut: Annotated[tuple[str, ...], Doc(LISTED_CUT)] = ()


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
class DeadLetter:
    """An invalid delivery, kept with its reason: a bounded copy, its length and digest."""

    id: Annotated[int, Doc("The dead letter's id.")]
    inbox_id: Annotated[int, Doc("The inbox's id in the store.")]
    reason: Annotated[str, Doc("Why it was refused (bad_format, bad_checksum, ...).")]
    detail: Annotated[str, Doc("What exactly was wrong.")]
    head: Annotated[Content, Doc("The first bytes of what arrived.")]
    length: Annotated[int, Doc("How many bytes arrived.")]
    sha256: Annotated[str, Doc("SHA-256 of all that arrived (hex).")]
    key: Annotated[str | None, Doc("The transport's key, as sent.")]
    received_at: Annotated[Instant, Doc("When it arrived (ISO 8601, server clock).")]
    device_time: Annotated[str | None, Doc("The device's clock, as sent.")]
    snapshot_id: Annotated[str | None, Doc("The snapshot it came in.")]
    delivery_id: Annotated[str | None, Doc("The transport's delivery id.")]
    signature: Annotated[Signed | None, Doc(SIGNATURE)] = None
    replayed_at: Annotated[
        Instant | None, Doc("When it was last replayed (ISO 8601), or null.")
    ] = None
    replayed_by: Annotated[
        str | None, Doc("Who replayed it last: the API token's name, or null.")
    ] = None
    replay_verdict: Annotated[
        str | None, Doc("What its last replay was decided as, such as accepted.")
    ] = None
    kept: Annotated[int | None, Doc("Bytes kept (all if equal to length).")] = None
    status: Annotated[
        LetterStatus, Doc("open, replayed (delivered again and decided) or archived.")
    ] = LetterStatus.OPEN
    attempts: Annotated[int, Doc("How often it was delivered again (replays, lines).")] = 0
    last_reason: Annotated[str | None, Doc("Why its last replay was refused again, or null.")] = (
        None
    )
    last_tried: Annotated[
        Instant | None, Doc("When it was last delivered again (ISO 8601), or null.")
    ] = None
    archived_at: Annotated[Instant | None, Doc("When it was archived (ISO 8601), or null.")] = None
    archived_by: Annotated[str | None, Doc("Who archived it, or null.")] = None
    archive_note: Annotated[str | None, Doc("Why it was archived, or null.")] = None
    cut: Annotated[tuple[str, ...], Doc(LISTED_CUT)] = ()
