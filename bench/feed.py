# ruff: noqa: E402  (sys.path is set before the imports it decides)
"""Feed benchmark: reading what was accepted against writing it, and how soon a
long-polling reader sees a commit, through a real ``oncebox serve`` on a SQLite file.

Cases, one run:

* **batched ingest (HTTP)**: ``--n`` distinct json-event deliveries POSTed as NDJSON
  batches of 1,000 to ``/v1/inboxes/listing/batch``, one client: the rate the feed must
  keep up with.
* **batched ingest (library)**: the same number through ``box.ingest_batch`` in this
  process, on a fresh store.
* **feed read (HTTP)**: the whole feed read back through ``GET /v1/inboxes/listing/feed``
  a page of 1,000 at a time, one client. Target: >= 1.0x batched ingest (HTTP).
* **follow lag**: ``--clients`` (64) clients POST single deliveries for ``--seconds``
  while one reader long-polls the feed (``wait=30``); for every entry, the time from its
  decision (``first_seen``, the server clock, before its commit) and from the sender's
  201 to the reader's receipt. Target: p99 from decision < 100 ms.

    .venv/bin/python bench/feed.py                 # defaults, about a minute
    .venv/bin/python bench/feed.py --n 20000 --workers 1
"""

from __future__ import annotations

import sys
from pathlib import Path

# This folder holds http.py, which would shadow the standard library's http for httpx.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]

import argparse
import asyncio
import json
import multiprocessing
import statistics
import tempfile
import time
from datetime import datetime

import httpx

import oncebox

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from serveproc import serving  # the suite's real-process server helper

BATCH = 1_000
FEED = "/v1/inboxes/listing/feed"


def body(i: int) -> bytes:
    event = {
        "schema_version": 1,
        "source": "listings-feed",
        "subscription": "sub-main",
        "notification_id": f"bench-{i}",
        "seller_id": "SELLER-A",
        "sku": f"SKU-{i % 997}",
        "marketplace_id": "ATVPDKIKX0DER",
        "notification_type": "listing_status_changed",
        "event_time": "2026-11-01T10:00:00Z",
        "payload": {"status": "ACTIVE", "issues": []},
    }
    return json.dumps(event).encode()


def token(url: str) -> str:
    box = oncebox.open(url)
    try:
        return box.create_token("bench", ["*"], ["write", "read"]).secret
    finally:
        box.close()


def ingest_http(http: httpx.Client, start: int, n: int) -> float:
    began = time.perf_counter()
    for first in range(start, start + n, BATCH):
        lines = b"\n".join(body(i) for i in range(first, min(first + BATCH, start + n)))
        answer = http.post(
            "/v1/inboxes/listing/batch",
            content=lines,
            headers={"Content-Type": "application/x-ndjson"},
        )
        answer.raise_for_status()
    return n / (time.perf_counter() - began)


def ingest_library(url: str, n: int) -> float:
    box = oncebox.open(url)
    try:
        deliveries = [oncebox.Delivery(body(i)) for i in range(n)]
        began = time.perf_counter()
        for first in range(0, n, BATCH):
            box.ingest_batch("listing", deliveries[first : first + BATCH])
        return n / (time.perf_counter() - began)
    finally:
        box.close()


def read_feed(http: httpx.Client, expected: int) -> float:
    began = time.perf_counter()
    after, seen = 0, 0
    while seen < expected:
        page = http.get("/v1/inboxes/listing/feed", params={"after": after, "limit": BATCH}).json()
        seen += len(page["entries"])
        if page["next_after"] == after:
            break
        after = page["next_after"]
    if seen != expected:
        raise SystemExit(f"the feed held {seen} entries, not {expected}")
    return seen / (time.perf_counter() - began)


async def _send(base: str, secret: str, clients: int, seconds: float, start: int) -> dict:
    """``clients`` senders, each with a connection of its own, for ``seconds``: when each
    delivery's 201 came (wall clock)."""
    acked: dict[str, float] = {}
    stop = time.monotonic() + seconds

    async def sender(k: int) -> None:
        headers = {"Authorization": f"Bearer {secret}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as http:
            i = start + k
            while time.monotonic() < stop:
                answer = await http.post("/v1/inboxes/listing/deliveries", content=body(i))
                acked[f"bench-{i}"] = time.time()
                assert answer.status_code == 201, answer.text
                i += clients

    await asyncio.gather(*(sender(k) for k in range(clients)))
    return acked


def send(base: str, secret: str, clients: int, seconds: float, start: int, out: str) -> None:
    """The senders, in a process of their own: the reader's receipt times are its own."""
    acked = asyncio.run(_send(base, secret, clients, seconds, start))
    Path(out).write_text(json.dumps(acked))


def follow_lag(base: str, secret: str, clients: int, seconds: float, start: int) -> dict:
    """Lags in ms: from each entry's decision, and from its sender's 201, to receipt by a
    reader long-polling in this process while the senders run in another."""
    headers = {"Authorization": f"Bearer {secret}"}
    seen: dict[str, tuple[float, float]] = {}  # identity -> (received, decided)
    with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
        position = 0
        while True:  # to the end of what is there
            page = http.get(FEED, params={"after": position, "limit": BATCH}).json()
            if page["next_after"] == position:
                break
            position = page["next_after"]
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            senders = multiprocessing.get_context("spawn").Process(
                target=send, args=(base, secret, clients, seconds, start, out.name)
            )
            senders.start()
            while senders.is_alive():
                page = http.get(FEED, params={"after": position, "limit": BATCH, "wait": 1}).json()
                now = time.time()
                for entry in page["entries"]:
                    decided = datetime.fromisoformat(entry["first_seen"]).timestamp()
                    seen[json.loads(entry["identity"])[-1]] = (now, decided)
                position = page["next_after"]
            senders.join()
            acked: dict[str, float] = json.loads(Path(out.name).read_text() or "{}")
    from_decision = sorted((got - decided) * 1000 for got, decided in seen.values())
    from_ack = sorted((seen[i][0] - t) * 1000 for i, t in acked.items() if i in seen)
    return {
        "deliveries": len(acked),
        "seen": len(seen),
        "from_decision_ms": percentiles(from_decision),
        "from_201_ms": percentiles(from_ack),
    }


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    q = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50": round(q[49], 1), "p99": round(q[98], 1), "max": round(values[-1], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=50_000, help="deliveries ingested and read")
    parser.add_argument("--clients", type=int, default=64, help="senders in the lag case")
    parser.add_argument("--seconds", type=float, default=15.0, help="length of the lag case")
    parser.add_argument("--workers", type=int, default=None, help="serve --workers")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        library = ingest_library(f"sqlite:///{work}/library.db", args.n)
        url = f"sqlite:///{work}/served.db"
        secret = token(url)
        extra = ["--workers", str(args.workers)] if args.workers else []
        with serving(url, *extra) as server:
            with httpx.Client(
                base_url=server.base, headers={"Authorization": f"Bearer {secret}"}, timeout=60
            ) as http:
                written = ingest_http(http, 0, args.n)
                read = read_feed(http, args.n)
            lag = follow_lag(server.base, secret, args.clients, args.seconds, args.n)
    workers = " ".join(extra) or "default workers"
    print(f"feed benchmark, {args.n:,} json-event deliveries, SQLite file, serve {workers}")
    print(f"  batched ingest (library)  {library:10,.0f} /s")
    print(f"  batched ingest (HTTP)     {written:10,.0f} /s")
    print(f"  feed read (HTTP, 1,000)   {read:10,.0f} /s   {read / written:.2f}x HTTP ingest "
          f"(target >= 1.0), {read / library:.2f}x library ingest")  # fmt: skip
    print(f"  follow lag, {args.clients} senders, {args.seconds:g} s: {lag['deliveries']:,} "
          f"delivered, {lag['seen']:,} seen")  # fmt: skip
    print(f"    from decision to reader  {lag['from_decision_ms']}  (target p99 < 100 ms)")
    print(f"    from sender's 201        {lag['from_201_ms']}  (below 0: seen before the "
          "busy senders' process read its 201)")  # fmt: skip


if __name__ == "__main__":
    main()
