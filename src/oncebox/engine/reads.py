"""The read side of the library's front door: every view of an inbox and of the log.

Each read is one snapshot (``store.reading()``) that never blocks a writer, and gives the
domain types (:mod:`oncebox.domain`), the same the store builds. A listing
(quarantine, dead letters, work keys) reads through ``store.scanning()``, on connections
no writer waits for, a search within a time budget; given a preview (``LISTED``) it reads
each row cut, so that no large value is read whole to list it.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, overload

from oncebox.domain import (
    DeadLetter,
    DeadLetterFilter,
    Eviction,
    Fenced,
    LeaseState,
    LogEntry,
    Preview,
    Quarantined,
    QuarantineStatus,
    Record,
    Revision,
    WorkItem,
)
from oncebox.engine import attention, audit, journal, token_listing, tokens
from oncebox.engine import verify as verification
from oncebox.engine.checkpoint import Checkpoint
from oncebox.engine.checks import check_reason, check_status, unknown, whole_number
from oncebox.engine.inboxes import format_duration
from oncebox.engine.ingest import ActiveInbox
from oncebox.engine.steps import generation as work
from oncebox.engine.steps import triage
from oncebox.engine.views import listed, read_cut, shown, to_read
from oncebox.errors import InvalidOperation, InvalidQuery, ReadTimedOut
from oncebox.store.base import Store

SEARCH_BYTES = 256  # the longest search term, in bytes (UTF-8)
SEARCH_SECONDS = 10.0  # how long one search may read


def search_term(search: bytes | str | None) -> bytes | None:
    """The bytes a dead-letter search looks for (None: no search); a longer term than
    :data:`SEARCH_BYTES` is refused, since each byte more is work over every head."""
    needle = search.encode("utf-8") if isinstance(search, str) else search
    if needle and len(needle) > SEARCH_BYTES:
        raise InvalidOperation(
            f"a search term is at most {SEARCH_BYTES} bytes (UTF-8); this one is {len(needle)}"
        )
    return needle or None


_ALL = 2**62  # no limit


class Reads(ABC):
    """What :class:`oncebox.Oncebox` shows; it gives the store and its inboxes."""

    store: Store

    @abstractmethod
    def inbox(self, name: str) -> ActiveInbox: ...

    @abstractmethod
    def _by_id(self, inbox_id: int) -> ActiveInbox: ...

    def leases(self, inbox: str) -> list[LeaseState]:
        with self.store.reading() as tx:
            return tx.list_leases(Fenced.SCOPE, self.inbox(inbox).row.id)

    def verify(self, against: Checkpoint | None = None) -> verification.Verification:
        return verification.verify(self.store, against)

    def checkpoint(self, private_key_pem: bytes | None = None) -> Checkpoint:
        return audit.checkpoint(self.store, private_key_pem)

    def prove(self, record_id: int) -> dict[str, Any]:
        """An inclusion proof for a record's log entry in the current tree."""
        return audit.prove_record(self.store, record_id)

    def prove_consistency(self, old_size: int, new_size: int | None = None) -> dict[str, Any]:
        return audit.prove_consistency(self.store, old_size, new_size)

    def segment(
        self,
        inbox: str,
        start: int,
        end: int,
        *,
        tree_size: int | None = None,
        whole: bool = False,
    ) -> dict[str, Any]:
        """The feed segment of log entries ``start`` to ``end`` (positions, both
        included, at most :data:`~oncebox.engine.segment.MAX_ENTRIES`) for ``inbox``,
        proven against the tree of ``tree_size`` entries (default: now); ``whole`` gives
        the other entries whole too, not as leaf hashes. Check it offline with
        :func:`~oncebox.engine.segment_check.verify_segment` (``oncebox verify-feed``)."""
        name = self.inbox(inbox).name
        return audit.segment(self.store, name, start, end, tree_size, whole)

    def log_entries(self, start: int = 1, limit: int = 1000) -> list[LogEntry]:
        with self.store.reading() as tx:
            return tx.log_entries(start, start + limit)

    def log_page(
        self,
        wanted: journal.LogFilter,
        limit: int = 50,
        *,
        before: int | None = None,
        after: int | None = None,
    ) -> journal.LogPage:
        """A page of log entries, newest first, matching ``wanted``: below seq ``before``
        (default: the newest), or just above seq ``after``; each page reads at most
        :data:`~oncebox.engine.journal.SCAN` entries (:mod:`oncebox.engine.journal`)."""
        with self.store.reading() as tx:
            return journal.page(tx, wanted, limit, before=before, after=after)

    def quarantined(
        self,
        inbox: str | None = None,
        status: str | None = QuarantineStatus.OPEN,
        limit: int = 1000,
        *,
        after: int = 0,
        preview: Preview | None = None,
    ) -> list[Quarantined]:
        """Quarantine rows in id order after id ``after``; with a ``preview`` (a
        listing's, :data:`~oncebox.engine.views.LISTED`) each value is read and shown
        cut (:func:`~oncebox.engine.views.shown`), so that no large row is read whole."""
        known = [s.value for s in QuarantineStatus]
        if status is not None and status not in known:
            raise unknown("status", status, known)
        inbox_id = self.inbox(inbox).row.id if inbox else None
        with self.store.scanning() as tx:
            rows = tx.list_quarantine(inbox_id, status, limit, after, to_read(preview))
        return listed(rows, preview)

    def originals(self, rows: Sequence[Quarantined], preview: Preview) -> dict[int, Record]:
        """The records these quarantine rows conflict with, by quarantine row id, shown
        cut to ``preview`` (:meth:`original` gives one whole)."""
        with self.store.scanning() as tx:
            found = tx.originals([row.id for row in rows], read_cut(preview))
        return {qid: shown(row, preview) for qid, row in found.items()}

    def dead_letters(
        self,
        inbox: str | None = None,
        limit: int = 1000,
        *,
        reason: str | None = None,
        since: float | None = None,
        until: float | None = None,
        search: bytes | str | None = None,
        after: int = 0,
        preview: Preview | None = None,
        status: str | None = None,
        newest: bool = False,
    ) -> list[DeadLetter]:
        """Dead letters in id order (``newest``: newest first, the page below id
        ``after``), filtered by inbox, reason, time received (server
        clock, ``since <= t < until``) and bytes their kept head contains, the page
        after id ``after``, and ``status`` (open, replayed, archived); with a ``preview``,
        shown cut as :meth:`quarantined` says. An unknown status or reason is an
        :class:`~oncebox.errors.UnknownValue` naming the known ones.

        A search (at most :data:`SEARCH_BYTES`) looks through every kept head in its
        range, so it has :data:`SEARCH_SECONDS` to finish (:class:`ReadTimedOut`)."""
        inbox_id = self.inbox(inbox).row.id if inbox else None
        needle = search_term(search)
        filters = DeadLetterFilter(
            reason, since, until, needle, after, check_status(status), newest
        )
        budget = SEARCH_SECONDS if needle else None
        try:
            with self.store.scanning(budget) as tx:
                check_reason(tx, [inbox_id], reason)
                rows = tx.list_dead_letters(inbox_id, limit, filters, to_read(preview))
        except ReadTimedOut:
            raise ReadTimedOut(
                f"the search ran past its {SEARCH_SECONDS:g} s budget: narrow it (an "
                "inbox, a reason, since and until), or retry when the store is less busy"
            ) from None
        return listed(rows, preview)

    def get_dead_letter(self, letter_id: int) -> tuple[str, DeadLetter] | None:
        """A dead letter with its inbox's name (to check who may see or replay it)."""
        with self.store.reading() as tx:
            row = tx.get_dead_letter(letter_id)
        return (self._by_id(row.inbox_id).name, row) if row else None

    @overload
    def record(self, record_id: int, /) -> Record | None: ...

    @overload
    def record(self, inbox: str, identity: str) -> Record | None: ...

    def record(self, inbox: str | int, identity: str | None = None) -> Record | None:
        """A record whole: by its id (``box.record(7)``), or by its inbox and identity
        (``box.record("ussd", "rec1")``); None if there is none."""
        if isinstance(inbox, int) and not isinstance(inbox, bool) and identity is None:
            with self.store.reading() as tx:
                return tx.get_record(inbox)
        if not isinstance(inbox, str) or not isinstance(identity, str):
            raise TypeError("record(record_id) or record(inbox, identity)")
        ident = hashlib.sha256(identity.encode("utf-8")).digest()
        return self._record_by_digest(self.inbox(inbox).row.id, ident)

    def original(self, row: Quarantined) -> Record | None:
        """The record a quarantined newcomer conflicts with, to show them side by side."""
        return self._record_by_digest(row.inbox_id, row.ident)

    def _record_by_digest(self, inbox_id: int, ident: bytes) -> Record | None:
        with self.store.reading() as tx:
            stored = tx.find_records(inbox_id, [ident]).get(ident)
            row = tx.get_record(stored[0]) if stored is not None else None  # by its id
        return row if row is not None else None

    def revisions(self, record_id: int) -> list[Revision]:
        with self.store.reading() as tx:
            return tx.revisions(record_id)

    def evictions(self, inbox: str | None = None, limit: int = 1000) -> list[Eviction]:
        inbox_id = self.inbox(inbox).row.id if inbox else None
        with self.store.reading() as tx:
            return tx.evictions(inbox_id, limit)

    # -- views ---------------------------------------------------------------------------
    def stats(self, inbox: str) -> dict[str, Any]:
        active = self.inbox(inbox)
        with self.store.reading() as tx:
            counts = tx.verdict_counts(active.row.id)
            figures = tx.inbox_figures(active.row.id)
            overrides = tx.retention_overrides(active.row.id)
        verdicts: dict[str, int] = {}
        reasons: dict[str, int] = {}
        for (verdict, reason), n in sorted(counts.items()):
            verdicts[verdict] = verdicts.get(verdict, 0) + n
            if reason:
                reasons[f"{verdict}:{reason}"] = n
        return {
            "inbox": active.name,
            "codec": active.codec.name,
            "apply": active.row.apply,
            "retention": format_duration(active.row.retention_seconds),
            "tombstone_horizon": format_duration(active.row.tombstone_seconds),
            "retention_overrides": [
                {"retention": format_duration(s), "reason": r, "at": a} for s, r, a in overrides
            ],
            "verdicts": verdicts,
            "reasons": reasons,
            **figures,
        }

    def verdict_history(self, inbox: str, hours: int = 24) -> list[tuple[int, dict[str, int]]]:
        """Counts by verdict for each of the last ``hours`` hours on the server clock,
        oldest first, as (hour start in unix seconds, {verdict: count}); quiet hours are
        there with no counts."""
        active = self.inbox(inbox)
        with self.store.reading() as tx:
            current = int(tx.now() // 3600)
            rows = tx.verdict_hours(active.row.id, current - hours + 1)
        first = current - hours + 1
        by_hour: dict[int, dict[str, int]] = {h: {} for h in range(first, current + 1)}
        for hour, verdict, n in rows:
            if hour in by_hour:
                by_hour[hour][verdict] = by_hour[hour].get(verdict, 0) + n
        return [(hour * 3600, counts) for hour, counts in by_hour.items()]

    def attention(self, inbox: str) -> attention.Attention:
        """What the inbox needs from an operator now: open conflicts, open dead letters,
        and whether it went silent (:mod:`oncebox.engine.attention` says when)."""
        active = self.inbox(inbox)
        with self.store.reading() as tx:
            return attention.of(tx, active.name, active.row.id)

    def triage_sites(self, inbox: str) -> list[tuple[str, float | None]]:
        """Each site of a triage inbox with its last delivery (server-clock seconds)."""
        active = self.inbox(inbox)
        if active.row.apply != "triage":
            raise InvalidOperation(f"inbox {inbox} keeps no triage ledger")
        with self.store.reading() as tx:
            return triage.sites(tx, active.row.id)

    def triage(self, inbox: str) -> dict[str, Any]:
        """The headcount ledger: totals per site and need, and the priority ranking; and
        beside each total what counting every arrival would have given (a retransmitted
        session counted twice is 46, not 23), so that what dedup suppressed is in plain
        sight (docs/concepts.md#triage-ledger)."""
        active = self.inbox(inbox)
        if active.row.apply != "triage":
            raise InvalidOperation(
                f"inbox {inbox} keeps no triage ledger (its apply step is {active.row.apply})"
            )
        with self.store.reading() as tx:
            return triage.view(tx, active.row.id)

    def work_keys(
        self,
        inbox: str,
        *,
        limit: int | None = None,
        after: tuple[str, str, str] | None = None,
        dirty: bool = False,
        preview: Preview | None = None,
    ) -> list[WorkItem]:
        """Work keys in key order after ``after`` (every one: ``limit`` None), only the
        dirty ones if asked; with a ``preview``, shown as :meth:`quarantined` says."""
        inbox_id = self.inbox(inbox).row.id
        if limit is not None:
            whole_number(limit, "a page's limit")  # SQLite's LIMIT -1 is no limit at all
        if after is not None and not work.storable(work.checked(after)):
            raise InvalidQuery("a work key holds no NUL character or lone surrogate")
        with self.store.scanning() as tx:
            rows = work.page(
                tx, inbox_id, _ALL if limit is None else limit, after, dirty=dirty,
                preview=to_read(preview),
            )  # fmt: skip
        return listed(rows, preview)

    def work_key(self, inbox: str, key: tuple[str, str, str]) -> WorkItem | None:
        """One work key, its document whole."""
        inbox_id = self.inbox(inbox).row.id
        key = work.checked(key)
        with self.store.reading() as tx:
            return work.get(tx, inbox_id, key)

    def list_tokens(
        self,
        after: int = 0,
        limit: int = 1000,
        *,
        newest: bool = False,
        preview: Preview | None = None,
    ) -> list[tokens.Token]:
        """Up to ``limit`` tokens in id order after id ``after`` (``newest``: newest
        first, the page below id ``after``); with a ``preview`` (``LISTED``), each
        inbox list shown to the names that fit in ``preview.text`` characters, ``cut``
        saying so. Never the secrets nor the HMAC keys in what ``to_dict`` gives."""
        with self.store.scanning() as tx:
            return token_listing.listing(tx, after, limit, newest, preview)

    def token(self, name_or_id: str) -> tokens.Token | None:
        """One token with its whole inbox list (the live one of that name, else the
        newest that had it, else the one with that id), or None; never its secret."""
        with self.store.reading() as tx:
            return token_listing.one(tx, name_or_id)

    def seal_lag(self) -> int:
        """Log events queued by committed writes and not sealed yet."""
        with self.store.reading() as tx:
            return tx.log_pending_count()

    def work_figures(self, inbox: str) -> dict[str, int]:
        active = self.inbox(inbox)
        with self.store.reading() as tx:
            return work.figures(tx, active.row.id, tx.now())

    def get_quarantine(self, quarantine_id: int) -> tuple[str, Quarantined] | None:
        """A quarantine row with its inbox's name."""
        with self.store.reading() as tx:
            row = tx.get_quarantine(quarantine_id)
        return (self._by_id(row.inbox_id).name, row) if row else None

    def record_inbox(self, record_id: int) -> str | None:
        """The name of the inbox holding a record, if the record is still there."""
        with self.store.reading() as tx:
            row = tx.get_record(record_id)
        return self._by_id(row.inbox_id).name if row else None
