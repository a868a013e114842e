"""An operator's actions on dead letters and conflicts: one at a time (replay, with a
correction or without; archive; resolve in :mod:`oncebox.engine.adjudicate`), and many at
once by a filter, each previewed before it runs.

A bulk action acts on at most :data:`BULK_MOST` items per call, in id order; its answer
says where the next call starts (``next_after``), so one request never holds the store
for long whatever the filter matches. Every item goes through the same engine call as
one at a time (a replay is decided by the one decision path, a resolution by
:func:`~oncebox.engine.adjudicate.resolve`), and each call is one ``bulk`` log entry with
the filter, the count, the ids and the actor.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from typing import Any, Protocol, TypeVar

from oncebox.domain import (
    DeadLetter,
    DeadLetterFilter,
    Decision,
    LetterStatus,
    Quarantined,
    Resolution,
)
from oncebox.domain.bulk import BulkItem, BulkRun
from oncebox.engine import log
from oncebox.engine.adjudicate import check_note
from oncebox.engine.checks import check_reason, check_status, unknown
from oncebox.engine.decide import DecisionTx, decide_batch
from oncebox.engine.decided import Decided, Repeated
from oncebox.engine.ingest import ActiveInbox, alert, prepare
from oncebox.engine.replay import Replay, corrected
from oncebox.engine.views import LISTED, listed, to_read
from oncebox.errors import ApplyError, InvalidOperation, NotFound
from oncebox.store.base import Store, Tx
from oncebox.store.letters import Archiving

T = TypeVar("T")
BULK_MOST = 500  # items one bulk call acts on, at most
COUNT_MOST = 100_000  # a preview counts this far ("at least" beyond)
PREVIEW_FIRST = 20  # items a preview lists


class Replaying(DecisionTx, Archiving, Protocol):
    """What replaying a dead letter takes: deciding it again, and the dead letter."""


class Operators(ABC):
    """Replays, archives and bulk actions; :class:`oncebox.Oncebox` gives the store, its
    inboxes and its write path."""

    store: Store

    @abstractmethod
    def inbox(self, name: str) -> ActiveInbox: ...

    @abstractmethod
    def write(self, work: Callable[[Tx], T]) -> T: ...

    @abstractmethod
    def write_sealed(self, work: Callable[[Tx, bool], T]) -> tuple[T, dict[int, int] | None]: ...

    @abstractmethod
    def _by_id(self, inbox_id: int) -> ActiveInbox: ...

    @abstractmethod
    def resolve(
        self, quarantine_id: int, action: str, note: str, actor: str | None = None
    ) -> Quarantined: ...

    # -- one at a time -------------------------------------------------------------------
    def replay(
        self,
        letter_id: int,
        actor: str | None = None,
        lease_token: int | None = None,
        note: str | None = None,
        *,
        body: bytes | None = None,
        key: str | None = None,
    ) -> Decision:
        """Deliver a dead letter again, after a sender or configuration fix: decided now,
        like any delivery. Decided, it closes as ``replayed`` (and takes no correction
        after); refused again, the same dead letter counts one attempt more (no new dead
        letter, no refusal counted again). ``body`` (and ``key``) correct what it kept:
        the operator's fix, with a note saying why; the log keeps the old and new
        SHA-256. Without a correction only a dead letter kept whole can be replayed;
        ``lease_token`` is for a fenced inbox's (dead letters keep no token)."""
        check_note(note, required=body is not None or key is not None)
        how = Replay(actor, note, "replay")

        def decide(tx: Replaying, together: bool) -> Decided | Repeated:
            letter = tx.get_dead_letter(letter_id)
            if letter is None:
                raise NotFound(f"no dead letter {letter_id}")
            if letter.replayed_at is not None and (body is not None or key is not None):
                # Its delivery is decided (archived since or not): again as it was kept, it
                # is a resend; corrected otherwise, it would be a second record of one
                # arrival (two operators correcting it at once, say).
                raise InvalidOperation(
                    f"dead letter {letter_id} was replayed already ({letter.replay_verdict}, "
                    f"by {letter.replayed_by or 'an unnamed actor'}): its delivery is "
                    f"decided, so it takes no correction"
                )
            active = self._by_id(letter.inbox_id)
            delivery = corrected(letter, body, key)
            delivery = replace(delivery, lease_token=lease_token, dead_letter=letter_id)
            prepared = prepare(active.codec, delivery, active.check)
            return decide_batch(tx, active, [prepared], seal=together, again=how)

        # Sealed as an ingest is (in the deciding transaction where the store allows,
        # right after its commit otherwise), so the answer has its record's position.
        decided, positions = self.write_sealed(decide)
        decisions = decided.decisions(positions)
        alert(decisions)
        return decisions[0]

    def archive(self, letter_id: int, actor: str | None, note: str) -> DeadLetter:
        """Put a dead letter aside, with a note saying why: it leaves the open ones, is
        kept (and can still be replayed), and the log names who and why."""
        check_note(note, required=True)

        def archive(tx: Archiving) -> DeadLetter:
            letter = _archive(tx, letter_id, actor, note, tx.now())
            log.event(
                tx,
                "archive",
                {
                    "inbox": self._by_id(letter.inbox_id).name,
                    "dead_letter": letter_id,
                    "actor": actor,
                    "note": note,
                },
            )
            return letter

        return self.write(archive)

    def dead_letter_counts(self, inbox: str) -> dict[tuple[str, str], int]:
        """How many dead letters ``inbox`` keeps, by (status, reason): the totals an
        operator (and ``/metrics``) sees."""
        inbox_id = self.inbox(inbox).row.id
        with self.store.reading() as tx:
            return tx.dead_letter_counts(inbox_id)

    # -- many at once --------------------------------------------------------------------
    def letter_filter(
        self,
        inboxes: Sequence[str],
        *,
        reason: str | None = None,
        status: str | None = None,
        since: float | None = None,
        until: float | None = None,
        search: bytes | None = None,
        after: int = 0,
    ) -> DeadLetterFilter:
        """A dead-letter filter checked: a known status, a known reason."""
        check_status(status)
        ids = [self.inbox(name).row.id for name in inboxes]
        with self.store.reading() as tx:
            check_reason(tx, ids, reason)
        return DeadLetterFilter(reason, since, until, search, after, status)

    def letters_matching(
        self, inboxes: Sequence[str], filters: DeadLetterFilter, first: int = PREVIEW_FIRST
    ) -> tuple[int, list[tuple[str, DeadLetter]]]:
        """A bulk action's preview: how many dead letters ``filters`` selects (counted
        up to :data:`COUNT_MOST`) and the first ``first`` of them, shown cut as a
        listing shows them (:data:`~oncebox.engine.views.LISTED`)."""
        count, rows = 0, []
        with self.store.scanning() as tx:
            for name in inboxes:
                inbox_id = self.inbox(name).row.id
                count += tx.count_dead_letters(inbox_id, filters, COUNT_MOST)
                found = tx.list_dead_letters(inbox_id, first, filters, to_read(LISTED))
                rows += [(name, r) for r in listed(found, LISTED)]
        rows.sort(key=lambda pair: pair[1].id)
        return min(count, COUNT_MOST), rows[:first]

    def bulk_replay(
        self,
        inboxes: Sequence[str],
        filters: DeadLetterFilter,
        actor: str | None,
        note: str | None = None,
        limit: int = 100,
    ) -> BulkRun:
        """Replay the dead letters ``filters`` selects, at most ``limit`` (up to
        :data:`BULK_MOST`) from ``filters.after`` on, each as :meth:`replay` does."""
        check_note(note)
        chosen = self._choose(inboxes, filters, limit)
        items = []
        for name, letter in chosen:
            try:
                decision = self.replay(letter.id, actor, None, note)
                outcome = (
                    f"{decision.verdict}:{decision.reason}"
                    if decision.reason
                    else str(decision.verdict)
                )
                items.append(BulkItem(letter.id, name, outcome, decision.detail or None))
            except (InvalidOperation, ApplyError) as exc:
                items.append(BulkItem(letter.id, name, "failed", str(exc)))
        return self._recorded("replay", inboxes, filters, chosen, items, actor, note, limit)

    def bulk_archive(
        self,
        inboxes: Sequence[str],
        filters: DeadLetterFilter,
        actor: str | None,
        note: str,
        limit: int = 100,
    ) -> BulkRun:
        """Archive the dead letters ``filters`` selects (not archived yet), at most
        ``limit`` from ``filters.after`` on, in one transaction with its log entry."""
        check_note(note, required=True)
        chosen = self._choose(inboxes, filters, limit)

        def archive(tx: Tx) -> BulkRun:
            now = tx.now()
            items = []
            for name, letter in chosen:
                if letter.status == LetterStatus.ARCHIVED:
                    items.append(BulkItem(letter.id, name, "failed", "archived already"))
                    continue
                try:
                    _archive(tx, letter.id, actor, note, now)
                except InvalidOperation:  # by another operator since it was chosen
                    items.append(BulkItem(letter.id, name, "failed", "archived already"))
                    continue
                items.append(BulkItem(letter.id, name, "archived"))
            return self._log_bulk(
                tx, "archive", inboxes, filters, chosen, items, actor, note, limit
            )

        return self.write(archive)

    def conflicts_matching(
        self,
        inbox: str,
        prefix: str | None = None,
        since: float | None = None,
        until: float | None = None,
        after: int = 0,
        first: int = PREVIEW_FIRST,
    ) -> tuple[int, list[Quarantined]]:
        """A bulk resolution's preview: how many open conflicts of ``inbox`` match (an
        identity prefix, first seen in ``[since, until)``), and the first ``first``,
        shown cut as a listing shows them."""
        inbox_id = self.inbox(inbox).row.id
        with self.store.scanning() as tx:
            count = tx.count_quarantine_matching(inbox_id, prefix, since, until, after, COUNT_MOST)
            rows = tx.match_quarantine(
                inbox_id, prefix, since, until, after, first, to_read(LISTED)
            )
        return count, listed(rows, LISTED)

    def bulk_resolve(
        self,
        inbox: str,
        action: str,
        note: str,
        actor: str | None,
        *,
        prefix: str | None = None,
        since: float | None = None,
        until: float | None = None,
        after: int = 0,
        limit: int = 100,
    ) -> BulkRun:
        """Resolve the open conflicts of ``inbox`` that match, at most ``limit`` after id
        ``after``, each as :meth:`resolve` does (``keep`` or ``accept``, with the note)."""
        try:
            chosen_action = Resolution(action)
        except ValueError:
            raise unknown("action", action, [r.value for r in Resolution]) from None
        check_note(note, required=True)
        inbox_id = self.inbox(inbox).row.id
        with self.store.scanning() as tx:
            rows = tx.match_quarantine(inbox_id, prefix, since, until, after, _bounded(limit))
        items = []
        for row in rows:
            try:
                closed = self.resolve(row.id, chosen_action.value, note, actor)
                items.append(BulkItem(row.id, inbox, str(closed.status)))
            except (InvalidOperation, ApplyError, NotFound) as exc:
                items.append(BulkItem(row.id, inbox, "failed", str(exc)))
        selection = {"identity_prefix": prefix, "since": since, "until": until, "after": after}
        return self.write(
            lambda tx: _log(
                tx, f"resolve:{chosen_action}", [inbox], selection, rows, items, actor, note, limit
            )
        )

    def _choose(
        self, inboxes: Sequence[str], filters: DeadLetterFilter, limit: int
    ) -> list[tuple[str, DeadLetter]]:
        """The dead letters a bulk call acts on: the first ``limit`` after ``after``."""
        limit = _bounded(limit)
        chosen: list[tuple[str, DeadLetter]] = []
        with self.store.scanning() as tx:
            for name in inboxes:
                inbox_id = self.inbox(name).row.id
                chosen += [(name, r) for r in tx.list_dead_letters(inbox_id, limit, filters)]
        chosen.sort(key=lambda pair: pair[1].id)
        return chosen[:limit]

    def _recorded(
        self,
        action: str,
        inboxes: Sequence[str],
        filters: DeadLetterFilter,
        chosen: Sequence[tuple[str, DeadLetter]],
        items: list[BulkItem],
        actor: str | None,
        note: str | None,
        limit: int,
    ) -> BulkRun:
        return self.write(
            lambda tx: self._log_bulk(
                tx, action, inboxes, filters, chosen, items, actor, note, limit
            )
        )

    def _log_bulk(
        self,
        tx: Tx,
        action: str,
        inboxes: Sequence[str],
        filters: DeadLetterFilter,
        chosen: Sequence[tuple[str, DeadLetter]],
        items: list[BulkItem],
        actor: str | None,
        note: str | None,
        limit: int,
    ) -> BulkRun:
        selection = asdict(filters)
        if filters.search is not None:
            selection["search"] = filters.search.decode("utf-8", "replace")
        rows = [letter for _, letter in chosen]
        return _log(tx, action, inboxes, selection, rows, items, actor, note, limit)


def _bounded(limit: int) -> int:
    if not 1 <= limit <= BULK_MOST:
        raise InvalidOperation(f"a bulk action takes 1 to {BULK_MOST} items per call")
    return limit


def _archive(tx: Archiving, letter_id: int, actor: str | None, note: str, now: float) -> DeadLetter:
    """Archive one dead letter (one at a time or in bulk alike)."""
    letter = tx.get_dead_letter(letter_id)
    if letter is None:
        raise NotFound(f"no dead letter {letter_id}")
    if not tx.archive_dead_letter(letter_id, now, actor, note):
        raise InvalidOperation(f"dead letter {letter_id} is archived already")
    archived = tx.get_dead_letter(letter_id)
    assert archived is not None
    return archived


def _log(
    tx: Tx,
    action: str,
    inboxes: Sequence[str],
    selection: dict[str, Any],
    rows: Sequence[DeadLetter | Quarantined],
    items: list[BulkItem],
    actor: str | None,
    note: str | None,
    limit: int,
) -> BulkRun:
    """One log entry for one bulk call: the filter, the count, the ids, who and why."""
    full = len(rows) >= limit
    next_after = rows[-1].id if rows and full else None
    state = {
        "action": action,
        "inboxes": list(inboxes),
        "filter": selection,
        "count": len(items),
        "ids": [item.id for item in items],
        "failed": sum(item.outcome == "failed" for item in items),
        "next_after": next_after,
        "actor": actor,
        "note": note,
    }
    log.event(tx, "bulk", state)
    return BulkRun(action, len(items), tuple(items), next_after)
