"""The SQLite store, through APSW.

APSW rather than the standard ``sqlite3`` module: it bundles a current SQLite, and the
library these machines link (3.40.1) has the WAL-reset corruption bug (3.7.0 through
3.51.2) that strikes when several connections write or checkpoint one file at once,
which is how oncebox runs (ingesters, sealer, workers). We refuse affected versions.

Durability: WAL with ``synchronous=FULL`` so a commit that returned survives power loss;
every write transaction is ``BEGIN IMMEDIATE`` so it takes the write lock up front and
never fails half-way on a lock upgrade. One connection per thread, never shared.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import apsw

from oncebox.errors import StorageError, StorageUnavailable, UnsafeSQLite
from oncebox.store.base import (
    Arrival,
    DeadLetterRow,
    Evicted,
    EvictionRow,
    InboxRow,
    LeaseRow,
    LedgerRow,
    LogEntry,
    PendingEvent,
    QuarantineRow,
    RecordRow,
    RevisionRow,
    SealerRow,
    T,
    Tx,
    WorkKeyRow,
)
from oncebox.store.sqlfile import load_migrations, load_queries

Q = load_queries("sqlite")
BUSY_TIMEOUT_MS = 30_000
# The WAL-reset bug: present from 3.7.0, fixed in 3.51.3.
UNSAFE_FROM, SAFE_FROM = (3, 7, 0), (3, 51, 3)


def check_sqlite_version(version: str) -> None:
    parts = tuple(int(p) for p in version.split(".")[:3])
    if UNSAFE_FROM <= parts < SAFE_FROM:
        raise UnsafeSQLite(
            f"SQLite {version} has the WAL-reset corruption bug (3.7.0 to 3.51.2, fixed in "
            f"3.51.3) that can corrupt a store written by several connections; install an "
            f"APSW wheel that bundles SQLite 3.51.3 or newer"
        )


def _storage_error(exc: apsw.Error) -> StorageError:
    """The one place SQLite errors become oncebox errors."""
    if isinstance(exc, apsw.BusyError | apsw.LockedError):
        return StorageUnavailable(f"SQLite is busy: {exc}")
    if isinstance(exc, apsw.FullError | apsw.IOError | apsw.CantOpenError):
        return StorageUnavailable(f"SQLite cannot write: {exc}")
    return StorageError(f"SQLite failed: {exc}")


def _inbox(row: tuple[Any, ...]) -> InboxRow:
    inbox_id, name, codec, apply, retention, tombstones, fenced = row
    return InboxRow(inbox_id, name, codec, apply, retention, tombstones, bool(fenced))


class SQLiteTx:
    """The store interface over one APSW connection inside ``BEGIN IMMEDIATE``."""

    def __init__(self, conn: apsw.Connection, clock: Callable[[], float]) -> None:
        self._conn = conn
        self._clock = clock

    def now(self) -> float:
        return float(self._clock())

    def _all(self, name: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return list(self._conn.execute(Q[name], params))

    def _one(self, name: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        for row in self._conn.execute(Q[name], params):
            return tuple(row)
        return None

    # -- records -------------------------------------------------------------------
    def lock_identities(self, inbox_id: int, idents: Sequence[bytes]) -> None:
        """BEGIN IMMEDIATE already serializes writers: nothing to lock."""

    def find_record(self, inbox_id: int, ident: bytes) -> RecordRow | None:
        row = self._one("find_record", (inbox_id, ident))
        return RecordRow(*row) if row else None

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
        assert row is not None
        return int(row[0]) if row else None

    def touch_duplicate(self, record_id: int, now: float) -> None:
        self._conn.execute(Q["touch_duplicate"], (now, record_id))

    def touch_late_replay(self, record_id: int, now: float, lateness: float) -> None:
        self._conn.execute(Q["touch_late_replay"], (now, lateness, record_id))

    def revise_record(
        self,
        record: RecordRow,
        witness: bytes,
        content: bytes,
        fields: str,
        now: float,
        note: str | None,
    ) -> int:
        self._conn.execute(
            Q["keep_revision"],
            (
                record.id,
                record.revision,
                record.witness,
                record.content,
                record.fields,
                record.last_seen if record.revision > 1 else record.first_seen,
                now,
                note,
            ),
        )
        row = self._one("revise_record", (witness, content, fields, now, record.id))
        assert row is not None
        return int(row[0])

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
        assert row is not None
        return int(row[0]), False

    def get_quarantine(self, quarantine_id: int) -> QuarantineRow | None:
        row = self._one("get_quarantine", (quarantine_id,))
        return QuarantineRow(*row) if row else None

    def close_quarantine(self, quarantine_id: int, status: str, note: str, now: float) -> None:
        self._conn.execute(Q["close_quarantine"], (status, note, now, quarantine_id))

    def list_quarantine(
        self, inbox_id: int | None, status: str | None, limit: int
    ) -> list[QuarantineRow]:
        rows = self._all("list_quarantine", (inbox_id, status, limit))
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
        assert row is not None
        return int(row[0])

    def list_dead_letters(self, inbox_id: int | None, limit: int) -> list[DeadLetterRow]:
        return [DeadLetterRow(*row) for row in self._all("list_dead_letters", (inbox_id, limit))]

    # -- counters ----------------------------------------------------------------------
    def count_verdicts(self, inbox_id: int, hour: int, counts: dict[tuple[str, str], int]) -> None:
        self._conn.executemany(
            Q["count_verdict"],
            [(inbox_id, hour, verdict, reason, n) for (verdict, reason), n in counts.items()],
        )

    def verdict_counts(self, inbox_id: int) -> dict[tuple[str, str], int]:
        return {(v, r): int(n) for v, r, n in self._all("verdict_counts", (inbox_id,))}

    def inbox_figures(self, inbox_id: int) -> dict[str, Any]:
        row = self._one("inbox_figures", (inbox_id,))
        assert row is not None
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
        return dict(zip(names, row, strict=True))

    # -- apply steps -------------------------------------------------------------------
    def bump_generation(self, inbox_id: int, key: tuple[str, str, str]) -> int:
        row = self._one("bump_generation", (inbox_id, *key))
        assert row is not None
        return int(row[0])

    def work_keys(self, inbox_id: int) -> list[WorkKeyRow]:
        return [WorkKeyRow(*row) for row in self._all("work_keys", (inbox_id,))]

    # -- the reconciler ------------------------------------------------------------------
    def work_key(
        self, inbox_id: int, key: tuple[str, str, str], lock: bool = False
    ) -> WorkKeyRow | None:
        # BEGIN IMMEDIATE holds the database's one write lock: nothing more to lock.
        row = self._one("work_key", (inbox_id, *key))
        return WorkKeyRow(*row) if row else None

    def dirty_keys(self, inbox_id: int, limit: int) -> list[WorkKeyRow]:
        return [WorkKeyRow(*row) for row in self._all("dirty_keys", (inbox_id, limit))]

    def next_claimable(self, inbox_id: int, now: float) -> WorkKeyRow | None:
        row = self._one("next_claimable", (inbox_id, now))
        return WorkKeyRow(*row) if row else None

    def claim_work(
        self, inbox_id: int, key: tuple[str, str, str], token: int, worker: str, expires: float
    ) -> None:
        self._conn.execute(Q["claim_work"], (token, worker, expires, inbox_id, *key))

    def apply_document(
        self,
        inbox_id: int,
        key: tuple[str, str, str],
        document: str,
        generation: int,
        token: int,
        now: float,
    ) -> None:
        self._conn.execute(
            Q["apply_document"], (document, generation, generation, token, now, inbox_id, *key)
        )

    def release_claim(self, inbox_id: int, key: tuple[str, str, str], token: int) -> None:
        self._conn.execute(Q["release_claim"], (inbox_id, *key, token))

    def record_failure(
        self,
        inbox_id: int,
        key: tuple[str, str, str],
        failures: int,
        next_attempt: float,
        error: str,
        in_review: bool,
    ) -> None:
        self._conn.execute(
            Q["record_failure"],
            (failures, next_attempt, error, int(in_review), inbox_id, *key),
        )

    def retry_work(self, inbox_id: int, key: tuple[str, str, str]) -> bool:
        self._conn.execute(Q["retry_work"], (inbox_id, *key))
        return bool(self._conn.changes())

    def work_figures(self, inbox_id: int, now: float) -> dict[str, int]:
        row = self._one("work_figures", (inbox_id, now))
        assert row is not None
        keys, dirty, review, claimed = (int(v) for v in row)
        return {"keys": keys, "dirty": dirty, "in_review": review, "claimed": claimed}

    def ledger_insert(self, inbox_id: int, row: LedgerRow) -> None:
        self._conn.execute(
            Q["ledger_insert"],
            (
                row.record_id,
                inbox_id,
                row.site,
                row.need,
                row.headcount,
                row.pri,
            ),
        )
        self._conn.execute(Q["totals_add"], (inbox_id, row.site, row.need, row.headcount, 1))

    def ledger_replace(self, inbox_id: int, row: LedgerRow) -> LedgerRow | None:
        found = self._one("ledger_get", (row.record_id,))
        if found is None:
            self.ledger_insert(inbox_id, row)
            return None
        old = LedgerRow(*found)
        self._conn.execute(
            Q["ledger_update"],
            (
                row.site,
                row.need,
                row.headcount,
                row.pri,
                row.record_id,
            ),
        )
        # Totals move by the difference: out of the old bucket, into the new one.
        self._conn.execute(Q["totals_add"], (inbox_id, old.site, old.need, -old.headcount, -1))
        self._conn.execute(Q["totals_add"], (inbox_id, row.site, row.need, row.headcount, 1))
        return old

    def ledger_totals(self, inbox_id: int) -> list[tuple[str, str, int, int]]:
        return [(s, n, int(h), int(c)) for s, n, h, c in self._all("ledger_totals", (inbox_id,))]

    def ledger_ranking(self, inbox_id: int) -> list[LedgerRow]:
        return [LedgerRow(*row) for row in self._all("ledger_ranking", (inbox_id,))]

    # -- retention ---------------------------------------------------------------------
    def evict_records(self, inbox_id: int, cutoff: float, now: float, limit: int) -> list[Evicted]:
        evicted = [
            Evicted(*row) for row in self._all("evict_records", (inbox_id, cutoff, now, limit))
        ]
        self._conn.execute(Q["evict_revisions"], (inbox_id,))
        self._record_evictions(inbox_id, "record", evicted, now)
        return evicted

    def drop_tombstones(
        self, inbox_id: int, cutoff: float, now: float, limit: int
    ) -> list[Evicted]:
        dropped = [Evicted(*row) for row in self._all("drop_tombstones", (inbox_id, cutoff, limit))]
        self._record_evictions(inbox_id, "tombstone", dropped, now)
        return dropped

    def _record_evictions(
        self, inbox_id: int, kind: str, evicted: list[Evicted], now: float
    ) -> None:
        self._conn.executemany(
            Q["log_eviction"],
            [(inbox_id, kind, e.ident, e.witness, e.first_seen, now) for e in evicted],
        )

    def evictions(self, inbox_id: int | None, limit: int) -> list[EvictionRow]:
        return [EvictionRow(*row) for row in self._all("evictions", (inbox_id, limit))]

    def record_retention_override(
        self, inbox_id: int, retention_seconds: float, reason: str, now: float
    ) -> None:
        self._conn.execute(
            Q["record_retention_override"],
            (
                inbox_id,
                retention_seconds,
                reason,
                now,
            ),
        )

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
        self._conn.execute(
            Q["declare_inbox"],
            (name, codec, apply, retention_seconds, tombstone_seconds, int(fenced)),
        )
        row = self._one("get_inbox", (name,))
        assert row is not None
        return _inbox(row)

    def inboxes(self) -> list[InboxRow]:
        return [_inbox(row) for row in self._all("inboxes")]

    # -- leases --------------------------------------------------------------------------
    def next_token(self) -> int:
        row = self._one("next_token")
        assert row is not None
        return int(row[0])

    def put_lease(
        self, inbox_id: int, scope: str, token: int, now: float, expires_at: float
    ) -> None:
        self._conn.execute(Q["put_lease"], (inbox_id, scope, token, now, expires_at))

    def get_lease(self, inbox_id: int, scope: str) -> LeaseRow | None:
        row = self._one("get_lease", (inbox_id, scope))
        return LeaseRow(*row) if row else None

    def list_leases(self, inbox_id: int) -> list[LeaseRow]:
        return [LeaseRow(*row) for row in self._all("list_leases", (inbox_id,))]

    def release_lease(self, inbox_id: int, scope: str, token: int, now: float) -> bool:
        self._conn.execute(Q["release_lease"], (now, inbox_id, scope, token))
        return bool(self._conn.changes())

    # -- the log -------------------------------------------------------------------------
    def log_head(self) -> LogEntry | None:
        row = self._one("log_head")
        return LogEntry(*row) if row else None

    def append_log(self, entry: LogEntry) -> None:
        self._conn.execute(Q["append_log"], (entry.seq, entry.step, entry.state, entry.hash))

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
        self._conn.executemany(Q["put_merkle_node"], nodes)

    def unsealed_records(self, limit: int) -> list[RecordRow]:
        return [RecordRow(*row) for row in self._all("unsealed_records", (limit,))]

    def mark_sealed(self, record_id: int, seq: int) -> None:
        self._conn.execute(Q["mark_sealed"], (seq, record_id))

    def queue_log(self, step: str, state: str, record_id: int | None) -> int:
        row = self._one("queue_log", (step, state, record_id))
        assert row is not None
        return int(row[0])

    def pending_log(self, limit: int) -> list[PendingEvent]:
        return [PendingEvent(*row) for row in self._all("pending_log", (limit,))]

    def drop_pending(self, event_id: int) -> None:
        self._conn.execute(Q["drop_pending"], (event_id,))

    def lock_sealer(self) -> SealerRow:
        # BEGIN IMMEDIATE already holds the one write lock: nothing more to take.
        row = self._one("lock_sealer")
        assert row is not None
        return SealerRow(*row)

    def set_sealer(self, token: int, holder: str | None, expires_at: float) -> None:
        self._conn.execute(Q["set_sealer"], (token, holder, expires_at))

    def meta(self, key: str) -> str | None:
        row = self._one("meta", (key,))
        return str(row[0]) if row else None

    def record_seals(self) -> list[tuple[int, int | None]]:
        return [(int(i), s) for i, s in self._all("record_seals")]

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in self._conn.execute(sql, params)]


class SQLiteStore:
    """An oncebox store in one SQLite file (or in memory, for tests and demos)."""

    def __init__(self, path: str, clock: Callable[[], float] | None = None) -> None:
        check_sqlite_version(apsw.sqlite_lib_version())
        self.path = path
        self.url = f"sqlite:///{path}"
        self._clock = clock or time.time
        self._local = threading.local()
        self._connections: list[apsw.Connection] = []
        self._lock = threading.Lock()
        self._memory = path == ":memory:"
        if self._memory:
            # One private in-memory database shared by this store's connections (the
            # memdb VFS shares a "/name" between connections of one process, with locking).
            self._uri = f"file:/oncebox-{uuid.uuid4().hex}?vfs=memdb"
        self._migrate()

    def now(self) -> float:
        return float(self._clock())

    def _connect(self) -> apsw.Connection:
        existing: apsw.Connection | None = getattr(self._local, "conn", None)
        if existing is not None:
            return existing
        try:
            if self._memory:
                flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE | apsw.SQLITE_OPEN_URI
                conn = apsw.Connection(self._uri, flags=flags)
            else:
                conn = apsw.Connection(self.path)
            conn.set_busy_timeout(BUSY_TIMEOUT_MS)
            if not self._memory:
                mode = conn.execute("PRAGMA journal_mode=WAL").get
                if str(mode).lower() != "wal":
                    raise StorageError(f"{self.path}: cannot switch to WAL (got {mode})")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
        except apsw.Error as exc:
            raise _storage_error(exc) from exc
        self._local.conn = conn
        with self._lock:
            self._connections.append(conn)
        return conn

    def transaction(self) -> AbstractContextManager[SQLiteTx]:
        return self._transaction("BEGIN IMMEDIATE")

    def atomic(self, work: Callable[[Tx], T]) -> T:
        # SQLite has one writer and BEGIN IMMEDIATE takes its lock up front, so there
        # is no deadlock or serialization failure to retry; busy waits are handled by
        # the busy timeout and surface as StorageUnavailable.
        with self.transaction() as tx:
            return work(tx)

    def reading(self) -> AbstractContextManager[SQLiteTx]:
        # A deferred transaction: one consistent snapshot that never takes the write lock.
        return self._transaction("BEGIN DEFERRED")

    @contextmanager
    def _transaction(self, begin: str) -> Iterator[SQLiteTx]:
        conn = self._connect()
        try:
            conn.execute(begin)
        except apsw.Error as exc:
            raise _storage_error(exc) from exc
        try:
            yield SQLiteTx(conn, self._clock)
        except BaseException as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            # A driver error may arrive wrapped (an apply step's ApplyError).
            cause = exc if isinstance(exc, apsw.Error) else exc.__cause__
            if isinstance(cause, apsw.Error):
                raise _storage_error(cause) from exc
            raise
        try:
            conn.execute("COMMIT")
        except apsw.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise _storage_error(exc) from exc

    def _migrate(self) -> None:
        """Bring the schema up to date, each migration recorded in its own transaction."""
        conn = self._connect()
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_version "
                "(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
            )
            for version, sql in load_migrations("sqlite"):
                conn.execute("BEGIN IMMEDIATE")
                try:
                    done = conn.execute(
                        "SELECT 1 FROM schema_version WHERE version = ?", (version,)
                    ).get
                    if not done:
                        conn.execute(sql)
                        conn.execute(
                            "INSERT INTO schema_version VALUES (?, ?)", (version, self.now())
                        )
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
        except apsw.Error as exc:
            raise _storage_error(exc) from exc

    def schema_version(self) -> int:
        return int(self._connect().execute("SELECT max(version) FROM schema_version").get or 0)

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()
