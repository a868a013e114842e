"""Reconciler benchmark: how fast W workers drain N dirty work keys through a slow reader.

The tracker's target: with 10,000 dirty keys and a reader that takes 20 ms per read (a
stand-in for a remote API), 4 workers drain them at least 3x faster than 1 worker. For
each worker count this makes a fresh store, ingests N listing events with distinct SKUs
(one dirty work key each; untimed), then times ``run_workers(..., once=True)`` until
every key is clean. It prints keys/s per worker count, the ideal rate (W reads in
flight all the time), the efficiency and the ratio of the 4- and 1-worker rates. The
target is printed beside the ratio; nothing here asserts on a timing.

``--breakdown`` also times every write transaction the workers run (waiting for the
write lock, the work inside, the commit) and every read, per thread, to show where the
time goes. It wraps the store's ``transaction`` on the benchmark's own store object; the
overhead is a few microseconds per transaction.

    .venv/bin/python bench/reconcile.py                    # 10,000 keys, 1 and 4 workers
    .venv/bin/python bench/reconcile.py --keys 500         # quick
    .venv/bin/python bench/reconcile.py --keys 2000 --workers-list 1,2,4,8 --breakdown
    .venv/bin/python bench/reconcile.py --json > figures.json   # table on stderr
    .venv/bin/python bench/reconcile.py --backend-url postgresql://...   # once it exists
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import oncebox
from oncebox.engine.reconciler import Outcome, ReadResult, WorkKey, run_workers
from oncebox.errors import OnceboxError

INBOX = "listing"
INBOXES = [oncebox.InboxSpec(INBOX, codec="json-event", apply="generation")]
MARKETPLACE = "ATVPDKIKX0DER"
TARGET_RATIO = 3.0  # keys/s with 4 workers >= 3.0 x keys/s with 1 worker (printed only)
MAX_PASSES = 10  # run_workers(once=True) again while keys stay dirty, at most this often


# -- setup (untimed) -----------------------------------------------------------------------
def event_body(seller: str, i: int) -> bytes:
    """A listing event (the shape of tests/helpers.py) whose SKU makes a work key of its
    own."""
    event = {
        "schema_version": 1,
        "source": "listings-feed",
        "subscription": "sub-main",
        "notification_id": f"{seller}-n-{i:07d}",
        "seller_id": seller,
        "sku": f"SKU-{i:07d}",
        "marketplace_id": MARKETPLACE,
        "notification_type": "listing_status_changed",
        "event_time": "2026-11-01T10:00:00Z",
        "payload": {"status": "ACTIVE", "issues": []},
    }
    return json.dumps(event, separators=(",", ":")).encode()


def dirty_count(box: oncebox.Oncebox) -> int:
    return sum(k.dirty for k in box.work_keys(INBOX))


def make_dirty(box: oncebox.Oncebox, keys: int, batch: int) -> str:
    """Ingest ``keys`` events with distinct SKUs under a fresh seller id; returns it."""
    seller = f"BENCH-{uuid.uuid4().hex[:8]}"
    for start in range(0, keys, batch):
        items = [
            oncebox.Delivery(body=event_body(seller, i))
            for i in range(start, min(keys, start + batch))
        ]
        decisions = box.ingest_batch(INBOX, items)
        refused = [d for d in decisions if d.verdict is not oncebox.Verdict.ACCEPTED]
        if refused:
            raise SystemExit(f"setup: {len(refused)} events not accepted, e.g. {refused[0]}")
    return seller


# -- the reader ----------------------------------------------------------------------------
class SleepyReader:
    """A stand-in for a remote API: sleeps ``read_ms`` and returns a small document."""

    def __init__(self, read_ms: float, timings: list[tuple[int, float, float]] | None) -> None:
        self.delay = read_ms / 1000.0
        self.timings = timings

    def __call__(self, key: WorkKey) -> ReadResult:
        if self.timings is None:
            time.sleep(self.delay)
        else:
            started = time.perf_counter()
            time.sleep(self.delay)
            self.timings.append((threading.get_ident(), started, time.perf_counter() - started))
        return ReadResult(key, {"sku": key.sku, "status": "ACTIVE"})


# -- the breakdown (optional) --------------------------------------------------------------
class TxTimer:
    """Wraps ``store.transaction`` on one store object: per write transaction, the caller
    (begin_refresh, complete, fail), the thread, when it started, how long entering took
    (connect + BEGIN IMMEDIATE, i.e. waiting for the write lock), the body, and the exit
    (COMMIT, with its WAL fsync and any auto-checkpoint)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.original = store.transaction
        self.samples: list[tuple[str, int, float, float, float, float]] = []

    def install(self) -> None:
        self.store.transaction = self.transaction

    def remove(self) -> None:
        with contextlib.suppress(AttributeError):
            del self.store.transaction

    def transaction(self) -> contextlib.AbstractContextManager[Any]:
        return self._timed(sys._getframe(1).f_code.co_name)

    @contextlib.contextmanager
    def _timed(self, caller: str) -> Iterator[Any]:
        t0 = time.perf_counter()
        with self.original() as tx:
            t1 = time.perf_counter()
            yield tx
            t2 = time.perf_counter()
        t3 = time.perf_counter()
        self.samples.append((caller, threading.get_ident(), t0, t1 - t0, t2 - t1, t3 - t2))


def summarize(
    timer: TxTimer, reads: list[tuple[int, float, float]], seconds: float, workers: int
) -> dict[str, Any]:
    """Where the wall time went, per phase, as totals over all threads and per key."""
    ms = 1000.0
    out: dict[str, Any] = {"transactions": {}}
    applied = max(1, sum(1 for s in timer.samples if s[0] == "complete"))
    for caller in sorted({s[0] for s in timer.samples}):
        rows = [s for s in timer.samples if s[0] == caller]
        waits = sorted(r[3] for r in rows)
        bodies = [r[4] for r in rows]
        commits = sorted(r[5] for r in rows)
        tenth = max(1, len(rows) // 10)
        by_start = sorted(rows, key=lambda r: r[2])
        out["transactions"][caller] = {
            "count": len(rows),
            "wait_total_s": sum(waits),
            "wait_mean_ms": ms * sum(waits) / len(rows),
            "wait_p50_ms": ms * waits[len(waits) // 2],
            "wait_p99_ms": ms * waits[min(len(waits) - 1, int(len(waits) * 0.99))],
            "wait_max_ms": ms * waits[-1],
            "body_total_s": sum(bodies),
            "body_mean_ms": ms * sum(bodies) / len(rows),
            "body_first10pct_ms": ms * sum(r[4] for r in by_start[:tenth]) / tenth,
            "body_last10pct_ms": ms * sum(r[4] for r in by_start[-tenth:]) / tenth,
            "commit_total_s": sum(commits),
            "commit_mean_ms": ms * sum(commits) / len(rows),
            "commit_p99_ms": ms * commits[min(len(commits) - 1, int(len(commits) * 0.99))],
        }
    held = sum(s[4] + s[5] for s in timer.samples)
    waited = sum(s[3] for s in timer.samples)
    read_total = sum(r[2] for r in reads)
    thread_time = seconds * workers
    out.update({
        "thread_seconds": thread_time,
        "read_total_s": read_total,
        "read_mean_ms": ms * read_total / max(1, len(reads)),
        "lock_wait_total_s": waited,
        "lock_held_total_s": held,
        "lock_held_share_of_wall": held / seconds if seconds else 0.0,
        "other_total_s": thread_time - read_total - waited - held,
        "per_key_ms": {
            "read": ms * read_total / applied,
            "lock_wait": ms * waited / applied,
            "lock_held": ms * held / applied,
            "other": ms * (thread_time - read_total - waited - held) / applied,
        },
    })
    return out


# -- one run -------------------------------------------------------------------------------
def run_one(
    args: argparse.Namespace, workers: int, workdir: Path | None, index: int
) -> dict[str, Any]:
    if args.backend_url:
        url = args.backend_url
    else:
        assert workdir is not None
        url = f"sqlite:///{(workdir / f'reconcile-w{workers}-{index}.db').resolve()}"
    box = oncebox.open(url, inboxes=INBOXES)
    try:
        before = dirty_count(box)
        if before:
            raise SystemExit(
                f"{url}: {before} keys are already dirty in inbox {INBOX}; the workers "
                f"would drain them too. Use an empty store."
            )
        started = time.perf_counter()
        make_dirty(box, args.keys, args.batch)
        setup_seconds = time.perf_counter() - started
        dirty = dirty_count(box)
        if dirty != args.keys:
            raise SystemExit(f"setup: expected {args.keys} dirty keys, found {dirty}")
        reads: list[tuple[int, float, float]] | None = [] if args.breakdown else None
        reader = SleepyReader(args.read_ms, reads)
        timer = TxTimer(box.store) if args.breakdown else None
        if timer:
            timer.install()
        outcomes: Counter[Outcome] = Counter()
        passes = 0
        started = time.perf_counter()
        try:
            while True:
                passes += 1
                outcomes.update(run_workers(box, INBOX, reader, workers=workers, once=True))
                if passes >= MAX_PASSES:
                    break
                left = dirty_count(box)  # inside the timer: looping is part of draining
                if left == 0 or left == dirty:
                    break
                dirty = left
        finally:
            seconds = time.perf_counter() - started
            if timer:
                timer.remove()
        left = dirty_count(box)
        figures: dict[str, Any] = {
            "workers": workers,
            "keys": args.keys,
            "read_ms": args.read_ms,
            "setup_seconds": setup_seconds,
            "seconds": seconds,
            "passes": passes,
            "keys_per_s": args.keys / seconds,
            "ideal_keys_per_s": workers * 1000.0 / args.read_ms,
            "outcomes": {o.value: outcomes.get(o, 0) for o in Outcome},
            "dirty_after": left,
        }
        figures["efficiency"] = figures["keys_per_s"] / figures["ideal_keys_per_s"]
        if timer and reads is not None:
            figures["breakdown"] = summarize(timer, reads, seconds, workers)
        return figures
    finally:
        box.close()


# -- output --------------------------------------------------------------------------------
def report(out: TextIO, figures: dict[str, Any]) -> None:
    def line(text: str = "") -> None:
        print(text, file=out, flush=True)

    line(f"store: {figures['backend']}   keys: {figures['keys']:,}   "
         f"read: {figures['read_ms']:g} ms   cpus: {figures['cpus']}")
    line(f"{'workers':>7} {'keys':>7} {'seconds':>9} {'keys/s':>8} {'ideal/s':>8} "
         f"{'eff':>6} {'passes':>6} {'applied':>8} {'superseded':>10} {'failed':>6} "
         f"{'idle':>5} {'dirty after':>11}")
    for run in figures["runs"]:
        o = run["outcomes"]
        line(f"{run['workers']:>7} {run['keys']:>7,} {run['seconds']:>9.2f} "
             f"{run['keys_per_s']:>8.1f} {run['ideal_keys_per_s']:>8.1f} "
             f"{run['efficiency']:>6.1%} {run['passes']:>6} {o['applied']:>8,} "
             f"{o['superseded']:>10,} {o['failed']:>6,} {o['idle']:>5,} "
             f"{run['dirty_after']:>11,}")
    ratio = figures.get("ratio")
    if ratio is not None:
        text = f"ratio keys/s({ratio['high']}) / keys/s({ratio['low']}) = {ratio['value']:.2f}"
        if ratio["target"] is not None:
            met = "met" if ratio["met"] else "NOT met"
            text += f"   target >= {ratio['target']:.1f}: {met}"
        line(text)
    for run in figures["runs"]:
        b = run.get("breakdown")
        if not b:
            continue
        line()
        line(f"breakdown, {run['workers']} worker(s), {run['seconds']:.2f} s wall, "
             f"{b['thread_seconds']:.2f} thread-s:")
        per = b["per_key_ms"]
        line(f"  per applied key (ms): read {per['read']:.2f}, wait for write lock "
             f"{per['lock_wait']:.2f}, holding it {per['lock_held']:.2f}, "
             f"other {per['other']:.2f}")
        line(f"  write lock held {b['lock_held_total_s']:.2f} s of {run['seconds']:.2f} s wall "
             f"({b['lock_held_share_of_wall']:.0%}); mean read {b['read_mean_ms']:.2f} ms")
        for caller, t in b["transactions"].items():
            line(f"  {caller:>13}: n={t['count']:,} wait mean {t['wait_mean_ms']:.2f} "
                 f"p50 {t['wait_p50_ms']:.2f} p99 {t['wait_p99_ms']:.2f} "
                 f"max {t['wait_max_ms']:.1f} | body mean {t['body_mean_ms']:.3f} "
                 f"(first 10% {t['body_first10pct_ms']:.3f}, last 10% "
                 f"{t['body_last10pct_ms']:.3f}) | commit mean {t['commit_mean_ms']:.2f} "
                 f"p99 {t['commit_p99_ms']:.2f} ms")


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--keys", type=int, default=10_000, help="dirty keys per run (10,000)")
    p.add_argument("--read-ms", type=float, default=20.0,
                   help="milliseconds each read sleeps (20)")
    p.add_argument("--workers-list", default="1,4",
                   help="comma-separated worker counts, one run each (1,4)")
    p.add_argument("--batch", type=int, default=1_000, help="events per ingest_batch (1,000)")
    p.add_argument("--backend-url", default=None,
                   help="store URL (default: a fresh SQLite file per run in a temp dir); "
                        "a shared URL must hold no dirty listing keys")
    p.add_argument("--dir", default=None, help="where to make the temp dir (default: system)")
    p.add_argument("--breakdown", action="store_true",
                   help="time write transactions and reads per thread")
    p.add_argument("--json", action="store_true",
                   help="print figures as JSON on stdout (the table goes to stderr)")
    args = p.parse_args(argv)
    try:
        args.workers = [int(w) for w in args.workers_list.split(",") if w.strip()]
    except ValueError:
        p.error(f"--workers-list: not a list of integers: {args.workers_list!r}")
    if not args.workers or min(args.workers) < 1:
        p.error("--workers-list needs worker counts of at least 1")
    if args.keys < 1 or args.batch < 1 or args.read_ms <= 0:
        p.error("--keys and --batch must be at least 1 and --read-ms positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    out = sys.stderr if args.json else sys.stdout
    figures: dict[str, Any] = {
        "backend": args.backend_url or "sqlite (fresh temp file per run)",
        "keys": args.keys,
        "read_ms": args.read_ms,
        "cpus": os.cpu_count(),
        "load_before": os.getloadavg(),
        "runs": [],
    }
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="oncebox-reconcile-", dir=args.dir) as tmp:
            for index, workers in enumerate(args.workers):
                print(f"... {workers} worker(s), {args.keys:,} keys", file=sys.stderr,
                      flush=True)
                figures["runs"].append(run_one(args, workers, Path(tmp), index))
    except OnceboxError as exc:
        message = f"{type(exc).__name__}: {exc}"
        print(f"cannot run against {figures['backend']}: {message}", file=sys.stderr)
        if args.json:
            print(json.dumps({"error": message, "backend": figures["backend"]}))
        return 2
    rates = {run["workers"]: run["keys_per_s"] for run in figures["runs"]}
    if len(rates) >= 2:
        # The tracker's target is for 4 against 1 worker; other pairs get no target.
        low, high = (1, 4) if 1 in rates and 4 in rates else (min(rates), max(rates))
        value = rates[high] / rates[low]
        target = TARGET_RATIO if (low, high) == (1, 4) else None
        figures["ratio"] = {"low": low, "high": high, "value": value, "target": target,
                            "met": None if target is None else value >= target}
    figures["load_after"] = os.getloadavg()
    figures["total_seconds"] = time.perf_counter() - started
    report(out, figures)
    print(f"load average before {figures['load_before']}, after {figures['load_after']}; "
          f"total {figures['total_seconds']:.1f} s", file=out)
    if args.json:
        print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
