"""kill -9 at every named crash point on both backends, bounded (reliability/crashpoints.py
runs the full campaign): nothing acked is lost, nothing applied twice, no redelivery
classed as a conflict, and the harness's checks can fail (negative controls)."""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import oncebox
from oncebox.engine.steps import generation

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "reliability"))

import crashpoints as harness
from conftest import Server
from redisserver import MISSING, RedisServer

pytestmark = pytest.mark.slow  # the kill -9 campaign, bounded

RUNS = 2  # per point and backend; the script runs 50 (a durable commit costs ms here)


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    if not RedisServer.available():
        pytest.fail(MISSING)
    workdir = Path(tempfile.mkdtemp(prefix="oncebox-crash-redis-", dir="/tmp"))
    server = RedisServer.start(workdir)
    try:
        yield server.url
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def test_sigkill_at_every_point_on_both_backends(
    tmp_path: Path, pg_durable: Server, redis_url: str
) -> None:
    postgres = harness.PostgresBackend(pg_durable)
    try:
        backends = [harness.SqliteBackend(tmp_path), postgres]
        result = harness.campaign(
            backends, RUNS, RUNS, redis_url, control_runs=RUNS, messages=12, seed=7
        )
    finally:
        postgres.close()
    shown = harness.report(result, 0.0, 7)
    points = [(r.backend, r.point) for r in result.rows]
    assert points == [
        *[("sqlite", p) for p in harness.STORE_POINTS],
        *[("postgres", p) for p in harness.STORE_POINTS],
        ("sqlite", harness.XACK_POINT),
    ]
    for row in result.rows:
        assert row.runs == row.totals["killed"] == RUNS, shown
        assert row.totals["acked"] > 0, shown
    assert result.anomalies() == 0, shown
    # Recovery sealed records only at PostgreSQL's after_commit, and there it did.
    for row in result.rows:
        window = row.backend == "postgres" and row.point == "after_commit"
        assert row.window == window
        assert (row.totals["sealed_at_recovery"] > 0) == window, shown
    assert not result.windows_unseen(), shown
    # The broken client (acks inside the transaction, dies before the commit) is caught.
    assert [r.backend for r in result.controls] == ["sqlite", "postgres"]
    assert not result.control_blind(), shown


def _store(tmp_path: Path) -> tuple[oncebox.Oncebox, list[harness.Item]]:
    """A store holding the first 30 deliveries of a workload, redeliveries included."""
    items = harness.workload(3, 24)[:30]
    box = oncebox.open(f"sqlite:///{tmp_path / 'checks.db'}", inboxes=harness.INBOXES)
    for it in items:
        box.ingest(it.inbox, it.delivery)
    return box, items


def test_the_checks_see_loss_double_application_and_wrong_conflicts(tmp_path: Path) -> None:
    box, items = _store(tmp_path)
    with box:
        clean = harness.RunResult(killed=1)
        stored = harness._check_effects(box, items, clean, final=True)
        assert clean.anomalies() == 0, clean.notes

        # Acked, but the store never saw it.
        missing: dict[str, Any] = {
            "inbox": "ussd",
            "verdict": "accepted",
            "may_ack": True,
            "identity": "rec-never-sent",
            "witness": "00" * 32,
        }
        lost = harness.RunResult()
        harness._check_acked(box, [missing], lost)
        assert lost.acked_but_lost == 1

        # A work key's generation bumped once more than its records account for.
        twice = harness.RunResult()
        listing = next(it for it in items if it.work_key)
        assert listing.work_key is not None
        key, inbox_id = listing.work_key, box.inbox("listing").row.id
        box.store.atomic(lambda tx: generation.bump(tx, inbox_id, [key]))
        harness._check_effects(box, items, twice, final=True)
        assert twice.applied_twice == 1

        # The stored content redelivered, answered with a conflict.
        wrong = harness.RunResult()
        model = harness.Model(stored)
        again = next(it for it in items if it.witness == stored.get((it.inbox, it.identity or "")))
        harness._check_verdict(
            model, again, {"verdict": "conflict", "may_ack": True}, wrong, redelivery=True
        )
        assert wrong.wrongly_conflict == 1


def test_the_recovery_count_sees_records_committed_apart_from_their_seal(
    tmp_path: Path,
) -> None:
    # A client that leaves its seals queued (seal=False) killed after a commit on SQLite:
    # recovery has records to seal, which the one-transaction ingest never leaves.
    backend = harness.SqliteBackend(tmp_path)
    point = harness.engine_points.AFTER_COMMIT
    apart = harness.store_run(backend, point, 5, 12, seal=False)
    assert apart is not None and apart.sealed_at_recovery > 0
    assert apart.unsealed_committed == apart.sealed_at_recovery, apart.notes
    assert apart.anomalies() == apart.unsealed_committed, apart.notes
    # The same crash with the store's own sealing leaves recovery nothing to do.
    inline = harness.store_run(backend, point, 5, 12)
    assert inline is not None and inline.sealed_at_recovery == 0
    assert inline.anomalies() == 0, inline.notes
    # A window row whose runs never left recovery anything is reported.
    row = harness.Row("postgres", point, window=True)
    row.add(inline)
    assert row.window_unseen()
