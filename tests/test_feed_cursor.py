"""A cursor never skips (issue 21): positions are given at seal time, so a revision whose
transaction commits late comes after every position a reader already saw, whether its
writer is slow, killed after its commit (recovery seals it), or sealed by another."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

import oncebox
from oncebox import Delivery, InboxSpec
from oncebox.engine import crashpoints
from oncebox.formats.ussd_h1 import make_frame

pytestmark = pytest.mark.slow


def frame(seq: int) -> Delivery:
    return Delivery(make_frame(seq, "Kakuma1", "MED", 3, 86).encode(), key=f"r-{seq}")


def test_a_transaction_that_commits_late_comes_after_what_a_reader_saw(pg_url: str) -> None:
    """Two writers on PostgreSQL: one held inside its deciding transaction while the
    other commits and is sealed, and a reader polling in between."""
    inside, release = threading.Event(), threading.Event()

    def slow_step(tx: Any, change: Any) -> None:
        if change.fields["seq"] == 1:
            inside.set()
            assert release.wait(30)

    spec = [InboxSpec("ussd", codec="ussd-h1", apply=slow_step)]
    slow, fast, reader = (oncebox.open(pg_url, inboxes=spec) for _ in range(3))
    try:
        late = threading.Thread(target=lambda: slow.ingest("ussd", frame(1)))
        late.start()
        assert inside.wait(30)
        fast.ingest("ussd", frame(2))
        seen = reader.feed("ussd").entries
        assert [e.identity for e in seen] == ["r-2"]  # the slow one is not committed yet
        cursor = seen[-1].position
        release.set()
        late.join(30)
        after = reader.feed("ussd", after=cursor, wait=10).entries
        assert [e.identity for e in after] == ["r-1"] and after[0].position > cursor
    finally:
        release.set()
        for box in (slow, fast, reader):
            box.close()


WRITER = textwrap.dedent("""
    import sys
    import oncebox
    from oncebox import Delivery, InboxSpec
    from oncebox.formats.ussd_h1 import make_frame

    box = oncebox.open(sys.argv[1], inboxes=[InboxSpec("ussd", codec="ussd-h1")])
    seq = int(sys.argv[2])
    box.ingest("ussd", Delivery(make_frame(seq, "K", "MED", 3, 86).encode(), key=f"r-{seq}"))
""")


def test_a_writer_killed_after_its_commit_is_sealed_after_the_cursor(
    pg_durable: Any, tmp_path: Path
) -> None:
    """On PostgreSQL a writer dies (``os._exit``) between its commit and its seal: its
    record reaches the feed when recovery seals it, after any cursor that moved on."""
    url = pg_durable.create_database("feed_cursor")
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    spec = [InboxSpec("ussd", codec="ussd-h1")]
    reader = oncebox.open(url, inboxes=spec)
    try:
        reader.ingest("ussd", frame(1))
        env = {**os.environ, "ONCEBOX_CRASH_AT": crashpoints.AFTER_COMMIT}
        died = subprocess.run([sys.executable, str(script), url, "2"], env=env)
        assert died.returncode == crashpoints.EXIT_CODE
        reader.ingest("ussd", frame(3))  # its own seal may take the orphan along
        seen = reader.feed("ussd").entries
        cursor = seen[-1].position
        recovered = oncebox.open(url, inboxes=spec)  # recovery seals what is left
        recovered.close()
        everything = [e.identity for e in seen + reader.feed("ussd", after=cursor).entries]
        assert sorted(everything) == ["r-1", "r-2", "r-3"]
        positions = [e.position for e in reader.feed("ussd").entries]
        assert positions == sorted(positions) and len(set(positions)) == 3
    finally:
        reader.close()


WRITES = textwrap.dedent("""
    import sys
    import oncebox
    from oncebox import Delivery, InboxSpec
    from oncebox.formats.ussd_h1 import make_frame

    # Seals left to the dedicated sealer: each record waits in the queue for it.
    box = oncebox.open(sys.argv[1], inboxes=[InboxSpec("ussd", codec="ussd-h1")], seal=False)
    first, count = int(sys.argv[2]), int(sys.argv[3])
    for seq in range(first, first + count):
        frame = make_frame(seq % 100_000, "K", "MED", 3, 86).encode()
        box.ingest("ussd", Delivery(frame, key=f"r-{seq}"))
""")


def test_a_cursor_misses_nothing_when_writers_and_the_sealer_are_killed(
    shared_url: str, tmp_path: Path
) -> None:
    """Two writers leave their seals to a dedicated sealer (``oncebox seal --follow``);
    one writer and the sealer are killed with SIGKILL while a reader follows the feed; a
    new sealer and a third writer take over. What the reader saw, read on from its cursor
    each time, is every record exactly once, in increasing positions."""
    import signal
    import time

    script = tmp_path / "writes.py"
    script.write_text(WRITES)
    spec = [InboxSpec("ussd", codec="ussd-h1")]
    reader = oncebox.open(shared_url, inboxes=spec)

    def writer(first: int, count: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, str(script), shared_url, str(first), str(count)])

    def sealer() -> subprocess.Popen[bytes]:
        command = ["seal", "--follow", "--interval", "0.05", "--ttl", "1"]
        return subprocess.Popen([sys.executable, "-m", "oncebox", "--db", shared_url, *command])

    seen: list[tuple[int, str | None]] = []
    cursor = 0

    def read_on() -> None:
        nonlocal cursor
        page = reader.feed("ussd", after=cursor, limit=1000)
        seen.extend((e.position, e.identity) for e in page.entries)
        cursor = page.next_after

    try:
        first_sealer, writers = sealer(), [writer(1, 300), writer(1_001, 300)]
        deadline = time.monotonic() + 60
        while len(seen) < 100 and time.monotonic() < deadline:
            read_on()
            time.sleep(0.02)
        writers[0].send_signal(signal.SIGKILL)
        first_sealer.send_signal(signal.SIGKILL)
        first_sealer.wait()
        for _ in range(20):  # its seals stop; the reader reads on meanwhile
            read_on()
            time.sleep(0.05)
        time.sleep(1.2)  # the killed sealer's lease runs out
        second_sealer, third = sealer(), writer(2_001, 200)
        for proc in (writers[0], writers[1], third):
            while proc.poll() is None:
                read_on()
                time.sleep(0.02)
        second_sealer.send_signal(signal.SIGKILL)
        second_sealer.wait()
        # Recovery leaves the log to a sealer whose lease is live: under load the killed
        # one may not have sealed the last records yet, so let its lease run out first.
        time.sleep(1.2)
        reader.recover(grace=0)  # what the last sealer left queued
        read_on()
        read_on()
    finally:
        reader.close()
    with oncebox.open(shared_url, inboxes=spec) as box:
        total = box.stats("ussd")["verdicts"]["accepted"]
    positions = [p for p, _ in seen]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    identities = [i for _, i in seen]
    assert len(identities) == len(set(identities)) == total  # every record, once
    assert 500 <= total <= 800  # the killed writer stopped partway
