"""Forwarding: the dispatchers (``oncebox forward``) and what operators read and do
(``oncebox forwarding ...``)."""

from __future__ import annotations

import signal
import threading
from collections import Counter
from typing import Any

import click

from oncebox.domain.forwarding import ForwardFilter, ForwardStatus
from oncebox.surfaces.cli.base import ACTOR, AFTER, ROW_ID, Context, cli, emit, fail
from oncebox.surfaces.cli.letters import When
from oncebox.surfaces.cli.output import JSON, columns, panel, show, table, wants_json
from oncebox.surfaces.forwarding.shown import forward_json, standing_json
from oncebox.surfaces.workers import run_workers

STATUSES = [s.value for s in ForwardStatus]
DESTINATIONS = columns(
    "name", "inbox", "state", ("paused", "paused_at"), "backlog",
    ("oldest pending s", "oldest_pending_seconds"), "dead", ("sent 24h", "delivered_24h"),
    ("failed 24h", "failed_24h"), ("success", "success_rate"),
)  # fmt: skip
FORWARDS = columns(
    "id", "destination", ("record", "record_id"), ("rev", "revision"), "status", "attempts",
    ("next", "next_at"), ("accepted", "created_at"), "last_error",
)  # fmt: skip
ATTEMPTS = columns(
    "number", "at", "outcome", "status", ("latency s", "latency"), "error", ("next", "next_at"),
    "dispatcher",
)  # fmt: skip


@cli.command()
@click.option(
    "--destination",
    "only",
    multiple=True,
    metavar="NAME",
    help="Only this destination (repeat for more) [default: every one].",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 256),
    help="Dispatcher processes; each destination's rate is shared out among them.",
)
@click.option("--once", is_flag=True, help="Send what is due now, then exit.")
@click.option(
    "--poll",
    default=0.25,
    show_default=True,
    type=click.FloatRange(0.01, 60),
    help="Seconds between looks for what other processes wrote and retries come due.",
)
@click.pass_obj
def forward(obj: Context, only: tuple[str, ...], workers: int, once: bool, poll: float) -> None:
    """Send accepted records and revisions on to their inboxes' destinations.

    Each forward is claimed under a lease, sent with its revision's idempotency key,
    retried on its destination's schedule, and settled only under its lease. Prints the
    attempts' outcomes counted when it ends (SIGTERM or Ctrl-C; --once: nothing due).

    Example: oncebox --config oncebox.toml forward --workers 2
    """
    from oncebox.surfaces.forwarding.dispatcher import Dispatcher

    names = list(only) or None
    for name in names or []:
        obj.box.destination(name)  # an unknown one fails here, before any worker starts
    if not obj.box.destinations():
        fail("no inbox forwards anywhere: declare [inboxes.NAME.forward.DEST] (--config)")

    def run(index: int) -> dict[str, Any]:
        dispatcher = Dispatcher(obj.box, only=names, share=workers, poll=poll)
        stop = threading.Event()
        if not once:
            for signum in (signal.SIGINT, signal.SIGTERM):
                signal.signal(signum, lambda *_: stop.set())
        return {"dispatcher": dispatcher.name, **dispatcher.run(stop, once=once)}

    if workers == 1:
        emit(run(1))
        return
    obj.forget()  # each worker opens its own store after the fork
    each = run_workers(workers, run)
    total: Counter[str] = Counter()
    for one in each:
        total.update({k: v for k, v in (one or {}).items() if isinstance(v, int)})
    emit({**total, "workers": each})


@cli.group()
def forwarding() -> None:
    """Destinations, their forwards and attempts, and outbound dead letters."""


@forwarding.command("list")
@JSON
@click.pass_obj
def forwarding_list(obj: Context) -> None:
    """Every destination: paused or not, its circuit, backlog, oldest pending age, dead
    letters and success rate over the last day."""
    show([standing_json(s) for s in obj.box.forwarding()], DESTINATIONS)


@forwarding.command("deliveries")
@click.argument("destination")
@click.option("--status", type=click.Choice(STATUSES), help="Only these.")
@click.option("--since", type=When(), help="Accepted at or after (2030-01-15T08:00Z).")
@click.option("--until", type=When(), help="Accepted before.")
@click.option("--after", default=0, type=AFTER, help="Page on: ids after this.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 1000))
@JSON
@click.pass_obj
def forwarding_deliveries(
    obj: Context,
    destination: str,
    status: str | None,
    since: float | None,
    until: float | None,
    after: int,
    limit: int,
) -> None:
    """A destination's forwards in id order; --status dead lists its outbound dead letters.

    Example: oncebox forwarding deliveries ledger --status dead --since 2030-01-15
    """
    chosen = ForwardFilter(destination, ForwardStatus(status) if status else None, since, until)
    show([forward_json(f) for f in obj.box.forwards(chosen, after, limit)], FORWARDS)


@forwarding.command("show")
@click.argument("forward_id", type=ROW_ID)
@JSON
@click.pass_obj
def forwarding_show(obj: Context, forward_id: int) -> None:
    """One forward and every attempt at it (status, latency, the answer's first 1 KiB,
    the error, when the next one is due)."""
    shown = forward_json(*obj.box.forward(forward_id))
    if wants_json():
        emit(shown)
        return
    panel(shown, title=f"forward {forward_id}", leave_out=("attempts_made",))
    table(shown["attempts_made"], ATTEMPTS, title="attempts")


@forwarding.command("pause")
@click.argument("destination")
@ACTOR
@click.pass_obj
def forwarding_pause(obj: Context, destination: str, actor: str) -> None:
    """Hold a destination's forwards back until it is resumed (logged with the actor)."""
    obj.box.pause_destination(destination, actor)
    emit(standing_json(obj.box.forwarding(destination)[0]))


@forwarding.command("resume")
@click.argument("destination")
@ACTOR
@click.pass_obj
def forwarding_resume(obj: Context, destination: str, actor: str) -> None:
    """Send a paused destination's forwards again, what was held back first."""
    obj.box.resume_destination(destination, actor)
    emit(standing_json(obj.box.forwarding(destination)[0]))


@forwarding.command("retry")
@click.argument("forward_id", type=ROW_ID)
@ACTOR
@click.pass_obj
def forwarding_retry(obj: Context, forward_id: int, actor: str) -> None:
    """Send one dead (or retrying) forward again now, on a fresh schedule."""
    emit(forward_json(obj.box.retry_forward(forward_id, actor)))


@forwarding.command("retry-all")
@click.argument("destination")
@click.option(
    "--status",
    type=click.Choice(["dead", "failed"]),
    default="dead",
    show_default=True,
    help="Which to send again.",
)
@click.option("--since", type=When(), help="Accepted at or after.")
@click.option("--until", type=When(), help="Accepted before.")
@ACTOR
@click.pass_obj
def forwarding_retry_all(
    obj: Context,
    destination: str,
    status: str,
    since: float | None,
    until: float | None,
    actor: str,
) -> None:
    """Send again every forward of a destination matching the filter; prints how many.

    Example: oncebox forwarding retry-all ledger --since 2030-01-15T08:00Z
    """
    chosen = ForwardFilter(destination, ForwardStatus(status), since, until)
    emit({"destination": destination, "retried": obj.box.retry_forwards(chosen, actor)})
