"""The store interface in SQL, written once for every backend.

Each backend keeps its own SQL (``sql/<backend>/queries.sql``, the same statement names)
and provides four primitives over its driver; every method of the store interface is
written here, once, in terms of them. What really differs between backends (the clock,
locking, the user's own SQL) stays in the backend's module.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Sequence
from typing import Any

from oncebox.errors import StorageError
from oncebox.store.base import (
    Arrival,
    DeadLetterRow,
    Evicted,
    EvictionRow,
    InboxRow,
    LeaseRow,
    LedgerRow,
    LogEntry,
    NewRecord,
    PendingEvent,
    QuarantineRow,
    RecordRow,
    RevisionRow,
    SealerRow,
    TokenRow,
    WorkKeyRow,
)

Params = Sequence[Any] | dict[str, Any]


def _inbox(row: Sequence[Any]) -> InboxRow:
    inbox_id, name, codec, apply, retention, tombstones, fenced = row
    return InboxRow(inbox_id, name, codec, apply, retention, tombstones, bool(fenced))


class SqlTx(ABC):
    """One transaction of a SQL backend. Subclasses give the four primitives."""

    @abstractmethod
    def _one(self, name: str, params: Params = ()) -> Any:
        """The first row of a named statement, or None."""

    @abstractmethod
    def _all(self, name: str, params: Params = ()) -> list[Any]:
        """Every row of a named statement."""

    @abstractmethod
    def _run(self, name: str, params: Params = ()) -> int:
        """Run a named statement; how many rows it changed."""

    @abstractmethod
    def _many_rows(self, name: str, rows: Sequence[Sequence[Any]]) -> list[Any]:
        """Run a named statement once per row of parameters; every row it returned."""

    def _many(self, name: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run a named statement once per row of parameters."""
        self._many_rows(name, rows)

    # -- records -------------------------------------------------------------------
    def find_record(self, inbox_id: int, ident: bytes) -> RecordRow | None:
        row = self._one("find_record", (inbox_id, ident))
        return RecordRow(*row) if row else None

    def find_records(self, inbox_id: int, idents: Sequence[bytes]) -> dict[bytes, RecordRow]:
        if not idents:
            return {}
        wanted = json.dumps([ident.hex() for ident in idents])
        return {
            bytes(row[2]): RecordRow(*row) for row in self._all("find_records", (inbox_id, wanted))
        }

    def get_record(self, record_id: int) -> RecordRow | None:
        row = self._one("get_record", (record_id,))
        return RecordRow(*row) if row else None

    def insert_record(
        self,
        inbox_id: int,
        ident: bytes,
        identity: str,
        witness: bytes,
        content: bytes,
        fields: str,
        arrival: Arrival,
        now: float,
    ) -> int | None:
        row = self._one(
            "insert_record",
            (
                inbox_id,
                ident,
                identity,
                witness,
                content,
                fields,
                now,
                now,
                arrival.device_time,
                arrival.snapshot_id,
                arrival.delivery_id,
            ),
        )
        return int(row[0]) if row else None

    def insert_records(
        self, inbox_id: int, records: Sequence[NewRecord], now: float
    ) -> dict[bytes, int]:
        rows = [
            (
                inbox_id,
                r.ident,
                r.identity,
                r.witness,
                r.content,
                r.fields,
                now,
                now,
                r.arrival.device_time,
                r.arrival.snapshot_id,
                r.arrival.delivery_id,
            )
            for r in records
        ]
        inserted = self._many_rows("insert_records", rows)
        return {bytes(ident): int(record_id) for record_id, ident in inserted}

    def touch_duplicate(self, record_id: int, now: float) -> bool:
        return self._run("touch_duplicate", (now, record_id)) > 0

    def touch_duplicates(self, repeats: dict[int, int], now: float) -> set[int]:
        rows = [(record_id, n, now) for record_id, n in sorted(repeats.items())]
        return {int(row[0]) for row in self._many_rows("touch_duplicates", rows)}

    def touch_late_replay(self, record_id: int, now: float, lateness: float) -> bool:
        return self._run("touch_late_replay", (now, lateness, record_id)) > 0

    def revise_record(
        self,
        record: RecordRow,
        witness: bytes,
        content: bytes,
        fields: str,
        now: float,
        note: str | None,
    ) -> int:
        self._run(
            "keep_revision",
            (
                record.id,
                record.revision,
                record.witness,
                record.content,
                record.fields,
                record.revised_at or record.first_seen,
                now,
                note,
            ),
        )
        return int(self._one("revise_record", (witness, content, fields, now, now, record.id))[0])

    def revisions(self, record_id: int) -> list[RevisionRow]:
        return [RevisionRow(*row) for row in self._all("revisions", (record_id,))]

    # -- quarantine and dead letters ---------------------------------------------------
    def quarantine(
        self,
        inbox_id: int,
        ident: bytes,
        identity: str,
        record_id: int | None,
        witness: bytes,
        content: bytes,
        fields: str,
        reason: str,
        arrival: Arrival,
        now: float,
    ) -> tuple[int, bool]:
        row = self._one(
            "quarantine_insert",
            (
                inbox_id,
                ident,
                identity,
                record_id,
                witness,
                content,
                fields,
                reason,
                now,
                now,
                arrival.device_time,
                arrival.snapshot_id,
                arrival.delivery_id,
            ),
        )
        if row is not None:
            return int(row[0]), True
        row = self._one("quarantine_repeat", (now, inbox_id, ident, witness))
        return int(row[0]), False

    def get_quarantine(self, quarantine_id: int, lock: bool = False) -> QuarantineRow | None:
        row = self._one("get_quarantine_for_update" if lock else "get_quarantine", (quarantine_id,))
        return QuarantineRow(*row) if row else None

    def close_quarantine(self, quarantine_id: int, status: str, note: str, now: float) -> bool:
        return self._run("close_quarantine", (status, note, now, quarantine_id)) > 0

    def list_quarantine(
        self, inbox_id: int | None, status: str | None, limit: int
    ) -> list[QuarantineRow]:
        rows = self._all("list_quarantine", {"inbox": inbox_id, "status": status, "limit": limit})
        return [QuarantineRow(*row) for row in rows]

    def dead_letter(
        self,
        inbox_id: int,
        reason: str,
        detail: str,
        head: bytes,
        length: int,
        sha256: str,
        key: str | None,
        arrival: Arrival,
        now: float,
    ) -> int:
        row = self._one(
            "dead_letter",
            (
                inbox_id,
                reason,
                detail,
                head,
                length,
                sha256,
                key,
                now,
                arrival.device_time,
                arrival.snapshot_id,
                arrival.delivery_id,
            ),
        )
        return int(row[0])

    def list_dead_letters(self, inbox_id: int | None, limit: int) -> list[DeadLetterRow]:
        rows = self._all("list_dead_letters", {"inbox": inbox_id, "limit": limit})
        return [DeadLetterRow(*row) for row in rows]

    # -- counters ----------------------------------------------------------------------
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
        row = self._one("inbox_figures", {"inbox": inbox_id})
        names = (
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
        values = [
            float(v) if name == "max_lateness_seconds" else int(v)
            for name, v in zip(names, row, strict=True)
        ]
        return dict(zip(names, values, strict=True))

    # -- apply steps -------------------------------------------------------------------
    def bump_generation(self, inbox_id: int, key: tuple[str, str, str]) -> int:
        return int(self._one("bump_generation", (inbox_id, *key))[0])

    def bump_generations(self, inbox_id: int, keys: Sequence[tuple[str, str, str]]) -> None:
        # Summed per key and sorted: one row per key, locked in one order by every batch.
        bumps = Counter(keys)
        self._many("bump_generations", [(inbox_id, *key, n) for key, n in sorted(bumps.items())])

    def work_keys(self, inbox_id: int) -> list[WorkKeyRow]:
        return [WorkKeyRow(*row) for row in self._all("work_keys", (inbox_id,))]

    def ledger_insert(self, inbox_id: int, row: LedgerRow) -> None:
        self._run(
            "ledger_insert", (row.record_id, inbox_id, row.site, row.need, row.headcount, row.pri)
        )
        self._run("totals_add", (inbox_id, row.site, row.need, row.headcount, 1))

    def ledger_insert_many(self, inbox_id: int, rows: Sequence[LedgerRow]) -> None:
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
        found = self._one("ledger_get", (row.record_id,))
        if found is None:
            self.ledger_insert(inbox_id, row)
            return None
        old = LedgerRow(*found)
        self._run("ledger_update", (row.site, row.need, row.headcount, row.pri, row.record_id))
        self._run("totals_add", (inbox_id, old.site, old.need, -old.headcount, -1))
        self._run("totals_add", (inbox_id, row.site, row.need, row.headcount, 1))
        return old

    def ledger_totals(self, inbox_id: int) -> list[tuple[str, str, int, int]]:
        return [(s, n, int(h), int(c)) for s, n, h, c in self._all("ledger_totals", (inbox_id,))]

    def ledger_ranking(self, inbox_id: int) -> list[LedgerRow]:
        return [LedgerRow(*row) for row in self._all("ledger_ranking", (inbox_id,))]

    # -- the reconciler ------------------------------------------------------------------
    def work_key(
        self, inbox_id: int, key: tuple[str, str, str], lock: bool = False
    ) -> WorkKeyRow | None:
        row = self._one("work_key_for_update" if lock else "work_key", (inbox_id, *key))
        return WorkKeyRow(*row) if row else None

    def dirty_keys(self, inbox_id: int, limit: int) -> list[WorkKeyRow]:
        return [WorkKeyRow(*row) for row in self._all("dirty_keys", (inbox_id, limit))]

    def next_claimable(self, inbox_id: int, now: float) -> WorkKeyRow | None:
        row = self._one("next_claimable", {"inbox": inbox_id, "now": now})
        return WorkKeyRow(*row) if row else None

    def claim_work(
        self, inbox_id: int, key: tuple[str, str, str], token: int, worker: str, expires: float
    ) -> None:
        self._run("claim_work", (token, worker, expires, inbox_id, *key))

    def apply_document(
        self,
        inbox_id: int,
        key: tuple[str, str, str],
        document: str,
        generation: int,
        token: int,
        now: float,
    ) -> None:
        self._run("apply_document", (document, generation, generation, token, now, inbox_id, *key))

    def release_claim(self, inbox_id: int, key: tuple[str, str, str], token: int) -> None:
        self._run("release_claim", (inbox_id, *key, token))

    def record_failure(
        self,
        inbox_id: int,
        key: tuple[str, str, str],
        failures: int,
        next_attempt: float,
        error: str,
        in_review: bool,
    ) -> None:
        self._run("record_failure", (failures, next_attempt, error, int(in_review), inbox_id, *key))

    def retry_work(self, inbox_id: int, key: tuple[str, str, str]) -> bool:
        return self._run("retry_work", (inbox_id, *key)) > 0

    def work_figures(self, inbox_id: int, now: float) -> dict[str, int]:
        keys, dirty, review, claimed = (
            int(v) for v in self._one("work_figures", {"inbox": inbox_id, "now": now})
        )
        return {"keys": keys, "dirty": dirty, "in_review": review, "claimed": claimed}

    # -- retention ---------------------------------------------------------------------
    def evict_records(self, inbox_id: int, cutoff: float, now: float, limit: int) -> list[Evicted]:
        evicted = [
            Evicted(*row)
            for row in self._all(
                "evict_records", {"inbox": inbox_id, "cutoff": cutoff, "now": now, "limit": limit}
            )
        ]
        self._run("evict_revisions", (inbox_id,))
        self._record_evictions(inbox_id, "record", evicted, now)
        return evicted

    def drop_tombstones(
        self, inbox_id: int, cutoff: float, now: float, limit: int
    ) -> list[Evicted]:
        dropped = [
            Evicted(*row)
            for row in self._all(
                "drop_tombstones", {"inbox": inbox_id, "cutoff": cutoff, "limit": limit}
            )
        ]
        self._record_evictions(inbox_id, "tombstone", dropped, now)
        return dropped

    def _record_evictions(
        self, inbox_id: int, kind: str, evicted: list[Evicted], now: float
    ) -> None:
        self._many(
            "log_eviction",
            [(inbox_id, kind, e.ident, e.witness, e.first_seen, now) for e in evicted],
        )

    def evictions(self, inbox_id: int | None, limit: int) -> list[EvictionRow]:
        rows = self._all("evictions", {"inbox": inbox_id, "limit": limit})
        return [EvictionRow(*row) for row in rows]

    def record_retention_override(
        self, inbox_id: int, retention_seconds: float, reason: str, now: float
    ) -> None:
        self._run("record_retention_override", (inbox_id, retention_seconds, reason, now))

    def retention_overrides(self, inbox_id: int) -> list[tuple[float, str, float]]:
        return [
            (float(s), str(r), float(a))
            for s, r, a in self._all("retention_overrides", (inbox_id,))
        ]

    # -- inboxes -----------------------------------------------------------------------
    def declare_inbox(
        self,
        name: str,
        codec: str,
        apply: str,
        retention_seconds: float | None,
        tombstone_seconds: float | None,
        fenced: bool,
    ) -> InboxRow:
        self._run(
            "declare_inbox",
            (name, codec, apply, retention_seconds, tombstone_seconds, bool(fenced)),
        )
        return _inbox(self._one("get_inbox", (name,)))

    def inboxes(self) -> list[InboxRow]:
        return [_inbox(row) for row in self._all("inboxes")]

    # -- leases --------------------------------------------------------------------------
    def next_token(self) -> int:
        return int(self._one("next_token")[0])

    def put_lease(
        self, inbox_id: int, scope: str, token: int, now: float, expires_at: float
    ) -> None:
        self._run("put_lease", (inbox_id, scope, token, now, expires_at))

    def get_lease(self, inbox_id: int, scope: str) -> LeaseRow | None:
        row = self._one("get_lease", (inbox_id, scope))
        return LeaseRow(*row) if row else None

    def list_leases(self, inbox_id: int) -> list[LeaseRow]:
        return [LeaseRow(*row) for row in self._all("list_leases", (inbox_id,))]

    def release_lease(self, inbox_id: int, scope: str, token: int, now: float) -> bool:
        return self._run("release_lease", (now, inbox_id, scope, token)) > 0

    # -- the log -------------------------------------------------------------------------
    def log_head(self) -> LogEntry | None:
        row = self._one("log_head")
        return LogEntry(*row) if row else None

    def append_log(self, entries: Sequence[LogEntry]) -> None:
        self._many("append_log", [(e.seq, e.step, e.state, e.hash) for e in entries])

    def log_entries(self, start: int, end: int) -> list[LogEntry]:
        return [LogEntry(*row) for row in self._all("log_entries", (start, end))]

    def log_entry(self, seq: int) -> LogEntry | None:
        row = self._one("log_entry", (seq,))
        return LogEntry(*row) if row else None

    def merkle_node(self, level: int, index: int) -> bytes:
        row = self._one("merkle_node", (level, index))
        if row is None:
            raise StorageError(f"the Merkle node ({level}, {index}) is missing")
        return bytes(row[0])

    def put_merkle_nodes(self, nodes: Sequence[tuple[int, int, bytes]]) -> None:
        self._many("put_merkle_node", list(nodes))

    def unsealed_records(self, limit: int) -> list[RecordRow]:
        return [RecordRow(*row) for row in self._all("unsealed_records", (limit,))]

    def mark_sealed(self, seals: Sequence[tuple[int, int]]) -> None:
        self._many("mark_sealed", seals)

    def record_seals(self) -> list[tuple[int, int | None]]:
        return [(int(i), s) for i, s in self._all("record_seals")]

    def meta(self, key: str) -> str | None:
        row = self._one("meta", (key,))
        return str(row[0]) if row else None

    def claim_signature(self, signature: str, now: float, expires_at: float) -> bool:
        self._run("forget_signatures", (now,))
        return self._one("claim_signature", (signature, expires_at, now)) is not None

    def queue_log(self, step: str, state: str, record_id: int | None) -> int:
        return int(self._one("queue_log", (step, state, record_id))[0])

    def queue_logs(self, events: Sequence[tuple[str, str, int | None]]) -> None:
        self._many("queue_logs", events)

    def pending_log(self, limit: int) -> list[PendingEvent]:
        return [PendingEvent(*row) for row in self._all("pending_log", (limit,))]

    def drop_pending(self, event_ids: Sequence[int]) -> None:
        self._many("drop_pending", [(event_id,) for event_id in event_ids])

    def lock_sealer(self) -> SealerRow:
        return SealerRow(*self._one("lock_sealer"))

    def set_sealer(self, token: int, holder: str | None, expires_at: float) -> None:
        self._run("set_sealer", (token, holder, expires_at))

    def last_pending_id(self) -> int:
        return int(self._one("last_pending_id")[0])

    def log_pending_count(self) -> int:
        return int(self._one("log_pending_count")[0])

    def probe_write(self, now: float) -> None:
        self._run("probe_write", (repr(now),))

    # -- API tokens ----------------------------------------------------------------------
    def insert_token(
        self,
        name: str,
        secret_hash: bytes,
        inboxes: str,
        scopes: str,
        hmac_key: str | None,
        now: float,
    ) -> int | None:
        row = self._one("insert_token", (name, secret_hash, inboxes, scopes, hmac_key, now))
        return int(row[0]) if row else None

    def token_by_hash(self, secret_hash: bytes) -> TokenRow | None:
        row = self._one("token_by_hash", (secret_hash,))
        return _token(row) if row else None

    def list_tokens(self) -> list[TokenRow]:
        return [_token(row) for row in self._all("list_tokens")]

    def revoke_token(self, name_or_id: str, now: float) -> bool:
        return self._run("revoke_token", (now, name_or_id, name_or_id)) > 0


def _token(row: Sequence[Any]) -> TokenRow:
    token_id, name, secret_hash, inboxes, scopes, hmac_key, created_at, revoked_at = row
    return TokenRow(
        int(token_id), name, bytes(secret_hash), inboxes, scopes, hmac_key, created_at, revoked_at
    )
