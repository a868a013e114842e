"""An emulated slower disk for the benchmarks: the default SQLite VFS with a fixed delay
added to every sync, through APSW.

This machine's disk syncs in 0.2 to 0.5 ms, faster than many a production disk (an SSD
without power-loss protection, a network volume, a spinning disk take milliseconds).
Where a target is about how fsync is spent (one commit per event, group commit), the
benchmarks can run both sides on this VFS too. It is written in Python, so every other
file operation also gets slower by a call into Python; the figures say so.
"""

from __future__ import annotations

import time
from typing import Any

import apsw

NAME = "oncebox-bench-slow-sync"


class SlowSync(apsw.VFS):
    """Registered as :data:`NAME` while referenced; ``delay`` seconds added to each sync."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        super().__init__(NAME, "")

    def xOpen(self, name: Any, flags: list[int]) -> apsw.VFSFile:
        return _SlowSyncFile(self.delay, name, flags)


class _SlowSyncFile(apsw.VFSFile):
    def __init__(self, delay: float, name: Any, flags: list[int]) -> None:
        self.delay = delay
        super().__init__("", name, flags)

    def xSync(self, flags: int) -> None:
        super().xSync(flags)
        time.sleep(self.delay)
