"""Counts need no flush (issue 24): a transaction that writes nothing but counts (a
duplicate's seen count and last seen, a late replay's, the verdict counters) commits
without waiting for the disk; anything else keeps its flush. On SQLite it is counted in
WAL syncs through a VFS; on PostgreSQL, whose flushes the server does, in the durable
seals an ingest ran and the transactions the store relaxed.
(Power cuts against it: tests/test_reliability_powerloss.py.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

import oncebox
from conftest import INBOXES, POSTGRES, SESSION
from helpers import event
from oncebox import Delivery, ManualClock
from oncebox.engine import sealing
from oncebox.store.postgres import PostgresStore, PostgresTx
from serveproc import ONCEBOX, create_token, get, serving


class SyncCounter(apsw.VFS):
    """The default VFS, counting syncs of ``-wal`` files."""

    def __init__(self) -> None:
        self.vfs_name = f"unflushed-{uuid.uuid4().hex}"
        self.syncs = 0
        super().__init__(self.vfs_name, "")

    def xOpen(self, name: Any, flags: list[int]) -> apsw.VFSFile:
        return _Counted(self, name, flags)


class _Counted(apsw.VFSFile):
    def __init__(self, vfs: SyncCounter, name: Any, flags: list[int]) -> None:
        self.vfs = vfs
        path = name.filename() if isinstance(name, apsw.URIFilename) else str(name)
        self.wal = path.endswith("-wal")
        super().__init__("", name, flags)

    def xSync(self, flags: int) -> None:
        self.vfs.syncs += self.wal
        super().xSync(flags)


Flushes = Callable[[Callable[[], Any]], tuple[Any, int]]


@pytest.fixture(params=["sqlite-file", POSTGRES])
def flushes(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[oncebox.Oncebox, Flushes]]:
    """A box, and ``flushes(work)``: what ``work`` returned, and how many flushes it
    waited for (SQLite: WAL syncs; PostgreSQL: its durable commits, each the one whose
    flush covers its decision: a batch's seal, or a single delivery's own)."""
    clock = ManualClock(1_800_000_000.0)
    if request.param == "postgres":
        url = str(request.getfixturevalue("pg_url"))
        relaxed, seals = [0], [0]
        relax, covered = PostgresTx.relax, PostgresStore._covered

        def counting_relax(tx: PostgresTx) -> bool:
            relaxed[0] += 1
            return relax(tx)

        def counting_covered(store: PostgresStore, server: Any, durable: bool) -> None:
            seals[0] += durable  # a durable commit: the flush that covers the decision
            covered(store, server, durable)

        monkeypatch.setattr(PostgresTx, "relax", counting_relax)
        monkeypatch.setattr(PostgresStore, "_covered", counting_covered)

        def waited(work: Callable[[], Any]) -> tuple[Any, int]:
            before = relaxed[0], seals[0]
            result = work()
            relaxes, sealed = relaxed[0] - before[0], seals[0] - before[1]
            # Relaxed for counts, a decision runs no seal: it waited for no flush.
            # Otherwise one durable commit covers it: a batch's seal, a single
            # delivery's own transaction (sealed in it).
            assert (relaxes, sealed) in ((1, 0), (0, 1)), (relaxes, sealed)
            return result, sealed

        with oncebox.open(url, inboxes=INBOXES, clock=clock) as box:
            yield box, waited
        return
    vfs = SyncCounter()
    try:
        url = f"sqlite:///{tmp_path / 'counts.db'}?vfs={vfs.vfs_name}"
        with oncebox.open(url, inboxes=INBOXES, clock=clock) as box:

            def synced(work: Callable[[], Any]) -> tuple[Any, int]:
                before = vfs.syncs
                result = work()
                return result, vfs.syncs - before

            yield box, synced
    finally:
        vfs.unregister()


def test_duplicates_wait_for_no_flush_and_the_rest_for_theirs(
    flushes: tuple[oncebox.Oncebox, Flushes],
) -> None:
    box, waited = flushes
    frames = [Delivery(text.encode(), key=frame_id) for frame_id, text in SESSION]
    decisions, n = waited(lambda: box.ingest_batch("ussd", frames))
    assert {str(d.verdict) for d in decisions} == {"accepted"} and n == 1
    # One duplicate, then a batch of nothing else: acknowledged without a flush.
    decision, n = waited(lambda: box.ingest("ussd", frames[0].body, key=frames[0].key))
    assert str(decision.verdict) == "duplicate" and decision.may_ack and n == 0
    assert decision.log_position is not None  # the record it repeats is sealed
    decisions, n = waited(lambda: box.ingest_batch("ussd", frames * 2))
    assert {str(d.verdict) for d in decisions} == {"duplicate"} and n == 0
    # A conflict keeps its newcomer: flushed.
    other = SESSION[1][1].encode()
    decision, n = waited(lambda: box.ingest("ussd", other, key=SESSION[0][0]))
    assert str(decision.verdict) == "conflict" and n == 1
    # A dead letter: flushed, and a duplicate beside it takes that flush too.
    bad = Delivery(b"H1|9|K01|MED|3|50|#00", key="bad-9")
    decisions, n = waited(lambda: box.ingest_batch("ussd", [frames[1], bad]))
    assert [str(d.verdict) for d in decisions] == ["duplicate", "rejected"] and n == 1
    # Duplicates again after it, and a new record after them: 0, then 1.
    decisions, n = waited(lambda: box.ingest_batch("ussd", frames))
    assert {str(d.verdict) for d in decisions} == {"duplicate"} and n == 0
    event = b'{"schema_version":1,"source":"s","subscription":"x","notification_id":"n-1",'
    event += b'"seller_id":"S","sku":"K","marketplace_id":"M",'
    event += b'"notification_type":"listing_status_changed","event_time":"2026-11-01T10:00:00Z",'
    event += b'"payload":{"status":"ACTIVE"}}'
    decision, n = waited(lambda: box.ingest("listing", event))
    assert str(decision.verdict) == "accepted" and n == 1
    # Every count is there.
    assert box.stats("ussd")["verdicts"]["duplicate"] == 1 + 6 + 1 + 3


def test_a_duplicate_of_an_unsealed_record_keeps_the_flush(
    flushes: tuple[oncebox.Oncebox, Flushes],
) -> None:
    """A record is durable once its seal is (on PostgreSQL it is visible between its
    relaxed commit and its seal's flush): a duplicate decided against one the log does
    not cover yet must not be acknowledged before a flush."""
    box, waited = flushes
    sealer = sealing.Sealer(box.store, "dedicated", ttl=600)
    sealer.acquire()  # the writers leave their entries queued for it
    frame_id, text = SESSION[2]
    first = box.ingest("ussd", text.encode(), key=frame_id)
    assert str(first.verdict) == "accepted" and first.log_position is None
    decision, n = waited(lambda: box.ingest("ussd", text.encode(), key=frame_id))
    assert str(decision.verdict) == "duplicate" and n == 1
    assert sealer.seal() == 1
    decision, n = waited(lambda: box.ingest("ussd", text.encode(), key=frame_id))
    assert str(decision.verdict) == "duplicate" and n == 0


@pytest.mark.slow
def test_counts_acked_by_a_real_service_and_the_cli_survive_a_process_crash(
    tmp_path: Path,
) -> None:
    """End to end: duplicates acknowledged without a flush by ``oncebox serve`` (through
    its group commit) and by ``oncebox ingest`` are all counted after the server is
    killed with SIGKILL: a process crash loses nothing, counts included."""
    url = f"sqlite:///{tmp_path / 'served.db'}"
    env = {**os.environ, "ONCEBOX_DB": url}
    lines = "".join(json.dumps(event(f"n-{i}")) + "\n" for i in range(5))
    (tmp_path / "events.ndjson").write_text(lines)

    def ingest() -> list[dict[str, Any]]:
        done = subprocess.run(
            [*ONCEBOX, "ingest", "listing", str(tmp_path / "events.ndjson")],
            capture_output=True, text=True, env=env, check=True,
        )  # fmt: skip
        return [json.loads(line) for line in done.stdout.splitlines()]

    assert {d["verdict"] for d in ingest()} == {"accepted"}
    assert {d["verdict"] for d in ingest()} == {"duplicate"}
    secret = create_token(url, "write")
    with serving(url, "--workers", "1") as served:
        target = f"{served.base}/v1/inboxes/listing/deliveries"
        for i in range(20):
            status, _, body = get(target, secret, json.dumps(event(f"n-{i % 5}")).encode())
            answer = json.loads(body)
            assert status == 200 and answer["verdict"] == "duplicate" and answer["may_ack"]
        served.proc.send_signal(signal.SIGKILL)
        served.proc.wait(timeout=30)
    stats = subprocess.run(
        [*ONCEBOX, "stats", "listing"], capture_output=True, text=True, env=env, check=True
    )
    [listing] = json.loads(stats.stdout)
    # Both counts of each duplicate: its record's seen count and the verdict counter.
    assert listing["duplicates"] == 5 + 20
    assert listing["verdicts"] == {"accepted": 5, "duplicate": 5 + 20}
