"""The circuit breaker per destination (docs/forwarding.md#circuit), shared by every
dispatcher through the store: what counts, when a probe goes, and what two dispatchers
writing it at once leave."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

import oncebox
from conftest import BoxFactory
from oncebox import Delivery, InboxSpec, ManualClock, Oncebox
from oncebox.engine.outbox import Claim, Sent


def hooks(**destination: Any) -> dict[str, Any]:
    return {"ledger": {"url": "http://127.0.0.1:9/h", **destination}}


def keyed_box(make: Callable[[list[InboxSpec]], Oncebox], **destination: Any) -> Oncebox:
    return make([InboxSpec("k", codec="keyed", forward=hooks(**destination))])


def ingest(box: Oncebox, *keys: str) -> None:
    box.ingest_batch("k", [Delivery(f"body {k}".encode(), key=k) for k in keys])


def sent(claim: Claim, status: int | None) -> Sent:
    return Sent(claim, status, 0.01)


def circuit(box: Oncebox) -> tuple[str, int]:
    [standing] = box.forwarding()
    return standing.circuit, standing.state.failures


def racing_read(monkeypatch: pytest.MonkeyPatch) -> list[Callable[[], Any]]:
    """Work to run (and finish) in another thread right after the next read of a
    destination's state: another dispatcher's transaction committing in between a
    read and the write made from it."""
    from oncebox.store.sqltx.forwarding import ForwardingSql

    read = ForwardingSql.destination_state
    between: list[Callable[[], Any]] = []

    def racing(tx: ForwardingSql, name: str) -> Any:
        state = read(tx, name)
        if between:
            other = threading.Thread(target=between.pop())
            other.start()
            other.join(60)
            assert not other.is_alive()
        return state

    monkeypatch.setattr(ForwardingSql, "destination_state", racing)
    return between


@pytest.mark.parametrize("other", ["failure an hour on", "delivery"])
def test_two_dispatchers_settling_at_once_lose_no_count(
    pg_url: str, clock: ManualClock, monkeypatch: pytest.MonkeyPatch, other: str
) -> None:
    # PostgreSQL writes in READ COMMITTED: a settle read the circuit, then wrote all of it
    # back from what it had read. Another dispatcher's settle committed in between was
    # written over: its failure not counted (the circuit never opened), or its delivery's
    # reset lost (the circuit opened though the destination had just taken a forward).
    # (Two failures in the same hour happened to wait for each other on the hour's count.)
    box = keyed_box(lambda specs: oncebox.open(pg_url, inboxes=specs, clock=clock),
                    retry=["0s"] * 5, circuit_failures=2)  # fmt: skip
    try:
        clock.advance(3599 - clock.now % 3600)  # a second before the hour ends
        ingest(box, "a", "b", "c")
        [first] = box.claim_forwards("ledger", "d1", 1)
        [second] = box.claim_forwards("ledger", "d2", 1)
        between = racing_read(monkeypatch)
        if other == "delivery":
            [third] = box.claim_forwards("ledger", "d3", 1)
            box.settle_forwards("ledger", [sent(third, 503)], "d3")  # a run of one

            def settle_other() -> None:
                box.settle_forwards("ledger", [sent(second, 200)], "d2")

        else:

            def settle_other() -> None:
                clock.advance(2)  # its count is the next hour's
                box.settle_forwards("ledger", [sent(second, 503)], "d2")

        between.append(settle_other)
        box.settle_forwards("ledger", [sent(first, 503)], "d1")
        assert not between
        # As they committed, one after the other: a failure after a delivery is a run of
        # one; two failures in a row open the circuit.
        assert circuit(box) == (("closed", 1) if other == "delivery" else ("open", 2))
    finally:
        box.close()


def test_two_dispatchers_claiming_at_once_send_one_probe(
    pg_url: str, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each claim read an open circuit whose cooldown was over and wrote it half-open: two
    # claims at once each took a probe, to a destination the breaker holds to one.
    box = keyed_box(lambda specs: oncebox.open(pg_url, inboxes=specs, clock=clock),
                    retry=["0s"] * 5, circuit_failures=1, circuit_cooldown="30s")  # fmt: skip
    try:
        ingest(box, "a", "b", "c")
        [first] = box.claim_forwards("ledger", "d1", 1)
        box.settle_forwards("ledger", [sent(first, 503)], "d1")
        assert circuit(box) == ("open", 1)
        clock.advance(31)
        between = racing_read(monkeypatch)
        probes: list[Claim] = []
        between.append(lambda: probes.extend(box.claim_forwards("ledger", "d2", 10)))
        probes += box.claim_forwards("ledger", "d1", 10)
        assert not between and len(probes) == 1
        assert circuit(box) == ("half-open", 1)
    finally:
        box.close()


def test_a_probe_that_finds_nothing_due_leaves_the_next_claim_free_to_probe(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    # A claim past the cooldown wrote the circuit half-open for a whole lease (twice the
    # timeout and 10 s) before it looked for a probe; finding none due, it left it so:
    # what came due a moment later waited out the lease of a probe that never went.
    box = keyed_box(make_box, retry=["0s", "1m"], circuit_failures=1, circuit_cooldown="30s")
    ingest(box, "a")
    [first] = box.claim_forwards("ledger", "d1", 10)
    box.settle_forwards("ledger", [sent(first, 503)], "d1", rng=lambda: 0.5)  # due in 60 s
    assert circuit(box) == ("open", 1)
    clock.advance(31)
    assert box.claim_forwards("ledger", "d1", 10) == []  # cooled down; nothing due yet
    assert circuit(box) == ("open", 1)  # no probe is out
    clock.advance(30)
    [probe] = box.claim_forwards("ledger", "d1", 10)  # due now: it goes as the probe
    assert probe.forward.id == first.forward.id and circuit(box) == ("half-open", 1)


def test_a_failure_that_ran_out_its_schedule_counts_toward_the_run(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    # docs/forwarding.md: failures in a row open the circuit, and only answers dead at once
    # (a refusal, not an outage) do not count. A failure whose schedule had run out was
    # counted as dead and left out: a destination down for good, with a short schedule,
    # never opened its circuit, and a failed probe on its last attempt left it half-open.
    box = keyed_box(make_box, retry=["0s"], circuit_failures=2, circuit_cooldown="30s")
    ingest(box, "a", "b", "c", "d")
    claims = box.claim_forwards("ledger", "d1", 2)
    box.settle_forwards("ledger", [sent(c, 503) for c in claims], "d1")  # both dead now
    assert [f.status.value for f in box.forwards()][:2] == ["dead", "dead"]
    assert circuit(box) == ("open", 2)
    clock.advance(31)
    [probe] = box.claim_forwards("ledger", "d1", 10)
    box.settle_forwards("ledger", [sent(probe, None)], "d1")  # timed out, and dead
    assert circuit(box) == ("open", 3)
    assert box.claim_forwards("ledger", "d1", 10) == []  # cooling down again


def test_a_refused_probe_leaves_the_next_claim_free_to_probe(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    # A refusal (a 4xx not retried) neither closes nor opens the circuit: it says nothing
    # of an outage. Answered to the probe, it left the circuit half-open with the probe's
    # lease (twice the timeout and 10 s) to run: what was due waited for a probe that had
    # already come back.
    box = keyed_box(make_box, retry=["0s", "1m"], circuit_failures=1, circuit_cooldown="30s")
    ingest(box, "a", "b", "c")
    [first] = box.claim_forwards("ledger", "d1", 1)
    box.settle_forwards("ledger", [sent(first, 503)], "d1", rng=lambda: 0.5)
    assert circuit(box) == ("open", 1)
    clock.advance(31)
    [probe] = box.claim_forwards("ledger", "d1", 10)
    assert circuit(box) == ("half-open", 1)
    box.settle_forwards("ledger", [sent(probe, 422)], "d1")  # refused: dead at once
    assert [f.status.value for f in box.forwards() if f.id == probe.forward.id] == ["dead"]
    assert circuit(box)[0] == "half-open"
    [again] = box.claim_forwards("ledger", "d1", 10)  # at once, not a lease later
    assert again.forward.id != probe.forward.id and circuit(box) == ("half-open", 1)


def test_nothing_is_due_to_an_idle_dispatcher_while_paused_or_open(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    # An idle dispatcher reads forwards_due before it takes the write lock to claim. It
    # said yes while the destination was paused or its circuit cooling down, so every
    # dispatcher process ran a claim transaction (SQLite's one write lock, which ingest
    # waits for) every poll, to claim nothing.
    box = keyed_box(make_box, retry=["0s", "0s"], circuit_failures=1, circuit_cooldown="30s")
    ingest(box, "a", "b")
    assert box.forwards_due("ledger")
    box.pause_destination("ledger", actor="ops")
    assert not box.forwards_due("ledger") and box.claim_forwards("ledger", "d1", 10) == []
    box.resume_destination("ledger", actor="ops")
    [first] = box.claim_forwards("ledger", "d1", 1)
    box.settle_forwards("ledger", [sent(first, 503)], "d1", rng=lambda: 0.5)
    assert circuit(box) == ("open", 1)
    assert not box.forwards_due("ledger")  # "b" is due, but the circuit cools down
    clock.advance(31)
    assert box.forwards_due("ledger")  # it may probe
    assert len(box.claim_forwards("ledger", "d1", 10)) == 1  # the probe
    assert not box.forwards_due("ledger")  # the probe is out
