"""The feed: accepted records and accepted revisions of one inbox, in log order, and the
named cursors (consumers) that follow it.

A feed entry's position is the log position of the entry that sealed its revision,
assigned when it is sealed, so a revision whose transaction committed late comes later
and a cursor that moved on never skips it. Its idempotency key is the same on every read
of that revision and different for every other one: what a downstream system dedups by.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from oncebox.domain.kinds import Content, Digest, Doc, Instant, JsonText, Signed
from oncebox.domain.records import SIGNATURE

LISTED_CUT = "The values shown only in part (a content cut to the feed's bound)."


@dataclass(frozen=True)
class FeedEntry:
    """One accepted record, or one accepted revision of it, as the feed hands it on."""

    position: Annotated[int, Doc("Its log position: the feed's cursor moves past it.")]
    record_id: Annotated[int, Doc("The record.")]
    revision: Annotated[int, Doc("The revision this entry hands on (1: as first accepted).")]
    identity: Annotated[str | None, Doc("The record's identity; null once evicted.")]
    witness: Annotated[Digest, Doc("SHA-256 of this revision's canonical content (hex).")]
    fields: Annotated[JsonText | None, Doc("The values the inbox's codec named.")]
    content: Annotated[Content | None, Doc("This revision's content; null once evicted.")]
    content_length: Annotated[int | None, Doc("Bytes of the content.")]
    first_seen: Annotated[Instant, Doc("When the record first arrived (ISO 8601).")]
    decided_at: Annotated[Instant, Doc("When this revision became the record's content.")]
    device_time: Annotated[str | None, Doc("The device's clock, as sent (not trusted).")]
    snapshot_id: Annotated[str | None, Doc("The snapshot it came in.")]
    delivery_id: Annotated[str | None, Doc("The transport's delivery id.")]
    signature: Annotated[Signed | None, Doc(SIGNATURE)] = None
    # The engine's, from the store's identity, the inbox, the record and the revision.
    idempotency_key: Annotated[
        str, Doc("The same on every read of this revision, different for every other.")
    ] = ""
    cut: Annotated[tuple[str, ...], Doc(LISTED_CUT)] = ()


@dataclass(frozen=True)
class Consumer:
    """A named, durable cursor over one inbox's feed, moved only under its lease."""

    name: Annotated[str, Doc("The consumer's name.")]
    inbox_id: Annotated[int, Doc("The inbox's id in the store.")]
    position: Annotated[
        int,
        Doc(
            "Its cursor: the last position it acknowledged, or read past when that stretch "
            "held none of its inbox's entries (0: none yet)."
        ),
    ]
    handed_out: Annotated[int, Doc("The last position handed to it; it acks up to here.")]
    created_at: Annotated[Instant, Doc("When it was made (ISO 8601).")]
    updated_at: Annotated[Instant, Doc("When its cursor last moved (ISO 8601).")]
