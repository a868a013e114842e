"""A bounded delivery-history run (reliability/history.py) with its negative controls.

Eight clients deliver at least once into a durable throwaway PostgreSQL server while the
nemesis kills clients, restarts the server and pauses a reconciler worker past its claim;
the checker must find nothing lost, duplicated or unexpected. Then the store is doctored
(an acked record deleted, a triage total bumped, a record nobody sent) and the same
checker must report each one: proof that it can fail.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import oncebox
from oncebox.formats.ussd_h1 import make_frame
from pgcluster import PgCluster

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "reliability"))

from history import Config, Result, judge, render, run

pytestmark = [
    pytest.mark.slow,  # the history checker's campaign on a PostgreSQL server of its own
    pytest.mark.skipif(
        not PgCluster.available(), reason="needs PostgreSQL server binaries to kill and restart"
    ),
]


@pytest.fixture(scope="module")
def base() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="oncebox-history-test-", dir="/tmp"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(base: Path) -> Iterator[PgCluster]:
    server = PgCluster.start(base / "pg", durable=True)
    yield server
    server.stop("immediate")


@pytest.fixture(scope="module")
def result(base: Path, cluster: PgCluster) -> Result:
    directory = base / "histories"
    directory.mkdir()
    cfg = Config(clients=8, deliveries=50, fault_every=1.0, seed=7, cycle=True, timeout=150)
    outcome = run(cfg, cluster, directory)
    print(render(outcome, cfg))
    return outcome


def test_nothing_is_lost_duplicated_or_unexpected_under_faults(result: Result) -> None:
    r, faults = result.report, result.faults
    assert (r.lost, r.duplicated, r.unexpected) == (0, 0, 0), render(result, Config())
    assert result.anomalies == 0, render(result, Config())
    # The run did what it claims: every delivery decided, every kind of fault injected.
    assert r.deliveries >= 8 * 50 and r.undecided == 0
    assert faults.kills >= 1 and faults.server_restarts >= 1 and faults.pauses >= 1
    assert sum(1 for s in faults.skews if s) == 6
    assert r.conflicts_injected > 0 and r.conflicts_quarantined == r.conflicts_injected
    assert r.verdicts["duplicate"] > 0 and r.verdicts["rejected"] > 0
    assert r.probes["expired_lease fenced"] + r.probes["stale_token fenced"] > 0


def _acked_feed_identity(directory: Path) -> str:
    """A feed delivery some client was told was accepted and may be acknowledged."""
    for path in sorted(directory.glob("client-*.jsonl")):
        attempts = {}
        for raw in path.read_text().splitlines():
            line = json.loads(raw)
            if line["t"] == "attempt":
                attempts[line["a"]] = line["items"]
            elif line["t"] == "outcome" and line["kind"] == "decision":
                for sent, d in zip(attempts[line["a"]], line["decisions"], strict=True):
                    ok = d["verdict"] == "accepted" and d["may_ack"]
                    if ok and sent["inbox"] == "feed" and sent["kind"] == "new":
                        return str(sent["identity"])
    raise AssertionError("no acked feed delivery in the histories")


def test_the_checker_reports_a_doctored_store(result: Result) -> None:
    identity = _acked_feed_identity(result.directory)
    with psycopg.connect(result.url, autocommit=True) as conn:
        # An acked record disappears: lost.
        deleted = conn.execute(
            "DELETE FROM records WHERE ident = %s AND inbox_id = "
            "(SELECT id FROM inboxes WHERE name = 'feed')",
            (hashlib.sha256(identity.encode()).digest(),),
        ).rowcount
        assert deleted == 1
        lost = judge(result.url, result.directory)
        assert lost.lost >= 1 and any(identity in e for e in lost.lost_examples)
        assert (lost.duplicated, lost.unexpected) == (0, 0)
        # One triage cell counts a case twice: duplicated.
        conn.execute(
            "UPDATE triage_totals SET cases = cases + 1, headcount = headcount + 3 "
            "WHERE (site, need) IN (SELECT site, need FROM triage_totals LIMIT 1)"
        )
        twice = judge(result.url, result.directory)
        assert twice.duplicated_by["triage totals off"] == 1
    # A record no client ever sent: unexpected.
    with oncebox.open(result.url) as box:
        frame = make_frame(1, "K99", "MED", 5, 5).encode()
        box.ingest("ussd", oncebox.Delivery(frame, key="nobody-sent-this-1"))
    stray = judge(result.url, result.directory)
    assert stray.unexpected_by["records"] == 1
    assert stray.lost >= 1 and stray.duplicated >= 1 and stray.anomalies > 0
