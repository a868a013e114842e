"""Reaching a PostgreSQL server once, before a pool is made for it: an unreachable
server fails in seconds on one line, where the pool would retry for its whole timeout
and log every attempt."""

from __future__ import annotations

import psycopg
from psycopg.conninfo import conninfo_to_dict

from oncebox.errors import ConfigError, StorageUnavailable

CONNECT_SECONDS = 3  # how long one attempt to reach the server may take, at first


def reach(url: str) -> None:
    """Connect once and close, or raise :class:`StorageUnavailable` saying where and
    why (the driver's last words, on one line)."""
    try:
        given = conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise ConfigError(f"not a PostgreSQL URL: {exc}") from None
    where = f"{given.get('host', 'localhost')}:{given.get('port', 5432)}"
    extra = {} if "connect_timeout" in given else {"connect_timeout": CONNECT_SECONDS}
    try:
        psycopg.connect(url, **extra).close()  # type: ignore[arg-type]
    except psycopg.OperationalError as exc:
        said = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        why = said.rsplit(" failed: ", 1)[-1]
        raise StorageUnavailable(f"cannot reach PostgreSQL at {where}: {why}") from None
