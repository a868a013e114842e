"""The write budget: WAL pages, fsyncs, statements and commits one delivery costs.

For each codec (keyed, json-event with its generation step, ussd-h1 with its triage
ledger) on a SQLite store already holding ``--stored`` records under random keys: the
average over ``--n`` single accepted deliveries, over ``--n`` single duplicates, and one
batch of 1,000 new deliveries and the same 1,000 again. Counted through an APSW VFS
(bench/walcount.py); tests/test_write_budget.py holds the same figures to their bounds.

    .venv/bin/python bench/budget.py [--stored 2000] [--n 200] [--json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import oncebox
import walcount
from synthetic import frame_delivery, json_body

PAYLOAD = b"x" * 215

CODECS: dict[str, tuple[oncebox.InboxSpec, Callable[[int], oncebox.Delivery]]] = {
    "keyed": (
        oncebox.InboxSpec("k", codec="keyed"),
        lambda i: oncebox.Delivery(PAYLOAD, key=str(uuid.UUID(int=i * 7919 + 1, version=4))),
    ),
    "json-event": (
        oncebox.InboxSpec("listing", codec="json-event", apply="generation"),
        lambda i: oncebox.Delivery(json_body(i)),
    ),
    "ussd-h1": (oncebox.InboxSpec("ussd", codec="ussd-h1", apply="triage"), frame_delivery),
}


def measure(codec: str, stored: int, n: int, directory: Path) -> dict[str, dict[str, float]]:
    spec, make = CODECS[codec]
    with walcount.counting() as counter:
        url = f"sqlite:///{directory / f'{codec}.db'}?vfs={counter.vfs_name}"
        with oncebox.open(url, inboxes=[spec]) as box:
            for start in range(0, stored, 1000):
                box.ingest_batch(
                    spec.name, [make(i) for i in range(start, min(stored, start + 1000))]
                )
            fresh = [make(i) for i in range(10**6, 10**6 + n)]
            _, single = counter.measure(lambda: [box.ingest(spec.name, d) for d in fresh])
            _, again = counter.measure(lambda: [box.ingest(spec.name, d) for d in fresh])
            batch = [make(i) for i in range(2 * 10**6, 2 * 10**6 + 1000)]
            _, first = counter.measure(lambda: box.ingest_batch(spec.name, batch))
            _, dup = counter.measure(lambda: box.ingest_batch(spec.name, batch))
    return {
        "single accepted": single.per(n),
        "single duplicate": again.per(n),
        "batch of 1,000 new": first.per(1),
        "batch of 1,000 duplicates": dup.per(1),
    }


def figures_for(stored: int = 2000, n: int = 200) -> dict[str, Any]:
    """Every codec's budget, measured in a temporary directory."""
    with tempfile.TemporaryDirectory() as tmp:
        return {c: measure(c, stored, n, Path(tmp)) for c in CODECS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stored", type=int, default=2000)
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = figures_for(args.stored, args.n)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(report(figures))


def report(figures: dict[str, dict[str, dict[str, float]]]) -> str:
    lines = [
        f"{'codec':<11} {'case':<26} {'pages':>8} {'fsyncs':>7} {'statements':>11} {'commits':>8}"
    ]
    for codec, cases in figures.items():
        for case, c in cases.items():
            lines.append(
                f"{codec:<11} {case:<26} {c['pages']:>8.1f} {c['syncs']:>7.2f} "
                f"{c['statements']:>11.1f} {c['transactions']:>8.2f}"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
