"""A PostgreSQL transaction in which a statement failed and its error was caught is
rolled back by the server at COMMIT, which answers ``ROLLBACK`` and no error. The store
must not take that answer for a commit: its caller would believe written what was not
(SQLite, where a failed statement undoes only itself, commits the rest)."""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg
import pytest

import oncebox
from oncebox.errors import StorageError

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def _write_then_swallow(tx: Any) -> str:
    tx.execute("INSERT INTO scratch (n) VALUES (1)")
    with contextlib.suppress(Exception):  # a caller that carries on after its own failed
        tx.execute("SELECT 1 / 0")
    return "done"


@pytest.mark.parametrize("path", ["atomic", "transaction"])
def test_a_commit_the_server_turned_into_a_rollback_is_an_error(pg_url: str, path: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE scratch (n integer)")
    with oncebox.open(pg_url) as box:
        with pytest.raises(StorageError, match="rolled the transaction back: a statement"):
            if path == "atomic":
                box.store.atomic(_write_then_swallow)
            else:
                with box.store.transaction() as tx:
                    _write_then_swallow(tx)
        assert box.store.atomic(lambda tx: tx.execute("SELECT 1")) == [(1,)]  # still usable
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM scratch").fetchone() == (0,)


def test_a_caught_failure_whose_status_libpq_has_not_read_yet_is_the_same_error(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In pipeline mode the error of a caught statement can reach the caller before
    libpq has read the server's ready-for-query that marks the transaction failed: the
    store's own next statement (the step guard's lift) then fails with "current
    transaction is aborted". That is the same rolled-back transaction, said the same way
    (this test makes the status read miss every time; it raced before)."""
    from oncebox.store import pgpipe

    monkeypatch.setattr(pgpipe, "INERROR", object())
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE scratch (n integer)")
    with oncebox.open(pg_url) as box:
        with pytest.raises(StorageError, match="rolled the transaction back: a statement"):
            box.store.atomic(_write_then_swallow)
        assert box.store.atomic(lambda tx: tx.execute("SELECT 1")) == [(1,)]
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM scratch").fetchone() == (0,)
