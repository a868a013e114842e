"""The PostgreSQL store, through psycopg 3 and a connection pool.

Why it is safe under many processes on many hosts:
- Uniqueness lives in constraints (one record per identity, one open quarantine row per
  newcomer, one lease per scope, one claim token per key), so no interleaving of clients can
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
- A write transaction runs in pipeline mode (:mod:`oncebox.store.pgtx`): a decision in
  three round trips with the seal that follows it, whatever the batch's size.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, NamedTuple

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool, PoolTimeout

from oncebox.errors import (
    ApplyError,
    RetryTransaction,
    StorageError,
    StorageUnavailable,
)
from oncebox.store import pgarrays
from oncebox.store.base import T, Tx
from oncebox.store.migrate import check_current, migrate, migrate_step
from oncebox.store.pgerrors import (
    RETRYABLE,
    ROLLED_BACK,
    Retry,
    Stale,
    commit_done,
    driver_error,
    storage_error,
    store_failed,
)
from oncebox.store.pgreach import reach
from oncebox.store.pgtx import PostgresTx, lost_identity

RETRIES = 20
MIGRATION_LOCK = 0x0_0CEB_0C5  # pg_advisory_xact_lock key: one migrator at a time
SCANNERS = 4  # connections of scans (listings, searches), apart from the writers' pool
IDLE = TransactionStatus.IDLE
READ_COMMITTED = "BEGIN ISOLATION LEVEL READ COMMITTED"
IDLE_CHECK = 2.0  # seconds a pooled connection may rest before it is checked again
# Which server run a connection reached (see PostgresStore._note_server), and its level.
SERVER_RUN = (
    "SELECT pg_postmaster_start_time(), current_setting('synchronous_commit'), "
    "(SELECT stats_reset FROM pg_stat_bgwriter)"
)
READ_ONLY_OPTION = "-c default_transaction_read_only=on"  # added to the URL's options
# Sent after a transaction in which a user's SQL ran: a session-wide SET of its (say
# synchronous_commit = off) must not reach the pooled connection's next transactions.
RESET_SESSION = "RESET ALL"


def _with_option(url: str, option: str) -> str:
    """The connection options ``url`` gives (else libpq's PGOPTIONS), and ``option``:
    options given as a keyword replace the URL's whole (a search_path naming the
    store's schema among them)."""
    given = conninfo_to_dict(url).get("options") or os.environ.get("PGOPTIONS")
    return f"{given} {option}" if given else option


class Carried(NamedTuple):
    """A seal's transaction opened with the commit before it, waiting on its thread."""

    conn: psycopg.Connection[Any]
    tx: PostgresTx


def _mapped(exc: Exception, lost: bool, reading: bool = False) -> Exception:
    """What a transaction's failure means to its caller. A driver error may arrive
    wrapped (an apply step's ApplyError). Where the store failed under the step (a lost
    connection, a deadlock), the driver's verdict on the transaction is what counts;
    where only the step's own statement failed (a constraint it broke, a bad value), the
    step did."""
    cause = driver_error(exc)
    if isinstance(cause, RETRYABLE):
        return Retry(str(cause))
    if cause is not None and lost_identity(cause):
        # A concurrent writer inserted one of the batch's identities first (the insert
        # waited for its commit): decide the batch again against its row.
        return RetryTransaction("an identity of this batch was inserted meanwhile")
    if lost:  # the connection died before its COMMIT went out: nothing committed
        return Stale(str(cause))
    if cause is not None and (not isinstance(exc, ApplyError) or store_failed(cause)):
        return storage_error(cause, reading)
    return exc


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
        self._levels: weakref.WeakKeyDictionary[psycopg.Connection[Any], str] = (
            weakref.WeakKeyDictionary()
        )
        self._relaxed = threading.local()
        # The Merkle tree's right edge each connection's last committed append left (the
        # memo of engine/log.py, checked against the log's head before any use).
        self._edges: weakref.WeakKeyDictionary[psycopg.Connection[Any], Any] = (
            weakref.WeakKeyDictionary()
        )
        self._carry = threading.local()  # a seal's transaction opened with a commit
        # When each writer connection was last given back: one back a moment ago is not
        # checked again (a check is a round trip of its own, on every transaction).
        self._returned: weakref.WeakKeyDictionary[psycopg.Connection[Any], float] = (
            weakref.WeakKeyDictionary()
        )
        self._scanners: ConnectionPool[psycopg.Connection[Any]] | None = None
        self._scan_lock = threading.Lock()
        reach(url)
        # Read only: every transaction of every connection is READ ONLY, so the server
        # itself refuses a write, and the schema is checked instead of migrated.
        self._connect_with: dict[str, Any] = {"autocommit": True}
        if read_only:
            self._connect_with["options"] = _with_option(url, READ_ONLY_OPTION)
        try:
            self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
                url,
                min_size=1,
                max_size=pool_size,
                open=True,
                timeout=30,
                kwargs=self._connect_with,
                check=self._check,
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
        self,
        begin: str,
        pool: ConnectionPool[psycopg.Connection[Any]] | None = None,
        reading: bool = False,
    ) -> Iterator[PostgresTx]:
        try:
            with self._begun(pool or self._pool, begin) as conn:
                try:
                    tx = self._tx(conn)
                    tx.guards = not reading
                    yield tx
                    tx.before_commit()
                except BaseException:
                    if not conn.closed:
                        conn.execute("ROLLBACK")
                    raise
                done = commit_done(conn.execute("COMMIT"))
                if tx.users_sql:
                    conn.execute(RESET_SESSION)
                if not done:
                    raise StorageError(ROLLED_BACK)
        except Exception as exc:
            mapped = _mapped(exc, lost=False, reading=reading)
            if mapped is exc:
                raise
            raise mapped from exc

    @contextmanager
    def _begun(
        self, pool: ConnectionPool[psycopg.Connection[Any]], begin: str
    ) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection with ``begin`` sent. One that died while it rested (the
        server restarted since its last use) fails at that BEGIN, before anything of the
        caller's ran on it: the pool drops it and the next one is tried, as many times as
        the pool holds connections, so that a read after a restart does not fail once."""
        for attempt in range(pool.max_size + 1):
            with pool.connection() as conn:
                self._returned[conn] = time.monotonic()  # back in a moment
                try:
                    conn.execute(begin)
                except psycopg.OperationalError:
                    if conn.broken and attempt < pool.max_size:
                        continue
                    raise
                yield conn
                return

    @contextmanager
    def _piped(self) -> Iterator[PostgresTx]:
        """A write transaction in pipeline mode (:mod:`oncebox.store.pgtx`): its BEGIN
        and COMMIT go out with the statements around them. Inside :meth:`sealing_next`,
        a relaxed commit that a seal must follow opens that seal's transaction in the
        same turn (its reads included), and the next one here takes it up."""
        carried: Carried | None = self._carry.__dict__.pop("tx", None)
        try:
            conn = carried.conn if carried is not None else self._pool.getconn()
        except PoolTimeout as exc:  # every connection busy, or the server not back yet
            raise storage_error(exc) from exc
        kept = False
        committed: psycopg.Cursor[Any] | None = None
        follow: Callable[[], None] | None = None
        try:
            with contextlib.ExitStack() as piping:
                pipe = piping.enter_context(conn.pipeline())
                if carried is None:
                    conn.execute(READ_COMMITTED)
                    tx = self._tx(conn, pipe)
                else:
                    tx = carried.tx
                    tx._pipe = pipe
                tx._leave = piping.close  # for SQL of a user's own that must run apart
                yield tx
                tx.before_commit()
                committed = conn.execute("COMMIT")
                if tx.users_sql:  # with the commit, in the same round trip
                    conn.execute(RESET_SESSION)
                if self._carry.__dict__.pop("wanted", False) and tx.deferred and not tx.relaxed:
                    conn.execute(READ_COMMITTED)
                    opened = self._tx(conn)  # its answers taken below
                    follow = opened.read_for_seal()
            if not commit_done(committed):
                raise StorageError(ROLLED_BACK)
            if tx.log_edge is not None:  # committed: its append's edge is the log's now
                self._edges[conn] = tx.log_edge
            if follow is not None:
                follow()
                self._carry.tx, kept = Carried(conn, opened), True  # kept for the seal
        except BaseException as exc:
            lost = committed is None and conn.broken
            if not conn.closed and conn.info.transaction_status != IDLE:
                # Not a ROLLBACK statement: rollback() also forgets the statements psycopg
                # believes prepared, which a failed pipeline may have left unprepared.
                conn.rollback()
            if not commit_done(committed):
                mapped = _mapped(exc, lost) if isinstance(exc, Exception) else exc
                if mapped is exc:
                    raise
                raise mapped from exc
            # Committed; only the seal's reads after it failed: the seal begins anew.
        finally:
            if not kept:
                self._returned[conn] = time.monotonic()
                self._pool.putconn(conn)

    @contextmanager
    def sealing_next(self) -> Iterator[None]:
        """Around a relaxed commit and the seal that follows it (engine/durability.py):
        the seal's transaction and first reads ride with the commit."""
        self._carry.wanted = True
        try:
            yield
        finally:
            self._carry.wanted = False
            carried: Carried | None = self._carry.__dict__.pop("tx", None)
            if carried is not None:  # no seal came (counts only, or a failure): let go
                with contextlib.suppress(psycopg.Error):
                    carried.conn.rollback()
                self._returned[carried.conn] = time.monotonic()
                self._pool.putconn(carried.conn)

    @contextmanager
    def transaction(self) -> Iterator[PostgresTx]:
        """A write transaction that is not retried: a deadlock surfaces as the retryable
        :class:`StorageUnavailable`. Use :meth:`atomic` to have it retried here."""
        try:
            with self._transaction(READ_COMMITTED) as tx:
                yield tx
        except Retry as exc:
            raise StorageUnavailable(f"a conflicting transaction won: {exc}") from exc

    def reading(self) -> AbstractContextManager[PostgresTx]:
        # One snapshot for the whole read, so a view never mixes two states.
        return self._transaction("BEGIN ISOLATION LEVEL REPEATABLE READ", reading=True)

    @contextmanager
    def scanning(self, budget: float | None = None) -> Iterator[PostgresTx]:
        """A read-only snapshot on a pool of its own: however many listings and
        searches run, none takes a connection a writer waits for; with ``budget``, a
        statement_timeout stops each statement past it."""
        begin = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
        with self._transaction(begin, self._scan_pool(), reading=True) as tx:
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

    def _check(self, conn: psycopg.Connection[Any]) -> None:
        """Check a connection that rested a while; one that died since its last use
        anyway fails its first turn, before its COMMIT, and the work runs again (Stale)."""
        if time.monotonic() - self._returned.get(conn, -IDLE_CHECK) >= IDLE_CHECK:
            ConnectionPool.check_connection(conn)

    def _note_server(self, conn: psycopg.Connection[Any]) -> None:
        """On each new connection: the server run it reached, its own synchronous_commit
        (what a transaction begun relaxed goes back to), and the typed columns a batch's
        arrays travel as (store/pgarrays.py).

        A server run is the postmaster's start time and the time its shared statistics
        were last reset. A backend that dies by a signal has the postmaster take the
        whole server through crash recovery without restarting itself: the WAL still in
        shared memory (a relaxed commit's) is thrown away, and so are the statistics,
        whose reset time is then new, while the start time stays. (A reset asked for by
        hand makes a new run too: a batch then fails once instead of being acked.)"""
        pgarrays.register(conn)
        row = conn.execute(SERVER_RUN).fetchone()
        self._servers[conn] = (row[0], row[2]) if row else None
        self._levels[conn] = str(row[1]) if row else "on"

    def _tx(
        self, conn: psycopg.Connection[Any], pipe: psycopg.Pipeline | None = None
    ) -> PostgresTx:
        tx = PostgresTx(conn, self._clock, pipe, level=self._levels.get(conn, "on"))
        memo = self._edges.get(conn)
        if memo is not None:  # a copy: an append that fails must leave the memo as it was
            seq, last_hash, edge = memo
            tx.log_edge = (seq, last_hash, dict(edge))
        return tx

    def _covered(self, server: Any, durable: bool) -> None:
        """After a commit: a durable commit makes an earlier relaxed one durable only on
        the same server run. A server that restarted in between, or went through crash
        recovery, may have lost the relaxed commit with its unflushed WAL, so nothing of
        it may be acknowledged."""
        if not durable:
            self._relaxed.server = server
            return
        pending = getattr(self._relaxed, "server", None)
        self._relaxed.server = None
        if pending is not None and pending != server:
            raise StorageUnavailable(
                "PostgreSQL restarted (or recovered from a crash) after a commit that was "
                "not yet durable; it may be lost, so nothing was acknowledged: deliver again"
            )

    def atomic(self, work: Callable[[Tx], T], durable: bool = True) -> T:
        stale = 0
        for attempt in range(RETRIES):
            try:
                with self._piped() as tx:
                    if not durable:
                        tx.relax_durability()
                    result = work(tx)
                    server = self._servers.get(tx._conn)
                if not tx.relaxed:  # counts only: a restart may lose them, nothing to cover
                    # Begun relaxed, it commits durably all the same where it took the log.
                    self._covered(server, not tx.deferred)
                return result
            except Stale as exc:
                # Each dead connection is dropped by the pool; a server that is down
                # fails the next one's connect instead.
                stale += 1
                if stale > self._pool.max_size:
                    raise StorageUnavailable(f"PostgreSQL connection lost: {exc}") from exc
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
