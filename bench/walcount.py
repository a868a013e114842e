"""What a store writes, counted: WAL pages, syncs and SQL statements, through APSW.

The write budget of DESIGN.md ("statements, WAL pages and fsyncs per accepted delivery and
per duplicate") is measured with this, by tests/test_write_budget.py (which pins it) and
by bench/ingest.py (which prints it). A page is counted when SQLite appends its frame to
the ``-wal`` file; a statement when SQLite starts running one (each row of an
``executemany`` counts), seen through APSW's exec tracer on every connection opened while
the counter is installed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import apsw

T = TypeVar("T")


@dataclass
class Counts:
    pages: int = 0  # WAL frames appended
    syncs: int = 0  # fsyncs of the WAL
    statements: int = 0  # SQL statements run (each executemany row counts)
    transactions: int = 0  # COMMITs

    def minus(self, other: Counts) -> Counts:
        return Counts(
            self.pages - other.pages,
            self.syncs - other.syncs,
            self.statements - other.statements,
            self.transactions - other.transactions,
        )

    def per(self, n: int) -> dict[str, float]:
        return {
            "pages": self.pages / n,
            "syncs": self.syncs / n,
            "statements": self.statements / n,
            "transactions": self.transactions / n,
        }


class WalCounter(apsw.VFS):
    """The default VFS, counting what lands in ``-wal`` files; open a store with
    ``sqlite:///path?vfs=<vfs_name>`` while :func:`counting` is active."""

    def __init__(self) -> None:
        self.vfs_name = f"walcount-{uuid.uuid4().hex[:12]}"
        self.counts = Counts()
        super().__init__(self.vfs_name, "")

    def xOpen(self, name: Any, flags: list[int]) -> apsw.VFSFile:
        return _CountedFile(self, name, flags)

    def trace(self, cursor: Any, sql: str, bindings: Any) -> bool:
        self.counts.statements += 1
        if sql.lstrip()[:6].upper() == "COMMIT":
            self.counts.transactions += 1
        return True

    def measure(self, work: Callable[[], T]) -> tuple[T, Counts]:
        """Run ``work`` and return what it wrote."""
        before = Counts(**vars(self.counts))
        result = work()
        return result, self.counts.minus(before)


class _CountedFile(apsw.VFSFile):
    def __init__(self, vfs: WalCounter, name: Any, flags: list[int]) -> None:
        self.vfs = vfs
        path = name.filename() if isinstance(name, apsw.URIFilename) else str(name)
        self.wal = path.endswith("-wal")
        self.page_size = 0
        super().__init__("", name, flags)

    def xWrite(self, data: bytes, offset: int) -> None:
        # A WAL frame is a 24-byte header and then the page, written as two calls; the
        # file header (32 bytes, at offset 0) is neither.
        if self.wal and len(data) >= 512 and offset > 0:
            self.vfs.counts.pages += 1
        super().xWrite(data, offset)

    def xSync(self, flags: int) -> None:
        if self.wal:
            self.vfs.counts.syncs += 1
        super().xSync(flags)


@contextmanager
def counting() -> Iterator[WalCounter]:
    """A registered counter, with every new APSW connection traced into it."""
    counter = WalCounter()

    def hook(conn: apsw.Connection) -> None:
        if conn.open_vfs == counter.vfs_name:
            conn.exec_trace = counter.trace

    apsw.connection_hooks.append(hook)
    try:
        yield counter
    finally:
        apsw.connection_hooks.remove(hook)
        counter.unregister()
