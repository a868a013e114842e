"""The rows of a listing, as the API sends them: each value cut to a bound, with what the
whole is, so that a listing's answer is bounded in bytes as well as rows.

A listing shows a content (a newcomer's, its original's) or a dead letter's kept head
cut to its first 1,024 bytes, each text a sender chose (identity, key, detail, transport
facts, note, a reader's error) cut to 512 characters, and named fields or a work key's
document only when their JSON is at most 2,048 characters; ``cut`` names what is shown
only in part. The whole row is one request away: ``GET /v1/quarantine/{id}``, ``GET
/v1/dead-letters/{id}``, ``GET /v1/inboxes/{inbox}/work/key?seller_id=...``.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from oncebox.domain import DeadLetter, Quarantined, Record
from oncebox.engine.views import LISTED
from oncebox.surfaces.http.models import WorkKeyOut, WorkOut
from oncebox.surfaces.http.shapes import Hex, JsonObject, shaped

CUT = (
    f"The values shown only in part: content (or head) cut to its first "
    f"{LISTED.content:,} bytes, a text to its first {LISTED.text:,} characters, fields "
    f"left out (null) past {LISTED.fields:,} characters."
)


@shaped(Record)
class RecordListedOut(BaseModel):
    """An original record as a listing shows it."""

    fields: JsonObject | None = Field(
        description="The values the inbox's codec named; null if evicted or too long to list."
    )
    content_sha256: Hex | None = Field(
        description="SHA-256 of the whole content (hex; the witness); null once evicted."
    )
    cut: list[str] = Field(description=CUT)


@shaped(Quarantined)
class QuarantineListedOut(BaseModel):
    """A quarantined newcomer as a listing shows it, beside its original; the whole
    row is ``GET /v1/quarantine/{id}``."""

    fields: JsonObject | None = Field(
        description="The values the inbox's codec named; null if too long to list."
    )
    content_sha256: Hex = Field(description="SHA-256 of the whole content (hex; the witness).")
    cut: list[str] = Field(description=CUT)
    inbox: str = Field(description="The inbox's name.")
    original: RecordListedOut | None = Field(description="The original record; null if evicted.")


@shaped(DeadLetter)
class DeadLetterListedOut(BaseModel):
    """A dead letter as a listing shows it; the whole kept head is
    ``GET /v1/dead-letters/{id}``."""

    cut: list[str] = Field(description=CUT)
    inbox: str = Field(description="The inbox's name.")


class WorkKeyListedOut(WorkKeyOut):
    """A work key as a listing shows it."""

    document_length: int | None = Field(
        description="Characters of the document's JSON; null for none."
    )
    cut: list[str] = Field(description=CUT + " The document is left out (null) the same way.")


class WorkListedOut(WorkOut):
    """A page of an inbox's work keys with the figures of them all."""

    keys: list[WorkKeyListedOut] = Field(  # type: ignore[assignment]
        description="The keys, in key order (only dirty ones if asked)."
    )
