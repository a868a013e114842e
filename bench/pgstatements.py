# ruff: noqa: E402  (sys.path is set before the imports it decides)
"""What a delivery sends to PostgreSQL, counted on the wire: round trips, statements and
which statements, for a single delivery (new, duplicate, conflict) and a batch of 1,000
(new, then half new, half duplicates and a conflict), plus this process's CPU time per
delivery over ``--single-n`` single deliveries and ``--batches`` batches.

psycopg handles every statement it sends one by one, pipelined or not (a cursor, a
result, a poll of the socket), so at this store's rates the statement count is what the
client's CPU follows; tests/pgturns.py's proxy counts them (an Execute or a simple Query
each) with the round trips. ``--src DIR`` measures another checkout's ``src/`` (run it
with that checkout's ``src`` first on ``PYTHONPATH``: this script puts ``--src`` there).

    .venv/bin/python bench/pgstatements.py              # a throwaway server, ~1 minute
    .venv/bin/python bench/pgstatements.py --src=/tmp/main-src --list
"""

from __future__ import annotations

import sys
from pathlib import Path

_src = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--src=")), None)
if _src:
    sys.path.insert(0, _src)
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))

import argparse
import collections
import re
import time
from collections.abc import Callable

import oncebox
from helpers import event_body
from oncebox import Delivery, InboxSpec
from pgcluster import throwaway_server
from pgturns import TurnCounter

INBOX = InboxSpec("listing", codec="json-event", apply="generation")


def event(i: int, price: int = 1) -> Delivery:
    changes = {
        "sku": f"SKU-{i % 50:03d}",
        "payload": {"status": "BUYABLE", "issues": [], "price": price},
    }
    return Delivery(event_body(f"n-{i:08d}", **changes))


def _short(sql: str) -> str:
    return re.sub(r"\s+", " ", sql).strip()[:70]


def measure(counter: TurnCounter, name: str, work: Callable[[], object], show: bool) -> None:
    with counter.counting() as turns, counter.listing() as sent:
        work()
    print(f"{name:<44} {turns[0]:>3} round trips {len(sent):>5} statements")
    if show:
        for sql, n in collections.Counter(_short(s) for s in sent).most_common():
            print(f"    {n:>5}  {sql}")


def cpu_per(work: Callable[[], object], deliveries: int) -> float:
    start = time.process_time()
    work()
    return (time.process_time() - start) / deliveries * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", help="another checkout's src/ (--src=DIR)")
    parser.add_argument("--list", action="store_true", help="list each case's statements")
    parser.add_argument("--single-n", type=int, default=300)
    parser.add_argument("--batches", type=int, default=5)
    args = parser.parse_args()
    print(f"oncebox from {Path(oncebox.__file__).parent}")
    with throwaway_server("oncebox-bench-stmts-") as server:
        counter = TurnCounter(server.create_database("stmts"))
        box = oncebox.open(counter.url, inboxes=[INBOX])
        try:
            box.ingest("listing", event(-1))  # the pool's connection open and warm
            show = args.list
            measure(counter, "single, new", lambda: box.ingest("listing", event(1)), show)
            measure(counter, "single, duplicate", lambda: box.ingest("listing", event(1)), show)
            measure(counter, "single, conflict",
                    lambda: box.ingest("listing", event(1, price=2)), show)  # fmt: skip
            first = [event(i) for i in range(10, 1_010)]
            measure(counter, "batch of 1,000, new", lambda: box.ingest_batch("listing", first),
                    show)  # fmt: skip
            mixed = [event(i) for i in range(510, 1_509)] + [event(20, price=9)]
            measure(counter, "batch of 1,000: 500 new, 499 dup, 1 conflict",
                    lambda: box.ingest_batch("listing", mixed), show)  # fmt: skip
            base = 100_000
            n = args.single_n
            new = cpu_per(lambda: [box.ingest("listing", event(base + i)) for i in range(n)], n)
            dup = cpu_per(lambda: [box.ingest("listing", event(base + i)) for i in range(n)], n)
            k = args.batches
            batches = [[event(200_000 + b * 1_000 + i) for i in range(1_000)] for b in range(k)]
            first_cpu = cpu_per(lambda: [box.ingest_batch("listing", b) for b in batches], k * 1000)
            dup_cpu = cpu_per(lambda: [box.ingest_batch("listing", b) for b in batches], k * 1000)
            print(
                f"client CPU a delivery: single new {new:.0f} us, single duplicate {dup:.0f}"
                f" us, batched new {first_cpu:.0f} us, batched duplicate {dup_cpu:.0f} us"
            )
        finally:
            box.close()
            counter.close()


if __name__ == "__main__":
    main()
