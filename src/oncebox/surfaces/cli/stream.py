"""``oncebox consume``: the Redis Streams adapter as a command, one consumer per worker
process; the reading, deciding and acking are :mod:`oncebox.surfaces.consume`'s."""

from __future__ import annotations

import json
import signal
import socket
import threading
from collections import Counter
from typing import Any

import click

from oncebox.errors import OnceboxError
from oncebox.surfaces.cli.base import cli
from oncebox.surfaces.cli.output import tally
from oncebox.surfaces.consume import (
    DEFAULT_BLOCK_MS,
    DEFAULT_CLAIM_IDLE_MS,
    StreamConsumer,
    Summary,
)
from oncebox.surfaces.workers import run_workers


@cli.command()
@click.argument("redis_url", metavar="REDIS_URL")
@click.option("--stream", required=True, help="The stream key to read.")
@click.option("--group", required=True, help="Consumer group (created if missing).")
@click.option("--inbox", required=True, help="The inbox that decides each entry.")
@click.option(
    "--consumer",
    help="This consumer's name in the group [default: HOST-1, or HOST-1 ... HOST-N with "
    "--workers]; stable, so a restart takes its pending entries back.",
)
@click.option(
    "--batch",
    default=100,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="Entries decided per transaction.",
)
@click.option(
    "--block-ms",
    default=DEFAULT_BLOCK_MS,
    show_default=True,
    type=click.IntRange(1),
    help="How long one read waits for new entries.",
)
@click.option(
    "--claim-idle-ms",
    default=DEFAULT_CLAIM_IDLE_MS,
    show_default=True,
    type=click.IntRange(0),
    help="Take over entries pending this long (a crashed consumer's).",
)
@click.option("--once", is_flag=True, help="Drain what is there now, then exit.")
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 256),
    help="Consumer processes, named CONSUMER-1 ... CONSUMER-N in the group.",
)
@click.pass_obj
def consume(
    obj: Any,
    redis_url: str,
    stream: str,
    group: str,
    inbox: str,
    consumer: str | None,
    batch: int,
    block_ms: int,
    claim_idle_ms: int,
    once: bool,
    workers: int,
) -> None:
    """Decide entries of a Redis stream; XACK each only once its decision may be acked.

    \b
    Entry fields: body (the bytes as received) with optional key, snapshot_id,
    device_time, delivery_id and lease_token; or line (an `ingest` NDJSON line).
    Prints a JSON summary: counts by verdict, acked, left pending; and on stderr the
    count in one line, as ingest does.

    \b
    Example:
      oncebox consume redis://127.0.0.1:6379/0 --stream frames --group g --inbox ussd
    """
    import redis

    # Stable per host and process slot (HOST-1 ... HOST-N), so that a restarted consumer
    # takes its old name, and its pending entries, back instead of adding a name.
    name = consumer or socket.gethostname()

    def run(consumer: str) -> dict[str, Any]:
        reader = StreamConsumer(
            obj.box,
            redis_url,
            stream,
            group,
            consumer,
            inbox,
            batch=batch,
            block_ms=block_ms,
            claim_idle_ms=claim_idle_ms,
        )
        try:
            if once:
                summary = reader.run_once()
            else:
                stop = threading.Event()
                for signum in (signal.SIGINT, signal.SIGTERM):
                    signal.signal(signum, lambda *_: stop.set())
                summary = reader.run(stop)
            pending = reader.pending()
            reader.leave()
            return {"consumer": consumer, **summary.to_dict(), "group_pending": pending}
        finally:
            reader.close()

    try:
        if workers == 1:
            one = run(consumer or f"{name}-1")
            result = {"stream": stream, "group": group, "consumer": one.pop("consumer")}
            result.update(inbox=inbox, **one)
        else:
            obj.box.inbox(inbox)  # an unknown inbox fails here, before any worker starts
            obj.forget()  # each worker opens its own store after the fork
            each = run_workers(workers, lambda i: run(f"{name}-{i}"))
            probe = redis.Redis.from_url(redis_url)
            try:
                pending: Any = probe.xpending(stream, group)
            finally:
                probe.close()
            result = {"stream": stream, "group": group, "inbox": inbox}
            result.update(_added_up(each), group_pending=int(pending["pending"]), workers=each)
    except redis.exceptions.RedisError as exc:
        raise OnceboxError(f"redis: {exc}") from exc
    click.echo(json.dumps(result, indent=2))
    click.echo(tally(result["verdicts"], result["reasons"], "consumed"), err=True)


def _added_up(each: list[dict[str, Any]]) -> dict[str, Any]:
    """The workers' summaries as one: counts added, the consumers listed."""
    total = Summary()
    for one in each:
        counts = {name: one[name] for name in Summary().to_dict() if isinstance(one[name], int)}
        verdicts, reasons = Counter(one["verdicts"]), Counter(one["reasons"])
        total.add(Summary(**counts, verdicts=verdicts, reasons=reasons))
    return {"consumers": [one["consumer"] for one in each], **total.to_dict()}
