"""Running the HTTP app as a long-lived server, as ``oncebox serve`` does: one process, or
N worker processes sharing one port.

Every response carries ``Oncebox-Worker: <pid>``, the process that answered it, so that an
operator (and a test) can see the workers share the load.
"""

from __future__ import annotations

import gc
import os
import socket
from collections.abc import Callable
from typing import Any

import uvicorn
from fastapi import FastAPI

from oncebox.errors import OnceboxError
from oncebox.surfaces import workers
from oncebox.surfaces.http import accesslog
from oncebox.surfaces.http.limits import GuardedProtocol, Limits

# Young-generation collections every 20,000 net allocations instead of 700: a server
# allocates and frees per request, and frequent collections show up as tail latency.
GC_THRESHOLDS = (20_000, 50, 100)
WORKER_HEADER = "oncebox-worker"


def settle_heap() -> None:
    """Collect once, then freeze what startup built (modules, the app, the schema) so
    that no later collection scans it again, and collect the young generation rarely.

    Measured with ``bench/http.py`` (64 clients): single-delivery p99 fell from about
    85 ms to under 50 ms, since full collections over the startup heap had stalled
    whole group-commit rounds.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def run(
    app: FastAPI,
    host: str = "127.0.0.1",
    port: int = 8080,
    sock: socket.socket | None = None,
    limits: Limits | None = None,
    access_log: str | None = None,
    proxies: list[str] | None = None,
) -> None:
    """Serve ``app`` on uvicorn until interrupted, on ``host:port`` or a bound ``sock``,
    with the head and body deadlines and the connection bound of ``limits``, and an
    access line per request on stderr in ``access_log``'s format (combined, json).

    ``X-Forwarded-For`` and ``X-Forwarded-Proto`` are believed only from ``proxies``
    (addresses, networks or ``*``); by default from nobody. uvicorn's own default
    believes any local peer, so anything on the host could name any client."""
    served: Any = app
    if access_log is not None:
        accesslog.install()
        served = accesslog.AccessLog(app, access_log)
    settle_heap()
    config = uvicorn.Config(
        served,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        http=GuardedProtocol.with_limits(limits or Limits()),
        headers=[(WORKER_HEADER, str(os.getpid()))],
        proxy_headers=proxies is not None,
        forwarded_allow_ips=proxies or [],
    )
    uvicorn.Server(config).run(sockets=[sock] if sock is not None else None)


def run_workers(
    make_app: Callable[[], FastAPI],
    count: int,
    host: str = "127.0.0.1",
    port: int = 8080,
    limits: Limits | None = None,
    ready: Callable[[int], None] | None = None,
    access_log: str | None = None,
    proxies: list[str] | None = None,
) -> None:
    """Serve ``make_app()`` in ``count`` worker processes on one port until interrupted.

    Each worker calls ``make_app`` after the fork (so each opens its own store and runs
    its own group commit) and listens on a socket of its own, bound with SO_REUSEPORT:
    the kernel spreads new connections over the workers evenly, rather than waking all
    of them for each one and letting the quickest take it. ``count == 1`` serves in this
    process. ``ready`` gets the port (the one chosen, for port 0) before the workers start.
    """
    family, address = _address(host, port)
    if count == 1:
        with _listenable(family, address) as sock:
            if ready is not None:
                ready(sock.getsockname()[1])
            run(make_app(), sock=sock, limits=limits, access_log=access_log, proxies=proxies)
        return
    # A plain bind first: it fails if anything listens on the port already (a socket with
    # SO_REUSEPORT alone could join another server's group), and it resolves port 0.
    with _listenable(family, address) as probe:
        address = (address[0], probe.getsockname()[1], *address[2:])
    # Kept bound (never listening) while the workers run, so the port stays theirs.
    with _socket(family, address, reuse_port=True) as reserved:
        if ready is not None:
            ready(address[1])

        def worker(_index: int) -> None:
            reserved.close()
            sock = _socket(family, address, reuse_port=True)
            run(make_app(), sock=sock, limits=limits, access_log=access_log, proxies=proxies)

        workers.run_workers(count, worker)


Address = tuple[str, int] | tuple[str, int, int, int]


def _address(host: str, port: int) -> tuple[socket.AddressFamily, Address]:
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise OnceboxError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    family, _, _, _, address = found[0]
    return family, address  # type: ignore[return-value]


def _listenable(family: socket.AddressFamily, address: Address) -> socket.socket:
    """A plain bound socket, or a OnceboxError saying why there cannot be one."""
    try:
        return _socket(family, address, reuse_port=False)
    except OSError as exc:
        raise OnceboxError(f"cannot listen on {address[0]}:{address[1]}: {exc.strerror}") from None


def _socket(family: socket.AddressFamily, address: Address, *, reuse_port: bool) -> socket.socket:
    """A TCP socket bound to ``address``."""
    # IPPROTO_TCP: uvicorn then sets TCP_NODELAY; without it a request can wait ~40 ms.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except BaseException:
        sock.close()
        raise
    return sock
