"""A store with data, at the migration before the last, brought up to date by today's
code: every row as it was (quarantine rows open and closed, in several inboxes), the
log still verifying, and the newest migration's behaviour there afterwards."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import apsw
import psycopg
import pytest

import oncebox
from conftest import SESSION
from helpers import frame
from oncebox import Delivery, InboxSpec, Oncebox
from oncebox.errors import StorageError
from oncebox.formats.ussd_h1 import make_frame
from oncebox.store.sqlfile import load_queries
from schemas import NewDatabase, backend, new_database, path, rows, schema
from test_read_only_schema import LAST, store_at

__all__ = ["backend", "new_database"]  # fixtures, from schemas.py

INBOXES = [
    *(InboxSpec(name, codec="ussd-h1", apply="triage") for name in ("north", "south")),
    InboxSpec("gate", codec="ussd-h1", fenced=True),  # its senders hold leases
]


def conflicts(box: Oncebox, inbox: str) -> None:
    """Open, kept and accepted quarantine rows, one seen twice, in ``inbox``."""
    for fid, text in SESSION:
        box.ingest(inbox, frame(fid, text))
    opened = frame("rec1", make_frame(1, "Kakuma1", "MED", 9, 86))
    assert box.ingest(inbox, opened).quarantine_id is not None
    box.ingest(inbox, opened)  # seen twice
    kept = box.ingest(inbox, frame("rec2", make_frame(2, "Kakuma2", "SHE", 5, 71)))
    box.resolve(kept.quarantine_id, "keep", "a typo")
    accepted = box.ingest(inbox, frame("rec3", make_frame(3, "Kakuma1", "WAT", 20, 69)))
    box.resolve(accepted.quarantine_id, "accept", "confirmed")
    # The rows beside them: a dead letter, a lease, a token, a consumer's cursor.
    assert box.ingest(inbox, frame("rec9", SESSION[0][1][:-2] + "00")).verdict == "rejected"
    box.lease("gate", f"gw-{inbox}", 30.0)
    box.create_token(f"{inbox}-ops", [inbox], ["read", "operator"])
    consumer = box.consumer(f"{inbox}-reader", inbox)
    consumer.lease("worker-1")
    consumer.ack(consumer.next(limit=2).entries[-1].position)


def pre_last_quarantine(backend: str, url: str, made_at_pre_last: str) -> None:
    """Undo the last migration on a store made whole: its quarantine table as the
    migrations before it left it, its rows kept, the migration no longer recorded."""
    if backend == "sqlite":
        old = apsw.Connection(path(made_at_pre_last))
        table, *indexes = [str(sql) for (sql,) in old.execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name = 'quarantine' AND sql IS NOT NULL "
            "ORDER BY type = 'index', name")]  # fmt: skip
        old.close()
        conn = apsw.Connection(path(url))
        conn.execute("BEGIN")
        conn.execute(table.replace("CREATE TABLE quarantine", "CREATE TABLE quarantine_old", 1))
        conn.execute("INSERT INTO quarantine_old SELECT * FROM quarantine")
        conn.execute("DROP TABLE quarantine")
        conn.execute("ALTER TABLE quarantine_old RENAME TO quarantine")
        for sql in indexes:
            conn.execute(sql)
        conn.execute("DELETE FROM schema_version WHERE version = ?", (LAST,))
        conn.execute("COMMIT")
        conn.close()
        return
    with psycopg.connect(url, autocommit=True) as pg, pg.transaction():
        pg.execute("DROP INDEX quarantine_one_open")
        pg.execute("DROP INDEX quarantine_newcomer")
        pg.execute(
            "ALTER TABLE quarantine ADD CONSTRAINT quarantine_one_per_newcomer "
            "UNIQUE (inbox_id, ident, witness)"
        )
        pg.execute("DELETE FROM schema_version WHERE version = %s", (LAST,))


def before_last(backend: str, url: str, reference: str) -> bool:
    """Whether ``url``'s quarantine table is as in ``reference`` (a store at the
    migration before the last)."""
    mine, theirs = schema(backend, url), schema(backend, reference)
    if backend == "sqlite":
        return all(mine.get(name) == made for name, made in theirs.items() if "quar" in name)
    wanted = {line for line in theirs if "quarantine" in line}
    return wanted <= set(mine) and not any("quarantine_one_open" in line for line in mine)


def test_the_last_migration_keeps_every_row_and_the_log_verifies(
    backend: str, new_database: NewDatabase
) -> None:
    url = new_database()
    with oncebox.open(url, inboxes=INBOXES) as box:
        for inbox in ("north", "south"):
            conflicts(box, inbox)
        assert box.verify().ok
    reference = new_database()
    store_at(backend, reference, LAST - 1)
    pre_last_quarantine(backend, url, reference)
    assert before_last(backend, url, reference)
    where = path(url) if backend == "sqlite" else url
    before = rows(backend, where)
    assert {row[9] for row in before["quarantine"]} == {"open", "kept", "accepted"}
    assert all(before[t] for t in ("dead_letters", "fences", "api_tokens", "consumers", "log"))

    with oncebox.open(url, inboxes=INBOXES) as box:
        after = rows(backend, where)
        for table in set(before) - {"schema_version"}:
            # Opening PostgreSQL notes that it reached the server (meta's ready_probe).
            kept = [row for row in after[table] if row[0] != "ready_probe"]
            assert kept == [row for row in before[table] if row[0] != "ready_probe"], table
        assert box.verify().ok
        # The migration's point: a resend of the kept newcomer opens a row of its own.
        again = box.ingest("north", frame("rec2", make_frame(2, "Kakuma2", "SHE", 5, 71)))
        assert str(again.verdict) == "conflict" and again.first_quarantine
        assert box.verify().ok
    fresh = new_database()
    oncebox.open(fresh, inboxes=[]).close()
    assert schema(backend, url) == schema(backend, fresh)


def recorded(backend: str, url: str, query: str, row: tuple[object, ...]) -> None:
    """Record a migration the way a newer oncebox would, behind this one's back."""
    sql = load_queries(backend)[query].sql
    if backend == "sqlite":
        conn = apsw.Connection(path(url))
        conn.execute(sql, row)
        conn.close()
    else:
        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute(sql.encode(), row)


@pytest.mark.parametrize("read_only", [False, True], ids=["to-write", "to-read"])
def test_a_store_a_newer_version_migrated_is_refused_and_left_alone(
    backend: str, new_database: NewDatabase, read_only: bool
) -> None:
    """A downgrade: this version's statements against a schema it does not know (the
    quarantine's unique key gone, a column renamed) would fail or misread later, at
    whatever write meets the change first; it is refused when the store is opened."""
    url = new_database()
    with oncebox.open(url, inboxes=INBOXES) as box:
        conflicts(box, "north")
    where = path(url) if backend == "sqlite" else url
    recorded(backend, url, "record_migration", (LAST + 1, 1_900_000_000.0, None))
    before = (schema(backend, url), rows(backend, where))
    with pytest.raises(StorageError, match=rf"newer.*\[{LAST + 1}\]"):
        oncebox.open(url, inboxes=[] if read_only else INBOXES, read_only=read_only)
    assert (schema(backend, url), rows(backend, where)) == before


# A process that opens the store and dies (os._exit, no clean-up of any kind) the moment
# the SQL of the migration naming argv[2] has run, before its transaction commits.
DIES_MIGRATING = """
import os, sys
import oncebox
from oncebox.store.pgpipe import PipelinedTx
from oncebox.store.sqlitetx import SQLiteTx
for cls in (PipelinedTx, SQLiteTx):
    def script(self, sql, run=cls.script):
        run(self, sql)
        if sys.argv[2] in sql:
            os._exit(9)
    cls.script = script
oncebox.open(sys.argv[1], inboxes=[]).close()
"""
OPENS = "import sys, oncebox; oncebox.open(sys.argv[1], inboxes=[]).close()"


def store_before_last(backend: str, new_database: NewDatabase) -> str:
    """A store with quarantine rows in two inboxes, at the migration before the last."""
    url = new_database()
    with oncebox.open(url, inboxes=INBOXES) as box:
        for inbox in ("north", "south"):
            conflicts(box, inbox)
    reference = new_database()
    store_at(backend, reference, LAST - 1)
    pre_last_quarantine(backend, url, reference)
    return url


def without_probe(found: dict[str, list[tuple[Any, ...]]]) -> dict[str, list[tuple[Any, ...]]]:
    """Every row, but for meta's note of when PostgreSQL was last reached."""
    return {table: [row for row in got if row[0] != "ready_probe"] for table, got in found.items()}


def test_a_migration_killed_half_way_leaves_the_store_as_it_was(
    backend: str, new_database: NewDatabase
) -> None:
    url = store_before_last(backend, new_database)
    where = path(url) if backend == "sqlite" else url
    before = (schema(backend, url), without_probe(rows(backend, where)))
    died = subprocess.run(
        [sys.executable, "-c", DIES_MIGRATING, url, "Migration 30"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert died.returncode == 9, died.stderr
    assert (schema(backend, url), without_probe(rows(backend, where))) == before
    with oncebox.open(url, inboxes=INBOXES) as box:  # opens cleanly, and migrates
        assert box.verify().ok
        assert len(box.quarantined("north")) == 1
    fresh = new_database()
    oncebox.open(fresh, inboxes=[]).close()
    assert schema(backend, url) == schema(backend, fresh)


def test_processes_upgrading_one_old_store_at_once_migrate_it_once(
    backend: str, new_database: NewDatabase
) -> None:
    url = store_before_last(backend, new_database)
    where = path(url) if backend == "sqlite" else url
    before = without_probe(rows(backend, where))
    openers = [
        subprocess.Popen([sys.executable, "-c", OPENS, url], stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    for opener in openers:
        _, err = opener.communicate(timeout=120)
        assert opener.returncode == 0, err
    after = without_probe(rows(backend, where))
    versions = [row[0] for row in after["schema_version"]]
    assert sorted(versions) == sorted(set(versions)) and LAST in versions
    assert {t: r for t, r in after.items() if t != "schema_version"} == {
        t: r for t, r in before.items() if t != "schema_version"
    }
    with oncebox.open(url, inboxes=INBOXES) as box:
        assert box.verify().ok


def test_a_step_a_newer_version_migrated_is_refused_and_left_alone(
    backend: str, new_database: NewDatabase
) -> None:
    """As for the store's own migrations, for the tables an apply step owns: this
    version's step would write to tables it was not written for."""
    url = new_database()
    with oncebox.open(url, inboxes=INBOXES) as box:
        conflicts(box, "north")
    where = path(url) if backend == "sqlite" else url
    recorded(backend, url, "record_step_migration", ("generation", 99, 1_900_000_000.0))
    before = (schema(backend, url), without_probe(rows(backend, where)))
    with pytest.raises(StorageError, match=r"generation.*newer.*\[99\]"):
        oncebox.open(url, inboxes=INBOXES)
    assert (schema(backend, url), without_probe(rows(backend, where))) == before


def test_processes_making_one_new_store_at_once_make_it_once(
    backend: str, new_database: NewDatabase
) -> None:
    url = new_database()
    openers = [
        subprocess.Popen([sys.executable, "-c", OPENS, url], stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    for opener in openers:
        _, err = opener.communicate(timeout=120)
        assert opener.returncode == 0, err
    fresh = new_database()
    oncebox.open(fresh, inboxes=[]).close()
    assert schema(backend, url) == schema(backend, fresh)
    where = path(url) if backend == "sqlite" else url
    assert sorted(row[0] for row in rows(backend, where)["schema_version"]) == [*range(1, LAST + 1)]


# Another application's bookkeeping under the same name: Flyway's of before 5.0 (its
# version is text), and one numbered as oncebox's once was, with no oncebox table beside.
FOREIGN = (
    [
        "CREATE TABLE schema_version (installed_rank INTEGER, version TEXT, description TEXT)",
        "INSERT INTO schema_version VALUES (1, '1.0', 'init')",
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)",
    ],
    [
        "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)",
        "INSERT INTO schema_version VALUES (3, 1.0)",
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)",
    ],
)


@pytest.mark.parametrize("tables", FOREIGN, ids=["flyway", "numbered"])
@pytest.mark.parametrize("read_only", [False, True], ids=["to-write", "to-read"])
def test_another_applications_database_is_refused_and_left_alone(
    backend: str, new_database: NewDatabase, tables: list[str], read_only: bool
) -> None:
    """A --db that names another application's database, which keeps a table called
    schema_version too: not taken for an old oncebox store to renumber and migrate."""
    url = new_database()
    where = path(url) if backend == "sqlite" else url
    if backend == "sqlite":
        conn = apsw.Connection(where)
        for sql in tables:
            conn.execute(sql)
        conn.close()
    else:
        with psycopg.connect(url, autocommit=True) as pg:
            for sql in tables:
                pg.execute(sql.encode())
    before = (schema(backend, url), rows(backend, where))
    with pytest.raises(StorageError, match="not an oncebox store"):
        oncebox.open(url, inboxes=[], read_only=read_only)
    assert (schema(backend, url), rows(backend, where)) == before


class Tallies:
    """A user's step that owns a table, made by its one migration, which looks at the
    store first (a statement that returns a row) before it makes the table."""

    name = "tallies"

    def migrations(self, dialect: str) -> list[tuple[int, str]]:
        return [(1, "SELECT count(*) FROM inboxes; CREATE TABLE tallies (n INTEGER);")]

    def apply(self, tx: Any, changes: Any) -> None:
        tx.execute("INSERT INTO tallies VALUES (1)")


def test_every_statement_of_a_step_migration_runs(backend: str, new_database: NewDatabase) -> None:
    """On SQLite a statement that returned a row stopped the script there: the table
    after it was never made, the migration recorded as applied all the same."""
    url = new_database()
    with oncebox.open(url, inboxes=[InboxSpec("t", codec="keyed", apply=Tallies())]) as box:
        assert str(box.ingest("t", Delivery(b"x", key="k1")).verdict) == "accepted"
    where = path(url) if backend == "sqlite" else url
    assert rows(backend, where)["tallies"] == [(1,)]
