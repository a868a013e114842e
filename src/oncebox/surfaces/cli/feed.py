"""The feed and its durable consumers: read what was accepted as NDJSON, follow it, and
keep a named cursor in the store."""

from __future__ import annotations

import json
import sys
import time

import click

from oncebox.engine.feed import PAGE_MAX, FeedPage, Standing
from oncebox.engine.following import WAIT_MAX
from oncebox.surfaces.cli.base import Context, cli, default_actor, emit
from oncebox.surfaces.cli.output import JSON, columns, show
from oncebox.surfaces.digits import whole
from oncebox.surfaces.views import as_json

CONSUMERS = columns(
    "name", "inbox", "position", "holder", ("lease expires", "lease_expires_at"),
    ("lag", "lag_entries"), ("lag s", "lag_seconds"), ("updated", "updated_at"),
)  # fmt: skip


def _start(value: str) -> str | int:
    if value in ("beginning", "end"):
        return value
    position = whole(value)
    if position is not None:
        return position
    raise click.BadParameter(f"beginning, end or a log position, not {value!r}")


def _print(page: FeedPage) -> None:
    """One JSON line per entry, flushed: what is printed is out of this process."""
    for entry in page.entries:
        click.echo(json.dumps(as_json(entry), separators=(",", ":")))
    sys.stdout.flush()


@cli.command("feed")
@click.argument("inbox")
@click.option(
    "--after",
    default=0,
    show_default=True,
    type=click.IntRange(0),
    metavar="P",
    help="Read after this log position.",
)
@click.option("--from-end", is_flag=True, help="Start at the log's end (with --follow).")
@click.option(
    "--limit",
    default=PAGE_MAX,
    show_default=True,
    type=click.IntRange(1, PAGE_MAX),
    help="Entries per read.",
)
@click.option("--follow", is_flag=True, help="Keep going as entries are sealed (Ctrl-C stops).")
@click.pass_obj
def feed(
    obj: Context, inbox: str, after: int, from_end: bool, limit: int, follow: bool
) -> None:  # fmt: skip
    """Accepted records and accepted revisions of INBOX after a log position, in log
    order, one JSON object per line; ends at the log's end unless --follow.

    Example: oncebox feed payments --after 1200 --follow
    """
    box = obj.box
    position = box.log_position() if from_end else after
    while True:
        page = box.feed(inbox, after=position, limit=limit, wait=WAIT_MAX if follow else 0)
        _print(page)
        if not page.entries and not follow and page.next_after == position:
            return
        position = page.next_after


@cli.group()
def consumers() -> None:
    """Durable consumers: named cursors over an inbox's feed, kept in the store and
    moved only by the holder of their lease."""


def _shown(standing: Standing) -> dict[str, object]:
    lease = standing.lease
    return as_json(
        standing.consumer,
        inbox=standing.inbox,
        holder=lease.holder if lease else None,
        lease_expires_at=lease.expires_at if lease else None,
        lag_entries=standing.lag_entries,
        lag_seconds=round(standing.lag_seconds, 3),
    )


@consumers.command("list")
@JSON
@click.pass_obj
def consumers_list(obj: Context) -> None:
    """Every consumer: its cursor, its holder, and its lag in entries and seconds."""
    show([_shown(s) for s in obj.reader.consumers()], CONSUMERS)


@consumers.command("create")
@click.argument("name")
@click.argument("inbox")
@click.option(
    "--start",
    default="beginning",
    show_default=True,
    metavar="beginning|end|P",
    help="Where it starts: the feed's beginning, its end now, or after position P.",
)
@click.pass_obj
def consumers_create(obj: Context, name: str, inbox: str, start: str) -> None:
    """Make consumer NAME of INBOX's feed (one already there is left as it is).

    Example: oncebox consumers create ledger payments --start end
    """
    obj.box.consumer(name, inbox, _start(start))
    emit(_shown(obj.box.consumer_standing(name)))


@consumers.command("show")
@click.argument("name")
@JSON
@click.pass_obj
def consumers_show(obj: Context, name: str) -> None:
    """One consumer: its cursor, its holder and its lag."""
    show(_shown(obj.reader.consumer_standing(name)))


@consumers.command("drop")
@click.argument("name")
@click.pass_obj
def consumers_drop(obj: Context, name: str) -> None:
    """Forget consumer NAME and its cursor (the feed is untouched)."""
    obj.box.drop_consumer(name)
    emit({"dropped": name})


@consumers.command("read")
@click.argument("name")
@click.option("--holder", default=None, help="Who holds the lease (default: cli:$USER).")
@click.option(
    "--ttl",
    default=30.0,
    show_default=True,
    type=click.FloatRange(1, 3600),
    help="Seconds the lease lasts; taken again at half of it.",
)
@click.option(
    "--limit",
    default=100,
    show_default=True,
    type=click.IntRange(1, PAGE_MAX),
    help="Entries per page.",
)
@click.option("--follow", is_flag=True, help="Keep going as entries are sealed (Ctrl-C stops).")
@click.pass_obj
def consumers_read(
    obj: Context, name: str, holder: str | None, ttl: float, limit: int, follow: bool
) -> None:  # fmt: skip
    """Take NAME's lease, print the entries after its cursor as JSON lines, and
    acknowledge each page once it is written out; ends when caught up unless --follow.

    An entry printed but not acknowledged (the process was killed between the two)
    comes again on the next read: handle entries by their idempotency_key.

    Example: oncebox consumers read ledger --follow | ./apply-to-ledger
    """
    box = obj.box
    mine = box.feed_consumer(name)
    taken = 0.0
    looked: int | None = None  # where the last read looked up to
    while True:
        if time.monotonic() - taken > ttl / 2:
            mine.lease(holder or default_actor(), ttl)
            taken = time.monotonic()
        wait = min(WAIT_MAX, ttl / 4) if follow else 0.0
        page = mine.next(limit=limit, wait=wait)
        _print(page)
        if page.entries:
            mine.ack(page.next_after)
        elif not follow and page.next_after == looked:  # caught up, not a quiet stretch
            return
        looked = page.next_after
