"""Inboxes, their verdict counters and the store's health, in SQL."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from oncebox.domain import Inbox
from oncebox.store.sqltx.base import SqlBase

FIGURES = (
    "records",
    "tombstones",
    "duplicates",
    "late_replays",
    "max_lateness_seconds",
    "quarantine_open",
    "quarantine_total",
    "dead_letters",
    "evictions",
)


class InboxesSql(SqlBase):
    def declare_inbox(
        self,
        name: str,
        codec: str,
        apply: str,
        retention_seconds: float | None,
        tombstone_seconds: float | None,
        fenced: bool,
    ) -> Inbox:
        params = (name, codec, apply, retention_seconds, tombstone_seconds, bool(fenced))
        self._run("declare_inbox", params)
        row = self._row("get_inbox", (name,), Inbox)
        assert row is not None  # just declared
        return _fenced_bool(row)

    def inboxes(self) -> list[Inbox]:
        return [_fenced_bool(row) for row in self._rows("inboxes", (), Inbox)]

    def count_verdicts(self, inbox_id: int, hour: int, counts: dict[tuple[str, str], int]) -> None:
        # A fixed order: concurrent batches then lock the counter rows in the same order.
        self._many(
            "count_verdict",
            [
                (inbox_id, hour, verdict, reason, n)
                for (verdict, reason), n in sorted(counts.items())
            ],
        )

    def verdict_counts(self, inbox_id: int) -> dict[tuple[str, str], int]:
        return {(v, r): int(n) for v, r, n in self._all("verdict_counts", (inbox_id,))}

    def verdict_hours(self, inbox_id: int, since_hour: int) -> list[tuple[int, str, int]]:
        rows = self._all("verdict_hours", (inbox_id, since_hour))
        return [(int(h), str(v), int(n)) for h, v, n in rows]

    def inbox_figures(self, inbox_id: int) -> dict[str, Any]:
        *row, dropped_lateness = self._one("inbox_figures", {"inbox": inbox_id})
        figures: dict[str, Any] = {
            name: float(v) if name == "max_lateness_seconds" else int(v)
            for name, v in zip(FIGURES, row, strict=True)
        }
        # The greatest lateness the inbox ever counted, its dropped tombstones' included.
        lateness = max(figures["max_lateness_seconds"], float(dropped_lateness))
        figures["max_lateness_seconds"] = lateness
        return figures

    def last_delivery(self, inbox_id: int) -> float | None:
        at = self._one("last_delivery", {"inbox": inbox_id})[0]
        return None if at is None else float(at)

    def probe_write(self, now: float) -> None:
        self._run("probe_write", (repr(now),))


def _fenced_bool(row: Inbox) -> Inbox:
    if isinstance(row.fenced, bool):
        return row
    return replace(row, fenced=bool(row.fenced))
