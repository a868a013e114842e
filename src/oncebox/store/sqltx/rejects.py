"""Quarantine and dead letters, in SQL."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from oncebox.domain import (
    WHOLE,
    DeadLetter,
    DeadLetterFilter,
    Letter,
    Newcomer,
    Preview,
    Quarantined,
    Record,
)
from oncebox.errors import RetryTransaction
from oncebox.store.sqltx.base import SqlBase, shape


def _cut(preview: Preview) -> dict[str, Any]:
    return {"head": preview.content, "text": preview.text, "fields": preview.fields}


class RejectsSql(SqlBase):
    def quarantine(
        self, inbox_id: int, newcomers: Sequence[Newcomer], reason: str, now: float
    ) -> list[tuple[int, bool]]:
        kept: list[tuple[int, bool]] = []
        for n in newcomers:
            arrival = n.arrival
            row = self._one(
                "quarantine_insert",
                (inbox_id, n.ident, n.identity, n.record_id, n.witness, n.content, n.fields,
                 reason, now, now, n.times, arrival.device_time, arrival.snapshot_id,
                 arrival.delivery_id, arrival.signature, n.key),
            )  # fmt: skip
            if row is not None:
                kept.append((int(row[0]), True))
            else:
                again = self._one("quarantine_repeat", (n.times, now, inbox_id, n.ident, n.witness))
                if again is None:  # its open row was closed meanwhile: decide it again
                    raise RetryTransaction("a quarantine row was resolved under this batch")
                kept.append((int(again[0]), False))
        return kept

    def get_quarantine(self, quarantine_id: int, lock: bool = False) -> Quarantined | None:
        name = "get_quarantine_for_update" if lock else "get_quarantine"
        return self._row(name, (quarantine_id,), Quarantined)

    def close_quarantine(
        self, quarantine_id: int, status: str, note: str, now: float, by: str | None = None
    ) -> bool:
        return self._run("close_quarantine", (status, note, now, by, quarantine_id)) > 0

    def list_quarantine(
        self,
        inbox_id: int | None,
        status: str | None,
        limit: int,
        after: int = 0,
        preview: Preview = WHOLE,
    ) -> list[Quarantined]:
        params = {"inbox": inbox_id, "status": status, "limit": limit, "after": after,
                  **_cut(preview)}  # fmt: skip
        return self._rows("list_quarantine", params, Quarantined)

    def originals(self, quarantine_ids: Sequence[int], preview: Preview) -> dict[int, Record]:
        if not quarantine_ids:
            return {}
        params = {"ids": json.dumps(list(quarantine_ids)), **_cut(preview)}
        columns, rows = self._described("list_originals", params)
        if not rows:
            return {}
        make = shape("list_originals", Record, columns[1:])
        return {int(row[0]): make(row[1:]) for row in rows}

    def dead_letter(self, inbox_id: int, letters: Sequence[Letter], now: float) -> list[int]:
        rows = [
            (inbox_id, x.reason, x.detail, x.head, x.length, x.sha256, x.key, now,
             x.arrival.device_time, x.arrival.snapshot_id, x.arrival.delivery_id,
             x.arrival.signature)
            for x in letters
        ]  # fmt: skip
        return [int(row[0]) for row in self._many_rows("dead_letter", rows)]

    def list_dead_letters(
        self,
        inbox_id: int | None,
        limit: int,
        filters: DeadLetterFilter | None = None,
        preview: Preview = WHOLE,
    ) -> list[DeadLetter]:
        f = filters or DeadLetterFilter()
        params = {"inbox": inbox_id, "limit": limit, "reason": f.reason, "since": f.since,
                  "until": f.until, "search": f.search, "after": f.after, "status": f.status,
                  **_cut(preview)}  # fmt: skip
        if f.newest:  # a page down from the one before (from the newest: from the top)
            params["before"] = f.after or 2**63 - 1
            return self._rows("list_dead_letters_newest", params, DeadLetter)
        return self._rows("list_dead_letters", params, DeadLetter)

    def get_dead_letter(self, letter_id: int) -> DeadLetter | None:
        return self._row("get_dead_letter", (letter_id,), DeadLetter)

    def mark_replayed(self, letter_id: int, now: float, by: str | None, verdict: str) -> None:
        self._run("mark_replayed", {"now": now, "by": by, "verdict": verdict, "id": letter_id})
