"""An APSW VFS shim that models power loss: what a file got since its last sync is volatile.

Writes reach the real file at once, so SQLite reads back what it wrote. Beside that the
shim keeps, per file, the durable image (the bytes as of the file's last ``xSync``) and
every version of each 512-byte sector written since. When the chosen call arrives the
power fails: each file is rewritten to a state a disk could hold afterwards (per sector
the durable bytes or any later version, so writes are reordered and torn; the file's
length any it had since the sync, so truncation and growth are volatile too), the
``-shm`` file is deleted (it is shared memory, never durable; SQLite rebuilds it from
the WAL) and the process dies with ``os._exit``, without closing anything.

Not modelled: directory fsync (creating or deleting a file is taken as durable at once),
bit flips inside a sector, and disks that acknowledge a flush they did not do.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

import apsw

SECTOR = 512
CRASHED = 77  # the child's exit status after a simulated power cut


@dataclass
class Faults:
    """What the power cut did to the sectors written since their file's last sync."""

    sectors: int = 0  # sectors with unsynced writes
    reverted: int = 0  # came back with their durable content
    latest: int = 0  # came back with the last write
    older: int = 0  # came back with an earlier unsynced write (reordered)
    lengths_changed: int = 0  # files whose length came back other than the last one

    def add(self, other: Faults) -> None:
        for name in ("sectors", "reverted", "latest", "older", "lengths_changed"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


class VolatileFile:
    """One file's durable image and every sector version written to it since."""

    def __init__(self, path: str, kind: str, durable: bytes) -> None:
        self.path = path
        self.kind = kind
        self.durable = durable
        self.current = bytearray(durable)
        self.versions: dict[int, list[bytes]] = {}
        self.lengths: set[int] = set()

    def write(self, data: bytes, offset: int) -> None:
        end = offset + len(data)
        if end > len(self.current):
            self.current.extend(bytes(end - len(self.current)))
        self.current[offset:end] = data
        self.lengths.add(len(self.current))
        for sector in range(offset // SECTOR, (end - 1) // SECTOR + 1):
            start = sector * SECTOR
            self.versions.setdefault(sector, []).append(bytes(self.current[start : start + SECTOR]))

    def truncate(self, size: int) -> None:
        if size < len(self.current):
            del self.current[size:]
        else:
            self.current.extend(bytes(size - len(self.current)))
        self.lengths.add(size)

    def sync(self) -> None:
        self.durable = bytes(self.current)
        self.versions.clear()
        self.lengths.clear()

    def after_power_loss(self, rng: random.Random, faults: Faults) -> bytes:
        """One state the disk may hold: per sector the durable bytes or a later version."""
        length = len(self.current)
        if self.lengths:
            length = rng.choice(sorted(self.lengths | {len(self.durable)}))
            faults.lengths_changed += length != len(self.current)
        image = bytearray(self.durable[:length])
        image.extend(bytes(length - len(image)))
        for sector in sorted(self.versions):
            start = sector * SECTOR
            if start >= length:
                continue
            versions = self.versions[sector]
            faults.sectors += 1
            pick = rng.randrange(len(versions) + 1)
            if pick == 0:
                faults.reverted += 1
                continue
            faults.latest += pick == len(versions)
            faults.older += pick < len(versions)
            chunk = versions[pick - 1]
            image[start : start + len(chunk)] = chunk
        del image[length:]
        return bytes(image)


def _kind(flags: int) -> str:
    if flags & apsw.SQLITE_OPEN_MAIN_DB:
        return "db"
    if flags & apsw.SQLITE_OPEN_WAL:
        return "wal"
    if flags & apsw.SQLITE_OPEN_MAIN_JOURNAL:
        return "journal"
    return "other"


@dataclass
class CallLog:
    """Write, sync and truncate calls on tracked files, by kind (``"wal write"``...)."""

    total: int = 0
    kinds: Counter[str] = field(default_factory=Counter)


class PowerLossVFS(apsw.VFS):
    """The default VFS with volatile writes and a power cut at call ``crash_at``.

    ``crash_at=None`` only counts calls (the dry run). ``on_crash`` runs after the files
    were rewritten and before the process dies, with a description of the cut.
    """

    def __init__(
        self,
        name: str,
        crash_at: int | None,
        rng: random.Random,
        on_crash: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.vfs_name = name
        self.crash_at = crash_at
        self.rng = rng
        self.on_crash = on_crash
        self.files: dict[str, VolatileFile] = {}
        self.calls = CallLog()
        super().__init__(name, "")

    def xOpen(self, name: str | apsw.URIFilename | None, flags: list[int]) -> apsw.VFSFile:
        return PowerLossFile(self, name, flags)

    def xDelete(self, filename: str, syncdir: bool) -> None:
        # Directory operations are not modelled: a deletion is durable at once.
        self.files.pop(filename, None)
        super().xDelete(filename, syncdir)

    def track(self, path: str, kind: str) -> VolatileFile:
        tracked = self.files.get(path)
        if tracked is None:
            # What is on disk when a file is first opened counts as durable: the
            # harness starts every run from a synced copy, and a new file is empty.
            with open(path, "rb") as existing:
                tracked = self.files[path] = VolatileFile(path, kind, existing.read())
        return tracked

    def call(self, tracked: VolatileFile, what: str) -> bool:
        """Count one call; True when the power fails during it."""
        index = self.calls.total
        self.calls.total += 1
        self.calls.kinds[f"{tracked.kind} {what}"] += 1
        return index == self.crash_at

    def power_cut(self, tracked: VolatileFile, what: str) -> NoReturn:
        """Rewrite every tracked file as the disk may hold it, drop -shm, and die."""
        faults = Faults()
        for volatile in self.files.values():
            image = volatile.after_power_loss(self.rng, faults)
            fd = os.open(volatile.path, os.O_WRONLY)
            try:
                os.pwrite(fd, image, 0)
                os.ftruncate(fd, len(image))
            finally:
                os.close(fd)
            if volatile.kind == "db" and os.path.exists(volatile.path + "-shm"):
                os.unlink(volatile.path + "-shm")
        if self.on_crash is not None:
            self.on_crash(
                {
                    "call": self.calls.total - 1,
                    "during": f"{tracked.kind} {what}",
                    "kinds": dict(self.calls.kinds),
                    "faults": faults.__dict__,
                }
            )
        os._exit(CRASHED)


class PowerLossFile(apsw.VFSFile):
    """A file of the default VFS whose writes stay volatile until its next xSync."""

    def __init__(
        self, vfs: PowerLossVFS, name: str | apsw.URIFilename | None, flags: list[int]
    ) -> None:
        super().__init__("", name, flags)
        self.vfs = vfs
        path = name.filename() if isinstance(name, apsw.URIFilename) else name
        # Nameless files are SQLite's temporary files: nothing survives a crash there.
        self.tracked = vfs.track(path, _kind(flags[0])) if path else None

    def xWrite(self, data: Any, offset: int) -> None:
        super().xWrite(data, offset)
        if self.tracked is not None:
            self.tracked.write(bytes(data), offset)
            if self.vfs.call(self.tracked, "write"):
                self.vfs.power_cut(self.tracked, "write")

    def xTruncate(self, newsize: int) -> None:
        super().xTruncate(newsize)
        if self.tracked is not None:
            self.tracked.truncate(newsize)
            if self.vfs.call(self.tracked, "truncate"):
                self.vfs.power_cut(self.tracked, "truncate")

    def xSync(self, flags: int) -> None:
        if self.tracked is None:
            return
        if self.vfs.call(self.tracked, "sync"):
            self.vfs.power_cut(self.tracked, "sync")  # the cut comes before the flush ends
        # The model, not the real disk, decides what survives, so the real fsync is
        # skipped (it would only slow the campaign down).
        self.tracked.sync()
