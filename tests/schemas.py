"""A store's schema and rows as the database itself describes them, to compare two stores.

SQLite keeps each table's ``CREATE`` text as it was written and as ``ALTER TABLE`` then
edited it, so two equal tables can read differently in ``sqlite_master``: a table is
described by what SQLite reports of it instead (columns, keys, indexes, foreign keys,
checks, rowid or not), an index, a view or a trigger by its normalized text.
PostgreSQL's is what ``pg_dump --schema-only`` prints, without its comments.
"""

from __future__ import annotations

import re
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import psycopg
import pytest

from conftest import POSTGRES, Server
from pgcluster import _find_bindir

BACKENDS = ["sqlite", "postgres"]

# Bookkeeping whose rows differ between two equal stores: when each migration ran.
APPLIED_AT = {"schema_version": "version", "step_schema": "step, version"}


def _sql_text(sql: str) -> str:
    """SQL without its comments, in one spacing."""
    return " ".join(re.sub(r"--[^\n]*", " ", sql).split())


def _checks(sql: str) -> list[str]:
    """The CHECK constraints of a CREATE TABLE statement, each with its parentheses."""
    text, found = _sql_text(sql), []
    for match in re.finditer(r"\bCHECK\s*\(", text, re.IGNORECASE):
        depth, start = 0, match.end() - 1
        for end in range(start, len(text)):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            if depth == 0:
                found.append(text[start : end + 1])
                break
    return sorted(found)


def sqlite_schema(path: str) -> dict[str, Any]:
    """Every table, index, view and trigger of a SQLite database, by kind and name."""
    conn = apsw.Connection(path)
    try:
        described: dict[str, Any] = {}
        rows = conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
        ).fetchall()
        for kind, name, text in rows:
            sql = str(text)
            if kind != "table":
                described[f"{kind} {name}"] = _sql_text(sql)
                continue
            indexes = {
                index: (unique, origin, partial, conn.execute(
                    "SELECT seqno, cid, name, desc, coll, key FROM pragma_index_xinfo(?)",
                    (index,)).fetchall())
                for _, index, unique, origin, partial in conn.execute(
                    "SELECT * FROM pragma_index_list(?)", (name,))
            }  # fmt: skip
            described[f"table {name}"] = {
                "columns": conn.execute(
                    "SELECT * FROM pragma_table_xinfo(?) ORDER BY cid", (name,)
                ).fetchall(),
                "shape": conn.execute(
                    "SELECT type, ncol, wr, strict FROM pragma_table_list(?)", (name,)
                ).fetchall(),
                "foreign_keys": sorted(
                    conn.execute("SELECT * FROM pragma_foreign_key_list(?)", (name,)).fetchall()
                ),
                "indexes": indexes,
                "checks": _checks(sql),
                "autoincrement": "AUTOINCREMENT" in _sql_text(sql).upper(),
            }
        return described
    finally:
        conn.close()


def postgres_schema(url: str) -> list[str]:
    """What ``pg_dump --schema-only`` prints of the database, without comments, blank
    lines or the random key of its ``\\restrict`` lines."""
    bindir = _find_bindir()
    assert bindir is not None, "pg_dump comes with the PostgreSQL server binaries"
    dumped = subprocess.run(
        [str(bindir / "pg_dump"), "--schema-only", "--no-owner", "--no-privileges", url],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    return [
        line
        for line in dumped.splitlines()
        if line.strip() and not line.startswith(("--", "\\restrict", "\\unrestrict"))
    ]


def tables(backend: str, url: str) -> list[str]:
    """The names of the database's tables (SQLite's own excluded)."""
    if backend == "sqlite":
        conn = apsw.Connection(url)
        try:
            return [name for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%' ORDER BY name")]  # fmt: skip
        finally:
            conn.close()
    with psycopg.connect(url) as pg:
        return [name for (name,) in pg.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE' "
            "AND table_schema = current_schema() ORDER BY table_name")]  # fmt: skip


def rows(backend: str, url: str, timeless: bool = False) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, in order. ``timeless``: of the migrations' bookkeeping,
    only which ran, not when."""
    found: dict[str, list[tuple[Any, ...]]] = {}
    for table in tables(backend, url):
        columns = APPLIED_AT.get(table, "*") if timeless else "*"
        query = f"SELECT {columns} FROM {table}"
        if backend == "sqlite":
            conn = apsw.Connection(url)
            try:
                found[table] = sorted((tuple(row) for row in conn.execute(query)), key=repr)
            finally:
                conn.close()
        else:
            with psycopg.connect(url) as pg:
                found[table] = sorted((tuple(row) for row in pg.execute(query)), key=repr)
    return found


# Fixtures: empty databases of either backend ------------------------------------------
NewDatabase = Callable[[], str]


@pytest.fixture(params=["sqlite", POSTGRES])
def backend(request: pytest.FixtureRequest) -> str:
    """Each backend in turn."""
    return str(request.param)


@pytest.fixture
def new_database(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[NewDatabase]:
    """Makes empty databases of the backend: a URL each."""
    made: list[str] = []
    server: Server | None = request.getfixturevalue("pg_server") if backend == "postgres" else None

    def make() -> str:
        name = f"s_{uuid.uuid4().hex[:12]}"
        made.append(name)
        if server is None:
            return f"sqlite:///{tmp_path / name}.db"
        return server.create_database(name)

    yield make
    if server is not None:
        for name in made:
            server.drop_database(name)


def path(url: str) -> str:
    """A SQLite store's file."""
    return url.removeprefix("sqlite:///")


def schema(backend: str, url: str) -> Any:
    """The store's schema, as the backend describes it."""
    return sqlite_schema(path(url)) if backend == "sqlite" else postgres_schema(url)
