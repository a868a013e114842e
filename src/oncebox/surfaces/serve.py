"""``oncebox serve``: the HTTP API (uvicorn), in one process or N worker processes.

The HTTP modules are imported when the command runs, not before: FastAPI and uvicorn cost
every other command a third of a second to load.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import click

from oncebox.errors import OnceboxError
from oncebox.surfaces.workers import cpu_count

# The defaults of oncebox.surfaces.http.limits.Limits (a test keeps the two equal).
HEADER_TIMEOUT = 5.0
BODY_TIMEOUT = 20.0
MAX_CONNECTIONS = 1024
MAX_HEAD = 65_536
UNVERIFIED_BUDGET = 32 * 1024 * 1024  # oncebox.surfaces.http.senders.DEFAULT_BUDGET
Seconds = click.FloatRange(min=0, min_open=True)


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--sign",
    "key_file",
    type=click.Path(dir_okay=False),
    metavar="KEYFILE",
    help="Ed25519 private key (PEM) to sign checkpoints with.",
)
@click.option("--demo", is_flag=True, help="Load demo traffic and print a demo token.")
@click.option(
    "--workers",
    type=click.IntRange(1, 256),
    help="Server processes on the one port, each with its own store connections and "
    "group commit [default: the number of CPUs].",
)
@click.option(
    "--header-timeout",
    type=Seconds,
    default=HEADER_TIMEOUT,
    show_default=True,
    help="Seconds a request's head may take to arrive; then 408 and the connection closes.",
)
@click.option(
    "--body-timeout",
    type=Seconds,
    default=BODY_TIMEOUT,
    show_default=True,
    help="Seconds a request's body may take after its head; then 408 and the connection closes.",
)
@click.option(
    "--max-connections",
    type=click.IntRange(1),
    default=MAX_CONNECTIONS,
    show_default=True,
    help="Open connections per worker; one more is answered 503 and closed at once.",
)
@click.option(
    "--max-head",
    type=click.IntRange(1024),
    default=MAX_HEAD,
    show_default=True,
    metavar="BYTES",
    help="Bytes of a request's line and headers (and of a chunked body's trailer); one "
    "over it is answered 431 and the connection closes.",
)
@click.option(
    "--unverified-budget",
    type=click.IntRange(0),
    default=UNVERIFIED_BUDGET,
    show_default=True,
    metavar="BYTES",
    help="Bytes of webhook bodies not verified yet that one worker holds at once; an "
    "upload past it is answered 503 with Retry-After and closed.",
)
@click.option(
    "--log-format",
    type=click.Choice(["combined", "json", "off"]),
    default="combined",
    show_default=True,
    help="The access log on stderr: the combined format, JSON lines (method, path, "
    "status, inbox, verdict, latency), or none. Never a token.",
)
@click.option(
    "--forwarded-allow-ips",
    "proxies",
    metavar="ADDRESSES",
    callback=lambda _ctx, _param, value: _proxies(value),
    help="Proxies (addresses or networks, comma-separated, or *) whose X-Forwarded-For "
    "and X-Forwarded-Proto are believed. By default none: the client is the peer.",
)
@click.option(
    "--no-forward",
    "no_forward",
    is_flag=True,
    help="Run no dispatcher beside the API: forwards wait for `oncebox forward`.",
)
@click.pass_obj
def serve(
    obj: Any,
    host: str,
    port: int,
    key_file: str | None,
    demo: bool,
    workers: int | None,
    header_timeout: float,
    body_timeout: float,
    max_connections: int,
    max_head: int,
    unverified_budget: int,
    log_format: str,
    proxies: list[str] | None,
    no_forward: bool,
) -> None:
    """Run the HTTP API (uvicorn).

    Each worker process also sends the inboxes' forwards (each destination's rate shared
    out among them) unless --no-forward.

    Example: oncebox serve --port 8080 --workers 2
    """
    from oncebox.surfaces.forwarding.dispatcher import alongside
    from oncebox.surfaces.http import create_app, server
    from oncebox.surfaces.http.limits import Limits

    key = _read(key_file) if key_file else None
    count = workers or cpu_count()
    # Opened here first, once: a bad --db or config fails before any worker starts, and
    # the schema is migrated by one process, not raced by N.
    box = obj.box
    if demo:
        from oncebox.surfaces.demo import load_demo_traffic

        secret = load_demo_traffic(box)
        click.echo(
            "oncebox: demo traffic loaded (a USSD session, a retransmission and a conflict "
            "made on purpose, open in the console's quarantine)",
            err=True,
        )
        click.echo(f"oncebox: demo token (all inboxes, all scopes): {secret}", err=True)
    if count > 1:
        obj.forget()  # nothing of the store crosses the fork: each worker opens its own

    def ready(bound: int) -> None:
        base = f"http://{host}:{bound}"
        plural = "es" if count > 1 else ""
        click.echo(f"oncebox: serving {base}/v1 (OpenAPI: /openapi.json)", err=True)
        click.echo(f"oncebox: console: {base}/console; {count} worker process{plural}", err=True)

    limits = Limits(header_timeout, body_timeout, max_connections, max_head)
    def make_app() -> Any:
        app = create_app(obj.box, private_key=key, unverified_budget=unverified_budget)
        return app if no_forward else alongside(app, obj.box, share=count)

    server.run_workers(
        make_app,
        count,
        host,
        port,
        limits,
        ready,
        access_log=None if log_format == "off" else log_format,
        proxies=proxies,
    )


def _proxies(value: str | None) -> list[str] | None:
    """The trusted proxies as uvicorn compares them; a typo is refused here, where
    uvicorn would keep it as a name no peer ever has, and trust nobody silently."""
    if value is None:
        return None
    items = [item.strip() for item in value.split(",")]
    if items == ["*"]:
        return items
    trusted = []
    for item in items:
        try:
            # uvicorn reads "10.0.0.1/8" as a name: given as the network it means.
            network = ipaddress.ip_network(item, strict=False) if "/" in item else None
            trusted.append(str(network if network is not None else ipaddress.ip_address(item)))
        except ValueError:
            raise click.BadParameter(f"{item!r} is not an IP address or network") from None
    return trusted


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise OnceboxError(f"cannot read {path}: {exc.strerror}") from None
