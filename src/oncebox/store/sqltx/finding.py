"""Finding records, in SQL (the port is :class:`oncebox.store.finding.Finding`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from oncebox.domain import DeadLetter, LogEntry, Preview, Quarantined, Record, RecordWindow
from oncebox.store.finding import KEY_INDEXED
from oncebox.store.sqltx.base import SqlBase


def _cut(preview: Preview) -> dict[str, Any]:
    return {"head": preview.content, "text": preview.text, "fields": preview.fields}


def _keyed(inbox_id: int, key: str, ident: bytes, limit: int) -> dict[str, Any]:
    return {"inbox": inbox_id, "key": key, "prefix": key[:KEY_INDEXED], "ident": ident,
            "limit": limit}  # fmt: skip


class FindingSql(SqlBase):
    def record_page(
        self, inbox_id: int, window: RecordWindow, limit: int, search: bytes | None
    ) -> list[int]:
        name = "record_page_newest" if window.newest else "record_page_oldest"
        params = {"inbox": inbox_id, "low": window.low, "high": window.high, "at": window.at,
                  "id": window.id, "search": search, "limit": limit}  # fmt: skip
        return [int(row[0]) for row in self._all(name, params)]

    def record_start(self, record_id: int) -> tuple[int, float] | None:
        row = self._one("record_start", (record_id,))
        return (int(row[0]), float(row[1])) if row is not None else None

    def records_keyed(
        self, inbox_id: int, key: str, ident: bytes, limit: int
    ) -> list[tuple[int, bytes, float]]:
        rows = self._all("records_keyed", _keyed(inbox_id, key, ident, limit))
        return [(int(i), bytes(d), float(t)) for i, d, t in rows]

    def records_identified(self, inbox_id: int, ident: bytes) -> list[tuple[int, bytes, float]]:
        rows = self._all("records_identified", (inbox_id, ident))
        return [(int(i), bytes(d), float(t)) for i, d, t in rows]

    def records_listed(
        self, ids: Sequence[int], preview: Preview, search: bytes | None
    ) -> list[Record]:
        if not ids:
            return []
        params = {"ids": json.dumps(list(ids)), "search": search, **_cut(preview)}
        return self._rows("records_listed", params, Record)

    def quarantine_of(
        self, inbox_id: int, ident: bytes, limit: int, preview: Preview
    ) -> list[Quarantined]:
        params = {"inbox": inbox_id, "ident": ident, "limit": limit, **_cut(preview)}
        return self._rows("quarantine_of", params, Quarantined)

    def quarantine_keyed(
        self, inbox_id: int, key: str, ident: bytes, limit: int, preview: Preview
    ) -> list[Quarantined]:
        params = {**_keyed(inbox_id, key, ident, limit), **_cut(preview)}
        return self._rows("quarantine_keyed", params, Quarantined)

    def dead_letters_keyed(
        self, inbox_id: int, key: str, limit: int, preview: Preview
    ) -> list[DeadLetter]:
        params = {"inbox": inbox_id, "key": key, "prefix": key[:KEY_INDEXED], "limit": limit,
                  **_cut(preview)}  # fmt: skip
        return self._rows("dead_letters_keyed", params, DeadLetter)

    def log_about(
        self, quarantine_ids: Sequence[int], record_ids: Sequence[int], limit: int
    ) -> list[LogEntry]:
        if not quarantine_ids and not record_ids:
            return []
        params = {"quarantine": json.dumps(list(quarantine_ids)),
                  "records": json.dumps(list(record_ids)), "limit": limit}  # fmt: skip
        return self._rows("log_about", params, LogEntry)
