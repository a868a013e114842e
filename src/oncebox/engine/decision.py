"""Verdicts and decisions, and the pure rule that picks a verdict."""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, fields
from enum import StrEnum
from typing import Any

from oncebox.errors import ApplyError


class Verdict(StrEnum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    CONFLICT = "conflict"
    REJECTED = "rejected"


CONFLICT_REASON = "same_identity_different_content"
APPLY_FAILED = "apply_failed"
LATE_REPLAY = "late_replay"
UNSTORED = frozenset({"stale_token", "expired_lease"})


@dataclass(frozen=True)
class Decision:
    """What oncebox decided about one delivery.

    ``may_ack`` is true only once everything the decision wrote has committed: the
    record, its apply step's effects, the duplicate count, the quarantine row or the
    dead letter. A storage failure raises instead of returning a decision.
    """

    inbox: str
    verdict: Verdict
    may_ack: bool
    reason: str | None = None
    detail: str | None = None
    identity: str | None = None
    witness: str | None = None
    record_id: int | None = None
    revision: int | None = None
    quarantine_id: int | None = None
    first_quarantine: bool = False  # this delivery opened the quarantine row
    dead_letter_id: int | None = None
    late_replay: bool = False
    log_position: int | None = None

    def committed(self, log_position: int | None = None) -> Decision:
        """This decision once its transaction committed: it may be acked if it stored
        something (a fenced-out delivery stored nothing and must be retried)."""
        made: Decision = object.__new__(Decision)
        data = made.__dict__
        data.update(self.__dict__)
        data["may_ack"] = self.reason not in UNSTORED
        if log_position is not None:
            data["log_position"] = log_position
        return made

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["verdict"] = str(self.verdict)
        return data


_DEFAULTS = {f.name: f.default for f in fields(Decision) if f.default is not MISSING}


def decision_of(inbox: str, verdict: Verdict, may_ack: bool = False, **facts: Any) -> Decision:
    """``Decision(inbox, verdict, may_ack, **facts)``, for the per-delivery paths.

    Why: a frozen dataclass's ``__init__`` sets each of its 14 fields through
    ``object.__setattr__``; filling the instance's ``__dict__`` at once gives the same
    object several times faster. ``facts`` must name fields (checked in the tests).
    """
    made: Decision = object.__new__(Decision)
    made.__dict__.update(_DEFAULTS, inbox=inbox, verdict=verdict, may_ack=may_ack, **facts)
    return made


def unapplied(error: ApplyError) -> Decision:
    """An apply step's failure where a batch answers each delivery: rejected, nothing
    of it stored, so it must not be acknowledged. Why it failed is the step's business
    (the server's log): its words may name the store's tables, which no sender sees."""
    detail = (
        f"the apply step of inbox {error.inbox} failed on this delivery; nothing of it was "
        f"stored: resend it once the step is fixed"
    )
    return decision_of(error.inbox, Verdict.REJECTED, False, reason=APPLY_FAILED, detail=detail)


def classify(existing_witness: bytes | None, witness: bytes) -> Verdict:
    """First write wins: no record means accept, the same content is a duplicate, and
    different content under the same identity is a conflict (never an overwrite)."""
    if existing_witness is None:
        return Verdict.ACCEPTED
    if existing_witness == witness:
        return Verdict.DUPLICATE
    return Verdict.CONFLICT
