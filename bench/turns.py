"""Write turns and CPU of a running server, for ``bench/http.py --turns``.

Two workers of ``oncebox serve`` write to one SQLite file, and SQLite lets one connection
write at a time: each write transaction (``BEGIN IMMEDIATE`` to ``COMMIT``) is a turn at
the write lock. :func:`record`, called in the server before its workers fork, times every
turn in the process that takes it: when it asked for the lock, when it got it, when its
work was done (the commit begins), when the commit returned. It appends them to a file of
its own per process, on the machine's monotonic clock, so the processes' times compare.
:func:`turns` sums them up over a time window: how long the lock was held and by whom,
how long a worker waited for it, and how a turn's hold splits between the work under the
lock and the commit (writing the WAL and its fsync).

:func:`cpu` reads the CPU time of a process and its worker processes from ``/proc``, per
thread: the event loop (each process's main thread) against the others (the group
commit's turns, the thread pool), and how much of the latter the kernel spent.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def record(directory: Path) -> None:
    """From now on, time each write transaction of every SQLite store in this process (and
    in the processes it forks) into ``directory``."""
    from oncebox.store import sqlite

    directory.mkdir(parents=True, exist_ok=True)
    asked: threading.local = threading.local()
    files: dict[int, Any] = {}
    begin, commit = sqlite.SQLiteStore._begin, sqlite.SQLiteStore._commit

    def timed_begin(self: Any, statement: str, durable: bool) -> Any:
        start = time.monotonic()
        session = begin(self, statement, durable)
        asked.times = (start, time.monotonic()) if statement == "BEGIN IMMEDIATE" else None
        return session

    def timed_commit(session: Any) -> None:
        worked = time.monotonic()
        commit(session)
        done = time.monotonic()
        times = getattr(asked, "times", None)
        if times is None:
            return
        asked.times = None
        pid = os.getpid()
        out = files.get(pid)
        if out is None:  # a file per process, opened after the fork
            out = files[pid] = (directory / f"{pid}.txt").open("a", buffering=1)
        out.write(f"{times[0]:.6f} {times[1]:.6f} {worked:.6f} {done:.6f}\n")

    sqlite.SQLiteStore._begin = timed_begin  # type: ignore[method-assign, assignment]
    sqlite.SQLiteStore._commit = staticmethod(timed_commit)  # type: ignore[method-assign]


@dataclass(frozen=True)
class Turn:
    asked: float
    got: float
    worked: float
    committed: float


def turns(directory: Path, start: float, end: float) -> list[str]:
    """The turns that began and ended within ``[start, end]``, summed up (lines to print)."""
    found: dict[str, list[Turn]] = {}
    for path in sorted(directory.glob("*.txt")):
        for text in path.read_text().splitlines():
            turn = Turn(*map(float, text.split()))
            if turn.asked >= start and turn.committed <= end:
                found.setdefault(path.stem, []).append(turn)
    span = end - start
    held = sum(t.committed - t.got for each in found.values() for t in each)
    count = sum(len(each) for each in found.values())
    lines = [f"  write turns: {count}, the lock held {held / span:.0%} of {span * 1000:.0f} ms"]
    for pid, each in found.items():
        waits = [1000 * (t.got - t.asked) for t in each]
        work = [1000 * (t.worked - t.got) for t in each]
        commits = [1000 * (t.committed - t.worked) for t in each]
        lines.append(
            f"    worker {pid}: {len(each)} turns; waited {statistics.mean(waits):.2f} ms a "
            f"turn (max {max(waits):.2f}, {sum(waits) / 1000 / span:.0%} of the time); held "
            f"{statistics.mean(work):.2f} ms working + {statistics.mean(commits):.2f} ms "
            f"committing a turn ({(sum(work) + sum(commits)) / 1000 / span:.0%} of the time)"
        )
    return lines


def processes(pid: int) -> list[int]:
    """``pid`` and its child processes (a server's workers)."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    found = children.read_text().split() if children.exists() else []
    return [pid, *map(int, found)]


def cpu(pids: list[int]) -> tuple[float, float, float]:
    """Seconds of CPU so far: event loops (main threads), other threads, and of those the
    kernel's share."""
    tick = os.sysconf("SC_CLK_TCK")
    loops = others = kernel = 0
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # a thread that ended meanwhile
            user, system = int(fields[11]), int(fields[12])
            if task.name == str(pid):
                loops += user + system
            else:
                others += user + system
                kernel += system
    return loops / tick, others / tick, kernel / tick


def cpu_line(before: tuple[float, float, float], after: tuple[float, float, float], n: int) -> str:
    loop, other, kernel = (1e6 * (a - b) / n for a, b in zip(after, before, strict=True))
    return (
        f"  server CPU a request: {loop + other:.0f} µs (event loops {loop:.0f}, other "
        f"threads {other:.0f}, of which the kernel {kernel:.0f})"
    )
