"""The feed and its consumers, in SQL."""

from __future__ import annotations

from oncebox.domain import Consumer, FeedEntry
from oncebox.store.sqltx.base import SqlBase


class FeedSql(SqlBase):
    def feed_window(self, after: int, scan: int) -> int:
        return int(self._one("feed_window", {"after": after, "scan": scan})[0])

    def feed_entries(
        self, inbox_id: int, after: int, until: int, limit: int, head: int
    ) -> list[FeedEntry]:
        params = {"inbox": inbox_id, "after": after, "until": until, "limit": limit,
                  "head": head}  # fmt: skip
        return self._rows("feed_entries", params, FeedEntry)

    def log_position(self) -> int:
        return int(self._one("log_position")[0])

    def feed_count(self, inbox_id: int, after: int, scan: int) -> int:
        params = {"inbox": inbox_id, "after": after, "scan": scan}
        return int(self._one("feed_count", params)[0])

    def put_consumer(self, name: str, inbox_id: int, position: int, now: float) -> bool:
        return self._run("consumer_put", (name, inbox_id, position, position, now, now)) > 0

    def get_consumer(self, name: str) -> Consumer | None:
        return self._row("consumer_get", (name,), Consumer)

    def consumers(self) -> list[Consumer]:
        return self._rows("consumers", (), Consumer)

    def move_consumer(self, name: str, position: int, handed_out: int, now: float) -> None:
        self._run("consumer_move", (position, handed_out, now, name))

    def drop_consumer(self, name: str) -> bool:
        return self._run("consumer_drop", (name,)) > 0
