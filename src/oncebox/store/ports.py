"""What the engine asks of a transaction, one port per user, in the engine's own words.

The engine never writes SQL. Each engine module takes the port it uses, small enough to
read at once: the decision path (:class:`Deciding`), the log and its sealer
(:class:`Chain`, :class:`Sealing`), operators (:class:`Operating`), the read side
(:class:`Listing`, :class:`Figures`), access (:class:`Access`), retention
(:class:`Retaining`), declaring inboxes (:class:`Declaring`), the one fence
(:class:`FencePort`) and apply steps (:class:`StepTx`, which is all a step, built-in or a
user's, gets); forwarding's outbox has its own module (:mod:`oncebox.store.outbox_port`).
A store's transaction is every port at once (:class:`oncebox.store.base.Tx`). The store
reports facts and records what the engine decided; the rules stay in the engine. Every
write that can concern many rows takes them all at once: a single delivery is a batch of
one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar

from oncebox.domain import (
    WHOLE,
    Consumer,
    DeadLetter,
    DeadLetterFilter,
    Evicted,
    Eviction,
    FeedEntry,
    Inbox,
    LeaseState,
    Letter,
    LogEntry,
    LogEvent,
    Newcomer,
    NewRecordRow,
    Preview,
    Quarantined,
    Record,
    Revision,
    StoredRow,
)
from oncebox.store.sqlfile import Query

R = TypeVar("R")
Params = Sequence[Any] | Mapping[str, Any]


class Clock(Protocol):
    def now(self) -> float:
        """The server clock (on PostgreSQL, the database's), in seconds since the epoch."""
        ...


class Events(Protocol):
    """Log events written beside the change they record (see :mod:`oncebox.engine.log`)."""

    def queue_logs(self, events: Sequence[LogEvent]) -> None:
        """Queue events, in order; writers never touch the head."""
        ...


class FencePort(Protocol):
    """The one fence's leases (see :mod:`oncebox.engine.fence`)."""

    def next_token(self) -> int:
        """The store's next fencing token: strictly greater than every one before."""
        ...

    def held(
        self, kind: str, owner: int, names: Sequence[str], exclusive: bool = False
    ) -> dict[str, LeaseState]:
        """The current leases of these resources, by name, held until this transaction
        ends so that no new lease can slip in between a check and what it admits:
        shared (deciders under one lease never wait for each other), or ``exclusive``
        (one writer at a time: the log's sealer, a work key's worker)."""
        ...

    def put_lease(self, lease: LeaseState) -> None:
        """Make ``lease`` the resource's lease (a new one, renewed, or released)."""
        ...

    def list_leases(self, kind: str, owner: int) -> list[LeaseState]: ...


class Deciding(Clock, Protocol):
    """The decision path's reads and writes (:mod:`oncebox.engine.decide`)."""

    def lock_identities(
        self, inbox_id: int, idents: Sequence[bytes], exclusive: bool = False
    ) -> None:
        """Hold these identities until this transaction ends. A batch deciding against
        them holds them shared: deciders never queue for each other here (they cannot
        deadlock on each other either: what they write, they write in one order). A
        change to a stored record (adjudication) holds them ``exclusive``: it waits for
        the deciders that hold them, and keeps new ones out until it commits, so that no
        resend decides against a record that is being revised."""
        ...

    def reserve_record_ids(self, n: int) -> list[int]:
        """``n`` fresh record ids, ascending; never one a record (even a dropped one) had."""
        ...

    def find_records(self, inbox_id: int, idents: Sequence[bytes]) -> dict[bytes, StoredRow]:
        """The stored records and tombstones among these identity digests."""
        ...

    def insert_records(self, inbox_id: int, records: Sequence[NewRecordRow], now: float,
                       positions: Mapping[int, int] | None = None) -> int:  # fmt: skip
        """Insert in order, at ``positions`` (their seals', if appended here); how many went
        in (one a concurrent writer inserted first is left out: the caller decides again)."""
        ...

    def count_duplicates(self, repeats: Mapping[int, int], now: float) -> int:
        """Count duplicates (record id -> how many) and touch ``last_seen``; how many of
        the records were still there."""
        ...

    def count_late_replays(self, late: Mapping[int, tuple[int, float]], now: float) -> int:
        """Count resends that reached a tombstone (id -> (count, greatest lateness))."""
        ...

    def quarantine(
        self, inbox_id: int, newcomers: Sequence[Newcomer], reason: str, now: float
    ) -> list[tuple[int, bool]]:
        """Keep each newcomer once while its row is open, counting repeats (a newcomer whose
        row an operator closed gets a new one); per newcomer (row id, newly kept)."""
        ...

    def dead_letter(self, inbox_id: int, letters: Sequence[Letter], now: float) -> list[int]:
        """Keep each letter; their ids, in order."""
        ...

    def count_verdicts(self, inbox_id: int, hour: int, counts: dict[tuple[str, str], int]) -> None:
        """Add to the per-hour counts of (verdict, reason)."""
        ...


class Operating(Events, Clock, Protocol):
    """What operators change: quarantine resolutions and dead letters' replays."""

    def lock_identities(
        self, inbox_id: int, idents: Sequence[bytes], exclusive: bool = False
    ) -> None: ...

    def find_records(self, inbox_id: int, idents: Sequence[bytes]) -> dict[bytes, StoredRow]: ...

    def get_record(self, record_id: int) -> Record | None: ...

    def revise_record(
        self,
        record: Record,
        witness: bytes,
        content: bytes,
        fields: str,
        now: float,
        note: str | None,
        last_seen: float,
    ) -> int:
        """Keep the current revision and make this content the next; its number.
        ``last_seen`` is when it last arrived: an operator's accepting is no arrival."""
        ...  # fmt: skip

    def get_quarantine(self, quarantine_id: int, lock: bool = False) -> Quarantined | None: ...

    def close_quarantine(
        self, quarantine_id: int, status: str, note: str, now: float, by: str | None = None
    ) -> bool:
        """Close an open row, naming who did; False if it was not open any more."""
        ...

    def get_dead_letter(self, letter_id: int) -> DeadLetter | None:
        """A dead letter, held against a second replay until this transaction ends."""
        ...

    def mark_replayed(self, letter_id: int, now: float, by: str | None, verdict: str) -> None: ...


class Listing(Protocol):
    """What the read side lists and shows, each value read cut to a preview."""

    def get_record(self, record_id: int) -> Record | None: ...

    def find_records(self, inbox_id: int, idents: Sequence[bytes]) -> dict[bytes, StoredRow]: ...

    def revisions(self, record_id: int) -> list[Revision]: ...

    def get_quarantine(self, quarantine_id: int, lock: bool = False) -> Quarantined | None: ...

    def list_quarantine(
        self,
        inbox_id: int | None,
        status: str | None,
        limit: int,
        after: int = 0,
        preview: Preview = WHOLE,
    ) -> list[Quarantined]:
        """Rows after id ``after``, in id order, each value read cut to ``preview``."""
        ...  # fmt: skip

    def originals(self, quarantine_ids: Sequence[int], preview: Preview) -> dict[int, Record]:
        """The records these quarantine rows conflict with, by quarantine row id, each
        value read cut to ``preview``."""
        ...

    def get_dead_letter(self, letter_id: int) -> DeadLetter | None: ...

    def list_dead_letters(
        self,
        inbox_id: int | None,
        limit: int,
        filters: DeadLetterFilter | None = None,
        preview: Preview = WHOLE,
    ) -> list[DeadLetter]:
        """Each value read cut to ``preview`` (the search looks at the whole kept head)."""
        ...  # fmt: skip

    def evictions(self, inbox_id: int | None, limit: int) -> list[Eviction]: ...

    def log_entries(self, start: int, end: int) -> list[LogEntry]: ...


class Figures(Clock, Protocol):
    """An inbox's counts, for stats, metrics and the console."""

    def verdict_counts(self, inbox_id: int) -> dict[tuple[str, str], int]: ...

    def verdict_hours(self, inbox_id: int, since_hour: int) -> list[tuple[int, str, int]]:
        """(hour, verdict, count) from ``since_hour`` on (hours since the epoch), in order."""
        ...

    def inbox_figures(self, inbox_id: int) -> dict[str, Any]:
        """Sizes a stats view needs: records, tombstones, quarantine, dead letters, ..."""
        ...

    def last_delivery(self, inbox_id: int) -> float | None:
        """When the inbox last took a delivery (any verdict), or None: never."""
        ...

    def retention_overrides(self, inbox_id: int) -> list[tuple[float, str, float]]: ...

    def log_pending_count(self) -> int:
        """Log events queued and not sealed yet (the seal lag)."""
        ...


class Retaining(Events, Clock, Protocol):
    """Eviction by age only, each one recorded (I7)."""

    def evict_records(self, inbox_id: int, cutoff: float, now: float, limit: int) -> list[Evicted]:
        """Turn records first seen before ``cutoff`` into tombstones, recording each."""
        ...

    def drop_tombstones(
        self, inbox_id: int, cutoff: float, now: float, limit: int
    ) -> list[Evicted]:
        """Drop tombstones first seen before ``cutoff``, carrying what they counted on
        their inbox and recording each."""
        ...


class Declaring(Events, Clock, Protocol):
    """Declared inboxes and the store's health."""

    def declare_inbox(
        self, name: str, codec: str, apply: str, retention_seconds: float | None,
        tombstone_seconds: float | None, fenced: bool,
    ) -> Inbox: ...  # fmt: skip

    def inboxes(self) -> list[Inbox]: ...

    def retention_overrides(self, inbox_id: int) -> list[tuple[float, str, float]]: ...

    def record_retention_override(
        self, inbox_id: int, retention_seconds: float, reason: str, now: float
    ) -> None: ...

    def probe_write(self, now: float) -> None:
        """A trivial write: proves the store accepts writes (readiness); its durable
        commit also makes every commit before it durable."""
        ...


class Feeding(Clock, Protocol):
    """The feed (accepted revisions in log order) and the consumers that follow it."""

    def feed_window(self, after: int, scan: int) -> int:
        """The last log position of the next ``scan`` after ``after`` (``after`` when
        there are none): how far one feed read looks."""
        ...

    def feed_entries(
        self, inbox_id: int, after: int, until: int, limit: int, head: int
    ) -> list[FeedEntry]:
        """The inbox's sealed revisions at positions in (``after``, ``until``], at most
        ``limit``, each content read cut to ``head`` bytes (its whole length beside)."""
        ...

    def log_position(self) -> int:
        """The log's last position, or 0."""
        ...

    def feed_count(self, inbox_id: int, after: int, scan: int) -> int:
        """The inbox's sealed revisions after ``after``, counted over at most ``scan``
        positions."""
        ...

    def put_consumer(self, name: str, inbox_id: int, position: int, now: float) -> bool:
        """Make a consumer at ``position`` unless one of that name exists (False)."""
        ...

    def get_consumer(self, name: str) -> Consumer | None:
        """A consumer, held against another move until this transaction ends."""
        ...

    def consumers(self) -> list[Consumer]: ...

    def move_consumer(self, name: str, position: int, handed_out: int, now: float) -> None: ...

    def drop_consumer(self, name: str) -> bool: ...


class StepTx(Clock, Protocol):
    """All an apply step, built-in or a user's, gets of the deciding transaction: its own
    statements (:class:`~oncebox.store.sqlfile.Query`, read from its package) in this
    backend's ``dialect`` (``sqlite`` or ``postgres``), and raw SQL."""

    dialect: str

    def run(self, query: Query, params: Params = ()) -> int:
        """Run a statement; how many rows it changed."""
        ...

    def one(self, query: Query, params: Params = ()) -> Any:
        """The first row of a statement, or None."""
        ...

    def all(self, query: Query, params: Params = ()) -> list[Any]: ...

    def rows(self, query: Query, params: Params, cls: type[R]) -> list[R]:
        """Every row of a statement, each built as ``cls`` by column name."""
        ...

    def many(self, query: Query, rows: Sequence[Sequence[Any]]) -> int:
        """Run a statement once per row of parameters (on PostgreSQL, once over columns
        when it is marked ``-- columnar``); how many rows it changed in all."""
        ...

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run SQL of your own (in this backend's dialect); its rows."""
        ...


from oncebox.store.access_port import Access as Access  # noqa: E402  (its own module)
from oncebox.store.log_port import Chain as Chain  # noqa: E402  (its own module)
from oncebox.store.log_port import Sealing as Sealing  # noqa: E402
