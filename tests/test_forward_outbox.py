"""The outbox (issue 22, items 2 to 5): forwards written in the deciding transaction,
claimed under the one fence, retried as the answer says, a circuit per destination,
pause and resume, ordered keys, operators' retries; on every backend."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from conftest import BoxFactory
from oncebox import ApplyError, Change, Delivery, InboxSpec, ManualClock, Oncebox, Step
from oncebox.domain.forwarding import ForwardFilter, ForwardStatus, Outcome
from oncebox.engine.outbox import Claim, Sent, judge, next_delay
from oncebox.formats.ussd_h1 import make_frame


def hooks(**destination: Any) -> dict[str, Any]:
    return {"ledger": {"url": "http://127.0.0.1:9/h", **destination}}


def frame(seq: int, headcount: int = 3) -> Delivery:
    return Delivery(make_frame(seq, "Kakuma1", "MED", headcount, 86).encode(), key=f"r-{seq}")


def forwarding_box(make_box: BoxFactory, **destination: Any) -> Oncebox:
    return make_box(
        [
            InboxSpec("ussd", codec="ussd-h1", apply="triage", forward=hooks(**destination)),
            InboxSpec("feed", codec="feed"),
        ]
    )


def sent(claim: Claim, status: int | None, **more: Any) -> Sent:
    return Sent(claim, status, 0.01, **more)


def statuses(box: Oncebox) -> list[tuple[int, str, int]]:
    return [(f.record_id, f.status.value, f.attempts) for f in box.forwards()]


def test_each_accepted_record_and_revision_owes_one_forward(make_box: BoxFactory) -> None:
    box = forwarding_box(make_box)
    box.ingest_batch("ussd", [frame(1), frame(2), frame(1)])  # the duplicate owes nothing
    conflict = box.ingest("ussd", frame(2, headcount=9))
    box.ingest("ussd", b"H1|broken", key="bad")  # a dead letter owes nothing
    assert [(f.record_id, f.revision) for f in box.forwards()] == [(1, 1), (2, 1)]
    assert conflict.quarantine_id is not None
    box.resolve(conflict.quarantine_id, "accept", "corrected by the gateway")
    assert [(f.record_id, f.revision) for f in box.forwards()] == [(1, 1), (2, 1), (2, 2)]
    claims = box.claim_forwards("ledger", "d1", 10)
    assert len({c.key for c in claims}) == 3  # each revision its own idempotency key
    revised = json.loads(claims[2].body)
    assert (revised["record_id"], revised["revision"]) == (2, 2)
    assert revised["content"] == {"text": frame(2, headcount=9).body.decode()}
    assert revised["idempotency_key"] == claims[2].key
    # An inbox without destinations writes nothing more.
    box.ingest("feed", b"x", snapshot_id="s", lease_token=box.lease("feed", "s", 60).token)
    assert len(box.forwards()) == 3


def test_a_rolled_back_decision_leaves_no_forward(make_box: BoxFactory) -> None:
    class Refuses(Step):
        name = "refuses"

        def apply(self, tx: Any, changes: Sequence[Change]) -> None:
            raise RuntimeError("no")

    box = make_box([InboxSpec("k", codec="keyed", apply=Refuses(), forward=hooks())])
    with pytest.raises(ApplyError):
        box.ingest("k", b"x", key="a")
    assert box.forwards() == [] and box.forwarding()[0].backlog == 0


def test_the_same_bytes_and_key_on_every_attempt(make_box: BoxFactory, clock: ManualClock) -> None:
    box = forwarding_box(make_box)
    box.ingest("ussd", frame(1))
    [first] = box.claim_forwards("ledger", "d1", 10)
    box.settle_forwards("ledger", [sent(first, 503)], "d1")
    clock.advance(10)
    [second] = box.claim_forwards("ledger", "d1", 10)
    assert (second.key, second.body) == (first.key, first.body)
    assert second.token > first.token


def test_a_paused_dispatcher_cannot_settle_what_another_sent_again(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    box = forwarding_box(make_box, timeout="1s")  # a claim's lease: 12 s
    box.ingest("ussd", frame(1))
    [paused] = box.claim_forwards("ledger", "d1", 10)
    assert box.claim_forwards("ledger", "d2", 10) == []  # held: nobody else sends it
    clock.advance(13)  # d1 stops past its lease (a GC pause, SIGSTOP, a slow disk)
    [again] = box.claim_forwards("ledger", "d2", 10)
    assert again.forward.id == paused.forward.id and again.token > paused.token
    # d1 wakes with a failure to report while d2's attempt is out: refused, nothing moves.
    [stale] = box.settle_forwards("ledger", [sent(paused, 500)], "d1")
    assert stale.outcome is Outcome.STALE and "stale_token" in (stale.error or "")
    box.settle_forwards("ledger", [sent(again, 200)], "d2")
    # d1 reports again, now a success: still refused, and d2's delivery stands.
    [late] = box.settle_forwards("ledger", [sent(paused, 200)], "d1")
    assert late.outcome is Outcome.STALE
    assert statuses(box) == [(1, "delivered", 1)]
    _, attempts = box.forward(paused.forward.id)
    assert [(a.outcome, a.dispatcher) for a in attempts] == [
        (Outcome.STALE, "d1"), (Outcome.DELIVERED, "d2"), (Outcome.STALE, "d1"),
    ]  # fmt: skip


def test_a_claim_that_ran_out_is_refused_even_with_nobody_else(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    box = forwarding_box(make_box, timeout="1s")
    box.ingest("ussd", frame(1))
    [claim] = box.claim_forwards("ledger", "d1", 10)
    clock.advance(13)
    [refused] = box.settle_forwards("ledger", [sent(claim, 200)], "d1")
    assert refused.outcome is Outcome.STALE and "expired_lease" in (refused.error or "")
    assert statuses(box) == [(1, "pending", 0)]  # sent again: the receiver dedups by its key
    assert len(box.claim_forwards("ledger", "d1", 10)) == 1


def test_answers_are_judged_as_the_issue_says() -> None:
    dest = InboxSpec("i", codec="keyed", forward=hooks(retry_on=[409])).destinations()[0]
    claim: Any = None
    for status, outcome in [(200, "delivered"), (204, "delivered"), (408, "retry"),
                            (425, "retry"), (429, "retry"), (500, "retry"), (503, "retry"),
                            (None, "retry"), (409, "retry"), (400, "dead"), (404, "dead"),
                            (410, "dead"), (301, "dead")]:  # fmt: skip
        assert judge(dest, Sent(claim, status, 0.0)) == outcome, status


def test_delays_follow_the_schedule_with_jitter_and_retry_after_within_it() -> None:
    [dest] = InboxSpec("i", codec="keyed", forward=hooks(retry=["0s", "10s", "1m"])).destinations()
    assert next_delay(dest, 1, None, lambda: 0.0) == pytest.approx(8.0)  # -20%
    assert next_delay(dest, 1, None, lambda: 1.0) == pytest.approx(12.0)  # +20%
    assert next_delay(dest, 1, 30.0, lambda: 0.5) == 30.0  # later, as asked
    assert next_delay(dest, 1, 3600.0, lambda: 0.5) == 60.0  # never past the longest
    assert next_delay(dest, 1, 1.0, lambda: 0.5) == pytest.approx(10.0)  # never earlier
    assert next_delay(dest, 3, None) is None  # the schedule ran out: dead


def test_retries_run_out_to_a_dead_letter_an_operator_sends_again(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    box = forwarding_box(make_box, retry=["0s", "10s"], circuit_failures=100)
    box.ingest_batch("ussd", [frame(1), frame(2)])
    [one, two] = box.claim_forwards("ledger", "d1", 10)
    box.settle_forwards("ledger", [sent(one, 500, retry_after=5.0), sent(two, 404)], "d1")
    assert statuses(box) == [(1, "failed", 1), (2, "dead", 1)]  # a 404 is dead at once
    assert box.claim_forwards("ledger", "d1", 10) == []  # not due yet
    clock.advance(15)
    [one] = box.claim_forwards("ledger", "d1", 10)
    box.settle_forwards("ledger", [sent(one, None, error="timed out after 30s")], "d1")
    assert statuses(box) == [(1, "dead", 2), (2, "dead", 2 - 1)]
    dead = box.forwards(ForwardFilter(status=ForwardStatus.DEAD))
    assert [f.last_error for f in dead] == ["timed out after 30s", "HTTP 404"]
    assert box.forwarding()[0].dead == 2
    box.retry_forward(2, actor="ops:ana")
    assert box.retry_forwards(ForwardFilter(destination="ledger"), actor="ops:ben") == 1
    assert statuses(box) == [(1, "failed", 2), (2, "failed", 1)]
    steps = [(e.step, json.loads(e.state)) for e in box.log_entries()]
    retried = [state for step, state in steps if step == "forward_retry"]
    assert [r["actor"] for r in retried] == ["ops:ana", "ops:ben"]
    assert retried[1]["forwards"] == [1] and retried[1]["status"] == "dead"
    assert [s["forward"] for step, s in steps if step == "forward_dead"] == [2, 1]
    # A fresh schedule: two attempts again before it is dead.
    claims = box.claim_forwards("ledger", "d1", 10)
    box.settle_forwards("ledger", [sent(c, 500) for c in claims], "d1")
    assert statuses(box) == [(1, "failed", 3), (2, "failed", 2)]


def test_a_run_of_failures_opens_the_circuit_and_a_probe_closes_it(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    box = forwarding_box(make_box, retry=["0s"] * 10, circuit_failures=3,
                         circuit_cooldown="30s")  # fmt: skip
    box.ingest_batch("ussd", [frame(n) for n in range(1, 6)])
    claims = box.claim_forwards("ledger", "d1", 3)
    box.settle_forwards("ledger", [sent(c, 503) for c in claims], "d1")
    assert box.forwarding()[0].circuit == "open"
    assert box.claim_forwards("ledger", "d1", 10) == []  # open: nothing goes out
    clock.advance(31)
    [probe] = box.claim_forwards("ledger", "d1", 10)  # half-open: one probe
    assert box.forwarding()[0].circuit == "half-open"
    assert box.claim_forwards("ledger", "d2", 10) == []
    box.settle_forwards("ledger", [sent(probe, 503)], "d1")  # failed: open again
    assert box.forwarding()[0].circuit == "open"
    clock.advance(31)
    [probe] = box.claim_forwards("ledger", "d1", 10)
    box.settle_forwards("ledger", [sent(probe, 200)], "d1")
    standing = box.forwarding()[0]
    assert standing.circuit == "closed" and standing.state.failures == 0
    assert len(box.claim_forwards("ledger", "d1", 10)) == 4
    assert standing.success_rate == pytest.approx(1 / 5)  # 4 failed, then the probe


def test_pause_holds_everything_back_and_resume_sends_it(make_box: BoxFactory) -> None:
    box = forwarding_box(make_box)
    box.pause_destination("ledger", actor="ops:ana")
    box.ingest_batch("ussd", [frame(1), frame(2)])
    assert box.claim_forwards("ledger", "d1", 10) == []
    assert box.forwarding()[0].circuit == "paused" and box.forwarding()[0].backlog == 2
    box.resume_destination("ledger", actor="ops:ben")
    assert [c.forward.record_id for c in box.claim_forwards("ledger", "d1", 10)] == [1, 2]
    steps = [(e.step, json.loads(e.state)) for e in box.log_entries()]
    assert [(s, st["actor"]) for s, st in steps if s.startswith("forward_")] == [
        ("forward_pause", "ops:ana"), ("forward_resume", "ops:ben"),
    ]  # fmt: skip


def test_ordered_by_key_a_failing_head_holds_only_its_own_key(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    box = make_box([InboxSpec("k", codec="keyed", forward=hooks(ordered="key",
                   retry=["0s", "1m"], circuit_failures=100))])  # fmt: skip
    conflict = None
    for key, body in [("a", b"a1"), ("b", b"b1"), ("a", b"a2")]:
        conflict = box.ingest("k", body, key=key)
    assert conflict is not None and conflict.quarantine_id is not None
    box.resolve(conflict.quarantine_id, "accept", "a's second version")  # a, revision 2
    heads = box.claim_forwards("ledger", "d1", 10)
    assert [(c.forward.order_key, c.forward.revision) for c in heads] == [("a", 1), ("b", 1)]
    box.settle_forwards("ledger", [sent(heads[0], 503), sent(heads[1], 200)], "d1")
    clock.advance(1)
    assert box.claim_forwards("ledger", "d1", 10) == []  # a's head waits; a's next too
    clock.advance(120)
    [head] = box.claim_forwards("ledger", "d1", 10)
    assert (head.forward.order_key, head.forward.revision) == ("a", 1)
    box.settle_forwards("ledger", [sent(head, 503)], "d1")  # the schedule ran out: dead
    [after] = box.claim_forwards("ledger", "d1", 10)  # and the key moves on
    assert (after.forward.order_key, after.forward.revision) == ("a", 2)


def test_a_records_forwards_are_on_its_page(make_box: BoxFactory) -> None:
    box = forwarding_box(make_box)
    decision = box.ingest("ussd", frame(1))
    [claim] = box.claim_forwards("ledger", "d1", 10)
    box.settle_forwards("ledger", [sent(claim, 200, answer=b"x" * 5000)], "d1")
    assert decision.record_id is not None
    [(forward, [attempt])] = box.forwards_of(decision.record_id)
    assert forward.status is ForwardStatus.DELIVERED and forward.destination == "ledger"
    assert attempt.status == 200 and attempt.answer == b"x" * 1024  # the first 1 KiB


def test_every_listing_path_finds_what_a_filter_over_all_of_them_finds(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    # A record's forwards, and a destination's failed or dead, are read through their
    # own indexes (migration 023); the rest walk the table. Each must agree with a plain
    # filter over every forward, however the filters combine.
    box = forwarding_box(make_box, retry=["0s", "10s"], circuit_failures=100)
    box.ingest_batch("ussd", [frame(n) for n in range(1, 7)])
    clock.advance(5)
    conflict = box.ingest("ussd", frame(2, headcount=4))
    assert conflict.quarantine_id is not None
    box.resolve(conflict.quarantine_id, "accept", "corrected")  # record 2's second forward
    claims = box.claim_forwards("ledger", "d1", 10)
    outcomes = [200, 404, 500, 200, 503, 410, 200]
    box.settle_forwards("ledger", [sent(c, s) for c, s in zip(claims, outcomes, strict=True)], "d1")
    every = box.forwards(limit=1000)
    assert {f.status.value for f in every} == {"delivered", "dead", "failed"}
    first = every[0].created_at
    for status in [None, *ForwardStatus]:
        for record in (None, 2, 3):
            for since, until in ((None, None), (first + 1, None), (None, first + 1)):
                chosen = ForwardFilter("ledger", status, since, until, record)
                expected = [
                    f for f in every
                    if (status is None or f.status == status)
                    and (record is None or f.record_id == record)
                    and (since is None or f.created_at >= since)
                    and (until is None or f.created_at < until)
                ]  # fmt: skip
                assert box.forwards(chosen) == expected, chosen
                after = expected[0].id if expected else 0
                assert box.forwards(chosen, after=after) == expected[1:]
    assert [f.revision for f, _ in box.forwards_of(2)] == [1, 2]
    assert [f.record_id for f, _ in box.forwards_of(4)] == [4]


def test_a_pause_is_kept_when_a_dispatcher_wrote_the_circuit_it_had_read_before(
    pg_url: str, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # PostgreSQL writes in READ COMMITTED: a claim (moving an open circuit to half-open)
    # and a settle (counting a failure) read the destination's state, then wrote all of
    # it back. An operator's pause committed in between was overwritten with the state
    # read before it: the log said paused, the destination was not, and kept sending.
    import threading

    import oncebox
    from oncebox.store.sqltx.forwarding import ForwardingSql

    box = oncebox.open(pg_url, inboxes=[InboxSpec("ussd", codec="ussd-h1", forward=hooks(
        retry=["0s"] * 5, circuit_failures=1, circuit_cooldown="30s"))], clock=clock)  # fmt: skip
    read = ForwardingSql.destination_state
    operator: list[str] = []  # the action to commit right after a dispatcher's read

    def racing(tx: ForwardingSql, name: str) -> Any:
        state = read(tx, name)
        if operator:
            act = {"pause": box.pause_destination, "resume": box.resume_destination}
            done = threading.Thread(target=act[operator.pop()], args=(name, "ops"))
            done.start()
            done.join()
        return state

    monkeypatch.setattr(ForwardingSql, "destination_state", racing)
    try:
        box.ingest_batch("ussd", [frame(1), frame(2)])
        [first] = box.claim_forwards("ledger", "d1", 1)
        box.settle_forwards("ledger", [sent(first, 503)], "d1")
        assert box.forwarding()[0].circuit == "open"
        clock.advance(31)
        operator.append("pause")  # while the claim reads the circuit, to take its probe
        [probe] = box.claim_forwards("ledger", "d1", 10)
        assert box.forwarding()[0].circuit == "paused"
        box.resume_destination("ledger", "ops")
        operator.append("pause")  # while the settle reads the circuit, to close it
        box.settle_forwards("ledger", [sent(probe, 200)], "d1")
        [standing] = box.forwarding()
        assert standing.circuit == "paused" and standing.state.circuit == "closed"
        assert box.claim_forwards("ledger", "d1", 10) == []
    finally:
        box.close()


def test_a_forward_whose_record_was_evicted_before_it_was_sent_is_dead_in_the_log(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    # Every dead forward is an outbound dead letter with a `forward_dead` entry in the
    # log (docs/forwarding.md); one whose record retention dropped first became dead
    # without one.
    box = forwarding_box(make_box)
    box.pause_destination("ledger")  # nothing goes out before retention runs
    box.ingest("ussd", frame(1))
    clock.advance(31 * 86400)
    box.evict("ussd")
    box.resume_destination("ledger")
    assert box.claim_forwards("ledger", "d1", 10) == []  # nothing left to send
    [dead] = box.forwards(ForwardFilter("ledger", ForwardStatus.DEAD))
    logged = [json.loads(e.state) for e in box.log_entries() if e.step == "forward_dead"]
    assert logged == [{
        "destination": "ledger", "forward": dead.id, "record": 1, "revision": 1,
        "attempts": 0, "error": "the record was evicted by retention before it was sent",
    }]  # fmt: skip
    assert box.forwarding()[0].dead == 1
    # Sent again (docs/forwarding.md#retention): its content is gone, so dead again.
    box.retry_forward(dead.id, actor="ops")
    assert box.claim_forwards("ledger", "d1", 10) == []
    [again] = box.forwards(ForwardFilter("ledger", ForwardStatus.DEAD))
    assert (again.id, again.last_error) == (dead.id, dead.last_error)
    assert [e.step for e in box.log_entries()].count("forward_dead") == 2


def test_a_forward_waits_for_its_revision_in_the_log(store_url: str, clock: ManualClock) -> None:
    """What is handed on is in the log, on either backend: with sealing deferred, a
    revision accepted and committed is not claimed until its seal."""
    import oncebox

    box = oncebox.open(store_url, inboxes=[InboxSpec("k", codec="keyed", forward=hooks())],
                       clock=clock, seal=False)  # fmt: skip
    try:
        box.ingest("k", Delivery(b"a1", key="a"))
        assert box.forwards()[0].status is ForwardStatus.PENDING  # owed, durable
        assert box.claim_forwards("ledger", "d1", 10) == []  # not in the log yet
        box.seal()
        [claim] = box.claim_forwards("ledger", "d1", 10)
        assert claim.entry.identity == "a" and claim.forward.revision == 1
    finally:
        box.close()


def test_a_forward_is_claimed_only_once_its_revision_is_durable(pg_url: str) -> None:
    # On PostgreSQL a batch (and an operator's resolution) commits without waiting for
    # its flush, and is made durable by its seal's commit right after. A dispatcher that
    # claimed in between sent a revision a server crash could still take back: the
    # sender's resend is then a new record, with a new idempotency key, and the
    # destination applies the same delivery twice. The feed waits for the seal; so must
    # a claim.
    import oncebox
    from oncebox.engine import outbox

    spec = InboxSpec("k", codec="keyed", forward=hooks())
    box = oncebox.open(pg_url, inboxes=[spec])
    other = oncebox.open(pg_url, inboxes=[spec])  # another process's dispatcher
    real = box.store.atomic
    # What the other claimed between each commit and its seal (what earlier writes made
    # durable may go then, not what this one wrote).
    between: list[set[tuple[str | None, int]]] = []

    def claim(tx: Any) -> list[Claim]:  # as claim_forwards, without the seal it runs after
        ledger = other.destination("ledger")
        inbox_id = other.inbox("k").row.id
        return outbox.claim(tx, ledger, "k", inbox_id, other._store_id(), "d2", 10, tx.now())

    def atomic(work: Any, durable: bool = True) -> Any:
        result = real(work, durable)
        if not durable:  # the decision committed, its seal not yet
            claimed = other.store.atomic(claim)
            between.append({(c.entry.identity, c.forward.revision) for c in claimed})
        return result

    try:
        box.store.atomic = atomic  # type: ignore[method-assign]
        box.ingest_batch("k", [Delivery(b"a1", key="a"), Delivery(b"b1", key="b")])
        assert len(between) == 1 and not between[0] & {("a", 1), ("b", 1)}
        conflict = box.ingest_batch("k", [Delivery(b"a2", key="a"), Delivery(b"c1", key="c")])
        assert len(between) == 2 and ("c", 1) not in between[1]
        assert conflict[0].quarantine_id is not None
        box.resolve(conflict[0].quarantine_id, "accept", "a's second version")
        assert len(between) == 3 and ("a", 2) not in between[2]
        box.store.atomic = real  # type: ignore[method-assign]
        after = other.claim_forwards("ledger", "d2", 10)
        claimed = [k for found in between for k in found]
        claimed += [(c.entry.identity, c.forward.revision) for c in after]
        assert sorted(claimed) == [("a", 1), ("a", 2), ("b", 1), ("c", 1)]  # each once
    finally:
        box.store.atomic = real  # type: ignore[method-assign]
        other.close()
        box.close()


def test_a_destination_moved_to_another_inbox_is_not_sent_the_first_inboxs_records(
    shared_url: str, clock: ManualClock
) -> None:
    # A destination is known by its name alone; claims asked for the name alone. Moved
    # from inbox a to inbox b in the configuration, it was sent a's forwards still owed,
    # a's content under b's name: one inbox's records crossing to another's receiver.
    import oncebox

    before = [InboxSpec("a", codec="keyed", forward=hooks()), InboxSpec("b", codec="keyed")]
    with oncebox.open(shared_url, inboxes=before, clock=clock) as box:
        box.ingest("a", b"a's own", key="k")
    after = [InboxSpec("a", codec="keyed"), InboxSpec("b", codec="keyed", forward=hooks())]
    with oncebox.open(shared_url, inboxes=after, clock=clock) as box:
        assert box.claim_forwards("ledger", "d1", 10) == []
        box.ingest("b", b"b's own", key="k")
        [claim] = box.claim_forwards("ledger", "d1", 10)
        assert json.loads(claim.body)["content"] == {"text": "b's own"}


def test_an_operators_retry_does_not_undo_a_delivery_settled_meanwhile(
    pg_url: str, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # PostgreSQL writes in READ COMMITTED: an operator's retry read the forward, then
    # wrote it back due now from what it had read. A dispatcher's delivery settled in
    # between was overwritten: the forward was failed again, with one attempt fewer than
    # it had made, and sent again.
    import threading
    import time

    import psycopg

    import oncebox
    from oncebox.store.sqltx.forwarding import ForwardingSql

    spec = InboxSpec("ussd", codec="ussd-h1", forward=hooks(retry=["0s", "1h", "1h"]))
    box = oncebox.open(pg_url, inboxes=[spec], clock=clock)
    write = ForwardingSql.settle_forwards
    armed: list[bool] = []

    def racing(tx: ForwardingSql, forwards: Sequence[Any]) -> None:
        if armed:  # the operator's write: first let the dispatcher's settle land
            armed.clear()
            settling = threading.Thread(
                target=box.settle_forwards, args=("ledger", [sent(second, 200)], "d1")
            )
            settling.start()
            deadline = time.monotonic() + 60  # generous: never a wait on a fixed store
            with psycopg.connect(pg_url, autocommit=True) as watch:
                while settling.is_alive():  # done, or waiting for the operator's lock
                    assert time.monotonic() < deadline
                    waiting = watch.execute(
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                    ).fetchone()
                    if waiting and waiting[0]:
                        break
                    time.sleep(0.01)
            threads.append(settling)
        write(tx, forwards)

    threads: list[threading.Thread] = []
    try:
        box.ingest("ussd", frame(1))
        [first] = box.claim_forwards("ledger", "d1", 10)
        box.settle_forwards("ledger", [sent(first, 503)], "d1")
        clock.advance(2 * 3600)
        [second] = box.claim_forwards("ledger", "d1", 10)  # the second attempt is out
        monkeypatch.setattr(ForwardingSql, "settle_forwards", racing)
        armed.append(True)
        box.retry_forward(first.forward.id, actor="ops")  # while it is out
        for thread in threads:
            thread.join(60)
        assert threads and not armed
        [forward] = box.forwards()
        assert (forward.status, forward.attempts) == (ForwardStatus.DELIVERED, 2)
    finally:
        box.close()


def test_ordered_turned_on_later_orders_only_the_forwards_written_since(
    shared_url: str, clock: ManualClock
) -> None:
    # docs/forwarding.md#order: a forward takes its key when its revision is accepted, so
    # what a destination owed before `ordered = "key"` was set goes unordered.
    import oncebox

    def opened(**destination: Any) -> Oncebox:
        spec = InboxSpec("k", codec="keyed", forward=hooks(**destination))
        return oncebox.open(shared_url, inboxes=[spec], clock=clock)

    with opened() as box:
        box.ingest("k", b"a1", key="a")
        conflict = box.ingest("k", b"a2", key="a")
        assert conflict.quarantine_id is not None
        box.resolve(conflict.quarantine_id, "accept", "a's second version")
    with opened(ordered="key") as box:
        conflict = box.ingest("k", b"a3", key="a")
        assert conflict.quarantine_id is not None
        box.resolve(conflict.quarantine_id, "accept", "a's third version")
        claimed = box.claim_forwards("ledger", "d1", 10)
        assert [(c.forward.revision, c.forward.order_key) for c in claimed] == [
            (1, None), (2, None), (3, "a"),
        ]  # fmt: skip
        box.ingest_batch("k", [Delivery(b"b1", key="b")])
        conflict = box.ingest("k", b"b2", key="b")
        assert conflict.quarantine_id is not None
        box.resolve(conflict.quarantine_id, "accept", "b's second version")
        [head] = box.claim_forwards("ledger", "d1", 10)  # written since: in order
        assert (head.entry.identity, head.forward.revision) == ("b", 1)


def test_the_first_delay_is_kept_as_written_and_the_next_ones_jittered(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    # docs/forwarding.md#retries: the first delay counts from the acceptance, unjittered;
    # each after a failure is moved by up to a fifth either way.
    box = forwarding_box(make_box, retry=["10s", "100s"], circuit_failures=100)
    box.ingest("ussd", frame(1))
    assert box.forwards()[0].next_at == clock.now + 10
    clock.advance(10)
    [claim] = box.claim_forwards("ledger", "d1", 10)
    box.settle_forwards("ledger", [sent(claim, 503)], "d1", rng=lambda: 1.0)
    assert box.forwards()[0].next_at == pytest.approx(clock.now + 120)
