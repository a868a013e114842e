"""Dead letters: listed with filters and paged, downloaded as ingest lines, replayed."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, BinaryIO

import click

from oncebox.engine.reads import search_term
from oncebox.errors import InvalidOperation
from oncebox.surfaces import letters, listing
from oncebox.surfaces.cli.base import ACTOR, AFTER, ROW_ID, Context, cli, emit, emit_pages, fail
from oncebox.surfaces.cli.output import JSON, columns, show, show_pages
from oncebox.surfaces.views import as_json, parse_when

if TYPE_CHECKING:
    from oncebox.engine.box import Oncebox

# Dead letters one --format ndjson export gives by default: as many as the HTTP route's
# and the console's downloads, so that the export piped into `ingest` re-delivers them all.
EXPORT_LIMIT = 100_000

LETTERS = columns(
    "id", "inbox", "reason", "status", ("received", "received_at"), "key", ("head", "head"),
    "detail", ("tries", "attempts"), keep=("reason", "status"),
)  # fmt: skip


class When(click.ParamType[float]):
    """A time: ISO 8601 (UTC without an offset) or unix seconds."""

    name = "TIME"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float):
            return value
        try:
            return parse_when(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


@cli.group("dead-letters", invoke_without_command=True)
@click.option("--inbox", help="Only this inbox (needed with --format ndjson).")
@click.option("--reason", help="Only those refused for this reason (bad_checksum, ...).")
@click.option("--since", type=When(), help="Received at or after (2030-01-15T08:00Z).")
@click.option("--until", type=When(), help="Received before.")
@click.option("--search", metavar="TEXT", help="Only those whose kept head holds TEXT.")
@click.option("--after", default=0, type=AFTER, help="Page on: ids after this.")
@click.option("--status", help="Only those open, replayed or archived.")
@click.option(
    "--limit",
    type=click.IntRange(1),
    help=f"At most this many [default: 100; with --format ndjson, {EXPORT_LIMIT:,}].",
)
@click.option(
    "--format",
    "shape",
    type=click.Choice(["json", "ndjson"]),
    help="json (what is printed when piped), or ndjson: the lines `oncebox ingest` reads, "
    "to re-deliver them after a fix [default: a table on a terminal, else json].",
)
@JSON
@click.pass_context
def dead_letters(
    ctx: click.Context,
    inbox: str | None,
    reason: str | None,
    since: float | None,
    until: float | None,
    search: str | None,
    after: int,
    status: str | None,
    limit: int | None,
    shape: str | None,
) -> None:
    """Invalid deliveries: the first 1,024 bytes of the kept copy, its length, SHA-256
    and the reason; oldest first, filtered, a page at a time (--after the last id
    shown; `dead-letters show ID` for one whole). A --search term is at most 256 bytes.

    \b
    Examples:
      oncebox dead-letters --inbox ussd --reason bad_checksum --since 2030-01-15T08:00Z
      oncebox dead-letters --inbox ussd --format ndjson > again.ndjson
      oncebox dead-letters replay 17 --note "gateway trailer fixed"
    """
    if ctx.invoked_subcommand is not None:
        return
    obj: Context = ctx.obj
    box = obj.reader
    names = [inbox] if inbox else [a.name for a in box.inboxes]
    for name in names:
        box.inbox(name)  # an unknown inbox fails here, saying which are declared
    try:
        search_term(search)
    except InvalidOperation as exc:
        fail(f"--search: {exc}")
    query = letters.Query(reason, since, until, search, after, status)
    letters.checked(box, names, query)  # an unknown reason or status: one line, exit 2
    if shape == "ndjson":
        if inbox is None:
            fail("--format ndjson needs --inbox: each inbox's codec has its own line form")
        export(box, names, query, EXPORT_LIMIT if limit is None else limit)
        return
    pages = listing.letter_pages(box, names, query, 100 if limit is None else limit)
    if shape == "json":
        emit_pages(pages)
    else:
        show_pages(pages, LETTERS)


def export(box: Oncebox, names: list[str], query: letters.Query, limit: int) -> None:
    """Up to ``limit`` dead letters as the lines `ingest` reads; on stderr, those no line
    can carry, and where to go on when more matched than ``limit``: never cut unsaid."""
    left_out: list[int] = []
    sent, last, more = 0, 0, False
    for letter_id, line in letters.numbered_lines(box, names, query, limit + 1, left_out):
        if sent == limit:  # one past the limit: there are more
            more = True
            break
        sys.stdout.buffer.write(line)
        sent, last = sent + 1, letter_id
    sys.stdout.buffer.flush()
    if more:
        left_out = [i for i in left_out if i < last]  # past the cut: not exported anyway
    if left_out:
        shown = ", ".join(str(i) for i in left_out[:20])
        click.echo(
            f"oncebox: left out {len(left_out)} dead letter(s) that no line can "
            f"re-deliver (kept only in part, or beyond the line form): {shown}",
            err=True,
        )
    if more:
        click.echo(
            f"oncebox: the first {limit:,} exported; more match: --after {last} for the next",
            err=True,
        )


@dead_letters.command("show")
@click.argument("letter_id", type=ROW_ID)
@JSON
@click.pass_obj
def letter_show(obj: Context, letter_id: int) -> None:
    """One dead letter with all of its kept head (a listing shows its first 1,024 bytes)."""
    found = obj.reader.get_dead_letter(letter_id)
    if found is None:
        fail(f"no dead letter {letter_id}")
    show(as_json(found[1], inbox=found[0]))


REFUSED_AGAIN = 3  # the exit status of a replay refused again (the dead letter stays open)


@dead_letters.command("replay")
@click.argument("letter_id", type=ROW_ID)
@click.option("--note", help="Why it is replayed; kept in the log (needed with a correction).")
@click.option("--lease-token", type=AFTER, help="For a lease-fenced inbox.")
@click.option(
    "--body-file",
    type=click.File("rb"),
    help="A corrected body to decide instead of the one kept (- for stdin).",
)
@click.option("--key", help="A corrected key (a USSD frame_id, say).")
@ACTOR
@click.pass_obj
def replay(
    obj: Context,
    letter_id: int,
    note: str | None,
    lease_token: int | None,
    body_file: BinaryIO | None,
    key: str | None,
    actor: str,
) -> None:
    """Deliver a dead letter again after a sender or configuration fix, or with your
    correction of it: decided now, like any delivery; who and why are kept in the log
    (with a correction, the old and new SHA-256). Decided, it closes as replayed; refused
    again, the same dead letter counts one attempt more and the command exits 3.

    \b
    Examples:
      oncebox dead-letters replay 17 --note "codec fixed in 1.4"
      oncebox dead-letters replay 18 --body-file fixed.txt --note "trailer recomputed"
    """
    body = body_file.read() if body_file is not None else None
    decision = obj.box.replay(letter_id, actor, lease_token, note, body=body, key=key)
    found = obj.box.get_dead_letter(letter_id)
    assert found is not None
    emit({"decision": decision.to_dict(), "dead_letter": as_json(found[1], inbox=found[0])})
    if str(decision.verdict) == "rejected":
        fail(f"dead letter {letter_id} was refused again: {decision.reason}", REFUSED_AGAIN)


@dead_letters.command("archive")
@click.argument("letter_id", type=ROW_ID)
@click.option("--note", required=True, help="Why it is put aside; kept on it and in the log.")
@ACTOR
@click.pass_obj
def archive(obj: Context, letter_id: int, note: str, actor: str) -> None:
    """Put a dead letter aside: it leaves the open ones, and is kept.

    Example: oncebox dead-letters archive 17 --note "test traffic from the new gateway"
    """
    found = obj.box.get_dead_letter(letter_id)
    if found is None:
        fail(f"no dead letter {letter_id}")
    emit(as_json(obj.box.archive(letter_id, actor, note), inbox=found[0]))
