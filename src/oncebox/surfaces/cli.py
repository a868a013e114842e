"""The ``oncebox`` command: a thin layer over the library; every rule lives in the engine."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, NoReturn

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TransferSpeedColumn

import oncebox
from oncebox.errors import OnceboxError
from oncebox.surfaces.lines import delivery_from_line
from oncebox.surfaces.views import as_json

DEFAULT_DB = "sqlite:///oncebox.db"
PROGRESS_FROM_BYTES = 1_000_000


def _fail(message: str, code: int = 2) -> NoReturn:
    click.echo(f"oncebox: error: {message}", err=True)
    sys.exit(code)


def _emit(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


class Context:
    def __init__(self, db: str | None, config: str | None) -> None:
        self.db = db
        self.config = config
        self._box: oncebox.Oncebox | None = None

    @property
    def box(self) -> oncebox.Oncebox:
        if self._box is None:
            config = self.config
            if config is None and Path("oncebox.toml").exists():
                config = "oncebox.toml"
            url = self.db
            if url is None and config is None:
                url = DEFAULT_DB
            self._box = oncebox.open(url, config=config)
        return self._box


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    envvar="ONCEBOX_DB",
    metavar="URL",
    help=f"Store URL, e.g. sqlite:///intake.db [env ONCEBOX_DB; default {DEFAULT_DB}]",
)
@click.option(
    "--config",
    envvar="ONCEBOX_CONFIG",
    metavar="PATH",
    help="TOML file declaring inboxes [env ONCEBOX_CONFIG; default ./oncebox.toml "
    "if present, else the built-in inboxes ussd, listing and feed]",
)
@click.version_option(oncebox.__version__, prog_name="oncebox")
@click.pass_context
def cli(ctx: click.Context, db: str | None, config: str | None) -> None:
    """oncebox: exactly-once effects from at-least-once, out-of-order deliveries."""
    ctx.obj = Context(db, config)
    ctx.call_on_close(lambda: ctx.obj._box.close() if ctx.obj._box else None)


def _lines(stream: IO[bytes], size: int | None) -> Iterator[bytes]:
    if size is None or size < PROGRESS_FROM_BYTES:
        yield from stream
        return
    progress = Progress(
        TextColumn("ingesting"),
        BarColumn(),
        TransferSpeedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    with progress:
        task = progress.add_task("ingest", total=size)
        for line in stream:
            progress.advance(task, len(line))
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
    """Deliver NDJSON lines to INBOX; print one decision per line as JSON.

    \b
    Line forms (one delivery per line):
      json-event  the event object itself
      ussd-h1     {"frame_id": "rec1-1", "frame": "H1|1|Kakuma1|MED|3|86|#89"}
      feed        {"payload": "...", "snapshot_id": "S1"}, or the bare payload
      other       {"body": "...", "key": "..."} (or body_b64)

    Example: oncebox ingest ussd frames.ndjson
    """
    box = obj.box
    codec = box.inbox(inbox).codec.name
    if source == "-":
        stream, size = sys.stdin.buffer, None
    else:
        try:
            stream, size = open(source, "rb"), os.path.getsize(source)  # noqa: SIM115
        except OSError as exc:
            _fail(f"cannot read {source}: {exc.strerror}")
    out = sys.stdout
    pending = []
    with stream:
        for line in _lines(stream, size):
            if not line.strip():
                continue
            pending.append(delivery_from_line(codec, line))
            if len(pending) >= batch:
                _decide(box, inbox, pending, out)
                pending = []
        if pending:
            _decide(box, inbox, pending, out)


def _decide(
    box: oncebox.Oncebox, inbox: str, pending: list[oncebox.Delivery], out: IO[str]
) -> None:
    for decision in box.ingest_batch(inbox, pending):
        out.write(json.dumps(decision.to_dict(), separators=(",", ":")) + "\n")
    out.flush()


def _inbox_names(box: oncebox.Oncebox) -> dict[int, str]:
    return {active.row.id: active.name for active in box.inboxes}


@cli.command()
@click.argument("inbox", required=False)
@click.pass_obj
def stats(obj: Context, inbox: str | None) -> None:
    """Counts by verdict and reason, sizes, retention; for one inbox or all."""
    names = [inbox] if inbox else [a.name for a in obj.box.inboxes]
    _emit([obj.box.stats(name) for name in names])


@cli.command()
@click.argument("inbox")
@click.pass_obj
def triage(obj: Context, inbox: str) -> None:
    """The headcount ledger of a triage inbox: totals and priority ranking."""
    _emit(obj.box.triage(inbox))


@cli.group()
def quarantine() -> None:
    """Conflicting newcomers kept for an operator."""


@quarantine.command("list")
@click.option("--inbox")
@click.option(
    "--status",
    type=click.Choice(["open", "kept", "accepted", "all"]),
    default="open",
    show_default=True,
)
@click.option("--limit", default=100, show_default=True)
@click.pass_obj
def quarantine_list(obj: Context, inbox: str | None, status: str, limit: int) -> None:
    """List quarantined newcomers, with the original record's content beside each."""
    rows = obj.box.quarantined(inbox, None if status == "all" else status, limit)
    names = _inbox_names(obj.box)
    _emit([as_json(row, inbox=names[row.inbox_id], original=obj.box.original(row)) for row in rows])


@quarantine.command("resolve")
@click.argument("quarantine_id", type=int)
@click.argument("action", type=click.Choice(["keep", "accept"]))
@click.option("--note", required=True, help="Why; kept with the resolution.")
@click.pass_obj
def quarantine_resolve(obj: Context, quarantine_id: int, action: str, note: str) -> None:
    """keep the original, or accept the newcomer as the record's next revision.

    Example: oncebox quarantine resolve 3 accept --note "field team confirmed 9"
    """
    _emit(as_json(obj.box.resolve(quarantine_id, action, note)))


@cli.command("dead-letters")
@click.option("--inbox")
@click.option("--limit", default=100, show_default=True)
@click.pass_obj
def dead_letters(obj: Context, inbox: str | None, limit: int) -> None:
    """Invalid deliveries: a bounded copy, its length, SHA-256 and the reason."""
    names = _inbox_names(obj.box)
    _emit([as_json(row, inbox=names[row.inbox_id]) for row in obj.box.dead_letters(inbox, limit)])


@cli.command()
@click.option("--inbox")
@click.pass_obj
def evict(obj: Context, inbox: str | None) -> None:
    """Evict records past their inbox's retention (age only), keeping tombstones."""
    _emit(
        [
            {"inbox": e.inbox, "records": e.records, "tombstones": e.tombstones}
            for e in obj.box.evict(inbox)
        ]
    )


@cli.command()
@click.pass_obj
def inboxes(obj: Context) -> None:
    """The declared inboxes."""
    _emit(
        [
            {
                "name": a.name,
                "codec": a.codec.name,
                "identity": a.codec.identity,
                "apply": a.row.apply,
                "retention_seconds": a.row.retention_seconds,
                "tombstone_seconds": a.row.tombstone_seconds,
            }
            for a in obj.box.inboxes
        ]
    )


@cli.command()
@click.option("--json", "as_json_output", is_flag=True, help="Print the full JSON result.")
def demo(as_json_output: bool) -> None:
    """Replay the founding scenarios (USSD session, listing inbox) on a fresh store."""
    from oncebox.surfaces.demo import run_demo, summary

    logging.getLogger("oncebox").setLevel(logging.ERROR)
    result = run_demo()
    if as_json_output:
        _emit(result)
    else:
        click.echo(summary(result))


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="oncebox: %(message)s", stream=sys.stderr)
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        _fail("aborted", 130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except OnceboxError as exc:
        _fail(str(exc))
    except BrokenPipeError:
        sys.exit(1)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except Exception as exc:  # a bug: still one line, never a traceback
        _fail(f"internal error: {type(exc).__name__}: {exc}", 70)
