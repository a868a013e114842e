"""The one vocabulary every layer shares: each entity type and each word written once.

No I/O and no rules here: the store builds these types from its rows, the engine
decides in them, and the surfaces show them (their HTTP models are generated from them).
"""

from oncebox.domain.access import ListedToken, SessionRow, TokenRow
from oncebox.domain.decision import Decision
from oncebox.domain.feed import Consumer, FeedEntry
from oncebox.domain.finding import Happened, TimelineEntry
from oncebox.domain.kinds import Content, Digest, Doc, Instant, JsonText, Kind, Signed
from oncebox.domain.leases import SEALER, Fenced, LeaseState, Resource
from oncebox.domain.listing import WHOLE, DeadLetterFilter, Preview, RecordWindow
from oncebox.domain.log import LogEntry, LogEvent, PendingEvent
from oncebox.domain.records import (
    Arrival,
    Evicted,
    Eviction,
    Inbox,
    NewRecord,
    NewRecordRow,
    Record,
    Revision,
    Stored,
    StoredRow,
)
from oncebox.domain.rejects import DeadLetter, Letter, Newcomer, Quarantined
from oncebox.domain.vocabulary import (
    APPLY_FAILED,
    CONFLICT_REASON,
    EXPIRED_LEASE,
    LATE_REPLAY,
    NOTE_MAX,
    REFUSAL_REASONS,
    STALE_TOKEN,
    UNSTORED,
    LetterStatus,
    QuarantineStatus,
    Resolution,
    Verdict,
)
from oncebox.domain.work import LedgerRow, WorkItem

__all__ = [
    "APPLY_FAILED",
    "CONFLICT_REASON",
    "EXPIRED_LEASE",
    "LATE_REPLAY",
    "NOTE_MAX",
    "REFUSAL_REASONS",
    "SEALER",
    "STALE_TOKEN",
    "UNSTORED",
    "WHOLE",
    "Arrival",
    "Consumer",
    "Content",
    "DeadLetter",
    "DeadLetterFilter",
    "Decision",
    "Digest",
    "Doc",
    "Evicted",
    "Eviction",
    "FeedEntry",
    "Fenced",
    "Happened",
    "Inbox",
    "Instant",
    "JsonText",
    "Kind",
    "LeaseState",
    "LedgerRow",
    "Letter",
    "LetterStatus",
    "ListedToken",
    "LogEntry",
    "LogEvent",
    "NewRecord",
    "NewRecordRow",
    "Newcomer",
    "PendingEvent",
    "Preview",
    "QuarantineStatus",
    "Quarantined",
    "Record",
    "RecordWindow",
    "Resolution",
    "Resource",
    "Revision",
    "SessionRow",
    "Signed",
    "Stored",
    "StoredRow",
    "TimelineEntry",
    "TokenRow",
    "Verdict",
    "WorkItem",
]
