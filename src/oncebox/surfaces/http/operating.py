"""The bodies and answers of an operator's actions on dead letters and conflicts: one
replay (corrected or not), an archive, and the bulk actions with their previews."""

from __future__ import annotations

from pydantic import BaseModel, Field

from oncebox.domain import NOTE_MAX
from oncebox.domain.bulk import BulkItem, BulkRun
from oncebox.engine.operators import BULK_MOST, COUNT_MOST, PREVIEW_FIRST
from oncebox.surfaces.choices import ResolutionChoice
from oncebox.surfaces.http.listed import DeadLetterListedOut, QuarantineListedOut
from oncebox.surfaces.http.models import STRICT, DeadLetterOut, DecisionOut
from oncebox.surfaces.http.shapes import shaped

Note = Field(default=None, max_length=NOTE_MAX, description="Why; kept in the log.")
NeededNote = Field(min_length=1, max_length=NOTE_MAX, description="Why; kept in the log.")
Limit = Field(
    default=100,
    ge=1,
    le=BULK_MOST,
    description=f"At most this many items this call (1 to {BULK_MOST}); the answer's "
    "next_after says where the next call starts.",
)


class ReplayIn(BaseModel):
    """An operator's replay of a dead letter, after a sender or configuration fix, or
    with the operator's correction of what it kept."""

    model_config = STRICT

    note: str | None = Field(
        default=None,
        max_length=NOTE_MAX,
        description="Why it is replayed; kept in the log (needed with a correction).",
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
    body: str | None = Field(
        default=None,
        max_length=1_048_576,
        description="A corrected body (UTF-8 text) decided instead of the one kept; the "
        "log keeps the SHA-256 of both.",
    )
    key: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        description="A corrected key (a USSD frame_id, say) decided instead of the one kept.",
    )


class ReplayedOut(BaseModel):
    """A dead letter replayed: what it was decided as now, and the dead letter after."""

    decision: DecisionOut = Field(description="The decision, as for any delivery.")
    dead_letter: DeadLetterOut = Field(description="The dead letter, its replay recorded.")


class ArchiveIn(BaseModel):
    """Putting a dead letter aside."""

    model_config = STRICT

    note: str = NeededNote


class BulkIn(BaseModel):
    """A bulk replay or archive: why, and how many this call at most."""

    model_config = STRICT

    note: str | None = Note
    limit: int = Limit


class BulkResolveIn(BaseModel):
    """A bulk resolution: keep or accept, why, and how many this call at most."""

    model_config = STRICT

    action: ResolutionChoice = Field(
        description="keep the originals, or accept the newcomers as next revisions."
    )
    note: str = NeededNote
    limit: int = Limit


@shaped(BulkItem)
class BulkItemOut(BaseModel):
    """One item a bulk action acted on."""


@shaped(BulkRun, leave_out=("items",))
class BulkRunOut(BaseModel):
    """What one bulk call did: the count, each item's outcome, where to go on."""

    items: list[BulkItemOut] = Field(description="Each item, in id order, and its outcome.")


class LettersPreviewOut(BaseModel):
    """What a bulk action on dead letters would act on now."""

    count: int = Field(description=f"How many match (counted up to {COUNT_MOST:,}).")
    first: list[DeadLetterListedOut] = Field(
        description=f"The first {PREVIEW_FIRST} of them, in id order."
    )


class ConflictsPreviewOut(BaseModel):
    """What a bulk resolution would act on now."""

    count: int = Field(description=f"How many open conflicts match (up to {COUNT_MOST:,}).")
    first: list[QuarantineListedOut] = Field(
        description=f"The first {PREVIEW_FIRST} of them, in id order."
    )
