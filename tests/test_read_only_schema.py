"""Reading never upgrades (issue 23, item 3's leftover): a store whose schema is behind
this version, opened to read, is refused with one line naming ``oncebox migrate``, and
is left as it was, byte for byte; ``oncebox migrate`` (or any command that writes)
upgrades it, and then it reads."""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from pathlib import Path

import apsw
import psycopg
import pytest
from click.testing import CliRunner

import oncebox
from oncebox import Delivery
from oncebox.errors import SchemaBehind, StorageError
from oncebox.store.sqlfile import load_migrations, load_queries
from oncebox.surfaces.cli import cli
from schemas import NewDatabase, backend, new_database, path, rows, schema
from serveproc import ONCEBOX

__all__ = ["backend", "new_database"]  # fixtures, from schemas.py

LAST = load_migrations("sqlite")[-1][0]


def store_at(backend: str, url: str, upto: int) -> None:
    """A store as this version's own migrations left it at ``upto``: made then, never
    opened since."""
    q = load_queries(backend)
    migrations = [(v, sql) for v, sql in load_migrations(backend) if v <= upto]
    if backend == "sqlite":
        conn = apsw.Connection(path(url))
        conn.execute(q["create_schema_version"].sql)
        for version, sql in migrations:
            conn.execute("BEGIN")
            conn.execute(sql)
            conn.execute(q["record_migration"].sql, (version, time.time(), None))
            conn.execute("COMMIT")
        conn.close()
        return
    with psycopg.connect(url, autocommit=True) as pg:
        pg.execute(q["create_schema_version"].sql.encode())
        for version, sql in migrations:
            with pg.transaction():
                pg.execute(sql.encode())  # as written: a literal % stays one
                pg.execute(q["record_migration"].sql.encode(), (version, time.time(), None))


def digest(url: str) -> str:
    return hashlib.sha256(Path(path(url)).read_bytes()).hexdigest()


def test_reading_a_store_behind_is_refused_and_changes_nothing(
    backend: str, new_database: NewDatabase
) -> None:
    url = new_database()
    store_at(backend, url, LAST - 1)
    where = path(url) if backend == "sqlite" else url
    before = (schema(backend, url), rows(backend, where))
    with pytest.raises(SchemaBehind, match=rf"migration {LAST:03d}.*oncebox migrate") as refused:
        oncebox.open(url, read_only=True)
    assert refused.value.missing == (LAST,)
    assert (schema(backend, url), rows(backend, where)) == before  # not migrated
    oncebox.open(url, inboxes=[]).close()  # writing upgrades it ...
    oncebox.open(url, read_only=True).close()  # ... and then it reads


def test_read_commands_refuse_and_migrate_upgrades(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    store_at("sqlite", url, LAST - 1)
    before = digest(url)
    runner = CliRunner()
    for command in (["stats"], ["dead-letters"], ["records", "ussd"], ["quarantine", "list"]):
        refused = runner.invoke(cli, ["--db", url, *command])
        assert isinstance(refused.exception, SchemaBehind), (command, refused.output)
    assert digest(url) == before
    upgraded = runner.invoke(cli, ["--db", url, "migrate"])
    assert upgraded.exit_code == 0, upgraded.output
    assert json.loads(upgraded.stdout) == {"schema_version": LAST, "applied": [LAST]}
    assert json.loads(runner.invoke(cli, ["--db", url, "stats"]).stdout) == []  # no inbox made
    again = runner.invoke(cli, ["--db", url, "migrate"])
    assert json.loads(again.stdout) == {"schema_version": LAST, "applied": []}


def test_migrate_never_makes_a_store(tmp_path: Path) -> None:
    """docs/cli.md: `migrate` upgrades a store and never makes one (a typo in --db)."""
    typo = tmp_path / "intkae.db"
    refused = CliRunner().invoke(cli, ["--db", f"sqlite:///{typo}", "migrate"])
    assert refused.exit_code != 0 and "no store at" in str(refused.exception)
    assert not typo.exists()


def test_a_file_that_holds_no_store_is_not_made_one_by_reading(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    refused = CliRunner().invoke(cli, ["--db", f"sqlite:///{empty}", "stats"])
    assert "is not an oncebox store" in str(refused.exception)
    assert empty.read_bytes() == b""


@pytest.mark.slow  # the command line as processes
def test_a_read_command_on_a_store_behind_is_one_line_and_exit_2(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    store_at("sqlite", url, LAST - 1)
    before = digest(url)
    done = subprocess.run(
        [*ONCEBOX, "--db", url, "stats"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.startswith("oncebox: error: ") and len(done.stderr.splitlines()) == 1
    assert "needs an upgrade" in done.stderr and "oncebox migrate" in done.stderr
    assert digest(url) == before
    migrated = subprocess.run([*ONCEBOX, "--db", url, "migrate"], capture_output=True, timeout=60)
    assert migrated.returncode == 0, migrated.stderr
    assert digest(url) != before


def test_a_reader_reads_and_the_store_itself_refuses_it_a_write(shared_url: str) -> None:
    box = oncebox.open(shared_url)
    box.ingest("ussd", Delivery(b"H1|1|Kakuma1|MED|3|86|#89", key="rec1-1"))
    box.ingest("ussd", Delivery(b"H1|1|Kakuma1|MED|9|86|#95", key="rec1-1"))
    box.ingest("ussd", Delivery(b"H1|2|Kakuma1|MED|3|86|#00", key="rec1-2"))
    box.create_token("t", ["ussd"], ["read"])
    box.consumer("c", "ussd", "beginning")
    box.close()
    reader = oncebox.open(shared_url, read_only=True)
    try:
        assert reader.stats("ussd")["verdicts"]["conflict"] == 1
        assert len(reader.dead_letters("ussd")) == 1
        assert len(reader.quarantined("ussd", None, 10)) == 1
        assert [t.name for t in reader.list_tokens()] == ["t"]
        assert [s.consumer.name for s in reader.consumers()] == ["c"]
        assert reader.lookup("ussd", "rec1-1") is not None
        assert reader.triage("ussd")["headcount"] == 3
        with pytest.raises(StorageError):  # not the engine's choice: the store's
            reader.ingest("ussd", Delivery(b"H1|3|Kakuma1|MED|3|86|#00", key="rec1-3"))
    finally:
        reader.close()
