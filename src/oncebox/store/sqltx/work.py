"""Work keys (seed 002) and the triage ledger (seed 003), in SQL."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from oncebox.domain import WHOLE, LedgerRow, Preview, WorkItem
from oncebox.store.sqltx.base import SqlBase

WorkKey = tuple[str, str, str]


class WorkKeysSql(SqlBase):
    def bump_generations(self, inbox_id: int, keys: Sequence[WorkKey]) -> None:
        # Summed per key and sorted: one row per key, locked in one order by every batch.
        bumps = Counter(keys)
        self._many("bump_generations", [(inbox_id, *key, n) for key, n in sorted(bumps.items())])

    def list_work_keys(
        self,
        inbox_id: int,
        limit: int,
        after: WorkKey | None = None,
        *,
        dirty: bool = False,
        review: bool = False,
        preview: Preview = WHOLE,
    ) -> list[WorkItem]:
        s, k, m = after or (None, None, None)
        params = {"inbox": inbox_id, "limit": limit, "dirty": dirty, "review": review,
                  "s": s, "k": k, "m": m, "text": preview.text,
                  "fields": preview.fields}  # fmt: skip
        return self._rows("list_work_keys", params, WorkItem)

    def work_key(self, inbox_id: int, key: WorkKey, lock: bool = False) -> WorkItem | None:
        name = "work_key_for_update" if lock else "work_key"
        return self._row(name, (inbox_id, *key), WorkItem)

    def dirty_keys(self, inbox_id: int, limit: int) -> list[WorkItem]:
        return self._rows("dirty_keys", (inbox_id, limit), WorkItem)

    def next_claimable(self, inbox_id: int, now: float) -> WorkItem | None:
        return self._row("next_claimable", {"inbox": inbox_id, "now": now}, WorkItem)

    def claim_work(
        self, inbox_id: int, key: WorkKey, token: int, worker: str, expires: float
    ) -> None:
        self._run("claim_work", (token, worker, expires, inbox_id, *key))

    def apply_document(
        self, inbox_id: int, key: WorkKey, document: str, generation: int, token: int, now: float
    ) -> None:
        self._run("apply_document", (document, generation, generation, token, now, inbox_id, *key))

    def release_claim(self, inbox_id: int, key: WorkKey, token: int) -> None:
        self._run("release_claim", (inbox_id, *key, token))

    def record_failure(
        self,
        inbox_id: int,
        key: WorkKey,
        failures: int,
        next_attempt: float,
        error: str,
        in_review: bool,
    ) -> None:
        self._run("record_failure", (failures, next_attempt, error, int(in_review), inbox_id, *key))

    def retry_work(self, inbox_id: int, key: WorkKey) -> bool:
        return self._run("retry_work", (inbox_id, *key)) > 0

    def work_figures(self, inbox_id: int, now: float) -> dict[str, int]:
        keys, dirty, review, claimed = (
            int(v) for v in self._one("work_figures", {"inbox": inbox_id, "now": now})
        )
        return {"keys": keys, "dirty": dirty, "in_review": review, "claimed": claimed}


class LedgerSql(SqlBase):
    def ledger_insert(self, inbox_id: int, rows: Sequence[LedgerRow]) -> None:
        self._many(
            "ledger_inserts",
            [(r.record_id, inbox_id, r.site, r.need, r.headcount, r.pri) for r in rows],
        )
        totals: dict[tuple[str, str], list[int]] = {}
        for r in rows:
            moved = totals.setdefault((r.site, r.need), [0, 0])
            moved[0] += r.headcount
            moved[1] += 1
        # Sorted: concurrent batches lock the totals rows in one order.
        self._many(
            "totals_add",
            [(inbox_id, site, need, h, n) for (site, need), (h, n) in sorted(totals.items())],
        )

    def ledger_replace(self, inbox_id: int, row: LedgerRow) -> LedgerRow | None:
        old = self._row("ledger_get", (row.record_id,), LedgerRow)
        if old is None:
            self.ledger_insert(inbox_id, [row])
            return None
        self._run("ledger_update", (row.site, row.need, row.headcount, row.pri, row.record_id))
        moves = sorted(
            [(old.site, old.need, -old.headcount, -1), (row.site, row.need, row.headcount, 1)]
        )
        self._many("totals_add", [(inbox_id, *move) for move in moves])
        return old

    def ledger_totals(self, inbox_id: int) -> list[tuple[str, str, int, int]]:
        return [(s, n, int(h), int(c)) for s, n, h, c in self._all("ledger_totals", (inbox_id,))]

    def ledger_arrivals(self, inbox_id: int) -> list[tuple[str, str, int, int]]:
        rows = self._all("ledger_arrivals", (inbox_id,))
        return [(s, n, int(h), int(c)) for s, n, h, c in rows]

    def ledger_ranking(self, inbox_id: int) -> list[LedgerRow]:
        return self._rows("ledger_ranking", (inbox_id,), LedgerRow)
