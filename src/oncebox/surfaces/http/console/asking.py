"""What a console list page was asked, read by one rule: its form fields cut to a bound,
the since/until times (a time that does not read is a problem shown on the page, not an
error page), and the cursor to page on from."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from oncebox.surfaces.digits import whole
from oncebox.surfaces.views import parse_when

FIELD_MAX = 1024  # characters kept of any one field
TIMES = ("since", "until")


def fields_of(params: Mapping[str, str], names: Iterable[str]) -> dict[str, str]:
    """Each named field, stripped and bounded ("" when absent)."""
    return {name: params.get(name, "").strip()[:FIELD_MAX] for name in names}


def times_of(fields: Mapping[str, str], problems: list[str]) -> dict[str, float | None]:
    """``since`` and ``until`` as unix seconds (None when empty); one that does not read
    adds a problem naming it."""
    times: dict[str, float | None] = dict.fromkeys(TIMES)
    for name in TIMES:
        if fields.get(name):
            try:
                times[name] = parse_when(fields[name])
            except ValueError as exc:
                problems.append(f"{name}: {exc}")
    return times


def after_of(fields: Mapping[str, str]) -> int:
    """The cursor to page on from: a position, or 0 for the first page."""
    return whole(fields.get("after", "")) or 0
