"""Named SQL blocks (``-- name: x``), numbered migrations and a schema, read from package
files.

The store keeps its own in ``oncebox/store/sql/``: ``common/queries.sql`` holds the
statements every backend runs as written, ``<backend>/queries.sql`` only what differs;
``<backend>/schema.sql`` the whole schema and ``<backend>/NNN_name.sql`` its migrations,
the same number and name for the same change on every backend. An apply step keeps its
tables' in a folder of its own package, read the same way, so that a step can own its
tables as the built-in ones do.
"""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files
from typing import NamedTuple

from oncebox.errors import StorageError

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
_MIGRATION = re.compile(r"(\d{3})_\w+\.sql")
# What to_psycopg looks at, leftmost first: text copied as it is (quoted strings and
# names, comments, a :: cast), SQLite's placeholders, and a literal percent sign.
_SQLITE_SQL = re.compile(
    r"""(?P<verbatim>'(?:[^']|'')*'|"(?:[^"]|"")*"|--[^\n]*|/\*.*?\*/|::)
      | :(?P<named>[A-Za-z_]\w*)
      | (?P<numbered>\?\d+)
      | (?P<positional>\?)
      | (?P<percent>%)""",
    re.VERBOSE | re.DOTALL,
)


class Query(NamedTuple):
    """One named statement. A ``columnar`` one (marked ``-- columnar``, PostgreSQL) runs
    once for a whole batch, given one array per column instead of a row at a time. One
    marked ``-- one row each`` (an upsert) changes one row per row of parameters, so
    PostgreSQL need not wait for its count before going on. One marked ``-- foldable``
    reads nothing but its parameters and its own table, so PostgreSQL may send it
    together with the writes beside it (:mod:`oncebox.store.pgfold`)."""

    name: str
    sql: str
    columnar: bool = False
    each: bool = False
    foldable: bool = False


def parse_queries(text: str) -> dict[str, Query]:
    parts = _NAME.split(text)
    return {
        name: Query(
            name,
            body.strip(),
            "-- columnar" in body,
            "-- one row each" in body,
            "-- foldable" in body,
        )
        for name, body in zip(parts[1::2], parts[2::2], strict=True)
    }


def to_psycopg(sql: str) -> str:
    """A statement written with SQLite's placeholders (``?``, ``:name``) in psycopg's
    (``%s``, ``%(name)s``). psycopg reads every ``%`` of a statement it is given
    parameters for, inside quotes and comments too, so a literal one is doubled there
    as well; a ``?`` or ``:name`` inside quotes or a comment is text, and stays."""
    kinds: set[str] = set()

    def translate(match: re.Match[str]) -> str:
        if match["verbatim"] is not None:
            return match["verbatim"].replace("%", "%%")
        if match["percent"] is not None:
            return "%%"
        if match["numbered"] is not None:
            raise StorageError(f"numbered placeholder {match['numbered']} is SQLite's own")
        kinds.add("named" if match["named"] else "positional")
        return f"%({match['named']})s" if match["named"] else "%s"

    translated = _SQLITE_SQL.sub(translate, sql)
    if len(kinds) > 1:
        raise StorageError("a statement takes positional or named parameters, not both")
    return translated


def read_queries(package: str, *path: str) -> dict[str, Query]:
    """The named statements of a package's SQL file (``path`` inside the package)."""
    return parse_queries(files(package).joinpath(*path).read_text("utf-8"))


def read_dialect_queries(package: str, folder: str, name: str, dialect: str) -> dict[str, Query]:
    """A dialect's statements: those of ``folder/common/name`` (written for SQLite, put
    in psycopg's placeholders for PostgreSQL) and those of ``folder/<dialect>/name``. A
    statement is written once: the same name in both files is an error."""
    common = parse_queries(files(package).joinpath(folder, "common", name).read_text("utf-8"))
    own = read_queries(package, folder, dialect, name)
    twice = sorted(common.keys() & own.keys())
    if twice:
        raise StorageError(f"{folder}/{dialect}/{name} repeats common statements {twice}")
    if dialect == "postgres":
        common = {key: q._replace(sql=to_psycopg(q.sql)) for key, q in common.items()}
    return {**common, **own}


def read_migrations(package: str, *folder: str) -> list[tuple[int, str]]:
    """A package folder's numbered migrations ``NNN_name.sql``, in order."""
    found = []
    for entry in files(package).joinpath(*folder).iterdir():
        match = _MIGRATION.fullmatch(entry.name)
        if match:
            found.append((int(match.group(1)), entry.read_text("utf-8")))
    return sorted(found)


@cache
def load_queries(backend: str) -> dict[str, Query]:
    """Every statement the store runs on ``backend``, by name."""
    return read_dialect_queries("oncebox.store", "sql", "queries.sql", backend)


def load_migrations(backend: str) -> list[tuple[int, str]]:
    """The store's own numbered migrations, in order."""
    return read_migrations("oncebox.store", "sql", backend)


def load_schema(backend: str) -> str:
    """The store's whole current schema, what a new store is made with."""
    return files("oncebox.store").joinpath("sql", backend, "schema.sql").read_text("utf-8")
