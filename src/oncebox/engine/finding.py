"""Records you can find: an inbox's records listed and filtered, one record with all that
happened to it, and everything kept under one delivery key.

Each read is one snapshot on the listing connections (``store.scanning()``), on indexes
only (tests/test_query_plans.py): a page of records by when they were first seen
(``records_age``), a record by its id, a key where it is the identity by the identity's
own index and elsewhere by the key's (migration 19), the log entries about a quarantine
row or a record by the id their state names. A listing reads each row cut to a preview,
as every listing does (:mod:`oncebox.engine.views`). What happened is told as a timeline
(:func:`timeline`), pure: the same facts give the same story on every surface.
"""

from __future__ import annotations

import hashlib
import json
import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from oncebox.domain import (
    DeadLetter,
    Happened,
    LogEntry,
    Preview,
    Quarantined,
    Record,
    RecordWindow,
    Revision,
    TimelineEntry,
)
from oncebox.engine.ingest import ActiveInbox
from oncebox.engine.reads import SEARCH_SECONDS, search_term
from oncebox.engine.views import LISTED, listed, read_cut, to_read
from oncebox.errors import InvalidQuery, ReadTimedOut
from oncebox.store.base import Listing, Store
from oncebox.store.finding import Finding as FindingPort

KEYED_MAX = 10_000  # records one key or identity filter looks at (a key is one, as a rule)
SHOWN = 100  # of each kind (records, newcomers, dead letters) a record or a lookup shows
LOG_SHOWN = 500  # log entries a record or a lookup shows
_LAST_ID = 2**63 - 1


class FindingTx(Listing, FindingPort, Protocol):
    """What finding records reads through: the read side's ports."""


class Order(StrEnum):
    """The order a listing gives records in, by when each was first seen."""

    NEWEST = "newest"
    OLDEST = "oldest"


ORDERS = tuple(order.value for order in Order)


@dataclass(frozen=True)
class RecordView:
    """One record and all that happened to it: its superseded revisions, the newcomers
    quarantined under its identity (cut to a listing's preview; ``more_quarantine``: more
    than these), the log entries about it, in order, and the timeline they make."""

    inbox: str
    record: Record
    revisions: list[Revision]
    quarantine: list[Quarantined]
    more_quarantine: bool
    log: list[LogEntry]
    timeline: list[TimelineEntry]


@dataclass(frozen=True)
class Lookup:
    """Everything kept under one delivery key of an inbox: the records it made (and the
    newcomers that conflicted with them), the newcomers it came with, the dead letters,
    each cut to a listing's preview, and in time order what happened (``more``: a kind
    had more than :data:`SHOWN`, which are left out)."""

    inbox: str
    key: str
    records: list[Record]
    quarantine: list[Quarantined]
    dead_letters: list[DeadLetter]
    timeline: list[TimelineEntry]
    more: bool

    @property
    def arrived(self) -> bool:
        """Whether anything under the key arrived at all (valid or not)."""
        return bool(self.records or self.quarantine or self.dead_letters)


def digest_of(text: str, what: str) -> bytes:
    """The SHA-256 of a key or an identity, as the store keeps identities; one no store
    can hold (a NUL, a lone surrogate) is refused, since no delivery can have it."""
    if "\x00" in text:
        raise InvalidQuery(f"a {what} holds no NUL character: no delivery has this one")
    try:
        return hashlib.sha256(text.encode("utf-8")).digest()
    except UnicodeEncodeError:
        raise InvalidQuery(f"a {what} is text: this one holds a lone surrogate") from None


def window(
    since: float | None, until: float | None, start: tuple[float, int] | None, newest: bool
) -> RecordWindow:
    """The records first seen ``since <= t < until`` (the dead letters' rule), past
    ``start`` (the first seen time and id of the row the page before ended on)."""
    low = -math.inf if since is None else since
    high = math.inf if until is None else math.nextafter(until, -math.inf)
    if start is None:
        return RecordWindow(low, high, math.inf if newest else -math.inf,
                            _LAST_ID if newest else 0, newest)  # fmt: skip
    at, after = start
    if newest:
        return RecordWindow(low, min(high, at), at, after, True)
    return RecordWindow(max(low, at), high, at, after, False)


def _inside(w: RecordWindow, first_seen: float, record_id: int) -> bool:
    if not w.low <= first_seen <= w.high:
        return False
    if w.newest:
        return first_seen < w.at or record_id < w.id
    return first_seen > w.at or record_id > w.id


class Finding(ABC):
    """What :class:`oncebox.Oncebox` finds; it gives the store and its inboxes."""

    store: Store

    @abstractmethod
    def inbox(self, name: str) -> ActiveInbox: ...

    @abstractmethod
    def _by_id(self, inbox_id: int) -> ActiveInbox: ...

    def records(
        self,
        inbox: str,
        *,
        key: str | None = None,
        identity: str | None = None,
        since: float | None = None,
        until: float | None = None,
        search: bytes | str | None = None,
        after: int = 0,
        order: str = Order.NEWEST,
        limit: int = 100,
        preview: Preview | None = None,
    ) -> list[Record]:
        """A page of the inbox's records by when each was first seen (server clock,
        ``since <= t < until``), newest first or ``order="oldest"``; only those that
        came with the delivery ``key``, or of that ``identity``, or whose content holds
        ``search`` (at most 256 bytes; it has :data:`SEARCH_SECONDS`). The next page:
        ``after`` the last id of this one. With a ``preview`` (a listing's:
        :data:`~oncebox.engine.views.LISTED`) each value is read cut."""
        inbox_id = self.inbox(inbox).row.id
        try:
            newest = Order(order) is Order.NEWEST
        except ValueError:
            raise InvalidQuery(f"order is one of {', '.join(ORDERS)}") from None
        if limit < 1:
            raise InvalidQuery("a page holds at least one record (limit >= 1)")
        needle = search_term(search)
        ident = digest_of(identity, "identity") if identity is not None else None
        keyed = digest_of(key, "key") if key is not None else None
        try:
            with self.store.scanning(SEARCH_SECONDS if needle else None) as tx:
                start = self._start(tx, inbox, inbox_id, after)
                w = window(since, until, start, newest)
                if key is None and ident is None:
                    ids = tx.record_page(inbox_id, w, limit, needle)
                    rows = tx.records_listed(ids, to_read(preview), None)
                else:
                    ids = _keyed_ids(tx, inbox_id, key, keyed, ident, w)
                    rows = tx.records_listed(ids if needle else ids[:limit], to_read(preview),
                                             needle)  # fmt: skip
        except ReadTimedOut:
            raise ReadTimedOut(
                f"the search ran past its {SEARCH_SECONDS:g} s budget: narrow it (since and "
                "until, a key), or retry when the store is less busy"
            ) from None
        found = {row.id: row for row in rows}
        return listed([found[i] for i in ids if i in found][:limit], preview)

    @staticmethod
    def _start(tx: FindingTx, inbox: str, inbox_id: int, after: int) -> tuple[float, int] | None:
        """Where the page after record ``after`` starts (None: from the first)."""
        if not after:
            return None
        found = tx.record_start(after)
        if found is None or found[0] != inbox_id:
            raise InvalidQuery(
                f"after: inbox {inbox} holds no record {after} (any more): page on from "
                "the last id a page gave, or narrow by since and until instead"
            )
        return found[1], after

    def record_view(self, record_id: int) -> RecordView | None:
        """A record with all that happened to it (None: no such record)."""
        with self.store.scanning() as tx:
            record = tx.get_record(record_id)
            if record is None:
                return None
            revisions = tx.revisions(record_id)
            found = tx.quarantine_of(record.inbox_id, record.ident, SHOWN + 1, read_cut(LISTED))
            newcomers = [row for row in found if row.record_id == record.id]
            entries = tx.log_about([q.id for q in newcomers[:SHOWN]], [record.id], LOG_SHOWN)
            sealed = tx.log_entries(record.log_seq, record.log_seq + 1) if record.log_seq else []
        seal = [e._replace(inbox_id=record.inbox_id, record_id=record.id, revision=1)
                for e in sealed]  # fmt: skip
        log = sorted({e.seq: e for e in [*seal, *entries]}.values())
        shown = listed(newcomers[:SHOWN], LISTED)
        return RecordView(
            self._by_id(record.inbox_id).name,
            record,
            revisions,
            shown,
            len(found) > SHOWN,
            log,
            timeline([record], shown, [], log),
        )

    def lookup(self, inbox: str, key: str) -> Lookup:
        """Everything kept under one delivery key of an inbox, in time order: did it
        arrive, and what was decided. A record kept before keys were (migration 19) is
        found when its identity is the key (keyed and ussd-h1 inboxes)."""
        active = self.inbox(inbox)
        name, inbox_id = active.name, active.row.id
        ident = digest_of(key, "key")
        cut = read_cut(LISTED)
        with self.store.scanning() as tx:
            seen = tx.records_keyed(inbox_id, key, ident, SHOWN + 1)
            records = tx.records_listed([i for i, _, _ in seen[:SHOWN]], cut, None)
            keyed = tx.quarantine_keyed(inbox_id, key, ident, SHOWN + 1, cut)
            newcomers = {q.id: q for q in keyed}
            for record in records:
                for q in tx.quarantine_of(inbox_id, record.ident, SHOWN + 1, cut):
                    if q.record_id == record.id:
                        newcomers.setdefault(q.id, q)
            letters = tx.dead_letters_keyed(inbox_id, key, SHOWN + 1, cut)
            quarantine = sorted(newcomers.values(), key=lambda q: q.id)[:SHOWN]
            log = tx.log_about([q.id for q in quarantine], [r.id for r in records], LOG_SHOWN)
        records.sort(key=lambda r: r.id)
        more = len(seen) > SHOWN or len(newcomers) > SHOWN or len(letters) > SHOWN
        kept = (listed(records, LISTED), listed(quarantine, LISTED),
                listed(letters[:SHOWN], LISTED))  # fmt: skip
        return Lookup(name, key, *kept, timeline(*kept, log), more)


def _keyed_ids(
    tx: FindingTx,
    inbox_id: int,
    key: str | None,
    keyed: bytes | None,
    ident: bytes | None,
    w: RecordWindow,
) -> list[int]:
    """The ids a key or identity filter gives, in the window's order."""
    if key is not None and keyed is not None:
        seen = tx.records_keyed(inbox_id, key, keyed, KEYED_MAX)
        if ident is not None:
            seen = [row for row in seen if row[1] == ident]
    else:
        assert ident is not None
        seen = tx.records_identified(inbox_id, ident)
    inside = [(t, i) for i, _, t in seen if _inside(w, t, i)]
    inside.sort(reverse=w.newest)
    return [i for _, i in inside]


# -- the timeline -------------------------------------------------------------------------
_ORDER = {what: n for n, what in enumerate(Happened)}


def _about(entries: Iterable[LogEntry]) -> dict[tuple[str, int], LogEntry]:
    """The log entries by (step, the quarantine row or record their state names)."""
    found: dict[tuple[str, int], LogEntry] = {}
    for entry in entries:
        try:
            state: Any = json.loads(entry.state)
        except ValueError:
            continue
        if not isinstance(state, dict):
            continue
        named = state.get("record" if entry.step in ("evict", "replay") else "quarantine")
        if isinstance(named, int):
            found.setdefault((entry.step, named), entry)
    return found


def _state(entry: LogEntry | None) -> dict[str, Any]:
    try:
        state = json.loads(entry.state) if entry is not None else {}
    except ValueError:
        return {}
    return state if isinstance(state, dict) else {}


def _position(entry: LogEntry | None) -> int | None:
    return entry.seq if entry is not None else None


def timeline(
    records: Sequence[Record],
    quarantine: Sequence[Quarantined],
    letters: Sequence[DeadLetter],
    log: Sequence[LogEntry],
) -> list[TimelineEntry]:
    """What happened to these records, newcomers and dead letters, in time order, each
    step with the log entry that records it where there is one."""
    about = _about(log)
    told: list[TimelineEntry] = []
    for r in records:
        replay = about.get(("replay", r.id))
        came = _state(replay).get("dead_letter")
        told.append(
            TimelineEntry(
                r.first_seen, Happened.ACCEPTED, r.id, 1, log_position=r.log_seq,
                by=_state(replay).get("actor"),
                detail=f"replayed from dead letter {came}" if came is not None else None,
            )
        )  # fmt: skip
        if r.seen_count > 1:
            told.append(
                TimelineEntry(r.last_seen, Happened.DUPLICATES, r.id, count=r.seen_count - 1,
                              detail="the same content again: counted, never applied (the "
                              "time is when it was last seen)")
            )  # fmt: skip
        if r.late_replays:
            told.append(
                TimelineEntry(r.last_seen, Happened.LATE_REPLAYS, r.id, count=r.late_replays,
                              detail="resent after retention evicted it, never applied again")
            )  # fmt: skip
        if r.evicted_at is not None:
            evict = about.get(("evict", r.id))
            told.append(
                TimelineEntry(r.evicted_at, Happened.EVICTED, r.id, log_position=_position(evict),
                              detail="retention dropped its content; a tombstone remembers it")
            )  # fmt: skip
    for q in quarantine:
        told.append(
            TimelineEntry(
                q.first_seen, Happened.CONFLICT, q.record_id, quarantine_id=q.id,
                log_position=_position(about.get(("quarantine", q.id))), count=q.seen_count,
                detail=f"{q.reason}: kept in quarantine beside the record",
            )
        )  # fmt: skip
        if q.resolved_at is not None:
            resolve = about.get(("resolve", q.id))
            revision = resolve.revision if resolve is not None else None
            said = "accepted as the next revision" if revision else str(q.status)
            told.append(
                TimelineEntry(
                    q.resolved_at, Happened.RESOLVED, q.record_id, revision, q.id,
                    log_position=_position(resolve), by=q.resolved_by,
                    detail=f"{said}: {q.note}" if q.note else said,
                )
            )  # fmt: skip
    for d in letters:
        told.append(
            TimelineEntry(d.received_at, Happened.REJECTED, dead_letter_id=d.id,
                          detail=f"{d.reason}: {d.detail}")
        )  # fmt: skip
        if d.replayed_at is not None:
            told.append(
                TimelineEntry(d.replayed_at, Happened.REPLAYED, dead_letter_id=d.id,
                              by=d.replayed_by, detail=f"decided {d.replay_verdict} again")
            )  # fmt: skip
    told.sort(key=lambda t: (t.at if t.at is not None else -math.inf, _ORDER[t.what]))
    return told
