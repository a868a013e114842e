# ruff: noqa: E402  (sys.path is set before the imports it decides)
"""Client instructions a delivery on PostgreSQL, counted under callgrind: bench/instructions.py's
way (instrumentation on around the measured pass only) over ``box.ingest`` into a
throwaway server, json-event with the ``generation`` step. The server is a process of
its own, so only the client is counted.

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/cg.out \\
        .venv/bin/python bench/pginstructions.py single-new --n 200
    # the "Collected" line divided by --n is the instructions a delivery

Cases: ``single-new``, ``single-dup`` (the same deliveries again, after an uncounted
batched first pass) and ``batched-new`` (batches of 1,000). ``--src DIR`` counts another
checkout's ``src/`` (main's, for a before).
"""

from __future__ import annotations

import sys
from pathlib import Path

_src = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--src=")), None)
if _src:
    sys.path.insert(0, _src)
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))

import argparse

import oncebox
from helpers import event_body
from instructions import instrument
from oncebox import Delivery, InboxSpec
from pgcluster import throwaway_server

INBOX = InboxSpec("listing", codec="json-event", apply="generation")


def event(i: int) -> Delivery:
    payload = {"status": "BUYABLE", "issues": [], "price": 1}
    return Delivery(event_body(f"n-{i:08d}", sku=f"SKU-{i % 50:03d}", payload=payload))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("case", choices=["single-new", "single-dup", "batched-new"])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--src", help="another checkout's src/ (--src=DIR)")
    args = parser.parse_args()
    with throwaway_server("oncebox-bench-pginstr-") as server:
        box = oncebox.open(server.create_database("instr"), inboxes=[INBOX])
        try:
            for i in range(50):  # the pool's connection open, its statements prepared
                box.ingest("listing", event(-1_000 - i))
            deliveries = [event(i) for i in range(args.n)]
            if args.case == "single-dup":
                box.ingest_batch("listing", deliveries)
            instrument("on")
            if args.case == "batched-new":
                for j in range(0, args.n, 1_000):
                    box.ingest_batch("listing", deliveries[j : j + 1_000])
            else:
                for delivery in deliveries:
                    box.ingest("listing", delivery)
            instrument("off")
        finally:
            box.close()
    print(f"oncebox from {Path(oncebox.__file__).parent}: {args.case}, {args.n} deliveries")


if __name__ == "__main__":
    main()
