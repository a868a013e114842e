"""A decision: what oncebox decided about one delivery, and whether it may be acked."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Annotated, Any

from oncebox.domain.kinds import Doc
from oncebox.domain.vocabulary import UNSTORED, Verdict


@dataclass(frozen=True)
class Decision:
    """What oncebox decided about one delivery.

    ``may_ack`` is true only once everything the decision wrote has committed: the
    record, its apply step's effects, the duplicate count, the quarantine row or the
    dead letter. A storage failure raises instead of returning a decision.
    """

    inbox: Annotated[str, Doc("The inbox that decided.")]
    verdict: Annotated[
        Verdict,
        Doc(
            "accepted: a new record; duplicate: seen before; conflict: same identity, "
            "other content (quarantined); rejected: not stored as a record."
        ),
    ]
    may_ack: Annotated[bool, Doc("Whether the sender may acknowledge the delivery.")]
    reason: Annotated[
        str | None, Doc("Why (rejected: bad_format, stale_token, ...; conflict).")
    ] = None
    detail: Annotated[str | None, Doc("What exactly was wrong, for people.")] = None
    identity: Annotated[str | None, Doc("The delivery's identity.")] = None
    witness: Annotated[str | None, Doc("SHA-256 of the canonical content (64 hex digits).")] = None
    record_id: Annotated[int | None, Doc("The record (new or existing).")] = None
    revision: Annotated[int | None, Doc("The record's revision.")] = None
    quarantine_id: Annotated[int | None, Doc("The quarantine row (conflict).")] = None
    first_quarantine: Annotated[bool, Doc("Whether this conflict opened its quarantine row.")] = (
        False
    )
    dead_letter_id: Annotated[int | None, Doc("The dead letter (rejected).")] = None
    late_replay: Annotated[bool, Doc("A resend of a record retention already evicted.")] = False
    log_position: Annotated[
        int | None, Doc("The log entry that seals the record, once sealed.")
    ] = None

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
