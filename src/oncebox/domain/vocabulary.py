"""The words oncebox decides and acts in, each spelled once: verdicts, the reasons a
decision names, quarantine statuses, operator actions and the limits they share."""

from __future__ import annotations

from enum import StrEnum


class Verdict(StrEnum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    CONFLICT = "conflict"
    REJECTED = "rejected"


class QuarantineStatus(StrEnum):
    """Where a quarantined newcomer stands: waiting for an operator, or resolved."""

    OPEN = "open"
    KEPT = "kept"  # the original record stands
    ACCEPTED = "accepted"  # the newcomer became the record's next revision


class Resolution(StrEnum):
    """What an operator may do with a quarantined newcomer."""

    KEEP = "keep"
    ACCEPT = "accept"

    @property
    def status(self) -> QuarantineStatus:
        return QuarantineStatus.KEPT if self is Resolution.KEEP else QuarantineStatus.ACCEPTED


# Reasons a decision names beside its verdict.
CONFLICT_REASON = "same_identity_different_content"
LATE_REPLAY = "late_replay"
APPLY_FAILED = "apply_failed"
STALE_TOKEN = "stale_token"
EXPIRED_LEASE = "expired_lease"
# Rejections that stored nothing, so that the sender must not acknowledge them.
UNSTORED = frozenset({STALE_TOKEN, EXPIRED_LEASE})

# The longest note an operator may leave with a resolution or a replay, in characters.
NOTE_MAX = 4096
