"""The ports of an operator's day with dead letters and conflicts: a delivery again
inside the decision path, archiving, and what a bulk action selects and previews.

Kept apart from :mod:`oncebox.store.ports` so that each stays short enough to read at
once; a store's transaction (:class:`oncebox.store.base.Tx`) is these ports too.
"""

from __future__ import annotations

from typing import Protocol

from oncebox.domain import WHOLE, DeadLetter, DeadLetterFilter, Preview, Quarantined
from oncebox.store.ports import Clock, Events


class Retrying(Protocol):
    """What deciding a delivery again takes: the dead letter it came from (held until
    the transaction ends), and how that dead letter closes or counts one attempt more."""

    def get_dead_letter(self, letter_id: int) -> DeadLetter | None: ...

    def mark_replayed(self, letter_id: int, now: float, by: str | None, verdict: str) -> None:
        """Decided (accepted, duplicate, conflict): closed as replayed."""
        ...

    def mark_refused_again(self, letter_id: int, reason: str, now: float, reopen: bool) -> None:
        """Refused again: one attempt more, with the reason; ``reopen``: open again
        (False where the fence refused it and nothing was stored)."""
        ...  # fmt: skip


class Archiving(Events, Clock, Protocol):
    """Putting dead letters aside, each with who and why."""

    def get_dead_letter(self, letter_id: int) -> DeadLetter | None: ...

    def archive_dead_letter(self, letter_id: int, now: float, by: str | None, note: str) -> bool:
        """Archive one not archived yet; False if it was already."""
        ...


class Selecting(Protocol):
    """What a bulk action selects and its preview counts, by the same filters as the
    listings."""

    def list_dead_letters(
        self,
        inbox_id: int | None,
        limit: int,
        filters: DeadLetterFilter | None = None,
        preview: Preview = WHOLE,
    ) -> list[DeadLetter]: ...  # fmt: skip

    def count_dead_letters(self, inbox_id: int | None, filters: DeadLetterFilter, most: int) -> int:
        """How many dead letters the filters select (``after`` included), up to ``most``."""
        ...  # fmt: skip

    def dead_letter_reasons(self, inbox_id: int | None) -> list[str]:
        """The reasons an inbox's dead letters (every inbox's: None) were refused for."""
        ...

    def dead_letter_counts(self, inbox_id: int) -> dict[tuple[str, str], int]:
        """How many dead letters the inbox keeps, by (status, reason)."""
        ...

    def match_quarantine(
        self,
        inbox_id: int,
        prefix: str | None,
        since: float | None,
        until: float | None,
        after: int,
        limit: int,
        preview: Preview = WHOLE,
    ) -> list[Quarantined]:
        """Open rows of the inbox whose identity starts with ``prefix``, first seen in
        ``[since, until)``, after id ``after``, in id order."""
        ...  # fmt: skip

    def count_quarantine_matching(
        self,
        inbox_id: int,
        prefix: str | None,
        since: float | None,
        until: float | None,
        after: int,
        most: int,
    ) -> int: ...  # fmt: skip
