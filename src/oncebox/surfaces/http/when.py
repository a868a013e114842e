"""Times in a query, by the one rule every surface reads them with
(:func:`oncebox.surfaces.views.parse_when`): ISO 8601 (UTC without an offset) or unix
seconds, on the server clock; published in OpenAPI as exactly what that rule takes."""

from __future__ import annotations

from pydantic import WithJsonSchema

from oncebox.surfaces.http.problems import ProblemError
from oncebox.surfaces.views import ISO_PATTERN, SECONDS_PATTERN, parse_when

WHEN = "ISO 8601 (without an offset it is UTC) or unix seconds, on the server clock"
WHEN_SCHEMA = WithJsonSchema(
    {
        "anyOf": [
            {"type": "string", "pattern": ISO_PATTERN},
            {"type": "string", "pattern": SECONDS_PATTERN},
            {"type": "null"},
        ]
    }
)


def seconds(name: str, when: str | None, where: str = "query") -> float | None:
    """A time from the query (or a body: ``where``) as unix seconds (None: not given);
    one that does not read is 422, named by where it was."""
    if when is None:
        return None
    try:
        return parse_when(when)
    except ValueError as exc:
        raise ProblemError(422, "validation", f"{where}.{name}: {exc}") from None
