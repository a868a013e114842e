"""Dead letters: listed with filters and paged, downloaded as ingest lines, replayed."""

from __future__ import annotations

import sys

import click

from oncebox.engine.reads import search_term
from oncebox.errors import InvalidOperation
from oncebox.surfaces import letters, listing
from oncebox.surfaces.cli.base import ACTOR, Context, cli, emit, emit_pages, fail
from oncebox.surfaces.views import as_json, parse_when


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
@click.option("--after", default=0, type=click.IntRange(0), help="Page on: ids after this.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1))
@click.option(
    "--format",
    "shape",
    type=click.Choice(["json", "ndjson"]),
    default="json",
    show_default=True,
    help="ndjson: the lines `oncebox ingest` reads, to re-deliver them after a fix.",
)
@click.pass_context
def dead_letters(
    ctx: click.Context,
    inbox: str | None,
    reason: str | None,
    since: float | None,
    until: float | None,
    search: str | None,
    after: int,
    limit: int,
    shape: str,
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
    box = obj.box
    names = [inbox] if inbox else [a.name for a in box.inboxes]
    for name in names:
        box.inbox(name)  # an unknown inbox fails here, saying which are declared
    try:
        search_term(search)
    except InvalidOperation as exc:
        fail(f"--search: {exc}")
    query = letters.Query(reason, since, until, search, after)
    if shape == "ndjson":
        if inbox is None:
            fail("--format ndjson needs --inbox: each inbox's codec has its own line form")
        left_out: list[int] = []
        for line in letters.lines(box, names, query, limit, left_out):
            sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
        if left_out:
            shown = ", ".join(str(i) for i in left_out[:20])
            click.echo(
                f"oncebox: left out {len(left_out)} dead letter(s) that no line can "
                f"re-deliver (kept only in part, or beyond the line form): {shown}",
                err=True,
            )
        return
    emit_pages(listing.letter_pages(box, names, query, limit))


@dead_letters.command("show")
@click.argument("letter_id", type=click.IntRange(1))
@click.pass_obj
def show(obj: Context, letter_id: int) -> None:
    """One dead letter with all of its kept head (a listing shows its first 1,024 bytes)."""
    found = obj.box.get_dead_letter(letter_id)
    if found is None:
        fail(f"no dead letter {letter_id}")
    emit(as_json(found[1], inbox=found[0]))


@dead_letters.command("replay")
@click.argument("letter_id", type=click.IntRange(1))
@click.option("--note", help="Why it is replayed; kept in the log.")
@click.option("--lease-token", type=click.IntRange(0), help="For a lease-fenced inbox.")
@ACTOR
@click.pass_obj
def replay(
    obj: Context, letter_id: int, note: str | None, lease_token: int | None, actor: str
) -> None:
    """Deliver a dead letter again after a sender or configuration fix: decided now,
    like any delivery; who and why are kept in the log. One kept only in part cannot be.

    Example: oncebox dead-letters replay 17 --note "codec fixed in 1.4"
    """
    decision = obj.box.replay(letter_id, actor, lease_token, note)
    found = obj.box.get_dead_letter(letter_id)
    assert found is not None
    emit({"decision": decision.to_dict(), "dead_letter": as_json(found[1], inbox=found[0])})
