"""What needs an operator first: an inbox's open conflicts, its open dead letters, and
its silence (no delivery for longer than usual).

"Longer than usual" is derived from the inbox's own traffic, so that no one has to set
it per inbox: the mean gap between deliveries over the last day, times
:data:`SILENCE_TIMES`, never under :data:`SILENCE_FLOOR` (a burst of deliveries would
otherwise make a quiet minute an alarm) and never over a day; an inbox with no
delivery in the last day, but one before it, is silent; one that never took a delivery
is not (nothing is usual yet).
The console's overview orders the inboxes by this (docs/console.md#pages).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from oncebox.store.letters import Selecting
from oncebox.store.ports import Figures

DAY = 24 * 3600
SILENCE_FLOOR = 15 * 60  # seconds: never silent sooner than this
SILENCE_TIMES = 3  # silent after this many mean gaps without a delivery


class Watching(Figures, Selecting, Protocol):
    """What the attention of an inbox reads: its figures and its dead letters' counts."""


@dataclass(frozen=True)
class Attention:
    """One inbox as the overview weighs it (times are server-clock seconds)."""

    inbox: str
    conflicts: int  # open quarantine rows
    dead_letters: int  # open dead letters
    last_delivery: float | None  # any verdict; None: never
    silent_after: float  # seconds without a delivery that make it silent
    silent: bool
    now: float

    @property
    def needs_attention(self) -> bool:
        return bool(self.conflicts or self.dead_letters or self.silent)


def silent_after(deliveries_in_a_day: int) -> float:
    """The silence threshold for an inbox that took this many deliveries in the last day
    (:data:`DAY` when it took none: a day without any is silence)."""
    if deliveries_in_a_day <= 0:
        return float(DAY)
    return min(float(DAY), max(float(SILENCE_FLOOR), SILENCE_TIMES * DAY / deliveries_in_a_day))


def of(tx: Watching, name: str, inbox_id: int) -> Attention:
    """The attention an inbox needs now, read in one snapshot."""
    now = tx.now()
    conflicts = int(tx.inbox_figures(inbox_id)["quarantine_open"])
    counts = tx.dead_letter_counts(inbox_id)
    letters = sum(n for (status, _), n in counts.items() if status == "open")
    since_hour = int((now - DAY) // 3600) + 1
    day = sum(n for _, _, n in tx.verdict_hours(inbox_id, since_hour))
    last = tx.last_delivery(inbox_id)
    threshold = silent_after(day)
    silent = last is not None and now - last > threshold
    return Attention(name, conflicts, letters, last, threshold, silent, now)


def ordered(inboxes: Iterable[Attention]) -> list[Attention]:
    """Those that need attention first (the most open conflicts, then the most open dead
    letters, then the silent), then the rest by name."""
    return sorted(
        inboxes,
        key=lambda a: (not a.needs_attention, -a.conflicts, -a.dead_letters, not a.silent, a.inbox),
    )
