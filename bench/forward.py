# ruff: noqa: E402  (sys.path is set before the imports it decides)
"""Forwarding benchmark: what the outbox costs the write path, and how fast dispatchers
send, on a SQLite file, in one run.

Cases:

* **batched ingest, one destination vs none**: ``--n`` distinct ``keyed`` deliveries
  through ``box.ingest_batch`` (1,000 per transaction), into an inbox with no destination
  and into one with one HTTP destination (each accepted record also writes its forward,
  in the same transaction), on fresh stores, the two alternated ``--rounds`` times (4),
  each going first every other round; the median of each. Target: with one destination
  >= 0.85x with none.
* **forwarding throughput**: the forwards of ``--n`` records sent by one dispatcher
  (``max_in_flight`` 64) to a local no-op receiver (uvicorn, answers 200 at once, in a
  process of its own), against a plain ``httpx`` loop with 64 requests in flight posting
  the same number of bodies of the same size. Target: >= 0.8x the plain loop.

    .venv/bin/python bench/forward.py                 # defaults, about a minute
    .venv/bin/python bench/forward.py --n 20000 --rounds 5
"""

from __future__ import annotations

import sys
from pathlib import Path

# This folder holds http.py, which would shadow the standard library's http for httpx.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]

import argparse
import asyncio
import statistics
import subprocess
import tempfile
import threading
import time

import httpx

import oncebox
from oncebox import InboxSpec

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from serveproc import free_port  # the suite's helper

BATCH = 1_000
IN_FLIGHT = 64
RECEIVER = """
import uvicorn

async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"{}"})

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


def ingest(path: Path, url: str | None, n: int) -> float:
    """Deliveries a second through ingest_batch into a fresh store."""
    box = oncebox.open(f"sqlite:///{path}", inboxes=[spec(url)])
    try:
        items = deliveries(0, n)
        began = time.perf_counter()
        for first in range(0, n, BATCH):
            box.ingest_batch("payments", items[first : first + BATCH])
        return n / (time.perf_counter() - began)
    finally:
        box.close()


def dispatch(path: Path, url: str, n: int) -> tuple[float, int, int]:
    """Forwards a second sent by one dispatcher until none is left, how many were
    delivered, and the size of one forward's body."""
    from oncebox.engine.outbox import body_of
    from oncebox.surfaces.forwarding import Dispatcher

    box = oncebox.open(f"sqlite:///{path}", inboxes=[spec(url)])
    try:
        for first in range(0, n, BATCH):
            box.ingest_batch("payments", deliveries(first, min(BATCH, n - first)))
        began = time.perf_counter()
        outcomes = Dispatcher(box, poll=0.05).run(threading.Event(), once=True)
        rate = n / (time.perf_counter() - began)
        entry = box.feed("payments", limit=1).entries[0]
        size = len(body_of("payments", entry, entry.idempotency_key))
        return rate, outcomes["delivered"], size
    finally:
        box.close()


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
    parser.add_argument("--rounds", type=int, default=4, help="alternations of the ingest pair")
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
        with tempfile.TemporaryDirectory() as work:
            where = Path(work)
            none, one = [], []
            for r in range(args.rounds):  # alternated, each going first every other round
                pair = [(none, None), (one, url)]
                for rates, target in pair if r % 2 == 0 else pair[::-1]:
                    rates.append(ingest(where / f"{r}-{bool(target)}.db", target, args.n))
            bare, sent = statistics.median(none), statistics.median(one)
            print(f"batched ingest, no destination:  {bare:9,.0f} /s  (rounds: "
                  f"{', '.join(f'{x:,.0f}' for x in none)})")
            print(f"batched ingest, one destination: {sent:9,.0f} /s  (rounds: "
                  f"{', '.join(f'{x:,.0f}' for x in one)})")
            print(f"  ratio {sent / bare:.2f} (target >= 0.85)")

            rate, delivered, size = dispatch(where / "dispatch.db", url, args.n)
            if delivered != args.n:
                raise SystemExit(f"{delivered} of {args.n} forwards delivered")
            loop = asyncio.run(plain(url, args.n, size))
            print(f"forwarding, one dispatcher, {IN_FLIGHT} in flight: {rate:9,.0f} /s")
            print(f"plain httpx loop, {IN_FLIGHT} in flight:      {loop:9,.0f} /s")
            print(f"  ratio {rate / loop:.2f} (target >= 0.8)")
    finally:
        receiver.terminate()
        receiver.wait(timeout=30)


if __name__ == "__main__":
    main()
