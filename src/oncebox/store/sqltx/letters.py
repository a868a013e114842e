"""Dead letters' life cycle and bulk selections, in SQL."""

from __future__ import annotations

from oncebox.domain import WHOLE, DeadLetterFilter, Preview, Quarantined
from oncebox.store.sqltx.base import SqlBase


class LettersSql(SqlBase):
    def mark_refused_again(self, letter_id: int, reason: str, now: float, reopen: bool) -> None:
        params = {"reason": reason, "now": now, "status": "open" if reopen else None,
                  "id": letter_id}  # fmt: skip
        self._run("mark_refused_again", params)

    def archive_dead_letter(self, letter_id: int, now: float, by: str | None, note: str) -> bool:
        params = {"now": now, "by": by, "note": note, "id": letter_id}
        return self._run("archive_dead_letter", params) > 0

    def count_dead_letters(self, inbox_id: int | None, filters: DeadLetterFilter, most: int) -> int:
        f = filters
        params = {"inbox": inbox_id, "reason": f.reason, "status": f.status, "since": f.since,
                  "until": f.until, "search": f.search, "after": f.after, "most": most}  # fmt: skip
        return int(self._one("count_dead_letters", params)[0])

    def dead_letter_reasons(self, inbox_id: int | None) -> list[str]:
        return [str(row[0]) for row in self._all("dead_letter_reasons", {"inbox": inbox_id})]

    def dead_letter_counts(self, inbox_id: int) -> dict[tuple[str, str], int]:
        rows = self._all("dead_letter_counts", {"inbox": inbox_id})
        return {(str(status), str(reason)): int(n) for status, reason, n in rows}

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
        params = {"inbox": inbox_id, "prefix": prefix, "since": since, "until": until,
                  "after": after, "limit": limit, "head": preview.content,
                  "text": preview.text, "fields": preview.fields}  # fmt: skip
        return self._rows("match_quarantine", params, Quarantined)

    def count_quarantine_matching(
        self,
        inbox_id: int,
        prefix: str | None,
        since: float | None,
        until: float | None,
        after: int,
        most: int,
    ) -> int:
        params = {"inbox": inbox_id, "prefix": prefix, "since": since, "until": until,
                  "after": after, "most": most}  # fmt: skip
        return int(self._one("count_quarantine_matching", params)[0])
