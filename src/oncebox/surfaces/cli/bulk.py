"""Bulk actions by filter from the command line: without ``--yes`` a preview (how many
match, the first of them) that changes nothing; with it, one call of at most
``--limit`` items, one log entry."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import click

from oncebox.domain.bulk import BulkRun
from oncebox.engine.operators import BULK_MOST
from oncebox.surfaces import letters
from oncebox.surfaces.choices import RESOLUTIONS
from oncebox.surfaces.cli.base import ACTOR, AFTER, Context, emit, fail
from oncebox.surfaces.cli.letters import REFUSED_AGAIN, When, dead_letters
from oncebox.surfaces.cli.views import quarantine
from oncebox.surfaces.views import as_json

LIMIT = click.option(
    "--limit",
    default=100,
    show_default=True,
    type=click.IntRange(1, BULK_MOST),
    help="At most this many this run; the answer's next_after is where --after goes on.",
)
YES = click.option("--yes", is_flag=True, help="Act; without it, only show what would be.")


def _filters(command: Any) -> Any:
    for option in reversed(
        [
            click.option("--inbox", required=True, help="The inbox."),
            click.option("--reason", help="Only those refused for this reason."),
            click.option("--status", help="Only those open, replayed or archived."),
            click.option("--since", type=When(), help="Received at or after."),
            click.option("--until", type=When(), help="Received before."),
            click.option("--search", metavar="TEXT", help="Only those whose kept head holds TEXT."),
            click.option("--after", default=0, type=AFTER, help="Ids after this."),
        ]
    ):
        command = option(command)
    return command


def _preview(obj: Context, inbox: str, query: letters.Query, verb: str, limit: int) -> None:
    chosen = letters.checked(obj.box, [inbox], query)
    count, first = obj.box.letters_matching([inbox], chosen)
    emit({"count": count, "first": [as_json(row, inbox=name) for name, row in first]})
    click.echo(
        f"oncebox: {count} dead letter(s) match; nothing done: add --yes to {verb} the "
        f"first {min(count, limit)}",
        err=True,
    )


def _done(run: BulkRun) -> None:
    emit(asdict(run))
    failed = [i.id for i in run.items if i.outcome == "failed" or i.outcome.startswith("rej")]
    if failed:
        shown = ", ".join(str(i) for i in failed[:20])
        fail(f"{len(failed)} of {run.count} were refused again or failed: {shown}", REFUSED_AGAIN)


@dead_letters.group("bulk")
def bulk() -> None:
    """Replay or archive every dead letter a filter selects, previewed first."""


@bulk.command("replay")
@_filters
@click.option("--note", help="Why; kept in the log.")
@LIMIT
@YES
@ACTOR
@click.pass_obj
def bulk_replay(
    obj: Context, /, inbox: str, note: str | None, limit: int, yes: bool, actor: str, **query: Any
) -> None:
    """Replay the dead letters the filter selects, each as `dead-letters replay` does.
    Exits 3 if any was refused again or failed.

    \b
    Examples:
      oncebox dead-letters bulk replay --inbox ussd --reason bad_checksum --since 2030-01-15T08:00Z
      oncebox dead-letters bulk replay --inbox ussd --reason bad_checksum --status open --yes
    """
    found = letters.Query(**query)
    if not yes:
        _preview(obj, inbox, found, "replay", limit)
        return
    chosen = letters.checked(obj.box, [inbox], found)
    _done(obj.box.bulk_replay([inbox], chosen, actor, note, limit))


@bulk.command("archive")
@_filters
@click.option("--note", required=True, help="Why they are put aside; kept in the log.")
@LIMIT
@YES
@ACTOR
@click.pass_obj
def bulk_archive(
    obj: Context, /, inbox: str, note: str, limit: int, yes: bool, actor: str, **query: Any
) -> None:
    """Archive the dead letters the filter selects, with the note.

    Example: oncebox dead-letters bulk archive --inbox ussd --search TEST --note "drill" --yes
    """
    found = letters.Query(**query)
    if not yes:
        _preview(obj, inbox, found, "archive", limit)
        return
    chosen = letters.checked(obj.box, [inbox], found)
    _done(obj.box.bulk_archive([inbox], chosen, actor, note, limit))


@quarantine.command("bulk-resolve")
@click.argument("inbox")
@click.argument("action", type=click.Choice(RESOLUTIONS))
@click.option("--identity-prefix", help="Only conflicts whose identity starts with this.")
@click.option("--since", type=When(), help="First seen at or after.")
@click.option("--until", type=When(), help="First seen before.")
@click.option("--after", default=0, type=AFTER, help="Ids after this.")
@click.option("--note", required=True, help="Why; kept on each row and in the log.")
@LIMIT
@YES
@ACTOR
@click.pass_obj
def bulk_resolve(
    obj: Context,
    inbox: str,
    action: str,
    identity_prefix: str | None,
    since: float | None,
    until: float | None,
    after: int,
    note: str,
    limit: int,
    yes: bool,
    actor: str,
) -> None:
    """Keep the originals (or accept the newcomers) of every open conflict that matches.

    Example: oncebox quarantine bulk-resolve ussd keep --identity-prefix rec --note "..." --yes
    """
    box = obj.box
    if not yes:
        count, rows = box.conflicts_matching(inbox, identity_prefix, since, until, after)
        emit({"count": count, "first": [as_json(row, inbox=inbox) for row in rows]})
        click.echo(
            f"oncebox: {count} open conflict(s) match; nothing done: add --yes to "
            f"{action} the first {min(count, limit)}",
            err=True,
        )
        return
    run = box.bulk_resolve(
        inbox,
        action,
        note,
        actor,
        prefix=identity_prefix,
        since=since,
        until=until,
        after=after,
        limit=limit,
    )
    if any(item.outcome == "failed" for item in run.items):
        emit(asdict(run))
        fail("some conflicts could not be resolved", REFUSED_AGAIN)
    emit(asdict(run))
