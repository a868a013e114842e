"""What an operator reads and does: stats, triage, inboxes, quarantine, dead letters,
retention."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import click

from oncebox.domain import QuarantineStatus
from oncebox.formats import codec_settings
from oncebox.surfaces import listing
from oncebox.surfaces.choices import RESOLUTIONS, STATUSES, status_filter
from oncebox.surfaces.cli.base import ACTOR, AFTER, ROW_ID, Context, cli, emit, fail
from oncebox.surfaces.cli.conflicts import diff_json, show_conflict
from oncebox.surfaces.cli.output import JSON, columns, duration, show, show_pages, table, wants_json
from oncebox.surfaces.diffing import field_changes
from oncebox.surfaces.views import TRIAGE_TABLES, as_json, csv_text, triage_table


def _verdict(name: str) -> Callable[[Mapping[str, Any]], int]:
    return lambda row: int(row["verdicts"].get(name, 0))


def _rejections(row: Mapping[str, Any]) -> dict[str, int]:
    reasons = row["reasons"].items()
    return {k.split(":", 1)[1]: v for k, v in reasons if k.startswith("rejected:")}


STATS = columns(
    "inbox", "records",
    *((v, _verdict(v)) for v in ("accepted", "duplicate", "conflict", "rejected")),
    ("open conflicts", "quarantine_open"), ("dead letters", "dead_letters"),
    ("rejected by reason", _rejections),
)  # fmt: skip


def _changed(row: Mapping[str, Any]) -> str:
    """The fields a newcomer changes, as the console says them (``headcount 3 -> 9``)."""
    original = row.get("original")
    if not isinstance(original, Mapping) or "fields" in row.get("cut", ()):
        return ""
    old, new = original.get("fields") or {}, row.get("fields") or {}
    return ", ".join(f"{c.name} {c.text}" for c in field_changes(old, new))


QUARANTINE = columns(
    "id", "inbox", "identity", "status", ("record", "record_id"), ("changed", _changed),
    ("seen", "seen_count"), "first_seen", ("content", "content"),
)  # fmt: skip
INBOXES = columns(
    "name", "codec", "identity", "apply",
    ("retention", lambda row: duration(row["retention_seconds"])),
    ("tombstones", lambda row: duration(row["tombstone_seconds"])), "forward",
)  # fmt: skip


@cli.command()
@click.argument("inbox", required=False)
@JSON
@click.pass_obj
def stats(obj: Context, inbox: str | None) -> None:
    """Counts by verdict and reason, sizes, retention; for one inbox or all."""
    names = [inbox] if inbox else [a.name for a in obj.reader.inboxes]
    show([obj.reader.stats(name) for name in names], STATS)


@cli.command()
@click.argument("inbox")
@click.option(
    "--format",
    "shape",
    type=click.Choice(["json", "csv"]),
    help="json (what is printed when piped) or csv [default: a table on a terminal, else json]",
)
@click.option(
    "--table",
    type=click.Choice(TRIAGE_TABLES),
    default="totals",
    show_default=True,
    help="With --format csv: per site and need, or the priority ranking.",
)
@JSON
@click.pass_obj
def triage(obj: Context, inbox: str, shape: str | None, table: str) -> None:
    """The headcount ledger of a triage inbox: totals per site and need beside what
    counting every arrival would have given, and the priority ranking.

    Example: oncebox triage ussd --format csv > totals.csv
    """
    ledger = obj.reader.triage(inbox)
    if shape == "csv":
        click.echo(csv_text(*triage_table(ledger, table)), nl=False)
    elif shape == "json" or wants_json():
        emit(ledger)
    else:
        _ledger_table(ledger, table)


def _ledger_table(ledger: dict[str, object], which: str) -> None:
    heads, rows = triage_table(ledger, which)
    total = {k: ledger.get(k) for k in ("headcount", "cases", "every_arrival_headcount")}
    title = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in total.items())
    plain = [dict(zip(heads, row, strict=True)) for row in rows]
    table(plain, columns(*heads), title)


@cli.group()
def quarantine() -> None:
    """Conflicting newcomers kept for an operator."""


@quarantine.command("list")
@click.option("--inbox")
@click.option(
    "--status",
    type=click.Choice(STATUSES),
    default=QuarantineStatus.OPEN.value,
    show_default=True,
)
@click.option("--after", default=0, type=AFTER, help="Page on: ids after this.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1))
@JSON
@click.pass_obj
def quarantine_list(obj: Context, inbox: str | None, status: str, after: int, limit: int) -> None:
    """List quarantined newcomers in id order, the original record beside each; each
    content cut to its first 1,024 bytes with its length and SHA-256 (``cut`` says
    what is shown only in part: `quarantine show ID` gives the whole row). Written a
    page at a time.
    """
    pages = listing.quarantine_pages(obj.reader, inbox, status_filter(status), limit, after)
    show_pages(pages, QUARANTINE)


@quarantine.command("show")
@click.argument("quarantine_id", type=ROW_ID)
@JSON
@click.pass_obj
def quarantine_show(obj: Context, quarantine_id: int) -> None:
    """One quarantined newcomer whole, beside its original record whole, and what
    differs: on a terminal side by side, each changed field marked (3 -> 9); as JSON,
    the same in a `diff` list."""
    found = obj.reader.get_quarantine(quarantine_id)
    if found is None:
        fail(f"no quarantine row {quarantine_id}")
    row = as_json(found[1], inbox=found[0], original=obj.reader.original(found[1]))
    if wants_json():
        emit({**row, "diff": diff_json(row)})
    else:
        show_conflict(row)


@quarantine.command("resolve")
@click.argument("quarantine_id", type=ROW_ID)
@click.argument("action", type=click.Choice(RESOLUTIONS))
@click.option("--note", required=True, help="Why; kept with the resolution.")
@ACTOR
@click.pass_obj
def quarantine_resolve(
    obj: Context, quarantine_id: int, action: str, note: str, actor: str
) -> None:
    """keep the original, or accept the newcomer as the record's next revision.

    Example: oncebox quarantine resolve 3 accept --note "field team confirmed 9"
    """
    emit(as_json(obj.box.resolve(quarantine_id, action, note, actor=actor)))


@cli.command()
@click.option("--inbox")
@click.pass_obj
def evict(obj: Context, inbox: str | None) -> None:
    """Evict records past their inbox's retention (age only), keeping tombstones."""
    emit(
        [
            {"inbox": e.inbox, "records": e.records, "tombstones": e.tombstones}
            for e in obj.box.evict(inbox)
        ]
    )


@cli.command()
@JSON
@click.pass_obj
def inboxes(obj: Context) -> None:
    """The declared inboxes."""
    show(
        [
            {
                "name": a.name,
                "codec": a.codec.name,
                "identity": a.codec.identity,
                "settings": codec_settings(a.codec),
                "apply": a.row.apply,
                "retention_seconds": a.row.retention_seconds,
                "tombstone_seconds": a.row.tombstone_seconds,
                "forward": [destination.describe() for destination in a.forward],
            }
            for a in obj.reader.inboxes
        ],
        INBOXES,
    )
