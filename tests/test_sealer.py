"""One sealer at a time, under a lease whose token every append checks."""

from __future__ import annotations

import json
import threading
import time

import pytest

import oncebox
from conftest import INBOXES, SESSION, BoxFactory
from helpers import frame
from oncebox import Delivery, InboxSpec, ManualClock
from oncebox.engine import sealing
from oncebox.engine.sealing import Sealer, StaleSealer
from oncebox.engine.verify import SEAL_PATIENCE
from oncebox.errors import InvalidOperation

USSD = [InboxSpec("ussd", codec="ussd-h1", apply="triage")]


def test_a_stale_sealer_is_refused(make_box: BoxFactory, clock: ManualClock) -> None:
    box = make_box(USSD)
    first, second = Sealer(box.store, "first", ttl=10), Sealer(box.store, "second", ttl=10)
    first.acquire()
    with pytest.raises(InvalidOperation, match="held by sealer first"):
        second.acquire()
    clock.advance(11)  # first pauses past its lease
    second.acquire()
    box.ingest("ussd", frame(*SESSION[0]))
    with pytest.raises(StaleSealer):
        first.seal()
    assert second.seal() == 1
    assert box.verify().ok


def test_a_live_sealer_owns_the_log_and_ingest_never_waits(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    box = make_box(USSD)
    sealer = Sealer(box.store, "dedicated", ttl=30)
    sealer.acquire()
    decision = box.ingest("ussd", frame(*SESSION[0]))
    assert decision.may_ack and decision.log_position is None, "left to the sealer"
    waiting = box.verify()  # on its way, not a broken log
    assert waiting.queued == [decision.record_id] and waiting.uncovered == [] and waiting.ok
    assert sealer.seal() == 1
    assert box.verify().ok
    sealer.release()
    assert box.ingest("ussd", frame(*SESSION[1])).log_position is not None


def test_a_dead_sealer_leaves_its_work_to_the_next(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    box = make_box(USSD)
    Sealer(box.store, "doomed", ttl=5).acquire()  # and never seals again
    for item in SESSION:
        box.ingest("ussd", frame(*item))
    assert len(box.verify().queued) == 3
    clock.advance(6)
    box.seal()
    report = box.verify()
    assert report.ok and report.entries == 3


def test_recovery_beside_a_live_writer_leaves_its_queued_seal_alone(shared_url: str) -> None:
    """Opening a store runs recovery; a seal another live process queued a moment ago is
    not orphaned, so it must not come out as a ``recover`` entry."""
    with oncebox.open(shared_url, inboxes=INBOXES) as opener:
        with oncebox.open(shared_url, inboxes=INBOXES, seal=False) as writer:
            writer.ingest("ussd", frame(*SESSION[0]))  # committed; its seal is queued
            found: list[int] = []
            recovery = threading.Thread(
                target=lambda: found.append(sealing.recover(opener.store, grace=1.0))
            )
            recovery.start()
            time.sleep(0.3)
            writer.seal()  # the live writer seals its own, within the grace
            recovery.join()
            assert found == [0]
            # A writer that never seals: its queued seal is orphaned after the grace.
            writer.ingest("ussd", frame(*SESSION[1]))
            assert sealing.recover(opener.store, grace=0.05) == 1
        steps = [
            entry.step for entry in opener.log_entries() if entry.step in ("accept", "recover")
        ]
        assert steps == ["accept", "recover"]
        assert opener.verify().ok


def test_recovery_keeps_an_orphaned_resolution_a_resolution(shared_url: str) -> None:
    """A resolution that accepted a newcomer queues an entry naming the revision it
    made; orphaned by a writer that never sealed, recovery seals it as that resolution,
    with its action, note and actor, not as a bare ``recover`` of the record."""
    with oncebox.open(shared_url, inboxes=INBOXES, seal=False) as writer:
        writer.ingest("ussd", frame(*SESSION[0]))
        conflict = writer.ingest("ussd", Delivery(b"H1|1|Kakuma1|MED|9|86|#95", key="rec1"))
        assert conflict.quarantine_id is not None
        writer.resolve(conflict.quarantine_id, "accept", "the site confirmed 9", actor="ops")
    with oncebox.open(shared_url, inboxes=INBOXES) as reopened:  # recovery runs on open
        assert reopened.recovered_at_open == 1  # the new record, and only it
        entries = reopened.log_entries()
        assert [e.step for e in entries] == ["recover", "quarantine", "resolve"]
        resolved = json.loads(entries[-1].state)
        assert resolved["action"] == "accept" and resolved["note"] == "the site confirmed 9"
        assert resolved["actor"] == "ops"
        assert reopened.verify().ok


def test_one_seal_over_a_record_and_its_revision_keeps_the_first_position(
    store_url: str, clock: ManualClock
) -> None:
    """A resolution that accepted a newcomer queues an entry naming the record; when one
    seal takes both the record's ``accept`` and that ``resolve``, the record's position
    stays the first (its ``accept``), as when they are sealed apart, on every backend.
    PostgreSQL kept whichever of the two its sort by record id met first (equal keys in
    no fixed order; in a seal of a dozen entries, as here, the later): a duplicate there
    answered the resolution's position, and the accept's on SQLite (seen by
    ``differential.py --cross``)."""
    queue = [InboxSpec("queue", codec="keyed")]
    with oncebox.open(store_url, inboxes=queue, clock=clock, seal=False) as box:

        def others(prefix: str) -> None:
            for n in range(3):
                box.ingest("queue", Delivery(b"other", key=f"{prefix}{n}"))

        others("before")
        first = box.ingest("queue", Delivery(b"first", key="k1"))
        others("between")
        newcomer = box.ingest("queue", Delivery(b"second", key="k1"))
        assert newcomer.verdict == "conflict" and newcomer.quarantine_id is not None
        box.resolve(newcomer.quarantine_id, "accept", "the sender meant it", actor="ops")
        others("after")
        positions = box.seal()
        entries = box.log_entries()
        assert len(entries) == 12  # ten accepts, the quarantine, the resolve: one seal
        accepted = [e.seq for e in entries if e.step == "accept"]
        resolved = [e.seq for e in entries if e.step == "resolve"]
        again = box.ingest("queue", Delivery(b"second", key="k1"))
        assert again.verdict == "duplicate" and again.record_id == first.record_id
        assert again.log_position == accepted[3] != resolved[0]
        assert positions[first.record_id] == accepted[3]  # what seal() says is what is stored
        [record] = [r for r in box.records("queue") if r.id == first.record_id]
        assert record.log_seq == accepted[3]


def test_a_seal_queued_past_its_patience_is_uncovered(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    """A live sealer that never seals (wedged, its lease renewed) must not hide its
    queue: a record whose seal waited past SEAL_PATIENCE is uncovered, and verify fails."""
    box = make_box(USSD)
    sealer = Sealer(box.store, "wedged", ttl=3600)
    sealer.acquire()
    decision = box.ingest("ussd", frame(*SESSION[0]))
    clock.advance(SEAL_PATIENCE - 1)
    assert box.verify().queued == [decision.record_id] and box.verify().ok
    clock.advance(2)
    stuck = box.verify()
    assert stuck.uncovered == [decision.record_id] and stuck.queued == [] and not stuck.ok
    assert sealer.seal() == 1
    assert box.verify().ok and box.verify().uncovered == box.verify().queued == []
