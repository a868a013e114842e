"""Records you can find: an inbox's records filtered and paged, one record whole with all
that happened to it, and everything kept under one delivery key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from oncebox.engine.finding import ORDERS, Order
from oncebox.engine.reads import search_term
from oncebox.errors import InvalidOperation
from oncebox.surfaces import records
from oncebox.surfaces.cli.base import AFTER, ROW_ID, Context, cli, fail
from oncebox.surfaces.cli.letters import When
from oncebox.surfaces.cli.output import JSON, columns, panel, show, show_pages, table, wants_json


def _about(row: Mapping[str, Any]) -> str:
    if row.get("quarantine_id") is not None:
        return f"quarantine {row['quarantine_id']}"
    if row.get("dead_letter_id") is not None:
        return f"dead letter {row['dead_letter_id']}"
    return ""


RECORDS = columns(
    "id", "identity", "key", ("rev", "revision"), "first_seen", ("seen", "seen_count"),
    ("log", "log_seq"), ("content", "content"),
)  # fmt: skip
TIMELINE = columns(
    "at", "what", ("record", "record_id"), ("rev", "revision"), ("about", _about),
    ("log", "log_position"), "by", "count", "detail",
    keep=("what",),
)  # fmt: skip


@cli.command("records")
@click.argument("inbox")
@click.option("--key", help="Only the records that came with this delivery key.")
@click.option("--identity", help="Only the record of this identity.")
@click.option("--since", type=When(), help="First seen at or after (2030-01-15T08:00Z).")
@click.option("--until", type=When(), help="First seen before.")
@click.option("--search", metavar="TEXT", help="Only those whose content holds TEXT.")
@click.option("--after", default=0, type=AFTER, help="Page on: after this id.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1))
@click.option(
    "--order", type=click.Choice(ORDERS), default=Order.NEWEST.value, show_default=True,
    help="By when each was first seen.",
)  # fmt: skip
@JSON
@click.pass_obj
def records_list(
    obj: Context,
    inbox: str,
    key: str | None,
    identity: str | None,
    since: float | None,
    until: float | None,
    search: str | None,
    after: int,
    limit: int,
    order: str,
) -> None:
    """An inbox's records, newest first: id, identity, delivery key, revision, witness,
    first and last seen, duplicates, log position, and the content's first 1,024 bytes
    with its length and SHA-256; a page at a time (--after the last id shown; `record
    ID` for one whole). A --search term is at most 256 bytes.

    \b
    Examples:
      oncebox records ussd --since 2030-01-15T08:00Z --order oldest
      oncebox records ussd --key gw-123
      oncebox records listing --search SKU-42 --limit 20
    """
    try:
        search_term(search)
    except InvalidOperation as exc:
        fail(f"--search: {exc}")
    query = records.Query(key, identity, since, until, search, after, order)
    show_pages(records.pages(obj.reader, inbox, query, limit), RECORDS)


@cli.command("record")
@click.argument("record_id", type=ROW_ID)
@JSON
@click.pass_obj
def record(obj: Context, record_id: int) -> None:
    """One record whole, with all that happened to it: its revisions, duplicates and
    late replays, the newcomers quarantined beside it and how each was resolved and by
    whom, the log entries about it with their positions, its timeline, and where its
    inclusion proof is (`oncebox prove ID` prints the proof).

    Example: oncebox record 17
    """
    view = obj.reader.record_view(record_id)
    if view is None:
        fail(f"no record {record_id}")
    shown = records.view_json(view)
    if wants_json():
        show(shown)
        return
    panel(shown["record"], title=f"record {record_id} of {shown['inbox']}")
    table(shown["timeline"], TIMELINE, title="timeline")


@cli.command("lookup")
@click.argument("inbox")
@click.argument("key")
@JSON
@click.pass_obj
def lookup(obj: Context, inbox: str, key: str) -> None:
    """Everything kept under one delivery key, across records, quarantine and dead
    letters, in time order: did it arrive, and what was decided ("arrived": false when
    nothing came with it).

    Example: oncebox lookup ussd gw-123
    """
    shown = records.lookup_json(obj.reader.lookup(inbox, key))
    if wants_json():
        show(shown)
        return
    arrived = "arrived" if shown["arrived"] else "nothing arrived"
    table(shown["timeline"], TIMELINE, title=f"{inbox} key {key}: {arrived}")
