"""Instructions a delivery when two store connections take turns, as two workers do.

``oncebox serve --workers 2`` has two processes deciding group-commit turns on one SQLite
file; each turn holds about half as many deliveries as one worker's, and each connection
finds the file changed by the other one since its last turn (SQLite then drops that
connection's page cache). This runs the same json-event turns through ``ingest_each`` (what
the group commit calls) in one process, from one connection or from ``--connections``
opened on the same file and used in turn, on a store already holding 20,000 records, and
counts the instructions of the turns alone under callgrind (as bench/instructions.py does):

    for setup in "1 61" "1 30" "2 30"; do set -- $setup
        valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/cg.out \\
            .venv/bin/python bench/alternating.py --connections $1 --turn $2
    done   # the "Collected" line divided by --n is the instructions a delivery

Only the engine and the store are counted: not the HTTP service, nor the kernel's time in
the commit's writes and fsync.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence

import oncebox
from instructions import instrument
from synthetic import json_body

SPEC = oncebox.InboxSpec("listing", codec="json-event", apply="generation")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=2, help="connections taking turns")
    parser.add_argument("--turn", type=int, default=30, help="deliveries a turn")
    parser.add_argument("--n", type=int, default=3660, help="deliveries counted")
    parser.add_argument("--stored", type=int, default=20_000, help="records stored first")
    args = parser.parse_args(argv)
    url = f"sqlite:///{tempfile.mkdtemp(prefix='oncebox-alternating-')}/s.db"
    boxes = [oncebox.open(url, inboxes=[SPEC]) for _ in range(args.connections)]
    for start in range(0, args.stored, 1000):
        chunk = range(start, min(start + 1000, args.stored))
        boxes[0].ingest_batch("listing", [oncebox.Delivery(json_body(i)) for i in chunk])
    for k, box in enumerate(boxes):  # each connection opened and warm before counting
        box.ingest_each("listing", [oncebox.Delivery(json_body(10**7 + k))])
    first = 10**8
    turns = [
        [oncebox.Delivery(json_body(i)) for i in range(s, min(s + args.turn, first + args.n))]
        for s in range(first, first + args.n, args.turn)
    ]
    instrument("on")
    for k, turn in enumerate(turns):
        decided = boxes[k % len(boxes)].ingest_each("listing", turn)
    instrument("off")
    if any(getattr(d, "verdict", None) is not oncebox.Verdict.ACCEPTED for d in decided):
        raise SystemExit("not all accepted")
    for box in boxes:
        box.close()
    print(f"{args.n} deliveries in turns of {args.turn} from {len(boxes)} connection(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
