"""The PostgreSQL store, through psycopg 3 and a connection pool.

Why it is safe under many processes on many hosts:
- Uniqueness lives in constraints (one record per identity, one newcomer per quarantine
  row, one lease per scope, one claim token per key), so no interleaving of clients can
  break I1. A writer that loses a race for an identity waits for the winner's commit
  and then decides again, against the winner's row.
- Transactions run at READ COMMITTED: each statement sees what committed before it. The
  decisions that must not interleave take row locks: the lease a delivery is fenced by
  (``FOR SHARE``), a work key being claimed or completed (``FOR UPDATE``, claims with
  ``SKIP LOCKED``), and the sealer row (``FOR UPDATE``), which is the log's only writer.
- Deadlocks and serialization failures roll the whole transaction back; :meth:`atomic`
  runs it again from the start, a bounded number of times.
- A lost connection raises :class:`StorageUnavailable`; the transaction never
  committed, so the caller retries and gets the verdict the committed state implies.
- The server clock is the database's ``clock_timestamp()``, never a client host's, so
  hosts with skewed clocks agree on every lease decision.
"""

from __future__ import annotations

import random
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool, PoolTimeout

from oncebox.domain import Newcomer, NewRecord
from oncebox.errors import (
    ApplyError,
    RetryTransaction,
    StorageUnavailable,
)
from oncebox.store.base import T, Tx
from oncebox.store.migrate import check_current, migrate, migrate_step
from oncebox.store.pgerrors import RETRYABLE, Retry, driver_error, storage_error, store_failed
from oncebox.store.pgreach import reach
from oncebox.store.sqlfile import Query, load_queries
from oncebox.store.sqltx import Params, SqlTx, Statement

Q = load_queries("postgres")


def _query(statement: Statement) -> Query:
    """A statement: the store's own by name, or an apply step's :class:`Query`."""
    return Q[statement] if isinstance(statement, str) else statement


def _sql(statement: Statement) -> str:
    return _query(statement).sql


def _columnar(statement: Statement) -> bool:
    """Whether it takes a whole batch as column arrays (see queries.sql)."""
    return _query(statement).columnar


RETRIES = 20
MIGRATION_LOCK = 0x0_0CEB_0C5  # pg_advisory_xact_lock key: one migrator at a time
SCANNERS = 4  # connections of scans (listings, searches), apart from the writers' pool


class PostgresTx(SqlTx):
    """The store interface over one connection inside one transaction."""

    dialect = "postgres"

    def __init__(self, conn: psycopg.Connection[Any], clock: Callable[[], float] | None) -> None:
        self._conn = conn
        self._clock = clock
        # Its commit will not wait for the WAL flush / nor need a durable one to cover it.
        self.deferred = self.relaxed = False

    def relax(self) -> bool:
        """Counts only: a server restart may lose them, so nothing need cover the commit."""
        if not self.deferred:
            self._run("defer_durability")
        self.deferred = self.relaxed = True
        return True

    def now(self) -> float:
        if self._clock is not None:
            return float(self._clock())
        return float(self._one("now")[0])

    def _described(self, name: Statement, params: Params = ()) -> tuple[Sequence[str], list[Any]]:
        cursor = self._conn.execute(_sql(name), params)
        if cursor.description is None:
            return (), []
        return [column.name for column in cursor.description], cursor.fetchall()

    def _one(self, name: Statement, params: Params = ()) -> Any:
        return self._conn.execute(_sql(name), params).fetchone()

    def _all(self, name: Statement, params: Params = ()) -> list[Any]:
        return self._conn.execute(_sql(name), params).fetchall()

    def _run(self, name: Statement, params: Params = ()) -> int:
        return self._conn.execute(_sql(name), params).rowcount

    def _many(self, name: Statement, rows: Sequence[Sequence[Any]]) -> int:
        if not rows:
            return 0
        if _columnar(name):
            columns = [list(column) for column in zip(*rows, strict=True)]
            return max(self._conn.execute(_sql(name), columns).rowcount, 0)
        with self._conn.cursor() as cur:
            cur.executemany(_sql(name), rows)
            return max(cur.rowcount, 0)

    def _many_rows(self, name: Statement, rows: Sequence[Sequence[Any]]) -> list[Any]:
        if not rows:
            return []
        if _columnar(name):
            # One statement for the batch: one array per column.
            columns = [list(column) for column in zip(*rows, strict=True)]
            cur = self._conn.execute(_sql(name), columns)
            return cur.fetchall() if cur.description else []
        found: list[Any] = []
        with self._conn.cursor() as cur:
            cur.executemany(_sql(name), rows, returning=True)
            while True:
                if cur.description:
                    found += cur.fetchall()
                if not cur.nextset():
                    return found

    def insert_records(self, inbox_id: int, records: Sequence[NewRecord], now: float) -> int:
        try:
            return super().insert_records(inbox_id, records, now)
        except pg_errors.UniqueViolation:
            # A concurrent writer inserted one of these identities first (the statement
            # waited for its commit): decide the batch again against its row. Not
            # chained: the driver error would otherwise decide what the caller sees.
            raise RetryTransaction("an identity of this batch was inserted meanwhile") from None

    def quarantine(
        self, inbox_id: int, newcomers: Sequence[Newcomer], reason: str, now: float
    ) -> list[tuple[int, bool]]:
        # In (identity, witness) order: concurrent batches that share newcomers wait on
        # each other's rows in one order, so they queue instead of deadlocking.
        order = sorted(
            range(len(newcomers)), key=lambda i: (newcomers[i].ident, newcomers[i].witness)
        )
        kept = super().quarantine(inbox_id, [newcomers[i] for i in order], reason, now)
        placed: list[tuple[int, bool]] = [(0, False)] * len(newcomers)
        for i, row in zip(order, kept, strict=True):
            placed[i] = row
        return placed

    def lock_identities(
        self, inbox_id: int, idents: Sequence[bytes], exclusive: bool = False
    ) -> None:
        # One advisory lock per inbox: deciders take it shared, so they never queue for
        # each other here; adjudication takes it exclusive, so no resend decides against
        # a record while it is being revised (it waits for the batches in flight, and
        # the server queues new ones behind it). Deciders cannot deadlock on each other
        # without identity locks: what two of them can wait on each other for, they
        # write in one order (new records in identity order, quarantine rows, duplicate
        # counts, generations and verdict counters sorted, each kind at the same point
        # of the transaction). One that meets an identity another uncommitted batch is
        # inserting waits for that commit, then decides again against the row
        # (RetryTransaction). Locking the identities themselves (before: 1,024 hashed
        # buckets, exclusive) made any two batches of a thousand deliveries share a
        # bucket, so concurrent writers ran one at a time.
        if idents:
            self._run("lock_inbox" if exclusive else "lock_inbox_shared", (inbox_id,))

    def _remember_dropped(self, record_id: int) -> None:
        """Nothing to remember: the identity sequence never goes back."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cur = self._conn.execute(sql, params)
        return [tuple(row) for row in cur.fetchall()] if cur.description else []

    def script(self, sql: str) -> None:
        self._conn.execute(sql)  # no parameters: psycopg leaves a literal % alone


class PostgresStore:
    """An oncebox store in one PostgreSQL database, shared by any number of processes."""

    dialect = "postgres"
    single_writer = False  # many writers at once: the sealer stays off their path
    relaxes_late = True  # SET LOCAL synchronous_commit holds until the commit

    def __init__(
        self,
        url: str,
        clock: Callable[[], float] | None = None,
        pool_size: int = 8,
        read_only: bool = False,
    ) -> None:
        self.url = url
        # Only tests and demos pass a clock; otherwise the database's clock decides.
        self._clock = clock
        # Which server run each connection talks to, and, per thread, the run a relaxed
        # commit (durable=False) went to and that no durable commit has covered yet.
        self._servers: weakref.WeakKeyDictionary[psycopg.Connection[Any], Any] = (
            weakref.WeakKeyDictionary()
        )
        self._relaxed = threading.local()
        self._scanners: ConnectionPool[psycopg.Connection[Any]] | None = None
        self._scan_lock = threading.Lock()
        # Read only: every transaction of every connection is READ ONLY, so the server
        # itself refuses a write, and the schema is checked instead of migrated.
        self._connect_with: dict[str, Any] = {"autocommit": True}
        if read_only:
            self._connect_with["options"] = "-c default_transaction_read_only=on"
        reach(url)
        try:
            self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
                url,
                min_size=1,
                max_size=pool_size,
                open=True,
                timeout=30,
                kwargs=self._connect_with,
                check=ConnectionPool.check_connection,
                configure=self._note_server,
            )
            self._pool.wait(timeout=30)
        except (psycopg.Error, PoolTimeout) as exc:
            raise storage_error(exc) from exc
        try:
            if read_only:  # checked, never migrated: reading changes nothing
                check_current(self.reading, self.dialect, "the database")
            else:
                self._migrate()
        except BaseException:
            self._pool.close()
            raise

    def now(self) -> float:
        if self._clock is not None:
            return float(self._clock())
        with self.reading() as tx:
            return tx.now()

    @contextmanager
    def _transaction(
        self, begin: str, pool: ConnectionPool[psycopg.Connection[Any]] | None = None
    ) -> Iterator[PostgresTx]:
        try:
            with (pool or self._pool).connection() as conn:
                conn.execute(begin)
                try:
                    yield PostgresTx(conn, self._clock)
                except BaseException:
                    if not conn.closed:
                        conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
        except Exception as exc:
            # A driver error may arrive wrapped (an apply step's ApplyError). Where the
            # store failed under the step (a lost connection, a deadlock), the driver's
            # verdict on the transaction is what counts; where only the step's own
            # statement failed (a constraint it broke, a bad value), the step did.
            cause = driver_error(exc)
            if isinstance(cause, RETRYABLE):
                raise Retry(str(cause)) from exc
            if cause is not None and (not isinstance(exc, ApplyError) or store_failed(cause)):
                raise storage_error(cause) from exc
            raise

    @contextmanager
    def transaction(self) -> Iterator[PostgresTx]:
        """A write transaction that is not retried: a deadlock surfaces as the retryable
        :class:`StorageUnavailable`. Use :meth:`atomic` to have it retried here."""
        try:
            with self._transaction("BEGIN ISOLATION LEVEL READ COMMITTED") as tx:
                yield tx
        except Retry as exc:
            raise StorageUnavailable(f"a conflicting transaction won: {exc}") from exc

    def reading(self) -> AbstractContextManager[PostgresTx]:
        # One snapshot for the whole read, so a view never mixes two states.
        return self._transaction("BEGIN ISOLATION LEVEL REPEATABLE READ")

    @contextmanager
    def scanning(self, budget: float | None = None) -> Iterator[PostgresTx]:
        """A read-only snapshot on a pool of its own: however many listings and
        searches run, none takes a connection a writer waits for; with ``budget``, a
        statement_timeout stops each statement past it."""
        begin = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
        with self._transaction(begin, self._scan_pool()) as tx:
            if budget is not None:
                tx._conn.execute(f"SET LOCAL statement_timeout = {max(1, int(budget * 1000))}")
            yield tx

    def _scan_pool(self) -> ConnectionPool[psycopg.Connection[Any]]:
        with self._scan_lock:
            if self._scanners is None:
                try:
                    self._scanners = ConnectionPool(
                        self.url,
                        min_size=0,
                        max_size=SCANNERS,
                        open=True,
                        timeout=30,
                        kwargs=self._connect_with,
                        check=ConnectionPool.check_connection,
                    )
                except (psycopg.Error, PoolTimeout) as exc:
                    raise storage_error(exc) from exc
            return self._scanners

    def _note_server(self, conn: psycopg.Connection[Any]) -> None:
        """On each new connection: the start time of the server run it reached."""
        row = conn.execute("SELECT pg_postmaster_start_time()").fetchone()
        self._servers[conn] = row[0] if row else None

    def _covered(self, server: Any, durable: bool) -> None:
        """After a commit: a durable commit makes an earlier relaxed one durable only on
        the same server run. A server that restarted in between may have lost the
        relaxed commit with its unflushed WAL, so nothing of it may be acknowledged."""
        if not durable:
            self._relaxed.server = server
            return
        pending = getattr(self._relaxed, "server", None)
        self._relaxed.server = None
        if pending is not None and pending != server:
            raise StorageUnavailable(
                "PostgreSQL restarted after a commit that was not yet durable; it may be "
                "lost, so nothing was acknowledged: deliver again"
            )

    def atomic(self, work: Callable[[Tx], T], durable: bool = True) -> T:
        for attempt in range(RETRIES):
            try:
                with self._transaction("BEGIN ISOLATION LEVEL READ COMMITTED") as tx:
                    if not durable:
                        tx._run("defer_durability")
                        tx.deferred = True
                    result = work(tx)
                    server = self._servers.get(tx._conn)
                if not tx.relaxed:  # counts only: a restart may lose them, nothing to cover
                    self._covered(server, durable)
                return result
            except (Retry, RetryTransaction):
                # Both sides of a deadlock retry; jitter keeps them from meeting again.
                time.sleep(random.uniform(0, min(0.25, 0.005 * 2**attempt)))
            except BaseException:
                if durable:  # its caller acknowledges nothing: no relaxed commit to cover
                    self._relaxed.server = None
                raise
        raise StorageUnavailable(f"gave up after {RETRIES} conflicting attempts; retry later")

    @contextmanager
    def _migrating(self) -> Iterator[PostgresTx]:
        """A write transaction under the migration lock: one migrator at a time."""
        with self.transaction() as tx:
            tx._run("lock_migrations", (MIGRATION_LOCK,))
            yield tx

    def _migrate(self) -> None:
        """Make a new store's schema, or bring this one's up to date."""
        migrate(self._migrating, self.dialect, time.time)

    def ensure_schema(self, owner: str, migrations: Sequence[tuple[int, str]]) -> None:
        """An apply step's migrations, each once, recorded per step (under the migration
        lock, so that processes declaring the same inbox at once apply them once)."""
        migrate_step(self._migrating, self.dialect, owner, migrations, time.time)

    def schema_version(self) -> int:
        with self.reading() as tx:
            row = tx._conn.execute("SELECT max(version) FROM schema_version").fetchone()
            return int(row[0]) if row else 0

    def close(self) -> None:
        with self._scan_lock:
            if self._scanners is not None:
                self._scanners.close()
        self._pool.close()
