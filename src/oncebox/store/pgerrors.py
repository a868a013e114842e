"""How psycopg's errors become oncebox's: the one place a driver error is read, so the
store says alike, wherever it failed, whether to retry, that the server is unreachable,
or that a statement failed."""

from __future__ import annotations

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import PoolTimeout

from oncebox.errors import ReadTimedOut, StorageError, StorageUnavailable

RETRYABLE = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)


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


def storage_error(exc: BaseException) -> StorageError:
    """The one place psycopg errors become oncebox errors."""
    if isinstance(exc, pg_errors.QueryCanceled):  # a scan's statement_timeout
        return ReadTimedOut()
    if isinstance(exc, psycopg.OperationalError | PoolTimeout):
        return StorageUnavailable(f"PostgreSQL is unreachable or out of resources: {exc}")
    if isinstance(exc, pg_errors.AdminShutdown | pg_errors.CannotConnectNow):
        return StorageUnavailable(f"PostgreSQL is restarting: {exc}")
    return StorageError(f"PostgreSQL failed: {exc}")
