"""The reconciler: ``reconcile`` through a reader command, and the work keys it keeps."""

from __future__ import annotations

import threading

import click

from oncebox.engine.reconciler import Outcome, run_workers
from oncebox.engine.views import LISTED
from oncebox.surfaces.cli.base import ACTOR, Context, cli, emit, fail
from oncebox.surfaces.cli.output import JSON, columns, show
from oncebox.surfaces.readers import CommandReader
from oncebox.surfaces.views import work_key_json

WORK = columns(
    ("key", lambda row: "/".join(row["key"].values())), "generation",
    ("applied", "applied_generation"), "dirty", "failures", ("review", "in_review"),
    ("claimed by", "claimed_by"), ("last error", "last_error"),
)  # fmt: skip


@cli.command()
@click.option("--inbox", default="listing", show_default=True)
@click.option(
    "--reader",
    "command",
    required=True,
    metavar="COMMAND",
    help="Run per key: key JSON on stdin, document JSON on stdout.",
)
@click.option("--once", is_flag=True, help="Stop when no dirty key is due.")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 64))
@click.option(
    "--claim-ttl",
    default=60.0,
    show_default=True,
    type=click.FloatRange(0, min_open=True),
    help="Seconds a claim lasts: more than --timeout, or a read that takes all of it is refused.",
)
@click.option(
    "--max-failures",
    default=5,
    show_default=True,
    type=click.IntRange(1),
    help="Failures in a row before a key goes to operator review.",
)
@click.option(
    "--timeout",
    default=30.0,
    show_default=True,
    type=click.FloatRange(0, min_open=True),
    help="Seconds per read.",
)
@click.pass_obj
def reconcile(
    obj: Context,
    inbox: str,
    command: str,
    once: bool,
    workers: int,
    claim_ttl: float,
    max_failures: int,
    timeout: float,
) -> None:
    """Refresh dirty work keys through a reader command, with N workers.

    Example: oncebox reconcile --reader "python3 fetch_listing.py" --workers 4 --once
    """
    if claim_ttl <= timeout:  # a read that took its whole timeout would outlast its claim
        raise click.BadParameter(
            f"{claim_ttl:g} s is no longer than --timeout ({timeout:g} s): a read that takes "
            f"all of it would be refused as it ends; give the claim some seconds more",
            param_hint="--claim-ttl",
        )
    box = obj.box
    reader = CommandReader(command, timeout=timeout)
    worker = box.reconciler(inbox)
    counts: dict[str, int] = {o.value: 0 for o in Outcome}
    from rich.console import Console

    console = Console(stderr=True)
    lock = threading.Lock()

    def line() -> str:
        figures = worker.figures()
        return (
            f"dirty {figures['dirty']}  applied {counts['applied']}  superseded "
            f"{counts['superseded']}  failed {counts['failed']}  in review "
            f"{figures['in_review']}"
        )

    with console.status(line()) as status:

        def seen(outcome: Outcome) -> None:
            with lock:
                counts[outcome.value] += 1
                if outcome is not Outcome.IDLE:
                    status.update(line())

        run_workers(
            box,
            inbox,
            reader,
            workers=workers,
            once=once,
            on_outcome=seen,
            claim_ttl=claim_ttl,
            max_failures=max_failures,
        )
    emit({"inbox": inbox, **{k: v for k, v in counts.items() if k != "idle"}, **worker.figures()})


@cli.group()
def work() -> None:
    """Work keys of the reconciler: list, review, retry."""


@work.command("list")
@click.option("--inbox", default="listing", show_default=True)
@click.option("--dirty", is_flag=True, help="Only dirty keys.")
@click.option("--limit", default=1000, show_default=True, type=click.IntRange(1))
@JSON
@click.pass_obj
def work_list(obj: Context, inbox: str, dirty: bool, limit: int) -> None:
    """Work keys in key order with their generations, documents and failures; a
    document over 2,048 characters is left out (`work show` gives it whole)."""
    rows = obj.reader.work_keys(inbox, limit=limit, dirty=dirty, preview=LISTED)
    show([work_key_json(row) for row in rows], WORK)


@work.command("show")
@click.argument("seller_id")
@click.argument("sku")
@click.argument("marketplace_id")
@click.option("--inbox", default="listing", show_default=True)
@JSON
@click.pass_obj
def work_show(obj: Context, seller_id: str, sku: str, marketplace_id: str, inbox: str) -> None:
    """One work key, its document whole."""
    found = obj.reader.work_key(inbox, (seller_id, sku, marketplace_id))
    if found is None:
        fail(f"no work key {seller_id}/{sku}/{marketplace_id} in {inbox}")
    show(work_key_json(found))


@work.command("review")
@click.option("--inbox", default="listing", show_default=True)
@click.option("--limit", default=1000, show_default=True, type=click.IntRange(1))
@JSON
@click.pass_obj
def work_review(obj: Context, inbox: str, limit: int) -> None:
    """Keys that kept failing and wait for an operator, with their last error."""
    show([work_key_json(row) for row in obj.box.reconciler(inbox).review(limit, LISTED)], WORK)


@work.command("retry")
@click.argument("seller_id")
@click.argument("sku")
@click.argument("marketplace_id")
@click.option("--inbox", default="listing", show_default=True)
@ACTOR
@click.pass_obj
def work_retry(
    obj: Context, seller_id: str, sku: str, marketplace_id: str, inbox: str, actor: str
) -> None:
    """Send a key back from review to be refreshed again (who did is kept in the log)."""
    obj.box.reconciler(inbox).retry((seller_id, sku, marketplace_id), actor=actor)
    emit({"retried": [seller_id, sku, marketplace_id]})
