"""How a command answers: a table for a person at a terminal, JSON for a script.

A listing is a table and one item a panel of its fields when standard output is a
terminal; piped, redirected, or with ``--json`` (before the command, or after it), the
command prints the JSON it always printed, byte for byte, so that scripts never see a
table. The choice is made here once (:func:`wants_json`), never per command; a command
only names its columns.

In a table a long value is cut with ``…``, a time is ISO 8601 in UTC, and text that came
from a sender is shown with every control character spelled out (``\\x1b``): a terminal
must not obey an escape sequence someone delivered.
"""

from __future__ import annotations

import itertools
import re
import sys
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from oncebox.surfaces.cli.base import emit, emit_pages
from oncebox.surfaces.views import iso

if TYPE_CHECKING:  # rich is imported where a person reads: JSON for a script needs none of it
    from rich.console import Console

WIDEST = 60  # characters of one value shown in a table cell
PANEL_WIDEST = 200  # ... and in a panel, which has the width to itself
TABLE_ROWS = 1_000  # rows of a listing one table shows (a person pages on with --after)
NARROWEST = 6  # a column is never made narrower than this to fit the terminal


def on_terminal() -> bool:
    """Whether standard output is a terminal (a person reads it)."""
    return sys.stdout.isatty()


def wants_json() -> bool:
    """JSON unless a person reads standard output and did not ask for JSON."""
    ctx = click.get_current_context(silent=True)
    root = ctx.find_root().obj if ctx is not None else None
    return bool(getattr(root, "json", False)) or not on_terminal()


def _ask_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and ctx.find_root().obj is not None:
        ctx.find_root().obj.json = True


JSON = click.option(
    "--json",
    is_flag=True,
    expose_value=False,
    callback=_ask_json,
    help="Print JSON even on a terminal (what is printed when piped).",
)


@dataclass(frozen=True)
class Column:
    """One column: its heading, and where its value is (a key, ``a.b`` for a key of a
    nested object, or a function of the row)."""

    heading: str
    value: str | Callable[[Mapping[str, Any]], Any]
    widest: int = WIDEST
    keep: bool = False  # never narrowed to fit (a time, a verdict: cut, they say nothing)

    def of(self, row: Mapping[str, Any]) -> Any:
        if callable(self.value):
            return self.value(row)
        found: Any = row
        for part in self.value.split("."):
            found = found.get(part) if isinstance(found, Mapping) else None
        return found


Spec = str | tuple[str, str | Callable[[Mapping[str, Any]], Any]]


def columns(*spec: Spec, keep: Iterable[str] = ()) -> list[Column]:
    """Columns from keys (heading: the key with spaces) or (heading, value) pairs; a
    time, and the columns named in ``keep``, are never narrowed."""
    kept = set(keep)
    made = []
    for one in spec:
        heading, value = (one.replace("_", " "), one) if isinstance(one, str) else one
        name = value if isinstance(value, str) else ""
        made.append(Column(heading, value, keep=_is_time(name) or heading in kept))
    return made


def printable(text: str) -> str:
    """``text`` with every control or format character spelled out, on one line."""
    out = []
    for char in text:
        if char == "\n":
            out.append("\\n")
        elif unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp"):
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(char)
    return "".join(out)


def cut(text: str, widest: int) -> str:
    return text if len(text) <= widest else text[: widest - 1] + "…"


def cell(value: Any, name: str = "", widest: int = WIDEST) -> str:
    """A value as a person reads it: nothing for null, a time (a number under a name
    that says it is one) in ISO 8601, a content as its text, a list or object in one
    line; cut to ``widest`` characters."""
    if value is None:
        text = ""
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, int | float) and _is_time(name):
        text = iso(float(value)) or ""
    elif isinstance(value, Mapping) and set(value) <= {"text", "base64"} and value:
        text = value["text"] if "text" in value else f"(base64) {value['base64']}"
    elif isinstance(value, Mapping):
        text = ", ".join(f"{k} {cell(v, str(k), widest)}" for k, v in value.items())
    elif isinstance(value, list | tuple):
        text = ", ".join(cell(v, name, widest) for v in value)
    elif isinstance(value, float):
        text = f"{value:,.3f}".rstrip("0").rstrip(".")
    elif isinstance(value, int):
        text = f"{value:,}" if abs(value) >= 10_000 else str(value)
    else:
        text = str(value)
    return cut(printable(text), widest)


def duration(seconds: float | None) -> str:
    """Seconds as the configuration spells them (``30d``, ``12h``, ``90s``); none: forever."""
    if seconds is None:
        return "forever"
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def _brief(text: str, name: str) -> str:
    """In a table, a time to the second (``2030-01-15T08:00:00Z``): a panel gives it whole."""
    return _MILLISECONDS.sub("Z", text) if _is_time(name) else text


_MILLISECONDS = re.compile(r"\.[0-9]+Z$")


def _is_time(name: str) -> bool:
    return name.endswith(("_at", "_time", "_seen")) or name in ("at", "created", "expires")


def console() -> Console:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False)


def table(rows: Iterable[Mapping[str, Any]], shown: Sequence[Column], title: str = "") -> None:
    """Rows as one table (rows, never markup: a value shows as it is). A column is as
    wide as its values up to a point; on a narrow terminal the widest give way first."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    names = [c.value if isinstance(c.value, str) else "" for c in shown]
    cells = [
        [_brief(cell(c.of(row), n, c.widest), n) for c, n in zip(shown, names, strict=True)]
        for row in rows
    ]
    if not cells:
        console().print(Text(f"{title + ': ' if title else ''}none"))
        return
    out = console()
    natural = [max(len(c.heading), *(len(line[n]) for line in cells)) for n, c in enumerate(shown)]
    floors = [
        w if c.keep else min(w, max(len(c.heading), NARROWEST))
        for w, c in zip(natural, shown, strict=True)
    ]
    widths = _fitted(
        natural, floors, [c.keep for c in shown], out.width - 2 * len(shown)
    )  # a space each side
    grid = Table(title=title or None, title_justify="left", box=box.SIMPLE_HEAD,
                 show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))  # fmt: skip
    for column, width in zip(shown, widths, strict=True):
        grid.add_column(column.heading, overflow="ellipsis", no_wrap=True,
                        min_width=width, max_width=width)  # fmt: skip
    for line in cells:
        grid.add_row(*(Text(value) for value in line))
    out.print(grid)


def _fitted(widths: list[int], floors: list[int], kept: list[bool], room: int) -> list[int]:
    """Column widths that fit ``room``: the widest above its floor (its heading) gives a
    character at a time, then, if that is not enough, the widest of those not kept down
    to :data:`NARROWEST` (past that, the terminal wraps the line)."""
    widths = list(widths)
    narrowest = [f if keep else NARROWEST for f, keep in zip(floors, kept, strict=True)]
    for least in (floors, narrowest):
        while sum(widths) > room:
            over = [n for n in range(len(widths)) if widths[n] > least[n]]
            if not over:
                break
            widths[max(over, key=widths.__getitem__)] -= 1
    return widths


def panel(item: Mapping[str, Any], title: str = "", leave_out: Iterable[str] = ()) -> None:
    """One item as its fields, a line each: name, then value (those without one left
    out: ``--json`` gives every field)."""
    from rich.table import Table
    from rich.text import Text

    grid = Table(title=title or None, title_justify="left", show_header=False, box=None)
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    skipped = set(leave_out)
    for name, value in item.items():
        if name not in skipped and value not in (None, [], {}):
            grid.add_row(Text(name.replace("_", " ")), Text(cell(value, name, PANEL_WIDEST)))
    console().print(grid)


def show(data: Any, shown: Sequence[Column] = (), title: str = "") -> None:
    """Print ``data``: its JSON for a script, else a table (a list) or a panel."""
    if wants_json():
        emit(data)
    elif isinstance(data, list):
        table(data, shown or _every_key(data), title)
    elif isinstance(data, Mapping):
        panel(data, title)
    else:
        click.echo(str(data))


def show_pages(pages: Iterator[list[dict[str, Any]]], shown: Sequence[Column]) -> None:
    """A listing written a page at a time as JSON, or shown as one table of at most
    :data:`TABLE_ROWS` rows (each bounded by the listing's cut), read no further."""
    if wants_json():
        emit_pages(pages)
        return
    rows = itertools.islice((row for page in pages for row in page), TABLE_ROWS + 1)
    shown_rows = list(rows)
    table(shown_rows[:TABLE_ROWS], shown)
    if len(shown_rows) > TABLE_ROWS:
        last = shown_rows[TABLE_ROWS - 1].get("id")
        click.echo(
            f"oncebox: the first {TABLE_ROWS:,} shown; --after {last} for the next, or --json",
            err=True,
        )


def _every_key(rows: list[Any]) -> list[Column]:
    first = rows[0] if rows and isinstance(rows[0], Mapping) else {}
    return columns(*first)


VERDICTS = ("accepted", "duplicate", "conflict", "rejected")


def tally(verdicts: Mapping[str, int], reasons: Mapping[str, int], what: str = "ingested") -> str:
    """What a run of intake decided, in one line for a person (on stderr: standard output
    stays the decisions a script reads): ``ingested 1,204: 1,100 accepted, 90 duplicate,
    4 conflict, 10 rejected (bad_checksum 7, bad_field 3)``. ``reasons`` are keyed
    ``verdict:reason``, as the consumer's summary keys them."""
    total = sum(verdicts.values())
    parts = [f"{verdicts.get(v, 0):,} {v}" for v in VERDICTS]
    refused = sorted(
        ((k.split(":", 1)[1], n) for k, n in reasons.items() if k.startswith("rejected:")),
        key=lambda pair: (-pair[1], pair[0]),
    )
    if refused:
        parts[-1] += " (" + ", ".join(f"{reason} {n:,}" for reason, n in refused) + ")"
    return f"{what} {total:,}: " + ", ".join(parts)
