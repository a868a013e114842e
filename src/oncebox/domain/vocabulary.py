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


class LetterStatus(StrEnum):
    """Where a dead letter stands: waiting, delivered again, or put aside by an operator."""

    OPEN = "open"  # refused, and every replay so far refused again
    REPLAYED = "replayed"  # delivered again and decided (accepted, duplicate, conflict)
    ARCHIVED = "archived"  # put aside by an operator, with a note


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
# Why the built-in codecs and transports refuse a delivery (a dead letter's reason); a
# user's codec may add its own, known once a dead letter has it.
REFUSAL_REASONS = (
    "bad_checksum", "bad_config", "bad_envelope", "bad_event_time", "bad_field",
    "bad_format", "bad_json", "bad_key", "bad_notification_type", "bad_payload",
    "bad_schema_version", "bad_shape", "duplicate_member", "invalid_unicode",
    "key_mismatch", "missing_field", "missing_identity", "missing_key", "missing_scope",
    "non_finite_number", "source_mismatch", "subscription_mismatch", "too_deep",
    "too_large", "unknown_field", "unknown_notification_type",
    "unknown_notification_version", "unknown_payload_version",
)  # fmt: skip

# Rejections that stored nothing, so that the sender must not acknowledge them.
UNSTORED = frozenset({STALE_TOKEN, EXPIRED_LEASE})

# The longest note an operator may leave with a resolution or a replay, in characters.
NOTE_MAX = 4096
