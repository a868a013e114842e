"""Named SQL blocks (``-- name: x``) and numbered migrations, read from package files.

The store keeps its own in ``oncebox/store/sql/<backend>/``; an apply step keeps its
tables' in a folder of its own package, read the same way, so that a step can own
its tables as the built-in ones do.
"""

from __future__ import annotations

import re
from importlib.resources import files
from typing import NamedTuple

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
_MIGRATION = re.compile(r"(\d{3})_\w+\.sql")


class Query(NamedTuple):
    """One named statement. A ``columnar`` one (marked ``-- columnar``, PostgreSQL) runs
    once for a whole batch, given one array per column instead of a row at a time."""

    name: str
    sql: str
    columnar: bool = False


def parse_queries(text: str) -> dict[str, Query]:
    parts = _NAME.split(text)
    return {
        name: Query(name, body.strip(), "-- columnar" in body)
        for name, body in zip(parts[1::2], parts[2::2], strict=True)
    }


def read_queries(package: str, *path: str) -> dict[str, Query]:
    """The named statements of a package's SQL file (``path`` inside the package)."""
    return parse_queries(files(package).joinpath(*path).read_text("utf-8"))


def read_migrations(package: str, *folder: str) -> list[tuple[int, str]]:
    """A package folder's numbered migrations ``NNN_name.sql``, in order."""
    found = []
    for entry in files(package).joinpath(*folder).iterdir():
        match = _MIGRATION.fullmatch(entry.name)
        if match:
            found.append((int(match.group(1)), entry.read_text("utf-8")))
    return sorted(found)


def load_queries(backend: str) -> dict[str, Query]:
    return read_queries("oncebox.store", "sql", backend, "queries.sql")


def load_migrations(backend: str) -> list[tuple[int, str]]:
    """The store's own numbered migrations, in order."""
    return read_migrations("oncebox.store", "sql", backend)
