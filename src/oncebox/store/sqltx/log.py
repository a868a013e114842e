"""The log, its Merkle nodes and the seal queue, in SQL."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from oncebox.domain import LogEntry, LogEvent, PendingEvent, Record
from oncebox.store.sqltx.base import SqlBase


class LogSql(SqlBase):
    # The log's memo between this object's transactions; the store never reads it.
    log_edge: Any = None
    log_block_at_hand = False  # each read of the log is a statement of its own

    def log_head(self) -> LogEntry | None:
        return self._row("log_head", (), LogEntry)

    def append_log(self, entries: Sequence[LogEntry]) -> None:
        self._many("append_log", entries)

    def log_entries(self, start: int, end: int) -> list[LogEntry]:
        return self._rows("log_entries", (start, end), LogEntry)

    def log_rows(self, start: int, end: int) -> list[LogEntry]:
        return self._rows("log_rows", (start, end), LogEntry)

    def merkle_nodes(self, level: int, start: int, end: int) -> list[bytes]:
        return [bytes(row[0]) for row in self._all("merkle_nodes", (level, start, end))]

    def put_merkle_nodes(self, nodes: Sequence[tuple[int, int, bytes]]) -> None:
        self._many("put_merkle_node", list(nodes))

    def meta(self, key: str) -> str | None:
        row = self._one("meta", (key,))
        return str(row[0]) if row else None


class SealQueueSql(SqlBase):
    def queue_logs(self, events: Sequence[LogEvent]) -> None:
        self._many("queue_logs", events)

    def pending_log(self, limit: int) -> list[PendingEvent]:
        return self._rows("pending_log", (limit,), PendingEvent)

    def drop_pending(self, event_ids: Sequence[int]) -> None:
        self._many("drop_pending", [(event_id,) for event_id in event_ids])

    def mark_sealed(self, seals: Sequence[tuple[int, int]]) -> None:
        self._many("mark_sealed", seals)

    def unsealed_records(self, limit: int) -> list[Record]:
        return self._rows("unsealed_records", (limit,), Record)

    def record_seals(self) -> list[tuple[int, int | None]]:
        return [(int(i), s) for i, s in self._all("record_seals")]

    def queued_seals(self) -> list[tuple[int, float]]:
        return [(int(i), float(t)) for i, t in self._all("queued_seals")]

    def last_pending_id(self) -> int:
        return int(self._one("last_pending_id")[0])

    def log_pending_count(self) -> int:
        return int(self._one("log_pending_count")[0])
