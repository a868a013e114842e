"""The bodies the records routes send (``routes/records.py``): a listing's row, a record
whole with its timeline, and a delivery key's lookup. Made from the domain's entities
(:func:`~oncebox.surfaces.http.shapes.shaped`) as every model is; a listing's values are
cut to the listing bound (:mod:`oncebox.surfaces.http.listed`)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from oncebox.domain import Quarantined, Revision, TimelineEntry
from oncebox.surfaces.http.listed import CUT, DeadLetterListedOut, RecordListedOut
from oncebox.surfaces.http.models import EntryOut, RecordOut
from oncebox.surfaces.http.shapes import Hex, JsonObject, shaped

DUPLICATES = "How many times the same content came again after the first (seen_count - 1)."


class RecordRowOut(RecordListedOut):
    """A record as the records listing shows it; the whole record, with all that
    happened to it, is ``GET /v1/records/{id}``."""

    inbox: str = Field(description="The inbox's name.")
    duplicates: int = Field(description=DUPLICATES)


@shaped(Quarantined)
class NewcomerListedOut(BaseModel):
    """A newcomer quarantined beside a record, as a listing shows it; the whole row is
    ``GET /v1/quarantine/{id}``."""

    fields: JsonObject | None = Field(
        description="The values the inbox's codec named; null if too long to list."
    )
    content_sha256: Hex = Field(description="SHA-256 of the whole content (hex; the witness).")
    cut: list[str] = Field(description=CUT)


@shaped(Revision)
class RevisionOut(BaseModel):
    """A revision of the record that an accepted newcomer superseded, whole."""


@shaped(TimelineEntry)
class TimelineEntryOut(BaseModel):
    """One thing that happened, with the log entry that records it where there is one."""


class RecordWholeOut(BaseModel):
    """A record whole and all that happened to it, in time order."""

    inbox: str = Field(description="The inbox's name.")
    record: RecordOut = Field(description="The record whole: content, fields, transport facts.")
    duplicates: int = Field(description=DUPLICATES)
    revisions: list[RevisionOut] = Field(
        description="The revisions accepted newcomers superseded, oldest first (the record "
        "itself is the current one)."
    )
    quarantine: list[NewcomerListedOut] = Field(
        description="The newcomers quarantined beside it (at most 100, in id order), open or "
        "resolved, and by whom."
    )
    more_quarantine: bool = Field(description="Whether more newcomers than these are kept.")
    log: list[EntryOut] = Field(
        description="The log entries about it, in order: its seal, each newcomer's "
        "quarantine and resolution (an accepted one seals the next revision), its eviction, "
        "the replay it came from."
    )
    timeline: list[TimelineEntryOut] = Field(description="What happened, in time order.")
    proof: str | None = Field(
        description="Where its inclusion proof is (GET); null until it is sealed."
    )


class LookupOut(BaseModel):
    """Everything kept under one delivery key of an inbox, in time order."""

    inbox: str = Field(description="The inbox's name.")
    key: str = Field(description="The delivery key looked up.")
    arrived: bool = Field(description="Whether anything came with this key, valid or not.")
    records: list[RecordRowOut] = Field(description="The records it made, in id order.")
    quarantine: list[NewcomerListedOut] = Field(
        description="The newcomers it came with, and those that conflicted with its records."
    )
    dead_letters: list[DeadLetterListedOut] = Field(
        description="The invalid deliveries that came with it."
    )
    timeline: list[TimelineEntryOut] = Field(description="What happened, in time order.")
    more: bool = Field(
        description="Whether a kind had more than 100 (records, newcomers, dead letters); "
        "those are left out: list them with the key filter."
    )
