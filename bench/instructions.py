"""Instructions a delivery: one pass of bench/peers.py's cases, counted under callgrind.

On a shared machine rates move by several times between runs; the instructions a pass
executes do not (two runs of one case differ by well under 1%). Run under valgrind with
instrumentation off; the script switches it on (``callgrind_control -i on``) only around
the measured pass, so imports, setup and a duplicate pass's first pass are not counted:

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/cg.out \\
        .venv/bin/python bench/instructions.py keyed-batched-first --n 2000
    # the "Collected" line divided by --n is the instructions a delivery

Cases: ``{keyed,json-event,naive}-{batched,single}-{first,dup}``. Keys and bodies come
from a seeded generator (peers.py's shapes: UUID-like keys, 215-byte payloads, json-event
bodies from synthetic.json_body), so every run counts the same work. A duplicate pass
first ingests the same deliveries batched, uncounted. Without valgrind it runs the pass
uncounted (a smoke test).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence

import oncebox
from synthetic import json_body

SIDES = ("keyed", "json-event", "naive")


def events(n: int, seed: int = 7) -> list[tuple[str, bytes]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b, c, d, e = (rng.getrandbits(bits) for bits in (32, 16, 12, 12, 48))
        key = f"{a:08x}-{b:04x}-4{c:03x}-a{d:03x}-{e:012x}"
        fill = 215 - len(json.dumps({"key": key, "seq": i, "data": ""}))
        data = f"{rng.getrandbits(4 * fill):x}".zfill(fill)[:fill]
        out.append((key, json.dumps({"key": key, "seq": i, "data": data}).encode()))
    return out


def oncebox_pass(side: str, tmp: str, n: int) -> Callable[[int], None]:
    keyed = side == "keyed"
    box = oncebox.open(f"sqlite:///{tmp}/b.db", inboxes=[oncebox.InboxSpec("i", codec=side)])
    found = events(n)
    if not keyed:
        found = [(k, json_body(i).replace(f'"n-{i:010d}"'.encode(), f'"{k}"'.encode()))
                 for i, (k, _) in enumerate(found)]  # fmt: skip
    deliveries = [oncebox.Delivery(body=b, key=k if keyed else None) for k, b in found]

    def run(batch: int) -> None:
        if batch == 1:
            for delivery in deliveries:
                box.ingest("i", delivery)
        else:
            for j in range(0, len(deliveries), batch):
                box.ingest_batch("i", deliveries[j : j + batch])

    return run


def naive_pass(tmp: str, n: int) -> Callable[[int], None]:
    """peers.py's naive inbox: sqlite3, WAL, synchronous=FULL, INSERT OR IGNORE."""
    conn = sqlite3.connect(f"{tmp}/n.db")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE inbox (key TEXT PRIMARY KEY, sha BLOB, payload TEXT)")
    found = events(n)

    def run(batch: int) -> None:
        for j in range(0, len(found), batch):
            rows = [(key, hashlib.sha256(body).digest(), body.decode())
                    for key, body in found[j : j + batch]]  # fmt: skip
            with conn:
                conn.executemany("INSERT OR IGNORE INTO inbox VALUES (?, ?, ?)", rows)

    return run


def instrument(state: str) -> None:
    """Switch callgrind's instrumentation of this process on or off (nothing without it)."""
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        subprocess.run(["callgrind_control", "-i", state, str(os.getpid())],
                       check=True, capture_output=True)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cases = [f"{s}-{m}-{k}" for s in SIDES for m in ("batched", "single") for k in ("first", "dup")]
    p.add_argument("case", choices=cases)
    p.add_argument("--n", type=int, default=2000, help="deliveries in the counted pass")
    p.add_argument("--batch", type=int, default=1000)
    args = p.parse_args(argv)
    side, mode, kind = args.case.rsplit("-", 2)
    with tempfile.TemporaryDirectory(prefix="oncebox-instructions-") as tmp:
        run = naive_pass(tmp, args.n) if side == "naive" else oncebox_pass(side, tmp, args.n)
        if kind == "dup":
            run(args.batch)  # the first pass, not counted
        instrument("on")
        run(1 if mode == "single" else args.batch)
        instrument("off")
    print(f"{args.case}: {args.n} deliveries counted", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
