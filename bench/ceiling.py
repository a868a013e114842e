"""Ceiling: how near to the naive inbox oncebox's own SQL could come with no Python at all.

For each of bench/peers.py's four passes (batched 1,000 new, the same again as duplicates,
then new events one at a time and those again) this runs, back to back on the same events:

- the naive ``sqlite3`` inbox (bench/peers.py's ``Naive``);
- oncebox (``keyed`` or ``json-event``), timed as bench/peers.py times it;
- **the replay**: the very statements that pass sent to SQLite, with their bindings,
  captured through APSW's exec tracer on a copy of the store taken before the pass, and
  executed again on a second copy by a bare loop (consecutive runs of one statement through
  ``executemany``, as the cheapest client would). It does what the store did (the same
  rows, the same counts, the same commits and fsyncs) with none of the engine's Python:
  decoding, digests, deciding, building rows. Its rate is therefore a ceiling for any
  Python on top of these statements, and ``replay / naive`` the best ratio oncebox could
  reach without writing less.

The three sides of a pass start from equal table sizes (every side holds the same events
before it). The replay's copy is checked afterwards against the traced one: the same
records, counts, log entries and verdict counts. Targets (issue 24) are printed beside
the ratios, never asserted.

    .venv/bin/python bench/ceiling.py                        # N=100,000, --single-n 5,000
    .venv/bin/python bench/ceiling.py --n 20000 --single-n 2000 --codec json-event
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from itertools import groupby
from pathlib import Path
from typing import Any

import apsw

import oncebox
from peers import Box, Event, Naive, json_events, make_events, table

Statement = tuple[int, str, Any]  # (which connection, SQL, bindings)
PASSES = (("batched", "first"), ("batched", "dup"), ("single", "first"), ("single", "dup"))
TARGETS = {  # (mode, pass): issue 24's target against the naive inbox, keyed codec
    ("batched", "first"): 0.5,
    ("batched", "dup"): 0.5,
    ("single", "first"): 0.7,
    ("single", "dup"): 0.5,
}
JSON_TARGETS = {("batched", "first"): 0.3}


def log(message: str) -> None:
    print(f"[ceiling] {message}", file=sys.stderr, flush=True)


class Capture:
    """Every statement every new APSW connection runs while armed, in order."""

    def __init__(self) -> None:
        self.statements: list[Statement] = []
        self.armed = False
        self._ids: dict[int, int] = {}
        apsw.connection_hooks.append(self._hook)

    def _hook(self, conn: apsw.Connection) -> None:
        if not self.armed:
            return
        which = self._ids.setdefault(id(conn), len(self._ids))

        def trace(_cursor: apsw.Cursor, sql: str, bindings: Any) -> bool:
            self.statements.append((which, sql, bindings))
            return True

        conn.exec_trace = trace

    def take(self) -> list[Statement]:
        taken, self.statements, self._ids = self.statements, [], {}
        return taken

    def close(self) -> None:
        apsw.connection_hooks.remove(self._hook)


def copy_store(src: Path, dst: Path) -> None:
    """A copy on disk, synced: else the first checkpoint's fsync in the copy would write
    the whole copied file out, a cost the store itself never pays."""
    for suffix in ("", "-wal"):
        if Path(f"{src}{suffix}").exists():
            shutil.copyfile(f"{src}{suffix}", f"{dst}{suffix}")
            with open(f"{dst}{suffix}", "rb+") as copied:
                os.fsync(copied.fileno())


def remove_store(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def replay(path: Path, statements: list[Statement], start: int, end: int) -> float:
    """Run ``statements`` on the store at ``path``; time those of the pass, ``start`` to
    ``end`` (those before opened the connections and set their pragmas, those after
    closed the store). The plan is made before the clock starts: a cursor per
    connection, and each run of one statement as one ``executemany``."""
    cursors: dict[int, apsw.Cursor] = {}

    def plan(part: list[Statement]) -> list[tuple[Callable[..., Any], str, Any]]:
        steps = []
        for (which, sql), same in groupby(part, key=lambda s: (s[0], s[1])):
            if which not in cursors:
                cursors[which] = apsw.Connection(str(path)).cursor()
            cursor, rows = cursors[which], [b for _, _, b in same]
            if rows[0] is None or len(rows) == 1:
                steps += [(cursor.execute, sql, b) for b in rows]
            else:
                steps.append((cursor.executemany, sql, rows))
        return steps

    def run(steps: list[tuple[Callable[..., Any], str, Any]]) -> None:
        for execute, sql, bindings in steps:
            for _ in execute(sql, bindings):
                pass

    run(plan(statements[:start]))
    timed = plan(statements[start:end])
    began = time.perf_counter()
    run(timed)
    seconds = time.perf_counter() - began
    run(plan(statements[end:]))
    for cursor in cursors.values():
        cursor.connection.close()
    return seconds


FOOTPRINT = (  # what a pass leaves: its records, their counts, its log, its verdicts
    "SELECT count(*) FROM records",
    "SELECT coalesce(sum(seen_count), 0) FROM records",
    "SELECT count(*) FROM log",
    "SELECT coalesce(sum(n), 0) FROM verdict_counts",
)


def footprint(path: Path) -> tuple[int, ...]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return tuple(conn.execute(query).get for query in FOOTPRINT)
    finally:
        conn.close()


def box_pass(path: Path, codec: str, events: list[Event], size: int,
             capture: Capture | None = None) -> tuple[float, int, slice]:
    """One oncebox pass on a fresh open of ``path``: seconds, new ones, and (traced) where
    the pass's own statements are in the capture."""
    if capture is not None:
        capture.armed = True
    box = Box(path, codec)
    try:
        box.box.ingest(box.inbox, _warm(codec))  # opens the connection outside the pass
        start = len(capture.statements) if capture else 0
        seconds, new = box.run(events, size)
        end = len(capture.statements) if capture else 0
    finally:
        box.close()
        if capture is not None:
            capture.armed = False
    return seconds, new, slice(start, end)


def _warm(codec: str) -> oncebox.Delivery:
    """The same delivery before every pass on every copy: a duplicate after the first."""
    body = b'{"notification_id": "warm-up", "kind": "warm"}'
    return oncebox.Delivery(body=body, key="warm-up" if codec == "keyed" else None)


def measure(tmp: Path, codec: str, n: int, single_n: int, batch: int,
            log_line: Callable[[str], None]) -> dict[tuple[str, str], dict[str, float]]:
    first, extra = make_events(n), make_events(single_n)
    naive_events = {"batched": first, "single": extra}
    ours = ({"batched": first, "single": extra} if codec == "keyed" else
            {"batched": json_events(first, 0), "single": json_events(extra, n)})
    naive = Naive(tmp / "naive.db")
    store, traced, replayed = tmp / "box.db", tmp / "traced.db", tmp / "replayed.db"
    box_pass(store, codec, [], batch)  # makes the store and its inbox
    capture = Capture()
    rates: dict[tuple[str, str], dict[str, float]] = {}
    try:
        for mode, step in PASSES:
            size = batch if mode == "batched" else 1
            count = len(naive_events[mode])
            copy_store(store, traced)
            copy_store(store, replayed)
            seconds, new = naive.run(naive_events[mode], size)
            want = count if step == "first" else 0
            if new != want:
                raise SystemExit(f"naive {mode} {step}: {new} new, expected {want}")
            naive_rate = count / seconds
            seconds, new, _ = box_pass(store, codec, ours[mode], size)
            if new != want:
                raise SystemExit(f"oncebox {mode} {step}: {new} new, expected {want}")
            box_rate = count / seconds
            capture.take()
            _, _, pass_ = box_pass(traced, codec, ours[mode], size, capture)
            statements = capture.take()
            replay_rate = count / replay(replayed, statements, pass_.start, pass_.stop)
            if footprint(traced) != footprint(replayed):
                raise SystemExit(f"{mode} {step}: the replay did not do what the store did "
                                 f"({footprint(replayed)} against {footprint(traced)})")
            remove_store(traced)
            remove_store(replayed)
            rates[(mode, step)] = {"baseline": naive_rate, "oncebox": box_rate,
                                   "replay": replay_rate,
                                   "statements": (pass_.stop - pass_.start) / count}
            log_line(f"{mode:7} {step:5} {count:>8,}: naive {naive_rate:>9,.0f}, oncebox "
                     f"{box_rate:>9,.0f}, its statements alone {replay_rate:>9,.0f} ev/s")
    finally:
        capture.close()
        naive.close()
    return rates


def report(title: str, rates: dict[tuple[str, str], dict[str, float]], baseline: str,
           targets: dict[tuple[str, str], float], shown: Sequence[tuple[str, str, str]],
           replayed: str) -> None:
    """A row a pass: what ``shown`` names (header, key, format), the three rates, oncebox
    and the replay against the baseline, oncebox against the replay, and the target with
    whether the replay (the ceiling) reaches it."""
    rows = []
    for (mode, step), r in rates.items():
        target, ceiling = targets.get((mode, step)), r["replay"] / r["baseline"]
        rows.append([mode, "duplicates" if step == "dup" else "first",
                     *(format(r[key], spec) for _, key, spec in shown),
                     f"{r['baseline']:,.0f}", f"{r['oncebox']:,.0f}", f"{r['replay']:,.0f}",
                     f"{r['oncebox'] / r['baseline']:.2f}", f"{ceiling:.2f}",
                     f"{r['oncebox'] / r['replay']:.2f}", "-" if target is None else f"{target}",
                     "-" if target is None else ("above" if ceiling >= target else "BELOW")])
    print(f"\n{title}\n")
    table(sys.stdout, ["mode", "pass", *(header for header, _, _ in shown), baseline, "oncebox",
                       replayed, f"oncebox/{baseline}", f"ceiling/{baseline}",
                       "oncebox/ceiling", "target", "ceiling vs target"], rows)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=100_000, help="events per batched pass")
    p.add_argument("--single-n", type=int, default=5_000, help="events per one-at-a-time pass")
    p.add_argument("--batch", type=int, default=1_000, help="deliveries per transaction")
    p.add_argument("--codec", choices=("keyed", "json-event"), default="keyed")
    p.add_argument("--dir", default=None, help="where to make the temp dir (default: system)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: the temp dir goes
    with tempfile.TemporaryDirectory(prefix="oncebox-ceiling-", dir=args.dir) as tmp:
        log(f"working in {tmp}")
        rates = measure(Path(tmp), args.codec, args.n, min(args.single_n, args.n),
                        args.batch, log)
    report(f"oncebox {args.codec} against the naive inbox, and its own statements replayed "
           f"(ev/s; SQLite {apsw.sqlite_lib_version()})", rates, "naive",
           TARGETS if args.codec == "keyed" else JSON_TARGETS,
           [("stmts/ev", "statements", ".2f")], "statements alone")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
