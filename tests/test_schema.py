"""The schema, written once per backend (``schema.sql``), and the migrations that reach it
from an empty database: both roads end in the same database, on both backends (as
procrastinate's test_migration checks). Migrations are numbered alike on both backends,
and the statements both run alike are written once."""

from __future__ import annotations

import re
from importlib.resources import files
from pathlib import Path
from typing import Any

import apsw
import psycopg
import pytest

import oncebox
from oncebox.errors import StorageError
from oncebox.store.migrate import RENUMBERED
from oncebox.store.sqlfile import load_migrations, load_queries, load_schema, to_psycopg
from schemas import BACKENDS, NewDatabase, backend, new_database, path, rows, schema

__all__ = ["backend", "new_database"]  # fixtures, from schemas.py

FROZEN = Path(__file__).parent / "fixtures" / "numbered_apart"
# What one backend runs that the other has no need of.
OWN = {
    "sqlite": {
        "remember_dropped_id",
        "find_record",
        "reserve_record_id",
        "held_lease",
        "count_duplicates_at_once",  # a batch's counts over a carray of ids (store/sqlitetx.py)
        "seal_reads",
        "find_record_or_next_id",
    },
    "postgres": {
        "now",
        "lock_inbox",
        "lock_inbox_shared",
        "defer_durability",
        "insist_durability",
        "lock_migrations",
        # what a decision and a seal send as one statement each (store/pgtx.py)
        "lock_inbox_shared_relaxed",
        "decision_lookup",
        "decision_reads",
        "seal_reads",
        "seal_reads_held",
        "seal_reads_after",
        "seal_writes",
        "count_verdicts",
        # the guard that refuses a user's COMMIT inside a step (store/pgpipe.py)
        "step_guard_table",
        "step_guard_set",
        "step_guard_lift",
    },
}


def data(backend: str, url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row, apart from what names the store itself or says when it was made."""
    found = rows(backend, path(url) if backend == "sqlite" else url, timeless=True)
    # A store's random id; SQLite's replayed migration 10 also notes that no record id
    # was used yet, which is what a store without the note means.
    found["meta"] = [(k, v) for k, v in found["meta"] if k != "record_ids_used" or v != "0"]
    found["meta"] = [(k, "..." if k == "store_id" else v) for k, v in found["meta"]]
    return found


def execute(backend: str, url: str, sql: str) -> None:
    if backend == "sqlite":
        conn = apsw.Connection(path(url))
        conn.execute(sql)
        conn.close()
    else:
        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute(sql)


def replay_migrations(backend: str, url: str) -> None:
    """Bring an empty database to today's schema through every migration from the
    first, as the store does for one that exists: given its bookkeeping table empty,
    the store takes it for a store that has applied nothing yet."""
    execute(backend, url, load_queries(backend)["create_schema_version"].sql)
    oncebox.open(url, inboxes=[]).close()


def test_the_migrations_give_the_schema(backend: str, new_database: NewDatabase) -> None:
    fresh, replayed = new_database(), new_database()
    oncebox.open(fresh, inboxes=[]).close()  # made from schema.sql
    replay_migrations(backend, replayed)
    # Both have applied the built-in steps' migrations too (every store does, on open).
    assert schema(backend, replayed) == schema(backend, fresh)
    # The same rows as well: the token counter, the sealer's fence, the bookkeeping.
    assert data(backend, replayed) == data(backend, fresh)
    numbers = [version for version, _ in load_migrations(backend)]
    assert sorted(v for (v,) in data(backend, fresh)["schema_version"]) == numbers


def test_a_store_opened_again_runs_no_migration(backend: str, new_database: NewDatabase) -> None:
    url = new_database()
    oncebox.open(url, inboxes=[]).close()
    before = rows(backend, path(url) if backend == "sqlite" else url)
    oncebox.open(url, inboxes=[]).close()
    # Not a row more, not a migration run again (when each ran is kept as it was).
    assert rows(backend, path(url) if backend == "sqlite" else url) == before


def test_a_broken_schema_leaves_nothing_behind(
    backend: str, new_database: NewDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """schema.sql runs in one transaction with the bookkeeping: a store whose schema
    failed half-way is not taken for one that has it, and the next open makes it whole."""
    url = new_database()
    whole = load_schema(backend)
    broken = whole + "\nCREATE TABLE broken (;"
    monkeypatch.setattr("oncebox.store.migrate.load_schema", lambda _: broken)
    with pytest.raises(StorageError):
        oncebox.open(url, inboxes=[])
    monkeypatch.undo()
    oncebox.open(url, inboxes=[]).close()
    assert "inboxes" in data(backend, url)


def _migration_names(folder: Any) -> list[str]:
    return sorted(e.name for e in folder.iterdir() if re.fullmatch(r"\d{3}_\w+\.sql", e.name))


def _statements(sql: str) -> str:
    return re.sub(r"--[^\n]*", "", sql).strip()


def test_one_number_is_one_change_on_every_backend() -> None:
    sql = files("oncebox.store").joinpath("sql")
    names = {b: _migration_names(sql.joinpath(b)) for b in BACKENDS}
    assert names["sqlite"] == names["postgres"]
    numbers = [int(name[:3]) for name in names["sqlite"]]
    assert numbers == list(range(1, len(numbers) + 1))
    texts = {b: dict(load_migrations(b)) for b in BACKENDS}
    for number in numbers:
        empty = [b for b in BACKENDS if not _statements(texts[b][number])]
        # A change one backend does not need: a file that does nothing and says why.
        assert len(empty) < len(BACKENDS), f"migration {number} does nothing anywhere"
        for b in empty:
            assert "nothing to do" in texts[b][number].lower()


def test_the_old_numbers_translate_to_the_shared_ones_in_order() -> None:
    for name in BACKENDS:
        old = sorted(int(p.name[:3]) for p in (FROZEN / name).glob("[0-9]*.sql"))
        assert sorted(RENUMBERED[name]) == old
        shared = [new for number in old for new in RENUMBERED[name][number]]
        # Each shared number once, in order: a store that had applied the old ones had
        # applied exactly these; everything after them is still to run.
        assert shared == list(range(1, len(shared) + 1))


def test_both_backends_run_the_same_statements() -> None:
    names = {b: set(load_queries(b)) - OWN[b] for b in BACKENDS}
    assert names["sqlite"] == names["postgres"]
    for b in BACKENDS:
        assert OWN[b] <= set(load_queries(b))


def test_shared_statements_take_psycopg_placeholders() -> None:
    assert to_psycopg("SELECT a FROM t WHERE b = ? AND c = ?") == (
        "SELECT a FROM t WHERE b = %s AND c = %s"
    )
    assert to_psycopg("SELECT :a, :b_2 FROM t WHERE c = :a") == (
        "SELECT %(a)s, %(b_2)s FROM t WHERE c = %(a)s"
    )
    # Quotes and comments: their placeholders are text; every % is doubled for psycopg.
    assert to_psycopg("SELECT '?', ':x', '50%', \"a?\" -- it's ? and :y and 5%\nFROM t") == (
        "SELECT '?', ':x', '50%%', \"a?\" -- it's ? and :y and 5%%\nFROM t"
    )
    assert to_psycopg("SELECT 'it''s ?', x % 4, y::int FROM t WHERE z = ?") == (
        "SELECT 'it''s ?', x %% 4, y::int FROM t WHERE z = %s"
    )
    with pytest.raises(StorageError, match="SQLite's own"):
        to_psycopg("UPDATE t SET a = ?2 WHERE id = ?1")
    with pytest.raises(StorageError, match="not both"):
        to_psycopg("SELECT ? FROM t WHERE a = :a")
