# ruff: noqa: E402  (sys.path is set before the imports it decides)
"""Forwarding benchmark: what the outbox costs the write path, and how fast dispatchers
send, on a SQLite file (or PostgreSQL with ``--pg``), in one run.

Cases:

* **batched ingest, one destination vs none**: ``--n`` distinct ``keyed`` deliveries
  through ``box.ingest_batch`` (1,000 per transaction), into an inbox with no destination
  and into one with one HTTP destination (each accepted record also writes its forward,
  in the same transaction), on fresh stores, the two alternated ``--rounds`` times (4),
  each going first every other round; the median of each, in wall time and in this
  process's CPU time (on SQLite all the work is in this process, so its CPU time moves
  less with the machine's load; on PostgreSQL it leaves out the server's). On SQLite,
  also the WAL pages a batch of 1,000 writes, with and without. Target: with one
  destination >= 0.85x with none.
* **forwarding throughput**: the forwards of ``--send-n`` (2,000) records sent by one dispatcher
  (``max_in_flight`` 64) to a local no-op receiver (uvicorn, answers 200 at once, in a
  process of its own), against a plain ``httpx`` loop with 64 requests in flight posting
  the same number of bodies of the same size, the two alternated twice; the median of
  each. Target: >= 0.8x the plain loop.
* **commit to receiver**: ``--rate`` (20) records a second ingested for ``--seconds``
  (20), 10 a transaction, with a dispatcher running beside in this process; for each,
  the time from its decision (``decided_at``, before its commit) to its first receipt
  at the receiver: p50 and p99.

    .venv/bin/python bench/forward.py                 # defaults, about a minute
    .venv/bin/python bench/forward.py --n 20000 --rounds 5
    .venv/bin/python bench/forward.py --pg --ingest-only  # a throwaway PostgreSQL server
"""

from __future__ import annotations

import sys
from pathlib import Path

# This folder holds http.py, which would shadow the standard library's http for httpx.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]

import argparse
import asyncio
import contextlib
import sqlite3
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx

import oncebox
from oncebox import InboxSpec

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from serveproc import free_port  # the suite's helper

BATCH = 1_000
IN_FLIGHT = 64
RECEIVER = """
import json, time
from datetime import datetime
import uvicorn

seen = {}

async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    answer = b"{}"
    if scope["path"] == "/latencies":
        answer = json.dumps(list(seen.values())).encode()
        seen.clear()
    elif body.startswith(b'{"content"'):  # a forward: from its decision to now, once
        document = json.loads(body)
        decided = datetime.fromisoformat(document["decided_at"].replace("Z", "+00:00"))
        seen.setdefault(document["idempotency_key"], time.time() - decided.timestamp())
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(answer)).encode())]})
    await send({"type": "http.response.body", "body": answer})

uvicorn.run(app, host="127.0.0.1", port=%d, log_level="warning", access_log=False)
"""


def spec(url: str | None) -> InboxSpec:
    forward = {"sink": {"url": url, "max_in_flight": IN_FLIGHT}} if url else None
    return InboxSpec("payments", codec="keyed", forward=forward)


def deliveries(start: int, n: int) -> list[oncebox.Delivery]:
    return [
        oncebox.Delivery(b'{"amount": %d, "currency": "EUR"}' % i, key=f"p-{i}")
        for i in range(start, start + n)
    ]


Stores = Callable[[str], str]  # a fresh store's URL, by name


@contextlib.contextmanager
def stores(pg: bool, work: Path) -> Iterator[tuple[Stores, str]]:
    """Fresh stores, each a SQLite file in ``work``, or with ``pg`` a database of a
    throwaway PostgreSQL server (tests/pgcluster.py, fsync off, unix socket in /tmp; or
    the one ``ONCEBOX_TEST_PG`` names), stopped and wiped afterwards."""
    if not pg:
        yield (lambda name: f"sqlite:///{work / name}.db"), "SQLite file"
        return
    from pgcluster import throwaway_server

    with throwaway_server("oncebox-bench-fwd-") as server:
        made: list[str] = []

        def fresh(name: str) -> str:
            made.append(f"b{uuid.uuid4().hex[:8]}_{name.replace('-', '_')}")
            return server.create_database(made[-1])

        try:
            yield fresh, f"PostgreSQL ({type(server).__name__}, fsync off)"
        finally:
            for name in made:
                with contextlib.suppress(Exception):
                    server.drop_database(name)


@contextlib.contextmanager
def timing_the_outbox() -> Iterator[list[float]]:
    """This thread's CPU seconds and the wall seconds inside the store's
    ``queue_forwards`` (the statement that writes a batch's forwards; on PostgreSQL the
    wall time includes the server's work), added up while the block runs: the outbox's
    own share of an ingest, which moves far less with the machine's load than a ratio of
    two runs."""
    from oncebox.store.sqltx.forwarding import ForwardingSql

    spent, queue = [0.0, 0.0], ForwardingSql.queue_forwards

    def timed(self: ForwardingSql, rows: Any) -> None:
        began, wall = time.thread_time(), time.perf_counter()
        queue(self, rows)
        spent[0] += time.thread_time() - began
        spent[1] += time.perf_counter() - wall

    ForwardingSql.queue_forwards = timed  # type: ignore[method-assign]
    try:
        yield spent
    finally:
        ForwardingSql.queue_forwards = queue  # type: ignore[method-assign]


def ingest(store: str, url: str | None, n: int) -> tuple[float, float, float, float]:
    """Deliveries a second through ingest_batch into a fresh store, this process's CPU
    microseconds a delivery, and of them those spent writing its forwards, and the wall
    microseconds a delivery spent writing them."""
    box = oncebox.open(store, inboxes=[spec(url)])
    try:
        items = deliveries(0, n)
        with timing_the_outbox() as outbox:
            began, cpu = time.perf_counter(), time.process_time()
            for first in range(0, n, BATCH):
                box.ingest_batch("payments", items[first : first + BATCH])
            used = (time.process_time() - cpu) / n * 1e6
        return n / (time.perf_counter() - began), used, outbox[0] / n * 1e6, outbox[1] / n * 1e6
    finally:
        box.close()


def wal_pages(path: Path, url: str | None) -> float:
    """WAL pages a batch of ``BATCH`` deliveries writes into a SQLite store (after a first
    batch, the median of three), read from a checkpoint after each."""
    box = oncebox.open(f"sqlite:///{path}", inboxes=[spec(url)])
    watch = sqlite3.connect(path)
    try:
        box.ingest_batch("payments", deliveries(0, BATCH))
        watch.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = []
        for first in range(BATCH, 4 * BATCH, BATCH):
            box.ingest_batch("payments", deliveries(first, BATCH))
            pages.append(watch.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1])
            watch.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return statistics.median(pages)
    finally:
        watch.close()
        box.close()


def dispatch(store: str, url: str, n: int) -> tuple[float, int]:
    """Forwards a second sent by one dispatcher until none is left, and how many were
    delivered."""
    from oncebox.surfaces.forwarding.dispatcher import Dispatcher

    box = oncebox.open(store, inboxes=[spec(url)])
    try:
        for first in range(0, n, BATCH):
            box.ingest_batch("payments", deliveries(first, min(BATCH, n - first)))
        began = time.perf_counter()
        outcomes = Dispatcher(box, poll=0.05).run(threading.Event(), once=True)
        return n / (time.perf_counter() - began), outcomes["delivered"]
    finally:
        box.close()


def size_of() -> int:
    """The size of one forward's body (a record of this benchmark, sent)."""
    from oncebox.engine.outbox import body_of

    box = oncebox.open("sqlite:///:memory:", inboxes=[spec(None)])
    try:
        box.ingest_batch("payments", deliveries(0, 1))
        entry = box.feed("payments", limit=1).entries[0]
        return len(body_of("payments", entry, entry.idempotency_key))
    finally:
        box.close()


def steady(store: str, url: str, rate: int, seconds: float) -> list[float]:
    """Seconds from each record's decision to its receipt, while ``rate`` records a
    second are ingested (10 a transaction) with a dispatcher running beside."""
    from oncebox.surfaces.forwarding.dispatcher import Dispatcher

    box = oncebox.open(store, inboxes=[spec(url)])
    try:
        thread, stop = Dispatcher(box, poll=0.05).start()
        began, n = time.monotonic(), 0
        while time.monotonic() - began < seconds:
            box.ingest_batch("payments", deliveries(n, 10))
            n += 10
            time.sleep(max(0.0, began + n / rate - time.monotonic()))
        while box.forwarding("sink")[0].backlog:
            time.sleep(0.1)
        stop.set()
        thread.join()
    finally:
        box.close()
    return sorted(httpx.post(url.replace("/hooks", "/latencies")).json())


async def plain(url: str, n: int, size: int) -> float:
    """Requests a second from ``IN_FLIGHT`` httpx senders, ``n`` bodies of ``size`` bytes."""
    body = b"x" * size
    limits = httpx.Limits(max_connections=IN_FLIGHT, max_keepalive_connections=IN_FLIGHT)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        queue = iter(range(n))

        async def sender() -> None:
            for _ in queue:
                answer = await client.post(url, content=body,
                                           headers={"content-type": "application/json"})
                answer.raise_for_status()

        began = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(IN_FLIGHT)))
        return n / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000, help="records per case")
    parser.add_argument("--send-n", type=int, default=2_000, help="forwards per sending case")
    parser.add_argument("--rate", type=int, default=20, help="records a second, steady")
    parser.add_argument("--seconds", type=float, default=20, help="of steady load")
    parser.add_argument("--rounds", type=int, default=4, help="alternations of the ingest pair")
    parser.add_argument("--pg", action="store_true",
                        help="on a throwaway PostgreSQL server (tests/pgcluster.py)")
    parser.add_argument("--ingest-only", action="store_true",
                        help="only the ingest pair (and on SQLite its WAL pages)")
    args = parser.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}/hooks"
    receiver = subprocess.Popen([sys.executable, "-c", RECEIVER % port])
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.post(url, content=b"{}", timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise SystemExit("the receiver did not start") from None
                time.sleep(0.1)
        with tempfile.TemporaryDirectory() as work, stores(args.pg, Path(work)) as (fresh, on):
            measure(args, Path(work), fresh, on, url)
    finally:
        receiver.terminate()
        receiver.wait(timeout=30)


def measure(args: argparse.Namespace, where: Path, fresh: Stores, on: str, url: str) -> None:
    print(f"on {on}, {args.n:,} records a case, {args.rounds} rounds")
    none, one = [], []
    for r in range(args.rounds):  # alternated, each going first every other round
        pair = [(none, None), (one, url)]
        for rates, target in pair if r % 2 == 0 else pair[::-1]:
            rates.append(ingest(fresh(f"{r}-{bool(target)}"), target, args.n))
    for name, got in (("no destination: ", none), ("one destination:", one)):
        print(f"batched ingest, {name} {statistics.median(r for r, *_ in got):9,.0f} /s, "
              f"{statistics.median(c for _, c, *_ in got):5.1f} µs CPU a record  (rounds: "
              f"{', '.join(f'{r:,.0f} /s {c:.1f} µs' for r, c, *_ in got)})")
    bare, sent = (statistics.median(r for r, *_ in got) for got in (none, one))
    cpu_bare, cpu_sent = (statistics.median(c for _, c, *_ in got) for got in (none, one))
    print(f"  ratio {sent / bare:.2f} in wall time, {cpu_bare / cpu_sent:.2f} in CPU time "
          "(target >= 0.85)")
    share = statistics.median(o for _, _, o, _ in one)
    print(f"  writing the forwards, inside the one-destination rounds: {share:.1f} µs CPU a "
          f"record (rounds: {', '.join(f'{o:.1f}' for _, _, o, _ in one)}); the same ingest "
          f"less them: {(cpu_sent - share) / cpu_sent:.2f}")
    wall = statistics.median(w for *_, w in one)
    print(f"  the same in wall time: {wall:.1f} µs a record of {1e6 / sent:.1f} (rounds: "
          f"{', '.join(f'{w:.1f}' for *_, w in one)}); the same ingest less them: "
          f"{(1e6 / sent - wall) / (1e6 / sent):.2f}")
    if not args.pg:
        pages = [wal_pages(where / f"wal-{bool(target)}.db", target) for target in (None, url)]
        print(f"  WAL pages a batch of {BATCH:,}: {pages[0]:g} without, {pages[1]:g} with one "
              f"destination ({pages[1] / pages[0]:.2f}x)")
    if args.ingest_only:
        return

    sending, plainly = [], []
    for r in range(2):  # alternated, as the ingest pair is
        pair = ["dispatch", "plain"] if r % 2 == 0 else ["plain", "dispatch"]
        for case in pair:
            if case == "dispatch":
                rate, delivered = dispatch(fresh(f"send-{r}"), url, args.send_n)
                if delivered != args.send_n:
                    raise SystemExit(f"{delivered} of {args.send_n} forwards delivered")
                sending.append(rate)
            else:
                plainly.append(asyncio.run(plain(url, args.send_n, size_of())))
    rate, loop = statistics.median(sending), statistics.median(plainly)
    print(f"forwarding, one dispatcher, {IN_FLIGHT} in flight: {rate:9,.0f} /s  (rounds: "
          f"{', '.join(f'{x:,.0f}' for x in sending)})")
    print(f"plain httpx loop, {IN_FLIGHT} in flight:      {loop:9,.0f} /s  (rounds: "
          f"{', '.join(f'{x:,.0f}' for x in plainly)})")
    print(f"  ratio {rate / loop:.2f} (target >= 0.8)")
    httpx.post(url.replace("/hooks", "/latencies"))  # forget what came so far
    lags = steady(fresh("steady"), url, args.rate, args.seconds)
    p50, p99 = lags[len(lags) // 2], lags[int(len(lags) * 0.99)]
    print(f"commit to receiver, {args.rate}/s for {args.seconds:g}s ({len(lags):,}): "
          f"p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, max {lags[-1] * 1000:.0f} ms")


if __name__ == "__main__":
    main()
