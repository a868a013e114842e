"""Seed 000: leases with fencing tokens, crash points and the checkpoint chain.

Crashes are real: a child process is started with ``ONCEBOX_CRASH_AT`` and dies by
``os._exit`` at that point, leaving the store exactly as a kill -9 would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import oncebox
from conftest import BoxFactory
from oncebox import Delivery, InboxSpec, ManualClock
from oncebox.engine import crashpoints

FEED = [InboxSpec("feed", codec="feed")]
CHILD = textwrap.dedent("""
    import sys
    import oncebox
    from oncebox import Delivery, InboxSpec, ManualClock

    url, now, scope, token, payload = sys.argv[1:6]
    box = oncebox.open(url, inboxes=[InboxSpec("feed", codec="feed")],
                       clock=ManualClock(float(now)))
    box.ingest("feed", Delivery(payload.encode(), snapshot_id=scope, lease_token=int(token)))
    print("survived the crash point")
""")


def crash(url: str, point: str, now: float, scope: str, token: int, payload: str) -> None:
    """Deliver in a child process that dies for real at ``point``."""
    env = {**os.environ, "ONCEBOX_CRASH_AT": point}
    result = subprocess.run(
        [sys.executable, "-c", CHILD, url, str(now), scope, str(token), payload],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == crashpoints.EXIT_CODE, result.stderr
    assert "survived" not in result.stdout


def records(box: oncebox.Oncebox) -> int:
    return int(box.stats("feed")["records"])


def verdict(decision: oncebox.Decision) -> str:
    return (
        decision.reason
        if decision.reason in ("stale_token", "expired_lease")
        else str(decision.verdict)
    )


def send(box: oncebox.Oncebox, scope: str, token: int, payload: str, device: float) -> str:
    delivery = Delivery(
        payload.encode(), snapshot_id=scope, lease_token=token, device_time=str(device)
    )
    return verdict(box.ingest("feed", delivery))


def test_1a_expired_lease_is_rejected_despite_a_device_clock_behind(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    clock.now = 1000
    with make_box(FEED) as box:
        lease = box.lease("feed", "S1", 60)
        clock.now = 1180
        decision = box.ingest(
            "feed",
            Delivery(b"feed-row-A", snapshot_id="S1", lease_token=lease.token, device_time="940"),
        )
        assert decision.reason == "expired_lease" and not decision.may_ack
        assert records(box) == 0


def test_1b_valid_lease_is_accepted_despite_a_device_clock_ahead(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    clock.now = 1180
    with make_box(FEED) as box:
        lease = box.lease("feed", "S2", 60)
        clock.now = 1200
        assert send(box, "S2", lease.token, "feed-row-A", device=1500) == "accepted"
        assert records(box) == 1


def test_1c_a_superseded_token_is_stale_even_with_agreeing_clocks(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    clock.now = 1200
    with make_box(FEED) as box:
        old = box.lease("feed", "S3", 60)
        new = box.lease("feed", "S3", 60)
        assert new.token > old.token
        assert send(box, "S3", old.token, "feed-row-B", device=1200) == "stale_token"
        assert send(box, "S3", new.token, "feed-row-B", device=1200) == "accepted"


def test_the_lease_boundary_belongs_to_the_lease(make_box: BoxFactory, clock: ManualClock) -> None:
    clock.now = 1000
    with make_box(FEED) as box:
        lease = box.lease("feed", "S", 60)
        clock.now = 1060
        assert send(box, "S", lease.token, "at-expiry", device=0) == "accepted"
        clock.now = 1060.001
        assert send(box, "S", lease.token, "after-expiry", device=0) == "expired_lease"


def test_a_released_lease_fences_its_token(make_box: BoxFactory) -> None:
    with make_box(FEED) as box:
        lease = box.lease("feed", "S", 60)
        box.release("feed", "S", lease.token)
        assert send(box, "S", lease.token, "row", device=0) == "stale_token"
        with pytest.raises(oncebox.InvalidOperation, match="does not hold"):
            box.release("feed", "S", lease.token)


def test_lease_calls_with_bad_arguments_get_clear_errors(make_box: BoxFactory) -> None:
    inboxes = [*FEED, InboxSpec("ussd", codec="ussd-h1", apply="triage")]
    with make_box(inboxes) as box:
        with pytest.raises(oncebox.UnknownInbox):
            box.lease("nope", "S", 60)
        with pytest.raises(oncebox.InvalidOperation, match="positive ttl"):
            box.lease("feed", "S", 0)
        with pytest.raises(oncebox.InvalidOperation, match="positive ttl"):
            box.lease("feed", "S", -5)
        with pytest.raises(oncebox.InvalidOperation, match="not lease-fenced"):
            box.lease("ussd", "S", 60)
        with pytest.raises(oncebox.InvalidOperation, match="scope"):
            box.lease("feed", "", 60)
        token = box.lease("feed", "S", 60).token
        with pytest.raises(oncebox.InvalidOperation, match="does not hold"):
            box.release("feed", "other-scope", token)
        assert send(box, "other-scope", token, "row", device=0) == "stale_token"


def test_fenced_rejections_leave_no_dedup_state(make_box: BoxFactory, clock: ManualClock) -> None:
    clock.now = 0
    with make_box(FEED) as box:
        lease = box.lease("feed", "S", 10)
        assert send(box, "S", lease.token + 99, "row", device=0) == "stale_token"
        clock.now = 11
        assert send(box, "S", lease.token, "row", device=0) == "expired_lease"
        assert records(box) == 0 and box.dead_letters("feed") == []
        fresh = box.lease("feed", "S", 10)
        assert send(box, "S", fresh.token, "row", device=0) == "accepted"


@pytest.mark.parametrize(
    "point,retry",
    [
        (crashpoints.BEFORE_INSERT, "accepted"),
        (crashpoints.AFTER_INSERT, "accepted"),
        (crashpoints.AFTER_COMMIT, "duplicate"),
        (crashpoints.AFTER_SEAL, "duplicate"),
    ],
)
@pytest.mark.slow
def test_every_crash_point_recovers_to_the_expected_verdict(
    shared_url: str, point: str, retry: str
) -> None:
    url = shared_url
    with oncebox.open(url, inboxes=FEED, clock=ManualClock(100)) as box:
        token = box.lease("feed", "S", 600).token
        assert send(box, "S", token, "before-the-crash", device=0) == "accepted"
    crash(url, point, 100, "S", token, "the-crashing-row")
    committed = point in (crashpoints.AFTER_COMMIT, crashpoints.AFTER_SEAL)
    # A fresh process opens the store; opening runs recovery. A single delivery is
    # sealed in its deciding transaction on either backend: nothing is left to recover.
    with oncebox.open(url, inboxes=FEED, clock=ManualClock(100)) as box:
        assert box.recovered_at_open == 0
        assert records(box) == (2 if committed else 1)
        report = box.verify()
        assert report.ok and report.uncovered == []
        assert send(box, "S", token, "the-crashing-row", device=0) == retry
        assert records(box) == 2
        assert box.verify().ok


def test_the_whole_seed_sequence_ends_with_5_records_and_9_entries(shared_url: str) -> None:
    url = shared_url
    clock = ManualClock(1000)
    box = oncebox.open(url, inboxes=FEED, clock=clock)
    seen = []
    t1 = box.lease("feed", "S1", 60).token
    clock.now = 1180
    seen.append(send(box, "S1", t1, "feed-row-A", device=1060 - 120))  # 1a
    assert records(box) == 0
    t2 = box.lease("feed", "S2", 60).token
    clock.now = 1200
    seen.append(send(box, "S2", t2, "feed-row-A", device=1200 + 300))  # 1b
    t3 = box.lease("feed", "S3", 60).token
    seen.append(send(box, "S3", t2, "feed-row-B", device=1200))  # 1c
    crash(url, crashpoints.AFTER_COMMIT, clock.now, "S3", t3, "feed-row-B")  # 2a
    assert records(box) == 2
    # A single delivery is sealed in its deciding transaction on either backend (a
    # batch's seal is a transaction of its own on PostgreSQL): nothing to recover.
    recovered = 0
    assert (box.verify().uncovered != []) == bool(recovered)
    assert box.recover() == recovered
    assert box.verify().uncovered == []
    seen.append(send(box, "S3", t3, "feed-row-B", device=1200))
    assert records(box) == 2
    crash(url, crashpoints.BEFORE_INSERT, clock.now, "S3", t3, "feed-row-C")  # 2b
    assert records(box) == 2
    seen.append(send(box, "S3", t3, "feed-row-C", device=1200))
    t4 = box.lease("feed", "S4", 60).token  # 3
    seen.append(send(box, "S4", t4, "feed-row-A", device=1200))
    assert records(box) == 3
    seen.append(send(box, "S4", t4, "feed-row-D", device=1200))
    assert records(box) == 4
    crash(url, crashpoints.AFTER_SEAL, clock.now, "S4", t4, "feed-row-E")  # 2c
    seen.append(send(box, "S4", t4, "feed-row-E", device=1200))
    assert records(box) == 5
    assert seen == [
        "expired_lease",
        "accepted",
        "stale_token",
        "duplicate",
        "accepted",
        "duplicate",
        "accepted",
        "duplicate",
    ]
    report = box.verify()  # 4
    assert report.ok and report.entries == 9
    steps = [entry.step for entry in box.log_entries()]
    assert steps.count("lease") == 4 and steps.count("accept") == 5 - recovered
    assert steps.count("recover") == recovered
    hashes = [entry.hash for entry in box.log_entries()]
    assert len(set(hashes)) == 9 and all(len(h) == 64 for h in hashes)
    assert box.verify().head == report.head == hashes[-1]
    box.close()
