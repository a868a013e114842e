"""Storage backends behind one small interface (:mod:`oncebox.store.base`)."""

from __future__ import annotations

from collections.abc import Callable

from oncebox.errors import ConfigError
from oncebox.store.base import Store, Tx

SQLITE_OPTIONS = ("vfs", "synchronous", "cache_mb", "wal_autocheckpoint")


def sqlite_options(url: str) -> tuple[str, dict[str, str]]:
    """Split ``sqlite:///path.db?cache_mb=16&wal_autocheckpoint=1000`` into path and options.

    ``cache_mb`` (each connection's page cache, MiB) and ``wal_autocheckpoint`` (WAL
    pages past which a commit checkpoints) are documented settings (docs/configuration.md).
    ``vfs`` names an APSW/SQLite VFS registered in this process (the power-loss harness
    uses one); ``synchronous`` exists only so that harness can show that ``NORMAL`` loses
    acknowledged commits. Neither of those two belongs in production URLs.
    """
    path, _, query = url.partition("?")
    options: dict[str, str] = {}
    for part in filter(None, query.split("&")):
        key, _, value = part.partition("=")
        if key not in SQLITE_OPTIONS or not value:
            raise ConfigError(f"unsupported SQLite URL option {part!r} in {url!r}")
        options[key] = value
    return sqlite_path(path), options


def sqlite_path(url: str) -> str:
    """``sqlite:///relative.db``, ``sqlite:////abs/path.db``, ``sqlite:///:memory:``, or a
    plain file path."""
    if url.startswith("sqlite:///"):
        return url[len("sqlite:///") :] or ":memory:"
    if url in ("sqlite://", "sqlite:"):
        return ":memory:"
    if "://" in url:
        raise ConfigError(
            f"unsupported store URL {url!r} (use sqlite:///path.db or postgresql://...)"
        )
    return url


def open_store(
    url: str, clock: Callable[[], float] | None = None, read_only: bool = False
) -> Store:
    """A store by URL: ``sqlite:///path.db`` (the default) or ``postgresql://...``.

    ``clock`` replaces the server clock for tests and demos. Without it, SQLite reads the
    host's clock and PostgreSQL the database's ``clock_timestamp()``. ``read_only``: the
    schema is checked, never migrated (:class:`~oncebox.errors.SchemaBehind` when it
    lags), and SQLite's connections cannot write.
    """
    if url.startswith(("postgresql://", "postgres://")):
        from oncebox.store.postgres import PostgresStore

        return PostgresStore(url, clock=clock, read_only=read_only)
    from oncebox.store.sqlite import SQLiteStore

    path, options = sqlite_options(url)
    return SQLiteStore(path, clock=clock, read_only=read_only, **options)


__all__ = ["Store", "Tx", "open_store", "sqlite_options", "sqlite_path"]
