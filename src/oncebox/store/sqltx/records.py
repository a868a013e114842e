"""Records and retention, in SQL."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from oncebox.domain import Evicted, Eviction, NewRecordRow, Record, Revision, Stored, StoredRow
from oncebox.store.sqltx.base import SqlBase


class RecordsSql(SqlBase):
    def reserve_record_ids(self, n: int) -> list[int]:
        return [int(row[0]) for row in self._all("reserve_record_ids", (n,))]

    def find_records(self, inbox_id: int, idents: Sequence[bytes]) -> dict[bytes, StoredRow]:
        if not idents:
            return {}
        wanted = json.dumps([ident.hex() for ident in idents])
        found = self._rows("find_records", (inbox_id, wanted), Stored)
        return {bytes(row.ident): row for row in found}

    def insert_records(
        self,
        inbox_id: int,
        records: Sequence[NewRecordRow],
        now: float,
        positions: Mapping[int, int] | None = None,
    ) -> int:
        return self._many("insert_records", self._record_rows(inbox_id, records, now, positions))

    @staticmethod
    def _record_rows(
        inbox_id: int,
        records: Sequence[NewRecordRow],
        now: float,
        positions: Mapping[int, int] | None = None,
    ) -> list[tuple[object, ...]]:
        """One row of parameters a record, its fields unpacked at once rather than read
        by name (a batch's every record), and its arrival's facts read once for a run of
        records sharing one (nearly every batch shares the one without facts)."""
        rows: list[tuple[object, ...]] = []
        add = rows.append
        last: object = None
        device_time = snapshot_id = delivery_id = signature = None
        for record_id, ident, identity, witness, content, fields, arrival, log_seq, key in records:
            if arrival is not last:
                last = arrival
                device_time, snapshot_id = arrival.device_time, arrival.snapshot_id
                delivery_id, signature = arrival.delivery_id, arrival.signature
            if positions is not None:
                log_seq = positions.get(record_id)
            add((record_id, inbox_id, ident, identity, witness, content, fields, now, now,
                 device_time, snapshot_id, delivery_id, signature, log_seq, key))  # fmt: skip
        return rows

    def count_duplicates(self, repeats: Mapping[int, int], now: float) -> int:
        # Ascending ids: concurrent batches lock the rows they touch in one order.
        rows = [(record_id, n, now) for record_id, n in sorted(repeats.items())]
        return self._many("count_duplicates", rows)

    def count_late_replays(self, late: Mapping[int, tuple[int, float]], now: float) -> int:
        rows = [(record_id, n, now, most) for record_id, (n, most) in sorted(late.items())]
        return self._many("count_late_replays", rows)

    def get_record(self, record_id: int) -> Record | None:
        return self._row("get_record", (record_id,), Record)

    def revise_record(
        self,
        record: Record,
        witness: bytes,
        content: bytes,
        fields: str,
        now: float,
        note: str | None,
        last_seen: float,
    ) -> int:
        self._run(
            "keep_revision",
            (record.id, record.revision, record.witness, record.content, record.fields,
             record.revised_at or record.first_seen, now, note),
        )  # fmt: skip
        revised = (witness, content, fields, last_seen, now, record.id)
        return int(self._one("revise_record", revised)[0])

    def revisions(self, record_id: int) -> list[Revision]:
        return self._rows("revisions", (record_id,), Revision)


class RetentionSql(SqlBase):
    def evict_records(self, inbox_id: int, cutoff: float, now: float, limit: int) -> list[Evicted]:
        params = {"inbox": inbox_id, "cutoff": cutoff, "now": now, "limit": limit}
        evicted = self._rows("evict_records", params, Evicted)
        self._run("evict_revisions", (inbox_id,))
        self._record_evictions(inbox_id, "record", evicted, now)
        return evicted

    def drop_tombstones(
        self, inbox_id: int, cutoff: float, now: float, limit: int
    ) -> list[Evicted]:
        params = {"inbox": inbox_id, "cutoff": cutoff, "limit": limit}
        dropped = self._rows("drop_tombstones", params, Evicted)
        if dropped:
            self._remember_dropped(max(e.record_id for e in dropped))
            carried = {
                "inbox": inbox_id,
                "duplicates": sum(e.duplicates for e in dropped),
                "late_replays": sum(e.late_replays for e in dropped),
                "max_lateness": max(e.max_lateness for e in dropped),
            }
            self._run("carry_dropped_counts", carried)
        self._record_evictions(inbox_id, "tombstone", dropped, now)
        return dropped

    def _remember_dropped(self, record_id: int) -> None:
        """Record ids are never reused: the store remembers the highest one dropped, so
        that the next reservation starts above it even if it was the newest record."""
        self._run("remember_dropped_id", (record_id,))

    def _record_evictions(
        self, inbox_id: int, kind: str, evicted: list[Evicted], now: float
    ) -> None:
        self._many(
            "log_eviction",
            [(inbox_id, kind, e.ident, e.witness, e.first_seen, now) for e in evicted],
        )

    def evictions(self, inbox_id: int | None, limit: int) -> list[Eviction]:
        return self._rows("evictions", {"inbox": inbox_id, "limit": limit}, Eviction)

    def record_retention_override(
        self, inbox_id: int, retention_seconds: float, reason: str, now: float
    ) -> None:
        self._run("record_retention_override", (inbox_id, retention_seconds, reason, now))

    def retention_overrides(self, inbox_id: int) -> list[tuple[float, str, float]]:
        return [
            (float(s), str(r), float(a))
            for s, r, a in self._all("retention_overrides", (inbox_id,))
        ]
