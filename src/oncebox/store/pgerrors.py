"""How psycopg's errors become oncebox's: the one place a driver error is read, so the
store says alike, wherever it failed, whether to retry, that the server is unreachable,
or that a statement failed."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import ExecStatus
from psycopg_pool import PoolTimeout

from oncebox.errors import ReadTimedOut, StorageError, StorageUnavailable

RETRYABLE = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)
ROLLED_BACK = (
    "PostgreSQL rolled the transaction back: a statement in it had failed and its error "
    "was caught; nothing of it was written"
)


class Retry(Exception):
    """A conflict the backend resolved by rolling back; run the work again."""


class Stale(Retry):
    """A pooled connection that died before its transaction's ``COMMIT`` went out:
    nothing committed, so the work runs once more, on a fresh connection. (The pool
    checks only connections that rested a while, so one may die unchecked.)"""


def driver_error(exc: BaseException | None) -> BaseException | None:
    """The driver's error behind ``exc``, followed through its causes (None: not one)."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, psycopg.Error | PoolTimeout):
            return exc
        exc, seen = exc.__cause__, seen + 1
    return None


def store_failed(exc: BaseException) -> bool:
    """Whether the store failed, rather than a statement an apply step ran."""
    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError | PoolTimeout)


def storage_error(exc: BaseException, reading: bool = False) -> StorageError:
    """The one place psycopg errors become oncebox errors. ``reading``: whether the
    statement read only (a cancelled one is then a scan past its budget)."""
    if isinstance(exc, pg_errors.QueryCanceled):
        if reading:  # a scan's statement_timeout
            return ReadTimedOut()
        return StorageUnavailable(
            f"PostgreSQL cancelled a statement (statement_timeout, or a cancel request): "
            f"nothing of this transaction was committed; retry it. {exc}"
        )
    if isinstance(exc, psycopg.OperationalError | PoolTimeout):
        return StorageUnavailable(f"PostgreSQL is unreachable or out of resources: {exc}")
    if isinstance(exc, pg_errors.AdminShutdown | pg_errors.CannotConnectNow):
        return StorageUnavailable(f"PostgreSQL is restarting: {exc}")
    if isinstance(exc, pg_errors.InFailedSqlTransaction):
        # A statement after one whose error was caught: in pipeline mode that error can
        # reach the caller before libpq reads the status saying so, and the store's own
        # next statement (a guard's lift, the COMMIT's checks) is the one refused.
        return StorageError(ROLLED_BACK)
    return StorageError(f"PostgreSQL failed: {exc}")


def commit_done(committed: psycopg.Cursor[Any] | None) -> bool:
    """Whether a COMMIT was answered as done. The server answers the COMMIT of a
    transaction in which a statement failed (its error caught by the caller) with
    ``ROLLBACK`` and no error: nothing of it was written."""
    result = committed.pgresult if committed is not None else None
    return (
        result is not None
        and result.status == ExecStatus.COMMAND_OK
        and result.command_status == b"COMMIT"
    )
