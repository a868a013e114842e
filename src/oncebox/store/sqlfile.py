"""Load a backend's named SQL blocks (``-- name: x``) from the package's data files."""

from __future__ import annotations

import re
from importlib.resources import files

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def load_queries(backend: str) -> dict[str, str]:
    text = files("oncebox.store").joinpath("sql", backend, "queries.sql").read_text("utf-8")
    parts = _NAME.split(text)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def load_migrations(backend: str) -> list[tuple[int, str]]:
    """Numbered migrations ``NNN_name.sql``, in order."""
    folder = files("oncebox.store").joinpath("sql", backend)
    found = []
    for entry in folder.iterdir():
        match = re.fullmatch(r"(\d{3})_\w+\.sql", entry.name)
        if match:
            found.append((int(match.group(1)), entry.read_text("utf-8")))
    return sorted(found)
