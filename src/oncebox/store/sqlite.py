"""The SQLite store, through APSW.

APSW rather than the standard ``sqlite3`` module: it bundles a current SQLite, and the
library these machines link (3.40.1) has the WAL-reset corruption bug (3.7.0 through
3.51.2) that strikes when several connections write or checkpoint one file at once,
which is how oncebox runs (ingesters, sealer, workers). We refuse affected versions.

Durability: WAL with ``synchronous=FULL`` so a commit that returned survives power loss;
every write transaction is ``BEGIN IMMEDIATE`` so it takes the write lock up front and
never fails half-way on a lock upgrade. One connection per thread, never shared.

A transaction that writes nothing but counts (a duplicate's) may commit at
``synchronous=NORMAL`` (``atomic(..., durable=False)``): in WAL mode its frames reach the
WAL file at commit, so a process crash loses nothing, and only a power cut before the
next flush (any later FULL commit's, or a checkpoint's, on any connection: they sync the
whole WAL) can take them back. SQLite will not change the level inside a transaction,
so such a transaction begins relaxed, and its work refuses
(:class:`~oncebox.store.base.WrongLevel`) before writing anything else.

What the disk and the kernel cost (docs/operations.md#sqlite-io):
each connection's page cache holds ``cache_mb`` MiB, enough that a batch's dirty pages
never spill into the WAL before its commit (a spilled page is written twice and read
back); and the writer whose commit takes the WAL past ``wal_autocheckpoint`` pages copies
it into the database (the fewer checkpoints, the fewer copies of a page many commits
write, at two fsyncs each). Neither changes what a commit syncs.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager

import apsw

from oncebox.errors import (
    ApplyError,
    ConfigError,
    ReadTimedOut,
    RetryTransaction,
    StorageError,
    StorageUnavailable,
    UnsafeSQLite,
)
from oncebox.store.base import T, Tx
from oncebox.store.migrate import check_current, migrate, migrate_step
from oncebox.store.sqlitetx import SQLiteTx

BUSY_TIMEOUT_MS = 30_000
SCAN_STEPS = 1000  # virtual machine steps between a scan's looks at its deadline
RETRIES = 5
# NORMAL is not power-safe in WAL mode; it is accepted only for the power-loss harness's
# negative control.
SYNCHRONOUS_MODES = ("FULL", "EXTRA", "NORMAL")
# Each connection's page cache, at most (SQLite's own default is 2 MiB: a batch of 1,000
# new records into a store of 100,000 dirties more pages than that, which SQLite then
# spills into the WAL mid-transaction, to write again and read back).
CACHE_MB = 16
# WAL pages past which a commit checkpoints: SQLite's own 1,000 (a WAL near 4 MiB), set
# on every connection all the same, since a URL may change it. Not more by default: a
# longer WAL saves a batch few checkpoints, and cost single deliveries time (the
# frames of a page every commit changes probe past one another in the WAL's hash
# table; bench/README.md, "What the disk and the kernel cost").
WAL_AUTOCHECKPOINT = 1000
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


def _busy_handler() -> Callable[[int], bool]:
    """Wait for the write lock in fine steps, up to the timeout.

    SQLite's own busy timeout sleeps in steps that grow to 100 ms, so a writer can sleep
    long after the lock came free; several workers then queue far longer than the lock
    is held. Polling every fraction of a millisecond keeps the wait near the hold time.
    """
    deadline: list[float] = []

    def busy(tries: int) -> bool:
        if tries == 0:
            deadline[:] = [time.monotonic() + BUSY_TIMEOUT_MS / 1000]
        if time.monotonic() >= deadline[0]:
            return False
        time.sleep(0.0002 if tries < 1000 else 0.002)
        return True

    return busy


def _positive(name: str, value: int | str) -> int:
    """A whole number of at least 1 (a URL gives it as text): no cache at all, or a WAL
    that is never checkpointed and grows without end, is not a setting oncebox offers."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise ConfigError(f"{name} must be a whole number of at least 1, not {value!r}")
    return number


_STORE_FAILURES = (
    apsw.BusyError,
    apsw.LockedError,
    apsw.FullError,
    apsw.IOError,
    apsw.CantOpenError,
    apsw.CorruptError,
    apsw.NoMemError,
)


def _store_failed(exc: apsw.Error) -> bool:
    """Whether the store failed, rather than a statement an apply step ran (a
    constraint it broke, a value of the wrong type, SQL of its own that is wrong)."""
    return isinstance(exc, _STORE_FAILURES)


def _storage_error(exc: apsw.Error) -> StorageError:
    """The one place SQLite errors become oncebox errors."""
    if isinstance(exc, apsw.InterruptError):  # only a scan's budget interrupts
        return ReadTimedOut()
    if isinstance(exc, apsw.BusyError | apsw.LockedError):
        return StorageUnavailable(f"SQLite is busy: {exc}")
    if isinstance(exc, apsw.FullError | apsw.IOError | apsw.CantOpenError):
        return StorageUnavailable(f"SQLite cannot write: {exc}")
    return StorageError(f"SQLite failed: {exc}")


def _rolled_back() -> StorageError:
    """What a transaction that SQLite rolled back by itself while its work ran becomes."""
    return StorageError(
        "SQLite rolled the transaction back while it ran (after an error inside it, which "
        "an apply step may have caught): nothing of it was kept; retry it"
    )


class _Session:
    """One thread's connection, its cursor for whole statements (begin, commit, SqlTx's),
    the level its next transaction begins at, and a transaction object for each level:
    a :class:`SQLiteTx` keeps nothing of one transaction for the next, so each thread
    makes its two once instead of one per transaction.

    ``working`` is true while a transaction's work runs: then no commit but the store's
    own may happen (:meth:`veto`, the connection's commit hook). SQLite rolls a whole
    transaction back by itself on some errors; were one caught and the work carried on
    (an apply step's ``except``), each statement after it would run, and commit, on its
    own: counts and forwards of records that were rolled back."""

    __slots__ = ("conn", "cursor", "flushed", "level", "relaxed", "working")

    def __init__(self, conn: apsw.Connection, clock: Callable[[], float], level: str) -> None:
        self.conn = conn
        self.cursor = conn.cursor()
        self.level = level
        self.flushed = SQLiteTx(conn, clock, False, self.cursor)
        self.relaxed = SQLiteTx(conn, clock, True, self.cursor)
        self.working = False
        conn.set_commit_hook(self.veto)

    def veto(self) -> bool:
        """SQLite's commit hook: True turns the commit into a rollback."""
        return self.working


class SQLiteStore:
    """An oncebox store in one SQLite file (or in memory, for tests and demos)."""

    dialect = "sqlite"
    single_writer = True  # BEGIN IMMEDIATE: one writer at a time, whoever it is
    relaxes_late = False  # PRAGMA synchronous cannot change inside a transaction

    def __init__(
        self,
        path: str,
        clock: Callable[[], float] | None = None,
        vfs: str | None = None,
        synchronous: str = "FULL",
        read_only: bool = False,
        cache_mb: int | str = CACHE_MB,
        wal_autocheckpoint: int | str = WAL_AUTOCHECKPOINT,
    ) -> None:
        check_sqlite_version(apsw.sqlite_lib_version())
        if synchronous.upper() not in SYNCHRONOUS_MODES:
            raise ConfigError(f"synchronous must be one of {', '.join(SYNCHRONOUS_MODES)}")
        # Set on every connection this store opens, readers included (see _session).
        self._pragmas = (
            f"PRAGMA cache_size=-{1024 * _positive('cache_mb', cache_mb)}",
            f"PRAGMA wal_autocheckpoint={_positive('wal_autocheckpoint', wal_autocheckpoint)}",
        )
        self.path = path
        self.url = f"sqlite:///{path}"
        self._vfs = vfs
        self._synchronous = synchronous.upper()
        self._clock = clock or time.time
        self._local = threading.local()
        self._connections: list[apsw.Connection] = []
        self._lock = threading.Lock()
        self._memory = path == ":memory:"
        # Read only: connections SQLite itself refuses to write with, and the schema
        # checked instead of migrated, so the file stays as it is, byte for byte.
        self._read_only = read_only and not self._memory
        if self._memory:
            # One private in-memory database shared by this store's connections (the
            # memdb VFS shares a "/name" between connections of one process, with locking).
            self._uri = f"file:/oncebox-{uuid.uuid4().hex}?vfs=memdb"
        try:
            if self._read_only:
                check_current(self.reading, self.dialect, path)
            else:
                self._migrate()
        except BaseException:
            self.close()
            raise

    def now(self) -> float:
        return float(self._clock())

    def _connect(self) -> apsw.Connection:
        return self._session().conn

    def _session(self) -> _Session:
        """This thread's connection and what its transactions reuse, made on first use."""
        existing: _Session | None = getattr(self._local, "session", None)
        if existing is not None:
            return existing
        try:
            if self._memory:
                flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE | apsw.SQLITE_OPEN_URI
                conn = apsw.Connection(self._uri, flags=flags)
            elif self._read_only:
                conn = apsw.Connection(self.path, flags=apsw.SQLITE_OPEN_READONLY, vfs=self._vfs)
            else:
                conn = apsw.Connection(self.path, vfs=self._vfs)
            conn.set_busy_handler(_busy_handler())
            if not self._memory and not self._read_only:
                mode = conn.execute("PRAGMA journal_mode=WAL").get
                if str(mode).lower() != "wal":
                    raise StorageError(f"{self.path}: cannot switch to WAL (got {mode})")
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            conn.execute("PRAGMA foreign_keys=ON")
            for pragma in self._pragmas:
                conn.execute(pragma)
        except apsw.Error as exc:
            raise _storage_error(exc) from exc
        session = self._local.session = _Session(conn, self._clock, self._synchronous)
        with self._lock:
            self._connections.append(conn)
        return session

    def transaction(self) -> AbstractContextManager[SQLiteTx]:
        return self._transaction("BEGIN IMMEDIATE")

    def atomic(self, work: Callable[[Tx], T], durable: bool = True) -> T:
        # SQLite has one writer and BEGIN IMMEDIATE takes its lock up front, so there
        # is no deadlock or serialization failure to retry; busy waits are handled by
        # the busy timeout and surface as StorageUnavailable. The engine's own
        # RetryTransaction cannot arise under one writer, but is honoured all the same.
        for _ in range(RETRIES - 1):
            try:
                return self._once(work, durable)
            except RetryTransaction:
                continue
        return self._once(work, durable)

    def _once(self, work: Callable[[Tx], T], durable: bool) -> T:
        """One write transaction around ``work``: :meth:`_transaction`'s steps without a
        generator's context manager, which costs more than a duplicate's statements."""
        session = self._begin("BEGIN IMMEDIATE", durable)
        try:
            result = work(session.flushed if durable else session.relaxed)
        except BaseException as exc:
            self._failed(session, exc)
            raise
        self._commit(session)
        return result

    def reading(self) -> AbstractContextManager[SQLiteTx]:
        # A deferred transaction: one consistent snapshot that never takes the write lock.
        return self._transaction("BEGIN DEFERRED")

    @contextmanager
    def scanning(self, budget: float | None = None) -> Iterator[SQLiteTx]:
        """A reading snapshot (in WAL mode a reader never holds a writer up, and each
        thread has its own connection) that SQLite interrupts once ``budget`` seconds
        have passed: its progress handler looks at the clock every few hundred steps,
        so even one long statement stops in time."""
        conn = self._connect()
        if budget is not None:
            deadline = time.monotonic() + budget
            conn.set_progress_handler(lambda: time.monotonic() > deadline, SCAN_STEPS)
        try:
            with self._transaction("BEGIN DEFERRED") as tx:
                yield tx
        finally:
            if budget is not None:
                conn.set_progress_handler(None)

    @contextmanager
    def _transaction(self, begin: str, durable: bool = True) -> Iterator[SQLiteTx]:
        session = self._begin(begin, durable)
        try:
            yield session.flushed if durable else session.relaxed
        except BaseException as exc:
            self._failed(session, exc)
            raise
        self._commit(session)

    def _begin(self, begin: str, durable: bool) -> _Session:
        session = self._session()
        level = self._synchronous if durable else "NORMAL"
        if session.level != level:
            # In WAL mode NORMAL commits without syncing the WAL; the next FULL commit's
            # sync covers these frames, which come before its own, and a checkpoint syncs
            # the WAL before it copies it. The level cannot change inside a transaction,
            # so it is set before one begins, and only when it differs: a run of relaxed
            # transactions (or of flushed ones) sets it once.
            session.conn.execute(f"PRAGMA synchronous={level}")
            session.level = level
        try:
            session.cursor.execute(begin)
        except apsw.Error as exc:
            raise _storage_error(exc) from exc
        session.working = True
        return session

    @staticmethod
    def _failed(session: _Session, exc: BaseException) -> None:
        """Roll back after ``exc``; raise what it becomes, if it becomes anything else."""
        session.working = False
        conn = session.conn
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        elif isinstance(exc, apsw.ConstraintError):  # the veto: rolled back under the work
            raise _rolled_back() from exc
        if isinstance(exc, apsw.Error):
            raise _storage_error(exc) from exc
        # An apply step's failure stays that delivery's ApplyError, unless the
        # store itself failed under it (busy, full, I/O): then nothing of the
        # batch could be decided, and the caller must retry it whole.
        cause = exc.__cause__ if isinstance(exc, ApplyError) else None
        if isinstance(cause, apsw.Error) and _store_failed(cause):
            raise _storage_error(cause) from exc

    @staticmethod
    def _commit(session: _Session) -> None:
        session.working = False
        conn = session.conn
        if not conn.in_transaction:
            raise _rolled_back()
        try:
            session.cursor.execute("COMMIT")
        except apsw.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise _storage_error(exc) from exc

    def _migrate(self) -> None:
        """Make a new store's schema, or bring this one's up to date, each step in a
        transaction of its own (BEGIN IMMEDIATE keeps other openers out)."""
        migrate(self.transaction, self.dialect, self.now)

    def ensure_schema(self, owner: str, migrations: Sequence[tuple[int, str]]) -> None:
        """An apply step's migrations, each once, recorded per step."""
        migrate_step(self.transaction, self.dialect, owner, migrations, self.now)

    def schema_version(self) -> int:
        return int(self._connect().execute("SELECT max(version) FROM schema_version").get or 0)

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()
