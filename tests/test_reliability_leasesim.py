"""The lease and fencing simulation (reliability/leasesim.py), a few seeds of it.

The full campaign is ``.venv/bin/python reliability/leasesim.py``; here a few seeds on
SQLite, one on PostgreSQL, the determinism a replay relies on, and the negative controls
that show the checker can fail.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import oncebox
from oncebox import Delivery, InboxSpec, ManualClock
from oncebox.engine import fence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "reliability"))
import leasesim

pytestmark = pytest.mark.slow  # the lease simulation campaign, bounded

SEEDS = [0, 1, 2, 3, 4]
OPS = 1_200


def _run_and_check(seed: int, ops: int, url: str = "sqlite:///:memory:") -> leasesim.Run:
    run = leasesim.simulate(leasesim.params_for(seed, ops), url)
    report = leasesim.check(run.history, run.final)
    backend = "postgres" if url.startswith("postgresql") else "sqlite"
    assert report.anomalies() == 0, (
        "\n".join(report.examples) + f"\nreplay: {leasesim.replay_command(seed, ops, backend)}"
    )
    return run


@pytest.mark.parametrize("seed", SEEDS)
def test_a_seeded_run_matches_the_lease_model(seed: int) -> None:
    run = _run_and_check(seed, OPS)
    assert sum(e.op == "write" for e in run.history) > OPS // 4


def test_the_seeds_cover_what_fencing_is_for() -> None:
    """Across the seeds: pauses past the TTL, skew both ways, zombie and old-token writes
    refused, writes exactly at and just past expiry, and plenty accepted."""
    tally = leasesim.Tally()
    for seed in SEEDS[:3]:
        run = leasesim.simulate(leasesim.params_for(seed, OPS))
        tally.add(run, leasesim.check(run.history, run.final))
    outcomes = tally.report.outcomes
    assert tally.pauses > 0
    assert min(tally.skews) < 0 < max(tally.skews)
    assert outcomes["zombie:stale_token"] + outcomes["zombie:expired_lease"] > 0
    assert outcomes["old:stale_token"] > 0 and outcomes["old:accepted"] == 0
    assert outcomes["forged:stale_token"] > 0 and outcomes["foreign:stale_token"] > 0
    assert outcomes["normal:accepted"] > 100
    assert tally.report.at_expiry > 0 and tally.report.just_after_expiry > 0
    assert tally.believed_but_expired > 0  # a device clock behind did not help
    assert tally.believed_expired_but_valid > 0  # nor did one ahead hurt
    # Batches (decided on the set-based path) mix refused and accepted writes.
    batched = tally.report.batched_outcomes
    assert tally.batches > 10 and batched["stale_token"] > 0 and batched["accepted"] > 0
    assert batched["duplicate"] + batched["expired_lease"] > 0


def test_a_seed_replays_exactly() -> None:
    """What a printed replay command relies on: same seed, same history."""

    def shape(run: leasesim.Run) -> list[tuple[object, ...]]:
        return [(e.op, e.at, e.holder, e.scope, e.token, e.result, e.kind) for e in run.history]

    params = leasesim.params_for(11, 600)
    assert shape(leasesim.simulate(params)) == shape(leasesim.simulate(params))


def test_a_seeded_run_on_postgresql(pg_url: str) -> None:
    _run_and_check(5, 400, pg_url)


def test_negative_controls_fail_as_they_must() -> None:
    """A doctored history is flagged, broken fences are caught, broken models disagree."""
    found = leasesim.controls(0, 1_000)
    assert found.failures() == []
    assert found.broken["ignores supersession"].stale_accepted > 0
    assert found.broken["ignores expiry"].expired_accepted > 0
    assert found.broken["ignores supersession"].in_batches > 0  # caught in batches too
    assert fence.refused is leasesim._original_fence  # put back afterwards


def test_an_older_token_is_refused_and_a_doctored_acceptance_is_flagged() -> None:
    """The injected fault by hand: a holder writes with the token it had before."""
    clock = ManualClock(1_000.0)
    box = oncebox.open("sqlite:///:memory:", inboxes=[InboxSpec("feed", codec="feed")], clock=clock)
    history: list[leasesim.Event] = []

    def write(token: int, body: str, device: float) -> None:
        decision = box.ingest(
            "feed",
            Delivery(body.encode(), snapshot_id="S", lease_token=token, device_time=str(device)),
        )
        result = decision.reason or str(decision.verdict)
        history.append(
            leasesim.Event(
                len(history) + 1,
                clock.now,
                1,
                "write",
                "feed",
                "S",
                token,
                result,
                "old",
                body=body,
            )
        )

    def take() -> int:
        lease = box.lease("feed", "S", 10)
        history.append(
            leasesim.Event(
                len(history) + 1, clock.now, 1, "take", "feed", "S", lease.token, "ok",
                ttl=10, expires_at=lease.expires_at,
            )
        )  # fmt: skip
        return lease.token

    old = take()
    write(old, "a", device=0)
    new = take()
    write(old, "b", device=clock.now)  # the older token, device clock agreeing
    write(new, "c", device=10**9)
    clock.advance(10)
    write(new, "d", device=0)  # exactly at expiry
    clock.advance(0.001)
    write(new, "e", device=0)  # a device clock far behind does not extend the lease
    box.close()
    assert [e.result for e in history if e.op == "write"] == [
        "accepted",
        "stale_token",
        "accepted",
        "accepted",
        "expired_lease",
    ]
    assert leasesim.check(history).anomalies() == 0
    doctored, changed = leasesim.doctor(history, leasesim.STALE)
    report = leasesim.check(doctored)
    assert changed == 1 and report.stale_accepted == 1 and report.two_holders == 1
