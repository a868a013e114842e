"""Putting deliveries in: ``ingest`` (NDJSON lines), ``lease`` (fencing tokens), and
``demo`` (the founding scenarios, replayed on a fresh store)."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections import Counter
from collections.abc import Iterator
from typing import IO

import click

import oncebox
from oncebox.engine.inboxes import parse_duration
from oncebox.formats import Overflow
from oncebox.surfaces.cli.base import Context, cli, emit, fail
from oncebox.surfaces.cli.output import tally
from oncebox.surfaces.lines import bounded_lines, delivery_from_line, line_bound, oversize_line

PROGRESS_FROM_BYTES = 1_000_000


def _lines(stream: IO[bytes], size: int | None, bound: int) -> Iterator[bytes | Overflow]:
    if size is None or size < PROGRESS_FROM_BYTES:
        yield from bounded_lines(stream, bound)
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TransferSpeedColumn

    progress = Progress(
        TextColumn("ingesting"),
        BarColumn(),
        TransferSpeedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    with progress:
        task = progress.add_task("ingest", total=size)
        for line in bounded_lines(stream, bound):
            progress.advance(task, len(line) if isinstance(line, bytes) else line.length)
            yield line


@cli.command()
@click.argument("inbox")
@click.argument("source", default="-", metavar="[FILE|-]")
@click.option(
    "--batch",
    default=500,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="Deliveries decided per transaction.",
)
@click.pass_obj
def ingest(obj: Context, inbox: str, source: str, batch: int) -> None:
    """Deliver NDJSON lines to INBOX; print one decision per line as JSON, and at the
    end a count of them on stderr (accepted, duplicate, conflict, rejected by reason).

    \b
    Line forms (one delivery per line):
      json-event  the event object itself (json, sp-api-listing: the object too)
      ussd-h1     {"frame_id": "rec1-1", "frame": "H1|1|Kakuma1|MED|3|86|#89"}
      feed        {"payload": "...", "snapshot_id": "S1"}, or the bare payload
      other       {"body": "...", "key": "..."} (or body_b64)

    Example: oncebox ingest ussd frames.ndjson
    """
    box = obj.box
    codec = box.inbox(inbox).codec
    # A line longer than any delivery to this inbox could need is never held whole:
    # it is a too_large dead letter of its head, length and SHA-256.
    bound = line_bound(codec)
    if source == "-":
        stream, size = sys.stdin.buffer, None
    else:
        try:
            stream, size = open(source, "rb"), os.path.getsize(source)  # noqa: SIM115
        except OSError as exc:
            fail(f"cannot read {source}: {exc.strerror}")
    out = sys.stdout
    pending: list[oncebox.Delivery] = []
    verdicts: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    try:
        with stream:
            for line in _lines(stream, size, bound):
                if isinstance(line, Overflow):
                    pending.append(oversize_line(codec, line))
                elif line.strip():
                    pending.append(delivery_from_line(codec.name, line))
                else:
                    continue
                if len(pending) >= batch:
                    _decide(box, inbox, pending, out, verdicts, reasons)
                    pending = []
            if pending:
                _decide(box, inbox, pending, out, verdicts, reasons)
    finally:  # stopped part way too: what was decided is decided, and said
        click.echo(tally(verdicts, reasons), err=True)


def _decide(
    box: oncebox.Oncebox,
    inbox: str,
    pending: list[oncebox.Delivery],
    out: IO[str],
    verdicts: Counter[str],
    reasons: Counter[str],
) -> None:
    for decision in box.ingest_all(inbox, pending):
        out.write(json.dumps(decision.to_dict(), separators=(",", ":")) + "\n")
        verdicts[str(decision.verdict)] += 1
        if decision.reason:
            reasons[f"{decision.verdict}:{decision.reason}"] += 1
    out.flush()


@cli.command()
@click.argument("inbox")
@click.argument("scope")
@click.option("--ttl", default="60", show_default=True, help="Seconds (or 90s, 5m, 1h).")
@click.option(
    "--release",
    "release_token",
    type=int,
    metavar="TOKEN",
    help="Give up the lease held by TOKEN instead of taking one.",
)
@click.pass_obj
def lease(obj: Context, inbox: str, scope: str, ttl: str, release_token: int | None) -> None:
    """Take the next fencing token for SCOPE of a lease-fenced INBOX (or release one).

    Example: oncebox lease feed S1 --ttl 60
    """
    if release_token is not None:
        obj.box.release(inbox, scope, release_token)
        emit({"inbox": inbox, "scope": scope, "released": release_token})
        return
    seconds = parse_duration(ttl)
    if seconds is None:
        fail("a lease needs a finite ttl")
    emit(obj.box.lease(inbox, scope, seconds).to_dict())


@cli.command()
@click.option("--json", "as_json_output", is_flag=True, help="Print the full JSON result.")
def demo(as_json_output: bool) -> None:
    """Replay the founding scenarios (USSD session, listing inbox) on a fresh store."""
    from oncebox.surfaces.demo import run_demo, summary

    logging.getLogger("oncebox").setLevel(logging.ERROR)
    result = run_demo()
    if as_json_output:
        emit(result)
    else:
        click.echo(summary(result))
